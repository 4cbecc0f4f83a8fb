//! Elementwise float32 `AddV2` and `Mul` with broadcasting.
//!
//! A [`BinaryPlan`] is made from the operand shapes alone, so the caller can
//! allocate the output before computing. Same-shape operands and a
//! single-element operand take loops the compiler vectorises; everything
//! else walks the collapsed broadcast (see [`super::shape`]) in runs that
//! use the same loops.
//!
//! Small outputs compute inline on the calling thread: most tensors in a
//! training step (biases, scalars, small activations) are far cheaper to add
//! than a hand-off to the pool costs. Large ones are split into chunks
//! across the compute pool.

use rayon::prelude::*;

use super::pool;
use super::shape::{element_count, Broadcast, ShapeDisplay};
use super::{expect_inputs, types, Kernel, KernelDef, OpContext};
use crate::error::Error;

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("AddV2", types::T_F32, |_| Ok(Box::new(BinaryKernel(BinaryOp::Add)))),
    KernelDef::new("Mul", types::T_F32, |_| Ok(Box::new(BinaryKernel(BinaryOp::Mul)))),
];

/// The kernel of one elementwise binary op.
#[derive(Debug)]
pub struct BinaryKernel(pub BinaryOp);

impl Kernel for BinaryKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = self.0.op_name();
        expect_inputs(op, ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let plan = BinaryPlan::new(self.0, a.shape(), b.shape())?;
        let mut out = ctx.allocate_output(0, plan.output_shape())?;
        plan.run(a.data()?, b.data()?, out.data_mut()?)
    }
}

/// Below this many output elements the op runs on the calling thread
/// (32K floats: ~10 µs of single-core work, well above a pool hand-off).
pub const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

/// Smallest chunk handed to one worker (64 KiB of output), so chunks stay
/// worth their scheduling cost.
const MIN_CHUNK_ELEMENTS: usize = 16 * 1024;

/// Chunks per worker: a few, so a worker that starts late (or is shared with
/// another kernel) does not hold up the whole op.
const CHUNKS_PER_THREAD: usize = 4;

/// An elementwise binary operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// TensorFlow `AddV2`: `x + y`.
    Add,
    /// TensorFlow `Mul`: `x * y`.
    Mul,
}

impl BinaryOp {
    /// The TensorFlow op this implements.
    pub const fn op_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "AddV2",
            BinaryOp::Mul => "Mul",
        }
    }
}

/// A checked binary op on two operand shapes: the output shape and how to
/// fill it.
#[derive(Debug, Clone)]
pub struct BinaryPlan {
    op: BinaryOp,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    broadcast: Broadcast,
}

impl BinaryPlan {
    /// Fails when the shapes do not broadcast.
    pub fn new(op: BinaryOp, a_shape: &[usize], b_shape: &[usize]) -> Result<Self, Error> {
        let broadcast =
            Broadcast::new(a_shape, b_shape).map_err(|e| Error::InvalidArgument(format!("{}: {e}", op.op_name())))?;
        Ok(BinaryPlan { op, a_shape: a_shape.to_vec(), b_shape: b_shape.to_vec(), broadcast })
    }

    pub fn op(&self) -> BinaryOp {
        self.op
    }

    /// The shape to allocate for the output.
    pub fn output_shape(&self) -> &[usize] {
        self.broadcast.output_shape()
    }

    pub fn output_len(&self) -> usize {
        self.broadcast.output_len()
    }

    /// Computes `out = a (op) b`. The slices are row-major with the shapes
    /// the plan was made for; `out` may hold anything beforehand.
    pub fn run(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
        self.check_len("x", a.len(), &self.a_shape)?;
        self.check_len("y", b.len(), &self.b_shape)?;
        self.check_len("the output", out.len(), self.output_shape())?;
        match self.op {
            BinaryOp::Add => self.fill(a, b, out, |x, y| x + y),
            BinaryOp::Mul => self.fill(a, b, out, |x, y| x * y),
        }
        Ok(())
    }

