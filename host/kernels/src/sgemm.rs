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
use rayon::prelude::*;
use std::ops::Range;

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

/// `dst[m,n] = lhs[m,k] · rhs[k,n]`, or `dst += lhs · rhs` when
/// `accumulate`.
///
/// Building one is safe; running it is not: see [`Product::run`].
#[derive(Debug, Clone, Copy)]
pub struct Product {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lhs: Operand,
    pub rhs: Operand,
    pub dst: Destination,
    pub accumulate: bool,
}

// SAFETY: the pointers are only dereferenced by `Product::run` and
// `Product::run_on_pool`, whose callers guarantee they stay valid for the
// call and that blocks written by different threads are disjoint.
unsafe impl Send for Product {}
unsafe impl Sync for Product {}

/// Which library a product goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Gemm,
    Blis,
}

impl Product {
    /// The library for this product's size on this CPU.
    pub fn backend(&self) -> Backend {
        let Product { m, n, k, .. } = *self;
        let large = m.saturating_mul(n).saturating_mul(k) >= BLIS_MIN_WORK && m.min(n) >= BLIS_MIN_SIDE;
        if large && blis::available() {
            Backend::Blis
        } else {
            Backend::Gemm
        }
    }

    /// The part of the product that writes output rows `rows` and columns
    /// `cols` (ranges inside `0..m` and `0..n`).
    pub fn block(self, rows: Range<usize>, cols: Range<usize>) -> Product {
        debug_assert!(rows.end <= self.m && cols.end <= self.n);
        let (lhs, rhs, dst) = (self.lhs, self.rhs, self.dst);
        // Pointer arithmetic only: the elements are dereferenced by `run`,
        // under its contract, and the block lies inside the product.
        let at = |ptr: *const f32, row: usize, row_stride: isize, col: usize, col_stride: isize| {
            ptr.wrapping_offset(row as isize * row_stride + col as isize * col_stride)
        };
        Product {
            m: rows.len(),
            n: cols.len(),
            lhs: Operand { ptr: at(lhs.ptr, rows.start, lhs.row_stride, 0, 0), ..lhs },
            rhs: Operand { ptr: at(rhs.ptr, 0, 0, cols.start, rhs.col_stride), ..rhs },
            dst: Destination { ptr: at(dst.ptr, rows.start, dst.row_stride, cols.start, 1).cast_mut(), ..dst },
            ..self
        }
    }

    /// Computes the product on the calling thread.
    ///
    /// # Safety
    ///
    /// Every element `lhs(i, p)`, `rhs(p, j)` and `dst(i, j)` for `i < m`,
    /// `j < n`, `p < k` lies inside a live allocation; `dst` aliases neither
    /// operand, and no other thread reads or writes those `dst` elements
    /// during the call. `m`, `n`, `k` and every offset fit in `isize`.
    pub unsafe fn run(self) {
        if self.m == 0 || self.n == 0 {
            return;
        }
        match self.backend() {
            // SAFETY: forwarded from this function's contract.
            Backend::Blis => unsafe { blis::sgemm(self) },
            // SAFETY: forwarded from this function's contract.
            Backend::Gemm => unsafe { self.run_gemm(gemm::Parallelism::None) },
        }
    }

