//! Property tests of the graph pass on GraphDefs it was never meant to see.
//!
//! The pass reads bytes TensorFlow hands over; here they come from three
//! generators: arbitrary bytes (and well-formed protobuf of random fields),
//! GraphDefs built node by node from the names, ops, devices and attributes
//! the rewrites look for (dangling, repeated and cyclic inputs included),
//! and real graphs TensorFlow gave the pass (`tests/fixtures/graphs/`),
//! mutated byte by byte and node by node. For every input:
//!
//! - the pass returns, on a helper thread with a default-sized stack, within
//!   [`LIMIT`] (a panic, a stack overflow or a hang fails the case);
//! - when it returns a graph, that graph is valid wire format, at most a
//!   bounded factor larger, and the pass returns it unchanged when run on
//!   it again (TensorFlow's meta optimizer runs plugin passes twice);
//! - node names stay unique (a name repeated in the output was repeated in
//!   the input), nodes TensorFlow needs kept stay, and every input names a
//!   node of the output or named none in the input either.
//!
//! The same holds for each rewrite on its own. Case counts are sized for CI
//! (all fuzz tests of the workspace in well under a minute on two cores);
//! `PROPTEST_CASES=N` runs N cases per test instead (see
//! docs/architecture.md, "Fuzzing").

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::schema::testing::{CPU0, WASM0};
use super::schema::*;
use super::wire;
use super::*;

/// How long one case (every pass run it makes) may take. The inputs are at
/// most tens of KiB and the passes take well under a millisecond on them:
/// hitting this is a hang or a blow-up, not a slow machine.
const LIMIT: Duration = Duration::from_secs(10);

/// An output may be this many times its input's size, plus [`GROWTH_SLACK`]
/// bytes (each rewrite adds a bounded amount per node).
const GROWTH: usize = 8;
const GROWTH_SLACK: usize = 4096;

/// Graphs TensorFlow gave the pass (see `tests/fixtures/graphs/README.md`).
const FIXTURES: [(&str, &[u8]); 7] = [
    ("keras_mlp_step", include_bytes!("../../../../tests/fixtures/graphs/keras_mlp_step.pb")),
    ("keras_mlp_step_call", include_bytes!("../../../../tests/fixtures/graphs/keras_mlp_step_call.pb")),
    ("embedding_lstm", include_bytes!("../../../../tests/fixtures/graphs/embedding_lstm.pb")),
    ("embedding_lstm_call", include_bytes!("../../../../tests/fixtures/graphs/embedding_lstm_call.pb")),
    ("while_cond", include_bytes!("../../../../tests/fixtures/graphs/while_cond.pb")),
    ("jit_function", include_bytes!("../../../../tests/fixtures/graphs/jit_function.pb")),
    ("jit_function_call", include_bytes!("../../../../tests/fixtures/graphs/jit_function_call.pb")),
];

// ------------------------------------------------------------- harness

/// Runs `cases` cases (or `PROPTEST_CASES`) of `strategy` through `test`
/// and says on the terminal how many ran and for how long (outside the
/// test harness's capture, so a plain `cargo test` shows it).
fn fuzz<S: Strategy>(name: &str, cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(cases);
    let config = Config { cases, failure_persistence: None, max_shrink_time: 60_000, ..Config::default() };
    let started = Instant::now();
    TALLY.with_borrow_mut(|tally| tally.clear());
    let outcome = TestRunner::new(config).run(&strategy, test);
    // How often each pass took the input and how often it changed it: a
    // generator that never reaches a rewrite tests only its parser.
    let tally = TALLY.with_borrow(|tally| {
        tally.iter().map(|(pass, (ok, changed))| format!("{pass} {ok}/{changed}")).collect::<Vec<_>>().join(", ")
    });
    let _ = writeln!(
        std::io::stderr(),
        "graph fuzz {name}: {cases} cases in {:.1} s (accepted/rewritten: {tally})",
        started.elapsed().as_secs_f64()
    );
    if let Err(failure) = outcome {
        panic!("graph fuzz {name}: {failure}");
    }
}

thread_local! {
    /// Per pass: cases it accepted, and cases it changed the graph in.
    static TALLY: std::cell::RefCell<Vec<(&'static str, (usize, usize))>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn tally(pass: &'static str, changed: bool) {
    TALLY.with_borrow_mut(|tally| {
        let at = tally.iter().position(|(p, _)| *p == pass).unwrap_or_else(|| {
            tally.push((pass, (0, 0)));
            tally.len() - 1
        });
        tally[at].1 .0 += 1;
        tally[at].1 .1 += usize::from(changed);
    });
}

/// `f()` on a helper thread; panics (failing the case) if it panics, or
/// has not returned within [`LIMIT`].
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = done.send(f());
    });
    match result.recv_timeout(LIMIT) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker sends before it returns"),
        },
        // The worker is left running: the test fails either way.
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the pass did not return within {LIMIT:?}"),
    }
}

