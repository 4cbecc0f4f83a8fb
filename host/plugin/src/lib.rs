//! # tfwasm plugin
//!
//! A TensorFlow PluggableDevice whose device logic runs as sandboxed
//! WebAssembly. TensorFlow loads this library (`libtfwasm.so`) and calls its
//! C entry points; the library asks a wasm guest for every device decision,
//! checks the answer, and does the work natively. This crate is the thin
//! top that wires the others to TensorFlow:
//!
//! ```text
//! TensorFlow ──C ABI──▶ abi/ ──▶ tfwasm-runtime: device (validation, state) ──WIT──▶ sandbox ─▶ guest
//!                         └────▶ tfwasm-kernels on the runtime's pool (compute, no guest involved)
//! ```
//!
//! - [`abi`]: every `extern "C"` item (StreamExecutor, kernels, graph
//!   optimizer, tools), `#[repr(C)]` mirrors, status reporting, panic
//!   containment. No logic.
//! - [`config`]: the process's configuration from the environment, the
//!   policy it names, and the TensorFlow versions the plugin serves.
//! - [`optimizer`]: the graph optimizer registered through `TF_InitGraph`:
//!   the host's native legalization around the policy's wasm passes.
//! - [`graph`]: the native rewrites on the serialized GraphDef: calls with
//!   `jit_compile=True` placed on the device run without XLA (their loops
//!   and branches lowered), tensors cross from and to the CPU device in
//!   host memory, and more.
//! - [`device`], [`sandbox`], [`policy`], [`error`]: re-exported from
//!   `tfwasm-runtime` (`host/runtime`), which builds on any OS and knows
//!   nothing of TensorFlow.
//! - `pjrt` (cargo feature `pjrt`, off by default): the PJRT client XLA
//!   launches on the device go through (issue 45), over `tfwasm-xla`.
//! - [`kernels`]: re-exported `tfwasm-kernels` (`host/kernels`), the native
//!   compute behind the ops registered through `TF_InitKernel`.
//!
//! ## Unsafe code
//!
//! Most `unsafe` lives in `abi/` (raw pointers from TensorFlow). The rest is
//! `dladdr` through `libc` (`config.rs`, to find the installed defaults).
//! Each block carries a `// SAFETY:` comment that can be checked locally.
//! The Rust API of this crate is safe.

pub mod abi;
pub mod config;
pub mod graph;
pub mod optimizer;
#[cfg(feature = "pjrt")]
pub mod pjrt;

pub use tfwasm_kernels as kernels;
pub use tfwasm_runtime::{device, error, passes, policy, pool, sandbox};

pub use error::{Error, Result};
