//! The guest makes the plugin's native rewrites, node for node.
//!
//! Each case runs the native `tfwasm::graph::updates::assign_updates` then
//! `tfwasm::graph::fuse::fuse_elementwise` on a serialized GraphDef, and the
//! guest's pass on the same bytes with the same nodes preserved, and asserts
//! the two graphs decode to equal GraphDefs and name the same rewritten
//! nodes. The graphs: those TensorFlow 2.21 gave the plugin
//! (`tests/fixtures/graphs`, after the native legalization steps that come
//! first in the pipeline), the graphs of the native passes' unit tests, and
//! a few thousand generated ones.
//!
//! `fusable_ops_match_the_kernel` holds the guest's copy of the fused op's
//! contract (`src/program.rs`) to the kernel's (`host/kernels/src/fused.rs`).

#![cfg(not(target_arch = "wasm32"))]

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use tfwasm_fuse_pass::node::DT_FLOAT;
use tfwasm_fuse_pass::pass::{self, Answer, Context, Kernel, Plan};
use tfwasm_fuse_pass::program::{self, fusable, FUSABLE};
use tfwasm_fuse_pass::{fuse, updates};
use tfwasm_proto::graph::{attr_value, AttrValue, GraphDef, NodeDef, VersionDef};
use tfwasm_proto::prost::Message;

const WASM0: &str = "/job:localhost/replica:0/task:0/device:WASM:0";
const WASM1: &str = "/job:localhost/replica:0/task:0/device:WASM:1";
const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

/// What one side made of a graph: the graph, the updates rewritten and the
/// fused roots, in order.
#[derive(Debug, PartialEq)]
struct Made {
    graph: GraphDef,
    updates: Vec<String>,
    roots: Vec<String>,
    fused_nodes: usize,
}

fn native(graph: &[u8], keep: &HashSet<String>) -> Made {
    use tfwasm::graph::{fuse, updates};
    let preserve = |name: &[u8]| std::str::from_utf8(name).is_ok_and(|name| keep.contains(name));
    let updated = updates::assign_updates(graph, "WASM").expect("native assign_updates");
    let fusion = fuse::fuse_elementwise(&updated.graph, "WASM", &preserve).expect("native fuse_elementwise");
    let graph = GraphDef::decode(fusion.graph.as_slice()).expect("the native answer decodes");
    Made { graph, updates: updated.nodes, roots: fusion.roots, fused_nodes: fusion.fused_nodes }
}

fn guest(graph: &[u8], keep: &HashSet<String>) -> Made {
    let mut graph = GraphDef::decode(graph).expect("the input decodes");
    let updates = updates::assign_updates(&mut graph, "WASM").into_iter().map(|u| u.name).collect();
    let fused = fuse::fuse_elementwise(&mut graph, "WASM", &|name| keep.contains(name));
    let fused_nodes = fused.iter().map(|f| f.members).sum();
    Made { graph, updates, roots: fused.into_iter().map(|f| f.name).collect(), fused_nodes }
}

/// Every kernel the rewrites need, for float32.
fn kernels() -> Vec<Kernel> {
    let t = |op: &str, attr: &str| Kernel { op: op.into(), types: vec![(attr.into(), vec![DT_FLOAT as u32])] };
    vec![
        t(program::OP, "T"),
        t("AddV2", "T"),
        t("Sub", "T"),
        t("ReadVariableOp", "dtype"),
        t("AssignVariableOp", "dtype"),
    ]
}

