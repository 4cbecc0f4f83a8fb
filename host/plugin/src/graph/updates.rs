//! Turn a float32 variable update on our device into an assignment of a
//! sum, which elementwise fusion ([`super::fuse`]) then takes into the tree
//! that computes the update.
//!
//! `AssignAddVariableOp(v, x)` and `AssignSubVariableOp(v, x)` are
//! TensorFlow's kernels. On our device they update the variable's buffer in
//! place, on one thread, after copying it whenever a reader still holds it;
//! Keras' Adam makes three of them per variable and step, each a full pass
//! over the variable after the fused kernel that computed `x`. The pass
//! rewrites each into
//!
//! ```text
//! read  = ReadVariableOp(v, ^controls)      "<name>/tfwasm_read"
//! value = AddV2(read, x) | Sub(read, x)     "<name>/tfwasm_value"
//! <name> = AssignVariableOp(v, value, ^controls, validate_shape=true)
//! ```
//!
//! so `v + x` joins `x`'s fused tree, and the assignment adopts the fused
//! kernel's output buffer instead of copying it (TensorFlow forwards an
//! input no one else holds). The update keeps its name, so every control
//! edge on it still orders what it ordered. The sum is the same IEEE
//! operation on the same operands, so the variable gets the same bits.
//!
//! What changes: the read and the assignment are two steps, where
//! TensorFlow's update holds the variable's lock across both. Inside one
//! function call, TensorFlow's automatic control dependencies already order
//! every access to a variable, so nothing can come between them; two
//! concurrent calls updating one variable may now interleave, as they may
//! under XLA, which also reads variables at a cluster's start and writes
//! them at its end. And an `x` whose shape differs from the variable's but
//! broadcasts to it, which TensorFlow refuses, is broadcast (the assignment
//! still refuses any other shape).
//!
//! Only updates placed on our device, with `dtype` float32 and no
//! attribute TensorFlow's op does not define, are rewritten; if one of the
//! new names is taken the update is left alone.
//!
//! [`scatter_updates`] rewrites sparse updates (`ResourceScatterAdd/Sub`)
//! the same way, with our scatter op computing the updated value: those
//! have no kernel on our device that could reach the variable.

use std::collections::HashSet;

use super::schema::*;
use super::wire;
use super::xla::placed_on;
use super::{GraphError, Rewritten};
use crate::kernels::scatter;

/// Suffixes of the two nodes each rewritten update adds.
pub const READ_SUFFIX: &str = "/tfwasm_read";
pub const VALUE_SUFFIX: &str = "/tfwasm_value";

/// Rewrites every float32 `AssignAddVariableOp` / `AssignSubVariableOp` on
/// a device of type `device_type` in `graph` (a serialized GraphDef) as an
/// `AssignVariableOp` of the variable's value plus (minus) the update.
///
/// Errors when the GraphDef or a NodeDef is not valid wire format.
pub fn assign_updates(graph: &[u8], device_type: &str) -> Result<Rewritten, GraphError> {
    rewrite_as_assignments(graph, device_type, |fields| {
        let combine: &[u8] = match fields.op {
            b"AssignAddVariableOp" => b"AddV2",
            b"AssignSubVariableOp" => b"Sub",
            _ => return None,
        };
        let [handle, update] = fields.data_inputs().collect::<Vec<_>>()[..] else { return None };
        let only_dtype = fields.attrs.iter().all(|(key, ..)| *key == b"dtype" || key.starts_with(b"_"));
        if fields.type_attr(b"dtype") != Some(DT_FLOAT) || !only_dtype {
            return None;
        }
        Some(Rewrite { handle, op: combine, operands: vec![update], types: vec![(b"T", DT_FLOAT)], drop: &[] })
    })
}

