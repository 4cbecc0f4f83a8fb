//! Process configuration from the environment, read once.
//!
//! - `TFWASM_DEVICE_TYPE`: the device type TensorFlow shows (default `WASM`).
//! - `TFWASM_POLICY`: the policy file (default: `tfwasm/device.toml` beside the plugin).
//! - `TFWASM_GUEST`: the device guest, overriding the policy's `guest.path`.
//! - `TFWASM_LOG`: log level (`error`, `warn`, `info`, `debug`, `trace`; default `warn`).
//! - `TFWASM_PASSES`: `0` turns the policy's optimizer passes off (default on).
//! - `TFWASM_HOST_EDGES`: `0` keeps cross-device edges in device memory.
//!
//! And the TensorFlow release the plugin serves ([`SUPPORTED_TENSORFLOW`]).

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::error::Error;
use crate::policy::Policy;

pub const DEFAULT_DEVICE_TYPE: &str = "WASM";

/// The TensorFlow releases this plugin serves, by (major, minor): the C ABI
/// it mirrors is that of 2.21, which 2.22 and 2.23 keep (their plugin
/// headers differ only by an appended optional callback), with one change
/// outside the headers that the plugin follows (see `abi::ffi::done`).
/// The wheel's metadata and the README state the same range.
pub const SUPPORTED_TENSORFLOW: std::ops::RangeInclusive<(u32, u32)> = (2, 21)..=(2, 23);

/// A TensorFlow version as `TF_Version()` reports it (`2.21.0`,
/// `2.22.0-dev20260905`, `2.23.0-rc1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorflowVersion {
    pub major: u32,
    pub minor: u32,
    pub text: String,
}

impl TensorflowVersion {
    pub fn parse(text: &str) -> Option<TensorflowVersion> {
        let mut parts = text.trim().split(['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(TensorflowVersion { major, minor, text: text.trim().to_owned() })
    }

    /// Whether the plugin may register anything in this TensorFlow; the
    /// error says why not, for the one log line a user sees.
    pub fn check_supported(&self) -> Result<(), Error> {
        if SUPPORTED_TENSORFLOW.contains(&(self.major, self.minor)) {
            return Ok(());
        }
        let (low, high) = (SUPPORTED_TENSORFLOW.start(), SUPPORTED_TENSORFLOW.end());
        Err(Error::Config(format!(
            "tfwasm {} supports TensorFlow {}.{} to {}.{}; this is TensorFlow {}, whose plugin ABI it has not been \
             tested against. Install a tfwasm release for this TensorFlow, or TensorFlow {}.{}",
            env!("CARGO_PKG_VERSION"),
            low.0,
            low.1,
            high.0,
            high.1,
            self.text,
            low.0,
            low.1
        )))
    }

    /// From 2.22 on, TensorFlow hands an asynchronous kernel a heap copy of
    /// its completion callback and `TF_RunAsyncOpKernelDoneCallback` runs and
    /// deletes it; 2.21 passes its own by-value parameter and only runs it.
    pub fn gives_done_callbacks(&self) -> bool {
        (self.major, self.minor) >= (2, 22)
    }
}

/// The device type string TensorFlow registers, validated against the
/// pattern TensorFlow enforces (`[A-Z][A-Z_]*`, checked by TF with an abort).
pub fn device_type() -> Result<&'static CStr, Error> {
    static TYPE: OnceLock<Result<CString, Error>> = OnceLock::new();
    TYPE.get_or_init(|| {
        let value = std::env::var("TFWASM_DEVICE_TYPE").unwrap_or_else(|_| DEFAULT_DEVICE_TYPE.to_owned());
        validate_device_type(&value)?;
        Ok(CString::new(value).expect("validated: no NUL"))
    })
    .as_ref()
    .map(|c| c.as_c_str())
    .map_err(Clone::clone)
}

pub fn validate_device_type(value: &str) -> Result<(), Error> {
    let mut chars = value.chars();
    let ok = matches!(chars.next(), Some('A'..='Z')) && chars.all(|c| c.is_ascii_uppercase() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "TFWASM_DEVICE_TYPE={value:?} is not a valid device type: it must match [A-Z][A-Z_]* (for example WASM or GPU)"
        )))
    }
}

