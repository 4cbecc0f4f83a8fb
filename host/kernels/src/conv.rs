//! float32 NHWC `Conv2D`, NDHWC `Conv3D`, their backprops, `_FusedConv2D`
//! (a `Conv2D` whose output goes through a bias or batch norm and an
//! activation, [`super::epilogue`]), (in [`depthwise`]) the depthwise
//! convolution and its backprops, and (in [`pooling`]) 2-D and 3-D max and
//! average pooling with their gradients.
//!
//! 2-D and 3-D convolutions share one geometry with three spatial windows
//! (planes, rows, columns); a 2-D convolution has a single plane and a 1-tap
//! plane window, which costs one loop trip.
//!
//! Convolution is matrix multiplication on `gemm`: the input patches of a
//! tile of output pixels are copied into a scratch matrix (im2col, one row
//! per output pixel, `kh·kw·ic` columns in the filter's HWIO order) and
//! multiplied by the filter, which is already a row-major `[kh·kw·ic, oc]`
//! matrix (`[kd·kh·kw·ic, oc]` for a 3-D DHWIO filter). A 1×1
//! convolution with stride 1 and no padding skips the copy: the input is the
//! patch matrix. The backprops are the same products turned around:
//!
//! - input: `cols = grad · filterᵀ`, then every column is added back to the
//!   input pixel it came from (col2im);
//! - filter: `dfilter = Σ colsᵀ · grad` over tiles of output pixels.
//!
//! Tiles are sized to keep the scratch matrix in cache and spread over the
//! compute pool; small problems run inline on the calling thread. A fused
//! convolution finishes each tile of output right after its product; a 1×1
//! one, whose product runs whole, in one pass afterwards.
//!
//! Only `data_format = "NHWC"` / `"NDHWC"` is implemented; channels-first is
//! refused with `Unimplemented` when the kernel is built (TensorFlow's own
//! CPU kernels refuse it as well). `Conv3D` accepts dilations, which
//! TensorFlow's CPU kernel refuses. Grouped convolution (input depth a multiple
//! of the filter depth) is refused the same way.

mod depthwise;
mod pooling;

use rayon::prelude::*;

use super::epilogue::{Epilogue, FusedOps, FusedProduct};
use super::pool;
use super::sgemm::{Destination, Operand, Product};
use super::shape::ShapeDisplay;
use super::{expect_inputs, types, Attrs, DType, Kernel, KernelDef, OpContext};
use crate::error::code::UNIMPLEMENTED;
use crate::error::Error;

const T_F32: &[(&str, &[DType])] = types::T_F32;
/// `_FusedConv2D`'s extra inputs (`args`) are typed by the list `TArgs`:
/// the constraint holds for every element.
const T_TARGS_F32: &[(&str, &[DType])] = &[("T", types::F32), ("TArgs", types::F32)];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("Conv2D", T_F32, |a| Ok(Box::new(ConvKernel::new(ConvOp::Forward, 2, a)?))).deferrable(),
    KernelDef::new("Conv2DBackpropInput", T_F32, |a| Ok(Box::new(ConvKernel::new(ConvOp::BackpropInput, 2, a)?)))
        .host_memory(&["input_sizes"])
        .deferrable(),
    KernelDef::new("Conv2DBackpropFilter", T_F32, |a| Ok(Box::new(ConvKernel::new(ConvOp::BackpropFilter, 2, a)?)))
        .host_memory(&["filter_sizes"])
        .deferrable(),
    KernelDef::new("_FusedConv2D", T_TARGS_F32, |a| Ok(Box::new(ConvKernel::fused(a)?))).deferrable(),
    KernelDef::new("Conv3D", T_F32, |a| Ok(Box::new(ConvKernel::new(ConvOp::Forward, 3, a)?))).deferrable(),
    KernelDef::new("Conv3DBackpropInputV2", T_F32, |a| Ok(Box::new(ConvKernel::new(ConvOp::BackpropInput, 3, a)?)))
        .host_memory(&["input_sizes"])
        .deferrable(),
    KernelDef::new("Conv3DBackpropFilterV2", T_F32, |a| Ok(Box::new(ConvKernel::new(ConvOp::BackpropFilter, 3, a)?)))
        .host_memory(&["filter_sizes"])
        .deferrable(),
    KernelDef::new("DepthwiseConv2dNative", T_F32, |a| {
        Ok(Box::new(depthwise::DepthwiseKernel::new(depthwise::DepthwiseOp::Forward, a)?))
    }),
    KernelDef::new("DepthwiseConv2dNativeBackpropInput", T_F32, |a| {
        Ok(Box::new(depthwise::DepthwiseKernel::new(depthwise::DepthwiseOp::BackpropInput, a)?))
    })
    .host_memory(&["input_sizes"]),
    KernelDef::new("DepthwiseConv2dNativeBackpropFilter", T_F32, |a| {
        Ok(Box::new(depthwise::DepthwiseKernel::new(depthwise::DepthwiseOp::BackpropFilter, a)?))
    })
    .host_memory(&["filter_sizes"]),
    KernelDef::new("MaxPool", T_F32, |a| Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::MaxPool, a)?))),
    KernelDef::new("MaxPoolGrad", T_F32, |a| Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::MaxPoolGrad, a)?))),
    KernelDef::new("AvgPool", T_F32, |a| Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::AvgPool, a)?))),
    KernelDef::new("AvgPoolGrad", T_F32, |a| Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::AvgPoolGrad, a)?)))
        .host_memory(&["orig_input_shape"]),
    KernelDef::new("MaxPool3D", T_F32, |a| Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::MaxPool3D, a)?))),
    KernelDef::new("MaxPool3DGrad", &[("T", types::F32), ("TInput", types::F32)], |a| {
        Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::MaxPool3DGrad, a)?))
    }),
    KernelDef::new("AvgPool3D", T_F32, |a| Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::AvgPool3D, a)?))),
    KernelDef::new("AvgPool3DGrad", T_F32, |a| {
        Ok(Box::new(pooling::PoolKernel::new(pooling::PoolOp::AvgPool3DGrad, a)?))
    })
    .host_memory(&["orig_input_shape"]),
];

