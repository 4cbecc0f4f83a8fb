//! Every `#[repr(C)]` mirror of `tfwasm::abi::ffi` against the C headers that
//! ship in the installed TensorFlow wheel: `stream_executor.h`,
//! `grappler.h` with the `tf_buffer.h` and `tf_datatype.h` it includes,
//! `pluggable_profiler.h`, `c_api.h` (`TF_StringView`), the PJRT C API
//! (`pjrt_c_api.h`) and the NextPluggableDevice plugin API (`plugin_c_api.h`).
//!
//! One table (the `layouts!` invocation below) names each struct and its
//! fields in header order. From it the test writes a program that prints
//! `offsetof`, `sizeof` and alignment of every field, each struct's size and
//! its `*_STRUCT_SIZE` macro (for the structs that have one), plus the enum and version constants; compiles it
//! with `c++` (`$CXX`) against the wheel's include directory; runs it; and compares
//! every number with what rustc computed for our mirrors. The program is C++
//! because `plugin_c_api.h` is: it includes XLA declarations written for C++
//! only. The structs are plain C structs; their layout is the same in both.
//!
//! Headers: `$TFWASM_TF_INCLUDE`, else
//! `.venv/lib/python3*/site-packages/tensorflow/include` (made by
//! `host/scripts/setup.sh`). Without them the test fails: it never skips.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use tfwasm::abi::ffi::grappler::*;
use tfwasm::abi::ffi::kernels::{self, TF_DataType, TF_StringView};
use tfwasm::abi::ffi::npd::*;
use tfwasm::abi::ffi::pjrt::*;
use tfwasm::abi::ffi::profiler::*;
use tfwasm::abi::ffi::status::{self, TF_Code};
use tfwasm::abi::ffi::stream_executor::*;

const HEADERS: [&str; 6] = [
    "tensorflow/c/experimental/stream_executor/stream_executor.h",
    "tensorflow/c/experimental/grappler/grappler.h",
    "tensorflow/c/experimental/pluggable_profiler/pluggable_profiler.h",
    "tensorflow/c/c_api.h",
    "tensorflow/compiler/xla/pjrt/c/pjrt_c_api.h",
    "tensorflow/core/common_runtime/next_pluggable_device/c/plugin_c_api.h",
];

struct StructLayout {
    name: &'static str,
    /// The header's `TF_OFFSET_OF_END` macro, compared with `struct_size()`;
    /// `None` for a struct without `struct_size` (`TF_Buffer`).
    size_macro: Option<&'static str>,
    struct_size: Option<usize>,
    size: usize,
    align: usize,
    fields: Vec<FieldLayout>,
}

struct FieldLayout {
    rust: &'static str,
    c: &'static str,
    offset: usize,
    size: usize,
    align: usize,
}

/// Size and alignment of a field's type, from a projection that is never called.
fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}
fn field_align<T, F>(_: impl Fn(&T) -> &F) -> usize {
    align_of::<F>()
}

macro_rules! c_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $c:literal) => {
        $c
    };
}

