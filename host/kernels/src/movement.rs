//! Data movement: Transpose, ConcatV2, Pack, Unpack, Split(V), Slice,
//! StridedSlice(Grad), Tile, Pad(V2), Fill, GatherV2, OneHot, BroadcastTo,
//! ReverseV2, Snapshot, SpaceToBatchND and BatchToSpaceND, in every type
//! ([`ANY`]: they move elements as words of their width, never reading
//! them); `ZerosLike`/`OnesLike` for the types `unary` does not compute;
//! float32 `AddN` and GatherV2's gradient `UnsortedSegmentSum`; and int32
//! `Pack` and `StridedSlice` for shape arithmetic (every argument in host
//! memory, as on TensorFlow's GPU device, since their results feed
//! host-side shape arguments).
//!
//! Most of these read a *strided view* of their input: every output element
//! (in row-major order) comes from `offset + Σ index[i] · step[i]` of the
//! input. A [`View`] is collapsed first — size-1 dimensions dropped,
//! neighbours that are contiguous in the input merged — so a slice of whole
//! rows becomes a few long copies and a transpose that keeps the last
//! dimension becomes row copies. A view whose innermost step is not 1 but
//! that has a unit-step dimension elsewhere (a real transpose) is copied in
//! cache-sized tiles. Shapes, axes and indices (int32/int64) are read from
//! host memory; everything else stays on the device.
//!
//! TensorFlow already has DEVICE_DEFAULT kernels (usable on a pluggable
//! device) for Reshape, ExpandDims, Squeeze, Identity, IdentityN,
//! StopGradient, Shape, ShapeN, Size, Rank and BroadcastGradientArgs, so
//! those are not registered here. ZerosLike/OnesLike belong to `unary`.

use super::pool;
use super::shape::{element_count, Broadcast, ShapeDisplay};
use super::tensor::by_width;
use super::{expect_inputs, types, Attrs, DType, FnKernel, Kernel, KernelDef, OpContext, Tensor, TfBool};
use crate::error::Error;

/// Every element type the kernels here that only move elements handle:
/// they copy words of the element's width ([`Word`]), whatever the type.
/// int32 is left to the registrations below and to TensorFlow's own
/// host-memory kernels, as on its GPU device: int32 tensors are mostly
/// shapes, which TensorFlow reads on the host.
const ANY: &[DType] =
    &[DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8, DType::U64, DType::Bool];
const T_ANY: &[(&str, &[DType])] = &[("T", ANY)];

const fn t_idx(index_attr: &'static str) -> [(&'static str, &'static [DType]); 2] {
    [("T", ANY), (index_attr, types::INDEX)]
}

/// Any type, and int32 for the gradient of Keras' `ops.repeat`
/// (`UpSampling2D`, `RepeatVector`), which transposes int32 indices.
const TRANSPOSE_TYPES: &[(&str, &[DType])] = &[
    (
        "T",
        &[DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8, DType::U64, DType::Bool, DType::I32],
    ),
    ("Tperm", types::INDEX),
];
const TIDX_TYPES: &[(&str, &[DType])] = &t_idx("Tidx");
const INDEX_TYPES: &[(&str, &[DType])] = &t_idx("Index");
const TILE_TYPES: &[(&str, &[DType])] = &t_idx("Tmultiples");
const PAD_TYPES: &[(&str, &[DType])] = &t_idx("Tpaddings");
const FILL_TYPES: &[(&str, &[DType])] = &t_idx("index_type");
const ONEHOT_TYPES: &[(&str, &[DType])] = &t_idx("TI");
/// int32 shape arithmetic; see the module docs for the host memory.
const I32_INDEX_TYPES: &[(&str, &[DType])] = &[("T", &[DType::I32]), ("Index", types::INDEX)];
const T_I32: &[(&str, &[DType])] = &[("T", &[DType::I32])];
/// [`ANY`] but bool, which TensorFlow's CPU device has no kernel for either.
const NUMBERS: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8, DType::U64];
const TO_BATCH_TYPES: &[(&str, &[DType])] =
    &[("T", NUMBERS), ("Tblock_shape", types::INDEX), ("Tpaddings", types::INDEX)];
const TO_SPACE_TYPES: &[(&str, &[DType])] = &[("T", NUMBERS), ("Tblock_shape", types::INDEX), ("Tcrops", types::INDEX)];
/// `ZerosLike`/`OnesLike` of the types the float32 arithmetic (`unary`)
/// does not compute; int32 has TensorFlow's own host-memory kernels.
const LIKE_TYPES: &[(&str, &[DType])] = &[("T", &[DType::F64, DType::I64, DType::U8, DType::U64, DType::Bool])];
const SPLITV_TYPES: &[(&str, &[DType])] = &t_idx("Tlen");
const GATHER_TYPES: &[(&str, &[DType])] = &[("Tparams", ANY), ("Tindices", types::INDEX), ("Taxis", types::INDEX)];
const SEGMENT_TYPES: &[(&str, &[DType])] =
    &[("T", types::F32), ("Tindices", types::INDEX), ("Tnumsegments", types::INDEX)];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new("Transpose", TRANSPOSE_TYPES, |_| Ok(Box::new(FnKernel(transpose)))).host_memory(&["perm"]),
    KernelDef::new("ConcatV2", TIDX_TYPES, |_| Ok(Box::new(FnKernel(concat_v2)))).host_memory(&["axis"]),
    KernelDef::new("Pack", T_ANY, build_pack),
    KernelDef::new("Pack", T_I32, build_pack).host_memory(&["values", "output"]),
    KernelDef::new("Unpack", T_ANY, build_unpack),
    KernelDef::new("Split", T_ANY, |a| Ok(Box::new(Split { num_split: a.int("num_split")?, sizes_input: false })))
        .host_memory(&["split_dim"]),
    KernelDef::new("SplitV", SPLITV_TYPES, |a| {
        Ok(Box::new(Split { num_split: a.int("num_split")?, sizes_input: true }))
    })
    .host_memory(&["size_splits", "split_dim"]),
    KernelDef::new("Slice", INDEX_TYPES, |_| Ok(Box::new(FnKernel(slice)))).host_memory(&["begin", "size"]),
    KernelDef::new("StridedSlice", INDEX_TYPES, |a| Ok(Box::new(StridedSlice { masks: Masks::read(a)?, grad: false })))
        .host_memory(&["begin", "end", "strides"]),
    KernelDef::new("StridedSlice", I32_INDEX_TYPES, |a| {
        Ok(Box::new(StridedSlice { masks: Masks::read(a)?, grad: false }))
    })
    .host_memory(&["input", "begin", "end", "strides", "output"]),
    KernelDef::new("StridedSliceGrad", INDEX_TYPES, |a| {
        Ok(Box::new(StridedSlice { masks: Masks::read(a)?, grad: true }))
    })
    .host_memory(&["shape", "begin", "end", "strides"]),
    KernelDef::new("Tile", TILE_TYPES, |_| Ok(Box::new(FnKernel(tile)))).host_memory(&["multiples"]),
    KernelDef::new("Pad", PAD_TYPES, |_| Ok(Box::new(Pad { v2: false }))).host_memory(&["paddings"]),
    KernelDef::new("PadV2", PAD_TYPES, |_| Ok(Box::new(Pad { v2: true }))).host_memory(&["paddings"]),
    KernelDef::new("Fill", FILL_TYPES, |_| Ok(Box::new(FnKernel(fill)))).host_memory(&["dims"]),
    KernelDef::new("GatherV2", GATHER_TYPES, |a| {
        Ok(Box::new(GatherV2 { batch_dims: a.int("batch_dims").unwrap_or(0) }))
    })
    .host_memory(&["axis"]),
    KernelDef::new("UnsortedSegmentSum", SEGMENT_TYPES, |_| Ok(Box::new(FnKernel(unsorted_segment_sum))))
        .host_memory(&["num_segments"]),
    KernelDef::new("OneHot", ONEHOT_TYPES, |a| Ok(Box::new(OneHot { axis: a.int("axis")? }))).host_memory(&["depth"]),
    KernelDef::new("AddN", types::T_F32, |_| Ok(Box::new(FnKernel(add_n)))),
    KernelDef::new("BroadcastTo", TIDX_TYPES, |_| Ok(Box::new(FnKernel(broadcast_to)))).host_memory(&["shape"]),
    KernelDef::new("SpaceToBatchND", TO_BATCH_TYPES, |_| Ok(Box::new(SpaceBatch { to_batch: true })))
        .host_memory(&["block_shape", "paddings"]),
    KernelDef::new("BatchToSpaceND", TO_SPACE_TYPES, |_| Ok(Box::new(SpaceBatch { to_batch: false })))
        .host_memory(&["block_shape", "crops"]),
    KernelDef::new("Range", &[("Tidx", &[DType::F32, DType::I64])], |_| Ok(Box::new(FnKernel(range))))
        .host_memory(&["start", "limit", "delta"]),
    KernelDef::new("ZerosLike", LIKE_TYPES, |_| Ok(Box::new(FillLike { one: false }))),
    KernelDef::new("OnesLike", LIKE_TYPES, |_| Ok(Box::new(FillLike { one: true }))),
    KernelDef::new("Snapshot", T_ANY, |_| Ok(Box::new(FnKernel(snapshot)))),
    KernelDef::new("ReverseV2", TIDX_TYPES, |_| Ok(Box::new(FnKernel(reverse_v2)))).host_memory(&["axis"]),
];

fn invalid(op: &str, message: String) -> Error {
    Error::InvalidArgument(format!("{op}: {message}"))
}

/// Below this many output elements an op runs on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;
const CHUNKS_PER_THREAD: usize = 4;

/// Calls `work(first_row, rows)` on consecutive groups of whole rows of
/// `out` (rows of `row_len` elements), on the pool when `out` is large.
fn par_rows<T: Send>(out: &mut [T], row_len: usize, work: impl Fn(usize, &mut [T]) + Sync) {
    if out.is_empty() || row_len == 0 {
        return;
    }
    let rows = out.len() / row_len;
    let threads = pool::threads();
    if out.len() < PARALLEL_MIN_ELEMENTS || threads == 1 || rows == 1 {
        work(0, out);
        return;
    }
    let chunk_rows = rows.div_ceil(threads * CHUNKS_PER_THREAD).max((16 * 1024usize).div_ceil(row_len));
    pool::for_each_chunk_mut(out, chunk_rows * row_len, |i, chunk| work(i * chunk_rows, chunk));
}

/// Row-major strides of `shape`.
pub(super) fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Sizes from a host int tensor, each non-negative.
fn sizes(op: &str, what: &str, values: &[i64]) -> Result<Vec<usize>, Error> {
    values
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| invalid(op, format!("{what} must be non-negative, got {values:?}"))))
        .collect()
}

pub(super) fn checked_count(op: &str, shape: &[usize]) -> Result<usize, Error> {
    element_count(shape)
        .filter(|&n| isize::try_from(n).is_ok())
        .ok_or_else(|| invalid(op, format!("shape {} has too many elements", ShapeDisplay(shape))))
}

/// `axis` in `[-rank, rank)` made non-negative.
fn normalize_axis(op: &str, axis: i64, rank: usize) -> Result<usize, Error> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(invalid(op, format!("Expected axis in the range [{}, {r}), but got {axis}", -r)));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

// --------------------------------------------------------------- views

/// Walks the multi-indices of `dims` in row-major order, tracking an input
/// offset (steps `a`) and an output offset (steps `b`).
struct Walk<'a> {
    dims: &'a [usize],
    a_steps: &'a [isize],
    b_steps: &'a [isize],
    index: Vec<usize>,
    a: isize,
    b: isize,
}

impl<'a> Walk<'a> {
    /// Starts at row-major linear index `start`.
    fn new(dims: &'a [usize], a_steps: &'a [isize], b_steps: &'a [isize], a: isize, b: isize, start: usize) -> Self {
        let mut index = vec![0; dims.len()];
        let mut rest = start;
        let (mut a, mut b) = (a, b);
        for i in (0..dims.len()).rev() {
            if dims[i] > 0 {
                index[i] = rest % dims[i];
                rest /= dims[i];
            }
            a += index[i] as isize * a_steps[i];
            b += index[i] as isize * b_steps[i];
        }
        Walk { dims, a_steps, b_steps, index, a, b }
    }

    fn advance(&mut self) {
        for i in (0..self.dims.len()).rev() {
            self.index[i] += 1;
            self.a += self.a_steps[i];
            self.b += self.b_steps[i];
            if self.index[i] < self.dims[i] {
                return;
            }
            self.a -= self.a_steps[i] * self.dims[i] as isize;
            self.b -= self.b_steps[i] * self.dims[i] as isize;
            self.index[i] = 0;
        }
    }
}

/// Output element `i` (row-major over `dims`) is source element
/// `offset + Σ index[d] · steps[d]`. Collapsed: no size-1 dimension (unless
/// the view has one element), no two neighbours contiguous in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct View {
    offset: isize,
    dims: Vec<usize>,
    steps: Vec<isize>,
}

impl View {
    pub(super) fn new(offset: isize, dims: &[usize], steps: &[isize]) -> View {
        let mut v = View { offset, dims: Vec::with_capacity(dims.len()), steps: Vec::with_capacity(dims.len()) };
        for (&n, &step) in dims.iter().zip(steps) {
            if n == 1 {
                continue;
            }
            match (v.dims.last_mut(), v.steps.last_mut()) {
                (Some(last_n), Some(last_step)) if *last_step == step * n as isize => {
                    *last_n *= n;
                    *last_step = step;
                }
                _ => {
                    v.dims.push(n);
                    v.steps.push(step);
                }
            }
        }
        if v.dims.is_empty() {
            v.dims.push(1);
            v.steps.push(1);
        }
        v
    }

    fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether the view is all of a row-major buffer of `len` elements, in
    /// order (gathering it would copy the buffer unchanged).
    pub(super) fn is_whole(&self, len: usize) -> bool {
        self.offset == 0 && self.len() == len && (len <= 1 || self.steps == [1])
    }

