//! The sandbox policy: a plain serde manifest (see `policies/device.toml`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::Error;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub guest: GuestSection,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub device: DeviceSection,
    #[serde(default)]
    pub capabilities: Capabilities,
    /// What a profiling session may keep (`[profiler]`).
    #[serde(default)]
    pub profiler: ProfilerSection,
    /// The graph-optimizer passes, in the order they run (`[[pass]]`).
    #[serde(default, rename = "pass")]
    pub passes: Vec<PassSection>,
}

/// One pass of the optimizer pipeline (`[[pass]]`): a guest of the world
/// `pass` (`wit/optimizer`), its limits and its options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PassSection {
    /// Names the pass in the pass list and in messages.
    pub name: String,
    pub path: PathBuf,
    /// `false` loads the pass but leaves it off until it is enabled.
    #[serde(default = "PassSection::default_enabled")]
    pub enabled: bool,
    /// The pass's SHA-256, if the operator pins it.
    #[serde(default)]
    pub sha256: Option<String>,
    /// A report `tfwasm pass verify --report` wrote: the pass loads (and a
    /// swap installs a file) only if the report records that file's digest,
    /// under this entry's config, as verified ([`crate::passes::verified`]).
    #[serde(default)]
    pub verified: Option<PathBuf>,
    /// Reload the pass when its file changes (checked every few hundred ms).
    #[serde(default)]
    pub watch: bool,
    /// Guest memory cap and per-call deadline; a graph is larger work than a
    /// device decision, hence larger defaults.
    #[serde(default = "PassSection::default_limits")]
    pub limits: Limits,
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Options handed to every `optimize` call as `context.options`.
    #[serde(default)]
    pub config: toml::Table,
    /// How many times larger than the graph it was given (in bytes and in
    /// nodes, beyond a small allowance) an answer may be before it is
    /// refused: a pass that inlines or unrolls may grow a graph, one that
    /// appends copies should not reach TensorFlow.
    #[serde(default = "PassSection::default_max_growth")]
    pub max_growth: f64,
}

impl PassSection {
    fn default_enabled() -> bool {
        true
    }
    fn default_max_growth() -> f64 {
        4.0
    }
    fn default_limits() -> Limits {
        Limits::with(256 << 20, 2000)
    }

    /// `[pass.config]` flattened to the key/value strings the pass receives.
    pub fn options(&self) -> Vec<(String, String)> {
        flatten(&self.config)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestSection {
    pub name: String,
    pub path: PathBuf,
    /// Options handed to the guest's `init`.
    #[serde(default)]
    pub config: toml::Table,
    /// The guest's SHA-256 (64 hex digits), if the operator pins it: a file
    /// with another digest is refused (`tfwasm info` prints a guest's).
    #[serde(default)]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    #[serde(default = "Limits::default_memory")]
    pub memory_bytes: u64,
    #[serde(default = "Limits::default_deadline")]
    pub call_deadline_ms: u64,
    /// Lines and bytes the guest may log (through its world's `log` import)
    /// in one call and in one second; past either budget its lines are
    /// dropped, and the host says how many, at most once a second.
    #[serde(default = "Limits::default_log_lines_per_call")]
    pub log_lines_per_call: u32,
    #[serde(default = "Limits::default_log_bytes_per_call")]
    pub log_bytes_per_call: u64,
    #[serde(default = "Limits::default_log_lines_per_second")]
    pub log_lines_per_second: u32,
    #[serde(default = "Limits::default_log_bytes_per_second")]
    pub log_bytes_per_second: u64,
}

impl Limits {
    fn default_memory() -> u64 {
        32 << 20
    }
    fn default_deadline() -> u64 {
        250
    }
    fn default_log_lines_per_call() -> u32 {
        100
    }
    fn default_log_bytes_per_call() -> u64 {
        64 << 10
    }
    fn default_log_lines_per_second() -> u32 {
        200
    }
    fn default_log_bytes_per_second() -> u64 {
        128 << 10
    }

    /// These limits with another memory cap and deadline.
    pub fn with(memory_bytes: u64, call_deadline_ms: u64) -> Limits {
        Limits { memory_bytes, call_deadline_ms, ..Limits::default() }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: Self::default_memory(),
            call_deadline_ms: Self::default_deadline(),
            log_lines_per_call: Self::default_log_lines_per_call(),
            log_bytes_per_call: Self::default_log_bytes_per_call(),
            log_lines_per_second: Self::default_log_lines_per_second(),
            log_bytes_per_second: Self::default_log_bytes_per_second(),
        }
    }
}

/// The profiler: how much a session keeps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfilerSection {
    /// Records (kernel executions, copies, allocations, guest calls, ...) a
    /// session keeps for all devices together; when more arrive the oldest
    /// go, and the trace says how many.
    #[serde(default = "ProfilerSection::default_max_events")]
    pub max_events: u64,
    /// The profiler guest (world `profiler`, `wit/profiler`) that shapes
    /// the trace; without one the trace shows the host's own lines.
    #[serde(default)]
    pub guest: Option<ProfilerGuestSection>,
}

