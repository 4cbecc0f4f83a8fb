//! The PJRT C API TensorFlow's XLA path calls (issue 45): the function
//! table and the errors its entries return.
//!
//! Every entry takes one `*_Args` struct and returns null on success or a
//! `PJRT_Error` that the caller later hands to `PJRT_Error_Destroy`. An
//! entry checks the args' null and `struct_size` ([`args_mut`]), calls one
//! safe function returning `Result<(), Error>`, and reports through
//! [`pjrt_guard`], which turns an [`Error`] (with its status code) or a
//! panic into a [`PjrtErrorBox`]. Every slot of the table is filled: the
//! entries tfwasm does not serve answer `UNIMPLEMENTED` naming themselves,
//! so TensorFlow gets an error, never a null function or an abort.
//!
//! Always served: the error entries and `PJRT_Plugin_Initialize` /
//! `PJRT_Plugin_Attributes`. With the cargo feature `pjrt` (issue 45, stage
//! 1) also the client, devices, memories, compile, execute, buffers and
//! events of [`crate::pjrt`] (`served`), and the library exports
//! `GetPjrtApi` (here) and `TFNPD_InitPlugin` (`abi/npd.rs`); without it
//! nothing is exported, since those symbols change what TensorFlow's loader
//! does with this library.
// Without the feature, reachable only from the unit tests.
#![cfg_attr(not(any(test, feature = "pjrt")), allow(dead_code))]

#[cfg(feature = "pjrt")]
mod served;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use super::ffi::pjrt::*;
use super::{ffi_guard_or, panic_message};
use crate::error::Error;

/// What a `*mut PJRT_Error` from this plugin points at. TensorFlow reads it
/// only through `PJRT_Error_GetCode` / `PJRT_Error_Message` and frees it
/// with `PJRT_Error_Destroy`.
#[derive(Debug)]
pub(crate) struct PjrtErrorBox {
    code: PJRT_Error_Code,
    message: String,
}

impl PjrtErrorBox {
    pub(crate) fn new(code: PJRT_Error_Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    pub(crate) fn code(&self) -> PJRT_Error_Code {
        self.code
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// Hands the error to the caller, who owns it until `PJRT_Error_Destroy`.
    pub(crate) fn into_raw(self) -> *mut PJRT_Error {
        Box::into_raw(Box::new(self)).cast()
    }

    /// # Safety
    /// `error` is null or came from [`PjrtErrorBox::into_raw`] and has not
    /// been destroyed; it stays alive for `'a`.
    unsafe fn from_ptr<'a>(error: *const PJRT_Error) -> Option<&'a PjrtErrorBox> {
        // SAFETY: by the contract, a non-null pointer is a live PjrtErrorBox.
        unsafe { error.cast::<PjrtErrorBox>().as_ref() }
    }
}

/// The status code of our errors is already PJRT's: both use the canonical
/// (absl) numbering, checked by the layout test against both headers.
impl From<Error> for PjrtErrorBox {
    fn from(error: Error) -> Self {
        Self::new(error.tf_code(), error.to_string())
    }
}

/// Runs the body of a PJRT entry point: null on success, an owned
/// `PJRT_Error` for an error or a panic. No unwind leaves this function.
pub(crate) fn pjrt_guard(entry: &str, body: impl FnOnce() -> Result<(), Error>) -> *mut PJRT_Error {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ptr::null_mut(),
        Ok(Err(error)) => {
            tracing::debug!("{entry}: {error}");
            PjrtErrorBox::from(error).into_raw()
        }
        Err(panic) => {
            let message = format!("tfwasm: {entry}: internal error (panic): {}", panic_message(&panic));
            tracing::error!("{message}");
            PjrtErrorBox::new(PJRT_Error_Code_INTERNAL, message).into_raw()
        }
    }
}

/// The caller's arguments, once they are non-null and the caller's
/// `struct_size` covers every field this crate's mirror has. (A caller with
/// a newer, larger struct is fine: we read only our prefix.)
///
/// # Safety
/// `args` is null or points at a `T` the caller owns for the call, whose
/// first field is `struct_size` (true of every [`PjrtStruct`]).
unsafe fn args_mut<'a, T: PjrtStruct>(args: *mut T, entry: &str) -> Result<&'a mut T, Error> {
    if args.is_null() {
        return Err(Error::InvalidArgument(format!("{entry}: the arguments are null")));
    }
    // SAFETY: non-null, and every PJRT argument struct starts with its size.
    let size = unsafe { args.cast::<usize>().read() };
    if size < T::STRUCT_SIZE {
        return Err(Error::InvalidArgument(format!(
            "{entry}: the arguments are {size} bytes, tfwasm needs at least {} (PJRT API {PJRT_API_MAJOR}.{PJRT_API_MINOR}): \
             this TensorFlow's PJRT is older than the plugin's",
            T::STRUCT_SIZE
        )));
    }
    // SAFETY: the caller's struct covers all of `T` and is ours for the call.
    Ok(unsafe { &mut *args })
}

/// What an entry tfwasm does not serve answers.
fn unimplemented_entry(entry: &str) -> *mut PJRT_Error {
    pjrt_guard(entry, || {
        Err(Error::Unimplemented(format!(
            "the PJRT entry {entry} is not implemented by the WASM device's PJRT plugin; \
             run this function without XLA (jit_compile=False) or on another device"
        )))
    })
}

// ------------------------------------------------------------------ errors

unsafe extern "C" fn error_destroy(args: *mut PJRT_Error_Destroy_Args) {
    ffi_guard_or((), "PJRT_Error_Destroy", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Error_Destroy") }?;
        if !args.error.is_null() {
            // SAFETY: a non-null error handed to this entry came from
            // `PjrtErrorBox::into_raw` and is destroyed exactly once.
            drop(unsafe { Box::from_raw(args.error.cast::<PjrtErrorBox>()) });
        }
        Ok(())
    })
}

