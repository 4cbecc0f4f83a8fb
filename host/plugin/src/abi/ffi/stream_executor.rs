//! `#[repr(C)]` mirrors of the StreamExecutor plugin structs
//! (`tensorflow/c/experimental/stream_executor/stream_executor.h`, SE 0.0.1).
//!
//! Names match the C names so the layout test can pair them with the
//! header. Every struct with a `struct_size` field gets a `Default` that
//! fills it with the size this crate was written against and a null `ext`.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_void};
use std::ptr;

use super::status::TF_Status;

/// `TF_Bool` is `unsigned char` in the C API.
pub type TF_Bool = u8;

pub const SE_MAJOR: i32 = 0;
pub const SE_MINOR: i32 = 0;
pub const SE_PATCH: i32 = 1;

/// Opaque handles TensorFlow stores and hands back; we put our own pointers in them.
pub type SP_Stream = *mut c_void;
pub type SP_Event = *mut c_void;
pub type SP_Timer = *mut c_void;

pub type SE_StatusCallbackFn = Option<unsafe extern "C" fn(arg: *mut c_void, status: *mut TF_Status)>;

/// Size up to and including `$field`, like the header's `TF_OFFSET_OF_END`.
macro_rules! offset_of_end {
    ($ty:ty, $field:ident) => {{
        const fn size_of_field<T>(_: *const T) -> usize {
            std::mem::size_of::<T>()
        }
        let probe = std::mem::MaybeUninit::<$ty>::uninit();
        // SAFETY: `addr_of!` computes a field address without reading it.
        let field = unsafe { std::ptr::addr_of!((*probe.as_ptr()).$field) };
        std::mem::offset_of!($ty, $field) + size_of_field(field)
    }};
}
#[allow(unused_imports)]
pub(crate) use offset_of_end;

#[repr(C)]
pub struct SP_TimerFns {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub nanoseconds: Option<unsafe extern "C" fn(timer: SP_Timer) -> u64>,
}
versioned_default!(SP_TimerFns, end of nanoseconds);

#[repr(C)]
pub struct SP_AllocatorStats {
    pub struct_size: usize,
    pub num_allocs: i64,
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: i64,
    pub largest_alloc_size: i64,
    pub has_bytes_limit: i8,
    pub bytes_limit: i64,
    pub bytes_reserved: i64,
    pub peak_bytes_reserved: i64,
    pub has_bytes_reservable_limit: i8,
    pub bytes_reservable_limit: i64,
    pub largest_free_block_bytes: i64,
}
versioned_default!(SP_AllocatorStats, end of largest_free_block_bytes);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SE_EventStatus {
    SE_EVENT_UNKNOWN = 0,
    SE_EVENT_ERROR = 1,
    SE_EVENT_PENDING = 2,
    SE_EVENT_COMPLETE = 3,
}

#[repr(C)]
pub struct SP_DeviceMemoryBase {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub opaque: *mut c_void,
    pub size: u64,
    pub payload: u64,
}
versioned_default!(SP_DeviceMemoryBase, end of payload);

#[repr(C)]
pub struct SP_Device {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub ordinal: i32,
    pub device_handle: *mut c_void,
    pub hardware_name: *const c_char,
    pub device_vendor: *const c_char,
    pub pci_bus_id: *const c_char,
}
versioned_default!(SP_Device, end of pci_bus_id);

#[repr(C)]
pub struct SE_CreateDeviceParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub ordinal: i32,
    pub device: *mut SP_Device,
}
versioned_default!(SE_CreateDeviceParams, end of device);

#[repr(C)]
pub struct SP_DeviceFns {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub get_numa_node: Option<unsafe extern "C" fn(device: *const SP_Device) -> i32>,
    pub get_memory_bandwidth: Option<unsafe extern "C" fn(device: *const SP_Device) -> i64>,
    pub get_gflops: Option<unsafe extern "C" fn(device: *const SP_Device) -> f64>,
}
versioned_default!(SP_DeviceFns, end of get_gflops);

