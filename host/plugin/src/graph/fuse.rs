//! Fuse trees of float32 elementwise ops placed on our device into one
//! `_TfwasmFusedElementwise` node each ([`crate::kernels::fused`]).
//!
//! Keras' Adam update is the motivating graph: per variable, `(g - m)·c`,
//! `(g² - v)·c` and `m·α / (√v + ε)`, with `α` itself a tree of seven scalar
//! ops. Unfused, every op is a node the executor schedules and a tensor the
//! size of the variable written and read back; fused, each tree is one node
//! and one pass over memory.
//!
//! A node joins its consumer's group when both are fusable ops (float32,
//! no attribute but `T` and TensorFlow's own `_`-prefixed ones, placed on
//! the same device of our type) and the node's output feeds that consumer
//! once and nothing else: no other data or control consumer, and TensorFlow
//! does not ask to preserve it (fetch and feed nodes). So a group is a tree,
//! its root is the only member anything else sees, and the fused node takes
//! the root's name, so no other node changes. Control inputs of members
//! move to the fused node.
//!
//! As in [`super::xla`], nodes are not decoded into a schema: every node
//! outside a group, and every other field of the GraphDef, is copied byte
//! for byte.

use std::collections::HashMap;

use super::schema::*;
use super::wire::{self, Value};
use super::xla::placed_on;
use super::GraphError;
use crate::kernels::fused::{self, Program, Step};

/// The outcome of [`fuse_elementwise`].
#[derive(Debug)]
pub struct Fusion {
    /// The rewritten graph (the input, unchanged, when nothing fused).
    pub graph: Vec<u8>,
    /// Names of the fused nodes (the groups' roots).
    pub roots: Vec<String>,
    /// Nodes the groups replaced, roots included.
    pub fused_nodes: usize,
}

/// One NodeDef, as much as the pass reads of it.
struct Node<'g> {
    fields: NodeFields<'g>,
    /// The step this node becomes in a group, if it may join one.
    step: Option<Step>,
}

impl<'g> std::ops::Deref for Node<'g> {
    type Target = NodeFields<'g>;

    fn deref(&self) -> &NodeFields<'g> {
        &self.fields
    }
}

/// Rewrites `graph` (a serialized GraphDef) with every fusable tree of two
/// or more ops on a device of type `device_type` replaced by one fused node.
/// `preserve` says which node names TensorFlow needs kept (they may end a
/// group as its root, never disappear inside one).
///
/// Errors when the GraphDef or a NodeDef is not valid wire format. A graph
/// with two nodes of one name is returned unchanged.
pub fn fuse_elementwise(
    graph: &[u8],
    device_type: &str,
    preserve: &dyn Fn(&[u8]) -> bool,
) -> Result<Fusion, GraphError> {
    let unchanged = || Fusion { graph: graph.to_vec(), roots: Vec::new(), fused_nodes: 0 };
    let nodes = read_nodes(graph, device_type)?;
    let Some(by_name) = index_by_name(&nodes, |node| node.name) else { return Ok(unchanged()) };

    // Who reads each node: data reads (any output), and whether anything
    // waits on it by control edge.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut controlled = vec![false; nodes.len()];
    let mut reads_other_port = vec![false; nodes.len()];
    for (index, node) in nodes.iter().enumerate() {
        for input in &node.inputs {
            let (name, port) = input_source(input);
            let Some(&producer) = by_name.get(name) else { continue };
            match port {
                None => controlled[producer] = true,
                Some(port) => {
                    readers[producer].push(index);
                    reads_other_port[producer] |= port != b"0";
                }
            }
        }
    }
    // `joins[i]`: the consumer whose group node `i` joins.
    let joins: Vec<Option<usize>> = (0..nodes.len())
        .map(|i| {
            let node = &nodes[i];
            let &[consumer] = readers[i].as_slice() else { return None };
            let joins = node.step.is_some()
                && !controlled[i]
                && !reads_other_port[i]
                && !preserve(node.name)
                && nodes[consumer].step.is_some()
                && nodes[consumer].device == node.device;
            joins.then_some(consumer)
        })
        .collect();

    let mut edits: Vec<NodeEdit> = nodes.iter().map(|_| NodeEdit::Keep).collect();
    let (mut roots, mut fused_nodes) = (Vec::new(), 0);
    for root in 0..nodes.len() {
        if nodes[root].step.is_none() || joins[root].is_some() {
            continue;
        }
        let mut group = Group::default();
        if !group.collect(&nodes, &by_name, &joins, root, 0) || group.members.len() < 2 {
            continue;
        }
        let Ok(program) = Program::new(group.steps, group.inputs.len()) else { continue };
        for &member in &group.members {
            edits[member] = NodeEdit::Remove;
        }
        edits[root] = NodeEdit::Replace(fused_node(&nodes, root, &group.members, &group.inputs, &program));
        roots.push(String::from_utf8_lossy(nodes[root].name).into_owned());
        fused_nodes += group.members.len();
    }
    if roots.is_empty() {
        return Ok(unchanged());
    }

    let graph = edit_nodes(graph, &edits)?;
    Ok(Fusion { graph, roots, fused_nodes })
}

