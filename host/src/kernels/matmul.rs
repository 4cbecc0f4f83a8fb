//! Float32 `MatMul` (`transpose_a`, `transpose_b`) on the `gemm` crate.
//!
//! Operands are row-major. A transpose is expressed as swapped row/column
//! strides passed to `gemm::gemm`, so no operand is ever copied.
//!
//! `gemm` picks a SIMD microkernel for the running CPU (AVX2/FMA, AVX-512,
//! NEON) at run time. Products with at least [`PARALLEL_MIN_WORK`]
//! multiply-adds run with `Parallelism::Rayon` inside our compute pool (gemm
//! splits across the pool it is called from); smaller ones run inline with
//! `Parallelism::None`, skipping the pool hand-off entirely.

use super::pool;
use super::shape::{element_count, ShapeDisplay};
use super::{expect_inputs, types, Attrs, Kernel, KernelDef, OpContext};
use crate::error::Error;

pub const KERNELS: &[KernelDef] = &[KernelDef::new("MatMul", types::T_F32, build_matmul)];

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

/// `m·n·k` from which a product is split across the pool. This is gemm's own
/// default threading threshold (48·48·256): below it gemm would use one
/// thread anyway, so entering the pool would only add latency.
pub const PARALLEL_MIN_WORK: usize = 48 * 48 * 256;

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
            return Err(invalid(format!("shapes {} and {} are too large", ShapeDisplay(a_shape), ShapeDisplay(b_shape))));
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
        let MatMulPlan { attrs, m, n, k } = *self;
        check_len("a", a.len(), m, k)?;
        check_len("b", b.len(), k, n)?;
        check_len("the output", out.len(), m, n)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            // An empty sum: TensorFlow defines the product as zeros.
            out.fill(0.0);
            return Ok(());
        }

        // Strides (in elements) of op(a)[i,p] and op(b)[p,j] in the row-major
        // buffers; a transpose swaps which stride walks rows.
        let (m_i, n_i, k_i) = (m as isize, n as isize, k as isize);
        let (a_rs, a_cs) = if attrs.transpose_a { (1, m_i) } else { (k_i, 1) };
        let (b_rs, b_cs) = if attrs.transpose_b { (1, k_i) } else { (n_i, 1) };

        let work = m.saturating_mul(n).saturating_mul(k);
        let mut multiply = move |parallelism: gemm::Parallelism| {
            // SAFETY: `a` holds m·k elements and every index op(a)[i,p] for
            // i < m, p < k maps (with the strides above) to i·a_rs + p·a_cs,
            // which is < m·k for both layouts; likewise `b` (k·n elements)
            // and `out` (m·n, row stride n, column stride 1), checked by
            // `check_len` above. `out` is a `&mut` borrow, so it aliases
            // neither input. With `read_dst == false` gemm only writes `out`
            // (alpha is ignored), and f32 is a type gemm supports, so it does
            // not panic on the type dispatch.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    out.as_mut_ptr(),
                    1,
                    n_i,
                    false,
                    a.as_ptr(),
                    a_cs,
                    a_rs,
                    b.as_ptr(),
                    b_cs,
                    b_rs,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    parallelism,
                )
            }
        };
        if work < PARALLEL_MIN_WORK || pool::threads() == 1 {
            multiply(gemm::Parallelism::None);
        } else {
            let threads = pool::threads();
            pool::install(move || multiply(gemm::Parallelism::Rayon(threads)));
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
        let (m, k, n) = (97, 89, 101);
        assert!(m * k * n >= PARALLEL_MIN_WORK);
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
