//! `TF_InitGraph` and the callback of the graph optimizer it registers.
//!
//! TensorFlow runs a plugin's optimizer, after its own grappler passes, on
//! every graph (and instantiated function) whose devices include the type
//! the plugin registered it for. The callback hands the serialized GraphDef,
//! TensorFlow's lists of nodes to keep and fetch, its op registry and our
//! kernel table to [`crate::optimizer::optimize`] and returns the result in a buffer
//! TensorFlow frees through our deallocator. On an error status TensorFlow
//! keeps its original graph, so a failed pass costs nothing but the pass.
//!
//! Registration can never decline. TensorFlow 2.21 aborts the process both
//! on a second optimizer for the same device type (`LOG(FATAL)`
//! "PluginGraphOptimizer with device_type WASM is registered twice.") and on
//! an error status from `TF_InitGraph` (a `CHECK` in
//! `TF_LoadPluggableDeviceLibrary`), so the only error we report is for
//! structs TensorFlow could not use anyway. A second copy of the library, or
//! an invalid `TFWASM_DEVICE_TYPE`, registers under a device type no device
//! has, and its optimizer never runs.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use tfwasm_proto::graph::{NodeDef, OpDef};
use tfwasm_proto::prost::Message;

use super::ffi::grappler::*;
use super::ffi::status::TF_Status;
use super::ffi_guard;
use super::kernels::OwnedStatus;
use crate::error::Error;
use crate::passes::catalog::{Catalog, KernelTable};
use crate::passes::validate::OpCatalog;

/// The device type whose graphs [`optimize`] rewrites, set by the one real
/// registration of this library.
static TARGET: OnceLock<String> = OnceLock::new();

/// Entry point TensorFlow calls once per loaded library, after `SE_InitPlugin`.
///
/// # Safety
/// `params` and `status` are valid pointers supplied by TensorFlow.
#[no_mangle]
pub unsafe extern "C" fn TF_InitGraph(params: *mut TP_OptimizerRegistrationParams, status: *mut TF_Status) {
    crate::config::init_logging();
    ffi_guard(status, || {
        // SAFETY: TensorFlow passes a valid, exclusive params struct for this call.
        let params = unsafe { params.as_mut() }
            .ok_or_else(|| Error::InvalidArgument("null optimizer registration params".into()))?;
        // TensorFlow fills `struct_size` (and the sub-structs') before the call;
        // an older TF without our fields, or missing out-structs, cannot take a
        // registration at all.
        if params.struct_size < TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE
            || params.optimizer_configs.is_null()
            || params.optimizer.is_null()
        {
            return Err(Error::InvalidArgument(format!(
                "TF_InitGraph: unsupported registration params (struct_size {}, expected at least {})",
                params.struct_size, TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE
            )));
        }
        let (device_type, optimize_func): (&'static CStr, TP_OptimizeFn) = match crate::config::device_type() {
            _ if super::stream_executor::is_inert() => {
                tracing::debug!("tfwasm: this copy of the plugin is inert: so is its graph pass");
                (inert_device_type()?, optimize_inert)
            }
            Ok(device_type) => {
                let name = device_type.to_str().map_err(|_| Error::Internal("device type is not UTF-8".into()))?;
                if TARGET.set(name.to_owned()).is_err() {
                    // `TF_InitGraph` again in the same library: TF would abort on
                    // the second registration of this type.
                    (inert_device_type()?, optimize_inert)
                } else {
                    (device_type, optimize)
                }
            }
            Err(error) => {
                tracing::error!("{error}. tfwasm registers no graph pass.");
                (inert_device_type()?, optimize_inert)
            }
        };

        params.major_version = GO_MAJOR;
        params.minor_version = GO_MINOR;
        params.patch_version = GO_PATCH;
        params.device_type = device_type.as_ptr();
        // SAFETY: checked non-null above; TensorFlow owns these structs for the
        // call and expects us to fill them in.
        unsafe {
            *params.optimizer_configs = plugin_optimizer_configs();
            *params.optimizer = TP_Optimizer { optimize_func: Some(optimize_func), ..Default::default() };
        }
        params.struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
        Ok(())
    });
}

/// Which of TensorFlow's own grappler passes stay on while this plugin is
/// loaded: all of them (`Default`) but the memory optimizer.
///
/// When grappler's memory optimizer estimates a graph's peak memory above
/// 80% of a device's limit, it rewrites every `AddN` with more than two
/// inputs into a `TemporaryVariable` + `Assign` + `AssignAdd` +
/// `DestroyTemporaryVariable` chain on the `AddN`'s device. Those are
/// reference-typed ops: the C kernel API cannot implement them, so on our
/// device the rewritten graph fails with "No registered 'Assign' OpKernel
/// for 'WASM' devices" (measured with TF 2.21: `tf.add_n` of three 80 MB
/// tensors in a `tf.function`). TensorFlow applies a plugin's settings only
/// to graphs with a node on the plugin's device (and logs its "User's config
/// has been changed based on plugin's config" table for them); graphs of the
/// CPU alone keep the rewrite. It only trades speed for peak memory.
fn plugin_optimizer_configs() -> TP_OptimizerConfigs {
    TP_OptimizerConfigs { memory_optimization: TF_TriState::TF_TriState_Off, ..TP_OptimizerConfigs::default() }
}

