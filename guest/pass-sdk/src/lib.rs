//! The Rust side of world `pass` (`wit/optimizer`, `tfwasm:optimizer@0.1.0`)
//! for pass authors: implement [`Pass`] on plain Rust types, then
//! [`export_pass!`] makes it the component's export.
//!
//! ```text
//! host ──optimize(graph, graph-context)──▶ export_pass! glue ──▶ P::plan(&Context) ─▶ P::optimize(bytes, &Context, plan)
//!      ◀──────── outcome / error ───────── (notes logged once, timing at debug) ◀──── Answer
//! ```
//!
//! Everything a pass computes takes and returns the types here
//! ([`Context`], [`Kernel`], [`Answer`], [`Rewrite`]), not the generated
//! WIT bindings, so a pass's whole path runs natively in `cargo test`: the
//! bindings exist only on wasm, where their host imports can link. [`host`]
//! is the host's log and clock on wasm and a stand-in natively.
//!
//! The reference passes (`guest/fuse-pass`, `guest/contraction-pass`) and
//! the hostile one (`guest/hostile-pass`) are built on it.

pub mod host;

use std::cell::RefCell;

/// Maps and sets keyed by node name. A fixed seed: std's random one would
/// make the guest import `wasi:random`, which a pass is never granted.
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
pub type Set<T> = std::collections::HashSet<T, foldhash::fast::FixedState>;

/// A graph-optimizer pass: what it says of itself and how it rewrites.
pub trait Pass {
    /// `pass-info.name`: short and stable, e.g. `"fuse-elementwise"`.
    const NAME: &'static str;
    /// `pass-info.version`, usually `env!("CARGO_PKG_VERSION")`.
    const VERSION: &'static str;
    /// `pass-info.summary`: one line for `tfwasm.passes.list()`.
    const SUMMARY: &'static str;

    /// What a call does, decided from the context before the graph is
    /// decoded (options read, rewrites the device has no kernels for left
    /// out).
    type Plan;

    /// `pass-info.emits`: the op types the pass may add to a graph.
    fn emits() -> Vec<&'static str>;

    /// Reads `context` into a plan, with notes for the log (an unknown
    /// option, a rewrite left out). The glue logs each note once per
    /// instance: the context repeats them on every call. An error refuses
    /// the call and names what is wrong.
    fn plan(context: &Context) -> Result<(Self::Plan, Vec<String>), String>;

    /// Rewrites `graph` (a serialized GraphDef) or leaves it.
    fn optimize(graph: &[u8], context: &Context, plan: Self::Plan) -> Result<Answer, String>;
}

/// A kernel the device has: its op and, per type attribute it constrains
/// (`T`, `dtype`, ...), the `DataType` numbers it accepts there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub op: String,
    pub types: Vec<(String, Vec<u32>)>,
}

impl Kernel {
    /// Whether this kernel runs a node of its op whose type attributes (or
    /// the elements of a type-list attribute) are `attrs`: each constrained
    /// attribute the node sets holds a listed type.
    pub fn serves(&self, attrs: &[(&str, i32)]) -> bool {
        self.types.iter().all(|(attr, dtypes)| {
            attrs
                .iter()
                .filter(|(key, _)| key == attr)
                .all(|&(_, t)| u32::try_from(t).is_ok_and(|t| dtypes.contains(&t)))
        })
    }
}

/// What the host says besides the graph (`graph-context`).
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub device_type: String,
    pub preserve: Vec<String>,
    pub fetch: Vec<String>,
    pub kernels: Vec<Kernel>,
    pub options: Vec<(String, String)>,
}

impl Context {
    /// Whether the device has a kernel of `op` for these type attributes.
    pub fn has_kernel(&self, op: &str, attrs: &[(&str, i32)]) -> bool {
        self.kernels.iter().any(|k| k.op == op && k.serves(attrs))
    }

    /// The nodes TensorFlow keeps: preserved and fetched.
    pub fn kept(&self) -> Set<&str> {
        self.preserve.iter().chain(&self.fetch).map(String::as_str).collect()
    }
}

/// One line of the report (`rewrite`): a node the pass rewrote or made, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub node: String,
    pub reason: String,
}

/// The pass's answer.
#[derive(Debug, PartialEq)]
pub enum Answer {
    Unchanged,
    Rewritten { graph: Vec<u8>, report: Vec<Rewrite> },
}

/// Whether `device` (a full or partial device string, e.g.
/// `/job:localhost/replica:0/task:0/device:WASM:0`) names a device of type
/// `device_type`: its last `device:` component is `TYPE`, `TYPE:N` or
/// `TYPE:*`.
pub fn on_device(device: &str, device_type: &str) -> bool {
    let Some(component) = device.rsplit('/').find_map(|c| c.strip_prefix("device:")) else { return false };
    match component.split_once(':') {
        None => component == device_type,
        Some((ty, id)) => {
            ty == device_type && (id == "*" || (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())))
        }
    }
}

thread_local! {
    /// Notes already logged by this instance.
    static NOTED: RefCell<Set<String>> = RefCell::new(Set::default());
}