/// Directory holding the defaults installed beside the plugin library
/// (`<dir of libtfwasm.so>/tfwasm/`).
pub fn install_dir() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address to find the object containing it;
    // `install_dir` itself is an address inside this library.
    let found = unsafe { libc::dladdr(install_dir as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    let lib = PathBuf::from(path.to_string_lossy().into_owned());
    Some(lib.parent()?.join("tfwasm"))
}

/// True if another file named like this library is already mapped into the
/// process: a second copy (e.g. the wheel's and one from
/// `TF_PLUGGABLE_DEVICE_LIBRARY_PATH`). TensorFlow initialises plugins one
/// at a time, so the copy that sees another one mapped is the later one.
pub fn other_copy_loaded() -> bool {
    let Some(ours) = install_dir().and_then(|d| d.parent().map(|p| p.to_path_buf())) else { return false };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let our_dir = ours.canonicalize().unwrap_or(ours);
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(std::path::Path::new)
        .filter(|path| path.file_name().is_some_and(|f| f == LIBRARY_FILE))
        .any(|path| path.parent().map(|p| p.canonicalize().unwrap_or(p.to_path_buf())) != Some(our_dir.clone()))
}

/// The library's file name, as installed by the wheel.
pub const LIBRARY_FILE: &str = "libtfwasm.so";

/// A path from the environment. Set but empty counts as unset, as a shell's
/// `TFWASM_POLICY=$MAYBE_UNSET` means: without this the empty path failed to
/// read and the device quietly stayed away.
fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|value| !value.is_empty()).map(PathBuf::from)
}

/// Where the policy comes from: `TFWASM_POLICY`, else the installed default.
pub fn policy_path() -> Result<PathBuf, Error> {
    if let Some(path) = env_path("TFWASM_POLICY") {
        return Ok(path);
    }
    install_dir()
        .map(|dir| dir.join("device.toml"))
        .ok_or_else(|| Error::Config("cannot locate the plugin's install directory; set TFWASM_POLICY".into()))
}

/// `TFWASM_GUEST`, if set: replaces the policy's guest path.
pub fn guest_override() -> Option<PathBuf> {
    env_path("TFWASM_GUEST")
}

/// The policy the environment names (see [`policy_path`]), with the guest
/// `TFWASM_GUEST` names in place of its own.
pub fn policy() -> Result<Policy, Error> {
    let mut policy = Policy::load(&policy_path()?)?;
    if let Some(guest) = guest_override() {
        policy.guest.path = guest;
    }
    Ok(policy)
}

/// Whether the policy's optimizer passes run (`TFWASM_PASSES`, default
/// on; `0`, `false` or `off` turn the pipeline off).
pub fn passes_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| switch_on("TFWASM_PASSES"))
}

/// Whether the graph pass lets tensors cross between the CPU device and
/// ours in host memory (`TFWASM_HOST_EDGES`, default on; `0`, `false` or
/// `off` turn it off).
pub fn host_edges_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| switch_on("TFWASM_HOST_EDGES"))
}

/// A default-on switch: off when `var` is `0`, `false` or `off`.
fn switch_on(var: &str) -> bool {
    !matches!(std::env::var(var).as_deref(), Ok("0" | "false" | "off"))
}

/// Installs the log subscriber once (stderr, level from `TFWASM_LOG`).
pub fn init_logging() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let level = match std::env::var("TFWASM_LOG").as_deref() {
            Ok("error") => tracing::Level::ERROR,
            Ok("info") => tracing::Level::INFO,
            Ok("debug") => tracing::Level::DEBUG,
            Ok("trace") => tracing::Level::TRACE,
            _ => tracing::Level::WARN,
        };
        let _ = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(false)
            .try_init();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_type_pattern() {
        assert!(validate_device_type("WASM").is_ok());
        assert!(validate_device_type("GPU").is_ok());
        assert!(validate_device_type("MY_DEV").is_ok());
        assert!(validate_device_type("wasm").is_err());
        assert!(validate_device_type("").is_err());
        assert!(validate_device_type("_X").is_err());
        assert!(validate_device_type("W1").is_err());
    }

    #[test]
    fn tensorflow_versions_in_and_out_of_range() {
        let v = |text| TensorflowVersion::parse(text).unwrap();
        assert_eq!((v("2.21.0").major, v("2.21.0").minor), (2, 21));
        assert_eq!((v("2.22.0-dev20260905").major, v("2.22.0-dev20260905").minor), (2, 22));
        assert!(v("2.21.0").check_supported().is_ok());
        assert!(v("2.22.0-dev20260905").check_supported().is_ok());
        assert!(v("2.23.0rc1").check_supported().is_ok());
        let old = v("2.20.0").check_supported().unwrap_err().to_string();
        assert!(old.contains("supports TensorFlow 2.21 to 2.23") && old.contains("this is TensorFlow 2.20.0"), "{old}");
        assert!(v("3.0.0").check_supported().is_err());
        assert!(!v("2.21.1").gives_done_callbacks() && v("2.22.0-dev20260905").gives_done_callbacks());
        assert_eq!(TensorflowVersion::parse("garbage"), None);
        assert_eq!(TensorflowVersion::parse(""), None);
    }
}