/// Runs both sides on `graph` and asserts they agree; also runs the guest
/// the way the host calls it (bytes in, bytes and a report out). Returns
/// what the native side made.
fn assert_same(case: &str, graph: &[u8], keep: &HashSet<String>) -> Made {
    let native = native(graph, keep);
    let guest = guest(graph, keep);
    assert_eq!(guest.updates, native.updates, "{case}: updates rewritten");
    assert_eq!(guest.roots, native.roots, "{case}: fused roots");
    assert_eq!(guest.fused_nodes, native.fused_nodes, "{case}: fused nodes");
    if guest.graph != native.graph {
        let differs = guest.graph.node.iter().zip(&native.graph.node).position(|(g, n)| g != n);
        panic!(
            "{case}: the graphs differ ({} nodes from the guest, {} from the native pass); first different node: {:#?}",
            guest.graph.node.len(),
            native.graph.node.len(),
            differs.map(|i| (&guest.graph.node[i], &native.graph.node[i]))
        );
    }

    let context = Context {
        device_type: "WASM".into(),
        preserve: keep.iter().cloned().collect(),
        kernels: kernels(),
        ..Default::default()
    };
    let (plan, notes) = Plan::new(&context).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    match pass::optimize(graph, &context, plan).expect("the pass answers") {
        Answer::Unchanged => {
            assert!(native.updates.is_empty() && native.roots.is_empty(), "{case}: the guest answered unchanged");
            assert_eq!(native.graph, GraphDef::decode(graph).unwrap(), "{case}");
        }
        Answer::Rewritten { graph: answer, report } => {
            assert_eq!(GraphDef::decode(answer.as_slice()).unwrap(), native.graph, "{case}: the answer's graph");
            let named: Vec<&str> = report.iter().map(|r| r.node.as_str()).collect();
            let expected: Vec<&str> = native.updates.iter().chain(&native.roots).map(String::as_str).collect();
            assert_eq!(named, expected, "{case}: one report line per update and per fused node");
        }
    }
    native
}

/// Names to preserve: none, all, TensorFlow's kind (arguments, return
/// values and nodes nothing reads), and pseudo-random tenths.
fn preserve_sets(graph: &GraphDef, seed: u64) -> Vec<(String, HashSet<String>)> {
    let read: HashSet<&str> =
        graph.node.iter().flat_map(|n| &n.input).map(|i| tfwasm_fuse_pass::node::input_source(i).0).collect();
    let fetch_like = graph
        .node
        .iter()
        .filter(|n| matches!(n.op.as_str(), "_Arg" | "_Retval") || !read.contains(n.name.as_str()))
        .map(|n| n.name.clone())
        .collect();
    let mut sets = vec![
        ("nothing preserved".to_owned(), HashSet::new()),
        ("everything preserved".to_owned(), graph.node.iter().map(|n| n.name.clone()).collect()),
        ("arguments, return values and sinks preserved".to_owned(), fetch_like),
    ];
    let mut rng = Rng(seed | 1);
    for round in 0..4 {
        let some = graph.node.iter().filter(|_| rng.below(10) == 0).map(|n| n.name.clone()).collect();
        sets.push((format!("random tenth {round} preserved"), some));
    }
    sets
}

/// xorshift: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ----------------------------------------------------------- TensorFlow's graphs

/// The graph the native pipeline hands the rewrites: after the XLA
/// rewrite, the lowering of control flow and the sparse updates.
fn legalized(graph: &[u8]) -> Vec<u8> {
    use tfwasm::graph::{lower, updates, xla};
    let cleared = xla::clear_must_compile(graph, "WASM").unwrap();
    let lowered = lower::lower_control_flow(&cleared.graph, "WASM").unwrap();
    updates::scatter_updates(&lowered.graph, "WASM").unwrap().graph
}

#[test]
fn captured_graphs_rewrite_alike() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/graphs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pb"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "the captured graphs are missing from {}", dir.display());
    let (mut updates, mut roots) = (0, 0);
    for (seed, file) in files.iter().enumerate() {
        let name = file.file_stem().unwrap().to_string_lossy();
        let graph = legalized(&std::fs::read(file).unwrap());
        let decoded = GraphDef::decode(graph.as_slice()).unwrap();
        for (keep_name, keep) in preserve_sets(&decoded, seed as u64 + 1) {
            let made = assert_same(&format!("{name}, {keep_name}"), &graph, &keep);
            println!(
                "{name} ({} nodes), {keep_name}: {} updates, {} fused roots of {} nodes",
                decoded.node.len(),
                made.updates.len(),
                made.roots.len(),
                made.fused_nodes
            );
            updates += made.updates.len();
            roots += made.roots.len();
        }
    }
    // The comparison means something only if the graphs exercise both rewrites.
    assert!(updates > 0 && roots > 0, "{updates} updates, {roots} fused roots");
}