    /// Fails unless every element of the view lies inside `len` elements.
    fn check_within(&self, len: usize) -> Result<(), Error> {
        if self.len() == 0 {
            return Ok(());
        }
        let (mut lo, mut hi) = (self.offset, self.offset);
        for (&n, &s) in self.dims.iter().zip(&self.steps) {
            let span = (n as isize - 1) * s;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        if lo < 0 || hi >= len as isize {
            return Err(Error::Internal(format!("a strided view [{lo}, {hi}] outside a tensor of {len} elements")));
        }
        Ok(())
    }

    /// `out[i] = src[element i of the view]`.
    pub(super) fn gather<T: Copy + Default + Send + Sync>(&self, src: &[T], out: &mut [T]) -> Result<(), Error> {
        self.check_within(src.len())?;
        if out.len() != self.len() {
            return Err(Error::Internal(format!("a view of {} elements gathered into {}", self.len(), out.len())));
        }
        if out.is_empty() {
            return Ok(());
        }
        let r = self.dims.len();
        let unit_dim = self.steps[..r - 1].iter().position(|&s| s == 1);
        match unit_dim {
            Some(q) if self.steps[r - 1] != 1 && self.dims[r - 1] > 1 => {
                // A transpose: tiles between dim `q` (unit step in the
                // source) and the last dim (unit step in the output).
                let unit: usize = self.dims[1..].iter().product();
                par_rows(out, unit, |first, chunk| {
                    let mut sub = self.clone();
                    sub.dims[0] = chunk.len() / unit;
                    sub.offset += first as isize * self.steps[0];
                    sub.gather_tiles(src, q, chunk);
                });
            }
            _ => {
                let n = self.dims[r - 1];
                let step = self.steps[r - 1];
                let outer = &self.dims[..r - 1];
                let outer_steps = &self.steps[..r - 1];
                let zeros = vec![0isize; r - 1];
                par_rows(out, n, |first, chunk| {
                    let mut walk = Walk::new(outer, outer_steps, &zeros, self.offset, 0, first);
                    for row in chunk.chunks_exact_mut(n) {
                        let at = walk.a as usize;
                        if step == 1 {
                            row.copy_from_slice(&src[at..at + n]);
                        } else if step == -1 {
                            // A reversed row (ReverseV2 of the last axis).
                            for (o, &v) in row.iter_mut().zip(src[at + 1 - n..=at].iter().rev()) {
                                *o = v;
                            }
                        } else {
                            for (j, o) in row.iter_mut().enumerate() {
                                *o = src[(walk.a + j as isize * step) as usize];
                            }
                        }
                        walk.advance();
                    }
                });
            }
        }
        Ok(())
    }

    /// The tiled copy of [`View::gather`]: dim `q` has source step 1.
    ///
    /// Blocks of 16×16 go through a small buffer: each of the 16 source
    /// lines is read as 16 contiguous values, each output line written as
    /// 16 contiguous values, so no cache line has to survive between the
    /// two halves (power-of-two strides alias in the cache otherwise).
    fn gather_tiles<T: Copy + Default + Send + Sync>(&self, src: &[T], q: usize, out: &mut [T]) {
        const TILE: usize = 16;
        const MACRO: usize = 64;
        let r = self.dims.len();
        let out_strides: Vec<isize> = strides_of(&self.dims).iter().map(|&s| s as isize).collect();
        let others: Vec<usize> = (0..r - 1).filter(|&d| d != q).collect();
        let o_dims: Vec<usize> = others.iter().map(|&d| self.dims[d]).collect();
        let o_steps: Vec<isize> = others.iter().map(|&d| self.steps[d]).collect();
        let o_out: Vec<isize> = others.iter().map(|&d| out_strides[d]).collect();
        let (nq, q_out) = (self.dims[q], out_strides[q] as usize);
        let (nl, l_step) = (self.dims[r - 1], self.steps[r - 1]);
        let count: usize = o_dims.iter().product();
        let mut buf = [T::default(); TILE * TILE];
        let mut walk = Walk::new(&o_dims, &o_steps, &o_out, self.offset, 0, 0);
        for _ in 0..count {
            let (src_base, out_base) = (walk.a, walk.b as usize);
            // Macro blocks bound the pages one block touches (TLB reach:
            // a power-of-two row stride puts every row on its own page).
            for q_macro in (0..nq).step_by(MACRO) {
                for l_macro in (0..nl).step_by(MACRO) {
                    for qb in (q_macro..nq.min(q_macro + MACRO)).step_by(TILE) {
                        let qn = TILE.min(nq - qb);
                        for lb in (l_macro..nl.min(l_macro + MACRO)).step_by(TILE) {
                            let ln = TILE.min(nl - lb);
                            for l in 0..ln {
                                let at = (src_base + qb as isize + (lb + l) as isize * l_step) as usize;
                                buf[l * TILE..l * TILE + qn].copy_from_slice(&src[at..at + qn]);
                            }
                            for qi in 0..qn {
                                let o = out_base + (qb + qi) * q_out + lb;
                                for (l, dst) in out[o..o + ln].iter_mut().enumerate() {
                                    *dst = buf[l * TILE + qi];
                                }
                            }
                        }
                    }
                }
            }
            walk.advance();
        }
    }

    /// `dst[element i of the view] = values[i]` (serial).
    pub(super) fn scatter<T: Copy>(&self, values: &[T], dst: &mut [T]) -> Result<(), Error> {
        self.check_within(dst.len())?;
        if values.len() != self.len() {
            return Err(Error::Internal(format!("{} values scattered into a view of {}", values.len(), self.len())));
        }
        if values.is_empty() {
            return Ok(());
        }
        let r = self.dims.len();
        let (n, step) = (self.dims[r - 1], self.steps[r - 1]);
        let zeros = vec![0isize; r - 1];
        let mut walk = Walk::new(&self.dims[..r - 1], &self.steps[..r - 1], &zeros, self.offset, 0, 0);
        for row in values.chunks_exact(n) {
            let at = walk.a as usize;
            if step == 1 {
                dst[at..at + n].copy_from_slice(row);
            } else {
                for (j, &v) in row.iter().enumerate() {
                    dst[(walk.a + j as isize * step) as usize] = v;
                }
            }
            walk.advance();
        }
        Ok(())
    }
}

/// Copies `src` into `out` (same length), on the pool when large.
pub(super) fn copy_all<T: Copy + Send + Sync>(src: &[T], out: &mut [T]) {
    par_rows(out, 1, |first, chunk| chunk.copy_from_slice(&src[first..first + chunk.len()]));
}

fn fill_all<T: Copy + Send + Sync>(out: &mut [T], value: T) {
    par_rows(out, 1, |_, chunk| chunk.fill(value));
}

/// `out[i] = input[element i of view]`, for any element type.
fn gather_any(view: &View, input: &Tensor, out: &mut Tensor) -> Result<(), Error> {
    by_width!(input.dtype(), W => view.gather(input.words::<W>()?, out.words_mut()?))
}

// ------------------------------------------------------------ Transpose

fn transpose(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "Transpose";
    expect_inputs(OP, ctx, 2)?;
    let (input, perm) = (ctx.input(0)?, ctx.input(1)?);
    let rank = input.rank();
    if perm.rank() != 1 || perm.len() != rank {
        return Err(invalid(
            OP,
            format!("transpose expects a vector of size {rank}. But input(1) is a vector of size {}", perm.len()),
        ));
    }
    let perm = perm.to_i64s()?;
    let mut seen = vec![false; rank];
    for &p in &perm {
        if p < 0 || p >= rank as i64 {
            return Err(invalid(OP, format!("{p} is out of range [0 .. {rank})")));
        }
        if std::mem::replace(&mut seen[p as usize], true) {
            return Err(invalid(OP, format!("{p} is duplicated in perm {perm:?}")));
        }
    }
    let in_strides = strides_of(input.shape());
    let out_shape: Vec<usize> = perm.iter().map(|&p| input.shape()[p as usize]).collect();
    let steps: Vec<isize> = perm.iter().map(|&p| in_strides[p as usize] as isize).collect();
    let mut out = ctx.allocate_output(0, &out_shape)?;
    let view = View::new(0, &out_shape, &steps);
    gather_any(&view, &input, &mut out)
}

// --------------------------------------------------------- Concat / Pack

/// Copies inputs side by side: output row `o` is input 0's row `o`, then
/// input 1's, … (rows of `row_lens[i]` elements; `outer` rows each).
fn concat_rows<T: Copy + Send + Sync>(inputs: &[&[T]], row_lens: &[usize], out: &mut [T]) {
    let out_row: usize = row_lens.iter().sum();
    par_rows(out, out_row, |first, chunk| {
        for (o, row) in chunk.chunks_exact_mut(out_row).enumerate() {
            let o = first + o;
            let mut at = 0;
            for (src, &n) in inputs.iter().zip(row_lens) {
                row[at..at + n].copy_from_slice(&src[o * n..o * n + n]);
                at += n;
            }
        }
    });
}

fn concat_v2(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "ConcatV2";
    let count = ctx.num_inputs();
    if count < 2 {
        return Err(Error::Internal(format!("{OP}: expected at least 2 inputs, TensorFlow passed {count}")));
    }
    let n = count - 1;
    let axis_t = ctx.input(n)?;
    if axis_t.rank() != 0 {
        return Err(invalid(OP, format!("axis must be a scalar, got shape {}", ShapeDisplay(axis_t.shape()))));
    }
    let inputs: Vec<Tensor> = (0..n).map(|i| ctx.input(i)).collect::<Result<_, _>>()?;
    let first = inputs[0].shape().to_vec();
    let rank = first.len();
    let axis_value = axis_t.to_i64s()?[0];
    if rank == 0 {
        return Err(invalid(OP, "ConcatOp : Can't concatenate scalars (use tf.stack instead)".into()));
    }
    let r = rank as i64;
    if axis_value < -r || axis_value >= r {
        return Err(invalid(
            OP,
            format!("ConcatOp : Expected concatenating dimensions in the range [{}, {r}), but got {axis_value}", -r),
        ));
    }
    let axis = if axis_value < 0 { (axis_value + r) as usize } else { axis_value as usize };
    let mut out_shape = first.clone();
    out_shape[axis] = 0;
    for (i, t) in inputs.iter().enumerate() {
        let s = t.shape();
        if s.len() != rank {
            return Err(invalid(
                OP,
                format!(
                    "ConcatOp : Ranks of all input tensors should match: shape[0] = {} vs. shape[{i}] = {}",
                    ShapeDisplay(&first),
                    ShapeDisplay(s)
                ),
            ));
        }
        for d in 0..rank {
            if d != axis && s[d] != first[d] {
                return Err(invalid(
                    OP,
                    format!(
                        "ConcatOp : Dimension {d} in both shapes must be equal: shape[0] = {} vs. shape[{i}] = {}",
                        ShapeDisplay(&first),
                        ShapeDisplay(s)
                    ),
                ));
            }
        }
        out_shape[axis] += s[axis];
    }
    checked_count(OP, &out_shape)?;
    let inner: usize = first[axis + 1..].iter().product();
    let row_lens: Vec<usize> = inputs.iter().map(|t| t.shape()[axis] * inner).collect();
    let mut out = ctx.allocate_output(0, &out_shape)?;
    by_width!(out.dtype(), W => {
        let datas: Vec<&[W]> = inputs.iter().map(|t| t.words::<W>()).collect::<Result<_, _>>()?;
        concat_rows(&datas, &row_lens, out.words_mut()?);
    });
    Ok(())
}

fn build_pack(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(Pack { axis: attrs.int("axis")? }))
}

struct Pack {
    axis: i64,
}

impl Kernel for Pack {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "Pack";
        let n = ctx.num_inputs();
        if n == 0 {
            return Err(Error::Internal(format!("{OP}: no inputs")));
        }
        let inputs: Vec<Tensor> = (0..n).map(|i| ctx.input(i)).collect::<Result<_, _>>()?;
        let shape = inputs[0].shape().to_vec();
        let r = shape.len() as i64 + 1;
        if self.axis < -r || self.axis >= r {
            return Err(invalid(OP, format!("axis = {} not in [{}, {r})", self.axis, -r)));
        }
        let axis = if self.axis < 0 { (self.axis + r) as usize } else { self.axis as usize };
        for (i, t) in inputs.iter().enumerate() {
            if t.shape() != shape.as_slice() {
                return Err(invalid(
                    OP,
                    format!(
                        "Shapes of all inputs must match: values[0].shape = {} != values[{i}].shape = {}",
                        ShapeDisplay(&shape),
                        ShapeDisplay(t.shape())
                    ),
                ));
            }
        }
        let mut out_shape = shape.clone();
        out_shape.insert(axis, n);
        checked_count(OP, &out_shape)?;
        let inner: usize = shape[axis..].iter().product();
        let mut out = ctx.allocate_output(0, &out_shape)?;
        by_width!(out.dtype(), W => {
            let datas: Vec<&[W]> = inputs.iter().map(|t| t.words::<W>()).collect::<Result<_, _>>()?;
            concat_rows(&datas, &vec![inner; datas.len()], out.words_mut()?);
        });
        Ok(())
    }
}

fn build_unpack(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(Unpack { axis: attrs.int("axis")?, num: attrs.int("num")? }))
}

struct Unpack {
    axis: i64,
    num: i64,
}