/// The size macro and `struct_size()` of a row, if it names a macro.
macro_rules! struct_size {
    ($ty:ident) => {
        (None::<&'static str>, None::<usize>)
    };
    ($ty:ident $size_macro:ident) => {
        (Some(stringify!($size_macro)), Some($ty::struct_size()))
    };
}

/// `Struct / STRUCT_SIZE_MACRO { field, field as "c_name", ... }`, fields in
/// header order; `Struct { ... }` for a struct without `struct_size`.
macro_rules! layouts {
    ($( $ty:ident $(/ $size_macro:ident)? { $( $field:ident $(as $c:literal)? ),+ $(,)? } )+) => {
        fn layouts() -> Vec<StructLayout> {
            vec![$(
                StructLayout {
                    name: stringify!($ty),
                    size_macro: struct_size!($ty $($size_macro)?).0,
                    struct_size: struct_size!($ty $($size_macro)?).1,
                    size: size_of::<$ty>(),
                    align: align_of::<$ty>(),
                    fields: vec![$(
                        FieldLayout {
                            rust: stringify!($field),
                            c: c_name!($field $($c)?),
                            offset: offset_of!($ty, $field),
                            size: field_size(|s: &$ty| &s.$field),
                            align: field_align(|s: &$ty| &s.$field),
                        },
                    )+],
                },
            )+]
        }
    };
}

// The table. SE 0.0.1, `stream_executor.h` of TensorFlow 2.21.
layouts! {
    SP_TimerFns / SP_TIMER_FNS_STRUCT_SIZE { struct_size, ext, nanoseconds }
    SP_AllocatorStats / SP_ALLOCATORSTATS_STRUCT_SIZE {
        struct_size, num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size,
        has_bytes_limit, bytes_limit, bytes_reserved, peak_bytes_reserved,
        has_bytes_reservable_limit, bytes_reservable_limit, largest_free_block_bytes,
    }
    SP_DeviceMemoryBase / SP_DEVICE_MEMORY_BASE_STRUCT_SIZE { struct_size, ext, opaque, size, payload }
    SP_Device / SP_DEVICE_STRUCT_SIZE {
        struct_size, ext, ordinal, device_handle, hardware_name, device_vendor, pci_bus_id,
    }
    SE_CreateDeviceParams / SE_CREATE_DEVICE_PARAMS_STRUCT_SIZE { struct_size, ext, ordinal, device }
    SP_DeviceFns / SP_DEVICE_FNS_STRUCT_SIZE {
        struct_size, ext, get_numa_node, get_memory_bandwidth, get_gflops,
    }
    SE_CreateDeviceFnsParams / SE_CREATE_DEVICE_FNS_PARAMS_STRUCT_SIZE { struct_size, ext, device_fns }
    SP_StreamExecutor / SP_STREAMEXECUTOR_STRUCT_SIZE {
        struct_size, ext,
        allocate, deallocate, host_memory_allocate, host_memory_deallocate,
        unified_memory_allocate, unified_memory_deallocate, get_allocator_stats,
        device_memory_usage,
        create_stream, destroy_stream, create_stream_dependency, get_stream_status,
        create_event, destroy_event, get_event_status, record_event, wait_for_event,
        create_timer, destroy_timer, start_timer, stop_timer,
        memcpy_dtoh, memcpy_htod, memcpy_dtod, sync_memcpy_dtoh, sync_memcpy_htod,
        sync_memcpy_dtod,
        block_host_for_event, block_host_until_done, synchronize_all_activity,
        mem_zero, memset, memset32, host_callback,
    }
    SE_CreateStreamExecutorParams / SE_CREATE_STREAM_EXECUTOR_PARAMS_STRUCT_SIZE {
        struct_size, ext, stream_executor,
    }
    SP_Platform / SP_PLATFORM_STRUCT_SIZE {
        struct_size, ext, name, type_ as "type",
        supports_unified_memory, use_bfc_allocator, force_memory_growth,
    }
    SP_PlatformFns / SP_PLATFORM_FNS_STRUCT_SIZE {
        struct_size, ext, get_device_count, create_device, destroy_device,
        create_device_fns, destroy_device_fns, create_stream_executor,
        destroy_stream_executor, create_timer_fns, destroy_timer_fns,
    }
    SE_PlatformRegistrationParams / SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE {
        struct_size, ext, major_version, minor_version, patch_version,
        platform, platform_fns, destroy_platform, destroy_platform_fns,
    }
    // GO 0.0.1, `grappler.h` and `tf_buffer.h` of TensorFlow 2.21.
    TF_Buffer { data, length, data_deallocator }
    TP_OptimizerConfigs / TP_OPTIMIZER_CONFIGS_STRUCT_SIZE {
        struct_size, ext, disable_model_pruning, implementation_selector,
        function_optimization, common_subgraph_elimination, arithmetic_optimization,
        debug_stripper, constant_folding, shape_optimization, auto_mixed_precision,
        auto_mixed_precision_onednn_bfloat16, auto_mixed_precision_mkl,
        pin_to_host_optimization, layout_optimizer, remapping, loop_optimization,
        dependency_optimization, auto_parallel, memory_optimization,
        scoped_allocator_optimization,
    }
    TP_Optimizer / TP_OPTIMIZER_STRUCT_SIZE { struct_size, ext, create_func, optimize_func, destroy_func }
    TP_OptimizerRegistrationParams / TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE {
        struct_size, ext, major_version, minor_version, patch_version,
        device_type, optimizer_configs, optimizer,
    }
    // TP 0.0.1, `pluggable_profiler.h` of TensorFlow 2.21.
    TP_Profiler / TP_PROFILER_STRUCT_SIZE { struct_size, ext, device_type }
    TP_ProfilerFns / TP_PROFILER_FNS_STRUCT_SIZE { struct_size, ext, start, stop, collect_data_xspace }
    TF_ProfilerRegistrationParams / TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE {
        struct_size, ext, major_version, minor_version, patch_version,
        profiler, profiler_fns, destroy_profiler, destroy_profiler_fns,
    }
    // `c_api.h`: how kernels.h returns a node's name.
    TF_StringView { data, len }
    // PJRT C API 0.90, `pjrt_c_api.h` of TensorFlow 2.21 (under `tensorflow/compiler/`):
    // the shared structs, the arguments of every entry tfwasm mirrors (in header
    // order) and the function table, every slot by name. The unions' first
    // members stand for them (`value`: `string_value`, `layout`: `tiled`).
    PJRT_Extension_Base / PJRT_Extension_Base_STRUCT_SIZE { struct_size, type_ as "type", next }
    PJRT_Api_Version / PJRT_Api_Version_STRUCT_SIZE { struct_size, extension_start, major_version, minor_version }
    PJRT_NamedValue / PJRT_NamedValue_STRUCT_SIZE {
        struct_size, extension_start, name, name_size, type_ as "type", value as "string_value", value_size,
    }
    PJRT_Buffer_MemoryLayout_Tiled / PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE {
        struct_size, extension_start, minor_to_major, minor_to_major_size, tile_dims, tile_dim_sizes, num_tiles,
    }
    PJRT_Buffer_MemoryLayout_Strides / PJRT_Buffer_MemoryLayout_Strides_STRUCT_SIZE {
        struct_size, extension_start, byte_strides, num_byte_strides,
    }
    PJRT_Buffer_MemoryLayout / PJRT_Buffer_MemoryLayout_STRUCT_SIZE {
        struct_size, extension_start, layout as "tiled", type_ as "type",
    }
    PJRT_Error_Destroy_Args / PJRT_Error_Destroy_Args_STRUCT_SIZE { struct_size, extension_start, error }
    PJRT_Error_Message_Args / PJRT_Error_Message_Args_STRUCT_SIZE {
        struct_size, extension_start, error, message, message_size,
    }
    PJRT_Error_GetCode_Args / PJRT_Error_GetCode_Args_STRUCT_SIZE { struct_size, extension_start, error, code }
    PJRT_Plugin_Initialize_Args / PJRT_Plugin_Initialize_Args_STRUCT_SIZE { struct_size, extension_start }
    PJRT_Plugin_Attributes_Args / PJRT_Plugin_Attributes_Args_STRUCT_SIZE {
        struct_size, extension_start, attributes, num_attributes,
    }
    PJRT_Event_Destroy_Args / PJRT_Event_Destroy_Args_STRUCT_SIZE { struct_size, extension_start, event }
    PJRT_Event_IsReady_Args / PJRT_Event_IsReady_Args_STRUCT_SIZE { struct_size, extension_start, event, is_ready }
    PJRT_Event_Error_Args / PJRT_Event_Error_Args_STRUCT_SIZE { struct_size, extension_start, event }
    PJRT_Event_Await_Args / PJRT_Event_Await_Args_STRUCT_SIZE { struct_size, extension_start, event }
    PJRT_Event_OnReady_Args / PJRT_Event_OnReady_Args_STRUCT_SIZE {
        struct_size, extension_start, event, callback, user_arg,
    }
    PJRT_Event_Create_Args / PJRT_Event_Create_Args_STRUCT_SIZE { struct_size, extension_start, event }
    PJRT_Event_Set_Args / PJRT_Event_Set_Args_STRUCT_SIZE {
        struct_size, extension_start, event, error_code, error_message, error_message_size,
    }
    PJRT_Client_Create_Args / PJRT_Client_Create_Args_STRUCT_SIZE {
        struct_size, extension_start, create_options, num_options, kv_get_callback, kv_get_user_arg, kv_put_callback,
        kv_put_user_arg, client, kv_try_get_callback, kv_try_get_user_arg,
    }
    PJRT_Client_Destroy_Args / PJRT_Client_Destroy_Args_STRUCT_SIZE { struct_size, extension_start, client }
    PJRT_Client_PlatformName_Args / PJRT_Client_PlatformName_Args_STRUCT_SIZE {
        struct_size, extension_start, client, platform_name, platform_name_size,
    }
    PJRT_Client_ProcessIndex_Args / PJRT_Client_ProcessIndex_Args_STRUCT_SIZE {
        struct_size, extension_start, client, process_index,
    }
    PJRT_Client_PlatformVersion_Args / PJRT_Client_PlatformVersion_Args_STRUCT_SIZE {
        struct_size, extension_start, client, platform_version, platform_version_size,
    }
    PJRT_Client_TopologyDescription_Args / PJRT_Client_TopologyDescription_Args_STRUCT_SIZE {
        struct_size, extension_start, client, topology,
    }
    PJRT_Client_Devices_Args / PJRT_Client_Devices_Args_STRUCT_SIZE {
        struct_size, extension_start, client, devices, num_devices,
    }
    PJRT_Client_AddressableDevices_Args / PJRT_Client_AddressableDevices_Args_STRUCT_SIZE {
        struct_size, extension_start, client, addressable_devices, num_addressable_devices,
    }
    PJRT_Client_LookupDevice_Args / PJRT_Client_LookupDevice_Args_STRUCT_SIZE {
        struct_size, extension_start, client, id, device,
    }
    PJRT_Client_LookupAddressableDevice_Args / PJRT_Client_LookupAddressableDevice_Args_STRUCT_SIZE {
        struct_size, extension_start, client, local_hardware_id, addressable_device,
    }
    PJRT_Client_AddressableMemories_Args / PJRT_Client_AddressableMemories_Args_STRUCT_SIZE {
        struct_size, extension_start, client, addressable_memories, num_addressable_memories,
    }
    PJRT_Program / PJRT_Program_STRUCT_SIZE { struct_size, extension_start, code, code_size, format, format_size }
    PJRT_Client_Compile_Args / PJRT_Client_Compile_Args_STRUCT_SIZE {
        struct_size, extension_start, client, program, compile_options, compile_options_size, executable,
    }
    PJRT_Client_DefaultDeviceAssignment_Args / PJRT_Client_DefaultDeviceAssignment_Args_STRUCT_SIZE {
        struct_size, extension_start, client, num_replicas, num_partitions, default_assignment_size,
        default_assignment,
    }
    PJRT_Client_BufferFromHostBuffer_Args / PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE {
        struct_size, extension_start, client, data, type_ as "type", dims, num_dims, byte_strides, num_byte_strides,
        host_buffer_semantics, device, memory, device_layout, done_with_host_buffer, buffer,
    }
    PJRT_Client_CreateViewOfDeviceBuffer_Args / PJRT_Client_CreateViewOfDeviceBuffer_Args_STRUCT_SIZE {
        struct_size, extension_start, client, device_buffer_ptr, dims, num_dims, element_type, layout, device,
        on_delete_callback, on_delete_callback_arg, stream, buffer, memory,
    }
    PJRT_DeviceDescription_Id_Args / PJRT_DeviceDescription_Id_Args_STRUCT_SIZE {
        struct_size, extension_start, device_description, id,
    }
    PJRT_DeviceDescription_ProcessIndex_Args / PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE {
        struct_size, extension_start, device_description, process_index,
    }
    PJRT_DeviceDescription_Attributes_Args / PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE {
        struct_size, extension_start, device_description, num_attributes, attributes,
    }
    PJRT_DeviceDescription_Kind_Args / PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE {
        struct_size, extension_start, device_description, device_kind, device_kind_size,
    }
    PJRT_DeviceDescription_DebugString_Args / PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE {
        struct_size, extension_start, device_description, debug_string, debug_string_size,
    }
    PJRT_DeviceDescription_ToString_Args / PJRT_DeviceDescription_ToString_Args_STRUCT_SIZE {
        struct_size, extension_start, device_description, to_string, to_string_size,
    }
    PJRT_Device_GetDescription_Args / PJRT_Device_GetDescription_Args_STRUCT_SIZE {
        struct_size, extension_start, device, device_description,
    }
    PJRT_Device_IsAddressable_Args / PJRT_Device_IsAddressable_Args_STRUCT_SIZE {
        struct_size, extension_start, device, is_addressable,
    }
    PJRT_Device_LocalHardwareId_Args / PJRT_Device_LocalHardwareId_Args_STRUCT_SIZE {
        struct_size, extension_start, device, local_hardware_id,
    }
    PJRT_Device_AddressableMemories_Args / PJRT_Device_AddressableMemories_Args_STRUCT_SIZE {
        struct_size, extension_start, device, memories, num_memories,
    }
    PJRT_Device_DefaultMemory_Args / PJRT_Device_DefaultMemory_Args_STRUCT_SIZE {
        struct_size, extension_start, device, memory,
    }
    PJRT_Device_MemoryStats_Args / PJRT_Device_MemoryStats_Args_STRUCT_SIZE {
        struct_size, extension_start, device, bytes_in_use, peak_bytes_in_use, peak_bytes_in_use_is_set, num_allocs,
        num_allocs_is_set, largest_alloc_size, largest_alloc_size_is_set, bytes_limit, bytes_limit_is_set,
        bytes_reserved, bytes_reserved_is_set, peak_bytes_reserved, peak_bytes_reserved_is_set,
        bytes_reservable_limit, bytes_reservable_limit_is_set, largest_free_block_bytes,
        largest_free_block_bytes_is_set, pool_bytes, pool_bytes_is_set, peak_pool_bytes, peak_pool_bytes_is_set,
    }
    PJRT_Memory_Id_Args / PJRT_Memory_Id_Args_STRUCT_SIZE { struct_size, extension_start, memory, id }
    PJRT_Memory_Kind_Args / PJRT_Memory_Kind_Args_STRUCT_SIZE { struct_size, extension_start, memory, kind, kind_size }
    PJRT_Memory_Kind_Id_Args / PJRT_Memory_Kind_Id_Args_STRUCT_SIZE { struct_size, extension_start, memory, kind_id }
    PJRT_Memory_DebugString_Args / PJRT_Memory_DebugString_Args_STRUCT_SIZE {
        struct_size, extension_start, memory, debug_string, debug_string_size,
    }
    PJRT_Memory_ToString_Args / PJRT_Memory_ToString_Args_STRUCT_SIZE {
        struct_size, extension_start, memory, to_string, to_string_size,
    }
    PJRT_Memory_AddressableByDevices_Args / PJRT_Memory_AddressableByDevices_Args_STRUCT_SIZE {
        struct_size, extension_start, memory, devices, num_devices,
    }
    PJRT_Executable_Destroy_Args / PJRT_Executable_Destroy_Args_STRUCT_SIZE { struct_size, extension_start, executable }
    PJRT_LoadedExecutable_Destroy_Args / PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE {
        struct_size, extension_start, executable,
    }
    PJRT_LoadedExecutable_GetExecutable_Args / PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE {
        struct_size, extension_start, loaded_executable, executable,
    }
    PJRT_LoadedExecutable_GetDeviceAssignment_Args / PJRT_LoadedExecutable_GetDeviceAssignment_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, serialized_bytes, serialized_bytes_size,
        serialized_device_assignment, serialized_device_assignment_deleter,
    }
    PJRT_Executable_Name_Args / PJRT_Executable_Name_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, executable_name, executable_name_size,
    }
    PJRT_Executable_NumReplicas_Args / PJRT_Executable_NumReplicas_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, num_replicas,
    }
    PJRT_Executable_NumPartitions_Args / PJRT_Executable_NumPartitions_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, num_partitions,
    }
    PJRT_LoadedExecutable_AddressableDevices_Args / PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, addressable_devices, num_addressable_devices,
    }
    PJRT_LoadedExecutable_Delete_Args / PJRT_LoadedExecutable_Delete_Args_STRUCT_SIZE {
        struct_size, extension_start, executable,
    }
    PJRT_LoadedExecutable_IsDeleted_Args / PJRT_LoadedExecutable_IsDeleted_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, is_deleted,
    }
    PJRT_ExecuteOptions / PJRT_ExecuteOptions_STRUCT_SIZE {
        struct_size, extension_start, send_callbacks, recv_callbacks, num_send_ops, num_recv_ops, launch_id,
        non_donatable_input_indices, num_non_donatable_input_indices, context, call_location, num_tasks, task_ids,
        incarnation_ids,
    }
    PJRT_LoadedExecutable_Execute_Args / PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, options, argument_lists, num_devices, num_args, output_lists,
        device_complete_events, execute_device,
    }
    PJRT_Executable_NumOutputs_Args / PJRT_Executable_NumOutputs_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, num_outputs,
    }
    PJRT_Executable_Fingerprint_Args / PJRT_Executable_Fingerprint_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, executable_fingerprint, executable_fingerprint_size,
    }
    PJRT_Executable_OutputElementTypes_Args / PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, output_types, num_output_types,
    }
    PJRT_Executable_OutputDimensions_Args / PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, num_outputs, dims, dim_sizes,
    }
    PJRT_Executable_OutputMemoryKinds_Args / PJRT_Executable_OutputMemoryKinds_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, num_outputs, memory_kinds, memory_kind_sizes,
    }
    PJRT_LoadedExecutable_Fingerprint_Args / PJRT_LoadedExecutable_Fingerprint_Args_STRUCT_SIZE {
        struct_size, extension_start, executable, executable_fingerprint, executable_fingerprint_size,
    }
    PJRT_Buffer_Destroy_Args / PJRT_Buffer_Destroy_Args_STRUCT_SIZE { struct_size, extension_start, buffer }
    PJRT_Buffer_ElementType_Args / PJRT_Buffer_ElementType_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, type_ as "type",
    }
    PJRT_Buffer_Dimensions_Args / PJRT_Buffer_Dimensions_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, dims, num_dims,
    }
    PJRT_Buffer_UnpaddedDimensions_Args / PJRT_Buffer_UnpaddedDimensions_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, unpadded_dims, num_dims,
    }
    PJRT_Buffer_DynamicDimensionIndices_Args / PJRT_Buffer_DynamicDimensionIndices_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, dynamic_dim_indices, num_dynamic_dims,
    }
    PJRT_Buffer_ToHostBuffer_Args / PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE {
        struct_size, extension_start, src, host_layout, dst, dst_size, event,
    }
    PJRT_Buffer_OnDeviceSizeInBytes_Args / PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, on_device_size_in_bytes,
    }
    PJRT_Buffer_Delete_Args / PJRT_Buffer_Delete_Args_STRUCT_SIZE { struct_size, extension_start, buffer }
    PJRT_Buffer_IsDeleted_Args / PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, is_deleted,
    }
    PJRT_Buffer_IsOnCpu_Args / PJRT_Buffer_IsOnCpu_Args_STRUCT_SIZE { struct_size, extension_start, buffer, is_on_cpu }
    PJRT_Buffer_Device_Args / PJRT_Buffer_Device_Args_STRUCT_SIZE { struct_size, extension_start, buffer, device }
    PJRT_Buffer_Memory_Args / PJRT_Buffer_Memory_Args_STRUCT_SIZE { struct_size, extension_start, buffer, memory }
    PJRT_Buffer_ReadyEvent_Args / PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, event,
    }
    PJRT_Buffer_UnsafePointer_Args / PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, buffer_pointer,
    }
    PJRT_Buffer_IncreaseExternalReferenceCount_Args / PJRT_Buffer_IncreaseExternalReferenceCount_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer,
    }
    PJRT_Buffer_DecreaseExternalReferenceCount_Args / PJRT_Buffer_DecreaseExternalReferenceCount_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer,
    }
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args / PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args_STRUCT_SIZE {
        struct_size, extension_start, buffer, device_memory_ptr,
    }
    PJRT_Api / PJRT_Api_STRUCT_SIZE {
        struct_size, extension_start, pjrt_api_version, PJRT_Error_Destroy, PJRT_Error_Message, PJRT_Error_GetCode,
        PJRT_Plugin_Initialize, PJRT_Plugin_Attributes, PJRT_Event_Destroy, PJRT_Event_IsReady, PJRT_Event_Error,
        PJRT_Event_Await, PJRT_Event_OnReady, PJRT_Client_Create, PJRT_Client_Destroy, PJRT_Client_PlatformName,
        PJRT_Client_ProcessIndex, PJRT_Client_PlatformVersion, PJRT_Client_Devices, PJRT_Client_AddressableDevices,
        PJRT_Client_LookupDevice, PJRT_Client_LookupAddressableDevice, PJRT_Client_AddressableMemories,
        PJRT_Client_Compile, PJRT_Client_DefaultDeviceAssignment, PJRT_Client_BufferFromHostBuffer,
        PJRT_DeviceDescription_Id, PJRT_DeviceDescription_ProcessIndex, PJRT_DeviceDescription_Attributes,
        PJRT_DeviceDescription_Kind, PJRT_DeviceDescription_DebugString, PJRT_DeviceDescription_ToString,
        PJRT_Device_GetDescription, PJRT_Device_IsAddressable, PJRT_Device_LocalHardwareId,
        PJRT_Device_AddressableMemories, PJRT_Device_DefaultMemory, PJRT_Device_MemoryStats, PJRT_Memory_Id,
        PJRT_Memory_Kind, PJRT_Memory_DebugString, PJRT_Memory_ToString, PJRT_Memory_AddressableByDevices,
        PJRT_Executable_Destroy, PJRT_Executable_Name, PJRT_Executable_NumReplicas, PJRT_Executable_NumPartitions,
        PJRT_Executable_NumOutputs, PJRT_Executable_SizeOfGeneratedCodeInBytes, PJRT_Executable_GetCostAnalysis,
        PJRT_Executable_OutputMemoryKinds, PJRT_Executable_OptimizedProgram, PJRT_Executable_Serialize,
        PJRT_LoadedExecutable_Destroy, PJRT_LoadedExecutable_GetExecutable, PJRT_LoadedExecutable_AddressableDevices,
        PJRT_LoadedExecutable_Delete, PJRT_LoadedExecutable_IsDeleted, PJRT_LoadedExecutable_Execute,
        PJRT_Executable_DeserializeAndLoad, PJRT_LoadedExecutable_Fingerprint, PJRT_Buffer_Destroy,
        PJRT_Buffer_ElementType, PJRT_Buffer_Dimensions, PJRT_Buffer_UnpaddedDimensions,
        PJRT_Buffer_DynamicDimensionIndices, PJRT_Buffer_GetMemoryLayout, PJRT_Buffer_OnDeviceSizeInBytes,
        PJRT_Buffer_Device, PJRT_Buffer_Memory, PJRT_Buffer_Delete, PJRT_Buffer_IsDeleted, PJRT_Buffer_CopyToDevice,
        PJRT_Buffer_ToHostBuffer, PJRT_Buffer_IsOnCpu, PJRT_Buffer_ReadyEvent, PJRT_Buffer_UnsafePointer,
        PJRT_Buffer_IncreaseExternalReferenceCount, PJRT_Buffer_DecreaseExternalReferenceCount,
        PJRT_Buffer_OpaqueDeviceMemoryDataPointer, PJRT_CopyToDeviceStream_Destroy, PJRT_CopyToDeviceStream_AddChunk,
        PJRT_CopyToDeviceStream_TotalBytes, PJRT_CopyToDeviceStream_GranuleSize, PJRT_CopyToDeviceStream_CurrentBytes,
        PJRT_TopologyDescription_Create, PJRT_TopologyDescription_Destroy, PJRT_TopologyDescription_PlatformName,
        PJRT_TopologyDescription_PlatformVersion, PJRT_TopologyDescription_GetDeviceDescriptions,
        PJRT_TopologyDescription_Serialize, PJRT_TopologyDescription_Attributes, PJRT_Compile,
        PJRT_Executable_OutputElementTypes, PJRT_Executable_OutputDimensions, PJRT_Buffer_CopyToMemory,
        PJRT_Client_CreateViewOfDeviceBuffer, PJRT_Executable_Fingerprint, PJRT_Client_TopologyDescription,
        PJRT_Executable_GetCompiledMemoryStats, PJRT_Memory_Kind_Id, PJRT_ExecuteContext_Create,
        PJRT_ExecuteContext_Destroy, PJRT_Buffer_CopyRawToHost, PJRT_AsyncHostToDeviceTransferManager_Destroy,
        PJRT_AsyncHostToDeviceTransferManager_TransferData, PJRT_Client_CreateBuffersForAsyncHostToDevice,
        PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer, PJRT_AsyncHostToDeviceTransferManager_Device,
        PJRT_AsyncHostToDeviceTransferManager_BufferCount, PJRT_AsyncHostToDeviceTransferManager_BufferSize,
        PJRT_AsyncHostToDeviceTransferManager_SetBufferError, PJRT_AsyncHostToDeviceTransferManager_AddMetadata,
        PJRT_Client_DmaMap, PJRT_Client_DmaUnmap, PJRT_Client_CreateUninitializedBuffer,
        PJRT_Client_UpdateGlobalProcessInfo, PJRT_TopologyDescription_Deserialize, PJRT_Client_CreateAliasBuffer,
        PJRT_Client_FulfillAliasBuffer, PJRT_LoadedExecutable_GetDeviceAssignment, PJRT_Client_CreateErrorBuffer,
        PJRT_AsyncHostToDeviceTransferManager_TransferLiteral, PJRT_Buffer_CopyRawToHostFuture,
        PJRT_Device_PoisonExecution, PJRT_Device_CreateAsyncTrackingEvent, PJRT_AsyncTrackingEvent_Destroy,
        PJRT_Executable_GetCompileOptions, PJRT_Buffer_DonateWithControlDependency, PJRT_Event_Create, PJRT_Event_Set,
    }
    // TFNPD 0.0.1, `plugin_c_api.h` of TensorFlow 2.21. `TFNPD_PLUGIN_PARAMS_STRUCT_SIZE`
    // ends at `is_pluggable_device`, before the last field.
    TFNPD_Api / TFNPD_Api_STRUCT_SIZE {
        struct_size, priv_ as "priv", TFNPD_NewDeviceEvent, TFNPD_DeviceEventAwait, TFNPD_DeviceEventIsReady,
        TFNPD_DeviceEventAndThen, TFNPD_DeviceEventDelete, TFNPD_DeviceAllocatorCreate, TFNPD_DeviceAllocateRaw,
        TFNPD_DeviceDeallocateRaw, TFNPD_DeviceAllocatorName, TFNPD_DeviceAllocatorAllocatesOpaqueHandle,
        TFNPD_DeviceAllocatorDelete, TFNPD_DeviceContextCreate, TFNPD_DeviceContextDelete,
        TFNPD_DeviceTensorToHostTensor, TFNPD_HostTensorToDeviceTensor, TFNPD_SameDeviceTensorCopy,
        TFNPD_SameDevicePjRtBufferCopy, TFNPD_XlaShapeToDeviceShapeRepresentation, TFNPD_GetDeviceCount,
        TFNPD_InitPluginInternalDeviceStates,
    }
    TFNPD_PluginParams / TFNPD_PLUGIN_PARAMS_STRUCT_SIZE {
        struct_size, ext, device_type, compilation_device_name, priority, is_pluggable_device,
        use_pjrt_on_demand_compile,
    }
}

