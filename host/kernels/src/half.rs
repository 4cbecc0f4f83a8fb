//! float16 and bfloat16 kernels, for Keras' mixed precision
//! (`mixed_float16`, `mixed_bfloat16`): layers compute in the narrow type
//! while their variables stay float32.
//!
//! A narrow kernel is the float32 kernel run on widened inputs, its results
//! rounded to the narrow type once ([`Widened`]). Widening is exact, so the
//! only rounding is the last one: each result is the float32 kernel's result
//! to the nearest narrow value (ties to even). TensorFlow's CPU kernels for
//! these types compute in float32 too, but round partial results to the
//! narrow type inside composite expressions (`1 - y·y` in `TanhGrad`), so
//! they are less accurate; the op sweep checks ours against the CPU's
//! float32 kernel rounded once (`docs/kernels.md`, "Mixed precision").
//!
//! The conversions run on the compute pool, 8 lanes at a time where the CPU
//! has AVX2 (`half` uses F16C for float16 when the CPU has it).

use std::cell::RefCell;

use half::{bf16, f16};

use super::binary::fill_chunked;
use super::tensor::Scratch;
use super::unary::map;
use super::{types, Attrs, BuildFn, DType, Kernel, KernelDef, OpContext, Tensor};
use crate::error::Error;

/// Type constraints, as in [`KernelDef::types`].
type Constraints = [(&'static str, &'static [DType])];

const T: &Constraints = types::T_HALF;
const T_TIDX: &Constraints = &[("T", types::HALF), ("Tidx", types::INDEX)];

/// The ops with float16 and bfloat16 kernels, and their type constraints:
/// what Keras' mixed-precision layers run in the narrow type (dense,
/// convolution, pooling, attention, normalisation, their gradients, the
/// elementwise ops between them and the data movement around them). Each
/// is the op's float32 kernel, widened (for data movement that is a copy:
/// widening and rounding back give every value its own bits, a signalling
/// NaN aside, which comes back quiet). `Cast` and the random ops, whose
/// narrow results follow their own bit recipes, register themselves
/// (`unary`, `random`).
pub const NARROW: &[(&str, &Constraints)] = &[
    ("MatMul", T),
    ("BatchMatMulV2", T),
    ("Einsum", T),
    ("BiasAdd", T),
    ("BiasAddGrad", T),
    ("Conv2D", T),
    ("Conv2DBackpropInput", T),
    ("Conv2DBackpropFilter", T),
    ("DepthwiseConv2dNative", T),
    ("DepthwiseConv2dNativeBackpropInput", T),
    ("DepthwiseConv2dNativeBackpropFilter", T),
    ("MaxPool", T),
    ("MaxPoolGrad", T),
    ("AvgPool", T),
    ("AvgPoolGrad", T),
    ("Conv3D", T),
    ("Conv3DBackpropInputV2", T),
    ("Conv3DBackpropFilterV2", T),
    ("MaxPool3D", T),
    ("MaxPool3DGrad", &[("T", types::HALF), ("TInput", types::HALF)]),
    ("AvgPool3D", T),
    ("AvgPool3DGrad", T),
    ("FusedBatchNormV3", &[("T", types::HALF), ("U", types::F32)]),
    ("FusedBatchNormGradV3", &[("T", types::HALF), ("U", types::F32)]),
    ("Softmax", T),
    ("LogSoftmax", T),
    ("AddV2", T),
    ("Sub", T),
    ("Mul", T),
    ("RealDiv", T),
    ("Maximum", T),
    ("Minimum", T),
    ("SquaredDifference", T),
    ("AddN", T),
    ("Equal", T),
    ("NotEqual", T),
    ("Less", T),
    ("LessEqual", T),
    ("Greater", T),
    ("GreaterEqual", T),
    ("Neg", T),
    ("Abs", T),
    ("Exp", T),
    ("Log", T),
    ("Sqrt", T),
    ("Rsqrt", T),
    ("Square", T),
    ("Tanh", T),
    ("Sigmoid", T),
    ("Relu", T),
    ("Relu6", T),
    ("Elu", T),
    ("Selu", T),
    ("Softplus", T),
    ("Erf", T),
    ("Erfc", T),
    ("LeakyRelu", T),
    ("ReluGrad", T),
    ("Relu6Grad", T),
    ("EluGrad", T),
    ("SeluGrad", T),
    ("SoftplusGrad", T),
    ("LeakyReluGrad", T),
    ("TanhGrad", T),
    ("SigmoidGrad", T),
    ("RsqrtGrad", T),
    ("SqrtGrad", T),
    ("TensorScatterUpdate", &[("T", types::HALF), ("Tindices", types::INDEX)]),
    ("ZerosLike", T),
    ("OnesLike", T),
    ("Sum", T_TIDX),
    ("Mean", T_TIDX),
    ("Max", T_TIDX),
    ("Min", T_TIDX),
    ("Prod", T_TIDX),
    ("Cumsum", T_TIDX),
    ("Cumprod", T_TIDX),
    ("ArgMax", &[("T", types::HALF), ("Tidx", types::INDEX), ("output_type", types::INDEX)]),
    ("ArgMin", &[("T", types::HALF), ("Tidx", types::INDEX), ("output_type", types::INDEX)]),
    ("IsNan", T),
    ("IsFinite", T),
    ("UnsortedSegmentSum", &[("T", types::HALF), ("Tindices", types::INDEX), ("Tnumsegments", types::INDEX)]),
    ("SoftmaxCrossEntropyWithLogits", T),
    ("SparseSoftmaxCrossEntropyWithLogits", &[("T", types::HALF), ("Tlabels", types::INDEX)]),
];

