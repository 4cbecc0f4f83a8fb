//! Elementwise binary ops with broadcasting: float32 arithmetic (`AddV2`,
//! `Sub`, `Mul`, `RealDiv`, `DivNoNan`, `Maximum`, `Minimum`, `Pow`,
//! `SquaredDifference`), integer bookkeeping (`AddV2`, `Mul`, `FloorMod` on
//! int64, `BitwiseAnd` on int32), comparisons (float32, and int64 for
//! `Equal` and `NotEqual`) to bool, `LogicalAnd`/`LogicalOr` on bool,
//! `SelectV2` with three-way broadcasting (float32, int32, int64) and the v1
//! `Select` (float32), whose row form is a broadcast too.
//!
//! A [`BinaryPlan`] is made from the operand shapes alone, so the caller can
//! allocate the output before computing. Same-shape operands and a
//! single-element operand take loops the compiler vectorises; everything
//! else walks the collapsed broadcast (see [`super::shape`]) in runs that
//! use the same loops. Every op is one monomorphised loop: the op is chosen
//! once per call, never per element.
//!
//! Small outputs compute inline on the calling thread: most tensors in a
//! training step (biases, scalars, small activations) are far cheaper to add
//! than a hand-off to the pool costs. Large ones are split into chunks
//! across the compute pool ([`fill_chunked`], also used by [`super::unary`]).
//!
//! Semantics follow TensorFlow's CPU kernels (Eigen): `Maximum`/`Minimum`
//! propagate NaN (and return the first operand on ties, so `max(-0, 0)` is
//! `-0`), `DivNoNan` is 0 wherever the divisor is 0 (even for a NaN
//! dividend), `Pow` is C's `powf`. Integer `AddV2`/`Mul` wrap on overflow
//! (two's complement, as the CPU kernels do in practice); `FloorMod` takes
//! the sign of the divisor and fails with "Integer division by zero" as the
//! CPU kernel does.

use super::pool;
use super::shape::{broadcast_shape, element_count, Broadcast, Dims, ShapeDisplay};
use super::tensor::by_width;
use super::vmath::in_wide_lanes;
use super::{expect_inputs, types, Attrs, DType, Element, Kernel, KernelDef, OpContext, OutputPlace, TfBool};
use crate::error::Error;

macro_rules! arith {
    ($name:literal, $op:expr) => {
        KernelDef::new($name, types::T_F32, |_| Ok(Box::new(BinaryKernel { op: $op, name: $name })))
    };
}

macro_rules! compare {
    ($name:literal, $op:expr, $types:expr) => {
        KernelDef::new($name, $types, |attrs| Ok(Box::new(CompareKernel::new($op, $name, attrs)?)))
    };
}

/// float32, and int64 for the ops Keras' accuracy metrics run on integer
/// labels (`Equal`, `NotEqual`) and `ops.take` on int64 ids (`Less`, to
/// find negative ones). TensorFlow's own DEVICE_DEFAULT kernels cover
/// int32 (in host memory); none covers int64, so there is no conflict.
const F32_I64: &[(&str, &[DType])] = &[("T", &[DType::F32, DType::I64])];

/// int64 only: Keras keeps the optimizer's step counter and its
/// seed-generator state in int64 variables and updates them on the device.
/// TensorFlow's DEVICE_DEFAULT kernels already cover int32 `AddV2`, `Mul`
/// and `FloorMod` (in host memory); registering int32 too would make every
/// lookup ambiguous.
const T_I64: &[(&str, &[DType])] = &[("T", &[DType::I64])];

/// int32 `BitwiseAnd` (Keras' train step masks the bits of a float32
/// output, `Bitcast` to int32, to check it for NaN/Inf). No DEVICE_DEFAULT
/// kernel exists for it.
const T_I32: &[(&str, &[DType])] = &[("T", &[DType::I32])];

macro_rules! integer {
    ($name:literal, $op:expr, $types:expr) => {
        KernelDef::new($name, $types, |_| Ok(Box::new(IntegerKernel { op: $op, name: $name })))
    };
}

pub const KERNELS: &[KernelDef] = &[
    arith!("Add", BinaryOp::Add),
    arith!("AddV2", BinaryOp::Add),
    arith!("Sub", BinaryOp::Sub),
    arith!("Mul", BinaryOp::Mul),
    arith!("RealDiv", BinaryOp::RealDiv),
    // TensorFlow's v1 `Div` is `RealDiv` on floats; a mean all-reduce builds
    // it as its final op on the reducing device.
    arith!("Div", BinaryOp::RealDiv),
    arith!("DivNoNan", BinaryOp::DivNoNan),
    arith!("Maximum", BinaryOp::Maximum),
    arith!("Minimum", BinaryOp::Minimum),
    arith!("Pow", BinaryOp::Pow),
    arith!("SquaredDifference", BinaryOp::SquaredDifference),
    integer!("AddV2", BinaryOp::Add, T_I64),
    integer!("Mul", BinaryOp::Mul, T_I64),
    integer!("FloorMod", BinaryOp::FloorMod, T_I64),
    integer!("BitwiseAnd", BinaryOp::BitwiseAnd, T_I32),
    compare!("Equal", BinaryOp::Equal, F32_I64),
    compare!("NotEqual", BinaryOp::NotEqual, F32_I64),
    compare!("Less", BinaryOp::Less, F32_I64),
    compare!("LessEqual", BinaryOp::LessEqual, types::T_F32),
    compare!("Greater", BinaryOp::Greater, types::T_F32),
    compare!("GreaterEqual", BinaryOp::GreaterEqual, types::T_F32),
    KernelDef::new("LogicalAnd", &[], |_| Ok(Box::new(LogicalKernel { op: BinaryOp::LogicalAnd }))),
    KernelDef::new("LogicalOr", &[], |_| Ok(Box::new(LogicalKernel { op: BinaryOp::LogicalOr }))),
    KernelDef::new("SelectV2", SELECT_TYPES, |_| Ok(Box::new(SelectV2Kernel))),
    KernelDef::new("Select", SELECT_TYPES, |_| Ok(Box::new(SelectKernel))),
];

/// Every type: a select moves elements without reading them, as words of
/// their width. int32 among them for Keras' `ops.take`; TensorFlow 2.21 has
/// no DEVICE_DEFAULT `SelectV2` kernel for any type (its registry lists
/// none; `tests/python/test_ops_integer.py` runs an int32 one pinned to
/// WASM), so registering int32 makes no lookup ambiguous.
const SELECT_TYPES: &[(&str, &[DType])] = &[(
    "T",
    &[DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8, DType::U64, DType::Bool],
)];

/// Binds `$f` to the element function of float32 arithmetic op `$op` and
/// evaluates `$body` (monomorphised per op), or evaluates `$other` for an op
/// that is not float32 arithmetic. The one place each op's formula lives:
/// [`BinaryPlan::run`] and [`BinaryOp::apply_f32`] (the fused kernels) both
/// go through it, so fused and unfused results are bit-identical.
macro_rules! with_arith {
    ($op:expr, $f:ident => $body:expr, $other:expr) => {
        match $op {
            BinaryOp::Add => {
                let $f = |x: f32, y: f32| x + y;
                $body
            }
            BinaryOp::Sub => {
                let $f = |x: f32, y: f32| x - y;
                $body
            }
            BinaryOp::Mul => {
                let $f = |x: f32, y: f32| x * y;
                $body
            }
            BinaryOp::RealDiv => {
                let $f = |x: f32, y: f32| x / y;
                $body
            }
            BinaryOp::DivNoNan => {
                let $f = |x: f32, y: f32| if y == 0.0 { 0.0 } else { x / y };
                $body
            }
            BinaryOp::Maximum => {
                let $f = maximum;
                $body
            }
            BinaryOp::Minimum => {
                let $f = minimum;
                $body
            }
            BinaryOp::Pow => {
                let $f = f32::powf;
                $body
            }
            BinaryOp::SquaredDifference => {
                let $f = |x: f32, y: f32| (x - y) * (x - y);
                $body
            }
            _ => $other,
        }
    };
}

/// The kernel of one float32 arithmetic op.
#[derive(Debug)]
pub struct BinaryKernel {
    pub op: BinaryOp,
    /// The TensorFlow op it is registered for (`Add` and `AddV2` share one).
    pub name: &'static str,
}

impl Kernel for BinaryKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs(self.name, ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let plan = BinaryPlan::named(self.op, self.name, a.shape(), b.shape())?;
        let mut place = ctx.forward_or_allocate_output(0, plan.output_shape(), vec![(0, a), (1, b)])?;
        plan.run_into(Operands::of(&mut place)?)
    }
}

/// The kernel of one integer op (int32 or int64, as registered).
#[derive(Debug)]
pub struct IntegerKernel {
    pub op: BinaryOp,
    pub name: &'static str,
}

impl Kernel for IntegerKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs(self.name, ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let plan = BinaryPlan::named(self.op, self.name, a.shape(), b.shape())?;
        let dtype = a.dtype();
        let mut place = ctx.forward_or_allocate_output(0, plan.output_shape(), vec![(0, a), (1, b)])?;
        match dtype {
            DType::I32 => plan.run_integer_into::<i32>(Operands::of(&mut place)?),
            DType::I64 => plan.run_integer_into::<i64>(Operands::of(&mut place)?),
            other => Err(Error::InvalidArgument(format!("{}: tfwasm has no {other} kernel", self.name))),
        }
    }
}

