//! Every `extern "C"` item of the plugin, one file per TensorFlow interface.
//!
//! An entry point checks nulls and `struct_size`, turns raw pointers into
//! safe values, calls one safe function returning `Result<T, Error>` and
//! reports through [`ffi_guard`] (with a `TF_Status`) or [`ffi_guard_or`]
//! (without one). Both catch panics: no unwind ever crosses into TensorFlow.
//! No device logic lives here.

pub mod ffi;
pub mod graph;
pub mod kernels;
#[cfg(feature = "pjrt")]
pub mod npd;
pub mod pjrt;
#[cfg(feature = "profiler")]
pub mod profiler;
pub mod stream_executor;
pub mod tools;

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::Error;
use ffi::status::{TF_SetStatus, TF_Status, TF_INTERNAL, TF_OK};

/// Runs `body` and writes its outcome to `status` (which may be null).
/// Returns the value on success.
pub(crate) fn ffi_guard<T>(status: *mut TF_Status, body: impl FnOnce() -> Result<T, Error>) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => {
            set_status(status, TF_OK, "");
            Some(value)
        }
        Ok(Err(error)) => {
            tracing::debug!("{error}");
            set_status(status, error.tf_code(), &error.to_string());
            None
        }
        Err(panic) => {
            let message = format!("tfwasm: internal error (panic): {}", panic_message(&panic));
            tracing::error!("{message}");
            set_status(status, TF_INTERNAL, &message);
            None
        }
    }
}

/// Like [`ffi_guard`] for entry points without a `TF_Status`: errors are
/// logged and `fallback` is returned.
pub(crate) fn ffi_guard_or<T>(fallback: T, what: &str, body: impl FnOnce() -> Result<T, Error>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => {
            tracing::warn!("{what}: {error}");
            fallback
        }
        Err(panic) => {
            tracing::error!("{what}: internal error (panic): {}", panic_message(&panic));
            fallback
        }
    }
}

fn set_status(status: *mut TF_Status, code: i32, message: &str) {
    if status.is_null() {
        return;
    }
    if code == TF_OK {
        // The hot path (every copy, event and stream call): no allocation.
        // SAFETY: as below; the literal is 'static.
        unsafe { TF_SetStatus(status, TF_OK, c"".as_ptr()) };
        return;
    }
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `status` is a non-null TF_Status handed to us by TensorFlow for
    // the duration of this call; TF_SetStatus copies the message.
    unsafe { TF_SetStatus(status, code, message.as_ptr()) };
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}
