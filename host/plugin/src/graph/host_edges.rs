//! Let tensors cross between the CPU device and ours in host memory.
//!
//! A data edge from a node on the CPU device to one of our kernels crosses
//! devices, so TensorFlow partitions it into a `_Send`/`_Recv` pair. When
//! the receiving side wants device memory, the `_Recv` allocates a device
//! buffer, queues a host-to-device copy on the device's stream and
//! completes through a stream event that TensorFlow's event-manager thread
//! polls, then hands the completion to another thread. On two cores those
//! hand-offs cost ~0.1 ms per edge and call, and every Keras train step has
//! at least two such edges (the batch's features and labels come from the
//! CPU iterator). When the receiving side wants host memory instead,
//! TensorFlow passes the sender's tensor by reference, on the calling
//! thread: no copy, no event, no hand-off. The same holds the other way,
//! for a device tensor produced in host memory and read only on the CPU.
//!
//! Our device's memory is host memory (the region is an anonymous mapping
//! in this process) and our kernels read and write through plain pointers,
//! so any argument of theirs may live in host memory. The pass tells
//! TensorFlow so with its per-node attributes `_input_hostmem` (input
//! indices TensorFlow keeps in host memory) and `_output_hostmem` (output
//! indices allocated there), which TensorFlow's memory-type lookup honours
//! for every node:
//!
//! - an input of one of our kernels that comes from a node on a CPU device
//!   is marked;
//! - an output of one of our kernels whose every reader is on a CPU device
//!   is marked, unless TensorFlow asks to preserve the node (a fetch may
//!   be read in device memory);
//! - so is the output of TensorFlow's `Identity` on our device when every
//!   reader is on a CPU (Keras' train step hands its loss to the CPU
//!   through one), with its input too when that comes from a CPU node.
//!   `Identity` passes on the tensor it got: if that is a device tensor,
//!   the CPU reads it in place, which is sound because our device memory
//!   is host memory.
//!
//! - int32 crosses between our kernels in host memory. TensorFlow keeps an
//!   int32 argument whose type comes from `T` (an `AddV2`, a `Prod` of
//!   shape values) in host memory on a device like ours, but `Cast` types
//!   its arguments with `SrcT` and `DstT`, which that rule misses: an int32
//!   edge between a `Cast` and another kernel of ours crossed memory types,
//!   and TensorFlow copied it through the stream, with an event, on every
//!   call (a custom training loop's `reduce_mean` gradient casts the
//!   element count, a `Prod`, to float each step). So a `Cast` from int32
//!   takes its input in host memory, and one to int32 makes its output
//!   there (unless TensorFlow asks to preserve the node).
//!
//! - Our kernels meet TensorFlow's own kernels on our device in host memory
//!   where those keep an argument there ([`in_host_memory`]): a `while`
//!   loop's condition joins int32 `Less`es (TensorFlow's, host memory) with
//!   our `LogicalAnd` for `LoopCond` (host memory), so `LogicalAnd` takes
//!   its inputs and makes its output there. Before, each iteration of a
//!   Keras LSTM copied through the stream three times.
//! - Both ends of an edge inside the device agree: an output of ours read
//!   in host memory there is made in host memory when its other readers
//!   are ours, and they read it there too.
//!
//! Edges between two nodes on our device are otherwise not touched: a host tensor
//! feeding a device-memory input there would make TensorFlow insert a copy.
//! Other kernels of TensorFlow's on our device (variable ops) are not
//! marked, and neither is an `Identity` that a node on our device reads:
//! they may pass a host input on as a device tensor, which TensorFlow's
//! device copies would then refuse. (Ours never do: `abi::kernels` copies
//! a host input that a kernel asks to forward.) Existing marks on nodes of
//! our device are replaced, so running the pass again, after fusion changed
//! a node's inputs, leaves no stale index.
//!
//! One node moves instead: a `_Retval` of a variant (an `Optional`, a
//! `TensorList`) made on a CPU, which the placer put on our device, is
//! returned from that CPU (see [`variant_home`]). Keras' train step returns
//! its logs in such an `Optional`; on our device it cost three deep copies
//! per step.

use std::collections::HashMap;

use super::schema::*;
use super::wire;
use super::xla::placed_on;
use super::{GraphError, Preserve};

/// TensorFlow's attribute: input indices of a node kept in host memory.
pub const INPUT_HOSTMEM: &[u8] = b"_input_hostmem";
/// TensorFlow's attribute: output indices of a node allocated in host memory.
pub const OUTPUT_HOSTMEM: &[u8] = b"_output_hostmem";

