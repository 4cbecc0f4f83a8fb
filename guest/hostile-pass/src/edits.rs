//! The wrong answers: each decodes the graph, spoils one thing the host
//! checks, and encodes it again, so the refusal names that one thing.

use tfwasm_proto::graph::tensor_shape_proto::Dim;
use tfwasm_proto::graph::{attr_value, AttrValue, DataType, GraphDef, NodeDef, TensorProto, TensorShapeProto};
use tfwasm_proto::prost::Message;

/// Fixed-seed map: std's random seed would import `wasi:random`.
type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// An op no TensorFlow registers.
pub const UNKNOWN_OP: &str = "_HostileEverythingFused";

/// `pass-info.emits`: every op an edit adds, so a refusal is about what the
/// op is (unknown, or without a kernel), never that it was undeclared.
pub const EMITS: [&str; 4] = [UNKNOWN_OP, "Const", "MatMul", "NoOp"];

/// Nodes [`Edit::Grow`] appends.
pub const GROWTH: usize = 20_000;

/// The node a dangling input names.
pub const NOWHERE: &str = "hostile/nowhere";

/// One spoiled answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    Garbage,
    DropPreserved,
    DanglingInput,
    UnknownOp,
    Cycle,
    NoKernel,
    /// A node on the device moved to `device:TYPE:9`, which no policy here has.
    MissingDevice,
    /// A node on the device moved to `device:CPU:3`.
    MissingCpu,
    /// A node on the device moved to a CPU of `/job:worker`, which this process is not.
    OtherJob,
    /// A node on the device loses its last data input.
    MissingInput,
    /// A float node on the device claims `T: double`; its inputs stay float.
    WrongDtype,
    /// A `Cast` read by another node casts to another type than its readers take.
    CastDst,
    /// Every node on the device but the function's arguments and results
    /// moves to the CPU: the variables they use stay on the device.
    AllToCpu,
    /// A call on the device asks for XLA again (`_XlaMustCompile: true`).
    XlaOn,
    /// The GraphDef's versions are changed.
    Versions,
    /// [`GROWTH`] `NoOp`s are appended.
    Grow,
    // Semantic edits (verify must catch these): see [`crate::semantic`].
    /// A float32 `AddV2` on a path to a fetch or an update becomes `Sub`.
    AddToSub,
    /// A float32 `Const` feeding a variable update gets another value.
    EditConst,
    /// An `Assign*VariableOp` writes back what it read.
    NeuterAssign,
}

/// What the edits need of `graph-context`.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub device_type: String,
    pub preserve: Vec<String>,
}

#[derive(Debug, PartialEq)]
pub enum Answer {
    /// The graph offers nothing to spoil (e.g. no edge to close a cycle with).
    Unchanged,
    /// The spoiled graph, and the report line for the node it touched.
    Rewritten { graph: Vec<u8>, node: String, reason: String },
}