/// One `optimize` call as the glue makes it: plan, log the notes not yet
/// logged, optimize, log how long it took.
pub fn run<P: Pass>(graph: &[u8], context: &Context) -> Result<Answer, String> {
    let (plan, notes) = P::plan(context)?;
    for note in notes {
        if NOTED.with_borrow_mut(|noted| noted.insert(note.clone())) {
            host::log(host::Level::Info, &note);
        }
    }
    let start = host::now_ns();
    let answer = P::optimize(graph, context, plan)?;
    if let Answer::Rewritten { report, .. } = &answer {
        let micros = host::now_ns().saturating_sub(start) / 1000;
        host::log(
            host::Level::Debug,
            &format!("{} rewrites in a graph of {} bytes, {micros} µs", report.len(), graph.len()),
        );
    }
    Ok(answer)
}

/// The generated bindings of world `pass` (wasm only).
#[cfg(target_arch = "wasm32")]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/optimizer",
        world: "pass",
        pub_export_macro: true,
        export_macro_name: "export_pass_bindings",
        default_bindings_module: "tfwasm_pass_sdk::bindings",
    });
}

/// The WIT glue [`export_pass!`] expands to (wasm only).
#[cfg(target_arch = "wasm32")]
pub mod glue {
    use crate::bindings::tfwasm::optimizer::types::{GraphContext, Outcome, PassInfo, Rewrite, Rewritten};
    use crate::{Answer, Context, Kernel, Pass};

    pub fn describe<P: Pass>() -> PassInfo {
        PassInfo {
            name: P::NAME.into(),
            version: P::VERSION.into(),
            summary: P::SUMMARY.into(),
            emits: P::emits().into_iter().map(String::from).collect(),
        }
    }

    pub fn optimize<P: Pass>(graph: Vec<u8>, context: GraphContext) -> Result<Outcome, String> {
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
        Ok(match crate::run::<P>(&graph, &context)? {
            Answer::Unchanged => Outcome::Unchanged,
            Answer::Rewritten { graph, report } => Outcome::Rewritten(Rewritten {
                graph,
                report: report.into_iter().map(|r| Rewrite { node: r.node, reason: r.reason }).collect(),
            }),
        })
    }
}

/// Makes `$pass` (a type implementing [`Pass`]) the component's
/// `optimizer` export. Expands to nothing off wasm, so the crate's native
/// tests build.
#[macro_export]
macro_rules! export_pass {
    ($pass:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct Exported;

            impl $crate::bindings::exports::tfwasm::optimizer::optimizer::Guest for Exported {
                fn describe() -> $crate::bindings::tfwasm::optimizer::types::PassInfo {
                    $crate::glue::describe::<$pass>()
                }

                fn optimize(
                    graph: ::std::vec::Vec<u8>,
                    context: $crate::bindings::tfwasm::optimizer::types::GraphContext,
                ) -> ::std::result::Result<$crate::bindings::tfwasm::optimizer::types::Outcome, ::std::string::String>
                {
                    $crate::glue::optimize::<$pass>(graph, context)
                }
            }

            $crate::bindings::export_pass_bindings! { Exported with_types_in $crate::bindings }
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_string_names_its_type() {
        for yes in ["/job:localhost/replica:0/task:0/device:WASM:0", "/device:WASM:*", "device:WASM", "/device:WASM:12"]
        {
            assert!(on_device(yes, "WASM"), "{yes}");
        }
        for no in ["/device:CPU:0", "/device:WASM:", "/device:WASM:x", "", "WASM:0", "/device:WASMX:0"] {
            assert!(!on_device(no, "WASM"), "{no}");
        }
    }

    #[test]
    fn a_kernel_serves_only_its_types() {
        let matmul = Kernel { op: "MatMul".into(), types: vec![("T".into(), vec![1])] };
        let context = Context { kernels: vec![matmul.clone()], ..Context::default() };
        assert!(matmul.serves(&[("T", 1)]));
        assert!(!matmul.serves(&[("T", 2)]));
        assert!(!matmul.serves(&[("T", -1)]));
        assert!(matmul.serves(&[("transpose_a", 0)]), "an attribute the kernel does not constrain");
        assert!(context.has_kernel("MatMul", &[("T", 1)]));
        assert!(!context.has_kernel("BatchMatMulV2", &[("T", 1)]));
    }

    struct Counting;

    impl Pass for Counting {
        const NAME: &'static str = "counting";
        const VERSION: &'static str = "0";
        const SUMMARY: &'static str = "test";
        type Plan = usize;

        fn emits() -> Vec<&'static str> {
            Vec::new()
        }

        fn plan(context: &Context) -> Result<(usize, Vec<String>), String> {
            match context.options.first() {
                Some((key, _)) if key == "bad" => Err("option bad".into()),
                _ => Ok((context.options.len(), vec!["a note".into()])),
            }
        }

        fn optimize(graph: &[u8], _: &Context, plan: usize) -> Result<Answer, String> {
            Ok(match plan {
                0 => Answer::Unchanged,
                n => Answer::Rewritten {
                    graph: graph.repeat(n),
                    report: vec![Rewrite { node: "x".into(), reason: "y".into() }],
                },
            })
        }
    }

    #[test]
    fn run_plans_then_optimizes_and_passes_errors_on() {
        let mut context = Context::default();
        assert_eq!(run::<Counting>(b"g", &context), Ok(Answer::Unchanged));
        context.options = vec![("k".into(), "v".into()), ("l".into(), "w".into())];
        match run::<Counting>(b"g", &context).unwrap() {
            Answer::Rewritten { graph, report } => assert_eq!((graph, report.len()), (b"gg".to_vec(), 1)),
            other => panic!("{other:?}"),
        }
        context.options = vec![("bad".into(), String::new())];
        assert_eq!(run::<Counting>(b"g", &context), Err("option bad".into()));
    }
}
