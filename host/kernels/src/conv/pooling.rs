//! float32 NHWC `MaxPool`, `MaxPoolGrad`, `AvgPool` and `AvgPoolGrad`, and
//! their NDHWC 3-D forms (`MaxPool3D`, …). A 2-D pool is a 3-D one with a
//! single plane.
//!
//! Every output pixel's window is clipped to the input (padding never takes
//! part: SAME max pooling ignores it and SAME average pooling divides by the
//! number of input elements in the window, as TensorFlow does). Channels
//! are contiguous in NHWC, so each window element is one row of `depth`
//! floats and the inner loops run over channels.
//!
//! `MaxPoolGrad` recomputes the argmax from `orig_input` exactly as
//! TensorFlow's CPU kernel does (`SpatialMaxPoolWithArgMaxHelper`): the
//! first in-window element in row-major order starts the maximum and only a
//! strictly greater one replaces it, so ties send the gradient to the first
//! maximum. `MaxPool3DGrad` follows TensorFlow's 3-D CPU kernel instead:
//! every window element within 1e-5 of `orig_output` receives the gradient,
//! so ties share it. `AvgPool3DGrad` scales by the reciprocal of the window
//! count, as that kernel does. Images are independent and spread over the
//! compute pool.

use super::{
    check_nhwc, check_rank, invalid, shape_arg, spatial3, unimplemented, window_attr, ConvWindows, Padding, Window,
};
use crate::error::Error;
use crate::shape::ShapeDisplay;
use crate::{expect_inputs, pool, Attrs, Kernel, OpContext};

/// Below this much work (elements × window) pooling runs inline.
const PARALLEL_MIN_WORK: usize = 32 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PoolOp {
    MaxPool,
    MaxPoolGrad,
    AvgPool,
    AvgPoolGrad,
    MaxPool3D,
    MaxPool3DGrad,
    AvgPool3D,
    AvgPool3DGrad,
}

impl PoolOp {
    fn name(self) -> &'static str {
        match self {
            PoolOp::MaxPool => "MaxPool",
            PoolOp::MaxPoolGrad => "MaxPoolGrad",
            PoolOp::AvgPool => "AvgPool",
            PoolOp::AvgPoolGrad => "AvgPoolGrad",
            PoolOp::MaxPool3D => "MaxPool3D",
            PoolOp::MaxPool3DGrad => "MaxPool3DGrad",
            PoolOp::AvgPool3D => "AvgPool3D",
            PoolOp::AvgPool3DGrad => "AvgPool3DGrad",
        }
    }

    /// 2 or 3.
    fn spatial(self) -> usize {
        match self {
            PoolOp::MaxPool | PoolOp::MaxPoolGrad | PoolOp::AvgPool | PoolOp::AvgPoolGrad => 2,
            PoolOp::MaxPool3D | PoolOp::MaxPool3DGrad | PoolOp::AvgPool3D | PoolOp::AvgPool3DGrad => 3,
        }
    }
}

#[derive(Debug)]
pub(super) struct PoolKernel {
    op: PoolOp,
    /// Planes, rows, columns; a 2-D pool has a 1-plane window.
    ksize: [usize; 3],
    /// Strides and padding (no dilation): a convolution's windows.
    windows: ConvWindows,
}

impl PoolKernel {
    pub(super) fn new(op: PoolOp, attrs: &dyn Attrs) -> Result<Self, Error> {
        let (name, spatial) = (op.name(), op.spatial());
        check_nhwc(name, attrs, spatial, false)?;
        let ksize = window_attr(name, attrs, "ksize", spatial + 2, false)?;
        let strides = window_attr(name, attrs, "strides", spatial + 2, false)?;
        if ksize[0] != 1 || strides[0] != 1 {
            return Err(unimplemented(name, "Pooling is not yet supported on the batch dimension."));
        }
        if ksize[spatial + 1] != 1 || strides[spatial + 1] != 1 {
            return Err(unimplemented(
                name,
                format!("pooling over the depth dimension is not supported on the WASM device (ksize {ksize:?}, strides {strides:?})"),
            ));
        }
        let padding = Padding::from_attrs(name, attrs)?;
        let windows = ConvWindows { spatial, strides: spatial3(&strides[1..=spatial]), dilations: [1; 3], padding };
        Ok(PoolKernel { op, ksize: spatial3(&ksize[1..=spatial]), windows })
    }

