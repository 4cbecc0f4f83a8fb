//! float32 `FusedBatchNormV3` and `FusedBatchNormGradV3` (channels last:
//! NHWC, or NDHWC for 5-D inputs), following TensorFlow's CPU kernel
//! (`fused_batch_norm_op.cc`) output by output:
//!
//! Forward, `is_training=True` (statistics over every axis but the last,
//! `rest` elements per channel):
//! - `y = (x - batch_mean) · rsqrt(batch_var + epsilon) · scale + offset`,
//!   with `batch_var` the biased (÷ rest) variance;
//! - `batch_mean` output: the batch mean, or with `exponential_avg_factor`
//!   `f ≠ 1`, `(1 - f)·mean_in + f·batch_mean`;
//! - `batch_variance` output: the Bessel-corrected variance
//!   `batch_var · rest / max(rest - 1, 1)`, blended the same way;
//! - `reserve_space_1` / `reserve_space_2`: the batch mean and the *biased*
//!   batch variance (not an inverse: that is cuDNN's convention, CPU keeps
//!   the variance), which the gradient reads back;
//! - `reserve_space_3`: a scalar 0 (TensorFlow's CPU placeholder).
//!
//! Forward, `is_training=False`: `y` uses the given mean and variance, which
//! are passed through as `batch_mean` / `batch_variance` (and, where
//! TensorFlow's CPU kernel leaves the reserve spaces unwritten, as
//! `reserve_space_1/2`). An empty `x` gives NaN statistics, like TF.
//!
//! Gradient: `reserve_space_1/2` are the saved mean and biased variance
//! (training) or the population statistics (inference); `reserve_space_4/5`
//! are empty `[0]` placeholders.
//!
//! Per-channel sums accumulate in f64 over row chunks spread on the pool;
//! the elementwise passes run over contiguous rows of `depth` channels.

use super::pool;
use super::shape::ShapeDisplay;
use super::{expect_inputs, Attrs, DType, Kernel, KernelDef, OpContext, Tensor};
use crate::error::Error;

const T_U_F32: &[(&str, &[DType])] = &[("T", &[DType::F32]), ("U", &[DType::F32])];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("FusedBatchNormV3", T_U_F32, |a| Ok(Box::new(BatchNormKernel::new("FusedBatchNormV3", a)?))),
    KernelDef::new("FusedBatchNormGradV3", T_U_F32, |a| {
        Ok(Box::new(BatchNormGradKernel(BatchNormKernel::new("FusedBatchNormGradV3", a)?)))
    }),
];

/// Below this many elements the op runs on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

/// Smallest number of elements one task handles.
const MIN_CHUNK_ELEMENTS: usize = 8 * 1024;

fn invalid(op: &str, message: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{op}: {message}"))
}

#[derive(Debug)]
struct BatchNormKernel {
    op: &'static str,
    epsilon: f32,
    exponential_avg_factor: f32,
    is_training: bool,
}

impl BatchNormKernel {
    fn new(op: &'static str, attrs: &dyn Attrs) -> Result<Self, Error> {
        let epsilon = attrs.float("epsilon")?;
        let exponential_avg_factor =
            if attrs.has("exponential_avg_factor") { attrs.float("exponential_avg_factor")? } else { 1.0 };
        let is_training = if attrs.has("is_training") { attrs.bool("is_training")? } else { true };
        if attrs.has("data_format") {
            let format = attrs.string("data_format")?;
            if format != "NHWC" && format != "NDHWC" {
                return Err(invalid(
                    op,
                    format!(
                        "only channels-last data formats (NHWC, NDHWC) are supported on the WASM device, got {format}"
                    ),
                ));
            }
        }
        Ok(BatchNormKernel { op, epsilon, exponential_avg_factor, is_training })
    }

    /// `x` must be 4-D or 5-D; returns (rest, depth).
    fn layout(&self, what: &str, x: &Tensor) -> Result<(usize, usize), Error> {
        if x.rank() != 4 && x.rank() != 5 {
            return Err(invalid(
                self.op,
                format!("{what} must be 4 or 5-dimensional, got shape {}", ShapeDisplay(x.shape())),
            ));
        }
        let depth = x.shape()[x.rank() - 1];
        Ok((x.len().checked_div(depth).unwrap_or(0), depth))
    }