    fn check_len(&self, what: &str, len: usize, shape: &[usize]) -> Result<(), Error> {
        if element_count(shape) == Some(len) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{}: {what} has {len} elements but its shape {} needs {}",
                self.op.op_name(),
                ShapeDisplay(shape),
                element_count(shape).map_or_else(|| "more than addressable".to_owned(), |n| n.to_string())
            )))
        }
    }

    /// Monomorphised per op so the inner loops vectorise.
    fn fill<F>(&self, a: &[f32], b: &[f32], out: &mut [f32], f: F)
    where
        F: Fn(f32, f32) -> f32 + Copy + Send + Sync,
    {
        let len = out.len();
        if len < PARALLEL_MIN_ELEMENTS || pool::threads() == 1 {
            self.fill_range(a, b, 0, out, f);
            return;
        }
        let chunk = len.div_ceil(pool::threads() * CHUNKS_PER_THREAD).max(MIN_CHUNK_ELEMENTS);
        pool::install(|| {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(i, out_chunk)| self.fill_range(a, b, i * chunk, out_chunk, f));
        });
    }

    /// Fills `out`, which holds output elements `start..start + out.len()`.
    fn fill_range<F: Fn(f32, f32) -> f32 + Copy>(&self, a: &[f32], b: &[f32], start: usize, out: &mut [f32], f: F) {
        if out.is_empty() {
            return;
        }
        if self.broadcast.is_single_run() {
            // Fast paths: same shape (steps 1,1) or one single-element
            // operand (a step of 0); no odometer at all.
            let (a_step, b_step) = self.broadcast.inner_steps();
            combine(f, operand(a, start * a_step, out.len(), a_step), a_step, operand(b, start * b_step, out.len(), b_step), b_step, out);
            return;
        }
        self.broadcast.for_each_run(start, out.len(), |run| {
            let dst = &mut out[run.out - start..run.out - start + run.len];
            combine(f, operand(a, run.a, run.len, run.a_step), run.a_step, operand(b, run.b, run.len, run.b_step), run.b_step, dst);
        });
    }
}

/// The elements of one operand a run reads: `len` consecutive ones, or the
/// single repeated one when `step == 0`.
fn operand(data: &[f32], first: usize, len: usize, step: usize) -> &[f32] {
    if step == 0 {
        &data[first..first + 1]
    } else {
        &data[first..first + len]
    }
}

