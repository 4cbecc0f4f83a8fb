//! float32 NHWC `DepthwiseConv2dNative` and its two backprops, the ops
//! behind Keras' `DepthwiseConv2D` and `SeparableConv2D`.
//!
//! Each input channel `c` has its own `M` filters (`filter[kh, kw, c, m]`)
//! and output channel `c·M + m` sees only input channel `c`, so there is no
//! sum over channels to hand to a matrix product: the loops are direct.
//! NHWC keeps a pixel's channels contiguous and a filter tap is the same
//! `C·M`-vector for every pixel, so every inner loop is `acc += a · b` over
//! a block of 32 (then 8, then 1) channels whose sums stay in registers
//! across the window's taps, compiled for AVX2 where the CPU has it. With
//! `M > 1` an input row is first spread (each channel repeated `M` times)
//! to line up with the output channels, and the input gradient adds up a
//! pixel's `M` sums per channel at the end.
//!
//! Work is split by rows that one task owns whole, so no two threads write
//! the same float and every element is summed in the same order however
//! the rows were split:
//!
//! - forward: output rows;
//! - input gradient: input rows, each gathering from the output rows whose
//!   windows reach it;
//! - filter gradient: groups of output rows, each summing into its own
//!   partial filter; the partials are added in group order. The grouping
//!   depends on the shapes only, not on the number of threads.
//!
//! Differences from TensorFlow's CPU kernels, all where the CPU gives no
//! usable answer: dilations above 1 are computed (the CPU's forward refuses
//! them and its backprops ignore them, returning the undilated gradients),
//! row and column strides may differ (the CPU refuses), and a gradient with
//! no terms (an empty batch, no output rows, `M = 0`) is zeros (the CPU
//! leaves it uninitialised).
//!
//! Unlike `Conv2D` the ops are not [deferrable](crate::KernelDef::deferrable):
//! whether the overlap would pay for the hand-off has not been measured.

use std::ops::Range;

use smallvec::SmallVec;

use super::{invalid, rank4, shape_arg, ConvWindows, Window, PARALLEL_MIN_WORK};
use crate::error::Error;
use crate::shape::ShapeDisplay;
use crate::vmath::in_wide_lanes;
use crate::{expect_inputs, pool, Attrs, Kernel, OpContext, Tensor};

/// Multiply-adds per task when the work is split over the pool: enough to
/// be worth a hand-off.
const MIN_TASK_WORK: usize = 32 * 1024;

/// Tasks per thread, so that a thread that starts late takes fewer.
const TASKS_PER_THREAD: usize = 4;

/// At most this many partial filters for the filter gradient (the
/// grouping must not depend on the thread count, see the module docs).
const MAX_FILTER_GROUPS: usize = 16;

/// Floats of partial filters the filter gradient may allocate beyond one.
const MAX_PARTIAL_FLOATS: usize = 4 << 20;

