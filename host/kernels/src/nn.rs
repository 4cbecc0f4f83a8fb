//! Float32 `Softmax`, `LogSoftmax` (over the last axis) and the
//! cross-entropy losses `SoftmaxCrossEntropyWithLogits` and
//! `SparseSoftmaxCrossEntropyWithLogits` (labels int32/int64).
//!
//! Every row is computed the way TensorFlow's CPU kernels do it, for the
//! same numerical behaviour: subtract the row maximum, exponentiate, sum;
//! softmax multiplies by the sum's inverse, log-softmax subtracts its log.
//! The losses are `sum(labels * (log(sum) - shifted))` and their backprop
//! `exp(shifted) / sum - labels`.
//!
//! `InTopKV2`, for Keras' top-k accuracy metrics, and `TopKV2` (`top_k`,
//! `sort`, `argsort`) live here too.
//!
//! `exp` is [`exp_f32`], a branch-free polynomial (Cephes' `expf`, within
//! 2 ulp of the correctly rounded result) that the compiler vectorises; Eigen
//! uses the same kind of approximation (see [`super::vmath`]). Rows are independent: large inputs
//! are split by rows across the compute pool.

use std::borrow::Cow;

use super::pool;
use super::shape::{element_count, Broadcast, ShapeDisplay};
use super::vmath::{exp_f32, in_wide_lanes};
use super::{expect_inputs, types, DType, Element, FnKernel, Kernel, KernelDef, OpContext, TfBool};
use crate::error::Error;

const SPARSE_TYPES: &[(&str, &[DType])] = &[("T", types::F32), ("Tlabels", types::INDEX)];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("Softmax", types::T_F32, |_| Ok(Box::new(SoftmaxKernel { log: false }))),
    KernelDef::new("LogSoftmax", types::T_F32, |_| Ok(Box::new(SoftmaxKernel { log: true }))),
    KernelDef::new("SoftmaxCrossEntropyWithLogits", types::T_F32, |_| Ok(Box::new(XentKernel))),
    KernelDef::new("SparseSoftmaxCrossEntropyWithLogits", SPARSE_TYPES, |_| Ok(Box::new(SparseXentKernel))),
    KernelDef::new("InTopKV2", &[("T", types::INDEX)], |_| Ok(Box::new(FnKernel(in_top_k)))).host_memory(&["k"]),
    KernelDef::new("TopKV2", TOP_K_TYPES, |_| Ok(Box::new(FnKernel(top_k)))).host_memory(&["k"]),
];

/// `Tk` and `index_type` are attributes from TensorFlow 2.16 on; a node
/// without them is int32 for both.
const TOP_K_TYPES: &[(&str, &[DType])] = &[("T", types::F32), ("Tk", types::INDEX), ("index_type", types::INDEX)];

/// Below this many elements an op runs on the calling thread.
pub const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

/// Smallest number of elements one pool task handles.
const MIN_TASK_ELEMENTS: usize = 8 * 1024;

/// Largest element of a row (NaN if any is NaN), −inf for an empty row.
#[inline(always)]
fn row_max(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    let pick = |a: f32, x: f32| if a > x || a.is_nan() { a } else { x };
    for chunk in chunks {
        for i in 0..8 {
            acc[i] = pick(acc[i], chunk[i]);
        }
    }
    let mut m = acc.iter().copied().fold(f32::NEG_INFINITY, pick);
    for &x in rest {
        m = pick(m, x);
    }
    m
}

