//! Stateless random ops, bit-identical to TensorFlow's CPU kernels: the
//! same seed gives the same initial weights and dropout masks on either
//! device.
//!
//! TensorFlow's stateless ops run the counter-based Philox4x32-10 generator.
//! A seed pair is first scrambled into a key and a starting counter
//! ([`key_counter_from_seed`], `StatelessRandomGetKeyCounter`); an output is
//! then filled in groups of 4 values, group `g` computed from the block at
//! counter `start + g` (uniform, normal), or — for the truncated normal,
//! which rejects samples — from a stream of single 32-bit samples starting at
//! counter `start + 256 g`. Groups are independent, so large outputs are
//! split across the pool on group boundaries with identical results.
//!
//! Conversions follow TensorFlow's `random_distributions.h`: a uniform float
//! puts the low 23 bits of a sample into the mantissa of a number in [1, 2)
//! and subtracts 1; normals use Box-Muller on two uniforms (with the first
//! clamped to 1e-7, the angle computed in double precision as TensorFlow's
//! `2.0f * M_PI * u` is, and `logf`/`sinf`/`cosf` of the C library TensorFlow
//! also calls); the truncated normal keeps values with `|x| < 2`.
//!
//! Registered for float32 outputs, and the V2 ops for float16/bfloat16 too
//! (mixed precision's dropout), with `shape`, `alg` and `seed` in
//! host memory; `key` and `counter` are read from device memory (which is
//! host-addressable).

use super::pool;
use super::shape::{element_count, ShapeDisplay};
use super::{expect_inputs, types, DType, Kernel, KernelDef, OpContext, Tensor};
use crate::error::Error;

const V2_TYPES: &[(&str, &[DType])] = &[("dtype", types::F32), ("Tshape", types::INDEX)];
/// Mixed precision: dropout draws its mask in the layer's type.
const V2_NARROW_TYPES: &[(&str, &[DType])] = &[("dtype", types::HALF), ("Tshape", types::INDEX)];
const V1_TYPES: &[(&str, &[DType])] = &[("dtype", types::F32), ("T", types::INDEX), ("Tseed", types::INDEX)];
const SEED_TYPES: &[(&str, &[DType])] = &[("Tseed", types::INDEX)];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("StatelessRandomGetKeyCounter", SEED_TYPES, |_| Ok(Box::new(GetKeyCounter { with_alg: false })))
        .host_memory(&["seed"]),
    KernelDef::new("StatelessRandomGetKeyCounterAlg", SEED_TYPES, |_| Ok(Box::new(GetKeyCounter { with_alg: true })))
        .host_memory(&["seed", "alg"]),
    KernelDef::new("StatelessRandomUniformV2", V2_NARROW_TYPES, |a| narrow_v2(a, Distribution::Uniform))
        .host_memory(&["shape", "alg"]),
    KernelDef::new("StatelessRandomNormalV2", V2_NARROW_TYPES, |a| narrow_v2(a, Distribution::Normal))
        .host_memory(&["shape", "alg"]),
    KernelDef::new("StatelessTruncatedNormalV2", V2_NARROW_TYPES, |a| narrow_v2(a, Distribution::TruncatedNormal))
        .host_memory(&["shape", "alg"]),
    KernelDef::new("StatelessRandomUniformV2", V2_TYPES, |_| Ok(Box::new(RandomV2(Distribution::Uniform))))
        .host_memory(&["shape", "alg"]),
    KernelDef::new("StatelessRandomNormalV2", V2_TYPES, |_| Ok(Box::new(RandomV2(Distribution::Normal))))
        .host_memory(&["shape", "alg"]),
    KernelDef::new("StatelessTruncatedNormalV2", V2_TYPES, |_| Ok(Box::new(RandomV2(Distribution::TruncatedNormal))))
        .host_memory(&["shape", "alg"]),
    KernelDef::new("StatelessRandomUniform", V1_TYPES, |_| Ok(Box::new(RandomV1(Distribution::Uniform))))
        .host_memory(&["shape", "seed"]),
    KernelDef::new("StatelessRandomNormal", V1_TYPES, |_| Ok(Box::new(RandomV1(Distribution::Normal))))
        .host_memory(&["shape", "seed"]),
    KernelDef::new("StatelessTruncatedNormal", V1_TYPES, |_| Ok(Box::new(RandomV1(Distribution::TruncatedNormal))))
        .host_memory(&["shape", "seed"]),
];

