//! `tfwasm pass check` and `tfwasm pass run` with the contraction pass
//! (`guest/contraction-pass`, `fuse-contraction`) on graphs captured from
//! Keras train steps.

use tfwasm_proto::graph::{attr_value, GraphDef, NodeDef};
use tfwasm_proto::prost::Message;

use crate::{guest, tfwasm, workspace};

const PASS: &str = "tfwasm_contraction_pass.wasm";

/// `tfwasm pass run --json` of the contraction pass on a fixture, with extra
/// arguments; the run's JSON and the answer's graph (the input's when
/// unchanged).
fn run(fixture: &str, extra: &[&str]) -> (serde_json::Value, GraphDef) {
    let pass = guest(PASS);
    let graph = workspace().join("tests/fixtures/graphs").join(fixture);
    let out = std::env::temp_dir().join(format!("tfwasm-contraction-{}-{fixture}", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut args = vec!["pass", "run", "--json", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend([pass.to_str().unwrap(), graph.to_str().unwrap()]);
    let (code, stdout) = tfwasm(&args);
    assert_eq!(code, 0, "{stdout}");
    let run: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(run["accepted"], true, "the host's checks accept the answer: {stdout}");
    let answer = std::fs::read(&out).unwrap_or_else(|_| std::fs::read(&graph).unwrap());
    let _ = std::fs::remove_file(&out);
    (run, GraphDef::decode(answer.as_slice()).unwrap())
}

fn node<'g>(graph: &'g GraphDef, name: &str) -> Option<&'g NodeDef> {
    graph.node.iter().find(|n| n.name == name)
}

fn fused_ops(node: &NodeDef) -> Vec<String> {
    match node.attr.get("fused_ops").and_then(|a| a.value.as_ref()) {
        Some(attr_value::Value::List(list)) => list.s.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        other => panic!("{}: fused_ops is {other:?}", node.name),
    }
}

#[test]
fn the_contraction_pass_passes_the_pass_suite_and_fuses_the_keras_steps() {
    let pass = guest(PASS);
    let (code, out) = tfwasm(&["pass", "check", "--json", pass.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let checks: serde_json::Value = serde_json::from_str(&out).unwrap();
    let checks = checks.as_array().unwrap();
    assert!(checks.iter().all(|c| c["passed"] == true), "{out}");
    assert!(checks[0]["detail"].as_str().unwrap().contains("emits _FusedMatMul, _FusedConv2D"), "{out}");
    // Both Keras steps change, and stay as they are under a second run.
    for step in ["keras_mlp_step, nothing preserved", "keras_cnn_step, nothing preserved"] {
        let check = checks.iter().find(|c| c["check"] == step).unwrap_or_else(|| panic!("no check {step}: {out}"));
        assert!(check["detail"].as_str().unwrap().contains("a second run changes nothing"), "{out}");
    }
}

#[test]
fn the_mlp_step_gets_fused_matmuls() {
    let (run, graph) = run("keras_mlp_step.pb", &[]);
    assert_eq!(run["nodes_before"].as_u64().unwrap() - run["nodes_after"].as_u64().unwrap(), 3, "{run}");
    // Dense(16, relu): MatMul, BiasAdd and Relu under the Relu's name.
    let relu = node(&graph, "sequential_1/dense_1/Relu").unwrap();
    assert_eq!(relu.op, "_FusedMatMul");
    assert_eq!(fused_ops(relu), ["BiasAdd", "Relu"]);
    assert_eq!(
        relu.input,
        ["data", "sequential_1/dense_1/Cast/ReadVariableOp", "sequential_1/dense_1/BiasAdd/ReadVariableOp"]
    );
    assert!(relu.device.ends_with("device:WASM:0"));
    assert!(
        node(&graph, "sequential_1/dense_1/MatMul").is_none() && node(&graph, "sequential_1/dense_1/BiasAdd").is_none()
    );
    // The ReluGrad and the next layer still read the Relu's name.
    assert!(graph.node.iter().any(|n| n.op == "ReluGrad" && n.input.iter().any(|i| i == "sequential_1/dense_1/Relu")));
    // Dense(2): the logits' BiasAdd.
    let logits = node(&graph, "sequential_1/dense_1_2/BiasAdd").unwrap();
    assert_eq!((logits.op.as_str(), fused_ops(logits)), ("_FusedMatMul", vec!["BiasAdd".to_owned()]));
    // The gradients' MatMuls are left alone.
    assert_eq!(graph.node.iter().filter(|n| n.op == "MatMul").count(), 3);
    let report: Vec<String> =
        run["rewrites"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap().to_owned()).collect();
    assert_eq!(report, ["sequential_1/dense_1/Relu", "sequential_1/dense_1_2/BiasAdd"]);
}

#[test]
fn the_cnn_step_gets_a_fused_conv2d() {
    let (_, graph) = run("keras_cnn_step.pb", &[]);
    let relu = node(&graph, "sequential_1/conv2d_1/Relu").unwrap();
    assert_eq!(relu.op, "_FusedConv2D");
    assert_eq!(fused_ops(relu), ["BiasAdd", "Relu"]);
    assert_eq!(relu.input.len(), 3);
    assert!(node(&graph, "sequential_1/conv2d_1/convolution").is_none());
}

#[test]
fn a_kept_intermediate_or_an_option_stops_the_chain_early() {
    // BiasAdd preserved: only the MatMul joins it.
    let (_, graph) = run("keras_mlp_step.pb", &["--preserve", "sequential_1/dense_1/BiasAdd"]);
    let bias = node(&graph, "sequential_1/dense_1/BiasAdd").unwrap();
    assert_eq!((bias.op.as_str(), fused_ops(bias)), ("_FusedMatMul", vec!["BiasAdd".to_owned()]));
    assert_eq!(node(&graph, "sequential_1/dense_1/Relu").unwrap().op, "Relu");
    // MatMul preserved: that chain stays whole.
    let (_, graph) = run("keras_mlp_step.pb", &["--preserve", "sequential_1/dense_1/MatMul"]);
    assert_eq!(node(&graph, "sequential_1/dense_1/MatMul").unwrap().op, "MatMul");
    assert_eq!(node(&graph, "sequential_1/dense_1/Relu").unwrap().op, "Relu");
    // No activations: the Relu stays after the fused bias.
    let (_, graph) = run("keras_cnn_step.pb", &["--config", "activations=Tanh"]);
    assert_eq!(node(&graph, "sequential_1/conv2d_1/BiasAdd").unwrap().op, "_FusedConv2D");
    assert_eq!(node(&graph, "sequential_1/conv2d_1/Relu").unwrap().op, "Relu");
    let (run, _) = run("keras_cnn_step.pb", &["--config", "conv2d=false"]);
    assert_eq!(run["changed"], false, "{run}");
}
