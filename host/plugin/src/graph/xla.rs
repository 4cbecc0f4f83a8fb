//! Run `jit_compile=True` function calls placed on our device without XLA.
//!
//! TensorFlow marks a call to a `tf.function(jit_compile=True)` with the
//! attribute `_XlaMustCompile: true`. When the kernel for such a node is
//! built, TensorFlow's XLA kernel creator takes it over on whatever device
//! the node was placed, and XLA then fails with `No JIT device registered for
//! WASM`: a StreamExecutor PluggableDevice of a custom type cannot have an
//! XLA backend in TensorFlow 2.21. Keras 3 asks for exactly that whenever a
//! non-CPU device exists (`jit_compile="auto"`).
//!
//! This pass runs after placement and sets the flag to `false` on nodes
//! placed on our device, so TensorFlow runs them as ordinary function calls
//! with the device's kernels. Nodes on any other device keep XLA.
//!
//! Why the bytes are patched and not decoded: a GraphDef decoded with prost
//! (or any generated code) keeps only the fields its schema models; the rest
//! would be silently dropped or reordered on the way back. The pass must hand
//! TensorFlow its graph byte for byte, except the flag. `b: true` is the
//! varint `01` and `b: false` the varint `00` of the same length, so the
//! patch changes no length prefix.

use super::schema::{attr_value, node_defs, NodeFields, ATTR_VALUE_B};
use super::wire::{self, Value};
use super::{GraphError, Rewritten};

/// The attribute TensorFlow sets on calls of `jit_compile=True` functions.
pub const XLA_MUST_COMPILE: &[u8] = b"_XlaMustCompile";

/// Sets `_XlaMustCompile` to false on every node of `graph` (a serialized
/// GraphDef) placed on a device of type `device_type`. The graph keeps its
/// length: each flag is patched in place; `nodes` names the nodes patched.
///
/// Errors when the GraphDef, a NodeDef or an attribute it has to read is not
/// valid wire format (TensorFlow then keeps its graph).
pub fn clear_must_compile(graph: &[u8], device_type: &str) -> Result<Rewritten, GraphError> {
    let mut flags = Vec::new();
    let mut nodes = Vec::new();
    for node in node_defs(graph) {
        let (node, node_at) = node?;
        let found = must_compile_flags(node, device_type).map_err(|e| e.at(node_at))?;
        if !found.flags.is_empty() {
            flags.extend(found.flags.into_iter().map(|r| r.start + node_at..r.end + node_at));
            nodes.push(found.name);
        }
    }
    let mut graph = graph.to_vec();
    for range in flags {
        // The same number of bytes, value 0: continuation bytes then `00`.
        let last = range.end - 1;
        graph[range.start..last].fill(0x80);
        graph[last] = 0;
    }
    Ok(Rewritten { graph, nodes })
}

struct NodeFlags {
    name: String,
    /// Ranges (within the NodeDef) of the varints of `b: true` to clear.
    flags: Vec<std::ops::Range<usize>>,
}

/// The `_XlaMustCompile: true` varints of one NodeDef, if it is placed on
/// `device_type` (none otherwise).
fn must_compile_flags(node: &[u8], device_type: &str) -> Result<NodeFlags, GraphError> {
    let fields = NodeFields::read(node)?;
    let name = String::from_utf8_lossy(fields.name).into_owned();
    let mut flags = Vec::new();
    if !placed_on(fields.device, device_type) {
        return Ok(NodeFlags { name, flags });
    }
    for &(_, value, value_at) in fields.attrs.iter().filter(|(key, ..)| *key == XLA_MUST_COMPILE) {
        let last = attr_value(value).map_err(|e| e.at(value_at))?;
        if let Some(wire::Field { number: ATTR_VALUE_B, value: Value::Varint { value: b, range } }) = last {
            if b != 0 {
                flags.push(range.start + value_at..range.end + value_at);
            }
        }
    }
    Ok(NodeFlags { name, flags })
}

