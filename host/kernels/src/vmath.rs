//! Float32 transcendental functions written so that loops over them
//! vectorise: no libm calls, no data-dependent branches (every special case
//! is a select), only arithmetic and bit operations the compiler maps to SIMD
//! lanes.
//!
//! libm's scalar `expf`/`logf`/`tanhf` cost 5–45× TensorFlow's vectorised
//! Eigen kernels on large tensors (measured on 400K floats: `tanh` 2835 µs
//! against 61); these run in SIMD lanes like Eigen's. Most are a classic
//! range reduction plus a short polynomial with Cephes' single-precision
//! coefficients; `tanh` is a rational function we fitted, `erf` the rational
//! function XLA and Eigen use, `erfc` a published Chebyshev fit. All stay
//! within a few ulp (8 at most) of the correctly rounded result; the tests
//! below check each bound over the function's whole range, including ±0,
//! ±inf, NaN and subnormals.
//!
//! Every function is a pure per-element map, so a result never depends on how
//! a tensor was split into chunks or threads.
//!
//! Polynomials are evaluated with explicit fused multiply-adds
//! (`f32::mul_add`), long ones by Estrin's scheme rather than Horner's: the
//! loops are bound by the latency of one long chain of dependent operations,
//! and both changes shorten it. On 1M floats, one thread, against separate
//! multiplies and adds by Horner's scheme: `exp` 954 → 661 µs, `ln` 1528 →
//! 1165, `tanh` 559 → 427, `sigmoid` 1081 → 791, `erf` 860 → 669 (Eigen,
//! TensorFlow's CPU kernels, on one thread: `exp` 734, `log` 1074).
//!
//! [`in_wide_lanes`] runs a loop over such a map (or any elementwise loop)
//! compiled twice: for CPUs with AVX2 and FMA (8 lanes, a hardware fused
//! multiply-add) and for the x86-64 baseline (SSE2, 4 lanes, where `mul_add`
//! is libm's `fmaf`), picked at run time. Both are the same IEEE operations
//! in the same order: a fused multiply-add is exactly rounded wherever it
//! runs, and Rust never fuses a multiply and an add on its own. So results
//! are identical on every x86-64 machine (and on aarch64, whose `fmadd` is
//! the same operation); the wide copy is only faster.

/// `ln(2)` split so that `n·LN2_HI` is exact for the `n` these functions meet.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x` for f32 without a libm call, so loops over it vectorise.
///
/// Range reduction `x = n·ln2 + r` (`|r| <= ln2/2`, `n` by round-to-nearest
/// through the 1.5·2^23 trick, which needs no SSE4.1 `round`), a degree-5
/// polynomial for `e^r` (Cephes' coefficients) and `2^n` built in the
/// exponent bits. Inputs below `ln(2^-126)` flush to 0, above `ln(f32::MAX)`
/// give +inf; NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let v = exp_in_range_f32(x.clamp(EXP_LO, EXP_HI));
    if x < EXP_LO {
        0.0
    } else if x > EXP_HI {
        f32::INFINITY
    } else {
        v
    }
}

/// Below this, `e^x` flushes to 0 (`ln(2^-126)`).
const EXP_LO: f32 = -87.336_55;
/// Above this, `e^x` is +inf (`ln(f32::MAX)`).
const EXP_HI: f32 = 88.722_83;

/// Whether `x` is one of the inputs [`exp_in_range_f32`] takes.
#[inline(always)]
pub fn is_exp_in_range(x: f32) -> bool {
    (EXP_LO..=EXP_HI).contains(&x)
}

