//! Reading NodeDefs the way TensorFlow (and the plugin's native passes)
//! read them: placement, inputs, type attributes.

use tfwasm_proto::graph::{attr_value, AttrValue, DataType, NodeDef};

pub use tfwasm_pass_sdk::{on_device, Map, Set};

/// `DT_FLOAT`, as the `type` of an AttrValue.
pub const DT_FLOAT: i32 = DataType::DtFloat as i32;

/// The node an input names and the output it reads (`None` for a control
/// input): `x` is output `"0"` of `x`, `x:2` output `"2"`. The port stays
/// text, as written (`x:00` is not `x:0` to the fusion, as it is not to the
/// native pass).
pub fn input_source(input: &str) -> (&str, Option<&str>) {
    if let Some(name) = input.strip_prefix('^') {
        return (name, None);
    }
    match input.rfind(':') {
        Some(colon) if colon + 1 < input.len() && input[colon + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            (&input[..colon], Some(&input[colon + 1..]))
        }
        _ => (input, Some("0")),
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

/// The value of the `type` attribute `key`, if the node has one.
pub fn type_attr(node: &NodeDef, key: &str) -> Option<i32> {
    match node.attr.get(key)?.value {
        Some(attr_value::Value::Type(t)) => Some(t),
        _ => None,
    }
}

/// An AttrValue holding a `type`.
pub fn type_value(dtype: i32) -> AttrValue {
    AttrValue { value: Some(attr_value::Value::Type(dtype)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_name_a_node_and_a_port() {
        assert_eq!(input_source("x"), ("x", Some("0")));
        assert_eq!(input_source("x:2"), ("x", Some("2")));
        assert_eq!(input_source("a:b:10"), ("a:b", Some("10")));
        assert_eq!(input_source("x:"), ("x:", Some("0")));
        assert_eq!(input_source("x:y"), ("x:y", Some("0")));
        assert_eq!(input_source("^x"), ("x", None));
    }
}
