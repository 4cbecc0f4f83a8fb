//! What TensorFlow knows, for checking answers: op signatures and the
//! device's kernels.
//!
//! Inside TensorFlow the plugin reads op signatures from the live registry
//! (`TF_LookUpOpDef`) and kernels from its own table. Without TensorFlow
//! (`tfwasm pass run`, `tfwasm pass check`, tests) [`Catalog::snapshot`]
//! reads both from files kept in the repository: `proto/ops/`, a snapshot of
//! TensorFlow 2.21's registry with tfwasm loaded, written by
//! `proto/ops/snapshot.py`, and the device's kernel table, written by the
//! kernels crate's tests (`proto/ops/wasm-kernels.txt`).

use std::collections::HashMap;

use tfwasm_proto::graph::{attr_value, NodeDef, OpDef, OpList};
use tfwasm_proto::prost::Message;

use super::validate::OpCatalog;

/// TensorFlow 2.21's op registry, with tfwasm's own ops, as an `OpList`.
const TENSORFLOW_OPS: &[u8] = include_bytes!("../../../../proto/ops/tensorflow-2.21.oplist.pb");

/// The device's kernel table when the snapshot was written.
const WASM_KERNELS: &str = include_str!("../../../../proto/ops/wasm-kernels.txt");

/// Ops TensorFlow itself has `DEVICE_DEFAULT` kernels for, which therefore
/// run on any pluggable device (measured with the 2.21 wheel; not all of
/// them, only those a pass may plausibly add).
pub const DEVICE_DEFAULT_OPS: &[&str] = &[
    "Identity",
    "Const",
    "NoOp",
    "_Arg",
    "_Retval",
    "Shape",
    "Reshape",
    "VarHandleOp",
    "ReadVariableOp",
    "AssignVariableOp",
    "AssignAddVariableOp",
    "AssignSubVariableOp",
    "Switch",
    "Merge",
    "Enter",
    "Exit",
    "NextIteration",
    "LoopCond",
];

/// The types a kernel accepts for one type attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeConstraint {
    pub attr: String,
    /// TensorFlow `DataType` numbers.
    pub dtypes: Vec<u32>,
}

/// One kernel of the device: its op and, per type attribute, the types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub op: String,
    pub types: Vec<TypeConstraint>,
}

impl Kernel {
    /// Whether `node` (of this kernel's op) may run on it: each constrained
    /// attribute the node sets holds one of the accepted types.
    pub fn accepts(&self, node: &NodeDef) -> bool {
        self.types.iter().all(|constraint| match node.attr.get(&constraint.attr).and_then(|a| a.value.as_ref()) {
            Some(attr_value::Value::Type(dtype)) => {
                u32::try_from(*dtype).is_ok_and(|dtype| constraint.dtypes.contains(&dtype))
            }
            _ => true,
        })
    }
}

/// The kernels a device has, by op.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelTable {
    by_op: HashMap<String, Vec<Kernel>>,
}

impl KernelTable {
    pub fn new(kernels: impl IntoIterator<Item = Kernel>) -> Self {
        let mut by_op: HashMap<String, Vec<Kernel>> = HashMap::new();
        for kernel in kernels {
            by_op.entry(kernel.op.clone()).or_default().push(kernel);
        }
        KernelTable { by_op }
    }

