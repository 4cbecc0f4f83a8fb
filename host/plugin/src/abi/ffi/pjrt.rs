//! `#[repr(C)]` mirrors of the PJRT C API (`xla/pjrt/c/pjrt_c_api.h` as the
//! TensorFlow 2.21 wheel ships it under `tensorflow/compiler/`, API 0.90).
//!
//! TensorFlow finds the table through an exported `GetPjrtApi()` and calls
//! every entry with one `*_Args` struct that it allocates and that the
//! plugin fills. Names match the C names so the layout test can pair them
//! with the header.
//!
//! What is mirrored field by field: the [`PJRT_Api`] table (all 128 slots,
//! in header order), the arguments of every entry the plugin serves or is
//! expected to serve (the list in `docs/xla-pjrt-notes.md`, section 6), and
//! the structs those point at ([`PJRT_NamedValue`], [`PJRT_Program`],
//! [`PJRT_ExecuteOptions`], [`PJRT_Buffer_MemoryLayout`]). The other
//! entries' arguments are opaque: their slots answer `UNIMPLEMENTED`
//! without reading them. Mirror one (and add it to `tests/rust/layout.rs`)
//! before serving its entry.
//!
//! Conventions of the API, which the mirrors follow:
//! - Every struct that has a `struct_size` gets a `*_STRUCT_SIZE` constant
//!   (the end of its last field, the header's `PJRT_STRUCT_SIZE`), the same
//!   value from `struct_size()`, and a `Default` that writes it with every
//!   other field zero or null. The caller of an entry writes its own size;
//!   the plugin reads only fields that size covers.
//! - C enums are `c_int` aliases with one constant per value: TensorFlow
//!   may send a value this mirror does not know, which a Rust enum could
//!   not hold.
//! - Strings go out as pointer and length, not NUL-terminated; lists as
//!   pointer and count. What the plugin hands out stays owned by the object
//!   it describes (client, device, buffer, error) until that is destroyed.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_void};

use super::stream_executor::offset_of_end;

pub const PJRT_API_MAJOR: c_int = 0;
pub const PJRT_API_MINOR: c_int = 90;

/// A mirror that starts with `struct_size`: the size this crate writes and
/// the least it accepts from a caller.
pub trait PjrtStruct {
    const STRUCT_SIZE: usize;
}

/// `versioned!(Ty, Ty_STRUCT_SIZE = last_field)`: the size constant,
/// `struct_size()`, [`PjrtStruct`] and a `Default` that writes the size.
macro_rules! versioned {
    ($ty:ident, $size:ident = $last:ident) => {
        pub const $size: usize = offset_of_end!($ty, $last);
        impl $ty {
            /// The `struct_size` this crate writes: the end of `$last`.
            pub const fn struct_size() -> usize {
                $size
            }
        }
        impl PjrtStruct for $ty {
            const STRUCT_SIZE: usize = $size;
        }
        impl Default for $ty {
            fn default() -> Self {
                // SAFETY: every field is an integer, a bool, a float, a raw
                // pointer, an `Option<fn>`, or a struct or union of those;
                // all-zero is a valid value for each of them.
                let mut value: Self = unsafe { std::mem::zeroed() };
                value.struct_size = $size;
                value
            }
        }
    };
}

/// Types only ever seen behind a pointer: the plugin's own objects
/// (TensorFlow hands them back, never looks inside) and structs of
/// TensorFlow's the plugin does not read.
macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident),+ $(,)?) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )+
    };
}
pub(crate) use opaque;

opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_Memory,
    PJRT_DeviceDescription,
    PJRT_TopologyDescription,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_ExecuteContext,
    PJRT_DeviceAssignmentSerialized,
    PJRT_SendCallbackInfo,
    PJRT_RecvCallbackInfo,
    PJRT_KeyValueGetCallback_Args,
    PJRT_KeyValuePutCallback_Args,
    PJRT_KeyValueTryGetCallback_Args,
);

// ---------------------------------------------------------------- enums

pub type PJRT_Extension_Type = c_int;
pub const PJRT_Extension_Type_Gpu_Custom_Call: PJRT_Extension_Type = 0;
pub const PJRT_Extension_Type_Profiler: PJRT_Extension_Type = 1;
pub const PJRT_Extension_Type_Custom_Partitioner: PJRT_Extension_Type = 2;
pub const PJRT_Extension_Type_Stream: PJRT_Extension_Type = 3;
pub const PJRT_Extension_Type_Layouts: PJRT_Extension_Type = 4;
pub const PJRT_Extension_Type_FFI: PJRT_Extension_Type = 5;
pub const PJRT_Extension_Type_MemoryDescriptions: PJRT_Extension_Type = 6;
pub const PJRT_Extension_Type_Triton: PJRT_Extension_Type = 7;
pub const PJRT_Extension_Type_RawBuffer: PJRT_Extension_Type = 8;
pub const PJRT_Extension_Type_PhaseCompile: PJRT_Extension_Type = 9;
pub const PJRT_Extension_Type_Example: PJRT_Extension_Type = 10;
pub const PJRT_Extension_Type_Unknown: PJRT_Extension_Type = 11;
pub const PJRT_Extension_Type_CrossHostTransfers: PJRT_Extension_Type = 12;
pub const PJRT_Extension_Type_ExecutableMetadata: PJRT_Extension_Type = 13;
pub const PJRT_Extension_Type_Callback: PJRT_Extension_Type = 14;
pub const PJRT_Extension_Type_HostAllocator: PJRT_Extension_Type = 15;
pub const PJRT_Extension_Type_TpuTopology: PJRT_Extension_Type = 16;
pub const PJRT_Extension_Type_TpuExecutable: PJRT_Extension_Type = 17;
pub const PJRT_Extension_Type_Megascale: PJRT_Extension_Type = 18;

/// The canonical codes again (the same numbers as `TF_Code`).
pub type PJRT_Error_Code = c_int;
pub const PJRT_Error_Code_OK: PJRT_Error_Code = 0;
pub const PJRT_Error_Code_CANCELLED: PJRT_Error_Code = 1;
pub const PJRT_Error_Code_UNKNOWN: PJRT_Error_Code = 2;
pub const PJRT_Error_Code_INVALID_ARGUMENT: PJRT_Error_Code = 3;
pub const PJRT_Error_Code_DEADLINE_EXCEEDED: PJRT_Error_Code = 4;
pub const PJRT_Error_Code_NOT_FOUND: PJRT_Error_Code = 5;
pub const PJRT_Error_Code_ALREADY_EXISTS: PJRT_Error_Code = 6;
pub const PJRT_Error_Code_PERMISSION_DENIED: PJRT_Error_Code = 7;
pub const PJRT_Error_Code_RESOURCE_EXHAUSTED: PJRT_Error_Code = 8;
pub const PJRT_Error_Code_FAILED_PRECONDITION: PJRT_Error_Code = 9;
pub const PJRT_Error_Code_ABORTED: PJRT_Error_Code = 10;
pub const PJRT_Error_Code_OUT_OF_RANGE: PJRT_Error_Code = 11;
pub const PJRT_Error_Code_UNIMPLEMENTED: PJRT_Error_Code = 12;
pub const PJRT_Error_Code_INTERNAL: PJRT_Error_Code = 13;
pub const PJRT_Error_Code_UNAVAILABLE: PJRT_Error_Code = 14;
pub const PJRT_Error_Code_DATA_LOSS: PJRT_Error_Code = 15;
pub const PJRT_Error_Code_UNAUTHENTICATED: PJRT_Error_Code = 16;

