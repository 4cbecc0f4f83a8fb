//! # tfwasm kernels
//!
//! Native compute kernels: the arithmetic behind the ops tfwasm registers
//! with TensorFlow (the plugin's `abi/kernels.rs`). No guest is involved
//! here — the guest decides where tensors live, the host does the math on
//! them.
//!
//! Everything in this crate is safe Rust on [`Tensor`]s and knows nothing
//! of TensorFlow's C types. A kernel is a [`Kernel`] built once per graph
//! node from its [`Attrs`] and run for every execution with an
//! [`OpContext`] that hands out inputs and allocates outputs; `abi/kernels.rs`
//! implements both over TensorFlow's handles and [`LocalContext`] over plain
//! vectors, for tests.
//!
//! [`registry()`] lists every [`KernelDef`]: which op, for which element
//! types, which arguments live in host memory, and how to build the kernel.
//! Each family module contributes a `KERNELS` table:
//!
//! - [`shape`]: broadcasting, collapsed into the fewest dimensions.
//! - [`binary`]: elementwise binary ops with broadcasting.
//! - [`unary`]: elementwise unary ops and the activation gradients.
//! - [`reduce`]: Sum, Mean, Max, … over axes; ArgMax/ArgMin.
//! - [`matmul`]: MatMul, BatchMatMulV2, BiasAdd(Grad) and `_FusedMatMul`.
//! - [`sgemm`]: every float32 matrix product, on `gemm` or (large ones) BLIS.
//! - [`einsum`]: Einsum, as transposes, sums and one batched product.
//! - [`nn`]: softmax and the cross-entropy losses.
//! - [`conv`]: Conv2D (and `_FusedConv2D`), the depthwise convolution and
//!   their backprops, pooling and its gradients.
//! - [`epilogue`]: the bias (or batch norm) and activation that TensorFlow's
//!   fused products `_FusedMatMul` and `_FusedConv2D` apply to their output.
//! - [`batchnorm`]: FusedBatchNormV3 and its gradient.
//! - [`movement`]: transpose, concat, slice, tile, pad, gather, … in every type.
//! - [`image`]: bilinear resizing and its gradient.
//! - [`random`]: the stateless random ops Keras initializers and dropout use.
//! - [`scatter`]: sparse variable updates, as the graph pass rewrites them,
//!   and `TensorScatterUpdate`.
//! - [`fused`]: trees of elementwise ops the graph pass fused into one node.
//! - [`half`]: float16/bfloat16 registrations of float32 kernels (mixed
//!   precision), computed in float32 and rounded once.
//! - [`pool`]: the rayon pool the kernels compute on (the runtime's, shared
//!   with the device's large copies).
//!
//! A kernel checks every shape it is given and fails with
//! [`Error::InvalidArgument`] naming the op; slices are bounds-checked, so a
//! wrong length is an error, never an out-of-bounds access. Small ops run on
//! the calling (TensorFlow) thread; large ones on the pool.

pub mod batchnorm;
pub mod binary;
pub mod conv;
pub mod einsum;
pub mod epilogue;
pub mod fused;
pub mod half;
pub mod image;
pub mod matmul;
pub mod movement;
pub mod nn;
pub mod random;
pub mod reduce;
pub mod scatter;
pub mod sgemm;
pub mod shape;
pub mod tensor;
pub mod unary;
pub mod vmath;

pub use tfwasm_runtime::{error, pool};

pub use binary::{BinaryOp, BinaryPlan};
pub use matmul::{MatMulAttrs, MatMulPlan};
pub use shape::{Broadcast, ShapeDisplay, ShapeError};
pub use tensor::{Attrs, DType, Element, LocalContext, OpContext, OutputPlace, Owner, Tensor, TfBool};

use crate::error::Error;

/// A kernel instance for one graph node. Built once, then computed (maybe
/// from several threads at once) for every execution.
pub trait Kernel: Send + Sync {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error>;
}

/// Inputs (in all) from which an execution of a [deferrable](KernelDef::deferrable)
/// kernel runs on the compute pool after its compute callback returned.
/// Below it the pool hand-off (a worker wake-up, ~10–30 µs on two cores)
/// would cost more than the overlap wins.
pub const DEFER_MIN_INPUT_BYTES: usize = 256 << 10;