// ------------------------------------------------- the native unit tests' graphs

/// A NodeDef of `op` with `T: float`.
fn n(name: &str, op: &str, inputs: &[&str], device: &str) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.iter().map(|i| i.to_string()).collect(),
        device: device.into(),
        attr: [("T".to_owned(), typed(DT_FLOAT))].into(),
        ..Default::default()
    }
}

fn typed(dtype: i32) -> AttrValue {
    AttrValue { value: Some(attr_value::Value::Type(dtype)) }
}

fn with(mut node: NodeDef, key: &str, value: attr_value::Value) -> NodeDef {
    node.attr.insert(key.into(), AttrValue { value: Some(value) });
    node
}

/// A variable update with `dtype` and `extra` attributes (float types).
fn update(name: &str, op: &str, inputs: &[&str], device: &str, dtype: i32, extra: &[&str]) -> NodeDef {
    let mut node = n(name, op, inputs, device);
    node.attr.clear();
    node.attr.insert("dtype".into(), typed(dtype));
    for key in extra {
        node.attr.insert(key.to_string(), typed(DT_FLOAT));
    }
    node
}

fn graph(nodes: Vec<NodeDef>) -> Vec<u8> {
    GraphDef { node: nodes, versions: Some(VersionDef { producer: 2140, ..Default::default() }), ..Default::default() }
        .encode_to_vec()
}

fn adam(device: &str) -> Vec<NodeDef> {
    vec![
        n("m", "ReadVariableOp", &["m_handle"], device),
        n("v", "ReadVariableOp", &["v_handle"], device),
        n("mul", "Mul", &["m", "alpha"], device),
        n("sqrt", "Sqrt", &["v"], device),
        n("add", "AddV2", &["eps", "sqrt"], device),
        n("div", "RealDiv", &["mul", "add", "^dep"], device),
        n("update", "AssignSubVariableOp", &["var", "div"], device),
    ]
}

fn replace_sqrt(nodes: Vec<NodeDef>, by: NodeDef) -> Vec<NodeDef> {
    nodes.into_iter().map(|node| if node.name == "sqrt" { by.clone() } else { node }).collect()
}

