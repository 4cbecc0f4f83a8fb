//! Image resizing: `ResizeBilinear` and its gradient, what Keras' `Resizing`
//! and `UpSampling2D(interpolation="bilinear")` layers run (through
//! `tf.image.resize`, with half-pixel centres); `ResizeNearestNeighbor` and
//! its gradient (`Resizing(interpolation="nearest")`, the same taps'
//! nearest pixel copied or added back); and (in [`projective`]) the
//! projective transform Keras' random rotation, zoom, translation and shear
//! layers run.
//!
//! Both follow TensorFlow's CPU kernels to the bit: the source coordinate of
//! an output pixel is `y·scale` (or `(y + ½)·scale − ½` with half-pixel
//! centres) in float32, its neighbours are that coordinate's floor and
//! ceiling clamped into the image, and the value is
//! `top + (bottom − top)·y_lerp` with `top = top_left + (top_right −
//! top_left)·x_lerp` (likewise `bottom`), with no fused multiply-add. The
//! gradient adds each output gradient's four weighted parts into the input
//! pixels, output rows, then columns, then channels: the CPU kernel's
//! results bit for bit, except where many outputs land on one input pixel
//! (an `align_corners` resize of a one-pixel image), which TensorFlow sums
//! in another order. Images of a batch are independent and run on the pool
//! side by side.

mod projective;

use super::movement::checked_count;
use super::pool;
use super::shape::ShapeDisplay;
use super::{expect_inputs, types, Attrs, DType, Kernel, KernelDef, OpContext};
use crate::error::Error;

/// float32 images, and uint8 ones (decoded pictures); the output is float32.
const RESIZE_TYPES: &[(&str, &[DType])] = &[("T", &[DType::F32, DType::U8])];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("ResizeBilinear", RESIZE_TYPES, |a| Ok(Box::new(Resize::read(a, false, false)?)))
        .host_memory(&["size"]),
    KernelDef::new("ResizeBilinearGrad", types::T_F32, |a| Ok(Box::new(Resize::read(a, true, false)?))),
    KernelDef::new("ResizeNearestNeighbor", types::T_F32, |a| Ok(Box::new(Resize::read(a, false, true)?)))
        .host_memory(&["size"]),
    KernelDef::new("ResizeNearestNeighborGrad", types::T_F32, |a| Ok(Box::new(Resize::read(a, true, true)?)))
        .host_memory(&["size"]),
    KernelDef::new("ImageProjectiveTransformV3", &[("dtype", &[DType::F32])], |a| {
        Ok(Box::new(projective::Projective::read(a)?))
    })
    .host_memory(&["output_shape", "fill_value"]),
];

/// Below this many output elements a resize runs on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

struct Resize {
    align_corners: bool,
    half_pixel_centers: bool,
    grad: bool,
    /// Nearest-neighbour instead of bilinear.
    nearest: bool,
}

/// Where output row (or column) `i` reads from: two neighbours and the
/// weight of the second (for nearest-neighbour resizing, `lower` only).
#[derive(Clone, Copy)]
struct Tap {
    lower: usize,
    upper: usize,
    lerp: f32,
}

impl Resize {
    fn read(attrs: &dyn Attrs, grad: bool, nearest: bool) -> Result<Resize, Error> {
        let flag = |name: &str| -> Result<bool, Error> { Ok(attrs.has(name) && attrs.bool(name)?) };
        let (align_corners, half_pixel_centers) = (flag("align_corners")?, flag("half_pixel_centers")?);
        Ok(Resize { align_corners, half_pixel_centers, grad, nearest })
    }

