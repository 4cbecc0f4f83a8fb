//! The graph optimizer TensorFlow runs on every graph holding a node of our
//! device type (`abi/graph.rs` registers it through `TF_InitGraph`).
//!
//! One call runs three stages on the serialized GraphDef:
//!
//! 1. [`crate::graph::legalize_before_passes`]: native rewrites the device
//!    needs merely to run (XLA calls, lowered loops, sparse updates);
//! 2. the policy's pass pipeline: wasm guests of world `pass`
//!    (`wit/optimizer`), run and checked by `tfwasm_runtime::passes`; a pass
//!    that fails costs only its own rewrite;
//! 3. [`crate::graph::legalize_after_passes`]: loop carry and host-memory
//!    edges, which must see the graph the passes made.
//!
//! The pipeline is loaded once, on first use (a graph or the pass list),
//! from the `[[pass]]` entries of the policy; `TFWASM_PASSES=0` leaves it
//! empty. Passes marked `watch = true` are reloaded by a thread that polls
//! their files ([`WATCH_INTERVAL`]); [`swap`] and [`set_enabled`] serve the
//! Python package's `tfwasm.passes`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::error::Error;
use crate::passes::catalog::KernelTable;
use crate::passes::validate::OpCatalog;
use crate::passes::{PassStatus, Pipeline, RunContext};

/// How often watched pass files are checked for a change.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// What TensorFlow said about the graph besides its bytes.
pub struct Item<'a> {
    /// The nodes TensorFlow needs kept (feeds, fetches, ...), if it said.
    pub preserve: Option<&'a HashSet<Vec<u8>>>,
    /// The nodes whose outputs it fetches.
    pub fetch: &'a [String],
    /// Whether our scatter ops are registered (sparse-update rewrite).
    pub scatter: bool,
    /// How many devices of the type the process has.
    pub device_count: usize,
}

/// Runs the three stages on `graph` for nodes placed on `device_type`.
pub fn optimize(
    graph: &[u8],
    device_type: &str,
    item: &Item<'_>,
    kernels: &KernelTable,
    catalog: &dyn OpCatalog,
) -> Result<Vec<u8>, Error> {
    let keeps = |name: &[u8]| item.preserve.is_some_and(|set| set.contains(name));
    let preserve = item.preserve.map(|_| &keeps as crate::graph::Preserve<'_>);
    let legal = crate::graph::legalize_before_passes(graph, device_type, item.scatter)?;
    // The passes need TensorFlow's list: without it any node may be a fetch,
    // and no rewrite could be checked against what TensorFlow keeps.
    let passed = match (pipeline(), item.preserve) {
        (Some(pipeline), Some(preserve)) => {
            let preserve: Vec<String> =
                preserve.iter().map(|name| String::from_utf8_lossy(name).into_owned()).collect();
            let context = RunContext {
                device_type,
                preserve: &preserve,
                fetch: item.fetch,
                kernels,
                catalog,
                device_count: item.device_count,
            };
            let outcome = pipeline.run(&legal, &context)?;
            if tracing::enabled!(tracing::Level::DEBUG) {
                for rewrite in &outcome.rewrites {
                    tracing::debug!(
                        "tfwasm: {} rewrote `{}` on {device_type}: {}",
                        rewrite.pass,
                        rewrite.node,
                        rewrite.reason
                    );
                }
            }
            outcome.graph.unwrap_or(legal)
        }
        _ => legal,
    };
    let host_edges = crate::config::host_edges_enabled();
    let output = crate::graph::legalize_after_passes(passed, device_type, preserve, host_edges)?;
    // TensorFlow takes an OK status with an empty buffer for an empty graph.
    if output.is_empty() && !graph.is_empty() {
        return Err(Error::Internal("the graph optimizer produced an empty graph; TensorFlow keeps its own".into()));
    }
    Ok(output)
}

/// The process's pass pipeline, loaded on first use; `None` when the
/// policy lists no pass, it cannot be read, or `TFWASM_PASSES=0`.
pub fn pipeline() -> Option<&'static Pipeline> {
    static PIPELINE: OnceLock<Option<Pipeline>> = OnceLock::new();
    PIPELINE
        .get_or_init(|| {
            if !crate::config::passes_enabled() {
                tracing::info!("tfwasm: TFWASM_PASSES=0: no optimizer pass runs");
                return None;
            }
            let policy = match crate::config::policy() {
                Ok(policy) => policy,
                Err(error) => {
                    tracing::warn!("tfwasm: {error}; no optimizer pass runs");
                    return None;
                }
            };
            if policy.passes.is_empty() {
                return None;
            }
            let started = Instant::now();
            let pipeline = Pipeline::load(&policy.passes, cache_dir().as_deref());
            tracing::info!(
                "tfwasm: optimizer pipeline of {} passes loaded in {:.1} ms",
                pipeline.status().len(),
                started.elapsed().as_secs_f64() * 1e3
            );
            let watched: Vec<(String, PathBuf)> = policy
                .passes
                .iter()
                .filter(|pass| pass.watch)
                .map(|pass| (pass.name.clone(), pass.path.clone()))
                .collect();
            if !watched.is_empty() {
                start_watching(watched);
            }
            Some(pipeline)
        })
        .as_ref()
}

