//! `TF_InitKernel` and the callbacks of the kernels it registers.
//!
//! For the device type of this process (`WASM` unless `TFWASM_DEVICE_TYPE`
//! says otherwise) tfwasm registers every [`KernelDef`] of
//! [`crate::kernels::registry`], once per combination of its type
//! constraints. The callbacks are thin: create builds the kernel from the
//! node's attributes ([`Attrs`] over `TF_OpKernelConstruction`), compute runs
//! it with an [`OpContext`] over `TF_OpKernelContext`, delete drops it.
//! Device memory is host-addressable, so tensor data pointers are read and
//! written directly.
//!
//! TensorFlow's create callback carries no user data, so which kernel a
//! callback builds is fixed by a const generic: [`CREATE`] holds
//! `create_nth::<0>`, `create_nth::<1>`, …, one per registry entry.
//!
//! Errors reach TensorFlow through `TF_OpKernelContext_Failure` (or
//! `TF_OpKernelConstruction_Failure`) with a `TF_Status` created per call;
//! panics are caught by [`ffi_guard`] and reported the same way. A failure
//! TensorFlow itself reported (e.g. an output allocation that found the
//! device full) keeps TensorFlow's error code, so Python still sees a
//! `ResourceExhaustedError`.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::ffi::done::{DoneCallback, Ownership};
use super::ffi::kernels::*;
use super::ffi::status::{TF_Code, TF_DeleteStatus, TF_GetCode, TF_Message, TF_NewStatus, TF_Status, TF_OK};
use super::{ffi_guard, ffi_guard_or};
use crate::error::Error;
use crate::kernels::shape::{element_count, Dims, ShapeDisplay};
use crate::kernels::{
    fused, pool, scatter, tensor::may_forward, Attrs, DType, Kernel, KernelDef, OpContext, OutputPlace, Owner, Tensor,
    DEFER_MIN_INPUT_BYTES,
};
use crate::passes::catalog::{self, KernelTable, TypeConstraint};
use smallvec::SmallVec;
use tfwasm_runtime::profiler;

/// The registry, fixed for the process: `create_nth::<I>` builds entry `I`.
fn definitions() -> &'static [KernelDef] {
    crate::kernels::registered()
}

/// Entry point TensorFlow calls once, after `SE_InitPlugin`, to collect the
/// plugin's kernels. Registers nothing when the device type is invalid or
/// this library is a second copy in the process (its kernels would
/// duplicate the first copy's and make every lookup ambiguous).
#[no_mangle]
pub extern "C" fn TF_InitKernel() {
    crate::config::init_logging();
    ffi_guard_or((), "TF_InitKernel", || {
        if super::stream_executor::is_inert() {
            tracing::debug!("tfwasm: this copy of the plugin is inert: registering no kernels");
            return Ok(());
        }
        let device_type = match crate::config::device_type() {
            Ok(device_type) => device_type,
            Err(error) => {
                tracing::error!("{error}. tfwasm registers no kernels.");
                return Ok(());
            }
        };
        // XLA launches through the PJRT client: after the SE and
        // NextPluggableDevice modules, which TensorFlow loads first.
        #[cfg(feature = "pjrt")]
        super::npd::install_shim(device_type);
        let fused = register_own_op(fused::OP, &["inputs: N * T"], &["N: int >= 1", "T: {float}", "expr: string"])
            .map_err(|error| tracing::warn!("{error}; no pass may emit it"))
            .is_ok();
        let scatter = [scatter::ADD_OP, scatter::SUB_OP].iter().all(|op| {
            register_own_op(
                op,
                &["value: T", "indices: Tindices", "updates: T"],
                &["T: {float}", "Tindices: {int32, int64}"],
            )
            .map_err(|error| tracing::warn!("{error}; sparse updates of variables on the device will fail"))
            .is_ok()
        });
        SCATTER_OPS.store(scatter, Ordering::Release);
        let mut registered = 0;
        let mut table = Vec::new();
        for (index, def) in definitions().iter().enumerate() {
            let own_op_missing = (def.op == fused::OP && !fused)
                || ((def.op == scatter::ADD_OP || def.op == scatter::SUB_OP) && !scatter);
            if own_op_missing {
                continue;
            }
            let Some(&create) = CREATE.get(index) else {
                tracing::error!(
                    "tfwasm: more kernels than create callbacks ({}); {} falls back to the CPU device",
                    CREATE.len(),
                    def.op
                );
                continue;
            };
            for combo in def.type_combinations() {
                // One failed registration leaves that op and type to the CPU
                // device; the others still register.
                match register(def, &combo, create, device_type) {
                    Ok(()) => {
                        registered += 1;
                        table.push(catalog::Kernel {
                            op: def.op.to_owned(),
                            types: combo
                                .iter()
                                .map(|(attr, dtype)| TypeConstraint {
                                    attr: (*attr).to_owned(),
                                    dtypes: vec![dtype.datatype() as u32],
                                })
                                .collect(),
                        });
                    }
                    Err(error) => tracing::warn!("{error}; the op falls back to the CPU device"),
                }
            }
        }
        tracing::debug!("tfwasm: registered {registered} kernels for {device_type:?}");
        let _ = KERNEL_TABLE.set(KernelTable::new(table));
        Ok(())
    })
}

/// Whether both scatter ops ([`scatter::ADD_OP`], [`scatter::SUB_OP`]) are
/// registered: the graph pass rewrites sparse variable updates only then.
static SCATTER_OPS: AtomicBool = AtomicBool::new(false);

/// The kernels TensorFlow accepted, one entry per op and type combination:
/// what the optimizer's passes are told the device runs.
static KERNEL_TABLE: OnceLock<KernelTable> = OnceLock::new();

/// [`KERNEL_TABLE`], or an empty table when no kernel was registered.
pub(crate) fn kernel_table() -> &'static KernelTable {
    static EMPTY: OnceLock<KernelTable> = OnceLock::new();
    KERNEL_TABLE.get().unwrap_or_else(|| EMPTY.get_or_init(|| KernelTable::new([])))
}

pub(crate) fn scatter_ops_registered() -> bool {
    SCATTER_OPS.load(Ordering::Acquire)
}

