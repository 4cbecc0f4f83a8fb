//! Shared helpers: building the guests once and making devices from policies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use tfwasm::device::{Device, Platform};
use tfwasm::policy::Policy;
use tfwasm::sandbox::GuestProgram;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Builds the workspace's guests (once per test run) and returns the path
/// of `file` in the guest output directory.
pub fn guest(file: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(workspace())
            .args(["build", "--quiet", "--target", "wasm32-wasip2", "--profile", "guest"])
            .args(["-p", "tfwasm-reference-device", "-p", "tfwasm-hostile-device"])
            .status()
            .expect("run cargo to build the guests");
        assert!(status.success(), "building the guests failed");
    });
    let path = workspace().join("target/wasm32-wasip2/guest").join(file);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

pub fn reference_guest() -> PathBuf {
    guest("tfwasm_reference_device.wasm")
}

pub fn hostile_guest() -> PathBuf {
    guest("tfwasm_hostile_device.wasm")
}

/// A policy for `path` with a small device region, plus `[guest.config]` options.
pub fn policy(name: &str, path: PathBuf, memory: u64, options: &[(&str, &str)]) -> Policy {
    let mut policy = Policy::for_guest(name, path);
    policy.device.memory_bytes = memory;
    for (key, value) in options {
        policy.guest.config.insert((*key).into(), toml::Value::String((*value).into()));
    }
    policy
}

pub fn device(policy: &Policy) -> Arc<Device> {
    let program = GuestProgram::load(policy).expect("guest loads");
    Device::new(&program, "WASM", 0).expect("device starts")
}

pub fn reference_device(memory: u64) -> Arc<Device> {
    device(&policy("reference-device", reference_guest(), memory, &[]))
}

/// A device running the hostile guest in `mode`, misbehaving after `after` good allocations.
pub fn hostile_device(mode: &str, after: u32) -> Arc<Device> {
    let after = after.to_string();
    device(&policy("hostile-device", hostile_guest(), 16 << 20, &[("mode", mode), ("after", &after)]))
}

pub fn start_error(policy: &Policy) -> tfwasm::Error {
    Platform::start(policy, "WASM").expect_err("the platform must refuse this guest")
}
