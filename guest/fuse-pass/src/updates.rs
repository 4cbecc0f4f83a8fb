//! Float32 variable updates on the device as assignments of a sum, so the
//! sum joins the elementwise tree that computes the update ([`crate::fuse`]).
//!
//! ```text
//! <name> = AssignAddVariableOp(v, x, ^controls)          (or AssignSub…)
//! ⇒
//! <name>/tfwasm_read  = ReadVariableOp(v, ^controls)                 dtype=float
//! <name>/tfwasm_value = AddV2(<name>/tfwasm_read, x)  (or Sub)       T=float
//! <name>              = AssignVariableOp(v, <name>/tfwasm_value, ^controls)
//!                       its other fields kept, validate_shape=true
//! ```
//!
//! The same rewrite as the plugin's native `graph::updates::assign_updates`,
//! node for node; its module comment says why it is sound (the sum is the
//! same IEEE operation, the update keeps its name and so every control edge
//! on it) and what changes (read and assignment are two steps).

use tfwasm_proto::graph::{attr_value, AttrValue, GraphDef, NodeDef};

use crate::node::{control_inputs, data_inputs, on_device, type_attr, type_value, Set, DT_FLOAT};

/// Suffixes of the two nodes each rewritten update adds.
pub const READ_SUFFIX: &str = "/tfwasm_read";
pub const VALUE_SUFFIX: &str = "/tfwasm_value";

/// Ops the rewrite puts on the device.
pub const EMITS: [&str; 4] = ["ReadVariableOp", "AddV2", "Sub", "AssignVariableOp"];

/// One rewritten update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The update's name, which the assignment keeps.
    pub name: String,
    /// `AssignAddVariableOp` or `AssignSubVariableOp`.
    pub was: &'static str,
    /// `AddV2` or `Sub`.
    pub combine: &'static str,
}