/// Below this many multiply-adds a convolution runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 64 * 1024;

/// Floats in one im2col scratch tile (128 KiB: stays in L2 with the filter).
const TILE_FLOATS: usize = 32 * 1024;

fn invalid(op: &str, message: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{op}: {message}"))
}

fn unimplemented(op: &str, message: impl std::fmt::Display) -> Error {
    Error::Tensorflow { code: UNIMPLEMENTED, message: format!("tfwasm: {op}: {message}") }
}

// ------------------------------------------------------------------ windows

/// TensorFlow's `padding` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Padding {
    Valid,
    Same,
    /// Explicit (before, after) paddings for rows and columns.
    Explicit {
        rows: (usize, usize),
        cols: (usize, usize),
    },
}

impl Padding {
    /// Reads `padding` (and `explicit_paddings` where the op has it), with
    /// TensorFlow's checks.
    pub(crate) fn from_attrs(op: &str, attrs: &dyn Attrs) -> Result<Self, Error> {
        let name = attrs.string("padding")?;
        let explicit = if attrs.has("explicit_paddings") { attrs.ints("explicit_paddings")? } else { Vec::new() };
        match name.as_str() {
            "VALID" | "SAME" if !explicit.is_empty() => Err(invalid(
                op,
                format!("explicit_paddings attribute must be empty if the padding attribute is not EXPLICIT, got {explicit:?}"),
            )),
            "VALID" => Ok(Padding::Valid),
            "SAME" => Ok(Padding::Same),
            "EXPLICIT" => {
                if explicit.len() != 8 {
                    return Err(invalid(
                        op,
                        format!("explicit_paddings attribute must contain 8 values, but got: {}", explicit.len()),
                    ));
                }
                if explicit.iter().any(|&p| p < 0) {
                    return Err(invalid(op, format!("all explicit padding values must be nonnegative, got {explicit:?}")));
                }
                if explicit[0] != 0 || explicit[1] != 0 || explicit[6] != 0 || explicit[7] != 0 {
                    return Err(unimplemented(
                        op,
                        format!("nonzero explicit padding in the batch or depth dimensions is not supported, got {explicit:?}"),
                    ));
                }
                let p = |i: usize| explicit[i] as usize;
                Ok(Padding::Explicit { rows: (p(2), p(3)), cols: (p(4), p(5)) })
            }
            other => Err(invalid(op, format!("unknown padding {other:?}"))),
        }
    }
}

/// One spatial dimension of a sliding window: output size and the padding
/// before the first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub input: usize,
    pub size: usize,
    pub stride: usize,
    pub dilation: usize,
    pub output: usize,
    pub pad_before: usize,
}

impl Window {
    /// TensorFlow's `GetWindowedOutputSizeVerbose`. `explicit` is the
    /// (before, after) padding for `Padding::Explicit`.
    pub(crate) fn new(
        op: &str,
        input: usize,
        size: usize,
        stride: usize,
        dilation: usize,
        padding: Padding,
        explicit: (usize, usize),
    ) -> Result<Self, Error> {
        let too_large = || invalid(op, "window dimensions are too large");
        let to_i64 = |v: usize| i64::try_from(v).map_err(|_| too_large());
        let (input_i, size_i, stride_i, dilation_i) =
            (to_i64(input)?, to_i64(size)?, to_i64(stride)?, to_i64(dilation)?);
        let effective = (size_i - 1).checked_mul(dilation_i).and_then(|v| v.checked_add(1)).ok_or_else(too_large)?;
        let (output, pad_before) = match padding {
            Padding::Valid => ((input_i - effective + stride_i) / stride_i, 0),
            Padding::Explicit { .. } => {
                let (before, after) = (to_i64(explicit.0)?, to_i64(explicit.1)?);
                ((input_i + before + after - effective + stride_i) / stride_i, before)
            }
            Padding::Same => {
                let output = (input_i + stride_i - 1) / stride_i;
                let needed = ((output - 1) * stride_i + effective - input_i).max(0);
                (output, needed / 2)
            }
        };
        if output < 0 {
            return Err(invalid(
                op,
                format!(
                    "Computed output size would be negative: {output} [input_size: {input}, effective_filter_size: {effective}, stride: {stride}]"
                ),
            ));
        }
        Ok(Window { input, size, stride, dilation, output: output as usize, pad_before: pad_before as usize })
    }

