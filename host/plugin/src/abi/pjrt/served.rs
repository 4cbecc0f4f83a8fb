//! The PJRT entries tfwasm serves (cargo feature `pjrt`): each checks its
//! args ([`args_mut`]), turns TensorFlow's pointers into the safe types of
//! [`crate::pjrt`], calls them, and writes the answer back. No logic lives
//! here beyond that conversion.
//!
//! Handles TensorFlow gets:
//! - `PJRT_Client*`: the process's [`Handles`] (one client, never freed).
//! - `PJRT_Device*` / `PJRT_Memory*` / `PJRT_DeviceDescription*`: the
//!   [`PjrtDevice`], its [`PjrtMemory`] and [`DeviceDescription`] inside the
//!   client; each is checked to be one of ours before use.
//! - `PJRT_Buffer*`: a `Box<Buffer>`, freed by `PJRT_Buffer_Destroy`.
//! - `PJRT_LoadedExecutable*` and `PJRT_Executable*`: each a
//!   `Box<ExecutableHandle>` sharing one compiled module.
//! - `PJRT_Event*`: one static, always-ready event (execution is synchronous).

// C names: PJRT's enum constants are matched as written in the header.
#![allow(non_upper_case_globals)]

use std::ffi::{c_char, c_void};
use std::ptr;
use std::sync::{Arc, OnceLock};

use tfwasm_proto::prost::Message;
use tfwasm_xla::{ArrayShape, ElementType};

use super::{args_mut, pjrt_guard};
use crate::abi::ffi::pjrt::*;
use crate::error::Error;
use crate::pjrt::{Buffer, Client, DeviceDescription, LoadedExecutable, PjrtDevice, PjrtMemory, PLATFORM_NAME};

// ------------------------------------------------------------------ handles

/// The client and the pointer lists its entries hand out, which must stay
/// where they are for the process.
pub(crate) struct Handles {
    client: Client,
    devices: Vec<*mut PJRT_Device>,
    memories: Vec<*mut PJRT_Memory>,
    /// Per device: its one memory. Per memory: its one device.
    device_memory: Vec<[*mut PJRT_Memory; 1]>,
    memory_device: Vec<[*mut PJRT_Device; 1]>,
}

// SAFETY: the pointers point into `client`, which is immutable after
// creation and lives (leaked) for the process; sharing them is sharing
// addresses of `Sync` data.
unsafe impl Sync for Handles {}
// SAFETY: as above.
unsafe impl Send for Handles {}

static HANDLES: OnceLock<&'static Handles> = OnceLock::new();

/// The client, created on first use over the StreamExecutor platform.
fn handles() -> Result<&'static Handles, Error> {
    if let Some(handles) = HANDLES.get() {
        return Ok(handles);
    }
    let platform = crate::abi::stream_executor::platform()
        .filter(|_| !crate::abi::stream_executor::is_inert())
        .ok_or_else(|| Error::Unimplemented("the WASM PJRT client needs tfwasm's StreamExecutor platform, which this copy of the library did not register".into()))?;
    Ok(HANDLES.get_or_init(|| {
        let handles: &'static mut Handles = Box::leak(Box::new(Handles {
            client: Client::new(platform),
            devices: Vec::new(),
            memories: Vec::new(),
            device_memory: Vec::new(),
            memory_device: Vec::new(),
        }));
        for device in handles.client.devices() {
            let device_ptr = ptr::from_ref(device).cast_mut().cast::<PJRT_Device>();
            let memory_ptr = ptr::from_ref(device.memory()).cast_mut().cast::<PJRT_Memory>();
            handles.devices.push(device_ptr);
            handles.memories.push(memory_ptr);
            handles.device_memory.push([memory_ptr]);
            handles.memory_device.push([device_ptr]);
        }
        handles
    }))
}

fn client_of(client: *mut PJRT_Client) -> Result<&'static Handles, Error> {
    let handles = handles()?;
    if !ptr::eq(client.cast_const().cast::<Handles>(), handles) {
        return Err(Error::InvalidArgument(format!("{client:?} is not the WASM PJRT client")));
    }
    Ok(handles)
}

/// The index of our device behind `device`.
fn device_index(device: *mut PJRT_Device) -> Result<usize, Error> {
    handles()?
        .devices
        .iter()
        .position(|&d| d == device)
        .ok_or_else(|| Error::InvalidArgument(format!("{device:?} is not a device of the WASM PJRT client")))
}

fn device_of(device: *mut PJRT_Device) -> Result<&'static PjrtDevice, Error> {
    Ok(&handles()?.client.devices()[device_index(device)?])
}

fn memory_index(memory: *mut PJRT_Memory) -> Result<usize, Error> {
    handles()?
        .memories
        .iter()
        .position(|&m| m == memory)
        .ok_or_else(|| Error::InvalidArgument(format!("{memory:?} is not a memory of the WASM PJRT client")))
}