/// Runs `$body` for every block of channels in `0..$width`: with
/// `$offset` the block's first channel and `$lanes` a constant block width,
/// 32 while whole blocks of 32 fit, then 8, then 1. A constant width lets
/// the block's sums live in registers.
macro_rules! channel_blocks {
    ($width:expr, |$offset:ident, $lanes:ident| $body:block) => {{
        let width: usize = $width;
        let mut $offset = 0usize;
        channel_blocks!(@blocks width, $offset, $lanes, 32, $body);
        channel_blocks!(@blocks width, $offset, $lanes, 8, $body);
        channel_blocks!(@blocks width, $offset, $lanes, 1, $body);
    }};
    (@blocks $width:ident, $offset:ident, $lanes:ident, $n:literal, $body:block) => {
        while $width - $offset >= $n {
            const $lanes: usize = $n;
            $body
            $offset += $n;
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DepthwiseOp {
    Forward,
    BackpropInput,
    BackpropFilter,
}

impl DepthwiseOp {
    fn name(self) -> &'static str {
        match self {
            DepthwiseOp::Forward => "DepthwiseConv2dNative",
            DepthwiseOp::BackpropInput => "DepthwiseConv2dNativeBackpropInput",
            DepthwiseOp::BackpropFilter => "DepthwiseConv2dNativeBackpropFilter",
        }
    }
}

#[derive(Debug)]
pub(super) struct DepthwiseKernel {
    op: DepthwiseOp,
    windows: ConvWindows,
}

impl DepthwiseKernel {
    pub(super) fn new(op: DepthwiseOp, attrs: &dyn Attrs) -> Result<Self, Error> {
        Ok(DepthwiseKernel { op, windows: ConvWindows::from_attrs(op.name(), attrs, 2)? })
    }

    /// Checks input and filter shapes and computes the output geometry.
    fn geometry(&self, input: [usize; 4], filter: [usize; 4]) -> Result<DepthwiseGeom, Error> {
        let name = self.op.name();
        let [n, ih, iw, c] = input;
        let [kh, kw, fc, m] = filter;
        if fc != c {
            return Err(invalid(
                name,
                format!(
                    "input and filter must have the same depth: {c} vs {fc} (input {}, filter {})",
                    ShapeDisplay(&input),
                    ShapeDisplay(&filter)
                ),
            ));
        }
        let [rows, cols] = self.windows.windows(name, [ih, iw], [kh, kw])?;
        let fits = |dims: &[usize]| {
            dims.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).is_some_and(|t| isize::try_from(t).is_ok())
        };
        if !fits(&[n, ih, iw, c, m]) || !fits(&[n, rows.output, cols.output, c, m]) || !fits(&[kh, kw, c, m]) {
            return Err(invalid(
                name,
                format!("shapes are too large: input {}, filter {}", ShapeDisplay(&input), ShapeDisplay(&filter)),
            ));
        }
        Ok(DepthwiseGeom { n, c, m, rows, cols })
    }

    fn check_grad(&self, geom: &DepthwiseGeom, grad: [usize; 4]) -> Result<(), Error> {
        let shapes = [geom.input_shape(), geom.filter_shape(), geom.output_shape()];
        self.windows.check_out_backprop(self.op.name(), [&shapes[0], &shapes[1], &shapes[2]], &grad)
    }

    /// A 4-value `input_sizes` / `filter_sizes` argument.
    fn sizes(&self, what: &str, tensor: &Tensor) -> Result<[usize; 4], Error> {
        let sizes = shape_arg(self.op.name(), what, tensor)?;
        <[usize; 4]>::try_from(sizes.as_slice())
            .map_err(|_| invalid(self.op.name(), format!("{what} must contain 4 values, got {}", sizes.len())))
    }
}

impl Kernel for DepthwiseKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = self.op.name();
        match self.op {
            DepthwiseOp::Forward => {
                expect_inputs(name, ctx, 2)?;
                let (input, filter) = (ctx.input(0)?, ctx.input(1)?);
                let geom =
                    self.geometry(rank4(name, "input", input.shape())?, rank4(name, "filter", filter.shape())?)?;
                let mut out = ctx.allocate_output(0, &geom.output_shape())?;
                geom.forward(input.data()?, filter.data()?, out.data_mut()?)
            }
            DepthwiseOp::BackpropInput => {
                expect_inputs(name, ctx, 3)?;
                let (sizes, filter, grad) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
                let filter_shape = rank4(name, "filter", filter.shape())?;
                let grad_shape = rank4(name, "out_backprop", grad.shape())?;
                let geom = self.geometry(self.sizes("input_sizes", &sizes)?, filter_shape)?;
                self.check_grad(&geom, grad_shape)?;
                let mut out = ctx.allocate_output(0, &geom.input_shape())?;
                geom.backprop_input(grad.data()?, filter.data()?, out.data_mut()?)
            }
            DepthwiseOp::BackpropFilter => {
                expect_inputs(name, ctx, 3)?;
                let (input, sizes, grad) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
                let input_shape = rank4(name, "input", input.shape())?;
                let grad_shape = rank4(name, "out_backprop", grad.shape())?;
                let geom = self.geometry(input_shape, self.sizes("filter_sizes", &sizes)?)?;
                self.check_grad(&geom, grad_shape)?;
                let mut out = ctx.allocate_output(0, &geom.filter_shape())?;
                geom.backprop_filter(input.data()?, grad.data()?, out.data_mut()?)
            }
        }
    }
}

/// The checked shape of one depthwise convolution: `n` images of `c`
/// channels, `m` filters per channel.
#[derive(Debug, Clone, Copy)]
struct DepthwiseGeom {
    n: usize,
    c: usize,
    m: usize,
    rows: Window,
    cols: Window,
}

impl DepthwiseGeom {
    fn input_shape(&self) -> [usize; 4] {
        [self.n, self.rows.input, self.cols.input, self.c]
    }

    fn output_shape(&self) -> [usize; 4] {
        [self.n, self.rows.output, self.cols.output, self.c * self.m]
    }

    fn filter_shape(&self) -> [usize; 4] {
        [self.rows.size, self.cols.size, self.c, self.m]
    }

    /// Floats in one input row: `iw·c`.
    fn input_row(&self) -> usize {
        self.cols.input * self.c
    }

    /// Floats in one input row spread to the output channels: `iw·c·m`.
    fn spread_row_len(&self) -> usize {
        self.input_row() * self.m
    }

    /// Floats in one output row: `ow·c·m`.
    fn output_row(&self) -> usize {
        self.cols.output * self.c * self.m
    }

    /// Floats in one filter tap, one output pixel: `c·m`.
    fn tap(&self) -> usize {
        self.c * self.m
    }