/// Integer constants and scalar type sizes: (C expression, our value).
fn constants() -> Vec<(&'static str, i64)> {
    use SE_EventStatus::*;
    let mut constants = vec![
        ("SE_MAJOR", SE_MAJOR as i64),
        ("SE_MINOR", SE_MINOR as i64),
        ("SE_PATCH", SE_PATCH as i64),
        ("SE_EVENT_UNKNOWN", SE_EVENT_UNKNOWN as i64),
        ("SE_EVENT_ERROR", SE_EVENT_ERROR as i64),
        ("SE_EVENT_PENDING", SE_EVENT_PENDING as i64),
        ("SE_EVENT_COMPLETE", SE_EVENT_COMPLETE as i64),
        ("sizeof(SE_EventStatus)", size_of::<SE_EventStatus>() as i64),
        ("sizeof(TF_Bool)", size_of::<TF_Bool>() as i64),
        ("sizeof(TF_Code)", size_of::<TF_Code>() as i64),
        ("GO_MAJOR", GO_MAJOR as i64),
        ("GO_MINOR", GO_MINOR as i64),
        ("GO_PATCH", GO_PATCH as i64),
        ("TP_MAJOR", TP_MAJOR as i64),
        ("TP_MINOR", TP_MINOR as i64),
        ("TP_PATCH", TP_PATCH as i64),
        ("TF_TriState_Default", TF_TriState::TF_TriState_Default as i64),
        ("TF_TriState_Off", TF_TriState::TF_TriState_Off as i64),
        ("TF_TriState_On", TF_TriState::TF_TriState_On as i64),
        ("sizeof(TF_TriState)", size_of::<TF_TriState>() as i64),
        ("sizeof(TF_DataType)", size_of::<TF_DataType>() as i64),
    ];
    constants.extend(
        [
            ("TF_FLOAT", kernels::TF_FLOAT),
            ("TF_DOUBLE", kernels::TF_DOUBLE),
            ("TF_INT32", kernels::TF_INT32),
            ("TF_UINT8", kernels::TF_UINT8),
            ("TF_INT64", kernels::TF_INT64),
            ("TF_BOOL", kernels::TF_BOOL),
            ("TF_BFLOAT16", kernels::TF_BFLOAT16),
            ("TF_HALF", kernels::TF_HALF),
            ("TF_UINT64", kernels::TF_UINT64),
        ]
        .map(|(name, dtype)| (name, dtype as i64)),
    );
    constants.extend(
        [
            ("TF_OK", status::TF_OK),
            ("TF_CANCELLED", status::TF_CANCELLED),
            ("TF_UNKNOWN", status::TF_UNKNOWN),
            ("TF_INVALID_ARGUMENT", status::TF_INVALID_ARGUMENT),
            ("TF_DEADLINE_EXCEEDED", status::TF_DEADLINE_EXCEEDED),
            ("TF_NOT_FOUND", status::TF_NOT_FOUND),
            ("TF_ALREADY_EXISTS", status::TF_ALREADY_EXISTS),
            ("TF_PERMISSION_DENIED", status::TF_PERMISSION_DENIED),
            ("TF_RESOURCE_EXHAUSTED", status::TF_RESOURCE_EXHAUSTED),
            ("TF_FAILED_PRECONDITION", status::TF_FAILED_PRECONDITION),
            ("TF_ABORTED", status::TF_ABORTED),
            ("TF_OUT_OF_RANGE", status::TF_OUT_OF_RANGE),
            ("TF_UNIMPLEMENTED", status::TF_UNIMPLEMENTED),
            ("TF_INTERNAL", status::TF_INTERNAL),
            ("TF_UNAVAILABLE", status::TF_UNAVAILABLE),
            ("TF_DATA_LOSS", status::TF_DATA_LOSS),
            ("TF_UNAUTHENTICATED", status::TF_UNAUTHENTICATED),
        ]
        .map(|(name, code)| (name, code as i64)),
    );
    constants.extend(
        [
            ("PJRT_API_MAJOR", PJRT_API_MAJOR),
            ("PJRT_API_MINOR", PJRT_API_MINOR),
            ("TFNPD_MAJOR", TFNPD_MAJOR),
            ("TFNPD_MINOR", TFNPD_MINOR),
            ("TFNPD_PATCH", TFNPD_PATCH),
            ("PJRT_Extension_Type_Gpu_Custom_Call", PJRT_Extension_Type_Gpu_Custom_Call),
            ("PJRT_Extension_Type_Profiler", PJRT_Extension_Type_Profiler),
            ("PJRT_Extension_Type_Custom_Partitioner", PJRT_Extension_Type_Custom_Partitioner),
            ("PJRT_Extension_Type_Stream", PJRT_Extension_Type_Stream),
            ("PJRT_Extension_Type_Layouts", PJRT_Extension_Type_Layouts),
            ("PJRT_Extension_Type_FFI", PJRT_Extension_Type_FFI),
            ("PJRT_Extension_Type_MemoryDescriptions", PJRT_Extension_Type_MemoryDescriptions),
            ("PJRT_Extension_Type_Triton", PJRT_Extension_Type_Triton),
            ("PJRT_Extension_Type_RawBuffer", PJRT_Extension_Type_RawBuffer),
            ("PJRT_Extension_Type_PhaseCompile", PJRT_Extension_Type_PhaseCompile),
            ("PJRT_Extension_Type_Example", PJRT_Extension_Type_Example),
            ("PJRT_Extension_Type_Unknown", PJRT_Extension_Type_Unknown),
            ("PJRT_Extension_Type_CrossHostTransfers", PJRT_Extension_Type_CrossHostTransfers),
            ("PJRT_Extension_Type_ExecutableMetadata", PJRT_Extension_Type_ExecutableMetadata),
            ("PJRT_Extension_Type_Callback", PJRT_Extension_Type_Callback),
            ("PJRT_Extension_Type_HostAllocator", PJRT_Extension_Type_HostAllocator),
            ("PJRT_Extension_Type_TpuTopology", PJRT_Extension_Type_TpuTopology),
            ("PJRT_Extension_Type_TpuExecutable", PJRT_Extension_Type_TpuExecutable),
            ("PJRT_Extension_Type_Megascale", PJRT_Extension_Type_Megascale),
            ("PJRT_Error_Code_OK", PJRT_Error_Code_OK),
            ("PJRT_Error_Code_CANCELLED", PJRT_Error_Code_CANCELLED),
            ("PJRT_Error_Code_UNKNOWN", PJRT_Error_Code_UNKNOWN),
            ("PJRT_Error_Code_INVALID_ARGUMENT", PJRT_Error_Code_INVALID_ARGUMENT),
            ("PJRT_Error_Code_DEADLINE_EXCEEDED", PJRT_Error_Code_DEADLINE_EXCEEDED),
            ("PJRT_Error_Code_NOT_FOUND", PJRT_Error_Code_NOT_FOUND),
            ("PJRT_Error_Code_ALREADY_EXISTS", PJRT_Error_Code_ALREADY_EXISTS),
            ("PJRT_Error_Code_PERMISSION_DENIED", PJRT_Error_Code_PERMISSION_DENIED),
            ("PJRT_Error_Code_RESOURCE_EXHAUSTED", PJRT_Error_Code_RESOURCE_EXHAUSTED),
            ("PJRT_Error_Code_FAILED_PRECONDITION", PJRT_Error_Code_FAILED_PRECONDITION),
            ("PJRT_Error_Code_ABORTED", PJRT_Error_Code_ABORTED),
            ("PJRT_Error_Code_OUT_OF_RANGE", PJRT_Error_Code_OUT_OF_RANGE),
            ("PJRT_Error_Code_UNIMPLEMENTED", PJRT_Error_Code_UNIMPLEMENTED),
            ("PJRT_Error_Code_INTERNAL", PJRT_Error_Code_INTERNAL),
            ("PJRT_Error_Code_UNAVAILABLE", PJRT_Error_Code_UNAVAILABLE),
            ("PJRT_Error_Code_DATA_LOSS", PJRT_Error_Code_DATA_LOSS),
            ("PJRT_Error_Code_UNAUTHENTICATED", PJRT_Error_Code_UNAUTHENTICATED),
            ("PJRT_NamedValue_kString", PJRT_NamedValue_kString),
            ("PJRT_NamedValue_kInt64", PJRT_NamedValue_kInt64),
            ("PJRT_NamedValue_kInt64List", PJRT_NamedValue_kInt64List),
            ("PJRT_NamedValue_kFloat", PJRT_NamedValue_kFloat),
            ("PJRT_NamedValue_kBool", PJRT_NamedValue_kBool),
            ("PJRT_Buffer_Type_INVALID", PJRT_Buffer_Type_INVALID),
            ("PJRT_Buffer_Type_PRED", PJRT_Buffer_Type_PRED),
            ("PJRT_Buffer_Type_S8", PJRT_Buffer_Type_S8),
            ("PJRT_Buffer_Type_S16", PJRT_Buffer_Type_S16),
            ("PJRT_Buffer_Type_S32", PJRT_Buffer_Type_S32),
            ("PJRT_Buffer_Type_S64", PJRT_Buffer_Type_S64),
            ("PJRT_Buffer_Type_U8", PJRT_Buffer_Type_U8),
            ("PJRT_Buffer_Type_U16", PJRT_Buffer_Type_U16),
            ("PJRT_Buffer_Type_U32", PJRT_Buffer_Type_U32),
            ("PJRT_Buffer_Type_U64", PJRT_Buffer_Type_U64),
            ("PJRT_Buffer_Type_F16", PJRT_Buffer_Type_F16),
            ("PJRT_Buffer_Type_F32", PJRT_Buffer_Type_F32),
            ("PJRT_Buffer_Type_F64", PJRT_Buffer_Type_F64),
            ("PJRT_Buffer_Type_BF16", PJRT_Buffer_Type_BF16),
            ("PJRT_Buffer_Type_C64", PJRT_Buffer_Type_C64),
            ("PJRT_Buffer_Type_C128", PJRT_Buffer_Type_C128),
            ("PJRT_Buffer_Type_F8E5M2", PJRT_Buffer_Type_F8E5M2),
            ("PJRT_Buffer_Type_F8E4M3FN", PJRT_Buffer_Type_F8E4M3FN),
            ("PJRT_Buffer_Type_F8E4M3B11FNUZ", PJRT_Buffer_Type_F8E4M3B11FNUZ),
            ("PJRT_Buffer_Type_F8E5M2FNUZ", PJRT_Buffer_Type_F8E5M2FNUZ),
            ("PJRT_Buffer_Type_F8E4M3FNUZ", PJRT_Buffer_Type_F8E4M3FNUZ),
            ("PJRT_Buffer_Type_S4", PJRT_Buffer_Type_S4),
            ("PJRT_Buffer_Type_U4", PJRT_Buffer_Type_U4),
            ("PJRT_Buffer_Type_TOKEN", PJRT_Buffer_Type_TOKEN),
            ("PJRT_Buffer_Type_S2", PJRT_Buffer_Type_S2),
            ("PJRT_Buffer_Type_U2", PJRT_Buffer_Type_U2),
            ("PJRT_Buffer_Type_F8E4M3", PJRT_Buffer_Type_F8E4M3),
            ("PJRT_Buffer_Type_F8E3M4", PJRT_Buffer_Type_F8E3M4),
            ("PJRT_Buffer_Type_F8E8M0FNU", PJRT_Buffer_Type_F8E8M0FNU),
            ("PJRT_Buffer_Type_F4E2M1FN", PJRT_Buffer_Type_F4E2M1FN),
            ("PJRT_HostBufferSemantics_kImmutableOnlyDuringCall", PJRT_HostBufferSemantics_kImmutableOnlyDuringCall),
            (
                "PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes",
                PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes,
            ),
            ("PJRT_HostBufferSemantics_kImmutableZeroCopy", PJRT_HostBufferSemantics_kImmutableZeroCopy),
            ("PJRT_HostBufferSemantics_kMutableZeroCopy", PJRT_HostBufferSemantics_kMutableZeroCopy),
            ("PJRT_Buffer_MemoryLayout_Type_Tiled", PJRT_Buffer_MemoryLayout_Type_Tiled),
            ("PJRT_Buffer_MemoryLayout_Type_Strides", PJRT_Buffer_MemoryLayout_Type_Strides),
            ("XLA_LayoutPreference_kNoPreference", XLA_LayoutPreference_kNoPreference),
            (
                "XLA_LayoutPreference_kTpuPreferCompactChunkPaddedLayout",
                XLA_LayoutPreference_kTpuPreferCompactChunkPaddedLayout,
            ),
            ("XLA_LayoutPreference_kTpuPreferLinearLayout", XLA_LayoutPreference_kTpuPreferLinearLayout),
        ]
        .map(|(name, value)| (name, value as i64)),
    );
    constants.extend([
        ("sizeof(PJRT_Extension_Type)", size_of::<PJRT_Extension_Type>() as i64),
        ("sizeof(PJRT_Error_Code)", size_of::<PJRT_Error_Code>() as i64),
        ("sizeof(PJRT_NamedValue_Type)", size_of::<PJRT_NamedValue_Type>() as i64),
        ("sizeof(PJRT_Buffer_Type)", size_of::<PJRT_Buffer_Type>() as i64),
        ("sizeof(PJRT_HostBufferSemantics)", size_of::<PJRT_HostBufferSemantics>() as i64),
        ("sizeof(PJRT_Buffer_MemoryLayout_Type)", size_of::<PJRT_Buffer_MemoryLayout_Type>() as i64),
        ("sizeof(XLA_LayoutPreference)", size_of::<XLA_LayoutPreference>() as i64),
        // The anonymous unions: every member sits where our one union field does.
        ("offsetof(PJRT_NamedValue, int64_value)", offset_of!(PJRT_NamedValue, value) as i64),
        ("offsetof(PJRT_NamedValue, int64_array_value)", offset_of!(PJRT_NamedValue, value) as i64),
        ("offsetof(PJRT_NamedValue, float_value)", offset_of!(PJRT_NamedValue, value) as i64),
        ("offsetof(PJRT_NamedValue, bool_value)", offset_of!(PJRT_NamedValue, value) as i64),
        ("offsetof(PJRT_Buffer_MemoryLayout, strides)", offset_of!(PJRT_Buffer_MemoryLayout, layout) as i64),
    ]);
    constants
}