/// Sum with eight accumulators (rows are short: no pairwise split).
#[inline(always)]
fn row_sum(row: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for i in 0..8 {
            acc[i] += chunk[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for &x in rest {
        s += x;
    }
    s
}

/// Runs `f(first_row, rows_of_out)` over `out` in whole rows of `width`,
/// inline for small outputs, across the pool otherwise.
fn for_rows(out: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if out.is_empty() || width == 0 {
        return;
    }
    let rows = out.len() / width;
    let threads = pool::threads();
    if out.len() < PARALLEL_MIN_ELEMENTS || threads == 1 || rows == 1 {
        f(0, out);
        return;
    }
    let rows_per_task = (MIN_TASK_ELEMENTS / width).max(rows.div_ceil(threads * 4)).max(1);
    pool::for_each_chunk_mut(out, rows_per_task * width, |i, chunk| f(i * rows_per_task, chunk));
}

// ------------------------------------------------------ Softmax, LogSoftmax

/// `Softmax` or `LogSoftmax` over the last dimension.
#[derive(Debug, Clone, Copy)]
pub struct SoftmaxKernel {
    pub log: bool,
}

impl Kernel for SoftmaxKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = if self.log { "LogSoftmax" } else { "Softmax" };
        expect_inputs(name, ctx, 1)?;
        let logits = ctx.input(0)?;
        let shape = logits.shape();
        let Some(&width) = shape.last() else {
            return Err(Error::InvalidArgument(format!(
                "{name}: logits must have >= 1 dimension, got {}",
                ShapeDisplay(shape)
            )));
        };
        let mut out = ctx.allocate_output(0, shape)?;
        softmax(logits.data()?, width, self.log, out.data_mut()?)
    }
}

/// Softmax (or log-softmax) of every row of `width` elements.
pub fn softmax(input: &[f32], width: usize, log: bool, out: &mut [f32]) -> Result<(), Error> {
    if input.len() != out.len() || (width > 0 && input.len() % width != 0) {
        return Err(Error::Internal("Softmax: buffer sizes do not match".into()));
    }
    for_rows(out, width, |first, rows| {
        let src = &input[first * width..first * width + rows.len()];
        in_wide_lanes(
            #[inline(always)]
            || softmax_rows(src, width, log, rows),
        );
    });
    Ok(())
}

/// [`softmax`] of the rows in `src` into `rows` (whole rows of `width`).
/// Always inlined, so [`in_wide_lanes`] compiles it in AVX2 lanes.
#[inline(always)]
fn softmax_rows(src: &[f32], width: usize, log: bool, rows: &mut [f32]) {
    for (o, x) in rows.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
        let max = row_max(x);
        if log {
            for (o, &v) in o.iter_mut().zip(x) {
                *o = exp_f32(v - max);
            }
            let log_sum = row_sum(o).ln();
            for (o, &v) in o.iter_mut().zip(x) {
                *o = (v - max) - log_sum;
            }
        } else {
            for (o, &v) in o.iter_mut().zip(x) {
                *o = exp_f32(v - max);
            }
            let inverse = 1.0 / row_sum(o);
            for o in o.iter_mut() {
                *o *= inverse;
            }
        }
    }
}

// -------------------------------------------- SoftmaxCrossEntropyWithLogits

/// `SoftmaxCrossEntropyWithLogits(features, labels) -> (loss, backprop)`.
#[derive(Debug, Clone, Copy)]
pub struct XentKernel;

/// A tensor of `shape` broadcast to `[batch, classes]` (borrowed when it
/// already has that shape).
fn broadcast_2d<'a>(data: &'a [f32], shape: &[usize], batch: usize, classes: usize) -> Cow<'a, [f32]> {
    if shape == [batch, classes] {
        return Cow::Borrowed(data);
    }
    let padded: Vec<usize> = std::iter::repeat_n(1, 2 - shape.len()).chain(shape.iter().copied()).collect();
    let (row_step, col_step) = (if padded[0] == 1 { 0 } else { padded[1] }, usize::from(padded[1] != 1));
    let mut out = Vec::with_capacity(batch * classes);
    for b in 0..batch {
        for c in 0..classes {
            out.push(data[b * row_step + c * col_step]);
        }
    }
    Cow::Owned(out)
}

