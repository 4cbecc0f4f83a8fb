//! Functional control flow placed on our device is lowered to the
//! executor's own form (`Switch`, `Merge`, `Enter`, `Exit`,
//! `NextIteration`), so each op of a loop or branch is placed on its own.
//!
//! TensorFlow lowers `While`, `If` and `Case` unless the function was traced
//! for XLA: there it leaves `_lower_using_switch_merge` unset, because XLA
//! compiles the functional form. Once [`super::xla`] has run such a function
//! without XLA on our device, a functional op runs its body as one
//! single-device function on the op's device. Every op of the body then
//! needs a kernel on that device, with no fallback to the CPU: a Keras
//! `Embedding` + `LSTM` model's gradient loop sums `TensorList`s with a
//! `variant` `AddN`, which no C-API kernel can implement, and fails.
//!
//! Setting the attribute on the node is enough: TensorFlow instantiates the
//! function graph this pass returns by lowering its functional ops, placing
//! the new nodes (soft placement moves what we have no kernel for to the
//! CPU), and partitioning. A node that already says whether to lower
//! (either way) is left as its author set it.

use super::schema::{node_defs, put_bool_attr, NodeEdit, NodeFields};
use super::xla::placed_on;
use super::{GraphError, Rewritten};

/// The attribute TensorFlow's lowering reads.
pub const LOWER_ATTR: &[u8] = b"_lower_using_switch_merge";

/// The functional control-flow ops TensorFlow can lower.
const FUNCTIONAL: [&[u8]; 6] = [b"While", b"StatelessWhile", b"If", b"StatelessIf", b"Case", b"StatelessCase"];

/// Marks every functional control-flow node of `graph` (a serialized
/// GraphDef) placed on a device of type `device_type`, and without a
/// `_lower_using_switch_merge` attribute, to be lowered.
///
/// Errors when the GraphDef or a NodeDef is not valid wire format
/// (TensorFlow then keeps its graph).
pub fn lower_control_flow(graph: &[u8], device_type: &str) -> Result<Rewritten, GraphError> {
    let mut edits = Vec::new();
    let mut nodes = Vec::new();
    for node in node_defs(graph) {
        let (node, node_at) = node?;
        let fields = NodeFields::read(node).map_err(|e| e.at(node_at))?;
        let lower = FUNCTIONAL.contains(&fields.op)
            && placed_on(fields.device, device_type)
            && !fields.attrs.iter().any(|(key, ..)| *key == LOWER_ATTR);
        if !lower {
            edits.push(NodeEdit::Keep);
            continue;
        }
        let mut marked = node.to_vec();
        put_bool_attr(LOWER_ATTR, true, &mut marked);
        edits.push(NodeEdit::Replace(marked));
        nodes.push(String::from_utf8_lossy(fields.name).into_owned());
    }
    Rewritten::from_edits(graph, &edits, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::schema::testing::{bare_node, graph, mutations, CPU0, TRAILER, WASM0};
    use crate::graph::schema::{attr_value, node_defs, ATTR_VALUE_B};
    use crate::graph::wire;

    fn with_lower(mut node: Vec<u8>, lower: bool) -> Vec<u8> {
        put_bool_attr(LOWER_ATTR, lower, &mut node);
        node
    }

    /// Each node's name and its `_lower_using_switch_merge` values, in order.
    fn lowering(graph: &[u8]) -> Vec<(String, Vec<bool>)> {
        node_defs(graph)
            .map(|node| {
                let fields = NodeFields::read(node.unwrap().0).unwrap();
                let values = fields
                    .attrs
                    .iter()
                    .filter(|(key, ..)| *key == LOWER_ATTR)
                    .map(|(_, value, _)| match attr_value(value).unwrap().unwrap() {
                        wire::Field { number: ATTR_VALUE_B, value: wire::Value::Varint { value, .. } } => value != 0,
                        other => panic!("not a bool: {other:?}"),
                    })
                    .collect();
                (String::from_utf8_lossy(fields.name).into_owned(), values)
            })
            .collect()
    }

    fn names(nodes: &[(String, Vec<bool>)]) -> Vec<(&str, &[bool])> {
        nodes.iter().map(|(name, values)| (name.as_str(), values.as_slice())).collect()
    }

    #[test]
    fn marks_every_functional_op_on_our_device() {
        let ops = ["While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"];
        let nodes: Vec<Vec<u8>> = ops.iter().map(|op| bare_node(&op.to_lowercase(), op, &["x"], WASM0)).collect();
        let input = graph(&nodes);
        let out = lower_control_flow(&input, "WASM").unwrap();
        assert_eq!(out.nodes, ["while", "statelesswhile", "if", "statelessif", "case", "statelesscase"]);
        let marked = lowering(&out.graph);
        assert!(marked.iter().all(|(_, values)| values == &[true]), "{marked:?}");
        // The rest of the graph comes through: the VersionDef, and every
        // node's own bytes ahead of the new attribute.
        assert_eq!(out.graph[out.graph.len() - TRAILER..], input[input.len() - TRAILER..]);
        for ((node, _), original) in node_defs(&out.graph).map(Result::unwrap).zip(&nodes) {
            assert_eq!(&node[..original.len()], &original[..]);
        }
    }

    #[test]
    fn leaves_other_devices_other_ops_and_set_attributes_alone() {
        let input = graph(&[
            bare_node("cpu_loop", "While", &["x"], CPU0),
            bare_node("call", "StatefulPartitionedCall", &["x"], WASM0),
            bare_node("unplaced", "While", &["x"], ""),
            bare_node("other_type", "While", &["x"], "/job:localhost/replica:0/task:0/device:WASM_X:0"),
            with_lower(bare_node("kept", "While", &["x"], WASM0), false),
            with_lower(bare_node("already", "If", &["x"], WASM0), true),
        ]);
        let out = lower_control_flow(&input, "WASM").unwrap();
        assert!(out.nodes.is_empty());
        assert_eq!(out.graph, input);
        let nodes = lowering(&out.graph);
        assert_eq!(
            names(&nodes),
            [
                ("cpu_loop", &[][..]),
                ("call", &[]),
                ("unplaced", &[]),
                ("other_type", &[]),
                ("kept", &[false]),
                ("already", &[true]),
            ]
        );
    }

    #[test]
    fn marks_only_what_needs_it_in_a_mixed_graph() {
        let input = graph(&[
            bare_node("x", "Placeholder", &[], WASM0),
            bare_node("loop", "While", &["x"], WASM0),
            bare_node("cpu_loop", "While", &["x"], CPU0),
            bare_node("branch", "StatelessIf", &["x", "loop:1"], "/device:WASM:1"),
        ]);
        let out = lower_control_flow(&input, "WASM").unwrap();
        assert_eq!(out.nodes, ["loop", "branch"]);
        let nodes = lowering(&out.graph);
        assert_eq!(names(&nodes), [("x", &[][..]), ("loop", &[true]), ("cpu_loop", &[]), ("branch", &[true])]);
        // Idempotent: TensorFlow may run the pass on its own output.
        let again = lower_control_flow(&out.graph, "WASM").unwrap();
        assert!(again.nodes.is_empty());
        assert_eq!(again.graph, out.graph);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good = graph(&[bare_node("loop", "While", &["x"], WASM0)]);
        for cut in 0..good.len() {
            let _ = lower_control_flow(&good[..cut], "WASM");
        }
        assert!(lower_control_flow(&good[..good.len() - 1], "WASM").is_err());
        for g in mutations(&good, 5_000, 0x2545_f491_4f6c_dd1d) {
            let _ = lower_control_flow(&g, "WASM");
        }
    }
}
