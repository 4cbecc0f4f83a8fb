//! `tfwasm pass check` and `tfwasm pass run` with the reference pass and
//! with a guest that is not a pass.

use std::path::Path;
use std::process::Command;

use crate::{guest, results, tfwasm, workspace};

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

#[test]
fn text_format_graphs_are_read_and_written() {
    let dir = std::env::temp_dir().join(format!("tfwasm-pbtxt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = workspace().join("tests/fixtures/graphs/keras_mlp_step.pb");
    let (text, back) = (dir.join("step.pbtxt"), dir.join("step.pb"));
    // Binary → text → binary is the schema's own round trip.
    let (code, out) = tfwasm(&["graph", "roundtrip", binary.to_str().unwrap(), text.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let written = std::fs::read_to_string(&text).unwrap();
    assert!(written.contains("op: \"ReadVariableOp\"") && written.contains("type: DT_FLOAT"), "{}", &written[..500]);
    let (code, out) = tfwasm(&["graph", "roundtrip", text.to_str().unwrap(), back.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let (code, out) =
        tfwasm(&["graph", "roundtrip", binary.to_str().unwrap(), dir.join("direct.pb").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(dir.join("direct.pb")).unwrap(), "text lost something");

    // A pass runs on the text form and its answer is written as text.
    let pass = guest("tfwasm_fuse_pass.wasm");
    let answer = dir.join("answer.pbtxt");
    let (code, out) = tfwasm(&[
        "pass",
        "run",
        "--json",
        "-o",
        answer.to_str().unwrap(),
        pass.to_str().unwrap(),
        text.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["accepted"], true, "{out}");
    assert_eq!(run["changed"], true, "{out}");
    assert!(std::fs::read_to_string(&answer).unwrap().contains("_TfwasmFusedElementwise"));

    // Text that is not a GraphDef is an error naming the file.
    let bad = dir.join("bad.pbtxt");
    std::fs::write(&bad, "node { nme: \"x\" }\n").unwrap();
    let failed = std::process::Command::new(env!("CARGO_BIN_EXE_tfwasm"))
        .args(["pass", "run", pass.to_str().unwrap(), bad.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(said.contains("bad.pbtxt") && said.contains("text format"), "{said}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_pass_that_fails_every_graph_fails_every_check() {
    // The pipeline disables a pass after 8 failures in a row; the suite must
    // still judge each later graph rather than count it "unchanged".
    let pass = guest("tfwasm_hostile_pass.wasm");
    let (code, out) = tfwasm(&["pass", "check", "--json", "--config", "mode=trap", pass.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let checks = results(&out);
    assert!(checks.len() >= 15, "{out}");
    assert_eq!(checks.iter().filter(|(_, passed)| *passed).map(|(c, _)| c.as_str()).collect::<Vec<_>>(), ["load"]);
}

/// `tfwasm pass verify` needs TensorFlow, through Python: without an
/// interpreter, or with one that cannot import TensorFlow, it says which
/// and how to choose another (exit status 2), never a traceback.
#[test]
fn pass_verify_says_what_it_needs_when_tensorflow_is_missing() {
    let pass = guest("tfwasm_fuse_pass.wasm");
    let verify = |python: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tfwasm"))
            .args(["pass", "verify", pass.to_str().unwrap()])
            .env("TFWASM_PYTHON", python)
            .env("PYTHONPATH", workspace().join("host/python"))
            .output()
            .expect("run tfwasm");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = verify("/nonexistent/python3");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot run /nonexistent/python3") && err.contains("TFWASM_PYTHON"), "{err}");
    // A Python without TensorFlow (the system's, unless it has one).
    let system = Path::new("/usr/bin/python3");
    let has_tf = || Command::new(system).args(["-c", "import tensorflow"]).output().is_ok_and(|o| o.status.success());
    if system.is_file() && !has_tf() {
        let (code, err) = verify(system.to_str().unwrap());
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("cannot import tensorflow") && err.contains("TFWASM_PYTHON"), "{err}");
        assert!(!err.contains("Traceback"), "{err}");
    }
}

#[test]
fn graph_golden_writes_the_graphs_pass_check_runs() {
    let dir = std::env::temp_dir().join(format!("tfwasm-golden-{}", std::process::id()));
    let (code, out) = tfwasm(&["graph", "golden", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let written: Vec<&str> = out.lines().collect();
    assert_eq!(written.len(), 9, "{out}");
    for path in written {
        let name = Path::new(path).file_name().unwrap();
        let fixture = workspace().join("tests/fixtures/graphs").join(name);
        assert_eq!(std::fs::read(path).unwrap(), std::fs::read(fixture).unwrap(), "{path}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