/// Every number to compare: (C expression, what rustc says).
fn probes() -> Vec<(String, i64)> {
    let mut probes = Vec::new();
    for s in layouts() {
        let ty = s.name;
        probes.push((format!("sizeof({ty})"), s.size as i64));
        probes.push((format!("__alignof__({ty})"), s.align as i64));
        if let (Some(size_macro), Some(struct_size)) = (s.size_macro, s.struct_size) {
            probes.push((size_macro.to_string(), struct_size as i64));
        }
        for f in &s.fields {
            let member = format!("((({ty} *)0)->{})", f.c);
            probes.push((format!("offsetof({ty}, {})", f.c), f.offset as i64));
            probes.push((format!("sizeof{member}"), f.size as i64));
            probes.push((format!("__alignof__{member}"), f.align as i64));
        }
    }
    probes.extend(constants().into_iter().map(|(expr, value)| (expr.to_string(), value)));
    probes
}

fn include_dir() -> PathBuf {
    const HINT: &str = "run `bash host/scripts/setup.sh` to install TensorFlow into .venv, \
                        or set TFWASM_TF_INCLUDE to a wheel's tensorflow/include directory";
    let dir = match std::env::var_os("TFWASM_TF_INCLUDE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let lib = crate::support::workspace().join(".venv/lib");
            let python = std::fs::read_dir(&lib).ok().and_then(|entries| {
                entries.filter_map(|entry| entry.ok().map(|entry| entry.path())).find(|path| {
                    let name = path.file_name().unwrap_or_default().to_string_lossy();
                    name.starts_with("python3") && path.join("site-packages/tensorflow/include").is_dir()
                })
            });
            match python {
                Some(python) => python.join("site-packages/tensorflow/include"),
                None => panic!("no TensorFlow headers under {}: {HINT}", lib.display()),
            }
        }
    };
    for header in HEADERS {
        assert!(dir.join(header).is_file(), "no {header} under {}: {HINT}", dir.display());
    }
    dir
}