/// The graphs `host/plugin/src/graph/{updates,fuse}.rs` test, with a name
/// and the nodes each preserves.
fn unit_test_graphs() -> Vec<(String, Vec<NodeDef>, HashSet<String>)> {
    let none = HashSet::new;
    let sqrt = || HashSet::from(["sqrt".to_owned()]);
    let cases: Vec<(&str, Vec<NodeDef>, HashSet<String>)> = vec![
        ("adam", adam(WASM0), none()),
        ("adam on the CPU", adam(CPU0), none()),
        (
            "shared input",
            vec![
                n("sub", "Sub", &["g", "m:0"], WASM0),
                n("sq", "Square", &["sub"], WASM0),
                n("add", "AddV2", &["sq", "g:0"], WASM0),
            ],
            none(),
        ),
        ("two readers", [adam(WASM0), vec![n("other", "Neg", &["sqrt"], CPU0)]].concat(), none()),
        ("control reader", [adam(WASM0), vec![n("w", "NoOp", &["^sqrt"], WASM0)]].concat(), none()),
        ("preserved", adam(WASM0), sqrt()),
        ("other device", replace_sqrt(adam(WASM0), n("sqrt", "Sqrt", &["v"], CPU0)), none()),
        (
            "other type",
            replace_sqrt(adam(WASM0), with(n("sqrt", "Sqrt", &["v"], WASM0), "T", attr_value::Value::Type(2))),
            none(),
        ),
        (
            "unknown attr",
            replace_sqrt(adam(WASM0), with(n("sqrt", "Sqrt", &["v"], WASM0), "mode", attr_value::Value::I(1))),
            none(),
        ),
        ("other port", [adam(WASM0), vec![n("x", "Neg", &["sqrt:1"], WASM0)]].concat(), none()),
        ("lone", vec![n("a", "Neg", &["x"], WASM0), n("b", "MatMul", &["a", "y"], WASM0)], none()),
        ("duplicate names", [adam(WASM0), vec![n("sqrt", "Neg", &["x"], CPU0)]].concat(), none()),
        ("cycle", vec![n("a", "Neg", &["b"], WASM0), n("b", "Neg", &["a"], WASM0)], none()),
        (
            "adam updates",
            vec![
                update(
                    "m_update",
                    "AssignAddVariableOp",
                    &["m_handle", "scaled", "^grad_ready", "^m_read"],
                    WASM0,
                    DT_FLOAT,
                    &["_has_manual_control_dependencies"],
                ),
                update("w_update", "AssignSubVariableOp", &["w_handle:0", "step"], WASM0, DT_FLOAT, &[]),
                update("after", "NoOp", &["^m_update", "^w_update"], WASM0, DT_FLOAT, &[]),
            ],
            none(),
        ),
        ("update on the CPU", vec![update("u", "AssignAddVariableOp", &["h", "x"], CPU0, DT_FLOAT, &[])], none()),
        ("int64 update", vec![update("u", "AssignAddVariableOp", &["h", "x"], WASM0, 9, &[])], none()),
        (
            "update with an unknown attribute",
            vec![update("u", "AssignAddVariableOp", &["h", "x"], WASM0, DT_FLOAT, &["mode"])],
            none(),
        ),
        ("update of one input", vec![update("u", "AssignSubVariableOp", &["h"], WASM0, DT_FLOAT, &[])], none()),
        ("an assignment already", vec![update("u", "AssignVariableOp", &["h", "x"], WASM0, DT_FLOAT, &[])], none()),
        (
            "update whose new name is taken",
            vec![
                update("u", "AssignAddVariableOp", &["h", "x"], WASM0, DT_FLOAT, &[]),
                update("u/tfwasm_value", "Neg", &["y"], WASM0, DT_FLOAT, &[]),
            ],
            none(),
        ),
        (
            "the sum fuses into the update tree",
            vec![
                n("m", "ReadVariableOp", &["m_handle"], WASM0),
                n("sub", "Sub", &["g", "m"], WASM0),
                n("mul", "Mul", &["sub", "c"], WASM0),
                update("m_update", "AssignAddVariableOp", &["m_handle", "mul"], WASM0, DT_FLOAT, &[]),
            ],
            none(),
        ),
    ];
    let mut cases: Vec<(String, Vec<NodeDef>, HashSet<String>)> =
        cases.into_iter().map(|(name, nodes, keep)| (name.to_owned(), nodes, keep)).collect();
    for layout in [None, Some("NHWC"), Some("NCHW")] {
        let mut bias = n("bias", "BiasAdd", &["matmul", "b"], WASM0);
        if let Some(layout) = layout {
            bias = with(bias, "data_format", attr_value::Value::S(layout.as_bytes().to_vec()));
        }
        cases.push((format!("bias add, layout {layout:?}"), vec![bias, n("relu", "Relu", &["bias"], WASM0)], none()));
    }
    // Too long for one program (600 steps), and too deep for its stack: a
    // chain of additions each waiting on the rest (`x + (x + (...))`).
    let mut chain = vec![n("n0", "Neg", &["x"], WASM0)];
    chain.extend((1..600).map(|i| n(&format!("n{i}"), "Neg", &[&format!("n{}", i - 1)], WASM0)));
    cases.push(("a chain of 600".into(), chain, none()));
    for length in [program::MAX_DEPTH - 1, program::MAX_DEPTH, program::MAX_DEPTH + 1] {
        let mut deep = vec![n("d0", "Neg", &["x"], WASM0)];
        deep.extend(
            (1..length).map(|i| n(&format!("d{i}"), "AddV2", &[&format!("x{i}"), &format!("d{}", i - 1)], WASM0)),
        );
        cases.push((format!("a right-leaning chain of {length}"), deep, none()));
    }
    cases
}