    fn op(&self) -> &'static str {
        match (self.nearest, self.grad) {
            (false, false) => "ResizeBilinear",
            (false, true) => "ResizeBilinearGrad",
            (true, false) => "ResizeNearestNeighbor",
            (true, true) => "ResizeNearestNeighborGrad",
        }
    }

    /// The source taps of `out_size` outputs over `in_size` inputs.
    fn taps(&self, in_size: usize, out_size: usize) -> Vec<Tap> {
        let scale = if self.align_corners && out_size > 1 {
            (in_size - 1) as f32 / (out_size - 1) as f32
        } else {
            in_size as f32 / out_size as f32
        };
        if self.nearest {
            // The pixel whose centre is nearest: the scaled coordinate
            // (with half-pixel centres `(i + ½)·scale`, no `− ½`) floored,
            // or rounded half away from zero with aligned corners.
            return (0..out_size)
                .map(|i| {
                    let at = if self.half_pixel_centers { (i as f32 + 0.5) * scale } else { i as f32 * scale };
                    let at = if self.align_corners { at.round() } else { at.floor() };
                    let lower = (at as i64).min(in_size as i64 - 1).max(0) as usize;
                    Tap { lower, upper: lower, lerp: 0.0 }
                })
                .collect();
        }
        (0..out_size)
            .map(|i| {
                let at = if self.half_pixel_centers { (i as f32 + 0.5) * scale - 0.5 } else { i as f32 * scale };
                let floor = at.floor();
                Tap {
                    lower: (floor as i64).max(0) as usize,
                    upper: (at.ceil() as i64).min(in_size as i64 - 1).max(0) as usize,
                    lerp: at - floor,
                }
            })
            .collect()
    }
}

impl Kernel for Resize {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = self.op();
        expect_inputs(op, ctx, 2)?;
        if self.align_corners && self.half_pixel_centers {
            return Err(Error::InvalidArgument(format!(
                "{op}: If half_pixel_centers is True, align_corners must be False."
            )));
        }
        let (first, second) = (ctx.input(0)?, ctx.input(1)?);
        // Forward: (images, size); bilinear gradient: (grads,
        // original_image); nearest gradient: (grads, size of the image).
        let sized;
        let images_shape = match (self.grad, self.nearest) {
            (false, _) => first.shape(),
            (true, false) => second.shape(),
            (true, true) => {
                let g = first.shape();
                if g.len() != 4 {
                    return Err(Error::InvalidArgument(format!(
                        "{op}: input must be 4-dimensional, got shape {}",
                        ShapeDisplay(g)
                    )));
                }
                let (h, w) = size_arg(op, &second)?;
                sized = [g[0], h, w, g[3]];
                &sized[..]
            }
        };
        if images_shape.len() != 4 {
            return Err(Error::InvalidArgument(format!(
                "{op}: input must be 4-dimensional, got shape {}",
                ShapeDisplay(images_shape)
            )));
        }
        let [batch, in_h, in_w, channels] = [images_shape[0], images_shape[1], images_shape[2], images_shape[3]];
        let (out_h, out_w) = if self.grad {
            let g = first.shape();
            if g.len() != 4 || g[0] != batch || g[3] != channels {
                return Err(Error::InvalidArgument(format!(
                    "{op}: grads of shape {} do not match an original image of shape {}",
                    ShapeDisplay(g),
                    ShapeDisplay(images_shape)
                )));
            }
            (g[1], g[2])
        } else {
            size_arg(op, &second)?
        };
        if in_h == 0 || in_w == 0 {
            return Err(Error::InvalidArgument(format!(
                "{op}: input image must be of non-zero size, got shape {}",
                ShapeDisplay(images_shape)
            )));
        }
        let out_shape = if self.grad { images_shape.to_vec() } else { vec![batch, out_h, out_w, channels] };
        checked_count(op, &out_shape)?;
        let (ys, xs) = (self.taps(in_h, out_h), self.taps(in_w, out_w));
        let mut out = ctx.allocate_output(0, &out_shape)?;
        let dst = out.data_mut::<f32>()?;
        if dst.is_empty() {
            return Ok(());
        }
        let image = out_shape[1] * out_shape[2] * channels;
        let geometry = Geometry { in_w, out_h, out_w, channels, ys: &ys, xs: &xs, nearest: self.nearest };
        // The source data, typed once here so that the per-image work
        // cannot fail (and needs no error channel out of the pool).
        enum Source<'a> {
            Grads(&'a [f32]),
            Bytes(&'a [u8]),
            Floats(&'a [f32]),
        }
        let source = match (self.grad, first.dtype()) {
            (true, _) => Source::Grads(first.data::<f32>()?),
            (false, DType::U8) => Source::Bytes(first.data::<u8>()?),
            (false, _) => Source::Floats(first.data::<f32>()?),
        };
        let (grad_len, in_len) = (out_h * out_w * channels, in_h * in_w * channels);
        let run = |b: usize, part: &mut [f32]| match source {
            Source::Grads(grads) => geometry.scatter(&grads[b * grad_len..][..grad_len], part),
            Source::Bytes(src) => geometry.gather(&src[b * in_len..][..in_len], part, f32::from),
            Source::Floats(src) => geometry.gather(&src[b * in_len..][..in_len], part, |v| v),
        };
        if dst.len() < PARALLEL_MIN_ELEMENTS || batch == 1 {
            dst.chunks_exact_mut(image).enumerate().for_each(|(b, part)| run(b, part));
        } else {
            pool::for_each_chunk_mut(dst, image, run);
        }
        Ok(())
    }
}

/// A resize's `size` argument: two positive int32 values.
fn size_arg(op: &str, size: &super::Tensor) -> Result<(usize, usize), Error> {
    if size.shape() != [2] {
        return Err(Error::InvalidArgument(format!(
            "{op}: shape_t must be 1-dimensional with 2 elements, got shape {}",
            ShapeDisplay(size.shape())
        )));
    }
    let size = size.to_i64s()?;
    if size[0] <= 0 || size[1] <= 0 {
        return Err(Error::InvalidArgument(format!("{op}: output dimensions must be positive, got {size:?}")));
    }
    Ok((size[0] as usize, size[1] as usize))
}

/// One image's sizes and taps.
struct Geometry<'a> {
    in_w: usize,
    out_h: usize,
    out_w: usize,
    channels: usize,
    ys: &'a [Tap],
    xs: &'a [Tap],
    /// Copy (add back) the `lower` taps' pixels, no interpolation.
    nearest: bool,
}

