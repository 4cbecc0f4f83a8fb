//! Float32 matrix products for every kernel that multiplies matrices
//! (`MatMul`, `BatchMatMulV2`, `Einsum`, the convolutions), over two
//! well-kept backends:
//!
//! - [`gemm`](https://crates.io/crates/gemm), pure Rust with run-time SIMD
//!   dispatch: every product unless the next line applies. It is the faster
//!   of the two for the small and mid-sized products of Keras layers
//!   (128·784·512 on one core: 60 against 48 GFLOP/s) and for narrow outputs
//!   (a convolution's 64 channels).
//! - [BLIS](https://github.com/flame/blis), through `blis-src`, built for
//!   AVX2/FMA (its `haswell` configuration, see `.cargo/config.toml`): large
//!   products whose output is at least [`BLIS_MIN_SIDE`] wide both ways, on
//!   x86_64 CPUs with AVX2 and FMA. Its packing and blocking reach
//!   OpenBLAS-class throughput where `gemm` stops short: 2048³ on the 2-core
//!   VM, one block per core, 127–132 against 87–104 GFLOP/s (`gemm`'s own
//!   threading), 1024³ 119–128 against 95–107.
//!
//! Both take row and column strides, so a transposed operand is never
//! copied. BLIS runs single-threaded (`serial` build); a large product is cut
//! into one block of output rows or columns per pool thread instead, so BLIS
//! never starts threads of its own next to ours.

use super::pool;

/// `m·n·k` from which a product may go to BLIS: below it `gemm` is as fast
/// or faster (`matmul`'s mid-sized products split into blocks stay on it).
pub const BLIS_MIN_WORK: usize = 256 * 256 * 1024;

/// Smallest output side (`m` and `n`) BLIS is used for. With 64 output
/// columns (a convolution's channels) `gemm` was faster at every size
/// measured (43264·288·64 on two cores: 90 against 71 GFLOP/s).
pub const BLIS_MIN_SIDE: usize = 256;

/// A strided read-only matrix: element `(i, j)` at
/// `ptr + i·row_stride + j·col_stride`.
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub ptr: *const f32,
    pub row_stride: isize,
    pub col_stride: isize,
}

/// A row-major destination: element `(i, j)` at `ptr + i·row_stride + j`.
#[derive(Debug, Clone, Copy)]
pub struct Destination {
    pub ptr: *mut f32,
    pub row_stride: isize,
}

// SAFETY: the pointers are only dereferenced inside `multiply_serial` /
// `multiply_parallel`, whose callers guarantee they stay valid and that the
// destination blocks written by different threads are disjoint.
unsafe impl Send for Operand {}
unsafe impl Sync for Operand {}
unsafe impl Send for Destination {}
unsafe impl Sync for Destination {}

impl Operand {
    /// The same matrix from element `(row, col)` on (a block's corner).
    pub fn at(self, row: usize, col: usize) -> Operand {
        let offset = row as isize * self.row_stride + col as isize * self.col_stride;
        Operand { ptr: self.ptr.wrapping_offset(offset), ..self }
    }
}

impl Destination {
    /// The same matrix from element `(row, col)` on.
    pub fn at(self, row: usize, col: usize) -> Destination {
        Destination { ptr: self.ptr.wrapping_offset(row as isize * self.row_stride + col as isize), ..self }
    }
}

/// Which backend a product of this size goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Gemm,
    Blis,
}

/// The backend for an `m×k · k×n` product on this CPU.
pub fn backend(m: usize, n: usize, k: usize) -> Backend {
    let large = m.saturating_mul(n).saturating_mul(k) >= BLIS_MIN_WORK && m.min(n) >= BLIS_MIN_SIDE;
    if large && blis::available() {
        Backend::Blis
    } else {
        Backend::Gemm
    }
}

/// `dst[m,n] = lhs[m,k] · rhs[k,n]`, or `+=` when `accumulate`, on the
/// calling thread.
///
/// # Safety
///
/// Every element `lhs(i, p)`, `rhs(p, j)` and `dst(i, j)` for `i < m`,
/// `j < n`, `p < k` lies inside a live allocation; `dst` aliases neither
/// operand, and no other thread reads or writes those `dst` elements during
/// the call. `m`, `n`, `k` and every offset fit in `isize`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn multiply_serial(
    m: usize,
    n: usize,
    k: usize,
    dst: Destination,
    accumulate: bool,
    lhs: Operand,
    rhs: Operand,
) {
    if m == 0 || n == 0 {
        return;
    }
    match backend(m, n, k) {
        // SAFETY: forwarded from this function's contract.
        Backend::Blis => unsafe { blis::sgemm(m, n, k, dst, accumulate, lhs, rhs) },
        // SAFETY: forwarded from this function's contract.
        Backend::Gemm => unsafe { gemm_crate(m, n, k, dst, accumulate, lhs, rhs, gemm::Parallelism::None) },
    }
}