/// The integer element types of [`IntegerKernel`], with TensorFlow's
/// semantics for each op.
pub trait Integer: Element + Eq + std::ops::BitAnd<Output = Self> {
    const ZERO: Self;
    fn wrapping_add(self, y: Self) -> Self;
    fn wrapping_mul(self, y: Self) -> Self;
    /// `x mod y` with the sign of `y` (Python's `%`); `y != 0`.
    fn floor_mod(self, y: Self) -> Self;
}

macro_rules! integer_impl {
    ($($t:ty)*) => {$(
        impl Integer for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn wrapping_add(self, y: Self) -> Self {
                <$t>::wrapping_add(self, y)
            }
            #[inline(always)]
            fn wrapping_mul(self, y: Self) -> Self {
                <$t>::wrapping_mul(self, y)
            }
            #[inline(always)]
            fn floor_mod(self, y: Self) -> Self {
                // `wrapping_rem` makes MIN % -1 give 0 (the true result)
                // instead of trapping; |r| < |y|, so `r + y` cannot overflow.
                let r = self.wrapping_rem(y);
                if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r }
            }
        }
    )*};
}
integer_impl!(i32 i64);

/// A comparison to bool. With `incompatible_shape_error=false` (an attribute
/// of `Equal`/`NotEqual`), shapes that do not broadcast give a scalar
/// `false` (`Equal`) or `true` (`NotEqual`) instead of an error.
#[derive(Debug)]
struct CompareKernel {
    op: BinaryOp,
    name: &'static str,
    incompatible_shape_error: bool,
}

impl CompareKernel {
    fn new(op: BinaryOp, name: &'static str, attrs: &dyn Attrs) -> Result<Self, Error> {
        let incompatible_shape_error =
            if attrs.has("incompatible_shape_error") { attrs.bool("incompatible_shape_error")? } else { true };
        Ok(CompareKernel { op, name, incompatible_shape_error })
    }
}

impl Kernel for CompareKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        expect_inputs(self.name, ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let plan = match BinaryPlan::named(self.op, self.name, a.shape(), b.shape()) {
            Ok(plan) => plan,
            Err(_) if !self.incompatible_shape_error => {
                let mut out = ctx.allocate_output(0, &[])?;
                out.data_mut::<TfBool>()?.fill(TfBool::from(self.op == BinaryOp::NotEqual));
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        let mut out = ctx.allocate_output(0, plan.output_shape())?;
        let out_data = out.data_mut::<TfBool>()?;
        match a.dtype() {
            DType::F32 => plan.run_compare(a.data::<f32>()?, b.data::<f32>()?, out_data),
            DType::I64 => plan.run_compare(a.data::<i64>()?, b.data::<i64>()?, out_data),
            other => Err(Error::InvalidArgument(format!("{}: tfwasm has no {other} kernel", self.name))),
        }
    }
}

/// `LogicalAnd` / `LogicalOr` on bool.
#[derive(Debug)]
struct LogicalKernel {
    op: BinaryOp,
}

impl Kernel for LogicalKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let name = self.op.op_name();
        expect_inputs(name, ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let plan = BinaryPlan::new(self.op, a.shape(), b.shape())?;
        let mut out = ctx.allocate_output(0, plan.output_shape())?;
        plan.run_logical(a.data()?, b.data()?, out.data_mut()?)
    }
}

/// Below this many output elements the op runs on the calling thread
/// (32K floats: ~10 µs of single-core work, well above a pool hand-off).
pub const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

/// Smallest chunk handed to one worker (64 KiB of output), so chunks stay
/// worth their scheduling cost.
const MIN_CHUNK_ELEMENTS: usize = 16 * 1024;

/// Chunks per worker: many, so a worker that starts late (or is shared with
/// another kernel) does not hold up the whole op; the last chunk to finish
/// is what the caller waits for. 16 instead of 4 took an eager 1M-element
/// `Log` from 2164–2220 to 2027–2123 µs per op (three alternating runs on
/// the 2-core VM); claiming a chunk is one atomic add.
const CHUNKS_PER_THREAD: usize = 16;

/// Calls `fill(start, chunk)` over consecutive chunks covering `out`
/// (`chunk` holds output elements `start..start + chunk.len()`): inline for
/// small outputs, shared between the calling thread and the compute pool for
/// large ones.
pub fn fill_chunked<O, F>(out: &mut [O], fill: F)
where
    O: Send,
    F: Fn(usize, &mut [O]) + Send + Sync,
{
    let len = out.len();
    if len == 0 {
        return;
    }
    if len < PARALLEL_MIN_ELEMENTS || pool::threads() == 1 {
        fill(0, out);
        return;
    }
    let chunk = len.div_ceil(pool::threads() * CHUNKS_PER_THREAD).max(MIN_CHUNK_ELEMENTS);
    pool::for_each_chunk_mut(out, chunk, |i, out_chunk| fill(i * chunk, out_chunk));
}

/// An elementwise binary operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `Add`, `AddV2`: `x + y`.
    Add,
    /// `x - y`.
    Sub,
    /// `x * y`.
    Mul,
    /// `x / y`.
    RealDiv,
    /// `y == 0 ? 0 : x / y`.
    DivNoNan,
    /// Larger of `x`, `y`; NaN if either is.
    Maximum,
    /// Smaller of `x`, `y`; NaN if either is.
    Minimum,
    /// `powf(x, y)`.
    Pow,
    /// `(x - y)²`.
    SquaredDifference,
    /// Integers: `x mod y` with the sign of `y`.
    FloorMod,
    /// Integers: `x & y`.
    BitwiseAnd,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    LogicalAnd,
    LogicalOr,
}

impl BinaryOp {
    /// `out[i] = x[i * x_step] (op) y[i * y_step]` for a float32 arithmetic
    /// op, with steps 0 (one repeated element) or 1, on the calling thread.
    /// The fused kernels' step ([`super::fused`]); `false` for an op that is
    /// not float32 arithmetic.
    pub fn apply_f32(self, x: &[f32], x_step: usize, y: &[f32], y_step: usize, out: &mut [f32]) -> bool {
        with_arith!(self, f => { combine(f, x, x_step, y, y_step, out); true }, false)
    }

    /// The TensorFlow op this implements.
    pub const fn op_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "AddV2",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::RealDiv => "RealDiv",
            BinaryOp::DivNoNan => "DivNoNan",
            BinaryOp::Maximum => "Maximum",
            BinaryOp::Minimum => "Minimum",
            BinaryOp::Pow => "Pow",
            BinaryOp::SquaredDifference => "SquaredDifference",
            BinaryOp::FloorMod => "FloorMod",
            BinaryOp::BitwiseAnd => "BitwiseAnd",
            BinaryOp::Equal => "Equal",
            BinaryOp::NotEqual => "NotEqual",
            BinaryOp::Less => "Less",
            BinaryOp::LessEqual => "LessEqual",
            BinaryOp::Greater => "Greater",
            BinaryOp::GreaterEqual => "GreaterEqual",
            BinaryOp::LogicalAnd => "LogicalAnd",
            BinaryOp::LogicalOr => "LogicalOr",
        }
    }

    /// The float32 → float32 ops.
    pub const ARITHMETIC: [BinaryOp; 9] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::RealDiv,
        BinaryOp::DivNoNan,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Pow,
        BinaryOp::SquaredDifference,
    ];

    /// The comparisons (→ bool).
    pub const COMPARISONS: [BinaryOp; 6] = [
        BinaryOp::Equal,
        BinaryOp::NotEqual,
        BinaryOp::Less,
        BinaryOp::LessEqual,
        BinaryOp::Greater,
        BinaryOp::GreaterEqual,
    ];
}

/// `Maximum` as Eigen's `scalar_max_op<PropagateNaN>`: NaN if either is
/// NaN, else `y > x ? y : x` (ties keep `x`, so `max(-0, 0) == -0`).
#[inline(always)]
pub fn maximum(x: f32, y: f32) -> f32 {
    if y > x || y.is_nan() {
        y
    } else {
        x
    }
}

/// `Minimum` likewise: NaN if either is NaN, else `y < x ? y : x`.
#[inline(always)]
pub fn minimum(x: f32, y: f32) -> f32 {
    if y < x || y.is_nan() {
        y
    } else {
        x
    }
}

/// A checked binary op on two operand shapes: the output shape and how to
/// fill it.
#[derive(Debug, Clone)]
pub struct BinaryPlan {
    op: BinaryOp,
    name: &'static str,
    a_shape: Dims,
    b_shape: Dims,
    broadcast: Broadcast,
}

impl BinaryPlan {
    /// Fails when the shapes do not broadcast.
    pub fn new(op: BinaryOp, a_shape: &[usize], b_shape: &[usize]) -> Result<Self, Error> {
        Self::named(op, op.op_name(), a_shape, b_shape)
    }

    /// As [`BinaryPlan::new`], with errors naming TensorFlow op `name`.
    pub fn named(op: BinaryOp, name: &'static str, a_shape: &[usize], b_shape: &[usize]) -> Result<Self, Error> {
        let broadcast = Broadcast::new(a_shape, b_shape).map_err(|e| Error::InvalidArgument(format!("{name}: {e}")))?;
        Ok(BinaryPlan { op, name, a_shape: Dims::from_slice(a_shape), b_shape: Dims::from_slice(b_shape), broadcast })
    }

    pub fn op(&self) -> BinaryOp {
        self.op
    }

    /// The shape to allocate for the output.
    pub fn output_shape(&self) -> &[usize] {
        self.broadcast.output_shape()
    }

    pub fn output_len(&self) -> usize {
        self.broadcast.output_len()
    }

