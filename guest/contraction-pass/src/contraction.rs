//! Chains of a contraction, its bias and an activation on the device as
//! one node of TensorFlow's fused contraction ops.
//!
//! A chain is a `MatMul` or an NHWC `Conv2D` (the product), the `BiasAdd`
//! that reads its output, and, when one of the allowed activations reads
//! that sum, the activation. It becomes `_FusedMatMul` or `_FusedConv2D`
//! with `fused_ops = [BiasAdd]` or `[BiasAdd, <activation>]` and inputs
//! `(product's two inputs, bias)`, then every member's control inputs.
//!
//! The fused node takes the name and device of the chain's last node, so
//! nothing that reads it changes; the nodes before it disappear, which is
//! only right when nothing else sees their outputs. So a link joins the
//! chain only when the output of the link before it is read exactly once,
//! by that link, through its first input, and by nothing else: no second
//! data reader, no control edge, and not a node TensorFlow asked to keep or
//! fetch. A training graph is the common case where this stops a chain
//! early: TensorFlow's gradient of `LeakyRelu` reads the activation's input
//! (`LeakyReluGrad(dy, features)`), so there only the product and `BiasAdd`
//! fuse, and the activation stays. The other activations' gradients read
//! their output, which the fused node still makes.
//!
//! Every link must be float32, placed on one device of our type (the same
//! device string for all), with no attribute the rewrite does not know
//! (a future attribute might change what the op computes); `BiasAdd` and
//! `Conv2D` must be NHWC: the fused kernels add the bias along the last
//! dimension. A graph with two nodes of one name is left alone.

use tfwasm_proto::graph::{attr_value, GraphDef, NodeDef};

use crate::node::{
    attr, control_inputs, data_inputs, float_attr, int_list, on_device, string_attr, string_list, type_attr, type_list,
    value, Map, Source, DT_FLOAT,
};

/// A contraction the rewrite fuses into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Product {
    MatMul,
    Conv2D,
}

impl Product {
    pub const ALL: [Product; 2] = [Product::MatMul, Product::Conv2D];

    /// The op of the chain's first node.
    pub fn op(self) -> &'static str {
        match self {
            Product::MatMul => "MatMul",
            Product::Conv2D => "Conv2D",
        }
    }

    /// The op the chain becomes.
    pub fn fused_op(self) -> &'static str {
        match self {
            Product::MatMul => "_FusedMatMul",
            Product::Conv2D => "_FusedConv2D",
        }
    }

    fn of(op: &str) -> Option<Product> {
        Product::ALL.into_iter().find(|p| p.op() == op)
    }

    /// The attributes the product's op has in TensorFlow 2.21, all of which
    /// the fused op either has too or may ignore (`grad_a`, `grad_b` only
    /// tell the gradient code which operand a `MatMul` differentiates).
    pub fn known_attrs(self) -> &'static [&'static str] {
        match self {
            Product::MatMul => &["T", "transpose_a", "transpose_b", "grad_a", "grad_b"],
            Product::Conv2D => {
                &["T", "strides", "use_cudnn_on_gpu", "padding", "explicit_paddings", "data_format", "dilations"]
            }
        }
    }
}

/// The activations TensorFlow's fused contractions name in `fused_ops`
/// under their own op names, with the attributes each op has besides `T`.
/// Which of them the device implements is the pass's plan
/// ([`crate::pass::Plan`]); all six, today.
pub const ACTIVATIONS: &[(&str, &[&str])] =
    &[("Relu", &[]), ("Relu6", &[]), ("Elu", &[]), ("LeakyRelu", &["alpha"]), ("Tanh", &[]), ("Sigmoid", &[])];

/// `leakyrelu_alpha` and `epsilon` as TensorFlow defaults them.
const DEFAULT_ALPHA: f32 = 0.2;
const DEFAULT_EPSILON: f32 = 1e-4;

/// What may be fused, and where.
pub struct Rules<'a> {
    /// Nodes whose device string names `device:<device_type>:N` are ours.
    pub device_type: &'a str,
    /// The products to fuse into.
    pub products: &'a [Product],
    /// The activations that may end a chain (op names of [`ACTIVATIONS`]).
    pub activations: &'a [&'a str],
    /// Nodes TensorFlow needs kept (preserved or fetched): never a link
    /// before the last.
    pub keep: &'a dyn Fn(&str) -> bool,
}

/// One fused node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fused {
    /// Its name: the chain's last node's.
    pub name: String,
    pub op: &'static str,
    pub fused_ops: Vec<&'static str>,
    /// The chain's nodes, first to last, as `(name, op)`.
    pub chain: Vec<(String, String)>,
}

