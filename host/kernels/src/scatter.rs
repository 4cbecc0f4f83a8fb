//! Sparse updates of a variable: `_TfwasmScatterAdd` / `_TfwasmScatterSub`,
//! the ops the graph pass turns `ResourceScatterAdd` / `ResourceScatterSub`
//! into (`graph::updates::scatter_updates`), and kernels for those two that
//! only say so.
//!
//! TensorFlow's scatter kernels update a variable in place through its
//! internals, which the wheel's C API does not export. Ours take the
//! variable's value as an ordinary input and return an updated copy, which
//! the pass assigns back: `y = value`, then `y[indices[i], ...] ±=
//! updates[i, ...]` for every `i` in order, the same sums in the same order
//! as the CPU kernel. `updates` has shape `indices.shape + value.shape[1..]`,
//! or is a scalar added to every indexed row. An index outside
//! `[0, value.shape[0])` is an error.

use super::{types, DType, Element, Kernel, KernelDef, OpContext, Tensor, TfBool};
use crate::error::Error;

/// Our own ops (registered by `abi::kernels`), made only by the graph pass.
pub const ADD_OP: &str = "_TfwasmScatterAdd";
pub const SUB_OP: &str = "_TfwasmScatterSub";

const TYPES: &[(&str, &[DType])] = &[("T", types::F32), ("Tindices", types::INDEX)];
const UPDATE_TYPES: &[(&str, &[DType])] = &[("T", &[DType::F32, DType::Bool]), ("Tindices", types::INDEX)];
const RESOURCE_TYPES: &[(&str, &[DType])] = &[("dtype", types::F32), ("Tindices", types::INDEX)];

pub const KERNELS: &[KernelDef] = &[
    KernelDef::new(ADD_OP, TYPES, |_| Ok(Box::new(Scatter { op: ADD_OP, sub: false }))),
    KernelDef::new(SUB_OP, TYPES, |_| Ok(Box::new(Scatter { op: SUB_OP, sub: true }))),
    // Registered so that placement keeps a variable's sparse update on our
    // device, where the graph pass rewrites it; run as is, they explain.
    KernelDef::new("ResourceScatterAdd", RESOURCE_TYPES, |_| Ok(Box::new(NotRewritten("ResourceScatterAdd")))),
    KernelDef::new("ResourceScatterSub", RESOURCE_TYPES, |_| Ok(Box::new(NotRewritten("ResourceScatterSub")))),
    // Keras' loss scaling under mixed_float16 marks which rows of an
    // embedding's sparse gradient are finite with it (bool).
    KernelDef::new("TensorScatterUpdate", UPDATE_TYPES, |_| {
        Ok(Box::new(SliceScatter { add: false, ignore_bad: false }))
    }),
    // The gradient of a gather by full indices, e.g. of `top_k`.
    KernelDef::new("ScatterNd", SCATTER_ND_TYPES, |a| {
        let ignore_bad = a.has("bad_indices_policy") && a.string("bad_indices_policy")? == "IGNORE";
        Ok(Box::new(SliceScatter { add: true, ignore_bad }))
    })
    .host_memory(&["shape"]),
];

const SCATTER_ND_TYPES: &[(&str, &[DType])] = &[("T", &[DType::F32]), ("Tindices", &[DType::I32, DType::I64])];

/// `TensorScatterUpdate(tensor, indices, updates)`: a copy of `tensor` with
/// the slices `indices` name (each index a prefix of `tensor`'s dimensions,
/// the last dimension of `indices`) replaced by `updates`, in order (a
/// repeated index keeps the last update, as on the CPU). With `add`,
/// `ScatterNd(indices, updates, shape)`: zeros of `shape` with the updates
/// added, in order, so repeated indices sum as on the CPU; an index out of
/// range is an error, or skipped under `bad_indices_policy = "IGNORE"`.
struct SliceScatter {
    add: bool,
    ignore_bad: bool,
}

/// The offset of an update [`SliceScatter`] skips.
const SKIP: usize = usize::MAX;