#[test]
fn the_native_unit_tests_graphs_rewrite_alike() {
    let mut rewritten = 0;
    for (case, nodes, keep) in unit_test_graphs() {
        let made = assert_same(&case, &graph(nodes), &keep);
        rewritten += usize::from(!made.roots.is_empty() || !made.updates.is_empty());
    }
    assert!(rewritten >= 10, "only {rewritten} of the cases rewrote anything");
}

// --------------------------------------------------------------- generated graphs

/// A random graph of the nodes the rewrites look at and their near misses:
/// fusable and other ops, updates, several devices, types and attributes,
/// data inputs of several ports, control inputs, cycles, names that repeat
/// or collide with the update rewrite's.
fn random_graph(rng: &mut Rng) -> Vec<NodeDef> {
    let ops: Vec<&str> = FUSABLE
        .iter()
        .map(|f| f.op)
        .chain(["MatMul", "ReadVariableOp", "Identity", "NoOp", "Const", "AssignAddVariableOp", "AssignSubVariableOp"])
        .collect();
    let count = 2 + rng.below(40);
    let names: Vec<String> = (0..count)
        .map(|i| match rng.below(40) {
            0 => format!("n{}", rng.below(count)),
            1 => format!("n{}/tfwasm_read", rng.below(count)),
            2 => format!("n{}/tfwasm_value", rng.below(count)),
            _ => format!("n{i}"),
        })
        .collect();
    let mut nodes = Vec::with_capacity(count);
    for (i, name) in names.iter().enumerate() {
        // Ops that fuse are common, so trees form.
        let op = if rng.below(3) > 0 { rng.pick(FUSABLE).op } else { *rng.pick(&ops) };
        let op = if rng.below(5) == 0 { *rng.pick(&ops) } else { op };
        let arity = fusable(op).map_or(rng.below(3), |f| f.arity);
        let arity = if rng.below(12) == 0 { rng.below(4) } else { arity };
        let mut inputs: Vec<String> = (0..arity)
            .map(|_| {
                // Mostly earlier nodes (trees), sometimes any (cycles) or outside.
                let source = match rng.below(10) {
                    0 => format!("ext{}", rng.below(4)),
                    1 => names[rng.below(count)].clone(),
                    _ if i > 0 => names[i - 1 - rng.below(i.min(4))].clone(),
                    _ => "ext0".to_owned(),
                };
                match rng.below(12) {
                    0 => format!("{source}:1"),
                    1 => format!("{source}:0"),
                    _ => source,
                }
            })
            .collect();
        for _ in 0..usize::from(rng.below(6) == 0) + usize::from(rng.below(12) == 0) {
            inputs.push(format!("^{}", names[rng.below(count)]));
        }
        let device = *rng.pick(&[WASM0, WASM0, WASM0, WASM0, WASM0, WASM1, CPU0, "", "/device:WASM:*"]);
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let mut node = if op.starts_with("Assign") {
            let dtype = if rng.below(8) == 0 { 9 } else { DT_FLOAT };
            let extra: &[&str] = match rng.below(10) {
                0 => &["mode"],
                1 | 2 => &["_has_manual_control_dependencies"],
                _ => &[],
            };
            update(name, op, &inputs, device, dtype, extra)
        } else {
            n(name, op, &inputs, device)
        };
        match rng.below(16) {
            0 => node = with(node, "T", attr_value::Value::Type(2)),
            1 => node = with(node, "_class", attr_value::Value::S(b"loc:@x".to_vec())),
            2 => node = with(node, "mode", attr_value::Value::I(1)),
            3 => node = with(node, "data_format", attr_value::Value::S(b"NHWC".to_vec())),
            4 => node = with(node, "data_format", attr_value::Value::S(b"NCHW".to_vec())),
            5 => {
                node.attr.remove("T");
            }
            _ => {}
        }
        nodes.push(node);
    }
    nodes
}

