//! `#[repr(C)]` mirrors of the pluggable-profiler structs
//! (`tensorflow/c/experimental/pluggable_profiler/pluggable_profiler.h`,
//! TP 0.0.1).
//!
//! Names match the C names so the layout test can pair them with the
//! header. TensorFlow hands `TF_InitProfiler` a registration struct whose
//! `profiler` and `profiler_fns` point at structs the plugin fills; it then
//! copies both by value (more than once: each copy's owner calls the
//! destroy callbacks), so nothing the plugin hands over may own memory.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_void};

use super::status::TF_Status;
use super::stream_executor::offset_of_end;

pub const TP_MAJOR: i32 = 0;
pub const TP_MINOR: i32 = 0;
pub const TP_PATCH: i32 = 1;

/// Which device type the profiler serves; `ext` is the plugin's.
#[repr(C)]
pub struct TP_Profiler {
    pub struct_size: usize,
    pub ext: *mut c_void,
    /// Must match `[A-Z][A-Z_]*`; TensorFlow keeps the pointer.
    pub device_type: *const c_char,
}
pub const TP_PROFILER_STRUCT_SIZE: usize = offset_of_end!(TP_Profiler, device_type);

pub type TP_ProfilerStartFn = unsafe extern "C" fn(profiler: *const TP_Profiler, status: *mut TF_Status);

/// Called twice per collection: first with a null `buffer`, to learn the
/// size (`*size_in_bytes` then holds garbage on entry and must be written),
/// then with a buffer of that many bytes.
pub type TP_CollectDataXSpaceFn = unsafe extern "C" fn(
    profiler: *const TP_Profiler,
    buffer: *mut u8,
    size_in_bytes: *mut usize,
    status: *mut TF_Status,
);

/// The session callbacks; all three are mandatory.
#[repr(C)]
pub struct TP_ProfilerFns {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub start: Option<TP_ProfilerStartFn>,
    pub stop: Option<TP_ProfilerStartFn>,
    pub collect_data_xspace: Option<TP_CollectDataXSpaceFn>,
}
pub const TP_PROFILER_FNS_STRUCT_SIZE: usize = offset_of_end!(TP_ProfilerFns, collect_data_xspace);

#[repr(C)]
pub struct TF_ProfilerRegistrationParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub major_version: i32,
    pub minor_version: i32,
    pub patch_version: i32,
    pub profiler: *mut TP_Profiler,
    pub profiler_fns: *mut TP_ProfilerFns,
    /// Both destroy callbacks are mandatory.
    pub destroy_profiler: Option<unsafe extern "C" fn(profiler: *mut TP_Profiler)>,
    pub destroy_profiler_fns: Option<unsafe extern "C" fn(profiler_fns: *mut TP_ProfilerFns)>,
}
pub const TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE: usize =
    offset_of_end!(TF_ProfilerRegistrationParams, destroy_profiler_fns);

versioned_default!(TP_Profiler, TP_PROFILER_STRUCT_SIZE);
versioned_default!(TP_ProfilerFns, TP_PROFILER_FNS_STRUCT_SIZE);
versioned_default!(TF_ProfilerRegistrationParams, TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE);
