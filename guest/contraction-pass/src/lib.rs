//! A reference graph-optimizer pass, `fuse-contraction`: a wasm guest of
//! world `pass` (`wit/optimizer`, `tfwasm:optimizer@0.1.0`).
//!
//! It gives the device's fused contraction kernels their work: a float32
//! `MatMul` or NHWC `Conv2D` on the device, the `BiasAdd` after it and an
//! activation after that (`Relu`, `Relu6`, `Elu`, `LeakyRelu`, `Tanh`,
//! `Sigmoid`) become one `_FusedMatMul` or `_FusedConv2D` node, TensorFlow's
//! own fused ops, so the product's output is finished while it is still in
//! cache instead of being written and read twice more ([`contraction`]).
//!
//! A policy lists it before `fuse-elementwise`, which would otherwise take
//! the `BiasAdd` and the activation into an elementwise group.
//!
//! [`pass`] is the call as the host makes it: bytes and a [`pass::Context`]
//! in, [`pass::Answer::Unchanged`] or a new GraphDef and a report out, as
//! the policy's options and the device's kernels allow ([`pass::Plan`]);
//! [`node`] reads NodeDefs. All of it is plain Rust, tested natively
//! (`cargo test -p tfwasm-contraction-pass`); the bindings exist only on
//! wasm, since their host imports cannot link into a native test.

pub mod contraction;
pub mod node;
pub mod pass;

#[cfg(test)]
mod tests;

tfwasm_pass_sdk::export_pass!(pass::ContractionPass);