fn memory_of(memory: *mut PJRT_Memory) -> Result<&'static PjrtMemory, Error> {
    Ok(handles()?.client.devices()[memory_index(memory)?].memory())
}

fn description_of(description: *mut PJRT_DeviceDescription) -> Result<&'static DeviceDescription, Error> {
    handles()?
        .client
        .devices()
        .iter()
        .map(PjrtDevice::description)
        .find(|d| ptr::eq(*d, description.cast_const().cast()))
        .ok_or_else(|| Error::InvalidArgument(format!("{description:?} is not a WASM device description")))
}

/// The device a buffer goes to: `device`, else the device of `memory`.
fn target_device(device: *mut PJRT_Device, memory: *mut PJRT_Memory) -> Result<&'static PjrtDevice, Error> {
    if !device.is_null() {
        return device_of(device);
    }
    if !memory.is_null() {
        return Ok(&handles()?.client.devices()[memory_index(memory)?]);
    }
    Err(Error::InvalidArgument("neither a device nor a memory given".into()))
}

/// # Safety
/// `buffer` is null or a live buffer this module handed out.
unsafe fn buffer_of<'a>(buffer: *mut PJRT_Buffer) -> Result<&'a Buffer, Error> {
    // SAFETY: per the contract.
    unsafe { buffer.cast::<Buffer>().as_ref() }.ok_or_else(|| Error::InvalidArgument("the buffer is null".into()))
}

fn buffer_into_raw(buffer: Buffer) -> *mut PJRT_Buffer {
    Box::into_raw(Box::new(buffer)).cast()
}

/// What a `PJRT_LoadedExecutable*` or `PJRT_Executable*` points at: the
/// compiled module, and its output types and dimensions as PJRT lists them.
struct ExecutableHandle {
    executable: Arc<LoadedExecutable>,
    output_types: Vec<PJRT_Buffer_Type>,
    output_dims: Vec<i64>,
    output_dim_sizes: Vec<usize>,
}

impl ExecutableHandle {
    fn new(executable: Arc<LoadedExecutable>) -> ExecutableHandle {
        let outputs = executable.outputs();
        ExecutableHandle {
            output_types: outputs.iter().map(|o| buffer_type(o.ty)).collect(),
            output_dims: outputs.iter().flat_map(|o| o.dims.iter().map(|&d| d as i64)).collect(),
            output_dim_sizes: outputs.iter().map(|o| o.dims.len()).collect(),
            executable,
        }
    }

    fn into_raw<T>(self) -> *mut T {
        Box::into_raw(Box::new(self)).cast()
    }

    /// # Safety
    /// `executable` is null or a live handle this module handed out.
    unsafe fn of<'a, T>(executable: *mut T) -> Result<&'a ExecutableHandle, Error> {
        // SAFETY: per the contract.
        unsafe { executable.cast::<ExecutableHandle>().as_ref() }
            .ok_or_else(|| Error::InvalidArgument("the executable is null".into()))
    }

    /// # Safety
    /// `executable` is null or a live handle this module handed out, not
    /// used again.
    unsafe fn destroy<T>(executable: *mut T) {
        if !executable.is_null() {
            // SAFETY: per the contract.
            drop(unsafe { Box::from_raw(executable.cast::<ExecutableHandle>()) });
        }
    }
}

// ------------------------------------------------------------------- values

fn element_type(ty: PJRT_Buffer_Type) -> Result<ElementType, Error> {
    Ok(match ty {
        PJRT_Buffer_Type_PRED => ElementType::Pred,
        PJRT_Buffer_Type_U8 => ElementType::U8,
        PJRT_Buffer_Type_S32 => ElementType::S32,
        PJRT_Buffer_Type_S64 => ElementType::S64,
        PJRT_Buffer_Type_U64 => ElementType::U64,
        PJRT_Buffer_Type_F16 => ElementType::F16,
        PJRT_Buffer_Type_BF16 => ElementType::BF16,
        PJRT_Buffer_Type_F32 => ElementType::F32,
        PJRT_Buffer_Type_F64 => ElementType::F64,
        other => {
            return Err(Error::Unimplemented(format!(
                "PJRT element type {other} is not supported by the WASM device (pred, u8, s32, s64, u64, f16, bf16, \
                 f32, f64 are)"
            )))
        }
    })
}

fn buffer_type(ty: ElementType) -> PJRT_Buffer_Type {
    match ty {
        ElementType::Pred => PJRT_Buffer_Type_PRED,
        ElementType::U8 => PJRT_Buffer_Type_U8,
        ElementType::S32 => PJRT_Buffer_Type_S32,
        ElementType::S64 => PJRT_Buffer_Type_S64,
        ElementType::U64 => PJRT_Buffer_Type_U64,
        ElementType::F16 => PJRT_Buffer_Type_F16,
        ElementType::BF16 => PJRT_Buffer_Type_BF16,
        ElementType::F32 => PJRT_Buffer_Type_F32,
        ElementType::F64 => PJRT_Buffer_Type_F64,
    }
}