impl Kernel for SliceScatter {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let op = if self.add { "ScatterNd" } else { "TensorScatterUpdate" };
        super::expect_inputs(op, ctx, 3)?;
        let (tensor, indices, updates, shape) = if self.add {
            let (indices, updates, shape_t) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
            let shape = shape_t
                .to_i64s()?
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| Error::InvalidArgument(format!("{op}: shape must be non-negative")))?;
            (None, indices, updates, shape)
        } else {
            let tensor = ctx.input(0)?;
            let shape = tensor.shape().to_vec();
            (Some(tensor), ctx.input(1)?, ctx.input(2)?, shape)
        };
        let shape = shape.as_slice();
        let invalid = |message: String| Error::InvalidArgument(format!("{op}: {message}"));
        let Some((&depth, outer)) = indices.shape().split_last() else {
            return Err(invalid("indices must have rank at least one, got a scalar".into()));
        };
        let shapes = |what: &str| {
            invalid(format!(
                "{what}. Indices shape: {}, updates shape: {}, tensor shape: {}",
                super::ShapeDisplay(indices.shape()),
                super::ShapeDisplay(updates.shape()),
                super::ShapeDisplay(shape)
            ))
        };
        if updates.rank() < outer.len() || &updates.shape()[..outer.len()] != outer {
            return Err(shapes("Outer dimensions of indices and update must match"));
        }
        if depth > shape.len() || updates.shape()[outer.len()..] != shape[depth..] {
            return Err(shapes("Inner dimensions of output shape must match inner dimensions of updates shape"));
        }
        let slice_len: usize = shape[depth..].iter().product();
        let indices = indices.to_i64s()?;
        // The element offset of each index's slice. An index of depth 0 is
        // empty and names the whole tensor.
        let offset_of = |i: usize, index: &[i64]| -> Result<usize, Error> {
            let mut offset = 0usize;
            for (&at, &dim) in index.iter().zip(shape) {
                if at < 0 || at as u64 >= dim as u64 {
                    let index: Vec<String> = index.iter().map(i64::to_string).collect();
                    return Err(invalid(format!(
                        "indices[{i}] = [{}] does not index into shape {}",
                        index.join(", "),
                        super::ShapeDisplay(shape)
                    )));
                }
                offset = offset * dim + at as usize;
            }
            Ok(offset * slice_len)
        };
        let offsets: Vec<usize> = if depth == 0 {
            vec![0; outer.iter().product()]
        } else {
            let offset = |(i, index)| match offset_of(i, index) {
                Err(_) if self.ignore_bad => Ok(SKIP),
                other => other,
            };
            indices.chunks_exact(depth).enumerate().map(offset).collect::<Result<_, _>>()?
        };
        super::movement::checked_count(op, shape)?;
        let mut out = ctx.allocate_output(0, shape)?;
        match tensor {
            None => add_slices(&updates, &mut out, &offsets, slice_len),
            Some(tensor) if tensor.dtype() == DType::Bool => {
                replace_slices::<TfBool>(&tensor, &updates, &mut out, &offsets, slice_len)
            }
            Some(tensor) => replace_slices::<f32>(&tensor, &updates, &mut out, &offsets, slice_len),
        }
    }
}

/// `out = 0`, then `out[offset_i..][..slice_len] += updates[i]` in order.
fn add_slices(updates: &Tensor, out: &mut Tensor, offsets: &[usize], slice_len: usize) -> Result<(), Error> {
    let (updates, out) = (updates.data::<f32>()?, out.data_mut::<f32>()?);
    if updates.len() != offsets.len() * slice_len {
        return Err(Error::Internal("ScatterNd: buffer sizes do not match the shapes".into()));
    }
    out.fill(0.0);
    for (i, &offset) in offsets.iter().enumerate().filter(|&(_, &offset)| offset != SKIP) {
        let dst = &mut out[offset..offset + slice_len];
        dst.iter_mut().zip(&updates[i * slice_len..][..slice_len]).for_each(|(o, &u)| *o += u);
    }
    Ok(())
}

