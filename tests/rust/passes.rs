//! The optimizer pipeline with real pass guests, without TensorFlow: the
//! reference pass (guest/fuse-pass) rewrites graphs captured from
//! TensorFlow and its answers pass the host's checks against the snapshot
//! of TensorFlow's registry; a swap installs a new program atomically and
//! refuses a file that is not a pass.

use std::path::PathBuf;

use tfwasm::passes::catalog::Catalog;
use tfwasm::passes::{Pipeline, RunContext};
use tfwasm::policy::PassSection;
use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;

use crate::support::{pass_guest, reference_guest, workspace};

/// The reference pass, built once per test run.
fn fuse_pass() -> PathBuf {
    pass_guest("tfwasm-fuse-pass")
}

fn section(name: &str, path: PathBuf) -> PassSection {
    let text = format!("name = {name:?}\npath = {:?}\n", path.to_str().unwrap());
    toml::from_str(&text).unwrap()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(workspace().join("tests/fixtures/graphs").join(name)).unwrap()
}

/// Every node name, as TensorFlow would ask them kept when it fetches all.
/// What the plugin gives a pipeline for one WASM device, with nothing to keep or fetch.
fn wasm_context(catalog: &Catalog) -> RunContext<'_> {
    RunContext { device_type: "WASM", preserve: &[], fetch: &[], kernels: catalog.kernels(), catalog, device_count: 1 }
}

fn names_of(graph: &[u8]) -> Vec<String> {
    GraphDef::decode(graph).unwrap().node.into_iter().map(|n| n.name).collect()
}

#[test]
fn the_reference_pass_rewrites_a_keras_step_and_its_answer_passes_every_check() {
    let catalog = Catalog::snapshot();
    let pipeline = Pipeline::load(&[section("fuse", fuse_pass())], None);
    assert!(!pipeline.is_empty(), "the pass loads");
    let graph = fixture("keras_mlp_step.pb");
    let context = wasm_context(&catalog);
    let outcome = pipeline.run(&graph, &context).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let rewritten = outcome.graph.expect("Adam's updates fuse");
    assert!(!outcome.rewrites.is_empty());
    let after = GraphDef::decode(rewritten.as_slice()).unwrap();
    assert!(after.node.iter().any(|n| n.op == "_TfwasmFusedElementwise"));
    // Variable updates become assignments of a sum: TensorFlow's own
    // ReadVariableOp/AssignVariableOp kernels reach the pass's kernel list.
    assert!(outcome.rewrites.iter().any(|r| r.reason.contains("as an AssignVariableOp")), "{:?}", outcome.rewrites);
    assert!(after.node.len() < names_of(&graph).len());
    let status = &pipeline.status()[0];
    assert_eq!((status.calls, status.rewrites, status.failures), (1, 1, 0), "{status:?}");
    assert_eq!(status.name, "fuse-elementwise");

    // Everything preserved: no node may disappear inside a group.
    let all = names_of(&graph);
    let keep_all = RunContext { preserve: &all, ..context };
    let outcome = pipeline.run(&graph, &keep_all).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    if let Some(kept) = outcome.graph {
        let kept = names_of(&kept);
        assert!(all.iter().all(|name| kept.contains(name)));
    }
}

#[test]
fn a_swap_installs_a_new_program_and_refuses_what_is_not_a_pass() {
    let catalog = Catalog::snapshot();
    let pipeline = Pipeline::load(&[section("fuse", fuse_pass())], None);
    let before = pipeline.status()[0].clone();
    // A device guest is a component, but not a pass: refused, the old program stays.
    let refused = pipeline.swap("fuse", &reference_guest(), None).unwrap_err().to_string();
    assert!(refused.contains("tfwasm:optimizer/optimizer@0.1.0"), "{refused}");
    assert_eq!(pipeline.status()[0].generation, before.generation);
    // The same file again is a new program (generation + 1) that keeps working.
    pipeline.swap("fuse", &fuse_pass(), None).unwrap();
    assert_eq!(pipeline.status()[0].generation, before.generation + 1);
    let context = wasm_context(&catalog);
    let outcome = pipeline.run(&fixture("keras_mlp_step.pb"), &context).unwrap();
    assert!(outcome.graph.is_some() && outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert!(pipeline.swap("nope", &fuse_pass(), None).is_err());
}