/// Defines one of our own ops in TensorFlow's op registry, with the given
/// inputs and attributes and one output `y: T`. Called once per process
/// (never by a second copy of the library: TensorFlow aborts on a name
/// registered twice). Its shape function leaves the output shape unknown,
/// which is always correct: the nodes are made by our graph pass after
/// shapes were inferred, and kernels need no static shapes.
fn register_own_op(op: &str, inputs: &[&str], attrs: &[&str]) -> Result<(), Error> {
    let failed = |what: &str| Error::Internal(format!("cannot define the {op} op: {what}"));
    let name = CString::new(op).map_err(|_| failed("bad op name"))?;
    let specs = |list: &[&str]| list.iter().map(|s| CString::new(*s)).collect::<Result<Vec<_>, _>>();
    let attrs = specs(attrs).map_err(|_| failed("bad attribute spec"))?;
    let inputs = specs(inputs).map_err(|_| failed("bad input spec"))?;
    let output = CString::new("y: T").map_err(|_| failed("bad output spec"))?;
    let status = OwnedStatus::new()?;
    // SAFETY: the strings are NUL-terminated and copied by TensorFlow during
    // each call; the builder is ours until `TF_RegisterOpDefinition` takes
    // it (whatever the outcome). The specs are fixed and valid, so the
    // registration cannot hit TensorFlow's abort on an invalid spec.
    unsafe {
        let builder = TF_NewOpDefinitionBuilder(name.as_ptr());
        if builder.is_null() {
            return Err(failed("TF_NewOpDefinitionBuilder returned null"));
        }
        for input in &inputs {
            TF_OpDefinitionBuilderAddInput(builder, input.as_ptr());
        }
        TF_OpDefinitionBuilderAddOutput(builder, output.as_ptr());
        for attr in &attrs {
            TF_OpDefinitionBuilderAddAttr(builder, attr.as_ptr());
        }
        TF_OpDefinitionBuilderSetShapeInferenceFunction(builder, Some(unknown_shape));
        status.clear();
        TF_RegisterOpDefinition(builder, status.as_ptr());
    }
    status.outcome().map_err(|failure| failed(&failure.message))
}

/// The shape function of our own ops: output shape unknown.
unsafe extern "C" fn unknown_shape(ctx: *mut TF_ShapeInferenceContext, status: *mut TF_Status) {
    ffi_guard_or((), "shape function", || {
        // SAFETY: TensorFlow passes a live context and status for this call.
        unsafe { TF_ShapeInferenceContextSetUnknownShape(ctx, status) };
        Ok(())
    });
}

fn register(
    def: &KernelDef,
    combo: &[(&str, DType)],
    create: TF_KernelCreateFn,
    device_type: &CStr,
) -> Result<(), Error> {
    let failed = |what: String| Error::Internal(format!("cannot register the {} kernel {combo:?}: {what}", def.op));
    let op = CString::new(def.op).map_err(|_| failed("bad op name".into()))?;
    let kernel_name = CString::new(format!("Tfwasm{}Op", def.op)).map_err(|_| failed("bad op name".into()))?;
    let status = OwnedStatus::new()?;
    // SAFETY: the strings are NUL-terminated and outlive the call (TensorFlow
    // copies them into its KernelDefBuilder); the callbacks are `extern "C"`
    // functions with the signatures kernels.h declares.
    let builder = unsafe {
        if def.deferrable {
            TF_NewAsyncKernelBuilder(
                op.as_ptr(),
                device_type.as_ptr(),
                Some(create),
                Some(compute_kernel_async),
                Some(delete_kernel),
            )
        } else {
            TF_NewKernelBuilder(
                op.as_ptr(),
                device_type.as_ptr(),
                Some(create),
                Some(compute_kernel),
                Some(delete_kernel),
            )
        }
    };
    let builder = NonNull::new(builder).ok_or_else(|| failed("TF_NewKernelBuilder returned null".into()))?;
    let constrain = || -> Result<(), Error> {
        for &(attr, dtype) in combo {
            let attr = CString::new(attr).map_err(|_| failed("bad attribute name".into()))?;
            status.clear();
            // SAFETY: `builder` is live and still ours; `attr` is
            // NUL-terminated and copied by TensorFlow; `status` is live.
            unsafe {
                TF_KernelBuilder_TypeConstraint(builder.as_ptr(), attr.as_ptr(), tf_dtype(dtype), status.as_ptr())
            };
            status.outcome().map_err(|failure| failed(failure.message))?;
        }
        for &arg in def.host_memory {
            let arg = CString::new(arg).map_err(|_| failed("bad argument name".into()))?;
            // SAFETY: as above.
            unsafe { TF_KernelBuilder_HostMemory(builder.as_ptr(), arg.as_ptr()) };
        }
        Ok(())
    };
    if let Err(error) = constrain() {
        // SAFETY: the builder was never handed to TF_RegisterKernelBuilder,
        // so it is still ours to delete, exactly once.
        unsafe { TF_DeleteKernelBuilder(builder.as_ptr()) };
        return Err(error);
    }
    status.clear();
    // SAFETY: as above; TensorFlow takes ownership of `builder` here whatever
    // the outcome (its KernelBuilderFactory deletes it), so it is not touched
    // again.
    unsafe { TF_RegisterKernelBuilder(kernel_name.as_ptr(), builder.as_ptr(), status.as_ptr()) };
    status.outcome().map_err(|failure| failed(failure.message))
}

fn tf_dtype(dtype: DType) -> TF_DataType {
    dtype.datatype()
}

fn from_tf_dtype(dtype: TF_DataType) -> Option<DType> {
    DType::from_datatype(dtype.into())
}

// ---------------------------------------------------------------------------
// Kernel instances

/// What TensorFlow holds for one node: the kernel and the op it is for.
struct Instance {
    op: &'static str,
    /// The node's name, for the profiler's trace.
    name: Arc<str>,
    kernel: Box<dyn Kernel>,
}

/// The create callbacks, one per registry entry (see the module docs).
static CREATE: [TF_KernelCreateFn; CREATE_LEN] = create_table();

/// Create callbacks there are: at least the registry's length (a unit test
/// checks), in rows of 16.
const CREATE_LEN: usize = 384;

