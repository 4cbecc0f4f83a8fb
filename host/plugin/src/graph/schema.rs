//! Field numbers of the graph messages the passes read and write. They are
//! generated from `proto/graph.proto` by `host/plugin/build.rs`; the names below
//! are the ones the passes use.

#[allow(dead_code)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/graph_schema.rs"));
}
use generated::{attr_value as attr, data_type, graph_def, node_def};

/// `GraphDef.node` (repeated NodeDef).
pub const GRAPH_NODE: u32 = graph_def::NODE;

pub const NODE_NAME: u32 = node_def::NAME;
pub const NODE_OP: u32 = node_def::OP;
/// `NodeDef.input` (repeated string): `name`, `name:port` or `^name` (a
/// control input, after all data inputs).
pub const NODE_INPUT: u32 = node_def::INPUT;
pub const NODE_DEVICE: u32 = node_def::DEVICE;
/// `NodeDef.attr`: map entries of `key` and `value` (an AttrValue).
pub const NODE_ATTR: u32 = node_def::ATTR;
pub const MAP_KEY: u32 = node_def::attr_entry::KEY;
pub const MAP_VALUE: u32 = node_def::attr_entry::VALUE;

/// `AttrValue` is one oneof: the last field on the wire is the value.
pub const ATTR_VALUE_S: u32 = attr::S;
pub const ATTR_VALUE_I: u32 = attr::I;
pub const ATTR_VALUE_B: u32 = attr::B;
pub const ATTR_VALUE_TYPE: u32 = attr::TYPE;

pub const DT_FLOAT: u64 = data_type::DT_FLOAT;
pub const DT_INT32: u64 = data_type::DT_INT32;
pub const DT_INT64: u64 = data_type::DT_INT64;
/// A handle to a resource (a variable) that lives on one device.
pub const DT_RESOURCE: u64 = data_type::DT_RESOURCE;
/// A host object (an `Optional`, a `TensorList`) no C-API kernel can read.
pub const DT_VARIANT: u64 = data_type::DT_VARIANT;

use std::collections::HashMap;

use super::wire;
use super::GraphError;

/// The NodeDefs of a serialized GraphDef, each with its offset in `graph`
/// (for errors and patches relative to the whole graph).
pub fn node_defs(graph: &[u8]) -> impl Iterator<Item = Result<wire::Located<'_>, GraphError>> {
    wire::fields(graph).filter_map(move |field| match field {
        Err(error) => Some(Err(error)),
        Ok(field) if field.number == GRAPH_NODE => Some(wire::bytes(graph, &field, "GraphDef.node is not a message")),
        Ok(_) => None,
    })
}

/// Every NodeDef of `graph`: its bytes (to rewrite it) and its fields.
pub fn read_node_fields(graph: &[u8]) -> Result<(Vec<&[u8]>, Vec<NodeFields<'_>>), GraphError> {
    Ok(node_defs(graph)
        .map(|node| node.and_then(|(node, at)| Ok((node, NodeFields::read(node).map_err(|e| e.at(at))?))))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip())
}

/// Each node's index by its name, or `None` if two nodes share one (the
/// passes then return the graph unchanged: an input name would not say
/// which node it means).
pub fn index_by_name<'g, N>(nodes: &[N], name: impl Fn(&N) -> &'g [u8]) -> Option<HashMap<&'g [u8], usize>> {
    let mut by_name = HashMap::with_capacity(nodes.len());
    for (index, node) in nodes.iter().enumerate() {
        if by_name.insert(name(node), index).is_some() {
            return None;
        }
    }
    Some(by_name)
}

/// The key and the AttrValue bytes (with their offset in `entry`) of one
/// `NodeDef.attr` map entry.
pub fn attr_entry(entry: &[u8]) -> Result<(&[u8], Option<wire::Located<'_>>), GraphError> {
    let (mut key, mut value) = (&[][..], None);
    for field in wire::fields(entry) {
        let field = field?;
        match field.number {
            MAP_KEY => key = wire::bytes(entry, &field, "attr key is not a string")?.0,
            MAP_VALUE => value = Some(wire::bytes(entry, &field, "AttrValue is not a message")?),
            _ => {}
        }
    }
    Ok((key, value))
}

