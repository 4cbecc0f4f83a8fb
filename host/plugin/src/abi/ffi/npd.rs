//! `#[repr(C)]` mirrors of the NextPluggableDevice plugin API
//! (`tensorflow/core/common_runtime/next_pluggable_device/c/plugin_c_api.h`,
//! TFNPD 0.0.1).
//!
//! TensorFlow's plugin loader calls an exported `TFNPD_InitPlugin` with a
//! [`TFNPD_PluginParams`] to fill and keeps the [`TFNPD_Api`] table it
//! returns for the life of the process; a `GetPjrtApi()` export then gives
//! the device type its PJRT client (`super::pjrt`). Unlike the PJRT table,
//! the entries here are plain C functions with their own signatures, and
//! the header is C++ only (it includes TensorFlow's C++-only XLA
//! declarations), which is why the layout test compiles its probe as C++.
//!
//! `XLA_Shape` (the TPU C API's shape struct) is kept opaque: the one entry
//! that takes it, `TFNPD_XlaShapeToDeviceShapeRepresentation`, is called
//! only in NextPluggableDevice mode.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_int, c_void};

use super::kernels::{TF_StringView, TF_Tensor};
use super::pjrt::{opaque, PJRT_Buffer, PJRT_Client};
use super::status::TF_Status;
use super::stream_executor::offset_of_end;

pub const TFNPD_MAJOR: c_int = 0;
pub const TFNPD_MINOR: c_int = 0;
pub const TFNPD_PATCH: c_int = 1;

opaque!(
    /// The plugin's event: what a copy or an allocation waits on.
    TFNPD_DeviceEvent,
    /// The plugin's allocator for one device ordinal.
    TFNPD_DeviceAllocator,
    /// The plugin's per-device copy context.
    TFNPD_DeviceContext,
    /// `xla/stream_executor/tpu/c_api_decl.h`'s shape, not mirrored.
    XLA_Shape,
);

/// `xla/c/c_api_decl.h`.
pub type XLA_LayoutPreference = c_int;
pub const XLA_LayoutPreference_kNoPreference: XLA_LayoutPreference = 0;
pub const XLA_LayoutPreference_kTpuPreferCompactChunkPaddedLayout: XLA_LayoutPreference = 1;
pub const XLA_LayoutPreference_kTpuPreferLinearLayout: XLA_LayoutPreference = 2;

// One type per entry, named as the header's typedef and the table's slot.
pub type TFNPD_NewDeviceEvent = unsafe extern "C" fn() -> *mut TFNPD_DeviceEvent;
pub type TFNPD_DeviceEventAwait = unsafe extern "C" fn(event: *mut TFNPD_DeviceEvent, status: *mut TF_Status);
pub type TFNPD_DeviceEventIsReady = unsafe extern "C" fn(event: *mut TFNPD_DeviceEvent) -> bool;
pub type TFNPD_DeviceEventAndThen = unsafe extern "C" fn(
    event: *mut TFNPD_DeviceEvent,
    callback: Option<unsafe extern "C" fn(arg: *mut c_void)>,
    callback_arg: *mut c_void,
);
pub type TFNPD_DeviceEventDelete = unsafe extern "C" fn(event: *mut TFNPD_DeviceEvent);
pub type TFNPD_DeviceAllocatorCreate = unsafe extern "C" fn(device_ordinal: c_int) -> *mut TFNPD_DeviceAllocator;
pub type TFNPD_DeviceAllocateRaw =
    unsafe extern "C" fn(allocator: *mut TFNPD_DeviceAllocator, alignment: usize, num_bytes: usize) -> *mut c_void;
pub type TFNPD_DeviceDeallocateRaw = unsafe extern "C" fn(allocator: *mut TFNPD_DeviceAllocator, ptr: *mut c_void);
/// Returned by value (two words: in registers on x86-64 System V).
pub type TFNPD_DeviceAllocatorName = unsafe extern "C" fn(allocator: *mut TFNPD_DeviceAllocator) -> TF_StringView;
pub type TFNPD_DeviceAllocatorAllocatesOpaqueHandle =
    unsafe extern "C" fn(allocator: *mut TFNPD_DeviceAllocator) -> bool;
pub type TFNPD_DeviceAllocatorDelete = unsafe extern "C" fn(allocator: *mut TFNPD_DeviceAllocator);
pub type TFNPD_DeviceContextCreate = unsafe extern "C" fn(device_ordinal: c_int) -> *mut TFNPD_DeviceContext;
pub type TFNPD_DeviceContextDelete = unsafe extern "C" fn(context: *mut TFNPD_DeviceContext);
pub type TFNPD_DeviceTensorToHostTensor = unsafe extern "C" fn(
    device_context: *mut TFNPD_DeviceContext,
    device_tensor: *const TF_Tensor,
    cpu_tensor: *mut TF_Tensor,
    status: *mut TF_Status,
) -> *mut TFNPD_DeviceEvent;
pub type TFNPD_HostTensorToDeviceTensor = unsafe extern "C" fn(
    device_context: *mut TFNPD_DeviceContext,
    cpu_tensor: *const TF_Tensor,
    device_tensor: *mut TF_Tensor,
    status: *mut TF_Status,
) -> *mut TFNPD_DeviceEvent;
pub type TFNPD_SameDeviceTensorCopy = unsafe extern "C" fn(context: *mut TFNPD_DeviceContext) -> *mut TFNPD_DeviceEvent;
pub type TFNPD_SameDevicePjRtBufferCopy = unsafe extern "C" fn(
    src_buffer: *mut PJRT_Buffer,
    c_client: *mut PJRT_Client,
    status: *mut TF_Status,
) -> *mut PJRT_Buffer;
pub type TFNPD_XlaShapeToDeviceShapeRepresentation = unsafe extern "C" fn(
    serialized_xla_shape: *mut XLA_Shape,
    data_type: c_int,
    use_fast_memory: bool,
    layout_preference: XLA_LayoutPreference,
    serialized_device_shape: *mut XLA_Shape,
    tf_status: *mut TF_Status,
);
pub type TFNPD_GetDeviceCount = unsafe extern "C" fn(status: *mut TF_Status) -> i32;
pub type TFNPD_InitPluginInternalDeviceStates = unsafe extern "C" fn(status: *mut TF_Status);

