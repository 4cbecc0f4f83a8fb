//! Entry points for tfwasm's own tools, not part of any TensorFlow ABI:
//! the Python package (`tfwasm.traffic`, `tfwasm.passes`) calls them with
//! `ctypes` in the library TensorFlow loaded.

use std::ffi::{c_char, c_int, CStr};

use super::ffi_guard_or;
use super::stream_executor::platform;
use crate::device::Path;
use crate::error::Error;

/// What [`tfwasm_device_traffic`] writes: per path (host→device,
/// device→host, device→device, fill), the copies submitted and their bytes.
/// `struct_size` comes first so later versions can grow it.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct TfwasmTraffic {
    pub struct_size: usize,
    pub copies: [u64; 4],
    pub bytes: [u64; 4],
}

pub const TFWASM_TRAFFIC_STRUCT_SIZE: usize = std::mem::size_of::<TfwasmTraffic>();

/// Fills `out` with device `ordinal`'s traffic so far. Returns 1, or 0 when
/// there is no such device, `out` is null or its `struct_size` is smaller
/// than this version writes.
///
/// # Safety
/// `out` is null or points to a writable `TfwasmTraffic` whose
/// `struct_size` the caller set.
#[no_mangle]
pub unsafe extern "C" fn tfwasm_device_traffic(ordinal: u32, out: *mut TfwasmTraffic) -> c_int {
    ffi_guard_or(0, "tfwasm_device_traffic", || {
        // SAFETY: per this function's contract, `out` is null or valid.
        let Some(out) = (unsafe { out.as_mut() }) else {
            return Err(Error::InvalidArgument("null TfwasmTraffic".into()));
        };
        if out.struct_size < TFWASM_TRAFFIC_STRUCT_SIZE {
            return Err(Error::InvalidArgument(format!("TfwasmTraffic struct_size {} is too small", out.struct_size)));
        }
        let Some(device) = platform().and_then(|p| p.device(ordinal)) else {
            return Ok(0);
        };
        let mut filled = TfwasmTraffic { struct_size: TFWASM_TRAFFIC_STRUCT_SIZE, ..Default::default() };
        for path in Path::ALL {
            (filled.copies[path as usize], filled.bytes[path as usize]) = device.traffic().read(path);
        }
        *out = filled;
        Ok(1)
    })
}

/// Copies `text` into `out` (capacity `capacity`, may be null when 0) and
/// returns its full length, so a caller whose buffer was short can retry.
///
/// # Safety
/// `out` is null or writable for `capacity` bytes.
unsafe fn write_text(text: &str, out: *mut u8, capacity: usize) -> isize {
    if !out.is_null() {
        let n = text.len().min(capacity);
        // SAFETY: per the contract, `out` holds `capacity >= n` bytes; the
        // source is ours and does not overlap.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, n) };
    }
    isize::try_from(text.len()).unwrap_or(isize::MAX)
}

/// A NUL-terminated UTF-8 argument.
///
/// # Safety
/// `text` is null or NUL-terminated.
unsafe fn text_arg<'a>(text: *const c_char, what: &str) -> Result<&'a str, Error> {
    if text.is_null() {
        return Err(Error::InvalidArgument(format!("null {what}")));
    }
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(text) }.to_str().map_err(|_| Error::InvalidArgument(format!("{what} is not UTF-8")))
}

/// Writes the optimizer's pass list as JSON (an array of objects: slot,
/// name, version, summary, path, sha256, enabled, disabled, calls,
/// rewrites, failures, last_error, generation) into `out` and returns its
/// length; -1 on an internal error. Loads the pipeline if no graph has yet.
///
/// # Safety
/// `out` is null or writable for `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn tfwasm_passes_list(out: *mut u8, capacity: usize) -> isize {
    ffi_guard_or(-1, "tfwasm_passes_list", || {
        let list: Vec<serde_json::Value> = crate::optimizer::status()
            .into_iter()
            .map(|pass| {
                serde_json::json!({
                    "slot": pass.slot,
                    "name": pass.name,
                    "version": pass.version,
                    "summary": pass.summary,
                    "path": pass.path.to_string_lossy(),
                    "sha256": pass.sha256,
                    "enabled": pass.enabled,
                    "disabled": pass.disabled,
                    "calls": pass.calls,
                    "rewrites": pass.rewrites,
                    "failures": pass.failures,
                    "last_error": pass.last_error,
                    "generation": pass.generation,
                })
            })
            .collect();
        let text = serde_json::Value::Array(list).to_string();
        // SAFETY: per this function's contract.
        Ok(unsafe { write_text(&text, out, capacity) })
    })
}

/// What the pass-control entry points return: 1 on success; 0 with the
/// reason written to `error` (its full length in `*error_len`).
///
/// # Safety
/// `error` is null or writable for `error_capacity` bytes; `error_len` is
/// null or writable.
unsafe fn pass_control(
    what: &str,
    error: *mut u8,
    error_capacity: usize,
    error_len: *mut usize,
    body: impl FnOnce() -> Result<(), Error>,
) -> c_int {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        Err(Error::Internal(format!("{what}: internal error (panic): {}", super::panic_message(&panic))))
    });
    match outcome {
        Ok(()) => 1,
        Err(failure) => {
            let text = failure.to_string();
            // SAFETY: per this function's contract.
            let len = unsafe { write_text(&text, error, error_capacity) };
            // SAFETY: per this function's contract.
            if let Some(slot) = unsafe { error_len.as_mut() } {
                *slot = len as usize;
            }
            0
        }
    }
}

/// Replaces the program of pass `slot` with the file at `path` (compiled,
/// instantiated and asked to describe itself first; on any failure the old
/// program stays). See [`pass_control`] for the result.
///
/// # Safety
/// `slot` and `path` are NUL-terminated; the error arguments as in
/// [`pass_control`].
#[no_mangle]
pub unsafe extern "C" fn tfwasm_passes_swap(
    slot: *const c_char,
    path: *const c_char,
    error: *mut u8,
    error_capacity: usize,
    error_len: *mut usize,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe {
        pass_control("tfwasm_passes_swap", error, error_capacity, error_len, || {
            let (slot, path) = (text_arg(slot, "pass name")?, text_arg(path, "path")?);
            crate::optimizer::swap(slot, std::path::Path::new(path))
        })
    }
}

/// Turns pass `slot` on (`enabled != 0`, clearing a disable after
/// failures) or off. See [`pass_control`] for the result.
///
/// # Safety
/// `slot` is NUL-terminated; the error arguments as in [`pass_control`].
#[no_mangle]
pub unsafe extern "C" fn tfwasm_passes_set_enabled(
    slot: *const c_char,
    enabled: c_int,
    error: *mut u8,
    error_capacity: usize,
    error_len: *mut usize,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe {
        pass_control("tfwasm_passes_set_enabled", error, error_capacity, error_len, || {
            crate::optimizer::set_enabled(text_arg(slot, "pass name")?, enabled != 0)
        })
    }
}
