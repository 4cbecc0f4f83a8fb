//! `TF_InitKernel` and the callbacks of the kernels it registers.
//!
//! For the device type of this process (`WASM` unless `TFWASM_DEVICE_TYPE`
//! says otherwise) tfwasm registers float32 (`T=DT_FLOAT`) kernels for
//! `AddV2`, `Mul` and `MatMul`. Each callback is thin: it turns the
//! `TF_Tensor`s of the context into slices and shapes, asks a plan from
//! [`crate::kernels`] for the output shape, allocates the output through
//! TensorFlow (which asks the device guest where to place it), and runs the
//! plan. Device memory is host-addressable, so tensor data pointers are read
//! and written directly.
//!
//! Errors reach TensorFlow through `TF_OpKernelContext_Failure` (or
//! `TF_OpKernelConstruction_Failure`) with a `TF_Status` created per call;
//! panics are caught by [`ffi_guard`] and reported the same way. A failure
//! TensorFlow itself reported (e.g. an output allocation that found the
//! device full) keeps TensorFlow's error code, so Python still sees a
//! `ResourceExhaustedError`.

use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr::{self, NonNull};

use super::ffi::kernels::*;
use super::ffi::status::{TF_Code, TF_DeleteStatus, TF_GetCode, TF_Message, TF_NewStatus, TF_SetStatus, TF_Status, TF_OK};
use super::{ffi_guard, ffi_guard_or};
use crate::error::Error;
use crate::kernels::shape::{element_count, ShapeDisplay};
use crate::kernels::{BinaryOp, BinaryPlan, MatMulAttrs, MatMulPlan};

/// One kernel registration: the op, the name TensorFlow logs for our
/// kernel class, and the create callback that fixes which kernel it is.
struct Registration {
    op: &'static CStr,
    kernel_name: &'static CStr,
    create: TF_KernelCreateFn,
}

const REGISTRATIONS: &[Registration] = &[
    Registration { op: c"AddV2", kernel_name: c"TfwasmAddV2Op", create: create_add_v2 },
    Registration { op: c"Mul", kernel_name: c"TfwasmMulOp", create: create_mul },
    Registration { op: c"MatMul", kernel_name: c"TfwasmMatMulOp", create: create_matmul },
];

/// Entry point TensorFlow calls once, after `SE_InitPlugin`, to collect the
/// plugin's kernels. Registers nothing when the device type is invalid or
/// this library is a second copy in the process (its kernels would
/// duplicate the first copy's and make every lookup ambiguous).
#[no_mangle]
pub extern "C" fn TF_InitKernel() {
    crate::config::init_logging();
    ffi_guard_or((), "TF_InitKernel", || {
        if super::stream_executor::is_duplicate_load() {
            tracing::debug!("tfwasm: second copy of the plugin: registering no kernels");
            return Ok(());
        }
        let device_type = match crate::config::device_type() {
            Ok(device_type) => device_type,
            Err(error) => {
                tracing::error!("{error}. tfwasm registers no kernels.");
                return Ok(());
            }
        };
        for registration in REGISTRATIONS {
            // One failed registration leaves the op to the CPU device; the
            // others still register.
            match register(registration, device_type) {
                Ok(()) => tracing::debug!("tfwasm: registered {:?} for {device_type:?}", registration.op),
                Err(error) => tracing::warn!("{error}; the op falls back to the CPU device"),
            }
        }
        Ok(())
    })
}

fn register(registration: &Registration, device_type: &CStr) -> Result<(), Error> {
    let op = registration.op.to_string_lossy();
    let failed = |failure: TfFailure| Error::Internal(format!("cannot register the {op} kernel: {}", failure.message));
    let status = OwnedStatus::new()?;
    // SAFETY: the strings are NUL-terminated and outlive the call (TensorFlow
    // copies them into its KernelDefBuilder); the callbacks are `extern "C"`
    // functions with the signatures kernels.h declares.
    let builder = unsafe {
        TF_NewKernelBuilder(
            registration.op.as_ptr(),
            device_type.as_ptr(),
            Some(registration.create),
            Some(compute_kernel),
            Some(delete_kernel),
        )
    };
    let builder = NonNull::new(builder).ok_or_else(|| Error::Internal(format!("TF_NewKernelBuilder returned null for {op}")))?;
    status.clear();
    // SAFETY: `builder` is the live builder just created and still ours;
    // the attribute name is a NUL-terminated static; `status` is live.
    unsafe { TF_KernelBuilder_TypeConstraint(builder.as_ptr(), c"T".as_ptr(), TF_FLOAT, status.as_ptr()) };
    if let Err(failure) = status.outcome() {
        // SAFETY: the builder was never handed to TF_RegisterKernelBuilder,
        // so it is still ours to delete, exactly once.
        unsafe { TF_DeleteKernelBuilder(builder.as_ptr()) };
        return Err(failed(failure));
    }
    status.clear();
    // SAFETY: as above; TensorFlow takes ownership of `builder` here whatever
    // the outcome (its KernelBuilderFactory deletes it), so it is not touched
    // again.
    unsafe { TF_RegisterKernelBuilder(registration.kernel_name.as_ptr(), builder.as_ptr(), status.as_ptr()) };
    status.outcome().map_err(failed)
}

