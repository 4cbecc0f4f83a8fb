//! Reductions over axes: float32 `Sum`, `Mean`, `Max`, `Min`, `Prod`, int32
//! `Prod` (shape arithmetic, wrapping on overflow), bool `All`/`Any`, and
//! float32 `ArgMax`/`ArgMin` along one dimension.
//!
//! The input shape is collapsed first: size-1 dimensions are dropped and
//! neighbouring dimensions that are both reduced (or both kept) merge. The
//! common layouts then become one `(outer, reduced, inner)` pass:
//! `inner == 1` reduces contiguous rows (eight accumulators, pairwise for
//! sums), `inner > 1` accumulates whole rows of `inner` elements into the
//! output (blocked for sums). Layouts with several reduced groups (e.g.
//! axes 0 and 2 of `[a,b,c]`) reduce the innermost group into a scratch
//! buffer and repeat. Large reductions are split over outputs or, when
//! there are few outputs, over the reduced dimension, and the calling thread
//! computes pieces beside the pool (`pool::for_each_chunk_mut`): handing the
//! whole reduction to the pool and sleeping until it is done cost two
//! thread wake-ups, which made an eager `BiasAddGrad` of 128×512 take 48 µs
//! instead of 41, and one of 1024×1024 141 µs instead of 97. The pieces
//! are the same either way, so are the results, bit for bit.
//!
//! Semantics follow TensorFlow's CPU kernels: axes may be negative, must be
//! in range and may not repeat; an empty axis list copies the input; a
//! reduction over zero elements gives the identity (0, NaN for Mean, -inf,
//! +inf, 1, true, false); Max/Min propagate NaN. ArgMax/ArgMin return the
//! first index of the extreme value and skip NaN (as Eigen's tuple reducer
//! does), and fail on an empty reduced dimension.
//!
//! Running sums and products along one axis (`Cumsum`, `Cumprod`, with
//! `exclusive` and `reverse`) live here too: Keras' `AUC` metric sums its
//! confusion counts over thresholds with one.

use super::pool;
use super::shape::{element_count, ShapeDisplay};
use super::tensor::TfBool;
use super::vmath::in_wide_lanes;
use super::{expect_inputs, types, Attrs, DType, Element, Kernel, KernelDef, OpContext};
use crate::error::Error;

const T_TIDX: &[(&str, &[DType])] = &[("T", types::F32), ("Tidx", types::INDEX)];
const TIDX: &[(&str, &[DType])] = &[("Tidx", types::INDEX)];
/// int32 `Prod` multiplies shape dimensions (Keras' losses count the
/// elements they average over). As on TensorFlow's GPU device, every
/// argument lives in host memory: the result feeds host-side shape
/// arithmetic, and no DEVICE_DEFAULT kernel covers it.
const I32_TIDX: &[(&str, &[DType])] = &[("T", &[DType::I32]), ("Tidx", types::INDEX)];
const ARG_TYPES: &[(&str, &[DType])] = &[("T", types::F32), ("Tidx", types::INDEX), ("output_type", types::INDEX)];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("Sum", T_TIDX, |a| build(a, ReduceOp::Sum)).host_memory(&["reduction_indices"]),
    KernelDef::new("Mean", T_TIDX, |a| build(a, ReduceOp::Mean)).host_memory(&["reduction_indices"]),
    KernelDef::new("Max", T_TIDX, |a| build(a, ReduceOp::Max)).host_memory(&["reduction_indices"]),
    KernelDef::new("Min", T_TIDX, |a| build(a, ReduceOp::Min)).host_memory(&["reduction_indices"]),
    KernelDef::new("Prod", T_TIDX, |a| build(a, ReduceOp::Prod)).host_memory(&["reduction_indices"]),
    KernelDef::new("Prod", I32_TIDX, |a| build(a, ReduceOp::Prod)).host_memory(&[
        "input",
        "reduction_indices",
        "output",
    ]),
    KernelDef::new("All", TIDX, |a| build(a, ReduceOp::All)).host_memory(&["reduction_indices"]),
    KernelDef::new("Any", TIDX, |a| build(a, ReduceOp::Any)).host_memory(&["reduction_indices"]),
    KernelDef::new("ArgMax", ARG_TYPES, |_| Ok(Box::new(ArgKernel { max: true }))).host_memory(&["dimension"]),
    KernelDef::new("ArgMin", ARG_TYPES, |_| Ok(Box::new(ArgKernel { max: false }))).host_memory(&["dimension"]),
    KernelDef::new("Cumsum", T_TIDX, |a| Scan::build(a, false)).host_memory(&["axis"]),
    KernelDef::new("Cumprod", T_TIDX, |a| Scan::build(a, true)).host_memory(&["axis"]),
];

/// Below this many input elements a reduction runs on the calling thread.
pub const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

/// Smallest piece of input one pool task reduces.
const MIN_TASK_ELEMENTS: usize = 16 * 1024;

/// Rows accumulated into a scratch row before it is added to the total,
/// so column sums round like a two-level tree, not a long chain.
const SUM_BLOCK_ROWS: usize = 64;

/// Contiguous sums up to this length use eight running accumulators; longer
/// ones split in half recursively (pairwise summation).
const PAIRWISE_BASE: usize = 512;

/// A reduction op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    All,
    Any,
}

impl ReduceOp {
    pub const fn op_name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "Sum",
            ReduceOp::Mean => "Mean",
            ReduceOp::Max => "Max",
            ReduceOp::Min => "Min",
            ReduceOp::Prod => "Prod",
            ReduceOp::All => "All",
            ReduceOp::Any => "Any",
        }
    }
}

fn build(attrs: &dyn Attrs, op: ReduceOp) -> Result<Box<dyn Kernel>, Error> {
    let keep_dims = if attrs.has("keep_dims") { attrs.bool("keep_dims")? } else { false };
    Ok(Box::new(ReduceKernel { op, keep_dims }))
}

/// The kernel of one reduction node.
#[derive(Debug, Clone, Copy)]
pub struct ReduceKernel {
    pub op: ReduceOp,
    pub keep_dims: bool,
}