/// A device type no device has, new on each call: TensorFlow keys optimizers
/// by type and aborts on a repeat. Leaked: TensorFlow keeps the pointer.
fn inert_device_type() -> Result<&'static CStr, Error> {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("TFWASM_INERT_GRAPH_{}", COUNT.fetch_add(1, Ordering::Relaxed));
    let name = CString::new(name).map_err(|_| Error::Internal("inert device type".into()))?;
    Ok(Box::leak(name.into_boxed_c_str()))
}

/// The pass on graphs of our device type.
unsafe extern "C" fn optimize(
    _optimizer: *mut c_void,
    graph: *const TF_Buffer,
    item: *const TF_GrapplerItem,
    optimized: *mut TF_Buffer,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let device_type = TARGET.get().ok_or_else(|| Error::Internal("graph pass without a registration".into()))?;
        // SAFETY: TensorFlow passes its serialized graph, valid for this call.
        let input = unsafe { graph_bytes(graph) }?;
        let fns = grappler_fns();
        // SAFETY: TensorFlow passes the item of this call (or null).
        let preserved = unsafe { item_names(item, fns.preserve) }
            .map_err(|error| tracing::debug!("tfwasm: no list of nodes to preserve for this graph: {error}"))
            .ok();
        // SAFETY: as above.
        let fetch: Vec<String> = unsafe { item_names(item, fns.fetch) }
            .map(|names| names.into_iter().map(|name| String::from_utf8_lossy(&name).into_owned()).collect())
            .unwrap_or_default();
        let item = crate::optimizer::Item {
            preserve: preserved.as_ref(),
            fetch: &fetch,
            scatter: super::kernels::scatter_ops_registered(),
            device_count: super::stream_executor::platform().map_or(1, |platform| platform.devices.len()),
        };
        let catalog = TensorflowOps { kernels: super::kernels::kernel_table() };
        let output = crate::optimizer::optimize(input, device_type, &item, catalog.kernels, &catalog)?;
        // SAFETY: as above, for the output buffer.
        unsafe { set_buffer(optimized, output) }
    });
}

/// TensorFlow's grappler helpers the optimizer uses, if its
/// `libtensorflow_cc.so.2` exports them. Looked up in that library (a
/// NEEDED entry of the plugin, so already loaded), not in the process's
/// global scope: TensorFlow after 2.21 loads its libraries without
/// RTLD_GLOBAL. Each is optional: without the lists the passes do not run;
/// without the op lookup, pass answers are checked against the registry
/// snapshot tfwasm was built with.
struct GrapplerFns {
    preserve: Option<(TF_GetNodesToPreserveListSizeFn, TF_GetNodesToPreserveListFn)>,
    fetch: Option<(TF_GetFetchNodesListSizeFn, TF_GetFetchNodesListFn)>,
    library: Option<(TF_NewFunctionLibraryDefinitionFn, TF_LookUpOpDefFn)>,
}