    /// Input index of window element `k` for output `o`, if inside the input.
    #[inline]
    pub(crate) fn source(&self, o: usize, k: usize) -> Option<usize> {
        (o * self.stride + k * self.dilation).checked_sub(self.pad_before).filter(|&i| i < self.input)
    }

    /// The window elements `k` of output `o` that fall inside the input.
    #[inline]
    pub(crate) fn valid_range(&self, o: usize) -> std::ops::Range<usize> {
        // start_pos: the position of k = 0, in padded coordinates.
        let start_pos = o * self.stride;
        // smallest k with start_pos + k*d >= pad_before
        let first =
            if start_pos >= self.pad_before { 0 } else { (self.pad_before - start_pos).div_ceil(self.dilation) };
        // largest k with start_pos + k*d < pad_before + input
        let limit = self.pad_before + self.input;
        let end = if start_pos >= limit { 0 } else { (limit - start_pos - 1) / self.dilation + 1 };
        first.min(self.size)..end.min(self.size).max(first.min(self.size))
    }
}

impl Window {
    /// The outputs `o` whose window element `k` falls inside the input.
    #[inline]
    pub(crate) fn valid_outputs(&self, k: usize) -> std::ops::Range<usize> {
        let offset = k * self.dilation; // padded position of element k for o = 0
        let limit = self.pad_before + self.input;
        let end = if offset >= limit { 0 } else { ((limit - offset - 1) / self.stride + 1).min(self.output) };
        let start = if offset >= self.pad_before { 0 } else { (self.pad_before - offset).div_ceil(self.stride) };
        start.min(end)..end
    }
}

/// Reads a `strides`/`dilations`/`ksize` attribute of `len` positive
/// values (4 for 2-D ops, 5 for 3-D ones); `ones` is the default when the
/// attribute is absent.
fn window_attr(op: &str, attrs: &dyn Attrs, name: &str, len: usize, ones: bool) -> Result<Vec<usize>, Error> {
    if !attrs.has(name) && ones {
        return Ok(vec![1; len]);
    }
    let values = attrs.ints(name)?;
    if values.len() != len {
        return Err(invalid(op, format!("Sliding window {name} field must specify {len} dimensions, got {values:?}")));
    }
    if values.iter().any(|&v| v <= 0) {
        return Err(invalid(op, format!("{name} must be positive, got {values:?}")));
    }
    Ok(values.into_iter().map(|v| v as usize).collect())
}

/// The three spatial extents (planes, rows, columns) of the dimensions
/// between batch and channels: a 2-D shape has one plane.
fn spatial3(dims: &[usize]) -> [usize; 3] {
    match *dims {
        [d, h, w] => [d, h, w],
        [h, w] => [1, h, w],
        _ => unreachable!("spatial dimensions are checked to be 2 or 3"),
    }
}

/// Accepts only channels-last (`NHWC` for 2-D ops, `NDHWC` for 3-D ones).
/// TensorFlow's CPU kernels refuse channels-first too: Conv2D with
/// `Unimplemented`, pooling with `InvalidArgument`.
fn check_nhwc(op: &str, attrs: &dyn Attrs, spatial: usize, as_unimplemented: bool) -> Result<(), Error> {
    if !attrs.has("data_format") {
        return Ok(());
    }
    let expected = if spatial == 3 { "NDHWC" } else { "NHWC" };
    match attrs.string("data_format")?.as_str() {
        format if format == expected => Ok(()),
        other => {
            let message = format!(
                "only the {expected} tensor format is supported on the WASM device (like TensorFlow's CPU kernel); the op was given the format: {other}"
            );
            Err(if as_unimplemented { unimplemented(op, message) } else { invalid(op, message) })
        }
    }
}

fn rank4(op: &str, what: &str, shape: &[usize]) -> Result<[usize; 4], Error> {
    check_rank(op, what, shape, 4)?;
    <[usize; 4]>::try_from(shape).map_err(|_| unreachable!("rank checked"))
}

fn check_rank(op: &str, what: &str, shape: &[usize], rank: usize) -> Result<(), Error> {
    if shape.len() == rank {
        return Ok(());
    }
    Err(invalid(op, format!("{what} must be {rank}-dimensional, got shape {}", ShapeDisplay(shape))))
}

/// A 4-element int32/int64 shape tensor (`input_sizes`, `filter_sizes`, …).
fn shape_arg(op: &str, what: &str, tensor: &super::Tensor) -> Result<Vec<usize>, Error> {
    if tensor.rank() != 1 {
        return Err(invalid(op, format!("{what} must be 1-dimensional, got shape {}", ShapeDisplay(tensor.shape()))));
    }
    tensor
        .to_i64s()?
        .into_iter()
        .map(|v| usize::try_from(v).map_err(|_| invalid(op, format!("{what} has a negative dimension {v}"))))
        .collect()
}

// ------------------------------------------------------------------- gemm

/// The largest offset `(rows-1)·rs + (cols-1)·cs` a strided matrix touches,
/// checked against its slice length.
fn check_span(what: &str, len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> Result<(), Error> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let last = (rows - 1).checked_mul(rs).and_then(|a| (cols - 1).checked_mul(cs).and_then(|b| a.checked_add(b)));
    match last {
        Some(last) if last < len && isize::try_from(len).is_ok() => Ok(()),
        _ => Err(Error::Internal(format!("conv gemm: {what} of {len} elements is too short for {rows}x{cols}"))),
    }
}

