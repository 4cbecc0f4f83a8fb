//! Float32 `MatMul` (`transpose_a`, `transpose_b`), `BatchMatMulV2`,
//! `BiasAdd(Grad)` and `_FusedMatMul` (a `MatMul` whose output goes through
//! a bias and an activation, [`super::epilogue`]); the products themselves
//! run in [`super::sgemm`] (the `gemm` crate, or BLIS for large ones).
//!
//! Operands are row-major. A transpose is expressed as swapped row/column
//! strides, so no operand is ever copied.
//!
//! Products below [`PARALLEL_MIN_WORK`] multiply-adds run inline on the
//! calling thread, skipping the pool entirely; mid-sized ones are cut into
//! [`SPLIT_BLOCKS_PER_THREAD`] blocks per thread, single-threaded products
//! shared between the calling thread and the pool; from [`SPLIT_MAX_WORK`]
//! on, [`Product::run_on_pool`] splits the product across the pool.

use super::epilogue::{Epilogue, FusedOps, FusedProduct};
use super::pool;
use super::sgemm::{Destination, Operand, Product};
use super::shape::{element_count, ShapeDisplay};
use super::vmath::in_wide_lanes;
use super::{expect_inputs, types, Attrs, Kernel, KernelDef, OpContext};
use crate::error::Error;

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("MatMul", types::T_F32, build_matmul),
    KernelDef::new("BatchMatMulV2", types::T_F32, build_batch_matmul),
    KernelDef::new("BiasAdd", types::T_F32, build_bias_add),
    KernelDef::new("BiasAddGrad", types::T_F32, build_bias_add_grad),
    KernelDef::new("_FusedMatMul", types::T_F32, build_fused_matmul),
];

fn build_bias_add(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(BiasKernel { channels_first: channels_first(attrs)?, grad: false }))
}

fn build_bias_add_grad(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(BiasKernel { channels_first: channels_first(attrs)?, grad: true }))
}

/// Reads `transpose_a`/`transpose_b`. `grad_a`/`grad_b` (present on newer
/// graphs) only say which gradient the node computes and are not read.
fn build_matmul(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(MatMulAttrs { transpose_a: attrs.bool("transpose_a")?, transpose_b: attrs.bool("transpose_b")? }))
}

impl Kernel for MatMulAttrs {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs("MatMul", ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let plan = MatMulPlan::new(*self, a.shape(), b.shape())?;
        let mut out = ctx.allocate_output(0, &plan.output_shape())?;
        plan.run(a.data()?, b.data()?, out.data_mut()?)
    }
}

/// `_FusedMatMul`: `MatMul`'s attributes, and what follows the product.
fn build_fused_matmul(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    let transpose = |name: &str| if attrs.has(name) { attrs.bool(name) } else { Ok(false) };
    Ok(Box::new(FusedMatMulKernel {
        attrs: MatMulAttrs { transpose_a: transpose("transpose_a")?, transpose_b: transpose("transpose_b")? },
        fused: FusedOps::from_attrs(FusedProduct::MatMul, attrs)?,
    }))
}

/// `_FusedMatMul`: `out = activation(op(a)·op(b) + bias)`, each block of
/// the output finished as soon as its product is written.
#[derive(Debug)]
struct FusedMatMulKernel {
    attrs: MatMulAttrs,
    fused: FusedOps,
}

impl Kernel for FusedMatMulKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "_FusedMatMul";
        expect_inputs(OP, ctx, 2 + self.fused.num_args())?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let args = (0..self.fused.num_args()).map(|i| ctx.input(2 + i)).collect::<Result<Vec<_>, _>>()?;
        let plan = MatMulPlan::new(self.attrs, a.shape(), b.shape())?;
        let [_, n] = plan.output_shape();
        let epilogue = self.fused.epilogue(OP, &args, n)?;
        let mut out = ctx.allocate_output(0, &plan.output_shape())?;
        plan.run_fused(a.data()?, b.data()?, out.data_mut()?, Some(&epilogue))
    }
}

/// `m·n·k` from which a product is split across the pool: the measured
/// break-even on a 2-core machine, where waking a pool worker costs about as
/// much as ~1.5M multiply-adds on one core. In a chain of 100 MatMuls inside
/// a `tf.function` (µs per product, split vs one thread): 64·96·96 28.4 vs
/// 19.8, 64·128·128 35.2 vs 29.5, 128·128·128 39.8 vs 51.3, 64·192·192 51.7
/// vs 58.0. (gemm's own threading threshold, 48·48·256 = 0.6M, was the
/// previous value; the small products of a recurrent layer sat just above it.)
pub const PARALLEL_MIN_WORK: usize = 64 * 128 * 192;

/// Blocks per thread a mid-sized product is split into. With one block
/// per thread, a worker that started late (or shared a CPU with the caller,
/// see `pool`'s "One worker per CPU") left the caller to compute both
/// blocks, or to wait out the worker's whole block; smaller blocks go to
/// whichever thread is running. Each block packs its own share of the
/// operands; at 8 the Keras MLP's products took 9% less time in all than
/// with 1 (on bound workers; unbound, no change either way).
pub const SPLIT_BLOCKS_PER_THREAD: usize = 8;

/// `m·n·k` from which a product is split across the pool by
/// [`Product::run_on_pool`]: gemm's own threading packs each panel once
/// for all threads, which a split into many independent blocks would repeat
/// per block; BLIS gets one block per thread.
pub const SPLIT_MAX_WORK: usize = 256 * 256 * 1024;

