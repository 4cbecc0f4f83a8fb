//! NumPy/TensorFlow broadcasting of two shapes, and the strided walk that
//! maps each output element to its two operand elements.
//!
//! Shapes are aligned at their last dimension; a missing leading dimension
//! counts as 1. Two dimensions are compatible when equal or when one is 1,
//! which then repeats along the other (so `[0,3]` with `[1,3]` is `[0,3]`,
//! while `[0]` with `[2]` is an error).
//!
//! The walk works on a *collapsed* form of the output: dimensions of size 1
//! are dropped and neighbouring dimensions that both operands traverse the
//! same way (both contiguous, or one repeated) merge into one. `[3,1,5]` with
//! `[4,1]` stays three-dimensional, but two same-shape operands of any rank
//! become one contiguous run, and a scalar with anything becomes one run with
//! a step of 0 — which is how the elementwise fast paths are found.

use std::fmt;

use smallvec::SmallVec;

/// A shape or per-dimension list, inline up to rank 6 (TensorFlow's shapes
/// rarely go beyond): building one per kernel call costs no allocation.
pub type Dims = SmallVec<[usize; 6]>;

/// Why two shapes cannot be combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    /// A dimension pair that is neither equal nor contains a 1.
    Incompatible { a: Vec<usize>, b: Vec<usize> },
    /// The output would have more elements than memory can address.
    TooLarge { shape: Vec<usize> },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::Incompatible { a, b } => {
                write!(f, "incompatible broadcast shapes {} and {}", ShapeDisplay(a), ShapeDisplay(b))
            }
            ShapeError::TooLarge { shape } => write!(f, "shape {} has too many elements", ShapeDisplay(shape)),
        }
    }
}

impl std::error::Error for ShapeError {}

/// Formats a shape the way TensorFlow users write it: `[2,3]`, `[]`.
pub struct ShapeDisplay<'a>(pub &'a [usize]);

impl fmt::Display for ShapeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, dim) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{dim}")?;
        }
        f.write_str("]")
    }
}

/// Number of elements of `shape` (1 for a scalar), or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |count, &dim| count.checked_mul(dim))
}

/// One stretch of consecutive output elements whose operands each either
/// advance by one element (`step == 1`) or repeat one element (`step == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Index of the first output element.
    pub out: usize,
    /// Index of the first element of operand `a`.
    pub a: usize,
    /// Index of the first element of operand `b`.
    pub b: usize,
    pub len: usize,
    pub a_step: usize,
    pub b_step: usize,
}

/// How two operand shapes map onto their broadcast output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broadcast {
    output_shape: Dims,
    output_len: usize,
    /// Collapsed output dimensions, outermost first; never empty.
    dims: Dims,
    /// Element strides of each operand along `dims` (0 where it repeats).
    a_strides: Dims,
    b_strides: Dims,
}

/// NumPy broadcasting of two shapes (missing leading dims count as 1), or
/// `None` if they do not broadcast.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Dims> {
    let rank = a.len().max(b.len());
    let dim_of = |shape: &[usize], i: usize| if i + shape.len() < rank { 1 } else { shape[i + shape.len() - rank] };
    (0..rank)
        .map(|i| match (dim_of(a, i), dim_of(b, i)) {
            (da, db) if da == db || db == 1 => Some(da),
            (1, db) => Some(db),
            _ => None,
        })
        .collect()
}

impl Broadcast {
    pub fn new(a: &[usize], b: &[usize]) -> Result<Self, ShapeError> {
        if a == b {
            return Self::same_shape(a);
        }
        Self::general(a, b)
    }

    /// Two operands of one shape: one run over every element, in step. What
    /// [`Broadcast::general`] computes for them, without its per-dimension
    /// work (the common case of an eager op on small tensors, where that work
    /// is a measurable part of the call).
    fn same_shape(shape: &[usize]) -> Result<Self, ShapeError> {
        let output_len = element_count(shape).ok_or_else(|| ShapeError::TooLarge { shape: shape.to_vec() })?;
        let one: Dims = smallvec::smallvec![1];
        Ok(Broadcast {
            output_shape: Dims::from_slice(shape),
            output_len,
            dims: smallvec::smallvec![output_len],
            a_strides: one.clone(),
            b_strides: one,
        })
    }