/// Which rewrites run, and the nodes TensorFlow asks to keep.
#[derive(Debug, Clone)]
struct Setup {
    preserve: Option<HashSet<Vec<u8>>>,
    fuse: bool,
    host_edges: bool,
    scatter: bool,
}

impl Setup {
    fn keeps(&self, name: &[u8]) -> bool {
        self.preserve.as_ref().is_some_and(|set| set.contains(name))
    }

    /// Every native rewrite in the order the plugin once ran them: the
    /// legalization before the passes, the update rewrite and fusion (now
    /// the reference pass guest's, kept here as its oracle), the rest.
    fn optimize(&self, graph: &[u8]) -> Result<Vec<u8>, GraphError> {
        let preserve = |name: &[u8]| self.keeps(name);
        let preserve = self.preserve.as_ref().map(|_| &preserve as Preserve<'_>);
        let mut graph = legalize_before_passes(graph, "WASM", self.scatter)?;
        if let (true, Some(preserve)) = (self.fuse, preserve) {
            let updated = super::updates::assign_updates(&graph, "WASM")?;
            graph = super::fuse::fuse_elementwise(&updated.graph, "WASM", preserve)?.graph;
        }
        legalize_after_passes(graph, "WASM", preserve, self.host_edges)
    }
}

fn setups() -> impl Strategy<Value = Setup> {
    let preserve = prop_oneof![
        1 => Just(None),
        3 => vec(select(NAMES), 0..4).prop_map(|names| Some(names.iter().map(|n| n.as_bytes().to_vec()).collect())),
    ];
    (preserve, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(preserve, fuse, host_edges, scatter)| Setup {
        preserve,
        fuse,
        host_edges,
        scatter,
    })
}

/// What a case's pass runs returned: the whole pass twice, then each
/// rewrite on the input alone.
struct Runs {
    first: Result<Vec<u8>, GraphError>,
    second: Option<Result<Vec<u8>, GraphError>>,
    each: Vec<(&'static str, Result<Vec<u8>, GraphError>)>,
}

fn run_all(graph: Vec<u8>, setup: Setup) -> Runs {
    bounded(move || {
        let first = setup.optimize(&graph);
        let second = first.as_ref().ok().map(|out| setup.optimize(out));
        let keep = |name: &[u8]| setup.keeps(name);
        let ours = |node: &NodeFields<'_>| {
            crate::kernels::implements(node.op, &|attr| {
                node.type_attr(attr.as_bytes()).and_then(|t| i64::try_from(t).ok())
            })
        };
        let each = vec![
            ("xla", xla::clear_must_compile(&graph, "WASM").map(|r| r.graph)),
            ("lower", lower::lower_control_flow(&graph, "WASM").map(|r| r.graph)),
            ("assign_updates", updates::assign_updates(&graph, "WASM").map(|r| r.graph)),
            ("scatter_updates", updates::scatter_updates(&graph, "WASM").map(|r| r.graph)),
            ("fuse", fuse::fuse_elementwise(&graph, "WASM", &keep).map(|f| f.graph)),
            ("variant_loops", variant_loops::carry_on_cpu(&graph, "WASM", &keep).map(|r| r.graph)),
            ("host_edges", host_edges::mark_host_edges(&graph, "WASM", &keep, &ours).map(|e| e.graph)),
        ];
        Runs { first, second, each }
    })
}

/// The properties every case must have (see the module docs).
fn check(graph: Vec<u8>, setup: Setup) -> Result<(), TestCaseError> {
    let runs = run_all(graph.clone(), setup.clone());
    let input = Shape::of(&graph);
    for (pass, outcome) in std::iter::once(("optimize", &runs.first)).chain(runs.each.iter().map(|(p, o)| (*p, o))) {
        let Ok(output) = outcome else { continue };
        tally(pass, *output != graph);
        let input = input.as_ref().map_err(|e| {
            TestCaseError::fail(format!("{pass} accepted a graph the reader refuses ({e}); the passes must agree"))
        })?;
        prop_assert!(
            output.len() <= GROWTH * graph.len() + GROWTH_SLACK,
            "{pass}: {} bytes out of {} in",
            output.len(),
            graph.len()
        );
        let out =
            Shape::of(output).map_err(|e| TestCaseError::fail(format!("{pass} wrote invalid wire format: {e}")))?;
        prop_assert!(out.attrs_valid || !input.attrs_valid, "{pass} wrote an attribute that is not valid wire format");
        for (name, &count) in &out.names {
            prop_assert!(
                count == 1 || input.names.get(name).is_some_and(|&n| n > 1),
                "{pass}: node {:?} appears {count} times",
                String::from_utf8_lossy(name)
            );
        }
        for input_name in &out.inputs {
            let resolves = out.names.contains_key(input_name) || !input.names.contains_key(input_name);
            prop_assert!(
                resolves,
                "{pass}: an input names {:?}, which it removed",
                String::from_utf8_lossy(input_name)
            );
        }
        for name in input.names.keys().filter(|name| setup.keeps(name)) {
            prop_assert!(
                out.names.contains_key(name),
                "{pass}: lost {:?}, which TensorFlow asked to keep",
                String::from_utf8_lossy(name)
            );
        }
    }
    if let (Ok(first), Some(second)) = (&runs.first, &runs.second) {
        match second {
            Ok(second) => prop_assert!(second == first, "a second run changed the pass's own output"),
            Err(e) => return Err(TestCaseError::fail(format!("the pass refuses its own output: {e}"))),
        }
    }
    Ok(())
}

/// What the properties read of a graph: how often each node name occurs,
/// the node names inputs refer to, and whether every attribute's value is
/// valid wire format too (the passes read only the values they need).
struct Shape {
    names: HashMap<Vec<u8>, usize>,
    inputs: HashSet<Vec<u8>>,
    attrs_valid: bool,
}

impl Shape {
    /// Errors where every pass does: at any byte of the GraphDef or of a
    /// NodeDef that is not valid wire format.
    fn of(graph: &[u8]) -> Result<Shape, GraphError> {
        let (_, nodes) = read_node_fields(graph)?;
        let mut shape = Shape { names: HashMap::new(), inputs: HashSet::new(), attrs_valid: true };
        for node in &nodes {
            shape.attrs_valid &= node.attrs.iter().all(|&(_, value, _)| attr_value(value).is_ok());
            *shape.names.entry(node.name.to_vec()).or_default() += 1;
            shape.inputs.extend(node.inputs.iter().map(|input| input_source(input).0.to_vec()));
        }
        Ok(shape)
    }
}

// ----------------------------------------------------- generated graphs

/// Node names. Generated graphs name node `i` `n{i}`, mostly; inputs name
/// any of these, so some dangle, and loops close.
const NAMES: &[&str] =
    &["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "n12", "n13", "n14", "n15"];

/// Names a generated node takes instead of its own, now and then: a
/// repeated one, the ones the update rewrite would make for `n2`.
const ODD_NAMES: &[&str] = &["n0", "n1", "n2/tfwasm_read", "n2/tfwasm_value", "loop/merge"];

/// The ops the rewrites look for, and a few they must leave alone.
const OPS: &[&str] = &[
    "While",
    "StatelessWhile",
    "If",
    "StatelessIf",
    "Case",
    "StatefulPartitionedCall",
    "PartitionedCall",
    "AssignAddVariableOp",
    "AssignSubVariableOp",
    "AssignVariableOp",
    "ReadVariableOp",
    "VarHandleOp",
    "ResourceScatterAdd",
    "ResourceScatterSub",
    "AddV2",
    "Sub",
    "Mul",
    "RealDiv",
    "Neg",
    "Sqrt",
    "Relu",
    "Square",
    "Tanh",
    "BiasAdd",
    "AddN",
    "Enter",
    "Exit",
    "Merge",
    "Switch",
    "NextIteration",
    "Identity",
    "LoopCond",
    "Less",
    "LogicalAnd",
    "Cast",
    "Const",
    "MatMul",
    "Sum",
    "Placeholder",
    "NoOp",
    "OptionalFromValue",
    "IteratorGetNext",
    "_Arg",
    "_Retval",
    "_TfwasmFusedElementwise",
    "_TfwasmScatterAdd",
];

/// Ops fusion takes (float32, on our device).
const ELEMENTWISE: &[&str] = &["AddV2", "Sub", "Mul", "RealDiv", "Neg", "Sqrt", "Relu", "Square", "Tanh", "BiasAdd"];

/// Ops that carry a value through a loop, and the `AddN` that sums
/// TensorLists in one.
const LOOP_OPS: &[&str] = &["Enter", "Exit", "Merge", "Switch", "NextIteration", "Identity", "AddN"];

const DEVICES: &[&str] = &[
    WASM0,
    WASM0,
    "/device:WASM:0",
    "/job:localhost/replica:0/task:0/device:WASM:1",
    "/device:WASM:*",
    CPU0,
    CPU0,
    "/job:localhost/replica:0/task:0/device:CPU:1",
    "/job:localhost/replica:0/task:0/device:GPU:0",
    "/device:WASM_X:0",
    "/device:WASM:",
    "",
];

const ATTR_KEYS: &[&str] = &[
    "T",
    "T",
    "dtype",
    "Tindices",
    "SrcT",
    "DstT",
    "N",
    "data_format",
    "validate_shape",
    "f",
    "_XlaMustCompile",
    "_lower_using_switch_merge",
    "_input_hostmem",
    "_output_hostmem",
    "_class",
    "mode",
];

/// `DataType` numbers the rewrites tell apart, and some they do not know.
fn dtype() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => Just(DT_FLOAT),
        2 => Just(DT_INT32),
        1 => Just(DT_INT64),
        1 => Just(DT_RESOURCE),
        2 => Just(DT_VARIANT),
        1 => any::<u64>(),
    ]
}