/// Rewrites every float32 `ResourceScatterAdd` / `ResourceScatterSub` on a
/// device of type `device_type` (Keras' sparse updates: plain SGD, RMSprop,
/// Adagrad and Adadelta on an `Embedding`) as
///
/// ```text
/// read  = ReadVariableOp(v, ^controls)                         "<name>/tfwasm_read"
/// value = _TfwasmScatterAdd|Sub(read, indices, updates)        "<name>/tfwasm_value"
/// <name> = AssignVariableOp(v, value, ^controls, validate_shape=true)
/// ```
///
/// TensorFlow's scatter kernels need its variable internals, which the C
/// API of the 2.21 wheel does not export (`kernels_experimental.h`), so
/// they exist for the CPU only; a variable on our device updated that way
/// made placement fail outright. The rewrite computes the same sums, in the
/// same order, on a copy of the whole variable (one pass over it per
/// update, where TensorFlow's kernel touches only the indexed rows).
pub fn scatter_updates(graph: &[u8], device_type: &str) -> Result<Rewritten, GraphError> {
    rewrite_as_assignments(graph, device_type, |fields| {
        let apply = match fields.op {
            b"ResourceScatterAdd" => scatter::ADD_OP,
            b"ResourceScatterSub" => scatter::SUB_OP,
            _ => return None,
        };
        let [handle, indices, updates] = fields.data_inputs().collect::<Vec<_>>()[..] else { return None };
        let known =
            fields.attrs.iter().all(|(key, ..)| *key == b"dtype" || *key == b"Tindices" || key.starts_with(b"_"));
        let index_type = fields.type_attr(b"Tindices").filter(|t| matches!(*t, DT_INT32 | DT_INT64))?;
        if fields.type_attr(b"dtype") != Some(DT_FLOAT) || !known {
            return None;
        }
        Some(Rewrite {
            handle,
            op: apply.as_bytes(),
            operands: vec![indices, updates],
            types: vec![(b"T", DT_FLOAT), (b"Tindices", index_type)],
            drop: &[b"Tindices"],
        })
    })
}

/// How one variable update becomes `read → value → assign`.
struct Rewrite<'g> {
    /// The variable's handle (the update's first input).
    handle: &'g [u8],
    /// The op computing the new value from the read and `operands`, with
    /// its type attributes.
    op: &'g [u8],
    operands: Vec<&'g [u8]>,
    types: Vec<(&'static [u8], u64)>,
    /// Attributes of the update `AssignVariableOp` does not define.
    drop: &'static [&'static [u8]],
}

/// Replaces every update on `device_type` for which `plan` returns a
/// [`Rewrite`] with a read of the variable (waiting on the update's control
/// inputs), the value `plan` says, and an `AssignVariableOp` under the
/// update's name. An update whose new names are taken is left alone.
fn rewrite_as_assignments<'g>(
    graph: &'g [u8],
    device_type: &str,
    plan: impl Fn(&NodeFields<'g>) -> Option<Rewrite<'g>>,
) -> Result<Rewritten, GraphError> {
    let (raw, nodes) = read_node_fields(graph)?;
    let mut names: HashSet<Vec<u8>> = nodes.iter().map(|fields| fields.name.to_vec()).collect();

    let mut edits: Vec<NodeEdit> = nodes.iter().map(|_| NodeEdit::Keep).collect();
    let mut rewritten = Vec::new();
    for (index, (node, fields)) in raw.iter().zip(&nodes).enumerate() {
        if !placed_on(fields.device, device_type) {
            continue;
        }
        let Some(rewrite) = plan(fields) else { continue };
        let read = [fields.name, READ_SUFFIX.as_bytes()].concat();
        let value = [fields.name, VALUE_SUFFIX.as_bytes()].concat();
        if names.contains(&read) || names.contains(&value) {
            continue;
        }
        let controls: Vec<&[u8]> = fields.control_inputs().collect();
        let read_node = new_node(
            &read,
            b"ReadVariableOp",
            &[&[rewrite.handle], &controls[..]].concat(),
            fields.device,
            (b"dtype", DT_FLOAT),
        );
        let mut value_node =
            new_node_def(&value, rewrite.op, &[&[&read[..]], &rewrite.operands[..]].concat(), fields.device);
        for &(key, dtype) in &rewrite.types {
            put_type_attr(key, dtype, &mut value_node);
        }
        let assign = assign_node(node, &[&[rewrite.handle, &value[..]], &controls[..]].concat(), rewrite.drop)?;
        edits[index] = NodeEdit::Expand(vec![read_node, value_node, assign]);
        rewritten.push(String::from_utf8_lossy(fields.name).into_owned());
        names.insert(read);
        names.insert(value);
    }
    Rewritten::from_edits(graph, &edits, rewritten)
}

/// A NodeDef with one `type` attribute.
fn new_node(name: &[u8], op: &[u8], inputs: &[&[u8]], device: &[u8], (key, dtype): (&[u8], u64)) -> Vec<u8> {
    let mut node = new_node_def(name, op, inputs, device);
    put_type_attr(key, dtype, &mut node);
    node
}

