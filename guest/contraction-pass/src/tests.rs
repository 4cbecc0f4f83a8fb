//! The pass on small hand-made graphs: what fuses, where a chain stops, and
//! that what it writes is a node TensorFlow 2.21 accepts.

use tfwasm_proto::graph::{attr_value, AttrValue, GraphDef, NodeDef, OpList};
use tfwasm_proto::prost::Message;

use crate::node::{int_list, value, DT_FLOAT};
use crate::pass::{optimize, Answer, Context, Kernel, Plan, Rewrite, DEVICE_ACTIVATIONS};

const WASM: &str = "/job:localhost/replica:0/task:0/device:WASM:0";
const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
const DT_DOUBLE: i32 = 2;

fn ty(t: i32) -> AttrValue {
    value(attr_value::Value::Type(t))
}

fn s(text: &str) -> AttrValue {
    value(attr_value::Value::S(text.as_bytes().to_vec()))
}

fn node(name: &str, op: &str, input: &[&str], attrs: &[(&str, AttrValue)]) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: input.iter().map(|i| i.to_string()).collect(),
        device: WASM.into(),
        attr: attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        ..Default::default()
    }
}

fn float(name: &str, op: &str, input: &[&str]) -> NodeDef {
    node(name, op, input, &[("T", ty(DT_FLOAT))])
}

fn matmul(name: &str, a: &str, b: &str) -> NodeDef {
    let f = value(attr_value::Value::B(false));
    let t = value(attr_value::Value::B(true));
    node(
        name,
        "MatMul",
        &[a, b],
        &[("T", ty(DT_FLOAT)), ("transpose_a", f.clone()), ("transpose_b", t), ("grad_a", f.clone()), ("grad_b", f)],
    )
}

fn conv2d(name: &str, input: &str, filter: &str) -> NodeDef {
    node(
        name,
        "Conv2D",
        &[input, filter],
        &[
            ("T", ty(DT_FLOAT)),
            ("strides", int_list(&[1, 2, 2, 1])),
            ("padding", s("EXPLICIT")),
            ("explicit_paddings", int_list(&[0, 0, 1, 1, 1, 1, 0, 0])),
            ("data_format", s("NHWC")),
            ("dilations", int_list(&[1, 1, 1, 1])),
            ("use_cudnn_on_gpu", value(attr_value::Value::B(true))),
        ],
    )
}

fn bias_add(name: &str, x: &str, bias: &str) -> NodeDef {
    node(name, "BiasAdd", &[x, bias], &[("T", ty(DT_FLOAT)), ("data_format", s("NHWC"))])
}

fn leaky_relu(name: &str, x: &str, alpha: f32) -> NodeDef {
    node(name, "LeakyRelu", &[x], &[("T", ty(DT_FLOAT)), ("alpha", value(attr_value::Value::F(alpha)))])
}

/// `x`, `w`, `b` → `mm` (or `conv`) → `bias` → `act` (when given) → `out`.
fn chain(conv: bool, activation: Option<&str>) -> Vec<NodeDef> {
    let mut nodes = vec![
        float("x", "Placeholder", &[]),
        float("w", "Const", &[]),
        float("b", "Const", &[]),
        if conv { conv2d("mm", "x", "w") } else { matmul("mm", "x", "w") },
        bias_add("bias", "mm", "b"),
    ];
    let last = match activation {
        Some("LeakyRelu") => {
            nodes.push(leaky_relu("act", "bias", 0.3));
            "act"
        }
        Some(op) => {
            nodes.push(float("act", op, &["bias"]));
            "act"
        }
        None => "bias",
    };
    nodes.push(float("out", "Identity", &[last]));
    nodes
}

fn kernels() -> Vec<Kernel> {
    vec![
        Kernel { op: "_FusedMatMul".into(), types: vec![("T".into(), vec![1])] },
        Kernel { op: "_FusedConv2D".into(), types: vec![("T".into(), vec![1]), ("TArgs".into(), vec![1])] },
    ]
}

fn context() -> Context {
    Context { device_type: "WASM".into(), kernels: kernels(), ..Default::default() }
}