    fn len(shape: [usize; 4]) -> usize {
        shape.iter().product()
    }

    /// Multiply-adds in one output row, for every tap.
    fn row_work(&self) -> usize {
        self.output_row().saturating_mul(self.rows.size).saturating_mul(self.cols.size).max(1)
    }

    /// Every slice holds exactly what the shapes say: below this the
    /// indexing needs no further checks.
    fn check_lengths(&self, name: &str, lengths: [(&str, usize, [usize; 4]); 3]) -> Result<(), Error> {
        for (what, got, shape) in lengths {
            if got != Self::len(shape) {
                return Err(Error::Internal(format!(
                    "{name}: {what} has {got} elements, its shape {} needs {}",
                    ShapeDisplay(&shape),
                    Self::len(shape)
                )));
            }
        }
        Ok(())
    }

    /// Runs `work(first_row, rows)` over `out` in whole rows of `row_len`
    /// floats, `row_work` multiply-adds each, on the pool when large.
    fn split_rows(out: &mut [f32], row_len: usize, row_work: usize, work: impl Fn(usize, &mut [f32]) + Sync) {
        if out.is_empty() || row_len == 0 {
            return;
        }
        let rows = out.len() / row_len;
        let threads = pool::threads();
        if rows.saturating_mul(row_work) < PARALLEL_MIN_WORK || threads == 1 || rows == 1 {
            work(0, out);
            return;
        }
        let per_task = rows.div_ceil(threads * TASKS_PER_THREAD).max(MIN_TASK_WORK.div_ceil(row_work));
        pool::for_each_chunk_mut(out, per_task * row_len, |task, chunk| work(task * per_task, chunk));
    }

    /// Input row `iy` of image `image` with every channel repeated `m`
    /// times (`iw·c·m` floats), so that it lines up with the output
    /// channels; with `m = 1` the row itself.
    #[inline(always)]
    fn spread_row<'a>(&self, input: &'a [f32], image: usize, iy: usize, scratch: &'a mut [f32]) -> &'a [f32] {
        let in_row = self.input_row();
        let src = &input[(image * self.rows.input + iy) * in_row..][..in_row];
        if self.m == 1 {
            return src;
        }
        let spread = &mut scratch[..in_row * self.m];
        for (d, &x) in spread.chunks_exact_mut(self.m).zip(src) {
            d.fill(x);
        }
        spread
    }

    /// `out = depthwise_conv(input, filter)`.
    fn forward(&self, input: &[f32], filter: &[f32], out: &mut [f32]) -> Result<(), Error> {
        let name = DepthwiseOp::Forward.name();
        self.check_lengths(
            name,
            [
                ("input", input.len(), self.input_shape()),
                ("filter", filter.len(), self.filter_shape()),
                ("output", out.len(), self.output_shape()),
            ],
        )?;
        if out.is_empty() {
            return Ok(());
        }
        if input.is_empty() || filter.is_empty() {
            // No term: every output is an empty sum.
            out.fill(0.0);
            return Ok(());
        }
        // The filter columns inside the input, per output column: the same
        // for every row.
        let kx_ranges: Vec<_> = (0..self.cols.output).map(|ox| self.cols.valid_range(ox)).collect();
        Self::split_rows(out, self.output_row(), self.row_work(), |first, rows| {
            // One spread row per filter row inside the input.
            let slots = self.rows.size.min(self.rows.input);
            let mut scratch = vec![0.0; if self.m == 1 { 0 } else { slots * self.spread_row_len() }];
            in_wide_lanes(
                #[inline(always)]
                || self.forward_rows(input, filter, &kx_ranges, first, rows, &mut scratch),
            )
        });
        Ok(())
    }

    /// The output rows from global row `first` (image · output height + y).
    #[inline(always)]
    fn forward_rows(
        &self,
        input: &[f32],
        filter: &[f32],
        kx_ranges: &[Range<usize>],
        first: usize,
        out: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (rows, cols, cm) = (self.rows, self.cols, self.tap());
        let spread_len = self.spread_row_len();
        for (r, out_row) in out.chunks_exact_mut(self.output_row()).enumerate() {
            let (image, oy) = ((first + r) / rows.output, (first + r) % rows.output);
            // The (spread) input rows under this output row, with their ky.
            let mut sources: SmallVec<[(usize, &[f32]); 8]> = SmallVec::new();
            let mut slots = scratch.chunks_exact_mut(spread_len.max(1));
            for ky in rows.valid_range(oy) {
                let Some(iy) = rows.source(oy, ky) else { continue };
                let slot = if self.m == 1 { &mut [][..] } else { slots.next().unwrap_or_default() };
                sources.push((ky, self.spread_row(input, image, iy, slot)));
            }
            for (ox, pixel) in out_row.chunks_exact_mut(cm).enumerate() {
                let kxs = kx_ranges[ox].clone();
                channel_blocks!(cm, |offset, LANES| {
                    let mut acc = [0.0f32; LANES];
                    for &(ky, src) in &sources {
                        for kx in kxs.clone() {
                            let ix = ox * cols.stride + kx * cols.dilation - cols.pad_before;
                            let tap = (ky * cols.size + kx) * cm;
                            accumulate(&mut acc, &src[ix * cm + offset..], &filter[tap + offset..]);
                        }
                    }
                    pixel[offset..offset + LANES].copy_from_slice(&acc);
                });
            }
        }
    }

