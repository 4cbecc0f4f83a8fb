//! The `tfwasm` command against real guests: the reference guest passes the
//! conformance suite; each misbehaviour of the hostile guest fails the check
//! its clause belongs to, and the command says so in its exit status.

use std::path::{Path, PathBuf};
use std::process::Command;

mod c_guest;
mod contract;
mod contraction_pass;
mod hostile_wat;
mod pass;
mod precompile;
mod profiler;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn guest(name: &str) -> PathBuf {
    let path = workspace().join("target/wasm32-wasip2/guest").join(name);
    assert!(
        path.is_file(),
        "{} is not built: cargo build --target wasm32-wasip2 --profile guest -p tfwasm-reference-device -p tfwasm-hostile-device",
        path.display()
    );
    path
}

fn tfwasm(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tfwasm")).args(args).output().expect("run tfwasm");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `(check, passed)` pairs from `--json` output.
fn results(json: &str) -> Vec<(String, bool)> {
    let value: serde_json::Value = serde_json::from_str(json).expect("--json prints JSON");
    value
        .as_array()
        .expect("a list of checks")
        .iter()
        .map(|r| (r["check"].as_str().unwrap().to_owned(), r["passed"].as_bool().unwrap()))
        .collect()
}

#[test]
fn the_reference_guest_passes_every_check() {
    let reference = guest("tfwasm_reference_device.wasm");
    let (code, out) = tfwasm(&["check", "--json", reference.to_str().unwrap()]);
    let checks = results(&out);
    assert_eq!(code, 0, "{out}");
    assert!(checks.len() >= 8 && checks.iter().all(|(_, passed)| *passed), "{checks:?}");
    let (code, table) = tfwasm(&["check", reference.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(table.contains(&format!("{} of {} checks passed", checks.len(), checks.len())), "{table}");
}

#[test]
fn each_hostile_mode_fails_the_check_of_its_clause() {
    let hostile = guest("tfwasm_hostile_device.wasm");
    let dir = std::env::temp_dir().join(format!("tfwasm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // mode → a check that must fail (others may fail too).
    let cases = [
        ("trap-on-allocate", "placement"),
        ("loop-on-allocate", "placement"),
        ("out-of-bounds", "placement"),
        ("overlap", "placement"),
        ("misaligned", "placement"),
        ("oom-always", "placement"),
        ("grow-memory", "placement"),
        ("bad-seq", "stream-order"),
        ("dangling-dependency", "stream-order"),
        ("lie-event-complete", "events"),
        ("trap-on-submit", "stream-order"),
        ("loop-on-usage", "free-and-usage"),
        ("init-error", "init"),
        ("trap-on-init", "init"),
    ];
    for (mode, check) in cases {
        let policy = dir.join(format!("{mode}.toml"));
        std::fs::write(
            &policy,
            format!(
                "[guest]\nname = \"hostile-device\"\npath = \"unused.wasm\"\n[guest.config]\nmode = \"{mode}\"\n\
                 [limits]\nmemory-bytes = 16777216\ncall-deadline-ms = 100\n"
            ),
        )
        .unwrap();
        let (code, out) = tfwasm(&["check", "--json", "--policy", policy.to_str().unwrap(), hostile.to_str().unwrap()]);
        assert_eq!(code, 1, "{mode}: the command must fail\n{out}");
        let checks = results(&out);
        let failed: Vec<_> = checks.iter().filter(|(_, passed)| !passed).map(|(name, _)| name.as_str()).collect();
        assert!(failed.contains(&check), "{mode}: expected `{check}` to fail, failed: {failed:?}");
        assert!(checks.iter().any(|(name, passed)| name == "load" && *passed), "{mode}: the guest itself loads");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_names_the_world_and_the_digest_to_pin() {
    let reference = guest("tfwasm_reference_device.wasm");
    let (code, out) = tfwasm(&["info", "--json", reference.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["exports_packages"][0], "tfwasm:device@0.1.0");
    let digest = value["sha256"].as_str().unwrap();
    assert_eq!(digest.len(), 64);
    let bytes = std::fs::read(&reference).unwrap();
    assert_eq!(value["bytes"].as_u64().unwrap(), bytes.len() as u64);
    // Not a component: an error, exit status 2, no panic.
    let (code, _) = tfwasm(&["info", workspace().join("Cargo.toml").to_str().unwrap()]);
    assert_eq!(code, 2);
}

#[test]
fn policy_check_says_what_is_wrong_and_where() {
    let dir = std::env::temp_dir().join(format!("tfwasm-cli-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let reference = guest("tfwasm_reference_device.wasm");
    let fine = dir.join("fine.toml");
    std::fs::write(&fine, format!("[guest]\nname = \"ok\"\npath = {:?}\n", reference.to_str().unwrap())).unwrap();
    let (code, out) = tfwasm(&["policy", "check", fine.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": ok"), "{out}");
    // A TOML error names its line.
    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "[guest]\nname = \"x\"\npath = \"a.wasm\"\n[device]\ncount = two\n").unwrap();
    let (code, out) = tfwasm(&["policy", "check", broken.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("line 5"), "{out}");
    // A guest that is not there.
    let missing = dir.join("missing.toml");
    std::fs::write(&missing, "[guest]\nname = \"x\"\npath = \"nowhere.wasm\"\n").unwrap();
    let (code, out) = tfwasm(&["policy", "check", missing.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("guest.path: no file"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_guest_using_rusts_standard_library_loads_under_the_default_policy() {
    // The hostile device's `std-tour` mode uses a HashMap, Instant,
    // SystemTime and std::fs on an unused path, as a vendor's first guest
    // would: its build imports the clocks, the filesystem and a hash seed.
    let hostile = guest("tfwasm_hostile_device.wasm");
    let (code, out) = tfwasm(&["info", "--json", hostile.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    let imports: Vec<&str> = value["imports"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for needed in [
        "wasi:random/insecure-seed",
        "wasi:clocks/monotonic-clock",
        "wasi:clocks/wall-clock",
        "wasi:filesystem/preopens",
    ] {
        assert!(imports.iter().any(|i| i.starts_with(needed)), "{needed} not among {imports:?}");
    }
    assert_eq!(value["policy"].as_array().unwrap().len(), 0, "no policy line needed: {out}");

    let dir = std::env::temp_dir().join(format!("tfwasm-cli-std-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("std-tour.toml");
    std::fs::write(
        &policy,
        "[guest]\nname = \"std-tour\"\npath = \"unused.wasm\"\n[guest.config]\nmode = \"std-tour\"\n",
    )
    .unwrap();
    let (code, out) = tfwasm(&["check", "--json", "--policy", policy.to_str().unwrap(), hostile.to_str().unwrap()]);
    assert_eq!(code, 0, "the std guest passes every check under a policy that grants nothing:\n{out}");
    assert!(results(&out).iter().all(|(_, passed)| *passed), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