/// Builds a kernel for a node from its attributes.
pub type BuildFn = fn(&dyn Attrs) -> Result<Box<dyn Kernel>, Error>;

/// One op tfwasm implements, as registered with TensorFlow.
#[derive(Clone, Copy)]
pub struct KernelDef {
    /// The TensorFlow op name.
    pub op: &'static str,
    /// Type constraints: for each type attribute, the types we implement.
    /// One TensorFlow registration is made per combination.
    pub types: &'static [(&'static str, &'static [DType])],
    /// Input/output argument names TensorFlow keeps in host memory (shapes,
    /// axes, sizes a kernel reads before it can allocate).
    pub host_memory: &'static [&'static str],
    /// Whether a large execution (at least [`DEFER_MIN_INPUT_BYTES`] of
    /// inputs) may finish after TensorFlow's compute callback returned, on
    /// the compute pool, so the executor runs other ready nodes meanwhile
    /// (see `abi::kernels::compute_kernel_async`). Only `Conv2D` (with
    /// `_FusedConv2D`) and its backprops are: TensorFlow dispatches every node that an asynchronous
    /// kernel makes ready to its inter-op pool, also after an execution
    /// that finished before returning, so registering an op this way costs
    /// a thread hand-off per execution in a graph (and ~1.5 µs per eager
    /// call). For products and fused elementwise nodes that cost more than
    /// the overlap won (`docs/architecture.md`, "deferred"); for the
    /// depthwise convolutions it has not been measured.
    pub deferrable: bool,
    /// A float16/bfloat16 registration of a float32 kernel: `create` wraps
    /// what `build` makes so it computes in float32 ([`half`]).
    pub widened: bool,
    pub build: BuildFn,
}

impl KernelDef {
    pub const fn new(op: &'static str, types: &'static [(&'static str, &'static [DType])], build: BuildFn) -> Self {
        KernelDef { op, types, host_memory: &[], deferrable: false, widened: false, build }
    }

    /// Builds the kernel for a node with attributes `attrs`.
    pub fn create(&self, attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
        if self.widened {
            half::widen(attrs, self.build)
        } else {
            (self.build)(attrs)
        }
    }

    pub const fn deferrable(self) -> Self {
        KernelDef { deferrable: true, ..self }
    }

    pub const fn host_memory(self, host_memory: &'static [&'static str]) -> Self {
        KernelDef { host_memory, ..self }
    }

    /// Every combination of the type constraints (one per registration).
    pub fn type_combinations(&self) -> Vec<Vec<(&'static str, DType)>> {
        let mut combos = vec![Vec::new()];
        for &(attr, dtypes) in self.types {
            combos = combos
                .into_iter()
                .flat_map(|combo| {
                    dtypes.iter().map(move |&dtype| {
                        let mut next = combo.clone();
                        next.push((attr, dtype));
                        next
                    })
                })
                .collect();
        }
        combos
    }
}

impl std::fmt::Debug for KernelDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDef").field("op", &self.op).field("types", &self.types).finish()
    }
}

/// A kernel that needs no attributes: a plain function of the context.
pub struct FnKernel(pub fn(&dyn OpContext) -> Result<(), Error>);

impl Kernel for FnKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        (self.0)(ctx)
    }
}

/// Common type-constraint lists.
pub mod types {
    use super::DType;
    pub const F32: &[DType] = &[DType::F32];
    pub const INDEX: &[DType] = &[DType::I32, DType::I64];
    pub const T_F32: &[(&str, &[DType])] = &[("T", F32)];
    /// float16 and bfloat16, computed in float32 ([`super::half`]).
    pub const HALF: &[DType] = &[DType::F16, DType::BF16];
    pub const T_HALF: &[(&str, &[DType])] = &[("T", HALF)];
}

/// Every kernel tfwasm registers, in registration order.
pub fn registry() -> Vec<KernelDef> {
    let mut defs = [
        binary::KERNELS,
        unary::KERNELS,
        reduce::KERNELS,
        matmul::KERNELS,
        einsum::KERNELS,
        nn::KERNELS,
        conv::KERNELS,
        batchnorm::KERNELS,
        image::KERNELS,
        movement::KERNELS,
        random::KERNELS,
        scatter::KERNELS,
        fused::KERNELS,
    ]
    .concat();
    let narrow = half::narrow_registrations(&defs);
    defs.extend(narrow);
    defs
}