/// [`exp_f32`] of an `x` in its finite range, `[EXP_LO, EXP_HI]`
/// ([`is_exp_in_range`]), without the clamp and selects the other inputs
/// need: the same result, bit for bit.
#[inline(always)]
pub fn exp_in_range_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23
    let shifted = x.mul_add(LOG2E, ROUND);
    let n = shifted - ROUND;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let r2 = r * r;
    // Estrin's scheme: three independent pairs joined by powers of r², a
    // shorter dependency chain than Horner's (the loop is latency-bound).
    let a = 1.987_569_1e-4f32.mul_add(r, 1.398_199_9e-3);
    let b = 8.333_452e-3f32.mul_add(r, 4.166_579_6e-2);
    let c = 1.666_666_5e-1f32.mul_add(r, 5e-1);
    let r4 = r2 * r2;
    let p = a.mul_add(r4, b.mul_add(r2, c));
    let y = p.mul_add(r2, r + 1.0);
    // n is in [-126, 128]; 2^n for n = 128 is built as 2·2^127.
    // n as an integer, read from the bits of `shifted` (1.5·2^23 + n has n in
    // its low mantissa bits): a bit cast vectorises, `n as i32` (saturating)
    // does not.
    let ni = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let half = ni >> 1;
    let scale_a = f32::from_bits(((half + 127) as u32) << 23);
    let scale_b = f32::from_bits(((ni - half + 127) as u32) << 23);
    y * scale_a * scale_b
}

/// `ln(x)` for f32: `x = 2^e·m` with `m` in `[√½, √2)`, `ln(m)` as
/// `f - f²/2 + f³·P(f)` (`f = m - 1`, Cephes' `logf` polynomial), plus
/// `e·ln2`. Subnormal inputs are scaled into the normal range first.
/// `ln(±0) = -inf`, `ln(x < 0) = NaN`, `ln(inf) = inf`, NaN stays NaN.
#[inline(always)]
pub fn ln_f32(x: f32) -> f32 {
    const TWO_POW_23: f32 = 8_388_608.0;
    let subnormal = x < f32::MIN_POSITIVE;
    let scaled = if subnormal { x * TWO_POW_23 } else { x };
    let r = ln_scaled(scaled, if subnormal { 23.0 } else { 0.0 });
    let r = if x == f32::INFINITY { x } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    if x < 0.0 || x.is_nan() {
        f32::NAN
    } else {
        r
    }
}

/// [`ln_f32`] of a positive, normal, finite `x` ([`is_normal_positive`]),
/// without the checks and selects the other inputs need: the same result,
/// bit for bit, in about three quarters of the time.
#[inline(always)]
pub fn ln_normal_f32(x: f32) -> f32 {
    ln_scaled(x, 0.0)
}

/// Whether `x` is one of the inputs [`ln_normal_f32`] takes.
#[inline(always)]
pub fn is_normal_positive(x: f32) -> bool {
    (f32::MIN_POSITIVE..f32::INFINITY).contains(&x)
}

/// `ln(x) - scale·ln2` for a positive normal `x` (`scale` undoes the
/// scaling of a subnormal input).
#[inline(always)]
fn ln_scaled(x: f32, scale: f32) -> f32 {
    let bits = x.to_bits();
    // The mantissa with the exponent of 0.5: m in [0.5, 1).
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let exponent = ((bits >> 23) & 0xff) as i32 - 126;
    let below = m < std::f32::consts::FRAC_1_SQRT_2;
    let f = if below { m + m - 1.0 } else { m - 1.0 };
    let e = (exponent - below as i32) as f32 - scale;
    let z = f * f;
    // Estrin's scheme, as in `exp_f32`: four independent pairs.
    let a = 7.037_683_6e-2f32.mul_add(f, -1.151_461e-1);
    let b = 1.167_699_9e-1f32.mul_add(f, -1.242_014_1e-1);
    let c = 1.424_932_3e-1f32.mul_add(f, -1.666_805_8e-1);
    let d = 2.000_071_4e-1f32.mul_add(f, -2.499_999_4e-1);
    let z2 = z * z;
    let abcd = a.mul_add(z, b).mul_add(z2, c.mul_add(z, d));
    let p = abcd.mul_add(f, 3.333_333e-1);
    let y = (f * z).mul_add(p, e.mul_add(LN2_LO, -0.5 * z));
    e.mul_add(LN2_HI, f + y)
}