/// The value of an AttrValue: its last field (every field of AttrValue
/// belongs to its `value` oneof, so the last one on the wire wins).
pub fn attr_value(value: &[u8]) -> Result<Option<wire::Field>, GraphError> {
    let mut last = None;
    for field in wire::fields(value) {
        last = Some(field?);
    }
    Ok(last)
}

/// `AttrValue.list` (a ListValue) and `ListValue.i` (packed int64s).
pub const ATTR_VALUE_LIST: u32 = attr::LIST;
pub const LIST_VALUE_I: u32 = attr::list_value::I;

/// The fields of one NodeDef the passes read, borrowed from its bytes.
pub struct NodeFields<'g> {
    pub name: &'g [u8],
    pub op: &'g [u8],
    pub device: &'g [u8],
    /// Data inputs, then control inputs (`^name`), as written.
    pub inputs: Vec<&'g [u8]>,
    /// Each attribute's key and AttrValue bytes, with the AttrValue's
    /// offset in the NodeDef (for errors).
    pub attrs: Vec<(&'g [u8], &'g [u8], usize)>,
}

impl<'g> NodeFields<'g> {
    pub fn read(node: &'g [u8]) -> Result<Self, GraphError> {
        let mut fields = NodeFields { name: &[], op: &[], device: &[], inputs: Vec::new(), attrs: Vec::new() };
        for field in wire::fields(node) {
            let field = field?;
            match field.number {
                // A repeated scalar field: the last one counts.
                NODE_NAME => fields.name = wire::bytes(node, &field, "NodeDef.name is not a string")?.0,
                NODE_OP => fields.op = wire::bytes(node, &field, "NodeDef.op is not a string")?.0,
                NODE_INPUT => fields.inputs.push(wire::bytes(node, &field, "NodeDef.input is not a string")?.0),
                NODE_DEVICE => fields.device = wire::bytes(node, &field, "NodeDef.device is not a string")?.0,
                NODE_ATTR => {
                    let (entry, entry_at) = wire::bytes(node, &field, "NodeDef.attr is not a map entry")?;
                    let (key, value) = attr_entry(entry).map_err(|e| e.at(entry_at))?;
                    let (value, value_at) = value.unwrap_or((&[], 0));
                    fields.attrs.push((key, value, entry_at + value_at));
                }
                _ => {}
            }
        }
        Ok(fields)
    }

    pub fn data_inputs(&self) -> impl Iterator<Item = &'g [u8]> + '_ {
        self.inputs.iter().copied().filter(|i| !i.starts_with(b"^"))
    }

    /// The value of the `type` attribute `key`, if the node has one.
    pub fn type_attr(&self, key: &[u8]) -> Option<u64> {
        let &(_, value, _) = self.attrs.iter().rev().find(|(k, ..)| *k == key)?;
        match attr_value(value).ok()?? {
            wire::Field { number: ATTR_VALUE_TYPE, value: wire::Value::Varint { value, .. } } => Some(value),
            _ => None,
        }
    }

    pub fn control_inputs(&self) -> impl Iterator<Item = &'g [u8]> + '_ {
        self.inputs.iter().copied().filter(|i| i.starts_with(b"^"))
    }
}

/// The node an input names and the output it reads (`None` for a control
/// input): `x` is output 0 of `x`, `x:2` output 2.
pub fn input_source(input: &[u8]) -> (&[u8], Option<&[u8]>) {
    if let Some(name) = input.strip_prefix(b"^") {
        return (name, None);
    }
    match input.iter().rposition(|&b| b == b':') {
        Some(colon) if colon + 1 < input.len() && input[colon + 1..].iter().all(u8::is_ascii_digit) => {
            (&input[..colon], Some(&input[colon + 1..]))
        }
        _ => (input, Some(b"0")),
    }
}

/// A NodeDef of `name`, `op`, `inputs` (data, then control) and `device`,
/// without attributes (append them with [`put_attr`]).
pub fn new_node_def(name: &[u8], op: &[u8], inputs: &[&[u8]], device: &[u8]) -> Vec<u8> {
    let mut node = Vec::new();
    wire::put_bytes_field(NODE_NAME, name, &mut node);
    wire::put_bytes_field(NODE_OP, op, &mut node);
    for input in inputs {
        wire::put_bytes_field(NODE_INPUT, input, &mut node);
    }
    wire::put_bytes_field(NODE_DEVICE, device, &mut node);
    node
}

