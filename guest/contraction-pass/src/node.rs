//! Reading and writing the parts of a NodeDef the fusion looks at:
//! placement, inputs, attributes.

use tfwasm_proto::graph::{attr_value, AttrValue, DataType, NodeDef};

pub use tfwasm_pass_sdk::{on_device, Map, Set};

/// `DT_FLOAT`, as the `type` of an AttrValue.
pub const DT_FLOAT: i32 = DataType::DtFloat as i32;

/// What one input of a node reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source<'a> {
    /// Output `port` of node `node` (`x` is `x:0`).
    Data { node: &'a str, port: u32 },
    /// A control edge from `node` (`^x`).
    Control { node: &'a str },
}

impl<'a> Source<'a> {
    pub fn parse(input: &'a str) -> Source<'a> {
        if let Some(node) = input.strip_prefix('^') {
            return Source::Control { node };
        }
        if let Some((node, port)) = input.rsplit_once(':') {
            if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
                // An absurd port is no output of anything: u32::MAX stands for it.
                return Source::Data { node, port: port.parse().unwrap_or(u32::MAX) };
            }
        }
        Source::Data { node: input, port: 0 }
    }

    pub fn node(&self) -> &'a str {
        match *self {
            Source::Data { node, .. } | Source::Control { node } => node,
        }
    }
}

/// Data inputs, in order (every input but `^name`).
pub fn data_inputs(node: &NodeDef) -> impl Iterator<Item = &str> {
    node.input.iter().map(String::as_str).filter(|i| !i.starts_with('^'))
}

/// Control inputs (`^name`), in order.
pub fn control_inputs(node: &NodeDef) -> impl Iterator<Item = &str> {
    node.input.iter().map(String::as_str).filter(|i| i.starts_with('^'))
}

pub fn attr<'n>(node: &'n NodeDef, key: &str) -> Option<&'n attr_value::Value> {
    node.attr.get(key)?.value.as_ref()
}

/// The `type` attribute `key`, if the node has one.
pub fn type_attr(node: &NodeDef, key: &str) -> Option<i32> {
    match attr(node, key)? {
        attr_value::Value::Type(t) => Some(*t),
        _ => None,
    }
}

/// The `string` attribute `key`, if the node has one.
pub fn string_attr<'n>(node: &'n NodeDef, key: &str) -> Option<&'n [u8]> {
    match attr(node, key)? {
        attr_value::Value::S(s) => Some(s),
        _ => None,
    }
}

/// The `float` attribute `key`, if the node has one.
pub fn float_attr(node: &NodeDef, key: &str) -> Option<f32> {
    match attr(node, key)? {
        attr_value::Value::F(f) => Some(*f),
        _ => None,
    }
}

pub fn value(value: attr_value::Value) -> AttrValue {
    AttrValue { value: Some(value) }
}

pub fn type_list(types: &[i32]) -> AttrValue {
    value(attr_value::Value::List(attr_value::ListValue { r#type: types.to_vec(), ..Default::default() }))
}

pub fn string_list(strings: &[&str]) -> AttrValue {
    let s = strings.iter().map(|s| s.as_bytes().to_vec()).collect();
    value(attr_value::Value::List(attr_value::ListValue { s, ..Default::default() }))
}

pub fn int_list(ints: &[i64]) -> AttrValue {
    value(attr_value::Value::List(attr_value::ListValue { i: ints.to_vec(), ..Default::default() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_name_a_node_and_an_output_or_a_control_edge() {
        assert_eq!(Source::parse("x"), Source::Data { node: "x", port: 0 });
        assert_eq!(Source::parse("x:0"), Source::Data { node: "x", port: 0 });
        assert_eq!(Source::parse("x:2"), Source::Data { node: "x", port: 2 });
        assert_eq!(Source::parse("a:b:10"), Source::Data { node: "a:b", port: 10 });
        assert_eq!(Source::parse("x:"), Source::Data { node: "x:", port: 0 });
        assert_eq!(Source::parse("x:99999999999"), Source::Data { node: "x", port: u32::MAX });
        assert_eq!(Source::parse("^x"), Source::Control { node: "x" });
        assert_eq!(Source::parse("^x").node(), "x");
    }
}
