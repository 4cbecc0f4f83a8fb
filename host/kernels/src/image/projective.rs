//! `ImageProjectiveTransformV3`: each output pixel reads the input at a
//! projective transform of its coordinates. Keras' `RandomRotation`,
//! `RandomZoom`, `RandomTranslation` and `RandomShear` run it.
//!
//! The arithmetic is TensorFlow's CPU kernel's, in float32 and in the same
//! order, so results are the same bits: with transform row `t`, output pixel
//! `(x, y)` reads `((t0·x + t1·y + t2) / p, (t3·x + t4·y + t5) / p)` where
//! `p = t6·x + t7·y + 1` (`p = 0` gives the fill value). A coordinate outside
//! the image is first mapped back by the fill mode (scipy's `reflect`,
//! `wrap`, `nearest`; `constant` leaves it), then read by nearest or
//! bilinear interpolation, a tap outside the image reading the fill value.

use super::super::movement::checked_count;
use super::super::pool;
use super::super::shape::ShapeDisplay;
use super::super::{expect_inputs, Attrs, Kernel, OpContext};
use crate::error::Error;

const OP: &str = "ImageProjectiveTransformV3";

/// Below this many output elements a transform runs on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

fn invalid(message: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{OP}: {message}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpolation {
    Nearest,
    Bilinear,
}

/// How a coordinate outside the image is brought back in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FillMode {
    /// `dcba|abcd|dcba`.
    Reflect,
    /// `abcd|abcd|abcd`.
    Wrap,
    /// Left outside: the taps there read the fill value.
    Constant,
    /// Clamped to the edge.
    Nearest,
}

impl FillMode {
    /// The in-image coordinate TensorFlow reads for `coord` along an axis of
    /// `len` pixels (integer and float operands mixed as its C++ mixes them).
    fn map(self, coord: f32, len: usize) -> f32 {
        let len = len as i64;
        let mut c = coord;
        match self {
            FillMode::Constant => return c,
            FillMode::Nearest => {}
            FillMode::Reflect => {
                if c < 0.0 {
                    if len <= 1 {
                        c = 0.0;
                    } else {
                        let twice = 2 * len;
                        if c < twice as f32 {
                            c += (twice * (-c / twice as f32) as i64) as f32;
                        }
                        c = if c < -len as f32 { c + twice as f32 } else { -c - 1.0 };
                    }
                } else if c > (len - 1) as f32 {
                    if len <= 1 {
                        c = 0.0;
                    } else {
                        let twice = 2 * len;
                        c -= (twice * (c / twice as f32) as i64) as f32;
                        if c >= len as f32 {
                            c = twice as f32 - c - 1.0;
                        }
                    }
                }
            }
            FillMode::Wrap => {
                if c < 0.0 {
                    if len <= 1 {
                        c = 0.0;
                    } else {
                        c += (len * ((-c / (len - 1) as f32) as i64 + 1)) as f32;
                    }
                } else if c > (len - 1) as f32 {
                    if len <= 1 {
                        c = 0.0;
                    } else {
                        c -= (len * (c / (len - 1) as f32) as i64) as f32;
                    }
                }
            }
        }
        // Clamped (NaN passes through), as Eigen's clamp does: a mapped
        // 3.5 on an axis of 4 would round to 4.
        let c = if c < 0.0 { 0.0 } else { c };
        let top = (len - 1) as f32;
        if top < c {
            top
        } else {
            c
        }
    }
}

pub(super) struct Projective {
    interpolation: Interpolation,
    fill_mode: FillMode,
}

