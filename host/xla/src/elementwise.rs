//! BY HAND, for stage 1: the element types and ops `tfwasm-kernels` has no
//! kernel for yet (its arithmetic is float32; another issue makes it
//! generic over the element type). float64, the integers and `pred`
//! elementwise ops, conversions, comparisons of `pred`, iota, reductions of
//! other than float32 and the products of float64 and integers are plain
//! loops here, on the calling thread, following XLA's semantics (integer
//! division by zero, wrapping arithmetic). When the kernels become generic
//! these go, and the planner calls them for every type.

use tfwasm_kernels::binary::BinaryPlan;
use tfwasm_kernels::error::Error as KernelError;
use tfwasm_kernels::{Element, Tensor, TfBool};

use crate::buffer::ElementType;
use crate::plan::{BinaryKind, Reducer, UnaryKind};

/// Arithmetic on one element type, XLA's way.
pub(crate) trait Num: Element + PartialOrd {
    const ZERO: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn sign(self) -> Self;
    /// Bitwise ops (integers; floats never reach them: the planner refuses).
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
    fn from_index(i: usize) -> Self;
}

macro_rules! float_num {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
            fn rem(self, o: Self) -> Self {
                self % o
            }
            fn pow(self, o: Self) -> Self {
                self.powf(o)
            }
            // NaN-propagating, as the float32 kernels' Maximum/Minimum.
            fn max(self, o: Self) -> Self {
                if o > self || o.is_nan() {
                    o
                } else {
                    self
                }
            }
            fn min(self, o: Self) -> Self {
                if o < self || o.is_nan() {
                    o
                } else {
                    self
                }
            }
            fn neg(self) -> Self {
                -self
            }
            fn abs(self) -> Self {
                self.abs()
            }
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    self // ±0 and NaN
                }
            }
            fn and(self, _: Self) -> Self {
                unreachable!("bitwise op on floats")
            }
            fn or(self, _: Self) -> Self {
                unreachable!("bitwise op on floats")
            }
            fn xor(self, _: Self) -> Self {
                unreachable!("bitwise op on floats")
            }
            fn not(self) -> Self {
                unreachable!("bitwise op on floats")
            }
            fn from_index(i: usize) -> Self {
                i as $t
            }
        }
    };
}
float_num!(f32);
float_num!(f64);