/// `count` items at `items` (null when `count` is 0).
///
/// # Safety
/// A non-null `items` points at `count` initialised items alive for `'a`.
unsafe fn list<'a, T>(items: *const T, count: usize, what: &str) -> Result<&'a [T], Error> {
    if count == 0 {
        return Ok(&[]);
    }
    if items.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: {count} items at a null pointer")));
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(items, count) })
}

/// The array an element type and `dims` describe.
fn array_shape(ty: PJRT_Buffer_Type, dims: &[i64]) -> Result<ArrayShape, Error> {
    let dims = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::InvalidArgument(format!("a negative dimension in {dims:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ArrayShape::new(element_type(ty)?, &dims))
}

/// Refuses a layout that is not XLA's default (row-major, untiled, dense).
///
/// # Safety
/// `layout` is null or points at a layout TensorFlow owns for the call.
unsafe fn check_default_layout(layout: *const PJRT_Buffer_MemoryLayout, shape: &ArrayShape) -> Result<(), Error> {
    // SAFETY: per the contract.
    let Some(layout) = (unsafe { layout.as_ref() }) else { return Ok(()) };
    let rank = shape.dims.len();
    let dense = match layout.type_ {
        PJRT_Buffer_MemoryLayout_Type_Tiled => {
            // SAFETY: the type says the tiled member is the live one.
            let tiled = unsafe { layout.layout.tiled };
            // SAFETY: TensorFlow's list of `minor_to_major_size` entries.
            let order = unsafe { list(tiled.minor_to_major, tiled.minor_to_major_size, "minor_to_major") }?;
            tiled.num_tiles == 0 && order.iter().rev().copied().eq(0..rank as i64)
        }
        PJRT_Buffer_MemoryLayout_Type_Strides => {
            // SAFETY: the type says the strides member is the live one.
            let strides = unsafe { layout.layout.strides };
            // SAFETY: TensorFlow's list of `num_byte_strides` entries.
            let strides = unsafe { list(strides.byte_strides, strides.num_byte_strides, "byte_strides") }?;
            dense_strides(shape) == strides
        }
        _ => false,
    };
    if dense {
        Ok(())
    } else {
        Err(Error::Unimplemented(format!(
            "a {shape} buffer with a non-default layout: the WASM device keeps arrays row-major"
        )))
    }
}

fn dense_strides(shape: &ArrayShape) -> Vec<i64> {
    let mut strides = vec![0i64; shape.dims.len()];
    let mut stride = shape.ty.size() as i64;
    for (s, &d) in strides.iter_mut().zip(&shape.dims).rev() {
        *s = stride;
        stride *= d as i64;
    }
    strides
}

/// A string the client owns, as pointer and length.
fn out_str(text: &'static str) -> (*const c_char, usize) {
    (text.as_ptr().cast(), text.len())
}

// ------------------------------------------------------------------- events

/// The one event handed out: execution and copies finish before their entry
/// returns, so every event is ready and has no error.
static READY: u8 = 0;

fn ready_event() -> *mut PJRT_Event {
    ptr::from_ref(&READY).cast_mut().cast()
}

pub(super) unsafe extern "C" fn event_destroy(args: *mut PJRT_Event_Destroy_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Event_Destroy", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        unsafe { args_mut(args, "PJRT_Event_Destroy") }?;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn event_is_ready(args: *mut PJRT_Event_IsReady_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Event_IsReady", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        unsafe { args_mut(args, "PJRT_Event_IsReady") }?.is_ready = true;
        Ok(())
    })
}

/// Ready without an error: the entry answers "no error" (null).
pub(super) unsafe extern "C" fn event_error(args: *mut PJRT_Event_Error_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Event_Error", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        unsafe { args_mut(args, "PJRT_Event_Error") }?;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn event_await(args: *mut PJRT_Event_Await_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Event_Await", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        unsafe { args_mut(args, "PJRT_Event_Await") }?;
        Ok(())
    })
}

/// Runs the callback now: the event is already ready.
pub(super) unsafe extern "C" fn event_on_ready(args: *mut PJRT_Event_OnReady_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Event_OnReady", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Event_OnReady") }?;
        let callback = args.callback.ok_or_else(|| Error::InvalidArgument("PJRT_Event_OnReady: no callback".into()))?;
        // SAFETY: TensorFlow's callback with its own argument, called once,
        // with no error (which it would own).
        unsafe { callback(ptr::null_mut(), args.user_arg) };
        Ok(())
    })
}

// ------------------------------------------------------------------- client

pub(super) unsafe extern "C" fn client_create(args: *mut PJRT_Client_Create_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_Create", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_Create") }?;
        // Options (none from TensorFlow) change nothing for this client.
        args.client = ptr::from_ref(handles()?).cast_mut().cast();
        Ok(())
    })
}

