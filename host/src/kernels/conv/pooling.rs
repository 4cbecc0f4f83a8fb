//! float32 NHWC `MaxPool`, `MaxPoolGrad`, `AvgPool` and `AvgPoolGrad`.
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
//! maximum. Images are independent and spread over the compute pool.

use super::{check_nhwc, four, invalid, rank4, shape_arg, unimplemented, Padding, Window};
use crate::error::Error;
use crate::kernels::shape::ShapeDisplay;
use crate::kernels::{expect_inputs, pool, Attrs, Kernel, OpContext};

/// Below this much work (elements × window) pooling runs inline.
const PARALLEL_MIN_WORK: usize = 32 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PoolOp {
    MaxPool,
    MaxPoolGrad,
    AvgPool,
    AvgPoolGrad,
}

impl PoolOp {
    fn name(self) -> &'static str {
        match self {
            PoolOp::MaxPool => "MaxPool",
            PoolOp::MaxPoolGrad => "MaxPoolGrad",
            PoolOp::AvgPool => "AvgPool",
            PoolOp::AvgPoolGrad => "AvgPoolGrad",
        }
    }
}

#[derive(Debug)]
pub(super) struct PoolKernel {
    op: PoolOp,
    ksize: [usize; 2],
    strides: [usize; 2],
    padding: Padding,
}

impl PoolKernel {
    pub(super) fn new(op: PoolOp, attrs: &dyn Attrs) -> Result<Self, Error> {
        let name = op.name();
        check_nhwc(name, attrs, false)?;
        let ksize = four(name, attrs, "ksize", None)?;
        let strides = four(name, attrs, "strides", None)?;
        if ksize[0] != 1 || strides[0] != 1 {
            return Err(unimplemented(name, "Pooling is not yet supported on the batch dimension."));
        }
        if ksize[3] != 1 || strides[3] != 1 {
            return Err(unimplemented(
                name,
                format!("pooling over the depth dimension is not supported on the WASM device (ksize {ksize:?}, strides {strides:?})"),
            ));
        }
        let padding = Padding::from_attrs(name, attrs)?;
        Ok(PoolKernel { op, ksize: [ksize[1], ksize[2]], strides: [strides[1], strides[2]], padding })
    }

    fn geometry(&self, input: [usize; 4]) -> Result<PoolGeom, Error> {
        let name = self.op.name();
        let [n, h, w, depth] = input;
        let (er, ec) = match self.padding {
            Padding::Explicit { rows, cols } => (rows, cols),
            _ => ((0, 0), (0, 0)),
        };
        let rows = Window::new(name, h, self.ksize[0], self.strides[0], 1, self.padding, er)?;
        let cols = Window::new(name, w, self.ksize[1], self.strides[1], 1, self.padding, ec)?;
        let fits = [n, rows.output.max(h), cols.output.max(w), depth]
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .is_some_and(|t| isize::try_from(t).is_ok());
        if !fits {
            return Err(invalid(name, format!("input shape {} is too large", ShapeDisplay(&input))));
        }
        Ok(PoolGeom { n, depth, rows, cols })
    }

    fn check_shape(&self, what: &str, got: [usize; 4], expected: [usize; 4]) -> Result<(), Error> {
        if got == expected {
            Ok(())
        } else {
            Err(invalid(
                self.op.name(),
                format!(
                    "Expected {what} shape to be {}, but got {} (ksize {:?}, strides {:?}, padding {:?})",
                    ShapeDisplay(&expected),
                    ShapeDisplay(&got),
                    self.ksize,
                    self.strides,
                    self.padding
                ),
            ))
        }
    }
}

