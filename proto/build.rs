//! Generates the prost messages of `graph.proto`, `xplane.proto` and
//! `hlo.proto` with protox: no `protoc` binary is needed, on any OS, for the
//! host or for a wasm guest.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The schemas, relative to this crate.
const SCHEMAS: [&str; 3] = ["graph.proto", "xplane.proto", "hlo.proto"];

fn main() -> Result<()> {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    for schema in SCHEMAS {
        println!("cargo:rerun-if-changed={}", dir.join(schema).display());
    }
    let files = protox::compile(SCHEMAS, [&dir]).context("compiling proto/*.proto")?;
    // The schemas themselves, for tools that read and write the text format.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("graph.fds"), prost::Message::encode_to_vec(&files)).context("writing graph.fds")?;
    prost_build::Config::new()
        // Deterministic encoding: map entries in key order, whatever order
        // they were decoded in, so equal graphs encode to equal bytes.
        .btree_map(["."])
        .compile_fds(files)
        .context("generating the prost messages of proto/*.proto")?;
    Ok(())
}