fn cache_dir() -> Option<PathBuf> {
    crate::sandbox::cache::default_dir()
}

/// The pass list (empty without a pipeline).
pub fn status() -> Vec<PassStatus> {
    pipeline().map(Pipeline::status).unwrap_or_default()
}

/// Installs the pass file at `path` in slot `name` (see [`Pipeline::swap`]).
pub fn swap(name: &str, path: &Path) -> Result<(), Error> {
    let pipeline = pipeline().ok_or_else(no_pipeline)?;
    pipeline.swap(name, path, cache_dir().as_deref()).map(drop)
}

/// Turns the pass in slot `name` on or off.
pub fn set_enabled(name: &str, enabled: bool) -> Result<(), Error> {
    pipeline().ok_or_else(no_pipeline)?.set_enabled(name, enabled)
}

fn no_pipeline() -> Error {
    let why = match crate::config::passes_enabled() {
        true => "the policy lists no [[pass]]",
        false => "TFWASM_PASSES=0",
    };
    Error::InvalidArgument(format!("tfwasm runs no optimizer passes ({why})"))
}

/// What identifies one version of a file cheaply: its modification time
/// and length.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    std::fs::metadata(path).ok().and_then(|meta| Some((meta.modified().ok()?, meta.len())))
}

/// Polls each watched pass file and swaps it in when it changes. A file
/// that fails to load (half written, broken) is reported once per version;
/// the old program keeps running.
fn start_watching(watched: Vec<(String, PathBuf)>) {
    let spawned = std::thread::Builder::new().name("tfwasm-pass-watch".into()).spawn(move || {
        let mut seen: Vec<Option<(SystemTime, u64)>> = watched.iter().map(|(_, path)| stamp(path)).collect();
        loop {
            std::thread::sleep(WATCH_INTERVAL);
            let Some(pipeline) = pipeline() else { return };
            for ((name, path), seen) in watched.iter().zip(seen.iter_mut()) {
                let now = stamp(path);
                if now.is_none() || now == *seen {
                    continue;
                }
                *seen = now;
                // A panic here would end the watching, never the process. The
                // pipeline stays consistent: a swap stores a loaded program last.
                let swapped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pipeline.swap(name, path, cache_dir().as_deref())
                }));
                match swapped {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        tracing::error!("tfwasm: pass {name:?} changed on disk but is not swapped in: {error}")
                    }
                    Err(_) => tracing::error!("tfwasm: pass {name:?}: internal error while swapping"),
                }
            }
        }
    });
    if let Err(error) = spawned {
        tracing::error!("tfwasm: cannot watch pass files: {error}");
    }
}