/// The nodes of `graph`, in order, with the steps they may become.
fn read_nodes<'g>(graph: &'g [u8], device_type: &str) -> Result<Vec<Node<'g>>, GraphError> {
    node_defs(graph)
        .map(|node| node.and_then(|(node, at)| read_node(node, device_type).map_err(|e| e.at(at))))
        .collect()
}

fn read_node<'g>(node: &'g [u8], device_type: &str) -> Result<Node<'g>, GraphError> {
    let fields = NodeFields::read(node)?;
    // Whether `T` is float32, and whether an attribute the fused kernel
    // would not honour is set.
    let (mut float, mut other_attr) = (false, false);
    for &(key, value, value_at) in &fields.attrs {
        let last = attr_value(value).map_err(|e| e.at(value_at))?;
        match key {
            b"T" => {
                float = matches!(
                    last,
                    Some(wire::Field { number: ATTR_VALUE_TYPE, value: Value::Varint { value: DT_FLOAT, .. } })
                )
            }
            // `BiasAdd` in its default layout is an add along the last
            // dimension; NCHW is not.
            b"data_format" => {
                let nhwc = matches!(&last, Some(wire::Field { number: ATTR_VALUE_S, value: Value::Bytes(r) }) if &value[r.clone()] == b"NHWC");
                other_attr |= !nhwc;
            }
            _ => other_attr |= !key.starts_with(b"_"),
        }
    }
    let step = std::str::from_utf8(fields.op).ok().and_then(fused::step_for_op).filter(|step| {
        let arity = match step {
            Step::Unary(_) => 1,
            Step::Binary(_) | Step::BiasAdd | Step::Grad(_) => 2,
            Step::Input(_) => return false,
        };
        float && !other_attr && fields.data_inputs().count() == arity && placed_on(fields.device, device_type)
    });
    Ok(Node { fields, step })
}

/// One tree being collected, in postfix order.
#[derive(Default)]
struct Group<'g> {
    members: Vec<usize>,
    steps: Vec<Step>,
    /// The group's inputs (tensors from outside it), each once.
    inputs: Vec<&'g [u8]>,
}