    /// Parses the text form, one kernel per line: the op, then
    /// `attr=dtype,dtype` per constrained attribute (`#` starts a comment).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut kernels = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.split_ascii_whitespace();
            let Some(op) = words.next() else { continue };
            let types = words
                .map(|word| {
                    let (attr, dtypes) = word
                        .split_once('=')
                        .ok_or_else(|| format!("line {}: `{word}` is not attr=types", number + 1))?;
                    let dtypes = dtypes
                        .split(',')
                        .map(|d| d.parse().map_err(|_| format!("line {}: `{d}` is not a DataType number", number + 1)))
                        .collect::<Result<_, _>>()?;
                    Ok(TypeConstraint { attr: attr.to_owned(), dtypes })
                })
                .collect::<Result<_, String>>()?;
            kernels.push(Kernel { op: op.to_owned(), types });
        }
        Ok(KernelTable::new(kernels))
    }

    /// The text form [`KernelTable::parse`] reads, ops in name order.
    pub fn to_text(&self) -> String {
        let mut lines: Vec<String> = self
            .kernels()
            .map(|kernel| {
                let mut line = kernel.op.clone();
                for constraint in &kernel.types {
                    let dtypes: Vec<String> = constraint.dtypes.iter().map(u32::to_string).collect();
                    line.push_str(&format!(" {}={}", constraint.attr, dtypes.join(",")));
                }
                line
            })
            .collect();
        lines.sort();
        lines.dedup();
        lines.join("\n") + "\n"
    }

    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.by_op.values().flatten()
    }

    /// Whether one of the op's kernels accepts `node`, or TensorFlow has a
    /// kernel for the op on every device ([`DEVICE_DEFAULT_OPS`]).
    pub fn supports(&self, node: &NodeDef) -> bool {
        self.by_op.get(&node.op).is_some_and(|kernels| kernels.iter().any(|kernel| kernel.accepts(node)))
            || DEVICE_DEFAULT_OPS.contains(&node.op.as_str())
    }
}

/// Op signatures and kernels from fixed tables.
pub struct Catalog {
    ops: HashMap<String, OpDef>,
    kernels: KernelTable,
}

impl Catalog {
    pub fn new(ops: OpList, kernels: KernelTable) -> Self {
        Catalog { ops: ops.op.into_iter().map(|op| (op.name.clone(), op)).collect(), kernels }
    }

    /// TensorFlow 2.21's registry and the device's kernels, as kept in
    /// `proto/ops/`: what offline checks use.
    pub fn snapshot() -> Self {
        // Both files are checked by tests whenever they change; a broken
        // one is a build of tfwasm that cannot check anything.
        let ops = OpList::decode(TENSORFLOW_OPS).expect("proto/ops/tensorflow-2.21.oplist.pb is an OpList");
        let kernels = KernelTable::parse(WASM_KERNELS).expect("proto/ops/wasm-kernels.txt parses");
        Catalog::new(ops, kernels)
    }

    pub fn kernels(&self) -> &KernelTable {
        &self.kernels
    }
}

impl OpCatalog for Catalog {
    fn op_def(&self, op: &str) -> Option<OpDef> {
        self.ops.get(op).cloned()
    }

    fn has_kernel(&self, node: &NodeDef) -> bool {
        self.kernels.supports(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfwasm_proto::graph::AttrValue;

    fn typed(op: &str, attr: &str, dtype: i32) -> NodeDef {
        let mut node = NodeDef { name: "n".into(), op: op.into(), ..Default::default() };
        node.attr.insert(attr.into(), AttrValue { value: Some(attr_value::Value::Type(dtype)) });
        node
    }

    #[test]
    fn the_text_form_round_trips_and_constrains_types() {
        let table = KernelTable::parse("# ops\nMatMul T=1\nSum T=1,3 Tidx=3,9\nNoOp\n").unwrap();
        assert_eq!(KernelTable::parse(&table.to_text()).unwrap(), table);
        assert!(table.supports(&typed("MatMul", "T", 1)));
        assert!(!table.supports(&typed("MatMul", "T", 2)), "float64 has no kernel");
        assert!(table.supports(&typed("Sum", "Tidx", 9)));
        assert!(!table.supports(&typed("Sum", "Tidx", 1)));
        assert!(table.supports(&typed("NoOp", "T", 7)), "no constraint");
        assert!(table.supports(&typed("Identity", "T", 1)), "TensorFlow's own DEVICE_DEFAULT kernel");
        assert!(!table.supports(&typed("Conv2D", "T", 1)));
        assert!(KernelTable::parse("MatMul T").is_err());
        assert!(KernelTable::parse("MatMul T=float").is_err());
    }

    #[test]
    fn the_snapshot_knows_tensorflow_and_the_device() {
        let catalog = Catalog::snapshot();
        let matmul = catalog.op_def("MatMul").expect("MatMul is a TensorFlow op");
        assert_eq!(matmul.output_arg.len(), 1);
        assert!(catalog.op_def("_TfwasmFusedElementwise").is_some(), "tfwasm's own ops are in the snapshot");
        assert!(catalog.op_def("NoSuchOp").is_none());
        assert!(catalog.has_kernel(&typed("MatMul", "T", 1)));
    }
}
