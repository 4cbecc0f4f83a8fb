//! A `TensorList` that a CPU-only op updates on every iteration of a loop
//! is carried around the loop on the CPU.
//!
//! The gradient of a loop that reads a `TensorList` (an LSTM's inputs, when
//! something trainable made them: an `Embedding`, another LSTM) sums list
//! gradients with a `variant` `AddN`, which no C-API kernel can implement,
//! so TensorFlow places it on the CPU. The loop variable it feeds, its
//! `Enter`, `Merge`, `Switch`, `Identity`, `NextIteration` and `Exit`, may
//! stay on our device. Then the list crosses to the CPU and back on every
//! iteration, and a `TensorList` crosses devices element by element: 20
//! steps of 20 elements made an `Embedding` + `LSTM(64)` train step ~4×
//! the CPU device's. Placed with the `AddN`, the loop variable crosses
//! only where our kernels read or write an element.
//!
//! The frame ops have CPU kernels for `variant`; TensorFlow partitions a
//! frame that spans devices as it does when soft placement splits one.

use super::schema::{index_by_name, input_source, read_node_fields, NodeEdit, NodeFields, DT_VARIANT, NODE_DEVICE};
use super::wire;
use super::xla::placed_on;
use super::{GraphError, Preserve, Rewritten};

/// The ops that only carry a value through a loop (and `Identity`).
const FRAME: [&[u8]; 6] = [b"Enter", b"Exit", b"Merge", b"Switch", b"NextIteration", b"Identity"];

/// Moves to the CPU of each `variant` `AddN` on a CPU the `variant` frame
/// ops on `device_type` connected to it through data edges of frame ops.
/// Nodes in `preserve` stay.
///
/// Errors when the GraphDef or a NodeDef is not valid wire format. A graph
/// with two nodes of one name is returned unchanged.
pub fn carry_on_cpu(graph: &[u8], device_type: &str, preserve: Preserve<'_>) -> Result<Rewritten, GraphError> {
    let unchanged = || Rewritten { graph: graph.to_vec(), nodes: Vec::new() };
    let (raw, nodes) = read_node_fields(graph)?;
    let seeds: Vec<usize> = (0..nodes.len())
        .filter(|&i| {
            let node = &nodes[i];
            node.op == b"AddN" && node.type_attr(b"T") == Some(DT_VARIANT) && placed_on(node.device, "CPU")
        })
        .collect();
    if seeds.is_empty() {
        return Ok(unchanged());
    }
    let Some(by_name) = index_by_name(&nodes, |node| node.name) else { return Ok(unchanged()) };
    // Data edges both ways: each node's producers and consumers.
    let mut neighbours: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (consumer, node) in nodes.iter().enumerate() {
        for input in node.data_inputs() {
            if let Some(&producer) = by_name.get(input_source(input).0) {
                neighbours[consumer].push(producer);
                neighbours[producer].push(consumer);
            }
        }
    }
    let carries = |node: &NodeFields<'_>| {
        FRAME.contains(&node.op)
            && node.type_attr(b"T") == Some(DT_VARIANT)
            && placed_on(node.device, device_type)
            && !preserve(node.name)
    };
    let mut target: Vec<Option<&[u8]>> = vec![None; nodes.len()];
    for seed in seeds {
        let mut stack = vec![seed];
        while let Some(at) = stack.pop() {
            for &next in &neighbours[at] {
                if target[next].is_none() && carries(&nodes[next]) {
                    target[next] = Some(nodes[seed].device);
                    stack.push(next);
                }
            }
        }
    }
    let mut moved = Vec::new();
    let mut edits = Vec::with_capacity(nodes.len());
    for ((node, bytes), device) in nodes.iter().zip(&raw).zip(&target) {
        match device {
            None => edits.push(NodeEdit::Keep),
            Some(device) => {
                edits.push(NodeEdit::Replace(with_device(bytes, device)?));
                moved.push(String::from_utf8_lossy(node.name).into_owned());
            }
        }
    }
    Rewritten::from_edits(graph, &edits, moved)
}