/// `ln(1 + x)`, accurate for small `x`: with `u = 1 + x` rounded,
/// `ln(u)·x/(u - 1)` cancels the rounding of `u` (Goldberg's method).
#[inline(always)]
pub fn ln_1p_f32(x: f32) -> f32 {
    let u = 1.0 + x;
    let d = u - 1.0;
    let r = ln_f32(u) * (x / d);
    let r = if d == 0.0 { x } else { r };
    if u == f32::INFINITY {
        u
    } else {
        r
    }
}

/// `tanh(x)` as the rational function `x·P(x²)/Q(x²)` (degrees 9 and 8)
/// on [-9, 9] and ±1 beyond (where tanh rounds to ±1 in float32). One
/// division and ten multiply-adds: 3–4× faster than going through `e^{2x}`.
/// The coefficients are our own fit (least squares on the relative error,
/// reweighted by the denominator, in float64, then rounded to float32);
/// evaluated in float32 the result is within 7 ulp, 4 below |x| = 2.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    const LIMIT: f32 = 9.0;
    let xc = x.clamp(-LIMIT, LIMIT);
    let z = xc * xc;
    let mut p = 1.326_72e-8f32;
    p = p.mul_add(z, 2.054_243_3e-5);
    p = p.mul_add(z, 3.491_399_3e-3);
    p = p.mul_add(z, 1.337_745_8e-1);
    p = p.mul_add(z, 1.0);
    let mut q = 7.739_696_5e-7f32;
    q = q.mul_add(z, 3.278_879e-4);
    q = q.mul_add(z, 2.586_091_5e-2);
    q = q.mul_add(z, 4.671_077e-1);
    q = q.mul_add(z, 1.0);
    let r = xc * p / q;
    if x.abs() >= LIMIT {
        1f32.copysign(x)
    } else {
        r
    }
}

/// The logistic function `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// The error function: the rational approximation on [-4, 4] that XLA (and
/// Eigen before its current version) use for float32, evaluated in float32
/// as they do; beyond ±3.92 erf is ±1 in float32. Within 8 ulp of the true
/// value, the worst near ±3.9 where the result is within 4e-7 of ±1.
/// (TensorFlow 2.21's CPU kernel uses a newer Eigen approximation; the two
/// differ by up to ~5e-7 in the op sweep.) Evaluating in float64 would be
/// within 2 ulp at half the speed.
#[inline(always)]
pub fn erf_f32(v: f32) -> f32 {
    let x = v.clamp(-4.0, 4.0);
    let x2 = x * x;
    // Horner's scheme: two independent chains already, and Estrin's extra
    // powers of x² measured slower here.
    let mut p = -2.726_142_3e-10f32;
    p = p.mul_add(x2, 2.770_681_4e-8);
    p = p.mul_add(x2, -2.101_024e-6);
    p = p.mul_add(x2, -5.692_506_4e-5);
    p = p.mul_add(x2, -7.349_906_3e-4);
    p = p.mul_add(x2, -2.954_6e-3);
    p = p.mul_add(x2, -1.609_603_3e-2);
    let mut q = -1.456_607_2e-5f32;
    q = q.mul_add(x2, -2.133_740_5e-4);
    q = q.mul_add(x2, -1.682_827e-3);
    q = q.mul_add(x2, -7.373_329e-3);
    q = q.mul_add(x2, -1.426_473_9e-2);
    let r = (x * p / q).clamp(-1.0, 1.0);
    // From |x| = 3.92 on, erf rounds to ±1 in float32 (1 - erf < 2^-25);
    // the rational alone stops one ulp short of it.
    let r = if v.abs() >= 3.92 { 1f32.copysign(v) } else { r };
    if v.is_nan() {
        v
    } else {
        r
    }
}