/// The client lives for the process (TensorFlow keeps it until exit).
pub(super) unsafe extern "C" fn client_destroy(args: *mut PJRT_Client_Destroy_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_Destroy", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_Destroy") }?;
        client_of(args.client)?;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_platform_name(args: *mut PJRT_Client_PlatformName_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_PlatformName", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_PlatformName") }?;
        client_of(args.client)?;
        (args.platform_name, args.platform_name_size) = out_str(PLATFORM_NAME);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_process_index(args: *mut PJRT_Client_ProcessIndex_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_ProcessIndex", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_ProcessIndex") }?;
        client_of(args.client)?;
        args.process_index = 0;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_platform_version(
    args: *mut PJRT_Client_PlatformVersion_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_PlatformVersion", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_PlatformVersion") }?;
        (args.platform_version, args.platform_version_size) =
            out_str(client_of(args.client)?.client.platform_version());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_devices(args: *mut PJRT_Client_Devices_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_Devices", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_Devices") }?;
        let handles = client_of(args.client)?;
        (args.devices, args.num_devices) = (handles.devices.as_ptr(), handles.devices.len());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_addressable_devices(
    args: *mut PJRT_Client_AddressableDevices_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_AddressableDevices", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_AddressableDevices") }?;
        let handles = client_of(args.client)?;
        (args.addressable_devices, args.num_addressable_devices) = (handles.devices.as_ptr(), handles.devices.len());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_lookup_device(args: *mut PJRT_Client_LookupDevice_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_LookupDevice", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_LookupDevice") }?;
        let handles = client_of(args.client)?;
        handles.client.device(args.id.into())?;
        args.device = handles.devices[args.id as usize];
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_lookup_addressable_device(
    args: *mut PJRT_Client_LookupAddressableDevice_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_LookupAddressableDevice", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_LookupAddressableDevice") }?;
        let handles = client_of(args.client)?;
        handles.client.device(args.local_hardware_id.into())?;
        args.addressable_device = handles.devices[args.local_hardware_id as usize];
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_addressable_memories(
    args: *mut PJRT_Client_AddressableMemories_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_AddressableMemories", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_AddressableMemories") }?;
        let handles = client_of(args.client)?;
        (args.addressable_memories, args.num_addressable_memories) =
            (handles.memories.as_ptr(), handles.memories.len());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_compile(args: *mut PJRT_Client_Compile_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_Compile", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_Compile") }?;
        let handles = client_of(args.client)?;
        // SAFETY: TensorFlow's program for the call; checked for null and size.
        let program = unsafe { args_mut(args.program.cast_mut(), "PJRT_Client_Compile (program)") }?;
        // SAFETY: TensorFlow's format string and code bytes, alive for the call.
        let format = unsafe { list(program.format.cast::<u8>(), program.format_size, "program format") }?;
        // SAFETY: as above.
        let code = unsafe { list(program.code.cast_const().cast::<u8>(), program.code_size, "program code") }?;
        // Compile options are not read in stage 1: TensorFlow asks for one
        // replica, one partition and default layouts, which is all tfwasm runs.
        let executable = handles.client.compile(&String::from_utf8_lossy(format), code)?;
        args.executable = ExecutableHandle::new(Arc::new(executable)).into_raw();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn client_buffer_from_host_buffer(
    args: *mut PJRT_Client_BufferFromHostBuffer_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_BufferFromHostBuffer", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_BufferFromHostBuffer") }?;
        client_of(args.client)?;
        let device = target_device(args.device, args.memory)?;
        // SAFETY: TensorFlow's `num_dims` dimensions, alive for the call.
        let shape = array_shape(args.type_, unsafe { list(args.dims, args.num_dims, "dims") }?)?;
        // SAFETY: TensorFlow's `num_byte_strides` strides, alive for the call.
        let strides = unsafe { list(args.byte_strides, args.num_byte_strides, "byte_strides") }?;
        if !strides.is_empty() && strides != dense_strides(&shape) {
            return Err(Error::Unimplemented(format!(
                "a strided {shape} host buffer: the WASM device copies dense arrays"
            )));
        }
        // SAFETY: TensorFlow's layout for the call, or null.
        unsafe { check_default_layout(args.device_layout, &shape) }?;
        // SAFETY: TensorFlow's host data of the array's size, alive (at
        // least) for the call, which copies it before returning.
        let data = unsafe { list(args.data.cast::<u8>(), shape.bytes(), "host data") }?;
        let mut buffer = device.allocate(shape)?;
        buffer.copy_from_host(data)?;
        args.done_with_host_buffer = ready_event();
        args.buffer = buffer_into_raw(buffer);
        Ok(())
    })
}

