//! Semantic edits: answers every structural check of the host accepts (the
//! graph parses, every op is known and has its kernel, every edge is
//! typed as before) but that compute something else. Nothing short of
//! running the graph finds them: `tfwasm pass verify` must, naming the node.
//!
//! | edit | what changes | what training sees |
//! | --- | --- | --- |
//! | `add-to-sub` | the first float32 `AddV2` whose value reaches a fetch (`_Retval`) or a variable update becomes `Sub` | a wrong loss or update |
//! | `edit-const` | the first float32 `Const` whose value reaches a variable update gets 0.5 added to every element | a hyper-parameter changed |
//! | `neuter-assign` | the first float32 `AssignSubVariableOp` (else `Assign*VariableOp`) becomes an `AssignVariableOp` of a fresh read of its own variable | the variable stops learning |

use tfwasm_proto::graph::{attr_value, DataType, GraphDef, NodeDef};

use crate::edits::source_of;

/// `pass-info.emits`: what a semantic edit may make that the graph did not have.
pub const EMITS: [&str; 3] = ["Sub", "ReadVariableOp", "AssignVariableOp"];

/// The read `neuter-assign` adds.
pub const READ_BACK: &str = "hostile/read_back";

/// Ops that write a variable's new value: what an optimizer's step ends in.
fn updates(node: &NodeDef) -> bool {
    matches!(node.op.as_str(), "AssignVariableOp" | "AssignAddVariableOp" | "AssignSubVariableOp")
        || node.op.starts_with("ResourceApply")
}

fn fetches(node: &NodeDef) -> bool {
    node.op == "_Retval"
}

fn float32(node: &NodeDef, attr: &str) -> bool {
    node.attr.get(attr).and_then(|a| a.value.as_ref()) == Some(&attr_value::Value::Type(DataType::DtFloat as i32))
}

/// For each node, whether its value reaches a node `sink` accepts through
/// data edges (control edges carry no value).
fn reaches(graph: &GraphDef, sink: impl Fn(&NodeDef) -> bool) -> Vec<bool> {
    let index: std::collections::BTreeMap<&str, usize> =
        graph.node.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut marked = vec![false; graph.node.len()];
    let mut stack: Vec<usize> = (0..graph.node.len()).filter(|&i| sink(&graph.node[i])).collect();
    for &i in &stack {
        marked[i] = true;
    }
    while let Some(i) = stack.pop() {
        for input in graph.node[i].input.iter().filter(|input| !input.starts_with('^')) {
            if let Some(&from) = index.get(source_of(input)) {
                if !marked[from] {
                    marked[from] = true;
                    stack.push(from);
                }
            }
        }
    }
    marked
}

/// The first float32 `AddV2` on a path to a fetch or an update becomes `Sub`.
pub fn add_to_sub(graph: &mut GraphDef) -> Option<(String, String)> {
    let on_path = reaches(graph, |n| fetches(n) || updates(n));
    let at =
        (0..graph.node.len()).find(|&i| on_path[i] && graph.node[i].op == "AddV2" && float32(&graph.node[i], "T"))?;
    let node = &mut graph.node[at];
    node.op = "Sub".into();
    Some((node.name.clone(), "AddV2 as Sub".into()))
}

/// The first float32 `Const` on a path to a variable update: 0.5 added to
/// each of its values.
pub fn edit_const(graph: &mut GraphDef) -> Option<(String, String)> {
    let on_path = reaches(graph, updates);
    let at = (0..graph.node.len())
        .find(|&i| on_path[i] && graph.node[i].op == "Const" && float32(&graph.node[i], "dtype"))?;
    let node = &mut graph.node[at];
    let Some(attr_value::Value::Tensor(tensor)) = node.attr.get_mut("value").and_then(|a| a.value.as_mut()) else {
        return None;
    };
    if !tensor.tensor_content.is_empty() {
        for value in tensor.tensor_content.chunks_exact_mut(4) {
            let bumped = f32::from_le_bytes([value[0], value[1], value[2], value[3]]) + 0.5;
            value.copy_from_slice(&bumped.to_le_bytes());
        }
    } else if tensor.float_val.is_empty() {
        // No values: all zeros. One value fills the tensor.
        tensor.float_val.push(0.5);
    } else {
        for value in &mut tensor.float_val {
            *value += 0.5;
        }
    }
    Some((node.name.clone(), "every value + 0.5".into()))
}

