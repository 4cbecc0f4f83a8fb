//! Trees of float32 elementwise ops on the device as one
//! `_TfwasmFusedElementwise` node each.
//!
//! The same rewrite as the plugin's native `graph::fuse::fuse_elementwise`,
//! node for node. A node joins its consumer's group when both are fusable
//! (an op of [`crate::program::FUSABLE`] with as many data inputs as it
//! takes, `T` float32, no attribute but `T` and `_`-prefixed ones, or
//! `data_format: NHWC` on `BiasAdd`, placed on a device of our type) on the
//! same device, and the node's output 0 feeds that consumer once and nothing
//! else: no other data or control reader, no read of another output, and
//! not a node TensorFlow asked to preserve. A group is then a tree whose
//! root is the only member anything else reads; the fused node takes the
//! root's name and place, so no other node changes. Its inputs are the
//! group's external tensors in first-use order, each once, then every
//! member's control inputs, each once; its attributes `N`, `T` and `expr`.
//! A group of one node, or one whose program the kernel would refuse, stays
//! as it was; a graph with two nodes of one name is left alone.

use tfwasm_proto::graph::{attr_value, AttrValue, GraphDef, NodeDef};

use crate::node::{control_inputs, data_inputs, input_source, on_device, type_value, Map, DT_FLOAT};
use crate::program::{self, fusable, Step, MAX_STEPS};

/// One fused node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fused {
    /// Its name: the group's root.
    pub name: String,
    /// Nodes it replaced, the root included.
    pub members: usize,
    /// Its program.
    pub expr: String,
}

/// Fuses every fusable tree of two or more ops on `device_type` in `graph`;
/// returns the fused nodes in graph order. `preserve` says which node names
/// TensorFlow needs kept: they may be a group's root, never a member below.
pub fn fuse_elementwise(graph: &mut GraphDef, device_type: &str, preserve: &dyn Fn(&str) -> bool) -> Vec<Fused> {
    let groups = plan(&graph.node, device_type, preserve);
    if groups.is_empty() {
        return Vec::new();
    }
    // The fused node takes its root's place; the other members go.
    let mut removed = vec![false; graph.node.len()];
    let mut fused = Vec::with_capacity(groups.len());
    for group in groups {
        for &member in &group.members {
            removed[member] = member != group.root;
        }
        let at = group.root;
        let root = std::mem::take(&mut graph.node[at]);
        fused.push(Fused { name: root.name.clone(), members: group.members.len(), expr: group.expr.clone() });
        graph.node[at] = group.into_node(root);
    }
    let mut index = 0;
    graph.node.retain(|_| {
        index += 1;
        !removed[index - 1]
    });
    fused
}

/// A group to fuse, by node index.
struct Group {
    root: usize,
    members: Vec<usize>,
    /// The external tensors it reads, then its members' control inputs.
    inputs: Vec<String>,
    /// Of `inputs`, how many are data inputs.
    data: usize,
    expr: String,
}

impl Group {
    /// The fused node, under `root`'s name on `root`'s device.
    fn into_node(self, root: NodeDef) -> NodeDef {
        let attr = [
            ("N".to_owned(), AttrValue { value: Some(attr_value::Value::I(self.data as i64)) }),
            ("T".to_owned(), type_value(DT_FLOAT)),
            ("expr".to_owned(), AttrValue { value: Some(attr_value::Value::S(self.expr.into_bytes())) }),
        ];
        NodeDef {
            name: root.name,
            op: program::OP.into(),
            input: self.inputs,
            device: root.device,
            attr: attr.into(),
            ..Default::default()
        }
    }
}