/// The complementary error function `1 - erf(x)`, accurate in relative
/// terms where it is tiny (`1 - erf(x)` cancels to 0 from x ≈ 3.9 on, where
/// exact GELU still needs it: `0.5·x·erfc(-x/√2)`).
///
/// Below |x| = 0.5 it is `1 - erf(x)`, which loses nothing there (the
/// result is in (0.47, 1.53)), with erf as its series. Beyond, for `z = |x|`, the Chebyshev fit of
/// Numerical Recipes (`erfcc`, fractional error below 1.2e-7):
/// `erfc(z) = t·exp(-z² + P(t))` with `t = 1/(1 + z/2)`, and
/// `erfc(-z) = 2 - erfc(z)`. `z²` is split exactly into `hi + lo` (`lo` by
/// a fused multiply-add) and the result formed as
/// `t·exp(P(t) - lo)·exp(-hi)`: rounding `-z² + P(t)` to float32 would cost
/// up to half an ulp of ~90 in the exponent, a relative error of 4e-6 in
/// the result. Results that are subnormal in float32 (|x| above ~9.2) lose
/// precision, and flush to 0 from |x| ≈ 9.35 on (where `exp(-hi)` does).
/// Inside TensorFlow, which runs kernels with subnormals flushed to zero,
/// every subnormal result is 0, as on its CPU device.
#[inline(always)]
pub fn erfc_f32(v: f32) -> f32 {
    // erf's Maclaurin series to x^13, `x·S(x²)`: below |x| = 0.5 its next
    // term is under 5e-10, and unlike `erf_f32` it needs no division.
    let x2 = v * v;
    let mut s = 1.205_533_3e-4f32;
    s = s.mul_add(x2, -8.548_327e-4);
    s = s.mul_add(x2, 5.223_977_6e-3);
    s = s.mul_add(x2, -2.686_617e-2);
    s = s.mul_add(x2, 1.128_379_2e-1);
    s = s.mul_add(x2, -3.761_263_9e-1);
    s = s.mul_add(x2, std::f32::consts::FRAC_2_SQRT_PI);
    let near = (-v).mul_add(s, 1.0);
    // erfc(10) is far below the smallest float32; the clamp keeps z² finite
    // (and NaN out of the arithmetic: `min` returns 10 for it).
    let z = v.abs().min(10.0);
    let t = 1.0 / z.mul_add(0.5, 1.0);
    // Estrin's scheme, as in `exp_f32`: five independent pairs.
    let t2 = t * t;
    let t4 = t2 * t2;
    let a = 1.000_023_7f32.mul_add(t, -1.265_512_2);
    let b = 9.678_418e-2f32.mul_add(t, 3.740_919_5e-1);
    let c = 2.788_680_8e-1f32.mul_add(t, -1.862_880_6e-1);
    let d = 1.488_515_9f32.mul_add(t, -1.135_204);
    let e = 1.708_727_6e-1f32.mul_add(t, -8.221_522_6e-1);
    let p = e.mul_add(t4, d.mul_add(t2, c)).mul_add(t4, b.mul_add(t2, a));
    let hi = z * z;
    let lo = z.mul_add(z, -hi);
    // `t·exp(P - lo)` is a normal number near 0.1; multiplying by the tiny
    // `exp(-hi)` last rounds once, even where the product is subnormal.
    // `P - lo` is within [-1.3, 0.1], so its exp needs no range checks.
    let tail = (t * exp_in_range_f32(p - lo)) * exp_f32(-hi);
    let far = if v < 0.0 { 2.0 - tail } else { tail };
    let r = if v.abs() < 0.5 { near } else { far };
    if v.is_nan() {
        v
    } else {
        r
    }
}

/// Runs `body`, compiled for AVX2 and FMA when the CPU has both: loops
/// inside it that the compiler vectorises get 8 lanes instead of the
/// baseline's 4, and `mul_add` one instruction instead of a libm call (see
/// the module docs). `body` is inlined into the wide copy; were it not, it
/// would run as compiled for the baseline, slower but with the same results.
#[inline(always)]
pub fn in_wide_lanes<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn wide<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            return unsafe { wide(body) };
        }
    }
    body()
}