pub type PJRT_NamedValue_Type = c_int;
pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;

/// Element types, in the order of XLA's `PrimitiveType` as PJRT numbers
/// them (not the same numbers as the proto's).
pub type PJRT_Buffer_Type = c_int;
pub const PJRT_Buffer_Type_INVALID: PJRT_Buffer_Type = 0;
pub const PJRT_Buffer_Type_PRED: PJRT_Buffer_Type = 1;
pub const PJRT_Buffer_Type_S8: PJRT_Buffer_Type = 2;
pub const PJRT_Buffer_Type_S16: PJRT_Buffer_Type = 3;
pub const PJRT_Buffer_Type_S32: PJRT_Buffer_Type = 4;
pub const PJRT_Buffer_Type_S64: PJRT_Buffer_Type = 5;
pub const PJRT_Buffer_Type_U8: PJRT_Buffer_Type = 6;
pub const PJRT_Buffer_Type_U16: PJRT_Buffer_Type = 7;
pub const PJRT_Buffer_Type_U32: PJRT_Buffer_Type = 8;
pub const PJRT_Buffer_Type_U64: PJRT_Buffer_Type = 9;
pub const PJRT_Buffer_Type_F16: PJRT_Buffer_Type = 10;
pub const PJRT_Buffer_Type_F32: PJRT_Buffer_Type = 11;
pub const PJRT_Buffer_Type_F64: PJRT_Buffer_Type = 12;
pub const PJRT_Buffer_Type_BF16: PJRT_Buffer_Type = 13;
pub const PJRT_Buffer_Type_C64: PJRT_Buffer_Type = 14;
pub const PJRT_Buffer_Type_C128: PJRT_Buffer_Type = 15;
pub const PJRT_Buffer_Type_F8E5M2: PJRT_Buffer_Type = 16;
pub const PJRT_Buffer_Type_F8E4M3FN: PJRT_Buffer_Type = 17;
pub const PJRT_Buffer_Type_F8E4M3B11FNUZ: PJRT_Buffer_Type = 18;
pub const PJRT_Buffer_Type_F8E5M2FNUZ: PJRT_Buffer_Type = 19;
pub const PJRT_Buffer_Type_F8E4M3FNUZ: PJRT_Buffer_Type = 20;
pub const PJRT_Buffer_Type_S4: PJRT_Buffer_Type = 21;
pub const PJRT_Buffer_Type_U4: PJRT_Buffer_Type = 22;
pub const PJRT_Buffer_Type_TOKEN: PJRT_Buffer_Type = 23;
pub const PJRT_Buffer_Type_S2: PJRT_Buffer_Type = 24;
pub const PJRT_Buffer_Type_U2: PJRT_Buffer_Type = 25;
pub const PJRT_Buffer_Type_F8E4M3: PJRT_Buffer_Type = 26;
pub const PJRT_Buffer_Type_F8E3M4: PJRT_Buffer_Type = 27;
pub const PJRT_Buffer_Type_F8E8M0FNU: PJRT_Buffer_Type = 28;
pub const PJRT_Buffer_Type_F4E2M1FN: PJRT_Buffer_Type = 29;

pub type PJRT_HostBufferSemantics = c_int;
pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;
pub const PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes: PJRT_HostBufferSemantics = 1;
pub const PJRT_HostBufferSemantics_kImmutableZeroCopy: PJRT_HostBufferSemantics = 2;
pub const PJRT_HostBufferSemantics_kMutableZeroCopy: PJRT_HostBufferSemantics = 3;

pub type PJRT_Buffer_MemoryLayout_Type = c_int;
pub const PJRT_Buffer_MemoryLayout_Type_Tiled: PJRT_Buffer_MemoryLayout_Type = 0;
pub const PJRT_Buffer_MemoryLayout_Type_Strides: PJRT_Buffer_MemoryLayout_Type = 1;

// ------------------------------------------------- shared structs, callbacks

/// One link of the optional extension chain that starts at a struct's
/// `extension_start`.
#[repr(C)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: PJRT_Extension_Type,
    pub next: *mut PJRT_Extension_Base,
}
versioned!(PJRT_Extension_Base, PJRT_Extension_Base_STRUCT_SIZE = next);

/// The version the plugin implements, embedded in [`PJRT_Api`].
#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}
versioned!(PJRT_Api_Version, PJRT_Api_Version_STRUCT_SIZE = minor_version);

/// The value of a [`PJRT_NamedValue`], selected by its `type_`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

/// An option or attribute: `name` (not NUL-terminated), a typed value and,
/// for strings and lists, its length in `value_size` (1 for scalars).
#[repr(C)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub type_: PJRT_NamedValue_Type,
    /// An anonymous union in C: its members are this struct's fields there.
    pub value: PJRT_NamedValue_Value,
    pub value_size: usize,
}
versioned!(PJRT_NamedValue, PJRT_NamedValue_STRUCT_SIZE = value_size);

/// How a plugin builds an error from inside a callback TensorFlow passes it.
pub type PJRT_CallbackError =
    Option<unsafe extern "C" fn(code: PJRT_Error_Code, message: *const c_char, message_size: usize) -> *mut PJRT_Error>;
pub type PJRT_Event_OnReadyCallback = Option<unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void)>;
pub type PJRT_KeyValueGetCallback =
    Option<unsafe extern "C" fn(args: *mut PJRT_KeyValueGetCallback_Args) -> *mut PJRT_Error>;
pub type PJRT_KeyValuePutCallback =
    Option<unsafe extern "C" fn(args: *mut PJRT_KeyValuePutCallback_Args) -> *mut PJRT_Error>;
pub type PJRT_KeyValueTryGetCallback =
    Option<unsafe extern "C" fn(args: *mut PJRT_KeyValueTryGetCallback_Args) -> *mut PJRT_Error>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_Buffer_MemoryLayout_Tiled {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub minor_to_major: *const i64,
    pub minor_to_major_size: usize,
    pub tile_dims: *const i64,
    pub tile_dim_sizes: *const usize,
    pub num_tiles: usize,
}
versioned!(PJRT_Buffer_MemoryLayout_Tiled, PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE = num_tiles);

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_Buffer_MemoryLayout_Strides {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
}
versioned!(PJRT_Buffer_MemoryLayout_Strides, PJRT_Buffer_MemoryLayout_Strides_STRUCT_SIZE = num_byte_strides);