    fn vector<'a>(&self, what: &str, t: &'a Tensor, depth: Option<usize>) -> Result<&'a [f32], Error> {
        if t.rank() != 1 {
            return Err(invalid(
                self.op,
                format!("{what} must be 1-dimensional, got shape {}", ShapeDisplay(t.shape())),
            ));
        }
        if let Some(depth) = depth {
            if t.len() != depth {
                return Err(invalid(
                    self.op,
                    format!(
                        "{what} must have the same number of elements as the channels of x, got {} and {depth}",
                        t.len()
                    ),
                ));
            }
        }
        t.data()
    }
}

/// Per-row-chunk plan shared by the reductions and elementwise passes.
#[derive(Debug, Clone, Copy)]
struct Rows {
    rest: usize,
    depth: usize,
    /// Rows per task.
    chunk: usize,
    parallel: bool,
}

impl Rows {
    fn new(rest: usize, depth: usize) -> Self {
        let len = rest * depth;
        let threads = pool::threads();
        let parallel = len >= PARALLEL_MIN_ELEMENTS && threads > 1;
        let chunk =
            if parallel { rest.div_ceil(threads * 4).max(MIN_CHUNK_ELEMENTS.div_ceil(depth.max(1))) } else { rest }
                .max(1);
        Rows { rest, depth, chunk, parallel }
    }

    /// Sums `width` per-channel quantities over all rows: `f(first_row,
    /// rows, acc)` adds the rows `first_row..first_row + rows` into `acc`
    /// (`width · depth` accumulators).
    fn sums<F>(&self, width: usize, f: F) -> Vec<f64>
    where
        F: Fn(usize, usize, &mut [f64]) + Sync,
    {
        let size = width * self.depth;
        let tasks = self.rest.div_ceil(self.chunk);
        let run = |t: usize| {
            let mut acc = vec![0f64; size];
            let first = t * self.chunk;
            f(first, self.chunk.min(self.rest - first), &mut acc);
            acc
        };
        let partials: Vec<Vec<f64>> = if self.parallel {
            let mut partials = vec![Vec::new(); tasks];
            pool::for_each_chunk_mut(&mut partials, 1, |t, slot| slot[0] = run(t));
            partials
        } else {
            (0..tasks).map(run).collect()
        };
        let mut total = vec![0f64; size];
        for part in partials {
            for (t, p) in total.iter_mut().zip(part) {
                *t += p;
            }
        }
        total
    }

    /// Fills `out` (`rest × depth`) row chunk by row chunk: `f(first_row, chunk)`.
    fn fill<F>(&self, out: &mut [f32], f: F)
    where
        F: Fn(usize, &mut [f32]) + Sync + Send,
    {
        let chunk_len = self.chunk * self.depth;
        if out.is_empty() {
            return;
        }
        if self.parallel {
            pool::for_each_chunk_mut(out, chunk_len, |t, c| f(t * self.chunk, c));
        } else {
            out.chunks_mut(chunk_len).enumerate().for_each(|(t, c)| f(t * self.chunk, c));
        }
    }
}

fn rsqrt(v: f32) -> f32 {
    1.0 / v.sqrt()
}