/// `node` with its device field set to `device`.
fn with_device(node: &[u8], device: &[u8]) -> Result<Vec<u8>, GraphError> {
    let mut out = Vec::with_capacity(node.len() + device.len());
    for field in wire::raw_fields(node) {
        let (field, raw) = field?;
        if field.number != NODE_DEVICE {
            out.extend_from_slice(raw);
        }
    }
    wire::put_bytes_field(NODE_DEVICE, device, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::schema::testing::{bare_node, graph, mutations, CPU0, TRAILER, WASM0};
    use crate::graph::schema::{node_defs, put_type_attr};

    fn typed(name: &str, op: &str, inputs: &[&str], device: &str, dtype: u64) -> Vec<u8> {
        let mut node = bare_node(name, op, inputs, device);
        put_type_attr(b"T", dtype, &mut node);
        node
    }
    fn variant(name: &str, op: &str, inputs: &[&str], device: &str) -> Vec<u8> {
        typed(name, op, inputs, device, DT_VARIANT)
    }
    fn keep_nothing(_: &[u8]) -> bool {
        false
    }
    fn devices(graph: &[u8]) -> Vec<(String, String)> {
        node_defs(graph)
            .map(|node| {
                let fields = NodeFields::read(node.unwrap().0).unwrap();
                let short = |d: &[u8]| String::from_utf8_lossy(d).rsplit('/').next().unwrap().to_owned();
                (String::from_utf8_lossy(fields.name).into_owned(), short(fields.device))
            })
            .collect()
    }

    /// The gradient loop of an LSTM over a TensorList, as TensorFlow
    /// lowers and places it: the list gradient's loop variable on WASM, the
    /// `AddN` summing it with one step's gradient on the CPU.
    fn gradient_loop() -> Vec<Vec<u8>> {
        vec![
            variant("zeros", "ZerosLike", &["list"], CPU0),
            variant("enter", "Enter", &["zeros"], WASM0),
            variant("merge", "Merge", &["enter", "next"], WASM0),
            bare_node("cond", "LoopCond", &["less"], WASM0),
            variant("switch", "Switch", &["merge", "cond"], WASM0),
            variant("identity", "Identity", &["switch:1"], WASM0),
            typed("grad", "Tanh", &["x"], WASM0, 1),
            variant("set", "TensorListSetItem", &["reserve", "i", "grad"], WASM0),
            variant("addn", "AddN", &["identity", "set"], CPU0),
            variant("next", "NextIteration", &["addn"], WASM0),
            variant("exit", "Exit", &["switch"], WASM0),
            typed("stack", "TensorListStack", &["exit", "shape"], WASM0, 1),
            // another loop variable, a tensor: stays
            typed("h_merge", "Merge", &["h_enter", "h_next"], WASM0, 1),
            typed("h_switch", "Switch", &["h_merge", "cond"], WASM0, 1),
        ]
    }

    #[test]
    fn the_loop_variable_of_a_cpu_addn_moves_to_its_cpu() {
        let input = graph(&gradient_loop());
        let out = carry_on_cpu(&input, "WASM", &keep_nothing).unwrap();
        assert_eq!(out.nodes, ["enter", "merge", "switch", "identity", "next", "exit"]);
        let on_cpu: Vec<String> =
            devices(&out.graph).into_iter().filter(|(_, d)| d == "device:CPU:0").map(|(n, _)| n).collect();
        assert_eq!(on_cpu, ["zeros", "enter", "merge", "switch", "identity", "addn", "next", "exit"]);
        assert_eq!(out.graph[out.graph.len() - TRAILER..], input[input.len() - TRAILER..]);
        // Idempotent.
        let again = carry_on_cpu(&out.graph, "WASM", &keep_nothing).unwrap();
        assert!(again.nodes.is_empty());
        assert_eq!(again.graph, out.graph);
    }

    #[test]
    fn nothing_moves_without_a_cpu_variant_addn() {
        for addn in [
            variant("addn", "AddN", &["identity", "set"], WASM0), // (not placeable, but not ours to move)
            typed("addn", "AddN", &["identity", "set"], CPU0, 1), // a float AddN on the CPU
        ] {
            let mut nodes = gradient_loop();
            nodes[8] = addn;
            let input = graph(&nodes);
            let out = carry_on_cpu(&input, "WASM", &keep_nothing).unwrap();
            assert!(out.nodes.is_empty());
            assert_eq!(out.graph, input);
        }
    }

    #[test]
    fn preserved_nodes_and_duplicate_names_stay() {
        let input = graph(&gradient_loop());
        let out = carry_on_cpu(&input, "WASM", &|name| name == b"merge").unwrap();
        // The walk stops at the kept Merge: `enter` is reached only through it.
        assert_eq!(out.nodes, ["switch", "identity", "next", "exit"]);
        let mut nodes = gradient_loop();
        nodes.push(variant("merge", "Merge", &[], WASM0));
        let input = graph(&nodes);
        assert_eq!(carry_on_cpu(&input, "WASM", &keep_nothing).unwrap().graph, input);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good = graph(&gradient_loop());
        for cut in 0..good.len() {
            let _ = carry_on_cpu(&good[..cut], "WASM", &keep_nothing);
        }
        assert!(carry_on_cpu(&good[..good.len() - 1], "WASM", &keep_nothing).is_err());
        for g in mutations(&good, 3_000, 0x9e37_79b9_7f4a_7c15) {
            let _ = carry_on_cpu(&g, "WASM", &keep_nothing);
        }
    }
}
