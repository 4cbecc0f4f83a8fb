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

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    use crate::node::Set;
    use crate::pass::{self, Answer, Context, Kernel, Plan};

    wit_bindgen::generate!({
        path: "../../wit/optimizer",
        world: "pass",
    });

    use exports::tfwasm::optimizer::optimizer::Guest;
    use tfwasm::optimizer::host::{log, now_ns, LogLevel};
    use tfwasm::optimizer::types::{GraphContext, Outcome, PassInfo, Rewrite, Rewritten};

    thread_local! {
        /// Notes already logged: the context repeats them on every call.
        static NOTED: RefCell<Set<String>> = RefCell::new(Set::default());
    }

    struct ContractionPass;

    impl Guest for ContractionPass {
        fn describe() -> PassInfo {
            PassInfo {
                name: pass::NAME.into(),
                version: pass::VERSION.into(),
                summary: pass::SUMMARY.into(),
                emits: pass::emits().into_iter().map(String::from).collect(),
            }
        }

        fn optimize(graph: Vec<u8>, context: GraphContext) -> Result<Outcome, String> {
            let context = Context {
                device_type: context.device_type,
                preserve: context.preserve,
                fetch: context.fetch,
                kernels: context
                    .kernels
                    .into_iter()
                    .map(|k| Kernel { op: k.op, types: k.types.into_iter().map(|t| (t.attr, t.dtypes)).collect() })
                    .collect(),
                options: context.options,
            };
            let (plan, notes) = Plan::new(&context)?;
            for note in notes {
                if NOTED.with_borrow_mut(|noted| noted.insert(note.clone())) {
                    log(LogLevel::Info, &note);
                }
            }
            let start = now_ns();
            match pass::optimize(&graph, &context, &plan)? {
                Answer::Unchanged => Ok(Outcome::Unchanged),
                Answer::Rewritten { graph: rewritten, report } => {
                    log(
                        LogLevel::Debug,
                        &format!(
                            "{} fused nodes in a graph of {} bytes, {} µs",
                            report.len(),
                            graph.len(),
                            now_ns().saturating_sub(start) / 1000
                        ),
                    );
                    let report = report.into_iter().map(|r| Rewrite { node: r.node, reason: r.reason }).collect();
                    Ok(Outcome::Rewritten(Rewritten { graph: rewritten, report }))
                }
            }
        }
    }

    export!(ContractionPass);
}