unsafe extern "C" fn error_message(args: *mut PJRT_Error_Message_Args) {
    ffi_guard_or((), "PJRT_Error_Message", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Error_Message") }?;
        // SAFETY: the error is one of ours and alive (the caller owns it).
        let error = unsafe { PjrtErrorBox::from_ptr(args.error) }
            .ok_or_else(|| Error::InvalidArgument("PJRT_Error_Message: the error is null".into()))?;
        // The text stays where it is until the error is destroyed.
        args.message = error.message().as_ptr().cast();
        args.message_size = error.message().len();
        Ok(())
    })
}

unsafe extern "C" fn error_get_code(args: *mut PJRT_Error_GetCode_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Error_GetCode", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Error_GetCode") }?;
        // SAFETY: the error is one of ours and alive (the caller owns it).
        let error = unsafe { PjrtErrorBox::from_ptr(args.error) }
            .ok_or_else(|| Error::InvalidArgument("PJRT_Error_GetCode: the error is null".into()))?;
        args.code = error.code();
        Ok(())
    })
}

// ------------------------------------------------------------------ plugin

/// Called once by TensorFlow's loader, right after it stores the table;
/// an error fails the library's load. Nothing to prepare yet: the device
/// state lives in the StreamExecutor platform.
unsafe extern "C" fn plugin_initialize(args: *mut PJRT_Plugin_Initialize_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Plugin_Initialize", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        unsafe { args_mut(args, "PJRT_Plugin_Initialize") }?;
        Ok(())
    })
}

/// No plugin attributes (TensorFlow's client asks when it is created).
unsafe extern "C" fn plugin_attributes(args: *mut PJRT_Plugin_Attributes_Args) -> *mut PJRT_Error {
    pjrt_guard("PJRT_Plugin_Attributes", || {
        // SAFETY: TensorFlow passes its own args struct for the call.
        let args = unsafe { args_mut(args, "PJRT_Plugin_Attributes") }?;
        args.attributes = ptr::null();
        args.num_attributes = 0;
        Ok(())
    })
}

// ------------------------------------------------------------------- table

/// One slot: the function we serve, or a stub that answers `UNIMPLEMENTED`
/// naming the slot (a function of its own per slot, typed as the slot).
/// `=>` serves the function only with the `pjrt` feature.
macro_rules! slot {
    ($entry:ident = $served:expr) => {
        $served
    };
    ($entry:ident => $served:expr) => {{
        #[cfg(feature = "pjrt")]
        let served: $entry = $served;
        #[cfg(not(feature = "pjrt"))]
        let served: $entry = slot!($entry);
        served
    }};
    ($entry:ident) => {{
        unsafe extern "C" fn unimplemented<A>(_args: *mut A) -> *mut PJRT_Error {
            unimplemented_entry(stringify!($entry))
        }
        unimplemented as $entry
    }};
}

