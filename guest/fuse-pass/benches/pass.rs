//! Benchmark (not a test): what the pass costs per graph, against the
//! plugin's native rewrites it replaces.
//!
//! For each captured graph (`tests/fixtures/graphs`, after the native
//! legalization steps), prints the median microseconds of:
//! - native: `tfwasm::graph::updates::assign_updates` + `fuse::fuse_elementwise`
//!   on the bytes (what the plugin ran in-process);
//! - guest logic, natively: prost decode, both rewrites, encode
//!   (`pass::optimize`), and the decode, the rewrites and the encode alone;
//! - the component under wasmtime, one `optimize` call (arguments and
//!   answer crossing included), when it has been built:
//!   `cargo build --target wasm32-wasip2 --profile guest -p tfwasm-fuse-pass`.
//!
//! Run: `cargo bench -p tfwasm-fuse-pass --bench pass`.

use std::collections::HashSet;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use tfwasm_fuse_pass::node::DT_FLOAT;
use tfwasm_fuse_pass::pass::{self, Context, Kernel, Plan};
use tfwasm_fuse_pass::{fuse, program, updates};
use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;

const ROUNDS: usize = 9;

/// Median over rounds of µs per iteration.
fn measure(iters: usize, mut f: impl FnMut()) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn legalized(graph: &[u8]) -> Vec<u8> {
    use tfwasm::graph::{lower, updates, xla};
    let cleared = xla::clear_must_compile(graph, "WASM").unwrap();
    let lowered = lower::lower_control_flow(&cleared.graph, "WASM").unwrap();
    updates::scatter_updates(&lowered.graph, "WASM").unwrap().graph
}

fn context(graph: &GraphDef) -> Context {
    let t = |op: &str, attr: &str| Kernel { op: op.into(), types: vec![(attr.into(), vec![DT_FLOAT as u32])] };
    // TensorFlow preserves the function's arguments and return values.
    let preserve =
        graph.node.iter().filter(|n| matches!(n.op.as_str(), "_Arg" | "_Retval")).map(|n| n.name.clone()).collect();
    Context {
        device_type: "WASM".into(),
        preserve,
        kernels: vec![
            t(program::OP, "T"),
            t("AddV2", "T"),
            t("Sub", "T"),
            t("ReadVariableOp", "dtype"),
            t("AssignVariableOp", "dtype"),
        ],
        ..Default::default()
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("tests/fixtures/graphs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/graphs")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pb"))
        .collect();
    files.sort();
    let component = root.join("target/wasm32-wasip2/guest/tfwasm_fuse_pass.wasm");
    let mut guest = component.exists().then(|| wasm::Guest::load(&component));
    if guest.is_none() {
        println!("({} not built: the wasm column is left out)", component.display());
    }

    println!(
        "{:<22} {:>6} {:>8} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10}",
        "graph", "nodes", "bytes", "native µs", "guest µs", "decode", "rewrite", "encode", "ratio", "wasm µs"
    );
    for file in files {
        let graph = legalized(&std::fs::read(&file).unwrap());
        let decoded = GraphDef::decode(graph.as_slice()).unwrap();
        let context = context(&decoded);
        let keep: HashSet<&[u8]> = context.preserve.iter().map(|n| n.as_bytes()).collect();
        let (plan, _) = Plan::new(&context).unwrap();
        let iters = (2_000_000 / graph.len().max(1)).clamp(20, 5_000);

        let native = measure(iters, || {
            use tfwasm::graph::{fuse, updates};
            let updated = updates::assign_updates(black_box(&graph), "WASM").unwrap();
            black_box(fuse::fuse_elementwise(&updated.graph, "WASM", &|name| keep.contains(name)).unwrap());
        });
        let ours = measure(iters, || {
            black_box(pass::optimize(black_box(&graph), &context, plan).unwrap());
        });
        let decode = measure(iters, || {
            black_box(GraphDef::decode(black_box(graph.as_slice())).unwrap());
        });
        let encode = measure(iters, || {
            black_box(black_box(&decoded).encode_to_vec());
        });
        // The rewrites alone: on a copy of the decoded graph, less the copy.
        let copy = measure(iters, || {
            black_box(black_box(&decoded).clone());
        });
        let rewrite = measure(iters, || {
            let mut graph = black_box(&decoded).clone();
            updates::assign_updates(&mut graph, "WASM");
            black_box(fuse::fuse_elementwise(&mut graph, "WASM", &|name| keep.contains(name.as_bytes())));
        }) - copy;
        let in_wasm = guest.as_mut().map_or(String::from("-"), |guest| {
            format!("{:.1}", measure(iters.min(1000), || guest.optimize(&graph, &context)))
        });
        println!(
            "{:<22} {:>6} {:>8} {:>10.1} {:>10.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}× {:>10}",
            file.file_stem().unwrap().to_string_lossy(),
            decoded.node.len(),
            graph.len(),
            native,
            ours,
            decode,
            rewrite,
            encode,
            ours / native,
            in_wasm
        );
    }
}

/// The component under wasmtime, with a host that logs nowhere.
mod wasm {
    use std::path::Path;

    use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
    use wasmtime::{Engine, Store};
    use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

    use tfwasm_fuse_pass::pass::Context;

    wasmtime::component::bindgen!({
        path: "../../wit/optimizer",
        world: "pass",
    });

    use self::tfwasm::optimizer::types::{GraphContext, Kernel, TypeConstraint};

    struct State {
        wasi: WasiCtx,
        table: ResourceTable,
    }

    impl WasiView for State {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
        }
    }

    impl self::tfwasm::optimizer::host::Host for State {
        fn log(&mut self, _level: self::tfwasm::optimizer::host::LogLevel, _message: String) {}

        fn now_ns(&mut self) -> u64 {
            0
        }
    }

    impl self::tfwasm::optimizer::types::Host for State {}

    pub struct Guest {
        store: Store<State>,
        pass: Pass,
    }

    impl Guest {
        pub fn load(path: &Path) -> Guest {
            let engine = Engine::default();
            let component = Component::from_file(&engine, path).expect("the component compiles");
            let mut linker = Linker::<State>::new(&engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
            Pass::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state).unwrap();
            let state = State { wasi: WasiCtxBuilder::new().build(), table: ResourceTable::new() };
            let mut store = Store::new(&engine, state);
            let pass = Pass::instantiate(&mut store, &component, &linker).expect("the component instantiates");
            let info = pass.tfwasm_optimizer_optimizer().call_describe(&mut store).unwrap();
            assert_eq!(info.name, "fuse-elementwise");
            Guest { store, pass }
        }

        pub fn optimize(&mut self, graph: &[u8], context: &Context) {
            let context = GraphContext {
                device_type: context.device_type.clone(),
                preserve: context.preserve.clone(),
                fetch: context.fetch.clone(),
                kernels: context
                    .kernels
                    .iter()
                    .map(|k| Kernel {
                        op: k.op.clone(),
                        types: k
                            .types
                            .iter()
                            .map(|(attr, dtypes)| TypeConstraint { attr: attr.clone(), dtypes: dtypes.clone() })
                            .collect(),
                    })
                    .collect(),
                options: context.options.clone(),
            };
            let answer = self.pass.tfwasm_optimizer_optimizer().call_optimize(&mut self.store, graph, &context);
            std::hint::black_box(answer.expect("no trap").expect("an answer"));
        }
    }
}