fn grappler_fns() -> &'static GrapplerFns {
    static FNS: OnceLock<GrapplerFns> = OnceLock::new();
    FNS.get_or_init(|| {
        // SAFETY: dlopen with RTLD_NOLOAD only returns a handle on a library
        // already loaded (taking a reference we keep for the process's life);
        // dlsym on it with NUL-terminated names has no preconditions.
        let library = unsafe { libc::dlopen(c"libtensorflow_cc.so.2".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        let symbol = |name: &CStr| match library.is_null() {
            true => std::ptr::null_mut(),
            // SAFETY: as above.
            false => unsafe { libc::dlsym(library, name.as_ptr()) },
        };
        // SAFETY (all transmutes below): a non-null dlsym result is the
        // exported function, whose C signature (grappler.h) the pointer
        // types mirror; the layout test checks the header still has them.
        let pair = |size: &CStr, list: &CStr| {
            let (size, list) = (symbol(size), symbol(list));
            (!size.is_null() && !list.is_null()).then(|| unsafe {
                (
                    std::mem::transmute::<*mut c_void, TF_GetNodesToPreserveListSizeFn>(size),
                    std::mem::transmute::<*mut c_void, TF_GetNodesToPreserveListFn>(list),
                )
            })
        };
        let preserve = pair(c"TF_GetNodesToPreserveListSize", c"TF_GetNodesToPreserveList");
        let fetch = pair(c"TF_GetFetchNodesListSize", c"TF_GetFetchNodesList");
        let (new, look_up) = (symbol(c"TF_NewFunctionLibraryDefinition"), symbol(c"TF_LookUpOpDef"));
        let library = (!new.is_null() && !look_up.is_null()).then(|| unsafe {
            (
                std::mem::transmute::<*mut c_void, TF_NewFunctionLibraryDefinitionFn>(new),
                std::mem::transmute::<*mut c_void, TF_LookUpOpDefFn>(look_up),
            )
        });
        if preserve.is_none() {
            tracing::warn!(
                "tfwasm: TensorFlow's libtensorflow_cc.so.2 exports no TF_GetNodesToPreserveList; no optimizer pass runs and outputs stay in device memory"
            );
        }
        if library.is_none() {
            tracing::warn!(
                "tfwasm: TensorFlow's libtensorflow_cc.so.2 exports no TF_LookUpOpDef; pass answers are checked against TensorFlow 2.21's registry"
            );
        }
        GrapplerFns { preserve, fetch, library }
    })
}

/// One of the item's name lists (nodes to preserve, fetch nodes).
///
/// # Safety
/// `item` is null or the grappler item TensorFlow passed to this call.
unsafe fn item_names(
    item: *const TF_GrapplerItem,
    fns: Option<(TF_GetNodesToPreserveListSizeFn, TF_GetNodesToPreserveListFn)>,
) -> Result<HashSet<Vec<u8>>, Error> {
    if item.is_null() {
        return Err(Error::InvalidArgument("no grappler item".into()));
    }
    let (size_fn, list_fn) = fns.ok_or_else(|| Error::Internal("TensorFlow exports no such list".into()))?;
    let status = OwnedStatus::new()?;
    let (mut count, mut storage_size) = (0i32, 0usize);
    // SAFETY: `item` is live for this call; the out-pointers are ours.
    unsafe { size_fn(item, &mut count, &mut storage_size, status.as_ptr()) };
    status.outcome().map_err(|failure| Error::Internal(failure.message))?;
    let count = usize::try_from(count).map_err(|_| Error::Internal("negative name-list size".into()))?;
    let mut values = vec![std::ptr::null_mut::<c_char>(); count];
    let mut lengths = vec![0usize; count];
    let mut storage = vec![0u8; storage_size];
    // SAFETY: the arrays hold `count` entries and `storage` `storage_size`
    // bytes, the sizes TensorFlow just asked for.
    unsafe {
        list_fn(
            item,
            values.as_mut_ptr(),
            lengths.as_mut_ptr(),
            count as i32,
            storage.as_mut_ptr().cast(),
            storage_size,
            status.as_ptr(),
        )
    };
    status.outcome().map_err(|failure| Error::Internal(failure.message))?;
    let base = storage.as_ptr() as usize;
    values
        .iter()
        .zip(&lengths)
        .map(|(&value, &len)| {
            // Every name must lie inside `storage`; anything else is refused
            // rather than read.
            let start = (value as usize)
                .checked_sub(base)
                .filter(|s| s.checked_add(len).is_some_and(|end| end <= storage.len()));
            start
                .map(|s| storage[s..s + len].to_vec())
                .ok_or_else(|| Error::Internal("name-list entry outside its storage".into()))
        })
        .collect()
}

/// What the running TensorFlow knows: its op registry (through
/// `TF_LookUpOpDef`, else the snapshot tfwasm was built with) and the
/// kernels this library registered.
struct TensorflowOps {
    kernels: &'static KernelTable,
}

/// TensorFlow's function library over an empty graph: a handle on its
/// global op registry. Created once, kept for the process's life.
struct RegistryHandle(*mut TF_FunctionLibraryDefinition);

// SAFETY: TensorFlow's FunctionLibraryDefinition guards its state with its
// own mutex; `LookUpOpDef` may be called from any thread.
unsafe impl Send for RegistryHandle {}
// SAFETY: as above.
unsafe impl Sync for RegistryHandle {}

impl TensorflowOps {
    /// The serialized OpDef of `op` from TensorFlow, or `None`.
    fn look_up(op: &str) -> Option<Vec<u8>> {
        let (new, look_up) = grappler_fns().library?;
        static REGISTRY: OnceLock<Option<RegistryHandle>> = OnceLock::new();
        let registry = REGISTRY.get_or_init(|| {
            let status = OwnedStatus::new().ok()?;
            let empty = TF_Buffer { data: c"".as_ptr().cast(), length: 0, data_deallocator: None };
            // SAFETY: `empty` is a valid buffer of 0 bytes (an empty
            // GraphDef); the status is ours.
            let library = unsafe { new(&empty, status.as_ptr()) };
            (status.outcome().is_ok() && !library.is_null()).then_some(RegistryHandle(library))
        });
        let registry = registry.as_ref()?;
        let name = CString::new(op).ok()?;
        let status = OwnedStatus::new().ok()?;
        let mut buffer = TF_Buffer { data: std::ptr::null(), length: 0, data_deallocator: None };
        // SAFETY: the library is live for the process; `name` is
        // NUL-terminated; `buffer` is empty, as TF_LookUpOpDef requires,
        // and TensorFlow fills it with memory it owns and a deallocator.
        unsafe { look_up(registry.0, name.as_ptr(), &mut buffer, status.as_ptr()) };
        let found = status.outcome().is_ok() && !buffer.data.is_null();
        // SAFETY: when set, `data` holds `length` bytes TensorFlow wrote.
        let bytes =
            found.then(|| unsafe { std::slice::from_raw_parts(buffer.data.cast::<u8>(), buffer.length) }.to_vec());
        if let (false, Some(free)) = (buffer.data.is_null(), buffer.data_deallocator) {
            // SAFETY: TensorFlow's own deallocator for its own buffer, once.
            unsafe { free(buffer.data.cast_mut(), buffer.length) };
        }
        bytes
    }
}

impl OpCatalog for TensorflowOps {
    fn op_def(&self, op: &str) -> Option<OpDef> {
        // Ops are never unregistered: a definition once found is kept.
        static FOUND: OnceLock<Mutex<HashMap<String, OpDef>>> = OnceLock::new();
        let found = FOUND.get_or_init(Default::default);
        if let Some(def) = found.lock().ok()?.get(op) {
            return Some(def.clone());
        }
        let def = match grappler_fns().library {
            Some(_) => OpDef::decode(Self::look_up(op)?.as_slice()).ok()?,
            None => snapshot().op_def(op)?,
        };
        found.lock().ok()?.insert(op.to_owned(), def.clone());
        Some(def)
    }

    fn has_kernel(&self, node: &NodeDef) -> bool {
        self.kernels.supports(node)
    }
}

/// TensorFlow 2.21's registry as tfwasm was built with it.
fn snapshot() -> &'static Catalog {
    static SNAPSHOT: OnceLock<Catalog> = OnceLock::new();
    SNAPSHOT.get_or_init(Catalog::snapshot)
}

