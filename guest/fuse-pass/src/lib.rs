//! The reference graph-optimizer pass, `fuse-elementwise`: a wasm guest of
//! world `pass` (`wit/optimizer`, `tfwasm:optimizer@0.1.0`).
//!
//! The host hands it each graph TensorFlow optimizes for the device, after
//! the rewrites the device needs merely to run (legalization). It makes two
//! rewrites on a GraphDef decoded with prost (`tfwasm-proto`), the same,
//! node for node, as the plugin's native `graph::updates::assign_updates`
//! and `graph::fuse::fuse_elementwise` (`tests/equivalence.rs` holds it to
//! that):
//!
//! 1. [`updates`]: a float32 `AssignAdd/AssignSubVariableOp` on the device
//!    becomes a read, an `AddV2`/`Sub` and an `AssignVariableOp`;
//! 2. [`fuse`]: every tree of float32 elementwise ops on the device (the sums
//!    just made included) becomes one `_TfwasmFusedElementwise` node whose
//!    `expr` is the tree in postfix ([`program`], the fused op's contract).
//!
//! [`pass`] is the call as the host makes it: bytes and a [`pass::Context`]
//! in, [`pass::Answer::Unchanged`] or a new GraphDef and a report out;
//! [`node`] reads NodeDefs as TensorFlow does. All of it is plain Rust,
//! tested natively (`cargo test -p tfwasm-fuse-pass`); the bindings exist
//! only on wasm, since their host imports cannot link into a native test.

pub mod fuse;
pub mod node;
pub mod pass;
pub mod program;
pub mod updates;

tfwasm_pass_sdk::export_pass!(pass::FusePass);