const fn create_table() -> [TF_KernelCreateFn; CREATE_LEN] {
    let mut table: [TF_KernelCreateFn; CREATE_LEN] = [create_nth::<0>; CREATE_LEN];
    macro_rules! fill {
        ($($i:literal)*) => { $( fill!(@row $i); )* };
        (@row $r:literal) => {
            table[$r * 16] = create_nth::<{ $r * 16 }>;
            table[$r * 16 + 1] = create_nth::<{ $r * 16 + 1 }>;
            table[$r * 16 + 2] = create_nth::<{ $r * 16 + 2 }>;
            table[$r * 16 + 3] = create_nth::<{ $r * 16 + 3 }>;
            table[$r * 16 + 4] = create_nth::<{ $r * 16 + 4 }>;
            table[$r * 16 + 5] = create_nth::<{ $r * 16 + 5 }>;
            table[$r * 16 + 6] = create_nth::<{ $r * 16 + 6 }>;
            table[$r * 16 + 7] = create_nth::<{ $r * 16 + 7 }>;
            table[$r * 16 + 8] = create_nth::<{ $r * 16 + 8 }>;
            table[$r * 16 + 9] = create_nth::<{ $r * 16 + 9 }>;
            table[$r * 16 + 10] = create_nth::<{ $r * 16 + 10 }>;
            table[$r * 16 + 11] = create_nth::<{ $r * 16 + 11 }>;
            table[$r * 16 + 12] = create_nth::<{ $r * 16 + 12 }>;
            table[$r * 16 + 13] = create_nth::<{ $r * 16 + 13 }>;
            table[$r * 16 + 14] = create_nth::<{ $r * 16 + 14 }>;
            table[$r * 16 + 15] = create_nth::<{ $r * 16 + 15 }>;
        };
    }
    fill!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23);
    table
}

/// Builds registry entry `I` for a node.
unsafe extern "C" fn create_nth<const I: usize>(ctx: *mut TF_OpKernelConstruction) -> *mut c_void {
    let op = definitions().get(I).map_or("kernel", |def| def.op);
    ffi_guard_or(ptr::null_mut(), op, || {
        let def = definitions().get(I).ok_or_else(|| Error::Internal(format!("no kernel definition {I}")))?;
        let Some(ctx) = NonNull::new(ctx) else {
            return Err(Error::Internal(format!("{op}: kernel created with a null construction context")));
        };
        let instance = with_status(
            |status| {
                let kernel = def.create(&Construction { raw: ctx, op, status })?;
                // SAFETY: `ctx` is live for this call; TensorFlow returns a
                // view of the node's name, copied here before the call ends.
                let name = unsafe { node_name(TF_OpKernelConstruction_GetName(ctx.as_ptr())) };
                Ok(Instance { op: def.op, name, kernel })
            },
            // SAFETY: `ctx` is the live construction context of this call;
            // `status` holds the failure.
            |status| unsafe { TF_OpKernelConstruction_Failure(ctx.as_ptr(), status) },
        );
        Ok(instance.map_or(ptr::null_mut(), |instance| Box::into_raw(Box::new(instance)).cast::<c_void>()))
    })
}

/// The node name a `TF_StringView` shows, or `?`.
///
/// # Safety
/// `view.data` is null or points at `view.len` readable bytes.
unsafe fn node_name(view: TF_StringView) -> Arc<str> {
    if view.data.is_null() {
        return Arc::from("?");
    }
    // SAFETY: per this function's contract.
    let bytes = unsafe { std::slice::from_raw_parts(view.data.cast::<u8>(), view.len) };
    Arc::from(String::from_utf8_lossy(bytes).as_ref())
}

/// # Safety
/// `kernel` is null or a pointer returned by one of our create callbacks and
/// not yet deleted; `ctx` is the live context of this compute call.
unsafe extern "C" fn compute_kernel(kernel: *mut c_void, ctx: *mut TF_OpKernelContext) {
    // SAFETY: forwarded contract.
    unsafe { compute_profiled(kernel, ctx, false) }
}

/// [`compute_kernel`], recorded as one kernel execution while a profiling
/// session runs (`deferred`: on the compute pool, after the compute
/// callback returned).
///
/// # Safety
/// As [`compute_kernel`].
unsafe fn compute_profiled(kernel: *mut c_void, ctx: *mut TF_OpKernelContext, deferred: bool) {
    if !profiler::active() {
        // SAFETY: forwarded contract.
        return unsafe { compute_unprofiled(kernel, ctx) };
    }
    let start_ns = profiler::now_ns();
    // SAFETY: forwarded contract.
    unsafe { compute_unprofiled(kernel, ctx) };
    let end_ns = profiler::now_ns();
    ffi_guard_or((), "kernel profile", || {
        // SAFETY: as in `compute_unprofiled` (null is checked).
        let Some(instance) = (unsafe { kernel.cast::<Instance>().as_ref() }) else { return Ok(()) };
        let Some(ctx) = NonNull::new(ctx) else { return Ok(()) };
        // SAFETY: `ctx` is the live context of this execution.
        let device = unsafe { TF_GetDeviceId(ctx.as_ptr()) };
        let (shapes, bytes) = input_summary(instance, ctx);
        profiler::record(profiler::Record {
            device: u32::try_from(device).unwrap_or(0),
            thread: profiler::current_thread(),
            start_ns,
            end_ns,
            event: profiler::Event::Kernel { name: instance.name.clone(), op: instance.op, shapes, bytes, deferred },
        });
        Ok(())
    });
}

/// The shapes of an execution's inputs (`[32,784] [784,128]`) and their bytes.
fn input_summary(instance: &Instance, ctx: NonNull<TF_OpKernelContext>) -> (Box<str>, u64) {
    SpareStatus::lend(|status| {
        let context = Context { raw: ctx, op: instance.op, status };
        let mut shapes = String::new();
        let mut bytes = 0u64;
        for index in 0..context.num_inputs() {
            if !shapes.is_empty() {
                shapes.push(' ');
            }
            match context.input(index) {
                Ok(input) => {
                    bytes += input.bytes().len() as u64;
                    shapes.push_str(&format!("{:?}", input.shape()).replace(' ', ""));
                }
                Err(_) => shapes.push('?'),
            }
        }
        (shapes.into_boxed_str(), bytes)
    })
    .unwrap_or_else(|_| ("?".into(), 0))
}

