//! The graph pass TensorFlow runs on every graph that holds a node of our
//! device type (registered through `TF_InitGraph`, see `abi/graph.rs`).
//!
//! The pass works on the serialized GraphDef TensorFlow hands over and
//! returns a serialized GraphDef. These are the host's native rewrites,
//! its *legalization*: what the device needs merely to run, made before
//! ([`legalize_before_passes`]) and after ([`legalize_after_passes`]) the
//! policy's wasm passes (`crate::optimizer`). [`fuse`] and the update
//! rewrite of [`updates`] are no longer run by the plugin: the reference
//! pass guest (`guest/fuse-pass`) makes them, and its tests hold it to
//! these native versions node for node. The rewrites: [`xla`], calls
//! of `jit_compile=True` functions placed on our device run without XLA,
//! which has no backend for a PluggableDevice; [`lower`], the loops and
//! branches such functions keep functional for XLA are lowered, so their
//! ops can fall back to the CPU one by one; [`updates`], sparse
//! (scatter) updates of a variable on our device become assignments of an
//! updated copy, which TensorFlow's own scatter kernels (CPU only) cannot
//! serve, and float32 variable updates become assignments of a sum, which
//! [`fuse`] then takes into the tree of elementwise ops computing the
//! update, as it makes every such tree on our device one node;
//! [`variant_loops`], a `TensorList` summed on the CPU in a loop is carried
//! around the loop there; and [`host_edges`], tensors crossing between the
//! CPU device and ours do so in host memory. Input is untrusted: anything
//! that is not valid wire format is a [`GraphError`], never a panic, and
//! TensorFlow then keeps its original graph.
//!
//! - [`wire`]: a strict protobuf wire-format reader that yields byte ranges.
//! - [`schema`]: the field numbers of the messages the passes touch.
//! - [`xla`]: the `_XlaMustCompile` rewrite.
//! - [`lower`]: `_lower_using_switch_merge` on functional control flow.
//! - [`updates`]: `AssignAdd`/`AssignSubVariableOp` as assignments.
//! - [`fuse`]: the elementwise fusion.
//! - [`variant_loops`]: loop variables of a TensorList summed on the CPU
//!   stay there.
//! - [`host_edges`]: the host-memory marks on cross-device edges.

pub mod fuse;
pub mod host_edges;
pub mod lower;
pub mod schema;
pub mod updates;
pub mod variant_loops;
pub mod wire;
pub mod xla;

#[cfg(test)]
mod fuzz;

use std::sync::atomic::{AtomicBool, Ordering};

/// A GraphDef the pass cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("malformed GraphDef at byte {offset}: {what}")]
    Malformed { offset: usize, what: &'static str },
}

impl GraphError {
    /// The same error with its offset made relative to an enclosing message
    /// in which the inner one starts at `base`.
    fn at(self, base: usize) -> Self {
        match self {
            GraphError::Malformed { offset, what } => GraphError::Malformed { offset: offset + base, what },
        }
    }
}

impl From<GraphError> for crate::Error {
    fn from(error: GraphError) -> Self {
        crate::Error::InvalidArgument(format!("graph pass: {error}; TensorFlow keeps the graph unchanged"))
    }
}

/// What a rewrite made of a graph.
#[derive(Debug)]
pub struct Rewritten {
    /// The graph; byte for byte the input when `nodes` is empty.
    pub graph: Vec<u8>,
    /// Names of the nodes the rewrite changed (or replaced).
    pub nodes: Vec<String>,
}

impl Rewritten {
    /// `graph` with `edits` made, or an unchanged copy when `nodes` (the
    /// names of the edited nodes) is empty.
    pub fn from_edits(graph: &[u8], edits: &[schema::NodeEdit], nodes: Vec<String>) -> Result<Self, GraphError> {
        let graph = if nodes.is_empty() { graph.to_vec() } else { schema::edit_nodes(graph, edits)? };
        Ok(Rewritten { graph, nodes })
    }
}

/// Which node names TensorFlow needs kept in a graph (feeds, fetches).
pub type Preserve<'a> = &'a dyn Fn(&[u8]) -> bool;