/// A strided matrix view: `(slice, row stride, column stride)`.
type View<'a> = (&'a [f32], usize, usize);

/// `dst[m,n] (+)= lhs[m,k] · rhs[k,n]` with bounds-checked strided operands;
/// `dst` is row-major with row stride `dst_rs`.
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
    parallel: bool,
) -> Result<(), Error> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_span("dst", dst.len(), m, n, dst_rs, 1)?;
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(dst_rs).take(m) {
                row[..n].fill(0.0);
            }
        }
        return Ok(());
    }
    check_span("lhs", lhs.0.len(), m, k, lhs.1, lhs.2)?;
    check_span("rhs", rhs.0.len(), k, n, rhs.1, rhs.2)?;
    let product = Product {
        m,
        n,
        k,
        lhs: Operand { ptr: lhs.0.as_ptr(), row_stride: lhs.1 as isize, col_stride: lhs.2 as isize },
        rhs: Operand { ptr: rhs.0.as_ptr(), row_stride: rhs.1 as isize, col_stride: rhs.2 as isize },
        dst: Destination { ptr: dst.as_mut_ptr(), row_stride: dst_rs as isize },
        accumulate,
    };
    // SAFETY: `check_span` verified that every element the strided views
    // address (row < m / k, column < n / k) lies inside its slice and that
    // the lengths fit in isize, so all strides and offsets fit too. `dst` is
    // a `&mut` borrow and aliases neither operand.
    unsafe {
        if parallel {
            product.run_on_pool();
        } else {
            product.run();
        }
    }
    Ok(())
}

// ------------------------------------------------------------ convolution

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConvOp {
    Forward,
    BackpropInput,
    BackpropFilter,
}

/// The window attributes every convolution reads (`Conv2D`, `Conv3D`, the
/// depthwise ops and their backprops), checked the way TensorFlow checks
/// them. Per spatial dimension: planes, rows, columns; a 2-D op has one
/// plane with stride and dilation 1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvWindows {
    /// 2 or 3.
    pub spatial: usize,
    pub strides: [usize; 3],
    pub dilations: [usize; 3],
    pub padding: Padding,
}

impl ConvWindows {
    /// Fails unless a backprop's `out_backprop` has the forward output's
    /// shape (`[input, filter, output]` shapes of the forward op).
    pub(crate) fn check_out_backprop(
        &self,
        op: &str,
        [input, filter, output]: [&[usize]; 3],
        grad: &[usize],
    ) -> Result<(), Error> {
        if grad == output {
            return Ok(());
        }
        let first = 3 - self.spatial;
        Err(invalid(
            op,
            format!(
                "out_backprop has shape {} but input {} and filter {} (strides {:?}, dilations {:?}, padding {:?}) give {}",
                ShapeDisplay(grad),
                ShapeDisplay(input),
                ShapeDisplay(filter),
                &self.strides[first..],
                &self.dilations[first..],
                self.padding,
                ShapeDisplay(output)
            ),
        ))
    }

    /// Reads `strides`, `dilations`, `padding` and `explicit_paddings` of an
    /// op with `spatial` (2 or 3) spatial dimensions, and refuses
    /// channels-first with `Unimplemented`, as TensorFlow's CPU kernels do.
    pub(crate) fn from_attrs(name: &str, attrs: &dyn Attrs, spatial: usize) -> Result<Self, Error> {
        check_nhwc(name, attrs, spatial, true)?;
        let strides = window_attr(name, attrs, "strides", spatial + 2, false)?;
        if strides[0] != 1 || strides[spatial + 1] != 1 {
            return Err(invalid(
                name,
                "Current implementation does not yet support strides in the batch and depth dimensions.",
            ));
        }
        let dilations = window_attr(name, attrs, "dilations", spatial + 2, true)?;
        if dilations[0] != 1 || dilations[spatial + 1] != 1 {
            return Err(invalid(
                name,
                "Current implementation does not yet support dilations in the batch and depth dimensions.",
            ));
        }
        let padding = Padding::from_attrs(name, attrs)?;
        Ok(ConvWindows {
            spatial,
            strides: spatial3(&strides[1..=spatial]),
            dilations: spatial3(&dilations[1..=spatial]),
            padding,
        })
    }

    /// The plane, row and column windows for an input of `[planes, height,
    /// width]` and a filter of the same extents.
    pub(crate) fn windows3(&self, name: &str, input: [usize; 3], filter: [usize; 3]) -> Result<[Window; 3], Error> {
        let (er, ec) = match self.padding {
            Padding::Explicit { rows, cols } => (rows, cols),
            _ => ((0, 0), (0, 0)),
        };
        let window = |i: usize, explicit| {
            Window::new(name, input[i], filter[i], self.strides[i], self.dilations[i], self.padding, explicit)
        };
        Ok([window(0, (0, 0))?, window(1, er)?, window(2, ec)?])
    }

    /// The row and column windows of a 2-D op for an input of `[height,
    /// width]` and a filter of `[height, width]`.
    pub(crate) fn windows(&self, name: &str, input: [usize; 2], filter: [usize; 2]) -> Result<[Window; 2], Error> {
        let [_, rows, cols] = self.windows3(name, [1, input[0], input[1]], [1, filter[0], filter[1]])?;
        Ok([rows, cols])
    }
}