    fn rank(&self) -> usize {
        self.op.spatial() + 2
    }

    /// Checks the input shape (its rank is checked here) and computes the
    /// output geometry.
    fn geometry(&self, what: &str, input: &[usize]) -> Result<PoolGeom, Error> {
        let name = self.op.name();
        check_rank(name, what, input, self.rank())?;
        let s = self.op.spatial();
        let (n, depth) = (input[0], input[s + 1]);
        let [planes, rows, cols] = self.windows.windows3(name, spatial3(&input[1..=s]), self.ksize)?;
        let fits =
            [n, planes.output.max(planes.input), rows.output.max(rows.input), cols.output.max(cols.input), depth]
                .iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .is_some_and(|t| isize::try_from(t).is_ok());
        if !fits {
            return Err(invalid(name, format!("input shape {} is too large", ShapeDisplay(input))));
        }
        Ok(PoolGeom { n, depth, spatial: s, planes, rows, cols })
    }

    fn check_shape(&self, what: &str, got: &[usize], expected: &[usize]) -> Result<(), Error> {
        if got == expected {
            return Ok(());
        }
        let first = 3 - self.op.spatial();
        Err(invalid(
            self.op.name(),
            format!(
                "Expected {what} shape to be {}, but got {} (ksize {:?}, strides {:?}, padding {:?})",
                ShapeDisplay(expected),
                ShapeDisplay(got),
                &self.ksize[first..],
                &self.windows.strides[first..],
                self.windows.padding
            ),
        ))
    }
}

