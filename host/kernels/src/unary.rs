//! Elementwise unary ops (float32 unless noted), the activation gradients,
//! the predicates (`IsNan`, `IsFinite` → bool), `LogicalNot`, `ZerosLike`/
//! `OnesLike`, `Cast` and `Bitcast`.
//!
//! Every op is one monomorphised loop over contiguous slices (the op is
//! chosen once per call); large tensors are split across the compute pool by
//! [`fill_chunked`].
//!
//! ## Numerics
//! The formulas are TensorFlow's (Eigen functors in `relu_op_functor.h`,
//! `softplus_op.h`, `cwise_ops.h`), including their quirks: `Elu`/`Selu` use
//! `exp(x) - 1` (not `expm1`), `Softplus` switches to `x` / `exp(x)` beyond
//! `±(ln ε + 2)`, `ReluGrad` multiplies by a 0/1 mask (so a NaN gradient
//! stays NaN), `Relu`/`Relu6` propagate NaN and keep `-0`, `Sign(NaN)` is
//! NaN, `Round` rounds half to even, the `Rsqrt`/`Sqrt`/`Reciprocal`
//! gradients are 0 where the incoming gradient is 0. Transcendentals (`Exp`,
//! `Log`, `Log1p`, `Tanh`, `Sigmoid`, `Erf`, `Erfc`, and the `exp` inside
//! `Elu`, `Selu`, `Softplus`) are [`super::vmath`]'s branch-free approximations
//! (within a few ulp), which vectorise as Eigen's do; TensorFlow's CPU kernels
//! use Eigen's own, so results agree to a relative ~1e-6 (more where
//! `exp(x) - 1` cancels).
//!
//! `Cast` float → int follows TensorFlow on x86: truncation toward zero, and
//! NaN or out-of-range values become the integer minimum. int64 → int32
//! keeps the low 32 bits, as C++'s `static_cast` does.

use super::binary::{check_len, fill_chunked};
use super::shape::ShapeDisplay;
use super::vmath::{
    erf_f32, erfc_f32, exp_f32, exp_in_range_f32, in_wide_lanes, is_exp_in_range, is_normal_positive, ln_1p_f32,
    ln_f32, ln_normal_f32, sigmoid_f32, tanh_f32,
};
use super::{expect_inputs, half, types, Attrs, DType, Element, Kernel, KernelDef, OpContext, TfBool};
use crate::error::Error;

macro_rules! unary {
    ($name:literal, $op:expr) => {
        KernelDef::new($name, types::T_F32, |_| Ok(Box::new(UnaryKernel { op: $op, name: $name })))
    };
}

macro_rules! grad {
    ($name:literal, $op:expr) => {
        KernelDef::new($name, types::T_F32, |_| Ok(Box::new(GradKernel { op: $op, name: $name })))
    };
}

/// uint8 among the sources for images (Keras' `Rescaling` of uint8 pixels),
/// float64 for data handed over in NumPy's default type.
const CAST_TO_F32: &[(&str, &[DType])] = &[
    ("SrcT", &[DType::F32, DType::I32, DType::I64, DType::Bool, DType::F16, DType::BF16, DType::U8, DType::F64]),
    ("DstT", &[DType::F32]),
];
const CAST_FROM_F32: &[(&str, &[DType])] =
    &[("SrcT", &[DType::F32]), ("DstT", &[DType::I32, DType::I64, DType::Bool, DType::F16, DType::BF16])];
/// Mixed precision's other casts: labels to the narrow type (Keras'
/// accuracy compares them with narrow predictions) and back.
const CAST_INT_TO_NARROW: &[(&str, &[DType])] =
    &[("SrcT", &[DType::I32, DType::I64, DType::Bool]), ("DstT", &[DType::F16, DType::BF16])];
const CAST_NARROW_TO_INT: &[(&str, &[DType])] =
    &[("SrcT", &[DType::F16, DType::BF16]), ("DstT", &[DType::I32, DType::I64, DType::Bool])];
/// The integer casts Keras runs on the device: int32 constants widened for
/// the int64 step counter, and the int64 seed-generator state narrowed to
/// the int32 seed the stateless random ops take.
const CAST_I32_TO_I64: &[(&str, &[DType])] = &[("SrcT", &[DType::I32]), ("DstT", &[DType::I64])];
const CAST_I64_TO_I32: &[(&str, &[DType])] = &[("SrcT", &[DType::I64]), ("DstT", &[DType::I32])];
/// int32 to int32, which the gradient of Keras' `ops.repeat` runs: the
/// input, forwarded.
const CAST_I32_TO_I32: &[(&str, &[DType])] = &[("SrcT", &[DType::I32]), ("DstT", &[DType::I32])];
/// float32 → int32 `Bitcast`: Keras' train step reads the bits of a
/// float32 output to check it for NaN/Inf.
const BITCAST_F32_TO_I32: &[(&str, &[DType])] = &[("T", &[DType::F32]), ("type", &[DType::I32])];

pub const KERNELS: &[KernelDef] = &[
    unary!("Neg", UnaryOp::Neg),
    unary!("Abs", UnaryOp::Abs),
    unary!("Exp", UnaryOp::Exp),
    unary!("Log", UnaryOp::Log),
    unary!("Log1p", UnaryOp::Log1p),
    unary!("Sqrt", UnaryOp::Sqrt),
    unary!("Rsqrt", UnaryOp::Rsqrt),
    unary!("Square", UnaryOp::Square),
    unary!("Reciprocal", UnaryOp::Reciprocal),
    unary!("Inv", UnaryOp::Reciprocal),
    unary!("Tanh", UnaryOp::Tanh),
    unary!("Sigmoid", UnaryOp::Sigmoid),
    unary!("Relu", UnaryOp::Relu),
    unary!("Relu6", UnaryOp::Relu6),
    unary!("Elu", UnaryOp::Elu),
    unary!("Selu", UnaryOp::Selu),
    unary!("Softplus", UnaryOp::Softplus),
    unary!("Softsign", UnaryOp::Softsign),
    unary!("Erf", UnaryOp::Erf),
    unary!("Erfc", UnaryOp::Erfc),
    unary!("Sin", UnaryOp::Sin),
    unary!("Cos", UnaryOp::Cos),
    unary!("Tan", UnaryOp::Tan),
    unary!("Sign", UnaryOp::Sign),
    unary!("Floor", UnaryOp::Floor),
    unary!("Ceil", UnaryOp::Ceil),
    unary!("Round", UnaryOp::Round),
    unary!("ZerosLike", UnaryOp::Fill(0.0)),
    unary!("OnesLike", UnaryOp::Fill(1.0)),
    KernelDef::new("LeakyRelu", types::T_F32, |attrs| {
        Ok(Box::new(UnaryKernel { op: UnaryOp::LeakyRelu(alpha(attrs)?), name: "LeakyRelu" }))
    }),
    KernelDef::new("IsNan", types::T_F32, |_| Ok(Box::new(PredicateKernel { op: Predicate::IsNan }))),
    KernelDef::new("IsFinite", types::T_F32, |_| Ok(Box::new(PredicateKernel { op: Predicate::IsFinite }))),
    KernelDef::new("LogicalNot", &[], |_| Ok(Box::new(PredicateKernel { op: Predicate::LogicalNot }))),
    KernelDef::new("Cast", CAST_TO_F32, build_cast),
    KernelDef::new("Cast", CAST_FROM_F32, build_cast),
    KernelDef::new("Cast", CAST_INT_TO_NARROW, build_cast),
    KernelDef::new("Cast", CAST_NARROW_TO_INT, build_cast),
    KernelDef::new("Cast", CAST_I32_TO_I64, build_cast),
    KernelDef::new("Cast", CAST_I64_TO_I32, build_cast),
    KernelDef::new("Cast", CAST_I32_TO_I32, build_cast),
    KernelDef::new("Bitcast", BITCAST_F32_TO_I32, |attrs| Ok(Box::new(BitcastKernel::new(attrs)?))),
    grad!("ReluGrad", GradOp::Relu),
    grad!("Relu6Grad", GradOp::Relu6),
    grad!("EluGrad", GradOp::Elu),
    grad!("SeluGrad", GradOp::Selu),
    grad!("SoftplusGrad", GradOp::Softplus),
    grad!("SoftsignGrad", GradOp::Softsign),
    KernelDef::new("LeakyReluGrad", types::T_F32, |attrs| {
        Ok(Box::new(GradKernel { op: GradOp::LeakyRelu(alpha(attrs)?), name: "LeakyReluGrad" }))
    }),
    grad!("TanhGrad", GradOp::Tanh),
    grad!("SigmoidGrad", GradOp::Sigmoid),
    grad!("RsqrtGrad", GradOp::Rsqrt),
    grad!("SqrtGrad", GradOp::Sqrt),
    grad!("ReciprocalGrad", GradOp::Reciprocal),
    grad!("InvGrad", GradOp::Reciprocal),
];