/// Spoils `graph` (a serialized GraphDef) as `edit` says. Errors when the
/// graph does not decode.
pub fn apply(edit: Edit, graph: &[u8], context: &Context) -> Result<Answer, String> {
    let mut graph = GraphDef::decode(graph).map_err(|e| format!("the graph does not decode: {e}"))?;
    let touched = match edit {
        Edit::Garbage => {
            return Ok(Answer::Rewritten {
                graph: half_of(&graph),
                node: String::new(),
                reason: "half of the graph".into(),
            })
        }
        Edit::DropPreserved => drop_preserved(&mut graph, &context.preserve),
        Edit::DanglingInput => dangling_input(&mut graph, &context.device_type),
        Edit::UnknownOp => unknown_op(&mut graph, &context.device_type),
        Edit::Cycle => cycle(&mut graph),
        Edit::NoKernel => no_kernel(&mut graph, &context.device_type),
        Edit::MissingDevice => {
            let device = format!("device:{}:9", context.device_type);
            move_device_node(&mut graph, &context.device_type, &|prefix| format!("{prefix}/{device}"))
        }
        Edit::MissingCpu => {
            move_device_node(&mut graph, &context.device_type, &|prefix| format!("{prefix}/device:CPU:3"))
        }
        Edit::OtherJob => {
            move_device_node(&mut graph, &context.device_type, &|_| "/job:worker/replica:0/task:0/device:CPU:0".into())
        }
        Edit::MissingInput => missing_input(&mut graph, &context.device_type),
        Edit::WrongDtype => wrong_dtype(&mut graph, &context.device_type),
        Edit::CastDst => cast_dst(&mut graph),
        Edit::AllToCpu => all_to_cpu(&mut graph, &context.device_type),
        Edit::XlaOn => xla_on(&mut graph, &context.device_type),
        Edit::Versions => {
            let versions = graph.versions.get_or_insert_with(Default::default);
            versions.producer += 1;
            Some((String::new(), format!("versions.producer is now {}", versions.producer)))
        }
        Edit::Grow => grow(&mut graph),
        // Semantic edits (verify must catch these).
        Edit::AddToSub => crate::semantic::add_to_sub(&mut graph),
        Edit::EditConst => crate::semantic::edit_const(&mut graph),
        Edit::NeuterAssign => crate::semantic::neuter_assign(&mut graph),
    };
    Ok(match touched {
        None => Answer::Unchanged,
        Some((node, reason)) => Answer::Rewritten { graph: graph.encode_to_vec(), node, reason },
    })
}

/// The node an input reads from: `x`, `x:2` and `^x` all name `x`.
pub(crate) fn source_of(input: &str) -> &str {
    let input = input.strip_prefix('^').unwrap_or(input);
    match input.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => input,
    }
}

fn on_device(node: &NodeDef, device_type: &str) -> bool {
    node.device.contains(&format!("device:{device_type}:"))
}

/// The first half of the graph's bytes: the cut falls inside a field, so
/// they do not decode. A cut that lands between two nodes would still
/// decode, so it moves back a byte until it does not.
fn half_of(graph: &GraphDef) -> Vec<u8> {
    let bytes = graph.encode_to_vec();
    let mut cut = bytes.len() / 2;
    while cut > 0 && GraphDef::decode(&bytes[..cut]).is_ok() {
        cut -= 1;
    }
    if cut == 0 {
        // Too small to cut: a node field that promises 16 bytes and has 3.
        return vec![0x0a, 16, b'h', b'a', b'l'];
    }
    bytes[..cut].to_vec()
}

/// Removes the first node TensorFlow asked to keep (the last node when it
/// asked none) and every edge from it, so nothing but its absence is wrong.
fn drop_preserved(graph: &mut GraphDef, preserve: &[String]) -> Option<(String, String)> {
    let target = preserve
        .iter()
        .find(|name| graph.node.iter().any(|n| &n.name == *name))
        .or_else(|| graph.node.last().map(|n| &n.name))?
        .clone();
    graph.node.retain(|n| n.name != target);
    for node in &mut graph.node {
        node.input.retain(|input| source_of(input) != target);
    }
    Some((target, "removed with its edges".into()))
}

/// A control input from a node that does not exist, on the first node on
/// the device (or the first node).
fn dangling_input(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    let at = graph.node.iter().position(|n| on_device(n, device_type)).or(if graph.node.is_empty() {
        None
    } else {
        Some(0)
    })?;
    let node = &mut graph.node[at];
    node.input.push(format!("^{NOWHERE}"));
    Some((node.name.clone(), format!("now waits for {NOWHERE}")))
}

/// The op of the first computing node on the device (or the first node)
/// becomes [`UNKNOWN_OP`].
fn unknown_op(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    let at = graph.node.iter().position(|n| on_device(n, device_type) && computes(n)).or(if graph.node.is_empty() {
        None
    } else {
        Some(0)
    })?;
    let node = &mut graph.node[at];
    let was = std::mem::replace(&mut node.op, UNKNOWN_OP.into());
    Some((node.name.clone(), format!("{was} as {UNKNOWN_OP}")))
}

