//! `TFNPD_InitPlugin`, the NextPluggableDevice table, and the C++ shim's
//! installation (cargo feature `pjrt`, issue 45 stage 1).
//!
//! TensorFlow's loader calls `TFNPD_InitPlugin` right after `SE_InitPlugin`
//! and then `GetPjrtApi` (`abi/pjrt.rs`). The answer keeps the
//! StreamExecutor device as the WASM device: priority 100 is below the SE
//! factory's 220, so TensorFlow registers no NextPluggableDevice for the
//! type and calls none of the `TFNPD_*` entries below (they exist because
//! the table must be complete; docs/xla-pjrt-notes.md, section 5). What XLA
//! launches need beyond the PJRT API is the shim's (`shim/pjrt_shim.cc`),
//! installed from `TF_InitKernel`, which runs after both modules.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

use super::ffi::kernels::{TF_StringView, TF_Tensor};
use super::ffi::npd::*;
use super::ffi::pjrt::{PJRT_Buffer, PJRT_Client};
use super::ffi::status::{TF_SetStatus, TF_Status, TF_UNIMPLEMENTED};
use super::{ffi_guard, ffi_guard_or};
use crate::error::Error;

/// The XLA backend whose op set and types the device compiles with.
const COMPILATION_DEVICE: &CStr = c"XLA_CPU_JIT";

/// Below the SE factory's 220: the StreamExecutor device stays the device
/// (220 would abort TensorFlow as a duplicate, above it replaces ours).
const NPD_PRIORITY: i32 = 100;

/// What the shim registers the SE factory again at, replacing the loader's.
const WRAPPED_FACTORY_PRIORITY: c_int = 221;

/// The SE platform's name (`SP_Platform::name`), which the shim's factory
/// looks the platform up by.
const PLATFORM_NAME: &CStr = c"TFWASM";

/// The type answered by a copy of the library that registers nothing
/// (`SE_InitPlugin` made it inert): its PJRT API is set under this type,
/// which no device uses, so it cannot collide with the active copy's.
const INERT_TYPE: &CStr = c"TFWASM_INERT";

/// Called by TensorFlow's loader after `SE_InitPlugin`.
///
/// # Safety
/// `params` and `status` are valid pointers supplied by TensorFlow.
#[no_mangle]
pub unsafe extern "C" fn TFNPD_InitPlugin(params: *mut TFNPD_PluginParams, status: *mut TF_Status) -> *const TFNPD_Api {
    crate::config::init_logging();
    ffi_guard(status, || {
        // SAFETY: TensorFlow passes a zero-filled params struct for the call.
        let params = unsafe { params.as_mut() }.ok_or_else(|| Error::InvalidArgument("null TFNPD params".into()))?;
        if params.struct_size < TFNPD_PLUGIN_PARAMS_STRUCT_SIZE {
            return Err(Error::InvalidArgument(format!(
                "TFNPD params of {} bytes, tfwasm needs {TFNPD_PLUGIN_PARAMS_STRUCT_SIZE}",
                params.struct_size
            )));
        }
        let device_type = match crate::config::device_type() {
            Ok(device_type) if !super::stream_executor::is_inert() => device_type,
            _ => INERT_TYPE,
        };
        params.device_type = device_type.as_ptr();
        params.compilation_device_name = COMPILATION_DEVICE.as_ptr();
        params.priority = NPD_PRIORITY;
        params.is_pluggable_device = true;
        // Read by the 2.21 loader although past the header's struct_size:
        // on-demand would put a second kernel on every op our kernels serve.
        params.use_pjrt_on_demand_compile = false;
        Ok(ptr::from_ref(npd_api()))
    })
    .unwrap_or(ptr::null())
}