/// A buffer over a TensorFlow tensor's device memory (how TensorFlow hands
/// an SE tensor to a launch), released through the tensor's callback.
pub(super) unsafe extern "C" fn client_create_view_of_device_buffer(
    args: *mut PJRT_Client_CreateViewOfDeviceBuffer_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Client_CreateViewOfDeviceBuffer", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Client_CreateViewOfDeviceBuffer") }?;
        client_of(args.client)?;
        let device = target_device(args.device, args.memory)?;
        // SAFETY: TensorFlow's `num_dims` dimensions, alive for the call.
        let shape = array_shape(args.element_type, unsafe { list(args.dims, args.num_dims, "dims") }?)?;
        // SAFETY: TensorFlow's layout for the call, or null.
        unsafe { check_default_layout(args.layout, &shape) }?;
        let release = args.on_delete_callback.map(|callback| {
            let release = Release {
                callback,
                address: args.device_buffer_ptr as usize,
                arg: args.on_delete_callback_arg as usize,
            };
            Box::new(move || release.run()) as Box<dyn FnOnce() + Send>
        });
        let buffer = device.view(args.device_buffer_ptr as usize, shape, release)?;
        args.buffer = buffer_into_raw(buffer);
        Ok(())
    })
}

/// TensorFlow's `on_delete_callback` of a view, with its arguments.
struct Release {
    callback: unsafe extern "C" fn(device_buffer_ptr: *mut c_void, user_arg: *mut c_void),
    address: usize,
    arg: usize,
}

impl Release {
    fn run(self) {
        // SAFETY: TensorFlow's callback with the pointer and argument it gave
        // with it, called exactly once (the buffer's drop consumes it).
        unsafe { (self.callback)(self.address as *mut c_void, self.arg as *mut c_void) };
    }
}

// ------------------------------------------------ devices, descriptions, memories

pub(super) unsafe extern "C" fn device_description_id(args: *mut PJRT_DeviceDescription_Id_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_DeviceDescription_Id", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_DeviceDescription_Id") }?;
        args.id = description_of(args.device_description)?.id as i32;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_description_process_index(
    args: *mut PJRT_DeviceDescription_ProcessIndex_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_DeviceDescription_ProcessIndex", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_DeviceDescription_ProcessIndex") }?;
        description_of(args.device_description)?;
        args.process_index = 0;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_description_attributes(
    args: *mut PJRT_DeviceDescription_Attributes_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_DeviceDescription_Attributes", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_DeviceDescription_Attributes") }?;
        description_of(args.device_description)?;
        (args.attributes, args.num_attributes) = (ptr::null(), 0);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_description_kind(
    args: *mut PJRT_DeviceDescription_Kind_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_DeviceDescription_Kind", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_DeviceDescription_Kind") }?;
        (args.device_kind, args.device_kind_size) = out_str(&description_of(args.device_description)?.kind);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_description_debug_string(
    args: *mut PJRT_DeviceDescription_DebugString_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_DeviceDescription_DebugString", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_DeviceDescription_DebugString") }?;
        (args.debug_string, args.debug_string_size) = out_str(&description_of(args.device_description)?.debug_string);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_description_to_string(
    args: *mut PJRT_DeviceDescription_ToString_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_DeviceDescription_ToString", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_DeviceDescription_ToString") }?;
        (args.to_string, args.to_string_size) = out_str(&description_of(args.device_description)?.to_string);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_get_description(args: *mut PJRT_Device_GetDescription_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Device_GetDescription", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Device_GetDescription") }?;
        args.device_description = ptr::from_ref(device_of(args.device)?.description()).cast_mut().cast();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_is_addressable(args: *mut PJRT_Device_IsAddressable_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Device_IsAddressable", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Device_IsAddressable") }?;
        device_of(args.device)?;
        args.is_addressable = true;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_local_hardware_id(
    args: *mut PJRT_Device_LocalHardwareId_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Device_LocalHardwareId", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Device_LocalHardwareId") }?;
        args.local_hardware_id = device_of(args.device)?.id() as i32;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_addressable_memories(
    args: *mut PJRT_Device_AddressableMemories_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Device_AddressableMemories", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Device_AddressableMemories") }?;
        let memories = &handles()?.device_memory[device_index(args.device)?];
        (args.memories, args.num_memories) = (memories.as_ptr(), memories.len());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn device_default_memory(args: *mut PJRT_Device_DefaultMemory_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Device_DefaultMemory", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Device_DefaultMemory") }?;
        args.memory = handles()?.memories[device_index(args.device)?];
        Ok(())
    })
}