#[repr(C)]
pub struct SE_CreateDeviceFnsParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub device_fns: *mut SP_DeviceFns,
}
versioned_default!(SE_CreateDeviceFnsParams, end of device_fns);

type Dev = *const SP_Device;
type St = *mut TF_Status;
type Mem = *mut SP_DeviceMemoryBase;
type ConstMem = *const SP_DeviceMemoryBase;

#[repr(C)]
pub struct SP_StreamExecutor {
    pub struct_size: usize,
    pub ext: *mut c_void,
    // Allocation.
    pub allocate: Option<unsafe extern "C" fn(Dev, size: u64, memory_space: i64, mem: Mem)>,
    pub deallocate: Option<unsafe extern "C" fn(Dev, mem: Mem)>,
    pub host_memory_allocate: Option<unsafe extern "C" fn(Dev, size: u64) -> *mut c_void>,
    pub host_memory_deallocate: Option<unsafe extern "C" fn(Dev, mem: *mut c_void)>,
    pub unified_memory_allocate: Option<unsafe extern "C" fn(Dev, bytes: u64) -> *mut c_void>,
    pub unified_memory_deallocate: Option<unsafe extern "C" fn(Dev, location: *mut c_void)>,
    pub get_allocator_stats: Option<unsafe extern "C" fn(Dev, stats: *mut SP_AllocatorStats) -> TF_Bool>,
    pub device_memory_usage: Option<unsafe extern "C" fn(Dev, free: *mut i64, total: *mut i64) -> TF_Bool>,
    // Streams.
    pub create_stream: Option<unsafe extern "C" fn(Dev, stream: *mut SP_Stream, St)>,
    pub destroy_stream: Option<unsafe extern "C" fn(Dev, stream: SP_Stream)>,
    pub create_stream_dependency: Option<unsafe extern "C" fn(Dev, dependent: SP_Stream, other: SP_Stream, St)>,
    pub get_stream_status: Option<unsafe extern "C" fn(Dev, stream: SP_Stream, St)>,
    // Events.
    pub create_event: Option<unsafe extern "C" fn(Dev, event: *mut SP_Event, St)>,
    pub destroy_event: Option<unsafe extern "C" fn(Dev, event: SP_Event)>,
    pub get_event_status: Option<unsafe extern "C" fn(Dev, event: SP_Event) -> SE_EventStatus>,
    pub record_event: Option<unsafe extern "C" fn(Dev, stream: SP_Stream, event: SP_Event, St)>,
    pub wait_for_event: Option<unsafe extern "C" fn(Dev, stream: SP_Stream, event: SP_Event, St)>,
    // Timers.
    pub create_timer: Option<unsafe extern "C" fn(Dev, timer: *mut SP_Timer, St)>,
    pub destroy_timer: Option<unsafe extern "C" fn(Dev, timer: SP_Timer)>,
    pub start_timer: Option<unsafe extern "C" fn(Dev, stream: SP_Stream, timer: SP_Timer, St)>,
    pub stop_timer: Option<unsafe extern "C" fn(Dev, stream: SP_Stream, timer: SP_Timer, St)>,
    // Copies.
    pub memcpy_dtoh: Option<unsafe extern "C" fn(Dev, SP_Stream, host_dst: *mut c_void, src: ConstMem, size: u64, St)>,
    pub memcpy_htod: Option<unsafe extern "C" fn(Dev, SP_Stream, dst: Mem, host_src: *const c_void, size: u64, St)>,
    pub memcpy_dtod: Option<unsafe extern "C" fn(Dev, SP_Stream, dst: Mem, src: ConstMem, size: u64, St)>,
    pub sync_memcpy_dtoh: Option<unsafe extern "C" fn(Dev, host_dst: *mut c_void, src: ConstMem, size: u64, St)>,
    pub sync_memcpy_htod: Option<unsafe extern "C" fn(Dev, dst: Mem, host_src: *const c_void, size: u64, St)>,
    pub sync_memcpy_dtod: Option<unsafe extern "C" fn(Dev, dst: Mem, src: ConstMem, size: u64, St)>,
    // Synchronisation.
    pub block_host_for_event: Option<unsafe extern "C" fn(Dev, event: SP_Event, St)>,
    pub block_host_until_done: Option<unsafe extern "C" fn(Dev, stream: SP_Stream, St)>,
    pub synchronize_all_activity: Option<unsafe extern "C" fn(Dev, St)>,
    // Fills.
    pub mem_zero: Option<unsafe extern "C" fn(Dev, SP_Stream, location: Mem, size: u64, St)>,
    pub memset: Option<unsafe extern "C" fn(Dev, SP_Stream, location: Mem, pattern: u8, size: u64, St)>,
    pub memset32: Option<unsafe extern "C" fn(Dev, SP_Stream, location: Mem, pattern: u32, size: u64, St)>,
    pub host_callback:
        Option<unsafe extern "C" fn(Dev, SP_Stream, callback: SE_StatusCallbackFn, arg: *mut c_void) -> TF_Bool>,
}
versioned_default!(SP_StreamExecutor, end of host_callback);