/// True if `device`, a NodeDef's device field, names a device of type
/// `device_type`. After placement TensorFlow writes full names,
/// `/job:localhost/replica:0/task:0/device:WASM:0`; the device component is
/// `device:<TYPE>:<id>` (or `device:<TYPE>` / `device:<TYPE>:*` in a partial
/// spec). The type must match exactly: `WASM` is not `WASM_X`.
pub fn placed_on(device: &[u8], device_type: &str) -> bool {
    let Ok(device) = std::str::from_utf8(device) else { return false };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::schema::{GRAPH_NODE, MAP_KEY, MAP_VALUE, NODE_ATTR, NODE_DEVICE, NODE_NAME};

    // Builders of the graphs TensorFlow sends, on the wire module's writer.
    fn len_field(number: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        wire::put_bytes_field(number, payload, &mut out);
        out
    }
    fn varint_field(number: u32, value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        wire::put_varint_field(number, value, &mut out);
        out
    }
    fn attr(key: &str, value: &[u8]) -> Vec<u8> {
        len_field(NODE_ATTR, &[len_field(MAP_KEY, key.as_bytes()), len_field(MAP_VALUE, value)].concat())
    }
    fn bool_attr(key: &str, b: bool) -> Vec<u8> {
        attr(key, &varint_field(ATTR_VALUE_B, b as u64))
    }
    /// A StatefulPartitionedCall NodeDef as TensorFlow serializes it.
    fn call(name: &str, device: &str, must_compile: Option<bool>) -> Vec<u8> {
        let mut node = [
            len_field(NODE_NAME, name.as_bytes()),
            len_field(2, b"StatefulPartitionedCall"),
            len_field(3, b"iterator"),
            len_field(NODE_DEVICE, device.as_bytes()),
            // f: a NameAttrList (AttrValue.func = 10), a nested message
            attr("f", &len_field(10, &len_field(1, b"__inference_one_step_on_data_123"))),
            bool_attr("_noinline", true),
        ]
        .concat();
        if let Some(b) = must_compile {
            node.extend(bool_attr("_XlaMustCompile", b));
        }
        node
    }
    fn graph(nodes: &[Vec<u8>]) -> Vec<u8> {
        let mut g: Vec<u8> = nodes.iter().flat_map(|n| len_field(GRAPH_NODE, n)).collect();
        // a FunctionDefLibrary and VersionDef we do not model: must survive as is
        g.extend(len_field(2, &len_field(1, &len_field(1, b"signature"))));
        g.extend(len_field(4, &[varint_field(1, 2140), varint_field(2, 0)].concat()));
        g
    }
    fn changed(before: &[u8], after: &[u8]) -> Vec<usize> {
        assert_eq!(before.len(), after.len());
        (0..before.len()).filter(|&i| before[i] != after[i]).collect()
    }
    const WASM0: &str = "/job:localhost/replica:0/task:0/device:WASM:0";
    const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

    #[test]
    fn clears_the_flag_only_on_our_device() {
        let wasm = call("wasm_call", WASM0, Some(true));
        let g = graph(&[wasm.clone(), call("cpu_call", CPU0, Some(true))]);
        let out = clear_must_compile(&g, "WASM").unwrap();
        assert_eq!(out.nodes, ["wasm_call"]);
        let diff = changed(&g, &out.graph);
        assert_eq!(diff.len(), 1, "exactly one byte changes");
        assert_eq!((g[diff[0]], out.graph[diff[0]]), (1, 0));
        assert!(diff[0] < len_field(GRAPH_NODE, &wasm).len(), "the changed byte is in the WASM node");
        // The same graph, built with the flag false, is what comes out.
        assert_eq!(out.graph, graph(&[call("wasm_call", WASM0, Some(false)), call("cpu_call", CPU0, Some(true))]));
    }

    #[test]
    fn leaves_other_devices_false_flags_and_unflagged_nodes_alone() {
        let g = graph(&[
            call("cpu", CPU0, Some(true)),
            call("off", WASM0, Some(false)),
            call("plain", WASM0, None),
            call("unplaced", "", Some(true)),
            call("prefix", "/job:localhost/replica:0/task:0/device:WASM_X:0", Some(true)),
            call("suffix", "/job:localhost/replica:0/task:0/device:MYWASM:0", Some(true)),
        ]);
        let out = clear_must_compile(&g, "WASM").unwrap();
        assert!(out.nodes.is_empty());
        assert_eq!(out.graph, g);
    }

    #[test]
    fn every_device_of_the_type_and_every_name_form() {
        for device in
            [WASM0, "/job:localhost/replica:0/task:0/device:WASM:1", "/device:WASM:0", "/device:WASM:*", "/device:WASM"]
        {
            let g = graph(&[call("c", device, Some(true))]);
            assert_eq!(clear_must_compile(&g, "WASM").unwrap().nodes, ["c"], "{device}");
        }
        for device in ["/device:WASM:", "/device:WASM:x", "/device:wasm:0", "/job:WASM/device:CPU:0", "WASM:0"] {
            let g = graph(&[call("c", device, Some(true))]);
            assert!(clear_must_compile(&g, "WASM").unwrap().nodes.is_empty(), "{device}");
        }
        // TFWASM_DEVICE_TYPE renames the device; the pass follows it.
        let g = graph(&[call("c", "/device:MY_DEV:0", Some(true)), call("w", WASM0, Some(true))]);
        assert_eq!(clear_must_compile(&g, "MY_DEV").unwrap().nodes, ["c"]);
    }

    #[test]
    fn non_canonical_true_keeps_its_length() {
        // b encoded as the 2-byte varint `81 00` (= 1), still `true` to TensorFlow.
        let mut node = call("c", WASM0, None);
        node.extend(attr("_XlaMustCompile", &[0x28, 0x81, 0x00]));
        let g = graph(&[node]);
        let out = clear_must_compile(&g, "WASM").unwrap();
        let diff = changed(&g, &out.graph);
        assert_eq!(diff.len(), 1);
        assert_eq!(&out.graph[diff[0]..diff[0] + 2], &[0x80, 0x00], "81 00 became 80 00");
    }

    #[test]
    fn the_last_oneof_field_is_the_value() {
        // AttrValue{b: true, s: "x"}: the value is s, TensorFlow reads b() as false.
        let mut node = call("c", WASM0, None);
        node.extend(attr("_XlaMustCompile", &[varint_field(ATTR_VALUE_B, 1), len_field(2, b"x")].concat()));
        let g = graph(&[node]);
        assert_eq!(clear_must_compile(&g, "WASM").unwrap().graph, g);
    }

    #[test]
    fn field_order_does_not_matter() {
        // attr before device (TensorFlow writes in field order, others need not)
        let node =
            [bool_attr("_XlaMustCompile", true), len_field(NODE_DEVICE, WASM0.as_bytes()), len_field(NODE_NAME, b"c")]
                .concat();
        let out = clear_must_compile(&graph(&[node]), "WASM").unwrap();
        assert_eq!(out.nodes, ["c"]);
    }

    #[test]
    fn empty_graph_is_fine() {
        let out = clear_must_compile(&[], "WASM").unwrap();
        assert!(out.graph.is_empty() && out.nodes.is_empty());
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good = graph(&[call("c", WASM0, Some(true))]);
        // Every truncation of a valid graph is either still valid (cut at a field
        // boundary) or an error; never a panic.
        for cut in 0..good.len() {
            let _ = clear_must_compile(&good[..cut], "WASM");
        }
        assert!(clear_must_compile(&good[..good.len() - 1], "WASM").is_err());
        // GraphDef.node with a varint wire type
        assert!(clear_must_compile(&varint_field(GRAPH_NODE, 1), "WASM").is_err());
        // a node whose attr entry overruns
        let bad_node = [len_field(NODE_DEVICE, WASM0.as_bytes()), vec![0x2a, 0x05, 0x0a]].concat();
        let err = clear_must_compile(&len_field(GRAPH_NODE, &bad_node), "WASM").unwrap_err();
        assert!(err.to_string().contains("byte"), "{err}");
    }

    #[test]
    fn random_bytes_never_panic_and_never_change_length() {
        // xorshift: deterministic, no dependency
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seed = graph(&[call("a", WASM0, Some(true)), call("b", CPU0, Some(true))]);
        for round in 0..20_000 {
            let input: Vec<u8> = if round % 2 == 0 {
                let len = (next() % 200) as usize;
                (0..len).map(|_| next() as u8).collect()
            } else {
                // mutate a valid graph in a few places: mostly-structured input
                let mut g = seed.clone();
                for _ in 0..1 + next() % 3 {
                    let i = (next() as usize) % g.len();
                    g[i] = next() as u8;
                }
                g
            };
            if let Ok(out) = clear_must_compile(&input, "WASM") {
                assert_eq!(out.graph.len(), input.len());
                let diff = changed(&input, &out.graph);
                assert_eq!(diff.is_empty(), out.nodes.is_empty());
                assert!(diff.iter().all(|&i| matches!(out.graph[i], 0x00 | 0x80)));
            }
        }
    }
}