/// Compiles and runs the generated C program once; maps each C expression to its value.
fn c_values() -> &'static BTreeMap<String, i64> {
    static VALUES: OnceLock<BTreeMap<String, i64>> = OnceLock::new();
    VALUES.get_or_init(|| {
        let include = include_dir();
        let mut source = String::from("#include <stddef.h>\n#include <stdio.h>\n");
        for header in HEADERS {
            writeln!(source, "#include \"{header}\"").unwrap();
        }
        source.push_str("\nint main(void) {\n");
        for (expr, _) in probes() {
            writeln!(source, "  printf(\"%lld\\n\", (long long)({expr}));").unwrap();
        }
        source.push_str("  return 0;\n}\n");

        let dir = std::env::temp_dir().join(format!("tfwasm-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c_file, exe) = (dir.join("layout.cc"), dir.join("layout"));
        std::fs::write(&c_file, &source).unwrap();
        let cc = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let compiled = Command::new(&cc)
            .arg("-std=c++17")
            .arg("-I")
            .arg(&include)
            .arg(&c_file)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{cc}` (set CXX): {e}"));
        assert!(
            compiled.status.success(),
            "{cc} failed on the layout probe against {}:\n{}",
            include.display(),
            String::from_utf8_lossy(&compiled.stderr)
        );
        let ran = Command::new(&exe).output().expect("run the layout probe");
        assert!(ran.status.success(), "the layout probe failed: {:?}", ran.status);
        let _ = std::fs::remove_dir_all(&dir);

        let stdout = String::from_utf8(ran.stdout).unwrap();
        let values: Vec<i64> = stdout.lines().map(|line| line.parse().unwrap()).collect();
        let exprs = probes().into_iter().map(|(expr, _)| expr);
        assert_eq!(values.len(), exprs.len(), "the layout probe printed the wrong number of lines");
        exprs.zip(values).collect()
    })
}

fn mismatches(probes: impl IntoIterator<Item = (String, i64)>) -> Vec<String> {
    let c = c_values();
    probes
        .into_iter()
        .filter(|(expr, rust)| c[expr] != *rust)
        .map(|(expr, rust)| format!("{expr}: C {} vs Rust {rust}", c[&expr]))
        .collect()
}

/// Whether the headers are a newer TensorFlow's than the one the mirrors
/// are of (`bash tests/run.sh --tf nightly` sets `TFWASM_TF=nightly`).
/// There a struct may have grown fields appended after the ones the plugin
/// mirrors (2.22 appends `create_stream_with_options` to
/// `SP_StreamExecutor`): TensorFlow reads only what the `struct_size` we
/// report covers, and we read only our prefix of its structs. Every field
/// we mirror must still sit where the header puts it.
fn newer_headers() -> bool {
    std::env::var("TFWASM_TF").as_deref() == Ok("nightly")
}

#[test]
fn struct_sizes_offsets_and_struct_size_macros_match_the_headers() {
    let constants: Vec<_> = constants().into_iter().map(|(expr, _)| expr.to_string()).collect();
    let c = c_values();
    let (appended, wrong): (Vec<_>, Vec<_>) =
        mismatches(probes().into_iter().filter(|(expr, _)| !constants.contains(expr))).into_iter().partition(|line| {
            let expr = line.split(':').next().unwrap_or_default();
            let whole_struct = (expr.starts_with("sizeof(") && !expr.contains("->")) || expr.ends_with("_STRUCT_SIZE");
            let rust: i64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(i64::MAX);
            newer_headers() && whole_struct && c[expr] > rust
        });
    for line in &appended {
        eprintln!("newer headers append fields the plugin leaves unset: {line}");
    }
    assert!(wrong.is_empty(), "#[repr(C)] mirrors differ from the TensorFlow headers:\n  {}", wrong.join("\n  "));
}

#[test]
fn enum_status_and_version_constants_match_the_headers() {
    let c = c_values();
    let (newer, wrong): (Vec<_>, Vec<_>) =
        mismatches(constants().into_iter().map(|(expr, value)| (expr.to_string(), value))).into_iter().partition(
            |line| {
                // A newer PJRT minor version only appends entries and fields.
                newer_headers() && line.starts_with("PJRT_API_MINOR:") && c["PJRT_API_MINOR"] > PJRT_API_MINOR as i64
            },
        );
    for line in &newer {
        eprintln!("newer headers have a newer PJRT C API than the plugin mirrors: {line}");
    }
    assert!(wrong.is_empty(), "constants differ from the TensorFlow headers:\n  {}", wrong.join("\n  "));
}

/// The table must list every field: consecutive fields leave no gap beyond
/// alignment padding, and the last one ends where the struct's padding starts.
/// (The other tests prove these numbers equal the C ones.)
#[test]
fn the_table_lists_every_field() {
    let round_up = |n: usize, align: usize| n.div_ceil(align) * align;
    for s in layouts() {
        let mut end = 0;
        for f in &s.fields {
            assert_eq!(
                f.offset,
                round_up(end, f.align),
                "{}: `{}` does not follow the previous field: the table misses a field or is out of header order",
                s.name,
                f.rust
            );
            end = f.offset + f.size;
        }
        assert_eq!(s.size, round_up(end, s.align), "{}: a field is missing from the layout table at the end", s.name);
        if let Some(struct_size) = s.struct_size {
            // The header's macro names the last field, except TFNPD_PluginParams'
            // (its `use_pjrt_on_demand_compile` came later without a new size).
            let ends = s.fields.iter().any(|f| f.offset + f.size == struct_size);
            assert!(ends, "{}::struct_size() ({struct_size}) ends at none of its fields", s.name);
            if s.name != "TFNPD_PluginParams" {
                assert_eq!(struct_size, end, "{}::struct_size() must end at its last field", s.name);
            }
        }
    }
}