/// # Safety
/// As [`compute_kernel`].
unsafe fn compute_unprofiled(kernel: *mut c_void, ctx: *mut TF_OpKernelContext) {
    ffi_guard_or((), "kernel compute", || {
        let Some(ctx) = NonNull::new(ctx) else {
            return Err(Error::Internal("kernel computed with a null context".into()));
        };
        with_status(
            |status| {
                // SAFETY: per this function's contract the pointer came from
                // `Box::into_raw` in `create_nth` and TensorFlow deletes it
                // only after the last compute returns; `Instance` is
                // immutable and `Sync`, so concurrent computes may share it.
                let instance = unsafe { kernel.cast::<Instance>().as_ref() }
                    .ok_or_else(|| Error::Internal("kernel computed without a kernel instance".into()))?;
                if crate::device::streams::any_outstanding() {
                    // SAFETY: `ctx` is live for this call and `status` is ours.
                    let stream = unsafe { TF_GetStream(ctx.as_ptr(), status.as_ptr()) };
                    if !stream.is_null() {
                        super::stream_executor::finish_queued_work(stream)?;
                    }
                    status.clear();
                }
                instance.kernel.compute(&Context { raw: ctx, op: instance.op, status })
            },
            // SAFETY: `ctx` is the live context of this call; `status` holds
            // the failure.
            |status| unsafe { TF_OpKernelContext_Failure(ctx.as_ptr(), status) },
        );
        Ok(())
    })
}

/// The compute callback of a [deferrable](KernelDef::deferrable) kernel,
/// registered through `TF_NewAsyncKernelBuilder`. An execution worth it
/// ([`worth_deferring`]) moves `done` out of TensorFlow's frame
/// and runs on the compute pool, and the executor thread goes on with other
/// ready nodes meanwhile: TensorFlow runs a pluggable device's synchronous
/// kernels one after another on the thread that reached them, so without
/// this, independent convolutions (a layer's filter and input gradients)
/// never overlap each other or TensorFlow's own per-node work. Smaller
/// executions, executions reached from a pool worker (an executor running
/// inline inside another kernel's `done`) and platforms where `done` cannot
/// be moved finish here, before returning.
///
/// Inputs and outputs stay valid until `done` runs: an asynchronous
/// kernel's context holds its input tensors until then, so TensorFlow's
/// host-side variable updates (`AssignSubVariableOp`, ...) see a reader and
/// copy instead of updating a weight a deferred convolution still reads.
///
/// # Safety
/// As [`compute_kernel`]; `done` is TensorFlow's callback for this execution.
unsafe extern "C" fn compute_kernel_async(
    kernel: *mut c_void,
    ctx: *mut TF_OpKernelContext,
    done: *mut TF_AsyncOpKernelDoneCallback,
) {
    let deferred = ffi_guard_or(false, "kernel compute", || {
        // SAFETY: as in `compute_kernel` (null is checked).
        let Some(instance) = (unsafe { kernel.cast::<Instance>().as_ref() }) else { return Ok(false) };
        let Some(context) = NonNull::new(ctx) else { return Ok(false) };
        if pool::on_worker() || !worth_deferring(instance, context) {
            return Ok(false);
        }
        // SAFETY: `done` is this execution's callback; once taken, only the
        // job below uses it.
        let Some(done) = (unsafe { DoneCallback::take(done, done_ownership()) }) else { return Ok(false) };
        let job = Deferred { kernel, ctx, done };
        if let Err(job) = pool::spawn(move || job.run()) {
            job(); // no pool: finish before returning
        }
        Ok(true)
    });
    if !deferred {
        // SAFETY: forwarded contract.
        unsafe { compute_kernel(kernel, ctx) };
        if !done.is_null() {
            // SAFETY: `done` is live until this callback returns.
            unsafe { TF_RunAsyncOpKernelDoneCallback(done) };
        }
    }
}

/// Who owns an asynchronous kernel's completion callback in the TensorFlow
/// we run in (see `ffi::done`).
fn done_ownership() -> Ownership {
    match super::stream_executor::tensorflow_version() {
        Some(version) if version.gives_done_callbacks() => Ownership::Given,
        _ => Ownership::InFrame,
    }
}

/// One kernel execution finishing on the compute pool.
struct Deferred {
    kernel: *mut c_void,
    ctx: *mut TF_OpKernelContext,
    done: DoneCallback,
}

// SAFETY: TensorFlow keeps the kernel and the context of an asynchronous
// execution alive until `done` runs, and the context is used by one thread
// at a time: the callback that deferred it returned without touching it
// again.
unsafe impl Send for Deferred {}

impl Deferred {
    /// Computes, then runs `done`, also if computing panicked (the panic is
    /// already a failure on the context by then: `compute_kernel` catches
    /// its own), so no rayon worker unwinds and no executor waits forever.
    fn run(self) {
        let Deferred { kernel, ctx, done } = self;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: as in `compute_kernel` (null is checked).
            let op = unsafe { kernel.cast::<Instance>().as_ref() }.map_or("?", |instance| instance.op);
            tracing::trace!("tfwasm: {op} finishes on the compute pool");
            // SAFETY: see `Send` above.
            unsafe { compute_profiled(kernel, ctx, true) };
        }));
        done.run();
    }
}

/// Whether this execution does enough work to repay a pool hand-off, by
/// the bytes of its inputs. Inputs it cannot read are left to
/// `compute_kernel` to report.
fn worth_deferring(instance: &Instance, ctx: NonNull<TF_OpKernelContext>) -> bool {
    SpareStatus::lend(|status| {
        let context = Context { raw: ctx, op: instance.op, status };
        let mut bytes = 0;
        for index in 0..context.num_inputs() {
            match context.input(index) {
                Ok(input) => bytes += input.bytes().len(),
                Err(_) => return false,
            }
        }
        bytes >= DEFER_MIN_INPUT_BYTES
    })
    .unwrap_or(false)
}

