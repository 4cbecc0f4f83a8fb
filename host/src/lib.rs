//! # tfwasm host
//!
//! A TensorFlow PluggableDevice whose device logic runs as sandboxed
//! WebAssembly. TensorFlow loads this library (`libtfwasm.so`) and calls its
//! C entry points; the library asks a wasm guest for every device decision,
//! checks the answer, and does the work natively.
//!
//! ```text
//! TensorFlow ──C ABI──▶ abi/ ──▶ device/ (validation, state) ──WIT──▶ sandbox/ ─▶ guest
//!                                   └──▶ kernels/ on rayon (compute, no guest involved)
//! ```
//!
//! - [`abi`]: every `extern "C"` item (StreamExecutor, kernels, graph
//!   optimizer), `#[repr(C)]` mirrors, status reporting, panic containment.
//!   No logic.
//! - [`device`]: the [`device::Device`] a TensorFlow device maps to: its
//!   [`device::DeviceArena`] (host-addressable memory whose placement the guest
//!   decides and the host verifies) and its streams (work queues ordered by
//!   the guest, run by the host).
//! - [`sandbox`]: the shared wasmtime `Engine`, one `Store` per guest instance,
//!   memory caps, per-call epoch deadlines, trap recovery.
//! - [`policy`]: the serde manifest that says which guest runs with which limits.
//! - [`kernels`]: native compute kernels registered through `TF_InitKernel`.
//! - [`graph`]: the graph pass registered through `TF_InitGraph`; it works on
//!   the serialized GraphDef, lets `jit_compile=True` calls placed on the
//!   device run without XLA (their loops and branches lowered), fuses
//!   elementwise trees and lets tensors cross
//!   from and to the CPU device in host memory.
//!
//! ## Unsafe code
//!
//! Most `unsafe` lives in `abi/` (raw pointers from TensorFlow) and in
//! `device/arena.rs` (the device region). The rest is small and local:
//! `kernels/tensor.rs` (a [`kernels::Tensor`] over a buffer it does not
//! own, and the element types every bit pattern of which is valid), the
//! matrix products (`kernels/sgemm.rs`: `gemm` and BLIS take pointers and
//! strides; `kernels/matmul.rs` and `kernels/conv.rs` hand them checked
//! spans), the AVX2 copy of the elementwise loops
//! (`kernels/vmath.rs`, after the CPU check), CPU affinity and `dladdr`
//! through `libc` (`kernels/pool.rs`, `config.rs`), wasmtime's loading of
//! precompiled guests and two Cranelift flags (`sandbox/`), and addresses
//! inside the device region carried to stream work (`device/`). Each block carries a `// SAFETY:` comment that can be
//! checked locally. The Rust API of this crate is safe.

pub mod abi;
pub mod config;
pub mod device;
pub mod error;
pub mod graph;
pub mod kernels;
pub mod policy;
pub mod sandbox;

pub use error::{Error, Result};