pub(super) unsafe extern "C" fn memory_id(args: *mut PJRT_Memory_Id_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Memory_Id", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Memory_Id") }?;
        args.id = memory_of(args.memory)?.id as i32;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn memory_kind(args: *mut PJRT_Memory_Kind_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Memory_Kind", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Memory_Kind") }?;
        (args.kind, args.kind_size) = out_str(&memory_of(args.memory)?.kind);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn memory_kind_id(args: *mut PJRT_Memory_Kind_Id_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Memory_Kind_Id", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Memory_Kind_Id") }?;
        memory_of(args.memory)?;
        args.kind_id = 0;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn memory_debug_string(args: *mut PJRT_Memory_DebugString_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Memory_DebugString", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Memory_DebugString") }?;
        (args.debug_string, args.debug_string_size) = out_str(&memory_of(args.memory)?.debug_string);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn memory_to_string(args: *mut PJRT_Memory_ToString_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Memory_ToString", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Memory_ToString") }?;
        (args.to_string, args.to_string_size) = out_str(&memory_of(args.memory)?.to_string);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn memory_addressable_by_devices(
    args: *mut PJRT_Memory_AddressableByDevices_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Memory_AddressableByDevices", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Memory_AddressableByDevices") }?;
        let devices = &handles()?.memory_device[memory_index(args.memory)?];
        (args.devices, args.num_devices) = (devices.as_ptr(), devices.len());
        Ok(())
    })
}

// -------------------------------------------------------------- executables

pub(super) unsafe extern "C" fn executable_destroy(args: *mut PJRT_Executable_Destroy_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_Destroy", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_Destroy") }?;
        // SAFETY: one of our handles, destroyed once by TensorFlow.
        unsafe { ExecutableHandle::destroy(args.executable) };
        Ok(())
    })
}

pub(super) unsafe extern "C" fn loaded_executable_destroy(
    args: *mut PJRT_LoadedExecutable_Destroy_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_Destroy", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_Destroy") }?;
        // SAFETY: one of our handles, destroyed once by TensorFlow.
        unsafe { ExecutableHandle::destroy(args.executable) };
        Ok(())
    })
}

pub(super) unsafe extern "C" fn loaded_executable_get_executable(
    args: *mut PJRT_LoadedExecutable_GetExecutable_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_GetExecutable", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_GetExecutable") }?;
        // SAFETY: one of our live handles.
        let loaded = unsafe { ExecutableHandle::of(args.loaded_executable) }?;
        args.executable = ExecutableHandle::new(Arc::clone(&loaded.executable)).into_raw();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn loaded_executable_addressable_devices(
    args: *mut PJRT_LoadedExecutable_AddressableDevices_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_AddressableDevices", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_AddressableDevices") }?;
        // SAFETY: one of our live handles.
        unsafe { ExecutableHandle::of(args.executable) }?;
        let handles = handles()?;
        (args.addressable_devices, args.num_addressable_devices) = (handles.devices.as_ptr(), handles.devices.len());
        Ok(())
    })
}

/// One replica, one computation, on device 0, serialized: TensorFlow
/// aborts if this entry fails.
pub(super) unsafe extern "C" fn loaded_executable_get_device_assignment(
    args: *mut PJRT_LoadedExecutable_GetDeviceAssignment_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_GetDeviceAssignment", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_GetDeviceAssignment") }?;
        use tfwasm_proto::hlo::device_assignment_proto::ComputationDevice;
        let assignment = tfwasm_proto::hlo::DeviceAssignmentProto {
            replica_count: 1,
            computation_count: 1,
            computation_devices: vec![ComputationDevice { replica_device_ids: vec![0] }],
        };
        let bytes = Box::new(assignment.encode_to_vec());
        (args.serialized_bytes, args.serialized_bytes_size) = (bytes.as_ptr().cast(), bytes.len());
        args.serialized_device_assignment = Box::into_raw(bytes).cast();
        args.serialized_device_assignment_deleter = Some(device_assignment_delete);
        Ok(())
    })
}

unsafe extern "C" fn device_assignment_delete(assignment: *mut PJRT_DeviceAssignmentSerialized) {
    crate::abi::ffi_guard_or((), "PJRT device assignment deleter", || {
        if !assignment.is_null() {
            // SAFETY: the box handed out above, deleted once by TensorFlow.
            drop(unsafe { Box::from_raw(assignment.cast::<Vec<u8>>()) });
        }
        Ok(())
    })
}