// ---------------------------------------------------------------------------
// Kernel instances

/// What one kernel instance computes: fixed when TensorFlow creates it for a
/// node, shared read-only by every (possibly concurrent) compute call.
#[derive(Debug)]
enum Kernel {
    Binary(BinaryOp),
    MatMul(MatMulAttrs),
}

impl Kernel {
    fn op_name(&self) -> &'static str {
        match self {
            Kernel::Binary(op) => op.op_name(),
            Kernel::MatMul(_) => "MatMul",
        }
    }

    /// The op's input names, as TensorFlow users see them in errors.
    fn input_names(&self) -> [&'static str; 2] {
        match self {
            Kernel::Binary(_) => ["x", "y"],
            Kernel::MatMul(_) => ["a", "b"],
        }
    }
}

unsafe extern "C" fn create_add_v2(ctx: *mut TF_OpKernelConstruction) -> *mut c_void {
    create_kernel(ctx, "AddV2", |_| Ok(Kernel::Binary(BinaryOp::Add)))
}

unsafe extern "C" fn create_mul(ctx: *mut TF_OpKernelConstruction) -> *mut c_void {
    create_kernel(ctx, "Mul", |_| Ok(Kernel::Binary(BinaryOp::Mul)))
}

/// Reads `transpose_a`/`transpose_b`. `grad_a`/`grad_b` (present on newer
/// graphs) only say which gradient the node computes and are not read.
unsafe extern "C" fn create_matmul(ctx: *mut TF_OpKernelConstruction) -> *mut c_void {
    create_kernel(ctx, "MatMul", |construction| {
        Ok(Kernel::MatMul(MatMulAttrs {
            transpose_a: construction.attr_bool(c"transpose_a")?,
            transpose_b: construction.attr_bool(c"transpose_b")?,
        }))
    })
}

/// Builds a kernel instance and hands TensorFlow an owning pointer to it,
/// or reports the failure through `TF_OpKernelConstruction_Failure` and
/// returns null.
fn create_kernel(
    ctx: *mut TF_OpKernelConstruction,
    op: &str,
    build: impl FnOnce(&Construction) -> Result<Kernel, KernelError>,
) -> *mut c_void {
    ffi_guard_or(ptr::null_mut(), op, || {
        let Some(ctx) = NonNull::new(ctx) else {
            return Err(Error::Internal(format!("{op}: kernel created with a null construction context")));
        };
        let kernel = with_status(
            |status| build(&Construction { raw: ctx, op, status }),
            // SAFETY: `ctx` is the live construction context of this call;
            // `status` holds the failure.
            |status| unsafe { TF_OpKernelConstruction_Failure(ctx.as_ptr(), status) },
        );
        Ok(kernel.map_or(ptr::null_mut(), |kernel| Box::into_raw(Box::new(kernel)).cast::<c_void>()))
    })
}

/// # Safety
/// `kernel` is null or a pointer returned by one of our create callbacks and
/// not yet deleted; `ctx` is the live context of this compute call.
unsafe extern "C" fn compute_kernel(kernel: *mut c_void, ctx: *mut TF_OpKernelContext) {
    ffi_guard_or((), "kernel compute", || {
        let Some(ctx) = NonNull::new(ctx) else {
            return Err(Error::Internal("kernel computed with a null context".into()));
        };
        with_status(
            |status| {
                // SAFETY: per this function's contract the pointer came from
                // `Box::into_raw` in `create_kernel` and TensorFlow deletes it
                // only after the last compute returns; `Kernel` is immutable
                // and `Sync`, so concurrent computes may share it.
                let kernel = unsafe { kernel.cast::<Kernel>().as_ref() }
                    .ok_or_else(|| Error::Internal("kernel computed without a kernel instance".into()))?;
                compute(kernel, &Context { raw: ctx, op: kernel.op_name(), status })
            },
            // SAFETY: `ctx` is the live context of this call; `status` holds
            // the failure.
            |status| unsafe { TF_OpKernelContext_Failure(ctx.as_ptr(), status) },
        );
        Ok(())
    })
}