    /// Computes `out = a (op) b` for an arithmetic op. The slices are
    /// row-major with the shapes the plan was made for; `out` may hold
    /// anything beforehand.
    pub fn run(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
        self.run_into(Operands::Fresh { x: a, y: b, out })
    }

    /// As [`BinaryPlan::run`], into a fresh output or over a forwarded operand.
    pub fn run_into(&self, operands: Operands<'_, f32>) -> Result<(), Error> {
        with_arith!(self.op, f => self.map_operands(operands, f), Err(self.wrong_kind("float32 arithmetic")))
    }

    /// Computes an integer op: `Add`/`Mul` wrap, `FloorMod` fails on a
    /// zero divisor (any zero in `b` is used when the output is non-empty).
    pub fn run_integer<T: Integer>(&self, a: &[T], b: &[T], out: &mut [T]) -> Result<(), Error> {
        self.run_integer_into(Operands::Fresh { x: a, y: b, out })
    }

    /// As [`BinaryPlan::run_integer`], into a fresh output or over a forwarded operand.
    pub fn run_integer_into<T: Integer>(&self, operands: Operands<'_, T>) -> Result<(), Error> {
        match self.op {
            BinaryOp::Add => self.map_operands(operands, T::wrapping_add),
            BinaryOp::Mul => self.map_operands(operands, T::wrapping_mul),
            BinaryOp::BitwiseAnd => self.map_operands(operands, |x, y| x & y),
            BinaryOp::FloorMod => {
                if self.output_len() > 0 && operands.y().contains(&T::ZERO) {
                    return Err(Error::InvalidArgument(format!("{}: Integer division by zero", self.name)));
                }
                self.map_operands(operands, T::floor_mod)
            }
            _ => Err(self.wrong_kind("integer")),
        }
    }

    /// `f` over the operands, wherever the output lives.
    fn map_operands<T, F>(&self, operands: Operands<'_, T>, f: F) -> Result<(), Error>
    where
        T: Copy + Send + Sync,
        F: Fn(T, T) -> T + Copy + Send + Sync,
    {
        match operands {
            Operands::Fresh { x, y, out } => self.map(x, y, out, f),
            Operands::IntoX { out, y } => self.map_in_place(Operand::X, out, y, f),
            Operands::IntoY { x, out } => self.map_in_place(Operand::Y, out, x, move |acc, x| f(x, acc)),
        }
    }

    /// `acc[i] = g(acc[i], other[..])` where `acc` is operand `forwarded`,
    /// which TensorFlow forwarded to the output: it has the output's
    /// elements, so each is read once, at its own index, just before it is
    /// overwritten. `g` takes the forwarded operand's element first.
    fn map_in_place<T, G>(&self, forwarded: Operand, acc: &mut [T], other: &[T], g: G) -> Result<(), Error>
    where
        T: Copy + Send + Sync,
        G: Fn(T, T) -> T + Copy + Send + Sync,
    {
        let (acc_shape, other_shape, other_name) = match forwarded {
            Operand::X => (&self.a_shape, &self.b_shape, "y"),
            Operand::Y => (&self.b_shape, &self.a_shape, "x"),
        };
        self.check_len("the output", acc.len(), self.output_shape())?;
        if element_count(acc_shape) != Some(self.output_len()) {
            return Err(Error::Internal(format!(
                "{}: operand {} was forwarded to the output {} it broadcasts to",
                self.name,
                ShapeDisplay(acc_shape),
                ShapeDisplay(self.output_shape())
            )));
        }
        self.check_len(other_name, other.len(), other_shape)?;
        fill_chunked(acc, |start, chunk| self.fill_range_in_place(forwarded, other, start, chunk, g));
        Ok(())
    }

    /// As [`BinaryPlan::fill_range`] over a forwarded operand: `acc` holds
    /// output (and operand) elements `start..start + acc.len()`.
    fn fill_range_in_place<T: Copy, G: Fn(T, T) -> T + Copy>(
        &self,
        forwarded: Operand,
        other: &[T],
        start: usize,
        acc: &mut [T],
        g: G,
    ) {
        if acc.is_empty() {
            return;
        }
        // The forwarded operand is laid out as the output, so a run's output
        // index is its index too: only the other operand's offset matters.
        let other_of = |a: usize, b: usize| match forwarded {
            Operand::X => b,
            Operand::Y => a,
        };
        if self.broadcast.is_single_run() {
            let (a_step, b_step) = self.broadcast.inner_steps();
            let step = other_of(a_step, b_step);
            combine_in_place(g, acc, operand(other, start * step, acc.len(), step), step);
            return;
        }
        self.broadcast.for_each_run(start, acc.len(), |run| {
            let step = other_of(run.a_step, run.b_step);
            let dst = &mut acc[run.out - start..run.out - start + run.len];
            combine_in_place(g, dst, operand(other, other_of(run.a, run.b), run.len, step), step);
        });
    }

    /// Computes a comparison op into bools.
    pub fn run_compare<T: Element + PartialOrd>(&self, a: &[T], b: &[T], out: &mut [TfBool]) -> Result<(), Error> {
        match self.op {
            BinaryOp::Equal => self.map(a, b, out, |x, y| TfBool((x == y) as u8)),
            BinaryOp::NotEqual => self.map(a, b, out, |x, y| TfBool((x != y) as u8)),
            BinaryOp::Less => self.map(a, b, out, |x, y| TfBool((x < y) as u8)),
            BinaryOp::LessEqual => self.map(a, b, out, |x, y| TfBool((x <= y) as u8)),
            BinaryOp::Greater => self.map(a, b, out, |x, y| TfBool((x > y) as u8)),
            BinaryOp::GreaterEqual => self.map(a, b, out, |x, y| TfBool((x >= y) as u8)),
            _ => Err(self.wrong_kind("comparison")),
        }
    }

    /// Computes `LogicalAnd` / `LogicalOr`.
    pub fn run_logical(&self, a: &[TfBool], b: &[TfBool], out: &mut [TfBool]) -> Result<(), Error> {
        match self.op {
            BinaryOp::LogicalAnd => self.map(a, b, out, |x, y| TfBool((x.get() & y.get()) as u8)),
            BinaryOp::LogicalOr => self.map(a, b, out, |x, y| TfBool((x.get() | y.get()) as u8)),
            _ => Err(self.wrong_kind("logical")),
        }
    }

    fn wrong_kind(&self, kind: &str) -> Error {
        Error::Internal(format!("{}: not a {kind} op", self.name))
    }

    /// `out[i] = f(a[..], b[..])` over the broadcast, after checking every
    /// length. Monomorphised per op so the inner loops vectorise.
    pub fn map<A, B, O, F>(&self, a: &[A], b: &[B], out: &mut [O], f: F) -> Result<(), Error>
    where
        A: Copy + Sync,
        B: Copy + Sync,
        O: Copy + Send,
        F: Fn(A, B) -> O + Copy + Send + Sync,
    {
        self.check_len("x", a.len(), &self.a_shape)?;
        self.check_len("y", b.len(), &self.b_shape)?;
        self.check_len("the output", out.len(), self.output_shape())?;
        fill_chunked(out, |start, chunk| self.fill_range(a, b, start, chunk, f));
        Ok(())
    }

    fn check_len(&self, what: &str, len: usize, shape: &[usize]) -> Result<(), Error> {
        check_len(self.name, what, len, shape)
    }

    /// Fills `out`, which holds output elements `start..start + out.len()`.
    fn fill_range<A: Copy, B: Copy, O: Copy, F: Fn(A, B) -> O + Copy>(
        &self,
        a: &[A],
        b: &[B],
        start: usize,
        out: &mut [O],
        f: F,
    ) {
        if out.is_empty() {
            return;
        }
        if self.broadcast.is_single_run() {
            // Fast paths: same shape (steps 1,1) or one single-element
            // operand (a step of 0); no odometer at all.
            let (a_step, b_step) = self.broadcast.inner_steps();
            combine(
                f,
                operand(a, start * a_step, out.len(), a_step),
                a_step,
                operand(b, start * b_step, out.len(), b_step),
                b_step,
                out,
            );
            return;
        }
        self.broadcast.for_each_run(start, out.len(), |run| {
            let dst = &mut out[run.out - start..run.out - start + run.len];
            combine(
                f,
                operand(a, run.a, run.len, run.a_step),
                run.a_step,
                operand(b, run.b, run.len, run.b_step),
                run.b_step,
                dst,
            );
        });
    }
}

/// Checks that a buffer has the elements its shape needs.
pub fn check_len(op: &str, what: &str, len: usize, shape: &[usize]) -> Result<(), Error> {
    if element_count(shape) == Some(len) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{op}: {what} has {len} elements but its shape {} needs {}",
            ShapeDisplay(shape),
            element_count(shape).map_or_else(|| "more than addressable".to_owned(), |n| n.to_string())
        )))
    }
}

/// The elements of one operand a run reads: `len` consecutive ones, or the
/// single repeated one when `step == 0`.
fn operand<T>(data: &[T], first: usize, len: usize, step: usize) -> &[T] {
    if step == 0 {
        &data[first..first + 1]
    } else {
        &data[first..first + len]
    }
}