    fn general(a: &[usize], b: &[usize]) -> Result<Self, ShapeError> {
        let rank = a.len().max(b.len());
        // Operand dimension `i` of the output, with missing leading dims as 1.
        let dim_of = |shape: &[usize], i: usize| if i + shape.len() < rank { 1 } else { shape[i + shape.len() - rank] };

        let output_shape =
            broadcast_shape(a, b).ok_or_else(|| ShapeError::Incompatible { a: a.to_vec(), b: b.to_vec() })?;
        let output_len =
            element_count(&output_shape).ok_or_else(|| ShapeError::TooLarge { shape: output_shape.to_vec() })?;

        // Collapse: drop size-1 output dims (they move neither operand), merge
        // neighbours with the same repeat pattern (they are contiguous in
        // every operand that does not repeat along them).
        let mut dims = Dims::with_capacity(rank);
        let mut repeats: SmallVec<[(bool, bool); 6]> = SmallVec::with_capacity(rank);
        for (i, &dim) in output_shape.iter().enumerate() {
            if dim == 1 {
                continue;
            }
            let pattern = (dim_of(a, i) == 1, dim_of(b, i) == 1);
            match (dims.last_mut(), repeats.last()) {
                (Some(last), Some(&previous)) if previous == pattern => *last *= dim,
                _ => {
                    dims.push(dim);
                    repeats.push(pattern);
                }
            }
        }
        if dims.is_empty() {
            // Every dim is 1: one element, read once from each operand.
            dims.push(1);
            repeats.push((false, false));
        }

        let strides_of = |repeats_here: &dyn Fn(usize) -> bool| {
            let mut strides: Dims = smallvec::smallvec![0; dims.len()];
            let mut stride = 1;
            for i in (0..dims.len()).rev() {
                if !repeats_here(i) {
                    strides[i] = stride;
                    stride *= dims[i];
                }
            }
            strides
        };
        let a_strides = strides_of(&|i| repeats[i].0);
        let b_strides = strides_of(&|i| repeats[i].1);

        Ok(Broadcast { output_shape, output_len, dims, a_strides, b_strides })
    }

