//! The kernel-registration and tensor functions of `tensorflow/c/kernels.h`
//! and `tensorflow/c/tf_tensor.h`, and the `TF_DataType` codes of
//! `tensorflow/c/tf_datatype.h`, as TensorFlow 2.21 declares them.
//!
//! Nothing here is linked: the symbols resolve at load time against
//! `libtensorflow_framework.so.2`, already mapped into the TensorFlow process
//! that loads the plugin. Only what the plugin calls is declared.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

use super::status::TF_Status;

/// Opaque builder for one kernel registration. Owned by us until it is handed
/// to `TF_RegisterKernelBuilder`, which takes it over.
#[repr(C)]
pub struct TF_KernelBuilder {
    _private: [u8; 0],
}

/// An op definition being built (`ops.h`); consumed by `TF_RegisterOpDefinition`.
#[repr(C)]
pub struct TF_OpDefinitionBuilder {
    _private: [u8; 0],
}

/// A borrowed string (`c_api.h`): `len` bytes at `data`, not NUL-terminated,
/// owned by TensorFlow.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TF_StringView {
    pub data: *const c_char,
    pub len: usize,
}

/// The context of one shape-inference call (`ops.h`).
#[repr(C)]
pub struct TF_ShapeInferenceContext {
    _private: [u8; 0],
}

/// A shape function: fills in the outputs' shapes of one node.
pub type TF_ShapeInferenceFn = unsafe extern "C" fn(ctx: *mut TF_ShapeInferenceContext, status: *mut TF_Status);

/// Opaque view of a node while its kernel is being constructed. Valid only
/// during the create callback.
#[repr(C)]
pub struct TF_OpKernelConstruction {
    _private: [u8; 0],
}

/// Opaque per-execution context. Valid only during the compute callback.
#[repr(C)]
pub struct TF_OpKernelContext {
    _private: [u8; 0],
}

/// TensorFlow's completion callback of an asynchronous kernel: a pointer to
/// the `std::function<void()>` its `ComputeAsync` received *by value*, so it
/// dangles once our compute callback returns (see `abi::ffi::done`).
#[repr(C)]
pub struct TF_AsyncOpKernelDoneCallback {
    _private: [u8; 0],
}

/// Opaque tensor handle. Each handle returned to us holds a reference on the
/// buffer and must be released with `TF_DeleteTensor`.
#[repr(C)]
pub struct TF_Tensor {
    _private: [u8; 0],
}

/// `TF_Bool` (a macro for `unsigned char` in `c_api_macros.h`).
pub type TF_Bool = u8;

/// `TF_DataType`: a C enum, so an `int` on every platform TensorFlow ships for.
pub type TF_DataType = c_int;
pub const TF_FLOAT: TF_DataType = 1;
pub const TF_DOUBLE: TF_DataType = 2;
pub const TF_INT32: TF_DataType = 3;
pub const TF_UINT8: TF_DataType = 4;
pub const TF_INT64: TF_DataType = 9;
pub const TF_BOOL: TF_DataType = 10;
pub const TF_BFLOAT16: TF_DataType = 14;
pub const TF_HALF: TF_DataType = 19;
pub const TF_UINT64: TF_DataType = 23;

/// Called by TensorFlow to build a kernel instance for one node; the returned
/// pointer is passed back to the compute and delete callbacks.
pub type TF_KernelCreateFn = unsafe extern "C" fn(*mut TF_OpKernelConstruction) -> *mut c_void;
/// Called by TensorFlow for every execution of the node.
pub type TF_KernelComputeFn = unsafe extern "C" fn(*mut c_void, *mut TF_OpKernelContext);
/// Called by TensorFlow for every execution of an asynchronous kernel; the
/// node completes when `done` is run.
pub type TF_KernelComputeAsyncFn =
    unsafe extern "C" fn(*mut c_void, *mut TF_OpKernelContext, *mut TF_AsyncOpKernelDoneCallback);
/// Called by TensorFlow when the kernel instance is destroyed (also with a
/// null pointer if the create callback returned null).
pub type TF_KernelDeleteFn = unsafe extern "C" fn(*mut c_void);