/// Arbitrary short bytes, valid UTF-8 or not.
fn garbage() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..6)
}

fn text(choices: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![8 => select(choices).prop_map(|s| s.as_bytes().to_vec()), 1 => garbage()]
}

fn field(number: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    wire::put_bytes_field(number, payload, &mut out);
    out
}

fn varint(number: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    wire::put_varint_field(number, value, &mut out);
    out
}

fn fixed32(number: u32, value: u32) -> Vec<u8> {
    let mut out = Vec::new();
    wire::put_varint(u64::from(number) << 3 | 5, &mut out);
    out.extend_from_slice(&value.to_le_bytes());
    out
}

fn packed(values: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &value in values {
        wire::put_varint(value, &mut out);
    }
    out
}

/// One field of an AttrValue, of every kind its oneof has (`list`, `s`,
/// `i`, `f`, `b`, `type`, `shape`, `tensor`, `placeholder`, `func`), plus
/// kinds on the wire TensorFlow would refuse.
fn attr_field() -> impl Strategy<Value = Vec<u8>> {
    let shape = vec(any::<i64>(), 0..4).prop_map(|dims| {
        let dims: Vec<u8> = dims.iter().flat_map(|&d| field(2, &varint(1, d as u64))).collect();
        field(7, &dims)
    });
    let tensor = (dtype(), vec(any::<u32>(), 0..4)).prop_map(|(t, values)| {
        let floats: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        field(8, &[varint(1, t), field(2, &field(2, &varint(1, 2))), field(5, &floats)].concat())
    });
    let list = (vec(garbage(), 0..3), vec(any::<u64>(), 0..4), vec(dtype(), 0..3), any::<bool>()).prop_map(
        |(strings, ints, types, packed_ints)| {
            let mut list: Vec<u8> = strings.iter().flat_map(|s| field(2, s)).collect();
            match packed_ints {
                true => list.extend(field(3, &packed(&ints))),
                false => list.extend(ints.iter().flat_map(|&i| varint(3, i))),
            }
            list.extend(field(6, &packed(&types)));
            field(1, &list)
        },
    );
    let func = (text(NAMES), garbage()).prop_map(|(name, key)| {
        let entry = [field(1, &key), field(2, &varint(5, 1))].concat();
        field(10, &[field(1, &name), field(2, &entry)].concat())
    });
    prop_oneof![
        garbage().prop_map(|s| field(2, &s)),
        prop_oneof![Just(b"NHWC".to_vec()), Just(b"NCHW".to_vec())].prop_map(|s| field(2, &s)),
        any::<i64>().prop_map(|i| varint(3, i as u64)),
        any::<u32>().prop_map(|f| fixed32(4, f)),
        prop_oneof![Just(0u64), Just(1), any::<u64>()].prop_map(|b| varint(5, b)),
        Just(vec![0x28, 0x81, 0x00]), // b: true as a two-byte varint
        dtype().prop_map(|t| varint(6, t)),
        dtype().prop_map(|t| varint(6, t)),
        shape,
        tensor,
        list,
        garbage().prop_map(|s| field(9, &s)),
        func,
        // valid wire format, wrong wire type for the field
        garbage().prop_map(|s| field(6, &s)),
        any::<u32>().prop_map(|f| fixed32(5, f)),
    ]
}