impl Kernel for Unpack {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "Unpack";
        expect_inputs(OP, ctx, 1)?;
        let input = ctx.input(0)?;
        let shape = input.shape();
        let r = shape.len() as i64;
        if self.axis < -r || self.axis >= r {
            return Err(invalid(OP, format!("axis = {} not in [{}, {r})", self.axis, -r)));
        }
        let axis = if self.axis < 0 { (self.axis + r) as usize } else { self.axis as usize };
        let num = shape[axis];
        if num as i64 != self.num || ctx.num_outputs() != num {
            return Err(invalid(
                OP,
                format!("Input shape axis {axis} must equal {}, got shape {}", self.num, ShapeDisplay(shape)),
            ));
        }
        let mut out_shape = shape.to_vec();
        out_shape.remove(axis);
        let inner: usize = shape[axis + 1..].iter().product();
        let step = num * inner;
        for i in 0..num {
            let mut out = ctx.allocate_output(i, &out_shape)?;
            let view =
                View::new((i * inner) as isize, &[out_shape[..axis].iter().product(), inner], &[step as isize, 1]);
            gather_any(&view, &input, &mut out)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- Split, SplitV

/// `Split` (`num_split` equal parts) and `SplitV` (the sizes in
/// `size_splits`, one of them may be -1) along `split_dim`. Keras' GRU and
/// LSTM cells split their gates this way inside the recurrence.
struct Split {
    num_split: i64,
    /// SplitV: inputs are (value, size_splits, split_dim).
    sizes_input: bool,
}

impl Kernel for Split {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.sizes_input { "SplitV" } else { "Split" };
        expect_inputs(op, ctx, if self.sizes_input { 3 } else { 2 })?;
        let (input, dim_t) =
            if self.sizes_input { (ctx.input(0)?, ctx.input(2)?) } else { (ctx.input(1)?, ctx.input(0)?) };
        if dim_t.len() != 1 {
            return Err(invalid(op, format!("split_dim must be a scalar, got shape {}", ShapeDisplay(dim_t.shape()))));
        }
        let shape = input.shape();
        let axis = normalize_axis(op, dim_t.to_i64s()?[0], shape.len())?;
        let count =
            usize::try_from(self.num_split).ok().filter(|&n| n >= 1 && n == ctx.num_outputs()).ok_or_else(|| {
                Error::Internal(format!(
                    "{op}: num_split = {} but TensorFlow expects {} outputs",
                    self.num_split,
                    ctx.num_outputs()
                ))
            })?;
        let extent = shape[axis];
        let sizes: Vec<usize> = if self.sizes_input {
            split_sizes(op, &ctx.input(1)?.to_i64s()?, count, extent)?
        } else {
            if extent % count != 0 {
                return Err(invalid(
                    op,
                    format!(
                        "Number of ways to split should evenly divide the split dimension, but got split_dim {axis} (size = {extent}) and num_split {count}"
                    ),
                ));
            }
            vec![extent / count; count]
        };
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let mut start = 0;
        for (i, &size) in sizes.iter().enumerate() {
            let mut out_shape = shape.to_vec();
            out_shape[axis] = size;
            let mut out = ctx.allocate_output(i, &out_shape)?;
            let view = View::new((start * inner) as isize, &[outer, size * inner], &[(extent * inner) as isize, 1]);
            gather_any(&view, &input, &mut out)?;
            start += size;
        }
        Ok(())
    }
}

/// SplitV's part sizes: `count` of them, at most one -1 (the rest of
/// `extent`), all others non-negative and adding up to `extent`.
fn split_sizes(op: &str, given: &[i64], count: usize, extent: usize) -> Result<Vec<usize>, Error> {
    if given.len() != count {
        return Err(invalid(op, format!("Number of split sizes ({}) must equal num_split ({count})", given.len())));
    }
    let mut inferred = None;
    let mut known: i64 = 0;
    for (i, &size) in given.iter().enumerate() {
        match size {
            -1 if inferred.is_none() => inferred = Some(i),
            -1 => {
                return Err(invalid(
                    op,
                    format!("Only one dimension can have a value of -1. Second one found at dimension {i}"),
                ))
            }
            s if s < 0 => return Err(invalid(op, format!("Split size at index {i} must be >= 0 or -1, got {s}"))),
            s => known = known.saturating_add(s),
        }
    }
    let extent_i = extent as i64;
    let mut sizes: Vec<i64> = given.to_vec();
    match inferred {
        Some(i) if known <= extent_i => sizes[i] = extent_i - known,
        None if known == extent_i => {}
        _ => {
            return Err(invalid(
                op,
                format!(
                    "Determined shape must either match input shape along split_dim exactly if fully specified, or be less than the size of the input along split_dim if not fully specified.  Got: {known}"
                ),
            ))
        }
    }
    Ok(sizes.into_iter().map(|s| s as usize).collect())
}

// ---------------------------------------------------------------- Slice

fn slice(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "Slice";
    expect_inputs(OP, ctx, 3)?;
    let (input, begin, size) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let shape = input.shape();
    let rank = shape.len();
    if begin.rank() != 1 || size.rank() != 1 || begin.len() != rank || size.len() != rank {
        return Err(invalid(
            OP,
            format!(
                "Expected begin and size arguments to be 1-D tensors of size {rank}, but got shapes {} and {} instead.",
                ShapeDisplay(begin.shape()),
                ShapeDisplay(size.shape())
            ),
        ));
    }
    let (begin, size) = (begin.to_i64s()?, size.to_i64s()?);
    let mut out_shape = Vec::with_capacity(rank);
    for i in 0..rank {
        let dim = shape[i] as i64;
        let b = begin[i];
        let s = if size[i] == -1 { dim - b } else { size[i] };
        if !(0..=dim).contains(&b) {
            return Err(invalid(OP, format!("Expected begin[{i}] in [0, {dim}], but got {b}")));
        }
        if !(0..=dim - b).contains(&s) {
            return Err(invalid(OP, format!("Expected size[{i}] in [0, {}], but got {s}", dim - b)));
        }
        out_shape.push(s as usize);
    }
    if out_shape == shape {
        return ctx.forward_input(0, 0);
    }
    let strides = strides_of(shape);
    let offset: usize = begin.iter().zip(&strides).map(|(&b, &s)| b as usize * s).sum();
    let steps: Vec<isize> = strides.iter().map(|&s| s as isize).collect();
    let mut out = ctx.allocate_output(0, &out_shape)?;
    if out.is_empty() {
        return Ok(());
    }
    gather_any(&View::new(offset as isize, &out_shape, &steps), &input, &mut out)
}

// --------------------------------------------------------- StridedSlice

#[derive(Debug, Clone, Copy, Default)]
struct Masks {
    begin: i64,
    end: i64,
    ellipsis: i64,
    new_axis: i64,
    shrink_axis: i64,
}

impl Masks {
    fn read(attrs: &dyn Attrs) -> Result<Self, Error> {
        Ok(Masks {
            begin: attrs.int("begin_mask")?,
            end: attrs.int("end_mask")?,
            ellipsis: attrs.int("ellipsis_mask")?,
            new_axis: attrs.int("new_axis_mask")?,
            shrink_axis: attrs.int("shrink_axis_mask")?,
        })
    }
}

fn bit(mask: i64, i: usize) -> bool {
    i < 63 && (mask >> i) & 1 == 1
}

/// A validated strided slice of an input shape (TensorFlow's
/// `ValidateStridedSliceOp`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SliceSpec {
    /// Per input dimension: first index and stride.
    begin: Vec<i64>,
    strides: Vec<i64>,
    /// Per input dimension: number of elements taken.
    processing: Vec<usize>,
    /// The output shape (shrunk dims removed, new axes added).
    final_shape: Vec<usize>,
    is_identity: bool,
}

/// Where an entry of the final shape comes from.
#[derive(Clone, Copy)]
enum Gather {
    Dim(usize),
    NewAxis,
    Shrink,
}

fn strided_slice_spec(
    op: &str,
    shape: &[usize],
    begin: &[i64],
    end: &[i64],
    strides: &[i64],
    masks: Masks,
) -> Result<SliceSpec, Error> {
    if begin.len() != end.len() || begin.len() != strides.len() {
        return Err(invalid(
            op,
            format!(
                "Expected begin, end, and strides to be 1D equal size tensors, but got shapes [{}], [{}], and [{}] instead.",
                begin.len(),
                end.len(),
                strides.len()
            ),
        ));
    }
    if masks.ellipsis != 0 && (masks.ellipsis & (masks.ellipsis - 1)) != 0 {
        return Err(invalid(op, "Multiple ellipses in slice spec not allowed".into()));
    }
    // Step 1: the sparse spec, with an ellipsis appended when there is none.
    let mut sparse_dims = strides.len();
    let mut ellipsis_mask = masks.ellipsis;
    let mut ellipsis_seen = false;
    let mut new_axis_after_ellipsis = 0usize;
    for i in 0..sparse_dims {
        if ellipsis_seen && bit(masks.new_axis, i) {
            new_axis_after_ellipsis += 1;
        }
        if bit(masks.ellipsis, i) {
            ellipsis_seen = true;
        }
    }
    if !ellipsis_seen {
        if sparse_dims >= 63 {
            return Err(invalid(op, format!("too many slice dimensions ({sparse_dims})")));
        }
        ellipsis_mask |= 1 << sparse_dims;
        sparse_dims += 1;
    }
    // Step 2: the dense spec, one entry per input dimension.
    let dims = shape.len();
    let mut d_begin = vec![0i64; dims];
    let mut d_end = vec![0i64; dims];
    let mut d_strides = vec![1i64; dims];
    let (mut d_begin_mask, mut d_end_mask, mut d_shrink) = (vec![false; dims], vec![false; dims], vec![false; dims]);
    let mut gathers = Vec::new();
    let mut full = 0usize;
    for i in 0..sparse_dims {
        if bit(ellipsis_mask, i) {
            let next = (dims + 1 + new_axis_after_ellipsis).saturating_sub(sparse_dims - i).min(dims);
            while full < next {
                d_begin_mask[full] = true;
                d_end_mask[full] = true;
                gathers.push(Gather::Dim(full));
                full += 1;
            }
        } else if bit(masks.new_axis, i) {
            gathers.push(Gather::NewAxis);
        } else {
            if full == dims {
                return Err(invalid(
                    op,
                    format!("Index out of range using input dim {full}; input has only {dims} dims"),
                ));
            }
            d_begin[full] = begin[i];
            d_end[full] = end[i];
            d_strides[full] = strides[i];
            d_begin_mask[full] = bit(masks.begin, i);
            d_end_mask[full] = bit(masks.end, i);
            if bit(masks.shrink_axis, i) {
                gathers.push(Gather::Shrink);
                d_shrink[full] = true;
            } else {
                gathers.push(Gather::Dim(full));
            }
            full += 1;
        }
    }
    // Step 3: explicit ranges, bounds checks, sizes.
    let mut processing = Vec::with_capacity(dims);
    let mut is_identity = true;
    for i in 0..dims {
        let stride = d_strides[i];
        let dim = shape[i] as i64;
        if stride == 0 {
            return Err(invalid(op, format!("strides[{i}] must be non-zero")));
        }
        if d_shrink[i] && stride <= 0 {
            return Err(invalid(op, "only stride 1 allowed on non-range indexing.".into()));
        }
        let valid = if stride > 0 { [0, dim] } else { [-1, dim - 1] };
        let canonical = |x: i64, c: usize, masked: bool| -> i64 {
            if masked {
                if stride > 0 {
                    valid[c]
                } else {
                    valid[(c + 1) & 1]
                }
            } else {
                let fwd = if x < 0 { dim + x } else { x };
                fwd.clamp(valid[0], valid[1])
            }
        };
        let (b, e) = if d_shrink[i] {
            let fwd = if d_begin[i] < 0 { dim + d_begin[i] } else { d_begin[i] };
            if fwd < 0 || fwd >= dim {
                return Err(invalid(op, format!("slice index {} of dimension {i} out of bounds.", d_begin[i])));
            }
            (fwd, fwd + 1)
        } else {
            (canonical(d_begin[i], 0, d_begin_mask[i]), canonical(d_end[i], 1, d_end_mask[i]))
        };
        d_begin[i] = b;
        is_identity &= stride == 1 && b == 0 && e == dim;
        let interval = e - b;
        let size = if interval == 0 || ((interval < 0) != (stride < 0)) {
            0
        } else {
            interval / stride + i64::from(interval % stride != 0)
        };
        processing.push(size as usize);
    }
    // Step 4: the final shape.
    let final_shape = gathers
        .iter()
        .filter_map(|g| match *g {
            Gather::Dim(d) => Some(processing[d]),
            Gather::NewAxis => Some(1),
            Gather::Shrink => None,
        })
        .collect();
    Ok(SliceSpec { begin: d_begin, strides: d_strides, processing, final_shape, is_identity })
}

impl SliceSpec {
    /// The input elements taken, as a view of a tensor of `shape`.
    fn view(&self, shape: &[usize]) -> View {
        let strides = strides_of(shape);
        let offset: isize = self.begin.iter().zip(&strides).map(|(&b, &s)| b as isize * s as isize).sum();
        let steps: Vec<isize> = self.strides.iter().zip(&strides).map(|(&st, &s)| st as isize * s as isize).collect();
        View::new(offset, &self.processing, &steps)
    }
}

struct StridedSlice {
    masks: Masks,
    grad: bool,
}

impl Kernel for StridedSlice {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.grad { "StridedSliceGrad" } else { "StridedSlice" };
        expect_inputs(op, ctx, if self.grad { 5 } else { 4 })?;
        let first = ctx.input(0)?;
        let (begin, end, strides) = (ctx.input(1)?, ctx.input(2)?, ctx.input(3)?);
        for (name, t) in [("begin", &begin), ("end", &end), ("strides", &strides)] {
            if t.rank() != 1 {
                return Err(invalid(op, format!("{name} must be a 1-D tensor, got shape {}", ShapeDisplay(t.shape()))));
            }
        }
        let shape = if self.grad {
            if first.rank() != 1 {
                return Err(invalid(op, format!("shape must be 1-D, got shape {}", ShapeDisplay(first.shape()))));
            }
            sizes(op, "shape", &first.to_i64s()?)?
        } else {
            first.shape().to_vec()
        };
        checked_count(op, &shape)?;
        let spec = strided_slice_spec(op, &shape, &begin.to_i64s()?, &end.to_i64s()?, &strides.to_i64s()?, self.masks)?;
        if !self.grad {
            if spec.is_identity && spec.final_shape == shape {
                return ctx.forward_input(0, 0);
            }
            let mut out = ctx.allocate_output(0, &spec.final_shape)?;
            let view = spec.view(&shape);
            return gather_any(&view, &first, &mut out);
        }
        let dy = ctx.input(4)?;
        if dy.shape() != spec.final_shape.as_slice() {
            return Err(invalid(
                op,
                format!("shape of dy was {} instead of {}", ShapeDisplay(dy.shape()), ShapeDisplay(&spec.final_shape)),
            ));
        }
        let mut out = ctx.allocate_output(0, &shape)?;
        by_width!(dy.dtype(), W => {
            let out_data = out.words_mut::<W>()?;
            if spec.is_identity {
                copy_all(dy.words()?, out_data);
                return Ok(());
            }
            // Zero bits are zero in every element type.
            fill_all(out_data, 0);
            spec.view(&shape).scatter(dy.words()?, out_data)
        })
    }
}

// ----------------------------------------------------------------- Tile

fn tile(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "Tile";
    expect_inputs(OP, ctx, 2)?;
    let (input, multiples) = (ctx.input(0)?, ctx.input(1)?);
    let shape = input.shape();
    let rank = shape.len();
    if multiples.rank() != 1 || multiples.len() != rank {
        return Err(invalid(
            OP,
            format!(
                "Expected multiples argument to be a vector of length {rank} but got length {}",
                multiples.shape().first().copied().unwrap_or(0)
            ),
        ));
    }
    let multiples = multiples.to_i64s()?;
    for (i, &m) in multiples.iter().enumerate() {
        if m < 0 {
            return Err(invalid(OP, format!("Expected multiples[{i}] >= 0, but got {m}")));
        }
    }
    let out_shape: Vec<usize> = shape.iter().zip(&multiples).map(|(&d, &m)| d.saturating_mul(m as usize)).collect();
    checked_count(OP, &out_shape)?;
    let mut out = ctx.allocate_output(0, &out_shape)?;
    by_width!(input.dtype(), W => tile_words(input.words::<W>()?, shape, &out_shape, out.words_mut()?));
    Ok(())
}

/// Tile's copy: `out_data` (of `out_shape`) is `src` (of `shape`) repeated.
fn tile_words<T: Copy + Send + Sync>(src: &[T], shape: &[usize], out_shape: &[usize], out_data: &mut [T]) {
    let rank = shape.len();
    if out_data.is_empty() {
        return;
    }
    if rank == 0 {
        out_data[0] = src[0];
        return;
    }
    let in_row = shape[rank - 1];
    let out_row = out_shape[rank - 1];
    let outer_out = &out_shape[..rank - 1];
    let in_strides = strides_of(shape);
    let zeros = vec![0isize; rank - 1];
    par_rows(out_data, out_row, |first, chunk| {
        // Output outer index → input outer index by wrapping each digit.
        let mut walk = Walk::new(outer_out, &zeros, &zeros, 0, 0, first);
        for row in chunk.chunks_exact_mut(out_row) {
            let at: usize = (0..rank - 1).map(|i| (walk.index[i] % shape[i]) * in_strides[i]).sum();
            let src_row = &src[at..at + in_row];
            if in_row == 1 {
                row.fill(src_row[0]);
            } else {
                for rep in row.chunks_exact_mut(in_row) {
                    rep.copy_from_slice(src_row);
                }
            }
            walk.advance();
        }
    });
}

// ------------------------------------------------------------------ Pad

struct Pad {
    v2: bool,
}

