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

    struct FusePass;

    impl Guest for FusePass {
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
            match pass::optimize(&graph, &context, plan)? {
                Answer::Unchanged => Ok(Outcome::Unchanged),
                Answer::Rewritten { graph: rewritten, report } => {
                    log(
                        LogLevel::Debug,
                        &format!(
                            "{} rewrites in a graph of {} bytes, {} µs",
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

    export!(FusePass);
}
