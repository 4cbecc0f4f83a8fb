//! Host + guest integration tests. Apart from `layout` (which compiles a C
//! probe against the installed wheel's headers), they need no TensorFlow:
//! they drive the core layer (`tfwasm::device`) with the real guests built
//! for wasm32-wasip2, the way a guest author tests on any OS.
//!
//! One binary, one module per topic (wasmtime's layout).

mod device;
mod hostile;
mod hostile_passes;
mod layout;
mod passes;
mod profiler;
mod support;