/// For the first edge `b -> a` between two nodes that are not a loop's
/// `NextIteration` (whose back edges are legal cycles), adds `^a` to `b`.
fn cycle(graph: &mut GraphDef) -> Option<(String, String)> {
    let looping = |n: &NodeDef| matches!(n.op.as_str(), "NextIteration" | "RefNextIteration");
    let index: Map<&str, usize> = graph.node.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let (a, b) = graph.node.iter().enumerate().filter(|(_, n)| !looping(n)).find_map(|(a, node)| {
        node.input
            .iter()
            .filter_map(|input| index.get(source_of(input)).copied())
            .find(|&b| b != a && !looping(&graph.node[b]))
            .map(|b| (a, b))
    })?;
    let reader = graph.node[a].name.clone();
    let read = &mut graph.node[b];
    read.input.push(format!("^{reader}"));
    Some((read.name.clone(), format!("now waits for {reader}, which reads it")))
}

/// A float64 constant and its Gram matrix, a float64 `MatMul`, on the
/// device (whose MatMul kernels are float32 and half types only).
fn no_kernel(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    // TensorFlow's own spelling of the device when the graph has one.
    let device = graph
        .node
        .iter()
        .find(|n| on_device(n, device_type))
        .map_or_else(|| format!("/device:{device_type}:0"), |n| n.device.clone());
    let float64 = DataType::DtDouble as i32;
    let dtype = |t: i32| AttrValue { value: Some(attr_value::Value::Type(t)) };
    let flag = |b: bool| AttrValue { value: Some(attr_value::Value::B(b)) };
    let matrix = TensorProto {
        dtype: float64,
        tensor_shape: Some(TensorShapeProto {
            dim: vec![Dim { size: 2, name: String::new() }, Dim { size: 2, name: String::new() }],
            unknown_rank: false,
        }),
        double_val: vec![1.0, 2.0, 3.0, 4.0],
        ..Default::default()
    };
    let constant = NodeDef {
        name: "hostile/float64".into(),
        op: "Const".into(),
        device: device.clone(),
        attr: [
            ("dtype".to_string(), dtype(float64)),
            ("value".to_string(), AttrValue { value: Some(attr_value::Value::Tensor(matrix)) }),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let gram = NodeDef {
        name: "hostile/gram".into(),
        op: "MatMul".into(),
        input: vec![constant.name.clone(), constant.name.clone()],
        device,
        attr: [
            ("T".to_string(), dtype(float64)),
            ("transpose_a".to_string(), flag(false)),
            ("transpose_b".to_string(), flag(true)),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let name = gram.name.clone();
    graph.node.push(constant);
    graph.node.push(gram);
    Some((name, format!("a float64 MatMul on the {device_type} device")))
}

/// The job, replica and task of a device name (`/job:localhost/replica:0/task:0`).
fn prefix_of(device: &str) -> &str {
    device.split_once("/device:").map_or("/job:localhost/replica:0/task:0", |(prefix, _)| prefix)
}

/// Whether `node` computes (is not an argument, result, constant or no-op).
fn computes(node: &NodeDef) -> bool {
    !matches!(node.op.as_str(), "_Arg" | "_Retval" | "Const" | "NoOp")
}

/// The first computing node on the device moves to `to(its prefix)`.
fn move_device_node(graph: &mut GraphDef, device_type: &str, to: &dyn Fn(&str) -> String) -> Option<(String, String)> {
    let node = graph.node.iter_mut().find(|n| on_device(n, device_type) && computes(n))?;
    node.device = to(prefix_of(&node.device));
    Some((node.name.clone(), format!("moved to {}", node.device)))
}

fn data_inputs(node: &NodeDef) -> usize {
    node.input.iter().filter(|input| !input.starts_with('^')).count()
}

/// The first node on the device with two data inputs or more loses its last.
fn missing_input(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    let node = graph.node.iter_mut().find(|n| on_device(n, device_type) && computes(n) && data_inputs(n) >= 2)?;
    let last = data_inputs(node) - 1;
    let dropped = node.input.remove(last);
    Some((node.name.clone(), format!("lost its input {dropped}")))
}

/// The first float node on the device with a data input claims float64.
fn wrong_dtype(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    let float = attr_value::Value::Type(DataType::DtFloat as i32);
    let node = graph.node.iter_mut().find(|n| {
        on_device(n, device_type)
            && computes(n)
            && data_inputs(n) >= 1
            && n.attr.get("T").is_some_and(|t| t.value.as_ref() == Some(&float))
    })?;
    node.attr.insert("T".into(), AttrValue { value: Some(attr_value::Value::Type(DataType::DtDouble as i32)) });
    Some((node.name.clone(), "T is now double; its inputs are float".into()))
}

/// The first `Cast` whose output another node reads casts to another type.
fn cast_dst(graph: &mut GraphDef) -> Option<(String, String)> {
    let read: std::collections::HashSet<String, foldhash::fast::FixedState> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().filter(|i| !i.starts_with('^')).map(|i| source_of(i).to_owned()))
        .collect();
    let node = graph.node.iter_mut().find(|n| n.op == "Cast" && read.contains(&n.name))?;
    let float = DataType::DtFloat as i32;
    let to = match node.attr.get("DstT").and_then(|t| t.value.as_ref()) {
        Some(attr_value::Value::Type(t)) if *t == float => DataType::DtInt32 as i32,
        _ => float,
    };
    node.attr.insert("DstT".into(), AttrValue { value: Some(attr_value::Value::Type(to)) });
    Some((node.name.clone(), format!("DstT is now type {to}")))
}

/// Every node on the device but `_Arg`/`_Retval` moves to the graph's CPU.
fn all_to_cpu(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    let cpu = format!("{}/device:CPU:0", prefix_of(&graph.node.iter().find(|n| on_device(n, device_type))?.device));
    let mut moved = Vec::new();
    for node in graph.node.iter_mut() {
        if on_device(node, device_type) && !matches!(node.op.as_str(), "_Arg" | "_Retval") {
            node.device = cpu.clone();
            moved.push(node.name.clone());
        }
    }
    let first = moved.first()?.clone();
    Some((first, format!("{} nodes moved to {cpu}", moved.len())))
}

/// The first call on the device that was jit-compiled asks for XLA again.
fn xla_on(graph: &mut GraphDef, device_type: &str) -> Option<(String, String)> {
    let node = graph.node.iter_mut().find(|n| on_device(n, device_type) && n.attr.contains_key("_XlaMustCompile"))?;
    node.attr.insert("_XlaMustCompile".into(), AttrValue { value: Some(attr_value::Value::B(true)) });
    Some((node.name.clone(), "_XlaMustCompile is true again".into()))
}

/// [`GROWTH`] `NoOp`s on the first placed node's device.
fn grow(graph: &mut GraphDef) -> Option<(String, String)> {
    let device = graph.node.iter().find(|n| !n.device.is_empty()).map(|n| n.device.clone()).unwrap_or_default();
    graph.node.extend((0..GROWTH).map(|i| NodeDef {
        name: format!("hostile/grow/{i}"),
        op: "NoOp".into(),
        device: device.clone(),
        ..Default::default()
    }));
    Some(("hostile/grow/0".into(), format!("{GROWTH} NoOps appended")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERAS_STEP: &[u8] = include_bytes!("../../../tests/fixtures/graphs/keras_mlp_step.pb");
    const WASM: &str = "/job:localhost/replica:0/task:0/device:WASM:0";

    fn node(name: &str, op: &str, inputs: &[&str], device: &str) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|i| i.to_string()).collect(),
            device: device.into(),
            ..Default::default()
        }
    }

    /// x -> relu (on the device) -> out
    fn small() -> Vec<u8> {
        GraphDef {
            node: vec![
                node("x", "_Arg", &[], ""),
                node("relu", "Relu", &["x"], WASM),
                node("out", "_Retval", &["relu:0"], ""),
            ],
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn context(preserve: &[&str]) -> Context {
        Context { device_type: "WASM".into(), preserve: preserve.iter().map(|p| p.to_string()).collect() }
    }

    fn spoiled(edit: Edit, graph: &[u8], context: &Context) -> (GraphDef, String) {
        match apply(edit, graph, context).unwrap() {
            Answer::Rewritten { graph, node, .. } => (GraphDef::decode(graph.as_slice()).unwrap(), node),
            Answer::Unchanged => panic!("{edit:?} left the graph"),
        }
    }

    fn find<'g>(graph: &'g GraphDef, name: &str) -> &'g NodeDef {
        graph.node.iter().find(|n| n.name == name).unwrap()
    }

    #[test]
    fn garbage_does_not_decode() {
        for graph in [KERAS_STEP.to_vec(), small(), Vec::new()] {
            let Answer::Rewritten { graph: answer, .. } = apply(Edit::Garbage, &graph, &context(&[])).unwrap() else {
                panic!("garbage answers")
            };
            assert!(GraphDef::decode(answer.as_slice()).is_err(), "{} bytes decode", answer.len());
        }
    }

    #[test]
    fn drop_preserved_removes_the_kept_node_and_its_edges() {
        let (graph, node) = spoiled(Edit::DropPreserved, &small(), &context(&["nothing-like-it", "relu"]));
        assert_eq!(node, "relu");
        assert_eq!(graph.node.len(), 2);
        assert!(find(&graph, "out").input.is_empty());
        // Nothing preserved: the last node goes.
        let (graph, node) = spoiled(Edit::DropPreserved, &small(), &context(&[]));
        assert_eq!((node.as_str(), graph.node.len()), ("out", 2));
    }

    #[test]
    fn dangling_input_lands_on_the_device() {
        let (graph, node) = spoiled(Edit::DanglingInput, &small(), &context(&[]));
        assert_eq!(node, "relu");
        assert_eq!(find(&graph, "relu").input, ["x", "^hostile/nowhere"]);
    }

    #[test]
    fn unknown_op_renames_a_computing_node() {
        let (graph, node) = spoiled(Edit::UnknownOp, &small(), &context(&[]));
        assert_eq!(find(&graph, &node).op, UNKNOWN_OP);
        assert_eq!(node, "relu");
    }

    #[test]
    fn cycle_closes_an_edge_into_a_loop() {
        let (graph, closed) = spoiled(Edit::Cycle, &small(), &context(&[]));
        assert_eq!(closed, "x");
        assert_eq!(find(&graph, "x").input, ["^relu"]);
        // A back edge out of NextIteration is a loop's, not a cycle to close with.
        let looped = GraphDef {
            node: vec![node("next", "NextIteration", &["merge"], ""), node("merge", "Merge", &["next"], "")],
            ..Default::default()
        };
        assert_eq!(apply(Edit::Cycle, &looped.encode_to_vec(), &context(&[])).unwrap(), Answer::Unchanged);
    }

    #[test]
    fn no_kernel_places_a_float64_matmul_on_the_device() {
        let (graph, node) = spoiled(Edit::NoKernel, KERAS_STEP, &context(&[]));
        let gram = find(&graph, &node);
        assert_eq!((gram.op.as_str(), gram.device.as_str()), ("MatMul", WASM));
        assert_eq!(gram.attr["T"].value, Some(attr_value::Value::Type(DataType::DtDouble as i32)));
        assert!(graph.node.iter().any(|n| n.name == gram.input[0] && n.op == "Const"));
        // Every op an edit adds is declared.
        assert!(EMITS.contains(&"MatMul") && EMITS.contains(&"Const"));
    }

    #[test]
    fn structural_edits_spoil_one_thing_of_a_captured_step() {
        let given = GraphDef::decode(KERAS_STEP).unwrap();
        for edit in [Edit::MissingDevice, Edit::MissingCpu, Edit::OtherJob] {
            let (graph, node) = spoiled(edit, KERAS_STEP, &context(&[]));
            let device = &find(&graph, &node).device;
            assert!(!given.node.iter().any(|n| &n.device == device), "{edit:?}: {device} is new");
        }
        let (graph, node) = spoiled(Edit::MissingInput, KERAS_STEP, &context(&[]));
        let before = find(&given, &node);
        assert_eq!(data_inputs(find(&graph, &node)) + 1, data_inputs(before));
        let (graph, node) = spoiled(Edit::WrongDtype, KERAS_STEP, &context(&[]));
        assert_eq!(find(&graph, &node).attr["T"].value, Some(attr_value::Value::Type(DataType::DtDouble as i32)));
        let (graph, node) = spoiled(Edit::AllToCpu, KERAS_STEP, &context(&[]));
        assert!(find(&graph, &node).device.ends_with("/device:CPU:0"));
        assert!(graph.node.iter().all(|n| !on_device(n, "WASM") || n.op == "_Arg" || n.op == "_Retval"));
        let (graph, _) = spoiled(Edit::Versions, KERAS_STEP, &context(&[]));
        assert_ne!(graph.versions, given.versions);
        let (graph, _) = spoiled(Edit::Grow, KERAS_STEP, &context(&[]));
        assert_eq!(graph.node.len(), given.node.len() + GROWTH);
    }

    #[test]
    fn cast_and_xla_edits_find_their_nodes() {
        let mut graph = GraphDef::decode(small().as_slice()).unwrap();
        graph.node.push(node("cast", "Cast", &["x"], WASM));
        graph
            .node
            .last_mut()
            .unwrap()
            .attr
            .insert("DstT".into(), AttrValue { value: Some(attr_value::Value::Type(DataType::DtFloat as i32)) });
        let bytes = graph.encode_to_vec();
        assert_eq!(apply(Edit::CastDst, &bytes, &context(&[])).unwrap(), Answer::Unchanged, "nobody reads it");
        graph.node[1].input[0] = "cast".into();
        let (spoilt, node) = spoiled(Edit::CastDst, &graph.encode_to_vec(), &context(&[]));
        assert_eq!(node, "cast");
        assert_eq!(find(&spoilt, "cast").attr["DstT"].value, Some(attr_value::Value::Type(DataType::DtInt32 as i32)));

        assert_eq!(apply(Edit::XlaOn, &small(), &context(&[])).unwrap(), Answer::Unchanged);
        graph.node[1].attr.insert("_XlaMustCompile".into(), AttrValue { value: Some(attr_value::Value::B(false)) });
        let (spoilt, node) = spoiled(Edit::XlaOn, &graph.encode_to_vec(), &context(&[]));
        assert_eq!(find(&spoilt, &node).attr["_XlaMustCompile"].value, Some(attr_value::Value::B(true)));
    }

    #[test]
    fn edits_keep_the_rest_of_a_captured_graph() {
        let given = GraphDef::decode(KERAS_STEP).unwrap();
        for edit in [Edit::DanglingInput, Edit::UnknownOp, Edit::Cycle] {
            let (graph, _) = spoiled(edit, KERAS_STEP, &context(&[]));
            assert_eq!(graph.node.len(), given.node.len(), "{edit:?}");
            let changed = graph.node.iter().zip(&given.node).filter(|(a, b)| a != b).count();
            assert_eq!(changed, 1, "{edit:?} changes one node");
        }
    }
}
