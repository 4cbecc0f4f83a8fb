//! `tfwasm info`: what a guest component is, read from the binary.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use wasmtime::component::Component;

#[derive(Debug, Serialize)]
pub struct Described {
    pub path: String,
    pub bytes: u64,
    /// The digest to pin in a policy.
    pub sha256: String,
    /// The WIT packages (with versions) of what it exports: the world it implements.
    pub exports_packages: Vec<String>,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// What the guest's imports need of a policy: the `[capabilities]`
    /// lines that grant them, or why no policy can.
    pub policy: Vec<String>,
}

/// The policy lines `imports` need beyond the default policy, and the
/// imports no policy grants.
pub fn policy_lines(imports: &[String]) -> Vec<String> {
    use tfwasm_runtime::policy::Capabilities;
    use tfwasm_runtime::sandbox::refused_import;
    let default = Capabilities::default();
    let random = Capabilities { random: true, ..Capabilities::default() };
    let mut lines = BTreeSet::new();
    for import in imports {
        match refused_import(import, &default) {
            None => {}
            Some(_) if refused_import(import, &random).is_none() => {
                lines.insert("[capabilities] random = true".to_owned());
            }
            Some(why) => {
                lines.insert(format!("refused: {import} ({why})"));
            }
        }
    }
    lines.into_iter().collect()
}

pub fn describe(path: &Path) -> Result<Described> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let engine = tfwasm_runtime::sandbox::engine().map_err(|e| anyhow::anyhow!("{e}"))?;
    let component =
        Component::new(engine, &bytes).map_err(|e| anyhow::anyhow!("{} is not a component: {e}", path.display()))?;
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(engine).map(|(name, _)| name.to_owned()).collect();
    let exports: Vec<String> = ty.exports(engine).map(|(name, _)| name.to_owned()).collect();
    // `tfwasm:device/memory@0.1.0` → `tfwasm:device@0.1.0`.
    let packages: BTreeSet<String> = exports
        .iter()
        .filter_map(|name| {
            let (package, rest) = name.split_once('/')?;
            let version = rest.split_once('@').map(|(_, v)| format!("@{v}")).unwrap_or_default();
            Some(format!("{package}{version}"))
        })
        .collect();
    Ok(Described {
        path: path.display().to_string(),
        bytes: bytes.len() as u64,
        sha256: tfwasm_runtime::sandbox::cache::sha256_hex(&bytes),
        exports_packages: packages.into_iter().collect(),
        policy: policy_lines(&imports),
        imports,
        exports,
    })
}

pub fn print(d: &Described) {
    println!("{}", d.path);
    println!("  size     {} bytes", d.bytes);
    println!("  sha256   {}", d.sha256);
    println!("  world    {}", d.exports_packages.join(", "));
    println!("  exports  {}", d.exports.join(" "));
    println!("  imports  {}", d.imports.join(" "));
    if d.policy.is_empty() {
        println!("  policy   the default policy grants every import");
    }
    for line in &d.policy {
        println!("  policy   {line}");
    }
}