/// The groups of `nodes`, by the index of their roots.
fn plan(nodes: &[NodeDef], device_type: &str, preserve: &dyn Fn(&str) -> bool) -> Vec<Group> {
    let steps: Vec<Option<Step>> = nodes.iter().map(|node| step(node, device_type)).collect();
    if steps.iter().filter(|s| s.is_some()).take(2).count() < 2 {
        return Vec::new();
    }
    let mut by_name: Map<&str, usize> = Map::with_capacity_and_hasher(nodes.len(), Default::default());
    for (index, node) in nodes.iter().enumerate() {
        if by_name.insert(&node.name, index).is_some() {
            return Vec::new(); // an input would not say which node it means
        }
    }

    // Who reads each node: how many data reads (of any output) and the
    // last reader, whether any read is of another output than 0, and
    // whether anything waits on it by control edge.
    let mut reads = vec![Reads::default(); nodes.len()];
    for (index, node) in nodes.iter().enumerate() {
        for input in &node.input {
            let (name, port) = input_source(input);
            let Some(&producer) = by_name.get(name) else { continue };
            let reads = &mut reads[producer];
            match port {
                None => reads.controlled = true,
                Some(port) => {
                    reads.count += 1;
                    reads.reader = index;
                    reads.other_port |= port != "0";
                }
            }
        }
    }
    // `joins[i]`: the consumer whose group node `i` joins.
    let joins: Vec<Option<usize>> = (0..nodes.len())
        .map(|i| {
            let r = &reads[i];
            let joins = r.count == 1
                && steps[i].is_some()
                && !r.controlled
                && !r.other_port
                && steps[r.reader].is_some()
                && nodes[r.reader].device == nodes[i].device
                && !preserve(&nodes[i].name);
            joins.then_some(r.reader)
        })
        .collect();

    let mut groups = Vec::new();
    for root in 0..nodes.len() {
        if steps[root].is_none() || joins[root].is_some() {
            continue;
        }
        let mut collect = Collect {
            nodes,
            by_name: &by_name,
            joins: &joins,
            steps: &steps,
            members: Vec::new(),
            program: Vec::new(),
            inputs: Vec::new(),
        };
        if !collect.visit(root, 0) || collect.members.len() < 2 {
            continue;
        }
        let Ok(expr) = program::expr(&collect.program, collect.inputs.len()) else { continue };
        let data = collect.inputs.len();
        let mut inputs: Vec<String> = collect.inputs.iter().map(|&i| i.to_owned()).collect();
        for &member in &collect.members {
            for control in control_inputs(&nodes[member]) {
                if !inputs.iter().any(|seen| seen == control) {
                    inputs.push(control.to_owned());
                }
            }
        }
        groups.push(Group { root, members: collect.members, inputs, data, expr });
    }
    groups
}

#[derive(Debug, Clone, Copy, Default)]
struct Reads {
    count: usize,
    reader: usize,
    other_port: bool,
    controlled: bool,
}

/// The step `node` may become in a group, if it may join one.
fn step(node: &NodeDef, device_type: &str) -> Option<Step> {
    let op = fusable(&node.op)?;
    let mut float = false;
    for (key, value) in &node.attr {
        match (key.as_str(), &value.value) {
            ("T", Some(attr_value::Value::Type(DT_FLOAT))) => float = true,
            ("T", _) => return None,
            // `BiasAdd` in its default layout adds along the last dimension; NCHW does not.
            ("data_format", Some(attr_value::Value::S(layout))) if layout == b"NHWC" => {}
            (key, _) if key.starts_with('_') => {}
            _ => return None,
        }
    }
    let fits = float && data_inputs(node).count() == op.arity && on_device(&node.device, device_type);
    fits.then_some(Step::Op(op))
}

/// One tree being collected, in postfix order.
struct Collect<'g> {
    nodes: &'g [NodeDef],
    by_name: &'g Map<&'g str, usize>,
    joins: &'g [Option<usize>],
    steps: &'g [Option<Step>],
    members: Vec<usize>,
    program: Vec<Step>,
    /// The group's external tensors, each once, in first-use order.
    inputs: Vec<&'g str>,
}

impl<'g> Collect<'g> {
    /// Adds node `index` and the members below it. False when the tree
    /// exceeds what a program may hold (the group is then left alone).
    fn visit(&mut self, index: usize, depth: usize) -> bool {
        if depth > MAX_STEPS || self.program.len() > MAX_STEPS {
            return false;
        }
        self.members.push(index);
        let nodes = self.nodes;
        for input in data_inputs(&nodes[index]) {
            let (name, _) = input_source(input);
            match self.by_name.get(name) {
                Some(&producer) if self.joins[producer] == Some(index) => {
                    if !self.visit(producer, depth + 1) {
                        return false;
                    }
                }
                _ => {
                    let source = input_source(input);
                    let k = match self.inputs.iter().position(|&seen| input_source(seen) == source) {
                        Some(k) => k,
                        None => {
                            self.inputs.push(input);
                            self.inputs.len() - 1
                        }
                    };
                    self.program.push(Step::Input(k));
                }
            }
        }
        self.program.push(self.steps[index].expect("only fusable nodes join a group"));
        true
    }
}