impl Geometry<'_> {
    /// The resized image `out` (`out_h × out_w × channels`) of `src`.
    fn gather<T: Copy>(&self, src: &[T], out: &mut [f32], value: impl Fn(T) -> f32) {
        let c = self.channels;
        let row = self.in_w * c;
        for (y, out_row) in out.chunks_exact_mut(self.out_w * c).enumerate() {
            let Tap { lower: top, upper: bottom, lerp: y_lerp } = self.ys[y];
            let (top, bottom) = (&src[top * row..][..row], &src[bottom * row..][..row]);
            for (x, pixel) in out_row.chunks_exact_mut(c).enumerate() {
                let Tap { lower: left, upper: right, lerp: x_lerp } = self.xs[x];
                if self.nearest {
                    for (o, &v) in pixel.iter_mut().zip(&top[left * c..][..c]) {
                        *o = value(v);
                    }
                    continue;
                }
                for (ch, o) in pixel.iter_mut().enumerate() {
                    let (top_left, top_right) = (value(top[left * c + ch]), value(top[right * c + ch]));
                    let (bottom_left, bottom_right) = (value(bottom[left * c + ch]), value(bottom[right * c + ch]));
                    let upper = top_left + (top_right - top_left) * x_lerp;
                    let lower = bottom_left + (bottom_right - bottom_left) * x_lerp;
                    *o = upper + (lower - upper) * y_lerp;
                }
            }
        }
    }

    /// The gradient `out` (`in_h × in_w × channels`) of one image from its
    /// output gradients `grads`.
    fn scatter(&self, grads: &[f32], out: &mut [f32]) {
        out.fill(0.0);
        let c = self.channels;
        for y in 0..self.out_h {
            let Tap { lower: top, upper: bottom, lerp: y_lerp } = self.ys[y];
            let y_keep = 1.0 - y_lerp;
            for x in 0..self.out_w {
                let Tap { lower: left, upper: right, lerp: x_lerp } = self.xs[x];
                let x_keep = 1.0 - x_lerp;
                let g = &grads[(y * self.out_w + x) * c..][..c];
                let at = |yy: usize, xx: usize| (yy * self.in_w + xx) * c;
                let (tl, tr, bl, br) = (at(top, left), at(top, right), at(bottom, left), at(bottom, right));
                if self.nearest {
                    for (o, &v) in out[tl..tl + c].iter_mut().zip(g) {
                        *o += v;
                    }
                    continue;
                }
                for (ch, &v) in g.iter().enumerate() {
                    out[tl + ch] += v * y_keep * x_keep;
                    out[tr + ch] += v * y_keep * x_lerp;
                    out[bl + ch] += v * y_lerp * x_keep;
                    out[br + ch] += v * y_lerp * x_lerp;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalContext, Tensor};

    fn resize(align_corners: bool, half_pixel_centers: bool, grad: bool) -> Resize {
        Resize { align_corners, half_pixel_centers, grad, nearest: false }
    }

    fn image(shape: [usize; 4]) -> Vec<f32> {
        (0..shape.iter().product::<usize>()).map(|i| ((i * 37) % 101) as f32 - 50.0).collect()
    }

    /// Bilinear interpolation written out per output element.
    fn reference(src: &[f32], shape: [usize; 4], size: [usize; 2], kernel: &Resize) -> Vec<f32> {
        let [batch, in_h, in_w, c] = shape;
        let (ys, xs) = (kernel.taps(in_h, size[0]), kernel.taps(in_w, size[1]));
        let at = |b: usize, y: usize, x: usize, ch: usize| src[((b * in_h + y) * in_w + x) * c + ch];
        let mut out = Vec::new();
        for b in 0..batch {
            for y in &ys {
                for x in &xs {
                    for ch in 0..c {
                        let top = at(b, y.lower, x.lower, ch)
                            + (at(b, y.lower, x.upper, ch) - at(b, y.lower, x.lower, ch)) * x.lerp;
                        let bottom = at(b, y.upper, x.lower, ch)
                            + (at(b, y.upper, x.upper, ch) - at(b, y.upper, x.lower, ch)) * x.lerp;
                        out.push(top + (bottom - top) * y.lerp);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn resizes_match_the_interpolation_in_every_mode() {
        let cases =
            [([2, 4, 4, 3], [8, 8]), ([1, 7, 5, 2], [3, 11]), ([3, 1, 1, 1], [2, 2]), ([2, 40, 30, 8], [61, 17])];
        for (shape, size) in cases {
            for (align, half) in [(false, false), (false, true), (true, false)] {
                let kernel = resize(align, half, false);
                let src = image(shape);
                let inputs = vec![
                    Tensor::from_vec(&shape, src.clone()).unwrap(),
                    Tensor::from_vec(&[2], vec![size[0] as i32, size[1] as i32]).unwrap(),
                ];
                let out = LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap().remove(0);
                assert_eq!(out.shape(), [shape[0], size[0], size[1], shape[3]]);
                assert_eq!(out.to_vec::<f32>().unwrap(), reference(&src, shape, size, &kernel), "{shape:?} {size:?}");
            }
        }
        // Half-pixel centres: an upsampling by 2 puts the first output a
        // quarter pixel before the first input (clamped), the second a
        // quarter after it.
        let taps = resize(false, true, false).taps(2, 4);
        assert_eq!([taps[0].lower, taps[0].upper, taps[1].lower, taps[1].upper], [0, 0, 0, 1]);
        assert_eq!([taps[0].lerp, taps[1].lerp, taps[3].lerp], [0.75, 0.25, 0.25]);
    }

    /// The gradient is the adjoint of the resize: ⟨resize(x), g⟩ = ⟨x, grad(g)⟩.
    #[test]
    fn the_gradient_is_the_adjoint_of_the_resize() {
        for (shape, size) in [([2, 5, 4, 3], [9, 7]), ([1, 8, 8, 2], [3, 5]), ([2, 33, 31, 4], [64, 48])] {
            for (align, half) in [(false, false), (false, true), (true, false)] {
                let x = image(shape);
                let g: Vec<f32> =
                    (0..shape[0] * size[0] * size[1] * shape[3]).map(|i| ((i * 13) % 7) as f32 - 3.0).collect();
                let forward = LocalContext::run(
                    &resize(align, half, false),
                    vec![
                        Tensor::from_vec(&shape, x.clone()).unwrap(),
                        Tensor::from_vec(&[2], vec![size[0] as i64, size[1] as i64]).unwrap(),
                    ],
                    &[DType::F32],
                )
                .unwrap()
                .remove(0)
                .to_vec::<f32>()
                .unwrap();
                let grads = Tensor::from_vec(&[shape[0], size[0], size[1], shape[3]], g.clone()).unwrap();
                let backward = LocalContext::run(
                    &resize(align, half, true),
                    vec![grads, Tensor::from_vec(&shape, vec![0f32; x.len()]).unwrap()],
                    &[DType::F32],
                )
                .unwrap()
                .remove(0)
                .to_vec::<f32>()
                .unwrap();
                let dot =
                    |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum::<f64>();
                let (left, right) = (dot(&forward, &g), dot(&x, &backward));
                assert!((left - right).abs() <= 1e-4 * left.abs().max(1.0), "{shape:?} {size:?}: {left} vs {right}");
            }
        }
    }

    #[test]
    fn nearest_taps_pick_the_nearest_centre() {
        let nearest =
            |align, half| Resize { align_corners: align, half_pixel_centers: half, grad: false, nearest: true };
        let picks = |kernel: &Resize, from: usize, to: usize| -> Vec<usize> {
            kernel.taps(from, to).iter().map(|t| t.lower).collect()
        };
        // Upsampling 2 → 4 in all three modes; downsampling 4 → 2 takes the
        // first pixel of each pair (legacy), the second (half-pixel centres:
        // floor((i + ½)·2)), or the corners; 5 → 3 with half-pixel centres.
        for (align, half) in [(false, false), (false, true), (true, false)] {
            assert_eq!(picks(&nearest(align, half), 2, 4), [0, 0, 1, 1], "{align} {half}");
        }
        assert_eq!(picks(&nearest(false, false), 4, 2), [0, 2]);
        assert_eq!(picks(&nearest(false, true), 4, 2), [1, 3]);
        assert_eq!(picks(&nearest(true, false), 4, 2), [0, 3]);
        assert_eq!(picks(&nearest(false, true), 5, 3), [0, 2, 4]);
    }

    /// ⟨resize(x), g⟩ = ⟨x, grad(g)⟩ for nearest-neighbour resizing too,
    /// and the resize only copies input pixels.
    #[test]
    fn the_nearest_gradient_is_the_adjoint_of_the_resize() {
        for (shape, size) in [([2, 5, 4, 3], [9, 7]), ([1, 8, 8, 2], [3, 5]), ([2, 33, 31, 4], [64, 48])] {
            for (align, half) in [(false, false), (false, true), (true, false)] {
                let kernel = |grad| Resize { align_corners: align, half_pixel_centers: half, grad, nearest: true };
                let x = image(shape);
                let g: Vec<f32> =
                    (0..shape[0] * size[0] * size[1] * shape[3]).map(|i| ((i * 13) % 7) as f32 - 3.0).collect();
                let run = |kernel: Resize, inputs| {
                    LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap().remove(0).to_vec::<f32>().unwrap()
                };
                let sizes = |h: usize, w: usize| Tensor::from_vec(&[2], vec![h as i32, w as i32]).unwrap();
                let forward =
                    run(kernel(false), vec![Tensor::from_vec(&shape, x.clone()).unwrap(), sizes(size[0], size[1])]);
                assert!(forward.iter().all(|v| x.contains(v)), "{shape:?} {size:?}");
                let grads = Tensor::from_vec(&[shape[0], size[0], size[1], shape[3]], g.clone()).unwrap();
                let backward = run(kernel(true), vec![grads, sizes(shape[1], shape[2])]);
                assert_eq!(backward.len(), x.len());
                let dot =
                    |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum::<f64>();
                let (left, right) = (dot(&forward, &g), dot(&x, &backward));
                assert!((left - right).abs() <= 1e-4 * left.abs().max(1.0), "{shape:?} {size:?}: {left} vs {right}");
            }
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let run = |kernel: Resize, inputs: Vec<Tensor>| {
            LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap_err().to_string()
        };
        let img = || Tensor::from_vec(&[1, 2, 2, 1], vec![1f32; 4]).unwrap();
        let size = |h: i32, w: i32| Tensor::from_vec(&[2], vec![h, w]).unwrap();
        assert!(run(resize(true, true, false), vec![img(), size(3, 3)]).contains("align_corners must be False"));
        assert!(run(resize(false, false, false), vec![img(), size(0, 3)]).contains("must be positive"));
        let flat = Tensor::from_vec(&[2, 2], vec![1f32; 4]).unwrap();
        assert!(run(resize(false, false, false), vec![flat, size(3, 3)]).contains("4-dimensional"));
        let empty = Tensor::from_vec(&[1, 0, 2, 1], Vec::<f32>::new()).unwrap();
        assert!(run(resize(false, false, false), vec![empty, size(3, 3)]).contains("non-zero size"));
        let grads = Tensor::from_vec(&[2, 3, 3, 1], vec![1f32; 18]).unwrap();
        assert!(run(resize(false, false, true), vec![grads, img()]).contains("do not match"));
    }
}