/// # Safety
/// `kernel` is null or a pointer returned by one of our create callbacks,
/// deleted once.
unsafe extern "C" fn delete_kernel(kernel: *mut c_void) {
    ffi_guard_or((), "kernel delete", || {
        if !kernel.is_null() {
            // SAFETY: per this function's contract the pointer came from
            // `Box::into_raw(Box<Kernel>)` in `create_kernel` and TensorFlow
            // deletes each instance once, after its last compute.
            drop(unsafe { Box::from_raw(kernel.cast::<Kernel>()) });
        }
        Ok(())
    })
}

/// The safe body of every compute call.
fn compute(kernel: &Kernel, ctx: &Context) -> Result<(), KernelError> {
    let [a_name, b_name] = kernel.input_names();
    let inputs = ctx.num_inputs();
    if inputs != 2 {
        return Err(Error::Internal(format!("{}: expected 2 inputs, TensorFlow passed {inputs}", ctx.op)).into());
    }
    let a = ctx.input(0, a_name)?;
    let b = ctx.input(1, b_name)?;
    let (a_shape, b_shape) = (a.shape()?, b.shape()?);
    match kernel {
        Kernel::Binary(op) => {
            let plan = BinaryPlan::new(*op, &a_shape, &b_shape)?;
            let mut out = ctx.allocate_output(plan.output_shape())?;
            plan.run(a.f32_data()?, b.f32_data()?, out.f32_data_mut()?)?;
        }
        Kernel::MatMul(attrs) => {
            let plan = MatMulPlan::new(*attrs, &a_shape, &b_shape)?;
            let mut out = ctx.allocate_output(&plan.output_shape())?;
            plan.run(a.f32_data()?, b.f32_data()?, out.f32_data_mut()?)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Safe views of TensorFlow's handles

/// A kernel-construction context for the duration of a create callback.
struct Construction<'a> {
    raw: NonNull<TF_OpKernelConstruction>,
    op: &'a str,
    status: &'a OwnedStatus,
}

impl Construction<'_> {
    fn attr_bool(&self, name: &CStr) -> Result<bool, KernelError> {
        let mut value: TF_Bool = 0;
        self.status.clear();
        // SAFETY: `raw` is live for this create call, `name` is
        // NUL-terminated, `value` is a valid out-pointer, `status` is live.
        unsafe { TF_OpKernelConstruction_GetAttrBool(self.raw.as_ptr(), name.as_ptr(), &mut value, self.status.as_ptr()) };
        self.status
            .outcome()
            .map_err(|failure| failure.context(format!("{}: cannot read attribute {}", self.op, name.to_string_lossy())))?;
        Ok(value != 0)
    }
}

/// An op-kernel context for the duration of a compute callback.
struct Context<'a> {
    raw: NonNull<TF_OpKernelContext>,
    op: &'static str,
    status: &'a OwnedStatus,
}

impl Context<'_> {
    fn num_inputs(&self) -> c_int {
        // SAFETY: `raw` is live for this compute call.
        unsafe { TF_NumInputs(self.raw.as_ptr()) }
    }

    fn input(&self, index: c_int, name: &'static str) -> Result<Tensor, KernelError> {
        let mut raw: *mut TF_Tensor = ptr::null_mut();
        self.status.clear();
        // SAFETY: `raw` is live for this compute call, the out-pointer is
        // valid, `status` is live. On success TensorFlow gives us a new
        // handle that `Tensor` releases.
        unsafe { TF_GetInput(self.raw.as_ptr(), index, &mut raw, self.status.as_ptr()) };
        self.status
            .outcome()
            .map_err(|failure| failure.context(format!("{}: cannot read input {name}", self.op)))?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::Internal(format!("{}: TensorFlow returned no tensor for input {name}", self.op)))?;
        let tensor = Tensor { raw, op: self.op, name };
        tensor.check_float()?;
        Ok(tensor)
    }

    /// Allocates output 0 (each op here has one output) with `shape`.
    fn allocate_output(&self, shape: &[usize]) -> Result<Tensor, KernelError> {
        let too_large = || Error::InvalidArgument(format!("{}: output shape {} is too large", self.op, ShapeDisplay(shape)));
        let dims = shape.iter().map(|&d| i64::try_from(d)).collect::<Result<Vec<i64>, _>>().map_err(|_| too_large())?;
        let bytes = element_count(shape).and_then(|n| n.checked_mul(size_of::<f32>())).ok_or_else(too_large)?;
        let rank = c_int::try_from(dims.len()).map_err(|_| too_large())?;
        self.status.clear();
        // SAFETY: `raw` is live for this compute call; `dims` holds `rank`
        // non-negative dimensions whose product fits (checked above, so
        // TensorFlow's TensorShape accepts them); `status` is live. On
        // success we own the returned handle.
        let raw = unsafe { TF_AllocateOutput(self.raw.as_ptr(), 0, TF_FLOAT, dims.as_ptr(), rank, bytes, self.status.as_ptr()) };
        self.status.outcome().map_err(|failure| {
            let what = format!("{}: cannot allocate the output {}", self.op, ShapeDisplay(shape));
            match super::stream_executor::take_allocation_failure() {
                // A real out-of-memory keeps TensorFlow's ResourceExhausted;
                // a guest fault becomes its own error, naming the guest.
                None => failure.context(what),
                Some(oom @ Error::OutOfMemory { .. }) => failure.context(format!("{what} ({oom})")),
                Some(ours) => {
                    KernelError::Tf(TfFailure { code: ours.tf_code(), message: format!("tfwasm: {what}: {ours}") })
                }
            }
        })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::Internal(format!("{}: TensorFlow returned no output tensor", self.op)))?;
        let tensor = Tensor { raw, op: self.op, name: "the output" };
        tensor.check_float()?;
        Ok(tensor)
    }
}

