//! `TF_Status` and the error codes of `tensorflow/c/tf_status.h`.
//!
//! The functions resolve at load time against the TensorFlow process
//! (`libtensorflow_framework.so.2`); the plugin links no TensorFlow library.
#![allow(non_camel_case_types)]

use std::ffi::c_char;

/// Opaque status object owned by TensorFlow.
#[repr(C)]
pub struct TF_Status {
    _private: [u8; 0],
}

/// `TF_Code`: the canonical error space shared by TensorFlow and absl.
pub type TF_Code = i32;
pub const TF_OK: TF_Code = 0;
pub const TF_CANCELLED: TF_Code = 1;
pub const TF_UNKNOWN: TF_Code = 2;
pub const TF_INVALID_ARGUMENT: TF_Code = 3;
pub const TF_DEADLINE_EXCEEDED: TF_Code = 4;
pub const TF_NOT_FOUND: TF_Code = 5;
pub const TF_ALREADY_EXISTS: TF_Code = 6;
pub const TF_PERMISSION_DENIED: TF_Code = 7;
pub const TF_RESOURCE_EXHAUSTED: TF_Code = 8;
pub const TF_FAILED_PRECONDITION: TF_Code = 9;
pub const TF_ABORTED: TF_Code = 10;
pub const TF_OUT_OF_RANGE: TF_Code = 11;
pub const TF_UNIMPLEMENTED: TF_Code = 12;
pub const TF_INTERNAL: TF_Code = 13;
pub const TF_UNAVAILABLE: TF_Code = 14;
pub const TF_DATA_LOSS: TF_Code = 15;
pub const TF_UNAUTHENTICATED: TF_Code = 16;

extern "C" {
    pub fn TF_NewStatus() -> *mut TF_Status;
    pub fn TF_DeleteStatus(status: *mut TF_Status);
    pub fn TF_SetStatus(status: *mut TF_Status, code: TF_Code, msg: *const c_char);
    pub fn TF_GetCode(status: *const TF_Status) -> TF_Code;
    pub fn TF_Message(status: *const TF_Status) -> *const c_char;
}
