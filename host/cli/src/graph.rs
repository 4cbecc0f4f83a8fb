//! `tfwasm graph roundtrip`: a GraphDef decoded and encoded again through
//! tfwasm's schema (`proto/graph.proto`), exactly what a pass guest that
//! decodes with `tfwasm-proto` sees and answers. The output's map entries
//! are in key order; anything else that differs from the input is something
//! the schema does not know (a field a newer TensorFlow added).

use std::path::Path;

use anyhow::{Context, Result};
use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;

/// What a round trip kept, for the summary line.
pub struct RoundTrip {
    pub nodes: usize,
    pub functions: usize,
    pub bytes_in: usize,
    pub bytes_out: usize,
}

pub fn roundtrip(input: &Path, output: &Path) -> Result<RoundTrip> {
    let bytes = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let graph = GraphDef::decode(bytes.as_slice())
        .with_context(|| format!("{} is not a serialized GraphDef", input.display()))?;
    let encoded = graph.encode_to_vec();
    std::fs::write(output, &encoded).with_context(|| format!("writing {}", output.display()))?;
    Ok(RoundTrip {
        nodes: graph.node.len(),
        functions: graph.library.as_ref().map_or(0, |library| library.function.len()),
        bytes_in: bytes.len(),
        bytes_out: encoded.len(),
    })
}