/// `out[i] = f(a[i * a_step], b[i * b_step])` with steps 0 or 1, each case a
/// plain loop the compiler vectorises.
#[inline(always)]
fn combine<F: Fn(f32, f32) -> f32>(f: F, a: &[f32], a_step: usize, b: &[f32], b_step: usize, out: &mut [f32]) {
    match (a_step, b_step) {
        (0, 0) => out.fill(f(a[0], b[0])),
        (0, _) => {
            let x = a[0];
            for (o, &y) in out.iter_mut().zip(b) {
                *o = f(x, y);
            }
        }
        (_, 0) => {
            let y = b[0];
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        _ => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic, varied values (no two neighbours alike).
    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    /// Reference: index every element from its full multi-index.
    fn reference(op: BinaryOp, a: &[f32], a_shape: &[usize], b: &[f32], b_shape: &[usize]) -> (Vec<usize>, Vec<f32>) {
        let rank = a_shape.len().max(b_shape.len());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
        let (pa, pb) = (pad(a_shape), pad(b_shape));
        let out_shape: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| if x == 1 { y } else { x }).collect();
        let len: usize = out_shape.iter().product();
        let offset = |shape: &[usize], index: &[usize]| {
            shape.iter().zip(index).fold(0, |acc, (&dim, &i)| acc * dim + if dim == 1 { 0 } else { i })
        };
        let mut out = Vec::with_capacity(len);
        for flat in 0..len {
            let mut index = vec![0; rank];
            let mut rest = flat;
            for i in (0..rank).rev() {
                index[i] = rest % out_shape[i];
                rest /= out_shape[i];
            }
            let (x, y) = (a[offset(&pa, &index)], b[offset(&pb, &index)]);
            out.push(match op {
                BinaryOp::Add => x + y,
                BinaryOp::Mul => x * y,
            });
        }
        (out_shape, out)
    }

    fn check(op: BinaryOp, a_shape: &[usize], b_shape: &[usize]) {
        let a = values(a_shape.iter().product(), 1);
        let b = values(b_shape.iter().product(), 2);
        let plan = BinaryPlan::new(op, a_shape, b_shape).unwrap();
        let (expected_shape, expected) = reference(op, &a, a_shape, &b, b_shape);
        assert_eq!(plan.output_shape(), expected_shape.as_slice(), "{op:?} {a_shape:?} {b_shape:?}");
        let mut out = vec![f32::NAN; plan.output_len()];
        plan.run(&a, &b, &mut out).unwrap();
        // Same operations in the same order: results are bit-identical.
        assert_eq!(out, expected, "{op:?} {a_shape:?} {b_shape:?}");
    }

    const SHAPE_PAIRS: &[(&[usize], &[usize])] = &[
        (&[], &[]),
        (&[1], &[1]),
        (&[1, 1], &[1, 1]),
        (&[7, 13], &[7, 13]),
        (&[3, 1, 5], &[4, 1]),
        (&[4, 1], &[3, 1, 5]),
        (&[], &[2, 3]),
        (&[2, 3], &[]),
        (&[1, 1], &[2, 3]),
        (&[0, 3], &[1, 3]),
        (&[0], &[]),
        (&[7, 13], &[13]),
        (&[7, 1], &[1, 13]),
        (&[2, 1, 3, 1], &[1, 4, 1, 5]),
    ];

    #[test]
    fn matches_reference_on_odd_shapes() {
        for op in [BinaryOp::Add, BinaryOp::Mul] {
            for &(a, b) in SHAPE_PAIRS {
                check(op, a, b);
            }
        }
    }

    #[test]
    fn large_outputs_split_across_the_pool() {
        // Above PARALLEL_MIN_ELEMENTS, with chunk edges falling mid-row.
        for op in [BinaryOp::Add, BinaryOp::Mul] {
            check(op, &[257, 131], &[257, 131]);
            check(op, &[257, 131], &[131]);
            check(op, &[], &[257, 131]);
            check(op, &[61, 1, 17], &[1, 37, 17]);
            check(op, &[301, 1], &[1, 263]);
        }
    }

    #[test]
    fn incompatible_shapes_fail_with_the_op_name() {
        let error = BinaryPlan::new(BinaryOp::Add, &[2, 3], &[4]).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)));
        assert_eq!(error.to_string(), "tfwasm: AddV2: incompatible broadcast shapes [2,3] and [4]");
        assert!(BinaryPlan::new(BinaryOp::Mul, &[0], &[2]).is_err());
    }

    #[test]
    fn wrong_buffer_lengths_fail_instead_of_panicking() {
        let plan = BinaryPlan::new(BinaryOp::Mul, &[2, 3], &[3]).unwrap();
        let mut out = vec![0.0; 6];
        assert!(plan.run(&[1.0; 5], &[1.0; 3], &mut out).is_err());
        assert!(plan.run(&[1.0; 6], &[1.0; 2], &mut out).is_err());
        assert!(plan.run(&[1.0; 6], &[1.0; 3], &mut out[..5]).is_err());
        assert!(plan.run(&[1.0; 6], &[1.0; 3], &mut out).is_ok());
    }

    #[test]
    fn empty_operands_need_no_data() {
        let plan = BinaryPlan::new(BinaryOp::Add, &[0, 3], &[1, 3]).unwrap();
        assert_eq!(plan.output_shape(), &[0, 3]);
        plan.run(&[], &[1.0, 2.0, 3.0], &mut []).unwrap();
    }
}