/// The layout of a [`PJRT_Buffer_MemoryLayout`], selected by its `type_`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_Buffer_MemoryLayout_Value {
    pub tiled: PJRT_Buffer_MemoryLayout_Tiled,
    pub strides: PJRT_Buffer_MemoryLayout_Strides,
}

/// A buffer's layout: tiled (`minor_to_major`, which TensorFlow sends for
/// views of its tensors) or byte strides.
#[repr(C)]
pub struct PJRT_Buffer_MemoryLayout {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    /// An anonymous union in C: `tiled` and `strides` are this struct's fields there.
    pub layout: PJRT_Buffer_MemoryLayout_Value,
    pub type_: PJRT_Buffer_MemoryLayout_Type,
}
versioned!(PJRT_Buffer_MemoryLayout, PJRT_Buffer_MemoryLayout_STRUCT_SIZE = type_);

// ------------------------------------------------------ arguments, by entry

#[repr(C)]
pub struct PJRT_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *mut PJRT_Error,
}
versioned!(PJRT_Error_Destroy_Args, PJRT_Error_Destroy_Args_STRUCT_SIZE = error);

/// The plugin points `message` at the error's text (not NUL-terminated),
/// valid until the error is destroyed.
#[repr(C)]
pub struct PJRT_Error_Message_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub message: *const c_char,
    pub message_size: usize,
}
versioned!(PJRT_Error_Message_Args, PJRT_Error_Message_Args_STRUCT_SIZE = message_size);

#[repr(C)]
pub struct PJRT_Error_GetCode_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub code: PJRT_Error_Code,
}
versioned!(PJRT_Error_GetCode_Args, PJRT_Error_GetCode_Args_STRUCT_SIZE = code);

#[repr(C)]
pub struct PJRT_Plugin_Initialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
}
versioned!(PJRT_Plugin_Initialize_Args, PJRT_Plugin_Initialize_Args_STRUCT_SIZE = extension_start);

/// The plugin's attributes; the list stays owned by the plugin.
#[repr(C)]
pub struct PJRT_Plugin_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub attributes: *const PJRT_NamedValue,
    pub num_attributes: usize,
}
versioned!(PJRT_Plugin_Attributes_Args, PJRT_Plugin_Attributes_Args_STRUCT_SIZE = num_attributes);

#[repr(C)]
pub struct PJRT_Event_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
versioned!(PJRT_Event_Destroy_Args, PJRT_Event_Destroy_Args_STRUCT_SIZE = event);

#[repr(C)]
pub struct PJRT_Event_IsReady_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub is_ready: bool,
}
versioned!(PJRT_Event_IsReady_Args, PJRT_Event_IsReady_Args_STRUCT_SIZE = is_ready);

#[repr(C)]
pub struct PJRT_Event_Error_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
versioned!(PJRT_Event_Error_Args, PJRT_Event_Error_Args_STRUCT_SIZE = event);

#[repr(C)]
pub struct PJRT_Event_Await_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
versioned!(PJRT_Event_Await_Args, PJRT_Event_Await_Args_STRUCT_SIZE = event);

/// `callback` runs once, when the event is ready (at once if it already
/// is), and owns the error it is given.
#[repr(C)]
pub struct PJRT_Event_OnReady_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub callback: PJRT_Event_OnReadyCallback,
    pub user_arg: *mut c_void,
}
versioned!(PJRT_Event_OnReady_Args, PJRT_Event_OnReady_Args_STRUCT_SIZE = user_arg);

#[repr(C)]
pub struct PJRT_Event_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
versioned!(PJRT_Event_Create_Args, PJRT_Event_Create_Args_STRUCT_SIZE = event);

#[repr(C)]
pub struct PJRT_Event_Set_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub error_code: PJRT_Error_Code,
    pub error_message: *const c_char,
    pub error_message_size: usize,
}
versioned!(PJRT_Event_Set_Args, PJRT_Event_Set_Args_STRUCT_SIZE = error_message_size);

/// `create_options` and the key-value callbacks are for multi-process
/// clients; the plugin writes `client`.
#[repr(C)]
pub struct PJRT_Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: PJRT_KeyValueGetCallback,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: PJRT_KeyValuePutCallback,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut PJRT_Client,
    pub kv_try_get_callback: PJRT_KeyValueTryGetCallback,
    pub kv_try_get_user_arg: *mut c_void,
}
versioned!(PJRT_Client_Create_Args, PJRT_Client_Create_Args_STRUCT_SIZE = kv_try_get_user_arg);

#[repr(C)]
pub struct PJRT_Client_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
}
versioned!(PJRT_Client_Destroy_Args, PJRT_Client_Destroy_Args_STRUCT_SIZE = client);

#[repr(C)]
pub struct PJRT_Client_PlatformName_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
}
versioned!(PJRT_Client_PlatformName_Args, PJRT_Client_PlatformName_Args_STRUCT_SIZE = platform_name_size);

#[repr(C)]
pub struct PJRT_Client_ProcessIndex_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub process_index: c_int,
}
versioned!(PJRT_Client_ProcessIndex_Args, PJRT_Client_ProcessIndex_Args_STRUCT_SIZE = process_index);

#[repr(C)]
pub struct PJRT_Client_PlatformVersion_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_version: *const c_char,
    pub platform_version_size: usize,
}
versioned!(PJRT_Client_PlatformVersion_Args, PJRT_Client_PlatformVersion_Args_STRUCT_SIZE = platform_version_size);

#[repr(C)]
pub struct PJRT_Client_TopologyDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub topology: *mut PJRT_TopologyDescription,
}
versioned!(PJRT_Client_TopologyDescription_Args, PJRT_Client_TopologyDescription_Args_STRUCT_SIZE = topology);

#[repr(C)]
pub struct PJRT_Client_Devices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub devices: *const *mut PJRT_Device,
    pub num_devices: usize,
}
versioned!(PJRT_Client_Devices_Args, PJRT_Client_Devices_Args_STRUCT_SIZE = num_devices);

#[repr(C)]
pub struct PJRT_Client_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}
versioned!(
    PJRT_Client_AddressableDevices_Args,
    PJRT_Client_AddressableDevices_Args_STRUCT_SIZE = num_addressable_devices
);

#[repr(C)]
pub struct PJRT_Client_LookupDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub id: c_int,
    pub device: *mut PJRT_Device,
}
versioned!(PJRT_Client_LookupDevice_Args, PJRT_Client_LookupDevice_Args_STRUCT_SIZE = device);

#[repr(C)]
pub struct PJRT_Client_LookupAddressableDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub local_hardware_id: c_int,
    pub addressable_device: *mut PJRT_Device,
}
versioned!(
    PJRT_Client_LookupAddressableDevice_Args,
    PJRT_Client_LookupAddressableDevice_Args_STRUCT_SIZE = addressable_device
);

