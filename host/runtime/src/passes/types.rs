//! What TensorFlow's importer checks of a node against its op's signature,
//! done before TensorFlow does: how many data inputs the node takes and of
//! which types, the types of its outputs, and its attributes.
//!
//! TensorFlow checks these when it imports the graph an optimizer returns.
//! A mistake there does not fail loudly: the function runs *unoptimized*
//! ("Ignoring multi-device function optimization failure"), losing every
//! pass's rewrite and the host's legalization with it, or the step fails
//! with "Incomplete graph". So the host checks each node a pass added or
//! changed (and each node reading from one) and refuses the answer naming
//! the node, and the graph goes on without that pass's rewrite.
//!
//! The rules are TensorFlow's (`InOutTypesForNode`, `ValidateNodeDef`):
//! an argument is one tensor of a fixed type or of a `type` attribute, `N`
//! tensors of one type (`number_attr`), or one tensor per entry of a
//! `list(type)` attribute; a reference output may feed a plain input of its
//! base type; attributes without a default must be set, attributes an op
//! does not define may not be (but `_`-prefixed ones are the runtime's), and
//! a value must be of the attribute's kind and among its allowed values.

use tfwasm_proto::graph::op_def::{ArgDef, AttrDef};
use tfwasm_proto::graph::{attr_value, AttrValue, NodeDef, OpDef};

/// `DT_RESOURCE`: a handle to a variable or another resource, which must
/// be used on the device the resource lives on.
pub const DT_RESOURCE: i32 = 20;

/// TensorFlow adds this to a type for a reference (`DT_FLOAT_REF` = 101).
const REF_OFFSET: i32 = 100;

/// The dtypes of a node's data inputs and outputs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    pub inputs: Vec<i32>,
    pub outputs: Vec<i32>,
}

/// `node`'s input and output types under `op`, or why they cannot be told
/// (a missing or ill-typed attribute the signature needs).
pub fn signature(node: &NodeDef, op: &OpDef) -> Result<Signature, String> {
    Ok(Signature { inputs: arg_types(node, op, &op.input_arg)?, outputs: arg_types(node, op, &op.output_arg)? })
}

/// Whether a tensor of type `actual` may feed an input expecting `expected`.
pub fn compatible(expected: i32, actual: i32) -> bool {
    expected == actual || (expected < REF_OFFSET && actual - REF_OFFSET == expected)
}

/// A type's name as TensorFlow prints it (`float`, `int32`, `resource`).
pub fn type_name(dtype: i32) -> String {
    let (base, suffix) = if dtype > REF_OFFSET { (dtype - REF_OFFSET, "_ref") } else { (dtype, "") };
    let name = match base {
        1 => "float",
        2 => "double",
        3 => "int32",
        4 => "uint8",
        5 => "int16",
        6 => "int8",
        7 => "string",
        8 => "complex64",
        9 => "int64",
        10 => "bool",
        11 => "qint8",
        12 => "quint8",
        13 => "qint32",
        14 => "bfloat16",
        17 => "uint16",
        18 => "complex128",
        19 => "half",
        20 => "resource",
        21 => "variant",
        22 => "uint32",
        23 => "uint64",
        _ => return format!("type {dtype}"),
    };
    format!("{name}{suffix}")
}

/// The value of attribute `name` on `node`, or the op's default.
fn attr<'a>(node: &'a NodeDef, op: &'a OpDef, name: &str) -> Option<&'a attr_value::Value> {
    node.attr
        .get(name)
        .or_else(|| op.attr.iter().find(|a| a.name == name).and_then(|a| a.default_value.as_ref()))
        .and_then(|v| v.value.as_ref())
}