#[repr(C)]
pub struct SE_CreateStreamExecutorParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub stream_executor: *mut SP_StreamExecutor,
}
versioned_default!(SE_CreateStreamExecutorParams, end of stream_executor);

#[repr(C)]
pub struct SP_Platform {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub name: *const c_char,
    pub type_: *const c_char,
    pub supports_unified_memory: TF_Bool,
    pub use_bfc_allocator: TF_Bool,
    pub force_memory_growth: TF_Bool,
}
versioned_default!(SP_Platform, end of force_memory_growth);

type Plat = *const SP_Platform;

#[repr(C)]
pub struct SP_PlatformFns {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub get_device_count: Option<unsafe extern "C" fn(Plat, device_count: *mut i32, St)>,
    pub create_device: Option<unsafe extern "C" fn(Plat, params: *mut SE_CreateDeviceParams, St)>,
    pub destroy_device: Option<unsafe extern "C" fn(Plat, device: *mut SP_Device)>,
    pub create_device_fns: Option<unsafe extern "C" fn(Plat, params: *mut SE_CreateDeviceFnsParams, St)>,
    pub destroy_device_fns: Option<unsafe extern "C" fn(Plat, device_fns: *mut SP_DeviceFns)>,
    pub create_stream_executor: Option<unsafe extern "C" fn(Plat, params: *mut SE_CreateStreamExecutorParams, St)>,
    pub destroy_stream_executor: Option<unsafe extern "C" fn(Plat, stream_executor: *mut SP_StreamExecutor)>,
    pub create_timer_fns: Option<unsafe extern "C" fn(Plat, timer_fns: *mut SP_TimerFns, St)>,
    pub destroy_timer_fns: Option<unsafe extern "C" fn(Plat, timer_fns: *mut SP_TimerFns)>,
}
versioned_default!(SP_PlatformFns, end of destroy_timer_fns);

#[repr(C)]
pub struct SE_PlatformRegistrationParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub major_version: i32,
    pub minor_version: i32,
    pub patch_version: i32,
    pub platform: *mut SP_Platform,
    pub platform_fns: *mut SP_PlatformFns,
    pub destroy_platform: Option<unsafe extern "C" fn(platform: *mut SP_Platform)>,
    pub destroy_platform_fns: Option<unsafe extern "C" fn(platform_fns: *mut SP_PlatformFns)>,
}
versioned_default!(SE_PlatformRegistrationParams, end of destroy_platform_fns);

/// Keeps `ptr` imported for docs that mention null handles.
#[allow(dead_code)]
const NULL: *const c_void = ptr::null();