#[repr(C)]
pub struct PJRT_Client_AddressableMemories_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_memories: *const *mut PJRT_Memory,
    pub num_addressable_memories: usize,
}
versioned!(
    PJRT_Client_AddressableMemories_Args,
    PJRT_Client_AddressableMemories_Args_STRUCT_SIZE = num_addressable_memories
);

/// A module to compile: `code` in the `format` named by pointer and length
/// (TensorFlow 2.21 sends `"hlo"`, a serialized `HloModuleProto`).
#[repr(C)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub code: *mut c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}
versioned!(PJRT_Program, PJRT_Program_STRUCT_SIZE = format_size);

/// `compile_options` is a serialized `CompileOptionsProto`; the plugin
/// writes `executable`.
#[repr(C)]
pub struct PJRT_Client_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub executable: *mut PJRT_LoadedExecutable,
}
versioned!(PJRT_Client_Compile_Args, PJRT_Client_Compile_Args_STRUCT_SIZE = executable);

#[repr(C)]
pub struct PJRT_Client_DefaultDeviceAssignment_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub num_replicas: c_int,
    pub num_partitions: c_int,
    pub default_assignment_size: usize,
    pub default_assignment: *mut c_int,
}
versioned!(
    PJRT_Client_DefaultDeviceAssignment_Args,
    PJRT_Client_DefaultDeviceAssignment_Args_STRUCT_SIZE = default_assignment
);

#[repr(C)]
pub struct PJRT_Client_BufferFromHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *const c_void,
    pub type_: PJRT_Buffer_Type,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    pub host_buffer_semantics: PJRT_HostBufferSemantics,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub device_layout: *mut PJRT_Buffer_MemoryLayout,
    pub done_with_host_buffer: *mut PJRT_Event,
    pub buffer: *mut PJRT_Buffer,
}
versioned!(PJRT_Client_BufferFromHostBuffer_Args, PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE = buffer);

/// A buffer over memory the caller owns: in SE mode, a TensorFlow tensor's
/// data pointer on the device. The plugin never frees it; it calls
/// `on_delete_callback(device_buffer_ptr, on_delete_callback_arg)`, if set,
/// once when the view is destroyed.
#[repr(C)]
pub struct PJRT_Client_CreateViewOfDeviceBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub device_buffer_ptr: *mut c_void,
    pub dims: *const i64,
    pub num_dims: usize,
    pub element_type: PJRT_Buffer_Type,
    pub layout: *mut PJRT_Buffer_MemoryLayout,
    pub device: *mut PJRT_Device,
    pub on_delete_callback: Option<unsafe extern "C" fn(device_buffer_ptr: *mut c_void, user_arg: *mut c_void)>,
    pub on_delete_callback_arg: *mut c_void,
    pub stream: isize,
    pub buffer: *mut PJRT_Buffer,
    pub memory: *mut PJRT_Memory,
}
versioned!(PJRT_Client_CreateViewOfDeviceBuffer_Args, PJRT_Client_CreateViewOfDeviceBuffer_Args_STRUCT_SIZE = memory);

#[repr(C)]
pub struct PJRT_DeviceDescription_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub id: c_int,
}
versioned!(PJRT_DeviceDescription_Id_Args, PJRT_DeviceDescription_Id_Args_STRUCT_SIZE = id);

#[repr(C)]
pub struct PJRT_DeviceDescription_ProcessIndex_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub process_index: c_int,
}
versioned!(
    PJRT_DeviceDescription_ProcessIndex_Args,
    PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE = process_index
);

#[repr(C)]
pub struct PJRT_DeviceDescription_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub num_attributes: usize,
    pub attributes: *const PJRT_NamedValue,
}
versioned!(PJRT_DeviceDescription_Attributes_Args, PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE = attributes);

#[repr(C)]
pub struct PJRT_DeviceDescription_Kind_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub device_kind: *const c_char,
    pub device_kind_size: usize,
}
versioned!(PJRT_DeviceDescription_Kind_Args, PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE = device_kind_size);

#[repr(C)]
pub struct PJRT_DeviceDescription_DebugString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub debug_string: *const c_char,
    pub debug_string_size: usize,
}
versioned!(
    PJRT_DeviceDescription_DebugString_Args,
    PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE = debug_string_size
);

#[repr(C)]
pub struct PJRT_DeviceDescription_ToString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub to_string: *const c_char,
    pub to_string_size: usize,
}
versioned!(PJRT_DeviceDescription_ToString_Args, PJRT_DeviceDescription_ToString_Args_STRUCT_SIZE = to_string_size);

#[repr(C)]
pub struct PJRT_Device_GetDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub device_description: *mut PJRT_DeviceDescription,
}
versioned!(PJRT_Device_GetDescription_Args, PJRT_Device_GetDescription_Args_STRUCT_SIZE = device_description);

#[repr(C)]
pub struct PJRT_Device_IsAddressable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub is_addressable: bool,
}
versioned!(PJRT_Device_IsAddressable_Args, PJRT_Device_IsAddressable_Args_STRUCT_SIZE = is_addressable);

#[repr(C)]
pub struct PJRT_Device_LocalHardwareId_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub local_hardware_id: c_int,
}
versioned!(PJRT_Device_LocalHardwareId_Args, PJRT_Device_LocalHardwareId_Args_STRUCT_SIZE = local_hardware_id);

#[repr(C)]
pub struct PJRT_Device_AddressableMemories_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub memories: *const *mut PJRT_Memory,
    pub num_memories: usize,
}
versioned!(PJRT_Device_AddressableMemories_Args, PJRT_Device_AddressableMemories_Args_STRUCT_SIZE = num_memories);

#[repr(C)]
pub struct PJRT_Device_DefaultMemory_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
}
versioned!(PJRT_Device_DefaultMemory_Args, PJRT_Device_DefaultMemory_Args_STRUCT_SIZE = memory);

#[repr(C)]
pub struct PJRT_Device_MemoryStats_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: i64,
    pub peak_bytes_in_use_is_set: bool,
    pub num_allocs: i64,
    pub num_allocs_is_set: bool,
    pub largest_alloc_size: i64,
    pub largest_alloc_size_is_set: bool,
    pub bytes_limit: i64,
    pub bytes_limit_is_set: bool,
    pub bytes_reserved: i64,
    pub bytes_reserved_is_set: bool,
    pub peak_bytes_reserved: i64,
    pub peak_bytes_reserved_is_set: bool,
    pub bytes_reservable_limit: i64,
    pub bytes_reservable_limit_is_set: bool,
    pub largest_free_block_bytes: i64,
    pub largest_free_block_bytes_is_set: bool,
    pub pool_bytes: i64,
    pub pool_bytes_is_set: bool,
    pub peak_pool_bytes: i64,
    pub peak_pool_bytes_is_set: bool,
}
versioned!(PJRT_Device_MemoryStats_Args, PJRT_Device_MemoryStats_Args_STRUCT_SIZE = peak_pool_bytes_is_set);

