//! # tfwasm runtime
//!
//! The part of tfwasm that needs neither TensorFlow nor native math: what a
//! guest author runs on any OS to test a guest, and what the TensorFlow
//! plugin builds on.
//!
//! ```text
//! caller (the plugin's C ABI, a test, a tool) ──▶ device/ (validation, state) ──WIT──▶ sandbox/ ─▶ guest
//!                                                    └──▶ pool (large copies on the compute pool)
//! ```
//!
//! - [`device`]: a [`device::Device`] asks its guest for every decision
//!   (placement, stream order, event state), checks each answer against what
//!   the host knows, and only then acts: its [`device::DeviceArena`] (the
//!   device's memory region) and its streams (work queues ordered by the
//!   guest, run by the host). The one place guest answers are validated.
//! - [`sandbox`]: the shared wasmtime `Engine`, one `Store` per guest
//!   instance, memory caps, per-call epoch deadlines, trap recovery, the
//!   compile cache.
//! - [`passes`]: graph-optimizer passes as guests, and the checks of every
//!   graph a pass answers.
//! - [`policy`]: the serde manifest that says which guest runs with which
//!   limits and capabilities.
//! - [`pool`]: the rayon pool that compute and large copies run on.
//! - [`profiler`]: what devices record while a profiling session runs
//!   (kernels, copies, allocations, guest calls and faults), and the XSpace
//!   TensorBoard reads, built from it.
//! - [`error`]: the error type, and its one mapping to status codes.
//!
//! ## Unsafe code
//!
//! The device region (`device/arena.rs`: an anonymous mapping on Unix, an
//! allocation elsewhere), addresses inside it carried to stream work
//! (`device/`), CPU affinity (`pool.rs`, Linux) and wasmtime's loading of
//! precompiled guests and two Cranelift flags (`sandbox/`). Each block
//! carries a `// SAFETY:` comment that can be checked locally.

pub mod device;
pub mod error;
pub mod passes;
pub mod policy;
pub mod pool;
pub mod profiler;
pub mod sandbox;

pub use error::{Error, Result};