/// A `TF_Tensor` handle we own (an input from `TF_GetInput` or an output
/// from `TF_AllocateOutput`), released on drop. Its data stays valid while
/// the handle lives: the handle holds a reference on the buffer.
struct Tensor {
    raw: NonNull<TF_Tensor>,
    op: &'static str,
    name: &'static str,
}

impl Tensor {
    fn check_float(&self) -> Result<(), Error> {
        // SAFETY: `raw` is a live handle we own.
        let dtype = unsafe { TF_TensorType(self.raw.as_ptr()) };
        if dtype == TF_FLOAT {
            Ok(())
        } else {
            // The kernel is registered for T=float only, so this is TF's bug or ours.
            Err(Error::Internal(format!("{}: {} has dtype {dtype}, the kernel handles float32 only", self.op, self.name)))
        }
    }

    fn shape(&self) -> Result<Vec<usize>, Error> {
        let bad = || Error::Internal(format!("{}: {} has an invalid shape", self.op, self.name));
        // SAFETY: `raw` is a live handle we own.
        let rank = unsafe { TF_NumDims(self.raw.as_ptr()) };
        (0..rank.max(0))
            .map(|i| {
                // SAFETY: `raw` is live and 0 <= i < TF_NumDims.
                let dim = unsafe { TF_Dim(self.raw.as_ptr(), i) };
                usize::try_from(dim).map_err(|_| bad())
            })
            .collect::<Result<Vec<usize>, Error>>()
            .and_then(|shape| if rank < 0 { Err(bad()) } else { Ok(shape) })
    }

    /// Element count and data pointer, checked against the buffer size.
    /// The pointer is `None` for a tensor without elements (TensorFlow may
    /// give no buffer at all then).
    fn checked_data(&self) -> Result<(usize, Option<NonNull<f32>>), Error> {
        let shape = self.shape()?;
        let describe = || format!("{}: {} (shape {})", self.op, self.name, ShapeDisplay(&shape));
        let len = element_count(&shape).ok_or_else(|| Error::Internal(format!("{} has too many elements", describe())))?;
        if len == 0 {
            return Ok((0, None));
        }
        // SAFETY: `raw` is a live handle we own.
        let (bytes, data) = unsafe { (TF_TensorByteSize(self.raw.as_ptr()), TF_TensorData(self.raw.as_ptr())) };
        if len.checked_mul(size_of::<f32>()).is_none_or(|needed| bytes < needed) {
            return Err(Error::Internal(format!("{} has {bytes} bytes of data, too few for {len} floats", describe())));
        }
        let data = NonNull::new(data.cast::<f32>())
            .ok_or_else(|| Error::Internal(format!("{} has {len} elements but no data", describe())))?;
        if !data.as_ptr().is_aligned() {
            return Err(Error::Internal(format!("{} data at {data:p} is not aligned for f32", describe())));
        }
        Ok((len, Some(data)))
    }

    fn f32_data(&self) -> Result<&[f32], Error> {
        match self.checked_data()? {
            (_, None) => Ok(&[]),
            // SAFETY: `data` is non-null, aligned and points to at least
            // `len` f32s (checked against TF_TensorByteSize); the buffer is
            // host-addressable device memory kept alive by this handle, which
            // the slice borrows. TensorFlow does not write a kernel's input
            // while the kernel runs.
            (len, Some(data)) => Ok(unsafe { std::slice::from_raw_parts(data.as_ptr(), len) }),
        }
    }