#[repr(C)]
pub struct PJRT_Memory_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub id: c_int,
}
versioned!(PJRT_Memory_Id_Args, PJRT_Memory_Id_Args_STRUCT_SIZE = id);

#[repr(C)]
pub struct PJRT_Memory_Kind_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub kind: *const c_char,
    pub kind_size: usize,
}
versioned!(PJRT_Memory_Kind_Args, PJRT_Memory_Kind_Args_STRUCT_SIZE = kind_size);

#[repr(C)]
pub struct PJRT_Memory_Kind_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub kind_id: c_int,
}
versioned!(PJRT_Memory_Kind_Id_Args, PJRT_Memory_Kind_Id_Args_STRUCT_SIZE = kind_id);

#[repr(C)]
pub struct PJRT_Memory_DebugString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub debug_string: *const c_char,
    pub debug_string_size: usize,
}
versioned!(PJRT_Memory_DebugString_Args, PJRT_Memory_DebugString_Args_STRUCT_SIZE = debug_string_size);

#[repr(C)]
pub struct PJRT_Memory_ToString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub to_string: *const c_char,
    pub to_string_size: usize,
}
versioned!(PJRT_Memory_ToString_Args, PJRT_Memory_ToString_Args_STRUCT_SIZE = to_string_size);

#[repr(C)]
pub struct PJRT_Memory_AddressableByDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub devices: *const *mut PJRT_Device,
    pub num_devices: usize,
}
versioned!(PJRT_Memory_AddressableByDevices_Args, PJRT_Memory_AddressableByDevices_Args_STRUCT_SIZE = num_devices);

#[repr(C)]
pub struct PJRT_Executable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
}
versioned!(PJRT_Executable_Destroy_Args, PJRT_Executable_Destroy_Args_STRUCT_SIZE = executable);

#[repr(C)]
pub struct PJRT_LoadedExecutable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}
versioned!(PJRT_LoadedExecutable_Destroy_Args, PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE = executable);

#[repr(C)]
pub struct PJRT_LoadedExecutable_GetExecutable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub executable: *mut PJRT_Executable,
}
versioned!(PJRT_LoadedExecutable_GetExecutable_Args, PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE = executable);

/// A serialized `DeviceAssignmentProto`, owned by the plugin until the
/// caller runs `serialized_device_assignment_deleter` on
/// `serialized_device_assignment`. TensorFlow treats a failure as fatal.
#[repr(C)]
pub struct PJRT_LoadedExecutable_GetDeviceAssignment_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    pub serialized_device_assignment: *mut PJRT_DeviceAssignmentSerialized,
    pub serialized_device_assignment_deleter: Option<unsafe extern "C" fn(da: *mut PJRT_DeviceAssignmentSerialized)>,
}
versioned!(
    PJRT_LoadedExecutable_GetDeviceAssignment_Args,
    PJRT_LoadedExecutable_GetDeviceAssignment_Args_STRUCT_SIZE = serialized_device_assignment_deleter
);

#[repr(C)]
pub struct PJRT_Executable_Name_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub executable_name: *const c_char,
    pub executable_name_size: usize,
}
versioned!(PJRT_Executable_Name_Args, PJRT_Executable_Name_Args_STRUCT_SIZE = executable_name_size);

#[repr(C)]
pub struct PJRT_Executable_NumReplicas_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_replicas: usize,
}
versioned!(PJRT_Executable_NumReplicas_Args, PJRT_Executable_NumReplicas_Args_STRUCT_SIZE = num_replicas);

#[repr(C)]
pub struct PJRT_Executable_NumPartitions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_partitions: usize,
}
versioned!(PJRT_Executable_NumPartitions_Args, PJRT_Executable_NumPartitions_Args_STRUCT_SIZE = num_partitions);

#[repr(C)]
pub struct PJRT_LoadedExecutable_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}
versioned!(
    PJRT_LoadedExecutable_AddressableDevices_Args,
    PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE = num_addressable_devices
);

#[repr(C)]
pub struct PJRT_LoadedExecutable_Delete_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}
versioned!(PJRT_LoadedExecutable_Delete_Args, PJRT_LoadedExecutable_Delete_Args_STRUCT_SIZE = executable);

#[repr(C)]
pub struct PJRT_LoadedExecutable_IsDeleted_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub is_deleted: bool,
}
versioned!(PJRT_LoadedExecutable_IsDeleted_Args, PJRT_LoadedExecutable_IsDeleted_Args_STRUCT_SIZE = is_deleted);

/// Per-launch options. `non_donatable_input_indices` lists the arguments the
/// executable must not overwrite even where it aliases them to outputs.
#[repr(C)]
pub struct PJRT_ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub send_callbacks: *mut *mut PJRT_SendCallbackInfo,
    pub recv_callbacks: *mut *mut PJRT_RecvCallbackInfo,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: c_int,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut PJRT_ExecuteContext,
    pub call_location: *const c_char,
    pub num_tasks: usize,
    pub task_ids: *mut c_int,
    pub incarnation_ids: *mut i64,
}
versioned!(PJRT_ExecuteOptions, PJRT_ExecuteOptions_STRUCT_SIZE = incarnation_ids);

/// One launch: `argument_lists[device][arg]` in, the plugin fills
/// `output_lists[device][output]` (arrays the caller sized from
/// `PJRT_Executable_NumOutputs`) and, if the caller gives the array, one
/// completion event per device.
#[repr(C)]
pub struct PJRT_LoadedExecutable_Execute_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub options: *mut PJRT_ExecuteOptions,
    pub argument_lists: *const *const *mut PJRT_Buffer,
    pub num_devices: usize,
    pub num_args: usize,
    pub output_lists: *const *mut *mut PJRT_Buffer,
    pub device_complete_events: *mut *mut PJRT_Event,
    pub execute_device: *mut PJRT_Device,
}
versioned!(PJRT_LoadedExecutable_Execute_Args, PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE = execute_device);

#[repr(C)]
pub struct PJRT_Executable_NumOutputs_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
}
versioned!(PJRT_Executable_NumOutputs_Args, PJRT_Executable_NumOutputs_Args_STRUCT_SIZE = num_outputs);

#[repr(C)]
pub struct PJRT_Executable_Fingerprint_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub executable_fingerprint: *const c_char,
    pub executable_fingerprint_size: usize,
}
versioned!(
    PJRT_Executable_Fingerprint_Args,
    PJRT_Executable_Fingerprint_Args_STRUCT_SIZE = executable_fingerprint_size
);

#[repr(C)]
pub struct PJRT_Executable_OutputElementTypes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub output_types: *mut PJRT_Buffer_Type,
    pub num_output_types: usize,
}
versioned!(
    PJRT_Executable_OutputElementTypes_Args,
    PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE = num_output_types
);

