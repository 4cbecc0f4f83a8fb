//! The host's error type and its one mapping to status codes.
//!
//! Every message a user can see starts with `tfwasm:`, names the guest (and
//! the device) it concerns and, where there is one, says what to do.

use code::*;

/// The canonical status codes TensorFlow (`TF_Code`) and absl share, as
/// plain integers: the runtime knows the error classes, not TensorFlow's
/// C API, whose `tf_status.h` mirror (in the plugin) has the same values.
pub mod code {
    pub type Code = i32;
    pub const OK: Code = 0;
    pub const INVALID_ARGUMENT: Code = 3;
    pub const DEADLINE_EXCEEDED: Code = 4;
    pub const RESOURCE_EXHAUSTED: Code = 8;
    pub const FAILED_PRECONDITION: Code = 9;
    pub const UNIMPLEMENTED: Code = 12;
    pub const INTERNAL: Code = 13;
    pub const UNAVAILABLE: Code = 14;
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Bad environment or installation.
    #[error("tfwasm: {0}")]
    Config(String),

    /// A policy file that cannot be read or is invalid.
    #[error("tfwasm: policy {path}: {reason}")]
    Policy { path: String, reason: String },

    /// The guest could not be read, compiled, linked or initialised.
    #[error("tfwasm: {guest}: cannot load the guest: {reason}")]
    GuestLoad { guest: String, reason: String },

    /// The guest trapped during `call`. The instance is replaced.
    #[error("tfwasm: {guest}: `{call}` trapped: {reason}")]
    GuestTrap { guest: String, call: String, reason: String },

    /// The guest ran past its per-call CPU deadline.
    #[error("tfwasm: {guest}: `{call}` exceeded its {deadline_ms} ms deadline (policy limits.call-deadline-ms) and was stopped")]
    GuestTimeout { guest: String, call: String, deadline_ms: u64 },

    /// The guest answered, but the answer breaks the contract.
    #[error("tfwasm: {guest}: `{call}` returned an invalid answer: {reason}")]
    GuestInvalid { guest: String, call: String, reason: String },

    /// The guest refused a request (its `device-error`, other than out-of-memory).
    #[error("tfwasm: {guest}: `{call}` failed: {reason}")]
    GuestRefused { guest: String, call: String, reason: String },

    /// The device has no room for an allocation.
    #[error("tfwasm: {device}: out of device memory allocating {requested} bytes ({in_use} of {limit} bytes in use; placement by {guest})")]
    OutOfMemory { device: String, guest: String, requested: u64, in_use: u64, limit: u64 },

    /// The device was disabled after its guest failed and could not be restored.
    #[error("tfwasm: {device} is disabled: {reason}")]
    DeviceDisabled { device: String, reason: String },

    /// TensorFlow handed us something unusable (null pointer, unknown handle, bad shape).
    #[error("tfwasm: {0}")]
    InvalidArgument(String),

    /// An op the device cannot run in this form (says what to do instead).
    #[error("tfwasm: {0}")]
    Unimplemented(String),

    /// Work on a stream failed.
    #[error("tfwasm: {0}")]
    Stream(String),

    /// A failure TensorFlow reported to a kernel (e.g. an output it could
    /// not allocate), kept with TensorFlow's code; `message` is complete.
    #[error("{message}")]
    Tensorflow { code: Code, message: String },

    /// A profiling session was used out of order (started twice, ...).
    #[error("tfwasm: profiler: {0}")]
    Profiler(String),

    /// Something the host itself got wrong.
    #[error("tfwasm: internal error: {0}")]
    Internal(String),
}

impl Error {
    /// The TensorFlow status code for this error: the one table between our
    /// errors and TensorFlow's error classes.
    pub fn tf_code(&self) -> Code {
        match self {
            Error::Config(_) | Error::Policy { .. } => FAILED_PRECONDITION,
            Error::GuestLoad { .. } => FAILED_PRECONDITION,
            Error::GuestTrap { .. } | Error::GuestInvalid { .. } | Error::GuestRefused { .. } => INTERNAL,
            Error::GuestTimeout { .. } => DEADLINE_EXCEEDED,
            Error::OutOfMemory { .. } => RESOURCE_EXHAUSTED,
            Error::DeviceDisabled { .. } => UNAVAILABLE,
            Error::InvalidArgument(_) => INVALID_ARGUMENT,
            Error::Unimplemented(_) => UNIMPLEMENTED,
            Error::Stream(_) => INTERNAL,
            Error::Internal(_) => INTERNAL,
            Error::Profiler(_) => FAILED_PRECONDITION,
            Error::Tensorflow { code, .. } => *code,
        }
    }

    /// True when the guest itself misbehaved (trap, timeout, invalid answer):
    /// the host must not trust that instance again.
    pub fn is_guest_fault(&self) -> bool {
        matches!(self, Error::GuestTrap { .. } | Error::GuestTimeout { .. } | Error::GuestInvalid { .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
