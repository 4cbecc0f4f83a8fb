//! Native compute kernels: the arithmetic behind the ops tfwasm registers
//! with TensorFlow (`abi/kernels.rs`). No guest is involved here — the guest
//! decides where tensors live, the host does the math on them.
//!
//! Everything in this module is safe Rust on slices and shapes and knows
//! nothing of TensorFlow's types; `abi/kernels.rs` turns `TF_Tensor`s into
//! slices, asks a plan for the output shape, allocates, and runs the plan.
//!
//! - [`shape`]: NumPy/TensorFlow broadcasting of two shapes, collapsed into
//!   the fewest dimensions, and the strided walk over the output.
//! - [`binary`]: [`BinaryPlan`] for elementwise `AddV2` and `Mul`, with fast
//!   paths for same-shape and single-element operands.
//! - [`matmul`]: [`MatMulPlan`] for `MatMul` (with transposes) on `gemm`.
//! - [`pool`]: the rayon pool the kernels compute on, and why it has the
//!   size it has.
//!
//! A plan is built from shapes alone and fails with
//! [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) naming the
//! op and the shapes; running it checks the buffer lengths against those
//! shapes, so a wrong length is an error, never an out-of-bounds access.
//! Small ops run on the calling (TensorFlow) thread; large ones on the pool.

pub mod binary;
pub mod matmul;
pub mod pool;
pub mod shape;

pub use binary::{BinaryOp, BinaryPlan};
pub use matmul::{MatMulAttrs, MatMulPlan};
pub use shape::{Broadcast, ShapeDisplay, ShapeError};