/// erf in f64, the tests' reference (here and in `unary`): its series below
/// |x| = 2.5, else 1 - erfc by a continued fraction. NaN stays NaN, ±inf
/// gives ±1.
#[cfg(test)]
pub(crate) fn erf_reference(x: f64) -> f64 {
    if x.abs() < 2.5 {
        let (mut term, mut sum, mut n) = (x, x, 0.0);
        while term.abs() > 1e-18 * sum.abs() {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc by Lentz's continued fraction.
        let a = x.abs();
        let mut f = a;
        for k in (1..200).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / f;
        (1.0 - erfc).copysign(x)
    }
}

/// erfc in f64, the tests' reference, accurate in relative terms (to
/// ~1e-11) also where it is tiny: `1 - erf` by the series below |x| = 2.5
/// (erfc(2.5) ≈ 4e-4, so the cancellation costs under 4 digits of f64),
/// the continued fraction beyond, `2 - erfc(-x)` for negative x.
#[cfg(test)]
pub(crate) fn erfc_reference(x: f64) -> f64 {
    if x.is_nan() || x.abs() < 2.5 {
        1.0 - erf_reference(x)
    } else if x < 0.0 {
        2.0 - erfc_reference(-x)
    } else {
        let mut f = x;
        for k in (1..200).rev() {
            f = x + (k as f64 / 2.0) / f;
        }
        (-x * x).exp() / std::f64::consts::PI.sqrt() / f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the f64 value
    /// `want` (rounded to f32), both finite.
    fn ulps(got: f32, want: f64) -> u32 {
        let want = want as f32;
        let key = |v: f32| {
            let b = v.to_bits() as i32;
            if b < 0 {
                i32::MIN - b
            } else {
                b
            }
        };
        key(got).abs_diff(key(want))
    }

    /// Every f32 in `[lo, hi]` at a stride that visits ~2M values, plus the
    /// endpoints: dense enough to cover each binade of the range.
    fn sweep(lo: f32, hi: f32, mut check: impl FnMut(f32)) {
        let mut x = lo;
        let step = (hi - lo) / 2_000_000.0;
        while x <= hi {
            check(x);
            x += step;
        }
        check(hi);
    }

    /// Checks `f` against `reference` at `x` within `max_ulps`, or within
    /// `abs` absolute error where the result is tiny.
    fn close(name: &str, x: f32, got: f32, want: f64, max_ulps: u32, abs: f64) {
        if want.is_nan() {
            assert!(got.is_nan(), "{name}({x:e}) = {got:e}, expected NaN");
        } else if want.is_infinite() || want.abs() > f32::MAX as f64 {
            assert_eq!(got as f64, want.signum() * f64::INFINITY, "{name}({x:e})");
        } else {
            let ok = ulps(got, want) <= max_ulps || (got as f64 - want).abs() <= abs;
            assert!(ok, "{name}({x:e}) = {got:e}, expected {want:e} ({} ulp)", ulps(got, want));
        }
    }

    #[test]
    fn exp_is_accurate_over_the_range() {
        let mut x = -104.0f32;
        while x < 90.0 {
            let got = exp_f32(x);
            let want = (x as f64).exp();
            if want < f32::MIN_POSITIVE as f64 {
                assert!(got == 0.0 || (got as f64 - want).abs() < 1e-37, "{x}: {got}");
            } else if want > f32::MAX as f64 {
                assert_eq!(got, f32::INFINITY, "{x}");
            } else {
                assert!(((got as f64 - want) / want).abs() < 3e-7, "exp({x}) = {got}, expected {want}");
            }
            x += 0.0137;
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn wide_and_baseline_lanes_agree_bit_for_bit() {
        let x: Vec<f32> = (0..10_007).map(|i| (i as f32 - 5000.0) * 0.0173).collect();
        let funcs: [fn(f32) -> f32; 7] = [exp_f32, ln_f32, ln_1p_f32, tanh_f32, sigmoid_f32, erf_f32, erfc_f32];
        for f in funcs {
            let mut lanes = vec![0f32; x.len()];
            in_wide_lanes(
                #[inline(always)]
                || {
                    for (o, &v) in lanes.iter_mut().zip(&x) {
                        *o = f(v);
                    }
                },
            );
            for (&v, &got) in x.iter().zip(&lanes) {
                assert_eq!(got.to_bits(), f(v).to_bits(), "at {v}");
            }
        }
    }

    /// Calls `f` on 2,000 points of every binade `[2^e, 2^(e+1))` from
    /// `2^first` up to `f32::MAX`.
    fn sweep_binades(first: i32, mut f: impl FnMut(f32)) {
        for e in first..128 {
            let lo = 2f32.powi(e);
            let hi = if e == 127 { f32::MAX } else { 2f32.powi(e + 1) };
            let mut x = lo;
            for _ in 0..2_000 {
                f(x);
                x += (hi - lo) / 2_000.0;
            }
        }
    }

    #[test]
    fn ln_is_accurate_over_every_binade() {
        // From the smallest subnormal to f32::MAX.
        sweep_binades(-149, |x| close("ln", x, ln_f32(x), (x as f64).ln(), 2, 0.0));
        assert_eq!(ln_f32(1.0), 0.0);
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(-0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
        assert!(ln_f32(-1.0).is_nan() && ln_f32(f32::NEG_INFINITY).is_nan() && ln_f32(f32::NAN).is_nan());
    }

    #[test]
    fn ln_normal_is_ln_bit_for_bit_on_the_inputs_it_takes() {
        // Every normal binade.
        sweep_binades(-126, |x| {
            assert!(is_normal_positive(x), "{x:e}");
            assert_eq!(ln_normal_f32(x).to_bits(), ln_f32(x).to_bits(), "ln({x:e})");
        });
        for x in [f32::MIN_POSITIVE, 1.0, f32::MAX, f32::EPSILON] {
            assert!(is_normal_positive(x), "{x:e}");
        }
        let subnormal = f32::MIN_POSITIVE / 2.0;
        for x in [0.0, -0.0, subnormal, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            assert!(!is_normal_positive(x), "{x:e} must take the full ln");
        }
    }

    #[test]
    fn exp_in_range_is_exp_bit_for_bit_on_the_inputs_it_takes() {
        let steps = 2_000_000;
        for i in 0..=steps {
            let x = EXP_LO + (EXP_HI - EXP_LO) * (i as f32 / steps as f32);
            let x = x.clamp(EXP_LO, EXP_HI);
            assert!(is_exp_in_range(x), "{x:e}");
            assert_eq!(exp_in_range_f32(x).to_bits(), exp_f32(x).to_bits(), "exp({x:e})");
        }
        for x in [EXP_LO, EXP_HI, 0.0, -0.0, 1.0, -1.0] {
            assert!(is_exp_in_range(x), "{x:e}");
            assert_eq!(exp_in_range_f32(x).to_bits(), exp_f32(x).to_bits(), "exp({x:e})");
        }
        for x in [EXP_LO.next_down(), EXP_HI.next_up(), f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            assert!(!is_exp_in_range(x), "{x:e} must take the full exp");
        }
    }

    #[test]
    fn ln_1p_is_accurate_near_zero_and_far_from_it() {
        sweep(-0.999_9, 10.0, |x| close("ln_1p", x, ln_1p_f32(x), (x as f64).ln_1p(), 3, 0.0));
        for e in -149..-10 {
            for x in [2f32.powi(e), -(2f32.powi(e)), 1.5 * 2f32.powi(e)] {
                close("ln_1p", x, ln_1p_f32(x), (x as f64).ln_1p(), 2, 0.0);
            }
        }
        for x in [1e10f32, 3e30, f32::MAX] {
            close("ln_1p", x, ln_1p_f32(x), (x as f64).ln_1p(), 2, 0.0);
        }
        assert_eq!(ln_1p_f32(-1.0), f32::NEG_INFINITY);
        assert_eq!(ln_1p_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(ln_1p_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert!(ln_1p_f32(-2.0).is_nan() && ln_1p_f32(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_and_sigmoid_are_accurate_over_the_range() {
        sweep(-20.0, 20.0, |x| {
            close("tanh", x, tanh_f32(x), (x as f64).tanh(), 7, 0.0);
            if x.abs() < 2.0 {
                close("tanh", x, tanh_f32(x), (x as f64).tanh(), 4, 0.0);
            }
            close("sigmoid", x, sigmoid_f32(x), 1.0 / (1.0 + (-(x as f64)).exp()), 3, 0.0);
        });
        for e in -149..-2 {
            let x = 1.3 * 2f32.powi(e);
            close("tanh", x, tanh_f32(x), (x as f64).tanh(), 4, 0.0);
            close("tanh", -x, tanh_f32(-x), (-x as f64).tanh(), 4, 0.0);
            close("tanh", 1e3 * x, tanh_f32(1e3 * x), (1e3 * x as f64).tanh(), 7, 0.0);
        }
        for x in [-100.0f32, -88.0, 88.0, 100.0, 1e30] {
            close("sigmoid", x, sigmoid_f32(x), 1.0 / (1.0 + (-(x as f64)).exp()), 3, 1e-38);
        }
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert_eq!(sigmoid_f32(f32::NEG_INFINITY), 0.0);
        assert!(tanh_f32(f32::NAN).is_nan() && sigmoid_f32(f32::NAN).is_nan());
    }

    #[test]
    fn erf_is_accurate_over_the_range() {
        sweep(-6.0, 6.0, |x| close("erf", x, erf_f32(x), erf_reference(x as f64), 8, 0.0));
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
        assert!(erf_f32(f32::NAN).is_nan());
    }

    #[test]
    fn erfc_is_accurate_in_relative_terms_over_the_range() {
        // Dense over [-6, 9.5]: negative x (results near 2), the switch at
        // |x| = 0.5, the tail down to the smallest normal results (x ≈ 9.19)
        // and the subnormal ones beyond.
        sweep(-6.0, 9.5, |x| {
            let got = erfc_f32(x);
            let want = erfc_reference(x as f64);
            if want < f32::MIN_POSITIVE as f64 {
                // Subnormal or flushed: off by less than the smallest normal.
                assert!(
                    (got as f64 - want).abs() < f32::MIN_POSITIVE as f64,
                    "erfc({x:e}) = {got:e}, expected {want:e}"
                );
            } else {
                close("erfc", x, got, want, ERFC_MAX_ULPS, 0.0);
            }
        });
        // Around the switch from 1 - erf to the fit, ulp by ulp.
        for x in [0.5f32, -0.5] {
            let (mut below, mut above) = (x, x);
            for _ in 0..1000 {
                for v in [below, above] {
                    close("erfc", v, erfc_f32(v), erfc_reference(v as f64), ERFC_MAX_ULPS, 0.0);
                }
                (below, above) = (below.next_down(), above.next_up());
            }
        }
        // Tiny arguments: erfc rounds to 1 (from 2^-26 down: erf(2^-25)
        // is just above half an ulp below 1).
        for e in -149..-25 {
            assert_eq!(erfc_f32(2f32.powi(e)), 1.0);
            assert_eq!(erfc_f32(-(2f32.powi(e))), 1.0);
        }
        assert_eq!(erfc_f32(0.0), 1.0);
        assert_eq!(erfc_f32(-0.0), 1.0);
        assert_eq!(erfc_f32(f32::INFINITY), 0.0);
        assert_eq!(erfc_f32(10.5), 0.0);
        assert_eq!(erfc_f32(1e30), 0.0);
        assert_eq!(erfc_f32(f32::NEG_INFINITY), 2.0);
        assert_eq!(erfc_f32(-1e30), 2.0);
        assert!(erfc_f32(f32::NAN).is_nan());
    }

    /// The bound [`erfc_f32`] is tested to (docs/kernels.md quotes it).
    const ERFC_MAX_ULPS: u32 = 8;

    #[test]
    fn erfc_keeps_relative_precision_where_one_minus_erf_cancels() {
        // Where 1 - erf(x) is 0 in float32, erfc is not.
        for (x, want) in
            [(4.0f32, 1.541_725_790_028e-8f64), (6.0, 2.151_973_671_249_891e-17), (9.0, 4.137_031_746_513_81e-37)]
        {
            assert_eq!(1.0 - erf_f32(x), 0.0, "{x}");
            let got = erfc_f32(x) as f64;
            assert!(((got - want) / want).abs() < 1e-6, "erfc({x}) = {got:e}, expected {want:e}");
        }
    }
}