/// `out = tensor`, then `out[offset_i..][..slice_len] = updates[i]` in order.
fn replace_slices<T: Element>(
    tensor: &Tensor,
    updates: &Tensor,
    out: &mut Tensor,
    offsets: &[usize],
    slice_len: usize,
) -> Result<(), Error> {
    let (tensor, updates, out) = (tensor.data::<T>()?, updates.data::<T>()?, out.data_mut::<T>()?);
    if out.len() != tensor.len() || updates.len() != offsets.len() * slice_len {
        return Err(Error::Internal("TensorScatterUpdate: buffer sizes do not match the shapes".into()));
    }
    out.copy_from_slice(tensor);
    for (i, &offset) in offsets.iter().enumerate() {
        out[offset..offset + slice_len].copy_from_slice(&updates[i * slice_len..][..slice_len]);
    }
    Ok(())
}

struct Scatter {
    op: &'static str,
    sub: bool,
}

impl Kernel for Scatter {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        super::expect_inputs(self.op, ctx, 3)?;
        let (value, indices, updates) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let invalid = |message: String| Error::InvalidArgument(format!("{}: {message}", self.op));
        let Some((&rows, row_shape)) = value.shape().split_first() else {
            return Err(invalid("the variable must have at least one dimension, it is a scalar".into()));
        };
        let expected: Vec<usize> = indices.shape().iter().chain(row_shape).copied().collect();
        let scalar = updates.rank() == 0;
        if !scalar && updates.shape() != expected.as_slice() {
            return Err(invalid(format!(
                "updates must have shape indices.shape + variable.shape[1:] = {} or be a scalar, got {}",
                super::ShapeDisplay(&expected),
                super::ShapeDisplay(updates.shape())
            )));
        }
        let indices = indices.to_i64s()?;
        if let Some((i, &index)) =
            indices.iter().enumerate().find(|&(_, &index)| index < 0 || index as u64 >= rows as u64)
        {
            return Err(invalid(format!("indices[{i}] = {index} is not in [0, {rows})")));
        }
        let mut out = ctx.allocate_output(0, value.shape())?;
        let out = out.data_mut::<f32>()?;
        let value = value.data::<f32>()?;
        if value.len() != out.len() {
            return Err(Error::Internal(format!(
                "{}: an output of {} elements for {}",
                self.op,
                out.len(),
                value.len()
            )));
        }
        super::movement::copy_all(value, out);
        let row_len = row_shape.iter().product::<usize>();
        let updates = updates.data::<f32>()?;
        for (i, &index) in indices.iter().enumerate() {
            let row = &mut out[index as usize * row_len..][..row_len];
            if scalar {
                apply(row, std::iter::repeat(updates[0]), self.sub);
            } else {
                apply(row, updates[i * row_len..][..row_len].iter().copied(), self.sub);
            }
        }
        Ok(())
    }
}

/// `row[j] += u[j]` (or `-=`): the CPU kernel's arithmetic, element by element.
fn apply(row: &mut [f32], updates: impl Iterator<Item = f32>, sub: bool) {
    if sub {
        row.iter_mut().zip(updates).for_each(|(x, u)| *x -= u);
    } else {
        row.iter_mut().zip(updates).for_each(|(x, u)| *x += u);
    }
}