#[test]
fn generated_graphs_rewrite_alike() {
    let cases = std::env::var("EQUIVALENCE_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(3000);
    let mut rng = Rng(0x5eed_f00d);
    let (mut updates, mut roots, mut changed) = (0, 0, 0);
    for case in 0..cases {
        let nodes = random_graph(&mut rng);
        let keep: HashSet<String> = match rng.below(4) {
            0 => nodes.iter().filter(|_| rng.below(4) == 0).map(|n| n.name.clone()).collect(),
            _ => HashSet::new(),
        };
        let made = assert_same(&format!("generated graph {case}: {nodes:#?}"), &graph(nodes), &keep);
        updates += made.updates.len();
        roots += made.roots.len();
        changed += usize::from(!made.updates.is_empty() || !made.roots.is_empty());
    }
    // Most graphs must exercise the rewrites, and some leave them nothing.
    let summary = format!("{updates} updates and {roots} fused roots in {changed} of {cases} graphs");
    assert!(updates > cases / 20 && changed > cases / 4 && changed < cases, "{summary}");
    println!("{summary}");
}

// ------------------------------------------------------------- the op's contract

/// Op names in the kernel's `UNARY`, `BINARY` and `GRAD` tables, read from
/// its source (every `("Name", UnaryOp::…` entry, however many a line
/// holds): the names `step_for_op` accepts besides `BiasAdd`.
fn kernel_table_names() -> BTreeSet<String> {
    let source = include_str!("../../../host/kernels/src/fused.rs");
    let mut names = BTreeSet::new();
    for entry in source.split("(\"").skip(1) {
        let Some((name, rest)) = entry.split_once('"') else { continue };
        if ["UnaryOp::", "BinaryOp::", "GradOp::"].iter().any(|kind| rest.starts_with(&format!(", {kind}"))) {
            names.insert(name.to_owned());
        }
    }
    names
}

#[test]
fn fusable_ops_match_the_kernel() {
    use tfwasm_kernels::fused::{self, Program, Step};
    assert_eq!(program::OP, fused::OP);
    assert_eq!((program::MAX_DEPTH, program::MAX_STEPS), (fused::MAX_DEPTH, fused::MAX_STEPS));

    let table = kernel_table_names();
    assert!(table.len() > 30, "the kernel's op tables were not found in its source: {table:?}");
    let mut names: BTreeSet<String> = table.clone();
    names.extend(tfwasm_kernels::registered().iter().map(|k| k.op.to_owned()));
    names.extend(FUSABLE.iter().map(|f| f.op.to_owned()));
    names.extend(["BiasAdd", "BiasAddV1", "Inv", "Add", "AddN", "Cast"].map(String::from));
    for name in &names {
        let ours = fusable(name);
        let theirs = fused::step_for_op(name);
        assert_eq!(ours.is_some(), theirs.is_some(), "{name}: the guest and the kernel disagree whether it fuses");
        let (Some(ours), Some(step)) = (ours, theirs) else { continue };
        let (arity, steps) = match step {
            Step::Unary(_) => (1, vec![Step::Input(0), step]),
            Step::Binary(_) | Step::BiasAdd | Step::Grad(_) => (2, vec![Step::Input(0), Step::Input(1), step]),
            Step::Input(_) => unreachable!("step_for_op never returns an input"),
        };
        assert_eq!(ours.arity, arity, "{name}");
        let expr = Program::new(steps, arity).unwrap_or_else(|e| panic!("{name}: {e}")).expr();
        assert_eq!(expr.rsplit(' ').next(), Some(ours.token), "{name}: its token in expr");
        assert!(table.contains(name) || name == "BiasAdd", "{name} fuses but is not in the kernel's tables");
    }
}

#[test]
fn describe_declares_what_the_rewrites_add() {
    // Every op the rewrites can put in a graph that was not there before.
    let mut added = BTreeSet::new();
    for (_, nodes, _) in unit_test_graphs() {
        let before: BTreeSet<String> = nodes.iter().map(|n| n.op.clone()).collect();
        let made = guest(&graph(nodes), &HashSet::new());
        added.extend(made.graph.node.into_iter().map(|n| n.op).filter(|op| !before.contains(op)));
    }
    let emits: BTreeSet<String> =
        <pass::FusePass as tfwasm_pass_sdk::Pass>::emits().into_iter().map(String::from).collect();
    assert!(added.is_subset(&emits), "{added:?} not all in {emits:?}");
    assert!(added.contains(program::OP) && added.contains("AssignVariableOp"), "{added:?}");
}