// ------------------------------------------------------------------ Philox

/// Philox4x32-10 at one key: a pure function from a 128-bit counter to four
/// 32-bit samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Philox {
    pub key: [u32; 2],
    /// The counter of the next block, words least significant first.
    pub counter: [u32; 4],
}

const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

/// TensorFlow's RNG_ALG_PHILOX and RNG_ALG_AUTO_SELECT (Philox on CPU).
const ALG_PHILOX: i64 = 1;
const ALG_AUTO_SELECT: i64 = 3;

/// Samples the truncated normal reserves per output group of 4 (TensorFlow's
/// `kReservedSamplesPerOutput` 256 × 4 / 4 samples per block).
const TRUNCATED_BLOCKS_PER_GROUP: u128 = 256;

impl Philox {
    /// The four samples at `counter`.
    #[inline]
    pub fn block(key: [u32; 2], counter: [u32; 4]) -> [u32; 4] {
        let mut c = counter;
        let mut k = key;
        for round in 0..10 {
            let p0 = u64::from(PHILOX_M0) * u64::from(c[0]);
            let p1 = u64::from(PHILOX_M1) * u64::from(c[2]);
            c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
            if round < 9 {
                k = [k[0].wrapping_add(PHILOX_W0), k[1].wrapping_add(PHILOX_W1)];
            }
        }
        c
    }

    fn counter_u128(&self) -> u128 {
        self.counter.iter().rev().fold(0u128, |acc, &w| (acc << 32) | u128::from(w))
    }

    /// The generator `blocks` blocks further on (the counter wraps at 2^128).
    pub fn skipped(&self, blocks: u128) -> Philox {
        let c = self.counter_u128().wrapping_add(blocks);
        Philox { key: self.key, counter: [c as u32, (c >> 32) as u32, (c >> 64) as u32, (c >> 96) as u32] }
    }

    /// The next block, advancing the counter by one.
    #[inline]
    pub fn next_block(&mut self) -> [u32; 4] {
        let out = Philox::block(self.key, self.counter);
        *self = self.skipped(1);
        out
    }
}

/// TensorFlow's seed scrambling (`GenerateKey`): the seed pair, as 64-bit
/// values (an int32 seed sign-extends), is the counter of one Philox block at
/// a fixed key; that block's first two words become the key, the last two
/// the high half of the starting counter.
pub fn key_counter_from_seed(seed0: u64, seed1: u64) -> Philox {
    let counter = [seed0 as u32, (seed0 >> 32) as u32, seed1 as u32, (seed1 >> 32) as u32];
    let mix = Philox::block([0x3ec8_f720, 0x0246_1e29], counter);
    Philox { key: [mix[0], mix[1]], counter: [0, 0, mix[2], mix[3]] }
}

// ----------------------------------------------------------- conversions

/// A float16 in [0, 1) from the low 10 bits of a sample (TensorFlow builds
/// `1.m` in float16 bits and subtracts 1), as the float32 it equals.
#[inline(always)]
pub fn uint32_to_half(x: u32) -> f32 {
    (x & 0x3ff) as f32 / 1024.0
}

/// A bfloat16 in [0, 1) from the low 7 bits of a sample, likewise.
#[inline(always)]
pub fn uint32_to_bfloat16(x: u32) -> f32 {
    (x & 0x7f) as f32 / 128.0
}

