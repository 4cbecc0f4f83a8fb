//! `#[repr(C)]` mirrors of the graph-optimizer plugin structs
//! (`tensorflow/c/experimental/grappler/grappler.h`, GO 0.0.1) and of
//! `TF_Buffer` (`tensorflow/c/tf_buffer.h`), which carries the serialized
//! GraphDef in and out of the optimizer.
//!
//! Names match the C names so the layout test can pair them with the
//! header. The `TP_*` structs are filled by the plugin; each has a
//! `*_STRUCT_SIZE` constant (the header's `TF_OFFSET_OF_END` macro) and a
//! `Default` that writes it with a null `ext`.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_void};

use super::status::TF_Status;
use super::stream_executor::offset_of_end;

pub const GO_MAJOR: i32 = 0;
pub const GO_MINOR: i32 = 0;
pub const GO_PATCH: i32 = 1;

/// Opaque: the graph's feeds, fetches and nodes to preserve. Valid only
/// during `optimize_func`.
#[repr(C)]
pub struct TF_GrapplerItem {
    _private: [u8; 0],
}

/// `TF_GetNodesToPreserveListSize` (grappler.h): how many names, and the
/// bytes they need. Exported by `libtensorflow_cc.so.2`, looked up at run
/// time (`abi::graph::preserve_fns`) so a wheel without it still loads us.
pub type TF_GetNodesToPreserveListSizeFn = unsafe extern "C" fn(
    item: *const TF_GrapplerItem,
    num_values: *mut i32,
    storage_size: *mut usize,
    status: *mut TF_Status,
);

/// `TF_GetNodesToPreserveList` (grappler.h): fills `values[i]` /
/// `lengths[i]` with pointers into `storage` (not NUL-terminated).
pub type TF_GetNodesToPreserveListFn = unsafe extern "C" fn(
    item: *const TF_GrapplerItem,
    values: *mut *mut c_char,
    lengths: *mut usize,
    num_values: i32,
    storage: *mut c_void,
    storage_size: usize,
    status: *mut TF_Status,
);

/// `TF_GetFetchNodesListSize` / `TF_GetFetchNodesList` (grappler.h): the
/// same shapes as the preserve-list pair, for the nodes whose outputs are
/// fetched.
pub type TF_GetFetchNodesListSizeFn = TF_GetNodesToPreserveListSizeFn;
pub type TF_GetFetchNodesListFn = TF_GetNodesToPreserveListFn;

/// Opaque: TensorFlow's function library over its global op registry.
#[repr(C)]
pub struct TF_FunctionLibraryDefinition {
    _private: [u8; 0],
}

/// `TF_NewFunctionLibraryDefinition` (grappler.h): a library holding the
/// functions of a serialized GraphDef, over TensorFlow's op registry.
pub type TF_NewFunctionLibraryDefinitionFn =
    unsafe extern "C" fn(graph: *const TF_Buffer, status: *mut TF_Status) -> *mut TF_FunctionLibraryDefinition;

/// `TF_DeleteFunctionLibraryDefinition` (grappler.h).
pub type TF_DeleteFunctionLibraryDefinitionFn = unsafe extern "C" fn(library: *mut TF_FunctionLibraryDefinition);

/// `TF_LookUpOpDef` (grappler.h): the serialized OpDef of op `name`, written
/// into `buf`, which must be empty; TensorFlow sets its deallocator.
pub type TF_LookUpOpDefFn = unsafe extern "C" fn(
    library: *mut TF_FunctionLibraryDefinition,
    name: *const c_char,
    buf: *mut TF_Buffer,
    status: *mut TF_Status,
);

/// A byte buffer. TensorFlow releases `data` with `data_deallocator` (if
/// set) when it is done with a buffer the plugin filled.
#[repr(C)]
pub struct TF_Buffer {
    pub data: *const c_void,
    pub length: usize,
    pub data_deallocator: Option<unsafe extern "C" fn(data: *mut c_void, length: usize)>,
}

/// Whether one of TensorFlow's own grappler passes runs on graphs of our
/// device type. `Default` keeps TensorFlow's own choice.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TF_TriState {
    TF_TriState_Default = 0,
    TF_TriState_Off = 1,
    TF_TriState_On = 2,
}

#[repr(C)]
pub struct TP_OptimizerConfigs {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub disable_model_pruning: TF_TriState,
    pub implementation_selector: TF_TriState,
    pub function_optimization: TF_TriState,
    pub common_subgraph_elimination: TF_TriState,
    pub arithmetic_optimization: TF_TriState,
    pub debug_stripper: TF_TriState,
    pub constant_folding: TF_TriState,
    pub shape_optimization: TF_TriState,
    pub auto_mixed_precision: TF_TriState,
    pub auto_mixed_precision_onednn_bfloat16: TF_TriState,
    pub auto_mixed_precision_mkl: TF_TriState,
    pub pin_to_host_optimization: TF_TriState,
    pub layout_optimizer: TF_TriState,
    pub remapping: TF_TriState,
    pub loop_optimization: TF_TriState,
    pub dependency_optimization: TF_TriState,
    pub auto_parallel: TF_TriState,
    pub memory_optimization: TF_TriState,
    pub scoped_allocator_optimization: TF_TriState,
}
pub const TP_OPTIMIZER_CONFIGS_STRUCT_SIZE: usize = offset_of_end!(TP_OptimizerConfigs, scoped_allocator_optimization);

pub type TP_OptimizeFn = unsafe extern "C" fn(
    optimizer: *mut c_void,
    graph: *const TF_Buffer,
    item: *const TF_GrapplerItem,
    optimized_graph: *mut TF_Buffer,
    status: *mut TF_Status,
);

#[repr(C)]
pub struct TP_Optimizer {
    pub struct_size: usize,
    pub ext: *mut c_void,
    /// Optional; if set, `destroy_func` must be set too.
    pub create_func: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub optimize_func: Option<TP_OptimizeFn>,
    pub destroy_func: Option<unsafe extern "C" fn(optimizer: *mut c_void)>,
}
pub const TP_OPTIMIZER_STRUCT_SIZE: usize = offset_of_end!(TP_Optimizer, destroy_func);

#[repr(C)]
pub struct TP_OptimizerRegistrationParams {
    pub struct_size: usize,
    pub ext: *mut c_void,
    pub major_version: i32,
    pub minor_version: i32,
    pub patch_version: i32,
    /// The device type whose graphs the optimizer sees. TensorFlow keeps the
    /// pointer, so it must live for the process.
    pub device_type: *const c_char,
    pub optimizer_configs: *mut TP_OptimizerConfigs,
    pub optimizer: *mut TP_Optimizer,
}
pub const TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE: usize =
    offset_of_end!(TP_OptimizerRegistrationParams, optimizer);

versioned_default!(TP_OptimizerConfigs, TP_OPTIMIZER_CONFIGS_STRUCT_SIZE);
versioned_default!(TP_Optimizer, TP_OPTIMIZER_STRUCT_SIZE);
versioned_default!(TP_OptimizerRegistrationParams, TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE);