/// An AttrValue: usually one field, sometimes none or several (the last
/// one on the wire is the value).
fn attr_value_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        8 => attr_field(),
        2 => vec(attr_field(), 2..4).prop_map(|fields| fields.concat()),
    ]
}

fn data_input() -> impl Strategy<Value = Vec<u8>> {
    let name = || select(NAMES).prop_map(|s| s.as_bytes().to_vec());
    prop_oneof![
        8 => name(),
        3 => (name(), 0u8..3).prop_map(|(n, port)| [&n[..], format!(":{port}").as_bytes()].concat()),
        1 => prop_oneof![Just(b"n1:".to_vec()), Just(b"n1:x".to_vec()), Just(b"^".to_vec()), Just(b":0".to_vec())],
        1 => garbage(),
    ]
}

fn control_input() -> impl Strategy<Value = Vec<u8>> {
    select(&NAMES[..8]).prop_map(|n| [&b"^"[..], n.as_bytes()].concat())
}

/// Data and control inputs in any order (TensorFlow writes control inputs
/// last; a GraphDef need not).
fn input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![3 => data_input(), 1 => control_input()]
}

/// One NodeDef's parts; [`NodeSpec::encode`] writes it.
#[derive(Debug, Clone)]
struct NodeSpec {
    /// `None`: the node's own name, `n{i}`.
    name: Option<Vec<u8>>,
    op: Vec<u8>,
    inputs: Vec<Vec<u8>>,
    device: Vec<u8>,
    attrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Fields the passes do not model (debug info, unknown numbers).
    extra: Vec<u8>,
    /// Write the attributes ahead of the name (field order is free).
    attrs_first: bool,
}