/// The table `TFNPD_InitPlugin` returns; TensorFlow keeps the pointer.
#[repr(C)]
pub struct TFNPD_Api {
    pub struct_size: usize,
    /// `priv` in C (a reserved word in Rust): the plugin's own.
    pub priv_: *mut c_void,
    pub TFNPD_NewDeviceEvent: Option<TFNPD_NewDeviceEvent>,
    pub TFNPD_DeviceEventAwait: Option<TFNPD_DeviceEventAwait>,
    pub TFNPD_DeviceEventIsReady: Option<TFNPD_DeviceEventIsReady>,
    pub TFNPD_DeviceEventAndThen: Option<TFNPD_DeviceEventAndThen>,
    pub TFNPD_DeviceEventDelete: Option<TFNPD_DeviceEventDelete>,
    pub TFNPD_DeviceAllocatorCreate: Option<TFNPD_DeviceAllocatorCreate>,
    pub TFNPD_DeviceAllocateRaw: Option<TFNPD_DeviceAllocateRaw>,
    pub TFNPD_DeviceDeallocateRaw: Option<TFNPD_DeviceDeallocateRaw>,
    pub TFNPD_DeviceAllocatorName: Option<TFNPD_DeviceAllocatorName>,
    pub TFNPD_DeviceAllocatorAllocatesOpaqueHandle: Option<TFNPD_DeviceAllocatorAllocatesOpaqueHandle>,
    pub TFNPD_DeviceAllocatorDelete: Option<TFNPD_DeviceAllocatorDelete>,
    pub TFNPD_DeviceContextCreate: Option<TFNPD_DeviceContextCreate>,
    pub TFNPD_DeviceContextDelete: Option<TFNPD_DeviceContextDelete>,
    pub TFNPD_DeviceTensorToHostTensor: Option<TFNPD_DeviceTensorToHostTensor>,
    pub TFNPD_HostTensorToDeviceTensor: Option<TFNPD_HostTensorToDeviceTensor>,
    pub TFNPD_SameDeviceTensorCopy: Option<TFNPD_SameDeviceTensorCopy>,
    pub TFNPD_SameDevicePjRtBufferCopy: Option<TFNPD_SameDevicePjRtBufferCopy>,
    pub TFNPD_XlaShapeToDeviceShapeRepresentation: Option<TFNPD_XlaShapeToDeviceShapeRepresentation>,
    pub TFNPD_GetDeviceCount: Option<TFNPD_GetDeviceCount>,
    pub TFNPD_InitPluginInternalDeviceStates: Option<TFNPD_InitPluginInternalDeviceStates>,
}
pub const TFNPD_Api_STRUCT_SIZE: usize = offset_of_end!(TFNPD_Api, TFNPD_InitPluginInternalDeviceStates);

/// What the plugin tells the loader about its device type. TensorFlow
/// zero-fills it and writes `struct_size` (the header's size, which ends at
/// `is_pluggable_device`); the loader reads `use_pjrt_on_demand_compile`
/// all the same (measured with the 2.21 wheel), so the plugin writes every
/// field.
#[repr(C)]
pub struct TFNPD_PluginParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    /// The device type (`WASM`); TensorFlow keeps the pointer.
    pub device_type: *const std::ffi::c_char,
    /// The XLA JIT backend whose op set the type compiles with
    /// (`XLA_CPU_JIT`); TensorFlow keeps the pointer.
    pub compilation_device_name: *const std::ffi::c_char,
    pub priority: i32,
    pub is_pluggable_device: bool,
    pub use_pjrt_on_demand_compile: bool,
}
/// The header's size: up to `is_pluggable_device`, not the last field.
pub const TFNPD_PLUGIN_PARAMS_STRUCT_SIZE: usize = offset_of_end!(TFNPD_PluginParams, is_pluggable_device);

/// The signature of the `TFNPD_InitPlugin` export. An error in `status`
/// fails the library's load.
pub type TFNPD_InitPlugin =
    unsafe extern "C" fn(params: *mut TFNPD_PluginParams, tf_status: *mut TF_Status) -> *const TFNPD_Api;

versioned_default!(TFNPD_Api, TFNPD_Api_STRUCT_SIZE);
versioned_default!(TFNPD_PluginParams, TFNPD_PLUGIN_PARAMS_STRUCT_SIZE);
