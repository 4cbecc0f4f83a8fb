//! The checks every answer of a pass passes before TensorFlow sees it.
//!
//! A pass is untrusted code that answers with untrusted bytes. TensorFlow
//! takes back whatever graph the optimizer returns, and a graph it cannot
//! run fails the user's step (or, for some mistakes, aborts the process). So
//! the host checks the answer against what it gave the pass: the bytes
//! parse; node names are unique; every input names a node and an output that
//! node's op has; every op is one TensorFlow knows or a function of the
//! graph's library; the nodes TensorFlow asked to keep are there with the
//! same outputs; no cycle appears that the given graph did not have (a
//! loop's back edge, out of `NextIteration`, is not one); and each node the
//! pass added or changed has a well-formed device string, an op the pass
//! declared it may emit (when the op is new to the graph), and, when placed
//! on the device, a kernel there.
//!
//! What TensorFlow knows is behind [`OpCatalog`]: in the plugin,
//! TensorFlow's own op registry and the device's kernel table; offline, a
//! snapshot of the registry.

use std::collections::{HashMap, HashSet};

use tfwasm_proto::graph::{attr_value, AttrValue, GraphDef, NodeDef, OpDef};
use tfwasm_proto::prost::Message;

/// What the host knows about ops and kernels.
pub trait OpCatalog {
    /// TensorFlow's definition of op type `op`, or `None` when TensorFlow
    /// has no such op.
    fn op_def(&self, op: &str) -> Option<OpDef>;

    /// Whether the device has a kernel for `node`'s op and type attributes.
    fn has_kernel(&self, node: &NodeDef) -> bool;
}

/// What the host expects of an answer besides the catalog's facts.
pub struct Expectations<'a> {
    /// The device type the pass optimizes for, e.g. `WASM`.
    pub device_type: &'a str,
    /// Nodes TensorFlow asked to keep, with their outputs.
    pub preserve: &'a [String],
    /// Op types the pass declared it may add (`pass-info.emits`).
    pub emits: &'a [String],
}

/// Why an answer was refused. Each names the node at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the answer is not a GraphDef: {0}")]
    Unparseable(String),
    #[error("two nodes are named `{0}`")]
    DuplicateName(String),
    #[error("node `{node}` has an input `{input}` that names no node of the graph")]
    DanglingInput { node: String, input: String },
    #[error("node `{node}` reads output {port} of `{of}`, which has {outputs} output(s)")]
    NoSuchOutput { node: String, of: String, port: usize, outputs: usize },
    #[error("node `{node}` has an input `{input}` that is not `name`, `name:port` or `^name`")]
    MalformedInput { node: String, input: String },
    #[error(
        "node `{node}` is of op type `{op}`, which TensorFlow does not know and the graph's library does not define"
    )]
    UnknownOp { node: String, op: String },
    #[error("node `{node}` is of op type `{op}`, which the pass did not declare in `emits`")]
    Undeclared { node: String, op: String },
    #[error("node `{node}`'s outputs cannot be counted: {reason}")]
    Uncountable { node: String, reason: String },
    #[error("node `{0}`, which TensorFlow asked to keep, is gone")]
    LostPreserved(String),
    #[error("node `{node}`, which TensorFlow asked to keep, had {before} output(s) and now has {after}")]
    ChangedOutputs { node: String, before: usize, after: usize },
    #[error("the answer has a cycle outside any loop, through `{0}`")]
    Cycle(String),
    #[error("node `{node}` has a malformed device string `{device}`")]
    BadDevice { node: String, device: String },
    #[error("node `{node}` ({op}) is placed on the {device_type} device, which has no kernel for it")]
    NoKernel { node: String, op: String, device_type: String },
}