pub(super) unsafe extern "C" fn loaded_executable_delete(
    args: *mut PJRT_LoadedExecutable_Delete_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_Delete", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_Delete") }?;
        // SAFETY: one of our live handles.
        unsafe { ExecutableHandle::of(args.executable) }?.executable.mark_deleted();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn loaded_executable_is_deleted(
    args: *mut PJRT_LoadedExecutable_IsDeleted_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_IsDeleted", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_IsDeleted") }?;
        // SAFETY: one of our live handles.
        args.is_deleted = unsafe { ExecutableHandle::of(args.executable) }?.executable.is_deleted();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_name(args: *mut PJRT_Executable_Name_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_Name", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_Name") }?;
        // SAFETY: one of our live handles; the name lives as long as it.
        let name = unsafe { ExecutableHandle::of(args.executable) }?.executable.name();
        (args.executable_name, args.executable_name_size) = (name.as_ptr().cast(), name.len());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_num_replicas(
    args: *mut PJRT_Executable_NumReplicas_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_NumReplicas", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_NumReplicas") }?;
        // SAFETY: one of our live handles.
        unsafe { ExecutableHandle::of(args.executable) }?;
        args.num_replicas = 1;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_num_partitions(
    args: *mut PJRT_Executable_NumPartitions_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_NumPartitions", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_NumPartitions") }?;
        // SAFETY: one of our live handles.
        unsafe { ExecutableHandle::of(args.executable) }?;
        args.num_partitions = 1;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_num_outputs(args: *mut PJRT_Executable_NumOutputs_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_NumOutputs", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_NumOutputs") }?;
        // SAFETY: one of our live handles.
        args.num_outputs = unsafe { ExecutableHandle::of(args.executable) }?.executable.num_outputs();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_output_element_types(
    args: *mut PJRT_Executable_OutputElementTypes_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_OutputElementTypes", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_OutputElementTypes") }?;
        // SAFETY: one of our live handles; the list lives as long as it.
        let handle = unsafe { ExecutableHandle::of(args.executable) }?;
        (args.output_types, args.num_output_types) =
            (handle.output_types.as_ptr().cast_mut(), handle.output_types.len());
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_output_dimensions(
    args: *mut PJRT_Executable_OutputDimensions_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Executable_OutputDimensions", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Executable_OutputDimensions") }?;
        // SAFETY: one of our live handles; the lists live as long as it.
        let handle = unsafe { ExecutableHandle::of(args.executable) }?;
        args.num_outputs = handle.output_dim_sizes.len();
        (args.dims, args.dim_sizes) = (handle.output_dims.as_ptr(), handle.output_dim_sizes.as_ptr());
        Ok(())
    })
}

/// Runs the executable on one device, synchronously; outputs are fresh
/// buffers in the device region and the completion event is ready.
pub(super) unsafe extern "C" fn loaded_executable_execute(
    args: *mut PJRT_LoadedExecutable_Execute_Args,
) -> *mut PJRT_Error {
    pjrt_guard("PJRT_LoadedExecutable_Execute", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_LoadedExecutable_Execute") }?;
        // SAFETY: one of our live handles.
        let handle = unsafe { ExecutableHandle::of(args.executable) }?;
        if args.num_devices != 1 {
            return Err(Error::Unimplemented(format!(
                "PJRT_LoadedExecutable_Execute on {} devices at once: the WASM device runs one",
                args.num_devices
            )));
        }
        let device = if args.execute_device.is_null() {
            &handles()?.client.devices()[0]
        } else {
            device_of(args.execute_device)?
        };
        // SAFETY: TensorFlow's one argument list of `num_args` buffers, ours.
        let list_of_args = unsafe { list(args.argument_lists, 1, "argument_lists") }?[0];
        // SAFETY: as above.
        let raw_arguments = unsafe { list(list_of_args, args.num_args, "arguments") }?;
        let arguments = raw_arguments
            .iter()
            // SAFETY: each is a live buffer of ours that TensorFlow keeps for the call.
            .map(|&b| unsafe { buffer_of(b) })
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: TensorFlow's one output list, with room for every output.
        let output_list = unsafe { list(args.output_lists, 1, "output_lists") }?[0];
        if output_list.is_null() {
            return Err(Error::InvalidArgument("PJRT_LoadedExecutable_Execute: a null output list".into()));
        }
        let outputs = handle.executable.execute(device, &arguments)?;
        for (i, output) in outputs.into_iter().enumerate() {
            // SAFETY: TensorFlow sized the list for NumOutputs entries.
            unsafe { output_list.add(i).write(buffer_into_raw(output)) };
        }
        if !args.device_complete_events.is_null() {
            // SAFETY: TensorFlow's list of one event per device.
            unsafe { args.device_complete_events.write(ready_event()) };
        }
        Ok(())
    })
}

// ------------------------------------------------------------------ buffers

pub(super) unsafe extern "C" fn buffer_destroy(args: *mut PJRT_Buffer_Destroy_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Buffer_Destroy", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Buffer_Destroy") }?;
        if !args.buffer.is_null() {
            // SAFETY: a buffer of ours, destroyed once by TensorFlow; its
            // drop releases a view through TensorFlow's callback or frees
            // an owned block into the device region.
            drop(unsafe { Box::from_raw(args.buffer.cast::<Buffer>()) });
        }
        Ok(())
    })
}

/// The body of a buffer query: the buffer, then `answer`.
macro_rules! buffer_entry {
    ($name:ident, $args:ty, $entry:literal, |$a:ident, $b:ident| $body:expr) => {
        pub(super) unsafe extern "C" fn $name(args: *mut $args) -> *mut PJRT_Error {
            pjrt_guard($entry, || {
                // SAFETY: TensorFlow passes its own args struct for the call.
                let $a = unsafe { args_mut(args, $entry) }?;
                // SAFETY: a live buffer of ours (TensorFlow's handle).
                let $b = unsafe { buffer_of($a.buffer) }?;
                $body;
                Ok(())
            })
        }
    };
}