/// The outcome of [`mark_host_edges`].
#[derive(Debug)]
pub struct HostEdges {
    /// The rewritten graph (the input, unchanged, when nothing changed).
    pub graph: Vec<u8>,
    /// Inputs marked, over all nodes.
    pub inputs: usize,
    /// Outputs marked, over all nodes.
    pub outputs: usize,
    /// Variant `_Retval`s moved from our device to a CPU (see
    /// [`variant_home`]).
    pub moved: usize,
}

/// Marks the edges between CPU devices and devices of type `device_type`
/// in `graph` (a serialized GraphDef) to cross in host memory, for nodes
/// whose op `ours` says tfwasm implements and for `Identity` nodes read only
/// on a CPU, after moving variant return values made on a CPU there.
/// `preserve` names the nodes TensorFlow needs kept as they are.
///
/// Errors when the GraphDef or a NodeDef is not valid wire format. A graph
/// with two nodes of one name is returned unchanged.
pub fn mark_host_edges(
    graph: &[u8],
    device_type: &str,
    preserve: Preserve<'_>,
    ours: &dyn Fn(&NodeFields<'_>) -> bool,
) -> Result<HostEdges, GraphError> {
    let unchanged = || HostEdges { graph: graph.to_vec(), inputs: 0, outputs: 0, moved: 0 };
    let (raw, nodes) = read_node_fields(graph)?;
    let Some(by_name) = index_by_name(&nodes, |node| node.name) else { return Ok(unchanged()) };
    // A variant returned from a CPU node is returned on that CPU.
    let moved: Vec<Option<&[u8]>> =
        nodes.iter().map(|node| variant_home(node, device_type, &nodes, &by_name)).collect();
    let device = |index: usize| moved[index].unwrap_or(nodes[index].device);
    let on_cpu: Vec<bool> = (0..nodes.len()).map(|index| placed_on(device(index), "CPU")).collect();
    let markable: Vec<bool> = nodes.iter().map(|n| placed_on(n.device, device_type) && ours(n)).collect();
    let passes_on: Vec<bool> = nodes.iter().map(|n| passes_on(n, device_type)).collect();
    // TensorFlow's own kernels on our device, whose memory types are theirs.
    let theirs: Vec<bool> =
        nodes.iter().zip(&markable).map(|(n, &ours)| placed_on(n.device, device_type) && !ours).collect();

    // Data edges as (producer, port, consumer, input index), in graph order.
    let mut edges = Vec::new();
    for (consumer, node) in nodes.iter().enumerate() {
        for (index, input) in node.data_inputs().enumerate() {
            let (name, port) = input_source(input);
            if let (Some(&producer), Some(port)) = (by_name.get(name), port.and_then(parse_port)) {
                edges.push((producer, port, consumer, index));
            }
        }
    }

    // Inputs of ours that come in host memory: from a CPU node, from one
    // of TensorFlow's host-memory outputs on our device, and int32 into a
    // `Cast` (TensorFlow keeps an int32 argument typed by `T` in host
    // memory on a device like ours, but `Cast` types its arguments with
    // `SrcT` and `DstT`, which that rule misses; see the module docs).
    let mut input_marks: Vec<Vec<u64>> = vec![Vec::new(); nodes.len()];
    for &(producer, _, consumer, index) in &edges {
        let from_host = on_cpu[producer] || (theirs[producer] && in_host_memory(&nodes[producer], Arg::Output));
        if markable[consumer] && from_host {
            input_marks[consumer].push(index as u64);
        }
    }
    for (index, node) in nodes.iter().enumerate() {
        if markable[index] && node.op == b"Cast" && node.type_attr(b"SrcT") == Some(DT_INT32) {
            mark(&mut input_marks[index], 0);
        }
    }

    // Per producer and output port, how its readers read it.
    let mut readers: Vec<HashMap<u64, Readers>> = vec![HashMap::new(); nodes.len()];
    for &(producer, port, consumer, index) in &edges {
        let in_host = on_cpu[consumer]
            || (theirs[consumer] && in_host_memory(&nodes[consumer], Arg::Input(index)))
            || (markable[consumer] && input_marks[consumer].contains(&(index as u64)));
        let entry = readers[producer].entry(port).or_insert(Readers { cpu: 0, host: 0, ours: 0, device: 0 });
        match (on_cpu[consumer], in_host, markable[consumer]) {
            (true, ..) => entry.cpu += 1,
            (false, true, _) => entry.host += 1,
            (false, false, true) => entry.ours += 1,
            (false, false, false) => entry.device += 1,
        }
    }
    // An output of ours is made in host memory when every reader reads it
    // there; or when readers on our device read it there and the others
    // are ours, which then read it in host memory too (a tensor read on a
    // CPU and by our kernels stays in device memory, placed by the guest,
    // and the CPU gets a copy). A `Cast` to int32 makes its output in host
    // memory, as int32 arithmetic does, unless a reader of TensorFlow's
    // wants it in device memory. An `Identity` of TensorFlow's only when
    // every reader is on a CPU.
    let mut output_marks: Vec<Vec<u64>> = vec![Vec::new(); nodes.len()];
    for (producer, ports) in readers.iter().enumerate() {
        if !(markable[producer] || passes_on[producer]) || preserve(nodes[producer].name) {
            continue;
        }
        let int32_cast =
            markable[producer] && nodes[producer].op == b"Cast" && nodes[producer].type_attr(b"DstT") == Some(DT_INT32);
        for (&port, r) in ports {
            let all_host = r.device == 0 && r.ours == 0;
            let host = if markable[producer] {
                all_host || (r.device == 0 && ((r.cpu == 0 && r.host > 0) || (int32_cast && port == 0)))
            } else {
                all_host
            };
            if host {
                output_marks[producer].push(port);
            }
        }
        if int32_cast && !ports.contains_key(&0) {
            output_marks[producer].push(0);
        }
        output_marks[producer].sort_unstable();
    }
    for &(producer, port, consumer, index) in &edges {
        if markable[consumer] && output_marks[producer].contains(&port) {
            mark(&mut input_marks[consumer], index as u64);
        }
    }
    for marks in &mut input_marks {
        marks.sort_unstable();
    }

    // A pass-through node that hands its value to the CPU in host memory
    // may take it in host memory too.
    for (index, node) in nodes.iter().enumerate() {
        if passes_on[index] && output_marks[index] == [0] {
            let from_cpu = node
                .data_inputs()
                .next()
                .and_then(|input| by_name.get(input_source(input).0))
                .is_some_and(|&p| on_cpu[p]);
            if from_cpu {
                input_marks[index].push(0);
            }
        }
    }
    let (mut inputs, mut outputs, mut moved_nodes, mut changed) = (0, 0, 0, false);
    let mut edits = Vec::with_capacity(nodes.len());
    for (index, (node, bytes)) in nodes.iter().zip(&raw).enumerate() {
        let stale = placed_on(node.device, device_type) && node.attrs.iter().any(|(key, ..)| is_mark(key));
        let (ins, outs) = (&input_marks[index], &output_marks[index]);
        if !stale && ins.is_empty() && outs.is_empty() && moved[index].is_none() {
            edits.push(NodeEdit::Keep);
            continue;
        }
        inputs += ins.len();
        outputs += outs.len();
        moved_nodes += usize::from(moved[index].is_some());
        changed = true;
        edits.push(NodeEdit::Replace(marked_node(bytes, ins, outs, moved[index])?));
    }
    if !changed {
        return Ok(unchanged());
    }
    Ok(HostEdges { graph: edit_nodes(graph, &edits)?, inputs, outputs, moved: moved_nodes })
}

/// How the readers of one output read it: on a CPU; in host memory on our
/// device (one of TensorFlow's host-memory arguments, or an input of ours
/// marked so); as an unmarked input of ours; or in device memory otherwise.
#[derive(Debug, Clone, Copy)]
struct Readers {
    cpu: usize,
    host: usize,
    ours: usize,
    device: usize,
}

/// Adds `index` to `marks` once.
fn mark(marks: &mut Vec<u64>, index: u64) {
    if !marks.contains(&index) {
        marks.push(index);
    }
}

/// One argument of a node: an input by index, or any output.
#[derive(Debug, Clone, Copy)]
enum Arg {
    Input(usize),
    Output,
}

/// Whether TensorFlow's own kernel for `node` on our device keeps `arg` in
/// host memory, for the nodes a loop puts next to ours. Its `DEVICE_DEFAULT`
/// kernels typed int32 by `T` (`Less`, `AddV2`, `Identity`, `Switch`,
/// `Merge`, ...) keep every argument there, a comparison's `bool` result
/// included, as does an int32 `Const`; `LoopCond` and `Switch` read their
/// predicate there. A `while` loop's condition is
/// `LoopCond(LogicalAnd(Less(i, n), Less(step, max)))`: between our
/// `LogicalAnd` and the int32 `Less`es and `LoopCond` on either side, each
/// iteration crossed memory types three times, each a copy through the
/// stream that completes through an event. A guess wrong
/// the other way costs the copy the mark saved, nothing more: TensorFlow
/// inserts a copy wherever memory types differ.
fn in_host_memory(node: &NodeFields<'_>, arg: Arg) -> bool {
    node.type_attr(b"T") == Some(DT_INT32)
        || (node.op == b"Const" && node.type_attr(b"dtype") == Some(DT_INT32))
        || matches!((node.op, arg), (b"LoopCond", _) | (b"Switch" | b"RefSwitch", Arg::Input(1)))
}

fn is_mark(key: &[u8]) -> bool {
    key == INPUT_HOSTMEM || key == OUTPUT_HOSTMEM
}

/// An output index, as written after the `:` of an input name.
fn parse_port(port: &[u8]) -> Option<u64> {
    std::str::from_utf8(port).ok()?.parse().ok()
}

/// Whether `node` is TensorFlow's `Identity` of a plain tensor (not a
/// handle or a variant, which stay with their makers) on our device: its
/// output may be marked like one of our kernels' (and, like theirs, not
/// when TensorFlow asks to preserve the node).
fn passes_on(node: &NodeFields<'_>, device_type: &str) -> bool {
    let plain = !matches!(node.type_attr(b"T"), None | Some(DT_RESOURCE | DT_VARIANT));
    node.op == b"Identity" && plain && placed_on(node.device, device_type)
}

/// The CPU device a `_Retval` of a variant on our device should move to:
/// the device of the CPU node whose output it returns.
///
/// No kernel of ours can read a variant (an `Optional`, a `TensorList`):
/// placed on our device, such a return value only costs copies. The
/// `_Recv` deep-copies every tensor inside it into device memory, and the
/// eager op that reads it on the CPU (Keras' `OptionalHasValue` and
/// `OptionalGetValue`, each train step) copies it all back. Returned where
/// it was made, the function's output is a CPU tensor and nothing is
/// copied. TensorFlow takes the function's output devices from the
/// partitions after this pass, and assigns each node the device its
/// NodeDef names (as for its own `pin_to_host` pass).
fn variant_home<'g>(
    node: &NodeFields<'g>,
    device_type: &str,
    nodes: &[NodeFields<'g>],
    by_name: &HashMap<&[u8], usize>,
) -> Option<&'g [u8]> {
    if node.op != b"_Retval" || !placed_on(node.device, device_type) || node.type_attr(b"T") != Some(DT_VARIANT) {
        return None;
    }
    let mut data = node.data_inputs();
    let (Some(input), None) = (data.next(), data.next()) else { return None };
    let producer = &nodes[*by_name.get(input_source(input).0)?];
    placed_on(producer.device, "CPU").then_some(producer.device)
}