/// The first half of the host's legalization, before the pass pipeline:
/// calls of `jit_compile=True` functions placed on `device_type` run
/// without XLA, their loops and branches are lowered, and (with `scatter`,
/// when our scatter ops are registered) sparse updates of a variable on the
/// device become assignments of a scattered copy. The first time the XLA
/// rewrite makes a change the user is told, once per process.
pub fn legalize_before_passes(graph: &[u8], device_type: &str, scatter: bool) -> Result<Vec<u8>, GraphError> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let cleared = xla::clear_must_compile(graph, device_type)?;
    if !cleared.nodes.is_empty() && !WARNED.swap(true, Ordering::Relaxed) {
        const SHOWN: usize = 3;
        let mut names = cleared.nodes.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if cleared.nodes.len() > SHOWN {
            names.push_str(", ...");
        }
        tracing::warn!(
            "tfwasm: XLA has no backend for the {device_type} device, so {} jit-compiled function call(s) placed \
             on it ({names}) run as ordinary TensorFlow function calls, without XLA. Calls placed on other devices \
             still compile with XLA. (Keras turns XLA on by default, jit_compile=\"auto\"; pass jit_compile=False \
             to silence this.) Shown once.",
            cleared.nodes.len()
        );
    }
    // Not tied to the XLA rewrite's finds: the call it cleared is one
    // graph, the loops inside the called function another.
    let lowered = lower::lower_control_flow(&cleared.graph, device_type)?;
    if !lowered.nodes.is_empty() {
        tracing::debug!(
            "tfwasm: {} functional loops and branches on {device_type} are lowered (first: {})",
            lowered.nodes.len(),
            lowered.nodes[0]
        );
    }
    let mut graph = lowered.graph;
    // Without it a sparse update of a variable on our device has no kernel
    // there that works (see `updates::scatter_updates`).
    if scatter {
        let scattered = updates::scatter_updates(&graph, device_type)?;
        if !scattered.nodes.is_empty() {
            tracing::debug!(
                "tfwasm: {} sparse variable updates on {device_type} become assignments of a scattered copy (first: {})",
                scattered.nodes.len(),
                scattered.nodes[0]
            );
            graph = scattered.graph;
        }
    }
    Ok(graph)
}

/// The second half of the host's legalization, after the pass pipeline:
/// what the first half turned off stays off (the passes' checks refuse an
/// answer that turns XLA back on on the device; this holds whatever a
/// check misses); with TensorFlow's list of nodes to keep, loop variables of a
/// `TensorList` summed on the CPU are carried there; with `host_edges`,
/// tensors crossing between the CPU device and ours do so in host memory
/// (inputs only when `preserve` is unknown: any output may be a fetch).
pub fn legalize_after_passes(
    graph: Vec<u8>,
    device_type: &str,
    preserve: Option<Preserve<'_>>,
    host_edges: bool,
) -> Result<Vec<u8>, GraphError> {
    let mut graph = graph;
    let cleared = xla::clear_must_compile(&graph, device_type)?;
    if !cleared.nodes.is_empty() {
        tracing::warn!(
            "tfwasm: after the passes, {} call(s) on {device_type} asked for XLA again (first: {}): turned off",
            cleared.nodes.len(),
            cleared.nodes[0]
        );
        graph = cleared.graph;
    }
    if let Some(preserve) = preserve {
        let moved = variant_loops::carry_on_cpu(&graph, device_type, preserve)?;
        if !moved.nodes.is_empty() {
            tracing::debug!(
                "tfwasm: {} loop nodes carrying a TensorList summed on the CPU move there (first: {})",
                moved.nodes.len(),
                moved.nodes[0]
            );
            graph = moved.graph;
        }
    }
    if host_edges {
        let preserve = preserve.unwrap_or(&|_| true);
        let edges = host_edges::mark_host_edges(&graph, device_type, preserve, &|node| {
            crate::kernels::implements(node.op, &|attr| {
                node.type_attr(attr.as_bytes()).and_then(|t| i64::try_from(t).ok())
            })
        })?;
        if edges.inputs + edges.outputs > 0 {
            tracing::debug!(
                "tfwasm: {} inputs and {} outputs on {device_type} cross from and to the CPU in host memory",
                edges.inputs,
                edges.outputs
            );
        }
        if edges.moved > 0 {
            tracing::debug!("tfwasm: {} variant return values made on the CPU are returned from there", edges.moved);
        }
        graph = edges.graph;
    }
    Ok(graph)
}