    fn f32_data_mut(&mut self) -> Result<&mut [f32], Error> {
        match self.checked_data()? {
            (_, None) => Ok(&mut []),
            // SAFETY: as in `f32_data`. The buffer is a fresh allocation from
            // TF_AllocateOutput (never forwarded from an input), so nothing
            // else reads or writes it until this kernel returns; the `&mut`
            // borrow of the handle makes the slice unique on our side. Its
            // bytes are initialised: device memory is an anonymous mapping,
            // zero-filled or holding earlier tensors.
            (len, Some(data)) => Ok(unsafe { std::slice::from_raw_parts_mut(data.as_ptr(), len) }),
        }
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: we own this handle and release it exactly once.
        unsafe { TF_DeleteTensor(self.raw.as_ptr()) };
    }
}

// ---------------------------------------------------------------------------
// Status plumbing

/// A `TF_Status` created for one callback and deleted at its end.
struct OwnedStatus(NonNull<TF_Status>);

impl OwnedStatus {
    fn new() -> Result<Self, Error> {
        // SAFETY: TF_NewStatus has no preconditions.
        let raw = unsafe { TF_NewStatus() };
        NonNull::new(raw).map(OwnedStatus).ok_or_else(|| Error::Internal("TF_NewStatus returned null".into()))
    }

    fn as_ptr(&self) -> *mut TF_Status {
        self.0.as_ptr()
    }

    /// Resets to OK before a TensorFlow call: not every call clears a
    /// previous error on success.
    fn clear(&self) {
        self.set(TF_OK, "");
    }

    fn set(&self, code: TF_Code, message: &str) {
        let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the status is live; TF_SetStatus copies the message.
        unsafe { TF_SetStatus(self.as_ptr(), code, message.as_ptr()) };
    }

    /// What TensorFlow wrote into the status by the last call.
    fn outcome(&self) -> Result<(), TfFailure> {
        // SAFETY: the status is live.
        let code = unsafe { TF_GetCode(self.as_ptr()) };
        if code == TF_OK {
            return Ok(());
        }
        // SAFETY: the status is live; TF_Message returns a NUL-terminated
        // string owned by the status (or null), copied out at once.
        let message = unsafe {
            let text = TF_Message(self.as_ptr());
            if text.is_null() { String::new() } else { CStr::from_ptr(text).to_string_lossy().into_owned() }
        };
        Err(TfFailure { code, message })
    }
}

impl Drop for OwnedStatus {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewStatus, deleted exactly once.
        unsafe { TF_DeleteStatus(self.as_ptr()) };
    }
}

/// A failure TensorFlow reported from one of its calls, with its code.
#[derive(Debug)]
struct TfFailure {
    code: TF_Code,
    message: String,
}

impl TfFailure {
    /// Prefixes what we were doing, keeping TensorFlow's code and message.
    fn context(self, what: String) -> KernelError {
        KernelError::Tf(TfFailure { code: self.code, message: format!("tfwasm: {what}: {}", self.message) })
    }
}

/// Why a kernel callback failed: an error of ours, or one TensorFlow
/// reported (kept with TensorFlow's code).
#[derive(Debug)]
enum KernelError {
    Host(Error),
    Tf(TfFailure),
}

impl From<Error> for KernelError {
    fn from(error: Error) -> Self {
        KernelError::Host(error)
    }
}

/// Runs `body` with a fresh status. On failure — our error, TensorFlow's, or
/// a panic — the status describes it and `report` passes it to TensorFlow.
fn with_status<T>(body: impl FnOnce(&OwnedStatus) -> Result<T, KernelError>, report: impl FnOnce(*mut TF_Status)) -> Option<T> {
    let status = match OwnedStatus::new() {
        Ok(status) => status,
        Err(error) => {
            tracing::error!("{error}; cannot report a kernel failure to TensorFlow");
            return None;
        }
    };
    // ffi_guard writes our errors (and panics) into the status; a failure
    // TensorFlow reported is passed through as a value so that its code
    // survives, and written below.
    let outcome = ffi_guard(status.as_ptr(), || match body(&status) {
        Ok(value) => Ok(Ok(value)),
        Err(KernelError::Host(error)) => Err(error),
        Err(KernelError::Tf(failure)) => Ok(Err(failure)),
    });
    match outcome {
        Some(Ok(value)) => Some(value),
        Some(Err(failure)) => {
            tracing::debug!("{}", failure.message);
            status.set(failure.code, &failure.message);
            report(status.as_ptr());
            None
        }
        None => {
            report(status.as_ptr());
            None
        }
    }
}