/// Installs the shim for the device type, once, from `TF_InitKernel`, if
/// this TensorFlow is the one the shim was built for; otherwise logs one
/// line and installs nothing (eager jit then keeps TensorFlow's "No JIT
/// device registered" error, and nothing else changes).
pub(crate) fn install_shim(device_type: &CStr) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let running = super::stream_executor::tensorflow_version().map(|v| v.text.as_str());
        let switch = std::env::var(crate::pjrt::SWITCH_ENV).ok();
        if let Err(reason) = crate::pjrt::shim_gate(crate::pjrt::SHIM_TENSORFLOW, running, switch.as_deref()) {
            tracing::warn!("tfwasm: XLA on {} is off: {reason}", device_type.to_string_lossy());
            return;
        }
        let mut error = [0u8; 512];
        // SAFETY: NUL-terminated strings alive for the call, a writable
        // buffer of the size given; the shim catches its own exceptions.
        let outcome = unsafe {
            tfwasm_pjrt_shim_install(
                device_type.as_ptr(),
                PLATFORM_NAME.as_ptr(),
                COMPILATION_DEVICE.as_ptr(),
                WRAPPED_FACTORY_PRIORITY,
                error.as_mut_ptr().cast(),
                error.len(),
            )
        };
        let reason = CStr::from_bytes_until_nul(&error).map(|r| r.to_string_lossy().into_owned()).unwrap_or_default();
        match outcome {
            0 => tracing::debug!("tfwasm: XLA on {} goes through the WASM PJRT client", device_type.to_string_lossy()),
            1 => tracing::warn!("tfwasm: XLA on {} is off: {reason}", device_type.to_string_lossy()),
            _ => tracing::error!(
                "tfwasm: XLA on {} is off, the PJRT shim failed half-way: {reason}",
                device_type.to_string_lossy()
            ),
        }
    });
}

extern "C" {
    /// `shim/pjrt_shim.cc`: 0 installed, 1 nothing installed, 2 failed after
    /// installing part; the reason in `error`.
    fn tfwasm_pjrt_shim_install(
        device_type: *const c_char,
        platform_name: *const c_char,
        jit_device: *const c_char,
        factory_priority: c_int,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
}

// ------------------------------------------------------------ TFNPD table

struct NpdTable(TFNPD_Api);

// SAFETY: immutable after creation; the pointers are functions and null.
unsafe impl Sync for NpdTable {}
// SAFETY: as above.
unsafe impl Send for NpdTable {}

fn npd_api() -> &'static TFNPD_Api {
    static TABLE: OnceLock<NpdTable> = OnceLock::new();
    &TABLE
        .get_or_init(|| {
            NpdTable(TFNPD_Api {
                TFNPD_NewDeviceEvent: Some(new_device_event),
                TFNPD_DeviceEventAwait: Some(device_event_await),
                TFNPD_DeviceEventIsReady: Some(device_event_is_ready),
                TFNPD_DeviceEventAndThen: Some(device_event_and_then),
                TFNPD_DeviceEventDelete: Some(device_event_delete),
                TFNPD_DeviceAllocatorCreate: Some(device_allocator_create),
                TFNPD_DeviceAllocateRaw: Some(device_allocate_raw),
                TFNPD_DeviceDeallocateRaw: Some(device_deallocate_raw),
                TFNPD_DeviceAllocatorName: Some(device_allocator_name),
                TFNPD_DeviceAllocatorAllocatesOpaqueHandle: Some(device_allocator_allocates_opaque_handle),
                TFNPD_DeviceAllocatorDelete: Some(device_allocator_delete),
                TFNPD_DeviceContextCreate: Some(device_context_create),
                TFNPD_DeviceContextDelete: Some(device_context_delete),
                TFNPD_DeviceTensorToHostTensor: Some(device_tensor_to_host_tensor),
                TFNPD_HostTensorToDeviceTensor: Some(host_tensor_to_device_tensor),
                TFNPD_SameDeviceTensorCopy: Some(same_device_tensor_copy),
                TFNPD_SameDevicePjRtBufferCopy: Some(same_device_pjrt_buffer_copy),
                TFNPD_XlaShapeToDeviceShapeRepresentation: Some(xla_shape_to_device_shape_representation),
                TFNPD_GetDeviceCount: Some(get_device_count),
                TFNPD_InitPluginInternalDeviceStates: Some(init_plugin_internal_device_states),
                ..Default::default()
            })
        })
        .0
}

/// What the NextPluggableDevice entries answer where they must fail: in the
/// StreamExecutor mode tfwasm runs, TensorFlow creates no such device.
fn unimplemented_status(status: *mut TF_Status, entry: &str) {
    let message = CString::new(format!(
        "tfwasm: {entry}: the WASM device is a StreamExecutor device; its NextPluggableDevice entries are not served"
    ))
    .unwrap_or_default();
    if !status.is_null() {
        // SAFETY: TensorFlow's status for the call; the message is copied.
        unsafe { TF_SetStatus(status, TF_UNIMPLEMENTED, message.as_ptr()) };
    }
}