/// The attributes of a `MatMul` node that change the computation.
/// (`grad_a`/`grad_b` only hint which gradient a node computes; they do not
/// change the result and are not read.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatMulAttrs {
    pub transpose_a: bool,
    pub transpose_b: bool,
}

/// A checked `MatMul`: `out[m,n] = op(a)[m,k] · op(b)[k,n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatMulPlan {
    attrs: MatMulAttrs,
    m: usize,
    n: usize,
    k: usize,
}

impl MatMulPlan {
    /// Fails unless both operands are matrices whose inner dimensions agree.
    pub fn new(attrs: MatMulAttrs, a_shape: &[usize], b_shape: &[usize]) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidArgument(format!("MatMul: {reason}"));
        let [a_rows, a_cols] = *a_shape else {
            return Err(invalid(format!("a must be a matrix (rank 2), got shape {}", ShapeDisplay(a_shape))));
        };
        let [b_rows, b_cols] = *b_shape else {
            return Err(invalid(format!("b must be a matrix (rank 2), got shape {}", ShapeDisplay(b_shape))));
        };
        let (m, k) = if attrs.transpose_a { (a_cols, a_rows) } else { (a_rows, a_cols) };
        let (k_b, n) = if attrs.transpose_b { (b_cols, b_rows) } else { (b_rows, b_cols) };
        if k != k_b {
            return Err(invalid(format!(
                "inner dimensions differ: a {} (transpose_a={}) gives {k} columns, b {} (transpose_b={}) gives {k_b} rows",
                ShapeDisplay(a_shape),
                attrs.transpose_a,
                ShapeDisplay(b_shape),
                attrs.transpose_b,
            )));
        }
        // gemm takes strides as isize; every extent must fit (and so must
        // the output size, which TensorFlow will allocate).
        let fits = |x: usize| isize::try_from(x).is_ok();
        if ![m, n, k].into_iter().all(fits) || m.checked_mul(n).is_none_or(|len| !fits(len)) {
            return Err(invalid(format!(
                "shapes {} and {} are too large",
                ShapeDisplay(a_shape),
                ShapeDisplay(b_shape)
            )));
        }
        Ok(MatMulPlan { attrs, m, n, k })
    }

    /// The shape to allocate for the output: `[m, n]`.
    pub fn output_shape(&self) -> [usize; 2] {
        [self.m, self.n]
    }

    pub fn output_len(&self) -> usize {
        self.m * self.n
    }

    /// Computes `out = op(a) · op(b)`. `a` and `b` are row-major with the
    /// shapes the plan was made for; `out` may hold anything beforehand.
    pub fn run(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
        self.run_fused(a, b, out, None)
    }

    /// [`Self::run`], then `epilogue` (made for `n` channels) over the
    /// output. Blocks computed on one thread (the product whole below
    /// [`PARALLEL_MIN_WORK`], or one block of a split product) are finished
    /// right after their product, still in cache; a product large enough
    /// for [`Product::run_on_pool`] is finished in one pass afterwards.
    pub fn run_fused(&self, a: &[f32], b: &[f32], out: &mut [f32], epilogue: Option<&Epilogue>) -> Result<(), Error> {
        let MatMulPlan { attrs, m, n, k } = *self;
        check_len("a", a.len(), m, k)?;
        check_len("b", b.len(), k, n)?;
        check_len("the output", out.len(), m, n)?;
        if epilogue.is_some_and(|epilogue| epilogue.channels() != n) {
            return Err(Error::Internal(format!("MatMul: an epilogue for other than {n} channels")));
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            // An empty sum: TensorFlow defines the product as zeros.
            out.fill(0.0);
            if let Some(epilogue) = epilogue {
                epilogue.apply_all(out);
            }
            return Ok(());
        }

        // Strides (in elements) of op(a)[i,p] and op(b)[p,j] in the row-major
        // buffers; a transpose swaps which stride walks rows.
        let (m_i, n_i, k_i) = (m as isize, n as isize, k as isize);
        let (a_rs, a_cs) = if attrs.transpose_a { (1, m_i) } else { (k_i, 1) };
        let (b_rs, b_cs) = if attrs.transpose_b { (1, k_i) } else { (n_i, 1) };

        let work = m.saturating_mul(n).saturating_mul(k);
        let threads = pool::threads();
        let product = Product {
            m,
            n,
            k,
            lhs: Operand { ptr: a.as_ptr(), row_stride: a_rs, col_stride: a_cs },
            rhs: Operand { ptr: b.as_ptr(), row_stride: b_rs, col_stride: b_cs },
            dst: Destination { ptr: out.as_mut_ptr(), row_stride: n_i },
            accumulate: false,
        };
        // SAFETY (every run below): `a` holds m·k elements and op(a)[i, p]
        // lies at i·a_rs + p·a_cs < m·k for both layouts (likewise `b`, k·n
        // elements), `out` holds m·n in rows of stride n (all checked by
        // `check_len` above, and every extent fits in isize, checked by
        // `new`); a block stays inside the product. Blocks handed to
        // different threads cover disjoint elements of `out`, which is
        // exclusively borrowed for this call, so no write races another and
        // neither input is aliased.
        if work < PARALLEL_MIN_WORK || threads == 1 {
            unsafe { product.run() };
            if let Some(epilogue) = epilogue {
                epilogue.apply(out, 0);
            }
        } else if work < SPLIT_MAX_WORK {
            // A mid-sized product (a Keras layer's): split the larger output
            // dimension into blocks, each a single-threaded product, shared
            // between the calling thread and the pool. gemm's own threading
            // would leave this thread asleep while the pool works and wake
            // it afterwards; at these sizes the two wake-ups cost as much as
            // a block.
            let blocks = threads * SPLIT_BLOCKS_PER_THREAD;
            let split = |len: usize, i: usize| {
                // Block edges on multiples of 16 (gemm's register tile).
                let edge = |j: usize| (len * j / blocks).next_multiple_of(16).min(len);
                edge(i)..edge(i + 1)
            };
            pool::for_each_index(blocks, |i| {
                let (rows, cols) = if m >= n { (split(m, i), 0..n) } else { (0..m, split(n, i)) };
                let first = cols.start;
                let block = product.block(rows, cols);
                unsafe { block.run() };
                let Some(epilogue) = epilogue else { return };
                // A block of whole rows is one run of `out`; a block of
                // columns is a segment of each row.
                let (runs, run_len) = if block.n == n { (1, block.m * n) } else { (block.m, block.n) };
                for run in 0..runs {
                    // SAFETY: run `run` is `run_len` elements of `out` from
                    // `block.dst.ptr + run·n`: inside the block, so inside
                    // `out` (as above). Only this block's product wrote them
                    // and no other thread touches them (blocks are
                    // disjoint); `out` is not otherwise used meanwhile.
                    let values = unsafe { std::slice::from_raw_parts_mut(block.dst.ptr.add(run * n), run_len) };
                    epilogue.apply(values, first);
                }
            });
        } else {
            unsafe { product.run_on_pool() };
            if let Some(epilogue) = epilogue {
                epilogue.apply_all(out);
            }
        }
        Ok(())
    }
}