impl Kernel for ReduceKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = self.op.op_name();
        expect_inputs(name, ctx, 2)?;
        let (input, axes) = (ctx.input(0)?, ctx.input(1)?);
        if axes.rank() > 1 {
            return Err(Error::InvalidArgument(format!(
                "{name}: reduction_indices must be a scalar or a vector, got shape {}",
                ShapeDisplay(axes.shape())
            )));
        }
        let plan = ReducePlan::new(name, input.shape(), &axes.to_i64s()?, self.keep_dims)?;
        let mut out = ctx.allocate_output(0, plan.output_shape())?;
        match self.op {
            ReduceOp::Sum => plan.run::<SumR>(input.data()?, out.data_mut()?),
            ReduceOp::Mean => plan.run::<MeanR>(input.data()?, out.data_mut()?),
            ReduceOp::Max => plan.run::<MaxR>(input.data()?, out.data_mut()?),
            ReduceOp::Min => plan.run::<MinR>(input.data()?, out.data_mut()?),
            ReduceOp::Prod if input.dtype() == DType::I32 => plan.run::<ProdI32R>(input.data()?, out.data_mut()?),
            ReduceOp::Prod => plan.run::<ProdR>(input.data()?, out.data_mut()?),
            ReduceOp::All => plan.run::<AllR>(input.data()?, out.data_mut()?),
            ReduceOp::Any => plan.run::<AnyR>(input.data()?, out.data_mut()?),
        }
    }
}

/// A checked reduction of one input shape over a set of axes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReducePlan {
    op: &'static str,
    input_shape: Vec<usize>,
    output_shape: Vec<usize>,
    /// Collapsed dimensions, outermost first, each with "is reduced";
    /// neighbours alternate. Empty when the input has one element or none.
    dims: Vec<(usize, bool)>,
    /// Number of input elements reduced into each output element.
    reduced_count: usize,
}

impl ReducePlan {
    /// Fails (as TensorFlow does) on an axis out of range or repeated.
    pub fn new(op: &'static str, shape: &[usize], axes: &[i64], keep_dims: bool) -> Result<Self, Error> {
        let rank = shape.len();
        let mut reduced = vec![false; rank];
        for &axis in axes {
            let rank_i = rank as i64;
            if axis < -rank_i || axis >= rank_i {
                return Err(Error::InvalidArgument(format!(
                    "{op}: Invalid reduction dimension ({axis} for input with {rank} dimension(s)"
                )));
            }
            let index = if axis < 0 { axis + rank_i } else { axis } as usize;
            if reduced[index] {
                return Err(Error::InvalidArgument(format!(
                    "{op}: Invalid reduction arguments: Axes contains duplicate dimension: {index}"
                )));
            }
            reduced[index] = true;
        }
        element_count(shape)
            .ok_or_else(|| Error::InvalidArgument(format!("{op}: input shape {} is too large", ShapeDisplay(shape))))?;
        let mut output_shape = Vec::with_capacity(rank);
        let mut reduced_count = 1usize;
        for (i, &dim) in shape.iter().enumerate() {
            if reduced[i] {
                reduced_count *= dim;
                if keep_dims {
                    output_shape.push(1);
                }
            } else {
                output_shape.push(dim);
            }
        }
        let mut dims: Vec<(usize, bool)> = Vec::with_capacity(rank);
        for (i, &dim) in shape.iter().enumerate() {
            if dim == 1 {
                continue;
            }
            match dims.last_mut() {
                Some(last) if last.1 == reduced[i] => last.0 *= dim,
                _ => dims.push((dim, reduced[i])),
            }
        }
        Ok(ReducePlan { op, input_shape: shape.to_vec(), output_shape, dims, reduced_count })
    }