    /// `dinput = depthwise_conv_transpose(grad, filter)`.
    fn backprop_input(&self, grad: &[f32], filter: &[f32], dinput: &mut [f32]) -> Result<(), Error> {
        let name = DepthwiseOp::BackpropInput.name();
        self.check_lengths(
            name,
            [
                ("out_backprop", grad.len(), self.output_shape()),
                ("filter", filter.len(), self.filter_shape()),
                ("output", dinput.len(), self.input_shape()),
            ],
        )?;
        if dinput.is_empty() {
            return Ok(());
        }
        if grad.is_empty() || filter.is_empty() {
            dinput.fill(0.0);
            return Ok(());
        }
        let terms = ColumnTerms::new(name, &self.cols)?;
        // An input row receives from at most ceil(kh / stride) output rows.
        let row_work = self.spread_row_len().saturating_mul(self.rows.size * self.cols.size).max(1);
        Self::split_rows(dinput, self.input_row(), row_work, |first, rows| {
            let mut scratch = vec![0.0; if self.m == 1 { 0 } else { self.tap() }];
            in_wide_lanes(
                #[inline(always)]
                || self.backprop_input_rows(grad, filter, &terms, first, rows, &mut scratch),
            )
        });
        Ok(())
    }

    /// The input-gradient rows from global row `first` (image · input
    /// height + y), each gathered from the output rows whose windows reach
    /// it. With `m > 1` a pixel's `c·m` sums go through `scratch` and are
    /// then added up per channel.
    #[inline(always)]
    fn backprop_input_rows(
        &self,
        grad: &[f32],
        filter: &[f32],
        terms: &ColumnTerms,
        first: usize,
        dinput: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (rows, cols, c, m, cm) = (self.rows, self.cols, self.c, self.m, self.tap());
        let out_row = self.output_row();
        let mut sources: SmallVec<[(usize, &[f32]); 8]> = SmallVec::new();
        for (r, drow) in dinput.chunks_exact_mut(self.input_row()).enumerate() {
            let (image, iy) = ((first + r) / rows.input, (first + r) % rows.input);
            // The gradient rows whose tap ky lands on iy:
            // oy·stride + ky·dilation - pad_before = iy.
            sources.clear();
            for ky in 0..rows.size {
                let Some(offset) = (iy + rows.pad_before).checked_sub(ky * rows.dilation) else { break };
                if offset % rows.stride == 0 && offset / rows.stride < rows.output {
                    let oy = offset / rows.stride;
                    sources.push((ky, &grad[(image * rows.output + oy) * out_row..][..out_row]));
                }
            }
            for (ix, pixel) in drow.chunks_exact_mut(c).enumerate() {
                let pairs = terms.of(ix);
                let sums = if m == 1 { &mut *pixel } else { &mut scratch[..cm] };
                channel_blocks!(cm, |offset, LANES| {
                    let mut acc = [0.0f32; LANES];
                    for &(ky, g) in &sources {
                        for &(kx, ox) in pairs {
                            let tap = (ky * cols.size + kx as usize) * cm;
                            accumulate(&mut acc, &g[ox as usize * cm + offset..], &filter[tap + offset..]);
                        }
                    }
                    sums[offset..offset + LANES].copy_from_slice(&acc);
                });
                if m > 1 {
                    for (d, s) in pixel.iter_mut().zip(scratch.chunks_exact(m)) {
                        *d = s.iter().sum();
                    }
                }
            }
        }
    }