/// # Safety
/// `kernel` is null or a pointer returned by one of our create callbacks,
/// deleted once.
unsafe extern "C" fn delete_kernel(kernel: *mut c_void) {
    ffi_guard_or((), "kernel delete", || {
        if !kernel.is_null() {
            // SAFETY: per this function's contract the pointer came from
            // `Box::into_raw(Box<Instance>)` in `create_nth` and TensorFlow
            // deletes each instance once, after its last compute.
            drop(unsafe { Box::from_raw(kernel.cast::<Instance>()) });
        }
        Ok(())
    })
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
    /// Runs one attribute getter and names the attribute on failure.
    fn get(
        &self,
        name: &str,
        call: impl FnOnce(*mut TF_OpKernelConstruction, *const c_char, *mut TF_Status),
    ) -> Result<(), Error> {
        let c_name =
            CString::new(name).map_err(|_| Error::Internal(format!("{}: bad attribute name {name:?}", self.op)))?;
        self.status.clear();
        call(self.raw.as_ptr(), c_name.as_ptr(), self.status.as_ptr());
        self.status.outcome().map_err(|failure| failure.context(format!("{}: cannot read attribute {name}", self.op)))
    }

    /// `(list size, total size)` of an attribute, as TF_OpKernelConstruction_GetAttrSize reports.
    fn size(&self, name: &str) -> Result<(usize, usize), Error> {
        let (mut list, mut total) = (0i32, 0i32);
        // SAFETY: `raw` is live for this create call, the name is
        // NUL-terminated, the out-pointers are valid, `status` is live.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrSize(raw, name, &mut list, &mut total, status)
        })?;
        Ok((usize::try_from(list).unwrap_or(0), usize::try_from(total).unwrap_or(0)))
    }
}

impl Attrs for Construction<'_> {
    fn has(&self, name: &str) -> bool {
        let Ok(c_name) = CString::new(name) else { return false };
        self.status.clear();
        // SAFETY: as in `size`.
        unsafe { TF_OpKernelConstruction_HasAttr(self.raw.as_ptr(), c_name.as_ptr(), self.status.as_ptr()) }
    }

    fn bool(&self, name: &str) -> Result<bool, Error> {
        let mut value: TF_Bool = 0;
        // SAFETY: as in `size`.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrBool(raw, name, &mut value, status)
        })?;
        Ok(value != 0)
    }

    fn int(&self, name: &str) -> Result<i64, Error> {
        let mut value = 0i64;
        // SAFETY: as in `size`.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrInt64(raw, name, &mut value, status)
        })?;
        Ok(value)
    }

    fn float(&self, name: &str) -> Result<f32, Error> {
        let mut value = 0f32;
        // SAFETY: as in `size`.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrFloat(raw, name, &mut value, status)
        })?;
        Ok(value)
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
        let (len, _) = self.size(name)?;
        let mut values = vec![0i64; len];
        let max =
            c_int::try_from(len).map_err(|_| Error::Internal(format!("{}: attribute {name} is too long", self.op)))?;
        // SAFETY: as in `size`; `values` has room for `max` values.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrInt64List(raw, name, values.as_mut_ptr(), max, status)
        })?;
        Ok(values)
    }

    fn string(&self, name: &str) -> Result<String, Error> {
        let (_, len) = self.size(name)?;
        let mut bytes = vec![0u8; len];
        // SAFETY: as in `size`; `bytes` has room for `len` bytes, the most
        // TensorFlow writes.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrString(raw, name, bytes.as_mut_ptr().cast::<c_char>(), len, status)
        })?;
        String::from_utf8(bytes)
            .map_err(|_| Error::InvalidArgument(format!("{}: attribute {name} is not UTF-8", self.op)))
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, Error> {
        let (count, total) = self.size(name)?;
        if count == 0 {
            return Ok(Vec::new());
        }
        let max = c_int::try_from(count)
            .map_err(|_| Error::Internal(format!("{}: attribute {name} is too long", self.op)))?;
        let mut starts = vec![ptr::null_mut::<c_char>(); count];
        let mut lengths = vec![0usize; count];
        let mut storage = vec![0u8; total];
        // SAFETY: as in `size`; `starts` and `lengths` have room for `max`
        // entries and `storage` for `total` bytes, the sizes TensorFlow
        // reported for this attribute.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrStringList(
                raw,
                name,
                starts.as_mut_ptr(),
                lengths.as_mut_ptr(),
                max,
                storage.as_mut_ptr().cast::<c_void>(),
                total,
                status,
            )
        })?;
        // TensorFlow points each entry into `storage`; read them back as
        // offsets there, so no pointer it wrote is dereferenced.
        let base = storage.as_ptr() as usize;
        starts
            .iter()
            .zip(&lengths)
            .map(|(&start, &len)| {
                let bytes = (start as usize)
                    .checked_sub(base)
                    .and_then(|offset| storage.get(offset..offset.checked_add(len)?))
                    .ok_or_else(|| {
                        Error::Internal(format!("{}: attribute {name}: a string outside its storage", self.op))
                    })?;
                String::from_utf8(bytes.to_vec())
                    .map_err(|_| Error::InvalidArgument(format!("{}: attribute {name} is not UTF-8", self.op)))
            })
            .collect()
    }

    fn dtype(&self, name: &str) -> Result<DType, Error> {
        let mut value: TF_DataType = 0;
        // SAFETY: as in `size`.
        self.get(name, |raw, name, status| unsafe {
            TF_OpKernelConstruction_GetAttrType(raw, name, &mut value, status)
        })?;
        from_tf_dtype(value).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{}: attribute {name} has a type tfwasm does not support (TF_DataType {value})",
                self.op
            ))
        })
    }
}

/// An op-kernel context for the duration of a compute callback.
struct Context<'a> {
    raw: NonNull<TF_OpKernelContext>,
    op: &'static str,
    status: &'a OwnedStatus,
}

/// Which tensor of the node an error is about (formatted only on error:
/// the compute path allocates no strings).
#[derive(Clone, Copy)]
enum Slot {
    Input(usize),
    Output(usize),
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Input(i) => write!(f, "input {i}"),
            Slot::Output(i) => write!(f, "output {i}"),
        }
    }
}