    /// The shape to allocate for the output.
    pub fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }

    pub fn output_len(&self) -> usize {
        self.output_shape.iter().product()
    }

    /// Sums float32 `input` (row-major, the plan's input shape) into `out`.
    pub(super) fn sum(&self, input: &[f32], out: &mut [f32]) -> Result<(), Error> {
        self.run::<SumR>(input, out)
    }

    /// Reduces `input` (row-major, the plan's input shape) into `out`.
    fn run<R: Reducer>(&self, input: &[R::T], out: &mut [R::T]) -> Result<(), Error> {
        let in_len = self.input_shape.iter().product::<usize>();
        if input.len() != in_len || out.len() != self.output_len() {
            return Err(Error::InvalidArgument(format!(
                "{}: buffers of {} and {} elements do not fit input shape {} and output shape {}",
                self.op,
                input.len(),
                out.len(),
                ShapeDisplay(&self.input_shape),
                ShapeDisplay(&self.output_shape)
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        if input.is_empty() {
            // Every output element reduces nothing.
            out.fill(R::finish(R::IDENTITY, 0));
            return Ok(());
        }
        reduce_dims::<R>(&self.dims, input, out);
        if R::NEEDS_FINISH {
            let count = self.reduced_count;
            for v in out.iter_mut() {
                *v = R::finish(*v, count);
            }
        }
        Ok(())
    }
}

/// One way of combining elements. `combine` must be associative (up to
/// rounding) with `IDENTITY` as its neutral element.
trait Reducer: 'static {
    type T: Element;
    const IDENTITY: Self::T;
    /// Sums round better in blocks; other reducers are exact.
    const BLOCKED: bool = false;
    const NEEDS_FINISH: bool = false;
    /// The result does not depend on the order of combining (up to the
    /// sign of a zero max or min), so a slice may be cut any way.
    const ORDER_FREE: bool = false;
    fn combine(acc: Self::T, x: Self::T) -> Self::T;
    fn finish(acc: Self::T, _count: usize) -> Self::T {
        acc
    }

    /// Reduces a contiguous slice: sums pairwise down to `PAIRWISE_BASE`
    /// elements, each leaf (and every other reducer's whole slice) in AVX2
    /// lanes where the CPU has them.
    #[inline(always)]
    fn reduce_slice(s: &[Self::T]) -> Self::T {
        if Self::BLOCKED && s.len() > PAIRWISE_BASE {
            let mid = (s.len() / 2) & !7;
            return Self::combine(Self::reduce_slice(&s[..mid]), Self::reduce_slice(&s[mid..]));
        }
        in_wide_lanes(
            #[inline(always)]
            || Self::reduce_run(s),
        )
    }

    /// Reduces `s` with eight independent accumulators (the compiler turns
    /// them into SIMD registers), combined in a fixed order.
    #[inline(always)]
    fn reduce_run(s: &[Self::T]) -> Self::T {
        if Self::ORDER_FREE {
            return Self::reduce_run_wide(s);
        }
        let mut acc = [Self::IDENTITY; 8];
        let chunks = s.chunks_exact(8);
        let rest = chunks.remainder();
        for chunk in chunks {
            for i in 0..8 {
                acc[i] = Self::combine(acc[i], chunk[i]);
            }
        }
        let a = Self::combine(Self::combine(acc[0], acc[4]), Self::combine(acc[2], acc[6]));
        let b = Self::combine(Self::combine(acc[1], acc[5]), Self::combine(acc[3], acc[7]));
        let mut total = Self::combine(a, b);
        for &x in rest {
            total = Self::combine(total, x);
        }
        total
    }

    /// Like [`reduce_run`](Self::reduce_run) with four times the
    /// accumulators, for [order-free](Self::ORDER_FREE) reducers: a
    /// compare-and-blend per element is a dependency chain of a few cycles,
    /// and one register of eight lanes left `Max` over 1024-element rows at
    /// 1.3× the CPU device's time.
    #[inline(always)]
    fn reduce_run_wide(s: &[Self::T]) -> Self::T {
        let mut acc = [[Self::IDENTITY; 8]; 4];
        let chunks = s.chunks_exact(32);
        let rest = chunks.remainder();
        for chunk in chunks {
            for (acc, part) in acc.iter_mut().zip(chunk.chunks_exact(8)) {
                for i in 0..8 {
                    acc[i] = Self::combine(acc[i], part[i]);
                }
            }
        }
        let mut total = Self::IDENTITY;
        for lane in acc.iter().flatten().chain(rest) {
            total = Self::combine(total, *lane);
        }
        total
    }

    /// `acc[j] = combine(acc[j], row[j])`.
    #[inline(always)]
    fn combine_rows(acc: &mut [Self::T], row: &[Self::T]) {
        for (a, &x) in acc.iter_mut().zip(row) {
            *a = Self::combine(*a, x);
        }
    }
}

struct SumR;
impl Reducer for SumR {
    type T = f32;
    const IDENTITY: f32 = 0.0;
    const BLOCKED: bool = true;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        acc + x
    }
}

struct MeanR;
impl Reducer for MeanR {
    type T = f32;
    const IDENTITY: f32 = 0.0;
    const BLOCKED: bool = true;
    const NEEDS_FINISH: bool = true;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        acc + x
    }
    fn finish(acc: f32, count: usize) -> f32 {
        acc / count as f32
    }
}

struct MaxR;
impl Reducer for MaxR {
    type T = f32;
    const IDENTITY: f32 = f32::NEG_INFINITY;
    const ORDER_FREE: bool = true;
    /// NaN wins, as in TensorFlow's CPU kernel.
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        if acc > x || acc.is_nan() {
            acc
        } else {
            x
        }
    }
}

struct MinR;
impl Reducer for MinR {
    type T = f32;
    const IDENTITY: f32 = f32::INFINITY;
    const ORDER_FREE: bool = true;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        if acc < x || acc.is_nan() {
            acc
        } else {
            x
        }
    }
}

struct ProdR;
impl Reducer for ProdR {
    type T = f32;
    const IDENTITY: f32 = 1.0;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        acc * x
    }
}

/// Wrapping multiplication is associative and commutative modulo 2³², so
/// any grouping gives the CPU kernel's result exactly.
struct ProdI32R;
impl Reducer for ProdI32R {
    type T = i32;
    const IDENTITY: i32 = 1;
    const ORDER_FREE: bool = true;
    #[inline(always)]
    fn combine(acc: i32, x: i32) -> i32 {
        acc.wrapping_mul(x)
    }
}

struct AllR;
impl Reducer for AllR {
    type T = TfBool;
    const IDENTITY: TfBool = TfBool(1);
    const ORDER_FREE: bool = true;
    #[inline(always)]
    fn combine(acc: TfBool, x: TfBool) -> TfBool {
        TfBool(acc.0 & u8::from(x.0 != 0))
    }
}

struct AnyR;
impl Reducer for AnyR {
    type T = TfBool;
    const IDENTITY: TfBool = TfBool(0);
    const ORDER_FREE: bool = true;
    #[inline(always)]
    fn combine(acc: TfBool, x: TfBool) -> TfBool {
        TfBool(acc.0 | u8::from(x.0 != 0))
    }
}

/// Reduces over every reduced group of `dims` (input non-empty, `out`
/// sized for the kept dims).
fn reduce_dims<R: Reducer>(dims: &[(usize, bool)], input: &[R::T], out: &mut [R::T]) {
    let Some(last) = dims.iter().rposition(|d| d.1) else {
        out.copy_from_slice(input);
        return;
    };
    let outer: usize = dims[..last].iter().map(|d| d.0).product();
    let inner: usize = dims[last + 1..].iter().map(|d| d.0).product();
    let r = dims[last].0;
    if dims[..last].iter().all(|d| !d.1) {
        reduce3::<R>(input, outer, r, inner, out);
        return;
    }
    // Several reduced groups: reduce the innermost one, then the rest.
    let mut scratch = vec![R::IDENTITY; outer * inner];
    reduce3::<R>(input, outer, r, inner, &mut scratch);
    let mut rest: Vec<(usize, bool)> = dims[..last].to_vec();
    if let Some(kept) = rest.last_mut() {
        kept.0 *= inner;
    }
    reduce_dims::<R>(&rest, &scratch, out);
}

