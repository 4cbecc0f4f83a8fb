//! Generates the prost messages of `graph.proto` with protox: no `protoc`
//! binary is needed, on any OS, for the host or for a wasm guest.

use std::path::PathBuf;

use anyhow::{Context, Result};

fn main() -> Result<()> {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    println!("cargo:rerun-if-changed={}", dir.join("graph.proto").display());
    let files = protox::compile(["graph.proto"], [&dir]).context("compiling proto/graph.proto")?;
    // The schema itself, for tools that read and write the text format.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("graph.fds"), prost::Message::encode_to_vec(&files)).context("writing graph.fds")?;
    prost_build::Config::new()
        // Deterministic encoding: map entries in key order, whatever order
        // they were decoded in, so equal graphs encode to equal bytes.
        .btree_map(["."])
        .compile_fds(files)
        .context("generating the prost messages of proto/graph.proto")?;
    Ok(())
}