/// A `TF_Tensor` handle the abi layer holds, released on drop unless it was
/// handed to a [`Tensor`]'s owner ([`TensorHandle::into_owner`]).
struct TensorHandle(NonNull<TF_Tensor>);

// SAFETY: a TF_Tensor handle is a reference-counted buffer reference that
// TensorFlow releases from whichever thread drops it.
unsafe impl Send for TensorHandle {}

impl Drop for TensorHandle {
    fn drop(&mut self) {
        // SAFETY: we own this handle and release it exactly once.
        unsafe { release_tensor(self.0.cast()) };
    }
}

impl TensorHandle {
    /// Hands the reference to a [`Tensor`]'s owner, which releases it.
    fn into_owner(self) -> Owner {
        let raw = std::mem::ManuallyDrop::new(self).0;
        // SAFETY: `release_tensor` deletes a handle we own, once; TensorFlow
        // releases a TF_Tensor from any thread.
        unsafe { Owner::handle(raw.cast(), release_tensor) }
    }
}

/// # Safety
/// `handle` is a `TF_Tensor` we own, released once.
unsafe fn release_tensor(handle: NonNull<c_void>) {
    // SAFETY: per this function's contract.
    unsafe { TF_DeleteTensor(handle.as_ptr().cast()) };
}

impl Context<'_> {
    fn check_output_index(&self, index: usize) -> Result<c_int, Error> {
        let count = self.num_outputs();
        if index < count {
            Ok(index as c_int)
        } else {
            Err(Error::Internal(format!("{}: output {index} requested, the node has {count}", self.op)))
        }
    }

    /// A new handle on input `index`.
    fn input_handle(&self, index: usize) -> Result<TensorHandle, Error> {
        let count = self.num_inputs();
        if index >= count {
            return Err(Error::Internal(format!("{}: input {index} requested, the node has {count}", self.op)));
        }
        let mut raw: *mut TF_Tensor = ptr::null_mut();
        self.status.clear();
        // SAFETY: `raw` is live for this compute call, the index is in
        // range, the out-pointer is valid, `status` is live. On success
        // TensorFlow gives us a new handle, owned by the returned value.
        unsafe { TF_GetInput(self.raw.as_ptr(), index as c_int, &mut raw, self.status.as_ptr()) };
        self.status.outcome().map_err(|failure| failure.context(format!("{}: cannot read input {index}", self.op)))?;
        NonNull::new(raw)
            .map(TensorHandle)
            .ok_or_else(|| Error::Internal(format!("{}: TensorFlow returned no tensor for input {index}", self.op)))
    }

    /// Wraps a handle TensorFlow gave us, checking its dtype, shape and
    /// byte size. `known` is the dtype and shape we asked TensorFlow for
    /// (an output), which need not be read back.
    fn wrap(&self, handle: TensorHandle, what: Slot, known: Option<(DType, &[usize])>) -> Result<Tensor, Error> {
        let raw = handle.0;
        let bad = |reason: String| Error::Internal(format!("{}: {what} {reason}", self.op));
        let read;
        let (dtype, shape) = match known {
            Some(known) => known,
            None => {
                // SAFETY: `raw` is a live handle we own (in `handle`).
                let tf_type = unsafe { TF_TensorType(raw.as_ptr()) };
                let dtype = from_tf_dtype(tf_type)
                    .ok_or_else(|| bad(format!("has TF_DataType {tf_type}, which tfwasm does not handle")))?;
                // SAFETY: as above.
                let rank = unsafe { TF_NumDims(raw.as_ptr()) };
                read = (0..rank.max(0))
                    .map(|i| {
                        // SAFETY: `raw` is live and 0 <= i < TF_NumDims.
                        let dim = unsafe { TF_Dim(raw.as_ptr(), i) };
                        usize::try_from(dim).map_err(|_| bad(format!("has dimension {dim}")))
                    })
                    .collect::<Result<Dims, Error>>()?;
                (dtype, &read[..])
            }
        };
        let len = element_count(shape).ok_or_else(|| bad(format!("shape {} is too large", ShapeDisplay(shape))))?;
        let mut data = None;
        if len > 0 {
            // SAFETY: `raw` is live.
            let (bytes, ptr) = unsafe { (TF_TensorByteSize(raw.as_ptr()), TF_TensorData(raw.as_ptr())) };
            if len.checked_mul(dtype.size()).is_none_or(|needed| bytes < needed) {
                return Err(bad(format!("has {bytes} bytes, too few for {len} {dtype} elements")));
            }
            let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| bad(format!("has {len} elements but no data")))?;
            if ptr.as_ptr().align_offset(dtype.size()) != 0 {
                return Err(bad(format!("data at {ptr:p} is not aligned for {dtype}")));
            }
            data = Some(ptr);
        }
        // SAFETY: `data` points to at least `len * dtype.size()` bytes,
        // aligned (checked above), kept alive by the handle in the owner.
        // Inputs are not written while the kernel runs; outputs (`known`)
        // come fresh from TF_AllocateOutput, or forwarded from an input
        // whose handles the kernel gave up (`forward_or_allocate_output`,
        // whose callers read that input through the output only), so no
        // one else reads them while the kernel writes. Device
        // memory is an anonymous mapping, so the bytes are initialised.
        unsafe { Tensor::from_raw(dtype, shape, data, known.is_some(), handle.into_owner()) }
    }

    fn too_large(&self, shape: &[usize]) -> Error {
        Error::InvalidArgument(format!("{}: output shape {} is too large", self.op, ShapeDisplay(shape)))
    }

    /// An output shape as TensorFlow's dimensions: each fits an `i64`, the
    /// rank a `c_int`, and the element count a `usize`.
    fn output_dims(&self, shape: &[usize]) -> Result<SmallVec<[i64; 8]>, Error> {
        let dims = shape
            .iter()
            .map(|&d| i64::try_from(d))
            .collect::<Result<SmallVec<[i64; 8]>, _>>()
            .map_err(|_| self.too_large(shape))?;
        if c_int::try_from(dims.len()).is_err() || element_count(shape).is_none() {
            return Err(self.too_large(shape));
        }
        Ok(dims)
    }

    /// Wraps the handle an allocating call returned, or turns the status it
    /// set into our error.
    fn take_output(&self, raw: *mut TF_Tensor, index: usize, dtype: DType, shape: &[usize]) -> Result<Tensor, Error> {
        self.status.outcome().map_err(|failure| {
            let what = format!("{}: cannot allocate the output {}", self.op, ShapeDisplay(shape));
            match super::stream_executor::take_allocation_failure() {
                // A real out-of-memory keeps TensorFlow's ResourceExhausted;
                // a guest fault becomes its own error, naming the guest.
                None => failure.context(what),
                Some(oom @ Error::OutOfMemory { .. }) => failure.context(format!("{what} ({oom})")),
                Some(ours) => Error::Tensorflow { code: ours.tf_code(), message: format!("tfwasm: {what}: {ours}") },
            }
        })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::Internal(format!("{}: TensorFlow returned no output tensor", self.op)))?;
        self.wrap(TensorHandle(raw), Slot::Output(index), Some((dtype, shape)))
    }
}