impl Projective {
    pub(super) fn read(attrs: &dyn Attrs) -> Result<Self, Error> {
        let interpolation = match attrs.string("interpolation")?.as_str() {
            "NEAREST" => Interpolation::Nearest,
            "BILINEAR" => Interpolation::Bilinear,
            other => return Err(invalid(format!("invalid interpolation {other:?}; supported: NEAREST, BILINEAR"))),
        };
        let mode = if attrs.has("fill_mode") { attrs.string("fill_mode")? } else { "CONSTANT".into() };
        let fill_mode = match mode.as_str() {
            "REFLECT" => FillMode::Reflect,
            "WRAP" => FillMode::Wrap,
            "CONSTANT" => FillMode::Constant,
            "NEAREST" => FillMode::Nearest,
            other => {
                return Err(invalid(format!(
                    "invalid fill_mode {other:?}; supported: REFLECT, WRAP, CONSTANT, NEAREST"
                )))
            }
        };
        Ok(Projective { interpolation, fill_mode })
    }
}

/// One batch's input image: `[height, width, channels]`, row-major.
struct Image<'a> {
    data: &'a [f32],
    height: usize,
    width: usize,
    channels: usize,
}

impl Image<'_> {
    /// Pixel `(y, x)`'s channels, or `None` outside the image. `y` and `x`
    /// are float coordinates already rounded or floored; NaN is outside
    /// (TensorFlow's cast of NaN to an index lands outside in practice).
    #[inline]
    fn pixel(&self, y: f32, x: f32) -> Option<&[f32]> {
        // Saturating casts: anything beyond the index range is outside.
        let inside = |v: f32, len: usize| v >= 0.0 && (v as i64) < len as i64;
        if !(inside(y, self.height) && inside(x, self.width)) {
            return None;
        }
        let at = ((y as usize) * self.width + x as usize) * self.channels;
        Some(&self.data[at..at + self.channels])
    }
}

impl Projective {
    /// One output pixel at `(x, y)` with transform `t`.
    #[inline]
    fn pixel(&self, image: &Image<'_>, t: &[f32], x: f32, y: f32, fill: f32, out: &mut [f32]) {
        let projection = t[6] * x + t[7] * y + 1.0;
        if projection == 0.0 {
            out.fill(fill);
            return;
        }
        let in_x = self.fill_mode.map((t[0] * x + t[1] * y + t[2]) / projection, image.width);
        let in_y = self.fill_mode.map((t[3] * x + t[4] * y + t[5]) / projection, image.height);
        match self.interpolation {
            Interpolation::Nearest => match image.pixel(in_y.round(), in_x.round()) {
                Some(p) => out.copy_from_slice(p),
                None => out.fill(fill),
            },
            Interpolation::Bilinear => {
                let (y0, x0) = (in_y.floor(), in_x.floor());
                let (y1, x1) = (y0 + 1.0, x0 + 1.0);
                let taps = [image.pixel(y0, x0), image.pixel(y0, x1), image.pixel(y1, x0), image.pixel(y1, x1)];
                let read = |tap: usize, c: usize| taps[tap].map_or(fill, |p| p[c]);
                for (c, o) in out.iter_mut().enumerate() {
                    let top = (x1 - in_x) * read(0, c) + (in_x - x0) * read(1, c);
                    let bottom = (x1 - in_x) * read(2, c) + (in_x - x0) * read(3, c);
                    *o = (y1 - in_y) * top + (in_y - y0) * bottom;
                }
            }
        }
    }
}