/// The update `node` as an `AssignVariableOp` of `inputs` that checks the
/// value's shape; every other field (name, device, attributes but those
/// keyed `drop`, debug info) is kept as it was.
fn assign_node(node: &[u8], inputs: &[&[u8]], drop: &[&[u8]]) -> Result<Vec<u8>, GraphError> {
    let mut out = Vec::with_capacity(node.len() + 64);
    let mut wrote_inputs = false;
    for field in wire::raw_fields(node) {
        let (field, raw) = field?;
        match field.number {
            NODE_OP => wire::put_bytes_field(NODE_OP, b"AssignVariableOp", &mut out),
            NODE_ATTR if !drop.is_empty() => {
                let (entry, _) = wire::bytes(node, &field, "NodeDef.attr is not a map entry")?;
                let (key, _) = attr_entry(entry)?;
                if !drop.contains(&key) {
                    out.extend_from_slice(raw);
                }
            }
            NODE_INPUT if !wrote_inputs => {
                for input in inputs {
                    wire::put_bytes_field(NODE_INPUT, input, &mut out);
                }
                wrote_inputs = true;
            }
            NODE_INPUT => {}
            _ => out.extend_from_slice(raw),
        }
    }
    let mut validate = Vec::new();
    wire::put_varint_field(ATTR_VALUE_B, 1, &mut validate);
    put_attr(b"validate_shape", &validate, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::schema::testing::{bare_node, graph, CPU0, TRAILER, WASM0};

    /// A NodeDef with `dtype: float` (or `dtype`) and the given extra
    /// attribute keys (as float types).
    fn update(name: &str, op: &str, inputs: &[&str], device: &str, dtype: u64, extra: &[&str]) -> Vec<u8> {
        let mut n = bare_node(name, op, inputs, device);
        put_type_attr(b"dtype", dtype, &mut n);
        for key in extra {
            put_type_attr(key.as_bytes(), DT_FLOAT, &mut n);
        }
        n
    }

    struct Decoded {
        name: String,
        op: String,
        inputs: Vec<String>,
        device: String,
        attrs: Vec<(String, Option<wire::Field>)>,
    }

    fn decode(graph: &[u8]) -> Vec<Decoded> {
        node_defs(graph)
            .map(|node| {
                let (node, _) = node.unwrap();
                let f = NodeFields::read(node).unwrap();
                let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                Decoded {
                    name: text(f.name),
                    op: text(f.op),
                    inputs: f.inputs.iter().map(|i| text(i)).collect(),
                    device: text(f.device),
                    attrs: f.attrs.iter().map(|(k, v, _)| (text(k), attr_value(v).unwrap())).collect(),
                }
            })
            .collect()
    }

    fn varint(field: &Option<wire::Field>) -> Option<(u32, u64)> {
        match field {
            Some(wire::Field { number, value: wire::Value::Varint { value, .. } }) => Some((*number, *value)),
            _ => None,
        }
    }

    #[test]
    fn adam_updates_become_assignments_of_a_sum() {
        let nodes = [
            update(
                "m_update",
                "AssignAddVariableOp",
                &["m_handle", "scaled", "^grad_ready", "^m_read"],
                WASM0,
                DT_FLOAT,
                &["_has_manual_control_dependencies"],
            ),
            update("w_update", "AssignSubVariableOp", &["w_handle:0", "step"], WASM0, DT_FLOAT, &[]),
            update("after", "NoOp", &["^m_update", "^w_update"], WASM0, DT_FLOAT, &[]),
        ];
        let input = graph(&nodes);
        let updates = assign_updates(&input, "WASM").unwrap();
        assert_eq!(updates.nodes, ["m_update", "w_update"]);
        let out = decode(&updates.graph);
        let names: Vec<_> = out.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "m_update/tfwasm_read",
                "m_update/tfwasm_value",
                "m_update",
                "w_update/tfwasm_read",
                "w_update/tfwasm_value",
                "w_update",
                "after"
            ]
        );

        let [read, value, assign] = &out[..3] else { unreachable!() };
        // The read waits for what the update waited for.
        assert_eq!(read.op, "ReadVariableOp");
        assert_eq!(read.inputs, ["m_handle", "^grad_ready", "^m_read"]);
        assert_eq!(varint(&read.attrs[0].1), Some((ATTR_VALUE_TYPE, DT_FLOAT)));
        assert_eq!(value.op, "AddV2");
        assert_eq!(value.inputs, ["m_update/tfwasm_read", "scaled"]);
        assert_eq!((value.attrs[0].0.as_str(), varint(&value.attrs[0].1)), ("T", Some((ATTR_VALUE_TYPE, DT_FLOAT))));
        assert_eq!(assign.op, "AssignVariableOp");
        assert_eq!(assign.inputs, ["m_handle", "m_update/tfwasm_value", "^grad_ready", "^m_read"]);
        // Its own attributes stay; the shape check is added.
        let keys: Vec<_> = assign.attrs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["dtype", "_has_manual_control_dependencies", "validate_shape"]);
        assert_eq!(varint(&assign.attrs[2].1), Some((ATTR_VALUE_B, 1)));
        assert!(out.iter().all(|n| n.device == WASM0));

        assert_eq!(out[4].op, "Sub");
        assert_eq!(out[4].inputs, ["w_update/tfwasm_read", "step"]);
        assert_eq!(out[5].inputs, ["w_handle:0", "w_update/tfwasm_value"]);
        // Untouched nodes and the rest of the GraphDef come through as they were.
        assert!(updates.graph.windows(nodes[2].len()).any(|w| w == nodes[2].as_slice()));
        assert!(updates.graph.ends_with(&input[input.len() - TRAILER..]));
        // A second run finds nothing to do.
        let again = assign_updates(&updates.graph, "WASM").unwrap();
        assert!(again.nodes.is_empty());
        assert_eq!(again.graph, updates.graph);
    }

    #[test]
    fn other_updates_are_left_alone() {
        let cases = [
            ("on the CPU", update("u", "AssignAddVariableOp", &["h", "x"], CPU0, DT_FLOAT, &[])),
            ("int64", update("u", "AssignAddVariableOp", &["h", "x"], WASM0, 9, &[])),
            ("unknown attribute", update("u", "AssignAddVariableOp", &["h", "x"], WASM0, DT_FLOAT, &["mode"])),
            ("one input", update("u", "AssignSubVariableOp", &["h"], WASM0, DT_FLOAT, &[])),
            ("an assignment already", update("u", "AssignVariableOp", &["h", "x"], WASM0, DT_FLOAT, &[])),
        ];
        for (case, node) in cases {
            let input = graph(&[node]);
            let updates = assign_updates(&input, "WASM").unwrap();
            assert!(updates.nodes.is_empty(), "{case}");
            assert_eq!(updates.graph, input, "{case}");
        }
        // A taken name leaves that update alone.
        let input = graph(&[
            update("u", "AssignAddVariableOp", &["h", "x"], WASM0, DT_FLOAT, &[]),
            update("u/tfwasm_value", "Neg", &["y"], WASM0, DT_FLOAT, &[]),
        ]);
        assert_eq!(assign_updates(&input, "WASM").unwrap().graph, input);
    }

    #[test]
    fn fusion_takes_the_sum_into_the_update_tree() {
        use crate::graph::fuse::fuse_elementwise;
        use crate::graph::schema::testing::node;
        // m += (g - m)·c, as Keras' Adam writes it.
        let nodes = [
            node("m", "ReadVariableOp", &["m_handle"], WASM0),
            node("sub", "Sub", &["g", "m"], WASM0),
            node("mul", "Mul", &["sub", "c"], WASM0),
            update("m_update", "AssignAddVariableOp", &["m_handle", "mul"], WASM0, DT_FLOAT, &[]),
        ];
        let updates = assign_updates(&graph(&nodes), "WASM").unwrap();
        let fusion = fuse_elementwise(&updates.graph, "WASM", &|_| false).unwrap();
        assert_eq!(fusion.roots, ["m_update/tfwasm_value"]);
        assert_eq!(fusion.fused_nodes, 3);
        let out = decode(&fusion.graph);
        let fused = out.iter().find(|n| n.name == "m_update/tfwasm_value").unwrap();
        assert_eq!(fused.inputs, ["m_update/tfwasm_read", "g", "m", "c"]);
    }

    /// A scatter NodeDef: `dtype` and `Tindices` types, plus `extra` keys.
    fn scatter_node(name: &str, op: &str, inputs: &[&str], device: &str, dtype: u64, index: u64) -> Vec<u8> {
        let mut n = bare_node(name, op, inputs, device);
        put_type_attr(b"dtype", dtype, &mut n);
        put_type_attr(b"Tindices", index, &mut n);
        put_type_attr(b"_has_manual_control_dependencies", DT_FLOAT, &mut n);
        n
    }

    #[test]
    fn sparse_updates_become_assignments_of_a_scattered_copy() {
        let nodes = [
            scatter_node(
                "emb/sub",
                "ResourceScatterSub",
                &["table", "ids", "rows", "^ready"],
                WASM0,
                DT_FLOAT,
                DT_INT32,
            ),
            scatter_node("emb/add", "ResourceScatterAdd", &["table:0", "ids64", "rows2"], WASM0, DT_FLOAT, DT_INT64),
            update("after", "NoOp", &["^emb/sub", "^emb/add"], WASM0, DT_FLOAT, &[]),
        ];
        let input = graph(&nodes);
        let scattered = scatter_updates(&input, "WASM").unwrap();
        assert_eq!(scattered.nodes, ["emb/sub", "emb/add"]);
        let out = decode(&scattered.graph);
        let names: Vec<_> = out.iter().map(|n| (n.name.as_str(), n.op.as_str())).collect();
        assert_eq!(
            names,
            [
                ("emb/sub/tfwasm_read", "ReadVariableOp"),
                ("emb/sub/tfwasm_value", scatter::SUB_OP),
                ("emb/sub", "AssignVariableOp"),
                ("emb/add/tfwasm_read", "ReadVariableOp"),
                ("emb/add/tfwasm_value", scatter::ADD_OP),
                ("emb/add", "AssignVariableOp"),
                ("after", "NoOp"),
            ]
        );
        let [read, value, assign] = &out[..3] else { unreachable!() };
        assert_eq!(read.inputs, ["table", "^ready"]);
        assert_eq!(value.inputs, ["emb/sub/tfwasm_read", "ids", "rows"]);
        let attrs = |n: &Decoded| n.attrs.iter().map(|(k, v)| (k.clone(), varint(v))).collect::<Vec<_>>();
        assert_eq!(
            attrs(value),
            [("T".into(), Some((ATTR_VALUE_TYPE, DT_FLOAT))), ("Tindices".into(), Some((ATTR_VALUE_TYPE, DT_INT32)))]
        );
        assert_eq!(assign.inputs, ["table", "emb/sub/tfwasm_value", "^ready"]);
        // AssignVariableOp has no Tindices; the rest of the node's attributes stay.
        let keys: Vec<_> = assign.attrs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["dtype", "_has_manual_control_dependencies", "validate_shape"]);
        assert_eq!(varint(&out[4].attrs[1].1), Some((ATTR_VALUE_TYPE, DT_INT64)));
        assert_eq!(out[5].inputs, ["table:0", "emb/add/tfwasm_value"]);
        assert!(out.iter().all(|n| n.device == WASM0));
        // A second run finds nothing to do.
        assert!(scatter_updates(&scattered.graph, "WASM").unwrap().nodes.is_empty());
    }

    #[test]
    fn other_scatters_are_left_alone() {
        let cases = [
            ("on the CPU", scatter_node("u", "ResourceScatterSub", &["h", "i", "x"], CPU0, DT_FLOAT, DT_INT32)),
            ("int64 values", scatter_node("u", "ResourceScatterSub", &["h", "i", "x"], WASM0, 9, DT_INT32)),
            ("float indices", scatter_node("u", "ResourceScatterAdd", &["h", "i", "x"], WASM0, DT_FLOAT, DT_FLOAT)),
            ("two inputs", scatter_node("u", "ResourceScatterAdd", &["h", "i"], WASM0, DT_FLOAT, DT_INT32)),
            ("an update", scatter_node("u", "ResourceScatterUpdate", &["h", "i", "x"], WASM0, DT_FLOAT, DT_INT32)),
        ];
        for (case, node) in cases {
            let input = graph(&[node]);
            let scattered = scatter_updates(&input, "WASM").unwrap();
            assert!(scattered.nodes.is_empty(), "{case}");
            assert_eq!(scattered.graph, input, "{case}");
        }
    }

    #[test]
    fn malformed_graphs_are_errors() {
        let mut bad = graph(&[update("u", "AssignAddVariableOp", &["h", "x"], WASM0, DT_FLOAT, &[])]);
        bad.truncate(bad.len() - 3);
        assert!(assign_updates(&bad, "WASM").is_err());
    }
}