impl Kernel for BatchNormKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = self.op;
        expect_inputs(op, ctx, 5)?;
        let (x, scale, offset, mean_in, var_in) =
            (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.input(3)?, ctx.input(4)?);
        let (rest, depth) = self.layout("input", &x)?;
        let scale_v = self.vector("scale", &scale, Some(depth))?;
        let offset_v = self.vector("offset", &offset, Some(depth))?;
        let needs_stats = !self.is_training || self.exponential_avg_factor != 1.0;
        let stats_depth = needs_stats.then_some(depth);
        let mean_v = self.vector("mean", &mean_in, stats_depth)?;
        let var_v = self.vector("variance", &var_in, stats_depth)?;

        let mut y = ctx.allocate_output(0, x.shape())?;
        let mut outs = Vec::with_capacity(4);
        for index in 1..5 {
            outs.push(ctx.allocate_output(index, &[depth])?);
        }
        let mut reserve_3 = ctx.allocate_output(5, &[])?;
        reserve_3.data_mut::<f32>()?.fill(0.0);

        let mut stats = [(); 4].map(|_| vec![0f32; depth]); // batch_mean, batch_var, saved_mean, saved_var
        if x.is_empty() {
            for s in &mut stats {
                s.fill(f32::NAN);
            }
        } else if self.is_training {
            let rows = Rows::new(rest, depth);
            let xd = x.data::<f32>()?;
            let sums = rows.sums(1, |first, n, acc| {
                for row in xd[first * depth..(first + n) * depth].chunks_exact(depth) {
                    for (a, &v) in acc.iter_mut().zip(row) {
                        *a += f64::from(v);
                    }
                }
            });
            let mean: Vec<f32> = sums.iter().map(|&s| (s / rest as f64) as f32).collect();
            let squares = rows.sums(1, |first, n, acc| {
                for row in xd[first * depth..(first + n) * depth].chunks_exact(depth) {
                    for ((a, &v), &m) in acc.iter_mut().zip(row).zip(&mean) {
                        let c = f64::from(v - m);
                        *a += c * c;
                    }
                }
            });
            let var: Vec<f32> = squares.iter().map(|&s| (s / rest as f64) as f32).collect();
            let factor: Vec<f32> = var.iter().zip(scale_v).map(|(&v, &s)| rsqrt(v + self.epsilon) * s).collect();
            normalize(&rows, xd, &mean, &factor, offset_v, y.data_mut()?);

            let adjust = rest as f32 / rest.saturating_sub(1).max(1) as f32;
            let f = self.exponential_avg_factor;
            for c in 0..depth {
                if f == 1.0 {
                    stats[0][c] = mean[c];
                    stats[1][c] = var[c] * adjust;
                } else {
                    stats[0][c] = (1.0 - f) * mean_v[c] + f * mean[c];
                    stats[1][c] = (1.0 - f) * var_v[c] + (f * adjust) * var[c];
                }
            }
            stats[2] = mean;
            stats[3] = var;
        } else {
            let rows = Rows::new(rest, depth);
            let factor: Vec<f32> = var_v.iter().zip(scale_v).map(|(&v, &s)| rsqrt(v + self.epsilon) * s).collect();
            normalize(&rows, x.data()?, mean_v, &factor, offset_v, y.data_mut()?);
            stats = [mean_v.to_vec(), var_v.to_vec(), mean_v.to_vec(), var_v.to_vec()];
        }
        for (out, values) in outs.iter_mut().zip(&stats) {
            out.data_mut::<f32>()?.copy_from_slice(values);
        }
        Ok(())
    }
}

/// `y = (x - mean) · factor + offset`, per channel.
fn normalize(rows: &Rows, x: &[f32], mean: &[f32], factor: &[f32], offset: &[f32], y: &mut [f32]) {
    let depth = rows.depth;
    rows.fill(y, |first, out| {
        let src = &x[first * depth..first * depth + out.len()];
        for (o_row, x_row) in out.chunks_exact_mut(depth).zip(src.chunks_exact(depth)) {
            for ((((o, &v), &m), &f), &b) in o_row.iter_mut().zip(x_row).zip(mean).zip(factor).zip(offset) {
                *o = (v - m) * f + b;
            }
        }
    });
}

#[derive(Debug)]
struct BatchNormGradKernel(BatchNormKernel);