#[derive(Debug)]
struct ConvKernel {
    op: ConvOp,
    windows: ConvWindows,
    /// `_FusedConv2D`: what follows the forward convolution.
    fused: Option<FusedOps>,
}

impl ConvKernel {
    fn new(op: ConvOp, spatial: usize, attrs: &dyn Attrs) -> Result<Self, Error> {
        let name = Self::op_name(op, spatial);
        Ok(ConvKernel { op, windows: ConvWindows::from_attrs(name, attrs, spatial)?, fused: None })
    }

    /// `_FusedConv2D`: `Conv2D`'s attributes, what follows the convolution
    /// ([`FusedOps`]), and two attributes only other devices use, refused
    /// unless they have their float32 values: `num_host_args` (int8 scales)
    /// and `filter_format` (TensorFlow's CPU kernel reads the filter as
    /// HWIO whatever it says; here anything else is refused, not misread).
    fn fused(attrs: &dyn Attrs) -> Result<Self, Error> {
        const NAME: &str = "_FusedConv2D";
        let windows = ConvWindows::from_attrs(NAME, attrs, 2)?;
        let fused = FusedOps::from_attrs(FusedProduct::Conv2D, attrs)?;
        let host_args = if attrs.has("num_host_args") { attrs.int("num_host_args")? } else { 0 };
        if host_args != 0 {
            return Err(unimplemented(NAME, format!("num_host_args must be 0 for float32, got {host_args}")));
        }
        let filter_format = if attrs.has("filter_format") { attrs.string("filter_format")? } else { "HWIO".into() };
        if filter_format != "HWIO" {
            return Err(unimplemented(
                NAME,
                format!(
                    "only the HWIO filter format is supported on the WASM device; the op was given {filter_format}"
                ),
            ));
        }
        Ok(ConvKernel { op: ConvOp::Forward, windows, fused: Some(fused) })
    }

    fn op_name(op: ConvOp, spatial: usize) -> &'static str {
        match (op, spatial) {
            (ConvOp::Forward, 3) => "Conv3D",
            (ConvOp::BackpropInput, 3) => "Conv3DBackpropInputV2",
            (ConvOp::BackpropFilter, 3) => "Conv3DBackpropFilterV2",
            (ConvOp::Forward, _) => "Conv2D",
            (ConvOp::BackpropInput, _) => "Conv2DBackpropInput",
            (ConvOp::BackpropFilter, _) => "Conv2DBackpropFilter",
        }
    }

    fn name(&self) -> &'static str {
        if self.fused.is_some() {
            return "_FusedConv2D";
        }
        Self::op_name(self.op, self.windows.spatial)
    }

    /// Checks input and filter shapes (of rank `spatial + 2`, checked by the
    /// caller) and computes the output geometry.
    fn geometry(&self, input: &[usize], filter: &[usize]) -> Result<ConvGeom, Error> {
        let (name, s) = (self.name(), self.windows.spatial);
        let (n, ic) = (input[0], input[s + 1]);
        let (fic, oc) = (filter[s], filter[s + 1]);
        if filter.contains(&0) {
            return Err(invalid(
                name,
                format!(
                    "filter must not have zero elements (i.e. all dimensions must be non-zero), got shape {}",
                    ShapeDisplay(filter)
                ),
            ));
        }
        if ic != fic {
            if ic % fic == 0 {
                return Err(invalid(
                    name,
                    format!(
                        "grouped convolution (input depth {ic}, filter depth {fic}) is not supported on the WASM device; input {} filter {}",
                        ShapeDisplay(input),
                        ShapeDisplay(filter)
                    ),
                ));
            }
            return Err(invalid(
                name,
                format!(
                    "input depth must be evenly divisible by filter depth: {ic} vs {fic} (input {}, filter {})",
                    ShapeDisplay(input),
                    ShapeDisplay(filter)
                ),
            ));
        }
        let [planes, rows, cols] = self.windows.windows3(name, spatial3(&input[1..=s]), spatial3(&filter[..s]))?;
        let geom = ConvGeom { n, ic, oc, spatial: s, planes, rows, cols };
        let total = [n, planes.output.max(planes.input), rows.output.max(rows.input), cols.output.max(cols.input)]
            .iter()
            .chain([&oc.max(ic)])
            .try_fold(1usize, |a, &b| a.checked_mul(b));
        let k_ok = (planes.size * rows.size * cols.size)
            .checked_mul(ic)
            .and_then(|k| k.checked_mul(oc))
            .is_some_and(|v| isize::try_from(v).is_ok());
        if total.is_none_or(|t| isize::try_from(t).is_err()) || !k_ok {
            return Err(invalid(name, "shapes are too large"));
        }
        Ok(geom)
    }
}

/// The checked shape of one convolution.
#[derive(Debug, Clone, Copy)]
struct ConvGeom {
    n: usize,
    ic: usize,
    oc: usize,
    /// 2 or 3: whether shapes have a planes dimension.
    spatial: usize,
    planes: Window,
    rows: Window,
    cols: Window,
}

impl ConvGeom {
    /// Columns of the patch matrix: `kd·kh·kw·ic`.
    fn k(&self) -> usize {
        self.planes.size * self.rows.size * self.cols.size * self.ic
    }