#[repr(C)]
pub struct PJRT_Executable_OutputDimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
    pub dims: *const i64,
    pub dim_sizes: *const usize,
}
versioned!(PJRT_Executable_OutputDimensions_Args, PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE = dim_sizes);

#[repr(C)]
pub struct PJRT_Executable_OutputMemoryKinds_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
    pub memory_kinds: *const *const c_char,
    pub memory_kind_sizes: *const usize,
}
versioned!(
    PJRT_Executable_OutputMemoryKinds_Args,
    PJRT_Executable_OutputMemoryKinds_Args_STRUCT_SIZE = memory_kind_sizes
);

#[repr(C)]
pub struct PJRT_LoadedExecutable_Fingerprint_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub executable_fingerprint: *const c_char,
    pub executable_fingerprint_size: usize,
}
versioned!(
    PJRT_LoadedExecutable_Fingerprint_Args,
    PJRT_LoadedExecutable_Fingerprint_Args_STRUCT_SIZE = executable_fingerprint_size
);

#[repr(C)]
pub struct PJRT_Buffer_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
versioned!(PJRT_Buffer_Destroy_Args, PJRT_Buffer_Destroy_Args_STRUCT_SIZE = buffer);

#[repr(C)]
pub struct PJRT_Buffer_ElementType_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub type_: PJRT_Buffer_Type,
}
versioned!(PJRT_Buffer_ElementType_Args, PJRT_Buffer_ElementType_Args_STRUCT_SIZE = type_);

#[repr(C)]
pub struct PJRT_Buffer_Dimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dims: *const i64,
    pub num_dims: usize,
}
versioned!(PJRT_Buffer_Dimensions_Args, PJRT_Buffer_Dimensions_Args_STRUCT_SIZE = num_dims);

#[repr(C)]
pub struct PJRT_Buffer_UnpaddedDimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub unpadded_dims: *const i64,
    pub num_dims: usize,
}
versioned!(PJRT_Buffer_UnpaddedDimensions_Args, PJRT_Buffer_UnpaddedDimensions_Args_STRUCT_SIZE = num_dims);

#[repr(C)]
pub struct PJRT_Buffer_DynamicDimensionIndices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dynamic_dim_indices: *const usize,
    pub num_dynamic_dims: usize,
}
versioned!(
    PJRT_Buffer_DynamicDimensionIndices_Args,
    PJRT_Buffer_DynamicDimensionIndices_Args_STRUCT_SIZE = num_dynamic_dims
);

/// With `dst` null, a size query: the plugin writes `dst_size` only.
#[repr(C)]
pub struct PJRT_Buffer_ToHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub src: *mut PJRT_Buffer,
    pub host_layout: *mut PJRT_Buffer_MemoryLayout,
    pub dst: *mut c_void,
    pub dst_size: usize,
    pub event: *mut PJRT_Event,
}
versioned!(PJRT_Buffer_ToHostBuffer_Args, PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE = event);

#[repr(C)]
pub struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub on_device_size_in_bytes: usize,
}
versioned!(
    PJRT_Buffer_OnDeviceSizeInBytes_Args,
    PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE = on_device_size_in_bytes
);

#[repr(C)]
pub struct PJRT_Buffer_Delete_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
versioned!(PJRT_Buffer_Delete_Args, PJRT_Buffer_Delete_Args_STRUCT_SIZE = buffer);

#[repr(C)]
pub struct PJRT_Buffer_IsDeleted_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub is_deleted: bool,
}
versioned!(PJRT_Buffer_IsDeleted_Args, PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE = is_deleted);

#[repr(C)]
pub struct PJRT_Buffer_IsOnCpu_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub is_on_cpu: bool,
}
versioned!(PJRT_Buffer_IsOnCpu_Args, PJRT_Buffer_IsOnCpu_Args_STRUCT_SIZE = is_on_cpu);

#[repr(C)]
pub struct PJRT_Buffer_Device_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub device: *mut PJRT_Device,
}
versioned!(PJRT_Buffer_Device_Args, PJRT_Buffer_Device_Args_STRUCT_SIZE = device);

#[repr(C)]
pub struct PJRT_Buffer_Memory_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub memory: *mut PJRT_Memory,
}
versioned!(PJRT_Buffer_Memory_Args, PJRT_Buffer_Memory_Args_STRUCT_SIZE = memory);

#[repr(C)]
pub struct PJRT_Buffer_ReadyEvent_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub event: *mut PJRT_Event,
}
versioned!(PJRT_Buffer_ReadyEvent_Args, PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE = event);

#[repr(C)]
pub struct PJRT_Buffer_UnsafePointer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub buffer_pointer: usize,
}
versioned!(PJRT_Buffer_UnsafePointer_Args, PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE = buffer_pointer);

#[repr(C)]
pub struct PJRT_Buffer_IncreaseExternalReferenceCount_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
versioned!(
    PJRT_Buffer_IncreaseExternalReferenceCount_Args,
    PJRT_Buffer_IncreaseExternalReferenceCount_Args_STRUCT_SIZE = buffer
);

#[repr(C)]
pub struct PJRT_Buffer_DecreaseExternalReferenceCount_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
versioned!(
    PJRT_Buffer_DecreaseExternalReferenceCount_Args,
    PJRT_Buffer_DecreaseExternalReferenceCount_Args_STRUCT_SIZE = buffer
);

/// The buffer's address on the device: what TensorFlow stores as the
/// data pointer of the tensor it wraps around an output.
#[repr(C)]
pub struct PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub device_memory_ptr: *mut c_void,
}
versioned!(
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args,
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args_STRUCT_SIZE = device_memory_ptr
);

// ------------------------------------------ arguments not mirrored yet

opaque!(
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args,
    PJRT_Executable_GetCostAnalysis_Args,
    PJRT_Executable_OptimizedProgram_Args,
    PJRT_Executable_Serialize_Args,
    PJRT_Executable_DeserializeAndLoad_Args,
    PJRT_Buffer_GetMemoryLayout_Args,
    PJRT_Buffer_CopyToDevice_Args,
    PJRT_CopyToDeviceStream_Destroy_Args,
    PJRT_CopyToDeviceStream_AddChunk_Args,
    PJRT_CopyToDeviceStream_TotalBytes_Args,
    PJRT_CopyToDeviceStream_GranuleSize_Args,
    PJRT_CopyToDeviceStream_CurrentBytes_Args,
    PJRT_TopologyDescription_Create_Args,
    PJRT_TopologyDescription_Destroy_Args,
    PJRT_TopologyDescription_PlatformName_Args,
    PJRT_TopologyDescription_PlatformVersion_Args,
    PJRT_TopologyDescription_GetDeviceDescriptions_Args,
    PJRT_TopologyDescription_Serialize_Args,
    PJRT_TopologyDescription_Attributes_Args,
    PJRT_Compile_Args,
    PJRT_Buffer_CopyToMemory_Args,
    PJRT_Executable_GetCompiledMemoryStats_Args,
    PJRT_ExecuteContext_Create_Args,
    PJRT_ExecuteContext_Destroy_Args,
    PJRT_Buffer_CopyRawToHost_Args,
    PJRT_AsyncHostToDeviceTransferManager_Destroy_Args,
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args,
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args,
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args,
    PJRT_AsyncHostToDeviceTransferManager_Device_Args,
    PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args,
    PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args,
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args,
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args,
    PJRT_Client_DmaMap_Args,
    PJRT_Client_DmaUnmap_Args,
    PJRT_Client_CreateUninitializedBuffer_Args,
    PJRT_Client_UpdateGlobalProcessInfo_Args,
    PJRT_TopologyDescription_Deserialize_Args,
    PJRT_Client_CreateAliasBuffer_Args,
    PJRT_Client_FulfillAliasBuffer_Args,
    PJRT_Client_CreateErrorBuffer_Args,
    PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args,
    PJRT_Buffer_CopyRawToHostFuture_Args,
    PJRT_Device_PoisonExecution_Args,
    PJRT_Device_CreateAsyncTrackingEvent_Args,
    PJRT_AsyncTrackingEvent_Destroy_Args,
    PJRT_Executable_GetCompileOptions_Args,
    PJRT_Buffer_DonateWithControlDependency_Args,
);