impl Kernel for BatchNormGradKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let k = &self.0;
        let op = k.op;
        expect_inputs(op, ctx, 6)?;
        let (dy, x, scale, mean, var) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.input(3)?, ctx.input(4)?);
        k.layout("y_backprop", &dy)?;
        let (rest, depth) = k.layout("x", &x)?;
        k.vector("scale", &scale, None)?;
        k.vector("reserve_space_1", &mean, None)?;
        k.vector("reserve_space_2", &var, None)?;
        if x.shape() != dy.shape() {
            return Err(invalid(
                op,
                format!(
                    "x and y_backprop must have same shape, but x has shape {} and y_backprop has shape {}",
                    ShapeDisplay(x.shape()),
                    ShapeDisplay(dy.shape())
                ),
            ));
        }
        let scale_v = k.vector("scale", &scale, Some(depth))?;
        let mean_v = k.vector("reserve_space_1", &mean, Some(depth))?;
        let var_v = k.vector("reserve_space_2", &var, Some(depth))?;

        let mut dx = ctx.allocate_output(0, x.shape())?;
        let mut dscale = ctx.allocate_output(1, &[depth])?;
        let mut doffset = ctx.allocate_output(2, &[depth])?;
        ctx.allocate_output(3, &[0])?;
        ctx.allocate_output(4, &[0])?;
        if x.is_empty() {
            dscale.data_mut::<f32>()?.fill(0.0);
            doffset.data_mut::<f32>()?.fill(0.0);
            return Ok(());
        }
        let (xd, dyd) = (x.data::<f32>()?, dy.data::<f32>()?);
        let rows = Rows::new(rest, depth);
        // sums[..depth] = Σ dy, sums[depth..] = Σ dy·(x - mean)
        let sums = rows.sums(2, |first, n, acc| {
            let (acc_dy, acc_dyx) = acc.split_at_mut(depth);
            let range = first * depth..(first + n) * depth;
            for (x_row, dy_row) in xd[range.clone()].chunks_exact(depth).zip(dyd[range].chunks_exact(depth)) {
                for ((((a, b), &v), &g), &m) in
                    acc_dy.iter_mut().zip(acc_dyx.iter_mut()).zip(x_row).zip(dy_row).zip(mean_v)
                {
                    *a += f64::from(g);
                    *b += f64::from(g) * f64::from(v - m);
                }
            }
        });
        let coef0: Vec<f32> = var_v.iter().map(|&v| rsqrt(v + k.epsilon)).collect();
        let (sum_dy, sum_dyx) = sums.split_at(depth);
        for c in 0..depth {
            dscale.data_mut::<f32>()?[c] = (sum_dyx[c] * f64::from(coef0[c])) as f32;
            doffset.data_mut::<f32>()?[c] = sum_dy[c] as f32;
        }
        let coef1: Vec<f32> = scale_v.iter().zip(&coef0).map(|(&s, &c)| s * c).collect();
        if k.is_training {
            let dy_mean: Vec<f32> = sum_dy.iter().map(|&s| (s / rest as f64) as f32).collect();
            let coef2: Vec<f32> = sum_dyx.iter().zip(&coef0).map(|(&s, &c)| c * c * (s / rest as f64) as f32).collect();
            rows.fill(dx.data_mut()?, |first, out| {
                let range = first * depth..first * depth + out.len();
                let rows_in = xd[range.clone()].chunks_exact(depth).zip(dyd[range].chunks_exact(depth));
                for (o_row, (x_row, dy_row)) in out.chunks_exact_mut(depth).zip(rows_in) {
                    for c in 0..depth {
                        let centered = x_row[c] - mean_v[c];
                        o_row[c] = coef1[c] * ((dy_row[c] - dy_mean[c]) - centered * coef2[c]);
                    }
                }
            });
        } else {
            rows.fill(dx.data_mut()?, |first, out| {
                let src = &dyd[first * depth..first * depth + out.len()];
                for (o_row, dy_row) in out.chunks_exact_mut(depth).zip(src.chunks_exact(depth)) {
                    for ((o, &g), &c) in o_row.iter_mut().zip(dy_row).zip(&coef1) {
                        *o = g * c;
                    }
                }
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::LocalContext;

    struct TestAttrs(HashMap<&'static str, f32>, bool, &'static str);

    impl Attrs for TestAttrs {
        fn has(&self, name: &str) -> bool {
            self.0.contains_key(name) || name == "is_training" || name == "data_format"
        }
        fn bool(&self, _: &str) -> Result<bool, Error> {
            Ok(self.1)
        }
        fn int(&self, name: &str) -> Result<i64, Error> {
            Err(Error::Internal(format!("no int {name}")))
        }
        fn float(&self, name: &str) -> Result<f32, Error> {
            self.0.get(name).copied().ok_or_else(|| Error::Internal(format!("no float {name}")))
        }
        fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
            Err(Error::Internal(format!("no ints {name}")))
        }
        fn string(&self, _: &str) -> Result<String, Error> {
            Ok(self.2.to_owned())
        }
        fn dtype(&self, name: &str) -> Result<DType, Error> {
            Err(Error::Internal(format!("no dtype {name}")))
        }
    }

    fn attrs(epsilon: f32, factor: f32, training: bool) -> TestAttrs {
        TestAttrs(HashMap::from([("epsilon", epsilon), ("exponential_avg_factor", factor)]), training, "NHWC")
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 1.0
            })
            .collect()
    }

    fn close(what: &str, got: &[f32], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
        }
    }

    fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    /// Reference statistics: (mean, biased variance) per channel.
    fn moments(x: &[f32], depth: usize) -> (Vec<f64>, Vec<f64>) {
        let rest = x.len() / depth;
        let mut mean = vec![0f64; depth];
        for (i, &v) in x.iter().enumerate() {
            mean[i % depth] += v as f64 / rest as f64;
        }
        let mut var = vec![0f64; depth];
        for (i, &v) in x.iter().enumerate() {
            var[i % depth] += (v as f64 - mean[i % depth]).powi(2) / rest as f64;
        }
        (mean, var)
    }

    fn check(shape: &[usize], training: bool, factor: f32) {
        let eps = 1e-3f32;
        let depth = *shape.last().unwrap();
        let len: usize = shape.iter().product();
        let rest = len / depth;
        let x = values(len, 1);
        let scale = values(depth, 2);
        let offset = values(depth, 3);
        let mean_in: Vec<f32> = values(depth, 4);
        let var_in: Vec<f32> = values(depth, 5).iter().map(|v| v.abs() + 0.5).collect();
        let kernel = BatchNormKernel::new("FusedBatchNormV3", &attrs(eps, factor, training)).unwrap();
        let out = LocalContext::run(
            &kernel,
            vec![
                t(shape, x.clone()),
                t(&[depth], scale.clone()),
                t(&[depth], offset.clone()),
                t(&[depth], mean_in.clone()),
                t(&[depth], var_in.clone()),
            ],
            &[DType::F32; 6],
        )
        .unwrap();
        let (m, v) = if training {
            moments(&x, depth)
        } else {
            (mean_in.iter().map(|&v| v as f64).collect(), var_in.iter().map(|&v| v as f64).collect())
        };
        let y_ref: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &xv)| {
                let c = i % depth;
                (xv as f64 - m[c]) / (v[c] + eps as f64).sqrt() * scale[c] as f64 + offset[c] as f64
            })
            .collect();
        close("y", &out[0].to_vec::<f32>().unwrap(), &y_ref);
        if training {
            let f = factor as f64;
            let adjust = rest as f64 / (rest.max(2) - 1) as f64;
            let bm: Vec<f64> = (0..depth).map(|c| (1.0 - f) * mean_in[c] as f64 + f * m[c]).collect();
            let bv: Vec<f64> = (0..depth).map(|c| (1.0 - f) * var_in[c] as f64 + f * v[c] * adjust).collect();
            close("batch_mean", &out[1].to_vec::<f32>().unwrap(), &bm);
            close("batch_variance", &out[2].to_vec::<f32>().unwrap(), &bv);
        } else {
            close("batch_mean", &out[1].to_vec::<f32>().unwrap(), &m);
            close("batch_variance", &out[2].to_vec::<f32>().unwrap(), &v);
        }
        close("reserve_space_1", &out[3].to_vec::<f32>().unwrap(), &m);
        close("reserve_space_2", &out[4].to_vec::<f32>().unwrap(), &v);
        assert_eq!(out[5].shape(), &[] as &[usize]);
        assert_eq!(out[5].to_vec::<f32>().unwrap(), vec![0.0]);

        // Gradient, fed the reserve spaces as TensorFlow does.
        let dy = values(len, 6);
        let grad =
            BatchNormGradKernel(BatchNormKernel::new("FusedBatchNormGradV3", &attrs(eps, factor, training)).unwrap());
        let g = LocalContext::run(
            &grad,
            vec![
                t(shape, dy.clone()),
                t(shape, x.clone()),
                t(&[depth], scale.clone()),
                t(&[depth], out[3].to_vec().unwrap()),
                t(&[depth], out[4].to_vec().unwrap()),
                t(&[], vec![0.0]),
            ],
            &[DType::F32; 5],
        )
        .unwrap();
        let mut sum_dy = vec![0f64; depth];
        let mut sum_dyx = vec![0f64; depth];
        for i in 0..len {
            sum_dy[i % depth] += dy[i] as f64;
            sum_dyx[i % depth] += dy[i] as f64 * (x[i] as f64 - m[i % depth]);
        }
        let inv: Vec<f64> = v.iter().map(|&v| 1.0 / (v + eps as f64).sqrt()).collect();
        let dx_ref: Vec<f64> = (0..len)
            .map(|i| {
                let c = i % depth;
                if training {
                    let xc = x[i] as f64 - m[c];
                    scale[c] as f64
                        * inv[c]
                        * (dy[i] as f64 - sum_dy[c] / rest as f64 - xc * inv[c] * inv[c] * sum_dyx[c] / rest as f64)
                } else {
                    dy[i] as f64 * scale[c] as f64 * inv[c]
                }
            })
            .collect();
        close("x_backprop", &g[0].to_vec::<f32>().unwrap(), &dx_ref);
        let ds: Vec<f64> = (0..depth).map(|c| sum_dyx[c] * inv[c]).collect();
        close("scale_backprop", &g[1].to_vec::<f32>().unwrap(), &ds);
        close("offset_backprop", &g[2].to_vec::<f32>().unwrap(), &sum_dy);
        assert_eq!(g[3].shape(), &[0]);
        assert_eq!(g[4].shape(), &[0]);
    }

    #[test]
    fn batch_norm_matches_reference() {
        for shape in
            [&[1, 1, 1, 1][..], &[2, 3, 5, 7], &[1, 1, 1, 3], &[3, 7, 11, 1], &[2, 3, 2, 5, 4], &[32, 14, 14, 8]]
        {
            for (training, factor) in [(true, 1.0), (true, 0.01), (false, 1.0)] {
                check(shape, training, factor);
            }
        }
    }

    #[test]
    fn empty_input_gives_nan_statistics_and_zero_gradients() {
        let kernel = BatchNormKernel::new("FusedBatchNormV3", &attrs(1e-3, 1.0, true)).unwrap();
        let out = LocalContext::run(
            &kernel,
            vec![
                t(&[0, 2, 2, 3], vec![]),
                t(&[3], vec![1.0; 3]),
                t(&[3], vec![0.0; 3]),
                t(&[0], vec![]),
                t(&[0], vec![]),
            ],
            &[DType::F32; 6],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[0, 2, 2, 3]);
        assert!(out[1].to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
        assert!(out[2].to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));

        let grad = BatchNormGradKernel(BatchNormKernel::new("FusedBatchNormGradV3", &attrs(1e-3, 1.0, true)).unwrap());
        let g = LocalContext::run(
            &grad,
            vec![
                t(&[0, 2, 2, 3], vec![]),
                t(&[0, 2, 2, 3], vec![]),
                t(&[3], vec![1.0; 3]),
                t(&[3], vec![0.0; 3]),
                t(&[3], vec![1.0; 3]),
                t(&[], vec![0.0]),
            ],
            &[DType::F32; 5],
        )
        .unwrap();
        assert_eq!(g[1].to_vec::<f32>().unwrap(), vec![0.0; 3]);
        assert_eq!(g[2].to_vec::<f32>().unwrap(), vec![0.0; 3]);
    }

    #[test]
    fn invalid_shapes_are_errors() {
        let kernel = BatchNormKernel::new("FusedBatchNormV3", &attrs(1e-3, 1.0, false)).unwrap();
        let run = |x: &[usize], c: usize, m: usize| {
            let len = x.iter().product();
            LocalContext::run(
                &kernel,
                vec![
                    t(x, vec![0.0; len]),
                    t(&[c], vec![1.0; c]),
                    t(&[c], vec![0.0; c]),
                    t(&[m], vec![0.0; m]),
                    t(&[m], vec![1.0; m]),
                ],
                &[DType::F32; 6],
            )
            .map(|_| ())
            .unwrap_err()
            .to_string()
        };
        assert!(run(&[2, 3, 4], 4, 4).contains("4 or 5-dimensional"));
        assert!(run(&[1, 2, 3, 4], 3, 4).contains("channels"));
        assert!(run(&[1, 2, 3, 4], 4, 3).contains("variance") || run(&[1, 2, 3, 4], 4, 3).contains("mean"));
        let nchw = TestAttrs(HashMap::from([("epsilon", 1e-3)]), true, "NCHW");
        assert!(BatchNormKernel::new("FusedBatchNormV3", &nchw).is_err());
    }
}