impl ProfilerSection {
    fn default_max_events() -> u64 {
        crate::profiler::DEFAULT_MAX_EVENTS as u64
    }
}

impl Default for ProfilerSection {
    fn default() -> Self {
        ProfilerSection { max_events: Self::default_max_events(), guest: None }
    }
}

/// `[profiler.guest]`: a guest of world `profiler`, its limits and options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfilerGuestSection {
    /// Names the guest in messages and in the trace.
    pub name: String,
    pub path: PathBuf,
    /// The guest's SHA-256, if the operator pins it.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Memory cap and deadline of one `shape` call: a whole session's
    /// records cross into the guest, hence larger defaults.
    #[serde(default = "ProfilerGuestSection::default_limits")]
    pub limits: Limits,
    /// Options handed to every `shape` call as `session.options`.
    #[serde(default)]
    pub config: toml::Table,
}

impl ProfilerGuestSection {
    fn default_limits() -> Limits {
        Limits::with(512 << 20, 5000)
    }

    /// `[profiler.guest.config]` flattened to the key/value strings the guest receives.
    pub fn options(&self) -> Vec<(String, String)> {
        flatten(&self.config)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DeviceSection {
    #[serde(default = "DeviceSection::default_count")]
    pub count: u32,
    #[serde(default = "DeviceSection::default_memory")]
    pub memory_bytes: u64,
    /// Bytes of freed blocks the host may keep and hand out again for an
    /// allocation of exactly the same size, without asking the guest (it
    /// placed the block and still counts it as live). 0 turns this off:
    /// then every allocation and free is a guest call. Kept blocks go back
    /// to the guest before it is asked for memory it reports it lacks, and
    /// before a usage report.
    #[serde(default)]
    pub recycle_bytes: u64,
    /// Back the device region with transparent huge pages where the kernel
    /// offers them. A touched 2 MiB page is resident as a whole, so the
    /// region's resident size grows in 2 MiB steps; `false` keeps 4 KiB pages.
    #[serde(default = "DeviceSection::default_huge_pages")]
    pub huge_pages: bool,
}

impl DeviceSection {
    fn default_count() -> u32 {
        1
    }
    fn default_memory() -> u64 {
        4 << 30
    }
    fn default_huge_pages() -> bool {
        true
    }
}

impl Default for DeviceSection {
    fn default() -> Self {
        DeviceSection {
            count: Self::default_count(),
            memory_bytes: Self::default_memory(),
            recycle_bytes: 0,
            huge_pages: Self::default_huge_pages(),
        }
    }
}

/// What a guest may reach beyond the host interface. A guest that imports a
/// WASI interface its policy does not grant is refused when it loads (see
/// [`crate::sandbox::refused_import`]); the network is never granted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    #[serde(default)]
    pub stderr: bool,
    /// Directories the guest may read (`wasi:filesystem`).
    #[serde(default)]
    pub preopens: Vec<Preopen>,
    /// Accepted for older policies and ignored: `wasi:clocks` always links,
    /// since the host interface's `now-ns` already gives every guest the
    /// time (see `sandbox::refused_import`).
    #[serde(default)]
    pub clocks: bool,
    /// Secure random bytes (`wasi:random/random`). Insecure randomness (a
    /// Rust `HashMap`'s seed) always links.
    #[serde(default)]
    pub random: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
}

/// Upper bounds that keep a policy from asking the host for the absurd.
const MAX_DEVICES: u32 = 64;
const MIN_DEVICE_MEMORY: u64 = 1 << 20;
const MAX_DEVICE_MEMORY: u64 = 1 << 40;

impl Policy {
    /// Reads and validates a policy; relative paths become relative to the file.
    pub fn load(path: &Path) -> Result<Policy, Error> {
        let err = |reason: String| Error::Policy { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let mut policy: Policy = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        policy.resolve_paths(base);
        policy.validate().map_err(err)?;
        Ok(policy)
    }

    pub fn resolve_paths(&mut self, base: &Path) {
        if self.guest.path.is_relative() {
            self.guest.path = base.join(&self.guest.path);
        }
        for preopen in &mut self.capabilities.preopens {
            if preopen.host.is_relative() {
                preopen.host = base.join(&preopen.host);
            }
        }
        if let Some(guest) = &mut self.profiler.guest {
            if guest.path.is_relative() {
                guest.path = base.join(&guest.path);
            }
        }
        for pass in &mut self.passes {
            if pass.path.is_relative() {
                pass.path = base.join(&pass.path);
            }
            if let Some(report) = pass.verified.as_mut().filter(|r| r.is_relative()) {
                *report = base.join(&*report);
            }
            for preopen in &mut pass.capabilities.preopens {
                if preopen.host.is_relative() {
                    preopen.host = base.join(&preopen.host);
                }
            }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.guest.name.trim().is_empty() {
            return Err("guest.name must not be empty".into());
        }
        check_pin("guest.sha256", self.guest.sha256.as_deref())?;
        let mut names = std::collections::HashSet::new();
        for (i, pass) in self.passes.iter().enumerate() {
            let at = format!("pass[{i}] ({})", pass.name);
            if pass.name.trim().is_empty() {
                return Err(format!("pass[{i}].name must not be empty"));
            }
            if !names.insert(pass.name.as_str()) {
                return Err(format!("{at}: two passes are named {:?}", pass.name));
            }
            check_pin(&format!("{at}.sha256"), pass.sha256.as_deref())?;
            if pass.limits.call_deadline_ms == 0 {
                return Err(format!("{at}.limits.call-deadline-ms must be at least 1"));
            }
            if pass.limits.memory_bytes < (1 << 16) {
                return Err(format!("{at}.limits.memory-bytes must be at least one wasm page (65536)"));
            }
        }
        if let Some(guest) = &self.profiler.guest {
            if guest.name.trim().is_empty() {
                return Err("profiler.guest.name must not be empty".into());
            }
            check_pin("profiler.guest.sha256", guest.sha256.as_deref())?;
            if guest.limits.call_deadline_ms == 0 {
                return Err("profiler.guest.limits.call-deadline-ms must be at least 1".into());
            }
            if guest.limits.memory_bytes < (1 << 16) {
                return Err("profiler.guest.limits.memory-bytes must be at least one wasm page (65536)".into());
            }
        }
        if self.profiler.max_events == 0 {
            return Err("profiler.max-events must be at least 1".into());
        }
        if self.device.count > MAX_DEVICES {
            return Err(format!("device.count = {} exceeds {MAX_DEVICES}", self.device.count));
        }
        if !(MIN_DEVICE_MEMORY..=MAX_DEVICE_MEMORY).contains(&self.device.memory_bytes) {
            return Err(format!(
                "device.memory-bytes = {} must be between {MIN_DEVICE_MEMORY} and {MAX_DEVICE_MEMORY}",
                self.device.memory_bytes
            ));
        }
        if self.device.recycle_bytes > self.device.memory_bytes {
            return Err(format!(
                "device.recycle-bytes = {} exceeds device.memory-bytes = {}",
                self.device.recycle_bytes, self.device.memory_bytes
            ));
        }
        if self.limits.call_deadline_ms == 0 {
            return Err("limits.call-deadline-ms must be at least 1".into());
        }
        if self.limits.memory_bytes < (1 << 16) {
            return Err("limits.memory-bytes must be at least one wasm page (65536)".into());
        }
        Ok(())
    }

    /// `[guest.config]` flattened to the key/value strings the guest receives.
    pub fn guest_options(&self) -> Vec<(String, String)> {
        flatten(&self.guest.config)
    }

    /// The policy used when tests or tools build one in code.
    pub fn for_guest(name: &str, path: impl Into<PathBuf>) -> Policy {
        Policy {
            guest: GuestSection { name: name.into(), path: path.into(), config: Default::default(), sha256: None },
            limits: Limits::default(),
            device: DeviceSection::default(),
            capabilities: Capabilities::default(),
            profiler: ProfilerSection::default(),
            passes: Vec::new(),
        }
    }
}

/// A config table as key/value strings (strings as they are, other values as TOML).
fn flatten(table: &toml::Table) -> Vec<(String, String)> {
    table
        .iter()
        .map(|(k, v)| {
            let value = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), value)
        })
        .collect()
}

/// A pinned digest, if any, is 64 hex digits.
fn check_pin(key: &str, pin: Option<&str>) -> Result<(), String> {
    match pin {
        Some(pin) if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Err(format!("{key} = {pin:?} is not a SHA-256 digest (64 hex digits)"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_policy_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/device.toml");
        let policy = Policy::load(&path).unwrap();
        assert_eq!(policy.guest.name, "reference-device");
        assert_eq!(policy.device.count, 1);
        assert!(policy.device.recycle_bytes > 0, "the shipped policy recycles freed blocks");
        assert!(policy.device.huge_pages, "the shipped policy asks for huge pages");
        assert!(policy.guest.path.ends_with("reference_device.wasm"));
        assert!(policy.capabilities.preopens.is_empty());
        assert!(!policy.capabilities.stderr);
        assert!(!policy.capabilities.clocks && !policy.capabilities.random);
    }

    #[test]
    fn every_shipped_policy_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Policy::load(&path).unwrap_or_else(|e| panic!("{e}"));
                checked += 1;
            }
        }
        assert!(checked >= 2, "expected the device and hostile-device policies");
    }