impl Kernel for XentKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "SoftmaxCrossEntropyWithLogits";
        expect_inputs(OP, ctx, 2)?;
        let (logits, labels) = (ctx.input(0)?, ctx.input(1)?);
        let (ls, bs) = (logits.shape(), labels.shape());
        let shape = if ls == bs {
            ls.to_vec()
        } else {
            let broadcast = Broadcast::new(ls, bs).map_err(|_| {
                Error::InvalidArgument(format!(
                    "{OP}: logits and labels must be broadcastable: logits_size={} labels_size={}",
                    ShapeDisplay(ls),
                    ShapeDisplay(bs)
                ))
            })?;
            broadcast.output_shape().to_vec()
        };
        let [batch, classes] = shape[..] else {
            return Err(Error::InvalidArgument(format!(
                "{OP}: logits and labels must be either 2-dimensional, or broadcasted to be 2-dimensional"
            )));
        };
        element_count(&shape).ok_or_else(|| Error::InvalidArgument(format!("{OP}: shape too large")))?;
        let mut loss = ctx.allocate_output(0, &[batch])?;
        let mut backprop = ctx.allocate_output(1, &shape)?;
        let x = broadcast_2d(logits.data()?, ls, batch, classes);
        let y = broadcast_2d(labels.data()?, bs, batch, classes);
        let loss = loss.data_mut::<f32>()?;
        if classes == 0 {
            loss.fill(0.0);
            return Ok(());
        }
        xent(&x, &y, classes, loss, backprop.data_mut()?);
        Ok(())
    }
}

/// Loss and backprop of each row of `classes` logits against its labels.
fn xent(x: &[f32], y: &[f32], classes: usize, loss: &mut [f32], backprop: &mut [f32]) {
    // The loss is written per row alongside the backprop: split both the
    // same way by handing each task its rows' loss slice.
    let rows = loss.len();
    let threads = pool::threads();
    // A function, not a closure, so that it inlines into in_wide_lanes' AVX2 copy.
    #[inline(always)]
    fn rows_of(x: &[f32], y: &[f32], classes: usize, first: usize, loss: &mut [f32], bp: &mut [f32]) {
        let src = first * classes;
        let rows_x = &x[src..src + bp.len()];
        let rows_y = &y[src..src + bp.len()];
        for (((l, bp), x), y) in loss
            .iter_mut()
            .zip(bp.chunks_exact_mut(classes))
            .zip(rows_x.chunks_exact(classes))
            .zip(rows_y.chunks_exact(classes))
        {
            let max = row_max(x);
            for (b, &v) in bp.iter_mut().zip(x) {
                *b = exp_f32(v - max);
            }
            let sum = row_sum(bp);
            let log_sum = sum.ln();
            let mut acc = [0f32; 8];
            for (i, (&v, &t)) in x.iter().zip(y).enumerate() {
                acc[i & 7] += t * (log_sum - (v - max));
            }
            *l = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
            for (b, &t) in bp.iter_mut().zip(y) {
                *b = *b / sum - t;
            }
        }
    }
    let work = |first: usize, loss: &mut [f32], bp: &mut [f32]| {
        in_wide_lanes(
            #[inline(always)]
            || rows_of(x, y, classes, first, loss, bp),
        )
    };
    if backprop.len() < PARALLEL_MIN_ELEMENTS || threads == 1 || rows == 1 {
        work(0, loss, backprop);
        return;
    }
    let rows_per_task = (MIN_TASK_ELEMENTS / classes).max(rows.div_ceil(threads * 4)).max(1);
    pool::for_each_chunk_pair_mut(loss, rows_per_task, backprop, rows_per_task * classes, |i, l, bp| {
        work(i * rows_per_task, l, bp)
    });
}

// -------------------------------------- SparseSoftmaxCrossEntropyWithLogits

/// `SparseSoftmaxCrossEntropyWithLogits(features, labels) -> (loss,
/// backprop)` with integer class labels.
#[derive(Debug, Clone, Copy)]
pub struct SparseXentKernel;