impl NodeSpec {
    fn encode(&self, index: usize) -> Vec<u8> {
        let own = format!("n{index}").into_bytes();
        let inputs: Vec<&[u8]> = self.inputs.iter().map(Vec::as_slice).collect();
        let mut node = new_node_def(self.name.as_ref().unwrap_or(&own), &self.op, &inputs, &self.device);
        let mut attrs = Vec::new();
        for (key, value) in &self.attrs {
            put_attr(key, value, &mut attrs);
        }
        node.extend_from_slice(&self.extra);
        match self.attrs_first {
            true => [attrs, node].concat(),
            false => [node, attrs].concat(),
        }
    }
}

fn node_name() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![12 => Just(None), 1 => text(ODD_NAMES).prop_map(Some)]
}

fn extra_fields() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => Just(Vec::new()),
        1 => garbage().prop_map(|s| field(6, &field(1, &s))), // experimental_debug_info
        1 => any::<u64>().prop_map(|v| varint(15, v)),
    ]
}

/// A node of any op, inputs and attributes.
fn random_node() -> impl Strategy<Value = NodeSpec> {
    (
        node_name(),
        text(OPS),
        vec(input(), 0..5),
        text(DEVICES),
        vec((text(ATTR_KEYS), attr_value_bytes()), 0..4),
        extra_fields(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(name, op, inputs, device, attrs, extra, attrs_first)| NodeSpec {
            name,
            op,
            inputs,
            device,
            attrs,
            extra,
            attrs_first,
        })
}

/// A node as TensorFlow would write one of its op: the op's number of
/// data inputs and its type attributes (mostly float32), so that the
/// rewrites' patterns occur; now and then an input or attribute more.
fn typed_node() -> impl Strategy<Value = NodeSpec> {
    let dtype = || {
        prop_oneof![
            6 => Just(DT_FLOAT),
            2 => Just(DT_INT32),
            1 => Just(DT_INT64),
            1 => Just(DT_RESOURCE),
            2 => Just(DT_VARIANT),
        ]
    };
    (
        (node_name(), prop_oneof![3 => select(ELEMENTWISE), 2 => select(LOOP_OPS), 4 => select(OPS)], dtype(), dtype()),
        (prop_oneof![6 => Just(WASM0), 2 => Just(CPU0), 1 => select(DEVICES)], prop::bool::weighted(0.5)),
        (vec(data_input(), 0..4), vec(control_input(), 0..2), prop::bool::weighted(0.85)),
        (vec((text(ATTR_KEYS), attr_value_bytes()), 0..2), prop::bool::weighted(0.8), extra_fields()),
    )
        .prop_map(|((name, op, t, u), (device, variant), (data, controls, exact), (more, typed_only, extra))| {
            // A loop carries a TensorList half the time, and its `AddN` runs on the CPU.
            let looping = variant && LOOP_OPS.contains(&op);
            let t = if looping { DT_VARIANT } else { t };
            let device = if looping && op == "AddN" { CPU0 } else { device }.as_bytes().to_vec();
            let (arity, types) = signature(op, t, u);
            let mut inputs = data;
            if let (Some(arity), true) = (arity, exact) {
                inputs.resize_with(arity, || b"n0".to_vec());
            }
            inputs.extend(controls);
            let mut attrs: Vec<(Vec<u8>, Vec<u8>)> =
                types.into_iter().map(|(key, value)| (key.as_bytes().to_vec(), value)).collect();
            if !typed_only {
                attrs.extend(more);
            }
            NodeSpec { name, op: op.as_bytes().to_vec(), inputs, device, attrs, extra, attrs_first: false }
        })
}

/// How many data inputs `op` takes (if the passes care) and its type
/// attributes, with `t` and `u` as the types.
fn signature(op: &str, t: u64, u: u64) -> (Option<usize>, Vec<(&'static str, Vec<u8>)>) {
    let ty = |key: &'static str, dtype: u64| (key, varint(ATTR_VALUE_TYPE, dtype));
    match op {
        "AssignAddVariableOp" | "AssignSubVariableOp" => (Some(2), vec![ty("dtype", t)]),
        "ResourceScatterAdd" | "ResourceScatterSub" => {
            let index = if u == DT_FLOAT { DT_INT32 } else { u };
            (Some(3), vec![ty("dtype", t), ty("Tindices", index)])
        }
        "Neg" | "Sqrt" | "Relu" | "Square" | "Tanh" | "Enter" | "Exit" | "NextIteration" | "Identity" | "_Retval"
        | "OptionalFromValue" => (Some(1), vec![ty("T", t)]),
        "AddV2" | "Sub" | "Mul" | "RealDiv" | "BiasAdd" | "Less" | "MatMul" | "Sum" | "Switch" | "Merge" => {
            (Some(2), vec![ty("T", t)])
        }
        "AddN" => (Some(2), vec![ty("T", t), ("N", varint(ATTR_VALUE_I, 2))]),
        "LoopCond" => (Some(1), vec![]),
        "LogicalAnd" => (Some(2), vec![]),
        "Cast" => (Some(1), vec![ty("SrcT", t), ty("DstT", u)]),
        "Const" | "VarHandleOp" | "Placeholder" | "ReadVariableOp" => (None, vec![ty("dtype", t)]),
        "StatefulPartitionedCall" | "PartitionedCall" => {
            (None, vec![("_XlaMustCompile", varint(ATTR_VALUE_B, u64::from(t == DT_FLOAT)))])
        }
        _ => (None, vec![ty("T", t)]),
    }
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    prop_oneof![3 => typed_node(), 1 => random_node()]
}

/// A GraphDef of generated nodes, with or without the fields TensorFlow
/// sends besides them (a function library, versions, unknown fields).
fn generated_graph() -> impl Strategy<Value = Vec<u8>> {
    let tail = prop_oneof![
        Just(Vec::new()),
        Just([field(4, &varint(1, 2140)), field(2, &field(1, &field(1, b"f")))].concat()),
        any::<u64>().prop_map(|v| varint(3, v)),
    ];
    (vec(node_spec(), 0..16), tail, any::<bool>()).prop_map(|(mut nodes, tail, acyclic)| {
        if acyclic {
            // Data inputs name earlier nodes only (most of TensorFlow's
            // graphs), so chains form that a rewrite takes as a whole.
            for (i, node) in nodes.iter_mut().enumerate().skip(1) {
                for input in node.inputs.iter_mut().filter(|input| input.first() == Some(&b'n')) {
                    let (name, port) = input_source(input);
                    let earlier = std::str::from_utf8(&name[1..]).ok().and_then(|j| j.parse::<usize>().ok());
                    if let (Some(j), Some(port)) = (earlier, port) {
                        *input = format!("n{}:{}", j % i, String::from_utf8_lossy(port)).into_bytes();
                    }
                }
            }
        }
        let mut graph: Vec<u8> =
            nodes.iter().enumerate().flat_map(|(i, node)| field(GRAPH_NODE, &node.encode(i))).collect();
        graph.extend(tail);
        graph
    })
}

/// Trees of elementwise ops, as fusion wants them (each node read once,
/// float32, on our device), now and then not quite (an int32 or CPU node),
/// sometimes updating a variable, with a few random nodes that read into
/// them (a second reader, a control edge).
fn tree_graph() -> impl Strategy<Value = Vec<u8>> {
    let step = (select(ELEMENTWISE), prop::bool::weighted(0.95), prop::bool::weighted(0.95));
    (vec(step, 1..24), vec(node_spec(), 0..4), any::<bool>()).prop_map(|(steps, noise, update)| {
        let typed = |op: &str, inputs: Vec<Vec<u8>>, device: &str, dtype: u64| NodeSpec {
            name: None,
            op: op.as_bytes().to_vec(),
            inputs,
            device: device.as_bytes().to_vec(),
            attrs: vec![(b"T".to_vec(), varint(ATTR_VALUE_TYPE, dtype))],
            extra: Vec::new(),
            attrs_first: false,
        };
        let mut nodes: Vec<NodeSpec> = Vec::new();
        let mut unread: Vec<usize> = Vec::new();
        for (op, float, ours) in steps {
            let arity = if signature(op, DT_FLOAT, DT_FLOAT).0 == Some(1) { 1 } else { 2 };
            let inputs = (0..arity)
                .map(|_| {
                    let producer = unread.pop().unwrap_or_else(|| {
                        nodes.push(typed("ReadVariableOp", vec![b"handle".to_vec()], WASM0, DT_FLOAT));
                        nodes.len() - 1
                    });
                    format!("n{producer}").into_bytes()
                })
                .collect();
            let (device, dtype) = (if ours { WASM0 } else { CPU0 }, if float { DT_FLOAT } else { DT_INT32 });
            nodes.push(typed(op, inputs, device, dtype));
            unread.push(nodes.len() - 1);
        }
        if update {
            let root = format!("n{}", unread.last().copied().unwrap_or(0)).into_bytes();
            let mut assign = typed("AssignSubVariableOp", vec![b"var".to_vec(), root], WASM0, DT_FLOAT);
            assign.attrs[0].0 = b"dtype".to_vec();
            nodes.push(assign);
        }
        nodes.extend(noise);
        nodes.iter().enumerate().flat_map(|(i, node)| field(GRAPH_NODE, &node.encode(i))).collect()
    })
}

/// Well-formed protobuf of random fields, nested: field 1 of a GraphDef is
/// a node, so nested messages reach the NodeDef and AttrValue readers.
fn wire_soup() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        (1u32..12, any::<u64>()).prop_map(|(n, v)| varint(n, v)),
        (1u32..12, garbage()).prop_map(|(n, s)| field(n, &s)),
        (1u32..12, any::<u32>()).prop_map(|(n, v)| fixed32(n, v)),
        (1u32..12, select(NAMES)).prop_map(|(n, s)| field(n, s.as_bytes())),
    ];
    vec(leaf, 0..4).prop_map(|fields| fields.concat()).prop_recursive(4, 256, 6, |inner| {
        vec((1u32..8, inner), 0..6).prop_map(|fields| fields.iter().flat_map(|(n, m)| field(*n, m)).collect())
    })
}

