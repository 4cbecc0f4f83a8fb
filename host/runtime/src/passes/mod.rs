//! Graph-optimizer passes as wasm guests (world `pass` of
//! `wit/optimizer`, `tfwasm:optimizer@0.1.0`).
//!
//! TensorFlow hands the plugin's optimizer a serialized GraphDef; after its
//! own legalization the host runs the policy's pipeline of passes over it,
//! one guest at a time, and checks every answer ([`validate`]) before the
//! next pass, or TensorFlow, sees it. A pass that traps, overruns its
//! deadline or answers a graph that fails a check costs only its own
//! rewrite: the pipeline goes on with the graph the pass was given.
//!
//! - [`validate`]: the checks of an answer, against an [`validate::OpCatalog`]
//!   of what TensorFlow knows (its op registry, the device's kernels).
//! - [`types`]: a node's input and output types and attributes against its
//!   op's signature, as TensorFlow's importer checks them.
//! - [`catalog`]: the device's kernel table, and the snapshot of
//!   TensorFlow's registry that offline checks use.
//! - [`verified`]: a policy's requirement that a pass passed `tfwasm pass verify`.
//! - [`pipeline`]: pass programs (compiled, described, checked), and the
//!   pipeline that runs them, swaps them and keeps their counters.

pub mod catalog;
pub mod pipeline;
pub mod types;
pub mod validate;
pub mod verified;

pub use pipeline::{PassProgram, PassStatus, Pipeline, RunContext, RunOutcome};
