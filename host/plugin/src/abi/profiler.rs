//! `TF_InitProfiler` and the callbacks of the profiler it registers.
//!
//! TensorFlow creates a profiler from the registration for every profiling
//! session (`tf.profiler.experimental.start`, the `Profile` context
//! manager, Keras' `TensorBoard(profile_batch=...)`), calls `start`, `stop`
//! and then `collect_data_xspace` twice: once with a null buffer to learn
//! the size of the serialized XSpace, once with a buffer of that size. It
//! moves the planes it parses from the buffer into the session's XSpace,
//! beside its own host and CPU planes.
//!
//! The session itself lives in [`crate::profiler`] (runtime): these
//! callbacks only check pointers and forward. Facts the code relies on:
//! - the size query passes an uninitialised `*size_in_bytes`, and
//!   TensorFlow sizes its buffer from whatever is there afterwards, even
//!   after an error: it is written (0 first) and never read;
//! - TensorFlow copies the registered structs by value and every copy's
//!   owner calls the destroy callbacks, so they free nothing;
//! - an exported `TF_InitProfiler` must register a profiler, so a second
//!   copy of the library (or an unusable device type) registers an inert
//!   one that collects nothing.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ffi::profiler::*;
use super::ffi::status::TF_Status;
use super::ffi_guard;
use crate::device::Device;
use crate::error::Error;
use tfwasm_runtime::profiler;

/// The device type an inert registration names.
const INERT_TYPE: &CStr = c"TFWASM_INERT_PROFILER";

/// Set by the first real registration in this library; a second one is inert.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Entry point TensorFlow calls once per loaded library, after `SE_InitPlugin`.
///
/// # Safety
/// `params` and `status` are valid pointers supplied by TensorFlow.
#[no_mangle]
pub unsafe extern "C" fn TF_InitProfiler(params: *mut TF_ProfilerRegistrationParams, status: *mut TF_Status) {
    crate::config::init_logging();
    ffi_guard(status, || {
        // SAFETY: TensorFlow passes a valid, exclusive params struct for this call.
        let params = unsafe { params.as_mut() }
            .ok_or_else(|| Error::InvalidArgument("null profiler registration params".into()))?;
        if params.struct_size < TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE
            || params.profiler.is_null()
            || params.profiler_fns.is_null()
        {
            return Err(Error::InvalidArgument(format!(
                "TF_InitProfiler: unsupported registration params (struct_size {}, expected at least {})",
                params.struct_size, TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE
            )));
        }
        let real = !super::stream_executor::is_inert() && !REGISTERED.swap(true, Ordering::SeqCst);
        let device_type = match crate::config::device_type() {
            Ok(device_type) if real => device_type,
            Ok(_) => {
                tracing::debug!("tfwasm: this copy of the plugin is inert: so is its profiler");
                INERT_TYPE
            }
            Err(error) => {
                tracing::error!("{error}. tfwasm's profiler records nothing.");
                INERT_TYPE
            }
        };
        let fns = if device_type == INERT_TYPE {
            TP_ProfilerFns {
                start: Some(inert_start_stop),
                stop: Some(inert_start_stop),
                collect_data_xspace: Some(inert_collect),
                ..Default::default()
            }
        } else {
            TP_ProfilerFns {
                start: Some(start),
                stop: Some(stop),
                collect_data_xspace: Some(collect),
                ..Default::default()
            }
        };
        params.major_version = TP_MAJOR;
        params.minor_version = TP_MINOR;
        params.patch_version = TP_PATCH;
        params.destroy_profiler = Some(destroy_profiler);
        params.destroy_profiler_fns = Some(destroy_profiler_fns);
        // SAFETY: checked non-null above; TensorFlow owns these structs for
        // the call and expects us to fill them in.
        unsafe {
            *params.profiler = TP_Profiler { device_type: device_type.as_ptr(), ..Default::default() };
            *params.profiler_fns = fns;
        }
        params.struct_size = TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE;
        Ok(())
    });
}

/// The devices whose planes a collection writes.
fn devices() -> &'static [std::sync::Arc<Device>] {
    super::stream_executor::platform().map_or(&[], |platform| &platform.devices)
}

unsafe extern "C" fn start(_profiler: *const TP_Profiler, status: *mut TF_Status) {
    ffi_guard(status, profiler::start);
}

unsafe extern "C" fn stop(_profiler: *const TP_Profiler, status: *mut TF_Status) {
    ffi_guard(status, profiler::stop);
}

/// # Safety
/// `size_in_bytes` is null or writable; a non-null `buffer` holds
/// `*size_in_bytes` writable bytes (the size the previous call wrote).
unsafe extern "C" fn collect(
    _profiler: *const TP_Profiler,
    buffer: *mut u8,
    size_in_bytes: *mut usize,
    status: *mut TF_Status,
) {
    if size_in_bytes.is_null() {
        ffi_guard(status, || Err::<(), _>(Error::InvalidArgument("collect_data_xspace: null size_in_bytes".into())));
        return;
    }
    // The buffer's capacity, on the copy call only: the size query's value is garbage.
    // SAFETY: non-null, and TensorFlow passes the size it allocated when `buffer` is set.
    let capacity = if buffer.is_null() { 0 } else { unsafe { size_in_bytes.read() } };
    // Written before anything can fail: TensorFlow sizes its buffer from it
    // whatever the status says.
    // SAFETY: non-null and writable per the contract.
    unsafe { size_in_bytes.write(0) };
    let written = ffi_guard(status, || {
        if buffer.is_null() {
            return profiler::prepare(devices());
        }
        // SAFETY: TensorFlow allocated `capacity` bytes at `buffer` for this call.
        let out = unsafe { std::slice::from_raw_parts_mut(buffer, capacity) };
        profiler::write_into(devices(), out)
    });
    // SAFETY: as above.
    unsafe { size_in_bytes.write(written.unwrap_or(0)) };
}

unsafe extern "C" fn inert_start_stop(_profiler: *const TP_Profiler, status: *mut TF_Status) {
    ffi_guard(status, || Ok(()));
}

/// # Safety
/// As [`collect`].
unsafe extern "C" fn inert_collect(
    _profiler: *const TP_Profiler,
    _buffer: *mut u8,
    size_in_bytes: *mut usize,
    status: *mut TF_Status,
) {
    if !size_in_bytes.is_null() {
        // SAFETY: non-null and writable per the contract.
        unsafe { size_in_bytes.write(0) };
    }
    ffi_guard(status, || Ok(()));
}

/// The registered structs own nothing: see the module docs.
unsafe extern "C" fn destroy_profiler(_profiler: *mut TP_Profiler) {}
unsafe extern "C" fn destroy_profiler_fns(_fns: *mut TP_ProfilerFns) {}