/// `out[o, j] = reduce over p of input[o, p, j]` for an `[outer, r, inner]`
/// input (`r >= 1`).
fn reduce3<R: Reducer>(input: &[R::T], outer: usize, r: usize, inner: usize, out: &mut [R::T]) {
    let total = input.len();
    let threads = pool::threads();
    let parallel = total >= PARALLEL_MIN_ELEMENTS && threads > 1;
    if inner == 1 {
        if !parallel {
            for (o, row) in out.iter_mut().zip(input.chunks_exact(r)) {
                *o = R::reduce_slice(row);
            }
        } else if outer >= 2 * threads {
            let rows_per_task = (MIN_TASK_ELEMENTS / r).max(outer.div_ceil(threads * 4)).max(1);
            pool::for_each_chunk_mut(out, rows_per_task, |task, o| {
                let rows = &input[task * rows_per_task * r..][..o.len() * r];
                for (o, row) in o.iter_mut().zip(rows.chunks_exact(r)) {
                    *o = R::reduce_slice(row);
                }
            });
        } else {
            // Few long rows: split each row across the pool.
            let piece = r.div_ceil(threads * 2).max(MIN_TASK_ELEMENTS / 2).next_multiple_of(8);
            let mut partials = vec![R::IDENTITY; r.div_ceil(piece)];
            for (o, row) in out.iter_mut().zip(input.chunks_exact(r)) {
                pool::for_each_chunk_mut(&mut partials, 1, |i, p| {
                    p[0] = R::reduce_slice(&row[i * piece..((i + 1) * piece).min(r)])
                });
                *o = R::reduce_slice(&partials);
            }
        }
        return;
    }
    let plane = r * inner;
    if !parallel {
        for (o, block) in out.chunks_exact_mut(inner).zip(input.chunks_exact(plane)) {
            reduce_columns::<R>(block, r, inner, o);
        }
    } else if outer >= 2 * threads {
        let per_task = (MIN_TASK_ELEMENTS / plane).max(outer.div_ceil(threads * 4)).max(1);
        pool::for_each_chunk_mut(out, per_task * inner, |task, o| {
            let blocks = &input[task * per_task * plane..][..o.len() / inner * plane];
            for (o, block) in o.chunks_exact_mut(inner).zip(blocks.chunks_exact(plane)) {
                reduce_columns::<R>(block, r, inner, o);
            }
        });
    } else if inner >= 1024 * threads {
        // Wide rows: each task reduces a band of columns.
        let band = inner.div_ceil(threads * 2).next_multiple_of(16);
        for (o, block) in out.chunks_exact_mut(inner).zip(input.chunks_exact(plane)) {
            pool::for_each_chunk_mut(o, band, |b, o| reduce_column_band::<R>(block, r, inner, b * band, o));
        }
    } else {
        // Many short rows: each task reduces a range of rows into a
        // partial row; the partials are combined at the end.
        let tasks = (threads * 2).min(r);
        let rows_per_task = r.div_ceil(tasks);
        let mut partials = vec![R::IDENTITY; r.div_ceil(rows_per_task) * inner];
        for (o, block) in out.chunks_exact_mut(inner).zip(input.chunks_exact(plane)) {
            partials.fill(R::IDENTITY);
            pool::for_each_chunk_mut(&mut partials, inner, |task, partial| {
                let rows = &block[task * rows_per_task * inner..((task + 1) * rows_per_task * inner).min(plane)];
                reduce_columns::<R>(rows, rows.len() / inner, inner, partial);
            });
            o.fill(R::IDENTITY);
            for partial in partials.chunks_exact(inner) {
                R::combine_rows(o, partial);
            }
        }
    }
}

/// `out[j] = reduce over p of block[p * inner + j]`, `block` holding `r`
/// rows of `inner`.
fn reduce_columns<R: Reducer>(block: &[R::T], r: usize, inner: usize, out: &mut [R::T]) {
    reduce_column_band::<R>(block, r, inner, 0, out);
}

/// Like [`reduce_columns`] for columns `start..start + out.len()`.
fn reduce_column_band<R: Reducer>(block: &[R::T], r: usize, inner: usize, start: usize, out: &mut [R::T]) {
    in_wide_lanes(
        #[inline(always)]
        || column_band::<R>(block, r, inner, start, out),
    );
}

/// The body of [`reduce_column_band`], inlined into its AVX2 copy.
#[inline(always)]
fn column_band<R: Reducer>(block: &[R::T], r: usize, inner: usize, start: usize, out: &mut [R::T]) {
    let width = out.len();
    let row = |p: usize| &block[p * inner + start..p * inner + start + width];
    if !R::BLOCKED || r <= SUM_BLOCK_ROWS {
        out.copy_from_slice(row(0));
        for p in 1..r {
            R::combine_rows(out, row(p));
        }
        return;
    }
    let mut partial = vec![R::IDENTITY; width];
    out.fill(R::IDENTITY);
    let mut p = 0;
    while p < r {
        let end = (p + SUM_BLOCK_ROWS).min(r);
        partial.copy_from_slice(row(p));
        for q in p + 1..end {
            R::combine_rows(&mut partial, row(q));
        }
        R::combine_rows(out, &partial);
        p = end;
    }
}

/// Sums an `[outer, c, inner]` tensor over `outer` and `inner`: the `c`
/// channel sums (BiasAddGrad), with the same blocking and pool use as `Sum`.
pub fn sum_channels(input: &[f32], outer: usize, c: usize, inner: usize, out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    if input.is_empty() {
        out.fill(0.0);
        return;
    }
    let mut dims = Vec::with_capacity(3);
    for (dim, reduced) in [(outer, true), (c, false), (inner, true)] {
        if dim == 1 {
            continue;
        }
        match dims.last_mut() {
            Some((last, was)) if *was == reduced => *last *= dim,
            _ => dims.push((dim, reduced)),
        }
    }
    reduce_dims::<SumR>(&dims, input, out);
}

// ------------------------------------------------------------- ArgMax/ArgMin

/// `ArgMax`/`ArgMin` along the dimension given by input 1.
#[derive(Debug, Clone, Copy)]
pub struct ArgKernel {
    pub max: bool,
}