// ------------------------------------------------------------ mutations

/// A byte-level change to a real graph.
#[derive(Debug, Clone)]
enum ByteEdit {
    FlipBit(Index, u8),
    Set(Index, u8),
    Truncate(Index),
    Delete(Index, u8),
    Insert(Index, Vec<u8>),
    /// A range of another fixture copied in (a field boundary, often).
    Splice {
        from: Index,
        start: Index,
        len: u16,
        at: Index,
    },
    Duplicate(Index, u8),
}

impl ByteEdit {
    fn apply(&self, graph: &mut Vec<u8>) {
        let at = |index: &Index, len: usize| if len == 0 { 0 } else { index.index(len) };
        match self {
            ByteEdit::FlipBit(i, bit) if !graph.is_empty() => {
                let i = at(i, graph.len());
                graph[i] ^= 1 << (bit % 8);
            }
            ByteEdit::Set(i, value) if !graph.is_empty() => {
                let i = at(i, graph.len());
                graph[i] = *value;
            }
            ByteEdit::Truncate(i) => graph.truncate(at(i, graph.len() + 1)),
            ByteEdit::Delete(i, len) => {
                let start = at(i, graph.len() + 1);
                let end = (start + usize::from(*len)).min(graph.len());
                graph.drain(start..end);
            }
            ByteEdit::Insert(i, bytes) => {
                let i = at(i, graph.len() + 1);
                graph.splice(i..i, bytes.iter().copied());
            }
            ByteEdit::Splice { from, start, len, at: to } => {
                let source = FIXTURES[from.index(FIXTURES.len())].1;
                let start = start.index(source.len());
                let end = (start + usize::from(*len)).min(source.len());
                let to = at(to, graph.len() + 1);
                graph.splice(to..to, source[start..end].iter().copied());
            }
            ByteEdit::Duplicate(i, len) => {
                let start = at(i, graph.len() + 1);
                let end = (start + usize::from(*len)).min(graph.len());
                let copy = graph[start..end].to_vec();
                graph.splice(end..end, copy);
            }
            ByteEdit::FlipBit(..) | ByteEdit::Set(..) => {}
        }
    }
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        4 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::FlipBit(i, b)),
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| ByteEdit::Set(i, v)),
        1 => any::<Index>().prop_map(ByteEdit::Truncate),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
        1 => (any::<Index>(), vec(any::<u8>(), 1..8)).prop_map(|(i, b)| ByteEdit::Insert(i, b)),
        2 => (any::<Index>(), any::<Index>(), any::<u16>(), any::<Index>())
            .prop_map(|(from, start, len, at)| ByteEdit::Splice { from, start, len: len % 2048, at }),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, n)| ByteEdit::Duplicate(i, n)),
    ]
}