fn run_with(nodes: Vec<NodeDef>, context: &Context) -> Option<(GraphDef, Vec<Rewrite>)> {
    let (plan, _) = Plan::new(context).unwrap();
    let bytes = GraphDef { node: nodes, ..Default::default() }.encode_to_vec();
    match optimize(&bytes, context, &plan).unwrap() {
        Answer::Unchanged => None,
        Answer::Rewritten { graph, report } => {
            let graph = GraphDef::decode(graph.as_slice()).unwrap();
            // A second run on the answer changes nothing.
            assert_eq!(optimize(&graph.encode_to_vec(), context, &plan).unwrap(), Answer::Unchanged);
            Some((graph, report))
        }
    }
}

fn run(nodes: Vec<NodeDef>) -> Option<(GraphDef, Vec<Rewrite>)> {
    run_with(nodes, &context())
}

fn find<'g>(graph: &'g GraphDef, name: &str) -> Option<&'g NodeDef> {
    graph.node.iter().find(|n| n.name == name)
}

fn fused_ops(node: &NodeDef) -> Vec<String> {
    match &node.attr["fused_ops"].value {
        Some(attr_value::Value::List(list)) => list.s.iter().map(|s| String::from_utf8(s.clone()).unwrap()).collect(),
        other => panic!("fused_ops is {other:?}"),
    }
}

/// Names and ops of the graph's nodes, in order.
fn ops(graph: &GraphDef) -> Vec<(&str, &str)> {
    graph.node.iter().map(|n| (n.name.as_str(), n.op.as_str())).collect()
}

#[test]
fn every_activation_fuses_after_either_product() {
    for conv in [false, true] {
        let (product, fused) = if conv { ("Conv2D", "_FusedConv2D") } else { ("MatMul", "_FusedMatMul") };
        for activation in DEVICE_ACTIVATIONS {
            let (graph, report) = run(chain(conv, Some(activation))).expect("fused");
            assert_eq!(
                ops(&graph),
                [("x", "Placeholder"), ("w", "Const"), ("b", "Const"), ("act", fused), ("out", "Identity")]
            );
            let node = find(&graph, "act").unwrap();
            assert_eq!(node.input, ["x", "w", "b"]);
            assert_eq!(node.device, WASM);
            assert_eq!(fused_ops(node), ["BiasAdd", activation]);
            assert_eq!(
                report,
                [Rewrite {
                    node: "act".into(),
                    reason: format!(
                        "float32 {product} + BiasAdd + {activation} as one {fused} [BiasAdd, {activation}]"
                    )
                }]
            );
            let alpha = if *activation == "LeakyRelu" { 0.3 } else { 0.2 };
            assert_eq!(node.attr["leakyrelu_alpha"], value(attr_value::Value::F(alpha)), "{activation}");
            assert_eq!(node.attr["num_args"], value(attr_value::Value::I(1)));
            assert_eq!(node.attr["T"], ty(DT_FLOAT));
        }
        // Without an activation the bias alone fuses, under BiasAdd's name.
        let (graph, _) = run(chain(conv, None)).expect("fused");
        assert_eq!(ops(&graph)[3], ("bias", fused));
        assert_eq!(fused_ops(find(&graph, "bias").unwrap()), ["BiasAdd"]);
        // An activation the fused ops do not take stays after the fused bias.
        let (graph, _) = run(chain(conv, Some("Selu"))).expect("fused");
        assert_eq!(ops(&graph)[3..5], [("bias", fused), ("act", "Selu")]);
    }
}