    /// `dfilter = Σ input patches · grad` over every output pixel.
    fn backprop_filter(&self, input: &[f32], grad: &[f32], dfilter: &mut [f32]) -> Result<(), Error> {
        let name = DepthwiseOp::BackpropFilter.name();
        self.check_lengths(
            name,
            [
                ("input", input.len(), self.input_shape()),
                ("out_backprop", grad.len(), self.output_shape()),
                ("output", dfilter.len(), self.filter_shape()),
            ],
        )?;
        let filter_len = dfilter.len();
        if filter_len == 0 {
            return Ok(());
        }
        if input.is_empty() || grad.is_empty() {
            dfilter.fill(0.0);
            return Ok(());
        }
        let total_rows = self.n * self.rows.output;
        let row_work = self.row_work();
        let groups = if total_rows.saturating_mul(row_work) < PARALLEL_MIN_WORK {
            1
        } else {
            let by_work = total_rows.saturating_mul(row_work) / MIN_TASK_WORK;
            let by_memory = MAX_PARTIAL_FLOATS / filter_len;
            by_work.min(by_memory).min(MAX_FILTER_GROUPS).min(total_rows).max(1)
        };
        let per_group = total_rows.div_ceil(groups);
        // The output columns whose window tap kx is inside the input, per kx.
        let ox_ranges: Vec<_> = (0..self.cols.size).map(|kx| self.cols.valid_outputs(kx)).collect();
        let group = |g: usize, acc: &mut [f32]| {
            let first = g * per_group;
            let count = per_group.min(total_rows.saturating_sub(first));
            let mut scratch = vec![0.0; if self.m == 1 { 0 } else { self.spread_row_len() }];
            in_wide_lanes(
                #[inline(always)]
                || self.backprop_filter_rows(input, grad, &ox_ranges, first..first + count, acc, &mut scratch),
            )
        };
        if groups == 1 {
            group(0, dfilter);
            return Ok(());
        }
        let mut partials = vec![0.0f32; groups * filter_len];
        pool::for_each_chunk_mut(&mut partials, filter_len, group);
        let (head, rest) = partials.split_at(filter_len);
        dfilter.copy_from_slice(head);
        for part in rest.chunks_exact(filter_len) {
            for (d, p) in dfilter.iter_mut().zip(part) {
                *d += p;
            }
        }
        Ok(())
    }

    /// Sets `dfilter` (a whole filter) to the filter gradient of the global
    /// output rows `rows_range` (image · output height + y).
    #[inline(always)]
    fn backprop_filter_rows(
        &self,
        input: &[f32],
        grad: &[f32],
        ox_ranges: &[Range<usize>],
        rows_range: Range<usize>,
        dfilter: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (rows, cols, cm, out_row) = (self.rows, self.cols, self.tap(), self.output_row());
        dfilter.fill(0.0);
        for row in rows_range {
            let (image, oy) = (row / rows.output, row % rows.output);
            let g = &grad[row * out_row..][..out_row];
            for ky in rows.valid_range(oy) {
                let Some(iy) = rows.source(oy, ky) else { continue };
                let src = self.spread_row(input, image, iy, scratch);
                for (kx, oxs) in ox_ranges.iter().enumerate() {
                    let dtap = &mut dfilter[(ky * cols.size + kx) * cm..][..cm];
                    channel_blocks!(cm, |offset, LANES| {
                        let mut acc = [0.0f32; LANES];
                        for ox in oxs.clone() {
                            let ix = ox * cols.stride + kx * cols.dilation - cols.pad_before;
                            accumulate(&mut acc, &src[ix * cm + offset..], &g[ox * cm + offset..]);
                        }
                        for (d, a) in dtap[offset..offset + LANES].iter_mut().zip(acc) {
                            *d += a;
                        }
                    });
                }
            }
        }
    }
}

/// For every input column, the `(kx, ox)` pairs of the output columns whose
/// window tap `kx` lands on it, in increasing `kx`: what the input gradient
/// gathers. The same for every row, so built once per execution.
struct ColumnTerms {
    /// `pairs[starts[ix]..starts[ix + 1]]` belong to input column `ix`.
    starts: Vec<usize>,
    pairs: Vec<(u32, u32)>,
}

impl ColumnTerms {
    fn new(name: &str, cols: &Window) -> Result<Self, Error> {
        let count: usize = (0..cols.size).map(|kx| cols.valid_outputs(kx).len()).sum();
        let too_large =
            || invalid(name, format!("the filter width {} and output width {} are too large", cols.size, cols.output));
        if u32::try_from(cols.size.max(cols.output)).is_err() {
            return Err(too_large());
        }
        let mut pairs = Vec::new();
        pairs.try_reserve_exact(count).map_err(|_| too_large())?;
        // Counting sort by input column, stable in kx.
        let mut starts = vec![0usize; cols.input + 1];
        let column = |kx: usize, ox: usize| ox * cols.stride + kx * cols.dilation - cols.pad_before;
        for kx in 0..cols.size {
            for ox in cols.valid_outputs(kx) {
                starts[column(kx, ox) + 1] += 1;
            }
        }
        for ix in 0..cols.input {
            starts[ix + 1] += starts[ix];
        }
        let mut next = starts.clone();
        pairs.resize(count, (0, 0));
        for kx in 0..cols.size {
            for ox in cols.valid_outputs(kx) {
                let ix = column(kx, ox);
                pairs[next[ix]] = (kx as u32, ox as u32);
                next[ix] += 1;
            }
        }
        Ok(ColumnTerms { starts, pairs })
    }

