//! Reading NodeDefs the way TensorFlow (and the plugin's native passes)
//! read them: placement, inputs, type attributes.

use tfwasm_proto::graph::{attr_value, AttrValue, DataType, NodeDef};

/// Maps and sets keyed by node name. A fixed seed: std's random one would
/// make the guest import `wasi:random`, and the host's deadline bounds what
/// a graph crafted to collide could cost.
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
pub type Set<T> = std::collections::HashSet<T, foldhash::fast::FixedState>;

/// `DT_FLOAT`, as the `type` of an AttrValue.
pub const DT_FLOAT: i32 = DataType::DtFloat as i32;

/// Whether `device` (a full or partial device string, e.g.
/// `/job:localhost/replica:0/task:0/device:WASM:0`) names a device of type
/// `device_type`: its last `device:` component is `TYPE`, `TYPE:N` or
/// `TYPE:*`.
pub fn placed_on(device: &str, device_type: &str) -> bool {
    let Some(component) = device.split('/').rev().find_map(|c| c.strip_prefix("device:")) else { return false };
    let (ty, id) = match component.split_once(':') {
        Some((ty, id)) => (ty, Some(id)),
        None => (component, None),
    };
    ty == device_type
        && match id {
            None => true,
            Some(id) => id == "*" || (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())),
        }
}

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
    fn placement_reads_the_last_device_component() {
        assert!(placed_on("/job:localhost/replica:0/task:0/device:WASM:0", "WASM"));
        assert!(placed_on("/device:WASM:*", "WASM"));
        assert!(placed_on("device:WASM", "WASM"));
        assert!(!placed_on("/device:WASM:x", "WASM"));
        assert!(!placed_on("/device:WASM:", "WASM"));
        assert!(!placed_on("/job:localhost/device:CPU:0", "WASM"));
        assert!(!placed_on("", "WASM"));
    }

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