/// [`registry()`], built once for the process.
pub fn registered() -> &'static [KernelDef] {
    static DEFS: std::sync::OnceLock<Vec<KernelDef>> = std::sync::OnceLock::new();
    DEFS.get_or_init(registry)
}

/// Whether tfwasm registers a kernel for the op named `op` with the types
/// `type_of` gives for its type attributes (TensorFlow `DataType` numbers).
/// An attribute `type_of` does not know matches any type.
///
/// Our kernels read inputs and write outputs through plain pointers
/// wherever TensorFlow keeps them, host or device memory, so the graph pass
/// may move any of their arguments to host memory (`graph::host_edges`).
/// TensorFlow's own `DEVICE_DEFAULT` kernels cover some ops for the types
/// we leave out (int32 `Less`, `AddV2`, ... in host memory), and the pass
/// must tell those nodes from ours.
pub fn implements(op: &[u8], type_of: &dyn Fn(&str) -> Option<i64>) -> bool {
    type ByOp = std::collections::HashMap<&'static str, Vec<&'static KernelDef>>;
    static BY_OP: std::sync::OnceLock<ByOp> = std::sync::OnceLock::new();
    let by_op = BY_OP.get_or_init(|| {
        let mut by_op = ByOp::new();
        for def in registered() {
            by_op.entry(def.op).or_default().push(def);
        }
        by_op
    });
    let Some(defs) = std::str::from_utf8(op).ok().and_then(|op| by_op.get(op)) else { return false };
    defs.iter().any(|def| {
        def.types.iter().all(|&(attr, dtypes)| {
            type_of(attr).is_none_or(|number| DType::from_datatype(number).is_some_and(|dtype| dtypes.contains(&dtype)))
        })
    })
}

/// Every element type a kernel may be registered for, in the order of the
/// op × type table ([`dtype_table`]).
pub const DTYPES: [DType; 9] =
    [DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8, DType::U64, DType::Bool];

/// The op × element-type table of [`registry()`], as Markdown: one row per
/// op, a mark under each type its first type attribute is registered for
/// (`T` for most ops), and the other type attributes' types in the last
/// column. `docs/kernels.md` holds it; a test keeps the two equal.
pub fn dtype_table() -> String {
    use std::collections::{BTreeMap, BTreeSet};
    #[derive(Default)]
    struct Row {
        first: Option<&'static str>,
        types: BTreeSet<usize>,
        others: BTreeMap<&'static str, BTreeSet<usize>>,
    }
    let index = |dtype: DType| DTYPES.iter().position(|&d| d == dtype).unwrap_or(DTYPES.len());
    let mut rows: BTreeMap<&'static str, Row> = BTreeMap::new();
    for def in registry() {
        let row = rows.entry(def.op).or_default();
        for (position, &(attr, dtypes)) in def.types.iter().enumerate() {
            let first = *row.first.get_or_insert(attr);
            let set = if position == 0 && attr == first { &mut row.types } else { row.others.entry(attr).or_default() };
            set.extend(dtypes.iter().map(|&d| index(d)));
        }
    }
    let mut table = String::from("| op | attr |");
    for dtype in DTYPES {
        table.push_str(&format!(" {} |", dtype.name()));
    }
    table.push_str(" other type attributes |\n|");
    table.push_str(&" --- |".repeat(DTYPES.len() + 3));
    table.push('\n');
    let names = |set: &BTreeSet<usize>| -> String {
        set.iter().filter_map(|&i| DTYPES.get(i)).map(|d| d.name()).collect::<Vec<_>>().join(", ")
    };
    for (op, row) in &rows {
        table.push_str(&format!("| {op} | {} |", row.first.unwrap_or("—")));
        for i in 0..DTYPES.len() {
            table.push_str(if row.types.contains(&i) { " ✓ |" } else { " |" });
        }
        let others: Vec<String> = row.others.iter().map(|(attr, set)| format!("{attr}: {}", names(set))).collect();
        table.push_str(&format!(" {} |\n", others.join("; ")));
    }
    table
}