/// `out[i] = f(a[i * a_step], b[i * b_step])` with steps 0 or 1, each case a
/// plain loop the compiler vectorises (in AVX2 lanes where the CPU has them).
#[inline(always)]
fn combine<A: Copy, B: Copy, O: Copy, F: Fn(A, B) -> O>(
    f: F,
    a: &[A],
    a_step: usize,
    b: &[B],
    b_step: usize,
    out: &mut [O],
) {
    in_wide_lanes(
        #[inline(always)]
        || match (a_step, b_step) {
            (0, 0) => out.fill(f(a[0], b[0])),
            (0, _) => {
                let x = a[0];
                for (o, &y) in out.iter_mut().zip(b) {
                    *o = f(x, y);
                }
            }
            (_, 0) => {
                let y = b[0];
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = f(x, y);
                }
            }
            _ => {
                for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                    *o = f(x, y);
                }
            }
        },
    )
}

/// `acc[i] = g(acc[i], other[i * step])` with a step of 0 or 1: the
/// in-place form of [`combine`].
#[inline(always)]
fn combine_in_place<T: Copy, G: Fn(T, T) -> T>(g: G, acc: &mut [T], other: &[T], step: usize) {
    in_wide_lanes(
        #[inline(always)]
        || match step {
            0 => {
                let y = other[0];
                for o in acc.iter_mut() {
                    *o = g(*o, y);
                }
            }
            _ => {
                for (o, &y) in acc.iter_mut().zip(other) {
                    *o = g(*o, y);
                }
            }
        },
    )
}

/// One of a binary op's two operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    X,
    Y,
}

/// A binary op's operands and output: three buffers, or two when
/// TensorFlow forwarded one operand's buffer to the output, which the op
/// then overwrites.
pub enum Operands<'a, T> {
    Fresh { x: &'a [T], y: &'a [T], out: &'a mut [T] },
    IntoX { out: &'a mut [T], y: &'a [T] },
    IntoY { x: &'a [T], out: &'a mut [T] },
}

impl<'a, T: Element> Operands<'a, T> {
    /// The operands of a kernel whose candidates were inputs 0 and 1, in
    /// that order.
    pub fn of(place: &'a mut OutputPlace) -> Result<Self, Error> {
        let OutputPlace { output, forwarded, inputs } = place;
        let out = output.data_mut()?;
        Ok(match (forwarded, inputs.as_slice()) {
            (None, [Some(x), Some(y)]) => Operands::Fresh { x: x.data()?, y: y.data()?, out },
            (Some(0), [None, Some(y)]) => Operands::IntoX { out, y: y.data()? },
            (Some(1), [Some(x), None]) => Operands::IntoY { x: x.data()?, out },
            _ => return Err(Error::Internal("a binary kernel's output place has no two operands".into())),
        })
    }

    /// The second operand's values (the output's, where it was forwarded).
    fn y(&self) -> &[T] {
        match self {
            Operands::Fresh { y, .. } | Operands::IntoX { y, .. } => y,
            Operands::IntoY { out, .. } => out,
        }
    }
}

// ------------------------------------------------------ Select, SelectV2

/// `SelectV2(condition, t, e)`: `condition ? t : e` elementwise, all three
/// broadcast together. float32, and the int32/int64 that Keras' `ops.take`
/// (an `Embedding`) selects to wrap negative indices.
#[derive(Debug)]
struct SelectV2Kernel;

impl Kernel for SelectV2Kernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "SelectV2";
        expect_inputs(OP, ctx, 3)?;
        let (c, t, e) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let plan = Broadcast3::new([c.shape(), t.shape(), e.shape()]).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{OP}: condition {}, then {}, and else {} must be broadcastable",
                ShapeDisplay(c.shape()),
                ShapeDisplay(t.shape()),
                ShapeDisplay(e.shape())
            ))
        })?;
        let mut out = ctx.allocate_output(0, &plan.output_shape)?;
        select_typed(OP, &plan, &c, &t, &e, &mut out)
    }
}

/// `Select(condition, t, e)`, the v1 op (`tf.where` in graphs of
/// `tf.nn.sigmoid_cross_entropy_with_logits`): no broadcasting, but three
/// forms, as TensorFlow's CPU kernel decides them: a scalar condition picks
/// all of `t` or all of `e`; a vector condition with a `t` of higher rank
/// picks whole rows (`condition[i]` for `t[i, ...]`); otherwise all three
/// have one shape. `t` and `e` always have the same shape.
#[derive(Debug)]
struct SelectKernel;

impl Kernel for SelectKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "Select";
        expect_inputs(OP, ctx, 3)?;
        let (c, t, e) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let condition_shape = select_condition_shape(c.shape(), t.shape(), e.shape())?;
        // Each form is a broadcast of the condition (reshaped) onto `t`.
        let plan = Broadcast3::new([&condition_shape, t.shape(), e.shape()])
            .ok_or_else(|| Error::Internal(format!("{OP}: checked shapes did not broadcast")))?;
        let mut out = ctx.allocate_output(0, t.shape())?;
        select_typed(OP, &plan, &c, &t, &e, &mut out)
    }
}

/// Checks `Select`'s shapes (of condition, then and else); the condition's
/// shape to broadcast onto `t` (a row condition `[n]` becomes `[n, 1, …, 1]`).
fn select_condition_shape(c: &[usize], t: &[usize], e: &[usize]) -> Result<Vec<usize>, Error> {
    // A scalar condition, or a vector one for a `t` that is not a vector.
    let mismatch = |a: usize, a_shape: &[usize], b: usize, b_shape: &[usize]| {
        Error::InvalidArgument(format!(
            "Select: input {a} {} and input {b} {} must have the same shape",
            ShapeDisplay(a_shape),
            ShapeDisplay(b_shape)
        ))
    };
    if c.is_empty() || (c.len() == 1 && t.len() != 1) {
        if t != e {
            return Err(mismatch(1, t, 2, e));
        }
        if c.is_empty() {
            return Ok(Vec::new());
        }
        let Some(&rows) = t.first() else {
            return Err(Error::InvalidArgument(format!(
                "Select: a vector condition needs a then of rank 1 or more, got shape {}",
                ShapeDisplay(t)
            )));
        };
        if c[0] != rows {
            return Err(Error::InvalidArgument(format!(
                "Select: a vector condition of {} elements for a then of {rows} rows (shape {})",
                c[0],
                ShapeDisplay(t)
            )));
        }
        let mut shape = vec![1; t.len()];
        shape[0] = rows;
        return Ok(shape);
    }
    if c != t {
        return Err(mismatch(0, c, 1, t));
    }
    if c != e {
        return Err(mismatch(0, c, 2, e));
    }
    Ok(c.to_vec())
}

/// [`select`] on the elements of `t`, as words of their width.
fn select_typed(
    op: &str,
    plan: &Broadcast3,
    c: &super::Tensor,
    t: &super::Tensor,
    e: &super::Tensor,
    out: &mut super::Tensor,
) -> Result<(), Error> {
    by_width!(t.dtype(), W => select(op, plan, c.data()?, t.words::<W>()?, e.words()?, out.words_mut()?))
}

/// A word [`select`] picks without a branch: a random condition
/// mispredicts every other branch, and the branch-free form vectorises.
/// Picking bits passes NaN payloads and -0.0 unchanged.
trait Pick: Copy + Send + Sync {
    fn pick(condition: TfBool, t: Self, e: Self) -> Self;
}

macro_rules! pick_by_mask {
    ($($word:ty),*) => {$(
        impl Pick for $word {
            #[inline(always)]
            fn pick(condition: TfBool, t: $word, e: $word) -> $word {
                let mask = <$word>::from(condition.get()).wrapping_neg();
                (t & mask) | (e & !mask)
            }
        }
    )*};
}
pick_by_mask!(u8, u16, u32, u64);

/// `out = c ? t : e` over a three-way broadcast.
fn select<T: Pick>(op: &str, plan: &Broadcast3, c: &[TfBool], t: &[T], e: &[T], out: &mut [T]) -> Result<(), Error> {
    for (what, len, shape) in
        [("condition", c.len(), &plan.shapes[0]), ("t", t.len(), &plan.shapes[1]), ("e", e.len(), &plan.shapes[2])]
    {
        check_len(op, what, len, shape)?;
    }
    check_len(op, "the output", out.len(), &plan.output_shape)?;
    fill_chunked(out, |start, chunk| {
        plan.for_each_run(start, chunk.len(), |out_at, [ci, ti, ei], [cs, ts, es], len| {
            let dst = &mut chunk[out_at - start..out_at - start + len];
            match (cs, ts, es) {
                (1, 1, 1) => {
                    for (((o, &k), &x), &y) in
                        dst.iter_mut().zip(&c[ci..ci + len]).zip(&t[ti..ti + len]).zip(&e[ei..ei + len])
                    {
                        *o = T::pick(k, x, y);
                    }
                }
                (0, _, _) => {
                    // One condition for the whole run: a copy (or fill).
                    let (src, index, step) = if c[ci].get() { (t, ti, ts) } else { (e, ei, es) };
                    if step == 0 {
                        dst.fill(src[index]);
                    } else {
                        dst.copy_from_slice(&src[index..index + len]);
                    }
                }
                _ => {
                    for (j, o) in dst.iter_mut().enumerate() {
                        *o = T::pick(c[ci + j], t[ti + j * ts], e[ei + j * es]);
                    }
                }
            }
        });
    });
    Ok(())
}

/// How three operand shapes broadcast onto one output, collapsed like
/// [`Broadcast`]: size-1 output dims dropped, neighbours with the same
/// repeat pattern merged.
#[derive(Debug, Clone)]
struct Broadcast3 {
    shapes: [Vec<usize>; 3],
    output_shape: Vec<usize>,
    output_len: usize,
    /// Collapsed dims, outermost first; never empty.
    dims: Vec<usize>,
    /// Per operand, its element stride along each collapsed dim (0 where it
    /// repeats).
    strides: [Vec<usize>; 3],
}