/// A change to one node of a real graph, made by appending fields to its
/// NodeDef (the last name, op and device on the wire count; inputs and
/// attributes add up), or to the list of nodes.
#[derive(Debug, Clone)]
enum GraphEdit {
    Drop(Index),
    Copy(Index),
    /// Takes the name of another node (two nodes of one name).
    Rename(Index, Index),
    /// Reads another node (data or control): a cycle, often.
    Read {
        node: Index,
        from: Index,
        port: u8,
        control: bool,
    },
    Device(Index, Vec<u8>),
    Op(Index, Vec<u8>),
    Attr(Index, Vec<u8>, Vec<u8>),
}

fn node_edit() -> impl Strategy<Value = GraphEdit> {
    prop_oneof![
        1 => any::<Index>().prop_map(GraphEdit::Drop),
        1 => any::<Index>().prop_map(GraphEdit::Copy),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| GraphEdit::Rename(a, b)),
        3 => (any::<Index>(), any::<Index>(), 0u8..3, prop::bool::weighted(0.3))
            .prop_map(|(node, from, port, control)| GraphEdit::Read { node, from, port, control }),
        2 => (any::<Index>(), text(DEVICES)).prop_map(|(i, d)| GraphEdit::Device(i, d)),
        2 => (any::<Index>(), text(OPS)).prop_map(|(i, op)| GraphEdit::Op(i, op)),
        2 => (any::<Index>(), text(ATTR_KEYS), attr_value_bytes()).prop_map(|(i, k, v)| GraphEdit::Attr(i, k, v)),
    ]
}