impl Kernel for PoolKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = self.op.name();
        match self.op {
            PoolOp::MaxPool | PoolOp::AvgPool | PoolOp::MaxPool3D | PoolOp::AvgPool3D => {
                expect_inputs(name, ctx, 1)?;
                let input = ctx.input(0)?;
                let geom = self.geometry("input", input.shape())?;
                let mut out = ctx.allocate_output(0, &geom.output_shape())?;
                let max = matches!(self.op, PoolOp::MaxPool | PoolOp::MaxPool3D);
                geom.forward(max, input.data()?, out.data_mut()?);
                Ok(())
            }
            PoolOp::MaxPoolGrad | PoolOp::MaxPool3DGrad => {
                expect_inputs(name, ctx, 3)?;
                let (input, output, grad) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
                let geom = self.geometry("tensor_in", input.shape())?;
                check_rank(name, "tensor_out", output.shape(), self.rank())?;
                check_rank(name, "out_backprop", grad.shape(), self.rank())?;
                self.check_shape("orig_output", output.shape(), &geom.output_shape())?;
                self.check_shape("grad", grad.shape(), &geom.output_shape())?;
                let mut out = ctx.allocate_output(0, &geom.input_shape())?;
                // The 3-D kernel matches against `orig_output`; the 2-D one
                // recomputes the argmax.
                let pooled = if self.op == PoolOp::MaxPool3DGrad { Some(output.data()?) } else { None };
                geom.max_grad(input.data()?, pooled, grad.data()?, out.data_mut()?);
                Ok(())
            }
            PoolOp::AvgPoolGrad | PoolOp::AvgPool3DGrad => {
                expect_inputs(name, ctx, 2)?;
                let (shape, grad) = (ctx.input(0)?, ctx.input(1)?);
                let sizes = shape_arg(name, "orig_input_shape", &shape)?;
                if sizes.len() != self.rank() {
                    return Err(invalid(
                        name,
                        format!("orig_input_shape must have {} elements, got {}", self.rank(), sizes.len()),
                    ));
                }
                let geom = self.geometry("orig_input_shape", &sizes)?;
                check_rank(name, "out_backprop", grad.shape(), self.rank())?;
                self.check_shape("grad", grad.shape(), &geom.output_shape())?;
                let mut out = ctx.allocate_output(0, &geom.input_shape())?;
                geom.avg_grad(grad.data()?, out.data_mut()?);
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct PoolGeom {
    n: usize,
    depth: usize,
    /// 2 or 3: whether shapes have a planes dimension.
    spatial: usize,
    planes: Window,
    rows: Window,
    cols: Window,
}

impl PoolGeom {
    fn shape(&self, extent: impl Fn(&Window) -> usize) -> Vec<usize> {
        let mut shape = vec![self.n];
        if self.spatial == 3 {
            shape.push(extent(&self.planes));
        }
        shape.extend([extent(&self.rows), extent(&self.cols), self.depth]);
        shape
    }

    fn input_shape(&self) -> Vec<usize> {
        self.shape(|w| w.input)
    }

    fn output_shape(&self) -> Vec<usize> {
        self.shape(|w| w.output)
    }

    fn in_image(&self) -> usize {
        self.planes.input * self.rows.input * self.cols.input * self.depth
    }

    fn out_image(&self) -> usize {
        self.planes.output * self.rows.output * self.cols.output * self.depth
    }

    fn parallel(&self) -> bool {
        let work = (self.n * self.out_image()).saturating_mul(self.planes.size * self.rows.size * self.cols.size);
        work >= PARALLEL_MIN_WORK && self.n > 1 && pool::threads() > 1
    }

    /// Runs `f(image index, image chunk)` over `data` split per image, on the
    /// pool when the op is large enough.
    fn per_image<F>(&self, data: &mut [f32], image_len: usize, f: F)
    where
        F: Fn(usize, &mut [f32]) + Send + Sync,
    {
        if data.is_empty() || image_len == 0 {
            return;
        }
        if self.parallel() {
            pool::for_each_chunk_mut(data, image_len, f);
        } else {
            data.chunks_mut(image_len).enumerate().for_each(|(i, c)| f(i, c));
        }
    }

    /// Calls `f` with each output pixel `(plane, row, column)` of one image:
    /// in memory order, or with `grad_order` in the order TensorFlow's CPU
    /// gradient kernels add their windows up: memory order in 2-D, columns
    /// outermost and planes innermost in 3-D (its loops run over the
    /// dimensions reversed).
    #[inline]
    fn for_each_output(&self, grad_order: bool, mut f: impl FnMut([usize; 3])) {
        let (od, oh, ow) = (self.planes.output, self.rows.output, self.cols.output);
        if grad_order && self.spatial == 3 {
            for x in 0..ow {
                for y in 0..oh {
                    for p in 0..od {
                        f([p, y, x]);
                    }
                }
            }
        } else {
            for p in 0..od {
                for y in 0..oh {
                    for x in 0..ow {
                        f([p, y, x]);
                    }
                }
            }
        }
    }

    /// The offset of output pixel `o`'s channels within one output image.
    fn output_offset(&self, [p, y, x]: [usize; 3]) -> usize {
        ((p * self.rows.output + y) * self.cols.output + x) * self.depth
    }

    /// Input elements in the window of output pixel `o` that lie inside the
    /// input: one clipped extent per dimension.
    fn window_len(&self, [p, y, x]: [usize; 3]) -> usize {
        self.planes.valid_range(p).len() * self.rows.valid_range(y).len() * self.cols.valid_range(x).len()
    }

    /// Calls `f` with the offset (in elements, within one image) of each
    /// window element of output pixel `o` that lies inside the input, in
    /// row-major order. Plain loops: pooling's inner work is one row of
    /// channels, so iterator adapters would cost as much as the work.
    #[inline]
    fn for_window(&self, [op, oy, ox]: [usize; 3], mut f: impl FnMut(usize)) {
        let (planes, rows, cols, depth) = (self.planes, self.rows, self.cols, self.depth);
        let (y_range, x_range) = (rows.valid_range(oy), cols.valid_range(ox));
        if x_range.is_empty() {
            return;
        }
        // The first column inside the input, and how many follow it.
        let (x_first, width) = (ox * cols.stride + x_range.start - cols.pad_before, x_range.len());
        for kd in planes.valid_range(op) {
            let ip = op * planes.stride + kd - planes.pad_before;
            for ky in y_range.clone() {
                let line = ip * rows.input + oy * rows.stride + ky - rows.pad_before;
                let start = line * cols.input + x_first;
                for x in start..start + width {
                    f(x * depth);
                }
            }
        }
    }

    fn forward(&self, max: bool, input: &[f32], out: &mut [f32]) {
        let (in_image, depth) = (self.in_image(), self.depth);
        self.per_image(out, self.out_image(), |image, out_image| {
            let src = &input[image * in_image..(image + 1) * in_image];
            self.for_each_output(false, |o| {
                let at = self.output_offset(o);
                let dst = &mut out_image[at..at + depth];
                if max {
                    dst.fill(f32::MIN);
                    self.for_window(o, |offset| {
                        for (d, &s) in dst.iter_mut().zip(&src[offset..offset + depth]) {
                            *d = if s > *d { s } else { *d };
                        }
                    });
                } else {
                    dst.fill(0.0);
                    self.for_window(o, |offset| {
                        for (d, &s) in dst.iter_mut().zip(&src[offset..offset + depth]) {
                            *d += s;
                        }
                    });
                    let count = self.window_len(o) as f32;
                    dst.iter_mut().for_each(|d| *d /= count);
                }
            });
        });
    }

    /// The gradient of max pooling. With `pooled` (the forward output, 3-D
    /// pooling) every element within 1e-5 of its window's maximum receives
    /// the gradient; without, the first maximum in the window does.
    fn max_grad(&self, input: &[f32], pooled: Option<&[f32]>, grad: &[f32], dinput: &mut [f32]) {
        let (in_image, out_image, depth) = (self.in_image(), self.out_image(), self.depth);
        self.per_image(dinput, in_image, |image, dimage| {
            dimage.fill(0.0);
            let src = &input[image * in_image..(image + 1) * in_image];
            let grad_image = &grad[image * out_image..(image + 1) * out_image];
            if let Some(pooled) = pooled {
                let pooled_image = &pooled[image * out_image..(image + 1) * out_image];
                self.for_each_output(true, |o| {
                    let at = self.output_offset(o);
                    let (g, m) = (&grad_image[at..at + depth], &pooled_image[at..at + depth]);
                    self.for_window(o, |offset| {
                        let (d, s) = (&mut dimage[offset..offset + depth], &src[offset..offset + depth]);
                        for (((d, &s), &m), &g) in d.iter_mut().zip(s).zip(m).zip(g) {
                            if (s - m).abs() < 1e-5 {
                                *d += g;
                            }
                        }
                    });
                });
                return;
            }
            let mut best = vec![0.0f32; depth];
            let mut arg = vec![0usize; depth];
            self.for_each_output(false, |o| {
                let at = self.output_offset(o);
                let g = &grad_image[at..at + depth];
                let mut any = false;
                self.for_window(o, |offset| {
                    let s = &src[offset..offset + depth];
                    if !any {
                        best.copy_from_slice(s);
                        arg.fill(offset);
                        any = true;
                        return;
                    }
                    // Selects, not branches: on real data the comparison
                    // is a coin toss, and a mispredicted branch per element
                    // cost more than the rest of the gradient.
                    for ((b, a), &s) in best.iter_mut().zip(arg.iter_mut()).zip(s) {
                        let take = usize::from(s > *b).wrapping_neg(); // all ones or zero
                        *b = f32::from_bits(b.to_bits() ^ ((b.to_bits() ^ s.to_bits()) & take as u32));
                        *a ^= (*a ^ offset) & take;
                    }
                });
                if !any {
                    return;
                }
                for (c, (&a, &g)) in arg.iter().zip(g).enumerate() {
                    dimage[a + c] += g;
                }
            });
        });
    }

    fn avg_grad(&self, grad: &[f32], dinput: &mut [f32]) {
        let (out_image, depth) = (self.out_image(), self.depth);
        // TensorFlow's 2-D kernel divides by the window count; its 3-D one
        // multiplies by the count's reciprocal.
        let reciprocal = self.spatial == 3;
        self.per_image(dinput, self.in_image(), |image, dimage| {
            dimage.fill(0.0);
            let grad_image = &grad[image * out_image..(image + 1) * out_image];
            self.for_each_output(true, |o| {
                let at = self.output_offset(o);
                let g = &grad_image[at..at + depth];
                let count = self.window_len(o);
                if count == 0 {
                    return;
                }
                let count = count as f32;
                let scale = 1.0 / count;
                self.for_window(o, |offset| {
                    for (d, &g) in dimage[offset..offset + depth].iter_mut().zip(g) {
                        *d += if reciprocal { g * scale } else { g / count };
                    }
                });
            });
        });
    }
}