/// `LeakyRelu`'s `alpha` (TensorFlow's default when absent).
fn alpha(attrs: &dyn Attrs) -> Result<f32, Error> {
    if attrs.has("alpha") {
        attrs.float("alpha")
    } else {
        Ok(0.2)
    }
}

/// SELU's constants, as TensorFlow rounds them to float32.
const SELU_SCALE: f32 = 1.050_701;
const SELU_SCALE_ALPHA: f32 = 1.758_099_3;

/// `out[i] = f(x[i])`, inline or across the pool.
pub(super) fn map<I, O, F>(x: &[I], out: &mut [O], f: F)
where
    I: Copy + Sync,
    O: Copy + Send,
    F: Fn(I) -> O + Copy + Send + Sync,
{
    fill_chunked(out, |start, chunk| {
        let x = &x[start..start + chunk.len()];
        in_wide_lanes(
            #[inline(always)]
            || apply(x, chunk, f),
        );
    });
}

/// `out[i] = f(x[i])` over two slices of one length, as one loop the
/// compiler vectorises.
#[inline(always)]
fn apply<I: Copy, O, F: Fn(I) -> O>(x: &[I], out: &mut [O], f: F) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// Elements [`map_plain_or_full`] checks at a time: a block whose inputs
/// are all plain takes the fast function.
const PLAIN_BLOCK: usize = 256;

/// `map(x, out, full)`, but `plain` computes every block of
/// [`PLAIN_BLOCK`] elements whose inputs all satisfy `is_plain`: a fast
/// function for the inputs that need no special case (it must agree with
/// `full` on them). The check is one vectorised pass over the block.
fn map_plain_or_full<P, F, C>(x: &[f32], out: &mut [f32], plain: P, full: F, is_plain: C)
where
    P: Fn(f32) -> f32 + Copy + Send + Sync,
    F: Fn(f32) -> f32 + Copy + Send + Sync,
    C: Fn(f32) -> bool + Copy + Send + Sync,
{
    fill_chunked(out, |start, chunk| {
        let x = &x[start..start + chunk.len()];
        in_wide_lanes(
            #[inline(always)]
            || {
                for (out, x) in chunk.chunks_mut(PLAIN_BLOCK).zip(x.chunks(PLAIN_BLOCK)) {
                    if x.iter().fold(true, |all, &v| all & is_plain(v)) {
                        apply(x, out, plain);
                    } else {
                        apply(x, out, full);
                    }
                }
            },
        );
    });
}

/// `out[i] = f(a[i], b[i])`, inline or across the pool.
fn map2<F>(a: &[f32], b: &[f32], out: &mut [f32], f: F)
where
    F: Fn(f32, f32) -> f32 + Copy + Send + Sync,
{
    fill_chunked(out, |start, chunk| {
        let (a, b) = (&a[start..start + chunk.len()], &b[start..start + chunk.len()]);
        in_wide_lanes(
            #[inline(always)]
            || {
                for ((o, &x), &y) in chunk.iter_mut().zip(a).zip(b) {
                    *o = f(x, y);
                }
            },
        );
    });
}

// ------------------------------------------------------------ float32 ops

/// A float32 → float32 elementwise op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Square,
    /// `Reciprocal`, `Inv`: `1 / x`.
    Reciprocal,
    Tanh,
    Sigmoid,
    Relu,
    Relu6,
    Elu,
    Selu,
    Softplus,
    Softsign,
    Erf,
    /// `1 - erf(x)`, accurate in relative terms in the tail (exact GELU).
    Erfc,
    /// Sine, cosine and tangent: the rotation matrices of Keras' image
    /// augmentation layers. libm's, element by element: nothing runs them
    /// on large tensors.
    Sin,
    Cos,
    Tan,
    Sign,
    Floor,
    Ceil,
    /// Half to even.
    Round,
    /// `x > 0 ? x : alpha * x`.
    LeakyRelu(f32),
    /// `ZerosLike`, `OnesLike`: every element this value.
    Fill(f32),
}