/// Fuses every chain in `graph` that `rules` allow; returns the fused
/// nodes in graph order.
pub fn fuse_contractions(graph: &mut GraphDef, rules: &Rules) -> Vec<Fused> {
    let mut chains = find_chains(&graph.node, rules);
    chains.sort_by_key(Chain::last);
    if chains.is_empty() {
        return Vec::new();
    }
    let mut removed = vec![false; graph.node.len()];
    let mut fused = Vec::with_capacity(chains.len());
    for chain in chains {
        let links = chain.links();
        fused.push(Fused {
            name: graph.node[chain.last()].name.clone(),
            op: chain.product.fused_op(),
            fused_ops: chain.fused_ops(&graph.node),
            chain: links.iter().map(|&i| (graph.node[i].name.clone(), graph.node[i].op.clone())).collect(),
        });
        let node = chain.fused_node(&graph.node);
        for &link in &links[..links.len() - 1] {
            removed[link] = true;
        }
        graph.node[chain.last()] = node;
    }
    let mut index = 0;
    graph.node.retain(|_| {
        index += 1;
        !removed[index - 1]
    });
    fused
}

/// A chain to fuse, by node index.
#[derive(Debug, Clone, Copy)]
struct Chain {
    product: Product,
    head: usize,
    bias: usize,
    activation: Option<usize>,
}

impl Chain {
    fn links(&self) -> Vec<usize> {
        [Some(self.head), Some(self.bias), self.activation].into_iter().flatten().collect()
    }

    fn last(&self) -> usize {
        self.activation.unwrap_or(self.bias)
    }

    fn fused_ops(&self, nodes: &[NodeDef]) -> Vec<&'static str> {
        let activation = self.activation.map(|a| {
            let op = nodes[a].op.as_str();
            ACTIVATIONS.iter().map(|(name, _)| *name).find(|name| *name == op).expect("only known activations join")
        });
        std::iter::once("BiasAdd").chain(activation).collect()
    }

    /// The fused node, under the last link's name on its device.
    fn fused_node(&self, nodes: &[NodeDef]) -> NodeDef {
        let head = &nodes[self.head];
        let bias = &nodes[self.bias];
        let last = &nodes[self.last()];
        let mut input: Vec<String> = data_inputs(head).map(str::to_owned).collect();
        input.extend(data_inputs(bias).nth(1).map(str::to_owned));
        for link in self.links() {
            for control in control_inputs(&nodes[link]) {
                if !input.iter().any(|seen| seen == control) {
                    input.push(control.to_owned());
                }
            }
        }

        let alpha = self.activation.and_then(|a| float_attr(&nodes[a], "alpha")).unwrap_or(DEFAULT_ALPHA);
        let mut attrs = vec![
            ("T", value(attr_value::Value::Type(DT_FLOAT))),
            ("fused_ops", string_list(&self.fused_ops(nodes))),
            ("num_args", value(attr_value::Value::I(1))),
            ("epsilon", value(attr_value::Value::F(DEFAULT_EPSILON))),
            ("leakyrelu_alpha", value(attr_value::Value::F(alpha))),
        ];
        let copy = |key: &str| head.attr.get(key).cloned();
        match self.product {
            Product::MatMul => {
                for key in ["transpose_a", "transpose_b"] {
                    attrs.push((key, copy(key).unwrap_or_else(|| value(attr_value::Value::B(false)))));
                }
            }
            Product::Conv2D => {
                attrs.extend([
                    ("TArgs", type_list(&[DT_FLOAT])),
                    ("num_host_args", value(attr_value::Value::I(0))),
                    ("strides", copy("strides").expect("checked by conv2d_fits")),
                    ("padding", copy("padding").expect("checked by conv2d_fits")),
                    ("explicit_paddings", copy("explicit_paddings").unwrap_or_else(|| int_list(&[]))),
                    ("dilations", copy("dilations").unwrap_or_else(|| int_list(&[1, 1, 1, 1]))),
                    ("use_cudnn_on_gpu", copy("use_cudnn_on_gpu").unwrap_or_else(|| value(attr_value::Value::B(true)))),
                    ("data_format", value(attr_value::Value::S(b"NHWC".to_vec()))),
                    ("filter_format", value(attr_value::Value::S(b"HWIO".to_vec()))),
                ]);
            }
        }
        NodeDef {
            name: last.name.clone(),
            op: self.product.fused_op().into(),
            input,
            device: last.device.clone(),
            attr: attrs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            ..Default::default()
        }
    }
}