impl<'g> Group<'g> {
    /// Adds node `index` and the members below it. False when the tree
    /// exceeds what a program may hold (the group is then left alone).
    fn collect(
        &mut self,
        nodes: &[Node<'g>],
        by_name: &HashMap<&'g [u8], usize>,
        joins: &[Option<usize>],
        index: usize,
        depth: usize,
    ) -> bool {
        if depth > fused::MAX_STEPS || self.steps.len() > fused::MAX_STEPS {
            return false;
        }
        self.members.push(index);
        for input in nodes[index].data_inputs() {
            let (name, _) = input_source(input);
            match by_name.get(name) {
                Some(&producer) if joins[producer] == Some(index) => {
                    if !self.collect(nodes, by_name, joins, producer, depth + 1) {
                        return false;
                    }
                }
                _ => {
                    let k = match self.inputs.iter().position(|&seen| same_tensor(seen, input)) {
                        Some(k) => k,
                        None => {
                            self.inputs.push(input);
                            self.inputs.len() - 1
                        }
                    };
                    self.steps.push(Step::Input(k));
                }
            }
        }
        self.steps.push(nodes[index].step.expect("only fusable nodes join a group"));
        true
    }
}

/// Whether two data inputs name the same tensor (`x` is `x:0`).
fn same_tensor(a: &[u8], b: &[u8]) -> bool {
    input_source(a) == input_source(b)
}

/// The NodeDef of a group's fused node: the root's name and device, the
/// group's inputs, then every member's control inputs (each once).
fn fused_node(nodes: &[Node<'_>], root: usize, members: &[usize], inputs: &[&[u8]], program: &Program) -> Vec<u8> {
    let mut all_inputs: Vec<&[u8]> = inputs.to_vec();
    for &member in members {
        for control in nodes[member].control_inputs() {
            if !all_inputs.contains(&control) {
                all_inputs.push(control);
            }
        }
    }
    let mut node = new_node_def(nodes[root].name, fused::OP.as_bytes(), &all_inputs, nodes[root].device);
    let mut attr = |key: &str, number: u32, value: AttrPayload<'_>| {
        let mut attr_value = Vec::new();
        match value {
            AttrPayload::Varint(v) => wire::put_varint_field(number, v, &mut attr_value),
            AttrPayload::Bytes(b) => wire::put_bytes_field(number, b, &mut attr_value),
        }
        put_attr(key.as_bytes(), &attr_value, &mut node);
    };
    attr("N", ATTR_VALUE_I, AttrPayload::Varint(inputs.len() as u64));
    attr("T", ATTR_VALUE_TYPE, AttrPayload::Varint(DT_FLOAT));
    attr("expr", ATTR_VALUE_S, AttrPayload::Bytes(program.expr().as_bytes()));
    node
}

enum AttrPayload<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::graph::schema::testing::{self, graph, CPU0, TRAILER, WASM0};

    fn attr(key: &str, number: u32, value: u64, out: &mut Vec<u8>) {
        let (mut value_bytes, mut entry) = (Vec::new(), Vec::new());
        wire::put_varint_field(number, value, &mut value_bytes);
        wire::put_bytes_field(MAP_KEY, key.as_bytes(), &mut entry);
        wire::put_bytes_field(MAP_VALUE, &value_bytes, &mut entry);
        wire::put_bytes_field(NODE_ATTR, &entry, out);
    }

    /// A NodeDef of `op` with `T: float` (plus `extra` attributes).
    fn node(name: &str, op: &str, inputs: &[&str], device: &str, extra: &[(&str, u32, u64)]) -> Vec<u8> {
        let mut n = testing::node(name, op, inputs, device);
        for &(key, number, value) in extra {
            attr(key, number, value, &mut n);
        }
        n
    }

    /// Keras' Adam update of one variable, as the pass sees it.
    fn adam(device: &str) -> Vec<Vec<u8>> {
        vec![
            node("m", "ReadVariableOp", &["m_handle"], device, &[]),
            node("v", "ReadVariableOp", &["v_handle"], device, &[]),
            node("mul", "Mul", &["m", "alpha"], device, &[]),
            node("sqrt", "Sqrt", &["v"], device, &[]),
            node("add", "AddV2", &["eps", "sqrt"], device, &[]),
            node("div", "RealDiv", &["mul", "add", "^dep"], device, &[]),
            node("update", "AssignSubVariableOp", &["var", "div"], device, &[]),
        ]
    }

    struct Decoded {
        name: String,
        op: String,
        inputs: Vec<String>,
        device: String,
        expr: Option<String>,
    }

    fn decode(graph: &[u8]) -> Vec<Decoded> {
        let mut out = Vec::new();
        for field in wire::fields(graph) {
            let field = field.unwrap();
            if field.number != GRAPH_NODE {
                continue;
            }
            let (n, _) = wire::bytes(graph, &field, "").unwrap();
            let text = |f: &wire::Field| String::from_utf8(wire::bytes(n, f, "").unwrap().0.to_vec()).unwrap();
            let mut d = Decoded {
                name: String::new(),
                op: String::new(),
                inputs: Vec::new(),
                device: String::new(),
                expr: None,
            };
            for f in wire::fields(n) {
                let f = f.unwrap();
                match f.number {
                    NODE_NAME => d.name = text(&f),
                    NODE_OP => d.op = text(&f),
                    NODE_INPUT => d.inputs.push(text(&f)),
                    NODE_DEVICE => d.device = text(&f),
                    NODE_ATTR => {
                        let (entry, _) = wire::bytes(n, &f, "").unwrap();
                        let (key, value) = attr_entry(entry).unwrap();
                        if let (b"expr", Some((value, _))) = (key, value) {
                            let s = wire::fields(value).last().unwrap().unwrap();
                            d.expr = Some(String::from_utf8(wire::bytes(value, &s, "").unwrap().0.to_vec()).unwrap());
                        }
                    }
                    _ => {}
                }
            }
            out.push(d);
        }
        out
    }