/// The first float32 `AssignSubVariableOp` (an optimizer's step on a
/// trained variable), else the first `AssignVariableOp` or
/// `AssignAddVariableOp`, becomes an `AssignVariableOp` of a new
/// `ReadVariableOp` of the same variable: the step writes back what it read.
pub fn neuter_assign(graph: &mut GraphDef) -> Option<(String, String)> {
    let assigns = |n: &NodeDef| {
        matches!(n.op.as_str(), "AssignVariableOp" | "AssignAddVariableOp" | "AssignSubVariableOp")
            && float32(n, "dtype")
            && n.input.len() >= 2
    };
    let at = graph
        .node
        .iter()
        .position(|n| assigns(n) && n.op == "AssignSubVariableOp")
        .or_else(|| graph.node.iter().position(assigns))?;
    let assign = &graph.node[at];
    let read = NodeDef {
        name: READ_BACK.into(),
        op: "ReadVariableOp".into(),
        input: vec![assign.input[0].clone()],
        device: assign.device.clone(),
        attr: [("dtype".to_string(), assign.attr["dtype"].clone())].into_iter().collect(),
        ..Default::default()
    };
    let assign = &mut graph.node[at];
    let was = std::mem::replace(&mut assign.op, "AssignVariableOp".into());
    assign.input[1] = READ_BACK.into();
    let name = assign.name.clone();
    graph.node.push(read);
    Some((name, format!("{was} now writes back what {READ_BACK} read")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfwasm_proto::graph::{AttrValue, TensorProto};
    use tfwasm_proto::prost::Message;

    const KERAS_STEP: &[u8] = include_bytes!("../../../tests/fixtures/graphs/keras_mlp_step.pb");

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        let float = AttrValue { value: Some(attr_value::Value::Type(DataType::DtFloat as i32)) };
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|i| i.to_string()).collect(),
            attr: [("T".to_string(), float.clone()), ("dtype".to_string(), float)].into_iter().collect(),
            ..Default::default()
        }
    }

    /// A step: out = x + 1 (fetched); v -= lr * (x + x), lr a constant; an
    /// AddV2 that reaches nothing comes first.
    fn step() -> GraphDef {
        let mut lr = node("lr", "Const", &[]);
        lr.attr.insert(
            "value".into(),
            AttrValue {
                value: Some(attr_value::Value::Tensor(TensorProto {
                    dtype: DataType::DtFloat as i32,
                    float_val: vec![0.25],
                    ..Default::default()
                })),
            },
        );
        GraphDef {
            node: vec![
                node("x", "_Arg", &[]),
                node("v", "_Arg", &[]),
                node("dead", "AddV2", &["x", "x"]),
                node("sum", "AddV2", &["x", "x"]),
                lr,
                node("delta", "Mul", &["lr", "sum"]),
                node("update", "AssignSubVariableOp", &["v", "delta", "^dead"]),
                node("plus", "AddV2", &["x", "lr"]),
                node("out", "_Retval", &["plus"]),
            ],
            ..Default::default()
        }
    }

    fn find<'g>(graph: &'g GraphDef, name: &str) -> &'g NodeDef {
        graph.node.iter().find(|n| n.name == name).unwrap()
    }

    #[test]
    fn add_to_sub_skips_an_add_that_reaches_nothing() {
        let mut graph = step();
        assert_eq!(add_to_sub(&mut graph).unwrap().0, "sum");
        assert_eq!(find(&graph, "sum").op, "Sub");
        assert_eq!(find(&graph, "dead").op, "AddV2", "a control edge carries no value");
    }

    #[test]
    fn edit_const_bumps_the_constant_an_update_reads() {
        let mut graph = step();
        assert_eq!(edit_const(&mut graph).unwrap().0, "lr");
        let Some(attr_value::Value::Tensor(t)) = &find(&graph, "lr").attr["value"].value else { panic!() };
        assert_eq!(t.float_val, [0.75]);
        // Values in tensor_content are bumped in place.
        let mut graph = step();
        let lr = graph.node.iter_mut().find(|n| n.name == "lr").unwrap();
        let Some(attr_value::Value::Tensor(t)) = &mut lr.attr.get_mut("value").unwrap().value else { panic!() };
        t.float_val.clear();
        t.tensor_content = [1.0f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        edit_const(&mut graph).unwrap();
        let Some(attr_value::Value::Tensor(t)) = &find(&graph, "lr").attr["value"].value else { panic!() };
        assert_eq!(t.tensor_content, [1.5f32, -1.5].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    }

    #[test]
    fn neuter_assign_writes_back_a_read_of_the_same_variable() {
        let mut graph = step();
        assert_eq!(neuter_assign(&mut graph).unwrap().0, "update");
        let update = find(&graph, "update");
        assert_eq!((update.op.as_str(), update.input[1].as_str()), ("AssignVariableOp", READ_BACK));
        assert_eq!(update.input[2], "^dead", "control edges stay");
        assert_eq!(find(&graph, READ_BACK).input, ["v"]);
    }

    #[test]
    fn every_semantic_edit_finds_its_target_in_a_keras_step() {
        let given = GraphDef::decode(KERAS_STEP).unwrap();
        for edit in [add_to_sub, edit_const, neuter_assign] {
            let mut graph = given.clone();
            let (node, _) = edit(&mut graph).expect("a Keras Adam step has an add, a constant and an update");
            assert!(given.node.iter().any(|n| n.name == node));
        }
    }
}