// ------------------------------------------------------------ the table

/// The return type of an entry: an error the caller destroys, or null.
macro_rules! entry_return {
    () => {
        *mut PJRT_Error
    };
    ($ret:ty) => {
        $ret
    };
}

/// `Entry(Args) [-> Ret]`, in header order: one function type per entry
/// (the header's typedef, named as the slot), the [`PJRT_Api`] struct with
/// one `Option` of it per slot, and [`PJRT_API_ENTRIES`].
macro_rules! pjrt_api {
    ($( $entry:ident($args:ident) $(-> $ret:ty)? ),+ $(,)?) => {
        $(
            pub type $entry = unsafe extern "C" fn(args: *mut $args) -> entry_return!($($ret)?);
        )+

        /// The function table `GetPjrtApi()` returns. It must outlive every
        /// caller: TensorFlow keeps the pointer for the life of the process.
        #[repr(C)]
        pub struct PJRT_Api {
            pub struct_size: usize,
            pub extension_start: *mut PJRT_Extension_Base,
            pub pjrt_api_version: PJRT_Api_Version,
            $( pub $entry: Option<$entry>, )+
        }

        /// The slots' names, in table order.
        pub const PJRT_API_ENTRIES: &[&str] = &[$( stringify!($entry) ),+];
    };
}