impl OpContext for Context<'_> {
    fn num_inputs(&self) -> usize {
        // SAFETY: `raw` is live for this compute call.
        usize::try_from(unsafe { TF_NumInputs(self.raw.as_ptr()) }).unwrap_or(0)
    }

    fn num_outputs(&self) -> usize {
        // SAFETY: `raw` is live for this compute call.
        usize::try_from(unsafe { TF_NumOutputs(self.raw.as_ptr()) }).unwrap_or(0)
    }

    fn input(&self, index: usize) -> Result<Tensor, Error> {
        let handle = self.input_handle(index)?;
        self.wrap(handle, Slot::Input(index), None)
    }

    fn output_dtype(&self, index: usize) -> Result<DType, Error> {
        let index = self.check_output_index(index)?;
        // SAFETY: `raw` is live and the index is in range (checked: TF aborts otherwise).
        let tf_type = unsafe { TF_ExpectedOutputDataType(self.raw.as_ptr(), index) };
        from_tf_dtype(tf_type).ok_or_else(|| {
            Error::Internal(format!(
                "{}: output {index} has TF_DataType {tf_type}, which tfwasm does not handle",
                self.op
            ))
        })
    }

    fn allocate_output(&self, index: usize, shape: &[usize]) -> Result<Tensor, Error> {
        let dtype = self.output_dtype(index)?;
        let c_index = self.check_output_index(index)?;
        let dims = self.output_dims(shape)?;
        let bytes =
            element_count(shape).and_then(|n| n.checked_mul(dtype.size())).ok_or_else(|| self.too_large(shape))?;
        let rank = dims.len() as c_int;
        self.status.clear();
        // SAFETY: `raw` is live for this compute call; `dims` holds `rank`
        // non-negative dimensions whose product fits (checked above, so
        // TensorFlow's TensorShape accepts them); `status` is live. On
        // success we own the returned handle.
        let raw = unsafe {
            TF_AllocateOutput(
                self.raw.as_ptr(),
                c_index,
                tf_dtype(dtype),
                dims.as_ptr(),
                rank,
                bytes,
                self.status.as_ptr(),
            )
        };
        self.take_output(raw, index, dtype, shape)
    }

    fn forward_or_allocate_output(
        &self,
        index: usize,
        shape: &[usize],
        candidates: Vec<(usize, Tensor)>,
    ) -> Result<OutputPlace, Error> {
        let dtype = self.output_dtype(index)?;
        let c_index = self.check_output_index(index)?;
        let dims = self.output_dims(shape)?;
        let len = element_count(shape).unwrap_or(usize::MAX);
        // An input TensorFlow may forward holds the output's values and lies
        // in device memory: an output must stay inside a device region (see
        // `forward_input`). Its handle is dropped, since TensorFlow forwards
        // only a buffer nobody else holds, and taken again if not forwarded.
        let mut offered: SmallVec<[c_int; 4]> = SmallVec::new();
        let mut inputs: Vec<Option<Tensor>> = Vec::with_capacity(candidates.len());
        for (input, tensor) in candidates {
            let bytes = tensor.bytes();
            let on_device =
                bytes.is_empty() || super::stream_executor::in_device_memory(bytes.as_ptr(), bytes.len() as u64);
            match c_int::try_from(input) {
                Ok(input) if on_device && may_forward(&tensor, dtype, len) => {
                    offered.push(input);
                    inputs.push(None);
                }
                _ => inputs.push(Some(tensor)),
            }
        }
        if offered.is_empty() {
            let output = self.allocate_output(index, shape)?;
            return Ok(OutputPlace { output, forwarded: None, inputs });
        }
        let mut forwarded: c_int = -1;
        self.status.clear();
        // SAFETY: `raw` is live for this compute call; `offered` holds
        // `offered.len()` input indexes below TF_NumInputs (each came from a
        // handle TF_GetInput gave us); the output index is in range and
        // `dims` holds a shape TensorShape accepts (both checked above);
        // `forwarded` and `status` are live. On success we own the
        // returned handle.
        let raw = unsafe {
            TF_ForwardInputOrAllocateOutput(
                self.raw.as_ptr(),
                offered.as_ptr(),
                offered.len() as c_int,
                c_index,
                dims.as_ptr(),
                dims.len() as c_int,
                &mut forwarded,
                self.status.as_ptr(),
            )
        };
        let output = self.take_output(raw, index, dtype, shape)?;
        let mut place = OutputPlace { output, forwarded: None, inputs };
        let mut next = offered.iter();
        for (position, slot) in place.inputs.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let Some(&input) = next.next() else { unreachable!("one offered index per dropped handle") };
            if input == forwarded && place.forwarded.is_none() {
                place.forwarded = Some(position);
            } else {
                *slot = Some(self.input(input as usize)?);
            }
        }
        Ok(place)
    }

    fn forward_input(&self, input: usize, output: usize) -> Result<(), Error> {
        let c_output = self.check_output_index(output)?;
        let handle = self.input_handle(input)?;
        // An input in host memory (an argument registered as such, or one
        // the graph pass put there, see `graph::host_edges`) is copied, not
        // forwarded: an output in device memory must stay inside a device
        // region, where TensorFlow's copies back to the host look for it.
        // SAFETY: the handle is live.
        let (data, bytes) = unsafe { (TF_TensorData(handle.0.as_ptr()), TF_TensorByteSize(handle.0.as_ptr())) };
        if bytes > 0 && !super::stream_executor::in_device_memory(data.cast(), bytes as u64) {
            let source = self.wrap(handle, Slot::Input(input), None)?;
            let mut copy = self.allocate_output(output, source.shape())?;
            let target = copy.bytes_mut()?;
            if target.len() != source.bytes().len() {
                return Err(Error::Internal(format!("{}: output {output} is not the type of input {input}", self.op)));
            }
            target.copy_from_slice(source.bytes());
            return Ok(());
        }
        self.status.clear();
        // SAFETY: `raw` is live, the output index is in range, the handle is
        // live (TensorFlow copies the tensor reference), `status` is live.
        unsafe { TF_SetOutput(self.raw.as_ptr(), c_output, handle.0.as_ptr(), self.status.as_ptr()) };
        self.status
            .outcome()
            .map_err(|failure| failure.context(format!("{}: cannot forward input {input} to output {output}", self.op)))
    }
}