// Events, allocator and device context: unused in StreamExecutor mode.
unsafe extern "C" fn new_device_event() -> *mut TFNPD_DeviceEvent {
    ptr::null_mut()
}
unsafe extern "C" fn device_event_await(_event: *mut TFNPD_DeviceEvent, status: *mut TF_Status) {
    unimplemented_status(status, "TFNPD_DeviceEventAwait");
}
unsafe extern "C" fn device_event_is_ready(_event: *mut TFNPD_DeviceEvent) -> bool {
    true
}
unsafe extern "C" fn device_event_and_then(
    _event: *mut TFNPD_DeviceEvent,
    callback: Option<unsafe extern "C" fn(arg: *mut c_void)>,
    callback_arg: *mut c_void,
) {
    if let Some(callback) = callback {
        // SAFETY: TensorFlow's callback with its own argument, called once.
        unsafe { callback(callback_arg) };
    }
}
unsafe extern "C" fn device_event_delete(_event: *mut TFNPD_DeviceEvent) {}
unsafe extern "C" fn device_allocator_create(_device_ordinal: c_int) -> *mut TFNPD_DeviceAllocator {
    ptr::null_mut()
}
unsafe extern "C" fn device_allocate_raw(
    _allocator: *mut TFNPD_DeviceAllocator,
    _alignment: usize,
    _num_bytes: usize,
) -> *mut c_void {
    ptr::null_mut()
}
unsafe extern "C" fn device_deallocate_raw(_allocator: *mut TFNPD_DeviceAllocator, _ptr: *mut c_void) {}
unsafe extern "C" fn device_allocator_name(_allocator: *mut TFNPD_DeviceAllocator) -> TF_StringView {
    const NAME: &str = "tfwasm_npd_unused";
    TF_StringView { data: NAME.as_ptr().cast(), len: NAME.len() }
}
unsafe extern "C" fn device_allocator_allocates_opaque_handle(_allocator: *mut TFNPD_DeviceAllocator) -> bool {
    false
}
unsafe extern "C" fn device_allocator_delete(_allocator: *mut TFNPD_DeviceAllocator) {}
unsafe extern "C" fn device_context_create(_device_ordinal: c_int) -> *mut TFNPD_DeviceContext {
    ptr::null_mut()
}
unsafe extern "C" fn device_context_delete(_context: *mut TFNPD_DeviceContext) {}
unsafe extern "C" fn device_tensor_to_host_tensor(
    _context: *mut TFNPD_DeviceContext,
    _device_tensor: *const TF_Tensor,
    _cpu_tensor: *mut TF_Tensor,
    status: *mut TF_Status,
) -> *mut TFNPD_DeviceEvent {
    unimplemented_status(status, "TFNPD_DeviceTensorToHostTensor");
    ptr::null_mut()
}
unsafe extern "C" fn host_tensor_to_device_tensor(
    _context: *mut TFNPD_DeviceContext,
    _cpu_tensor: *const TF_Tensor,
    _device_tensor: *mut TF_Tensor,
    status: *mut TF_Status,
) -> *mut TFNPD_DeviceEvent {
    unimplemented_status(status, "TFNPD_HostTensorToDeviceTensor");
    ptr::null_mut()
}
unsafe extern "C" fn same_device_tensor_copy(_context: *mut TFNPD_DeviceContext) -> *mut TFNPD_DeviceEvent {
    ptr::null_mut()
}
unsafe extern "C" fn same_device_pjrt_buffer_copy(
    _src: *mut PJRT_Buffer,
    _client: *mut PJRT_Client,
    status: *mut TF_Status,
) -> *mut PJRT_Buffer {
    unimplemented_status(status, "TFNPD_SameDevicePjRtBufferCopy");
    ptr::null_mut()
}
unsafe extern "C" fn xla_shape_to_device_shape_representation(
    _shape: *mut XLA_Shape,
    _data_type: c_int,
    _use_fast_memory: bool,
    _layout_preference: XLA_LayoutPreference,
    _device_shape: *mut XLA_Shape,
    status: *mut TF_Status,
) {
    unimplemented_status(status, "TFNPD_XlaShapeToDeviceShapeRepresentation");
}

/// The StreamExecutor platform's device count (0 for an inert copy).
unsafe extern "C" fn get_device_count(status: *mut TF_Status) -> i32 {
    ffi_guard(status, || {
        let inert = super::stream_executor::is_inert();
        Ok(super::stream_executor::platform().filter(|_| !inert).map_or(0, |p| p.devices.len() as i32))
    })
    .unwrap_or(0)
}

unsafe extern "C" fn init_plugin_internal_device_states(status: *mut TF_Status) {
    ffi_guard_or((), "TFNPD_InitPluginInternalDeviceStates", || {
        ffi_guard(status, || Ok(()));
        Ok(())
    });
}