impl UnaryOp {
    /// Every op (with sample parameters), for tests.
    pub const ALL: [UnaryOp; 29] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Square,
        UnaryOp::Reciprocal,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Relu6,
        UnaryOp::Elu,
        UnaryOp::Selu,
        UnaryOp::Softplus,
        UnaryOp::Softsign,
        UnaryOp::Erf,
        UnaryOp::Erfc,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tan,
        UnaryOp::Sign,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::LeakyRelu(0.3),
        UnaryOp::Fill(0.0),
        UnaryOp::Fill(1.0),
    ];

    /// `out = op(x)`; the slices must have the same length.
    pub fn run(self, x: &[f32], out: &mut [f32]) {
        match self {
            UnaryOp::Neg => map(x, out, |v: f32| -v),
            UnaryOp::Abs => map(x, out, f32::abs),
            UnaryOp::Exp => map_plain_or_full(x, out, exp_in_range_f32, exp_f32, is_exp_in_range),
            UnaryOp::Log => map_plain_or_full(x, out, ln_normal_f32, ln_f32, is_normal_positive),
            UnaryOp::Log1p => map(x, out, ln_1p_f32),
            UnaryOp::Sqrt => map(x, out, f32::sqrt),
            UnaryOp::Rsqrt => map(x, out, |v: f32| 1.0 / v.sqrt()),
            UnaryOp::Square => map(x, out, |v: f32| v * v),
            UnaryOp::Reciprocal => map(x, out, |v: f32| 1.0 / v),
            UnaryOp::Tanh => map(x, out, tanh_f32),
            UnaryOp::Sigmoid => map(x, out, sigmoid_f32),
            UnaryOp::Relu => map(x, out, relu),
            UnaryOp::Relu6 => map(x, out, relu6),
            UnaryOp::Elu => map(x, out, elu),
            UnaryOp::Selu => {
                map(x, out, |v: f32| if v < 0.0 { SELU_SCALE_ALPHA * (exp_f32(v) - 1.0) } else { SELU_SCALE * v })
            }
            UnaryOp::Softplus => {
                let threshold = softplus_threshold();
                map(x, out, move |v: f32| {
                    // Both candidates, then a select: branch-free, so it vectorises.
                    let e = exp_f32(v);
                    let r = if v < threshold { e } else { ln_1p_f32(e) };
                    if v > -threshold {
                        v
                    } else {
                        r
                    }
                })
            }
            UnaryOp::Softsign => map(x, out, |v: f32| v / (v.abs() + 1.0)),
            UnaryOp::Erf => map(x, out, erf_f32),
            // A closure marked inline: passed as a function item, a function
            // this large was left out of the AVX2 copy of the loop (its call
            // shim is subject to LLVM's size limit), whose baseline code then
            // calls libm's `fmaf` per multiply-add: 15× slower in a test build.
            UnaryOp::Erfc => map(
                x,
                out,
                #[inline(always)]
                |v: f32| erfc_f32(v),
            ),
            UnaryOp::Sin => map(x, out, f32::sin),
            UnaryOp::Cos => map(x, out, f32::cos),
            UnaryOp::Tan => map(x, out, f32::tan),
            UnaryOp::Sign => map(x, out, sign),
            UnaryOp::Floor => map(x, out, f32::floor),
            UnaryOp::Ceil => map(x, out, f32::ceil),
            UnaryOp::Round => map(x, out, f32::round_ties_even),
            UnaryOp::LeakyRelu(alpha) => map(x, out, move |v: f32| leaky_relu(v, alpha)),
            UnaryOp::Fill(value) => out.fill(value),
        }
    }
}

/// `Softplus` switches to `x` above `-threshold` and to `exp(x)` below
/// `threshold`: `ln(ε) + 2` as TensorFlow computes it (≈ -13.94).
fn softplus_threshold() -> f32 {
    f32::EPSILON.ln() + 2.0
}

// The activations' element functions, shared with the epilogues of the
// fused products (`super::epilogue`), so a fused node computes what the
// unfused ops would, bit for bit.

/// `max(x, 0)`, NaN propagating, `-0` kept (Eigen `cwiseMax<PropagateNaN>`).
#[inline(always)]
pub(crate) fn relu(v: f32) -> f32 {
    if v < 0.0 {
        0.0
    } else {
        v
    }
}

/// `min(max(x, 0), 6)`, NaN propagating.
#[inline(always)]
pub(crate) fn relu6(v: f32) -> f32 {
    let r = relu(v);
    if r > 6.0 {
        6.0
    } else {
        r
    }
}

/// `exp(x) - 1` below zero (TensorFlow's formula, not `expm1`), else `x`.
#[inline(always)]
pub(crate) fn elu(v: f32) -> f32 {
    if v < 0.0 {
        exp_f32(v) - 1.0
    } else {
        v
    }
}

/// `x > 0 ? x : alpha·x`.
#[inline(always)]
pub(crate) fn leaky_relu(v: f32, alpha: f32) -> f32 {
    if v > 0.0 {
        v
    } else {
        v * alpha
    }
}

/// 1, -1, 0 (for ±0) or NaN.
#[inline(always)]
fn sign(v: f32) -> f32 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// The kernel of a [`UnaryOp`].
#[derive(Debug)]
struct UnaryKernel {
    op: UnaryOp,
    name: &'static str,
}

impl Kernel for UnaryKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs(self.name, ctx, 1)?;
        let x = ctx.input(0)?;
        let mut out = ctx.allocate_output(0, x.shape())?;
        let (x, out) = (x.data::<f32>()?, out.data_mut::<f32>()?);
        check_len(self.name, "the output", out.len(), &[x.len()])?;
        self.op.run(x, out);
        Ok(())
    }
}

// -------------------------------------------------------------- predicates

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Predicate {
    IsNan,
    IsFinite,
    LogicalNot,
}

/// `IsNan`, `IsFinite` (float32 → bool) and `LogicalNot` (bool → bool).
#[derive(Debug)]
struct PredicateKernel {
    op: Predicate,
}

impl Kernel for PredicateKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = match self.op {
            Predicate::IsNan => "IsNan",
            Predicate::IsFinite => "IsFinite",
            Predicate::LogicalNot => "LogicalNot",
        };
        expect_inputs(name, ctx, 1)?;
        let x = ctx.input(0)?;
        let mut out = ctx.allocate_output(0, x.shape())?;
        let out = out.data_mut::<TfBool>()?;
        check_len(name, "the output", out.len(), &[x.len()])?;
        match self.op {
            Predicate::IsNan => map(x.data::<f32>()?, out, |v: f32| TfBool(v.is_nan() as u8)),
            Predicate::IsFinite => map(x.data::<f32>()?, out, |v: f32| TfBool(v.is_finite() as u8)),
            Predicate::LogicalNot => map(x.data::<TfBool>()?, out, |v: TfBool| TfBool((!v.get()) as u8)),
        }
        Ok(())
    }
}

// -------------------------------------------------------------------- Cast

/// `Cast` between float32 and int32/int64/bool/float16/bfloat16, between
/// int32 and int64, and between int32/int64/bool and float16/bfloat16
/// (through float32, see [`build_cast`]).
#[derive(Debug)]
struct CastKernel {
    src: DType,
    dst: DType,
    /// `Truncate`: float32 → bfloat16 drops the low bits instead of
    /// rounding (TensorFlow's attribute; it changes nothing else here).
    truncate: bool,
}

impl CastKernel {
    fn new(attrs: &dyn Attrs) -> Result<Self, Error> {
        let (src, dst) = (attrs.dtype("SrcT")?, attrs.dtype("DstT")?);
        let truncate = attrs.has("Truncate") && attrs.bool("Truncate")?;
        // The pairs registered above (`SrcT` first, then `DstT`).
        let supported = KERNELS
            .iter()
            .filter(|def| def.op == "Cast")
            .any(|def| matches!(def.types, [(_, from), (_, to)] if from.contains(&src) && to.contains(&dst)));
        if supported {
            Ok(CastKernel { src, dst, truncate })
        } else {
            Err(Error::InvalidArgument(format!("Cast: tfwasm has no kernel from {src} to {dst}")))
        }
    }
}

