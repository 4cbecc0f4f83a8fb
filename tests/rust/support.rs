//! Shared helpers: building the guests once and making devices from policies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

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
            .args(["-p", "tfwasm-reference-profiler", "-p", "tfwasm-hostile-profiler"])
            .status()
            .expect("run cargo to build the guests");
        assert!(status.success(), "building the guests failed");
    });
    let path = workspace().join("target/wasm32-wasip2/guest").join(file);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Builds the pass guest `package` (once per package per test run) and
/// returns its component, `target/wasm32-wasip2/guest/<crate>.wasm`.
pub fn pass_guest(package: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !built.iter().any(|p| p == package) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(workspace())
            .args(["build", "--quiet", "--target", "wasm32-wasip2", "--profile", "guest", "-p", package])
            .status()
            .expect("run cargo to build the pass");
        assert!(status.success(), "building {package} failed");
        built.push(package.to_owned());
    }
    let path = workspace().join("target/wasm32-wasip2/guest").join(format!("{}.wasm", package.replace('-', "_")));
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

/// What the runtime logs at WARN and above while `body` runs on this thread.
pub fn logged(body: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<parking_lot::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, body);
    let bytes = buffer.0.lock().clone();
    String::from_utf8(bytes).unwrap()
}
