//! `tfwasm precompile`: compiles guests into the compile cache ahead of time,
//! so the first `import tensorflow` (or a CI job, or a container build) does
//! not pay for Cranelift. The plugin and the command share the runtime's
//! engine and cache key (the guest's SHA-256 and the engine's compatibility
//! hash), so an entry written here is the one the plugin finds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use tfwasm_runtime::sandbox::{cache, engine};

#[derive(Debug, Serialize)]
pub struct Precompiled {
    pub guest: String,
    pub sha256: String,
    /// The cache entry that now holds the compiled guest.
    pub entry: String,
    /// Whether the entry was already there.
    pub cached: bool,
    pub milliseconds: f64,
}

/// Compiles each guest into `dir` (the plugin's cache directory unless
/// given); returns the directory used and what happened to each guest.
pub fn run(guests: &[PathBuf], dir: Option<PathBuf>) -> Result<(PathBuf, Vec<Precompiled>)> {
    let dir = match dir.or_else(cache::default_dir) {
        Some(dir) => dir,
        None => bail!("the compile cache is off (TFWASM_CACHE_DIR=off, or no home directory): nothing to fill"),
    };
    let engine = engine().map_err(|e| anyhow!("{e}"))?;
    let results = guests
        .iter()
        .map(|guest| {
            let bytes = std::fs::read(guest).with_context(|| format!("reading {}", guest.display()))?;
            let entry = cache::entry(&dir, engine, &bytes);
            let cached = entry.is_file();
            let started = Instant::now();
            let (_, from_cache) = cache::compile(engine, &bytes, Some(&dir))
                .map_err(|e| anyhow!("{} is not a valid wasm component: {e:#}", guest.display()))?;
            if !entry.is_file() {
                bail!("{} compiled, but the cache entry {} could not be written", guest.display(), entry.display());
            }
            Ok(Precompiled {
                guest: guest.display().to_string(),
                sha256: cache::sha256_hex(&bytes),
                entry: entry.display().to_string(),
                cached: cached && from_cache,
                milliseconds: started.elapsed().as_secs_f64() * 1e3,
            })
        })
        .collect::<Result<_>>()?;
    Ok((dir, results))
}

pub fn print(dir: &Path, results: &[Precompiled]) {
    for r in results {
        let how = if r.cached { "already cached" } else { "compiled" };
        println!("{}: {how} in {:.1} ms\n  {}", r.guest, r.milliseconds, r.entry);
    }
    println!("cache: {}", dir.display());
}