    /// Output pixels per image.
    fn pixels(&self) -> usize {
        self.planes.output * self.rows.output * self.cols.output
    }

    fn image_len(&self) -> usize {
        self.planes.input * self.rows.input * self.cols.input * self.ic
    }

    /// `[outer, (planes), rows, cols, inner…]` from one extent per window.
    fn shape(&self, outer: usize, extent: impl Fn(&Window) -> usize, inner: &[usize]) -> Vec<usize> {
        let mut shape = vec![outer];
        if self.spatial == 3 {
            shape.push(extent(&self.planes));
        }
        shape.extend([extent(&self.rows), extent(&self.cols)]);
        shape.extend_from_slice(inner);
        shape
    }

    fn input_shape(&self) -> Vec<usize> {
        self.shape(self.n, |w| w.input, &[self.ic])
    }

    fn output_shape(&self) -> Vec<usize> {
        self.shape(self.n, |w| w.output, &[self.oc])
    }

    fn filter_shape(&self) -> Vec<usize> {
        let mut shape = self.shape(0, |w| w.size, &[self.ic, self.oc]);
        shape.remove(0);
        shape
    }

    /// A 1×1 window with stride 1 and no padding: the input (as an
    /// `[n·d·h·w, ic]` matrix) is the patch matrix.
    fn is_pointwise(&self) -> bool {
        let plain = |w: &Window| w.size == 1 && w.stride == 1 && w.pad_before == 0 && w.output == w.input;
        plain(&self.planes) && plain(&self.rows) && plain(&self.cols)
    }

    /// Output lines: (plane, row) pairs, each `cols.output` pixels long.
    fn lines(&self) -> usize {
        self.planes.output * self.rows.output
    }

    /// Patch rows (output pixels) per scratch tile: whole output lines.
    fn tile_rows(&self) -> usize {
        let ow = self.cols.output.max(1);
        let lines = (TILE_FLOATS / (self.k() * ow)).clamp(1, self.lines().max(1));
        lines * ow
    }

    /// Fills `sources` with, for each (plane, row) tap of the window of
    /// output line `line` (a (plane, row) pair) in filter order (`kd·kh +
    /// ky`), the input line (`plane · height + row`) it reads, if that is
    /// inside the input.
    fn line_sources(&self, line: usize, sources: &mut Vec<Option<usize>>) {
        let oh = self.rows.output.max(1);
        let (od, oy) = (line / oh, line % oh);
        sources.clear();
        for kd in 0..self.planes.size {
            let id = self.planes.source(od, kd);
            sources.extend(
                (0..self.rows.size).map(|ky| id.and_then(|id| Some(id * self.rows.input + self.rows.source(oy, ky)?))),
            );
        }
    }