impl Kernel for SparseXentKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "SparseSoftmaxCrossEntropyWithLogits";
        expect_inputs(OP, ctx, 2)?;
        let (logits, labels) = (ctx.input(0)?, ctx.input(1)?);
        let (ls, bs) = (logits.shape(), labels.shape());
        let invalid = |m: String| Error::InvalidArgument(format!("{OP}: {m}"));
        let [batch, classes] = ls[..] else {
            return Err(invalid(format!("logits must be 2-D, but got shape {}", ShapeDisplay(ls))));
        };
        let [label_count] = bs[..] else {
            return Err(invalid(format!("labels must be 1-D, but got shape {}", ShapeDisplay(bs))));
        };
        if label_count != batch {
            return Err(invalid(format!(
                "logits and labels must have the same first dimension, got logits shape {} and labels shape {}",
                ShapeDisplay(ls),
                ShapeDisplay(bs)
            )));
        }
        if classes == 0 {
            return Err(invalid(format!("Must have at least one class, but got logits shape {}", ShapeDisplay(ls))));
        }
        let labels = match labels.dtype() {
            DType::I32 => checked_labels(labels.data::<i32>()?, classes)?,
            DType::I64 => checked_labels(labels.data::<i64>()?, classes)?,
            other => return Err(Error::Internal(format!("{OP}: unsupported label type {other}"))),
        };
        let mut loss = ctx.allocate_output(0, &[batch])?;
        let mut backprop = ctx.allocate_output(1, ls)?;
        sparse_xent(logits.data()?, &labels, classes, loss.data_mut()?, backprop.data_mut()?);
        Ok(())
    }
}

/// The labels as indices, or TensorFlow's error for the first bad one (the
/// smallest if any is negative, else the largest), listing all labels.
fn checked_labels<I: Element + Into<i64>>(labels: &[I], classes: usize) -> Result<Vec<usize>, Error> {
    let values: Vec<i64> = labels.iter().map(|&v| v.into()).collect();
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return Ok(Vec::new());
    };
    if min < 0 || max >= classes as i64 {
        let bad = if min < 0 { min } else { max };
        let listed: Vec<String> = values.iter().map(i64::to_string).collect();
        return Err(Error::InvalidArgument(format!(
            "SparseSoftmaxCrossEntropyWithLogits: Received a label value of {bad} which is outside the valid range of [0, {classes}).  Label values: {}",
            listed.join(" ")
        )));
    }
    Ok(values.into_iter().map(|v| v as usize).collect())
}

/// Loss `log(sum) - shifted[label]` and backprop `softmax - onehot(label)`
/// per row.
fn sparse_xent(x: &[f32], labels: &[usize], classes: usize, loss: &mut [f32], backprop: &mut [f32]) {
    let rows = loss.len();
    let threads = pool::threads();
    // A function, not a closure, so that it inlines into in_wide_lanes' AVX2 copy.
    #[inline(always)]
    fn rows_of(x: &[f32], labels: &[usize], classes: usize, first: usize, loss: &mut [f32], bp: &mut [f32]) {
        let rows_x = &x[first * classes..first * classes + bp.len()];
        for (((l, bp), x), &label) in
            loss.iter_mut().zip(bp.chunks_exact_mut(classes)).zip(rows_x.chunks_exact(classes)).zip(&labels[first..])
        {
            let max = row_max(x);
            for (b, &v) in bp.iter_mut().zip(x) {
                *b = exp_f32(v - max);
            }
            let sum = row_sum(bp);
            *l = sum.ln() - (x[label] - max);
            for b in bp.iter_mut() {
                *b /= sum;
            }
            bp[label] -= 1.0;
        }
    }
    let work = |first: usize, loss: &mut [f32], bp: &mut [f32]| {
        in_wide_lanes(
            #[inline(always)]
            || rows_of(x, labels, classes, first, loss, bp),
        )
    };
    if backprop.len() < PARALLEL_MIN_ELEMENTS || threads == 1 || rows == 1 {
        work(0, loss, backprop);
        return;
    }
    let rows_per_task = (MIN_TASK_ELEMENTS / classes).max(rows.div_ceil(threads * 4)).max(1);
    pool::for_each_chunk_pair_mut(loss, rows_per_task, backprop, rows_per_task * classes, |i, l, bp| {
        work(i * rows_per_task, l, bp)
    });
}