/// `graph` (a fixture, so valid) with `edits` made to its nodes.
fn edit_nodes_of(graph: &[u8], edits: &[GraphEdit]) -> Vec<u8> {
    let (raw, fields) = read_node_fields(graph).expect("fixtures are valid GraphDefs");
    let mut names: Vec<Vec<u8>> = fields.iter().map(|f| f.name.to_vec()).collect();
    let mut nodes: Vec<Vec<u8>> = raw.iter().map(|n| n.to_vec()).collect();
    for edit in edits {
        if nodes.is_empty() {
            break;
        }
        let count = nodes.len();
        let pick = |i: &Index| i.index(count);
        match edit {
            GraphEdit::Drop(i) => {
                let i = pick(i);
                nodes.remove(i);
                names.remove(i);
            }
            GraphEdit::Copy(i) => {
                let i = pick(i);
                nodes.push(nodes[i].clone());
                names.push(names[i].clone());
            }
            GraphEdit::Rename(a, b) => {
                let (a, b) = (pick(a), pick(b));
                let name = names[b].clone();
                wire::put_bytes_field(NODE_NAME, &name, &mut nodes[a]);
                names[a] = name;
            }
            GraphEdit::Read { node, from, port, control } => {
                let (node, from) = (pick(node), pick(from));
                let input = match (control, port) {
                    (true, _) => [&b"^"[..], &names[from]].concat(),
                    (false, 0) => names[from].clone(),
                    (false, port) => [&names[from][..], format!(":{port}").as_bytes()].concat(),
                };
                wire::put_bytes_field(NODE_INPUT, &input, &mut nodes[node]);
            }
            GraphEdit::Device(i, device) => wire::put_bytes_field(NODE_DEVICE, device, &mut nodes[pick(i)]),
            GraphEdit::Op(i, op) => wire::put_bytes_field(NODE_OP, op, &mut nodes[pick(i)]),
            GraphEdit::Attr(i, key, value) => put_attr(key, value, &mut nodes[pick(i)]),
        }
    }
    // The fields after the nodes (library, versions) come along.
    let mut out: Vec<u8> = nodes.iter().flat_map(|node| field(GRAPH_NODE, node)).collect();
    for item in wire::raw_fields(graph) {
        let (f, bytes) = item.expect("fixtures are valid GraphDefs");
        if f.number != GRAPH_NODE {
            out.extend_from_slice(bytes);
        }
    }
    out
}

fn fixture() -> impl Strategy<Value = usize> {
    0..FIXTURES.len()
}

// ---------------------------------------------------------------- tests

#[test]
fn fixtures_are_graphs_the_pass_rewrites() {
    // The mutations start from graphs that reach the rewrites: each fixture
    // is valid, has nodes on our device, and the pass changes something in
    // at least one of them for each rewrite family the fixtures cover.
    let setup = Setup { preserve: Some(HashSet::new()), fuse: true, host_edges: true, scatter: true };
    let mut changed = 0;
    for (name, graph) in FIXTURES {
        let shape = Shape::of(graph).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(shape.names.len() > 5, "{name}: {} nodes", shape.names.len());
        let out = setup.optimize(graph).unwrap_or_else(|e| panic!("{name}: {e}"));
        changed += usize::from(out != graph);
        check(graph.to_vec(), setup.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(changed >= 3, "only {changed} fixtures are rewritten");
    // The XLA rewrite: a captured call to a jit-compiled function on WASM.
    let call = FIXTURES.iter().find(|(name, _)| *name == "keras_mlp_step_call").unwrap().1;
    assert!(!xla::clear_must_compile(call, "WASM").unwrap().nodes.is_empty());
}

#[test]
fn arbitrary_bytes() {
    fuzz("arbitrary_bytes", 3000, (vec(any::<u8>(), 0..300), setups()), |(graph, setup)| check(graph, setup));
}

#[test]
fn random_wire_format() {
    fuzz("random_wire_format", 1500, (wire_soup(), setups()), |(graph, setup)| check(graph, setup));
}

#[test]
fn generated_graphs() {
    fuzz("generated_graphs", 3000, (generated_graph(), setups()), |(graph, setup)| check(graph, setup));
}

#[test]
fn generated_trees() {
    fuzz("generated_trees", 1500, (tree_graph(), setups()), |(graph, setup)| check(graph, setup));
}

#[test]
fn mutated_real_graphs_bytes() {
    let strategy = (fixture(), vec(byte_edit(), 1..4), setups());
    fuzz("mutated_real_graphs_bytes", 600, strategy, |(index, edits, setup)| {
        let mut graph = FIXTURES[index].1.to_vec();
        for edit in &edits {
            edit.apply(&mut graph);
        }
        check(graph, setup)
    });
}

#[test]
fn mutated_real_graphs_nodes() {
    let strategy = (fixture(), vec(node_edit(), 1..8), setups());
    fuzz("mutated_real_graphs_nodes", 600, strategy, |(index, edits, setup)| {
        check(edit_nodes_of(FIXTURES[index].1, &edits), setup)
    });
}