/// Checks `answer`, the bytes a pass returned for `given`; returns the
/// decoded graph when TensorFlow may have it.
pub fn check_answer(
    given: &GraphDef,
    answer: &[u8],
    expect: &Expectations<'_>,
    catalog: &dyn OpCatalog,
) -> Result<GraphDef, Refusal> {
    let graph = GraphDef::decode(answer).map_err(|e| Refusal::Unparseable(e.to_string()))?;
    let signatures = Signatures::new(&graph, catalog);
    let mut outputs: HashMap<&str, usize> = HashMap::with_capacity(graph.node.len());
    for node in &graph.node {
        if outputs.contains_key(node.name.as_str()) {
            return Err(Refusal::DuplicateName(node.name.clone()));
        }
        let count = signatures.outputs(node)?;
        outputs.insert(&node.name, count);
    }
    for node in &graph.node {
        for input in &node.input {
            let (source, port) = parse_input(input)
                .ok_or_else(|| Refusal::MalformedInput { node: node.name.clone(), input: input.clone() })?;
            let Some(&count) = outputs.get(source) else {
                return Err(Refusal::DanglingInput { node: node.name.clone(), input: input.clone() });
            };
            if let Some(port) = port.filter(|&port| port >= count) {
                return Err(Refusal::NoSuchOutput {
                    node: node.name.clone(),
                    of: source.to_owned(),
                    port,
                    outputs: count,
                });
            }
        }
    }

    let given_signatures = Signatures::new(given, catalog);
    for name in expect.preserve {
        let Some(&after) = outputs.get(name.as_str()) else {
            return Err(Refusal::LostPreserved(name.clone()));
        };
        if let Some(before) = given.node.iter().find(|n| &n.name == name) {
            // The given graph is TensorFlow's: a node it cannot count has the
            // same op in both, or the answer's count failed above.
            if let Ok(before) = given_signatures.outputs(before) {
                if before != after {
                    return Err(Refusal::ChangedOutputs { node: name.clone(), before, after });
                }
            }
        }
    }

    if let Some(node) = cycle(&graph) {
        if cycle(given).is_none() {
            return Err(Refusal::Cycle(node));
        }
    }

    let given_nodes: HashMap<&str, &NodeDef> = given.node.iter().map(|n| (n.name.as_str(), n)).collect();
    let given_ops: HashSet<&str> = given.node.iter().map(|n| n.op.as_str()).collect();
    let library: HashSet<&str> = graph
        .library
        .iter()
        .flat_map(|l| &l.function)
        .filter_map(|f| f.signature.as_ref())
        .map(|s| s.name.as_str())
        .collect();
    let on_device = format!("device:{}:", expect.device_type);
    for node in &graph.node {
        if given_nodes.get(node.name.as_str()).is_some_and(|before| *before == node) {
            continue; // TensorFlow's own node, untouched
        }
        if !well_formed_device(&node.device) {
            return Err(Refusal::BadDevice { node: node.name.clone(), device: node.device.clone() });
        }
        if !given_ops.contains(node.op.as_str())
            && !library.contains(node.op.as_str())
            && !expect.emits.iter().any(|op| op == &node.op)
        {
            return Err(Refusal::Undeclared { node: node.name.clone(), op: node.op.clone() });
        }
        if node.device.contains(&on_device)
            && !library.contains(node.op.as_str())
            && !catalog.has_kernel(node)
            && !placed_there_already(given, node, &on_device)
        {
            return Err(Refusal::NoKernel {
                node: node.name.clone(),
                op: node.op.clone(),
                device_type: expect.device_type.to_owned(),
            });
        }
    }
    Ok(graph)
}

/// Whether TensorFlow itself placed a node of `node`'s op and types on the
/// device in the given graph: then a kernel for them exists there, whether
/// the device's own or one of TensorFlow's for every device.
fn placed_there_already(given: &GraphDef, node: &NodeDef, on_device: &str) -> bool {
    fn types(node: &NodeDef) -> Vec<(&str, i32)> {
        let mut types: Vec<(&str, i32)> = node
            .attr
            .iter()
            .filter_map(|(name, value)| match value.value {
                Some(attr_value::Value::Type(dtype)) => Some((name.as_str(), dtype)),
                _ => None,
            })
            .collect();
        types.sort_unstable();
        types
    }
    let wanted = types(node);
    given.node.iter().any(|n| n.op == node.op && n.device.contains(on_device) && types(n) == wanted)
}

/// `name`, `name:port` or `^name` → the node and, for a data input, the port.
pub fn parse_input(input: &str) -> Option<(&str, Option<usize>)> {
    if let Some(control) = input.strip_prefix('^') {
        return (!control.is_empty() && !control.contains(':')).then_some((control, None));
    }
    match input.rsplit_once(':') {
        Some((name, port)) => {
            let port = port.parse().ok().filter(|_| !port.starts_with('+'))?;
            (!name.is_empty()).then_some((name, Some(port)))
        }
        None => (!input.is_empty()).then_some((input, Some(0))),
    }
}

/// Op signatures: TensorFlow's registry, then the graph's own functions.
struct Signatures<'a> {
    catalog: &'a dyn OpCatalog,
    functions: HashMap<&'a str, &'a OpDef>,
    known: std::cell::RefCell<HashMap<String, Option<std::rc::Rc<OpDef>>>>,
}