buffer_entry!(buffer_element_type, PJRT_Buffer_ElementType_Args, "PJRT_Buffer_ElementType", |a, b| {
    a.type_ = buffer_type(b.element_type())
});
buffer_entry!(buffer_dimensions, PJRT_Buffer_Dimensions_Args, "PJRT_Buffer_Dimensions", |a, b| {
    (a.dims, a.num_dims) = (b.dims().as_ptr(), b.dims().len())
});
buffer_entry!(
    buffer_unpadded_dimensions,
    PJRT_Buffer_UnpaddedDimensions_Args,
    "PJRT_Buffer_UnpaddedDimensions",
    |a, b| { (a.unpadded_dims, a.num_dims) = (b.dims().as_ptr(), b.dims().len()) }
);
buffer_entry!(
    buffer_dynamic_dimension_indices,
    PJRT_Buffer_DynamicDimensionIndices_Args,
    "PJRT_Buffer_DynamicDimensionIndices",
    |a, _b| (a.dynamic_dim_indices, a.num_dynamic_dims) = (ptr::null(), 0)
);
buffer_entry!(
    buffer_on_device_size_in_bytes,
    PJRT_Buffer_OnDeviceSizeInBytes_Args,
    "PJRT_Buffer_OnDeviceSizeInBytes",
    |a, b| { a.on_device_size_in_bytes = b.size_in_bytes() }
);
buffer_entry!(buffer_device, PJRT_Buffer_Device_Args, "PJRT_Buffer_Device", |a, b| {
    a.device = handles()?.devices[b.device_id() as usize]
});
buffer_entry!(buffer_memory, PJRT_Buffer_Memory_Args, "PJRT_Buffer_Memory", |a, b| {
    a.memory = handles()?.memories[b.device_id() as usize]
});
buffer_entry!(buffer_delete, PJRT_Buffer_Delete_Args, "PJRT_Buffer_Delete", |_a, b| b.mark_deleted());
buffer_entry!(buffer_is_deleted, PJRT_Buffer_IsDeleted_Args, "PJRT_Buffer_IsDeleted", |a, b| {
    a.is_deleted = b.is_deleted()
});
buffer_entry!(buffer_is_on_cpu, PJRT_Buffer_IsOnCpu_Args, "PJRT_Buffer_IsOnCpu", |a, _b| a.is_on_cpu = false);
buffer_entry!(buffer_ready_event, PJRT_Buffer_ReadyEvent_Args, "PJRT_Buffer_ReadyEvent", |a, _b| {
    a.event = ready_event()
});
buffer_entry!(buffer_unsafe_pointer, PJRT_Buffer_UnsafePointer_Args, "PJRT_Buffer_UnsafePointer", |a, b| {
    a.buffer_pointer = b.address()
});
buffer_entry!(
    buffer_increase_external_reference_count,
    PJRT_Buffer_IncreaseExternalReferenceCount_Args,
    "PJRT_Buffer_IncreaseExternalReferenceCount",
    |_a, b| b.add_external_reference(1)?
);
buffer_entry!(
    buffer_decrease_external_reference_count,
    PJRT_Buffer_DecreaseExternalReferenceCount_Args,
    "PJRT_Buffer_DecreaseExternalReferenceCount",
    |_a, b| b.add_external_reference(-1)?
);
buffer_entry!(
    buffer_opaque_device_memory_data_pointer,
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args,
    "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
    |a, b| a.device_memory_ptr = b.address() as *mut c_void
);

/// A size query (`dst` null) or a synchronous copy to host memory.
pub(super) unsafe extern "C" fn buffer_to_host_buffer(args: *mut PJRT_Buffer_ToHostBuffer_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Buffer_ToHostBuffer", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Buffer_ToHostBuffer") }?;
        // SAFETY: a live buffer of ours (TensorFlow's handle).
        let buffer = unsafe { buffer_of(args.src) }?;
        // SAFETY: TensorFlow's layout for the call, or null.
        unsafe { check_default_layout(args.host_layout, buffer.shape()) }?;
        if args.dst.is_null() {
            args.dst_size = buffer.size_in_bytes();
            return Ok(());
        }
        if args.dst_size < buffer.size_in_bytes() {
            return Err(Error::InvalidArgument(format!(
                "PJRT_Buffer_ToHostBuffer: {} bytes of room for {} bytes",
                args.dst_size,
                buffer.size_in_bytes()
            )));
        }
        // SAFETY: TensorFlow's host memory of at least the buffer's size
        // (checked), writable for the call.
        let dst = unsafe { std::slice::from_raw_parts_mut(args.dst.cast::<u8>(), buffer.size_in_bytes()) };
        buffer.copy_to_host(dst)?;
        args.event = ready_event();
        Ok(())
    })
}
