//! A cache of compiled guests, so `import tensorflow` does not pay for
//! Cranelift every time (~0.4 s for the reference guest on two cores; a
//! cached load is a file map, well under a millisecond).
//!
//! Entries are keyed by the SHA-256 of the guest's bytes and wasmtime's
//! engine-compatibility hash, so a changed guest, a changed engine
//! configuration or another wasmtime version simply misses. They are written
//! to a temporary file and renamed into place, so a reader never sees half an
//! entry. The directory is `$TFWASM_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/tfwasm`, else `~/.cache/tfwasm`, created private to the
//! user; `TFWASM_CACHE_DIR=off` disables the cache.
//!
//! Trust: a cache entry is native code. Whoever can write the cache
//! directory can run code in the process — the same people who can edit the
//! user's shell profile, which is why the directory is the user's own and
//! mode 0700.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The cache directory from the environment, or `None` when disabled or
/// when no home is known.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os("TFWASM_CACHE_DIR") {
        Some(dir) if dir == "off" || dir.is_empty() => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            // Windows: the user's local application data.
            .or_else(|| std::env::var_os("LOCALAPPDATA").map(PathBuf::from))
            .map(|base| base.join("tfwasm")),
    }
}

/// The SHA-256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The cache entry for `bytes` compiled by `engine`.
pub fn entry(dir: &Path, engine: &Engine, bytes: &[u8]) -> PathBuf {
    let mut compat = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    dir.join(format!("{}-{:016x}.cwasm", sha256_hex(bytes), compat.finish()))
}

/// Compiles `bytes`, or loads the compiled form from `dir`. Returns the
/// component and whether it came from the cache. Cache trouble is never an
/// error: the guest is compiled in memory instead.
pub fn compile(engine: &Engine, bytes: &[u8], dir: Option<&Path>) -> wasmtime::Result<(Component, bool)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, bytes)?, false));
    };
    let path = entry(dir, engine, bytes);
    if path.is_file() {
        // SAFETY: the entry was produced by `precompile_component` of an
        // engine with the same compatibility hash (it is in the name) and
        // renamed into place whole, in a directory private to this user; see
        // the module's note on trust.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => return Ok((component, true)),
            Err(e) => tracing::debug!("tfwasm: ignoring unusable cache entry {}: {e:#}", path.display()),
        }
    }
    let compiled = engine.precompile_component(bytes)?;
    if let Err(e) = store(dir, &path, &compiled) {
        tracing::debug!("tfwasm: cannot write the guest cache {}: {e}", dir.display());
    }
    // SAFETY: `compiled` was produced just now by `precompile_component` of this engine.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    Ok((component, false))
}

fn store(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    // The user's own: nobody else may plant compiled code here. (On Windows
    // a user's local application data already is.)
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        std::process::id(),
        path.file_name().and_then(|f| f.to_str()).unwrap_or("entry")
    ));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(compiled)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