impl Kernel for ArgKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = if self.max { "ArgMax" } else { "ArgMin" };
        expect_inputs(name, ctx, 2)?;
        let (input, dimension) = (ctx.input(0)?, ctx.input(1)?);
        let dims = dimension.to_i64s()?;
        let [axis] = dims[..] else {
            return Err(Error::InvalidArgument(format!(
                "{name}: dimension must be a scalar, got shape {}",
                ShapeDisplay(dimension.shape())
            )));
        };
        let shape = input.shape();
        let rank = shape.len() as i64;
        if axis < -rank || axis >= rank {
            return Err(Error::InvalidArgument(format!(
                "{name}: Expected dimension in the range [{}, {rank}), but got {axis}",
                -rank
            )));
        }
        let axis = if axis < 0 { axis + rank } else { axis } as usize;
        let r = shape[axis];
        if r == 0 {
            return Err(Error::InvalidArgument(format!(
                "{name}: Reduction axis {axis} is empty in shape {}",
                ShapeDisplay(shape)
            )));
        }
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let out_shape: Vec<usize> = shape.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &d)| d).collect();
        let mut out = ctx.allocate_output(0, &out_shape)?;
        let data = input.data::<f32>()?;
        match out.dtype() {
            DType::I32 => arg_reduce(self.max, data, outer, r, inner, out.data_mut::<i32>()?, |i| i as i32),
            DType::I64 => arg_reduce(self.max, data, outer, r, inner, out.data_mut::<i64>()?, |i| i as i64),
            other => Err(Error::Internal(format!("{name}: unsupported output_type {other}"))),
        }
    }
}

fn arg_reduce<I: Element>(
    max: bool,
    input: &[f32],
    outer: usize,
    r: usize,
    inner: usize,
    out: &mut [I],
    cast: fn(usize) -> I,
) -> Result<(), Error> {
    if input.len() != outer * r * inner || out.len() != outer * inner {
        return Err(Error::Internal("ArgMax: buffer sizes do not match the shape".into()));
    }
    if out.is_empty() {
        return Ok(());
    }
    let plane = r * inner;
    let work = |o_range: &mut [I], blocks: &[f32]| {
        if max {
            arg_blocks(blocks, r, inner, o_range, cast, |v, best| v > best, f32::MIN)
        } else {
            arg_blocks(blocks, r, inner, o_range, cast, |v, best| v < best, f32::MAX)
        }
    };
    let threads = pool::threads();
    if input.len() < PARALLEL_MIN_ELEMENTS || threads == 1 || outer == 1 {
        work(out, input);
    } else {
        let per_task = (MIN_TASK_ELEMENTS / plane).max(outer.div_ceil(threads * 4)).max(1);
        pool::for_each_chunk_mut(out, per_task * inner, |task, o| {
            work(o, &input[task * per_task * plane..][..o.len() / inner * plane])
        });
    }
    Ok(())
}

/// The index of the first element `better` than all before it, starting
/// from `start` (the lowest/highest finite float, so NaN is never chosen
/// unless nothing else is, and index 0 is returned then).
#[inline(always)]
fn arg_blocks<I: Element>(
    blocks: &[f32],
    r: usize,
    inner: usize,
    out: &mut [I],
    cast: fn(usize) -> I,
    better: impl Fn(f32, f32) -> bool + Copy,
    start: f32,
) {
    let plane = r * inner;
    if inner == 1 {
        for (o, row) in out.iter_mut().zip(blocks.chunks_exact(r)) {
            let (mut best, mut index) = (start, 0);
            for (i, &v) in row.iter().enumerate() {
                if better(v, best) {
                    best = v;
                    index = i;
                }
            }
            *o = cast(index);
        }
        return;
    }
    let mut best = vec![start; inner];
    let mut index = vec![0usize; inner];
    for (o, block) in out.chunks_exact_mut(inner).zip(blocks.chunks_exact(plane)) {
        best.fill(start);
        index.fill(0);
        for (p, row) in block.chunks_exact(inner).enumerate() {
            for ((b, i), &v) in best.iter_mut().zip(index.iter_mut()).zip(row) {
                if better(v, *b) {
                    *b = v;
                    *i = p;
                }
            }
        }
        for (o, &i) in o.iter_mut().zip(&index) {
            *o = cast(i);
        }
    }
}

// ------------------------------------------------------- Cumsum, Cumprod

/// `Cumsum`/`Cumprod(x, axis)`: each element is the sum (product) of the
/// elements before it along `axis`, itself included unless `exclusive`,
/// counted from the end when `reverse`. Each line is accumulated in order,
/// one element after another, as TensorFlow's CPU kernel does, so the
/// results are the same bits; lines side by side (an axis that is not the
/// last) are accumulated together, a row of `inner` at a time.
struct Scan {
    product: bool,
    exclusive: bool,
    reverse: bool,
}

impl Scan {
    fn build(attrs: &dyn Attrs, product: bool) -> Result<Box<dyn Kernel>, Error> {
        let flag = |name: &str| -> Result<bool, Error> { Ok(attrs.has(name) && attrs.bool(name)?) };
        Ok(Box::new(Scan { product, exclusive: flag("exclusive")?, reverse: flag("reverse")? }))
    }

    /// Scans one block of `n` rows of `inner` elements from `src` into `out`.
    fn block(&self, src: &[f32], n: usize, inner: usize, out: &mut [f32]) {
        let mut acc = vec![if self.product { 1.0f32 } else { 0.0 }; inner];
        for step in 0..n {
            let k = if self.reverse { n - 1 - step } else { step };
            let (x, o) = (&src[k * inner..(k + 1) * inner], &mut out[k * inner..(k + 1) * inner]);
            if self.exclusive {
                o.copy_from_slice(&acc);
            }
            if self.product {
                acc.iter_mut().zip(x).for_each(|(a, &v)| *a *= v);
            } else {
                acc.iter_mut().zip(x).for_each(|(a, &v)| *a += v);
            }
            if !self.exclusive {
                o.copy_from_slice(&acc);
            }
        }
    }
}