/// The optimizer of an inert registration: never run (no device has its
/// type); if it were, it hands the graph back unchanged.
unsafe extern "C" fn optimize_inert(
    _optimizer: *mut c_void,
    graph: *const TF_Buffer,
    _item: *const TF_GrapplerItem,
    optimized: *mut TF_Buffer,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        // SAFETY: as in `optimize`.
        let input = unsafe { graph_bytes(graph) }?;
        // SAFETY: as in `optimize`.
        unsafe { set_buffer(optimized, input.to_vec()) }
    });
}

/// The bytes of TensorFlow's input buffer.
///
/// # Safety
/// `graph` is null or points to a `TF_Buffer` whose `data` holds `length`
/// readable bytes for the lifetime `'a`.
unsafe fn graph_bytes<'a>(graph: *const TF_Buffer) -> Result<&'a [u8], Error> {
    // SAFETY: per the contract.
    let graph =
        unsafe { graph.as_ref() }.ok_or_else(|| Error::InvalidArgument("graph pass: null input buffer".into()))?;
    match (graph.data.is_null(), graph.length) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Error::InvalidArgument("graph pass: input buffer without data".into())),
        // SAFETY: per the contract: non-null, `length` bytes.
        (false, length) => Ok(unsafe { std::slice::from_raw_parts(graph.data.cast::<u8>(), length) }),
    }
}

/// Hands `bytes` to TensorFlow in `out`, which it releases with [`free_bytes`].
///
/// # Safety
/// `out` is null or points to a `TF_Buffer` TensorFlow created for the
/// output (empty: TensorFlow passes a fresh `TF_NewBuffer`).
unsafe fn set_buffer(out: *mut TF_Buffer, bytes: Vec<u8>) -> Result<(), Error> {
    // SAFETY: per the contract.
    let out = unsafe { out.as_mut() }.ok_or_else(|| Error::InvalidArgument("graph pass: null output buffer".into()))?;
    let bytes = bytes.into_boxed_slice();
    out.length = bytes.len();
    out.data = Box::into_raw(bytes).cast::<c_void>();
    out.data_deallocator = Some(free_bytes);
    Ok(())
}

/// `TF_Buffer::data_deallocator` for buffers made by [`set_buffer`].
unsafe extern "C" fn free_bytes(data: *mut c_void, length: usize) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` and `length` are those `set_buffer` stored: a leaked
    // `Box<[u8]>` of `length` bytes, freed once (TF_DeleteBuffer).
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(data.cast::<u8>(), length)) });
}
