//! `tfwasm profiler check` with the reference profiler, each mode of the
//! hostile one, and a guest that is not a profiler.

use tfwasm_proto::prost::Message;
use tfwasm_proto::xplane::XSpace;

use crate::{guest, tfwasm};

/// Small enough for a test running beside others; the command's default is
/// the policy's default ring (262,144 records).
const MAX_EVENTS: &str = "4096";

fn check(guest_file: &str, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let path = guest(guest_file);
    let mut args = vec!["profiler", "check", "--json", "--max-events", MAX_EVENTS, path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, out) = tfwasm(&args);
    let checks = serde_json::from_str(&out).unwrap_or_else(|e| panic!("--json prints JSON ({e}): {out}"));
    (code, checks, out)
}

#[test]
fn the_reference_profiler_passes_every_session_and_writes_a_trace() {
    let trace = std::env::temp_dir().join(format!("tfwasm-profiler-check-{}.xplane.pb", std::process::id()));
    let (code, checks, out) = check("tfwasm_reference_profiler.wasm", &["-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let checks = checks.as_array().unwrap();
    let sessions: Vec<&str> = checks.iter().map(|c| c["session"].as_str().unwrap()).collect();
    assert_eq!(sessions, ["an empty session", "a training step", "two devices", "a guest fault", "a full ring"]);
    assert!(checks.iter().all(|c| c["passed"] == true), "{out}");
    let step = &checks[1];
    assert!(step["lines"].as_u64().unwrap() >= 3, "kernels, streams, memory at least: {out}");
    // Every recorded event is placed, plus the guest's own (busy spans).
    assert!(step["events"].as_u64() >= step["records"].as_u64(), "{out}");
    assert_eq!(checks[4]["records"], 4096, "{out}");

    let bytes = std::fs::read(&trace).expect("-o writes the trace");
    let _ = std::fs::remove_file(&trace);
    let space = XSpace::decode(bytes.as_slice()).expect("an XSpace");
    let plane = space.planes.iter().find(|p| p.name == "/device:CUSTOM:0").expect("the device's plane");
    let status = plane
        .stats
        .iter()
        .find(|s| plane.stat_metadata[&s.metadata_id].name == "profiler_guest")
        .map(|s| format!("{:?}", s.value))
        .unwrap_or_default();
    assert!(status.contains("shaped the trace"), "{status}");
    let names: Vec<&str> = plane
        .lines
        .iter()
        .flat_map(|l| &l.events)
        .map(|e| plane.event_metadata[&e.metadata_id].name.as_str())
        .collect();
    assert!(names.contains(&"sequential/dense/MatMul"), "{names:?}");
    assert!(names.contains(&"MemcpyH2D") && names.contains(&"Allocate"), "{names:?}");
}

#[test]
fn each_hostile_mode_fails_with_its_reason() {
    // `loop` is left to tests/rust/profiler.rs: here it would wait out the
    // default 5 s deadline once per session.
    let modes = [
        ("trap", "panicked"),
        ("error", "asked to fail"),
        ("flood", "events of its own"),
        ("lying-ids", "does not exist"),
        ("wrong-device", "does not exist"),
        ("absurd-time", "outside the session"),
        ("long-name", "characters"),
    ];
    for (mode, reason) in modes {
        let config = format!("mode={mode}");
        let (code, checks, out) = check("tfwasm_hostile_profiler.wasm", &["--config", &config]);
        assert_eq!(code, 1, "{mode}: {out}");
        let step = &checks.as_array().unwrap()[1];
        assert_eq!(step["passed"], false, "{mode}: {out}");
        let failure = step["failure"].as_str().unwrap();
        assert!(failure.contains("hostile_profiler") && failure.contains(reason), "{mode}: {failure}");
    }
    let (code, checks, out) = check("tfwasm_hostile_profiler.wasm", &["--config", "mode=honest"]);
    assert_eq!(code, 0, "an honest guest that shapes nothing passes: {out}");
    assert_eq!(checks[1]["lines"], 0, "{out}");
}

#[test]
fn a_device_guest_is_not_a_profiler() {
    let (code, checks, out) = check("tfwasm_reference_device.wasm", &[]);
    assert_eq!(code, 1, "{out}");
    let failure = checks[0]["failure"].as_str().unwrap();
    assert!(failure.contains("tfwasm:profiler/shaper"), "{failure}");
}

#[test]
fn check_runs_the_suite_of_the_world_a_component_exports() {
    // A pass: the golden-graph suite of `pass check`.
    let pass = guest("tfwasm_fuse_pass.wasm");
    let (code, out) = tfwasm(&["check", "--json", pass.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let checks: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        checks.as_array().unwrap().iter().any(|c| c["check"].as_str().unwrap().contains("keras_mlp_step")),
        "{out}"
    );
    // A profiler: the recorded sessions of `profiler check`. The hostile one,
    // which refuses at once without its `mode` option: the reference one
    // would shape a full ring of 262,144 records beside the other tests.
    let profiler = guest("tfwasm_hostile_profiler.wasm");
    let (code, out) = tfwasm(&["check", "--json", profiler.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let checks: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checks[1]["session"], "a training step", "{out}");
    assert!(checks[1]["failure"].as_str().unwrap().contains("no `mode` option"), "{out}");
    // A device policy means nothing to a pass: said, not ignored.
    let policy = crate::workspace().join("policies/device.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tfwasm"))
        .args(["check", "--policy", policy.to_str().unwrap(), pass.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a pass guest: --policy is for device guests"));
}