// --------------------------------------------------------------- InTopKV2

/// `InTopKV2(predictions, targets, k)`: whether each row's target class is
/// among its `k` largest predictions, ties counting in its favour (the
/// classes strictly above it are fewer than `k`). As on TensorFlow's CPU
/// device a row with a target out of range or any non-finite prediction is
/// `false`: there is no saying where a NaN ranks.
fn in_top_k(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "InTopKV2";
    expect_inputs(OP, ctx, 3)?;
    let (predictions, targets, k) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let shape = predictions.shape();
    if shape.len() != 2 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: predictions must be 2-dimensional, got shape {}",
            ShapeDisplay(shape)
        )));
    }
    if targets.shape() != [shape[0]] {
        return Err(Error::InvalidArgument(format!(
            "{OP}: First dimension of predictions {} must match length of targets {}",
            shape[0],
            ShapeDisplay(targets.shape())
        )));
    }
    if k.len() != 1 {
        return Err(Error::InvalidArgument(format!("{OP}: k must be a scalar, got shape {}", ShapeDisplay(k.shape()))));
    }
    let k = k.to_i64s()?[0];
    let classes = shape[1];
    let (rows, targets) = (predictions.data::<f32>()?, targets.to_i64s()?);
    let mut out = ctx.allocate_output(0, &[shape[0]])?;
    for (b, o) in out.data_mut::<TfBool>()?.iter_mut().enumerate() {
        let row = &rows[b * classes..(b + 1) * classes];
        let hit = usize::try_from(targets[b]).ok().and_then(|t| row.get(t)).is_some_and(|&target| {
            row.iter().all(|v| v.is_finite()) && (row.iter().filter(|&&v| v > target).count() as i64) < k
        });
        *o = TfBool::from(hit);
    }
    Ok(())
}

// ----------------------------------------------------------------- TopKV2

