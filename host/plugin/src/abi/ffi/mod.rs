//! Our own `#[repr(C)]` mirrors of the C structs and functions TensorFlow
//! 2.21 exposes to plugins. `tests/rust/layout.rs` checks every size and
//! field offset against the headers that ship in the installed wheel.

pub mod c_api;
pub mod done;
pub mod grappler;
pub mod kernels;
pub mod npd;
pub mod pjrt;
pub mod profiler;
pub mod status;
pub mod stream_executor;