    /// [`Product::run`] spread over the compute pool: for BLIS one block of
    /// output rows (or columns, when the output is wider than tall) per
    /// pool worker; for `gemm` its own threading inside the pool, which
    /// packs each panel once for all threads.
    ///
    /// # Safety
    ///
    /// As for [`Product::run`].
    pub unsafe fn run_on_pool(self) {
        if self.m == 0 || self.n == 0 {
            return;
        }
        let threads = pool::threads();
        match self.backend() {
            Backend::Blis if threads > 1 => {
                // Block edges on multiples of 48, a whole number of BLIS's
                // 6×16 register tiles either way.
                let edge = |len: usize, i: usize| (len * i / threads).next_multiple_of(48).min(len);
                let Product { m, n, .. } = self;
                let block = |i: usize| {
                    if m >= n {
                        self.block(edge(m, i)..edge(m, i + 1), 0..n)
                    } else {
                        self.block(0..m, edge(n, i)..edge(n, i + 1))
                    }
                };
                // The blocks run on the pool's workers, one each, while the
                // calling thread waits, unlike `pool::for_each_index`, where
                // the caller takes a block too: with one block per thread,
                // a worker bound to the caller's CPU could take the other
                // block, and then both blocks shared one CPU while the other
                // worker found nothing left. Three of eight benchmark runs
                // read 82–98 GFLOP/s, likely that way, instead of 111–125;
                // the next three read 118–124. A wake-up is nothing beside a
                // block of this size.
                // Each block goes to BLIS as the whole product did: `run`
                // would choose again by the block's own size, and a block of
                // a product just above the bounds is below them.
                pool::install(|| {
                    (0..threads).into_par_iter().map(block).filter(|b| b.m > 0 && b.n > 0).for_each(|block| {
                        // SAFETY: the block is inside the product, so inside
                        // the caller's allocations, and blocks of different
                        // indices cover disjoint rows or columns of `dst`;
                        // BLIS is available (this arm's backend).
                        unsafe { blis::sgemm(block) }
                    })
                });
            }
            // SAFETY: forwarded from this function's contract.
            Backend::Blis => unsafe { blis::sgemm(self) },
            Backend::Gemm => {
                let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
                // SAFETY: forwarded from this function's contract; gemm's
                // rayon mode writes disjoint parts of `dst` from the pool's
                // threads.
                pool::install(|| unsafe { self.run_gemm(parallelism) });
            }
        }
    }