impl Kernel for Pad {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.v2 { "PadV2" } else { "Pad" };
        expect_inputs(op, ctx, if self.v2 { 3 } else { 2 })?;
        let (input, paddings) = (ctx.input(0)?, ctx.input(1)?);
        let shape = input.shape();
        let rank = shape.len();
        if paddings.rank() != 2 || paddings.shape()[1] != 2 {
            return Err(invalid(
                op,
                format!("paddings must be a matrix with 2 columns: {}", ShapeDisplay(paddings.shape())),
            ));
        }
        if paddings.shape()[0] != rank {
            return Err(invalid(
                op,
                format!(
                    "The first dimension of paddings must be the rank of inputs{} {}",
                    ShapeDisplay(paddings.shape()),
                    ShapeDisplay(shape)
                ),
            ));
        }
        let constant = if self.v2 {
            let c = ctx.input(2)?;
            if c.len() != 1 || c.rank() != 0 {
                return Err(invalid(op, format!("constant_values must be a scalar. Got: {}", ShapeDisplay(c.shape()))));
            }
            Some(c)
        } else {
            None
        };
        let pads = paddings.to_i64s()?;
        let mut before = Vec::with_capacity(rank);
        let mut out_shape = Vec::with_capacity(rank);
        for i in 0..rank {
            let (b, a) = (pads[2 * i], pads[2 * i + 1]);
            if b < 0 || a < 0 {
                return Err(invalid(op, format!("Paddings must be non-negative: {b} {a}")));
            }
            before.push(b as usize);
            out_shape.push(shape[i].saturating_add(b as usize).saturating_add(a as usize));
        }
        checked_count(op, &out_shape)?;
        if out_shape == shape {
            return ctx.forward_input(0, 0);
        }
        let mut out = ctx.allocate_output(0, &out_shape)?;
        by_width!(input.dtype(), W => {
            // Pad's constant is zero, whose bits are zero in every type.
            let constant = match &constant {
                Some(c) => c.scalar_word::<W>()?,
                None => 0,
            };
            pad_words(input.words::<W>()?, shape, &out_shape, &before, constant, out.words_mut()?);
        });
        Ok(())
    }
}

/// Pad's copy: `out_data` (of `out_shape`) is `src` (of `shape`) with
/// `before[i]` elements of `constant` ahead of it in each dimension, and
/// `constant` after it up to `out_shape`.
fn pad_words<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    out_shape: &[usize],
    before: &[usize],
    constant: T,
    out_data: &mut [T],
) {
    let rank = shape.len();
    if out_data.is_empty() {
        return;
    }
    if src.is_empty() {
        fill_all(out_data, constant);
        return;
    }
    // rank ≥ 1 here (a scalar has nothing to pad and was forwarded).
    let (in_row, out_row, lead) = (shape[rank - 1], out_shape[rank - 1], before[rank - 1]);
    let outer_out = &out_shape[..rank - 1];
    let in_strides = strides_of(shape);
    let zeros = vec![0isize; rank - 1];
    par_rows(out_data, out_row, |first, chunk| {
        let mut walk = Walk::new(outer_out, &zeros, &zeros, 0, 0, first);
        for row in chunk.chunks_exact_mut(out_row) {
            let mut at = Some(0usize);
            for i in 0..rank - 1 {
                at = match (at, walk.index[i].checked_sub(before[i])) {
                    (Some(a), Some(j)) if j < shape[i] => Some(a + j * in_strides[i]),
                    _ => None,
                };
            }
            match at {
                Some(at) => {
                    row[..lead].fill(constant);
                    row[lead..lead + in_row].copy_from_slice(&src[at..at + in_row]);
                    row[lead + in_row..].fill(constant);
                }
                None => row.fill(constant),
            }
            walk.advance();
        }
    });
}

// ------------------------------------------------------ Fill, Snapshot

fn fill(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "Fill";
    expect_inputs(OP, ctx, 2)?;
    let (dims, value) = (ctx.input(0)?, ctx.input(1)?);
    if dims.rank() != 1 {
        return Err(invalid(OP, format!("dims must be a vector, got shape {}", ShapeDisplay(dims.shape()))));
    }
    if value.rank() != 0 {
        return Err(invalid(OP, format!("value must be a scalar, got shape {}", ShapeDisplay(value.shape()))));
    }
    let shape = sizes(OP, "dims", &dims.to_i64s()?)?;
    checked_count(OP, &shape)?;
    let mut out = ctx.allocate_output(0, &shape)?;
    by_width!(value.dtype(), W => fill_all(out.words_mut::<W>()?, value.scalar_word()?));
    Ok(())
}

/// `Range(start, limit, delta)` in float32 and int64 (TensorFlow's own
/// host-memory kernel covers int32): `start`, `start + delta`, … short of
/// `limit`, element `i` being `start + i·delta` as on the CPU (not a running
/// sum, which would drift).
fn range(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "Range";
    expect_inputs(OP, ctx, 3)?;
    let (start, limit, delta) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    for (name, t) in [("start", &start), ("limit", &limit), ("delta", &delta)] {
        if t.len() != 1 {
            return Err(invalid(OP, format!("{name} must be a scalar, not shape {}", ShapeDisplay(t.shape()))));
        }
    }
    fn check<T: PartialOrd + Default + std::fmt::Display>(start: T, limit: T, delta: T) -> Result<(), Error> {
        let zero = T::default();
        if delta == zero {
            return Err(invalid(OP, "Requires delta != 0".into()));
        }
        if delta > zero && start > limit {
            return Err(invalid(OP, format!("Requires start <= limit when delta > 0: {start}/{limit}")));
        }
        if delta < zero && start < limit {
            return Err(invalid(OP, format!("Requires start >= limit when delta < 0: {start}/{limit}")));
        }
        Ok(())
    }
    match start.dtype() {
        DType::I64 => {
            let (a, b, d) = (start.scalar::<i64>()?, limit.scalar::<i64>()?, delta.scalar::<i64>()?);
            check(a, b, d)?;
            let size = (i128::from(b) - i128::from(a)).unsigned_abs().div_ceil(i128::from(d).unsigned_abs());
            let size = usize::try_from(size).map_err(|_| invalid(OP, format!("Requires size < 2^63, got {size}")))?;
            let mut out = ctx.allocate_output(0, &[size])?;
            let mut value = a;
            for o in out.data_mut::<i64>()? {
                *o = value;
                value = value.wrapping_add(d);
            }
        }
        _ => {
            let (a, b, d) = (start.scalar::<f32>()?, limit.scalar::<f32>()?, delta.scalar::<f32>()?);
            check(a, b, d)?;
            let size = ((b - a) / d).abs().ceil();
            if !size.is_finite() || size >= 2f32.powi(62) {
                return Err(invalid(OP, format!("Requires size < 2^63, got {size}")));
            }
            let mut out = ctx.allocate_output(0, &[size as usize])?;
            for (i, o) in out.data_mut::<f32>()?.iter_mut().enumerate() {
                *o = a + i as f32 * d;
            }
        }
    }
    Ok(())
}

/// `ZerosLike`/`OnesLike` for [`LIKE_TYPES`]: a tensor of the input's shape,
/// all 0 or all 1 in its type.
struct FillLike {
    one: bool,
}

impl Kernel for FillLike {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.one { "OnesLike" } else { "ZerosLike" };
        expect_inputs(op, ctx, 1)?;
        let input = ctx.input(0)?;
        let mut out = ctx.allocate_output(0, input.shape())?;
        let one = self.one;
        match out.dtype() {
            DType::F64 => fill_all(out.data_mut()?, if one { 1.0f64 } else { 0.0 }),
            DType::I64 => fill_all(out.data_mut()?, i64::from(one)),
            DType::U8 => fill_all(out.data_mut()?, u8::from(one)),
            DType::U64 => fill_all(out.data_mut()?, u64::from(one)),
            DType::Bool => fill_all(out.data_mut()?, TfBool::from(one)),
            other => return Err(invalid(op, format!("tfwasm has no {other} kernel"))),
        }
        Ok(())
    }
}

fn snapshot(ctx: &dyn OpContext) -> Result<(), Error> {
    expect_inputs("Snapshot", ctx, 1)?;
    let input = ctx.input(0)?;
    let mut out = ctx.allocate_output(0, input.shape())?;
    by_width!(input.dtype(), W => copy_all(input.words::<W>()?, out.words_mut()?));
    Ok(())
}

// ------------------------------------------------------------- GatherV2

struct GatherV2 {
    batch_dims: i64,
}

/// `[1,2]`-style multi-index of flat element `flat` of `shape`.
fn multi_index(shape: &[usize], flat: usize) -> String {
    let mut index = vec![0; shape.len()];
    let mut rest = flat;
    for i in (0..shape.len()).rev() {
        if shape[i] > 0 {
            index[i] = rest % shape[i];
            rest /= shape[i];
        }
    }
    format!("[{}]", index.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
}

impl Kernel for GatherV2 {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "GatherV2";
        expect_inputs(OP, ctx, 3)?;
        let (params, indices, axis_t) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        if axis_t.len() != 1 {
            return Err(invalid(OP, format!("axis must be scalar, got shape {}", ShapeDisplay(axis_t.shape()))));
        }
        let p_shape = params.shape();
        let i_shape = indices.shape();
        if p_shape.is_empty() {
            return Err(invalid(OP, "params must be at least 1 dimensional".into()));
        }
        let axis = normalize_axis(OP, axis_t.to_i64s()?[0], p_shape.len())?;
        let ri = i_shape.len() as i64;
        let mut batch_dims = self.batch_dims;
        if batch_dims != 0 {
            if batch_dims < -ri || batch_dims > ri {
                return Err(invalid(
                    OP,
                    format!("Expected batch_dims in the range [{}, {ri}], but got {batch_dims}", -ri),
                ));
            }
            if batch_dims < 0 {
                batch_dims += ri;
            }
        }
        let b = batch_dims as usize;
        if b > axis {
            return Err(invalid(OP, format!("batch_dims ({b}) must be less than or equal to axis ({axis}).")));
        }
        for i in 0..b {
            if p_shape[i] != i_shape[i] {
                return Err(invalid(
                    OP,
                    format!("params.shape[{i}]: {} should be equal to indices.shape[{i}]: {}", p_shape[i], i_shape[i]),
                ));
            }
        }
        let mut out_shape: Vec<usize> = p_shape[..axis].to_vec();
        out_shape.extend_from_slice(&i_shape[b..]);
        out_shape.extend_from_slice(&p_shape[axis + 1..]);
        checked_count(OP, &out_shape)?;

        let limit = p_shape[axis];
        let index_values = indices.to_i64s()?;
        if let Some(bad) = index_values.iter().position(|&v| v < 0 || v >= limit as i64) {
            return Err(invalid(
                OP,
                format!("indices{} = {} is not in [0, {limit})", multi_index(i_shape, bad), index_values[bad]),
            ));
        }
        let outer: usize = p_shape[b..axis].iter().product();
        let inner: usize = p_shape[axis + 1..].iter().product();
        let n_idx: usize = i_shape[b..].iter().product();
        let mut out = ctx.allocate_output(0, &out_shape)?;
        by_width!(params.dtype(), W => {
        let src = params.words::<W>()?;
        let out_data = out.words_mut::<W>()?;
        if out_data.is_empty() {
            return Ok(());
        }
        // Output rows of `inner`, ordered (batch·outer, index): counters
        // advance per row, no division past the start of a chunk.
        par_rows(out_data, inner, |first, chunk| {
            let (mut bo, mut j) = (first / n_idx, first % n_idx);
            for row in chunk.chunks_exact_mut(inner) {
                let bi = bo / outer;
                let idx = index_values[bi * n_idx + j] as usize;
                let at = (bo * limit + idx) * inner;
                if inner == 1 {
                    row[0] = src[at];
                } else {
                    row.copy_from_slice(&src[at..at + inner]);
                }
                j += 1;
                if j == n_idx {
                    j = 0;
                    bo += 1;
                }
            }
        });
        });
        Ok(())
    }
}

// --------------------------------------------------- UnsortedSegmentSum

/// `UnsortedSegmentSum(data, segment_ids, num_segments)`: output row `s`
/// (of `data.shape[segment_ids.rank..]`) is the sum of the rows `data[i]`
/// with `segment_ids[i] == s`, 0 for a segment no id names. The gradient
/// of GatherV2: Keras' optimizers densify every Embedding's sparse
/// gradient with it. As on TensorFlow's CPU device, an id of
/// `num_segments` or more is an error and a negative id drops its row.
fn unsorted_segment_sum(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "UnsortedSegmentSum";
    expect_inputs(OP, ctx, 3)?;
    let (data, ids_t, num_t) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    if num_t.rank() != 0 {
        return Err(invalid(OP, format!("num_segments must be a scalar, got shape {}", ShapeDisplay(num_t.shape()))));
    }
    let num = num_t.to_i64s()?[0];
    let segments = usize::try_from(num).map_err(|_| invalid(OP, format!("num_segments = {num} is negative")))?;
    let (d_shape, i_shape) = (data.shape(), ids_t.shape());
    if !d_shape.starts_with(i_shape) {
        return Err(invalid(
            OP,
            format!(
                "data.shape = {} does not start with segment_ids.shape = {}",
                ShapeDisplay(d_shape),
                ShapeDisplay(i_shape)
            ),
        ));
    }
    let ids = ids_t.to_i64s()?;
    if let Some(bad) = ids.iter().position(|&id| id >= num) {
        return Err(invalid(
            OP,
            format!("segment_ids{} = {} is not in [0, {num})", multi_index(i_shape, bad), ids[bad]),
        ));
    }
    let mut out_shape = vec![segments];
    out_shape.extend_from_slice(&d_shape[i_shape.len()..]);
    checked_count(OP, &out_shape)?;
    let inner: usize = d_shape[i_shape.len()..].iter().product();
    let src = data.data::<f32>()?;
    if src.len() != ids.len() * inner {
        return Err(Error::Internal(format!("{OP}: {} data elements for {} rows of {inner}", src.len(), ids.len())));
    }
    let mut out = ctx.allocate_output(0, &out_shape)?;
    segment_sum(src, &ids, inner, out.data_mut()?);
    Ok(())
}

/// `out[s] = Σ src[i]` over the rows `i` (of `inner` elements) with
/// `ids[i] == s`, each sum taken in increasing `i` as the CPU device's is,
/// so the results are the same bit for bit. Every id is below the number
/// of output rows; negative ones are skipped.
///
/// Large sums split the output into contiguous chunks, each one summed by
/// one task that scans every id and adds the part of each row that falls
/// in its chunk: no two tasks write one element, and the order per element
/// stays that of the ids. A chunk spans many segments when there are many,
/// or a band of columns of one segment when there are few. Since every task
/// reads every id, there are at most `inner / 4` tasks (on average four
/// additions per id read), so narrow rows stay on one thread. Ids crowded
/// into one chunk leave the other tasks idle.
fn segment_sum(src: &[f32], ids: &[i64], inner: usize, out: &mut [f32]) {
    let threads = pool::threads();
    let tasks = (threads * CHUNKS_PER_THREAD).min(inner / 4);
    if ids.len() * inner < PARALLEL_MIN_ELEMENTS || threads == 1 || tasks < 2 {
        fill_all(out, 0.0);
        add_segment_rows(src, ids, inner, 0, out);
        return;
    }
    let chunk = out.len().div_ceil(tasks);
    pool::for_each_chunk_mut(out, chunk, |task, part| {
        part.fill(0.0);
        add_segment_rows(src, ids, inner, task * chunk, part);
    });
}

/// Adds into `part` (output elements `start..start + part.len()`) the
/// elements of each row `src[i]` that land there, in increasing `i`.
fn add_segment_rows(src: &[f32], ids: &[i64], inner: usize, start: usize, part: &mut [f32]) {
    if part.is_empty() || inner == 0 {
        return;
    }
    let end = start + part.len();
    let (first, last) = (start / inner, (end - 1) / inner);
    for (i, &id) in ids.iter().enumerate() {
        // Negative ids fail the conversion and are dropped.
        let Ok(s) = usize::try_from(id) else { continue };
        if s < first || s > last {
            continue;
        }
        let (lo, hi) = ((s * inner).max(start), ((s + 1) * inner).min(end));
        let row = &src[i * inner + lo - s * inner..i * inner + hi - s * inner];
        for (o, &v) in part[lo - start..hi - start].iter_mut().zip(row) {
            *o += v;
        }
    }
}