    /// The broadcast output shape, uncollapsed (what TensorFlow allocates).
    pub fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }

    pub fn output_len(&self) -> usize {
        self.output_len
    }

    /// The whole output is one run: the operands are same-shape, or one is
    /// a single element. Then [`Broadcast::single_run`] describes it.
    pub fn is_single_run(&self) -> bool {
        self.dims.len() == 1
    }

    /// Steps of `a` and `b` along the innermost collapsed dimension.
    pub fn inner_steps(&self) -> (usize, usize) {
        let inner = self.dims.len() - 1;
        (self.a_strides[inner], self.b_strides[inner])
    }

    /// Calls `visit` with consecutive runs covering output elements
    /// `start..start + len`, in order. Runs never cross the end of the
    /// innermost collapsed dimension.
    pub fn for_each_run(&self, start: usize, len: usize, mut visit: impl FnMut(Run)) {
        let end = start.saturating_add(len).min(self.output_len);
        if start >= end {
            return;
        }
        let rank = self.dims.len();
        let inner = rank - 1;

        // Multi-index of `start` and the operand offsets it implies.
        let mut index: Dims = smallvec::smallvec![0; rank];
        let mut rest = start;
        for i in (0..rank).rev() {
            index[i] = rest % self.dims[i];
            rest /= self.dims[i];
        }
        let mut a = (0..rank).map(|i| index[i] * self.a_strides[i]).sum::<usize>();
        let mut b = (0..rank).map(|i| index[i] * self.b_strides[i]).sum::<usize>();

        let mut out = start;
        while out < end {
            let len = (self.dims[inner] - index[inner]).min(end - out);
            visit(Run { out, a, b, len, a_step: self.a_strides[inner], b_step: self.b_strides[inner] });
            out += len;
            if out == end {
                break;
            }
            // Advance the odometer by `len` along the innermost dim, carrying.
            index[inner] += len;
            a += len * self.a_strides[inner];
            b += len * self.b_strides[inner];
            let mut i = inner;
            while index[i] == self.dims[i] && i > 0 {
                a -= self.dims[i] * self.a_strides[i];
                b -= self.dims[i] * self.b_strides[i];
                index[i] = 0;
                i -= 1;
                index[i] += 1;
                a += self.a_strides[i];
                b += self.b_strides[i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
        Broadcast::new(a, b).map(|plan| plan.output_shape().to_vec())
    }

    #[test]
    fn output_shapes_follow_numpy() {
        assert_eq!(output(&[2, 3], &[2, 3]).unwrap(), vec![2, 3]);
        assert_eq!(output(&[3, 1, 5], &[4, 1]).unwrap(), vec![3, 4, 5]);
        assert_eq!(output(&[], &[2, 3]).unwrap(), vec![2, 3]);
        assert_eq!(output(&[2, 3], &[]).unwrap(), vec![2, 3]);
        assert_eq!(output(&[], &[]).unwrap(), Vec::<usize>::new());
        assert_eq!(output(&[0, 3], &[1, 3]).unwrap(), vec![0, 3]);
        assert_eq!(output(&[1], &[0]).unwrap(), vec![0]);
        assert_eq!(output(&[1, 1, 1], &[7]).unwrap(), vec![1, 1, 7]);
    }

    #[test]
    fn same_shapes_plan_as_the_general_path_does() {
        for shape in [&[][..], &[1], &[7], &[1, 1], &[3, 0], &[0], &[2, 3, 5], &[1, 13, 1]] {
            let general = Broadcast::general(shape, shape).unwrap();
            assert_eq!(Broadcast::new(shape, shape).unwrap(), general, "shape {shape:?}");
        }
        let huge = [usize::MAX / 2, 3];
        assert_eq!(Broadcast::new(&huge, &huge).unwrap_err(), Broadcast::general(&huge, &huge).unwrap_err());
    }

    #[test]
    fn incompatible_shapes_are_named() {
        let error = output(&[2, 3], &[4]).unwrap_err();
        assert_eq!(error, ShapeError::Incompatible { a: vec![2, 3], b: vec![4] });
        assert_eq!(error.to_string(), "incompatible broadcast shapes [2,3] and [4]");
        assert!(output(&[0], &[2]).is_err());
        assert!(output(&[2, 3, 4], &[3, 3]).is_err());
    }

    #[test]
    fn overflowing_output_is_an_error() {
        let huge = usize::MAX / 2;
        assert!(matches!(output(&[huge, 1], &[1, huge]), Err(ShapeError::TooLarge { .. })));
    }

    #[test]
    fn same_shape_and_scalar_operands_collapse_to_one_run() {
        let same = Broadcast::new(&[2, 3, 4], &[2, 3, 4]).unwrap();
        assert!(same.is_single_run());
        assert_eq!(same.inner_steps(), (1, 1));

        let scalar = Broadcast::new(&[], &[2, 3]).unwrap();
        assert!(scalar.is_single_run());
        assert_eq!(scalar.inner_steps(), (0, 1));

        let trailing_ones = Broadcast::new(&[5, 1, 1], &[1]).unwrap();
        assert!(trailing_ones.is_single_run());
        assert_eq!(trailing_ones.inner_steps(), (1, 0));

        assert!(!Broadcast::new(&[3, 1, 5], &[4, 1]).unwrap().is_single_run());
    }

    /// Reference: the operand offset of output element `flat`, computed
    /// from the full (uncollapsed) multi-index.
    fn reference_offsets(a: &[usize], b: &[usize], out: &[usize], flat: usize) -> (usize, usize) {
        let mut index = vec![0; out.len()];
        let mut rest = flat;
        for i in (0..out.len()).rev() {
            index[i] = rest % out[i];
            rest /= out[i];
        }
        let offset = |shape: &[usize]| {
            let skip = out.len() - shape.len();
            let mut offset = 0;
            for (j, &dim) in shape.iter().enumerate() {
                let i = if dim == 1 { 0 } else { index[j + skip] };
                offset = offset * dim + i;
            }
            offset
        };
        (offset(a), offset(b))
    }

    #[test]
    fn runs_visit_every_element_with_reference_offsets() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 1, 5], &[4, 1]),
            (&[], &[2, 3]),
            (&[2, 3], &[]),
            (&[0, 3], &[1, 3]),
            (&[7, 13], &[13]),
            (&[7, 1], &[1, 13]),
            (&[2, 1, 3, 1], &[1, 4, 1, 5]),
            (&[1, 1], &[1, 1]),
            (&[6, 1, 1, 4], &[6, 3, 2, 4]),
        ];
        for &(a, b) in cases {
            let plan = Broadcast::new(a, b).unwrap();
            let len = plan.output_len();
            // Whole range, and awkward sub-ranges as parallel chunks see them.
            for (start, count) in [(0, len), (1, len.saturating_sub(2)), (len / 3, len / 2 + 1)] {
                let mut next = start;
                plan.for_each_run(start, count, |run| {
                    assert_eq!(run.out, next, "runs are consecutive for {a:?} {b:?}");
                    for j in 0..run.len {
                        let expected = reference_offsets(a, b, plan.output_shape(), run.out + j);
                        assert_eq!(
                            (run.a + j * run.a_step, run.b + j * run.b_step),
                            expected,
                            "{a:?} {b:?} @ {}",
                            run.out + j
                        );
                    }
                    next += run.len;
                });
                assert_eq!(next, (start + count).min(len).max(start), "{a:?} {b:?} covered");
            }
        }
    }
}