/// The registrations [`NARROW`] adds to `defs`: each op's float32
/// definition (its host-memory arguments and deferral included) under the
/// narrow types, marked [`widened`](KernelDef::widened).
///
/// # Panics
/// If an op in [`NARROW`] has no float32 definition in `defs` (a unit test
/// checks the list).
pub fn narrow_registrations(defs: &[KernelDef]) -> Vec<KernelDef> {
    NARROW
        .iter()
        .map(|&(op, narrow_types)| {
            // The attribute the narrow types constrain (`T`, or `Tparams`).
            let float_attr = narrow_types[0].0;
            let float = defs
                .iter()
                .find(|d| {
                    d.op == op && d.types.iter().any(|&(attr, list)| attr == float_attr && list.contains(&DType::F32))
                })
                .unwrap_or_else(|| panic!("{op} has a narrow registration but no float32 kernel"));
            KernelDef { types: narrow_types, widened: true, ..*float }
        })
        .collect()
}

/// Builds `build`'s float32 kernel and wraps it for the narrow types.
/// `build` sees float32 where the node's type attributes say float16 or
/// bfloat16.
pub fn widen(attrs: &dyn Attrs, build: BuildFn) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(Widened(build(&WideAttrs(attrs))?)))
}

/// `kernel`, a float32 kernel, computing for narrow tensors.
pub fn widened(kernel: Box<dyn Kernel>) -> Box<dyn Kernel> {
    Box::new(Widened(kernel))
}

/// A node's attributes as its float32 kernel sees them.
struct WideAttrs<'a>(&'a dyn Attrs);

impl Attrs for WideAttrs<'_> {
    fn has(&self, name: &str) -> bool {
        self.0.has(name)
    }
    fn bool(&self, name: &str) -> Result<bool, Error> {
        self.0.bool(name)
    }
    fn int(&self, name: &str) -> Result<i64, Error> {
        self.0.int(name)
    }
    fn float(&self, name: &str) -> Result<f32, Error> {
        self.0.float(name)
    }
    fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
        self.0.ints(name)
    }
    fn string(&self, name: &str) -> Result<String, Error> {
        self.0.string(name)
    }
    fn dtype(&self, name: &str) -> Result<DType, Error> {
        self.0.dtype(name).map(wide_type)
    }
    fn strings(&self, name: &str) -> Result<Vec<String>, Error> {
        self.0.strings(name)
    }
}

/// A float32 kernel computing for float16/bfloat16 tensors: narrow inputs
/// are widened before it reads them, its narrow outputs are written in
/// float32 scratch and rounded into TensorFlow's outputs after it returns.
/// Inputs and outputs of other types (indices, shapes) pass through.
struct Widened(Box<dyn Kernel>);

impl std::fmt::Debug for Widened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Widened")
    }
}

impl Kernel for Widened {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let wide = WideContext { outer: ctx, scratch: RefCell::new((0..ctx.num_outputs()).map(|_| None).collect()) };
        self.0.compute(&wide)?;
        for (index, scratch) in wide.scratch.into_inner().into_iter().enumerate() {
            if let Some(scratch) = scratch {
                let result = scratch.read()?;
                let mut out = ctx.allocate_output(index, result.shape())?;
                narrow(&result, &mut out)?;
            }
        }
        Ok(())
    }
}