extern "C" {
    // ---- op registration (ops.h) ----

    pub fn TF_NewOpDefinitionBuilder(op_name: *const c_char) -> *mut TF_OpDefinitionBuilder;

    /// `spec` is `"name: type"` (e.g. `"N: int >= 1"`); copied.
    pub fn TF_OpDefinitionBuilderAddAttr(builder: *mut TF_OpDefinitionBuilder, attr_spec: *const c_char);

    pub fn TF_OpDefinitionBuilderAddInput(builder: *mut TF_OpDefinitionBuilder, input_spec: *const c_char);

    pub fn TF_OpDefinitionBuilderAddOutput(builder: *mut TF_OpDefinitionBuilder, output_spec: *const c_char);

    pub fn TF_OpDefinitionBuilderSetShapeInferenceFunction(
        builder: *mut TF_OpDefinitionBuilder,
        shape_fn: Option<TF_ShapeInferenceFn>,
    );

    /// Takes ownership of `builder` whatever the outcome. TensorFlow 2.21
    /// finalizes the definition at once (its registry is initialised by the
    /// time plugins load) and aborts the process on an invalid spec or a
    /// name already registered.
    pub fn TF_RegisterOpDefinition(builder: *mut TF_OpDefinitionBuilder, status: *mut TF_Status);

    /// Only for a builder never passed to `TF_RegisterOpDefinition`.
    pub fn TF_DeleteOpDefinitionBuilder(builder: *mut TF_OpDefinitionBuilder);

    pub fn TF_ShapeInferenceContextSetUnknownShape(ctx: *mut TF_ShapeInferenceContext, status: *mut TF_Status);

    // ---- kernel registration (kernels.h) ----

    pub fn TF_NewKernelBuilder(
        op_name: *const c_char,
        device_name: *const c_char,
        create_func: Option<TF_KernelCreateFn>,
        compute_func: Option<TF_KernelComputeFn>,
        delete_func: Option<TF_KernelDeleteFn>,
    ) -> *mut TF_KernelBuilder;

    pub fn TF_NewAsyncKernelBuilder(
        op_name: *const c_char,
        device_name: *const c_char,
        create_func: Option<TF_KernelCreateFn>,
        compute_async_func: Option<TF_KernelComputeAsyncFn>,
        delete_func: Option<TF_KernelDeleteFn>,
    ) -> *mut TF_KernelBuilder;

    /// Runs the `std::function<void()>` at `done` (throws, i.e. aborts, if
    /// it is empty).
    pub fn TF_RunAsyncOpKernelDoneCallback(done: *mut TF_AsyncOpKernelDoneCallback);

    pub fn TF_KernelBuilder_TypeConstraint(
        kernel_builder: *mut TF_KernelBuilder,
        attr_name: *const c_char,
        dtype: TF_DataType,
        status: *mut TF_Status,
    );

    pub fn TF_KernelBuilder_HostMemory(kernel_builder: *mut TF_KernelBuilder, arg_name: *const c_char);

    pub fn TF_KernelBuilder_Priority(kernel_builder: *mut TF_KernelBuilder, priority_number: i32);

    /// Takes ownership of `builder` whatever the outcome.
    pub fn TF_RegisterKernelBuilder(kernel_name: *const c_char, builder: *mut TF_KernelBuilder, status: *mut TF_Status);

    /// Only for a builder that was never passed to `TF_RegisterKernelBuilder`.
    pub fn TF_DeleteKernelBuilder(builder: *mut TF_KernelBuilder);

    // ---- kernel construction (kernels.h) ----

    pub fn TF_OpKernelConstruction_GetAttrBool(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        val: *mut TF_Bool,
        status: *mut TF_Status,
    );

    pub fn TF_OpKernelConstruction_GetAttrSize(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        list_size: *mut i32,
        total_size: *mut i32,
        status: *mut TF_Status,
    );

    pub fn TF_OpKernelConstruction_GetAttrType(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        val: *mut TF_DataType,
        status: *mut TF_Status,
    );

    pub fn TF_OpKernelConstruction_GetAttrInt64(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        val: *mut i64,
        status: *mut TF_Status,
    );

    pub fn TF_OpKernelConstruction_GetAttrFloat(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        val: *mut f32,
        status: *mut TF_Status,
    );

    /// Writes at most `max_length` bytes, without a terminating NUL.
    pub fn TF_OpKernelConstruction_GetAttrString(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        val: *mut c_char,
        max_length: usize,
        status: *mut TF_Status,
    );

    /// Fills `values[i]` and `lengths[i]` for at most `max_values` strings
    /// (not NUL-terminated), whose bytes it copies into `storage`.
    pub fn TF_OpKernelConstruction_GetAttrStringList(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        values: *mut *mut c_char,
        lengths: *mut usize,
        max_values: c_int,
        storage: *mut c_void,
        storage_size: usize,
        status: *mut TF_Status,
    );

    pub fn TF_OpKernelConstruction_GetAttrInt64List(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        vals: *mut i64,
        max_vals: c_int,
        status: *mut TF_Status,
    );

    pub fn TF_OpKernelConstruction_HasAttr(
        ctx: *mut TF_OpKernelConstruction,
        attr_name: *const c_char,
        status: *mut TF_Status,
    ) -> bool;

    pub fn TF_OpKernelConstruction_Failure(ctx: *mut TF_OpKernelConstruction, status: *mut TF_Status);

    // ---- kernel execution (kernels.h) ----

    pub fn TF_GetStream(ctx: *mut TF_OpKernelContext, status: *mut TF_Status) -> super::stream_executor::SP_Stream;

    pub fn TF_NumInputs(ctx: *mut TF_OpKernelContext) -> c_int;

    pub fn TF_NumOutputs(ctx: *mut TF_OpKernelContext) -> c_int;

    /// On success `*tensor` is a new handle the caller must delete.
    pub fn TF_GetInput(ctx: *mut TF_OpKernelContext, i: c_int, tensor: *mut *mut TF_Tensor, status: *mut TF_Status);

    pub fn TF_SetOutput(ctx: *mut TF_OpKernelContext, i: c_int, tensor: *const TF_Tensor, status: *mut TF_Status);

    /// Allocates output `index` with the node's output dtype (TensorFlow
    /// ignores `dtype` and `len`). The caller owns the returned handle.
    pub fn TF_AllocateOutput(
        context: *mut TF_OpKernelContext,
        index: c_int,
        dtype: TF_DataType,
        dims: *const i64,
        num_dims: c_int,
        len: usize,
        status: *mut TF_Status,
    ) -> *mut TF_Tensor;

    /// Makes output `output_index` share the buffer of the first input among
    /// the candidates that TensorFlow lets it (same dtype and element count,
    /// same memory type, no other reference, or a forward the graph
    /// requires), else allocates it like `TF_AllocateOutput`. Writes the
    /// input used, or -1, to `forwarded_input`. The caller owns the
    /// returned handle.
    pub fn TF_ForwardInputOrAllocateOutput(
        context: *mut TF_OpKernelContext,
        candidate_input_indices: *const c_int,
        num_candidate_input_indices: c_int,
        output_index: c_int,
        output_dims: *const i64,
        output_num_dims: c_int,
        forwarded_input: *mut c_int,
        status: *mut TF_Status,
    ) -> *mut TF_Tensor;

    pub fn TF_OpKernelContext_Failure(ctx: *mut TF_OpKernelContext, status: *mut TF_Status);

    /// Aborts the process unless `0 <= i < TF_NumOutputs(ctx)`.
    pub fn TF_ExpectedOutputDataType(ctx: *mut TF_OpKernelContext, i: c_int) -> TF_DataType;

    pub fn TF_GetDeviceId(ctx: *mut TF_OpKernelContext) -> c_int;

    /// The node's name; the view lives as long as the kernel.
    pub fn TF_OpKernelConstruction_GetName(ctx: *mut TF_OpKernelConstruction) -> TF_StringView;

    // ---- tensors (tf_tensor.h) ----

    pub fn TF_DeleteTensor(tensor: *mut TF_Tensor);

    pub fn TF_TensorType(tensor: *const TF_Tensor) -> TF_DataType;

    pub fn TF_NumDims(tensor: *const TF_Tensor) -> c_int;

    pub fn TF_Dim(tensor: *const TF_Tensor, dim_index: c_int) -> i64;

    pub fn TF_TensorByteSize(tensor: *const TF_Tensor) -> usize;

    /// May be null for a tensor with no elements.
    pub fn TF_TensorData(tensor: *const TF_Tensor) -> *mut c_void;

    pub fn TF_TensorElementCount(tensor: *const TF_Tensor) -> i64;

    // ---- data types (tf_datatype.h) ----

    pub fn TF_DataTypeSize(dt: TF_DataType) -> usize;
}