    /// Copies the patches of whole output lines, starting at within-image
    /// pixel `first` (a multiple of the output width), of image `image` into
    /// `cols` (one row of `k` per output pixel). Loops run per window element
    /// over a line of output pixels, so no index needs a division.
    fn im2col(&self, image: &[f32], first: usize, cols: &mut [f32]) {
        let (k, ic, cols_w) = (self.k(), self.ic, self.cols);
        let (ow, iw) = (cols_w.output, cols_w.input);
        let line0 = first / ow;
        let mut sources = Vec::with_capacity(self.planes.size * self.rows.size);
        for (r, block) in cols.chunks_exact_mut(ow * k).enumerate() {
            self.line_sources(line0 + r, &mut sources);
            for (tap, &line) in sources.iter().enumerate() {
                for kx in 0..cols_w.size {
                    let off = (tap * cols_w.size + kx) * ic;
                    let valid = if line.is_some() { cols_w.valid_outputs(kx) } else { 0..0 };
                    let row = &image[line.unwrap_or(0) * iw * ic..];
                    let source = |ox: usize| (ox * cols_w.stride + kx * cols_w.dilation - cols_w.pad_before) * ic;
                    if ic == 1 {
                        for ox in 0..ow {
                            block[ox * k + off] = if valid.contains(&ox) { row[source(ox)] } else { 0.0 };
                        }
                    } else {
                        for ox in 0..ow {
                            let dst = &mut block[ox * k + off..ox * k + off + ic];
                            if valid.contains(&ox) {
                                let at = source(ox);
                                dst.copy_from_slice(&row[at..at + ic]);
                            } else {
                                dst.fill(0.0);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Adds the patches in `cols` (whole output lines from pixel `first`)
    /// back into `image`: the adjoint of [`Self::im2col`].
    fn col2im(&self, cols: &[f32], first: usize, image: &mut [f32]) {
        let (k, ic, cols_w) = (self.k(), self.ic, self.cols);
        let (ow, iw) = (cols_w.output, cols_w.input);
        let line0 = first / ow;
        let mut sources = Vec::with_capacity(self.planes.size * self.rows.size);
        for (r, block) in cols.chunks_exact(ow * k).enumerate() {
            self.line_sources(line0 + r, &mut sources);
            for (tap, &line) in sources.iter().enumerate() {
                let Some(line) = line else { continue };
                let row = &mut image[line * iw * ic..(line + 1) * iw * ic];
                for kx in 0..cols_w.size {
                    let off = (tap * cols_w.size + kx) * ic;
                    let source = |ox: usize| (ox * cols_w.stride + kx * cols_w.dilation - cols_w.pad_before) * ic;
                    if ic == 1 {
                        for ox in cols_w.valid_outputs(kx) {
                            row[source(ox)] += block[ox * k + off];
                        }
                    } else {
                        for ox in cols_w.valid_outputs(kx) {
                            let at = source(ox);
                            for (d, s) in row[at..at + ic].iter_mut().zip(&block[ox * k + off..ox * k + off + ic]) {
                                *d += s;
                            }
                        }
                    }
                }
            }
        }
    }

    fn work(&self) -> usize {
        self.n.saturating_mul(self.pixels()).saturating_mul(self.k()).saturating_mul(self.oc)
    }

    /// `out = conv(input, filter)`, then `epilogue` (made for `oc`
    /// channels) over it.
    fn forward(
        &self,
        input: &[f32],
        filter: &[f32],
        out: &mut [f32],
        epilogue: Option<&Epilogue>,
    ) -> Result<(), Error> {
        let (k, oc) = (self.k(), self.oc);
        let parallel = self.work() >= PARALLEL_MIN_WORK && pool::threads() > 1;
        if out.is_empty() {
            return Ok(());
        }
        if self.is_pointwise() {
            let m = self.n * self.pixels();
            gemm(m, oc, k, out, oc, false, (input, k, 1), (filter, oc, 1), parallel)?;
            if let Some(epilogue) = epilogue {
                epilogue.apply_all(out);
            }
            return Ok(());
        }
        let tile = self.tile_rows();
        let pixels = self.pixels();
        let image_len = self.image_len();
        // One task per (image, tile of its pixels).
        let task = |(index, out_tile): (usize, &mut [f32]), scratch: &mut Vec<f32>| -> Result<(), Error> {
            let tiles_per_image = pixels.div_ceil(tile);
            let (image, t) = (index / tiles_per_image, index % tiles_per_image);
            let rows = out_tile.len() / oc;
            let cols = &mut scratch[..rows * k];
            self.im2col(&input[image * image_len..(image + 1) * image_len], t * tile, cols);
            gemm(rows, oc, k, out_tile, oc, false, (cols, k, 1), (filter, oc, 1), false)?;
            if let Some(epilogue) = epilogue {
                epilogue.apply(out_tile, 0);
            }
            Ok(())
        };
        let chunks = out.chunks_mut(pixels * oc).flat_map(|image| image.chunks_mut(tile * oc));
        if parallel {
            let chunks: Vec<&mut [f32]> = chunks.collect();
            pool::install(|| {
                chunks.into_par_iter().enumerate().try_for_each_init(|| vec![0.0; tile * k], |s, item| task(item, s))
            })
        } else {
            let mut scratch = vec![0.0; tile * k];
            chunks.enumerate().try_for_each(|item| task(item, &mut scratch))
        }
    }

    /// `dinput = conv_transpose(grad, filter)`.
    fn backprop_input(&self, grad: &[f32], filter: &[f32], dinput: &mut [f32]) -> Result<(), Error> {
        let (k, oc, ic) = (self.k(), self.oc, self.ic);
        let parallel = self.work() >= PARALLEL_MIN_WORK && pool::threads() > 1;
        if dinput.is_empty() {
            return Ok(());
        }
        if self.is_pointwise() {
            // dinput[m, ic] = grad[m, oc] · filter[ic, oc]ᵀ
            let m = self.n * self.pixels();
            return gemm(m, ic, oc, dinput, ic, false, (grad, oc, 1), (filter, 1, oc), parallel);
        }
        let tile = self.tile_rows();
        let pixels = self.pixels();
        let per_image = |(image, dimage): (usize, &mut [f32]), scratch: &mut Vec<f32>| -> Result<(), Error> {
            dimage.fill(0.0);
            let grad_image = &grad[image * pixels * oc..(image + 1) * pixels * oc];
            for first in (0..pixels).step_by(tile) {
                let rows = tile.min(pixels - first);
                let cols = &mut scratch[..rows * k];
                // cols[rows, k] = grad[rows, oc] · filter[k, oc]ᵀ
                gemm(rows, k, oc, cols, k, false, (&grad_image[first * oc..], oc, 1), (filter, 1, oc), false)?;
                self.col2im(cols, first, dimage);
            }
            Ok(())
        };
        let image_len = self.image_len();
        if parallel {
            pool::install(|| {
                dinput
                    .par_chunks_mut(image_len)
                    .enumerate()
                    .try_for_each_init(|| vec![0.0; tile * k], |s, item| per_image(item, s))
            })
        } else {
            let mut scratch = vec![0.0; tile * k];
            dinput.chunks_mut(image_len).enumerate().try_for_each(|item| per_image(item, &mut scratch))
        }
    }

    /// `dfilter = Σ im2col(input)ᵀ · grad`.
    fn backprop_filter(&self, input: &[f32], grad: &[f32], dfilter: &mut [f32]) -> Result<(), Error> {
        let (k, oc, ic) = (self.k(), self.oc, self.ic);
        let m = self.n * self.pixels();
        if m == 0 {
            dfilter.fill(0.0);
            return Ok(());
        }
        let parallel = self.work() >= PARALLEL_MIN_WORK && pool::threads() > 1;
        if self.is_pointwise() {
            // dfilter[ic, oc] = input[m, ic]ᵀ · grad[m, oc]
            return gemm(ic, oc, m, dfilter, oc, false, (input, 1, ic), (grad, oc, 1), parallel);
        }
        let tile = self.tile_rows();
        let pixels = self.pixels();
        let image_len = self.image_len();
        // Work items: (image, first pixel) tiles, split into contiguous
        // groups that each accumulate a partial dfilter.
        let tiles_per_image = pixels.div_ceil(tile);
        let total_tiles = self.n * tiles_per_image;
        let groups = if parallel { (pool::threads() * 2).min(total_tiles) } else { 1 };
        let per_group = total_tiles.div_ceil(groups);
        let group = |g: usize, acc: &mut [f32]| -> Result<(), Error> {
            let mut scratch = vec![0.0; tile * k];
            let mut first_gemm = true;
            for index in g * per_group..((g + 1) * per_group).min(total_tiles) {
                let (image, t) = (index / tiles_per_image, index % tiles_per_image);
                let first = t * tile;
                let rows = tile.min(pixels - first);
                let cols = &mut scratch[..rows * k];
                self.im2col(&input[image * image_len..(image + 1) * image_len], first, cols);
                let g_rows = &grad[(image * pixels + first) * oc..];
                // acc[k, oc] += cols[rows, k]ᵀ · grad[rows, oc]
                gemm(k, oc, rows, acc, oc, !first_gemm, (cols, 1, k), (g_rows, oc, 1), false)?;
                first_gemm = false;
            }
            if first_gemm {
                acc.fill(0.0);
            }
            Ok(())
        };
        if groups <= 1 {
            return group(0, dfilter);
        }
        let mut partials = vec![0.0f32; groups * k * oc];
        pool::install(|| partials.par_chunks_mut(k * oc).enumerate().try_for_each(|(g, acc)| group(g, acc)))?;
        let (head, rest) = partials.split_at(k * oc);
        dfilter.copy_from_slice(head);
        for part in rest.chunks_exact(k * oc) {
            for (d, p) in dfilter.iter_mut().zip(part) {
                *d += p;
            }
        }
        Ok(())
    }
}

impl Kernel for ConvKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let (name, rank) = (self.name(), self.windows.spatial + 2);
        if self.op == ConvOp::Forward {
            let extra = self.fused.map_or(0, |fused| fused.num_args());
            expect_inputs(name, ctx, 2 + extra)?;
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            check_rank(name, "input", a.shape(), rank)?;
            check_rank(name, "filter", b.shape(), rank)?;
            let geom = self.geometry(a.shape(), b.shape())?;
            let args = (0..extra).map(|i| ctx.input(2 + i)).collect::<Result<Vec<_>, _>>()?;
            let epilogue = self.fused.map(|fused| fused.epilogue(name, &args, geom.oc)).transpose()?;
            let mut out = ctx.allocate_output(0, &geom.output_shape())?;
            return geom.forward(a.data()?, b.data()?, out.data_mut()?, epilogue.as_ref());
        }
        expect_inputs(name, ctx, 3)?;
        let (a, b, c) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let grad = c.shape();
        check_rank(name, "out_backprop", grad, rank)?;
        match self.op {
            ConvOp::Forward => Err(Error::Internal("Conv2D handled above".into())),
            ConvOp::BackpropInput => {
                let filter = b.shape();
                check_rank(name, "filter", filter, rank)?;
                let mut input = shape_arg(name, "input_sizes", &a)?;
                if rank == 4 && input.len() == 2 {
                    // Conv2DBackpropInput also takes only [height, width].
                    input = vec![grad[0], input[0], input[1], filter[2]];
                }
                if input.len() != rank {
                    let expected = if rank == 4 { "4 values or 2 values" } else { "5 values" };
                    return Err(invalid(
                        name,
                        format!("requires input_sizes to contain {expected}, but got: {}", input.len()),
                    ));
                }
                let geom = self.geometry(&input, filter)?;
                self.check_grad(&geom, grad)?;
                let mut out = ctx.allocate_output(0, &geom.input_shape())?;
                geom.backprop_input(c.data()?, b.data()?, out.data_mut()?)
            }
            ConvOp::BackpropFilter => {
                let input = a.shape();
                check_rank(name, "input", input, rank)?;
                let filter = shape_arg(name, "filter_sizes", &b)?;
                if filter.len() != rank {
                    return Err(invalid(
                        name,
                        format!("filter_sizes must contain {rank} values, got {}", filter.len()),
                    ));
                }
                let geom = self.geometry(input, &filter)?;
                self.check_grad(&geom, grad)?;
                let mut out = ctx.allocate_output(0, &geom.filter_shape())?;
                geom.backprop_filter(a.data()?, c.data()?, out.data_mut()?)
            }
        }
    }
}

impl ConvKernel {
    fn check_grad(&self, geom: &ConvGeom, grad: &[usize]) -> Result<(), Error> {
        let shapes = [geom.input_shape(), geom.filter_shape(), geom.output_shape()];
        self.windows.check_out_backprop(self.name(), [&shapes[0], &shapes[1], &shapes[2]], grad)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod volume_tests;