/// A float16/bfloat16 draw: computed in float32 and rounded once, which is
/// what TensorFlow does for normals (Box-Muller in float32, then the
/// conversion); its uniforms use fewer bits of each sample
/// ([`Distribution::UniformHalf`], [`Distribution::UniformBfloat16`]), whose
/// values the rounding keeps exactly.
fn narrow_v2(attrs: &dyn super::Attrs, distribution: Distribution) -> Result<Box<dyn Kernel>, Error> {
    let distribution = match (distribution, attrs.dtype("dtype")?) {
        (Distribution::Uniform, DType::F16) => Distribution::UniformHalf,
        (Distribution::Uniform, DType::BF16) => Distribution::UniformBfloat16,
        (other, _) => other,
    };
    Ok(super::half::widened(Box::new(RandomV2(distribution))))
}

/// A float in [0, 1) from the low 23 bits of a sample.
#[inline(always)]
pub fn uint32_to_float(x: u32) -> f32 {
    f32::from_bits((x & 0x7f_ffff) | 0x3f80_0000) - 1.0
}

/// TensorFlow's `BoxMullerFloat`: two normals from two samples.
#[inline(always)]
pub fn box_muller(x0: u32, x1: u32) -> (f32, f32) {
    const EPSILON: f32 = 1.0e-7;
    let mut u1 = uint32_to_float(x0);
    if u1 < EPSILON {
        u1 = EPSILON;
    }
    // `2.0f * M_PI * u` is a double product (M_PI is a double) rounded once.
    let v1 = (2.0 * std::f64::consts::PI * f64::from(uint32_to_float(x1))) as f32;
    let u2 = (-2.0f32 * u1.ln()).sqrt();
    (v1.sin() * u2, v1.cos() * u2)
}

/// The distributions the stateless ops sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    /// Uniform for a float16 output (10 bits of each sample).
    UniformHalf,
    /// Uniform for a bfloat16 output (7 bits of each sample).
    UniformBfloat16,
    Normal,
    TruncatedNormal,
}