/// `TopKV2(input, k)`: the `k` largest entries of each last-axis row and
/// their indices, largest first, equal values in increasing index order
/// (TensorFlow's order, `sorted` or not: an unsorted result may be in any
/// order, and this one is the sorted one). NaN ranks below every number.
fn top_k(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "TopKV2";
    expect_inputs(OP, ctx, 2)?;
    let (input, k_t) = (ctx.input(0)?, ctx.input(1)?);
    let shape = input.shape();
    let Some((&n, outer_dims)) = shape.split_last() else {
        return Err(Error::InvalidArgument(format!("{OP}: input must be at least 1-D, got a scalar")));
    };
    if k_t.len() != 1 {
        return Err(Error::InvalidArgument(format!(
            "{OP}: k must be a scalar, got shape {}",
            ShapeDisplay(k_t.shape())
        )));
    }
    let k = k_t.to_i64s()?[0];
    let k = usize::try_from(k).map_err(|_| Error::InvalidArgument(format!("{OP}: Need k >= 0, got {k}")))?;
    if k > n {
        return Err(Error::InvalidArgument(format!("{OP}: input must have at least k columns. Had {n}, needed {k}")));
    }
    let mut out_shape = outer_dims.to_vec();
    out_shape.push(k);
    let rows: usize = outer_dims.iter().product();
    let src = input.data::<f32>()?;
    let (mut values, mut indices) = (ctx.allocate_output(0, &out_shape)?, ctx.allocate_output(1, &out_shape)?);
    let values = values.data_mut::<f32>()?;
    let index_dtype = indices.dtype();
    let mut picked: Vec<usize> = Vec::with_capacity(rows * k);
    // Larger first; NaN last; ties by index.
    let before = |row: &[f32], a: usize, b: usize| {
        let (x, y) = (row[a], row[b]);
        match (x.is_nan(), y.is_nan()) {
            (false, false) => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal),
            (nan_x, nan_y) => nan_x.cmp(&nan_y),
        }
        .then(a.cmp(&b))
    };
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for r in 0..rows {
        let row = &src[r * n..(r + 1) * n];
        order.clear();
        order.extend(0..n);
        if k > 0 && k < n {
            order.select_nth_unstable_by(k - 1, |&a, &b| before(row, a, b));
        }
        order.truncate(k);
        order.sort_unstable_by(|&a, &b| before(row, a, b));
        for (j, &i) in order.iter().enumerate() {
            values[r * k + j] = row[i];
        }
        picked.extend_from_slice(&order);
    }
    match index_dtype {
        DType::I64 => indices.data_mut::<i64>()?.iter_mut().zip(&picked).for_each(|(o, &i)| *o = i as i64),
        _ => indices.data_mut::<i32>()?.iter_mut().zip(&picked).for_each(|(o, &i)| *o = i as i32),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalContext, Tensor};

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 20.0 - 10.0
            })
            .collect()
    }

    fn reference_softmax(x: &[f32], width: usize, log: bool) -> Vec<f64> {
        let mut out = Vec::new();
        for row in x.chunks(width.max(1)) {
            let max = row.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            for &v in row {
                out.push(if log { v as f64 - max - sum.ln() } else { (v as f64 - max).exp() / sum });
            }
        }
        out
    }

    #[test]
    fn softmax_matches_reference() {
        for shape in [&[1usize][..], &[7], &[3, 10], &[2, 3, 17], &[0, 5], &[4, 1], &[1000, 37], &[3, 0]] {
            let len: usize = shape.iter().product();
            let x = values(len, 7);
            for log in [false, true] {
                let out = LocalContext::run(
                    &SoftmaxKernel { log },
                    vec![Tensor::from_vec(shape, x.clone()).unwrap()],
                    &[DType::F32],
                )
                .unwrap()
                .remove(0);
                assert_eq!(out.shape(), shape);
                let want = reference_softmax(&x, *shape.last().unwrap(), log);
                for (&g, &w) in out.to_vec::<f32>().unwrap().iter().zip(&want) {
                    assert!((g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0) + 1e-7, "{shape:?} log={log}: {g} vs {w}");
                }
            }
        }
        let e = LocalContext::run(
            &SoftmaxKernel { log: false },
            vec![Tensor::from_vec(&[], vec![1f32]).unwrap()],
            &[DType::F32],
        )
        .unwrap_err();
        assert!(e.to_string().contains("logits must have >= 1 dimension, got []"), "{e}");
    }

    #[test]
    fn softmax_of_extreme_rows() {
        let x = vec![f32::NAN, 1.0, f32::INFINITY, 1.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 1000.0, -1000.0];
        let out = LocalContext::run(
            &SoftmaxKernel { log: false },
            vec![Tensor::from_vec(&[4, 2], x).unwrap()],
            &[DType::F32],
        )
        .unwrap()
        .remove(0)
        .to_vec::<f32>()
        .unwrap();
        assert!(out[..6].iter().all(|v| v.is_nan()), "{out:?}");
        assert_eq!(&out[6..], &[1.0, 0.0]);
    }

    fn reference_xent(x: &[f32], y: &[f32], classes: usize) -> (Vec<f64>, Vec<f64>) {
        let (mut loss, mut bp) = (Vec::new(), Vec::new());
        for (xr, yr) in x.chunks(classes).zip(y.chunks(classes)) {
            let max = xr.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = xr.iter().map(|&v| (v as f64 - max).exp()).sum();
            loss.push(xr.iter().zip(yr).map(|(&v, &t)| t as f64 * (sum.ln() - (v as f64 - max))).sum());
            bp.extend(xr.iter().zip(yr).map(|(&v, &t)| (v as f64 - max).exp() / sum - t as f64));
        }
        (loss, bp)
    }

    fn close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0), "{what}: element {i} is {g}, expected {w}");
        }
    }

    #[test]
    fn xent_matches_reference_with_broadcasting() {
        for (ls, bs) in [
            (&[3usize, 5][..], &[3usize, 5][..]),
            (&[1, 1], &[1, 1]),
            (&[3, 5], &[5]),
            (&[3, 5], &[1, 5]),
            (&[1, 5], &[3, 5]),
            (&[3, 1], &[3, 5]),
            (&[0, 4], &[0, 4]),
            (&[2000, 17], &[2000, 17]),
            (&[4, 0], &[4, 0]),
        ] {
            let x = values(ls.iter().product(), 1);
            let y: Vec<f32> = values(bs.iter().product(), 2).iter().map(|v| (v + 10.0) / 20.0).collect();
            let mut outs = LocalContext::run(
                &XentKernel,
                vec![Tensor::from_vec(ls, x.clone()).unwrap(), Tensor::from_vec(bs, y.clone()).unwrap()],
                &[DType::F32, DType::F32],
            )
            .unwrap();
            let bp = outs.pop().unwrap();
            let loss = outs.pop().unwrap();
            let out_shape = Broadcast::new(ls, bs).unwrap().output_shape().to_vec();
            let (batch, classes) = (out_shape[0], out_shape[1]);
            let xb = broadcast_2d(&x, ls, batch, classes);
            let yb = broadcast_2d(&y, bs, batch, classes);
            let (want_loss, want_bp) =
                if classes == 0 { (vec![0.0; batch], vec![]) } else { reference_xent(&xb, &yb, classes) };
            assert_eq!(bp.shape(), out_shape.as_slice());
            close(&loss.to_vec::<f32>().unwrap(), &want_loss, &format!("loss {ls:?} {bs:?}"));
            close(&bp.to_vec::<f32>().unwrap(), &want_bp, &format!("backprop {ls:?} {bs:?}"));
        }
        let e = LocalContext::run(
            &XentKernel,
            vec![Tensor::from_vec(&[3, 4], vec![0f32; 12]).unwrap(), Tensor::from_vec(&[2, 4], vec![0f32; 8]).unwrap()],
            &[DType::F32, DType::F32],
        )
        .unwrap_err();
        assert!(e.to_string().contains("logits_size=[3,4] labels_size=[2,4]"), "{e}");
    }

    fn run_sparse<I: Element>(ls: &[usize], x: Vec<f32>, labels: Vec<I>) -> Result<(Vec<f32>, Vec<f32>), Error> {
        let n = labels.len();
        let mut outs = LocalContext::run(
            &SparseXentKernel,
            vec![Tensor::from_vec(ls, x)?, Tensor::from_vec(&[n], labels)?],
            &[DType::F32, DType::F32],
        )?;
        let bp = outs.pop().unwrap().to_vec()?;
        Ok((outs.pop().unwrap().to_vec()?, bp))
    }

    #[test]
    fn sparse_xent_matches_dense_with_one_hot_labels() {
        for (batch, classes) in [(1, 1), (3, 5), (0, 4), (2000, 17), (7, 1000)] {
            let x = values(batch * classes, 3);
            let labels: Vec<i64> = (0..batch).map(|i| ((i * 7 + 3) % classes) as i64).collect();
            let mut onehot = vec![0f32; batch * classes];
            for (i, &l) in labels.iter().enumerate() {
                onehot[i * classes + l as usize] = 1.0;
            }
            let (want_loss, want_bp) = reference_xent(&x, &onehot, classes.max(1));
            let (loss, bp) = run_sparse(&[batch, classes], x.clone(), labels.clone()).unwrap();
            close(&loss, &want_loss[..batch], "sparse loss");
            close(&bp, &want_bp, "sparse backprop");
            let labels32: Vec<i32> = labels.iter().map(|&l| l as i32).collect();
            assert_eq!(run_sparse(&[batch, classes], x, labels32).unwrap(), (loss, bp));
        }
    }

    #[test]
    fn sparse_xent_errors_match_tensorflow() {
        let e = run_sparse(&[3, 4], vec![0.0; 12], vec![1i32, 5, -1]).unwrap_err().to_string();
        assert!(
            e.contains(
                "Received a label value of -1 which is outside the valid range of [0, 4).  Label values: 1 5 -1"
            ),
            "{e}"
        );
        let e = run_sparse(&[3, 4], vec![0.0; 12], vec![1i64, 4, 2]).unwrap_err().to_string();
        assert!(e.contains("Received a label value of 4 which"), "{e}");
        let e = run_sparse(&[3, 0], vec![], vec![0i32, 0, 0]).unwrap_err().to_string();
        assert!(e.contains("Must have at least one class, but got logits shape [3,0]"), "{e}");
        let e = run_sparse(&[3, 4], vec![0.0; 12], vec![0i32, 0]).unwrap_err().to_string();
        assert!(e.contains("must have the same first dimension"), "{e}");
        let e = run_sparse(&[12], vec![0.0; 12], vec![0i32; 12]).unwrap_err().to_string();
        assert!(e.contains("logits must be 2-D, but got shape [12]"), "{e}");
    }

    #[test]
    fn top_k_orders_ties_by_index_and_nan_last() {
        let row = vec![1.0f32, 3.0, f32::NAN, 3.0, -1.0, 2.0];
        let run = |k: i64, index: DType| {
            let inputs = vec![Tensor::from_vec(&[1, 6], row.clone()).unwrap(), Tensor::from_vec(&[], vec![k]).unwrap()];
            LocalContext::run(&FnKernel(top_k), inputs, &[DType::F32, index]).unwrap()
        };
        let out = run(3, DType::I32);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [3.0, 3.0, 2.0]);
        assert_eq!(out[1].to_vec::<i32>().unwrap(), [1, 3, 5]);
        let all = run(6, DType::I64);
        assert_eq!(all[1].to_vec::<i64>().unwrap(), [1, 3, 5, 0, 4, 2]);
        assert_eq!(run(0, DType::I32)[0].shape(), [1, 0]);
        let too_many =
            vec![Tensor::from_vec(&[2], vec![1f32, 2.0]).unwrap(), Tensor::from_vec(&[], vec![3i32]).unwrap()];
        let error = LocalContext::run(&FnKernel(top_k), too_many, &[DType::F32, DType::I32]).unwrap_err();
        assert!(error.to_string().contains("at least k columns. Had 2, needed 3"), "{error}");
    }

    #[test]
    fn in_top_k_counts_ties_for_the_target_and_refuses_non_finite_rows() {
        let predictions = vec![0.1f32, 0.5, 0.5, 0.2, /* NaN row */ 0.3, f32::NAN, 0.1, 0.0];
        let run = |targets: Vec<i64>, k: i64| {
            let inputs = vec![
                Tensor::from_vec(&[2, 4], predictions.clone()).unwrap(),
                Tensor::from_vec(&[2], targets).unwrap(),
                Tensor::from_vec(&[], vec![k]).unwrap(),
            ];
            let out = LocalContext::run(&FnKernel(in_top_k), inputs, &[DType::Bool]).unwrap();
            out[0].to_vec::<TfBool>().unwrap().iter().map(|b| b.get()).collect::<Vec<_>>()
        };
        assert_eq!(run(vec![2, 0], 1), [true, false]);
        assert_eq!(run(vec![3, 0], 2), [false, false]);
        assert_eq!(run(vec![3, 0], 3), [true, false]);
        assert_eq!(run(vec![4, -1], 4), [false, false]);
    }
}