impl Kernel for Scan {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.product { "Cumprod" } else { "Cumsum" };
        expect_inputs(op, ctx, 2)?;
        let (x, axis_t) = (ctx.input(0)?, ctx.input(1)?);
        if axis_t.len() != 1 || axis_t.rank() != 0 {
            return Err(Error::InvalidArgument(format!(
                "{op}: axis must be a scalar, got shape {}",
                ShapeDisplay(axis_t.shape())
            )));
        }
        let shape = x.shape();
        let rank = shape.len() as i64;
        let axis = axis_t.to_i64s()?[0];
        if axis < -rank || axis >= rank {
            return Err(Error::InvalidArgument(format!(
                "{op}: Expected scan axis in the range [{}, {rank}), but got {axis}",
                -rank
            )));
        }
        let axis = if axis < 0 { axis + rank } else { axis } as usize;
        let (n, inner): (usize, usize) = (shape[axis], shape[axis + 1..].iter().product());
        let mut out = ctx.allocate_output(0, shape)?;
        let (src, dst) = (x.data::<f32>()?, out.data_mut::<f32>()?);
        let block = n * inner;
        if block == 0 {
            return Ok(());
        }
        if dst.len() < PARALLEL_MIN_ELEMENTS || dst.len() == block {
            for (b, chunk) in dst.chunks_exact_mut(block).enumerate() {
                self.block(&src[b * block..(b + 1) * block], n, inner, chunk);
            }
            return Ok(());
        }
        let blocks_per_task = (MIN_TASK_ELEMENTS / block).max(1);
        pool::for_each_chunk_mut(dst, blocks_per_task * block, |task, chunk| {
            let first = task * blocks_per_task * block;
            for (b, out_block) in chunk.chunks_exact_mut(block).enumerate() {
                let at = first + b * block;
                self.block(&src[at..at + block], n, inner, out_block);
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalContext;

    #[test]
    fn scans_match_a_running_total_along_every_axis() {
        let shapes: &[&[usize]] = &[&[0, 3], &[1, 1], &[5], &[7, 13], &[3, 5, 17], &[300, 129]];
        for &shape in shapes {
            let x = values(shape.iter().product(), 4);
            for axis in 0..shape.len() {
                let (n, inner): (usize, usize) = (shape[axis], shape[axis + 1..].iter().product());
                for (product, exclusive, reverse) in
                    [(false, false, false), (false, true, false), (false, false, true), (true, true, true)]
                {
                    let scan = Scan { product, exclusive, reverse };
                    let inputs = vec![
                        Tensor::from_vec(shape, x.clone()).unwrap(),
                        Tensor::from_vec(&[], vec![axis as i64 - shape.len() as i64]).unwrap(),
                    ];
                    let got = LocalContext::run(&scan, inputs, &[DType::F32]).unwrap()[0].to_vec::<f32>().unwrap();
                    // The reference walks each line on its own.
                    let mut want = vec![0.0f32; x.len()];
                    for line in 0..x.len() / n.max(1) {
                        let (o, i) = (line / inner, line % inner);
                        let mut acc = if product { 1.0f32 } else { 0.0 };
                        let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
                        for k in order {
                            let at = (o * n + k) * inner + i;
                            let before = acc;
                            acc = if product { acc * x[at] } else { acc + x[at] };
                            want[at] = if exclusive { before } else { acc };
                        }
                    }
                    let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same && got.len() == want.len(), "{shape:?} axis {axis} {product} {exclusive} {reverse}");
                }
            }
        }
        let bad = vec![Tensor::from_vec(&[2, 2], vec![0f32; 4]).unwrap(), Tensor::from_vec(&[], vec![2i64]).unwrap()];
        let error = LocalContext::run(&Scan { product: false, exclusive: false, reverse: false }, bad, &[DType::F32]);
        assert!(error.unwrap_err().to_string().contains("Expected scan axis in the range [-2, 2), but got 2"));
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    /// Reference: for every input element, its output index; fold in f64.
    fn reference(op: ReduceOp, shape: &[usize], axes: &[i64], input: &[f64]) -> Vec<f64> {
        let rank = shape.len();
        let reduced: Vec<bool> =
            (0..rank).map(|i| axes.iter().any(|&a| (if a < 0 { a + rank as i64 } else { a }) as usize == i)).collect();
        let out_shape: Vec<usize> = (0..rank).filter(|&i| !reduced[i]).map(|i| shape[i]).collect();
        let out_len: usize = out_shape.iter().product();
        let (init, f): (f64, fn(f64, f64) -> f64) = match op {
            ReduceOp::Sum | ReduceOp::Mean => (0.0, |a, b| a + b),
            ReduceOp::Max => {
                (f64::NEG_INFINITY, |a: f64, b: f64| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) })
            }
            ReduceOp::Min => {
                (f64::INFINITY, |a: f64, b: f64| if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) })
            }
            ReduceOp::Prod => (1.0, |a, b| a * b),
            ReduceOp::All => (1.0, |a, b| if a != 0.0 && b != 0.0 { 1.0 } else { 0.0 }),
            ReduceOp::Any => (0.0, |a, b| if a != 0.0 || b != 0.0 { 1.0 } else { 0.0 }),
        };
        let mut out = vec![init; out_len];
        let mut count = vec![0usize; out_len];
        for (flat, &x) in input.iter().enumerate() {
            let mut rest = flat;
            let mut index = vec![0; rank];
            for i in (0..rank).rev() {
                index[i] = rest % shape[i];
                rest /= shape[i];
            }
            let mut o = 0;
            for i in 0..rank {
                if !reduced[i] {
                    o = o * shape[i] + index[i];
                }
            }
            out[o] = f(out[o], x);
            count[o] += 1;
        }
        if op == ReduceOp::Mean {
            let n = shape.iter().enumerate().filter(|&(i, _)| reduced[i]).map(|(_, &d)| d).product::<usize>();
            for v in &mut out {
                *v /= n as f64;
            }
        }
        out
    }

    fn run_f32(op: ReduceOp, shape: &[usize], axes: &[i64], keep_dims: bool, input: Vec<f32>) -> Result<Tensor, Error> {
        let kernel = ReduceKernel { op, keep_dims };
        let x = Tensor::from_vec(shape, input)?;
        let a = Tensor::from_vec(&[axes.len()], axes.iter().map(|&a| a as i32).collect::<Vec<_>>())?;
        Ok(LocalContext::run(&kernel, vec![x, a], &[DType::F32])?.remove(0))
    }

    use crate::Tensor;

    const CASES: &[(&[usize], &[i64])] = &[
        (&[], &[]),
        (&[7], &[0]),
        (&[7], &[]),
        (&[1, 1], &[0, 1]),
        (&[7, 13], &[1]),
        (&[7, 13], &[0]),
        (&[7, 13], &[-1, -2]),
        (&[3, 1, 5], &[1]),
        (&[3, 4, 5], &[0, 2]),
        (&[3, 4, 5], &[1]),
        (&[2, 3, 4, 5], &[0, 2]),
        (&[2, 3, 4, 5], &[1, 3]),
        (&[2, 3, 4, 5], &[0, 1, 3]),
        (&[0, 3], &[0]),
        (&[0, 3], &[1]),
        (&[3, 0, 2], &[1]),
        (&[5, 1], &[1]),
        (&[257, 131], &[1]),
        (&[257, 131], &[0]),
        (&[3, 20000], &[1]),
        (&[3, 20000], &[0]),
        (&[100000], &[0]),
        (&[40000, 3], &[0]),
        (&[2, 40000, 3], &[1]),
        (&[2, 17, 4000], &[1]),
        (&[8, 100, 50], &[1]),
        (&[70, 700], &[0, 1]),
    ];

    #[test]
    fn float_reductions_match_reference() {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
            for &(shape, axes) in CASES {
                let len: usize = shape.iter().product();
                let mut input = values(len, 3);
                if op == ReduceOp::Prod {
                    // Keep products finite: values near 1.
                    input.iter_mut().for_each(|v| *v = 1.0 + *v * 1e-3);
                }
                for keep_dims in [false, true] {
                    let out = run_f32(op, shape, axes, keep_dims, input.clone()).unwrap();
                    let expected = reference(op, shape, axes, &input.iter().map(|&v| v as f64).collect::<Vec<_>>());
                    // Rounding scales with the sum of magnitudes, not the (cancelling) result.
                    let scale =
                        reference(op, shape, axes, &input.iter().map(|&v| (v as f64).abs()).collect::<Vec<_>>());
                    // Unblocked products of a few hundred factors drift by ~n ulp.
                    let tol = if op == ReduceOp::Prod { 3e-5 } else { 1e-6 };
                    let got = out.to_vec::<f32>().unwrap();
                    assert_eq!(got.len(), expected.len(), "{op:?} {shape:?} {axes:?}");
                    let rank = shape.len();
                    let want_shape: Vec<usize> = (0..rank)
                        .filter_map(|i| {
                            let red = axes.iter().any(|&a| (if a < 0 { a + rank as i64 } else { a }) as usize == i);
                            if red {
                                keep_dims.then_some(1)
                            } else {
                                Some(shape[i])
                            }
                        })
                        .collect();
                    assert_eq!(out.shape(), want_shape.as_slice());
                    for (i, ((&g, &w), &m)) in got.iter().zip(&expected).zip(&scale).enumerate() {
                        let ok = (g.is_nan() && w.is_nan())
                            || g as f64 == w
                            || (g as f64 - w).abs() <= tol * m.abs().max(1.0);
                        assert!(ok, "{op:?} {shape:?} {axes:?}: element {i} is {g}, expected {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn empty_reductions_give_the_identity() {
        let check = |op, want: f32| {
            let got = run_f32(op, &[0, 3], &[0], false, vec![]).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(got.len(), 3);
            assert!(got.iter().all(|&g| g == want || (g.is_nan() && want.is_nan())), "{op:?} {got:?}");
        };
        check(ReduceOp::Sum, 0.0);
        check(ReduceOp::Mean, f32::NAN);
        check(ReduceOp::Max, f32::NEG_INFINITY);
        check(ReduceOp::Min, f32::INFINITY);
        check(ReduceOp::Prod, 1.0);
    }

    #[test]
    fn nan_propagates_through_max_and_min() {
        let input = vec![f32::NAN, 1.0, 2.0, 3.0, f32::NAN, -1.0, 1.0, 2.0, 3.0];
        for op in [ReduceOp::Max, ReduceOp::Min] {
            let got = run_f32(op, &[3, 3], &[1], false, input.clone()).unwrap().to_vec::<f32>().unwrap();
            assert!(got[0].is_nan() && got[1].is_nan() && !got[2].is_nan(), "{op:?} {got:?}");
        }
    }

    #[test]
    fn bad_axes_are_errors() {
        let e = run_f32(ReduceOp::Sum, &[2, 3], &[2], false, vec![0.0; 6]).unwrap_err();
        assert!(e.to_string().contains("Invalid reduction dimension (2 for input with 2 dimension(s)"), "{e}");
        let e = run_f32(ReduceOp::Sum, &[2, 3], &[1, -1], false, vec![0.0; 6]).unwrap_err();
        assert!(e.to_string().contains("duplicate dimension: 1"), "{e}");
        assert!(run_f32(ReduceOp::Sum, &[], &[0], false, vec![1.0]).is_err());
    }

    #[test]
    fn bool_reductions() {
        for &(shape, axes) in CASES {
            let len: usize = shape.iter().product();
            let input: Vec<f32> = values(len, 9).iter().map(|&v| if v > 1.5 { 1.0 } else { 0.0 }).collect();
            let dense: Vec<f32> = values(len, 9).iter().map(|&v| if v > -1.5 { 1.0 } else { 0.0 }).collect();
            for op in [ReduceOp::All, ReduceOp::Any] {
                for data in [&input, &dense] {
                    let kernel = ReduceKernel { op, keep_dims: false };
                    let x = Tensor::from_vec(shape, data.iter().map(|&v| TfBool::from(v != 0.0)).collect()).unwrap();
                    let a = Tensor::from_vec(&[axes.len()], axes.to_vec()).unwrap();
                    let out = LocalContext::run(&kernel, vec![x, a], &[DType::Bool]).unwrap().remove(0);
                    let got: Vec<f64> = out.to_vec::<TfBool>().unwrap().iter().map(|b| b.get() as u8 as f64).collect();
                    let want = reference(op, shape, axes, &data.iter().map(|&v| v as f64).collect::<Vec<_>>());
                    assert_eq!(got, want, "{op:?} {shape:?} {axes:?}");
                }
            }
        }
    }

    #[test]
    fn int32_prod_is_exact_and_wraps() {
        let kernel = ReduceKernel { op: ReduceOp::Prod, keep_dims: false };
        for &(shape, axes) in CASES {
            let len: usize = shape.iter().product();
            // Small factors (exact in f64) and, in the longer rows, overflow.
            let input: Vec<i32> =
                values(len, 10).iter().map(|&v| (v * 2.0).round() as i32 + if v > 1.9 { 40_000 } else { 0 }).collect();
            let x = Tensor::from_vec(shape, input.clone()).unwrap();
            let a = Tensor::from_vec(&[axes.len()], axes.to_vec()).unwrap();
            let out = LocalContext::run(&kernel, vec![x, a], &[DType::I32]).unwrap().remove(0);
            // Reference in i64 wrapping, reduced in input order.
            let want: Vec<i32> = reference_i64_prod(shape, axes, &input);
            assert_eq!(out.to_vec::<i32>().unwrap(), want, "{shape:?} {axes:?}");
        }
        let x = Tensor::from_vec(&[3], vec![65_536, 65_536, 3]).unwrap();
        let a = Tensor::from_vec(&[1], vec![0i64]).unwrap();
        let out = LocalContext::run(&kernel, vec![x, a], &[DType::I32]).unwrap().remove(0);
        assert_eq!(out.to_vec::<i32>().unwrap(), [0]);
        let x = Tensor::from_vec::<i32>(&[0, 4], vec![]).unwrap();
        let a = Tensor::from_vec(&[1], vec![0i32]).unwrap();
        assert_eq!(LocalContext::run(&kernel, vec![x, a], &[DType::I32]).unwrap()[0].to_vec::<i32>().unwrap(), [1; 4]);
    }

    fn reference_i64_prod(shape: &[usize], axes: &[i64], input: &[i32]) -> Vec<i32> {
        let rank = shape.len();
        let reduced: Vec<bool> =
            (0..rank).map(|i| axes.iter().any(|&a| (if a < 0 { a + rank as i64 } else { a }) as usize == i)).collect();
        let out_len: usize = (0..rank).filter(|&i| !reduced[i]).map(|i| shape[i]).product();
        let mut out = vec![1i32; out_len];
        for (flat, &x) in input.iter().enumerate() {
            let (mut rest, mut o, mut scale) = (flat, 0, 1);
            for i in (0..rank).rev() {
                let index = rest % shape[i];
                rest /= shape[i];
                if !reduced[i] {
                    o += index * scale;
                    scale *= shape[i];
                }
            }
            out[o] = (i64::from(out[o]) * i64::from(x)) as i32;
        }
        out
    }

    #[test]
    fn sum_channels_matches_reference() {
        for (outer, c, inner) in [(1, 1, 1), (3, 5, 7), (1000, 7, 1), (2, 3, 20000), (1, 4, 1), (0, 3, 2), (5, 1, 9)] {
            let input = values(outer * c * inner, 5);
            let mut out = vec![f32::NAN; c];
            sum_channels(&input, outer, c, inner, &mut out);
            for ch in 0..c {
                let mut want = 0.0f64;
                for o in 0..outer {
                    for i in 0..inner {
                        want += input[(o * c + ch) * inner + i] as f64;
                    }
                }
                assert!((out[ch] as f64 - want).abs() <= 1e-4 * want.abs().max(1.0), "{outer} {c} {inner}");
            }
        }
    }

    fn run_arg(max: bool, shape: &[usize], axis: i64, input: Vec<f32>, out: DType) -> Result<Vec<i64>, Error> {
        let x = Tensor::from_vec(shape, input)?;
        let d = Tensor::from_vec(&[], vec![axis])?;
        let t = LocalContext::run(&ArgKernel { max }, vec![x, d], &[out])?.remove(0);
        t.to_i64s()
    }

    #[test]
    fn arg_reductions_match_reference() {
        for (shape, axis) in [
            (&[7usize][..], 0i64),
            (&[7, 13], 1),
            (&[7, 13], 0),
            (&[7, 13], -1),
            (&[3, 4, 5], 1),
            (&[1, 1], 0),
            (&[0, 3], 1),
            (&[300, 200], 1),
            (&[300, 200], 0),
            (&[8, 100, 50], 1),
        ] {
            let len: usize = shape.iter().product();
            // Coarse values so ties happen.
            let input: Vec<f32> = values(len, 4).iter().map(|v| (v * 2.0).round()).collect();
            let rank = shape.len() as i64;
            let ax = if axis < 0 { axis + rank } else { axis } as usize;
            let (outer, r, inner) =
                (shape[..ax].iter().product::<usize>(), shape[ax], shape[ax + 1..].iter().product::<usize>());
            for max in [true, false] {
                let mut want = Vec::new();
                for o in 0..outer {
                    for j in 0..inner {
                        let col: Vec<f32> = (0..r).map(|p| input[(o * r + p) * inner + j]).collect();
                        let ext = col.iter().copied().fold(if max { f32::MIN } else { f32::MAX }, |a, b| {
                            if max {
                                a.max(b)
                            } else {
                                a.min(b)
                            }
                        });
                        want.push(col.iter().position(|&v| v == ext).unwrap() as i64);
                    }
                }
                for dt in [DType::I32, DType::I64] {
                    assert_eq!(run_arg(max, shape, axis, input.clone(), dt).unwrap(), want, "{shape:?} {axis} {max}");
                }
            }
        }
    }

    #[test]
    fn arg_reductions_skip_nan_and_reject_empty_axes() {
        let input = vec![f32::NAN, 1.0, 2.0, 3.0, f32::NAN, -1.0, 1.0, 3.0, 3.0, f32::NAN, f32::NAN, f32::NAN];
        assert_eq!(run_arg(true, &[4, 3], 1, input.clone(), DType::I64).unwrap(), vec![2, 0, 1, 0]);
        assert_eq!(run_arg(false, &[4, 3], 1, input, DType::I64).unwrap(), vec![1, 2, 0, 0]);
        let e = run_arg(true, &[0, 3], 0, vec![], DType::I64).unwrap_err();
        assert!(e.to_string().contains("Reduction axis 0 is empty in shape [0,3]"), "{e}");
        let e = run_arg(true, &[2, 3], 2, vec![0.0; 6], DType::I64).unwrap_err();
        assert!(e.to_string().contains("Expected dimension in the range [-2, 2), but got 2"), "{e}");
    }
}