/// float32 → int32 as TensorFlow's x86 build does it: truncation, with NaN
/// and out-of-range values giving `i32::MIN` (what `cvttss2si` returns).
///
/// Worked out on the bits, in integer steps with no branch, because the
/// plain form (`v as i32` behind a range check) does not vectorise: Rust's
/// saturating `as` lowers to a scalar conversion with fix-ups. This form
/// runs as AVX2's per-lane shifts.
#[inline(always)]
fn f32_to_i32(v: f32) -> i32 {
    let bits = v.to_bits();
    // Unbiased exponent; the magnitude is `1.mantissa · 2^exponent`.
    let exponent = ((bits >> 23) & 0xff) as i32 - 127;
    let mantissa = (bits & 0x7f_ffff) | 0x80_0000;
    // Exponents 23..=30 shift left; below 23 shift right, by 31 at most,
    // which clears the 24-bit mantissa (|v| < 1 truncates to 0).
    let magnitude = if exponent >= 23 {
        mantissa << ((exponent - 23) as u32 & 7)
    } else {
        mantissa >> ((23 - exponent).min(31) as u32)
    } as i32;
    let value = if bits >> 31 == 0 { magnitude } else { magnitude.wrapping_neg() };
    // |v| >= 2^31, infinities and NaN; also -2^31 itself, whose true value
    // is `i32::MIN` too.
    if exponent >= 31 {
        i32::MIN
    } else {
        value
    }
}

/// float32 → int64 likewise, `i64::MIN` for NaN and out-of-range values.
#[inline(always)]
fn f32_to_i64(v: f32) -> i64 {
    let bits = v.to_bits();
    let exponent = ((bits >> 23) & 0xff) as i64 - 127;
    let mantissa = u64::from((bits & 0x7f_ffff) | 0x80_0000);
    let magnitude = if exponent >= 23 {
        mantissa << ((exponent - 23) as u32 & 63)
    } else {
        mantissa >> ((23 - exponent).min(63) as u32)
    } as i64;
    let value = if bits >> 31 == 0 { magnitude } else { magnitude.wrapping_neg() };
    if exponent >= 63 {
        i64::MIN
    } else {
        value
    }
}

/// Builds a `Cast`. Between an integer or bool and a narrow float it is two
/// casts through float32, as in TensorFlow (whose narrow types convert to and
/// from other types through float): the float32 cast, [widened](half). A
/// narrow float to bool tests the bits, as TensorFlow does: a subnormal is
/// `true` (through float32 it would be `false`, TensorFlow's kernels
/// treating subnormal float32 inputs as 0).
fn build_cast(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    let cast = CastKernel::new(attrs)?;
    let through_f32 =
        (half::is_narrow(cast.src) || half::is_narrow(cast.dst)) && cast.src != DType::F32 && cast.dst != DType::F32;
    if through_f32 && cast.dst != DType::Bool {
        let (src, dst) = (half::wide_type(cast.src), half::wide_type(cast.dst));
        return Ok(half::widened(Box::new(CastKernel { src, dst, truncate: false })));
    }
    Ok(Box::new(cast))
}

impl Kernel for CastKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs("Cast", ctx, 1)?;
        if self.src == self.dst {
            return ctx.forward_input(0, 0);
        }
        let x = ctx.input(0)?;
        let mut out = ctx.allocate_output(0, x.shape())?;
        if out.len() != x.len() {
            return Err(Error::Internal(format!(
                "Cast: output of {} elements for input {}",
                out.len(),
                ShapeDisplay(x.shape())
            )));
        }
        fn cast<I: Element, O: Element>(
            x: &super::Tensor,
            out: &mut super::Tensor,
            f: impl Fn(I) -> O + Copy + Send + Sync,
        ) -> Result<(), Error> {
            map(x.data::<I>()?, out.data_mut::<O>()?, f);
            Ok(())
        }
        match (self.src, self.dst) {
            (DType::I32, DType::F32) => cast(&x, &mut out, |v: i32| v as f32),
            (DType::I64, DType::F32) => cast(&x, &mut out, |v: i64| v as f32),
            (DType::Bool, DType::F32) => cast(&x, &mut out, |v: TfBool| f32::from(u8::from(v.get()))),
            (DType::U8, DType::F32) => cast(&x, &mut out, |v: u8| f32::from(v)),
            // Rounds to nearest, ties to even, as C++'s conversion does.
            (DType::F64, DType::F32) => cast(&x, &mut out, |v: f64| v as f32),
            (DType::F32, DType::I32) => cast(&x, &mut out, f32_to_i32),
            (DType::F32, DType::I64) => cast(&x, &mut out, f32_to_i64),
            (DType::F32, DType::Bool) => cast(&x, &mut out, |v: f32| TfBool((v != 0.0) as u8)),
            (DType::I32, DType::I64) => cast(&x, &mut out, |v: i32| i64::from(v)),
            (DType::I64, DType::I32) => cast(&x, &mut out, |v: i64| v as i32),
            (DType::F16, DType::F32) => {
                half::widen_f16(x.data()?, out.data_mut()?);
                Ok(())
            }
            (DType::BF16, DType::F32) => {
                half::widen_bf16(x.data()?, out.data_mut()?);
                Ok(())
            }
            (DType::F32, DType::F16) => {
                half::narrow_f16(x.data()?, out.data_mut()?);
                Ok(())
            }
            (DType::F16, DType::Bool) => cast(&x, &mut out, |v: ::half::f16| TfBool::from(v.to_bits() & 0x7fff != 0)),
            (DType::BF16, DType::Bool) => cast(&x, &mut out, |v: ::half::bf16| TfBool::from(v.to_bits() & 0x7fff != 0)),
            (DType::F32, DType::BF16) if self.truncate => cast(&x, &mut out, half::bf16_truncated),
            (DType::F32, DType::BF16) => {
                half::narrow_bf16(x.data()?, out.data_mut()?);
                Ok(())
            }
            (src, dst) => Err(Error::InvalidArgument(format!("Cast: tfwasm has no kernel from {src} to {dst}"))),
        }
    }
}

// ----------------------------------------------------------------- Bitcast

/// `Bitcast`: the same bytes seen as another type. Element sizes that
/// differ change the last dimension, as in TensorFlow: a wider source gains
/// a last dimension of `src / dst` elements, a narrower one loses a last
/// dimension that must be `dst / src`.
#[derive(Debug)]
struct BitcastKernel {
    src: DType,
    dst: DType,
}

impl BitcastKernel {
    fn new(attrs: &dyn Attrs) -> Result<Self, Error> {
        Ok(BitcastKernel { src: attrs.dtype("T")?, dst: attrs.dtype("type")? })
    }
}

/// The output shape of a `Bitcast` of `shape` from `src` to `dst`.
fn bitcast_shape(shape: &[usize], src: DType, dst: DType) -> Result<Vec<usize>, Error> {
    let (from, to) = (src.size(), dst.size());
    let mut out = shape.to_vec();
    if from > to {
        out.push(from / to);
    } else if from < to {
        if shape.last() != Some(&(to / from)) {
            return Err(Error::InvalidArgument(format!(
                "Bitcast: Cannot bitcast from {src} to {dst}: shape {} does not end in a dimension of {}",
                ShapeDisplay(shape),
                to / from
            )));
        }
        out.pop();
    }
    Ok(out)
}

