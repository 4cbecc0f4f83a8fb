//! The checks of a pass's answer (`passes::validate::check_answer`) on
//! answers a hostile pass could give: arbitrary bytes, and graphs captured
//! from TensorFlow with nodes dropped, renamed onto others, rewired (into
//! cycles, past their ops' outputs, to nowhere), retyped to unknown or
//! undeclared ops, and placed on malformed devices or on the device without
//! a kernel. No answer may panic; an answer the checks accept must hold
//! what they promise, re-checked here independently.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use tfwasm_proto::graph::{GraphDef, NodeDef};
use tfwasm_proto::prost::Message;
use tfwasm_runtime::passes::catalog::Catalog;
use tfwasm_runtime::passes::validate::{check_answer, parse_input, well_formed_device, Expectations};

use super::fuzz;

const GRAPHS: &[&[u8]] = &[
    include_bytes!("../../../../tests/fixtures/graphs/keras_mlp_step.pb"),
    include_bytes!("../../../../tests/fixtures/graphs/while_cond.pb"),
    include_bytes!("../../../../tests/fixtures/graphs/jit_function_call.pb"),
    include_bytes!("../../../../tests/fixtures/graphs/embedding_lstm_call.pb"),
];

/// One edit a pass might make to a node.
#[derive(Debug, Clone)]
enum Edit {
    Drop(usize),
    RenameOnto(usize, usize),
    Rewire { node: usize, input: usize, to: usize, port: u8, control: bool },
    DanglingInput(usize),
    Op(usize, &'static str),
    Device(usize, &'static str),
    Duplicate(usize),
}

const OPS: &[&str] = &["Identity", "AddV2", "Split", "NoSuchOp", "_TfwasmFusedElementwise", "Const", "MatMul"];
const DEVICES: &[&str] = &[
    "",
    "/job:localhost/replica:0/task:0/device:WASM:0",
    "/device:CPU:0",
    "device:WASM:0",
    "/device:WASM:x",
    "/task:0/job:a",
];

fn edit() -> impl Strategy<Value = Edit> {
    let n = 0usize..400;
    prop_oneof![
        n.clone().prop_map(Edit::Drop),
        (n.clone(), n.clone()).prop_map(|(a, b)| Edit::RenameOnto(a, b)),
        (n.clone(), 0usize..4, n.clone(), 0u8..4, any::<bool>())
            .prop_map(|(node, input, to, port, control)| Edit::Rewire { node, input, to, port, control }),
        n.clone().prop_map(Edit::DanglingInput),
        (n.clone(), prop::sample::select(OPS)).prop_map(|(a, op)| Edit::Op(a, op)),
        (n.clone(), prop::sample::select(DEVICES)).prop_map(|(a, d)| Edit::Device(a, d)),
        n.prop_map(Edit::Duplicate),
    ]
}

fn apply(graph: &mut GraphDef, edit: &Edit) {
    let len = graph.node.len();
    if len == 0 {
        return;
    }
    let at = |i: usize| i % len;
    match *edit {
        Edit::Drop(i) => {
            graph.node.remove(at(i));
        }
        Edit::RenameOnto(a, b) => graph.node[at(a)].name = graph.node[at(b)].name.clone(),
        Edit::Rewire { node, input, to, port, control } => {
            let source = graph.node[at(to)].name.clone();
            let target = &mut graph.node[at(node)];
            let text = if control { format!("^{source}") } else { format!("{source}:{port}") };
            match target.input.get_mut(input) {
                Some(slot) => *slot = text,
                None => target.input.push(text),
            }
        }
        Edit::DanglingInput(i) => graph.node[at(i)].input.push("nowhere:0".into()),
        Edit::Op(i, op) => graph.node[at(i)].op = op.to_owned(),
        Edit::Device(i, device) => graph.node[at(i)].device = device.to_owned(),
        Edit::Duplicate(i) => {
            let copy = graph.node[at(i)].clone();
            graph.node.push(copy);
        }
    }
}

/// What an accepted answer must hold, checked without the validator's code.
fn holds_its_promises(given: &GraphDef, accepted: &GraphDef, preserve: &[String]) -> Result<(), String> {
    let names: HashSet<&str> = accepted.node.iter().map(|n| n.name.as_str()).collect();
    if names.len() != accepted.node.len() {
        return Err("duplicate names accepted".into());
    }
    for node in &accepted.node {
        for input in &node.input {
            let (source, _) = parse_input(input).ok_or_else(|| format!("malformed input {input:?} accepted"))?;
            if !names.contains(source) {
                return Err(format!("dangling input {input:?} accepted"));
            }
        }
    }
    for name in preserve {
        if !names.contains(name.as_str()) {
            return Err(format!("preserved {name} dropped"));
        }
    }
    let before: HashMap<&str, &NodeDef> = given.node.iter().map(|n| (n.name.as_str(), n)).collect();
    for node in &accepted.node {
        if before.get(node.name.as_str()).is_none_or(|b| *b != node) && !well_formed_device(&node.device) {
            return Err(format!("malformed device {:?} accepted", node.device));
        }
    }
    Ok(())
}

#[test]
fn pass_answers() {
    let catalog = Catalog::snapshot();
    let (accepted, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let strategy = (
        0..GRAPHS.len(),
        prop::collection::vec(edit(), 0..6),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    );
    fuzz(
        "pass answers",
        1500,
        strategy,
        |(graph, edits, preserve_some, garbage, use_garbage)| {
            let given = GraphDef::decode(GRAPHS[graph]).unwrap();
            let preserve: Vec<String> =
                if preserve_some { given.node.iter().step_by(7).map(|n| n.name.clone()).collect() } else { vec![] };
            let answer = if use_garbage {
                garbage
            } else {
                let mut answer = given.clone();
                for e in &edits {
                    apply(&mut answer, e);
                }
                answer.encode_to_vec()
            };
            let emits = vec!["_TfwasmFusedElementwise".to_owned()];
            let expect = Expectations {
                device_type: "WASM",
                preserve: &preserve,
                emits: &emits,
                device_count: 1,
                max_growth: 4.0,
            };
            match check_answer(&given, &answer, &expect, &catalog) {
                Ok(graph) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    holds_its_promises(&given, &graph, &preserve).map_err(TestCaseError::fail)?;
                }
                Err(refusal) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    prop_assert!(!refusal.to_string().is_empty());
                }
            }
            Ok(())
        },
        || format!("{} accepted, {} refused", accepted.load(Ordering::Relaxed), refused.load(Ordering::Relaxed)),
    );
}