/// How a node's outputs are read.
#[derive(Debug, Clone, Copy, Default)]
struct Reads {
    /// Data reads, of any output, counting a reader once per input.
    data: usize,
    control: usize,
    /// The last data reader, which of its data inputs reads, and which output.
    reader: usize,
    slot: usize,
    port: u32,
}

fn find_chains(nodes: &[NodeDef], rules: &Rules) -> Vec<Chain> {
    let heads: Vec<(usize, Product)> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| Product::of(&node.op).filter(|p| rules.products.contains(p)).map(|p| (i, p)))
        .collect();
    if heads.is_empty() {
        return Vec::new();
    }
    let mut by_name: Map<&str, usize> = Map::with_capacity_and_hasher(nodes.len(), Default::default());
    for (index, node) in nodes.iter().enumerate() {
        if by_name.insert(&node.name, index).is_some() {
            return Vec::new(); // an input would not say which node it means
        }
    }
    let mut reads = vec![Reads::default(); nodes.len()];
    for (index, node) in nodes.iter().enumerate() {
        let mut slot = 0;
        for input in &node.input {
            match Source::parse(input) {
                Source::Control { node } => {
                    if let Some(&producer) = by_name.get(node) {
                        reads[producer].control += 1;
                    }
                }
                Source::Data { node, port } => {
                    if let Some(&producer) = by_name.get(node) {
                        let r = &mut reads[producer];
                        r.data += 1;
                        (r.reader, r.slot, r.port) = (index, slot, port);
                    }
                    slot += 1;
                }
            }
        }
    }
    // The node that alone reads output 0 of `index`, through its first data
    // input, when `index` may vanish into it.
    let sole_reader = |index: usize| -> Option<usize> {
        let r = reads[index];
        let sole = r.data == 1 && r.control == 0 && r.slot == 0 && r.port == 0;
        (sole && !(rules.keep)(&nodes[index].name) && nodes[r.reader].device == nodes[index].device).then_some(r.reader)
    };

    let mut chains = Vec::new();
    for (head, product) in heads {
        let fits = match product {
            Product::MatMul => matmul_fits(&nodes[head], rules.device_type),
            Product::Conv2D => conv2d_fits(&nodes[head], rules.device_type),
        };
        if !fits {
            continue;
        }
        let Some(bias) = sole_reader(head).filter(|&b| bias_add_fits(&nodes[b])) else { continue };
        let activation = sole_reader(bias).filter(|&a| activation_fits(&nodes[a], rules.activations));
        chains.push(Chain { product, head, bias, activation });
    }
    chains
}

/// Whether every attribute of `node` is `T` = float32, one of `known`, or
/// `_`-prefixed (TensorFlow's annotations, which do not change the value).
fn attrs_fit(node: &NodeDef, known: &[&str]) -> bool {
    type_attr(node, "T") == Some(DT_FLOAT)
        && node.attr.keys().all(|key| key == "T" || key.starts_with('_') || known.contains(&key.as_str()))
}

fn nhwc(node: &NodeDef) -> bool {
    match attr(node, "data_format") {
        None => true,
        Some(attr_value::Value::S(layout)) => layout == b"NHWC",
        Some(_) => false,
    }
}

fn matmul_fits(node: &NodeDef, device_type: &str) -> bool {
    attrs_fit(node, Product::MatMul.known_attrs())
        && data_inputs(node).count() == 2
        && on_device(&node.device, device_type)
}

fn conv2d_fits(node: &NodeDef, device_type: &str) -> bool {
    let strides = matches!(attr(node, "strides"), Some(attr_value::Value::List(_)));
    attrs_fit(node, Product::Conv2D.known_attrs())
        && nhwc(node)
        && strides
        && string_attr(node, "padding").is_some()
        && data_inputs(node).count() == 2
        && on_device(&node.device, device_type)
}

/// The head's device was checked, and [`find_chains`]'s readers share it.
fn bias_add_fits(node: &NodeDef) -> bool {
    node.op == "BiasAdd" && attrs_fit(node, &["data_format"]) && nhwc(node) && data_inputs(node).count() == 2
}

fn activation_fits(node: &NodeDef, allowed: &[&str]) -> bool {
    let Some((_, extra)) = ACTIVATIONS.iter().find(|(op, _)| *op == node.op) else { return false };
    allowed.contains(&node.op.as_str()) && attrs_fit(node, extra) && data_inputs(node).count() == 1
}