// ------------------------------------------------------------ ReverseV2

/// `ReverseV2(tensor, axis)`: `tensor` with the listed axes reversed
/// (Keras' `go_backwards` recurrences). A strided view with negative steps,
/// copied as Transpose's and Slice's views are. As on TensorFlow's CPU
/// device, a scalar or empty tensor comes back unchanged whatever `axis`
/// holds; otherwise an axis out of range or listed twice is an error. Any
/// rank is reversed (the CPU device stops at 8).
fn reverse_v2(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "ReverseV2";
    expect_inputs(OP, ctx, 2)?;
    let (input, axis_t) = (ctx.input(0)?, ctx.input(1)?);
    if input.rank() == 0 || input.is_empty() {
        return ctx.forward_input(0, 0);
    }
    if axis_t.rank() != 1 {
        return Err(invalid(OP, format!("axis must be a vector, got shape {}", ShapeDisplay(axis_t.shape()))));
    }
    let shape = input.shape();
    let axes = axis_t.to_i64s()?;
    let mut reversed = vec![false; shape.len()];
    for &axis in &axes {
        let d = normalize_axis(OP, axis, shape.len())?;
        if std::mem::replace(&mut reversed[d], true) {
            return Err(invalid(OP, format!("axis {d} is listed more than once in {axes:?}")));
        }
    }
    if !reversed.contains(&true) {
        return ctx.forward_input(0, 0);
    }
    let strides = strides_of(shape);
    let mut offset = 0isize;
    let mut steps = Vec::with_capacity(shape.len());
    for ((&n, &stride), &flip) in shape.iter().zip(&strides).zip(&reversed) {
        if flip {
            offset += (n as isize - 1) * stride as isize;
            steps.push(-(stride as isize));
        } else {
            steps.push(stride as isize);
        }
    }
    let mut out = ctx.allocate_output(0, shape)?;
    gather_any(&View::new(offset, shape, &steps), &input, &mut out)
}

// --------------------------------------------------------------- OneHot

struct OneHot {
    axis: i64,
}

impl Kernel for OneHot {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        const OP: &str = "OneHot";
        expect_inputs(OP, ctx, 4)?;
        let (indices, depth, on, off) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.input(3)?);
        let i_shape = indices.shape();
        let rank = i_shape.len();
        if self.axis != -1 && (self.axis < 0 || self.axis > rank as i64) {
            return Err(invalid(
                OP,
                format!("Expected axis to be -1 or between [0, {rank}]. But received: {}", self.axis),
            ));
        }
        if depth.rank() != 0 {
            return Err(invalid(OP, format!("depth must be a scalar, but got: {}", ShapeDisplay(depth.shape()))));
        }
        if on.rank() != 0 {
            return Err(invalid(OP, format!("on_value must be a scalar, but got: {}", ShapeDisplay(on.shape()))));
        }
        if off.rank() != 0 {
            return Err(invalid(OP, format!("off_value must be a scalar, but got: {}", ShapeDisplay(off.shape()))));
        }
        let depth = depth.to_i64s()?[0];
        if depth < 0 {
            return Err(invalid(OP, format!("depth must be non-negative, got: {depth}")));
        }
        let depth = depth as usize;
        let axis = if self.axis == -1 { rank } else { self.axis as usize };
        let mut out_shape = i_shape.to_vec();
        out_shape.insert(axis, depth);
        checked_count(OP, &out_shape)?;
        let index_values = indices.to_i64s()?;
        let suffix: usize = i_shape[axis..].iter().product();
        let mut out = ctx.allocate_output(0, &out_shape)?;
        by_width!(on.dtype(), W => {
        let (on, off) = (on.scalar_word::<W>()?, off.scalar_word::<W>()?);
        let out_data = out.words_mut::<W>()?;
        if out_data.is_empty() {
            return Ok(());
        }
        // One block of depth × suffix per prefix index p: row d of it is
        // `on` where indices[p, s] == d.
        let block = depth * suffix;
        par_rows(out_data, block, |first, chunk| {
            for (k, rows) in chunk.chunks_exact_mut(block).enumerate() {
                let p = first + k;
                let idx = &index_values[p * suffix..p * suffix + suffix];
                if suffix == 1 {
                    rows.fill(off);
                    if let Ok(d) = usize::try_from(idx[0]) {
                        if d < depth {
                            rows[d] = on;
                        }
                    }
                    continue;
                }
                for (d, row) in rows.chunks_exact_mut(suffix).enumerate() {
                    let d = d as i64;
                    for (o, &i) in row.iter_mut().zip(idx) {
                        *o = if i == d { on } else { off };
                    }
                }
            }
        });
        });
        Ok(())
    }
}

// ------------------------------------------ SpaceToBatchND, BatchToSpaceND

/// `SpaceToBatchND(input, block_shape, paddings)` and its inverse
/// `BatchToSpaceND(input, block_shape, crops)`: TensorFlow runs a dilated
/// convolution (`dilation_rate` > 1 in Keras) as a plain one between the
/// two. Both relate a *space* tensor `[batch, x_1..x_M, rest…]` to a *batch*
/// tensor `[count·batch, o_1..o_M, rest…]`, `count` the product of the
/// `M` block sizes: batch element `k·batch + b` at `o` is space element
/// `b` at `x_j = o_j·block_j + k_j − before_j`, with `(k_1..k_M)` the
/// row-major digits of `k` in the block and `before_j` the padding (crop)
/// ahead of dimension `j`; a position in the padding reads as zero.
struct SpaceBatch {
    /// `SpaceToBatchND` (space in, batch out), else `BatchToSpaceND`.
    to_batch: bool,
}

/// The shapes and offsets one [`SpaceBatch`] execution moves between.
struct SpaceBatchPlan {
    batch: usize,
    /// Spatial sizes on the space side (`x`) and on the batch side (`o`).
    space: Vec<usize>,
    grid: Vec<usize>,
    blocks: Vec<usize>,
    before: Vec<usize>,
    /// Elements per spatial position (the `rest` dimensions).
    inner: usize,
    to_batch: bool,
}

impl Kernel for SpaceBatch {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let (op, edge) = if self.to_batch { ("SpaceToBatchND", "paddings") } else { ("BatchToSpaceND", "crops") };
        expect_inputs(op, ctx, 3)?;
        let (input, block_t, edges_t) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        if block_t.rank() != 1 {
            return Err(invalid(op, format!("block_shape must be 1-D, got shape {}", ShapeDisplay(block_t.shape()))));
        }
        let m = block_t.len();
        if edges_t.shape() != [m, 2] {
            return Err(invalid(op, format!("{edge} must have shape [{m}, 2], got {}", ShapeDisplay(edges_t.shape()))));
        }
        let shape = input.shape();
        if shape.len() < m + 1 {
            return Err(invalid(op, format!("input rank should be >= {}, got shape {}", m + 1, ShapeDisplay(shape))));
        }
        let blocks = block_t.to_i64s()?;
        if let Some(bad) = blocks.iter().find(|&&b| b < 1) {
            return Err(invalid(op, format!("block_shape must be positive, got {blocks:?} ({bad})")));
        }
        let blocks: Vec<usize> = blocks.iter().map(|&b| b as usize).collect();
        let edges = sizes(op, edge, &edges_t.to_i64s()?)?;
        let count = blocks
            .iter()
            .try_fold(1usize, |n, &b| n.checked_mul(b))
            .ok_or_else(|| invalid(op, "block too large".into()))?;
        let mut out_shape = shape.to_vec();
        let (batch, space, grid) = if self.to_batch {
            for j in 0..m {
                let padded = shape[j + 1].saturating_add(edges[2 * j]).saturating_add(edges[2 * j + 1]);
                if padded % blocks[j] != 0 {
                    return Err(invalid(
                        op,
                        format!("padded_shape[{j}]={padded} is not divisible by block_shape[{j}]={}", blocks[j]),
                    ));
                }
                out_shape[j + 1] = padded / blocks[j];
            }
            out_shape[0] = shape[0].saturating_mul(count);
            (shape[0], shape[1..=m].to_vec(), out_shape[1..=m].to_vec())
        } else {
            if shape[0] % count != 0 {
                return Err(invalid(
                    op,
                    format!(
                        "Input batch dimension ({}) is not divisible by product of block sizes ({count})",
                        shape[0]
                    ),
                ));
            }
            for j in 0..m {
                let (crop_before, crop_after) = (edges[2 * j], edges[2 * j + 1]);
                let full = shape[j + 1].saturating_mul(blocks[j]);
                out_shape[j + 1] = full.checked_sub(crop_before).and_then(|n| n.checked_sub(crop_after)).ok_or_else(|| {
                    invalid(
                        op,
                        format!(
                            "Negative output dimension size caused by too many crops: crops[{j}] = [{crop_before}, {crop_after}] for an input dimension of {} and a block of {}",
                            shape[j + 1],
                            blocks[j]
                        ),
                    )
                })?;
            }
            out_shape[0] = shape[0] / count;
            (out_shape[0], out_shape[1..=m].to_vec(), shape[1..=m].to_vec())
        };
        checked_count(op, &out_shape)?;
        let plan = SpaceBatchPlan {
            batch,
            space,
            grid,
            blocks,
            before: (0..m).map(|j| edges[2 * j]).collect(),
            inner: shape[m + 1..].iter().product(),
            to_batch: self.to_batch,
        };
        let mut out = ctx.allocate_output(0, &out_shape)?;
        by_width!(input.dtype(), W => plan.run(input.words::<W>()?, out.words_mut()?));
        Ok(())
    }
}

impl SpaceBatchPlan {
    /// Fills `out` from `src`, one row of `inner` elements per position.
    fn run<T: Copy + Default + Send + Sync>(&self, src: &[T], out: &mut [T]) {
        let spatial = if self.to_batch { &self.grid } else { &self.space };
        let positions: usize = spatial.iter().product();
        par_rows(out, self.inner, |first, chunk| {
            let mut index = vec![0usize; spatial.len()];
            for (r, row) in chunk.chunks_exact_mut(self.inner).enumerate() {
                // Output row → (outer, spatial index), row-major; `positions`
                // is not 0, or `out` would be empty.
                let r = first + r;
                let mut rest = r % positions;
                for j in (0..spatial.len()).rev() {
                    index[j] = rest % spatial[j];
                    rest /= spatial[j];
                }
                match self.source_row(r / positions, &index) {
                    Some(at) => row.copy_from_slice(&src[at * self.inner..(at + 1) * self.inner]),
                    None => row.fill(T::default()),
                }
            }
        });
    }

    /// The input row for output row (`outer`, `index`), or `None` where the
    /// output is padding (zero bits are zero in every type).
    fn source_row(&self, outer: usize, index: &[usize]) -> Option<usize> {
        let m = self.blocks.len();
        if self.to_batch {
            // outer = k·batch + b and index = o; the input row is (b, x).
            let mut k = outer / self.batch;
            let mut at = 0;
            let mut scale = 1;
            for j in (0..m).rev() {
                let digit = k % self.blocks[j];
                k /= self.blocks[j];
                let x = (index[j] * self.blocks[j] + digit).checked_sub(self.before[j])?;
                if x >= self.space[j] {
                    return None;
                }
                at += x * scale;
                scale *= self.space[j];
            }
            Some((outer % self.batch) * scale + at)
        } else {
            // outer = b and index = x; the input row is (k·batch + b, o).
            let (mut k, mut k_scale, mut at, mut scale) = (0, 1, 0, 1);
            for j in (0..m).rev() {
                let u = index[j] + self.before[j];
                at += (u / self.blocks[j]) * scale;
                scale *= self.grid[j];
                k += (u % self.blocks[j]) * k_scale;
                k_scale *= self.blocks[j];
            }
            Some((k * self.batch + outer) * scale + at)
        }
    }
}

// ----------------------------------------------------------------- AddN

fn add_n(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "AddN";
    let n = ctx.num_inputs();
    if n == 0 {
        return Err(Error::Internal(format!("{OP}: no inputs")));
    }
    let inputs: Vec<Tensor> = (0..n).map(|i| ctx.input(i)).collect::<Result<_, _>>()?;
    let shape = inputs[0].shape();
    for (i, t) in inputs.iter().enumerate() {
        if t.shape() != shape {
            return Err(invalid(
                OP,
                format!(
                    "Inputs to operation AddN must have the same size and shape.  Input 0: {} != input {i}: {}",
                    ShapeDisplay(shape),
                    ShapeDisplay(t.shape())
                ),
            ));
        }
    }
    if n == 1 {
        return ctx.forward_input(0, 0);
    }
    let datas: Vec<&[f32]> = inputs.iter().map(|t| t.data::<f32>()).collect::<Result<_, _>>()?;
    let mut out = ctx.allocate_output(0, shape)?;
    // TensorFlow's CPU order: the first `n % 8` inputs (8 if that is 0, 9
    // if it is 1) summed left to right, then each following group of 8
    // summed left to right and added to the total. In cache-sized blocks.
    let head = match n % 8 {
        0 => 8,
        1 => 9,
        r => r,
    }
    .min(n);
    const BLOCK: usize = 4096;
    par_rows(out.data_mut()?, 1, |first, chunk| {
        let mut group = vec![0.0f32; BLOCK.min(chunk.len())];
        for (b, block) in chunk.chunks_mut(BLOCK).enumerate() {
            let start = first + b * BLOCK;
            let range = start..start + block.len();
            sum_left_to_right(&datas[..head], range.clone(), block);
            for eight in datas[head..].chunks(8) {
                let g = &mut group[..block.len()];
                sum_left_to_right(eight, range.clone(), g);
                for (o, &x) in block.iter_mut().zip(g.iter()) {
                    *o += x;
                }
            }
        }
    });
    Ok(())
}

/// `out = ((in0 + in1) + in2) + …` over `range` of each input (`ins` ≥ 1).
fn sum_left_to_right(ins: &[&[f32]], range: std::ops::Range<usize>, out: &mut [f32]) {
    out.copy_from_slice(&ins[0][range.clone()]);
    for d in &ins[1..] {
        for (o, &x) in out.iter_mut().zip(&d[range.clone()]) {
            *o += x;
        }
    }
}

// ---------------------------------------------------------- BroadcastTo