/// [`multiply_serial`] spread over the compute pool: for BLIS one block of
/// output rows (or columns, when the output is wider than tall) per thread,
/// shared with the calling thread; for `gemm` its own threading inside the
/// pool, which packs each panel once for all threads.
///
/// # Safety
///
/// As for [`multiply_serial`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn multiply_parallel(
    m: usize,
    n: usize,
    k: usize,
    dst: Destination,
    accumulate: bool,
    lhs: Operand,
    rhs: Operand,
) {
    if m == 0 || n == 0 {
        return;
    }
    let threads = pool::threads();
    match backend(m, n, k) {
        Backend::Blis if threads > 1 => {
            // Block edges on multiples of 48, a whole number of BLIS's
            // 6×16 register tiles either way.
            let edge = |len: usize, i: usize| (len * i / threads).next_multiple_of(48).min(len);
            pool::for_each_index(threads, |i| {
                let (rows, cols) =
                    if m >= n { (edge(m, i)..edge(m, i + 1), 0..n) } else { (0..m, edge(n, i)..edge(n, i + 1)) };
                if rows.is_empty() || cols.is_empty() {
                    return;
                }
                let (lhs, rhs, dst) = (lhs.at(rows.start, 0), rhs.at(0, cols.start), dst.at(rows.start, cols.start));
                // SAFETY: the block is inside the product (so inside the
                // caller's allocations), and blocks of different indices
                // cover disjoint rows or columns of `dst`.
                unsafe { blis::sgemm(rows.len(), cols.len(), k, dst, accumulate, lhs, rhs) }
            });
        }
        // SAFETY: forwarded from this function's contract.
        Backend::Blis => unsafe { blis::sgemm(m, n, k, dst, accumulate, lhs, rhs) },
        Backend::Gemm => {
            let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
            // SAFETY: forwarded from this function's contract; gemm's rayon
            // mode writes disjoint parts of `dst` from the pool's threads.
            pool::install(|| unsafe { gemm_crate(m, n, k, dst, accumulate, lhs, rhs, parallelism) });
        }
    }
}