impl<'a> Signatures<'a> {
    fn new(graph: &'a GraphDef, catalog: &'a dyn OpCatalog) -> Self {
        let functions = graph
            .library
            .iter()
            .flat_map(|l| &l.function)
            .filter_map(|f| f.signature.as_ref())
            .map(|s| (s.name.as_str(), s))
            .collect();
        Signatures { catalog, functions, known: Default::default() }
    }

    /// How many outputs `node` has.
    fn outputs(&self, node: &NodeDef) -> Result<usize, Refusal> {
        let unknown = || Refusal::UnknownOp { node: node.name.clone(), op: node.op.clone() };
        if let Some(signature) = self.functions.get(node.op.as_str()) {
            return count_outputs(node, signature);
        }
        let cached = self.known.borrow().get(&node.op).cloned();
        let def = match cached {
            Some(def) => def,
            None => {
                let def = self.catalog.op_def(&node.op).map(std::rc::Rc::new);
                self.known.borrow_mut().insert(node.op.clone(), def.clone());
                def
            }
        };
        count_outputs(node, def.as_deref().ok_or_else(unknown)?)
    }
}

/// The number of output tensors `node` has under `signature`: one per
/// plain output argument, N for `N * T`, the list's length for a type list.
fn count_outputs(node: &NodeDef, signature: &OpDef) -> Result<usize, Refusal> {
    let uncountable = |reason: String| Refusal::Uncountable { node: node.name.clone(), reason };
    let attr = |name: &str| -> Option<&AttrValue> {
        node.attr
            .get(name)
            .or_else(|| signature.attr.iter().find(|a| a.name == name).and_then(|a| a.default_value.as_ref()))
    };
    let mut total = 0usize;
    for arg in &signature.output_arg {
        let count = if !arg.number_attr.is_empty() {
            match attr(&arg.number_attr).and_then(|v| v.value.as_ref()) {
                Some(attr_value::Value::I(n)) => {
                    usize::try_from(*n).map_err(|_| uncountable(format!("`{}` is {n}", arg.number_attr)))?
                }
                _ => return Err(uncountable(format!("it has no integer attribute `{}`", arg.number_attr))),
            }
        } else if !arg.type_list_attr.is_empty() {
            match attr(&arg.type_list_attr).and_then(|v| v.value.as_ref()) {
                Some(attr_value::Value::List(list)) => list.r#type.len(),
                _ => return Err(uncountable(format!("it has no type-list attribute `{}`", arg.type_list_attr))),
            }
        } else {
            1
        };
        total = total.checked_add(count).ok_or_else(|| uncountable("too many outputs".into()))?;
    }
    Ok(total)
}