pub(super) fn is_narrow(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// The type a float32 kernel computes `dtype` in: float32 for the narrow
/// types, any other type itself.
pub(super) fn wide_type(dtype: DType) -> DType {
    if is_narrow(dtype) {
        DType::F32
    } else {
        dtype
    }
}

/// The context the float32 kernel sees.
struct WideContext<'a> {
    outer: &'a dyn OpContext,
    /// The float32 results of narrow outputs, by output index.
    scratch: RefCell<Vec<Option<Scratch>>>,
}

impl OpContext for WideContext<'_> {
    fn num_inputs(&self) -> usize {
        self.outer.num_inputs()
    }

    fn num_outputs(&self) -> usize {
        self.outer.num_outputs()
    }

    fn input(&self, index: usize) -> Result<Tensor, Error> {
        let input = self.outer.input(index)?;
        if is_narrow(input.dtype()) {
            widen_tensor(&input)
        } else {
            Ok(input)
        }
    }

    fn output_dtype(&self, index: usize) -> Result<DType, Error> {
        self.outer.output_dtype(index).map(wide_type)
    }

    fn allocate_output(&self, index: usize, shape: &[usize]) -> Result<Tensor, Error> {
        if !is_narrow(self.outer.output_dtype(index)?) {
            return self.outer.allocate_output(index, shape);
        }
        let (scratch, tensor) = Scratch::new(DType::F32, shape, 0)?;
        let mut slots = self.scratch.borrow_mut();
        let slot = slots.get_mut(index).ok_or_else(|| Error::Internal(format!("no output {index}")))?;
        *slot = Some(scratch);
        Ok(tensor)
    }

    fn forward_input(&self, input: usize, output: usize) -> Result<(), Error> {
        // The same bytes under the same (narrow) type on both sides.
        self.outer.forward_input(input, output)
    }
}

/// A float32 copy of a float16/bfloat16 tensor (exact).
fn widen_tensor(input: &Tensor) -> Result<Tensor, Error> {
    let mut wide = vec![0f32; input.len()];
    match input.dtype() {
        DType::F16 => widen_f16(input.data::<f16>()?, &mut wide),
        DType::BF16 => widen_bf16(input.data::<bf16>()?, &mut wide),
        other => return Err(Error::Internal(format!("{other} is not a narrow float type"))),
    }
    Tensor::from_vec(input.shape(), wide)
}

/// Rounds float32 `wide` into the narrow tensor `out` (to nearest, ties to
/// even; NaN stays NaN, overflow gives infinity).
fn narrow(wide: &Tensor, out: &mut Tensor) -> Result<(), Error> {
    let wide = wide.data::<f32>()?;
    match out.dtype() {
        DType::F16 => narrow_f16(wide, out.data_mut::<f16>()?),
        DType::BF16 => narrow_bf16(wide, out.data_mut::<bf16>()?),
        other => return Err(Error::Internal(format!("{other} is not a narrow float type"))),
    }
    Ok(())
}

pub(super) fn widen_f16(x: &[f16], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    fill_chunked(out, |start, chunk| x[start..start + chunk.len()].convert_to_f32_slice(chunk));
}

pub(super) fn narrow_f16(x: &[f32], out: &mut [f16]) {
    use half::slice::HalfFloatSliceExt;
    fill_chunked(out, |start, chunk| chunk.convert_from_f32_slice(&x[start..start + chunk.len()]));
}

pub(super) fn widen_bf16(x: &[bf16], out: &mut [f32]) {
    map(x, out, |v: bf16| f32::from_bits(u32::from(v.to_bits()) << 16));
}

pub(super) fn narrow_bf16(x: &[f32], out: &mut [bf16]) {
    map(x, out, bf16_nearest);
}

/// float32 → bfloat16 to nearest, ties to even, without a branch (so the
/// loop vectorises); a NaN keeps its sign and becomes the quiet NaN.
#[inline(always)]
fn bf16_nearest(v: f32) -> bf16 {
    let bits = v.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let nan = (bits >> 16) as u16 | 0x7fc0;
    bf16::from_bits(if v.is_nan() { nan } else { rounded as u16 })
}