/// A `ResourceScatterAdd/Sub` the graph pass did not rewrite: run eagerly,
/// or in a graph TensorFlow did not hand to the pass.
struct NotRewritten(&'static str);

impl Kernel for NotRewritten {
    fn compute(&self, _ctx: &dyn OpContext) -> Result<(), Error> {
        Err(Error::Unimplemented(format!(
            "{op} on the WASM device runs only inside a tf.function, where tfwasm's graph pass turns it into an \
             assignment of an updated copy; TensorFlow's own {op} needs variable internals its C API does not \
             export. Call it inside a tf.function, or keep the variable on the CPU (create it under \
             tf.device(\"/CPU:0\"))",
            op = self.0
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalContext, Tensor};

    fn run(
        sub: bool,
        value: (&[usize], Vec<f32>),
        indices: Tensor,
        updates: (&[usize], Vec<f32>),
    ) -> Result<Vec<f32>, Error> {
        let kernel = Scatter { op: if sub { SUB_OP } else { ADD_OP }, sub };
        let inputs = vec![Tensor::from_vec(value.0, value.1)?, indices, Tensor::from_vec(updates.0, updates.1)?];
        let out = LocalContext::run(&kernel, inputs, &[DType::F32])?.remove(0);
        Ok(out.data::<f32>()?.to_vec())
    }

    fn update(shape: &[usize], indices: Tensor, updates: (&[usize], Vec<f32>)) -> Result<Vec<f32>, Error> {
        let len = shape.iter().product();
        let inputs = vec![
            Tensor::from_vec(shape, (0..len).map(|v| v as f32).collect())?,
            indices,
            Tensor::from_vec(updates.0, updates.1)?,
        ];
        LocalContext::run(&SliceScatter { add: false, ignore_bad: false }, inputs, &[DType::F32])?
            .remove(0)
            .to_vec::<f32>()
    }

    #[test]
    fn tensor_scatter_update_replaces_slices_and_checks_indices() {
        // Rows of a [4, 3] tensor, the last of a repeated index winning.
        let rows = Tensor::from_vec(&[2, 1], vec![1i32, 1]).unwrap();
        let out = update(&[4, 3], rows, (&[2, 3], vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])).unwrap();
        assert_eq!(out, [0.0, 1.0, 2.0, -4.0, -5.0, -6.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
        // Single elements (full-depth indices), int64.
        let cells = Tensor::from_vec(&[2, 2], vec![1i64, 2, 3, 0]).unwrap();
        let out = update(&[4, 3], cells, (&[2], vec![70.0, 80.0])).unwrap();
        assert_eq!((out[5], out[9], out[0]), (70.0, 80.0, 0.0));
        // No indices: a copy.
        let none = Tensor::from_vec::<i32>(&[0, 1], vec![]).unwrap();
        assert_eq!(update(&[2, 2], none, (&[0, 2], vec![])).unwrap(), [0.0, 1.0, 2.0, 3.0]);
        // Out of range, negative, and shapes that do not fit.
        let bad = |i: Vec<i32>, s: &[usize], u: (&[usize], Vec<f32>)| {
            let n = i.len();
            update(s, Tensor::from_vec(&[n, 1], i).unwrap(), u).unwrap_err().to_string()
        };
        assert!(
            bad(vec![4], &[4, 3], (&[1, 3], vec![0.0; 3])).contains("indices[0] = [4] does not index into shape [4,3]")
        );
        assert!(bad(vec![-1], &[4, 3], (&[1, 3], vec![0.0; 3])).contains("does not index"));
        assert!(bad(vec![1], &[4, 3], (&[2, 3], vec![0.0; 6])).contains("Outer dimensions"));
        assert!(bad(vec![1], &[4, 3], (&[1, 2], vec![0.0; 2])).contains("Inner dimensions"));
    }

    #[test]
    fn rows_are_updated_in_order_with_duplicates() {
        let value = (&[3, 2][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let indices = Tensor::from_vec(&[3], vec![2i32, 0, 2]).unwrap();
        let updates = (&[3, 2][..], vec![0.5, 1.0, 10.0, 20.0, 0.25, 0.125]);
        let out = run(false, value.clone(), indices, updates.clone()).unwrap();
        assert_eq!(out, [11.0, 22.0, 3.0, 4.0, 5.75, 7.125]);
        let indices = Tensor::from_vec(&[3], vec![2i64, 0, 2]).unwrap();
        let out = run(true, value, indices, updates).unwrap();
        assert_eq!(out, [-9.0, -18.0, 3.0, 4.0, 4.25, 4.875]);
    }

    #[test]
    fn indices_of_any_rank_and_scalar_updates() {
        let value = (&[4][..], vec![0.0; 4]);
        let indices = Tensor::from_vec(&[2, 2], vec![3i32, 1, 1, 0]).unwrap();
        let out = run(false, value.clone(), indices, (&[2, 2], vec![1.0, 2.0, 3.0, 4.0])).unwrap();
        assert_eq!(out, [4.0, 5.0, 0.0, 1.0]);
        let indices = Tensor::from_vec(&[2], vec![3i32, 3]).unwrap();
        assert_eq!(run(true, value.clone(), indices, (&[], vec![1.5])).unwrap(), [0.0, 0.0, 0.0, -3.0]);
        let empty = Tensor::from_vec(&[0], Vec::<i32>::new()).unwrap();
        assert_eq!(run(false, value, empty, (&[0], vec![])).unwrap(), [0.0; 4]);
        // An empty variable with no indices is fine.
        let empty = Tensor::from_vec(&[0], Vec::<i32>::new()).unwrap();
        assert!(run(false, (&[0, 3], vec![]), empty, (&[0, 3], vec![])).unwrap().is_empty());
    }

    #[test]
    fn bad_indices_and_shapes_are_errors_naming_the_op() {
        let value = (&[3, 2][..], vec![0.0; 6]);
        let indices = Tensor::from_vec(&[1], vec![3i32]).unwrap();
        let error = run(false, value.clone(), indices, (&[1, 2], vec![1.0, 1.0])).unwrap_err().to_string();
        assert!(error.contains(ADD_OP) && error.contains("indices[0] = 3 is not in [0, 3)"), "{error}");
        let indices = Tensor::from_vec(&[1], vec![-1i64]).unwrap();
        let error = run(true, value.clone(), indices, (&[1, 2], vec![1.0, 1.0])).unwrap_err().to_string();
        assert!(error.contains(SUB_OP) && error.contains("indices[0] = -1"), "{error}");
        let indices = Tensor::from_vec(&[2], vec![0i32, 1]).unwrap();
        let error = run(false, value.clone(), indices, (&[2, 3], vec![0.0; 6])).unwrap_err().to_string();
        assert!(error.contains("updates must have shape indices.shape + variable.shape[1:] = [2,2]"), "{error}");
        let indices = Tensor::from_vec(&[0], Vec::<i32>::new()).unwrap();
        let error = run(false, (&[], vec![1.0]), indices, (&[], vec![1.0])).unwrap_err().to_string();
        assert!(error.contains("at least one dimension"), "{error}");
    }

    #[test]
    fn scatter_nd_adds_repeated_indices_and_can_skip_bad_ones() {
        let run = |kernel: SliceScatter, indices: Vec<i32>, depth: usize, updates: Vec<f32>, shape: Vec<i32>| {
            let n = indices.len() / depth;
            let mut updates_shape = vec![n];
            updates_shape.extend(shape[depth..].iter().map(|&d| d as usize));
            let inputs = vec![
                Tensor::from_vec(&[n, depth], indices).unwrap(),
                Tensor::from_vec(&updates_shape, updates).unwrap(),
                Tensor::from_vec(&[shape.len()], shape).unwrap(),
            ];
            LocalContext::run(&kernel, inputs, &[DType::F32]).map(|mut out| out.remove(0).to_vec::<f32>().unwrap())
        };
        let add = || SliceScatter { add: true, ignore_bad: false };
        let rows = run(add(), vec![2, 0, 2], 1, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![3, 2]).unwrap();
        assert_eq!(rows, [3.0, 4.0, 0.0, 0.0, 6.0, 8.0]);
        let error = run(add(), vec![0, 3], 1, vec![1.0, 2.0], vec![3]).unwrap_err().to_string();
        assert!(error.contains("indices[1] = [3] does not index into shape [3]"), "{error}");
        let skipped = run(SliceScatter { add: true, ignore_bad: true }, vec![0, 3, 1], 1, vec![1.0, 2.0, 4.0], vec![3]);
        assert_eq!(skipped.unwrap(), [1.0, 4.0, 0.0]);
    }
}