    #[test]
    fn rejects_unknown_keys_and_bad_limits() {
        let bad = "[guest]\nname='x'\npath='x.wasm'\n[device]\ncount=1\nmemory-bytes=10\n";
        let mut p: Policy = toml::from_str(bad).unwrap();
        p.resolve_paths(Path::new("/"));
        assert!(p.validate().unwrap_err().contains("memory-bytes"));
        assert!(toml::from_str::<Policy>("[guest]\nname='x'\npath='x'\nsurprise=1\n").is_err());
        let greedy = "[guest]\nname='x'\npath='x.wasm'\n[device]\nmemory-bytes=16777216\nrecycle-bytes=16777217\n";
        let p: Policy = toml::from_str(greedy).unwrap();
        assert!(p.validate().unwrap_err().contains("recycle-bytes"));
    }

    #[test]
    fn passes_parse_in_order_with_their_own_limits() {
        let text = "[guest]\nname='x'\npath='x.wasm'\n\
                    [[pass]]\nname='fuse'\npath='fuse.wasm'\n[pass.config]\nlevel=2\n\
                    [[pass]]\nname='other'\npath='/abs/other.wasm'\nenabled=false\nwatch=true\n\
                    [pass.limits]\ncall-deadline-ms=50\n";
        let mut p: Policy = toml::from_str(text).unwrap();
        p.resolve_paths(Path::new("/policies"));
        p.validate().unwrap();
        assert_eq!(p.passes.len(), 2);
        assert_eq!(p.passes[0].path, Path::new("/policies/fuse.wasm"));
        assert_eq!(p.passes[0].options(), vec![("level".to_owned(), "2".to_owned())]);
        assert!(p.passes[0].enabled && !p.passes[0].watch);
        assert_eq!(p.passes[0].limits.call_deadline_ms, 2000, "a pass's default deadline");
        assert!(!p.passes[1].enabled && p.passes[1].watch);
        assert_eq!(p.passes[1].limits.call_deadline_ms, 50);
        let twice = "[guest]\nname='x'\npath='x.wasm'\n[[pass]]\nname='a'\npath='a'\n[[pass]]\nname='a'\npath='b'\n";
        assert!(toml::from_str::<Policy>(twice).unwrap().validate().unwrap_err().contains("two passes"));
        assert!(toml::from_str::<Policy>("[guest]\nname='x'\npath='x'\n[[pass]]\nname='a'\npath='a'\nodd=1\n").is_err());
    }

    #[test]
    fn huge_pages_unless_the_policy_says_otherwise() {
        let unsaid: Policy = toml::from_str("[guest]\nname='x'\npath='x.wasm'\n").unwrap();
        assert!(unsaid.device.huge_pages);
        assert!(DeviceSection::default().huge_pages);
        let off: Policy = toml::from_str("[guest]\nname='x'\npath='x.wasm'\n[device]\nhuge-pages=false\n").unwrap();
        assert!(!off.device.huge_pages);
        assert!(toml::from_str::<Policy>("[guest]\nname='x'\npath='x.wasm'\n[device]\nhuge-pages=2\n").is_err());
    }
}