/// Rewrites every float32 `AssignAddVariableOp` / `AssignSubVariableOp`
/// placed on a device of type `device_type` that has exactly two data
/// inputs and no attribute but `dtype` and `_`-prefixed ones. An update
/// whose new names are taken is left alone. Returns the updates rewritten,
/// in graph order.
pub fn assign_updates(graph: &mut GraphDef, device_type: &str) -> Vec<Update> {
    let candidates: Vec<(usize, &'static str, &'static str)> = graph
        .node
        .iter()
        .enumerate()
        .filter_map(|(index, node)| {
            let (was, combine) = match node.op.as_str() {
                "AssignAddVariableOp" => ("AssignAddVariableOp", "AddV2"),
                "AssignSubVariableOp" => ("AssignSubVariableOp", "Sub"),
                _ => return None,
            };
            let only_dtype = node.attr.keys().all(|key| key == "dtype" || key.starts_with('_'));
            let rewritable = on_device(&node.device, device_type)
                && data_inputs(node).count() == 2
                && type_attr(node, "dtype") == Some(DT_FLOAT)
                && only_dtype;
            rewritable.then_some((index, was, combine))
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }

    // New names may not collide with a node's, nor with each other's.
    let mut names: Set<&str> = graph.node.iter().map(|n| n.name.as_str()).collect();
    let new_names: Vec<(String, String)> = candidates
        .iter()
        .map(|&(i, ..)| (name_with(&graph.node[i].name, READ_SUFFIX), name_with(&graph.node[i].name, VALUE_SUFFIX)))
        .collect();
    let mut planned = Vec::with_capacity(candidates.len());
    for (&(index, was, combine), (read, value)) in candidates.iter().zip(&new_names) {
        if names.contains(read.as_str()) || names.contains(value.as_str()) {
            continue;
        }
        names.insert(read);
        names.insert(value);
        planned.push((index, was, combine));
    }
    drop(names);
    if planned.is_empty() {
        return Vec::new();
    }

    let mut updates = Vec::with_capacity(planned.len());
    let old = std::mem::take(&mut graph.node);
    graph.node.reserve(old.len() + 2 * planned.len());
    let mut plan = planned.into_iter().peekable();
    for (index, node) in old.into_iter().enumerate() {
        match plan.next_if(|&(at, ..)| at == index) {
            Some((_, was, combine)) => {
                updates.push(Update { name: node.name.clone(), was, combine });
                rewrite(node, combine, &mut graph.node);
            }
            None => graph.node.push(node),
        }
    }
    updates
}

fn name_with(name: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(name.len() + suffix.len());
    out.push_str(name);
    out.push_str(suffix);
    out
}

/// Pushes the read, the value and the assignment that replace `update`.
fn rewrite(mut update: NodeDef, combine: &str, out: &mut Vec<NodeDef>) {
    let read = name_with(&update.name, READ_SUFFIX);
    let value = name_with(&update.name, VALUE_SUFFIX);
    let (handle, x) = {
        let mut data = data_inputs(&update);
        match (data.next(), data.next()) {
            (Some(handle), Some(x)) => (handle.to_owned(), x.to_owned()),
            _ => unreachable!("only updates with two data inputs are planned"),
        }
    };
    let controls: Vec<String> = control_inputs(&update).map(str::to_owned).collect();

    let mut read_inputs = Vec::with_capacity(1 + controls.len());
    read_inputs.push(handle.clone());
    read_inputs.extend(controls.iter().cloned());
    out.push(NodeDef {
        name: read.clone(),
        op: "ReadVariableOp".into(),
        input: read_inputs,
        device: update.device.clone(),
        attr: [("dtype".to_owned(), type_value(DT_FLOAT))].into(),
        ..Default::default()
    });
    out.push(NodeDef {
        name: value.clone(),
        op: combine.into(),
        input: vec![read, x],
        device: update.device.clone(),
        attr: [("T".to_owned(), type_value(DT_FLOAT))].into(),
        ..Default::default()
    });

    update.op = "AssignVariableOp".into();
    update.input = [handle, value].into_iter().chain(controls).collect();
    update.attr.insert("validate_shape".into(), AttrValue { value: Some(attr_value::Value::B(true)) });
    out.push(update);
}

#[cfg(test)]
mod tests {
    use super::*;

    const WASM0: &str = "/job:localhost/replica:0/task:0/device:WASM:0";

    fn update(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|i| i.to_string()).collect(),
            device: WASM0.into(),
            attr: [("dtype".to_owned(), type_value(DT_FLOAT))].into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_update_becomes_read_value_assign_in_its_place() {
        let mut graph = GraphDef {
            node: vec![
                update("first", "NoOp", &[]),
                update("u", "AssignSubVariableOp", &["h", "x:1", "^c"]),
                update("last", "NoOp", &["^u"]),
            ],
            ..Default::default()
        };
        let updates = assign_updates(&mut graph, "WASM");
        assert_eq!(updates, [Update { name: "u".into(), was: "AssignSubVariableOp", combine: "Sub" }]);
        let names: Vec<_> = graph.node.iter().map(|n| (n.name.as_str(), n.op.as_str())).collect();
        assert_eq!(
            names,
            [
                ("first", "NoOp"),
                ("u/tfwasm_read", "ReadVariableOp"),
                ("u/tfwasm_value", "Sub"),
                ("u", "AssignVariableOp"),
                ("last", "NoOp")
            ]
        );
        assert_eq!(graph.node[1].input, ["h", "^c"]);
        assert_eq!(graph.node[2].input, ["u/tfwasm_read", "x:1"]);
        assert_eq!(graph.node[3].input, ["h", "u/tfwasm_value", "^c"]);
        assert_eq!(graph.node[3].attr.keys().collect::<Vec<_>>(), ["dtype", "validate_shape"]);
        assert!(assign_updates(&mut graph, "WASM").is_empty(), "a second run finds nothing");
    }

    #[test]
    fn two_updates_may_not_claim_one_name() {
        // `a/tfwasm_read` is free, but only for the first update that wants it.
        let mut graph = GraphDef {
            node: vec![
                update("a", "AssignAddVariableOp", &["h", "x"]),
                update("a", "AssignAddVariableOp", &["h", "y"]),
            ],
            ..Default::default()
        };
        assert_eq!(assign_updates(&mut graph, "WASM").len(), 1);
        assert_eq!(graph.node.len(), 4);
    }
}