/// A node on a cycle of data and control edges, not counting the back edges
/// of loops (those out of `NextIteration`), or `None` when there is none.
fn cycle(graph: &GraphDef) -> Option<String> {
    let index: HashMap<&str, usize> = graph.node.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); graph.node.len()];
    let mut waiting = vec![0usize; graph.node.len()];
    for (i, node) in graph.node.iter().enumerate() {
        for input in &node.input {
            let Some(&source) = parse_input(input).and_then(|(name, _)| index.get(name)) else {
                continue;
            };
            if graph.node[source].op == "NextIteration" || graph.node[source].op == "RefNextIteration" {
                continue;
            }
            consumers[source].push(i);
            waiting[i] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..graph.node.len()).filter(|&i| waiting[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = ready.pop() {
        done += 1;
        for &consumer in &consumers[i] {
            waiting[consumer] -= 1;
            if waiting[consumer] == 0 {
                ready.push(consumer);
            }
        }
    }
    (done < graph.node.len()).then(|| {
        let stuck = waiting.iter().position(|&w| w > 0).unwrap_or(0);
        graph.node[stuck].name.clone()
    })
}

/// Whether `device` is empty or a device specification TensorFlow parses:
/// `/job:NAME`, `/replica:N`, `/task:N` and `/device:TYPE:N` (or `:*`, or
/// the legacy `/cpu:N` and `/gpu:N`), each at most once, in that order.
pub fn well_formed_device(device: &str) -> bool {
    if device.is_empty() {
        return true;
    }
    let Some(rest) = device.strip_prefix('/') else {
        return false;
    };
    let name = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let number = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    let id = |s: &str| s == "*" || number(s);
    let mut stage = 0; // job, replica, task, device: each at most once, in order
    for part in rest.split('/') {
        let (key, value) = part.split_once(':').unwrap_or((part, ""));
        let at = match key {
            "job" if name(value) => 0,
            "replica" if id(value) => 1,
            "task" if id(value) => 2,
            "device" => match value.split_once(':') {
                Some((kind, n)) if name(kind) && id(n) => 3,
                None if name(value) => 3,
                _ => return false,
            },
            "cpu" | "gpu" | "CPU" | "GPU" if id(value) => 3,
            _ => return false,
        };
        if at < stage {
            return false;
        }
        stage = at + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfwasm_proto::graph::op_def::ArgDef;
    use tfwasm_proto::graph::{FunctionDef, FunctionDefLibrary};

    /// A catalog of a few ops: `Const` (1 output), `Add` (1), `Split`
    /// (`num_split` outputs), `NoOp` (0), `NextIteration`, `Merge` (2);
    /// kernels on the device for `Add` only.
    struct Ops;

    impl OpCatalog for Ops {
        fn op_def(&self, op: &str) -> Option<OpDef> {
            let out = |name: &str| ArgDef { name: name.into(), ..Default::default() };
            let outputs = match op {
                "Const" | "Add" | "NextIteration" => vec![out("y")],
                "Merge" => vec![out("y"), out("index")],
                "Split" => vec![ArgDef { name: "y".into(), number_attr: "num_split".into(), ..Default::default() }],
                "NoOp" => vec![],
                _ => return None,
            };
            Some(OpDef { name: op.into(), output_arg: outputs, ..Default::default() })
        }

        fn has_kernel(&self, node: &NodeDef) -> bool {
            node.op == "Add"
        }
    }

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn graph(nodes: Vec<NodeDef>) -> GraphDef {
        GraphDef { node: nodes, ..Default::default() }
    }

    fn given() -> GraphDef {
        graph(vec![node("a", "Const", &[]), node("b", "Const", &[]), node("sum", "Add", &["a", "b:0"])])
    }

    fn check(answer: &GraphDef, preserve: &[&str], emits: &[&str]) -> Result<GraphDef, Refusal> {
        let preserve: Vec<String> = preserve.iter().map(|s| s.to_string()).collect();
        let emits: Vec<String> = emits.iter().map(|s| s.to_string()).collect();
        let expect = Expectations { device_type: "WASM", preserve: &preserve, emits: &emits };
        check_answer(&given(), &answer.encode_to_vec(), &expect, &Ops)
    }

    #[test]
    fn the_given_graph_itself_passes() {
        assert_eq!(check(&given(), &["sum"], &[]).unwrap(), given());
    }

    #[test]
    fn garbage_is_unparseable() {
        let expect = Expectations { device_type: "WASM", preserve: &[], emits: &[] };
        let refused = check_answer(&given(), &[0xff, 0xff, 0xff], &expect, &Ops).unwrap_err();
        assert!(matches!(refused, Refusal::Unparseable(_)), "{refused}");
    }

    #[test]
    fn each_broken_answer_is_refused_with_its_reason() {
        let mut duplicate = given();
        duplicate.node.push(node("a", "Const", &[]));
        assert_eq!(check(&duplicate, &[], &[]), Err(Refusal::DuplicateName("a".into())));

        let mut dangling = given();
        dangling.node[2].input[1] = "nowhere".into();
        assert!(matches!(check(&dangling, &[], &[]), Err(Refusal::DanglingInput { .. })));

        let mut control_dangling = given();
        control_dangling.node[2].input.push("^gone".into());
        assert!(matches!(check(&control_dangling, &[], &[]), Err(Refusal::DanglingInput { .. })));

        let mut past_outputs = given();
        past_outputs.node[2].input[1] = "b:1".into();
        assert_eq!(
            check(&past_outputs, &[], &[]),
            Err(Refusal::NoSuchOutput { node: "sum".into(), of: "b".into(), port: 1, outputs: 1 })
        );

        let mut unknown = given();
        unknown.node.push(node("x", "Frobnicate", &["sum"]));
        assert!(matches!(check(&unknown, &[], &["Frobnicate"]), Err(Refusal::UnknownOp { .. })));

        let mut undeclared = given();
        undeclared.node.push(node("split", "Split", &["sum"]));
        undeclared
            .node
            .last_mut()
            .unwrap()
            .attr
            .insert("num_split".into(), AttrValue { value: Some(attr_value::Value::I(2)) });
        assert!(matches!(check(&undeclared, &[], &[]), Err(Refusal::Undeclared { .. })));
        assert!(check(&undeclared, &[], &["Split"]).is_ok(), "declared, it passes");

        let mut lost = given();
        lost.node.pop();
        assert_eq!(check(&lost, &["sum"], &[]), Err(Refusal::LostPreserved("sum".into())));

        let mut cyclic = given();
        cyclic.node[0] = node("a", "Add", &["sum", "b"]);
        assert!(matches!(check(&cyclic, &[], &[]), Err(Refusal::Cycle(_))));

        let mut bad_device = given();
        bad_device.node[2].device = "/device:WASM".into();
        assert!(check(&bad_device, &[], &[]).is_ok(), "a device without an id is a partial spec TensorFlow takes");
        bad_device.node[2].device = "device:WASM:0".into();
        assert!(matches!(check(&bad_device, &[], &[]), Err(Refusal::BadDevice { .. })));

        let mut no_kernel = given();
        no_kernel.node[0].device = "/job:localhost/replica:0/task:0/device:WASM:0".into();
        assert!(
            matches!(check(&no_kernel, &[], &[]), Err(Refusal::NoKernel { .. })),
            "no Const kernel in this catalog"
        );
        no_kernel.node[0].device.clear();
        no_kernel.node[2].device = "/job:localhost/replica:0/task:0/device:WASM:0".into();
        assert!(check(&no_kernel, &[], &[]).is_ok(), "Add has one");

        // A Const on the device already in the given graph: TensorFlow found a kernel for it.
        let mut before = given();
        before.node[1].device = "/job:localhost/replica:0/task:0/device:WASM:0".into();
        let mut answer = before.clone();
        answer.node.push(node("c", "Const", &[]));
        answer.node.last_mut().unwrap().device = before.node[1].device.clone();
        let expect = Expectations { device_type: "WASM", preserve: &[], emits: &[] };
        assert!(check_answer(&before, &answer.encode_to_vec(), &expect, &Ops).is_ok());
    }

    #[test]
    fn a_preserved_node_keeps_its_outputs() {
        let split = |n: i64| {
            let mut split = node("split", "Split", &["a"]);
            split.attr.insert("num_split".into(), AttrValue { value: Some(attr_value::Value::I(n)) });
            split
        };
        let before = graph(vec![node("a", "Const", &[]), split(3)]);
        let after = graph(vec![node("a", "Const", &[]), split(2)]);
        let preserve = vec!["split".to_owned()];
        let expect = Expectations { device_type: "WASM", preserve: &preserve, emits: &[] };
        assert_eq!(
            check_answer(&before, &after.encode_to_vec(), &expect, &Ops),
            Err(Refusal::ChangedOutputs { node: "split".into(), before: 3, after: 2 })
        );
    }

    #[test]
    fn a_loop_back_edge_is_not_a_cycle() {
        let looped = graph(vec![
            node("init", "Const", &[]),
            node("merge", "Merge", &["init", "next"]),
            node("step", "Add", &["merge", "merge:1"]),
            node("next", "NextIteration", &["step"]),
        ]);
        assert_eq!(cycle(&looped), None);
        let mut broken = looped.clone();
        broken.node[3].op = "Add".into();
        assert!(cycle(&broken).is_some());
    }

    #[test]
    fn calls_of_library_functions_count_their_signature() {
        let mut answer = given();
        let signature = OpDef {
            name: "twice".into(),
            output_arg: vec![ArgDef { name: "x".into(), ..Default::default() }; 2],
            ..Default::default()
        };
        answer.library = Some(FunctionDefLibrary {
            function: vec![FunctionDef { signature: Some(signature), ..Default::default() }],
            ..Default::default()
        });
        answer.node.push(node("call", "twice", &["sum"]));
        answer.node.push(node("use", "Add", &["call:1", "call:0"]));
        assert!(check(&answer, &[], &[]).is_ok());
        answer.node.last_mut().unwrap().input[0] = "call:2".into();
        assert!(matches!(check(&answer, &[], &[]), Err(Refusal::NoSuchOutput { outputs: 2, .. })));
    }

    #[test]
    fn inputs_parse_as_tensorflow_writes_them() {
        assert_eq!(parse_input("a"), Some(("a", Some(0))));
        assert_eq!(parse_input("a/b_1:12"), Some(("a/b_1", Some(12))));
        assert_eq!(parse_input("^ctl"), Some(("ctl", None)));
        for bad in ["", "^", ":1", "a:", "a:x", "a:+1", "^a:1", "a:-1"] {
            assert_eq!(parse_input(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn device_strings() {
        for ok in [
            "",
            "/job:localhost/replica:0/task:0/device:WASM:0",
            "/device:CPU:0",
            "/device:GPU:*",
            "/job:worker/task:3",
            "/cpu:0",
            "/job:localhost/replica:0/task:0/device:CPU",
        ] {
            assert!(well_formed_device(ok), "{ok:?}");
        }
        for bad in ["cpu:0", "/device:WASM:x", "/task:0/job:w", "/device:0:0", "/job:", "/device:WASM:0/", "//"] {
            assert!(!well_formed_device(bad), "{bad:?}");
        }
    }
}
