//! `tfwasm graph roundtrip`: a GraphDef decoded and encoded again through
//! tfwasm's schema (`proto/graph.proto`), exactly what a pass guest that
//! decodes with `tfwasm-proto` sees and answers. The output's map entries
//! are in key order; anything else that differs from the input is something
//! the schema does not know (a field a newer TensorFlow added). A path
//! ending in `.pbtxt` is read or written in text format, so the command
//! also converts between the two.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
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
    let bytes = read_graph(input)?;
    let graph = GraphDef::decode(bytes.as_slice())
        .with_context(|| format!("{} is not a serialized GraphDef", input.display()))?;
    let encoded = graph.encode_to_vec();
    write_graph(output, &encoded)?;
    Ok(RoundTrip {
        nodes: graph.node.len(),
        functions: graph.library.as_ref().map_or(0, |library| library.function.len()),
        bytes_in: bytes.len(),
        bytes_out: encoded.len(),
    })
}

/// Whether `path` names a GraphDef in text format (`.pbtxt`, as
/// `tf.io.write_graph(..., as_text=True)` writes it).
fn is_text(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "pbtxt")
}

/// The GraphDef message of our schema, for the text format.
fn graph_descriptor() -> Result<prost_reflect::MessageDescriptor> {
    let pool = prost_reflect::DescriptorPool::decode(tfwasm_proto::FILE_DESCRIPTOR_SET)
        .context("the built-in GraphDef schema")?;
    pool.get_message_by_name("tfwasm.graph.GraphDef").ok_or_else(|| anyhow!("the schema has no GraphDef"))
}

/// A GraphDef file's wire bytes: `.pbtxt` is parsed as text format.
pub fn read_graph(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !is_text(path) {
        return Ok(bytes);
    }
    let text = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", path.display()))?;
    let message = prost_reflect::DynamicMessage::parse_text_format(graph_descriptor()?, &text)
        .with_context(|| format!("{} is not a GraphDef in text format", path.display()))?;
    Ok(prost_reflect::prost::Message::encode_to_vec(&message))
}

/// Writes GraphDef wire bytes to `path`, as text format for `.pbtxt`.
pub fn write_graph(path: &Path, bytes: &[u8]) -> Result<()> {
    let out = match is_text(path) {
        false => bytes.to_vec(),
        true => {
            let message = prost_reflect::DynamicMessage::decode(graph_descriptor()?, bytes)
                .context("the answer is not a GraphDef")?;
            let mut text =
                message.to_text_format_with_options(&prost_reflect::text_format::FormatOptions::new().pretty(true));
            text.push('\n');
            text.into_bytes()
        }
    };
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}