#[test]
fn the_fused_nodes_copy_the_products_attributes() {
    let (graph, _) = run(chain(false, Some("Relu"))).unwrap();
    let node = find(&graph, "act").unwrap();
    assert_eq!(node.attr["transpose_a"], value(attr_value::Value::B(false)));
    assert_eq!(node.attr["transpose_b"], value(attr_value::Value::B(true)));
    assert!(!node.attr.contains_key("grad_a"), "_FusedMatMul has no grad_a");

    let (graph, _) = run(chain(true, Some("Relu"))).unwrap();
    let node = find(&graph, "act").unwrap();
    assert_eq!(node.attr["strides"], int_list(&[1, 2, 2, 1]));
    assert_eq!(node.attr["padding"], s("EXPLICIT"));
    assert_eq!(node.attr["explicit_paddings"], int_list(&[0, 0, 1, 1, 1, 1, 0, 0]));
    assert_eq!(node.attr["data_format"], s("NHWC"));
    assert_eq!(node.attr["filter_format"], s("HWIO"));
    assert_eq!(node.attr["num_host_args"], value(attr_value::Value::I(0)));
    let targs = value(attr_value::Value::List(attr_value::ListValue { r#type: vec![DT_FLOAT], ..Default::default() }));
    assert_eq!(node.attr["TArgs"], targs);

    // A Conv2D with only the attributes it must have gets the defaults.
    let mut nodes = chain(true, None);
    nodes[3].attr.retain(|k, _| matches!(k.as_str(), "T" | "strides" | "padding"));
    let (graph, _) = run(nodes).unwrap();
    let node = find(&graph, "bias").unwrap();
    assert_eq!(node.attr["dilations"], int_list(&[1, 1, 1, 1]));
    assert_eq!(node.attr["explicit_paddings"], int_list(&[]));
}

#[test]
fn control_inputs_of_every_link_move_to_the_fused_node() {
    let mut nodes = chain(false, Some("Tanh"));
    nodes.insert(0, float("gate", "NoOp", &[]));
    nodes[4].input.push("^gate".into()); // mm
    nodes[5].input.push("^x".into()); // bias
    nodes[6].input.extend(["^gate".into(), "^w".into()]); // act
    let (graph, _) = run(nodes).unwrap();
    assert_eq!(find(&graph, "act").unwrap().input, ["x", "w", "b", "^gate", "^x", "^w"]);
}

#[test]
fn a_chain_stops_where_an_intermediate_has_another_reader() {
    // Training: TensorFlow's LeakyReluGrad reads the activation's input;
    // any other reader of the sum (here a Relu6Grad fed the features, as
    // a hand-written gradient may) stops the chain there too.
    for (activation, grad) in [("LeakyRelu", "LeakyReluGrad"), ("Relu6", "Relu6Grad")] {
        let mut nodes = chain(false, Some(activation));
        nodes.push(float("dy", "Placeholder", &[]));
        nodes.push(float("grad", grad, &["dy", "bias"]));
        let (graph, report) = run(nodes).unwrap();
        assert_eq!(report.len(), 1);
        assert_eq!(ops(&graph)[3..5], [("bias", "_FusedMatMul"), ("act", activation)]);
        assert_eq!(find(&graph, "grad").unwrap().input, ["dy", "bias"]);
    }
    // ReluGrad, TanhGrad, ... and the MatMul gradients read the activation's
    // output: the whole chain fuses.
    let mut nodes = chain(false, Some("Relu"));
    nodes.push(float("dy", "Placeholder", &[]));
    nodes.push(float("grad", "ReluGrad", &["dy", "act"]));
    nodes.push(matmul("grad_w", "act", "dy"));
    nodes.push(float("grad_b", "BiasAddGrad", &["dy"]));
    let (graph, _) = run(nodes).unwrap();
    assert_eq!(find(&graph, "act").unwrap().op, "_FusedMatMul");
    assert_eq!(fused_ops(find(&graph, "act").unwrap()), ["BiasAdd", "Relu"]);

    // A second reader of the product: nothing fuses.
    let mut nodes = chain(false, Some("Relu"));
    nodes.push(float("peek", "Identity", &["mm"]));
    assert_eq!(run(nodes), None);
    // ... also when it reads it as `mm:0`, or twice through one node.
    let mut nodes = chain(false, Some("Relu"));
    nodes.push(float("peek", "Identity", &["mm:0"]));
    assert_eq!(run(nodes), None);
    let mut nodes = chain(true, None);
    nodes[4].input[1] = "mm".into(); // BiasAdd(mm, mm)
    assert_eq!(run(nodes), None);
    // The product read as the bias, not the value: no chain.
    let mut nodes = chain(false, None);
    nodes[4].input = vec!["b".into(), "mm".into()];
    assert_eq!(run(nodes), None);
    // Control edges count as readers.
    let mut nodes = chain(false, Some("Relu"));
    nodes.push(float("after", "NoOp", &["^mm"]));
    assert_eq!(run(nodes), None);
    let mut nodes = chain(true, Some("Elu"));
    nodes.push(float("after", "NoOp", &["^bias"]));
    let (graph, _) = run(nodes).unwrap();
    assert_eq!(ops(&graph)[3..5], [("bias", "_FusedConv2D"), ("act", "Elu")]);
}

#[test]
fn preserved_and_fetched_intermediates_block_and_a_kept_last_node_does_not() {
    let with = |preserve: &[&str], fetch: &[&str]| Context {
        preserve: preserve.iter().map(|s| s.to_string()).collect(),
        fetch: fetch.iter().map(|s| s.to_string()).collect(),
        ..context()
    };
    assert_eq!(run_with(chain(false, Some("Sigmoid")), &with(&["mm"], &[])), None);
    assert_eq!(run_with(chain(false, Some("Sigmoid")), &with(&[], &["mm"])), None);
    for context in [with(&["bias"], &[]), with(&[], &["bias"])] {
        let (graph, _) = run_with(chain(false, Some("Sigmoid")), &context).unwrap();
        assert_eq!(ops(&graph)[3..5], [("bias", "_FusedMatMul"), ("act", "Sigmoid")]);
    }
    let (graph, _) = run_with(chain(false, Some("Sigmoid")), &with(&["act"], &["act"])).unwrap();
    assert_eq!(fused_ops(find(&graph, "act").unwrap()), ["BiasAdd", "Sigmoid"]);
}

#[test]
fn other_types_layouts_devices_and_attributes_are_left_alone() {
    let retype = |index: usize| {
        let mut nodes = chain(false, Some("Relu"));
        nodes[index].attr.insert("T".into(), ty(DT_DOUBLE));
        nodes
    };
    assert_eq!(run(retype(3)), None, "a float64 MatMul");
    assert_eq!(run(retype(4)), None, "a float64 BiasAdd");
    let (graph, _) = run(retype(5)).unwrap();
    assert_eq!(ops(&graph)[3..5], [("bias", "_FusedMatMul"), ("act", "Relu")], "a float64 Relu stays");

    let mut nodes = chain(false, Some("Relu"));
    nodes[4].attr.insert("data_format".into(), s("NCHW"));
    assert_eq!(run(nodes), None, "an NCHW BiasAdd");
    let mut nodes = chain(true, Some("Relu"));
    nodes[3].attr.insert("data_format".into(), s("NCHW"));
    assert_eq!(run(nodes), None, "an NCHW Conv2D");
    let mut nodes = chain(false, None);
    nodes[4].attr.remove("data_format");
    assert!(run(nodes).is_some(), "BiasAdd without data_format is NHWC");

    let mut nodes = chain(false, Some("Relu"));
    nodes[3].device = CPU.into();
    assert_eq!(run(nodes), None, "a MatMul on the CPU");
    let mut nodes = chain(false, Some("Relu"));
    nodes[4].device = "/job:localhost/replica:0/task:0/device:WASM:1".into();
    assert_eq!(run(nodes), None, "a BiasAdd on another WASM device");
    let mut nodes = chain(false, Some("Relu"));
    nodes[5].device = CPU.into();
    let (graph, _) = run(nodes).unwrap();
    assert_eq!(ops(&graph)[3..5], [("bias", "_FusedMatMul"), ("act", "Relu")], "a Relu on the CPU stays");

    let mut nodes = chain(false, Some("Relu"));
    nodes[3].attr.insert("future".into(), value(attr_value::Value::B(true)));
    assert_eq!(run(nodes), None, "an attribute the rewrite does not know");
    let mut nodes = chain(false, Some("Relu"));
    nodes[3].attr.insert("_class".into(), value(attr_value::Value::B(true)));
    assert!(run(nodes).is_some(), "annotations do not matter");

    let mut nodes = chain(false, Some("Relu"));
    nodes.push(float("mm", "Const", &[]));
    assert_eq!(run(nodes), None, "two nodes named mm");
}

#[test]
fn the_options_and_the_kernels_decide_what_fuses() {
    let with = |options: &[(&str, &str)]| Context {
        options: options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..context()
    };
    let (graph, _) = run_with(chain(false, Some("Tanh")), &with(&[("activations", "Relu, Elu")])).unwrap();
    assert_eq!(ops(&graph)[3..5], [("bias", "_FusedMatMul"), ("act", "Tanh")]);
    let (graph, _) = run_with(chain(false, Some("Elu")), &with(&[("activations", "Relu, Elu")])).unwrap();
    assert_eq!(fused_ops(find(&graph, "act").unwrap()), ["BiasAdd", "Elu"]);
    let (graph, _) = run_with(chain(false, Some("Relu")), &with(&[("activations", "")])).unwrap();
    assert_eq!(ops(&graph)[3..5], [("bias", "_FusedMatMul"), ("act", "Relu")]);
    assert_eq!(run_with(chain(false, Some("Relu")), &with(&[("matmul", "false")])), None);
    assert!(run_with(chain(true, Some("Relu")), &with(&[("matmul", "false")])).is_some());
    assert_eq!(run_with(chain(true, Some("Relu")), &with(&[("conv2d", "false")])), None);

    let error = Plan::new(&with(&[("activations", "Relu,Gelu")])).unwrap_err();
    assert!(error.contains("\"Gelu\"") && error.contains("LeakyRelu"), "{error}");
    assert!(Plan::new(&with(&[("conv2d", "no")])).unwrap_err().contains("conv2d"));
    let (_, notes) = Plan::new(&with(&[("speed", "max")])).unwrap();
    assert_eq!(notes, ["ignoring unknown option \"speed\""]);

    // No float32 kernel for a fused op: its chains stay.
    let mut context = context();
    context.kernels[0].types[0].1 = vec![DT_DOUBLE as u32];
    let (plan, notes) = Plan::new(&context).unwrap();
    assert_eq!(plan.products, [crate::contraction::Product::Conv2D]);
    assert!(notes[0].contains("no float32 kernel for _FusedMatMul"), "{notes:?}");
    assert_eq!(run_with(chain(false, Some("Relu")), &context), None);
    context.kernels.pop();
    assert_eq!(run_with(chain(true, Some("Relu")), &context), None);
    let plan = Plan::new(&context).unwrap().0;
    assert_eq!(optimize(b"\xff\xff", &context, &plan), Ok(Answer::Unchanged), "nothing to do: not even decoded");
}

#[test]
fn garbage_is_an_error() {
    let (plan, _) = Plan::new(&context()).unwrap();
    assert!(optimize(&[0x0a, 0x05, 1], &context(), &plan).unwrap_err().contains("does not decode"));
    assert_eq!(optimize(&[], &context(), &plan), Ok(Answer::Unchanged));
}

/// TensorFlow 2.21's op registry as the repository keeps it.
fn tensorflow_ops() -> OpList {
    OpList::decode(&include_bytes!("../../../proto/ops/tensorflow-2.21.oplist.pb")[..]).unwrap()
}

#[test]
fn fused_nodes_carry_what_tensorflow_requires_and_nothing_it_does_not_know() {
    let registry = tensorflow_ops();
    let op_def = |name: &str| registry.op.iter().find(|op| op.name == name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(<crate::pass::ContractionPass as tfwasm_pass_sdk::Pass>::emits(), ["_FusedMatMul", "_FusedConv2D"]);
    for conv in [false, true] {
        let mut nodes = chain(conv, Some("Relu"));
        nodes[3].attr.retain(|k, _| matches!(k.as_str(), "T" | "strides" | "padding"));
        let (graph, _) = run(nodes).unwrap();
        let node = find(&graph, "act").unwrap();
        let def = op_def(&node.op);
        for attr in &def.attr {
            assert!(
                attr.default_value.is_some() || node.attr.contains_key(&attr.name),
                "{}: no {}, which has no default",
                node.op,
                attr.name
            );
        }
        for key in node.attr.keys() {
            assert!(def.attr.iter().any(|a| &a.name == key), "{}: {key} is no attribute of the op", node.op);
        }
        // The inputs: a, b (or input, filter), one arg, no host args.
        assert_eq!(node.input.len(), 3);
    }
}

#[test]
fn the_products_attributes_are_those_of_tensorflow() {
    let registry = tensorflow_ops();
    for product in crate::contraction::Product::ALL {
        let def = registry.op.iter().find(|op| op.name == product.op()).unwrap();
        let mut theirs: Vec<&str> = def.attr.iter().map(|a| a.name.as_str()).collect();
        let mut ours = product.known_attrs().to_vec();
        theirs.sort();
        ours.sort();
        assert_eq!(ours, theirs, "{}", product.op());
    }
    for (op, extra) in crate::contraction::ACTIVATIONS {
        let def = registry.op.iter().find(|d| d.name == *op).unwrap();
        let theirs: Vec<&str> = def.attr.iter().map(|a| a.name.as_str()).filter(|a| *a != "T").collect();
        assert_eq!(&theirs, extra, "{op}");
    }
}