pjrt_api! {
    PJRT_Error_Destroy(PJRT_Error_Destroy_Args) -> (),
    PJRT_Error_Message(PJRT_Error_Message_Args) -> (),
    PJRT_Error_GetCode(PJRT_Error_GetCode_Args),
    PJRT_Plugin_Initialize(PJRT_Plugin_Initialize_Args),
    PJRT_Plugin_Attributes(PJRT_Plugin_Attributes_Args),
    PJRT_Event_Destroy(PJRT_Event_Destroy_Args),
    PJRT_Event_IsReady(PJRT_Event_IsReady_Args),
    PJRT_Event_Error(PJRT_Event_Error_Args),
    PJRT_Event_Await(PJRT_Event_Await_Args),
    PJRT_Event_OnReady(PJRT_Event_OnReady_Args),
    PJRT_Client_Create(PJRT_Client_Create_Args),
    PJRT_Client_Destroy(PJRT_Client_Destroy_Args),
    PJRT_Client_PlatformName(PJRT_Client_PlatformName_Args),
    PJRT_Client_ProcessIndex(PJRT_Client_ProcessIndex_Args),
    PJRT_Client_PlatformVersion(PJRT_Client_PlatformVersion_Args),
    PJRT_Client_Devices(PJRT_Client_Devices_Args),
    PJRT_Client_AddressableDevices(PJRT_Client_AddressableDevices_Args),
    PJRT_Client_LookupDevice(PJRT_Client_LookupDevice_Args),
    PJRT_Client_LookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args),
    PJRT_Client_AddressableMemories(PJRT_Client_AddressableMemories_Args),
    PJRT_Client_Compile(PJRT_Client_Compile_Args),
    PJRT_Client_DefaultDeviceAssignment(PJRT_Client_DefaultDeviceAssignment_Args),
    PJRT_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args),
    PJRT_DeviceDescription_Id(PJRT_DeviceDescription_Id_Args),
    PJRT_DeviceDescription_ProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args),
    PJRT_DeviceDescription_Attributes(PJRT_DeviceDescription_Attributes_Args),
    PJRT_DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args),
    PJRT_DeviceDescription_DebugString(PJRT_DeviceDescription_DebugString_Args),
    PJRT_DeviceDescription_ToString(PJRT_DeviceDescription_ToString_Args),
    PJRT_Device_GetDescription(PJRT_Device_GetDescription_Args),
    PJRT_Device_IsAddressable(PJRT_Device_IsAddressable_Args),
    PJRT_Device_LocalHardwareId(PJRT_Device_LocalHardwareId_Args),
    PJRT_Device_AddressableMemories(PJRT_Device_AddressableMemories_Args),
    PJRT_Device_DefaultMemory(PJRT_Device_DefaultMemory_Args),
    PJRT_Device_MemoryStats(PJRT_Device_MemoryStats_Args),
    PJRT_Memory_Id(PJRT_Memory_Id_Args),
    PJRT_Memory_Kind(PJRT_Memory_Kind_Args),
    PJRT_Memory_DebugString(PJRT_Memory_DebugString_Args),
    PJRT_Memory_ToString(PJRT_Memory_ToString_Args),
    PJRT_Memory_AddressableByDevices(PJRT_Memory_AddressableByDevices_Args),
    PJRT_Executable_Destroy(PJRT_Executable_Destroy_Args),
    PJRT_Executable_Name(PJRT_Executable_Name_Args),
    PJRT_Executable_NumReplicas(PJRT_Executable_NumReplicas_Args),
    PJRT_Executable_NumPartitions(PJRT_Executable_NumPartitions_Args),
    PJRT_Executable_NumOutputs(PJRT_Executable_NumOutputs_Args),
    PJRT_Executable_SizeOfGeneratedCodeInBytes(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args),
    PJRT_Executable_GetCostAnalysis(PJRT_Executable_GetCostAnalysis_Args),
    PJRT_Executable_OutputMemoryKinds(PJRT_Executable_OutputMemoryKinds_Args),
    PJRT_Executable_OptimizedProgram(PJRT_Executable_OptimizedProgram_Args),
    PJRT_Executable_Serialize(PJRT_Executable_Serialize_Args),
    PJRT_LoadedExecutable_Destroy(PJRT_LoadedExecutable_Destroy_Args),
    PJRT_LoadedExecutable_GetExecutable(PJRT_LoadedExecutable_GetExecutable_Args),
    PJRT_LoadedExecutable_AddressableDevices(PJRT_LoadedExecutable_AddressableDevices_Args),
    PJRT_LoadedExecutable_Delete(PJRT_LoadedExecutable_Delete_Args),
    PJRT_LoadedExecutable_IsDeleted(PJRT_LoadedExecutable_IsDeleted_Args),
    PJRT_LoadedExecutable_Execute(PJRT_LoadedExecutable_Execute_Args),
    PJRT_Executable_DeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args),
    PJRT_LoadedExecutable_Fingerprint(PJRT_LoadedExecutable_Fingerprint_Args),
    PJRT_Buffer_Destroy(PJRT_Buffer_Destroy_Args),
    PJRT_Buffer_ElementType(PJRT_Buffer_ElementType_Args),
    PJRT_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args),
    PJRT_Buffer_UnpaddedDimensions(PJRT_Buffer_UnpaddedDimensions_Args),
    PJRT_Buffer_DynamicDimensionIndices(PJRT_Buffer_DynamicDimensionIndices_Args),
    PJRT_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args),
    PJRT_Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args),
    PJRT_Buffer_Device(PJRT_Buffer_Device_Args),
    PJRT_Buffer_Memory(PJRT_Buffer_Memory_Args),
    PJRT_Buffer_Delete(PJRT_Buffer_Delete_Args),
    PJRT_Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args),
    PJRT_Buffer_CopyToDevice(PJRT_Buffer_CopyToDevice_Args),
    PJRT_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args),
    PJRT_Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args),
    PJRT_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args),
    PJRT_Buffer_UnsafePointer(PJRT_Buffer_UnsafePointer_Args),
    PJRT_Buffer_IncreaseExternalReferenceCount(PJRT_Buffer_IncreaseExternalReferenceCount_Args),
    PJRT_Buffer_DecreaseExternalReferenceCount(PJRT_Buffer_DecreaseExternalReferenceCount_Args),
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args),
    PJRT_CopyToDeviceStream_Destroy(PJRT_CopyToDeviceStream_Destroy_Args),
    PJRT_CopyToDeviceStream_AddChunk(PJRT_CopyToDeviceStream_AddChunk_Args),
    PJRT_CopyToDeviceStream_TotalBytes(PJRT_CopyToDeviceStream_TotalBytes_Args),
    PJRT_CopyToDeviceStream_GranuleSize(PJRT_CopyToDeviceStream_GranuleSize_Args),
    PJRT_CopyToDeviceStream_CurrentBytes(PJRT_CopyToDeviceStream_CurrentBytes_Args),
    PJRT_TopologyDescription_Create(PJRT_TopologyDescription_Create_Args),
    PJRT_TopologyDescription_Destroy(PJRT_TopologyDescription_Destroy_Args),
    PJRT_TopologyDescription_PlatformName(PJRT_TopologyDescription_PlatformName_Args),
    PJRT_TopologyDescription_PlatformVersion(PJRT_TopologyDescription_PlatformVersion_Args),
    PJRT_TopologyDescription_GetDeviceDescriptions(PJRT_TopologyDescription_GetDeviceDescriptions_Args),
    PJRT_TopologyDescription_Serialize(PJRT_TopologyDescription_Serialize_Args),
    PJRT_TopologyDescription_Attributes(PJRT_TopologyDescription_Attributes_Args),
    PJRT_Compile(PJRT_Compile_Args),
    PJRT_Executable_OutputElementTypes(PJRT_Executable_OutputElementTypes_Args),
    PJRT_Executable_OutputDimensions(PJRT_Executable_OutputDimensions_Args),
    PJRT_Buffer_CopyToMemory(PJRT_Buffer_CopyToMemory_Args),
    PJRT_Client_CreateViewOfDeviceBuffer(PJRT_Client_CreateViewOfDeviceBuffer_Args),
    PJRT_Executable_Fingerprint(PJRT_Executable_Fingerprint_Args),
    PJRT_Client_TopologyDescription(PJRT_Client_TopologyDescription_Args),
    PJRT_Executable_GetCompiledMemoryStats(PJRT_Executable_GetCompiledMemoryStats_Args),
    PJRT_Memory_Kind_Id(PJRT_Memory_Kind_Id_Args),
    PJRT_ExecuteContext_Create(PJRT_ExecuteContext_Create_Args),
    PJRT_ExecuteContext_Destroy(PJRT_ExecuteContext_Destroy_Args),
    PJRT_Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args),
    PJRT_AsyncHostToDeviceTransferManager_Destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args),
    PJRT_AsyncHostToDeviceTransferManager_TransferData(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args),
    PJRT_Client_CreateBuffersForAsyncHostToDevice(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args),
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args),
    PJRT_AsyncHostToDeviceTransferManager_Device(PJRT_AsyncHostToDeviceTransferManager_Device_Args),
    PJRT_AsyncHostToDeviceTransferManager_BufferCount(PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args),
    PJRT_AsyncHostToDeviceTransferManager_BufferSize(PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args),
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError(PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args),
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata(PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args),
    PJRT_Client_DmaMap(PJRT_Client_DmaMap_Args),
    PJRT_Client_DmaUnmap(PJRT_Client_DmaUnmap_Args),
    PJRT_Client_CreateUninitializedBuffer(PJRT_Client_CreateUninitializedBuffer_Args),
    PJRT_Client_UpdateGlobalProcessInfo(PJRT_Client_UpdateGlobalProcessInfo_Args),
    PJRT_TopologyDescription_Deserialize(PJRT_TopologyDescription_Deserialize_Args),
    PJRT_Client_CreateAliasBuffer(PJRT_Client_CreateAliasBuffer_Args),
    PJRT_Client_FulfillAliasBuffer(PJRT_Client_FulfillAliasBuffer_Args),
    PJRT_LoadedExecutable_GetDeviceAssignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args),
    PJRT_Client_CreateErrorBuffer(PJRT_Client_CreateErrorBuffer_Args),
    PJRT_AsyncHostToDeviceTransferManager_TransferLiteral(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args),
    PJRT_Buffer_CopyRawToHostFuture(PJRT_Buffer_CopyRawToHostFuture_Args),
    PJRT_Device_PoisonExecution(PJRT_Device_PoisonExecution_Args),
    PJRT_Device_CreateAsyncTrackingEvent(PJRT_Device_CreateAsyncTrackingEvent_Args),
    PJRT_AsyncTrackingEvent_Destroy(PJRT_AsyncTrackingEvent_Destroy_Args),
    PJRT_Executable_GetCompileOptions(PJRT_Executable_GetCompileOptions_Args),
    PJRT_Buffer_DonateWithControlDependency(PJRT_Buffer_DonateWithControlDependency_Args),
    PJRT_Event_Create(PJRT_Event_Create_Args),
    PJRT_Event_Set(PJRT_Event_Set_Args),
}
versioned!(PJRT_Api, PJRT_Api_STRUCT_SIZE = PJRT_Event_Set);