/// # Safety
///
/// As for [`multiply_serial`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_crate(
    m: usize,
    n: usize,
    k: usize,
    dst: Destination,
    accumulate: bool,
    lhs: Operand,
    rhs: Operand,
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller guarantees the addressed elements are in bounds and
    // unaliased; f32 is a type gemm implements, so it does not panic on
    // dispatch. With `read_dst == false` gemm only writes `dst` (alpha is
    // then ignored); with `true` it computes 1·dst + 1·lhs·rhs.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.ptr,
            1,
            dst.row_stride,
            accumulate,
            lhs.ptr,
            lhs.col_stride,
            lhs.row_stride,
            rhs.ptr,
            rhs.col_stride,
            rhs.row_stride,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        )
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod blis {
    use super::{Destination, Operand};
    use std::ffi::c_int;
    use std::sync::OnceLock;

    // Links libblis.a, which blis-src builds from its vendored sources.
    use blis_src as _;

    /// BLIS's `trans_t` value for an operand used as stored.
    const BLIS_NO_TRANSPOSE: c_int = 0;

    extern "C" {
        /// BLIS's typed `gemm` (`bli_sgemm`, frame/3/bli_l3_tapi.h): `c =
        /// beta·c + alpha·op(a)·op(b)` with general strides. `dim_t` and
        /// `inc_t` are 64-bit on 64-bit targets; `trans_t` is a C enum.
        /// With `beta == 0` BLIS writes `c` without reading it.
        fn bli_sgemm(
            transa: c_int,
            transb: c_int,
            m: i64,
            n: i64,
            k: i64,
            alpha: *const f32,
            a: *const f32,
            rs_a: i64,
            cs_a: i64,
            b: *const f32,
            rs_b: i64,
            cs_b: i64,
            beta: *const f32,
            c: *mut f32,
            rs_c: i64,
            cs_c: i64,
        );
    }

    /// Whether this CPU runs the kernels BLIS was built with (AVX2, FMA).
    /// `TFWASM_BLIS=0` turns BLIS off (every product on `gemm`), for
    /// comparisons.
    pub fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            let cpu = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
            cpu && std::env::var("TFWASM_BLIS").map_or(true, |value| value.trim() != "0")
        })
    }

    /// # Safety
    ///
    /// As for `multiply_serial`, and [`available`] returned true.
    pub unsafe fn sgemm(m: usize, n: usize, k: usize, dst: Destination, accumulate: bool, lhs: Operand, rhs: Operand) {
        debug_assert!(available());
        let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
        // SAFETY: the caller guarantees every addressed element is in bounds
        // and `dst` unaliased; the extents and strides fit in isize, hence
        // in i64. BLIS reads nothing else and keeps no pointer after return.
        unsafe {
            bli_sgemm(
                BLIS_NO_TRANSPOSE,
                BLIS_NO_TRANSPOSE,
                m as i64,
                n as i64,
                k as i64,
                &alpha,
                lhs.ptr,
                lhs.row_stride as i64,
                lhs.col_stride as i64,
                rhs.ptr,
                rhs.row_stride as i64,
                rhs.col_stride as i64,
                &beta,
                dst.ptr,
                dst.row_stride as i64,
                1,
            )
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod blis {
    use super::{Destination, Operand};

    pub fn available() -> bool {
        false
    }

    pub unsafe fn sgemm(_: usize, _: usize, _: usize, _: Destination, _: bool, _: Operand, _: Operand) {
        unreachable!("BLIS is only built for x86_64 Linux")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `lhs` is `m×k` stored transposed when `ta`, `rhs` `k×n` likewise.
    fn reference(m: usize, n: usize, k: usize, a: &[f32], ta: bool, b: &[f32], tb: bool) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| {
                        let x = if ta { a[p * m + i] } else { a[i * k + p] };
                        let y = if tb { b[j * k + p] } else { b[p * n + j] };
                        f64::from(x) * f64::from(y)
                    })
                    .sum();
            }
        }
        out
    }

    /// Runs both entry points on a product large enough for BLIS (where the
    /// CPU has it), with every transpose, into a destination that starts as
    /// NaN (overwritten) or as ones (accumulated onto).
    #[test]
    fn large_products_match_a_reference_with_both_entry_points() {
        // Odd sides: blocks end off BLIS's and gemm's register tiles.
        let (m, n, k) = (331, 269, 1031);
        assert!(m * n * k >= BLIS_MIN_WORK && m.min(n) >= BLIS_MIN_SIDE);
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let expect = reference(m, n, k, &a, ta, &b, tb);
            let lhs = Operand {
                ptr: a.as_ptr(),
                row_stride: if ta { 1 } else { k as isize },
                col_stride: if ta { m as isize } else { 1 },
            };
            let rhs = Operand {
                ptr: b.as_ptr(),
                row_stride: if tb { 1 } else { n as isize },
                col_stride: if tb { k as isize } else { 1 },
            };
            for parallel in [false, true] {
                for accumulate in [false, true] {
                    let mut out = vec![if accumulate { 1.0 } else { f32::NAN }; m * n];
                    let dst = Destination { ptr: out.as_mut_ptr(), row_stride: n as isize };
                    // SAFETY: the operands hold m·k and k·n elements with
                    // the strides of their layout; `out` holds m·n.
                    unsafe {
                        if parallel {
                            multiply_parallel(m, n, k, dst, accumulate, lhs, rhs);
                        } else {
                            multiply_serial(m, n, k, dst, accumulate, lhs, rhs);
                        }
                    }
                    let offset = if accumulate { 1.0 } else { 0.0 };
                    for (index, (&got, &want)) in out.iter().zip(&expect).enumerate() {
                        let want = want + offset;
                        assert!(
                            (f64::from(got) - want).abs() <= 1e-3 * (1.0 + want.abs()),
                            "ta={ta} tb={tb} parallel={parallel} accumulate={accumulate}: element {index} is {got}, want {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn blis_only_takes_large_wide_products() {
        assert_eq!(backend(128, 512, 784), Backend::Gemm);
        assert_eq!(backend(43264, 64, 288), Backend::Gemm);
        let expected = if blis::available() { Backend::Blis } else { Backend::Gemm };
        assert_eq!(backend(2048, 2048, 2048), expected);
    }

    #[test]
    fn a_wider_than_tall_product_splits_by_columns() {
        // m < n: the parallel path cuts columns; every column must be written.
        let (m, n, k) = (260, 1500, 700);
        let (a, b) = (values(m * k, 3), values(k * n, 4));
        let expect = reference(m, n, k, &a, false, &b, false);
        let mut out = vec![f32::NAN; m * n];
        let lhs = Operand { ptr: a.as_ptr(), row_stride: k as isize, col_stride: 1 };
        let rhs = Operand { ptr: b.as_ptr(), row_stride: n as isize, col_stride: 1 };
        // SAFETY: as in the test above.
        unsafe {
            multiply_parallel(m, n, k, Destination { ptr: out.as_mut_ptr(), row_stride: n as isize }, false, lhs, rhs)
        };
        assert!(out
            .iter()
            .zip(&expect)
            .all(|(&got, &want)| (f64::from(got) - want).abs() <= 1e-3 * (1.0 + want.abs())));
    }
}
