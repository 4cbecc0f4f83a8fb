//! Field numbers of the GraphDef messages the passes read and write, from
//! TensorFlow's `framework/{graph,node_def,attr_value,types}.proto`.

/// `GraphDef.node` (repeated NodeDef).
pub const GRAPH_NODE: u32 = 1;

pub const NODE_NAME: u32 = 1;
pub const NODE_OP: u32 = 2;
/// `NodeDef.input` (repeated string): `name`, `name:port` or `^name` (a
/// control input, after all data inputs).
pub const NODE_INPUT: u32 = 3;
pub const NODE_DEVICE: u32 = 4;
/// `NodeDef.attr`: map entries of `key` (1) and `value` (2, an AttrValue).
pub const NODE_ATTR: u32 = 5;
pub const MAP_KEY: u32 = 1;
pub const MAP_VALUE: u32 = 2;

/// `AttrValue` is one oneof: the last field on the wire is the value.
pub const ATTR_VALUE_S: u32 = 2;
pub const ATTR_VALUE_I: u32 = 3;
pub const ATTR_VALUE_B: u32 = 5;
pub const ATTR_VALUE_TYPE: u32 = 6;

/// `DataType.DT_FLOAT`.
pub const DT_FLOAT: u64 = 1;

use super::wire;
use super::GraphError;

/// The NodeDefs of a serialized GraphDef, each with its offset in `graph`
/// (for errors and patches relative to the whole graph).
pub fn node_defs(graph: &[u8]) -> impl Iterator<Item = Result<(&[u8], usize), GraphError>> {
    wire::fields(graph).filter_map(move |field| match field {
        Err(error) => Some(Err(error)),
        Ok(field) if field.number == GRAPH_NODE => Some(wire::bytes(graph, &field, "GraphDef.node is not a message")),
        Ok(_) => None,
    })
}

/// The key and the AttrValue bytes (with their offset in `entry`) of one
/// `NodeDef.attr` map entry.
pub fn attr_entry(entry: &[u8]) -> Result<(&[u8], Option<(&[u8], usize)>), GraphError> {
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