fn check_len(what: &str, len: usize, rows: usize, cols: usize) -> Result<(), Error> {
    if element_count(&[rows, cols]) == Some(len) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "MatMul: {what} has {len} elements but the product needs a {rows}x{cols} matrix"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::{activation_reference, AttrValue, NodeAttrs, BIAS_LISTS};
    use crate::{DType, LocalContext, Tensor};

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Reference: the textbook triple loop in f64, indexing the stored
    /// (possibly transposed) operands directly.
    fn reference(attrs: MatMulAttrs, a: &[f32], a_shape: [usize; 2], b: &[f32], b_shape: [usize; 2]) -> Vec<f32> {
        let at = |i: usize, p: usize| if attrs.transpose_a { a[p * a_shape[1] + i] } else { a[i * a_shape[1] + p] };
        let bt = |p: usize, j: usize| if attrs.transpose_b { b[j * b_shape[1] + p] } else { b[p * b_shape[1] + j] };
        let (m, k) = if attrs.transpose_a { (a_shape[1], a_shape[0]) } else { (a_shape[0], a_shape[1]) };
        let n = if attrs.transpose_b { b_shape[0] } else { b_shape[1] };
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| at(i, p) as f64 * bt(p, j) as f64).sum::<f64>() as f32;
            }
        }
        out
    }

    /// Multiplies op(a)[m,k] · op(b)[k,n] for every transpose combination
    /// (storing each operand in the layout its flag implies).
    fn check_all_transposes(m: usize, k: usize, n: usize) {
        for transpose_a in [false, true] {
            for transpose_b in [false, true] {
                let attrs = MatMulAttrs { transpose_a, transpose_b };
                let a_shape = if transpose_a { [k, m] } else { [m, k] };
                let b_shape = if transpose_b { [n, k] } else { [k, n] };
                let a = values(m * k, 3);
                let b = values(k * n, 4);
                let plan = MatMulPlan::new(attrs, &a_shape, &b_shape).unwrap();
                assert_eq!(plan.output_shape(), [m, n]);
                let mut out = vec![f32::NAN; plan.output_len()];
                plan.run(&a, &b, &mut out).unwrap();
                let expected = reference(attrs, &a, a_shape, &b, b_shape);
                // Float sums in a different order: allow rounding that grows with k.
                let tolerance = 1e-5 * (k as f32).max(1.0);
                for (index, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (got - want).abs() <= tolerance,
                        "{m}x{k} @ {k}x{n} {attrs:?}: element {index} is {got}, expected {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn matches_reference_on_odd_shapes() {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (1, 13, 1), (13, 1, 7), (2, 3, 4), (31, 17, 3), (3, 64, 65)] {
            check_all_transposes(m, k, n);
        }
    }

    #[test]
    fn large_products_use_the_pool() {
        // Split into blocks by rows (m ≥ n), by columns (n > m), with edges
        // off the 16-element grid and a block narrower than one tile; then
        // one product large enough for gemm's own threading.
        for (m, k, n) in [(151, 97, 109), (131, 197, 61), (41, 181, 233), (17, 5003, 19)] {
            assert!((PARALLEL_MIN_WORK..SPLIT_MAX_WORK).contains(&(m * k * n)));
            check_all_transposes(m, k, n);
        }
        let (m, k, n) = (129, 1031, 515);
        assert!(m * k * n >= SPLIT_MAX_WORK);
        check_all_transposes(m, k, n);
    }

    #[test]
    fn empty_inner_dimension_gives_zeros() {
        for transpose_a in [false, true] {
            for transpose_b in [false, true] {
                let attrs = MatMulAttrs { transpose_a, transpose_b };
                let a_shape = if transpose_a { [0, 3] } else { [3, 0] };
                let b_shape = if transpose_b { [4, 0] } else { [0, 4] };
                let plan = MatMulPlan::new(attrs, &a_shape, &b_shape).unwrap();
                assert_eq!(plan.output_shape(), [3, 4]);
                let mut out = vec![f32::NAN; 12];
                plan.run(&[], &[], &mut out).unwrap();
                assert_eq!(out, vec![0.0; 12], "{attrs:?}");
            }
        }
    }

    #[test]
    fn empty_outputs_compute_nothing() {
        let plan = MatMulPlan::new(MatMulAttrs::default(), &[0, 5], &[5, 3]).unwrap();
        assert_eq!(plan.output_shape(), [0, 3]);
        plan.run(&[], &values(15, 1), &mut []).unwrap();

        let plan = MatMulPlan::new(MatMulAttrs::default(), &[2, 5], &[5, 0]).unwrap();
        assert_eq!(plan.output_shape(), [2, 0]);
        plan.run(&values(10, 1), &[], &mut []).unwrap();
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let error = MatMulPlan::new(MatMulAttrs::default(), &[2, 3], &[4, 5]).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)));
        let message = error.to_string();
        assert!(message.starts_with("tfwasm: MatMul: inner dimensions differ"), "{message}");
        assert!(message.contains("[2,3]") && message.contains("[4,5]"), "{message}");

        // The same shapes agree once a transpose lines them up.
        assert!(MatMulPlan::new(MatMulAttrs { transpose_a: true, transpose_b: false }, &[3, 2], &[3, 5]).is_ok());
        assert!(MatMulPlan::new(MatMulAttrs { transpose_a: false, transpose_b: true }, &[2, 3], &[5, 3]).is_ok());

        assert!(MatMulPlan::new(MatMulAttrs::default(), &[2], &[2, 2]).is_err());
        assert!(MatMulPlan::new(MatMulAttrs::default(), &[2, 2], &[2, 2, 1]).is_err());
        assert!(MatMulPlan::new(MatMulAttrs::default(), &[], &[]).is_err());
    }

    // ------------------------------------------------------ _FusedMatMul

    fn fused_attrs(attrs: MatMulAttrs, fused_ops: &[&str]) -> NodeAttrs {
        NodeAttrs::default()
            .with("transpose_a", AttrValue::Bool(attrs.transpose_a))
            .with("transpose_b", AttrValue::Bool(attrs.transpose_b))
            .with("leakyrelu_alpha", AttrValue::Float(0.3))
            .fused(fused_ops)
    }

    /// `_FusedMatMul` as TensorFlow builds and runs it: one output.
    fn run_fused(node: &NodeAttrs, inputs: Vec<Tensor>) -> Result<Tensor, Error> {
        let def = crate::registry().into_iter().find(|def| def.op == "_FusedMatMul").expect("registered");
        let kernel = def.create(node)?;
        Ok(LocalContext::run(&*kernel, inputs, &[DType::F32])?.remove(0))
    }

    /// Every `fused_ops` list and transpose on `m×k·k×n`, against the f64
    /// product plus bias through the f64 activation.
    fn check_fused(m: usize, k: usize, n: usize) {
        for (transpose_a, transpose_b) in [(false, false), (true, false), (false, true), (true, true)] {
            let attrs = MatMulAttrs { transpose_a, transpose_b };
            let a_shape = if transpose_a { [k, m] } else { [m, k] };
            let b_shape = if transpose_b { [n, k] } else { [k, n] };
            let (a, b, bias) = (values(m * k, 1), values(k * n, 2), values(n, 3));
            let product = reference(attrs, &a, a_shape, &b, b_shape);
            for (fused_ops, activation) in BIAS_LISTS {
                let inputs = vec![
                    Tensor::from_vec(&a_shape, a.clone()).unwrap(),
                    Tensor::from_vec(&b_shape, b.clone()).unwrap(),
                    Tensor::from_vec(&[n], bias.clone()).unwrap(),
                ];
                let out = run_fused(&fused_attrs(attrs, fused_ops), inputs).unwrap();
                assert_eq!(out.shape(), [m, n]);
                let got = out.to_vec::<f32>().unwrap();
                for (i, &g) in got.iter().enumerate() {
                    let want = activation_reference(activation, f64::from(product[i]) + f64::from(bias[i % n]));
                    assert!(
                        (f64::from(g) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{m}x{k}x{n} {attrs:?} {fused_ops:?}: element {i} is {g}, expected {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn fused_matmul_matches_reference_on_odd_shapes() {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (1, 13, 1), (13, 1, 7), (0, 3, 4), (3, 0, 4), (31, 17, 3)] {
            check_fused(m, k, n);
        }
    }

    #[test]
    fn fused_matmul_finishes_every_block_of_a_split_product() {
        // Split by rows, by columns, and whole on the pool (as above).
        for (m, k, n) in [(151, 97, 109), (41, 181, 233), (129, 1031, 515)] {
            check_fused(m, k, n);
        }
    }

    /// What a fused node computes is what `MatMul`, `BiasAdd` and the
    /// activation's own kernel compute, bit for bit, at every size class.
    #[test]
    fn fused_matmul_is_the_unfused_ops_bit_for_bit() {
        use crate::unary::UnaryOp;
        let unfused = [
            None,
            Some(UnaryOp::Relu),
            Some(UnaryOp::Relu6),
            Some(UnaryOp::Elu),
            Some(UnaryOp::LeakyRelu(0.3)),
            Some(UnaryOp::Tanh),
            Some(UnaryOp::Sigmoid),
        ];
        for (m, k, n) in [(5, 3, 7), (151, 97, 109), (41, 181, 233), (129, 1031, 515)] {
            let attrs = MatMulAttrs { transpose_a: false, transpose_b: true };
            let (a, b, bias) = (values(m * k, 4), values(k * n, 5), values(n, 6));
            let plan = MatMulPlan::new(attrs, &[m, k], &[n, k]).unwrap();
            let mut product = vec![0.0; m * n];
            plan.run(&a, &b, &mut product).unwrap();
            let biased: Vec<f32> = product.iter().enumerate().map(|(i, &p)| p + bias[i % n]).collect();
            for ((fused_ops, _), unary) in BIAS_LISTS.iter().zip(unfused) {
                let mut want = biased.clone();
                if let Some(op) = unary {
                    op.run(&biased, &mut want);
                }
                let inputs = vec![
                    Tensor::from_vec(&[m, k], a.clone()).unwrap(),
                    Tensor::from_vec(&[n, k], b.clone()).unwrap(),
                    Tensor::from_vec(&[n], bias.clone()).unwrap(),
                ];
                let got = run_fused(&fused_attrs(attrs, fused_ops), inputs).unwrap().to_vec::<f32>().unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert!(bits(&got) == bits(&want), "{m}x{k}x{n} {fused_ops:?}");
            }
        }
    }

    #[test]
    fn fused_matmul_refuses_what_it_does_not_implement() {
        let attrs = MatMulAttrs::default();
        let refused = |fused_ops: &[&str]| {
            let def = crate::registry().into_iter().find(|def| def.op == "_FusedMatMul").unwrap();
            def.create(&fused_attrs(attrs, fused_ops)).err().expect("refused").to_string()
        };
        let message = refused(&["BiasAdd", "GeluExact"]);
        assert!(message.contains("_FusedMatMul: fusion [BiasAdd,GeluExact] is not implemented"), "{message}");
        assert!(refused(&["FusedBatchNorm", "Relu"]).contains("[FusedBatchNorm,Relu]"));

        // A bias that is not one value per output column fails the execution.
        let inputs = |bias: &[usize]| {
            vec![
                Tensor::from_vec(&[2, 3], values(6, 1)).unwrap(),
                Tensor::from_vec(&[3, 4], values(12, 2)).unwrap(),
                Tensor::from_vec(bias, values(bias.iter().product(), 3)).unwrap(),
            ]
        };
        let node = fused_attrs(attrs, &["BiasAdd", "Relu"]);
        let message = run_fused(&node, inputs(&[3])).unwrap_err().to_string();
        assert!(message.contains("_FusedMatMul: bias must be a vector of 4 values") && message.contains("[3]"));
        assert!(run_fused(&node, inputs(&[1, 4])).is_err());
        assert!(run_fused(&node, inputs(&[4])).is_ok());
    }

    #[test]
    fn wrong_buffer_lengths_fail_instead_of_reading_out_of_bounds() {
        let plan = MatMulPlan::new(MatMulAttrs::default(), &[2, 3], &[3, 4]).unwrap();
        let mut out = vec![0.0; 8];
        assert!(plan.run(&[0.0; 5], &[0.0; 12], &mut out).is_err());
        assert!(plan.run(&[0.0; 6], &[0.0; 11], &mut out).is_err());
        assert!(plan.run(&[0.0; 6], &[0.0; 12], &mut out[..7]).is_err());
        assert!(plan.run(&[0.0; 6], &[0.0; 12], &mut out).is_ok());
    }
}

// ------------------------------------------------------------ BatchMatMulV2

use super::shape::Broadcast;

/// Reads `adj_x`/`adj_y` (a plain transpose for real numbers).
fn build_batch_matmul(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(BatchMatMulKernel {
        attrs: MatMulAttrs { transpose_a: attrs.bool("adj_x")?, transpose_b: attrs.bool("adj_y")? },
    }))
}

/// `BatchMatMulV2`: a [`MatMulPlan`] product per batch, the batch
/// dimensions broadcasting like an elementwise op.
#[derive(Debug, Clone, Copy)]
pub struct BatchMatMulKernel {
    pub attrs: MatMulAttrs,
}

impl Kernel for BatchMatMulKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs("BatchMatMulV2", ctx, 2)?;
        let (x, y) = (ctx.input(0)?, ctx.input(1)?);
        let plan = BatchMatMulPlan::new(self.attrs, x.shape(), y.shape())?;
        let mut out = ctx.allocate_output(0, &plan.output_shape)?;
        plan.run(x.data()?, y.data()?, out.data_mut()?)
    }
}

/// A checked batched product: which `x` and `y` matrix each output matrix
/// multiplies, and the per-matrix [`MatMulPlan`].
#[derive(Debug, Clone)]
pub struct BatchMatMulPlan {
    matrix: MatMulPlan,
    /// `(x matrix, y matrix)` for each output matrix, in order.
    pairs: Vec<(usize, usize)>,
    x_matrix_len: usize,
    y_matrix_len: usize,
    x_len: usize,
    y_len: usize,
    output_shape: Vec<usize>,
    /// `y` is one matrix and `x` is not transposed: the whole product is
    /// one `[batches·m, k] · [k, n]` MatMul.
    folded: Option<MatMulPlan>,
}

impl BatchMatMulPlan {
    pub fn new(attrs: MatMulAttrs, x_shape: &[usize], y_shape: &[usize]) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidArgument(format!("BatchMatMulV2: {reason}"));
        for (i, shape) in [x_shape, y_shape].into_iter().enumerate() {
            if shape.len() < 2 {
                return Err(invalid(format!("In[{i}] ndims must be >= 2: {}", shape.len())));
            }
        }
        let (x_batch, x_mat) = x_shape.split_at(x_shape.len() - 2);
        let (y_batch, y_mat) = y_shape.split_at(y_shape.len() - 2);
        let broadcast = Broadcast::new(x_batch, y_batch).map_err(|_| {
            invalid(format!(
                "In[0] and In[1] must have compatible batch dimensions: {} vs. {}",
                ShapeDisplay(x_shape),
                ShapeDisplay(y_shape)
            ))
        })?;
        let matrix = MatMulPlan::new(attrs, x_mat, y_mat).map_err(|_| {
            invalid(format!(
                "Matrix size-incompatible: In[0]: {}, In[1]: {}",
                ShapeDisplay(x_shape),
                ShapeDisplay(y_shape)
            ))
        })?;
        let too_large =
            || invalid(format!("shapes {} and {} are too large", ShapeDisplay(x_shape), ShapeDisplay(y_shape)));
        let x_len = element_count(x_shape).ok_or_else(too_large)?;
        let y_len = element_count(y_shape).ok_or_else(too_large)?;
        let mut output_shape = broadcast.output_shape().to_vec();
        output_shape.extend(matrix.output_shape());
        element_count(&output_shape).ok_or_else(too_large)?;

        let batches = broadcast.output_len();
        let mut pairs = Vec::with_capacity(batches);
        broadcast.for_each_run(0, batches, |run| {
            for j in 0..run.len {
                pairs.push((run.a + j * run.a_step, run.b + j * run.b_step));
            }
        });
        let [x_rows, x_cols] = [x_mat[0], x_mat[1]];
        let y_single = y_batch.iter().product::<usize>() == 1;
        let folded = if y_single && !attrs.transpose_a && batches > 1 {
            Some(MatMulPlan::new(attrs, &[batches * x_rows, x_cols], y_mat)?)
        } else {
            None
        };
        Ok(BatchMatMulPlan {
            matrix,
            pairs,
            x_matrix_len: x_rows * x_cols,
            y_matrix_len: y_mat[0] * y_mat[1],
            x_len,
            y_len,
            output_shape,
            folded,
        })
    }

    pub fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }

    /// Computes every product. Small matrices in large batches are spread
    /// over the pool one matrix per task; large ones parallelise inside gemm.
    pub fn run(&self, x: &[f32], y: &[f32], out: &mut [f32]) -> Result<(), Error> {
        let out_matrix = self.matrix.output_len();
        if x.len() != self.x_len || y.len() != self.y_len || out.len() != self.pairs.len() * out_matrix {
            return Err(Error::InvalidArgument(format!(
                "BatchMatMulV2: buffers of {}, {} and {} elements do not fit the shapes",
                x.len(),
                y.len(),
                out.len()
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        if let Some(folded) = &self.folded {
            // `x` broadcast over y's single matrix is contiguous: one product.
            if self.pairs.iter().enumerate().all(|(i, &(a, _))| a == i) {
                return folded.run(x, y, out);
            }
        }
        let matrix = self.matrix;
        let (xm, ym) = (self.x_matrix_len, self.y_matrix_len);
        let one = |(a, b): (usize, usize), dst: &mut [f32]| -> Result<(), Error> {
            matrix.run(&x[a * xm..(a + 1) * xm], &y[b * ym..(b + 1) * ym], dst)
        };
        let [m, n] = matrix.output_shape();
        let k = if xm == 0 || m == 0 { 0 } else { xm / m };
        let per_matrix = m.saturating_mul(n).saturating_mul(k.max(1));
        let total = per_matrix.saturating_mul(self.pairs.len());
        if self.pairs.len() > 1
            && per_matrix < PARALLEL_MIN_WORK
            && total >= PARALLEL_MIN_WORK / 4
            && pool::threads() > 1
        {
            let failure = parking_lot::Mutex::new(None);
            pool::for_each_chunk_mut(out, out_matrix, |i, dst| {
                if let Err(error) = one(self.pairs[i], dst) {
                    failure.lock().get_or_insert(error);
                }
            });
            failure.into_inner().map_or(Ok(()), Err)
        } else {
            for (dst, &pair) in out.chunks_mut(out_matrix).zip(&self.pairs) {
                one(pair, dst)?;
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------- BiasAdd, BiasAddGrad

/// Whether `data_format` puts channels at dimension 1 (`NCHW`) instead of
/// last (`NHWC`, the default).
fn channels_first(attrs: &dyn Attrs) -> Result<bool, Error> {
    if !attrs.has("data_format") {
        return Ok(false);
    }
    let format = attrs.string("data_format")?;
    match format.as_str() {
        "NHWC" => Ok(false),
        "NCHW" => Ok(true),
        other => Err(Error::InvalidArgument(format!("BiasAdd: unsupported data_format {other:?}"))),
    }
}

/// `BiasAdd`/`BiasAddGrad` over a value laid out as `[outer, c, inner]`.
#[derive(Debug, Clone, Copy)]
pub struct BiasKernel {
    pub channels_first: bool,
    pub grad: bool,
}

/// `(outer, channels, inner)` of a BiasAdd value, or TensorFlow's error.
fn bias_layout(op: &str, shape: &[usize], channels_first: bool) -> Result<(usize, usize, usize), Error> {
    if shape.len() < 2 {
        return Err(Error::InvalidArgument(format!("{op}: Input tensor must be at least 2D: {}", ShapeDisplay(shape))));
    }
    element_count(shape)
        .ok_or_else(|| Error::InvalidArgument(format!("{op}: shape {} is too large", ShapeDisplay(shape))))?;
    let axis = if channels_first { 1 } else { shape.len() - 1 };
    Ok((shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product()))
}

impl Kernel for BiasKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        if self.grad {
            expect_inputs("BiasAddGrad", ctx, 1)?;
            let grad = ctx.input(0)?;
            let (outer, c, inner) = bias_layout("BiasAddGrad", grad.shape(), self.channels_first)?;
            let mut out = ctx.allocate_output(0, &[c])?;
            super::reduce::sum_channels(grad.data()?, outer, c, inner, out.data_mut()?);
            return Ok(());
        }
        expect_inputs("BiasAdd", ctx, 2)?;
        let (value, bias) = (ctx.input(0)?, ctx.input(1)?);
        let (outer, c, inner) = bias_layout("BiasAdd", value.shape(), self.channels_first)?;
        if bias.rank() != 1 {
            return Err(Error::InvalidArgument(format!("BiasAdd: Biases must be 1D: {}", ShapeDisplay(bias.shape()))));
        }
        if bias.len() != c {
            return Err(Error::InvalidArgument(format!(
                "BiasAdd: Must provide as many biases as the {} dimension of the input tensor: {} vs. {}",
                if self.channels_first { "channel" } else { "last" },
                ShapeDisplay(bias.shape()),
                ShapeDisplay(value.shape())
            )));
        }
        let mut out = ctx.allocate_output(0, value.shape())?;
        bias_add(value.data()?, bias.data()?, outer, c, inner, out.data_mut()?);
        Ok(())
    }
}

/// `out[o, ch, i] = value[o, ch, i] + bias[ch]`.
fn bias_add(value: &[f32], bias: &[f32], outer: usize, c: usize, inner: usize, out: &mut [f32]) {
    let block = c * inner;
    if out.is_empty() || block == 0 {
        return;
    }
    let fill = |dst: &mut [f32], src: &[f32]| {
        in_wide_lanes(
            #[inline(always)]
            || {
                for (dst, src) in dst.chunks_exact_mut(block).zip(src.chunks_exact(block)) {
                    if inner == 1 {
                        for ((o, &v), &b) in dst.iter_mut().zip(src).zip(bias) {
                            *o = v + b;
                        }
                    } else {
                        for ((dst, src), &b) in dst.chunks_exact_mut(inner).zip(src.chunks_exact(inner)).zip(bias) {
                            for (o, &v) in dst.iter_mut().zip(src) {
                                *o = v + b;
                            }
                        }
                    }
                }
            },
        )
    };
    let len = out.len();
    if len < super::binary::PARALLEL_MIN_ELEMENTS || pool::threads() == 1 || outer == 1 {
        fill(out, value);
        return;
    }
    // Whole blocks per chunk, shared between this thread and the pool.
    let blocks_per_task = (16 * 1024 / block).max(outer.div_ceil(pool::threads() * 4)).max(1);
    let chunk = blocks_per_task * block;
    pool::for_each_chunk_mut(out, chunk, |i, dst| fill(dst, &value[i * chunk..i * chunk + dst.len()]));
}

#[cfg(test)]
mod batch_tests {
    use super::*;
    use crate::{DType, LocalContext, Tensor};

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    fn batch_reference(
        adj_x: bool,
        adj_y: bool,
        x: &[f32],
        xs: &[usize],
        y: &[f32],
        ys: &[usize],
    ) -> (Vec<usize>, Vec<f32>) {
        let rank = xs.len().max(ys.len());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
        let (px, py) = (pad(xs), pad(ys));
        let batch: Vec<usize> = (0..rank - 2).map(|i| if px[i] == 1 { py[i] } else { px[i] }).collect();
        let (xr, xc) = (px[rank - 2], px[rank - 1]);
        let (yr, yc) = (py[rank - 2], py[rank - 1]);
        let (m, k) = if adj_x { (xc, xr) } else { (xr, xc) };
        let n = if adj_y { yr } else { yc };
        let nb: usize = batch.iter().product();
        let mut out = Vec::new();
        for bflat in 0..nb {
            let mut idx = vec![0; batch.len()];
            let mut rest = bflat;
            for i in (0..batch.len()).rev() {
                idx[i] = rest % batch[i];
                rest /= batch[i];
            }
            let off = |p: &[usize]| (0..batch.len()).fold(0, |acc, i| acc * p[i] + if p[i] == 1 { 0 } else { idx[i] });
            let (xo, yo) = (off(&px) * xr * xc, off(&py) * yr * yc);
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f64;
                    for p in 0..k {
                        let a = if adj_x { x[xo + p * xc + i] } else { x[xo + i * xc + p] };
                        let b = if adj_y { y[yo + j * yc + p] } else { y[yo + p * yc + j] };
                        s += a as f64 * b as f64;
                    }
                    out.push(s as f32);
                }
            }
        }
        let mut shape = batch;
        shape.extend([m, n]);
        (shape, out)
    }

    fn run_batch(adj_x: bool, adj_y: bool, xs: &[usize], ys: &[usize]) {
        let x = values(xs.iter().product(), 1);
        let y = values(ys.iter().product(), 2);
        let kernel = BatchMatMulKernel { attrs: MatMulAttrs { transpose_a: adj_x, transpose_b: adj_y } };
        let out = LocalContext::run(
            &kernel,
            vec![Tensor::from_vec(xs, x.clone()).unwrap(), Tensor::from_vec(ys, y.clone()).unwrap()],
            &[DType::F32],
        )
        .unwrap()
        .remove(0);
        let (shape, want) = batch_reference(adj_x, adj_y, &x, xs, &y, ys);
        assert_eq!(out.shape(), shape.as_slice(), "{xs:?} {ys:?}");
        let got = out.to_vec::<f32>().unwrap();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-4, "{xs:?} {ys:?} adj {adj_x} {adj_y}: element {i} is {g}, expected {w}");
        }
    }

    #[test]
    fn batch_matmul_matches_reference() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[1, 1], &[1, 1]),
            (&[3, 4], &[4, 5]),
            (&[2, 3, 4], &[2, 4, 5]),
            (&[2, 3, 4], &[4, 5]),
            (&[3, 4], &[2, 4, 5]),
            (&[2, 1, 3, 4], &[1, 3, 4, 5]),
            (&[0, 3, 4], &[4, 5]),
            (&[2, 3, 0], &[2, 0, 5]),
            (&[5, 7, 3], &[1, 3, 2]),
            (&[64, 17, 13], &[64, 13, 11]),
            (&[3, 70, 90], &[90, 80]),
        ];
        for &(xs, ys) in cases {
            for adj_x in [false, true] {
                for adj_y in [false, true] {
                    // Store operands in the layout the flags expect.
                    let swap = |s: &[usize], t: bool| {
                        let mut s = s.to_vec();
                        let r = s.len();
                        if t {
                            s.swap(r - 1, r - 2);
                        }
                        s
                    };
                    run_batch(adj_x, adj_y, &swap(xs, adj_x), &swap(ys, adj_y));
                }
            }
        }
    }

    #[test]
    fn batch_matmul_errors_name_the_shapes() {
        let err =
            |xs: &[usize], ys: &[usize]| BatchMatMulPlan::new(MatMulAttrs::default(), xs, ys).unwrap_err().to_string();
        assert!(err(&[2, 3, 4], &[3, 4, 5]).contains("must have compatible batch dimensions: [2,3,4] vs. [3,4,5]"));
        assert!(err(&[2, 3, 4], &[2, 3, 5]).contains("Matrix size-incompatible: In[0]: [2,3,4], In[1]: [2,3,5]"));
        assert!(err(&[4], &[4, 5]).contains("In[0] ndims must be >= 2: 1"));
    }

    fn run_bias(value: &[f32], shape: &[usize], bias: &[f32], nchw: bool, grad: bool) -> Result<Vec<f32>, Error> {
        let kernel = BiasKernel { channels_first: nchw, grad };
        let mut inputs = vec![Tensor::from_vec(shape, value.to_vec())?];
        if !grad {
            inputs.push(Tensor::from_vec(&[bias.len()], bias.to_vec())?);
        }
        LocalContext::run(&kernel, inputs, &[DType::F32])?.remove(0).to_vec::<f32>()
    }

    #[test]
    fn bias_add_and_grad_match_reference() {
        let shapes: &[&[usize]] =
            &[&[1, 1], &[7, 13], &[2, 3, 5], &[2, 3, 4, 5], &[0, 3], &[4, 0, 2], &[300, 3, 70], &[9000, 7]];
        for &shape in shapes {
            for nchw in [false, true] {
                let axis = if nchw { 1 } else { shape.len() - 1 };
                let c = shape[axis];
                let inner: usize = shape[axis + 1..].iter().product();
                let value = values(shape.iter().product(), 3);
                let bias = values(c, 4);
                let got = run_bias(&value, shape, &bias, nchw, false).unwrap();
                let want: Vec<f32> =
                    value.iter().enumerate().map(|(i, &v)| v + bias[(i / inner.max(1)) % c.max(1)]).collect();
                assert_eq!(got, want, "{shape:?} nchw={nchw}");

                let grad = run_bias(&value, shape, &[], nchw, true).unwrap();
                let mut want = vec![0f64; c];
                for (i, &v) in value.iter().enumerate() {
                    want[(i / inner.max(1)) % c] += v as f64;
                }
                for (g, w) in grad.iter().zip(&want) {
                    assert!((*g as f64 - w).abs() <= 1e-4 * w.abs().max(1.0), "{shape:?} {g} {w}");
                }
            }
        }
    }

    #[test]
    fn bias_add_errors() {
        let e = run_bias(&[0.0; 6], &[2, 3], &[0.0; 4], false, false).unwrap_err().to_string();
        assert!(
            e.contains("Must provide as many biases as the last dimension of the input tensor: [4] vs. [2,3]"),
            "{e}"
        );
        let e = run_bias(&[0.0; 3], &[3], &[0.0; 3], false, false).unwrap_err().to_string();
        assert!(e.contains("Input tensor must be at least 2D: [3]"), "{e}");
        assert!(run_bias(&[0.0; 3], &[3], &[], false, true).is_err());
    }
}