/// The whole table, every slot named in header order: a slot left out does
/// not compile.
macro_rules! table {
    ($( $entry:ident $(= $served:expr)? $(=> $gated:expr)? ),+ $(,)?) => {
        PJRT_Api {
            struct_size: PJRT_Api_STRUCT_SIZE,
            extension_start: ptr::null_mut(),
            pjrt_api_version: PJRT_Api_Version {
                struct_size: PJRT_Api_Version_STRUCT_SIZE,
                extension_start: ptr::null_mut(),
                major_version: PJRT_API_MAJOR,
                minor_version: PJRT_API_MINOR,
            },
            $( $entry: Some(slot!($entry $(= $served)? $(=> $gated)?)), )+
        }
    };
}

struct ApiTable(PJRT_Api);

// SAFETY: the table is immutable, its pointers (extension chains) are null
// and function pointers are plain addresses: sharing it between threads is
// sharing constants.
unsafe impl Sync for ApiTable {}

static API: ApiTable = ApiTable(table! {
    PJRT_Error_Destroy = error_destroy,
    PJRT_Error_Message = error_message,
    PJRT_Error_GetCode = error_get_code,
    PJRT_Plugin_Initialize = plugin_initialize,
    PJRT_Plugin_Attributes = plugin_attributes,
    PJRT_Event_Destroy => served::event_destroy,
    PJRT_Event_IsReady => served::event_is_ready,
    PJRT_Event_Error => served::event_error,
    PJRT_Event_Await => served::event_await,
    PJRT_Event_OnReady => served::event_on_ready,
    PJRT_Client_Create => served::client_create,
    PJRT_Client_Destroy => served::client_destroy,
    PJRT_Client_PlatformName => served::client_platform_name,
    PJRT_Client_ProcessIndex => served::client_process_index,
    PJRT_Client_PlatformVersion => served::client_platform_version,
    PJRT_Client_Devices => served::client_devices,
    PJRT_Client_AddressableDevices => served::client_addressable_devices,
    PJRT_Client_LookupDevice => served::client_lookup_device,
    PJRT_Client_LookupAddressableDevice => served::client_lookup_addressable_device,
    PJRT_Client_AddressableMemories => served::client_addressable_memories,
    PJRT_Client_Compile => served::client_compile,
    PJRT_Client_DefaultDeviceAssignment,
    PJRT_Client_BufferFromHostBuffer => served::client_buffer_from_host_buffer,
    PJRT_DeviceDescription_Id => served::device_description_id,
    PJRT_DeviceDescription_ProcessIndex => served::device_description_process_index,
    PJRT_DeviceDescription_Attributes => served::device_description_attributes,
    PJRT_DeviceDescription_Kind => served::device_description_kind,
    PJRT_DeviceDescription_DebugString => served::device_description_debug_string,
    PJRT_DeviceDescription_ToString => served::device_description_to_string,
    PJRT_Device_GetDescription => served::device_get_description,
    PJRT_Device_IsAddressable => served::device_is_addressable,
    PJRT_Device_LocalHardwareId => served::device_local_hardware_id,
    PJRT_Device_AddressableMemories => served::device_addressable_memories,
    PJRT_Device_DefaultMemory => served::device_default_memory,
    PJRT_Device_MemoryStats,
    PJRT_Memory_Id => served::memory_id,
    PJRT_Memory_Kind => served::memory_kind,
    PJRT_Memory_DebugString => served::memory_debug_string,
    PJRT_Memory_ToString => served::memory_to_string,
    PJRT_Memory_AddressableByDevices => served::memory_addressable_by_devices,
    PJRT_Executable_Destroy => served::executable_destroy,
    PJRT_Executable_Name => served::executable_name,
    PJRT_Executable_NumReplicas => served::executable_num_replicas,
    PJRT_Executable_NumPartitions => served::executable_num_partitions,
    PJRT_Executable_NumOutputs => served::executable_num_outputs,
    PJRT_Executable_SizeOfGeneratedCodeInBytes,
    PJRT_Executable_GetCostAnalysis,
    PJRT_Executable_OutputMemoryKinds,
    PJRT_Executable_OptimizedProgram,
    PJRT_Executable_Serialize,
    PJRT_LoadedExecutable_Destroy => served::loaded_executable_destroy,
    PJRT_LoadedExecutable_GetExecutable => served::loaded_executable_get_executable,
    PJRT_LoadedExecutable_AddressableDevices => served::loaded_executable_addressable_devices,
    PJRT_LoadedExecutable_Delete => served::loaded_executable_delete,
    PJRT_LoadedExecutable_IsDeleted => served::loaded_executable_is_deleted,
    PJRT_LoadedExecutable_Execute => served::loaded_executable_execute,
    PJRT_Executable_DeserializeAndLoad,
    PJRT_LoadedExecutable_Fingerprint,
    PJRT_Buffer_Destroy => served::buffer_destroy,
    PJRT_Buffer_ElementType => served::buffer_element_type,
    PJRT_Buffer_Dimensions => served::buffer_dimensions,
    PJRT_Buffer_UnpaddedDimensions => served::buffer_unpadded_dimensions,
    PJRT_Buffer_DynamicDimensionIndices => served::buffer_dynamic_dimension_indices,
    PJRT_Buffer_GetMemoryLayout,
    PJRT_Buffer_OnDeviceSizeInBytes => served::buffer_on_device_size_in_bytes,
    PJRT_Buffer_Device => served::buffer_device,
    PJRT_Buffer_Memory => served::buffer_memory,
    PJRT_Buffer_Delete => served::buffer_delete,
    PJRT_Buffer_IsDeleted => served::buffer_is_deleted,
    PJRT_Buffer_CopyToDevice,
    PJRT_Buffer_ToHostBuffer => served::buffer_to_host_buffer,
    PJRT_Buffer_IsOnCpu => served::buffer_is_on_cpu,
    PJRT_Buffer_ReadyEvent => served::buffer_ready_event,
    PJRT_Buffer_UnsafePointer => served::buffer_unsafe_pointer,
    PJRT_Buffer_IncreaseExternalReferenceCount => served::buffer_increase_external_reference_count,
    PJRT_Buffer_DecreaseExternalReferenceCount => served::buffer_decrease_external_reference_count,
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer => served::buffer_opaque_device_memory_data_pointer,
    PJRT_CopyToDeviceStream_Destroy,
    PJRT_CopyToDeviceStream_AddChunk,
    PJRT_CopyToDeviceStream_TotalBytes,
    PJRT_CopyToDeviceStream_GranuleSize,
    PJRT_CopyToDeviceStream_CurrentBytes,
    PJRT_TopologyDescription_Create,
    PJRT_TopologyDescription_Destroy,
    PJRT_TopologyDescription_PlatformName,
    PJRT_TopologyDescription_PlatformVersion,
    PJRT_TopologyDescription_GetDeviceDescriptions,
    PJRT_TopologyDescription_Serialize,
    PJRT_TopologyDescription_Attributes,
    PJRT_Compile,
    PJRT_Executable_OutputElementTypes => served::executable_output_element_types,
    PJRT_Executable_OutputDimensions => served::executable_output_dimensions,
    PJRT_Buffer_CopyToMemory,
    PJRT_Client_CreateViewOfDeviceBuffer => served::client_create_view_of_device_buffer,
    PJRT_Executable_Fingerprint,
    PJRT_Client_TopologyDescription,
    PJRT_Executable_GetCompiledMemoryStats,
    PJRT_Memory_Kind_Id => served::memory_kind_id,
    PJRT_ExecuteContext_Create,
    PJRT_ExecuteContext_Destroy,
    PJRT_Buffer_CopyRawToHost,
    PJRT_AsyncHostToDeviceTransferManager_Destroy,
    PJRT_AsyncHostToDeviceTransferManager_TransferData,
    PJRT_Client_CreateBuffersForAsyncHostToDevice,
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer,
    PJRT_AsyncHostToDeviceTransferManager_Device,
    PJRT_AsyncHostToDeviceTransferManager_BufferCount,
    PJRT_AsyncHostToDeviceTransferManager_BufferSize,
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError,
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata,
    PJRT_Client_DmaMap,
    PJRT_Client_DmaUnmap,
    PJRT_Client_CreateUninitializedBuffer,
    PJRT_Client_UpdateGlobalProcessInfo,
    PJRT_TopologyDescription_Deserialize,
    PJRT_Client_CreateAliasBuffer,
    PJRT_Client_FulfillAliasBuffer,
    PJRT_LoadedExecutable_GetDeviceAssignment => served::loaded_executable_get_device_assignment,
    PJRT_Client_CreateErrorBuffer,
    PJRT_AsyncHostToDeviceTransferManager_TransferLiteral,
    PJRT_Buffer_CopyRawToHostFuture,
    PJRT_Device_PoisonExecution,
    PJRT_Device_CreateAsyncTrackingEvent,
    PJRT_AsyncTrackingEvent_Destroy,
    PJRT_Executable_GetCompileOptions,
    PJRT_Buffer_DonateWithControlDependency,
    PJRT_Event_Create,
    PJRT_Event_Set,
});

