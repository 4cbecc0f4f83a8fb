//! `tfwasm pass check` and `tfwasm pass run` with the reference pass and
//! with a guest that is not a pass.

use crate::{guest, tfwasm, workspace};

#[test]
fn the_reference_pass_passes_the_pass_suite() {
    let pass = guest("tfwasm_fuse_pass.wasm");
    let (code, out) = tfwasm(&["pass", "check", "--json", pass.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let checks: serde_json::Value = serde_json::from_str(&out).unwrap();
    let checks = checks.as_array().unwrap();
    assert!(checks.len() >= 15, "load and two runs per golden graph: {out}");
    assert!(checks.iter().all(|c| c["passed"] == true), "{out}");
    assert!(checks.iter().any(|c| c["detail"].as_str().unwrap().contains("a second run changes nothing")), "{out}");
}

#[test]
fn a_device_guest_is_not_a_pass() {
    let device = guest("tfwasm_reference_device.wasm");
    let (code, out) = tfwasm(&["pass", "check", device.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("does not export tfwasm:optimizer/optimizer@0.1.0"), "{out}");
}

#[test]
fn pass_run_writes_the_checked_answer() {
    let pass = guest("tfwasm_fuse_pass.wasm");
    let graph = workspace().join("tests/fixtures/graphs/keras_mlp_step.pb");
    let out_path = std::env::temp_dir().join(format!("tfwasm-pass-run-{}.pb", std::process::id()));
    let (code, out) = tfwasm(&[
        "pass",
        "run",
        "--json",
        "-o",
        out_path.to_str().unwrap(),
        pass.to_str().unwrap(),
        graph.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["accepted"], true);
    assert!(run["nodes_after"].as_u64() < run["nodes_before"].as_u64(), "{out}");
    let answer = std::fs::read(&out_path).unwrap();
    let _ = std::fs::remove_file(&out_path);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("_TfwasmFusedElementwise"), "the answer holds fused nodes");
    // Nothing may be fused away when everything is preserved.
    let (code, out) = tfwasm(&[
        "pass",
        "run",
        "--json",
        "--preserve",
        "Add,adam/Mul_9",
        pass.to_str().unwrap(),
        graph.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
}