impl Kernel for BitcastKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs("Bitcast", ctx, 1)?;
        let x = ctx.input(0)?;
        if x.dtype() != self.src {
            return Err(Error::Internal(format!("Bitcast: a {} input for T={}", x.dtype(), self.src)));
        }
        let mut out = ctx.allocate_output(0, &bitcast_shape(x.shape(), self.src, self.dst)?)?;
        let (src, dst) = (x.bytes(), out.bytes_mut()?);
        if src.len() != dst.len() {
            return Err(Error::Internal(format!("Bitcast: {} bytes into {}", src.len(), dst.len())));
        }
        // A copy, not an alias: TensorFlow's CPU kernel shares the buffer,
        // but the C API cannot hand back an input under another type; the
        // tensors this runs on are small.
        dst.copy_from_slice(src);
        Ok(())
    }
}

// --------------------------------------------------------------- gradients

/// A gradient op of two same-size float32 inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GradOp {
    /// `ReluGrad(gradients, features)`.
    Relu,
    Relu6,
    /// `EluGrad(gradients, outputs)`.
    Elu,
    /// `SeluGrad(gradients, outputs)`.
    Selu,
    /// `SoftplusGrad(gradients, features)`.
    Softplus,
    Softsign,
    LeakyRelu(f32),
    /// `TanhGrad(y, dy)`.
    Tanh,
    /// `SigmoidGrad(y, dy)`.
    Sigmoid,
    /// `RsqrtGrad(y, dy)`.
    Rsqrt,
    /// `SqrtGrad(y, dy)`.
    Sqrt,
    /// `ReciprocalGrad(y, dy)`, `InvGrad`.
    Reciprocal,
}

impl GradOp {
    pub const ALL: [GradOp; 12] = [
        GradOp::Relu,
        GradOp::Relu6,
        GradOp::Elu,
        GradOp::Selu,
        GradOp::Softplus,
        GradOp::Softsign,
        GradOp::LeakyRelu(0.3),
        GradOp::Tanh,
        GradOp::Sigmoid,
        GradOp::Rsqrt,
        GradOp::Sqrt,
        GradOp::Reciprocal,
    ];

    /// The activation gradients (`*Grad(gradients, features)`) require
    /// identical shapes; the `cwise` ones (`TanhGrad(y, dy)`, …) only the
    /// same number of elements, and take the shape of `y`.
    fn needs_same_shape(self) -> bool {
        !matches!(self, GradOp::Tanh | GradOp::Sigmoid | GradOp::Rsqrt | GradOp::Sqrt | GradOp::Reciprocal)
    }

    /// `out = op(a, b)` with TensorFlow's input order.
    pub fn run(self, a: &[f32], b: &[f32], out: &mut [f32]) {
        match self {
            GradOp::Relu => map2(a, b, out, |g, x| g * f32::from(u8::from(x > 0.0))),
            GradOp::Relu6 => map2(a, b, out, |g, x| g * f32::from(u8::from(x > 0.0 && x < 6.0))),
            GradOp::Elu => map2(a, b, out, |g, y| if y < 0.0 { (y + 1.0) * g } else { g }),
            GradOp::Selu => map2(a, b, out, |g, y| if y < 0.0 { g * (y + SELU_SCALE_ALPHA) } else { g * SELU_SCALE }),
            GradOp::Softplus => map2(a, b, out, |g, x| g / (exp_f32(-x) + 1.0)),
            GradOp::Softsign => map2(a, b, out, |g, x| {
                let d = x.abs() + 1.0;
                g / (d * d)
            }),
            GradOp::LeakyRelu(alpha) => map2(a, b, out, move |g, x| if x > 0.0 { g } else { g * alpha }),
            GradOp::Tanh => map2(a, b, out, |y, dy| dy * (1.0 - y * y)),
            GradOp::Sigmoid => map2(a, b, out, |y, dy| dy * (y * (1.0 - y))),
            GradOp::Rsqrt => map2(a, b, out, |y, dy| if dy == 0.0 { 0.0 } else { -0.5 * (dy * y) * (y * y) }),
            GradOp::Sqrt => map2(a, b, out, |y, dy| if dy == 0.0 { 0.0 } else { (0.5 * dy) / y }),
            GradOp::Reciprocal => map2(a, b, out, |y, dy| if dy == 0.0 { 0.0 } else { -y * y * dy }),
        }
    }
}

#[derive(Debug)]
struct GradKernel {
    op: GradOp,
    name: &'static str,
}