/// How many tensors argument `arg` of `op` stands for on `node`: `N` for
/// `N * T`, the list's length for a type list, else one.
pub fn arg_count(node: &NodeDef, op: &OpDef, arg: &ArgDef) -> Result<usize, String> {
    if !arg.number_attr.is_empty() {
        match attr(node, op, &arg.number_attr) {
            Some(attr_value::Value::I(n)) => usize::try_from(*n).map_err(|_| format!("`{}` is {n}", arg.number_attr)),
            _ => Err(format!("it has no integer attribute `{}`", arg.number_attr)),
        }
    } else if !arg.type_list_attr.is_empty() {
        match attr(node, op, &arg.type_list_attr) {
            Some(attr_value::Value::List(list)) => Ok(list.r#type.len()),
            _ => Err(format!("it has no type-list attribute `{}`", arg.type_list_attr)),
        }
    } else {
        Ok(1)
    }
}

/// The most tensors one `N * T` argument may stand for in a signature this
/// module spells out type by type.
const MAX_REPEATED: usize = 1 << 20;

fn arg_types(node: &NodeDef, op: &OpDef, args: &[ArgDef]) -> Result<Vec<i32>, String> {
    let mut types = Vec::new();
    for arg in args {
        let one = || -> Result<i32, String> {
            let dtype = if arg.r#type != 0 {
                arg.r#type
            } else if !arg.type_attr.is_empty() {
                match attr(node, op, &arg.type_attr) {
                    Some(attr_value::Value::Type(t)) => *t,
                    _ => return Err(format!("it has no type attribute `{}` (argument `{}`)", arg.type_attr, arg.name)),
                }
            } else {
                return Err(format!("argument `{}` has no type in the op's signature", arg.name));
            };
            Ok(if arg.is_ref { dtype + REF_OFFSET } else { dtype })
        };
        if !arg.number_attr.is_empty() {
            let n = arg_count(node, op, arg)?;
            if n > MAX_REPEATED {
                return Err(format!("`{}` is {n}", arg.number_attr));
            }
            let dtype = one()?;
            types.extend(std::iter::repeat_n(dtype, n));
        } else if !arg.type_list_attr.is_empty() {
            match attr(node, op, &arg.type_list_attr) {
                Some(attr_value::Value::List(list)) => {
                    types.extend(list.r#type.iter().map(|&t| if arg.is_ref { t + REF_OFFSET } else { t }))
                }
                _ => return Err(format!("it has no type-list attribute `{}`", arg.type_list_attr)),
            }
        } else {
            let dtype = one()?;
            types.push(dtype);
        }
    }
    Ok(types)
}

/// What TensorFlow's `ValidateNodeDef` would refuse in `node`'s attributes
/// under `op`, or `None`.
pub fn attr_problem(node: &NodeDef, op: &OpDef) -> Option<String> {
    for def in &op.attr {
        match node.attr.get(&def.name) {
            None if def.default_value.is_none() => {
                return Some(format!("it lacks attribute `{}`, which op {} requires", def.name, op.name))
            }
            None => {}
            Some(value) => {
                if let Some(problem) = value_problem(def, value) {
                    return Some(format!("its attribute `{}` {problem}", def.name));
                }
            }
        }
    }
    node.attr
        .keys()
        .find(|name| !name.starts_with('_') && !op.attr.iter().any(|def| &def.name == *name))
        .map(|name| format!("it has attribute `{name}`, which op {} does not define", op.name))
}

/// Why `value` does not fit `def` (its kind, its allowed values, its
/// minimum), or `None`.
fn value_problem(def: &AttrDef, value: &AttrValue) -> Option<String> {
    use attr_value::Value;
    let Some(value) = &value.value else {
        return Some("has no value".into());
    };
    let kind_ok = match (def.r#type.as_str(), value) {
        ("type", Value::Type(_))
        | ("int", Value::I(_))
        | ("float", Value::F(_))
        | ("bool", Value::B(_))
        | ("string", Value::S(_))
        | ("shape", Value::Shape(_))
        | ("tensor", Value::Tensor(_))
        | ("func", Value::Func(_)) => true,
        (kind, Value::List(_)) => kind.starts_with("list("),
        // An op whose signature names a kind this check does not know: let
        // TensorFlow judge it rather than refuse a valid answer.
        (kind, _) => {
            !matches!(kind, "type" | "int" | "float" | "bool" | "string" | "shape" | "tensor" | "func")
                && !kind.starts_with("list(")
        }
    };
    if !kind_ok {
        return Some(format!("is not of kind {}", def.r#type));
    }
    let allowed = def.allowed_values.as_ref().and_then(|a| a.value.as_ref());
    match (value, allowed) {
        (Value::Type(t), Some(Value::List(allowed))) if !allowed.r#type.is_empty() && !allowed.r#type.contains(t) => {
            return Some(format!("is {}, which op's signature does not allow", type_name(*t)))
        }
        (Value::List(list), Some(Value::List(allowed))) if !allowed.r#type.is_empty() => {
            if let Some(t) = list.r#type.iter().find(|t| !allowed.r#type.contains(t)) {
                return Some(format!("holds {}, which op's signature does not allow", type_name(*t)));
            }
        }
        (Value::S(s), Some(Value::List(allowed))) if !allowed.s.is_empty() && !allowed.s.contains(s) => {
            return Some(format!("is {:?}, not one of the values allowed", String::from_utf8_lossy(s)))
        }
        _ => {}
    }
    if def.has_minimum {
        let below = match value {
            Value::I(n) => *n < def.minimum,
            Value::List(list) => {
                let len = list.i.len().max(list.r#type.len()).max(list.s.len()).max(list.f.len());
                (len as i64) < def.minimum
            }
            _ => false,
        };
        if below {
            return Some(format!("is below its minimum {}", def.minimum));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfwasm_proto::graph::attr_value::{ListValue, Value};

    fn arg(name: &str, type_attr: &str) -> ArgDef {
        ArgDef { name: name.into(), type_attr: type_attr.into(), ..Default::default() }
    }

    fn type_attr(name: &str, allowed: &[i32]) -> AttrDef {
        AttrDef {
            name: name.into(),
            r#type: "type".into(),
            allowed_values: (!allowed.is_empty()).then(|| AttrValue {
                value: Some(Value::List(ListValue { r#type: allowed.to_vec(), ..Default::default() })),
            }),
            ..Default::default()
        }
    }

    fn add_n() -> OpDef {
        OpDef {
            name: "AddN".into(),
            input_arg: vec![ArgDef { number_attr: "N".into(), ..arg("inputs", "T") }],
            output_arg: vec![arg("sum", "T")],
            attr: vec![
                AttrDef { name: "N".into(), r#type: "int".into(), has_minimum: true, minimum: 1, ..Default::default() },
                type_attr("T", &[1, 2, 3]),
            ],
            ..Default::default()
        }
    }

    fn node(attrs: &[(&str, Value)]) -> NodeDef {
        NodeDef {
            name: "n".into(),
            op: "AddN".into(),
            attr: attrs.iter().map(|(k, v)| (k.to_string(), AttrValue { value: Some(v.clone()) })).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn number_and_type_attributes_make_the_signature() {
        let sum = node(&[("N", Value::I(3)), ("T", Value::Type(2))]);
        assert_eq!(signature(&sum, &add_n()).unwrap(), Signature { inputs: vec![2, 2, 2], outputs: vec![2] });
        assert_eq!(attr_problem(&sum, &add_n()), None);
        let untyped = node(&[("N", Value::I(3))]);
        assert!(signature(&untyped, &add_n()).unwrap_err().contains("type attribute `T`"));
    }

    #[test]
    fn attributes_are_checked_as_tensorflow_does() {
        let op = add_n();
        let missing = node(&[("N", Value::I(2))]);
        assert!(attr_problem(&missing, &op).unwrap().contains("lacks attribute `T`"));
        let not_allowed = node(&[("N", Value::I(2)), ("T", Value::Type(10))]);
        assert!(attr_problem(&not_allowed, &op).unwrap().contains("bool"));
        let wrong_kind = node(&[("N", Value::Type(1)), ("T", Value::Type(1))]);
        assert!(attr_problem(&wrong_kind, &op).unwrap().contains("not of kind int"));
        let below = node(&[("N", Value::I(0)), ("T", Value::Type(1))]);
        assert!(attr_problem(&below, &op).unwrap().contains("minimum"));
        let extra = node(&[("N", Value::I(2)), ("T", Value::Type(1)), ("bogus", Value::I(1))]);
        assert!(attr_problem(&extra, &op).unwrap().contains("`bogus`"));
        let internal = node(&[("N", Value::I(2)), ("T", Value::Type(1)), ("_class", Value::I(1))]);
        assert_eq!(attr_problem(&internal, &op), None, "attributes of the runtime are not the op's");
    }

    #[test]
    fn a_reference_feeds_its_base_type() {
        assert!(compatible(1, 1));
        assert!(compatible(1, 101), "float_ref feeds float");
        assert!(!compatible(101, 1), "float does not feed float_ref");
        assert!(!compatible(1, 3));
        assert_eq!(type_name(101), "float_ref");
        assert_eq!(type_name(DT_RESOURCE), "resource");
    }
}