impl Kernel for PoolKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = self.op.name();
        match self.op {
            PoolOp::MaxPool | PoolOp::AvgPool => {
                expect_inputs(name, ctx, 1)?;
                let input = ctx.input(0)?;
                let geom = self.geometry(rank4(name, "input", input.shape())?)?;
                let mut out = ctx.allocate_output(0, &geom.output_shape())?;
                geom.forward(self.op == PoolOp::MaxPool, input.data()?, out.data_mut()?);
                Ok(())
            }
            PoolOp::MaxPoolGrad => {
                expect_inputs(name, ctx, 3)?;
                let (input, output, grad) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
                let geom = self.geometry(rank4(name, "tensor_in", input.shape())?)?;
                self.check_shape("orig_output", rank4(name, "tensor_out", output.shape())?, geom.output_shape())?;
                self.check_shape("grad", rank4(name, "out_backprop", grad.shape())?, geom.output_shape())?;
                let mut out = ctx.allocate_output(0, &geom.input_shape())?;
                geom.max_grad(input.data()?, grad.data()?, out.data_mut()?);
                Ok(())
            }
            PoolOp::AvgPoolGrad => {
                expect_inputs(name, ctx, 2)?;
                let (shape, grad) = (ctx.input(0)?, ctx.input(1)?);
                let sizes = shape_arg(name, "orig_input_shape", &shape)?;
                let input = <[usize; 4]>::try_from(sizes.as_slice()).map_err(|_| {
                    invalid(name, format!("orig_input_shape must have 4 elements, got {}", sizes.len()))
                })?;
                let geom = self.geometry(input)?;
                self.check_shape("grad", rank4(name, "out_backprop", grad.shape())?, geom.output_shape())?;
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
    rows: Window,
    cols: Window,
}

impl PoolGeom {
    fn input_shape(&self) -> [usize; 4] {
        [self.n, self.rows.input, self.cols.input, self.depth]
    }

    fn output_shape(&self) -> [usize; 4] {
        [self.n, self.rows.output, self.cols.output, self.depth]
    }

    fn in_image(&self) -> usize {
        self.rows.input * self.cols.input * self.depth
    }

    fn out_image(&self) -> usize {
        self.rows.output * self.cols.output * self.depth
    }

    fn parallel(&self) -> bool {
        let work = (self.n * self.out_image()).saturating_mul(self.rows.size * self.cols.size);
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

    /// The offsets (in elements, within one image) of the rows of the
    /// window of output pixel `(oy, ox)` that lie inside the input, in
    /// row-major order.
    fn window(&self, oy: usize, ox: usize) -> impl Iterator<Item = usize> + '_ {
        let (rows, cols, depth) = (self.rows, self.cols, self.depth);
        let x_range = cols.valid_range(ox);
        rows.valid_range(oy).flat_map(move |ky| {
            let iy = oy * rows.stride + ky - rows.pad_before;
            x_range.clone().map(move |kx| (iy * cols.input + ox * cols.stride + kx - cols.pad_before) * depth)
        })
    }

    fn forward(&self, max: bool, input: &[f32], out: &mut [f32]) {
        let (in_image, depth) = (self.in_image(), self.depth);
        self.per_image(out, self.out_image(), |image, out_image| {
            let src = &input[image * in_image..(image + 1) * in_image];
            let mut pixels = out_image.chunks_exact_mut(depth);
            for oy in 0..self.rows.output {
                for ox in 0..self.cols.output {
                    let Some(dst) = pixels.next() else { return };
                    if max {
                        dst.fill(f32::MIN);
                        for offset in self.window(oy, ox) {
                            for (d, &s) in dst.iter_mut().zip(&src[offset..offset + depth]) {
                                *d = if s > *d { s } else { *d };
                            }
                        }
                    } else {
                        dst.fill(0.0);
                        let mut count = 0usize;
                        for offset in self.window(oy, ox) {
                            count += 1;
                            for (d, &s) in dst.iter_mut().zip(&src[offset..offset + depth]) {
                                *d += s;
                            }
                        }
                        let count = count as f32;
                        dst.iter_mut().for_each(|d| *d /= count);
                    }
                }
            }
        });
    }

    fn max_grad(&self, input: &[f32], grad: &[f32], dinput: &mut [f32]) {
        let (in_image, out_image, depth) = (self.in_image(), self.out_image(), self.depth);
        self.per_image(dinput, in_image, |image, dimage| {
            dimage.fill(0.0);
            let src = &input[image * in_image..(image + 1) * in_image];
            let grad_image = &grad[image * out_image..(image + 1) * out_image];
            let mut best = vec![0.0f32; depth];
            let mut arg = vec![0usize; depth];
            let mut grads = grad_image.chunks_exact(depth);
            for oy in 0..self.rows.output {
                for ox in 0..self.cols.output {
                    let Some(g) = grads.next() else { return };
                    let mut window = self.window(oy, ox);
                    let Some(first) = window.next() else { continue };
                    best.copy_from_slice(&src[first..first + depth]);
                    arg.fill(first);
                    for offset in window {
                        for ((b, a), &s) in best.iter_mut().zip(arg.iter_mut()).zip(&src[offset..offset + depth]) {
                            if s > *b {
                                *b = s;
                                *a = offset;
                            }
                        }
                    }
                    for (c, (&a, &g)) in arg.iter().zip(g).enumerate() {
                        dimage[a + c] += g;
                    }
                }
            }
        });
    }

    fn avg_grad(&self, grad: &[f32], dinput: &mut [f32]) {
        let (out_image, depth) = (self.out_image(), self.depth);
        self.per_image(dinput, self.in_image(), |image, dimage| {
            dimage.fill(0.0);
            let grad_image = &grad[image * out_image..(image + 1) * out_image];
            let mut grads = grad_image.chunks_exact(depth);
            for oy in 0..self.rows.output {
                let rows = self.rows.valid_range(oy).len();
                for ox in 0..self.cols.output {
                    let Some(g) = grads.next() else { return };
                    let count = rows * self.cols.valid_range(ox).len();
                    if count == 0 {
                        continue;
                    }
                    let count = count as f32;
                    for offset in self.window(oy, ox) {
                        for (d, &g) in dimage[offset..offset + depth].iter_mut().zip(g) {
                            *d += g / count;
                        }
                    }
                }
            }
        });
    }
}