    fn of(&self, ix: usize) -> &[(u32, u32)] {
        &self.pairs[self.starts[ix]..self.starts[ix + 1]]
    }
}

/// `acc[i] += a[i] · b[i]` for `i < B`. `a` and `b` are cut to exactly
/// `B` floats, so the loop unrolls into whole vector multiply-adds and
/// `acc` stays in registers from one call to the next.
#[inline(always)]
fn accumulate<const B: usize>(acc: &mut [f32; B], a: &[f32], b: &[f32]) {
    let (a, b) = (&a[..B], &b[..B]);
    for i in 0..B {
        acc[i] += a[i] * b[i];
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{case, values, Case, TestAttrs};
    use super::super::KERNELS;
    use crate::error::Error;
    use crate::{DType, Kernel, LocalContext, Tensor};

    fn build(op: &str, attrs: &TestAttrs) -> Result<Box<dyn Kernel>, Error> {
        let def = KERNELS.iter().find(|d| d.op == op).expect("registered");
        (def.build)(attrs)
    }

    fn len(shape: &[usize]) -> usize {
        shape.iter().product()
    }

    fn output(case: &Case) -> [usize; 4] {
        [case.input[0], case.dim(0).0, case.dim(1).0, case.filter[2] * case.filter[3]]
    }

    /// Calls `f(out index, input index, filter index)` for every product
    /// term of the depthwise convolution, straight from its definition.
    fn for_each_term(case: &Case, mut f: impl FnMut(usize, usize, usize)) {
        let [n, ih, iw, c] = case.input;
        let [kh, kw, _, m] = case.filter;
        let ((oh, pt), (ow, pl)) = (case.dim(0), case.dim(1));
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy = (oy * case.strides[0] + ky * case.dilations[0]) as i64 - pt as i64;
                            let ix = (ox * case.strides[1] + kx * case.dilations[1]) as i64 - pl as i64;
                            if iy < 0 || ix < 0 || iy >= ih as i64 || ix >= iw as i64 {
                                continue;
                            }
                            for ch in 0..c {
                                for j in 0..m {
                                    let o = ((b * oh + oy) * ow + ox) * c * m + ch * m + j;
                                    let i = ((b * ih + iy as usize) * iw + ix as usize) * c + ch;
                                    let w = ((ky * kw + kx) * c + ch) * m + j;
                                    f(o, i, w);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn compare(op: &str, case: &Case, got: &[f32], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{op} {case:?}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{op} {case:?}: element {i} is {g}, expected {w}");
        }
    }

    /// Runs the three ops on `case` and compares each with a float64
    /// reference; also checks a second run is bit-identical.
    fn check(case: &Case) {
        let out_shape = output(case);
        let (in_len, f_len, out_len) = (len(&case.input), len(&case.filter), len(&out_shape));
        let (x, w, g) = (values(in_len, 11), values(f_len, 12), values(out_len, 13));
        let (mut y_ref, mut dx_ref, mut dw_ref) = (vec![0f64; out_len], vec![0f64; in_len], vec![0f64; f_len]);
        for_each_term(case, |o, i, k| {
            y_ref[o] += x[i] as f64 * w[k] as f64;
            dx_ref[i] += g[o] as f64 * w[k] as f64;
            dw_ref[k] += g[o] as f64 * x[i] as f64;
        });
        let attrs = case.attrs();
        let t = |shape: &[usize], v: &[f32]| Tensor::from_vec(shape, v.to_vec()).unwrap();
        let sizes = |s: [usize; 4]| Tensor::from_vec(&[4], s.map(|v| v as i32).to_vec()).unwrap();
        let run = |op: &str, inputs: &dyn Fn() -> Vec<Tensor>, shape: &[usize], want: &[f64]| {
            let kernel = build(op, &attrs).unwrap();
            let got = LocalContext::run(&*kernel, inputs(), &[DType::F32]).unwrap();
            assert_eq!(got[0].shape(), shape, "{op} {case:?}");
            let got = got[0].to_vec::<f32>().unwrap();
            compare(op, case, &got, want);
            let again = LocalContext::run(&*kernel, inputs(), &[DType::F32]).unwrap()[0].to_vec::<f32>().unwrap();
            assert!(
                got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{op} {case:?}: not deterministic"
            );
        };
        run("DepthwiseConv2dNative", &|| vec![t(&case.input, &x), t(&case.filter, &w)], &out_shape, &y_ref);
        run(
            "DepthwiseConv2dNativeBackpropInput",
            &|| vec![sizes(case.input), t(&case.filter, &w), t(&out_shape, &g)],
            &case.input,
            &dx_ref,
        );
        run(
            "DepthwiseConv2dNativeBackpropFilter",
            &|| vec![t(&case.input, &x), sizes(case.filter), t(&out_shape, &g)],
            &case.filter,
            &dw_ref,
        );
    }

    fn explicit(pads: [usize; 4], base: Case) -> Case {
        Case { padding: "EXPLICIT", explicit: pads, ..base }
    }

    #[test]
    fn depthwise_convolutions_match_reference_on_odd_shapes() {
        let cases = [
            case([1, 1, 1, 1], [1, 1, 1, 1], [1, 1], [1, 1], "VALID"),
            case([1, 1, 1, 1], [1, 1, 1, 3], [1, 1], [1, 1], "SAME"),
            case([2, 7, 5, 3], [3, 3, 3, 1], [1, 1], [1, 1], "SAME"),
            case([2, 7, 5, 3], [3, 3, 3, 1], [1, 1], [1, 1], "VALID"),
            case([2, 7, 5, 3], [3, 3, 3, 3], [1, 1], [1, 1], "SAME"),
            case([2, 11, 13, 2], [3, 3, 2, 1], [2, 2], [1, 1], "SAME"),
            case([2, 11, 13, 2], [3, 3, 2, 3], [2, 2], [1, 1], "VALID"),
            case([2, 11, 13, 2], [3, 3, 2, 2], [2, 1], [1, 1], "SAME"),
            case([2, 9, 8, 5], [4, 2, 5, 1], [1, 1], [1, 1], "SAME"),
            case([1, 13, 11, 3], [3, 3, 3, 2], [1, 1], [2, 2], "SAME"),
            case([1, 13, 11, 3], [3, 2, 3, 1], [2, 1], [2, 3], "VALID"),
            case([2, 5, 5, 2], [5, 5, 2, 3], [1, 1], [1, 1], "VALID"),
            case([1, 3, 3, 2], [5, 5, 2, 1], [1, 1], [1, 1], "SAME"),
            case([1, 3, 3, 2], [5, 5, 2, 1], [3, 3], [2, 2], "SAME"),
            explicit([1, 2, 0, 3], case([2, 6, 5, 2], [3, 2, 2, 3], [2, 1], [1, 2], "")),
            explicit([0, 0, 2, 1], case([1, 4, 4, 1], [2, 2, 1, 1], [1, 1], [1, 1], "")),
        ];
        for case in cases {
            check(&case);
        }
    }

    #[test]
    fn empty_depthwise_convolutions_give_shaped_zeros() {
        let cases = [
            case([0, 7, 7, 3], [3, 3, 3, 1], [1, 1], [1, 1], "SAME"),
            case([2, 7, 7, 0], [3, 3, 0, 2], [1, 1], [1, 1], "SAME"),
            case([2, 7, 7, 3], [3, 3, 3, 0], [1, 1], [1, 1], "SAME"),
            // A window larger than the input: no output rows.
            case([2, 2, 3, 3], [3, 3, 3, 1], [1, 1], [1, 1], "VALID"),
            // No filter rows: every output is an empty sum.
            case([2, 7, 5, 3], [0, 3, 3, 1], [1, 1], [1, 1], "VALID"),
            case([2, 7, 5, 3], [3, 0, 3, 2], [1, 1], [1, 1], "SAME"),
            // No input rows, but padding makes output rows: zeros.
            explicit([2, 2, 1, 1], case([1, 0, 3, 2], [1, 1, 2, 3], [1, 1], [1, 1], "")),
        ];
        for case in cases {
            check(&case);
        }
    }

    #[test]
    fn large_depthwise_convolutions_use_the_pool() {
        check(&case([4, 30, 30, 16], [3, 3, 16, 1], [1, 1], [1, 1], "SAME"));
        check(&case([2, 40, 40, 8], [3, 3, 8, 2], [2, 2], [1, 1], "SAME"));
        check(&case([8, 28, 28, 1], [5, 5, 1, 8], [1, 1], [1, 1], "VALID"));
        check(&case([1, 64, 48, 12], [3, 3, 12, 1], [1, 1], [2, 2], "SAME"));
    }

    #[test]
    fn invalid_depthwise_convolutions_are_errors() {
        let attrs = case([1, 5, 5, 2], [3, 3, 2, 1], [1, 1], [1, 1], "VALID").attrs();
        let zeros = |shape: &[usize]| Tensor::zeros(DType::F32, shape).unwrap();
        let sizes = |s: &[i32]| Tensor::from_vec(&[s.len()], s.to_vec()).unwrap();
        let run = |op: &str, inputs: Vec<Tensor>| {
            let kernel = build(op, &attrs).unwrap();
            let error = LocalContext::run(&*kernel, inputs, &[DType::F32]).map(|_| ()).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{op}: {error}");
            assert!(error.to_string().contains(op), "{op}: {error}");
            error.to_string()
        };
        let forward = "DepthwiseConv2dNative";
        assert!(run(forward, vec![zeros(&[1, 5, 5, 2]), zeros(&[3, 3, 3, 1])]).contains("same depth: 2 vs 3"));
        assert!(run(forward, vec![zeros(&[5, 5, 2]), zeros(&[3, 3, 2, 1])]).contains("4-dimensional"));
        assert!(run(forward, vec![zeros(&[1, 5, 5, 2]), zeros(&[3, 3, 2])]).contains("4-dimensional"));

        let input = "DepthwiseConv2dNativeBackpropInput";
        let (w, g) = (|| zeros(&[3, 3, 2, 1]), || zeros(&[1, 3, 3, 2]));
        assert!(run(input, vec![sizes(&[1, 5, 5, 3]), w(), g()]).contains("same depth"));
        assert!(run(input, vec![sizes(&[5, 5]), w(), g()]).contains("4 values"));
        assert!(run(input, vec![sizes(&[1, -5, 5, 2]), w(), g()]).contains("negative"));
        assert!(run(input, vec![sizes(&[1, 5, 5, 2]), w(), zeros(&[1, 3, 4, 2])]).contains("out_backprop"));
        // depth multiplier 1 but the gradient has 2 per channel
        assert!(run(input, vec![sizes(&[1, 5, 5, 2]), w(), zeros(&[1, 3, 3, 4])]).contains("out_backprop"));

        let filter = "DepthwiseConv2dNativeBackpropFilter";
        let x = || zeros(&[1, 5, 5, 2]);
        assert!(run(filter, vec![x(), sizes(&[3, 3, 3, 1]), g()]).contains("same depth"));
        assert!(run(filter, vec![x(), sizes(&[3, 3, 2, 2]), g()]).contains("out_backprop"));
        assert!(run(filter, vec![x(), sizes(&[3, 3, 2]), g()]).contains("4 values"));
        assert!(run(filter, vec![zeros(&[1, 6, 5, 2]), sizes(&[3, 3, 2, 1]), g()]).contains("out_backprop"));

        // Attributes are checked when the kernel is built.
        let nchw = attrs_with("data_format", "NCHW");
        let error = build(forward, &nchw).err().expect("NCHW is refused");
        assert!(matches!(error, Error::Tensorflow { .. }) && error.to_string().contains("NHWC"), "{error}");
        let batch_stride = TestAttrs::default().ints("strides", &[2, 1, 1, 1]).string("padding", "SAME");
        assert!(matches!(build(input, &batch_stride), Err(Error::InvalidArgument(_))));
        let bad_padding = TestAttrs::default().ints("strides", &[1; 4]).string("padding", "FULL");
        assert!(matches!(build(filter, &bad_padding), Err(Error::InvalidArgument(_))));
    }

    fn attrs_with(name: &'static str, value: &str) -> TestAttrs {
        case([1, 5, 5, 2], [3, 3, 2, 1], [1, 1], [1, 1], "VALID").attrs().string(name, value)
    }

    /// Rough timings at MobileNet shapes, one buffer set reused (no page
    /// faults): `cargo test --release -p tfwasm --lib bench_depthwise -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn bench_depthwise() {
        use super::{DepthwiseKernel, DepthwiseOp};
        for (input, filter) in [([32, 56, 56, 64], [3, 3, 64, 1]), ([32, 28, 28, 32], [3, 3, 32, 3])] {
            let c = case(input, filter, [1, 1], [1, 1], "SAME");
            let geom = DepthwiseKernel::new(DepthwiseOp::Forward, &c.attrs()).unwrap().geometry(input, filter).unwrap();
            let out_len = len(&output(&c));
            let (x, w, g) = (values(len(&input), 1), values(len(&filter), 2), values(out_len, 3));
            let (mut y, mut dx, mut dw) = (vec![0f32; out_len], vec![0f32; x.len()], vec![0f32; w.len()]);
            let time = |f: &mut dyn FnMut()| {
                f();
                let mut runs: Vec<f64> = (0..7)
                    .map(|_| {
                        let start = std::time::Instant::now();
                        f();
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                runs.sort_by(f64::total_cmp);
                runs[runs.len() / 2]
            };
            let f = time(&mut || geom.forward(&x, &w, &mut y).unwrap());
            let i = time(&mut || geom.backprop_input(&g, &w, &mut dx).unwrap());
            let d = time(&mut || geom.backprop_filter(&x, &g, &mut dw).unwrap());
            eprintln!(
                "{input:?} {filter:?}: forward {f:.2} ms, input grad {i:.2} ms, filter grad {d:.2} ms (median of 7)"
            );
        }
    }
}