/// Checks the number of inputs TensorFlow passed.
pub fn expect_inputs(op: &str, ctx: &dyn OpContext, count: usize) -> Result<(), Error> {
    let inputs = ctx.num_inputs();
    if inputs == count {
        Ok(())
    } else {
        Err(Error::Internal(format!("{op}: expected {count} inputs, TensorFlow passed {inputs}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_has_no_duplicate_registrations() {
        let mut seen = std::collections::HashSet::new();
        for def in registry() {
            for combo in def.type_combinations() {
                assert!(seen.insert((def.op, combo.clone())), "{} registered twice for {combo:?}", def.op);
            }
        }
    }

    #[test]
    fn implements_tells_our_types_from_tensorflows() {
        let types = |pairs: &'static [(&'static str, i64)]| {
            move |attr: &str| pairs.iter().find(|(a, _)| *a == attr).map(|&(_, t)| t)
        };
        // float32 `Less` is ours; int32 `Less` is TensorFlow's (host memory).
        assert!(implements(b"Less", &types(&[("T", 1)])));
        assert!(!implements(b"Less", &types(&[("T", 3)])));
        // Every type attribute must match one registration.
        assert!(implements(b"Transpose", &types(&[("T", 3), ("Tperm", 9)])));
        assert!(!implements(b"Transpose", &types(&[("T", 3), ("Tperm", 1)])));
        // An attribute not given matches; a type we have no DType for does not.
        assert!(implements(b"LogicalAnd", &types(&[])));
        assert!(implements(b"MatMul", &types(&[])));
        assert!(implements(b"MatMul", &types(&[("T", 19)])));
        assert!(!implements(b"MatMul", &types(&[("T", 20)])));
        assert!(!implements(b"NoSuchOp", &types(&[])));
        assert!(!implements(&[0xff, 0xfe], &types(&[])));
    }

    /// `docs/kernels.md` holds [`dtype_table`] between two markers; with
    /// `TFWASM_BLESS=1` this test writes it there.
    #[test]
    fn the_docs_op_by_type_table_is_the_registrys() {
        const BEGIN: &str = "<!-- op × type table: generated from the registry, see tfwasm_kernels::dtype_table -->\n";
        const END: &str = "<!-- end of the op × type table -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/kernels.md");
        let docs = std::fs::read_to_string(&path).unwrap();
        let start = docs.find(BEGIN).expect("docs/kernels.md has the table's begin marker") + BEGIN.len();
        let end = start + docs[start..].find(END).expect("docs/kernels.md has the table's end marker");
        let table = dtype_table();
        if std::env::var("TFWASM_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, format!("{}{table}{}", &docs[..start], &docs[end..])).unwrap();
            return;
        }
        assert!(
            docs[start..end] == table,
            "docs/kernels.md's op × type table is not the registry's: TFWASM_BLESS=1 cargo test -p tfwasm-kernels \
             the_docs_op_by_type_table rewrites it"
        );
    }

    #[test]
    fn the_table_marks_what_is_registered() {
        let table = dtype_table();
        let row = |op: &str| table.lines().find(|l| l.starts_with(&format!("| {op} |"))).unwrap().to_owned();
        // float32 AddV2 and int64 AddV2 are ours, int32 TensorFlow's.
        let add_row = row("AddV2");
        let add: Vec<&str> = add_row.split('|').map(str::trim).collect();
        assert_eq!(&add[1..4], ["AddV2", "T", "✓"], "{add:?}");
        assert_eq!(add[2 + 1 + DTYPES.iter().position(|&d| d == DType::I32).unwrap()], "");
        assert_eq!(add[2 + 1 + DTYPES.iter().position(|&d| d == DType::I64).unwrap()], "✓");
        assert!(row("Sum").contains("Tidx: int32, int64"), "{}", row("Sum"));
        assert!(row("LogicalAnd").contains("| LogicalAnd | — |"), "{}", row("LogicalAnd"));
    }

    #[test]
    fn type_combinations_are_the_cartesian_product() {
        const TYPES: &[(&str, &[DType])] = &[("T", &[DType::F32]), ("Tidx", &[DType::I32, DType::I64])];
        let def = KernelDef::new("Sum", TYPES, |_| Err(Error::Internal("unused".into())));
        assert_eq!(
            def.type_combinations(),
            vec![vec![("T", DType::F32), ("Tidx", DType::I32)], vec![("T", DType::F32), ("Tidx", DType::I64)]]
        );
    }
}