impl Broadcast3 {
    /// `None` when the shapes do not broadcast (or the output is too large).
    fn new(shapes: [&[usize]; 3]) -> Option<Self> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        let dim_of = |shape: &[usize], i: usize| if i + shape.len() < rank { 1 } else { shape[i + shape.len() - rank] };
        let output_shape = shapes.iter().try_fold(Dims::new(), |shape, s| broadcast_shape(&shape, s))?.to_vec();
        let output_len = element_count(&output_shape)?;
        let mut dims: Vec<usize> = Vec::new();
        let mut repeats: Vec<[bool; 3]> = Vec::new();
        for (i, &dim) in output_shape.iter().enumerate() {
            if dim == 1 {
                continue;
            }
            let pattern = shapes.map(|s| dim_of(s, i) == 1);
            match (dims.last_mut(), repeats.last()) {
                (Some(last), Some(&previous)) if previous == pattern => *last *= dim,
                _ => {
                    dims.push(dim);
                    repeats.push(pattern);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            repeats.push([false; 3]);
        }
        let strides = [0, 1, 2].map(|k| {
            let mut strides = vec![0; dims.len()];
            let mut stride = 1;
            for i in (0..dims.len()).rev() {
                if !repeats[i][k] {
                    strides[i] = stride;
                    stride *= dims[i];
                }
            }
            strides
        });
        Some(Broadcast3 { shapes: shapes.map(<[usize]>::to_vec), output_shape, output_len, dims, strides })
    }

    /// Calls `visit(out, offsets, steps, len)` for consecutive runs covering
    /// output elements `start..start + len`; a run never crosses the end of
    /// the innermost collapsed dim, and operand `k` reads elements
    /// `offsets[k] + j * steps[k]` for `j < len`.
    fn for_each_run(&self, start: usize, len: usize, mut visit: impl FnMut(usize, [usize; 3], [usize; 3], usize)) {
        let end = start.saturating_add(len).min(self.output_len);
        if start >= end {
            return;
        }
        let rank = self.dims.len();
        let inner = rank - 1;
        let mut index = vec![0usize; rank];
        let mut rest = start;
        for i in (0..rank).rev() {
            index[i] = rest % self.dims[i];
            rest /= self.dims[i];
        }
        let mut offsets = [0, 1, 2].map(|k| (0..rank).map(|i| index[i] * self.strides[k][i]).sum::<usize>());
        let steps = [0, 1, 2].map(|k| self.strides[k][inner]);
        let mut out = start;
        while out < end {
            let len = (self.dims[inner] - index[inner]).min(end - out);
            visit(out, offsets, steps, len);
            out += len;
            if out == end {
                break;
            }
            index[inner] += len;
            for (offset, step) in offsets.iter_mut().zip(steps) {
                *offset += len * step;
            }
            let mut i = inner;
            while index[i] == self.dims[i] && i > 0 {
                for (offset, strides) in offsets.iter_mut().zip(&self.strides) {
                    *offset = *offset - self.dims[i] * strides[i] + strides[i - 1];
                }
                index[i] = 0;
                i -= 1;
                index[i] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalContext, Tensor};

    /// Deterministic, varied values (no two neighbours alike).
    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    /// Values with repeats across operands (so `Equal` is sometimes true),
    /// zeros, and the odd NaN.
    fn coarse_values(len: usize, seed: u32) -> Vec<f32> {
        values(len, seed)
            .into_iter()
            .enumerate()
            .map(|(i, v)| if i % 17 == 5 { f32::NAN } else { (v * 2.0).round() / 2.0 })
            .collect()
    }

    /// Reference broadcast: index every element from its full multi-index.
    fn reference<A: Copy, B: Copy, O>(
        a: &[A],
        a_shape: &[usize],
        b: &[B],
        b_shape: &[usize],
        f: impl Fn(A, B) -> O,
    ) -> (Vec<usize>, Vec<O>) {
        let rank = a_shape.len().max(b_shape.len());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
        let (pa, pb) = (pad(a_shape), pad(b_shape));
        let out_shape: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| if x == 1 { y } else { x }).collect();
        let len: usize = out_shape.iter().product();
        let mut out = Vec::with_capacity(len);
        for flat in 0..len {
            let index = unravel(flat, &out_shape);
            out.push(f(a[offset(&pa, &index)], b[offset(&pb, &index)]));
        }
        (out_shape, out)
    }

    fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
        let mut index = vec![0; shape.len()];
        for i in (0..shape.len()).rev() {
            index[i] = flat % shape[i];
            flat /= shape[i];
        }
        index
    }

    /// Offset in a (rank-padded) operand of an output multi-index.
    fn offset(shape: &[usize], index: &[usize]) -> usize {
        shape.iter().zip(index).fold(0, |acc, (&dim, &i)| acc * dim + if dim == 1 { 0 } else { i })
    }

    fn reference_arith(op: BinaryOp, x: f32, y: f32) -> f32 {
        match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::RealDiv => x / y,
            BinaryOp::DivNoNan => {
                if y == 0.0 {
                    0.0
                } else {
                    x / y
                }
            }
            BinaryOp::Maximum => {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else if x < y {
                    y
                } else {
                    x
                }
            }
            BinaryOp::Minimum => {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else if y < x {
                    y
                } else {
                    x
                }
            }
            BinaryOp::Pow => f64::from(x).powf(f64::from(y)) as f32,
            BinaryOp::SquaredDifference => {
                let d = x - y;
                d * d
            }
            _ => unreachable!(),
        }
    }

    fn same(x: f32, y: f32, op: BinaryOp) -> bool {
        if op == BinaryOp::Pow {
            // powf is within an ulp or so of the correctly rounded result.
            (x.is_nan() && y.is_nan()) || x == y || ((x - y) / y).abs() < 1e-6
        } else {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
    }

    fn check_arith(op: BinaryOp, a_shape: &[usize], b_shape: &[usize]) {
        let mut a = coarse_values(a_shape.iter().product(), 1);
        let b = coarse_values(b_shape.iter().product(), 2);
        if op == BinaryOp::Pow {
            // Positive bases, so results are finite and comparable.
            a.iter_mut().for_each(|x| *x = x.abs() + 0.25);
        }
        let plan = BinaryPlan::new(op, a_shape, b_shape).unwrap();
        let (expected_shape, expected) = reference(&a, a_shape, &b, b_shape, |x, y| reference_arith(op, x, y));
        assert_eq!(plan.output_shape(), expected_shape.as_slice(), "{op:?} {a_shape:?} {b_shape:?}");
        let mut out = vec![f32::from_bits(0x7fbf_ffff); plan.output_len()];
        plan.run(&a, &b, &mut out).unwrap();
        for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
            assert!(same(got, want, op), "{op:?} {a_shape:?} {b_shape:?} @{i}: {got} vs {want}");
        }
        // The kernel, through its op context: computing over whichever
        // operand the context forwards (LocalContext forwards the first that
        // has the output's elements, as TensorFlow does when nothing else
        // holds it), and into a fresh output.
        let kernel = BinaryKernel { op, name: op.op_name() };
        let inputs =
            || vec![Tensor::from_vec(a_shape, a.clone()).unwrap(), Tensor::from_vec(b_shape, b.clone()).unwrap()];
        for forwarding in [true, false] {
            let ctx = LocalContext::new(inputs(), &[DType::F32]);
            if forwarding {
                kernel.compute(&ctx).unwrap();
            } else {
                kernel.compute(&NoForward(&ctx)).unwrap();
            }
            let out = ctx.output(0).unwrap();
            assert_eq!(out.shape(), expected_shape.as_slice(), "kernel {op:?} {a_shape:?} {b_shape:?}");
            for (i, (&got, &want)) in out.data::<f32>().unwrap().iter().zip(&expected).enumerate() {
                let how = if forwarding { "forwarding" } else { "fresh output" };
                assert!(same(got, want, op), "kernel ({how}) {op:?} {a_shape:?} {b_shape:?} @{i}: {got} vs {want}");
            }
        }
    }