impl Distribution {
    fn op_name(self, v2: bool) -> &'static str {
        match (self, v2) {
            (Distribution::Uniform | Distribution::UniformHalf | Distribution::UniformBfloat16, true) => {
                "StatelessRandomUniformV2"
            }
            (Distribution::Normal, true) => "StatelessRandomNormalV2",
            (Distribution::TruncatedNormal, true) => "StatelessTruncatedNormalV2",
            (Distribution::Uniform | Distribution::UniformHalf | Distribution::UniformBfloat16, false) => {
                "StatelessRandomUniform"
            }
            (Distribution::Normal, false) => "StatelessRandomNormal",
            (Distribution::TruncatedNormal, false) => "StatelessTruncatedNormal",
        }
    }

    /// The 4 values of output group `group` (values `4 group ..`).
    #[inline]
    fn group(self, gen: &Philox, group: u128) -> [f32; 4] {
        match self {
            Distribution::Uniform => Philox::block(gen.key, gen.skipped(group).counter).map(uint32_to_float),
            Distribution::UniformHalf => Philox::block(gen.key, gen.skipped(group).counter).map(uint32_to_half),
            Distribution::UniformBfloat16 => Philox::block(gen.key, gen.skipped(group).counter).map(uint32_to_bfloat16),
            Distribution::Normal => {
                let s = Philox::block(gen.key, gen.skipped(group).counter);
                let (a, b) = box_muller(s[0], s[1]);
                let (c, d) = box_muller(s[2], s[3]);
                [a, b, c, d]
            }
            Distribution::TruncatedNormal => {
                // Single samples from consecutive blocks, two per Box-Muller
                // pair; a block's 4 samples are exactly two pairs.
                let mut g = gen.skipped(group.wrapping_mul(TRUNCATED_BLOCKS_PER_GROUP));
                let mut out = [0.0f32; 4];
                let mut filled = 0;
                loop {
                    let s = g.next_block();
                    for pair in [(s[0], s[1]), (s[2], s[3])] {
                        let (a, b) = box_muller(pair.0, pair.1);
                        for v in [a, b] {
                            if v.abs() < 2.0 {
                                out[filled] = v;
                                filled += 1;
                                if filled == 4 {
                                    return out;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Fills `out` (the values from `4 * first_group` on).
    fn fill_range(self, gen: &Philox, first_group: usize, out: &mut [f32]) {
        for (i, chunk) in out.chunks_mut(4).enumerate() {
            let values = self.group(gen, (first_group + i) as u128);
            chunk.copy_from_slice(&values[..chunk.len()]);
        }
    }

    /// Fills a whole output from generator `gen`.
    pub fn fill(self, gen: &Philox, out: &mut [f32]) {
        // Normals cost ~20 ns a value, uniforms ~2 ns: split earlier for them.
        let min_parallel = match self {
            Distribution::Uniform | Distribution::UniformHalf | Distribution::UniformBfloat16 => 32 * 1024,
            _ => 4 * 1024,
        };
        if out.len() < min_parallel || pool::threads() == 1 {
            self.fill_range(gen, 0, out);
            return;
        }
        // Chunks are whole groups so each starts at a group boundary.
        let chunk = (out.len().div_ceil(pool::threads() * 4).max(1024)).next_multiple_of(4);
        pool::for_each_chunk_mut(out, chunk, |i, part| self.fill_range(gen, i * chunk / 4, part));
    }
}

// ---------------------------------------------------------------- kernels

/// The output shape from a `shape` input (a vector of non-negative sizes).
fn output_shape(op: &str, shape: &Tensor) -> Result<Vec<usize>, Error> {
    if shape.rank() != 1 {
        return Err(Error::InvalidArgument(format!(
            "{op}: shape must be a vector of {{int32,int64}}, got shape {}",
            ShapeDisplay(shape.shape())
        )));
    }
    let dims = shape.to_i64s()?;
    let out: Vec<usize> =
        dims.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(|_| {
            Error::InvalidArgument(format!("{op}: dimensions must be non-negative, got shape {dims:?}"))
        })?;
    if element_count(&out).is_none_or(|n| isize::try_from(n).is_err()) {
        return Err(Error::InvalidArgument(format!("{op}: shape {} has too many elements", ShapeDisplay(&out))));
    }
    Ok(out)
}

/// The two seed values of a `seed` input of shape [2].
fn seed_pair(op: &str, seed: &Tensor) -> Result<(u64, u64), Error> {
    if seed.shape() != [2] {
        return Err(Error::InvalidArgument(format!(
            "{op}: seed must have shape [2], not {}",
            ShapeDisplay(seed.shape())
        )));
    }
    let values = seed.to_i64s()?;
    // An int32 seed converts to uint64 by sign extension, as in TensorFlow.
    Ok((values[0] as u64, values[1] as u64))
}

#[derive(Debug)]
struct GetKeyCounter {
    with_alg: bool,
}

impl Kernel for GetKeyCounter {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.with_alg { "StatelessRandomGetKeyCounterAlg" } else { "StatelessRandomGetKeyCounter" };
        expect_inputs(op, ctx, 1)?;
        let (seed0, seed1) = seed_pair(op, &ctx.input(0)?)?;
        let gen = key_counter_from_seed(seed0, seed1);
        let mut key = ctx.allocate_output(0, &[1])?;
        key.data_mut::<u64>()?[0] = u64::from(gen.key[0]) | (u64::from(gen.key[1]) << 32);
        let mut counter = ctx.allocate_output(1, &[2])?;
        let c = gen.counter;
        counter
            .data_mut::<u64>()?
            .copy_from_slice(&[u64::from(c[0]) | (u64::from(c[1]) << 32), u64::from(c[2]) | (u64::from(c[3]) << 32)]);
        if self.with_alg {
            let mut alg = ctx.allocate_output(2, &[])?;
            alg.data_mut::<i32>()?[0] = ALG_PHILOX as i32;
        }
        Ok(())
    }
}

/// `StatelessRandom*V2(shape, key, counter, alg)`.
#[derive(Debug)]
struct RandomV2(Distribution);

impl Kernel for RandomV2 {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = self.0.op_name(true);
        expect_inputs(op, ctx, 4)?;
        let shape = output_shape(op, &ctx.input(0)?)?;
        let (key, counter, alg) = (ctx.input(1)?, ctx.input(2)?, ctx.input(3)?);
        if alg.rank() != 0 {
            return Err(Error::InvalidArgument(format!(
                "{op}: alg must be a scalar, got shape {}",
                ShapeDisplay(alg.shape())
            )));
        }
        let alg = alg.to_i64s()?[0];
        if alg != ALG_PHILOX && alg != ALG_AUTO_SELECT {
            return Err(Error::InvalidArgument(format!(
                "{op}: unsupported algorithm id {alg} (tfwasm implements Philox, 1, and auto-select, 3)"
            )));
        }
        if key.rank() != 1 || key.len() != 1 {
            return Err(Error::InvalidArgument(format!(
                "{op}: key must have shape [1], not {}. (Note that key must have shape [1] for Philox.)",
                ShapeDisplay(key.shape())
            )));
        }
        if counter.rank() != 1 || counter.len() < 2 {
            return Err(Error::InvalidArgument(format!(
                "{op}: counter must be a vector of length at least 2, got shape {}",
                ShapeDisplay(counter.shape())
            )));
        }
        let k = key.data::<u64>()?[0];
        let c = counter.data::<u64>()?;
        let gen = Philox {
            key: [k as u32, (k >> 32) as u32],
            counter: [c[0] as u32, (c[0] >> 32) as u32, c[1] as u32, (c[1] >> 32) as u32],
        };
        let mut out = ctx.allocate_output(0, &shape)?;
        self.0.fill(&gen, out.data_mut()?);
        Ok(())
    }
}

/// `StatelessRandom*(shape, seed)`: the seed scrambled as
/// `StatelessRandomGetKeyCounter` does.
#[derive(Debug)]
struct RandomV1(Distribution);

impl Kernel for RandomV1 {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = self.0.op_name(false);
        expect_inputs(op, ctx, 2)?;
        let shape = output_shape(op, &ctx.input(0)?)?;
        let (seed0, seed1) = seed_pair(op, &ctx.input(1)?)?;
        let gen = key_counter_from_seed(seed0, seed1);
        let mut out = ctx.allocate_output(0, &shape)?;
        self.0.fill(&gen, out.data_mut()?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalContext;

    #[test]
    fn philox_matches_the_random123_known_answers() {
        // Random123's kat_vectors for philox4x32_10.
        assert_eq!(Philox::block([0, 0], [0, 0, 0, 0]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(
            Philox::block([0xffffffff, 0xffffffff], [0xffffffff; 4]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            Philox::block([0xa4093822, 0x299f31d0], [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344]),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn skipping_carries_across_words_and_wraps() {
        let g = Philox { key: [1, 2], counter: [u32::MAX, u32::MAX, 5, 0] };
        assert_eq!(g.skipped(1).counter, [0, 0, 6, 0]);
        assert_eq!(g.skipped(2).counter, [1, 0, 6, 0]);
        let top = Philox { key: [1, 2], counter: [u32::MAX; 4] };
        assert_eq!(top.skipped(1).counter, [0; 4]);
    }

    #[test]
    fn uniform_floats_use_the_mantissa_bits() {
        assert_eq!(uint32_to_float(0), 0.0);
        assert_eq!(uint32_to_float(0xffff_ffff), 1.0 - f32::EPSILON);
        assert_eq!(uint32_to_float(0x0040_0000), 0.5);
        assert_eq!(uint32_to_float(0xff40_0000), 0.5);
        // The narrow types' draws: their own mantissa bits, each value exact
        // in the narrow type (so rounding the float32 keeps it).
        assert_eq!((uint32_to_half(0xffff_ffff), uint32_to_half(0x200)), (1.0 - 2f32.powi(-10), 0.5));
        assert_eq!((uint32_to_bfloat16(0xffff_ffff), uint32_to_bfloat16(0x40)), (1.0 - 2f32.powi(-7), 0.5));
        for x in (0..1u32 << 16).map(|k| k.wrapping_mul(0x9e37_79b9)) {
            assert_eq!(::half::f16::from_f32(uint32_to_half(x)).to_f32(), uint32_to_half(x));
            assert_eq!(::half::bf16::from_f32(uint32_to_bfloat16(x)).to_f32(), uint32_to_bfloat16(x));
        }
    }

    fn run_v2(dist: Distribution, shape: &[i64]) -> Vec<f32> {
        let seed = Tensor::from_vec(&[2], vec![7i64, 11]).unwrap();
        let kc = LocalContext::run(&GetKeyCounter { with_alg: false }, vec![seed], &[DType::U64, DType::U64]).unwrap();
        let inputs = vec![
            Tensor::from_vec(&[shape.len()], shape.to_vec()).unwrap(),
            Tensor::from_vec(&[1], kc[0].to_vec::<u64>().unwrap()).unwrap(),
            Tensor::from_vec(&[2], kc[1].to_vec::<u64>().unwrap()).unwrap(),
            Tensor::from_vec(&[], vec![3i32]).unwrap(),
        ];
        let out = LocalContext::run(&RandomV2(dist), inputs, &[DType::F32]).unwrap();
        let expected: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        assert_eq!(out[0].shape(), expected.as_slice());
        out[0].to_vec().unwrap()
    }

    /// The same values in scalar order: group `g` from counter + g.
    fn reference(dist: Distribution, len: usize) -> Vec<f32> {
        let gen = key_counter_from_seed(7, 11);
        let mut out = Vec::new();
        let mut g = 0u128;
        while out.len() < len {
            out.extend_from_slice(&dist.group(&gen, g));
            g += 1;
        }
        out.truncate(len);
        out
    }

    #[test]
    fn outputs_fill_every_element_and_match_scalar_order() {
        for dist in [Distribution::Uniform, Distribution::Normal, Distribution::TruncatedNormal] {
            for shape in [&[][..], &[0], &[3, 0], &[1], &[7], &[5, 3], &[101, 97], &[300, 301]] {
                let values = run_v2(dist, shape);
                let len = shape.iter().product::<i64>() as usize;
                assert_eq!(values.len(), len);
                let reference = reference(dist, len);
                assert_eq!(
                    values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    reference.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{dist:?} {shape:?}"
                );
                match dist {
                    Distribution::Uniform | Distribution::UniformHalf | Distribution::UniformBfloat16 => {
                        assert!(values.iter().all(|&v| (0.0..1.0).contains(&v)))
                    }
                    Distribution::Normal => assert!(values.iter().all(|v| v.is_finite())),
                    Distribution::TruncatedNormal => assert!(values.iter().all(|v| v.abs() < 2.0)),
                }
            }
        }
    }

    #[test]
    fn statistics_are_plausible() {
        let n = 40_000;
        for (dist, mean, var) in [
            (Distribution::Uniform, 0.5, 1.0 / 12.0),
            (Distribution::Normal, 0.0, 1.0),
            (Distribution::TruncatedNormal, 0.0, 0.7737),
        ] {
            let v = run_v2(dist, &[n]);
            let m = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
            let s = v.iter().map(|&x| (f64::from(x) - m).powi(2)).sum::<f64>() / n as f64;
            assert!((m - mean).abs() < 0.02 && (s - var).abs() < 0.03, "{dist:?}: mean {m} var {s}");
        }
    }

    #[test]
    fn v1_equals_v2_with_get_key_counter() {
        for dist in [Distribution::Uniform, Distribution::Normal, Distribution::TruncatedNormal] {
            let inputs =
                vec![Tensor::from_vec(&[2], vec![4i32, 9]).unwrap(), Tensor::from_vec(&[2], vec![7i32, 11]).unwrap()];
            let v1 = LocalContext::run(&RandomV1(dist), inputs, &[DType::F32]).unwrap();
            assert_eq!(v1[0].to_vec::<f32>().unwrap(), run_v2(dist, &[4, 9]));
        }
    }

    #[test]
    fn int32_seeds_sign_extend() {
        let a = Tensor::from_vec(&[2], vec![-1i32, 5]).unwrap();
        let b = Tensor::from_vec(&[2], vec![-1i64, 5]).unwrap();
        let ka = LocalContext::run(&GetKeyCounter { with_alg: true }, vec![a], &[DType::U64, DType::U64, DType::I32])
            .unwrap();
        let kb = LocalContext::run(&GetKeyCounter { with_alg: true }, vec![b], &[DType::U64, DType::U64, DType::I32])
            .unwrap();
        assert_eq!(ka[0].to_vec::<u64>().unwrap(), kb[0].to_vec::<u64>().unwrap());
        assert_eq!(ka[1].to_vec::<u64>().unwrap(), kb[1].to_vec::<u64>().unwrap());
        assert_eq!(ka[1].to_vec::<u64>().unwrap()[0], 0);
        assert_eq!(ka[2].to_vec::<i32>().unwrap(), vec![1]);
    }

    #[test]
    fn bad_arguments_are_invalid_argument_errors() {
        let seed = Tensor::from_vec(&[3], vec![1i32, 2, 3]).unwrap();
        let err =
            LocalContext::run(&GetKeyCounter { with_alg: false }, vec![seed], &[DType::U64, DType::U64]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        let inputs = vec![
            Tensor::from_vec(&[1], vec![-3i32]).unwrap(),
            Tensor::from_vec(&[1], vec![1u64]).unwrap(),
            Tensor::from_vec(&[2], vec![1u64, 2]).unwrap(),
            Tensor::from_vec(&[], vec![1i32]).unwrap(),
        ];
        assert!(matches!(
            LocalContext::run(&RandomV2(Distribution::Uniform), inputs, &[DType::F32]),
            Err(Error::InvalidArgument(_))
        ));
        let inputs = vec![
            Tensor::from_vec(&[1], vec![3i32]).unwrap(),
            Tensor::from_vec(&[1], vec![1u64]).unwrap(),
            Tensor::from_vec(&[2], vec![1u64, 2]).unwrap(),
            Tensor::from_vec(&[], vec![2i32]).unwrap(),
        ];
        assert!(matches!(
            LocalContext::run(&RandomV2(Distribution::Uniform), inputs, &[DType::F32]),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[cfg(test)]
mod tf_answers {
    use super::*;

    fn bits(dist: Distribution, n: usize) -> Vec<u32> {
        let gen = key_counter_from_seed(7, 11);
        let mut out = vec![0.0f32; n];
        dist.fill(&gen, &mut out);
        out.iter().map(|v| v.to_bits()).collect()
    }

    /// Values TensorFlow 2.21's CPU kernels give for seed [7, 11] (int64).
    #[test]
    fn matches_tensorflow_cpu() {
        let gen = key_counter_from_seed(7, 11);
        assert_eq!(u64::from(gen.key[0]) | (u64::from(gen.key[1]) << 32), 0x567d575d50ff6023);
        assert_eq!(u64::from(gen.counter[2]) | (u64::from(gen.counter[3]) << 32), 0xf0995f8592fea59b);
        assert_eq!(
            bits(Distribution::Uniform, 6),
            [0x3f39a29a, 0x3d9e0130, 0x3f0abca4, 0x3e864ef0, 0x3f0c4572, 0x3ec6c784]
        );
        assert_eq!(
            bits(Distribution::Normal, 6),
            [0x3ebf48d3, 0x3f359972, 0x3f8d41cf, 0xbdaf513f, 0x3f355fb2, 0xbf565fd5]
        );
        assert_eq!(
            bits(Distribution::TruncatedNormal, 6),
            [0x3ebf48d3, 0x3f359972, 0x3f8d41cf, 0xbdaf513f, 0x3ded4234, 0xbf59f5fe]
        );
    }
}
