//! # tfwasm-xla
//!
//! tfwasm's XLA executor, without TensorFlow and without any C ABI: it
//! takes the module TensorFlow hands a PJRT plugin's `PJRT_Client_Compile`
//! (format `"hlo"`, a serialized `HloModuleProto` straight from tf2xla, no
//! XLA pass run on it), turns it into a plan over tfwasm's own kernels
//! (`tfwasm-kernels`) and runs it on host buffers. The plugin's PJRT entry
//! points (`abi/`) wrap it; the tests run modules captured from TensorFlow
//! 2.21 on any OS.
//!
//! Where data flows:
//!
//! 1. **Decode** ([`Executable::compile`]): prost messages of the project's
//!    own schema, `proto/hlo.proto` (`tfwasm_proto::hlo`).
//! 2. **Plan** (`plan`): the entry computation's instructions that the root
//!    needs, in order. Each becomes a step on a kernel — a matrix product
//!    (`MatMulPlan`, `BatchMatMulPlan`), an elementwise op (`BinaryPlan`,
//!    `UnaryOp`), or a TensorFlow kernel run through a small `OpContext`
//!    (`Transpose`, `BroadcastTo`, `StridedSlice`, `ConcatV2`, `SelectV2`,
//!    `Sum`/`Max`/`Min`/`Prod` for a `reduce` whose reducer computation is
//!    recognised) — or, for `reshape`, `copy`, `bitcast`, tuples and
//!    order-keeping `transpose`/`broadcast`, a view of its operand's bytes
//!    with no step at all. Anything else is [`XlaError::Unsupported`],
//!    naming the opcode and the TensorFlow op (`metadata.op_type`/`op_name`)
//!    it came from. Only XLA's default descending layout is accepted.
//!    Elementwise chains run unfused, one step per instruction (stage 1).
//! 3. **Buffers**: parameters are the caller's [`HostBuffer`]s, constants
//!    the plan's; every step writes a slot of an arena, and a slot is reused
//!    once the last reader of its value has run. Arenas are kept between
//!    runs. The root's arrays (one, or a tuple's) are copied out as separate
//!    buffers.
//! 4. **Run** ([`Executable::run`]): steps in order on the calling thread;
//!    large kernels spread over the runtime's compute pool themselves.
//!
//! float32 goes through the kernels. The kernels are float32-first today
//! (another issue makes them generic over the element type), so float64,
//! s32/s64/u8/u64 and `pred` elementwise ops, conversions, iota and
//! non-float32 reductions and products are plain loops in `elementwise`,
//! marked as such, to be replaced by the generic kernels.

mod buffer;
mod elementwise;
mod error;
mod exec;
pub mod hlo;
pub mod literal;
mod plan;

pub use buffer::{ArrayShape, ElementType, HostBuffer};
pub use error::{Origin, Site, XlaError};
pub use exec::Executable;
pub use tfwasm_proto::hlo as proto;