    fn keep_nothing(_: &[u8]) -> bool {
        false
    }

    #[test]
    fn adam_update_becomes_one_node_under_the_root_name() {
        let input = graph(&adam(WASM0));
        let fusion = fuse_elementwise(&input, "WASM", &keep_nothing).unwrap();
        assert_eq!(fusion.roots, ["div"]);
        assert_eq!(fusion.fused_nodes, 4);
        let nodes = decode(&fusion.graph);
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["m", "v", "div", "update"]);
        let div = &nodes[2];
        assert_eq!(div.op, fused::OP);
        assert_eq!(div.device, WASM0);
        // Inputs in first-use order, then the members' control inputs.
        assert_eq!(div.inputs, ["m", "alpha", "eps", "v", "^dep"]);
        assert_eq!(div.expr.as_deref(), Some("$0 $1 Mul $2 $3 Sqrt AddV2 RealDiv"));
        // Untouched nodes and the other GraphDef fields are copied byte for byte.
        let original = adam(WASM0);
        assert!(fusion.graph.windows(original[6].len()).any(|w| w == original[6].as_slice()));
        assert!(fusion.graph.ends_with(&input[input.len() - TRAILER..]));
        // A second run finds nothing more to do.
        let again = fuse_elementwise(&fusion.graph, "WASM", &keep_nothing).unwrap();
        assert!(again.roots.is_empty());
        assert_eq!(again.graph, fusion.graph);
    }

    #[test]
    fn a_shared_input_is_read_once() {
        // (g - m)² + g: `g` feeds two members; the group takes it once.
        let nodes = [
            node("sub", "Sub", &["g", "m:0"], WASM0, &[]),
            node("sq", "Square", &["sub"], WASM0, &[]),
            node("add", "AddV2", &["sq", "g:0"], WASM0, &[]),
        ];
        let fusion = fuse_elementwise(&graph(&nodes), "WASM", &keep_nothing).unwrap();
        let out = decode(&fusion.graph);
        assert_eq!(out[0].inputs, ["g", "m:0"]);
        assert_eq!(out[0].expr.as_deref(), Some("$0 $1 Sub Square $0 AddV2"));
    }

    #[test]
    fn nodes_others_see_stay() {
        type Case<'p> = (&'static str, Vec<Vec<u8>>, &'p dyn Fn(&[u8]) -> bool);
        let cases: [Case; 7] = [
            // `sqrt` has a second reader.
            ("two readers", [adam(WASM0), vec![node("other", "Neg", &["sqrt"], CPU0, &[])]].concat(), &keep_nothing),
            // Something waits on `sqrt`.
            ("control reader", [adam(WASM0), vec![node("w", "NoOp", &["^sqrt"], WASM0, &[])]].concat(), &keep_nothing),
            // TensorFlow fetches `sqrt`.
            ("preserved", adam(WASM0), &|name: &[u8]| name == b"sqrt"),
            // `sqrt` is on the CPU.
            (
                "other device",
                adam(WASM0)
                    .into_iter()
                    .map(|n| if n.starts_with(b"\x0a\x04sqrt") { node("sqrt", "Sqrt", &["v"], CPU0, &[]) } else { n })
                    .collect(),
                &keep_nothing,
            ),
            // `sqrt` is float64.
            (
                "other type",
                adam(WASM0)
                    .into_iter()
                    .map(|n| {
                        if n.starts_with(b"\x0a\x04sqrt") {
                            node("sqrt", "Sqrt", &["v"], WASM0, &[("T", ATTR_VALUE_TYPE, 2)])
                        } else {
                            n
                        }
                    })
                    .collect(),
                &keep_nothing,
            ),
            // `sqrt` has an attribute the fused kernel would not honour.
            (
                "unknown attr",
                adam(WASM0)
                    .into_iter()
                    .map(|n| {
                        if n.starts_with(b"\x0a\x04sqrt") {
                            node("sqrt", "Sqrt", &["v"], WASM0, &[("mode", ATTR_VALUE_I, 1)])
                        } else {
                            n
                        }
                    })
                    .collect(),
                &keep_nothing,
            ),
            // `sqrt` reads output 1 of a node (not an elementwise op then).
            ("other port", [adam(WASM0), vec![node("x", "Neg", &["sqrt:1"], WASM0, &[])]].concat(), &keep_nothing),
        ];
        for (case, nodes, preserve) in cases {
            let fusion = fuse_elementwise(&graph(&nodes), "WASM", preserve).unwrap();
            let out = decode(&fusion.graph);
            assert!(out.iter().any(|n| n.name == "sqrt" && n.op != fused::OP), "{case}: sqrt must stay");
            // The rest of the tree still fuses around it.
            let div = out.iter().find(|n| n.name == "div").unwrap();
            assert_eq!(div.op, fused::OP, "{case}");
            assert!(div.inputs.contains(&"sqrt".to_owned()), "{case}: {:?}", div.inputs);
        }
    }

    fn string_attr(key: &str, value: &str, out: &mut Vec<u8>) {
        let (mut value_bytes, mut entry) = (Vec::new(), Vec::new());
        wire::put_bytes_field(ATTR_VALUE_S, value.as_bytes(), &mut value_bytes);
        wire::put_bytes_field(MAP_KEY, key.as_bytes(), &mut entry);
        wire::put_bytes_field(MAP_VALUE, &value_bytes, &mut entry);
        wire::put_bytes_field(NODE_ATTR, &entry, out);
    }

    #[test]
    fn bias_add_fuses_in_its_default_layout_only() {
        for (layout, fuses) in [(None, true), (Some("NHWC"), true), (Some("NCHW"), false)] {
            let mut bias = node("bias", "BiasAdd", &["matmul", "b"], WASM0, &[]);
            if let Some(layout) = layout {
                string_attr("data_format", layout, &mut bias);
            }
            let nodes = [bias, node("relu", "Relu", &["bias"], WASM0, &[])];
            let fusion = fuse_elementwise(&graph(&nodes), "WASM", &keep_nothing).unwrap();
            assert_eq!(!fusion.roots.is_empty(), fuses, "{layout:?}");
            if fuses {
                assert_eq!(decode(&fusion.graph)[0].expr.as_deref(), Some("$0 $1 BiasAdd Relu"));
            }
        }
    }

    #[test]
    fn nothing_fuses_off_our_device_or_alone() {
        let fusion = fuse_elementwise(&graph(&adam(CPU0)), "WASM", &keep_nothing).unwrap();
        assert!(fusion.roots.is_empty());
        let lone = [node("a", "Neg", &["x"], WASM0, &[]), node("b", "MatMul", &["a", "y"], WASM0, &[])];
        let input = graph(&lone);
        let fusion = fuse_elementwise(&input, "WASM", &keep_nothing).unwrap();
        assert_eq!((fusion.roots.len(), fusion.graph), (0, input));
    }

    #[test]
    fn duplicate_names_leave_the_graph_alone() {
        let mut nodes = adam(WASM0);
        nodes.push(node("sqrt", "Neg", &["x"], CPU0, &[]));
        let input = graph(&nodes);
        let fusion = fuse_elementwise(&input, "WASM", &keep_nothing).unwrap();
        assert_eq!(fusion.graph, input);
    }

    #[test]
    fn a_cycle_of_fusable_nodes_is_left_alone() {
        let nodes = [node("a", "Neg", &["b"], WASM0, &[]), node("b", "Neg", &["a"], WASM0, &[])];
        let input = graph(&nodes);
        assert_eq!(fuse_elementwise(&input, "WASM", &keep_nothing).unwrap().graph, input);
    }

    #[test]
    fn a_chain_too_long_for_one_program_is_left_alone() {
        let mut nodes = vec![node("n0", "Neg", &["x"], WASM0, &[])];
        for i in 1..600 {
            nodes.push(node(&format!("n{i}"), "Neg", &[&format!("n{}", i - 1)], WASM0, &[]));
        }
        // Too deep for one program: the chain is left as it was, not
        // overflowing the stack.
        let fusion = fuse_elementwise(&graph(&nodes), "WASM", &keep_nothing).unwrap();
        assert!(fusion.roots.is_empty());
    }

    #[test]
    fn malformed_graphs_are_errors() {
        let mut bad = graph(&adam(WASM0));
        bad.truncate(bad.len() - 3);
        assert!(fuse_elementwise(&bad, "WASM", &keep_nothing).is_err());
    }
}