/// float32 → bfloat16 by dropping the low half (`Cast` with `Truncate`).
#[inline(always)]
pub(super) fn bf16_truncated(v: f32) -> bf16 {
    let bits = v.to_bits();
    bf16::from_bits(if v.is_nan() { (bits >> 16) as u16 | 0x7fc0 } else { (bits >> 16) as u16 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::LocalContext;

    #[test]
    fn every_narrow_op_has_a_float32_kernel_and_is_registered_once() {
        let defs = crate::registry();
        for &(op, _) in NARROW {
            assert_eq!(defs.iter().filter(|d| d.op == op && d.widened).count(), 1, "{op}");
        }
        // Nothing else is widened, and the table of create callbacks has room.
        assert_eq!(defs.iter().filter(|d| d.widened).count(), NARROW.len());
    }

    #[test]
    fn bf16_rounding_matches_the_half_crate() {
        let strided = (0..=u32::MAX / 7_919).map(|k| k * 7_919);
        let ties = (0..=255u32).flat_map(|e| [0x8000u32, 0x1_8000, 0x7fff, 0x1_7fff].map(|low| (e << 23) | low));
        for bits in strided.chain(ties) {
            for bits in [bits, bits | 0x8000_0000] {
                let v = f32::from_bits(bits);
                let (got, want) = (bf16_nearest(v), bf16::from_f32(v));
                if v.is_nan() {
                    assert!(got.is_nan(), "{bits:#x}");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "{v:e} ({bits:#x})");
                }
            }
        }
        assert_eq!(bf16_truncated(1.0 + f32::EPSILON * 100.0).to_f32(), 1.0);
        assert!(bf16_truncated(f32::from_bits(0x7f80_0001)).is_nan());
    }

    #[test]
    fn conversions_round_trip_every_narrow_value() {
        let f16s: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0f32; f16s.len()];
        widen_f16(&f16s, &mut wide);
        let mut back = vec![f16::ZERO; f16s.len()];
        narrow_f16(&wide, &mut back);
        let bf16s: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut wide_b = vec![0f32; bf16s.len()];
        widen_bf16(&bf16s, &mut wide_b);
        let mut back_b = vec![bf16::ZERO; bf16s.len()];
        narrow_bf16(&wide_b, &mut back_b);
        for i in 0..f16s.len() {
            // Widening is exact; NaNs only need to stay NaN (`half` quiets
            // signalling ones, the plain shift here keeps their bits).
            let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            assert!(same(wide[i], f16s[i].to_f32()), "f16 {i:#x}");
            assert!(same(wide_b[i], bf16s[i].to_f32()), "bf16 {i:#x}");
            if f16s[i].is_nan() {
                assert!(back[i].is_nan(), "f16 {i:#x}");
            } else {
                assert_eq!(back[i].to_bits(), f16s[i].to_bits(), "f16 {i:#x}");
            }
            if bf16s[i].is_nan() {
                assert!(back_b[i].is_nan(), "bf16 {i:#x}");
            } else {
                assert_eq!(back_b[i].to_bits(), bf16s[i].to_bits(), "bf16 {i:#x}");
            }
        }
    }

    /// A kernel that adds its two float inputs and forwards its third.
    #[derive(Debug)]
    struct AddAndForward;

    impl Kernel for AddAndForward {
        fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            assert_eq!((a.dtype(), ctx.output_dtype(0)?), (DType::F32, DType::F32));
            let mut out = ctx.allocate_output(0, a.shape())?;
            for ((o, x), y) in out.data_mut::<f32>()?.iter_mut().zip(a.data::<f32>()?).zip(b.data::<f32>()?) {
                *o = x + y;
            }
            ctx.forward_input(2, 1)
        }
    }

    #[test]
    fn a_widened_kernel_rounds_its_float32_result_once() {
        // 1 + 2^-11 is halfway between two float16 values: ties to even.
        let a = Tensor::from_vec(&[3], vec![f16::from_f32(1.0), f16::from_f32(65504.0), f16::from_f32(-0.0)]).unwrap();
        let b = Tensor::from_vec(&[3], vec![f16::from_f32(2f32.powi(-11)), f16::from_f32(65504.0), f16::from_f32(0.0)])
            .unwrap();
        let passed = Tensor::from_vec(&[2], vec![7i32, 9]).unwrap();
        let out = LocalContext::run(&Widened(Box::new(AddAndForward)), vec![a, b, passed], &[DType::F16, DType::I32])
            .unwrap();
        let sums: Vec<f32> = out[0].to_vec::<f16>().unwrap().iter().map(|v| v.to_f32()).collect();
        assert_eq!(sums, [1.0, f32::INFINITY, 0.0]);
        assert_eq!(out[1].to_vec::<i32>().unwrap(), [7, 9]);
        // An empty tensor passes through.
        let empty = || Tensor::from_vec::<bf16>(&[0, 5], vec![]).unwrap();
        let idx = Tensor::from_vec(&[1], vec![1i32]).unwrap();
        let out = LocalContext::run(
            &Widened(Box::new(AddAndForward)),
            vec![empty(), empty(), idx],
            &[DType::BF16, DType::I32],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[0, 5]);
    }
}