    /// A context that never forwards (the trait's default), around another.
    struct NoForward<'a>(&'a LocalContext);

    impl OpContext for NoForward<'_> {
        fn num_inputs(&self) -> usize {
            self.0.num_inputs()
        }
        fn num_outputs(&self) -> usize {
            self.0.num_outputs()
        }
        fn input(&self, index: usize) -> Result<Tensor, Error> {
            self.0.input(index)
        }
        fn output_dtype(&self, index: usize) -> Result<DType, Error> {
            self.0.output_dtype(index)
        }
        fn allocate_output(&self, index: usize, shape: &[usize]) -> Result<Tensor, Error> {
            self.0.allocate_output(index, shape)
        }
        fn forward_input(&self, input: usize, output: usize) -> Result<(), Error> {
            self.0.forward_input(input, output)
        }
    }

    #[test]
    fn the_operand_with_the_outputs_elements_is_forwarded() {
        let place = |a: &[usize], b: &[usize], out: &[usize]| {
            let ctx = LocalContext::new(vec![], &[DType::F32]);
            let candidates =
                vec![(0, Tensor::zeros(DType::F32, a).unwrap()), (1, Tensor::zeros(DType::F32, b).unwrap())];
            let place = ctx.forward_or_allocate_output(0, out, candidates).unwrap();
            (place.forwarded, place.inputs.iter().map(Option::is_some).collect::<Vec<_>>())
        };
        assert_eq!(place(&[7, 13], &[7, 13], &[7, 13]), (Some(0), vec![false, true]));
        assert_eq!(place(&[], &[2, 3], &[2, 3]), (Some(1), vec![true, false]));
        assert_eq!(place(&[1, 13], &[7, 1], &[7, 13]), (None, vec![true, true]));
        // Same element count, other dtype: not forwarded.
        let ctx = LocalContext::new(vec![], &[DType::F32]);
        let ints = vec![(0, Tensor::zeros(DType::I32, &[4]).unwrap())];
        assert_eq!(ctx.forward_or_allocate_output(0, &[4], ints).unwrap().forwarded, None);
    }

    #[test]
    fn integer_ops_compute_over_a_forwarded_operand() {
        // FloorMod over a forwarded divisor still checks it for zeros first.
        let kernel = IntegerKernel { op: BinaryOp::FloorMod, name: "FloorMod" };
        let inputs = vec![
            Tensor::from_vec::<i64>(&[], vec![7]).unwrap(),
            Tensor::from_vec::<i64>(&[3], vec![3, -2, 0]).unwrap(),
        ];
        let err = LocalContext::run(&kernel, inputs, &[DType::I64]).unwrap_err();
        assert!(err.to_string().contains("Integer division by zero"), "{err}");
        let inputs = vec![
            Tensor::from_vec::<i64>(&[], vec![7]).unwrap(),
            Tensor::from_vec::<i64>(&[3], vec![3, -2, 5]).unwrap(),
        ];
        let out = LocalContext::run(&kernel, inputs, &[DType::I64]).unwrap();
        assert_eq!(out[0].to_vec::<i64>().unwrap(), vec![1, -1, 2]);
        let kernel = IntegerKernel { op: BinaryOp::Add, name: "AddV2" };
        let inputs = vec![
            Tensor::from_vec::<i64>(&[2], vec![i64::MAX, 1]).unwrap(),
            Tensor::from_vec::<i64>(&[], vec![1]).unwrap(),
        ];
        let out = LocalContext::run(&kernel, inputs, &[DType::I64]).unwrap();
        assert_eq!(out[0].to_vec::<i64>().unwrap(), vec![i64::MIN, 2]);
    }

    const SHAPE_PAIRS: &[(&[usize], &[usize])] = &[
        (&[], &[]),
        (&[1], &[1]),
        (&[1, 1], &[1, 1]),
        (&[7, 13], &[7, 13]),
        (&[3, 1, 5], &[4, 1]),
        (&[4, 1], &[3, 1, 5]),
        (&[], &[2, 3]),
        (&[2, 3], &[]),
        (&[1, 1], &[2, 3]),
        (&[0, 3], &[1, 3]),
        (&[0], &[]),
        (&[7, 13], &[13]),
        (&[7, 1], &[1, 13]),
        (&[2, 1, 3, 1], &[1, 4, 1, 5]),
        (&[1], &[4, 1]),
        (&[0, 2], &[0, 2]),
    ];

    #[test]
    fn arithmetic_matches_reference_on_odd_shapes() {
        for op in BinaryOp::ARITHMETIC {
            for &(a, b) in SHAPE_PAIRS {
                check_arith(op, a, b);
            }
        }
    }

    #[test]
    fn large_outputs_split_across_the_pool() {
        // Above PARALLEL_MIN_ELEMENTS, with chunk edges falling mid-row.
        for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::DivNoNan] {
            check_arith(op, &[257, 131], &[257, 131]);
            check_arith(op, &[257, 131], &[131]);
            check_arith(op, &[], &[257, 131]);
            check_arith(op, &[61, 1, 17], &[1, 37, 17]);
            check_arith(op, &[301, 1], &[1, 263]);
        }
    }

    #[test]
    fn edge_values_follow_tensorflow() {
        let plan = |op| BinaryPlan::new(op, &[4], &[4]).unwrap();
        let run = |op, a: [f32; 4], b: [f32; 4]| {
            let mut out = [0.0; 4];
            plan(op).run(&a, &b, &mut out).unwrap();
            out
        };
        let nan = f32::NAN;
        let max = run(BinaryOp::Maximum, [nan, 1.0, -0.0, 0.0], [1.0, nan, 0.0, -0.0]);
        assert!(max[0].is_nan() && max[1].is_nan());
        assert_eq!((max[2].to_bits(), max[3].to_bits()), ((-0.0f32).to_bits(), 0.0f32.to_bits()));
        let min = run(BinaryOp::Minimum, [nan, 1.0, -0.0, 0.0], [1.0, nan, 0.0, -0.0]);
        assert!(min[0].is_nan() && min[1].is_nan());
        assert_eq!((min[2].to_bits(), min[3].to_bits()), ((-0.0f32).to_bits(), 0.0f32.to_bits()));
        assert_eq!(
            run(BinaryOp::DivNoNan, [1.0, nan, 0.0, f32::INFINITY], [0.0, 0.0, 0.0, 2.0]),
            [0.0, 0.0, 0.0, f32::INFINITY]
        );
        let pow = run(BinaryOp::Pow, [-2.0, 0.0, nan, 1.0], [3.0, -1.0, 0.0, nan]);
        assert_eq!(pow, [-8.0, f32::INFINITY, 1.0, 1.0]);
    }

    /// Integers in [-12, 12] (zero-free for divisors), plus extremes that overflow.
    fn int_values(len: usize, seed: u32, nonzero: bool) -> Vec<i64> {
        values(len, seed)
            .into_iter()
            .enumerate()
            .map(|(i, v)| match i % 11 {
                3 => i64::MAX,
                7 => i64::MIN,
                _ => {
                    let v = (v * 6.0).round() as i64;
                    if nonzero && v == 0 {
                        5
                    } else {
                        v
                    }
                }
            })
            .collect()
    }

    fn floor_mod_reference(x: i64, y: i64) -> i64 {
        // Euclid's remainder is non-negative; shift it into the divisor's sign.
        let r = (i128::from(x)).rem_euclid(i128::from(y));
        (if y < 0 && r != 0 { r + i128::from(y) } else { r }) as i64
    }

    #[test]
    fn integer_ops_match_reference_on_odd_shapes() {
        type Reference = fn(i64, i64) -> i64;
        let ops: [(BinaryOp, Reference); 4] = [
            (BinaryOp::Add, |x, y| (i128::from(x) + i128::from(y)) as i64),
            (BinaryOp::Mul, |x, y| (i128::from(x) * i128::from(y)) as i64),
            (BinaryOp::FloorMod, floor_mod_reference),
            (BinaryOp::BitwiseAnd, |x, y| x & y),
        ];
        for (op, f) in ops {
            for &(a_shape, b_shape) in SHAPE_PAIRS.iter().chain([(&[257, 131][..], &[131][..])].iter()) {
                let a = int_values(a_shape.iter().product(), 11, false);
                let b = int_values(b_shape.iter().product(), 12, true);
                let (shape, expected) = reference(&a, a_shape, &b, b_shape, f);
                let kernel = IntegerKernel { op, name: op.op_name() };
                let inputs =
                    vec![Tensor::from_vec(a_shape, a.clone()).unwrap(), Tensor::from_vec(b_shape, b.clone()).unwrap()];
                let out = LocalContext::run(&kernel, inputs, &[DType::I64]).unwrap();
                assert_eq!(out[0].shape(), shape.as_slice(), "{op:?} {a_shape:?} {b_shape:?}");
                assert_eq!(out[0].to_vec::<i64>().unwrap(), expected, "{op:?} {a_shape:?} {b_shape:?}");
                // The same op on int32 (the low halves; wrapping keeps them consistent).
                let (a32, b32): (Vec<i32>, Vec<i32>) = (
                    a.iter().map(|&v| v as i32).collect(),
                    b.iter().map(|&v| if v as i32 == 0 { 3 } else { v as i32 }).collect(),
                );
                let (_, expected32) =
                    reference(&a32, a_shape, &b32, b_shape, |x: i32, y: i32| f(i64::from(x), i64::from(y)));
                let inputs = vec![Tensor::from_vec(a_shape, a32).unwrap(), Tensor::from_vec(b_shape, b32).unwrap()];
                let out = LocalContext::run(&kernel, inputs, &[DType::I32]).unwrap();
                let expected32: Vec<i32> = expected32.iter().map(|&v| v as i32).collect();
                assert_eq!(out[0].to_vec::<i32>().unwrap(), expected32, "int32 {op:?} {a_shape:?} {b_shape:?}");
            }
        }
    }

    #[test]
    fn floor_mod_signs_and_division_by_zero() {
        let kernel = IntegerKernel { op: BinaryOp::FloorMod, name: "FloorMod" };
        let run = |a: Vec<i64>, b: Vec<i64>| {
            let inputs = vec![Tensor::from_vec(&[a.len()], a).unwrap(), Tensor::from_vec(&[b.len()], b).unwrap()];
            LocalContext::run(&kernel, inputs, &[DType::I64])
        };
        let got = run(vec![7, -7, 7, -7, 6, i64::MIN, i64::MIN], vec![3, 3, -3, -3, -3, -1, 2_147_483_646]).unwrap();
        assert_eq!(got[0].to_vec::<i64>().unwrap(), [1, 2, -2, -1, 0, 0, floor_mod_reference(i64::MIN, 2_147_483_646)]);
        let error = run(vec![1, 2], vec![3, 0]).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)));
        assert_eq!(error.to_string(), "tfwasm: FloorMod: Integer division by zero");
        // An empty output reads no divisor.
        assert!(run(vec![], vec![0]).is_ok());
    }

    #[test]
    fn comparisons_match_reference() {
        for op in BinaryOp::COMPARISONS {
            for &(a_shape, b_shape) in SHAPE_PAIRS {
                let a = coarse_values(a_shape.iter().product(), 3);
                let b = coarse_values(b_shape.iter().product(), 4);
                let f = |x: f32, y: f32| match op {
                    BinaryOp::Equal => x == y,
                    BinaryOp::NotEqual => x != y,
                    BinaryOp::Less => x < y,
                    BinaryOp::LessEqual => x <= y,
                    BinaryOp::Greater => x > y,
                    _ => x >= y,
                };
                let (shape, expected) = reference(&a, a_shape, &b, b_shape, f);
                let kernel = CompareKernel { op, name: op.op_name(), incompatible_shape_error: true };
                let inputs =
                    vec![Tensor::from_vec(a_shape, a.clone()).unwrap(), Tensor::from_vec(b_shape, b.clone()).unwrap()];
                let out = LocalContext::run(&kernel, inputs, &[DType::Bool]).unwrap();
                assert_eq!(out[0].shape(), shape.as_slice());
                let got: Vec<bool> = out[0].to_vec::<TfBool>().unwrap().iter().map(|v| v.get()).collect();
                assert_eq!(got, expected, "{op:?} {a_shape:?} {b_shape:?}");
            }
        }
    }

    #[test]
    fn int64_equality_and_incompatible_shapes() {
        let kernel = CompareKernel { op: BinaryOp::Equal, name: "Equal", incompatible_shape_error: true };
        let a = Tensor::from_vec(&[2, 3], vec![1i64 << 40, 2, 3, 4, 5, -6]).unwrap();
        let b = Tensor::from_vec(&[3], vec![1i64 << 40, 0, 3]).unwrap();
        let out = LocalContext::run(&kernel, vec![a, b], &[DType::Bool]).unwrap();
        let got: Vec<u8> = out[0].to_vec::<TfBool>().unwrap().iter().map(|v| v.0).collect();
        assert_eq!(got, [1, 0, 1, 0, 0, 0]);

        let mismatched =
            || vec![Tensor::from_vec(&[2], vec![1.0f32; 2]).unwrap(), Tensor::from_vec(&[3], vec![1.0f32; 3]).unwrap()];
        let error = LocalContext::run(&kernel, mismatched(), &[DType::Bool]).unwrap_err();
        assert_eq!(error.to_string(), "tfwasm: Equal: incompatible broadcast shapes [2] and [3]");
        for (op, expected) in [(BinaryOp::Equal, 0), (BinaryOp::NotEqual, 1)] {
            let lenient = CompareKernel { op, name: op.op_name(), incompatible_shape_error: false };
            let out = LocalContext::run(&lenient, mismatched(), &[DType::Bool]).unwrap();
            assert_eq!(out[0].shape(), &[] as &[usize]);
            assert_eq!(out[0].to_vec::<TfBool>().unwrap(), [TfBool(expected)]);
        }
    }

    #[test]
    fn logical_ops_broadcast() {
        for op in [BinaryOp::LogicalAnd, BinaryOp::LogicalOr] {
            for &(a_shape, b_shape) in SHAPE_PAIRS {
                let a: Vec<TfBool> =
                    values(a_shape.iter().product(), 5).iter().map(|&v| TfBool::from(v > 0.0)).collect();
                let b: Vec<TfBool> =
                    values(b_shape.iter().product(), 6).iter().map(|&v| TfBool::from(v > 0.0)).collect();
                let (shape, expected) = reference(&a, a_shape, &b, b_shape, |x: TfBool, y: TfBool| {
                    if op == BinaryOp::LogicalAnd {
                        x.get() && y.get()
                    } else {
                        x.get() || y.get()
                    }
                });
                let inputs = vec![Tensor::from_vec(a_shape, a).unwrap(), Tensor::from_vec(b_shape, b).unwrap()];
                let out = LocalContext::run(&LogicalKernel { op }, inputs, &[DType::Bool]).unwrap();
                assert_eq!(out[0].shape(), shape.as_slice());
                let got: Vec<bool> = out[0].to_vec::<TfBool>().unwrap().iter().map(|v| v.get()).collect();
                assert_eq!(got, expected, "{op:?} {a_shape:?} {b_shape:?}");
            }
        }
    }

    /// `c ? t : e` over the three-way broadcast, from full multi-indices.
    fn select_reference<T: Copy>(
        (c, c_shape): (&[TfBool], &[usize]),
        (t, t_shape): (&[T], &[usize]),
        (e, e_shape): (&[T], &[usize]),
    ) -> (Vec<usize>, Vec<T>) {
        let rank = c_shape.len().max(t_shape.len()).max(e_shape.len());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
        let (pc, pt, pe) = (pad(c_shape), pad(t_shape), pad(e_shape));
        let out_shape: Vec<usize> =
            (0..rank).map(|i| pc[i].max(pt[i]).max(pe[i]) * (pc[i].min(pt[i]).min(pe[i]) > 0) as usize).collect();
        let len: usize = out_shape.iter().product();
        let expected = (0..len)
            .map(|flat| {
                let index = unravel(flat, &out_shape);
                if c[offset(&pc, &index)].get() {
                    t[offset(&pt, &index)]
                } else {
                    e[offset(&pe, &index)]
                }
            })
            .collect();
        (out_shape, expected)
    }

    fn conditions(len: usize, seed: u32) -> Vec<TfBool> {
        values(len, seed).iter().map(|&v| TfBool::from(v > 0.3)).collect()
    }

    fn check_select(c_shape: &[usize], t_shape: &[usize], e_shape: &[usize]) {
        let c = conditions(c_shape.iter().product(), 7);
        let t = values(t_shape.iter().product(), 8);
        let e = values(e_shape.iter().product(), 9);
        let (out_shape, expected) = select_reference((&c, c_shape), (&t, t_shape), (&e, e_shape));
        let inputs = vec![
            Tensor::from_vec(c_shape, c).unwrap(),
            Tensor::from_vec(t_shape, t).unwrap(),
            Tensor::from_vec(e_shape, e).unwrap(),
        ];
        let out = LocalContext::run(&SelectV2Kernel, inputs, &[DType::F32]).unwrap();
        assert_eq!(out[0].shape(), out_shape.as_slice(), "{c_shape:?} {t_shape:?} {e_shape:?}");
        assert_eq!(out[0].to_vec::<f32>().unwrap(), expected, "{c_shape:?} {t_shape:?} {e_shape:?}");
    }

    #[test]
    fn select_v2_broadcasts_three_ways() {
        let cases: &[[&[usize]; 3]] = &[
            [&[], &[], &[]],
            [&[7, 13], &[7, 13], &[7, 13]],
            [&[7, 1], &[1, 13], &[]],
            [&[2], &[3, 1], &[]],
            [&[], &[4, 5], &[4, 5]],
            [&[3, 1, 5], &[4, 1], &[1, 4, 5]],
            [&[0, 3], &[1, 3], &[]],
            [&[2, 1, 3, 1], &[1, 4, 1, 5], &[2, 4, 3, 5]],
            [&[1, 1], &[1, 1], &[1]],
            [&[257, 131], &[131], &[257, 1]],
            [&[257, 1], &[257, 131], &[]],
            [&[61, 1, 17], &[1, 37, 17], &[61, 37, 1]],
        ];
        for &[c, t, e] in cases {
            check_select(c, t, e);
        }
    }

    #[test]
    fn select_picks_bits_and_reads_any_nonzero_byte_as_true() {
        // NaN payloads and signed zeros pass unchanged; a condition byte
        // other than 0 or 1 is true, as `TfBool::get` reads it.
        let t = [f32::from_bits(0x7fc0_1234), -0.0, 1.5, f32::NEG_INFINITY, 3.0];
        let e = [0.0, f32::from_bits(0xffc0_0001), -2.5, 7.0, f32::MIN_POSITIVE / 4.0];
        let c = [TfBool(1), TfBool(0), TfBool(2), TfBool(0), TfBool(255)];
        let inputs = vec![
            Tensor::from_vec(&[5], c.to_vec()).unwrap(),
            Tensor::from_vec(&[5], t.to_vec()).unwrap(),
            Tensor::from_vec(&[5], e.to_vec()).unwrap(),
        ];
        let out = LocalContext::run(&SelectV2Kernel, inputs, &[DType::F32]).unwrap();
        let bits: Vec<u32> = out[0].to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, [t[0].to_bits(), e[1].to_bits(), t[2].to_bits(), e[3].to_bits(), t[4].to_bits()]);
        for (t, e) in [(u32::MAX, 1), (0, u32::MAX), (0x8000_0000, 0x7fff_ffff)] {
            assert_eq!((u32::pick(TfBool(1), t, e), u32::pick(TfBool(0), t, e)), (t, e));
        }
        for (t, e) in [(u64::MAX, 1), (1 << 63, 0)] {
            assert_eq!((u64::pick(TfBool(3), t, e), u64::pick(TfBool(0), t, e)), (t, e));
        }
        assert_eq!((u8::pick(TfBool(1), 1, 0), u8::pick(TfBool(0), 1, 0)), (1, 0));
        assert_eq!((u16::pick(TfBool(7), 0x3c00, 0x8000), u16::pick(TfBool(0), 0x3c00, 0x8000)), (0x3c00, 0x8000));
    }

    #[test]
    fn select_v2_rejects_incompatible_shapes() {
        let inputs = vec![
            Tensor::from_vec(&[2, 3], vec![TfBool(1); 6]).unwrap(),
            Tensor::from_vec(&[4], vec![1.0f32; 4]).unwrap(),
            Tensor::from_vec(&[], vec![1.0f32]).unwrap(),
        ];
        let error = LocalContext::run(&SelectV2Kernel, inputs, &[DType::F32]).unwrap_err();
        assert_eq!(error.to_string(), "tfwasm: SelectV2: condition [2,3], then [4], and else [] must be broadcastable");
    }

    #[test]
    fn select_v2_on_integers() {
        fn check<T: Element + PartialEq>(c_shape: &[usize], t_shape: &[usize], e_shape: &[usize], of: fn(f32) -> T) {
            let c = conditions(c_shape.iter().product(), 3);
            let t: Vec<T> = values(t_shape.iter().product(), 4).into_iter().map(of).collect();
            let e: Vec<T> = values(e_shape.iter().product(), 5).into_iter().map(of).collect();
            let (out_shape, expected) = select_reference((&c, c_shape), (&t, t_shape), (&e, e_shape));
            let inputs = vec![
                Tensor::from_vec(c_shape, c).unwrap(),
                Tensor::from_vec(t_shape, t).unwrap(),
                Tensor::from_vec(e_shape, e).unwrap(),
            ];
            let out = LocalContext::run(&SelectV2Kernel, inputs, &[T::DTYPE]).unwrap();
            assert_eq!(out[0].shape(), out_shape.as_slice(), "{c_shape:?} {t_shape:?} {e_shape:?}");
            assert!(out[0].to_vec::<T>().unwrap() == expected, "{:?} {c_shape:?} {t_shape:?} {e_shape:?}", T::DTYPE);
        }
        let cases: &[[&[usize]; 3]] = &[
            [&[], &[], &[]],
            [&[0, 3], &[1, 3], &[]],
            [&[1, 1], &[1, 1], &[1]],
            [&[7, 13], &[7, 13], &[]],
            [&[7, 1], &[1, 13], &[7, 13]],
            [&[257, 131], &[131], &[257, 1]],
        ];
        for &[c, t, e] in cases {
            // Keras' ops.take: where(i < 0, i + n, i), values beyond 32 bits for int64.
            check(c, t, e, |v| (v * 1000.0) as i32);
            check(c, t, e, |v| (v as i64) << 40 | 7);
        }
    }

    /// `Select` against its definition: `c[i] ? t[i] : e[i]` with `c`
    /// indexed by element, by row or not at all.
    fn check_v1_select(c_shape: &[usize], shape: &[usize]) {
        let len: usize = shape.iter().product();
        let c = conditions(c_shape.iter().product(), 11);
        let (t, e) = (values(len, 12), values(len, 13));
        let rows = shape.first().copied().unwrap_or(1);
        let per_row = len.checked_div(rows).unwrap_or(0);
        let expected: Vec<f32> = (0..len)
            .map(|i| {
                let k = match c_shape.len() {
                    0 => 0,
                    1 if shape.len() != 1 => i / per_row,
                    _ => i,
                };
                if c[k].get() {
                    t[i]
                } else {
                    e[i]
                }
            })
            .collect();
        let inputs = vec![
            Tensor::from_vec(c_shape, c).unwrap(),
            Tensor::from_vec(shape, t).unwrap(),
            Tensor::from_vec(shape, e).unwrap(),
        ];
        let out = LocalContext::run(&SelectKernel, inputs, &[DType::F32]).unwrap();
        assert_eq!(out[0].shape(), shape, "{c_shape:?} {shape:?}");
        assert_eq!(out[0].to_vec::<f32>().unwrap(), expected, "{c_shape:?} {shape:?}");
    }

    #[test]
    fn select_picks_elements_rows_or_everything() {
        // Same shape.
        for shape in [&[][..], &[0][..], &[1, 1], &[7], &[7, 13], &[0, 5], &[3, 5, 2], &[257, 131]] {
            check_v1_select(shape, shape);
        }
        // A vector condition picks rows of a matrix or higher.
        for shape in [&[1, 1][..], &[7, 13], &[2, 3, 5], &[0, 4], &[3, 0], &[5, 1, 1], &[257, 131], &[3, 40_000]] {
            check_v1_select(&shape[..1], shape);
        }
        // A scalar condition picks one operand whole.
        for shape in [&[][..], &[0, 3], &[1, 1], &[7, 13], &[257, 131]] {
            check_v1_select(&[], shape);
        }
    }

    #[test]
    fn select_rejects_what_the_cpu_kernel_rejects() {
        let run = |c: &[usize], t: &[usize], e: &[usize]| {
            let count = |s: &[usize]| s.iter().product::<usize>();
            let inputs = vec![
                Tensor::from_vec(c, vec![TfBool(1); count(c)]).unwrap(),
                Tensor::from_vec(t, vec![1.0f32; count(t)]).unwrap(),
                Tensor::from_vec(e, vec![2.0f32; count(e)]).unwrap(),
            ];
            LocalContext::run(&SelectKernel, inputs, &[DType::F32]).map(|_| ()).unwrap_err().to_string()
        };
        assert_eq!(
            run(&[3], &[2, 3], &[2, 3]),
            "tfwasm: Select: a vector condition of 3 elements for a then of 2 rows (shape [2,3])"
        );
        assert_eq!(
            run(&[2], &[2, 3], &[1, 3]),
            "tfwasm: Select: input 1 [2,3] and input 2 [1,3] must have the same shape"
        );
        assert_eq!(run(&[], &[2, 3], &[3]), "tfwasm: Select: input 1 [2,3] and input 2 [3] must have the same shape");
        assert_eq!(
            run(&[1], &[], &[]),
            "tfwasm: Select: a vector condition needs a then of rank 1 or more, got shape []"
        );
        // No broadcasting otherwise, not even of size-1 dimensions.
        assert_eq!(
            run(&[2, 1], &[2, 3], &[2, 3]),
            "tfwasm: Select: input 0 [2,1] and input 1 [2,3] must have the same shape"
        );
        assert_eq!(
            run(&[2, 3], &[2, 3], &[1, 3]),
            "tfwasm: Select: input 0 [2,3] and input 2 [1,3] must have the same shape"
        );
        assert_eq!(run(&[2], &[3], &[3]), "tfwasm: Select: input 0 [2] and input 1 [3] must have the same shape");
    }

    #[test]
    fn incompatible_shapes_fail_with_the_op_name() {
        let error = BinaryPlan::new(BinaryOp::Add, &[2, 3], &[4]).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)));
        assert_eq!(error.to_string(), "tfwasm: AddV2: incompatible broadcast shapes [2,3] and [4]");
        assert!(BinaryPlan::new(BinaryOp::Mul, &[0], &[2]).is_err());
        let error = BinaryPlan::named(BinaryOp::Sub, "Sub", &[5], &[4]).unwrap_err();
        assert_eq!(error.to_string(), "tfwasm: Sub: incompatible broadcast shapes [5] and [4]");
    }

    #[test]
    fn wrong_buffer_lengths_fail_instead_of_panicking() {
        let plan = BinaryPlan::new(BinaryOp::Mul, &[2, 3], &[3]).unwrap();
        let mut out = vec![0.0; 6];
        assert!(plan.run(&[1.0; 5], &[1.0; 3], &mut out).is_err());
        assert!(plan.run(&[1.0; 6], &[1.0; 2], &mut out).is_err());
        assert!(plan.run(&[1.0; 6], &[1.0; 3], &mut out[..5]).is_err());
        assert!(plan.run(&[1.0; 6], &[1.0; 3], &mut out).is_ok());
        // An op of another kind is refused, not computed wrongly.
        let compare = BinaryPlan::new(BinaryOp::Less, &[2], &[2]).unwrap();
        assert!(compare.run(&[1.0; 2], &[1.0; 2], &mut [0.0; 2]).is_err());
    }

    #[test]
    fn empty_operands_need_no_data() {
        let plan = BinaryPlan::new(BinaryOp::Add, &[0, 3], &[1, 3]).unwrap();
        assert_eq!(plan.output_shape(), &[0, 3]);
        plan.run(&[], &[1.0, 2.0, 3.0], &mut []).unwrap();
    }

    #[test]
    fn kernels_run_through_the_context() {
        for def in KERNELS.iter().filter(|d| d.types == types::T_F32) {
            let kernel = (def.build)(&NoAttrs).unwrap();
            let inputs = vec![
                Tensor::from_vec(&[2, 1], vec![3.0f32, -1.0]).unwrap(),
                Tensor::from_vec(&[3], vec![1.0f32, 2.0, 0.0]).unwrap(),
            ];
            let dtype = if matches!(def.op, "Less" | "LessEqual" | "Greater" | "GreaterEqual") {
                DType::Bool
            } else {
                DType::F32
            };
            let out = LocalContext::run(kernel.as_ref(), inputs, &[dtype]).unwrap();
            assert_eq!(out[0].shape(), &[2, 3], "{}", def.op);
        }
    }

    /// Attributes of a node that sets none.
    pub(crate) struct NoAttrs;

    impl Attrs for NoAttrs {
        fn has(&self, _: &str) -> bool {
            false
        }
        fn bool(&self, name: &str) -> Result<bool, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn int(&self, name: &str) -> Result<i64, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn float(&self, name: &str) -> Result<f32, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn string(&self, name: &str) -> Result<String, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn dtype(&self, name: &str) -> Result<DType, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
    }
}