/// Appends the `type` attribute `key: dtype` (a `DataType` number).
pub fn put_type_attr(key: &[u8], dtype: u64, node: &mut Vec<u8>) {
    let mut value = Vec::new();
    wire::put_varint_field(ATTR_VALUE_TYPE, dtype, &mut value);
    put_attr(key, &value, node);
}

/// Appends the `bool` attribute `key: value`.
pub fn put_bool_attr(key: &[u8], value: bool, node: &mut Vec<u8>) {
    let mut attr_value = Vec::new();
    wire::put_varint_field(ATTR_VALUE_B, u64::from(value), &mut attr_value);
    put_attr(key, &attr_value, node);
}

/// Appends one `NodeDef.attr` map entry, `key: value` (AttrValue bytes).
pub fn put_attr(key: &[u8], attr_value: &[u8], node: &mut Vec<u8>) {
    let mut entry = Vec::new();
    wire::put_bytes_field(MAP_KEY, key, &mut entry);
    wire::put_bytes_field(MAP_VALUE, attr_value, &mut entry);
    wire::put_bytes_field(NODE_ATTR, &entry, node);
}

/// How [`edit_nodes`] treats the node at one index.
pub enum NodeEdit {
    Keep,
    Replace(Vec<u8>),
    /// Several nodes in the node's place.
    Expand(Vec<Vec<u8>>),
    Remove,
}

/// `graph` with each node edited as `edits` says (by position among the
/// nodes); every other field is copied byte for byte.
pub fn edit_nodes(graph: &[u8], edits: &[NodeEdit]) -> Result<Vec<u8>, GraphError> {
    let mut out = Vec::with_capacity(graph.len());
    let mut node_index = 0;
    for field in wire::raw_fields(graph) {
        let (field, raw) = field?;
        if field.number != GRAPH_NODE {
            out.extend_from_slice(raw);
            continue;
        }
        match edits.get(node_index) {
            Some(NodeEdit::Replace(node)) => wire::put_bytes_field(GRAPH_NODE, node, &mut out),
            Some(NodeEdit::Expand(nodes)) => {
                nodes.iter().for_each(|node| wire::put_bytes_field(GRAPH_NODE, node, &mut out))
            }
            Some(NodeEdit::Remove) => {}
            Some(NodeEdit::Keep) | None => out.extend_from_slice(raw),
        }
        node_index += 1;
    }
    Ok(out)
}

/// GraphDefs for the passes' unit tests.
#[cfg(test)]
pub mod testing {
    use super::*;

    pub const WASM0: &str = "/job:localhost/replica:0/task:0/device:WASM:0";
    pub const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

    /// A NodeDef without attributes.
    pub fn bare_node(name: &str, op: &str, inputs: &[&str], device: &str) -> Vec<u8> {
        let inputs: Vec<&[u8]> = inputs.iter().map(|i| i.as_bytes()).collect();
        new_node_def(name.as_bytes(), op.as_bytes(), &inputs, device.as_bytes())
    }

    /// A NodeDef of `op` with `T: float`.
    pub fn node(name: &str, op: &str, inputs: &[&str], device: &str) -> Vec<u8> {
        let mut n = bare_node(name, op, inputs, device);
        put_type_attr(b"T", DT_FLOAT, &mut n);
        n
    }

    /// A GraphDef of `nodes`, ending in a VersionDef the passes do not
    /// model (it must come through as is: the last [`TRAILER`] bytes).
    pub fn graph(nodes: &[Vec<u8>]) -> Vec<u8> {
        let mut g = Vec::new();
        for n in nodes {
            wire::put_bytes_field(GRAPH_NODE, n, &mut g);
        }
        let mut versions = Vec::new();
        wire::put_varint_field(1, 2140, &mut versions);
        wire::put_bytes_field(4, &versions, &mut g);
        g
    }

    /// Bytes of the VersionDef field [`graph`] ends with.
    pub const TRAILER: usize = 5;

    /// `rounds` copies of `good`, each with one byte replaced at a
    /// pseudo-random place (xorshift from `seed`: deterministic): mostly
    /// well-formed input for the passes' never-panic tests.
    pub fn mutations(good: &[u8], rounds: usize, mut seed: u64) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..rounds).map(move |_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut g = good.to_vec();
            let i = (seed as usize) % g.len();
            g[i] = (seed >> 32) as u8;
            g
        })
    }
}