impl Kernel for Projective {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs(OP, ctx, 4)?;
        let (images, transforms, shape, fill) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.input(3)?);
        let &[batch, height, width, channels] = images.shape() else {
            return Err(invalid(format!("Input images must have rank 4, got shape {}", ShapeDisplay(images.shape()))));
        };
        let rows = match *transforms.shape() {
            [rows, 8] if rows == batch || rows == 1 => rows,
            _ => {
                return Err(invalid(format!(
                    "Input transform should be num_images x 8 or 1 x 8, got shape {} for {batch} images",
                    ShapeDisplay(transforms.shape())
                )))
            }
        };
        if shape.shape() != [2] {
            return Err(invalid(format!(
                "output shape must be 1-dimensional with two elements, got shape {}",
                ShapeDisplay(shape.shape())
            )));
        }
        let size = shape.to_i64s()?;
        if size[0] <= 0 || size[1] <= 0 {
            return Err(invalid(format!("output dimensions must be positive, got {size:?}")));
        }
        if !fill.shape().is_empty() {
            return Err(invalid(format!("fill_value must be a scalar, got shape {}", ShapeDisplay(fill.shape()))));
        }
        let fill = fill.scalar::<f32>()?;
        let (out_h, out_w) = (size[0] as usize, size[1] as usize);
        let out_shape = [batch, out_h, out_w, channels];
        checked_count(OP, &out_shape)?;
        let mut out = ctx.allocate_output(0, &out_shape)?;
        let out = out.data_mut::<f32>()?;
        if out.is_empty() {
            return Ok(());
        }
        let (data, t) = (images.data::<f32>()?, transforms.data::<f32>()?);
        let image_len = height * width * channels;
        // One output row (of one image) per work item.
        let row = |index: usize, row_out: &mut [f32]| {
            let (b, y) = (index / out_h, index % out_h);
            let image = Image { data: &data[b * image_len..(b + 1) * image_len], height, width, channels };
            let t = if rows == 1 { &t[..8] } else { &t[b * 8..b * 8 + 8] };
            for (x, pixel) in row_out.chunks_exact_mut(channels).enumerate() {
                self.pixel(&image, t, x as f32, y as f32, fill, pixel);
            }
        };
        let row_len = out_w * channels;
        if out.len() >= PARALLEL_MIN_ELEMENTS {
            pool::for_each_chunk_mut(out, row_len, row);
        } else {
            out.chunks_mut(row_len).enumerate().for_each(|(i, chunk)| row(i, chunk));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, LocalContext, Tensor};

    #[test]
    fn fill_modes_map_as_tensorflow_does() {
        // An axis of 4: abcd. Reflect: dcba|abcd|dcba. Wrap: abcd|abcd, but
        // by TensorFlow's formula, which steps by 4 over a period of 3 and
        // clamps (-4 → 4 → 3, 3.5 → -0.5 → 0).
        let cases = [
            (FillMode::Reflect, [-1.0, -4.0, -5.0, 4.0, 7.0, 8.0, 1.5], [0.0, 3.0, 3.0, 3.0, 0.0, 0.0, 1.5]),
            (FillMode::Wrap, [-1.0, -4.0, 4.0, 5.0, 3.5, -0.5, 1.5], [3.0, 3.0, 0.0, 1.0, 0.0, 3.0, 1.5]),
            (FillMode::Nearest, [-1.0, -4.0, 4.0, 9.0, 3.5, -0.5, 1.5], [0.0, 0.0, 3.0, 3.0, 3.0, 0.0, 1.5]),
            (FillMode::Constant, [-1.0, -4.0, 4.0, 9.0, 3.5, -0.5, 1.5], [-1.0, -4.0, 4.0, 9.0, 3.5, -0.5, 1.5]),
        ];
        for (mode, coords, expected) in cases {
            let got: Vec<f32> = coords.iter().map(|&c| mode.map(c, 4)).collect();
            assert_eq!(got, expected, "{mode:?}");
        }
        // A one-pixel axis maps everything to 0; NaN passes through.
        assert_eq!(FillMode::Reflect.map(-3.0, 1), 0.0);
        assert_eq!(FillMode::Wrap.map(7.0, 1), 0.0);
        assert!(FillMode::Reflect.map(f32::NAN, 4).is_nan());
    }

    #[test]
    fn nan_and_huge_coordinates_read_the_fill_value() {
        let data = [1.0f32, 2.0, 3.0, 4.0];
        let image = Image { data: &data, height: 2, width: 2, channels: 1 };
        assert_eq!(image.pixel(1.0, 1.0), Some(&[4.0f32][..]));
        for (y, x) in [(f32::NAN, 0.0), (0.0, f32::NAN), (1e30, 0.0), (0.0, -1e30), (2.0, 0.0), (-1.0, 1.0)] {
            assert_eq!(image.pixel(y, x), None, "({y}, {x})");
        }
    }

    /// Runs the kernel on `image` (`[1, h, w, 1]`, values `0, 1, 2, …`)
    /// with one transform row, fill value -1.
    fn transform(shape: [usize; 2], t: [f32; 8], size: [i32; 2], kernel: Projective) -> Vec<f32> {
        let image: Vec<f32> = (0..shape[0] * shape[1]).map(|v| v as f32).collect();
        let inputs = vec![
            Tensor::from_vec(&[1, shape[0], shape[1], 1], image).unwrap(),
            Tensor::from_vec(&[1, 8], t.to_vec()).unwrap(),
            Tensor::from_vec(&[2], size.to_vec()).unwrap(),
            Tensor::from_vec(&[], vec![-1.0f32]).unwrap(),
        ];
        LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap().remove(0).to_vec::<f32>().unwrap()
    }

    #[test]
    fn transforms_move_pixels_where_the_matrix_says() {
        let nearest = |fill_mode| Projective { interpolation: Interpolation::Nearest, fill_mode };
        let bilinear = |fill_mode| Projective { interpolation: Interpolation::Bilinear, fill_mode };
        let identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let image: Vec<f32> = (0..12).map(|v| v as f32).collect();
        assert_eq!(transform([3, 4], identity, [3, 4], bilinear(FillMode::Reflect)), image);
        // Output (x, y) reads input (x + 1, y): a shift left, the last
        // column filled (constant), repeated (nearest) or mirrored (reflect).
        let shift = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let row = |mode| transform([3, 4], shift, [3, 4], nearest(mode))[..4].to_vec();
        assert_eq!(row(FillMode::Constant), [1.0, 2.0, 3.0, -1.0]);
        assert_eq!(row(FillMode::Nearest), [1.0, 2.0, 3.0, 3.0]);
        assert_eq!(row(FillMode::Reflect), [1.0, 2.0, 3.0, 3.0]);
        // Transposed reading (x reads row x, y reads column y): a 4×3 output.
        let transpose = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        let t = transform([3, 4], transpose, [4, 3], nearest(FillMode::Constant));
        assert_eq!(t, [0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0, 7.0, 11.0]);
        // Half a pixel right: the mean of neighbours; the last column's
        // right tap is outside and reads the fill value.
        let half = [1.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0];
        let h = transform([3, 4], half, [3, 4], bilinear(FillMode::Constant));
        assert_eq!(h[..4], [0.5, 1.5, 2.5, 1.0]);
        // A projection of 0 (t6·x + 1 = 0 at x = 2) fills the pixel.
        let vanishing = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, -0.5, 0.0];
        assert_eq!(transform([3, 4], vanishing, [3, 4], nearest(FillMode::Nearest))[2], -1.0);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let kernel = Projective { interpolation: Interpolation::Nearest, fill_mode: FillMode::Constant };
        let run = |images: &[usize], rows: usize, size: Vec<i32>, fill: &[usize]| {
            let inputs = vec![
                Tensor::zeros(DType::F32, images).unwrap(),
                Tensor::zeros(DType::F32, &[rows, 8]).unwrap(),
                Tensor::from_vec(&[size.len()], size).unwrap(),
                Tensor::zeros(DType::F32, fill).unwrap(),
            ];
            LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap_err().to_string()
        };
        let message = run(&[2, 3, 3], 1, vec![3, 3], &[]);
        assert!(message.contains("ImageProjectiveTransformV3") && message.contains("rank 4"), "{message}");
        assert!(run(&[2, 3, 3, 1], 3, vec![3, 3], &[]).contains("num_images x 8"));
        assert!(run(&[2, 3, 3, 1], 2, vec![3, 0], &[]).contains("must be positive"));
        assert!(run(&[2, 3, 3, 1], 2, vec![3, 3, 3], &[]).contains("two elements"));
        assert!(run(&[2, 3, 3, 1], 2, vec![3, 3], &[1]).contains("scalar"));
    }
}