macro_rules! int_num {
    ($t:ty, signed: $signed:literal) => {
        impl Num for $t {
            const ZERO: Self = 0;
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            // XLA: x / 0 is -1 (all bits set), MIN / -1 is MIN.
            fn div(self, o: Self) -> Self {
                if o == 0 {
                    !0
                } else {
                    self.wrapping_div(o)
                }
            }
            // XLA: x % 0 is x, MIN % -1 is 0.
            fn rem(self, o: Self) -> Self {
                if o == 0 {
                    self
                } else {
                    self.wrapping_rem(o)
                }
            }
            fn pow(self, o: Self) -> Self {
                #[allow(unused_comparisons)]
                if o < 0 {
                    // Only ±1 have integer reciprocals.
                    #[allow(unused_comparisons)]
                    return if self == 1 {
                        1
                    } else if $signed && self == (0 as $t).wrapping_sub(1) {
                        if o % 2 == 0 {
                            1
                        } else {
                            self
                        }
                    } else {
                        0
                    };
                }
                let (mut base, mut exp, mut acc) = (self, o, 1 as $t);
                while exp > 0 {
                    if exp & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    exp >>= 1;
                }
                acc
            }
            fn max(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            fn min(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 {
                    self.wrapping_neg()
                } else {
                    self
                }
            }
            #[allow(unused_comparisons)]
            fn sign(self) -> Self {
                if self > 0 {
                    1
                } else if self < 0 {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                }
            }
            fn and(self, o: Self) -> Self {
                self & o
            }
            fn or(self, o: Self) -> Self {
                self | o
            }
            fn xor(self, o: Self) -> Self {
                self ^ o
            }
            fn not(self) -> Self {
                !self
            }
            fn from_index(i: usize) -> Self {
                i as $t
            }
        }
    };
}
int_num!(i32, signed: true);
int_num!(i64, signed: true);
int_num!(u8, signed: false);
int_num!(u64, signed: false);

/// Evaluates `$body` with `$t` the Rust type of numeric element type `$ty`,
/// else `$other`.
macro_rules! with_num {
    ($ty:expr, $t:ident => $body:expr, $other:expr) => {
        match $ty {
            ElementType::F32 => {
                type $t = f32;
                $body
            }
            ElementType::F64 => {
                type $t = f64;
                $body
            }
            ElementType::S32 => {
                type $t = i32;
                $body
            }
            ElementType::S64 => {
                type $t = i64;
                $body
            }
            ElementType::U8 => {
                type $t = u8;
                $body
            }
            ElementType::U64 => {
                type $t = u64;
                $body
            }
            _ => $other,
        }
    };
}

fn unexpected(what: &str, ty: ElementType) -> KernelError {
    KernelError::Internal(format!("{what} of {ty} reached the by-hand path the planner refuses"))
}

fn ty_of(t: &Tensor) -> ElementType {
    ElementType::from_dtype(t.dtype())
}

fn binary_fn<T: Num>(kind: BinaryKind) -> fn(T, T) -> T {
    match kind {
        BinaryKind::Add => T::add,
        BinaryKind::Sub => T::sub,
        BinaryKind::Mul => T::mul,
        BinaryKind::Div => T::div,
        BinaryKind::Rem => T::rem,
        BinaryKind::Max => T::max,
        BinaryKind::Min => T::min,
        BinaryKind::Pow => T::pow,
        BinaryKind::And => T::and,
        BinaryKind::Or => T::or,
        BinaryKind::Xor => T::xor,
    }
}

/// `pred` as bits: and, or, xor of 0/1 bytes.
fn pred_fn(kind: BinaryKind) -> Option<fn(TfBool, TfBool) -> TfBool> {
    Some(match kind {
        BinaryKind::And => |a: TfBool, b: TfBool| TfBool((a.get() & b.get()) as u8),
        BinaryKind::Or => |a: TfBool, b: TfBool| TfBool((a.get() | b.get()) as u8),
        BinaryKind::Xor => |a: TfBool, b: TfBool| TfBool((a.get() ^ b.get()) as u8),
        _ => return None,
    })
}

/// An elementwise binary op of another type than float32 arithmetic.
pub(crate) fn binary(
    kind: BinaryKind,
    plan: &BinaryPlan,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let ty = ty_of(out);
    if ty == ElementType::Pred {
        let f = pred_fn(kind).ok_or_else(|| unexpected("this op", ty))?;
        return plan.map(a.data::<TfBool>()?, b.data::<TfBool>()?, out.data_mut::<TfBool>()?, f);
    }
    with_num!(ty, T => {
        let f = binary_fn::<T>(kind);
        plan.map(a.data::<T>()?, b.data::<T>()?, out.data_mut::<T>()?, f)
    }, Err(unexpected("a binary op", ty)))
}

/// An elementwise comparison.
pub(crate) fn compare(plan: &BinaryPlan, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<(), KernelError> {
    let ty = ty_of(a);
    let out = out.data_mut::<TfBool>()?;
    if ty == ElementType::Pred {
        let (x, y) = (a.data::<TfBool>()?, b.data::<TfBool>()?);
        let f: fn(bool, bool) -> bool = match plan.op() {
            tfwasm_kernels::BinaryOp::Equal => |x, y| x == y,
            tfwasm_kernels::BinaryOp::NotEqual => |x, y| x != y,
            tfwasm_kernels::BinaryOp::Less => |x, y| !x & y,
            tfwasm_kernels::BinaryOp::LessEqual => |x, y| x <= y,
            tfwasm_kernels::BinaryOp::Greater => |x, y| x & !y,
            _ => |x, y| x >= y,
        };
        return plan.map(x, y, out, move |x: TfBool, y: TfBool| TfBool(f(x.get(), y.get()) as u8));
    }
    with_num!(ty, T => plan.run_compare(a.data::<T>()?, b.data::<T>()?, out), Err(unexpected("compare", ty)))
}

/// An elementwise unary op of another type than float32 (and the float32
/// ops the kernels have no [`tfwasm_kernels::unary::UnaryOp`] for).
pub(crate) fn unary(kind: UnaryKind, x: &Tensor, out: &mut Tensor) -> Result<(), KernelError> {
    let ty = ty_of(x);
    if kind == UnaryKind::IsFinite {
        let out = out.data_mut::<TfBool>()?;
        return match ty {
            ElementType::F32 => map(x.data::<f32>()?, out, |v| TfBool(v.is_finite() as u8)),
            ElementType::F64 => map(x.data::<f64>()?, out, |v| TfBool(v.is_finite() as u8)),
            _ => Err(unexpected("is-finite", ty)),
        };
    }
    if ty == ElementType::Pred && kind == UnaryKind::Not {
        return map(x.data::<TfBool>()?, out.data_mut::<TfBool>()?, |v| TfBool(!v.get() as u8));
    }
    macro_rules! float_ops {
        ($t:ty) => {{
            let f: fn($t) -> $t = match kind {
                UnaryKind::Neg => |v| -v,
                UnaryKind::Abs => |v| v.abs(),
                UnaryKind::Sign => Num::sign,
                UnaryKind::Exp => |v| v.exp(),
                UnaryKind::Expm1 => |v| v.exp_m1(),
                UnaryKind::Log => |v| v.ln(),
                UnaryKind::Log1p => |v| v.ln_1p(),
                UnaryKind::Sqrt => |v| v.sqrt(),
                UnaryKind::Rsqrt => |v| 1.0 / v.sqrt(),
                UnaryKind::Tanh => |v| v.tanh(),
                UnaryKind::Logistic => |v| 1.0 / (1.0 + (-v).exp()),
                UnaryKind::Floor => |v| v.floor(),
                UnaryKind::Ceil => |v| v.ceil(),
                UnaryKind::RoundEven => |v| v.round_ties_even(),
                UnaryKind::Sin => |v| v.sin(),
                UnaryKind::Cos => |v| v.cos(),
                UnaryKind::Tan => |v| v.tan(),
                _ => return Err(unexpected("this unary op", ty)),
            };
            map(x.data::<$t>()?, out.data_mut::<$t>()?, f)
        }};
    }
    match ty {
        ElementType::F32 => float_ops!(f32),
        ElementType::F64 => float_ops!(f64),
        _ => with_num!(ty, T => {
            let f: fn(T) -> T = match kind {
                UnaryKind::Neg => T::neg,
                UnaryKind::Abs => T::abs,
                UnaryKind::Sign => T::sign,
                UnaryKind::Not => T::not,
                _ => return Err(unexpected("this unary op", ty)),
            };
            map(x.data::<T>()?, out.data_mut::<T>()?, f)
        }, Err(unexpected("a unary op", ty))),
    }
}

fn map<A: Copy, O>(x: &[A], out: &mut [O], f: impl Fn(A) -> O) -> Result<(), KernelError> {
    if x.len() != out.len() {
        return Err(KernelError::Internal(format!("{} elements into {}", x.len(), out.len())));
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
    Ok(())
}

/// `as` between element types (saturating float to integer, NaN to 0, as
/// XLA's CPU backend converts), `pred` as 0/1 and nonzero.
pub(crate) trait CastTo<D> {
    fn cast(self) -> D;
}

macro_rules! cast_from {
    ($s:ty; $($d:ty),*) => {
        $(impl CastTo<$d> for $s {
            #[inline]
            fn cast(self) -> $d {
                self as $d
            }
        })*
        impl CastTo<TfBool> for $s {
            #[inline]
            fn cast(self) -> TfBool {
                TfBool((self != (0 as $s)) as u8)
            }
        }
        impl CastTo<$s> for TfBool {
            #[inline]
            fn cast(self) -> $s {
                self.get() as u8 as $s
            }
        }
    };
}
cast_from!(f32; f32, f64, i32, i64, u8, u64);
cast_from!(f64; f32, f64, i32, i64, u8, u64);
cast_from!(i32; f32, f64, i32, i64, u8, u64);
cast_from!(i64; f32, f64, i32, i64, u8, u64);
cast_from!(u8; f32, f64, i32, i64, u8, u64);
cast_from!(u64; f32, f64, i32, i64, u8, u64);

macro_rules! with_any {
    ($ty:expr, $t:ident => $body:expr, $other:expr) => {
        match $ty {
            ElementType::Pred => {
                type $t = TfBool;
                $body
            }
            _ => with_num!($ty, $t => $body, $other),
        }
    };
}

/// Elementwise conversion between any two of the by-hand types.
pub(crate) fn convert(x: &Tensor, out: &mut Tensor) -> Result<(), KernelError> {
    let (from, to) = (ty_of(x), ty_of(out));
    if from == ElementType::Pred && to == ElementType::Pred {
        return map(x.data::<TfBool>()?, out.data_mut::<TfBool>()?, |v| TfBool(v.get() as u8));
    }
    with_any!(from, S => with_num!(to, D => {
        map(x.data::<S>()?, out.data_mut::<D>()?, CastTo::<D>::cast)
    }, {
        // Into pred: nonzero.
        if from == ElementType::Pred {
            return Err(unexpected("convert", to));
        }
        with_num!(from, S2 => map(x.data::<S2>()?, out.data_mut::<TfBool>()?, CastTo::<TfBool>::cast),
            Err(unexpected("convert", from)))
    }), Err(unexpected("convert", from)))
}

/// `out[.., i, ..] = i` along `dim`.
pub(crate) fn iota(dim: usize, out: &mut Tensor) -> Result<(), KernelError> {
    let ty = ty_of(out);
    let dims = out.shape().to_vec();
    let inner: usize = dims[dim + 1..].iter().product();
    let extent = dims[dim];
    with_num!(ty, T => {
        for (flat, o) in out.data_mut::<T>()?.iter_mut().enumerate() {
            *o = T::from_index((flat / inner) % extent);
        }
        Ok(())
    }, Err(unexpected("iota", ty)))
}

/// Reduces `x` over the `reduced` dimensions, starting from `init`.
pub(crate) fn reduce(
    reducer: Reducer,
    reduced: &[bool],
    x: &Tensor,
    init: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let ty = ty_of(x);
    let dims = x.shape().to_vec();
    if ty == ElementType::Pred {
        let f = pred_fn(reducer.as_binary()).ok_or_else(|| unexpected("this reduction", ty))?;
        return reduce_with(&dims, reduced, x.data::<TfBool>()?, init.scalar::<TfBool>()?, f, out.data_mut()?);
    }
    with_num!(ty, T => {
        let f = binary_fn::<T>(reducer.as_binary());
        reduce_with(&dims, reduced, x.data::<T>()?, init.scalar::<T>()?, f, out.data_mut::<T>()?)
    }, Err(unexpected("reduce", ty)))
}

fn reduce_with<T: Copy>(
    dims: &[usize],
    reduced: &[bool],
    x: &[T],
    init: T,
    f: fn(T, T) -> T,
    out: &mut [T],
) -> Result<(), KernelError> {
    out.fill(init);
    // Output stride of each input dimension (0 where it is reduced).
    let mut strides = vec![0; dims.len()];
    let mut stride = 1;
    for d in (0..dims.len()).rev() {
        if !reduced[d] {
            strides[d] = stride;
            stride *= dims[d];
        }
    }
    let mut index = vec![0usize; dims.len()];
    let mut target = 0usize;
    for &v in x {
        out[target] = f(out[target], v);
        // Advance the odometer, keeping the output index in step.
        for d in (0..dims.len()).rev() {
            index[d] += 1;
            target += strides[d];
            if index[d] < dims[d] {
                break;
            }
            target -= strides[d] * index[d];
            index[d] = 0;
        }
    }
    Ok(())
}

/// `out[b] = op(a[b]) · op(b[b])` per batch, accumulated in the element
/// type (float64, integers).
pub(crate) fn naive_dot(
    (batch, m, k, n): (usize, usize, usize, usize),
    (transpose_a, transpose_b): (bool, bool),
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let ty = ty_of(out);
    with_num!(ty, T => {
        let (a, b, out) = (a.data::<T>()?, b.data::<T>()?, out.data_mut::<T>()?);
        for p in 0..batch {
            let (a, b) = (&a[p * m * k..(p + 1) * m * k], &b[p * k * n..(p + 1) * k * n]);
            for i in 0..m {
                for j in 0..n {
                    let mut acc = T::ZERO;
                    for l in 0..k {
                        let x = if transpose_a { a[l * m + i] } else { a[i * k + l] };
                        let y = if transpose_b { b[j * k + l] } else { b[l * n + j] };
                        acc = acc.add(x.mul(y));
                    }
                    out[p * m * n + i * n + j] = acc;
                }
            }
        }
        Ok(())
    }, Err(unexpected("dot", ty)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_division_follows_xla() {
        assert_eq!(Num::div(7i32, 0), -1);
        assert_eq!(Num::div(i32::MIN, -1), i32::MIN);
        assert_eq!(Num::rem(7i32, 0), 7);
        assert_eq!(Num::rem(i32::MIN, -1), 0);
        assert_eq!(Num::div(7u8, 0), 255);
        assert_eq!(Num::pow(3i64, 4), 81);
        assert_eq!(Num::pow(2i32, -1), 0);
        assert_eq!(Num::pow(-1i32, -3), -1);
    }

    #[test]
    fn reduce_with_walks_every_element_once() {
        // [2,3,2] summed over dimension 1.
        let x: Vec<i64> = (0..12).collect();
        let mut out = vec![0i64; 4];
        reduce_with(&[2, 3, 2], &[false, true, false], &x, 100, |a, b| a + b, &mut out).unwrap();
        assert_eq!(out, vec![106, 109, 124, 127]);
    }
}