/// The table `GetPjrtApi()` returns: static, complete, and never null in
/// any slot.
pub(crate) fn pjrt_api() -> &'static PJRT_Api {
    &API.0
}

/// What TensorFlow's loader calls (once it has called `TFNPD_InitPlugin`)
/// to find the PJRT plugin of the device type.
#[cfg(feature = "pjrt")]
#[no_mangle]
pub extern "C" fn GetPjrtApi() -> *const PJRT_Api {
    pjrt_api()
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::mem::{offset_of, size_of};

    use super::*;

    /// The entries served without the `pjrt` feature; every other slot is
    /// a stub.
    const ALWAYS_SERVED: [&str; 5] = [
        "PJRT_Error_Destroy",
        "PJRT_Error_Message",
        "PJRT_Error_GetCode",
        "PJRT_Plugin_Initialize",
        "PJRT_Plugin_Attributes",
    ];

    /// Whether `entry` is served in this build: with the `pjrt` feature,
    /// the table's `=>` slots too (those whose slot does not answer
    /// UNIMPLEMENTED to a probe are listed in `served`'s tests).
    fn served(entry: &str) -> bool {
        ALWAYS_SERVED.contains(&entry) || (cfg!(feature = "pjrt") && PJRT_FEATURE_SERVED.contains(&entry))
    }

    /// The entries the `pjrt` feature adds (docs/xla-pjrt-notes.md, section 6).
    const PJRT_FEATURE_SERVED: &[&str] = &[
        "PJRT_Event_Destroy",
        "PJRT_Event_IsReady",
        "PJRT_Event_Error",
        "PJRT_Event_Await",
        "PJRT_Event_OnReady",
        "PJRT_Client_Create",
        "PJRT_Client_Destroy",
        "PJRT_Client_PlatformName",
        "PJRT_Client_ProcessIndex",
        "PJRT_Client_PlatformVersion",
        "PJRT_Client_Devices",
        "PJRT_Client_AddressableDevices",
        "PJRT_Client_LookupDevice",
        "PJRT_Client_LookupAddressableDevice",
        "PJRT_Client_AddressableMemories",
        "PJRT_Client_Compile",
        "PJRT_Client_BufferFromHostBuffer",
        "PJRT_DeviceDescription_Id",
        "PJRT_DeviceDescription_ProcessIndex",
        "PJRT_DeviceDescription_Attributes",
        "PJRT_DeviceDescription_Kind",
        "PJRT_DeviceDescription_DebugString",
        "PJRT_DeviceDescription_ToString",
        "PJRT_Device_GetDescription",
        "PJRT_Device_IsAddressable",
        "PJRT_Device_LocalHardwareId",
        "PJRT_Device_AddressableMemories",
        "PJRT_Device_DefaultMemory",
        "PJRT_Memory_Id",
        "PJRT_Memory_Kind",
        "PJRT_Memory_DebugString",
        "PJRT_Memory_ToString",
        "PJRT_Memory_AddressableByDevices",
        "PJRT_Executable_Destroy",
        "PJRT_Executable_Name",
        "PJRT_Executable_NumReplicas",
        "PJRT_Executable_NumPartitions",
        "PJRT_Executable_NumOutputs",
        "PJRT_LoadedExecutable_Destroy",
        "PJRT_LoadedExecutable_GetExecutable",
        "PJRT_LoadedExecutable_AddressableDevices",
        "PJRT_LoadedExecutable_Delete",
        "PJRT_LoadedExecutable_IsDeleted",
        "PJRT_LoadedExecutable_Execute",
        "PJRT_Buffer_Destroy",
        "PJRT_Buffer_ElementType",
        "PJRT_Buffer_Dimensions",
        "PJRT_Buffer_UnpaddedDimensions",
        "PJRT_Buffer_DynamicDimensionIndices",
        "PJRT_Buffer_OnDeviceSizeInBytes",
        "PJRT_Buffer_Device",
        "PJRT_Buffer_Memory",
        "PJRT_Buffer_Delete",
        "PJRT_Buffer_IsDeleted",
        "PJRT_Buffer_ToHostBuffer",
        "PJRT_Buffer_IsOnCpu",
        "PJRT_Buffer_ReadyEvent",
        "PJRT_Buffer_UnsafePointer",
        "PJRT_Buffer_IncreaseExternalReferenceCount",
        "PJRT_Buffer_DecreaseExternalReferenceCount",
        "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
        "PJRT_Executable_OutputElementTypes",
        "PJRT_Executable_OutputDimensions",
        "PJRT_Client_CreateViewOfDeviceBuffer",
        "PJRT_Memory_Kind_Id",
        "PJRT_LoadedExecutable_GetDeviceAssignment",
    ];

    /// Code and message of an error, read through the table as TensorFlow
    /// does; then destroyed through the table.
    fn take_error(error: *mut PJRT_Error) -> (PJRT_Error_Code, String) {
        assert!(!error.is_null(), "expected an error");
        let api = pjrt_api();
        let mut code = PJRT_Error_GetCode_Args { error, ..Default::default() };
        // SAFETY: valid args for the call; `error` is alive.
        let nested = unsafe { (api.PJRT_Error_GetCode.unwrap())(&mut code) };
        assert!(nested.is_null(), "PJRT_Error_GetCode failed");
        let mut message = PJRT_Error_Message_Args { error, ..Default::default() };
        // SAFETY: as above.
        unsafe { (api.PJRT_Error_Message.unwrap())(&mut message) };
        // SAFETY: the entry points at `message_size` bytes of the live error.
        let bytes = unsafe { std::slice::from_raw_parts(message.message.cast::<u8>(), message.message_size) };
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let mut destroy = PJRT_Error_Destroy_Args { error, ..Default::default() };
        // SAFETY: destroys the error once; it is not used afterwards.
        unsafe { (api.PJRT_Error_Destroy.unwrap())(&mut destroy) };
        (code.code, text)
    }

    type Slot = Option<unsafe extern "C" fn(*mut c_void) -> *mut PJRT_Error>;

    /// The function-pointer slots of the table, in order, as untyped
    /// entries `fn(*mut args) -> *mut PJRT_Error`.
    fn slots(api: &PJRT_Api) -> Vec<Slot> {
        let first = offset_of!(PJRT_Api, PJRT_Error_Destroy);
        let width = size_of::<Option<PJRT_Error_GetCode>>();
        assert_eq!((size_of::<PJRT_Api>() - first) / width, PJRT_API_ENTRIES.len());
        (0..PJRT_API_ENTRIES.len())
            .map(|i| {
                // SAFETY: slot `i` is an `Option<unsafe extern "C" fn(*mut
                // Args) -> ...>` inside `api`, which has the same layout (a
                // nullable code pointer) as the type read here.
                unsafe { ptr::from_ref(api).cast::<u8>().add(first + i * width).cast::<Slot>().read() }
            })
            .collect()
    }

    #[test]
    fn the_table_is_pjrt_0_90_with_every_slot_filled() {
        let api = pjrt_api();
        assert_eq!(api.struct_size, PJRT_Api_STRUCT_SIZE);
        assert_eq!(api.pjrt_api_version.struct_size, PJRT_Api_Version_STRUCT_SIZE);
        assert_eq!((api.pjrt_api_version.major_version, api.pjrt_api_version.minor_version), (0, 90));
        assert_eq!(PJRT_API_ENTRIES.len(), 128);
        for (slot, name) in slots(api).iter().zip(PJRT_API_ENTRIES) {
            assert!(slot.is_some(), "{name} is null");
        }
    }

    /// Every slot we do not serve answers through its function pointer,
    /// with valid args, an UNIMPLEMENTED error naming the slot.
    #[test]
    fn every_unserved_entry_answers_unimplemented_naming_itself() {
        let api = pjrt_api();
        let mut answered = 0;
        for (slot, name) in slots(api).into_iter().zip(PJRT_API_ENTRIES) {
            if served(name) {
                continue;
            }
            // Larger than any PJRT args struct, with a struct_size to match.
            let mut args = [0u64; 64];
            args[0] = size_of_val(&args) as u64;
            // SAFETY: a stub never reads its args; these are valid anyway
            // for any entry up to 512 bytes. Calling through a pointer-typed
            // parameter of another pointee type is ABI-compatible.
            let error = unsafe { (slot.unwrap())(args.as_mut_ptr().cast()) };
            let (code, message) = take_error(error);
            assert_eq!(code, PJRT_Error_Code_UNIMPLEMENTED, "{name}: {message}");
            assert!(message.contains(&format!("the PJRT entry {name} is not")), "{name}: {message}");
            assert!(message.starts_with("tfwasm: "), "{message}");
            answered += 1;
        }
        let served = PJRT_API_ENTRIES.iter().filter(|e| served(e)).count();
        assert_eq!(answered, 128 - served);
    }

    #[test]
    fn plugin_initialize_succeeds_and_reports_no_attributes() {
        let api = pjrt_api();
        let mut init = PJRT_Plugin_Initialize_Args::default();
        // SAFETY: valid args for the call.
        assert!(unsafe { (api.PJRT_Plugin_Initialize.unwrap())(&mut init) }.is_null());

        let mut attributes = PJRT_Plugin_Attributes_Args {
            num_attributes: 7,
            attributes: ptr::NonNull::dangling().as_ptr(),
            ..Default::default()
        };
        // SAFETY: valid args for the call.
        assert!(unsafe { (api.PJRT_Plugin_Attributes.unwrap())(&mut attributes) }.is_null());
        assert_eq!(attributes.num_attributes, 0);
        assert!(attributes.attributes.is_null());
    }

    #[test]
    fn errors_keep_the_hosts_code_and_message() {
        let error = PjrtErrorBox::from(Error::InvalidArgument("a shape with -1 elements".into())).into_raw();
        assert_eq!(
            take_error(error),
            (PJRT_Error_Code_INVALID_ARGUMENT, "tfwasm: a shape with -1 elements".to_owned())
        );
        let error = PjrtErrorBox::from(Error::Internal("x".into())).into_raw();
        assert_eq!(take_error(error).0, PJRT_Error_Code_INTERNAL);
    }

    /// Args that are null or shorter than our mirror are refused, not read.
    #[test]
    fn null_and_short_args_are_invalid_arguments() {
        let api = pjrt_api();
        // SAFETY: the entry checks for null before reading.
        let (code, message) = take_error(unsafe { (api.PJRT_Plugin_Attributes.unwrap())(ptr::null_mut()) });
        assert_eq!(code, PJRT_Error_Code_INVALID_ARGUMENT);
        assert!(message.contains("PJRT_Plugin_Attributes: the arguments are null"), "{message}");

        // An older caller's struct ends before `num_attributes`: the entry
        // must not write past it.
        let mut short = PJRT_Plugin_Attributes_Args {
            struct_size: offset_of!(PJRT_Plugin_Attributes_Args, num_attributes),
            num_attributes: 7,
            ..Default::default()
        };
        // SAFETY: valid memory for the whole struct; the entry reads the size first.
        let (code, message) = take_error(unsafe { (api.PJRT_Plugin_Attributes.unwrap())(&mut short) });
        assert_eq!(code, PJRT_Error_Code_INVALID_ARGUMENT);
        assert!(message.contains("the arguments are 24 bytes, tfwasm needs at least 32"), "{message}");
        assert_eq!(short.num_attributes, 7);

        // A null error: GetCode reports it, Message and Destroy do nothing.
        let mut code_args = PJRT_Error_GetCode_Args::default();
        // SAFETY: valid args; the error is null, which the entry checks.
        let (code, _) = take_error(unsafe { (api.PJRT_Error_GetCode.unwrap())(&mut code_args) });
        assert_eq!(code, PJRT_Error_Code_INVALID_ARGUMENT);
        let mut destroy = PJRT_Error_Destroy_Args::default();
        // SAFETY: destroying a null error is a no-op.
        unsafe { (api.PJRT_Error_Destroy.unwrap())(&mut destroy) };
        let mut message = PJRT_Error_Message_Args::default();
        // SAFETY: valid args; the error is null, which the entry checks.
        unsafe { (api.PJRT_Error_Message.unwrap())(&mut message) };
        assert!(message.message.is_null());
    }

    #[test]
    fn a_panic_becomes_an_internal_error_not_an_unwind() {
        let error = pjrt_guard("PJRT_Test", || panic!("the planner lost a buffer"));
        let (code, message) = take_error(error);
        assert_eq!(code, PJRT_Error_Code_INTERNAL);
        assert_eq!(message, "tfwasm: PJRT_Test: internal error (panic): the planner lost a buffer");
    }
}