    /// # Safety
    ///
    /// As for [`Product::run`].
    unsafe fn run_gemm(self, parallelism: gemm::Parallelism) {
        let Product { m, n, k, lhs, rhs, dst, accumulate } = self;
        // SAFETY: the caller guarantees the addressed elements are in bounds
        // and unaliased; f32 is a type gemm implements, so it does not panic
        // on dispatch. With `read_dst == false` gemm only writes `dst` (alpha
        // is then ignored); with `true` it computes 1·dst + 1·lhs·rhs.
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
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod blis {
    use super::Product;
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
    /// As for [`Product::run`], and [`available`] returned true.
    pub unsafe fn sgemm(product: Product) {
        debug_assert!(available());
        let Product { m, n, k, lhs, rhs, dst, accumulate } = product;
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
    use super::Product;

    pub fn available() -> bool {
        false
    }

    pub unsafe fn sgemm(_: Product) {
        unreachable!("BLIS is only built for x86_64 Linux")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [-1, 1) that repeat only every 2003 elements.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| ((i * 7919 + seed * 104729) % 2003) as f32 / 1001.5 - 1.0).collect()
    }

    /// `op(a)·op(b)` in f64: `a` is `m×k`, stored transposed when `ta`;
    /// `b` is `k×n`, likewise with `tb`.
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

    /// The product of `a` and `b` (layouts as in [`reference`]) into `out`.
    fn product([m, n, k]: [usize; 3], a: &[f32], ta: bool, b: &[f32], tb: bool, out: &mut [f32]) -> Product {
        assert_eq!((a.len(), b.len(), out.len()), (m * k, k * n, m * n));
        let strides = |transposed: bool, rows: usize, cols: usize| {
            if transposed {
                (1, rows as isize)
            } else {
                (cols as isize, 1)
            }
        };
        let ((a_rs, a_cs), (b_rs, b_cs)) = (strides(ta, m, k), strides(tb, k, n));
        Product {
            m,
            n,
            k,
            lhs: Operand { ptr: a.as_ptr(), row_stride: a_rs, col_stride: a_cs },
            rhs: Operand { ptr: b.as_ptr(), row_stride: b_rs, col_stride: b_cs },
            dst: Destination { ptr: out.as_mut_ptr(), row_stride: n as isize },
            accumulate: false,
        }
    }

    fn assert_close(got: &[f32], want: &[f64], offset: f64, what: &str) {
        for (index, (&got, &want)) in got.iter().zip(want).enumerate() {
            let want = want + offset;
            assert!(
                (f64::from(got) - want).abs() <= 1e-3 * (1.0 + want.abs()),
                "{what}: element {index} is {got}, want {want}"
            );
        }
    }

    /// Both entry points on a product large enough for BLIS (where the CPU
    /// has it), with every transpose, into a destination that starts as NaN
    /// (overwritten) or as ones (accumulated onto).
    #[test]
    fn large_products_match_a_reference_on_both_entry_points() {
        // Odd sides: blocks end off BLIS's and gemm's register tiles.
        let (m, n, k) = (331, 269, 1031);
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let expect = reference(m, n, k, &a, ta, &b, tb);
            for on_pool in [false, true] {
                for accumulate in [false, true] {
                    let mut out = vec![if accumulate { 1.0 } else { f32::NAN }; m * n];
                    let product = Product { accumulate, ..product([m, n, k], &a, ta, &b, tb, &mut out) };
                    assert!(m * n * k >= BLIS_MIN_WORK && m.min(n) >= BLIS_MIN_SIDE);
                    // SAFETY: `product` addresses `a`, `b` and `out` within
                    // their lengths (asserted by the helper).
                    unsafe {
                        if on_pool {
                            product.run_on_pool();
                        } else {
                            product.run();
                        }
                    }
                    let what = format!("ta={ta} tb={tb} on_pool={on_pool} accumulate={accumulate}");
                    assert_close(&out, &expect, if accumulate { 1.0 } else { 0.0 }, &what);
                }
            }
        }
    }

    #[test]
    fn blis_only_takes_large_wide_products() {
        let (a, b) = (vec![0f32; 1], vec![0f32; 1]);
        let mut out = vec![0f32; 1];
        let base = product([1, 1, 1], &a, false, &b, false, &mut out);
        let sized = |m, n, k| Product { m, n, k, ..base };
        assert_eq!(sized(128, 512, 784).backend(), Backend::Gemm);
        assert_eq!(sized(43264, 64, 288).backend(), Backend::Gemm);
        let expected = if blis::available() { Backend::Blis } else { Backend::Gemm };
        assert_eq!(sized(2048, 2048, 2048).backend(), expected);
    }

    #[test]
    fn a_wider_than_tall_product_splits_by_columns() {
        // m < n: the pool's split cuts columns; every column must be written.
        let (m, n, k) = (260, 1500, 700);
        let (a, b) = (values(m * k, 3), values(k * n, 4));
        let mut out = vec![f32::NAN; m * n];
        // SAFETY: as above.
        unsafe { product([m, n, k], &a, false, &b, false, &mut out).run_on_pool() };
        assert_close(&out, &reference(m, n, k, &a, false, &b, false), 0.0, "260x1500x700");
    }

    #[test]
    fn a_block_is_the_same_part_of_the_product() {
        let (m, n, k) = (37, 29, 11);
        let (a, b) = (values(m * k, 5), values(k * n, 6));
        for (ta, tb) in [(false, false), (true, true)] {
            let expect = reference(m, n, k, &a, ta, &b, tb);
            let mut out = vec![f32::NAN; m * n];
            let whole = product([m, n, k], &a, ta, &b, tb, &mut out);
            for (rows, cols) in [(0..m, 0..n), (5..17, 0..n), (0..m, 3..29), (36..37, 28..29), (4..4, 0..n)] {
                // SAFETY: a block of the product is inside it.
                unsafe { whole.block(rows, cols).run() };
            }
            // The blocks above cover every element; all hold the product.
            assert_close(&out, &expect, 0.0, &format!("ta={ta} tb={tb}"));
        }
    }
}