/// `node` without its old marks, with the new ones, on `device` if given.
fn marked_node(node: &[u8], inputs: &[u64], outputs: &[u64], device: Option<&[u8]>) -> Result<Vec<u8>, GraphError> {
    let mut out = Vec::with_capacity(node.len() + 48);
    for field in wire::raw_fields(node) {
        let (field, raw) = field?;
        if field.number == NODE_DEVICE {
            if let Some(device) = device {
                wire::put_bytes_field(NODE_DEVICE, device, &mut out);
                continue;
            }
        }
        if field.number == NODE_ATTR {
            let (entry, entry_at) = wire::bytes(node, &field, "NodeDef.attr is not a map entry")?;
            if is_mark(attr_entry(entry).map_err(|e| e.at(entry_at))?.0) {
                continue;
            }
        }
        out.extend_from_slice(raw);
    }
    for (key, indices) in [(INPUT_HOSTMEM, inputs), (OUTPUT_HOSTMEM, outputs)] {
        if !indices.is_empty() {
            put_attr(key, &int_list(indices), &mut out);
        }
    }
    Ok(out)
}

/// An AttrValue holding `list { i: [...] }` (packed).
fn int_list(values: &[u64]) -> Vec<u8> {
    let mut packed = Vec::new();
    for &value in values {
        wire::put_varint(value, &mut packed);
    }
    let (mut list, mut attr_value) = (Vec::new(), Vec::new());
    wire::put_bytes_field(LIST_VALUE_I, &packed, &mut list);
    wire::put_bytes_field(ATTR_VALUE_LIST, &list, &mut attr_value);
    attr_value
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::graph::schema::testing::{graph, node, CPU0, TRAILER, WASM0};

    fn with_attr(mut node: Vec<u8>, key: &[u8], indices: &[u64]) -> Vec<u8> {
        put_attr(key, &int_list(indices), &mut node);
        node
    }

    fn ours(node: &NodeFields<'_>) -> bool {
        let int32 = node.type_attr(b"T") == Some(DT_INT32);
        match node.op {
            b"AddV2" | b"Less" => !int32,
            op => matches!(
                op,
                b"MatMul" | b"Sum" | b"SparseSoftmaxCrossEntropyWithLogits" | b"Cast" | b"Prod" | b"LogicalAnd"
            ),
        }
    }

    /// A `Cast` from `src` to `dst` (DataType numbers).
    fn cast(name: &str, input: &str, device: &str, src: u64, dst: u64) -> Vec<u8> {
        let mut n = crate::graph::schema::testing::bare_node(name, "Cast", &[input], device);
        put_type_attr(b"SrcT", src, &mut n);
        put_type_attr(b"DstT", dst, &mut n);
        n
    }

    fn keep_nothing(_: &[u8]) -> bool {
        false
    }

    /// Each node's name with its marks, decoded.
    fn marks(graph: &[u8]) -> Vec<(String, Vec<u64>, Vec<u64>)> {
        node_defs(graph)
            .map(|node| {
                let fields = NodeFields::read(node.unwrap().0).unwrap();
                let list = |key: &[u8]| -> Vec<u64> {
                    let mut found = Vec::new();
                    for &(k, value, _) in &fields.attrs {
                        if k != key {
                            continue;
                        }
                        found.clear();
                        let list = attr_value(value).unwrap().unwrap();
                        let (list, _) = wire::bytes(value, &list, "").unwrap();
                        for f in wire::fields(list) {
                            let f = f.unwrap();
                            let (packed, _) = wire::bytes(list, &f, "").unwrap();
                            let mut at = 0;
                            while at < packed.len() {
                                let (mut v, mut shift) = (0u64, 0);
                                loop {
                                    let b = packed[at];
                                    at += 1;
                                    v |= u64::from(b & 0x7f) << shift;
                                    shift += 7;
                                    if b & 0x80 == 0 {
                                        break;
                                    }
                                }
                                found.push(v);
                            }
                        }
                    }
                    found
                };
                (String::from_utf8(fields.name.to_vec()).unwrap(), list(INPUT_HOSTMEM), list(OUTPUT_HOSTMEM))
            })
            .collect()
    }

    /// The nodes that carry marks, with them, in graph order.
    fn marked_nodes(graph: &[u8]) -> Vec<(String, Vec<u64>, Vec<u64>)> {
        marks(graph).into_iter().filter(|(_, ins, outs)| !ins.is_empty() || !outs.is_empty()).collect()
    }

    /// A node's expected marks, as [`marks`] lists them.
    fn expect(name: &str, ins: &[u64], outs: &[u64]) -> (String, Vec<u64>, Vec<u64>) {
        (name.to_owned(), ins.to_vec(), outs.to_vec())
    }

    /// A Keras step in miniature: the batch from the CPU iterator feeds a
    /// product and the loss; the loss goes back to a CPU node.
    fn step() -> Vec<Vec<u8>> {
        vec![
            node("batch", "IteratorGetNext", &["iterator"], CPU0),
            node("matmul", "MatMul", &["batch", "w"], WASM0),
            node("loss", "SparseSoftmaxCrossEntropyWithLogits", &["matmul", "batch:1"], WASM0),
            node("total", "Sum", &["loss", "axes"], WASM0),
            node("print", "PrintV2", &["total"], CPU0),
        ]
    }

    #[test]
    fn cpu_edges_of_our_kernels_cross_in_host_memory() {
        let input = graph(&step());
        let edges = mark_host_edges(&input, "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!((edges.inputs, edges.outputs), (2, 1));
        let marks = marks(&edges.graph);
        assert_eq!(
            marks,
            [
                expect("batch", &[], &[]),
                expect("matmul", &[0], &[]),
                // Input 1 (the labels) is from the CPU, input 0 is not.
                expect("loss", &[1], &[]),
                // Read only by a CPU node.
                expect("total", &[], &[0]),
                expect("print", &[], &[]),
            ]
        );
        // Unmarked nodes and other fields are copied byte for byte.
        let original = step();
        assert!(edges.graph.windows(original[0].len()).any(|w| w == original[0].as_slice()));
        assert!(edges.graph.ends_with(&input[input.len() - TRAILER..]));
        // A second run changes nothing more.
        let again = mark_host_edges(&edges.graph, "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!(again.graph, edges.graph);
    }

    #[test]
    fn what_stays_in_device_memory() {
        let nodes = [
            node("x", "Placeholder", &[], CPU0),
            // TensorFlow's own kernel on our device: may forward its input.
            node("id", "Identity", &["x"], WASM0),
            // Read by a CPU node and one on our device.
            node("sum", "AddV2", &["id", "id"], WASM0),
            node("cpu_reader", "Neg", &["sum"], CPU0),
            node("wasm_reader", "MatMul", &["sum", "sum"], WASM0),
            // Fetched: TensorFlow preserves it.
            node("fetched", "Sum", &["wasm_reader", "axes"], WASM0),
            node("cpu_reader2", "Neg", &["fetched"], CPU0),
            // Another device type, and an unplaced node.
            node("other", "AddV2", &["x", "x"], "/job:localhost/replica:0/task:0/device:GPU:0"),
            node("unplaced", "AddV2", &["x", "x"], ""),
        ];
        let input = graph(&nodes);
        let edges = mark_host_edges(&input, "WASM", &|name| name == b"fetched", &ours).unwrap();
        assert_eq!((edges.inputs, edges.outputs, edges.graph), (0, 0, input));
    }

    #[test]
    fn outputs_are_marked_per_port_and_control_readers_do_not_count() {
        let nodes = [
            node("split", "Sum", &["x"], WASM0),
            node("a", "Neg", &["split", "^split"], CPU0),
            node("b", "Neg", &["split:1"], CPU0),
            node("c", "AddV2", &["split:2", "split:2"], WASM0),
        ];
        let edges = mark_host_edges(&graph(&nodes), "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!(marks(&edges.graph)[0], ("split".to_owned(), vec![], vec![0, 1]));
    }

    #[test]
    fn stale_marks_are_replaced() {
        let nodes = [
            node("x", "Placeholder", &[], CPU0),
            // Marks left by an earlier run, before the inputs changed.
            with_attr(with_attr(node("add", "AddV2", &["y", "x"], WASM0), INPUT_HOSTMEM, &[0]), OUTPUT_HOSTMEM, &[0]),
            node("y", "MatMul", &["add", "add"], WASM0),
            // On the CPU the attribute is not ours to touch.
            with_attr(node("cpu", "Neg", &["x"], CPU0), INPUT_HOSTMEM, &[0]),
        ];
        let edges = mark_host_edges(&graph(&nodes), "WASM", &keep_nothing, &ours).unwrap();
        let marks = marks(&edges.graph);
        assert_eq!(marks[1], ("add".to_owned(), vec![1], vec![]));
        assert_eq!(marks[3], ("cpu".to_owned(), vec![0], vec![]));
    }

    /// `node` with its type attribute `T` set to `dtype`.
    fn typed(mut node: Vec<u8>, dtype: u64) -> Vec<u8> {
        put_type_attr(b"T", dtype, &mut node);
        node
    }

    /// Each node's name and device.
    fn devices(graph: &[u8]) -> Vec<(String, String)> {
        node_defs(graph)
            .map(|node| {
                let fields = NodeFields::read(node.unwrap().0).unwrap();
                (String::from_utf8(fields.name.to_vec()).unwrap(), String::from_utf8(fields.device.to_vec()).unwrap())
            })
            .collect()
    }

    /// The end of Keras' train step: the loss leaves through an `Identity`
    /// into an `Optional` made on the CPU, which the function returns.
    fn keras_return() -> Vec<Vec<u8>> {
        vec![
            node("batch", "IteratorGetNext", &["iterator"], CPU0),
            node("loss", "SparseSoftmaxCrossEntropyWithLogits", &["w", "batch:1"], WASM0),
            node("noop", "NoOp", &[], WASM0),
            node("identity", "Identity", &["loss", "^noop"], WASM0),
            typed(node("optional", "OptionalFromValue", &["identity"], CPU0), DT_VARIANT),
            typed(node("ret", "_Retval", &["optional"], WASM0), DT_VARIANT),
        ]
    }

    #[test]
    fn int32_sides_of_casts_are_host_memory() {
        // A `reduce_mean` gradient: the element count, an int32 `Prod`, cast
        // to float; and a float cast to int32 for an int32 kernel.
        let nodes = [
            node("count", "Prod", &["shape", "axes"], WASM0),
            cast("count_f", "count", WASM0, DT_INT32, DT_FLOAT),
            cast("to_int", "x", WASM0, DT_FLOAT, DT_INT32),
            // TensorFlow's int32 arithmetic: host memory.
            typed(node("twice", "AddV2", &["to_int", "to_int"], WASM0), DT_INT32),
            // Float to float, int64, and a preserved cast: no int32 side to mark.
            cast("f2f", "x", WASM0, DT_FLOAT, DT_FLOAT),
            cast("i64", "x", WASM0, DT_FLOAT, 9),
            cast("fetched", "x", WASM0, DT_FLOAT, DT_INT32),
            // On the CPU, TensorFlow's own business.
            cast("cpu_cast", "count", CPU0, DT_INT32, DT_FLOAT),
        ];
        let edges = mark_host_edges(&graph(&nodes), "WASM", &|name: &[u8]| name == b"fetched", &ours).unwrap();
        let found = marks(&edges.graph);
        let of = |name: &str| found.iter().find(|(n, ..)| n == name).map(|(_, i, o)| (i.clone(), o.clone())).unwrap();
        assert_eq!(of("count_f"), (vec![0], vec![]));
        assert_eq!(of("to_int"), (vec![], vec![0]));
        // Read by the cast in host memory and on the CPU: made there.
        assert_eq!(of("count"), (vec![], vec![0]));
        for untouched in ["twice", "f2f", "i64", "fetched", "cpu_cast"] {
            assert_eq!(of(untouched), (vec![], vec![]), "{untouched}");
        }
        assert_eq!((edges.inputs, edges.outputs), (1, 2));
        // A second run keeps the marks as they are.
        let again = mark_host_edges(&edges.graph, "WASM", &|name: &[u8]| name == b"fetched", &ours).unwrap();
        assert_eq!(marks(&again.graph), found);
    }

    #[test]
    fn a_loop_condition_stays_in_host_memory() {
        // A `while` loop's condition, lowered: int32 counters compared by
        // TensorFlow's own `Less` (host memory), joined by our `LogicalAnd`,
        // read by `LoopCond` and a `Switch` (host memory).
        let nodes = [
            typed(node("i", "Merge", &["i0", "i_next"], WASM0), DT_INT32),
            typed(node("less", "Less", &["i", "n"], WASM0), DT_INT32),
            typed(node("less_1", "Less", &["i", "max"], WASM0), DT_INT32),
            node("and", "LogicalAnd", &["less", "less_1"], WASM0),
            node("cond", "LoopCond", &["and"], WASM0),
            typed(node("switch", "Switch", &["h", "cond"], WASM0), DT_FLOAT),
            // float32 `Less` is ours: its result stays in device memory, and
            // so does a float `Switch`'s data output.
            node("f_less", "Less", &["x", "y"], WASM0),
            node("f_and", "LogicalAnd", &["f_less", "less"], WASM0),
            node("reader", "MatMul", &["switch", "w"], WASM0),
            // Read by our kernel and a host-memory reader.
            node("mixed", "LogicalAnd", &["less", "less"], WASM0),
            node("mixed_cond", "LoopCond", &["mixed"], WASM0),
            node("mixed_and", "LogicalAnd", &["mixed", "f_less"], WASM0),
        ];
        let edges = mark_host_edges(&graph(&nodes), "WASM", &keep_nothing, &ours).unwrap();
        let marked = marked_nodes(&edges.graph);
        assert_eq!(
            marked,
            [
                expect("and", &[0, 1], &[0]),
                expect("f_and", &[1], &[]),
                // `LoopCond` reads it in host memory, so our reader does too.
                expect("mixed", &[0, 1], &[0]),
                expect("mixed_and", &[0], &[]),
            ]
        );
        let again = mark_host_edges(&edges.graph, "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!(again.graph, edges.graph);
    }

    #[test]
    fn both_sides_of_an_edge_inside_the_device_agree() {
        // Keras' step: an int32 constant masks a bitcast output (our
        // `BitwiseAnd`); the accuracy metric casts our `ArgMax` to float;
        // `ops.take` selects int32 indices (our `SelectV2`) that TensorFlow's
        // int32 `Reshape` and our `GatherV2` read.
        let mut mask = node("mask", "Const", &[], WASM0);
        put_type_attr(b"dtype", DT_INT32, &mut mask); // a constant's type is `dtype`, not `T`
        let nodes = [
            mask,
            typed(node("bits", "BitwiseAnd", &["x", "mask"], WASM0), DT_INT32),
            node("argmax", "ArgMax", &["logits", "axis"], WASM0),
            cast("argmax_f", "argmax", WASM0, DT_INT32, DT_FLOAT),
            typed(node("take", "SelectV2", &["c", "i", "j"], WASM0), DT_INT32),
            typed(node("flat", "Reshape", &["take", "shape"], WASM0), DT_INT32),
            node("rows", "GatherV2", &["table", "take", "axis"], WASM0),
            // A float read by the CPU and by ours stays with the guest; the
            // CPU gets a copy.
            node("sum", "Sum", &["x", "axis"], WASM0),
            node("sum_cpu", "Neg", &["sum"], CPU0),
            node("sum_ours", "MatMul", &["sum", "sum"], WASM0),
        ];
        let ours = |node: &NodeFields<'_>| {
            matches!(node.op, b"BitwiseAnd" | b"ArgMax" | b"Cast" | b"SelectV2" | b"GatherV2" | b"Sum" | b"MatMul")
        };
        let edges = mark_host_edges(&graph(&nodes), "WASM", &keep_nothing, &ours).unwrap();
        let marked = marked_nodes(&edges.graph);
        assert_eq!(
            marked,
            [
                expect("bits", &[1], &[]),
                expect("argmax", &[], &[0]),
                expect("argmax_f", &[0], &[]),
                expect("take", &[], &[0]),
                expect("rows", &[1], &[]),
            ]
        );
        let again = mark_host_edges(&edges.graph, "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!(again.graph, edges.graph);
    }

    #[test]
    fn keras_returns_its_loss_and_logs_through_host_memory() {
        let edges = mark_host_edges(&graph(&keras_return()), "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!((edges.inputs, edges.outputs, edges.moved), (1, 1, 1));
        // The `Optional` is returned from the CPU that made it.
        let devices = devices(&edges.graph);
        let on = |name: &str| devices.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!((on("ret"), on("identity"), on("noop")), (CPU0.to_owned(), WASM0.to_owned(), WASM0.to_owned()));
        // The `Identity` hands the loss to the CPU in host memory; the loss
        // itself stays in device memory (its reader is on our device).
        let marks = marks(&edges.graph);
        assert_eq!(marks[1], ("loss".to_owned(), vec![1], vec![]));
        assert_eq!(marks[3], ("identity".to_owned(), vec![], vec![0]));
        // The moved node keeps everything but its device: input, type.
        let moved = node_defs(&edges.graph).nth(5).unwrap().unwrap().0;
        let fields = NodeFields::read(moved).unwrap();
        assert_eq!(
            (fields.op, fields.inputs.clone(), fields.type_attr(b"T")),
            (&b"_Retval"[..], vec![&b"optional"[..]], Some(DT_VARIANT))
        );
        let again = mark_host_edges(&edges.graph, "WASM", &keep_nothing, &ours).unwrap();
        assert_eq!((again.graph, again.moved), (edges.graph, 0));
    }

    #[test]
    fn which_identities_and_returns_cross_in_host_memory() {
        const CPU1: &str = "/job:localhost/replica:0/task:0/device:CPU:1";
        let nodes = [
            node("x", "Placeholder", &[], CPU0),
            node("y", "AddV2", &["x", "x"], WASM0),
            // From and to the CPU: both ends marked.
            node("round_trip", "Identity", &["x"], WASM0),
            node("round_trip_reader", "Neg", &["round_trip"], CPU0),
            // Read on two CPUs: still host memory.
            node("two_cpus", "Identity", &["y"], WASM0),
            node("on_cpu0", "Neg", &["two_cpus"], CPU0),
            node("on_cpu1", "Neg", &["two_cpus"], CPU1),
            // Read on our device too, by nothing, or preserved: untouched.
            node("mixed", "Identity", &["x"], WASM0),
            node("mixed_cpu", "Neg", &["mixed"], CPU0),
            node("mixed_wasm", "Neg", &["mixed"], WASM0),
            node("unread", "Identity", &["y"], WASM0),
            node("kept", "Identity", &["y"], WASM0),
            node("kept_reader", "Neg", &["kept"], CPU0),
            // A handle and a variant stay as they are.
            typed(node("handle", "Identity", &["var"], WASM0), DT_RESOURCE),
            node("handle_reader", "ReadVariableOp", &["handle"], CPU0),
            typed(node("list", "Identity", &["list_maker"], WASM0), DT_VARIANT),
            node("list_reader", "TensorListLength", &["list"], CPU0),
            // Only a variant returned from a CPU moves.
            node("ret_float", "_Retval", &["x"], WASM0),
            typed(node("ret_wasm", "_Retval", &["list"], WASM0), DT_VARIANT),
            typed(node("ret_gpu", "_Retval", &["x"], "/job:localhost/replica:0/task:0/device:GPU:0"), DT_VARIANT),
        ];
        let edges = mark_host_edges(&graph(&nodes), "WASM", &|name| name == b"kept", &ours).unwrap();
        assert_eq!(edges.moved, 0);
        assert!(devices(&edges.graph)
            .iter()
            .zip(&nodes)
            .all(|((_, device), node)| NodeFields::read(node).unwrap().device == device.as_bytes()));
        let marked = marked_nodes(&edges.graph);
        assert_eq!(
            marked,
            [expect("y", &[0, 1], &[]), expect("round_trip", &[0], &[0]), expect("two_cpus", &[], &[0])]
        );
    }

    #[test]
    fn malformed_and_ambiguous_graphs() {
        let mut bad = graph(&step());
        bad.truncate(bad.len() - 7);
        assert!(mark_host_edges(&bad, "WASM", &keep_nothing, &ours).is_err());
        let mut nodes = step();
        nodes.push(node("matmul", "Neg", &["x"], CPU0));
        let input = graph(&nodes);
        assert_eq!(mark_host_edges(&input, "WASM", &keep_nothing, &ours).unwrap().graph, input);
    }
}