fn broadcast_to(ctx: &dyn OpContext) -> Result<(), Error> {
    const OP: &str = "BroadcastTo";
    expect_inputs(OP, ctx, 2)?;
    let (input, shape_t) = (ctx.input(0)?, ctx.input(1)?);
    if shape_t.rank() != 1 {
        return Err(invalid(OP, format!("shape must be a vector, got shape {}", ShapeDisplay(shape_t.shape()))));
    }
    let target = sizes(OP, "shape", &shape_t.to_i64s()?)?;
    checked_count(OP, &target)?;
    let in_shape = input.shape();
    let unable = || {
        invalid(
            OP,
            format!(
                "Unable to broadcast tensor of shape {} to tensor of shape {}",
                ShapeDisplay(in_shape),
                ShapeDisplay(&target)
            ),
        )
    };
    if in_shape.len() > target.len() {
        return Err(unable());
    }
    let skip = target.len() - in_shape.len();
    if in_shape.iter().zip(&target[skip..]).any(|(&a, &t)| a != t && a != 1) {
        return Err(unable());
    }
    if in_shape == target.as_slice() {
        return ctx.forward_input(0, 0);
    }
    let plan = Broadcast::new(in_shape, &target).map_err(|_| unable())?;
    let mut out = ctx.allocate_output(0, &target)?;
    by_width!(input.dtype(), W => {
        let src = input.words::<W>()?;
        par_rows(out.words_mut::<W>()?, 1, |first, chunk| {
            plan.for_each_run(first, chunk.len(), |run| {
                let dst = &mut chunk[run.out - first..run.out - first + run.len];
                if run.a_step == 0 {
                    dst.fill(src[run.a]);
                } else {
                    dst.copy_from_slice(&src[run.a..run.a + run.len]);
                }
            });
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Element, LocalContext};

    #[test]
    fn split_sizes_infer_one_part_and_reject_the_rest() {
        assert_eq!(split_sizes("SplitV", &[2, -1, 1], 3, 7).unwrap(), vec![2, 4, 1]);
        assert_eq!(split_sizes("SplitV", &[3, 4], 2, 7).unwrap(), vec![3, 4]);
        assert_eq!(split_sizes("SplitV", &[0, -1], 2, 0).unwrap(), vec![0, 0]);
        for (given, count, extent) in
            [(&[3, 3][..], 2, 7), (&[-1, -1], 2, 4), (&[5, -1], 2, 4), (&[-2, 6], 2, 4), (&[4], 2, 4)]
        {
            assert!(matches!(split_sizes("SplitV", given, count, extent), Err(Error::InvalidArgument(_))), "{given:?}");
        }
    }

    #[test]
    fn split_and_split_v_cut_along_the_axis() {
        let input = values(2 * 6 * 3, 9);
        let split = Split { num_split: 3, sizes_input: false };
        let axis = Tensor::from_vec(&[], vec![1i32]).unwrap();
        let outs = LocalContext::run(
            &split,
            vec![axis, Tensor::from_vec(&[2, 6, 3], input.clone()).unwrap()],
            &[DType::F32; 3],
        )
        .unwrap();
        for (part, out) in outs.iter().enumerate() {
            assert_eq!(out.shape(), &[2, 2, 3]);
            let expected: Vec<f32> =
                (0..2).flat_map(|o| input[o * 18 + part * 6..o * 18 + part * 6 + 6].to_vec()).collect();
            assert_eq!(out.data::<f32>().unwrap(), &expected[..]);
        }
        let split_v = Split { num_split: 2, sizes_input: true };
        let sizes = Tensor::from_vec(&[2], vec![-1i64, 1]).unwrap();
        let axis = Tensor::from_vec(&[], vec![-1i32]).unwrap();
        let outs = LocalContext::run(
            &split_v,
            vec![Tensor::from_vec(&[2, 6, 3], input.clone()).unwrap(), sizes, axis],
            &[DType::F32; 2],
        )
        .unwrap();
        assert_eq!(outs[0].shape(), &[2, 6, 2]);
        assert_eq!(outs[1].data::<f32>().unwrap(), &input.iter().skip(2).step_by(3).copied().collect::<Vec<_>>()[..]);
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    fn f32s(shape: &[usize], seed: u32) -> Tensor {
        Tensor::from_vec(shape, values(shape.iter().product(), seed)).unwrap()
    }

    fn ints(v: &[i64]) -> Tensor {
        Tensor::from_vec(&[v.len()], v.to_vec()).unwrap()
    }

    fn i32s(v: &[i32]) -> Tensor {
        Tensor::from_vec(&[v.len()], v.to_vec()).unwrap()
    }

    fn scalar_i(v: i64) -> Tensor {
        Tensor::from_vec(&[], vec![v]).unwrap()
    }

    fn run(kernel: &dyn Kernel, inputs: Vec<Tensor>) -> Result<(Vec<usize>, Vec<f32>), Error> {
        let out = LocalContext::run(kernel, inputs, &[DType::F32])?;
        Ok((out[0].shape().to_vec(), out[0].to_vec().unwrap()))
    }

    fn unravel(shape: &[usize], flat: usize) -> Vec<usize> {
        let mut index = vec![0; shape.len()];
        let mut rest = flat;
        for i in (0..shape.len()).rev() {
            index[i] = rest % shape[i];
            rest /= shape[i];
        }
        index
    }

    fn ravel(shape: &[usize], index: &[usize]) -> usize {
        shape.iter().zip(index).fold(0, |acc, (&d, &i)| acc * d + i)
    }

    /// SpaceToBatchND by its definition, walking the *input*: pad, then
    /// send padded position `p` of batch element `b` to batch element
    /// `k·batch + b` at `p / block`, `k` the row-major index of `p % block`.
    fn space_to_batch_reference(
        shape: &[usize],
        blocks: &[usize],
        pads: &[usize],
        src: &[f32],
    ) -> (Vec<usize>, Vec<f32>) {
        let m = blocks.len();
        let padded: Vec<usize> = (0..m).map(|j| shape[j + 1] + pads[2 * j] + pads[2 * j + 1]).collect();
        let count: usize = blocks.iter().product();
        let mut out_shape = vec![shape[0] * count];
        out_shape.extend((0..m).map(|j| padded[j] / blocks[j]));
        out_shape.extend_from_slice(&shape[m + 1..]);
        let inner: usize = shape[m + 1..].iter().product();
        let mut out = vec![0.0; out_shape.iter().product()];
        let mut padded_shape = vec![shape[0]];
        padded_shape.extend_from_slice(&padded);
        for flat in 0..padded_shape.iter().product::<usize>() {
            let p = unravel(&padded_shape, flat);
            let (b, spatial) = (p[0], &p[1..]);
            let inside: Option<Vec<usize>> =
                (0..m).map(|j| spatial[j].checked_sub(pads[2 * j]).filter(|&x| x < shape[j + 1])).collect();
            let k = (0..m).fold(0, |k, j| k * blocks[j] + spatial[j] % blocks[j]);
            let mut at = vec![k * shape[0] + b];
            at.extend((0..m).map(|j| spatial[j] / blocks[j]));
            let o = ravel(&out_shape[..m + 1], &at) * inner;
            if let Some(x) = inside {
                let mut ii = vec![b];
                ii.extend(x);
                let i = ravel(&shape[..m + 1], &ii) * inner;
                out[o..o + inner].copy_from_slice(&src[i..i + inner]);
            }
        }
        (out_shape, out)
    }

    #[test]
    fn space_to_batch_and_back_match_reference() {
        let cases: &[(&[usize], &[usize], &[usize])] = &[
            (&[2, 4, 4, 3], &[2, 2], &[0, 0, 0, 0]),
            (&[1, 5, 7, 2], &[2, 3], &[1, 0, 2, 0]),
            (&[3, 6, 1], &[3], &[0, 0]),
            (&[2, 8, 3], &[4], &[2, 2]),
            (&[0, 4, 4, 1], &[2, 2], &[0, 0, 0, 0]),
            (&[2, 3, 5, 2, 2], &[1, 2], &[0, 1, 1, 0]),
            (&[1, 1, 1], &[2], &[1, 0]),
            (&[2, 3], &[], &[]),
            (&[2, 3, 4, 5, 2], &[2, 2, 3], &[1, 0, 0, 0, 1, 0]),
            (&[3, 37, 41, 5], &[2, 2], &[1, 0, 2, 1]),
        ];
        let to_batch = SpaceBatch { to_batch: true };
        let to_space = SpaceBatch { to_batch: false };
        for &(shape, blocks, pads) in cases {
            let input = f32s(shape, 5);
            let src = input.to_vec::<f32>().unwrap();
            let block_t = ints(&blocks.iter().map(|&b| b as i64).collect::<Vec<_>>());
            let pads_t = Tensor::from_vec(&[blocks.len(), 2], pads.iter().map(|&p| p as i64).collect()).unwrap();
            let (out_shape, out) = run(&to_batch, vec![input, block_t, pads_t]).unwrap();
            let (want_shape, want) = space_to_batch_reference(shape, blocks, pads, &src);
            assert_eq!((&out_shape, &out), (&want_shape, &want), "{shape:?} {blocks:?} {pads:?}");
            // Cropping what was padded gives the input back.
            let block_t = ints(&blocks.iter().map(|&b| b as i64).collect::<Vec<_>>());
            let crops_t = Tensor::from_vec(&[blocks.len(), 2], pads.iter().map(|&p| p as i32).collect()).unwrap();
            let batched = Tensor::from_vec(&out_shape, out).unwrap();
            let (back_shape, back) = run(&to_space, vec![batched, block_t, crops_t]).unwrap();
            assert_eq!((back_shape.as_slice(), back), (shape, src), "{shape:?} {blocks:?} {pads:?}");
        }
    }

    #[test]
    fn space_to_batch_checks_its_arguments() {
        let pads = |v: &[i64]| Tensor::from_vec(&[v.len() / 2, 2], v.to_vec()).unwrap();
        let to_batch = SpaceBatch { to_batch: true };
        let to_space = SpaceBatch { to_batch: false };
        let bad: Vec<(&SpaceBatch, Vec<Tensor>, &str)> = vec![
            (&to_batch, vec![f32s(&[1, 5, 4, 1], 1), ints(&[2, 2]), pads(&[0, 0, 0, 0])], "not divisible"),
            (&to_batch, vec![f32s(&[1, 4, 4, 1], 1), ints(&[0, 2]), pads(&[0, 0, 0, 0])], "must be positive"),
            (&to_batch, vec![f32s(&[1, 4, 4, 1], 1), ints(&[2, 2]), pads(&[0, -1, 0, 0])], "non-negative"),
            (&to_batch, vec![f32s(&[1, 4, 4, 1], 1), ints(&[2, 2]), pads(&[0, 0])], "must have shape [2, 2]"),
            (&to_batch, vec![f32s(&[4], 1), ints(&[2, 2]), pads(&[0, 0, 0, 0])], "input rank should be >= 3"),
            (&to_space, vec![f32s(&[3, 2, 2, 1], 1), ints(&[2, 2]), pads(&[0, 0, 0, 0])], "not divisible by product"),
            (&to_space, vec![f32s(&[4, 2, 2, 1], 1), ints(&[2, 2]), pads(&[3, 2, 0, 0])], "too many crops"),
        ];
        for (kernel, inputs, message) in bad {
            let error = run(kernel, inputs).unwrap_err().to_string();
            assert!(error.contains(message), "{error}");
        }
    }

    /// The kernels that move elements give the same arrangement for every
    /// element width as for float32.
    #[test]
    fn moves_elements_of_every_width() {
        fn typed<T: Element>(f: impl Fn(f32) -> T) -> Tensor {
            // Small whole numbers, which every type holds exactly.
            let data = f32s(&[2, 3, 5], 9).to_vec::<f32>().unwrap();
            Tensor::from_vec(&[2, 3, 5], data.into_iter().map(|v| f((v * 4.0).round().abs())).collect()).unwrap()
        }
        fn back<T: Element>(t: &Tensor, f: impl Fn(T) -> f32) -> Vec<f32> {
            t.to_vec::<T>().unwrap().into_iter().map(f).collect()
        }
        // A kernel, and its inputs around a fresh data tensor from `data`.
        type Build = fn(&dyn Fn() -> Tensor) -> Vec<Tensor>;
        let cases: Vec<(Box<dyn Kernel>, Build)> = vec![
            (Box::new(FnKernel(transpose)), |data| vec![data(), ints(&[2, 0, 1])]),
            (Box::new(FnKernel(concat_v2)), |data| vec![data(), data(), scalar_i(1)]),
            (Box::new(FnKernel(tile)), |data| vec![data(), ints(&[1, 2, 3])]),
            (Box::new(FnKernel(reverse_v2)), |data| vec![data(), ints(&[0, 2])]),
            (Box::new(Pad { v2: false }), |data| {
                vec![data(), Tensor::from_vec(&[3, 2], vec![1i64, 0, 0, 2, 1, 1]).unwrap()]
            }),
            (Box::new(GatherV2 { batch_dims: 0 }), |data| vec![data(), ints(&[2, 0, 1, 1]), scalar_i(1)]),
            (Box::new(SpaceBatch { to_batch: true }), |data| {
                vec![data(), ints(&[2]), Tensor::from_vec(&[1, 2], vec![1i64, 0]).unwrap()]
            }),
        ];
        for (kernel, build) in cases {
            let want = LocalContext::run(kernel.as_ref(), build(&|| typed(|v| v)), &[DType::F32]).unwrap();
            let want = (want[0].shape().to_vec(), want[0].to_vec::<f32>().unwrap());
            let runs: [(DType, &dyn Fn() -> Tensor); 5] = [
                (DType::U8, &|| typed(|v| v as u8)),
                (DType::Bool, &|| typed(|v| TfBool(v as u8))),
                (DType::F16, &|| typed(half::f16::from_f32)),
                (DType::F64, &|| typed(f64::from)),
                (DType::I64, &|| typed(|v| v as i64)),
            ];
            for (dtype, data) in runs {
                let got = LocalContext::run(kernel.as_ref(), build(data), &[dtype]).unwrap();
                let values = match dtype {
                    DType::U8 => back(&got[0], |v: u8| f32::from(v)),
                    DType::Bool => back(&got[0], |v: TfBool| f32::from(v.0)),
                    DType::F16 => back(&got[0], half::f16::to_f32),
                    DType::F64 => back(&got[0], |v: f64| v as f32),
                    _ => back(&got[0], |v: i64| v as f32),
                };
                assert_eq!((got[0].shape().to_vec(), values), want, "{dtype}");
            }
        }
    }

    #[test]
    fn transpose_matches_reference() {
        let cases: &[(&[usize], &[i64])] = &[
            (&[], &[]),
            (&[0, 3], &[1, 0]),
            (&[1, 1], &[1, 0]),
            (&[7, 13], &[1, 0]),
            (&[7, 13], &[0, 1]),
            (&[3, 5, 7], &[2, 0, 1]),
            (&[3, 5, 7], &[1, 0, 2]),
            (&[3, 5, 7], &[0, 2, 1]),
            (&[2, 3, 4, 5], &[3, 2, 1, 0]),
            (&[2, 1, 4, 5], &[0, 3, 1, 2]),
            (&[301, 257], &[1, 0]),
            (&[4, 67, 131], &[0, 2, 1]),
            (&[33, 2, 3, 40], &[3, 1, 0, 2]),
        ];
        for &(shape, perm) in cases {
            let input = f32s(shape, 3);
            let src = input.to_vec::<f32>().unwrap();
            let (out_shape, out) = run(&FnKernel(transpose), vec![input, ints(perm)]).unwrap();
            let expected_shape: Vec<usize> = perm.iter().map(|&p| shape[p as usize]).collect();
            assert_eq!(out_shape, expected_shape);
            for (flat, &v) in out.iter().enumerate() {
                let oi = unravel(&out_shape, flat);
                let mut ii = vec![0; shape.len()];
                for (k, &p) in perm.iter().enumerate() {
                    ii[p as usize] = oi[k];
                }
                assert_eq!(v, src[ravel(shape, &ii)], "{shape:?} {perm:?} @{flat}");
            }
        }
        assert!(matches!(
            run(&FnKernel(transpose), vec![f32s(&[2, 3], 1), ints(&[0, 0])]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            run(&FnKernel(transpose), vec![f32s(&[2, 3], 1), ints(&[0])]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            run(&FnKernel(transpose), vec![f32s(&[2, 3], 1), ints(&[0, 2])]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn concat_and_pack_match_reference() {
        // Concat [2,3] + [2,0] + [2,4] on axis 1 (and -1).
        let (a, b, c) = (f32s(&[2, 3], 1), f32s(&[2, 0], 2), f32s(&[2, 4], 3));
        let (av, cv) = (a.to_vec::<f32>().unwrap(), c.to_vec::<f32>().unwrap());
        for axis in [1, -1] {
            let (shape, out) =
                run(&FnKernel(concat_v2), vec![f32s(&[2, 3], 1), f32s(&[2, 0], 2), f32s(&[2, 4], 3), scalar_i(axis)])
                    .unwrap();
            assert_eq!(shape, vec![2, 7]);
            let expected: Vec<f32> = [&av[0..3], &cv[0..4], &av[3..6], &cv[4..8]].concat();
            assert_eq!(out, expected);
        }
        assert!(matches!(run(&FnKernel(concat_v2), vec![a, b, scalar_i(0)]), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            run(&FnKernel(concat_v2), vec![f32s(&[2, 3], 1), f32s(&[3, 3], 2), scalar_i(1)]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            run(&FnKernel(concat_v2), vec![f32s(&[2], 1), f32s(&[3], 2), scalar_i(1)]),
            Err(Error::InvalidArgument(_))
        ));
        // Axis 0 of [1,5] and [300,5]: rows in order; large for the pool.
        let (x, y) = (f32s(&[1, 5], 4), f32s(&[30000, 5], 5));
        let expected = [x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap()].concat();
        let (shape, out) = run(&FnKernel(concat_v2), vec![x, y, Tensor::from_vec(&[], vec![0i32]).unwrap()]).unwrap();
        assert_eq!((shape, out), (vec![30001, 5], expected));

        // Pack three [2,3] on each axis, then Unpack back.
        for axis in [0i64, 1, 2, -1, -3] {
            let inputs: Vec<Tensor> = (0..3).map(|i| f32s(&[2, 3], i)).collect();
            let srcs: Vec<Vec<f32>> = inputs.iter().map(|t| t.to_vec().unwrap()).collect();
            let (shape, out) = run(&Pack { axis }, inputs).unwrap();
            let ax = if axis < 0 { axis + 3 } else { axis } as usize;
            let mut expected_shape = vec![2, 3];
            expected_shape.insert(ax, 3);
            assert_eq!(shape, expected_shape);
            for (flat, &v) in out.iter().enumerate() {
                let mut idx = unravel(&shape, flat);
                let which = idx.remove(ax);
                assert_eq!(v, srcs[which][ravel(&[2, 3], &idx)]);
            }
            let outs = LocalContext::run(
                &Unpack { axis, num: 3 },
                vec![Tensor::from_vec(&shape, out).unwrap()],
                &[DType::F32; 3],
            )
            .unwrap();
            for (o, src) in outs.iter().zip(&srcs) {
                assert_eq!(o.shape(), &[2, 3]);
                assert_eq!(&o.to_vec::<f32>().unwrap(), src);
            }
        }
        assert!(matches!(run(&Pack { axis: 0 }, vec![f32s(&[2], 1), f32s(&[3], 1)]), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn slice_matches_reference() {
        let input = f32s(&[5, 7, 3], 9);
        let src = input.to_vec::<f32>().unwrap();
        let (shape, out) = run(&FnKernel(slice), vec![input, ints(&[1, 2, 0]), ints(&[3, -1, 2])]).unwrap();
        assert_eq!(shape, vec![3, 5, 2]);
        for (flat, &v) in out.iter().enumerate() {
            let i = unravel(&shape, flat);
            assert_eq!(v, src[ravel(&[5, 7, 3], &[i[0] + 1, i[1] + 2, i[2]])]);
        }
        let (shape, out) = run(&FnKernel(slice), vec![f32s(&[5, 7], 1), i32s(&[5, 0]), i32s(&[0, 7])]).unwrap();
        assert_eq!((shape, out.len()), (vec![0, 7], 0));
        assert!(matches!(
            run(&FnKernel(slice), vec![f32s(&[5, 7], 1), ints(&[4, 0]), ints(&[2, 7])]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            run(&FnKernel(slice), vec![f32s(&[5, 7], 1), ints(&[-1, 0]), ints(&[1, 7])]),
            Err(Error::InvalidArgument(_))
        ));
        // Identity slice forwards.
        let (_, out) = run(&FnKernel(slice), vec![f32s(&[2, 2], 1), ints(&[0, 0]), ints(&[-1, -1])]).unwrap();
        assert_eq!(out, values(4, 1));
    }

    fn strided(
        shape: &[usize],
        begin: &[i64],
        end: &[i64],
        strides: &[i64],
        masks: Masks,
    ) -> Result<(Vec<usize>, Vec<f32>), Error> {
        run(&StridedSlice { masks, grad: false }, vec![f32s(shape, 5), ints(begin), ints(end), ints(strides)])
    }

    #[test]
    fn strided_slice_follows_numpy() {
        let x = values(4 * 5 * 6, 5);
        let at = |i: usize, j: usize, k: usize| x[(i * 5 + j) * 6 + k];
        let none = Masks::default();
        // x[1:-1:2, ::-1, 4]  (end mask and begin mask on dim 1, shrink on 2)
        let m = Masks { begin: 0b010, end: 0b010, shrink_axis: 0b100, ..none };
        let (shape, out) = strided(&[4, 5, 6], &[1, 0, 4], &[-1, 0, 5], &[2, -1, 1], m).unwrap();
        assert_eq!(shape, vec![1, 5]);
        assert_eq!(out, (0..5).rev().map(|j| at(1, j, 4)).collect::<Vec<_>>());
        // x[..., 0]
        let m = Masks { ellipsis: 0b01, shrink_axis: 0b10, ..none };
        let (shape, out) = strided(&[4, 5, 6], &[0, 0], &[0, 1], &[1, 1], m).unwrap();
        assert_eq!(shape, vec![4, 5]);
        assert_eq!(out, (0..20).map(|f| at(f / 5, f % 5, 0)).collect::<Vec<_>>());
        // x[:, None, -1]  → [4,1,6]
        let m = Masks { begin: 0b001, end: 0b001, new_axis: 0b010, shrink_axis: 0b100, ..none };
        let (shape, out) = strided(&[4, 5, 6], &[0, 0, -1], &[0, 0, 0], &[1, 1, 1], m).unwrap();
        assert_eq!(shape, vec![4, 1, 6]);
        assert_eq!(out, (0..24).map(|f| at(f / 6, 4, f % 6)).collect::<Vec<_>>());
        // x[3:1:-1, 10:, -100:2]: clamped ranges.
        let (shape, out) = strided(&[4, 5, 6], &[3, 10, -100], &[1, 20, 2], &[-1, 1, 1], none).unwrap();
        assert_eq!((shape, out.len()), (vec![2, 0, 2], 0));
        let (shape, out) = strided(&[4, 5, 6], &[3, 1, -100], &[1, 3, 2], &[-1, 1, 1], none).unwrap();
        assert_eq!(shape, vec![2, 2, 2]);
        let mut expected = vec![];
        for i in [3, 2] {
            for j in 1..3 {
                for k in 0..2 {
                    expected.push(at(i, j, k));
                }
            }
        }
        assert_eq!(out, expected);
        // x[::-2, ::3, ::-4] on all dims.
        let m = Masks { begin: 0b111, end: 0b111, ..none };
        let (shape, out) = strided(&[4, 5, 6], &[0, 0, 0], &[0, 0, 0], &[-2, 3, -4], m).unwrap();
        assert_eq!(shape, vec![2, 2, 2]);
        let mut expected = vec![];
        for i in [3, 1] {
            for j in [0, 3] {
                for k in [5, 1] {
                    expected.push(at(i, j, k));
                }
            }
        }
        assert_eq!(out, expected);
        // Errors: zero stride, out-of-range shrink, two ellipses.
        assert!(matches!(strided(&[4], &[0], &[1], &[0], none), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            strided(&[4], &[4], &[5], &[1], Masks { shrink_axis: 1, ..none }),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            strided(&[4, 4], &[0, 0], &[1, 1], &[1, 1], Masks { ellipsis: 3, ..none }),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(strided(&[4], &[0, 0], &[1, 1], &[1, 1], none), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn int32_and_bool_pack_and_strided_slice() {
        // tf.stack([batch, -1]) and shape[0] / shape[1:3] of a shape vector.
        let out = LocalContext::run(
            &Pack { axis: 0 },
            vec![Tensor::from_vec(&[], vec![32i32]).unwrap(), Tensor::from_vec(&[], vec![-1i32]).unwrap()],
            &[DType::I32],
        )
        .unwrap();
        assert_eq!((out[0].shape(), out[0].to_vec::<i32>().unwrap()), (&[2][..], vec![32, -1]));
        let a = Tensor::from_vec(&[2, 3], (0..6).collect::<Vec<i32>>()).unwrap();
        let b = Tensor::from_vec(&[2, 3], (10..16).collect::<Vec<i32>>()).unwrap();
        let out = LocalContext::run(&Pack { axis: -1 }, vec![a, b], &[DType::I32]).unwrap();
        assert_eq!(out[0].shape(), &[2, 3, 2]);
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15]);
        let flags: Vec<Tensor> = [1u8, 0, 1].iter().map(|&v| Tensor::from_vec(&[], vec![TfBool(v)]).unwrap()).collect();
        let out = LocalContext::run(&Pack { axis: 0 }, flags, &[DType::Bool]).unwrap();
        assert_eq!(out[0].to_vec::<TfBool>().unwrap(), [TfBool(1), TfBool(0), TfBool(1)]);

        let shape = || Tensor::from_vec(&[4], vec![32i32, 28, 28, 1]).unwrap();
        let kernel = |masks| StridedSlice { masks, grad: false };
        let shrink = Masks { shrink_axis: 1, ..Masks::default() };
        let out = LocalContext::run(&kernel(shrink), vec![shape(), i32s(&[0]), i32s(&[1]), i32s(&[1])], &[DType::I32])
            .unwrap();
        assert_eq!((out[0].shape(), out[0].to_vec::<i32>().unwrap()), (&[][..], vec![32]));
        let out = LocalContext::run(
            &kernel(Masks::default()),
            vec![shape(), ints(&[1]), ints(&[-1]), ints(&[1])],
            &[DType::I32],
        )
        .unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [28, 28]);
        let out = LocalContext::run(
            &kernel(Masks::default()),
            vec![shape(), ints(&[3]), ints(&[-5]), ints(&[-2])],
            &[DType::I32],
        )
        .unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [1, 28]);
    }

    #[test]
    fn strided_slice_grad_scatters_into_zeros() {
        let m = Masks { begin: 0b10, end: 0b10, shrink_axis: 0b01, ..Masks::default() };
        // grad of x[2, ::-2] for x of shape [3, 5]: dy shape [3].
        let dy = Tensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let (shape, out) = run(
            &StridedSlice { masks: m, grad: true },
            vec![ints(&[3, 5]), ints(&[2, 0]), ints(&[3, 0]), ints(&[1, -2]), dy],
        )
        .unwrap();
        assert_eq!(shape, vec![3, 5]);
        let mut expected = vec![0.0; 15];
        expected[10 + 4] = 1.0;
        expected[10 + 2] = 2.0;
        expected[10] = 3.0;
        assert_eq!(out, expected);
        let bad = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        assert!(run(
            &StridedSlice { masks: m, grad: true },
            vec![ints(&[3, 5]), ints(&[2, 0]), ints(&[3, 0]), ints(&[1, -2]), bad]
        )
        .is_err());
    }

    #[test]
    fn tile_pad_fill_match_reference() {
        for (shape, mult) in [
            (&[2, 3][..], &[2, 3][..]),
            (&[][..], &[][..]),
            (&[3][..], &[0][..]),
            (&[1, 5, 1][..], &[3, 1, 4][..]),
            (&[60, 70][..], &[3, 4][..]),
        ] {
            let input = f32s(shape, 2);
            let src = input.to_vec::<f32>().unwrap();
            let (out_shape, out) = run(&FnKernel(tile), vec![input, ints(mult)]).unwrap();
            let expected_shape: Vec<usize> = shape.iter().zip(mult).map(|(&d, &m)| d * m as usize).collect();
            assert_eq!(out_shape, expected_shape);
            for (flat, &v) in out.iter().enumerate() {
                let idx: Vec<usize> = unravel(&out_shape, flat).iter().zip(shape).map(|(&i, &d)| i % d).collect();
                assert_eq!(v, src[ravel(shape, &idx)]);
            }
        }
        assert!(run(&FnKernel(tile), vec![f32s(&[2], 1), ints(&[-1])]).is_err());
        assert!(run(&FnKernel(tile), vec![f32s(&[2], 1), ints(&[1, 1])]).is_err());

        for (shape, pads) in [
            (&[2, 3][..], &[1i64, 2, 0, 3][..]),
            (&[3][..], &[0, 0][..]),
            (&[0, 2][..], &[1, 1, 1, 0][..]),
            (&[200, 100][..], &[3, 5, 7, 1][..]),
            (&[2, 1, 3][..], &[1, 0, 2, 2, 0, 1][..]),
        ] {
            let input = f32s(shape, 4);
            let src = input.to_vec::<f32>().unwrap();
            let paddings = Tensor::from_vec(&[shape.len(), 2], pads.to_vec()).unwrap();
            let constant = Tensor::from_vec(&[], vec![7.5f32]).unwrap();
            let (out_shape, out) = run(&Pad { v2: true }, vec![input, paddings, constant]).unwrap();
            for (flat, &v) in out.iter().enumerate() {
                let idx = unravel(&out_shape, flat);
                let inner: Option<Vec<usize>> = idx
                    .iter()
                    .enumerate()
                    .map(|(i, &o)| o.checked_sub(pads[2 * i] as usize).filter(|&j| j < shape[i]))
                    .collect();
                let expected = inner.map_or(7.5, |ii| src[ravel(shape, &ii)]);
                assert_eq!(v, expected, "{shape:?} {pads:?} @{flat}");
            }
        }
        let paddings = Tensor::from_vec(&[1, 2], vec![-1i32, 0]).unwrap();
        assert!(run(&Pad { v2: false }, vec![f32s(&[3], 1), paddings]).is_err());

        let (shape, out) =
            run(&FnKernel(fill), vec![ints(&[2, 0, 3]), Tensor::from_vec(&[], vec![1.5f32]).unwrap()]).unwrap();
        assert_eq!((shape, out.len()), (vec![2, 0, 3], 0));
        let (shape, out) =
            run(&FnKernel(fill), vec![i32s(&[3, 70000]), Tensor::from_vec(&[], vec![1.5f32]).unwrap()]).unwrap();
        assert_eq!(shape, vec![3, 70000]);
        assert!(out.iter().all(|&v| v == 1.5));
        assert!(run(&FnKernel(fill), vec![ints(&[-2]), Tensor::from_vec(&[], vec![1.5f32]).unwrap()]).is_err());
    }

    #[test]
    fn gather_matches_reference() {
        // params [3,4,5], axis 1, indices [2,3] → [3,2,3,5]
        let params = f32s(&[3, 4, 5], 6);
        let p = params.to_vec::<f32>().unwrap();
        let idx = vec![3i64, 0, 1, 1, 2, 3];
        let (shape, out) = run(
            &GatherV2 { batch_dims: 0 },
            vec![params, Tensor::from_vec(&[2, 3], idx.clone()).unwrap(), scalar_i(1)],
        )
        .unwrap();
        assert_eq!(shape, vec![3, 2, 3, 5]);
        for (flat, &v) in out.iter().enumerate() {
            let i = unravel(&shape, flat);
            assert_eq!(v, p[ravel(&[3, 4, 5], &[i[0], idx[i[1] * 3 + i[2]] as usize, i[3]])]);
        }
        // batch_dims 1: params [3,4,5], indices [3,2], axis 1 → [3,2,5]
        let params = f32s(&[3, 4, 5], 6);
        let idx = vec![0i32, 3, 2, 2, 1, 0];
        let (shape, out) = run(
            &GatherV2 { batch_dims: 1 },
            vec![params, Tensor::from_vec(&[3, 2], idx.clone()).unwrap(), Tensor::from_vec(&[], vec![-2i32]).unwrap()],
        )
        .unwrap();
        assert_eq!(shape, vec![3, 2, 5]);
        for (flat, &v) in out.iter().enumerate() {
            let i = unravel(&shape, flat);
            assert_eq!(v, p[ravel(&[3, 4, 5], &[i[0], idx[i[0] * 2 + i[1]] as usize, i[2]])]);
        }
        // Out of range index.
        let err = run(
            &GatherV2 { batch_dims: 0 },
            vec![f32s(&[4, 2], 1), Tensor::from_vec(&[2, 2], vec![0i64, 1, 2, 4]).unwrap(), scalar_i(0)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("indices[1,1] = 4 is not in [0, 4)"), "{err}");
        // Scalars gathered from a vector (rows of one element), 2-D indices.
        let params = f32s(&[7], 2);
        let p = params.to_vec::<f32>().unwrap();
        let idx = vec![6i32, 0, 3, 3, 1, 5];
        let (shape, out) = run(
            &GatherV2 { batch_dims: 0 },
            vec![params, Tensor::from_vec(&[3, 2], idx.clone()).unwrap(), scalar_i(0)],
        )
        .unwrap();
        assert_eq!(shape, vec![3, 2]);
        assert_eq!(out, idx.iter().map(|&i| p[i as usize]).collect::<Vec<_>>());
        // Empty indices.
        let (shape, out) = run(
            &GatherV2 { batch_dims: 0 },
            vec![f32s(&[4, 2], 1), Tensor::from_vec(&[0], Vec::<i64>::new()).unwrap(), scalar_i(0)],
        )
        .unwrap();
        assert_eq!((shape, out.len()), (vec![0, 2], 0));
    }

    #[test]
    fn one_hot_matches_reference() {
        let on = || Tensor::from_vec(&[], vec![2.0f32]).unwrap();
        let off = || Tensor::from_vec(&[], vec![-1.0f32]).unwrap();
        let idx = vec![0i64, 3, -1, 2, 5, 1];
        for axis in [-1i64, 0, 1, 2] {
            let (shape, out) = run(
                &OneHot { axis },
                vec![
                    Tensor::from_vec(&[2, 3], idx.clone()).unwrap(),
                    Tensor::from_vec(&[], vec![4i32]).unwrap(),
                    on(),
                    off(),
                ],
            )
            .unwrap();
            let ax = if axis == -1 { 2 } else { axis as usize };
            let mut expected_shape = vec![2, 3];
            expected_shape.insert(ax, 4);
            assert_eq!(shape, expected_shape);
            for (flat, &v) in out.iter().enumerate() {
                let mut i = unravel(&shape, flat);
                let d = i.remove(ax) as i64;
                assert_eq!(v, if idx[i[0] * 3 + i[1]] == d { 2.0 } else { -1.0 });
            }
        }
        assert!(run(
            &OneHot { axis: 3 },
            vec![
                Tensor::from_vec(&[2], vec![0i64, 1]).unwrap(),
                Tensor::from_vec(&[], vec![4i32]).unwrap(),
                on(),
                off()
            ]
        )
        .is_err());
    }

    #[test]
    fn add_n_and_broadcast_to() {
        let inputs: Vec<Tensor> = (0..11).map(|i| f32s(&[7, 13], i)).collect();
        let srcs: Vec<Vec<f32>> = inputs.iter().map(|t| t.to_vec().unwrap()).collect();
        let (shape, out) = run(&FnKernel(add_n), inputs).unwrap();
        assert_eq!(shape, vec![7, 13]);
        for (j, &v) in out.iter().enumerate() {
            // 11 inputs: (((in0 + in1) + in2) + (in3 + … + in10)).
            let head = srcs[0][j] + srcs[1][j] + srcs[2][j];
            let mut group = srcs[3][j];
            for s in &srcs[4..] {
                group += s[j];
            }
            assert_eq!(v, head + group);
        }
        assert!(run(&FnKernel(add_n), vec![f32s(&[2], 1), f32s(&[3], 1)]).is_err());
        let big: Vec<Tensor> = (0..3).map(|i| f32s(&[50000], i)).collect();
        let (_, out) = run(&FnKernel(add_n), big).unwrap();
        let s: Vec<Vec<f32>> = (0..3).map(|i| values(50000, i)).collect();
        assert!(out.iter().enumerate().all(|(j, &v)| v == s[0][j] + s[1][j] + s[2][j]));

        let input = f32s(&[3, 1], 8);
        let src = input.to_vec::<f32>().unwrap();
        let (shape, out) = run(&FnKernel(broadcast_to), vec![input, ints(&[2, 3, 4])]).unwrap();
        assert_eq!(shape, vec![2, 3, 4]);
        for (flat, &v) in out.iter().enumerate() {
            assert_eq!(v, src[unravel(&shape, flat)[1]]);
        }
        assert!(run(&FnKernel(broadcast_to), vec![f32s(&[3], 8), ints(&[2, 4])]).is_err());
        assert!(run(&FnKernel(broadcast_to), vec![f32s(&[3, 2], 8), ints(&[2])]).is_err());
        let (shape, out) = run(&FnKernel(broadcast_to), vec![f32s(&[], 8), ints(&[0, 4])]).unwrap();
        assert_eq!((shape, out.len()), (vec![0, 4], 0));
    }

    /// Deterministic ids in `[lo, hi)`.
    fn segment_ids(len: usize, lo: i64, hi: i64, seed: u32) -> Vec<i64> {
        values(len, seed)
            .iter()
            .map(|&v| lo + (((v + 2.0) / 4.0) * (hi - lo) as f32) as i64)
            .map(|v| v.min(hi - 1))
            .collect()
    }

    /// Runs UnsortedSegmentSum with ids of type `I` and num_segments of type `N`.
    fn run_segment_sum<I: Element, N: Element>(
        data: Tensor,
        ids_shape: &[usize],
        ids: Vec<I>,
        num: N,
    ) -> Result<(Vec<usize>, Vec<f32>), Error> {
        let inputs = vec![data, Tensor::from_vec(ids_shape, ids).unwrap(), Tensor::from_vec(&[], vec![num]).unwrap()];
        run(&FnKernel(unsorted_segment_sum), inputs)
    }

    /// Data shape, rank of the ids, num_segments, range of the ids.
    type SegmentCase = (&'static [usize], usize, usize, (i64, i64));

    #[test]
    fn unsorted_segment_sum_matches_reference() {
        let cases: &[SegmentCase] = &[
            (&[7, 13], 1, 5, (-1, 5)),
            (&[1, 1], 1, 1, (0, 1)),
            (&[1], 1, 3, (2, 3)),
            (&[], 0, 3, (1, 2)),
            (&[4, 3, 5], 2, 4, (-2, 4)),
            (&[6, 5], 2, 7, (0, 7)),
            (&[0, 3], 1, 3, (0, 3)),
            (&[5, 0], 1, 3, (0, 3)),
            (&[5, 3], 1, 0, (-3, 0)),
            (&[11], 1, 1, (-1, 1)),
            // Large enough for the pool: many segments; two segments (bands
            // of columns); rows too narrow to split; one segment for all.
            (&[3001, 67], 1, 1000, (-5, 1000)),
            (&[2000, 131], 1, 2, (0, 2)),
            (&[60_000, 3], 1, 17, (0, 17)),
            (&[1500, 64], 1, 5, (0, 1)),
            (&[40, 50, 33], 2, 13, (-1, 13)),
        ];
        for (k, &(shape, id_rank, num, (lo, hi))) in cases.iter().enumerate() {
            let ids_shape = &shape[..id_rank];
            let n: usize = ids_shape.iter().product();
            let inner: usize = shape[id_rank..].iter().product();
            let ids = segment_ids(n, lo, hi, k as u32);
            let data = values(n * inner, 40 + k as u32);
            let mut expected = vec![0f32; num * inner];
            for (i, &id) in ids.iter().enumerate() {
                if id >= 0 {
                    for j in 0..inner {
                        expected[id as usize * inner + j] += data[i * inner + j];
                    }
                }
            }
            let expected_shape = [&[num][..], &shape[id_rank..]].concat();
            let input = || Tensor::from_vec(shape, data.clone()).unwrap();
            let ids32: Vec<i32> = ids.iter().map(|&v| v as i32).collect();
            for got in [
                run_segment_sum(input(), ids_shape, ids.clone(), num as i64),
                run_segment_sum(input(), ids_shape, ids32.clone(), num as i32),
                run_segment_sum(input(), ids_shape, ids32, num as i64),
            ] {
                let (out_shape, out) = got.unwrap();
                assert_eq!(out_shape, expected_shape, "{shape:?}");
                // Summed in the order of the ids, as on the CPU device: bit for bit.
                assert!(out.iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits()), "{shape:?} {num}");
            }
        }
    }

    #[test]
    fn unsorted_segment_sum_rejects_what_the_cpu_device_rejects() {
        let error = |result: Result<(Vec<usize>, Vec<f32>), Error>| match result {
            Err(error @ Error::InvalidArgument(_)) => error.to_string(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        let message = error(run_segment_sum(f32s(&[4, 3], 1), &[4], vec![0i32, 3, 0, 1], 3i32));
        assert_eq!(message, "tfwasm: UnsortedSegmentSum: segment_ids[1] = 3 is not in [0, 3)");
        let message = error(run_segment_sum(f32s(&[2, 2], 1), &[2, 2], vec![0i64, -1, 1 << 40, 0], 2i64));
        assert_eq!(message, "tfwasm: UnsortedSegmentSum: segment_ids[1,0] = 1099511627776 is not in [0, 2)");
        let message = error(run_segment_sum(f32s(&[4, 3], 1), &[4], vec![0i32; 4], -1i32));
        assert_eq!(message, "tfwasm: UnsortedSegmentSum: num_segments = -1 is negative");
        let message = error(run_segment_sum(f32s(&[4, 3], 1), &[3], vec![0i32; 3], 2i32));
        assert_eq!(
            message,
            "tfwasm: UnsortedSegmentSum: data.shape = [4,3] does not start with segment_ids.shape = [3]"
        );
        let message = error(run_segment_sum(f32s(&[3], 1), &[3, 1], vec![0i32; 3], 2i32));
        assert!(message.contains("does not start with"), "{message}");
        let inputs = vec![f32s(&[2], 1), i32s(&[0, 0]), i32s(&[3])];
        let message = error(run(&FnKernel(unsorted_segment_sum), inputs));
        assert_eq!(message, "tfwasm: UnsortedSegmentSum: num_segments must be a scalar, got shape [1]");
    }

    #[test]
    fn reverse_v2_matches_reference() {
        let cases: &[(&[usize], &[i64])] = &[
            (&[7, 13], &[0]),
            (&[7, 13], &[1]),
            (&[7, 13], &[-1]),
            (&[7, 13], &[0, -1]),
            (&[7, 13], &[]),
            (&[1, 1], &[0, 1]),
            (&[1], &[0]),
            (&[2, 3, 5, 7], &[1, 3]),
            (&[2, 3, 5, 7], &[0, 2]),
            (&[2, 3, 5, 7], &[-4, -3, -2, -1]),
            (&[5, 1, 4], &[1]),
            (&[5, 1, 4], &[2, 0]),
            (&[3, 2, 2, 2, 2, 2, 2, 2, 2, 3], &[0, 9, 4]),
            (&[301, 257], &[0]),
            (&[301, 257], &[1]),
            (&[40, 30, 50], &[1]),
        ];
        for &(shape, axes) in cases {
            let input = f32s(shape, 5);
            let src = input.to_vec::<f32>().unwrap();
            let flipped: Vec<usize> =
                axes.iter().map(|&a| if a < 0 { (a + shape.len() as i64) as usize } else { a as usize }).collect();
            let expected: Vec<f32> = (0..src.len())
                .map(|flat| {
                    let mut index = unravel(shape, flat);
                    for &d in &flipped {
                        index[d] = shape[d] - 1 - index[d];
                    }
                    src[ravel(shape, &index)]
                })
                .collect();
            let axes32: Vec<i32> = axes.iter().map(|&a| a as i32).collect();
            for axis in [ints(axes), i32s(&axes32)] {
                let (out_shape, out) = run(&FnKernel(reverse_v2), vec![f32s(shape, 5), axis]).unwrap();
                assert_eq!(out_shape, shape);
                assert_eq!(out, expected, "{shape:?} {axes:?}");
            }
        }
    }

    #[test]
    fn reverse_v2_checks_axes_of_non_empty_tensors_only() {
        let error = |shape: &[usize], axis: Tensor| match run(&FnKernel(reverse_v2), vec![f32s(shape, 1), axis]) {
            Err(error @ Error::InvalidArgument(_)) => error.to_string(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        assert_eq!(error(&[2, 3], ints(&[1, 1])), "tfwasm: ReverseV2: axis 1 is listed more than once in [1, 1]");
        assert_eq!(error(&[2, 3], ints(&[1, -1])), "tfwasm: ReverseV2: axis 1 is listed more than once in [1, -1]");
        assert!(error(&[2, 3], ints(&[2])).contains("Expected axis in the range [-2, 2), but got 2"));
        assert!(error(&[2, 3], ints(&[-3])).contains("but got -3"));
        assert!(error(&[1, 1], ints(&[5])).contains("but got 5"));
        assert_eq!(error(&[2, 3], scalar_i(0)), "tfwasm: ReverseV2: axis must be a vector, got shape []");
        // As on the CPU device: a scalar or an empty tensor is returned as
        // is, whatever the axes say.
        for (shape, axis) in
            [(&[][..], ints(&[0, 0])), (&[], scalar_i(3)), (&[0, 3], ints(&[0, 0, 7])), (&[3, 0], scalar_i(0))]
        {
            let (out_shape, out) = run(&FnKernel(reverse_v2), vec![f32s(shape, 2), axis]).unwrap();
            assert_eq!(out_shape, shape);
            assert_eq!(out, values(out.len(), 2));
        }
    }

    #[test]
    fn views_collapse_contiguous_dims() {
        assert_eq!(View::new(0, &[2, 3, 4], &[12, 4, 1]), View { offset: 0, dims: vec![24], steps: vec![1] });
        assert_eq!(View::new(5, &[1, 1], &[7, 1]), View { offset: 5, dims: vec![1], steps: vec![1] });
        assert_eq!(View::new(0, &[3, 1, 4], &[1, 9, 3]).dims, vec![3, 4]);
    }
}