impl Kernel for GradKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs(self.name, ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        if self.op.needs_same_shape() {
            if a.shape() != b.shape() {
                return Err(Error::InvalidArgument(format!(
                    "Inputs to operation {0} of type {0} must have the same size and shape.  Input 0: {1} != input 1: {2}",
                    self.name,
                    ShapeDisplay(a.shape()),
                    ShapeDisplay(b.shape())
                )));
            }
        } else if a.len() != b.len() {
            return Err(Error::InvalidArgument(format!(
                "{}: the two arguments to a cwise op must have same number of elements, got {} and {}",
                self.name,
                a.len(),
                b.len()
            )));
        }
        let mut out = ctx.allocate_output(0, a.shape())?;
        let (a, b, out) = (a.data::<f32>()?, b.data::<f32>()?, out.data_mut::<f32>()?);
        check_len(self.name, "the output", out.len(), &[a.len()])?;
        check_len(self.name, "input 1", b.len(), &[a.len()])?;
        self.op.run(a, b, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalContext, Tensor};

    fn values(len: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// Special values every op must handle as TensorFlow does.
    const SPECIAL: [f32; 14] =
        [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 6.0, 20.0, -20.0, 1e-30];

    /// Reference in float64 (for ops TF computes directly) or with TF's exact
    /// float32 formula.
    fn reference(op: UnaryOp, v: f32) -> f32 {
        let x = f64::from(v);
        let r = match op {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Log1p => x.ln_1p(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Square => x * x,
            UnaryOp::Reciprocal => 1.0 / x,
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Relu => return if v < 0.0 { 0.0 } else { v },
            UnaryOp::Relu6 => {
                return if v.is_nan() {
                    v
                } else if v < 0.0 {
                    0.0
                } else {
                    v.min(6.0)
                }
            }
            UnaryOp::Elu => return if v < 0.0 { (x.exp() as f32) - 1.0 } else { v },
            UnaryOp::Selu => return if v < 0.0 { SELU_SCALE_ALPHA * ((x.exp() as f32) - 1.0) } else { SELU_SCALE * v },
            UnaryOp::Softplus => {
                if v > 13.942385 {
                    x
                } else if v < -13.942385 {
                    x.exp()
                } else {
                    x.exp().ln_1p()
                }
            }
            UnaryOp::Softsign => x / (x.abs() + 1.0),
            UnaryOp::Erf => crate::vmath::erf_reference(x),
            UnaryOp::Erfc => crate::vmath::erfc_reference(x),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tan => x.tan(),
            UnaryOp::Sign => {
                return if v.is_nan() {
                    v
                } else if v == 0.0 {
                    0.0
                } else {
                    v.signum()
                }
            }
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Round => x.round_ties_even(),
            UnaryOp::LeakyRelu(alpha) => return if v > 0.0 { v } else { v * alpha },
            UnaryOp::Fill(value) => return value,
        };
        r as f32
    }

    fn close(got: f32, want: f32, rtol: f32, atol: f32) -> bool {
        if want.is_nan() {
            return got.is_nan();
        }
        if want.is_infinite() || want == 0.0 {
            return got == want || (got - want).abs() <= atol;
        }
        (got - want).abs() <= atol + rtol * want.abs()
    }

    fn run_unary(op: UnaryOp, shape: &[usize], x: Vec<f32>) -> Tensor {
        let kernel = UnaryKernel { op, name: "test" };
        let out = LocalContext::run(&kernel, vec![Tensor::from_vec(shape, x).unwrap()], &[DType::F32]).unwrap();
        out.into_iter().next().unwrap()
    }

    /// Runs `op` on `base` with each of `specials` at both ends of a
    /// [`PLAIN_BLOCK`] block, in a tensor large enough for the compute pool
    /// (so chunks start mid-block too), and checks every element against
    /// `f` bit for bit.
    fn check_blocks_with_specials(op: UnaryOp, base: Vec<f32>, specials: &[f32], f: fn(f32) -> f32) {
        let mut x = base;
        let len = x.len();
        assert!(len > (4 + 2 * specials.len()) * PLAIN_BLOCK);
        for (i, &special) in specials.iter().enumerate() {
            x[(3 + 2 * i) * PLAIN_BLOCK] = special;
            x[(4 + 2 * i) * PLAIN_BLOCK - 1] = special;
        }
        x[len - 1] = specials[0];
        let out = run_unary(op, &[len], x.clone()).to_vec::<f32>().unwrap();
        for (i, (&v, &got)) in x.iter().zip(&out).enumerate() {
            let want = f(v);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{op:?}(x[{i}] = {v:e}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn log_blocks_with_and_without_special_inputs_agree_with_ln() {
        let len = 200 * PLAIN_BLOCK + 37;
        let base = values(len, 5, 50.0).iter().map(|v| v.abs() + 1e-3).collect();
        let specials = [0.0, -0.0, f32::MIN_POSITIVE / 4.0, -2.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
        check_blocks_with_specials(UnaryOp::Log, base, &specials, ln_f32);
    }

    #[test]
    fn exp_blocks_with_and_without_out_of_range_inputs_agree_with_exp() {
        let len = 200 * PLAIN_BLOCK + 37;
        let specials = [100.0, -100.0, 88.8, -87.4, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
        check_blocks_with_specials(UnaryOp::Exp, values(len, 6, 80.0), &specials, exp_f32);
    }

    #[test]
    fn unary_ops_match_reference() {
        for op in UnaryOp::ALL {
            let scale = if matches!(op, UnaryOp::Relu6) { 8.0 } else { 5.0 };
            for shape in [&[0usize][..], &[], &[1, 1], &[7, 13], &[3, 0, 2], &[257, 131]] {
                let mut x = values(shape.iter().product(), 11, scale);
                if matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt) {
                    x.iter_mut().for_each(|v| *v = v.abs() + 1e-3);
                }
                let out = run_unary(op, shape, x.clone());
                assert_eq!(out.shape(), shape);
                for (&v, &got) in x.iter().zip(out.to_vec::<f32>().unwrap().iter()) {
                    let want = reference(op, v);
                    assert!(close(got, want, 2e-6, 1e-7), "{op:?}({v}) = {got}, want {want}");
                }
            }
            let out = run_unary(op, &[SPECIAL.len()], SPECIAL.to_vec());
            for (&v, &got) in SPECIAL.iter().zip(out.to_vec::<f32>().unwrap().iter()) {
                let want = reference(op, v);
                assert!(close(got, want, 2e-6, 1e-37), "{op:?}({v}) = {got}, want {want}");
            }
        }
    }

    #[test]
    fn signed_zero_and_nan_as_tensorflow() {
        let out = run_unary(UnaryOp::Relu, &[3], vec![-0.0, f32::NAN, -1.0]).to_vec::<f32>().unwrap();
        assert_eq!(out[0].to_bits(), (-0.0f32).to_bits());
        assert!(out[1].is_nan());
        assert_eq!(out[2].to_bits(), 0.0f32.to_bits());
        let out = run_unary(UnaryOp::Sign, &[2], vec![-0.0, f32::NAN]).to_vec::<f32>().unwrap();
        assert_eq!(out[0].to_bits(), 0.0f32.to_bits());
        assert!(out[1].is_nan());
        let out = run_unary(UnaryOp::Round, &[5], vec![0.5, 1.5, 2.5, -0.5, -2.5]).to_vec::<f32>().unwrap();
        assert_eq!(out, [0.0, 2.0, 2.0, -0.0, -2.0]);
        assert_eq!(softplus_threshold(), -13.942385);
    }

    fn grad_reference(op: GradOp, a: f32, b: f32) -> f32 {
        let (x, y) = (f64::from(a), f64::from(b));
        let r = match op {
            GradOp::Relu => return a * if b > 0.0 { 1.0 } else { 0.0 },
            GradOp::Relu6 => return a * if b > 0.0 && b < 6.0 { 1.0 } else { 0.0 },
            GradOp::Elu => return if b < 0.0 { (b + 1.0) * a } else { a },
            GradOp::Selu => return if b < 0.0 { a * (b + SELU_SCALE_ALPHA) } else { a * SELU_SCALE },
            GradOp::Softplus => x / ((-y).exp() + 1.0),
            GradOp::Softsign => x / ((y.abs() + 1.0) * (y.abs() + 1.0)),
            GradOp::LeakyRelu(alpha) => return if b > 0.0 { a } else { a * alpha },
            GradOp::Tanh => y * (1.0 - x * x),
            GradOp::Sigmoid => y * (x * (1.0 - x)),
            GradOp::Rsqrt => -0.5 * y * x * x * x,
            GradOp::Sqrt => 0.5 * y / x,
            GradOp::Reciprocal => -x * x * y,
        };
        if (matches!(op, GradOp::Rsqrt | GradOp::Sqrt | GradOp::Reciprocal)) && b == 0.0 {
            return 0.0;
        }
        r as f32
    }

    #[test]
    fn gradients_match_reference() {
        for op in GradOp::ALL {
            for shape in [&[0usize][..], &[], &[1, 1], &[7, 13], &[257, 131]] {
                let a = values(shape.iter().product(), 21, 8.0);
                let mut b = values(shape.iter().product(), 22, 8.0);
                if shape.len() == 2 && shape[0] == 7 {
                    b[3] = 0.0;
                    b[5] = 6.0;
                }
                let kernel = GradKernel { op, name: "test" };
                let inputs =
                    vec![Tensor::from_vec(shape, a.clone()).unwrap(), Tensor::from_vec(shape, b.clone()).unwrap()];
                let out = LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap();
                assert_eq!(out[0].shape(), shape);
                for ((&x, &y), &got) in a.iter().zip(&b).zip(out[0].to_vec::<f32>().unwrap().iter()) {
                    let want = grad_reference(op, x, y);
                    assert!(close(got, want, 2e-6, 1e-6), "{op:?}({x}, {y}) = {got}, want {want}");
                }
            }
        }
    }

    #[test]
    fn gradient_edge_values() {
        let run = |op, a: Vec<f32>, b: Vec<f32>| {
            let kernel = GradKernel { op, name: "test" };
            let n = a.len();
            let inputs = vec![Tensor::from_vec(&[n], a).unwrap(), Tensor::from_vec(&[n], b).unwrap()];
            LocalContext::run(&kernel, inputs, &[DType::F32]).unwrap()[0].to_vec::<f32>().unwrap()
        };
        // A NaN gradient survives the ReLU mask, as in TensorFlow.
        assert!(run(GradOp::Relu, vec![f32::NAN], vec![-1.0])[0].is_nan());
        // Zero incoming gradients give zero even where y is 0 or infinite.
        for op in [GradOp::Sqrt, GradOp::Rsqrt, GradOp::Reciprocal] {
            let out = run(op, vec![0.0, f32::INFINITY, 1.0], vec![0.0, 0.0, 1.0]);
            assert_eq!(&out[..2], &[0.0, 0.0], "{op:?}");
        }
    }

    #[test]
    fn gradient_shape_checks() {
        let inputs = || {
            vec![Tensor::from_vec(&[2, 3], vec![1.0f32; 6]).unwrap(), Tensor::from_vec(&[6], vec![1.0f32; 6]).unwrap()]
        };
        let error =
            LocalContext::run(&GradKernel { op: GradOp::Relu, name: "ReluGrad" }, inputs(), &[DType::F32]).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)));
        assert!(
            error.to_string().contains("ReluGrad") && error.to_string().contains("[2,3] != input 1: [6]"),
            "{error}"
        );
        // The cwise gradients only need the same number of elements.
        let out =
            LocalContext::run(&GradKernel { op: GradOp::Tanh, name: "TanhGrad" }, inputs(), &[DType::F32]).unwrap();
        assert_eq!(out[0].shape(), &[2, 3]);
        let short =
            vec![Tensor::from_vec(&[2, 3], vec![1.0f32; 6]).unwrap(), Tensor::from_vec(&[4], vec![1.0f32; 4]).unwrap()];
        assert!(LocalContext::run(&GradKernel { op: GradOp::Tanh, name: "TanhGrad" }, short, &[DType::F32]).is_err());
    }

    #[test]
    fn predicates_and_logical_not() {
        let x = Tensor::from_vec(&[2, 3], vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1.0, 1e38]).unwrap();
        let bits = |t: &Tensor| t.to_vec::<TfBool>().unwrap().iter().map(|v| v.0).collect::<Vec<_>>();
        let out = LocalContext::run(&PredicateKernel { op: Predicate::IsNan }, vec![x], &[DType::Bool]).unwrap();
        assert_eq!(bits(&out[0]), [1, 0, 0, 0, 0, 0]);
        let x = Tensor::from_vec(&[2, 3], vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1.0, 1e38]).unwrap();
        let out = LocalContext::run(&PredicateKernel { op: Predicate::IsFinite }, vec![x], &[DType::Bool]).unwrap();
        assert_eq!(bits(&out[0]), [0, 0, 0, 1, 1, 1]);
        let x = Tensor::from_vec(&[3], vec![TfBool(0), TfBool(1), TfBool(7)]).unwrap();
        let out = LocalContext::run(&PredicateKernel { op: Predicate::LogicalNot }, vec![x], &[DType::Bool]).unwrap();
        assert_eq!(bits(&out[0]), [1, 0, 0]);
        let empty = Tensor::from_vec::<f32>(&[0, 4], vec![]).unwrap();
        let out = LocalContext::run(&PredicateKernel { op: Predicate::IsNan }, vec![empty], &[DType::Bool]).unwrap();
        assert_eq!(out[0].shape(), &[0, 4]);
    }

    #[test]
    fn float_to_int_bits_match_a_range_checked_conversion() {
        fn reference_i32(v: f32) -> i32 {
            if (-2_147_483_648.0..2_147_483_648.0).contains(&v) {
                v as i32
            } else {
                i32::MIN
            }
        }
        fn reference_i64(v: f32) -> i64 {
            if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&v) {
                v as i64
            } else {
                i64::MIN
            }
        }
        // Every exponent with a spread of mantissas (a prime stride through
        // the bit patterns), plus each power of two and its neighbours.
        let strided = (0..=u32::MAX / 65_521).map(|k| k * 65_521);
        let edges = (0..=255u32).flat_map(|e| {
            let p = e << 23;
            [p, p + 1, p.wrapping_sub(1), p | 0x7f_ffff].into_iter().flat_map(|b| [b, b | 0x8000_0000])
        });
        for bits in strided.chain(edges) {
            let v = f32::from_bits(bits);
            assert_eq!(f32_to_i32(v), reference_i32(v), "{v:e} ({bits:#x}) to int32");
            assert_eq!(f32_to_i64(v), reference_i64(v), "{v:e} ({bits:#x}) to int64");
        }
    }

    #[test]
    fn casts_follow_tensorflow() {
        let special = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            3e9,
            -3e9,
            2.7,
            -2.7,
            0.5,
            -0.0,
            1e20,
            -2147483648.0,
            2147483520.0,
            2147483648.0,
        ];
        let n = special.len();
        let run = |src: DType, dst: DType, input: Tensor| {
            LocalContext::run(&CastKernel { src, dst, truncate: false }, vec![input], &[dst])
                .unwrap()
                .into_iter()
                .next()
                .unwrap()
        };
        let i32s = run(DType::F32, DType::I32, Tensor::from_vec(&[n], special.clone()).unwrap());
        assert_eq!(
            i32s.to_vec::<i32>().unwrap(),
            [
                i32::MIN,
                i32::MIN,
                i32::MIN,
                i32::MIN,
                i32::MIN,
                2,
                -2,
                0,
                0,
                i32::MIN,
                i32::MIN,
                2_147_483_520,
                i32::MIN
            ]
        );
        let i64s = run(DType::F32, DType::I64, Tensor::from_vec(&[n], special.clone()).unwrap());
        assert_eq!(
            i64s.to_vec::<i64>().unwrap(),
            [
                i64::MIN,
                i64::MIN,
                i64::MIN,
                3_000_000_000,
                -3_000_000_000,
                2,
                -2,
                0,
                0,
                i64::MIN,
                -2_147_483_648,
                2_147_483_520,
                2_147_483_648
            ]
        );
        let bools = run(DType::F32, DType::Bool, Tensor::from_vec(&[n], special).unwrap());
        assert_eq!(
            bools.to_vec::<TfBool>().unwrap().iter().map(|b| b.0).collect::<Vec<_>>(),
            [1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1]
        );

        let pixels = run(DType::U8, DType::F32, Tensor::from_vec(&[3], vec![0u8, 128, 255]).unwrap());
        assert_eq!(pixels.to_vec::<f32>().unwrap(), [0.0, 128.0, 255.0]);
        // float64 → float32 rounds to nearest, ties to even; overflow is an
        // infinity, and a value below float32's subnormals a signed zero.
        let doubles = vec![1.0 + 2f64.powi(-24), 1.0 + 3.0 * 2f64.powi(-24), 3.5e38, -1e300, -1e-50, 0.1];
        let narrowed = run(DType::F64, DType::F32, Tensor::from_vec(&[6], doubles).unwrap());
        let bits: Vec<u32> = narrowed.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        let want = [1.0f32, 1.0 + 2f32.powi(-22), f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.1];
        assert_eq!(bits, want.map(f32::to_bits));
        let f =
            run(DType::I64, DType::F32, Tensor::from_vec(&[3], vec![(1i64 << 53) + 1, -(1i64 << 40) - 3, 7]).unwrap());
        assert_eq!(f.to_vec::<f32>().unwrap(), [9_007_199_254_740_992.0, -1_099_511_627_776.0, 7.0]);
        let f = run(DType::I32, DType::F32, Tensor::from_vec(&[3], vec![16_777_217i32, -5, 0]).unwrap());
        assert_eq!(f.to_vec::<f32>().unwrap(), [16_777_216.0, -5.0, 0.0]);
        let f = run(DType::Bool, DType::F32, Tensor::from_vec(&[3], vec![TfBool(1), TfBool(0), TfBool(1)]).unwrap());
        assert_eq!(f.to_vec::<f32>().unwrap(), [1.0, 0.0, 1.0]);
        // Same type: the input is forwarded.
        let f = run(DType::F32, DType::F32, Tensor::from_vec(&[2], vec![1.5f32, -2.0]).unwrap());
        assert_eq!(f.to_vec::<f32>().unwrap(), [1.5, -2.0]);
        // Large: across the pool.
        let big: Vec<i64> = (0..100_003).map(|i| i * 3 - 7).collect();
        let f = run(DType::I64, DType::F32, Tensor::from_vec(&[100_003], big.clone()).unwrap());
        assert!(f.to_vec::<f32>().unwrap().iter().zip(&big).all(|(&g, &w)| g == w as f32));
    }

    struct CastAttrs(DType, DType);

    impl Attrs for CastAttrs {
        fn has(&self, name: &str) -> bool {
            matches!(name, "SrcT" | "DstT")
        }
        fn bool(&self, _: &str) -> Result<bool, Error> {
            Err(Error::Internal("no bool".into()))
        }
        fn int(&self, _: &str) -> Result<i64, Error> {
            Err(Error::Internal("no int".into()))
        }
        fn float(&self, _: &str) -> Result<f32, Error> {
            Err(Error::Internal("no float".into()))
        }
        fn ints(&self, _: &str) -> Result<Vec<i64>, Error> {
            Err(Error::Internal("no ints".into()))
        }
        fn string(&self, _: &str) -> Result<String, Error> {
            Err(Error::Internal("no string".into()))
        }
        fn dtype(&self, name: &str) -> Result<DType, Error> {
            match name {
                "SrcT" | "T" => Ok(self.0),
                "DstT" | "type" => Ok(self.1),
                _ => Err(Error::Internal(format!("no attribute {name}"))),
            }
        }
    }

    #[test]
    fn cast_builds_only_for_registered_pairs() {
        for def in KERNELS.iter().filter(|d| d.op == "Cast") {
            for combo in def.type_combinations() {
                assert!((def.build)(&CastAttrs(combo[0].1, combo[1].1)).is_ok(), "{combo:?}");
            }
        }
        assert!(CastKernel::new(&CastAttrs(DType::I32, DType::Bool)).is_err());
        assert!(CastKernel::new(&CastAttrs(DType::F32, DType::F64)).is_err());
        assert!(CastKernel::new(&CastAttrs(DType::U8, DType::I32)).is_err());
    }

    #[test]
    fn integer_casts_widen_and_keep_the_low_bits() {
        let cast = |src, dst, x: Tensor| {
            let kernel = CastKernel::new(&CastAttrs(src, dst)).unwrap();
            LocalContext::run(&kernel, vec![x], &[dst]).unwrap().remove(0)
        };
        let wide = cast(DType::I32, DType::I64, Tensor::from_vec(&[2, 2], vec![0, -1, i32::MAX, i32::MIN]).unwrap());
        assert_eq!(wide.shape(), &[2, 2]);
        assert_eq!(wide.to_vec::<i64>().unwrap(), [0, -1, 2_147_483_647, -2_147_483_648]);
        let narrow = cast(
            DType::I64,
            DType::I32,
            Tensor::from_vec(&[5], vec![7i64, -7, 1 << 32, (1 << 32) + 5, -(1 << 31) - 1]).unwrap(),
        );
        assert_eq!(narrow.to_vec::<i32>().unwrap(), [7, -7, 0, 5, i32::MAX]);
        let empty = cast(DType::I64, DType::I32, Tensor::from_vec::<i64>(&[0, 3], vec![]).unwrap());
        assert_eq!(empty.shape(), &[0, 3]);
    }

    #[test]
    fn bitcast_copies_bits_and_reshapes_the_last_dimension() {
        let kernel = BitcastKernel::new(&CastAttrs(DType::F32, DType::I32)).unwrap();
        let x = Tensor::from_vec(&[1, 3], vec![1.0f32, -0.0, f32::NAN]).unwrap();
        let out = LocalContext::run(&kernel, vec![x], &[DType::I32]).unwrap();
        assert_eq!(out[0].shape(), &[1, 3]);
        let bits: Vec<u32> = out[0].to_vec::<i32>().unwrap().iter().map(|&v| v as u32).collect();
        assert_eq!(bits, [0x3f80_0000, 0x8000_0000, f32::NAN.to_bits()]);
        let x = Tensor::from_vec::<f32>(&[0, 7], vec![]).unwrap();
        assert_eq!(LocalContext::run(&kernel, vec![x], &[DType::I32]).unwrap()[0].shape(), &[0, 7]);

        assert_eq!(bitcast_shape(&[2, 3], DType::I64, DType::I32).unwrap(), [2, 3, 2]);
        assert_eq!(bitcast_shape(&[], DType::F64, DType::U8).unwrap(), [8]);
        assert_eq!(bitcast_shape(&[3, 2], DType::I32, DType::I64).unwrap(), [3]);
        assert_eq!(bitcast_shape(&[4], DType::F32, DType::I32).unwrap(), [4]);
        let error = bitcast_shape(&[3, 3], DType::I32, DType::I64).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
        assert!(bitcast_shape(&[], DType::I32, DType::I64).is_err());
    }

    #[test]
    fn every_kernel_builds_and_runs() {
        for def in KERNELS.iter().filter(|d| d.op != "Cast" && d.types == types::T_F32) {
            let kernel = (def.build)(&CastAttrs(DType::F32, DType::F32)).unwrap();
            let inputs = if def.op.ends_with("Grad") { 2 } else { 1 };
            let dtype = if def.op.starts_with("Is") { DType::Bool } else { DType::F32 };
            let tensors = (0..inputs).map(|i| Tensor::from_vec(&[2, 3], values(6, i, 2.0)).unwrap()).collect();
            let out = LocalContext::run(kernel.as_ref(), tensors, &[dtype]).unwrap();
            assert_eq!(out[0].shape(), &[2, 3], "{}", def.op);
        }
    }
}