// ---------------------------------------------------------------------------
// Status plumbing

/// A `TF_Status` created for one callback and deleted at its end.
pub(super) struct OwnedStatus(NonNull<TF_Status>);

impl OwnedStatus {
    pub(super) fn new() -> Result<Self, Error> {
        // SAFETY: TF_NewStatus has no preconditions.
        let raw = unsafe { TF_NewStatus() };
        NonNull::new(raw).map(OwnedStatus).ok_or_else(|| Error::Internal("TF_NewStatus returned null".into()))
    }

    pub(super) fn as_ptr(&self) -> *mut TF_Status {
        self.0.as_ptr()
    }

    /// Resets to OK before a TensorFlow call: not every call clears a
    /// previous error on success.
    fn clear(&self) {
        // Called before every TensorFlow call that reports through the
        // status (each input, output and attribute); `set_status` clears to
        // OK without allocating.
        super::set_status(self.as_ptr(), TF_OK, "");
    }

    /// What TensorFlow wrote into the status by the last call.
    pub(super) fn outcome(&self) -> Result<(), TfFailure> {
        // SAFETY: the status is live.
        let code = unsafe { TF_GetCode(self.as_ptr()) };
        if code == TF_OK {
            return Ok(());
        }
        // SAFETY: the status is live; TF_Message returns a NUL-terminated
        // string owned by the status (or null), copied out at once.
        let message = unsafe {
            let text = TF_Message(self.as_ptr());
            if text.is_null() {
                String::new()
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            }
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
pub(super) struct TfFailure {
    code: TF_Code,
    pub(super) message: String,
}

impl TfFailure {
    /// Prefixes what we were doing, keeping TensorFlow's code and message.
    fn context(self, what: String) -> Error {
        Error::Tensorflow { code: self.code, message: format!("tfwasm: {what}: {}", self.message) }
    }
}

/// Runs `body` with a status of this thread's (see [`SpareStatus`]). On
/// failure — our error, TensorFlow's, or a panic — the status describes it
/// and `report` passes it to TensorFlow.
fn with_status<T>(
    body: impl FnOnce(&OwnedStatus) -> Result<T, Error>,
    report: impl FnOnce(*mut TF_Status),
) -> Option<T> {
    let lent = SpareStatus::lend(|status| {
        // ffi_guard writes the error (ours, TensorFlow's with its own code,
        // or a panic) into the status.
        let outcome = ffi_guard(status.as_ptr(), || body(status));
        if outcome.is_none() {
            report(status.as_ptr());
        }
        outcome
    });
    lent.unwrap_or_else(|error| {
        tracing::error!("{error}; cannot report a kernel failure to TensorFlow");
        None
    })
}

/// One `TF_Status` per thread, kept between compute calls: creating and
/// deleting one per call costs two allocations on every op. A call nested
/// on the same thread (a kernel run inside another's wait) finds the spare
/// taken and makes its own.
struct SpareStatus;

thread_local! {
    static SPARE_STATUS: Cell<Option<OwnedStatus>> = const { Cell::new(None) };
}

impl SpareStatus {
    fn take() -> Result<OwnedStatus, Error> {
        match SPARE_STATUS.try_with(Cell::take) {
            Ok(Some(status)) => Ok(status),
            _ => OwnedStatus::new(),
        }
    }

    /// Keeps `status`, cleared, for the next call on this thread.
    fn put(status: OwnedStatus) {
        status.clear();
        // A thread that is exiting drops it instead.
        let _ = SPARE_STATUS.try_with(|spare| spare.set(Some(status)));
    }

    /// Runs `body` with this thread's spare status, then keeps it for the
    /// next call. Fails only if there is no spare and TensorFlow cannot make
    /// a status.
    fn lend<T>(body: impl FnOnce(&OwnedStatus) -> T) -> Result<T, Error> {
        let status = SpareStatus::take()?;
        let outcome = body(&status);
        SpareStatus::put(status);
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `DType`'s numbers are the C API's (which `tests/rust/layout.rs`
    /// checks against the wheel's headers), both ways.
    #[test]
    fn every_registry_entry_has_a_create_callback() {
        assert!(crate::kernels::registry().len() <= CREATE.len(), "grow CREATE");
    }

    #[test]
    fn dtypes_map_to_the_c_api_numbers() {
        let pairs = [
            (DType::F32, TF_FLOAT),
            (DType::F64, TF_DOUBLE),
            (DType::I32, TF_INT32),
            (DType::I64, TF_INT64),
            (DType::U8, TF_UINT8),
            (DType::U64, TF_UINT64),
            (DType::Bool, TF_BOOL),
            (DType::F16, TF_HALF),
            (DType::BF16, TF_BFLOAT16),
        ];
        for (dtype, number) in pairs {
            assert_eq!(tf_dtype(dtype), number, "{dtype}");
            assert_eq!(from_tf_dtype(number), Some(dtype), "{dtype}");
        }
        for unknown in [0, 5, 7, 20, 21, 101] {
            assert_eq!(from_tf_dtype(unknown), None, "{unknown}");
        }
    }
}
