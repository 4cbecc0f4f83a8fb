//! # tfwasm-proto
//!
//! TensorFlow's graph wire format, the profiler's trace format (XSpace) and
//! the part of XLA's HLO module format that TensorFlow hands a PJRT plugin,
//! as prost messages, generated at build time from the project's own
//! schemas, `proto/graph.proto`, `proto/xplane.proto` and `proto/hlo.proto`
//! (no `protoc` needed).
//! The schema names every field TensorFlow 2.21 defines in a GraphDef and
//! everything it reaches, so decoding and encoding a graph loses nothing;
//! `tests/python/test_proto_schema.py` checks that against the wheel.
//!
//! Used by pass guests (compiled to wasm) to read and write the graphs they
//! are given, and by the host to check what a guest answers.
//!
//! ```ignore
//! use prost::Message;
//! let graph = tfwasm_proto::graph::GraphDef::decode(bytes)?;
//! let again = graph.encode_to_vec();
//! ```

pub use prost;

/// The messages of package `tfwasm.graph`: [`graph::GraphDef`],
/// [`graph::NodeDef`], [`graph::AttrValue`], [`graph::FunctionDefLibrary`] …
pub mod graph {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tfwasm.graph.rs"));
}

/// `proto/graph.proto`, `proto/xplane.proto` and `proto/hlo.proto` compiled: a serialized
/// `FileDescriptorSet`, for tools that need the schema at run time (the
/// text format, in `tfwasm pass run`).
/// Nothing links it unless it is used.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/graph.fds"));

/// The messages of package `tfwasm.xplane`: the profiler's trace,
/// [`xplane::XSpace`] of [`xplane::XPlane`]s, as TensorBoard reads it.
pub mod xplane {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tfwasm.xplane.rs"));
}

/// The messages of package `tfwasm.hlo`: an XLA module as TensorFlow sends
/// it to a PJRT plugin's compile ([`hlo::HloModuleProto`] of
/// [`hlo::HloComputationProto`]s of [`hlo::HloInstructionProto`]s), with
/// only the fields `tfwasm-xla` reads.
pub mod hlo {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tfwasm.hlo.rs"));
}
