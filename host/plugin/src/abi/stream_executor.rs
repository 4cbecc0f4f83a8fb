//! `SE_InitPlugin` and every StreamExecutor callback.
//!
//! Each callback: resolve the `SP_Device` to our [`Device`], turn raw
//! arguments into safe values, call one method, report through
//! [`ffi_guard`]. Handles given to TensorFlow (streams, events, timers) are
//! plain integers from the device, stored in the pointer-sized C handle.

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::{Arc, OnceLock};

use super::ffi::status::TF_Status;
use super::ffi::stream_executor::*;
use super::{ffi_guard, ffi_guard_or};
use crate::config::TensorflowVersion;
use crate::device::{self, Device, Handle, Path, Platform, SendPtr};
use crate::error::Error;
use crate::sandbox::{EventStatus, WorkKind};

/// Process-wide plugin state, set in `SE_InitPlugin`.
struct Plugin {
    device_type: &'static CStr,
    platform: &'static Platform,
}

static PLUGIN: OnceLock<Plugin> = OnceLock::new();

fn plugin() -> Result<&'static Plugin, Error> {
    PLUGIN.get().ok_or_else(|| Error::Internal("SE_InitPlugin has not run".into()))
}

/// The platform TensorFlow registered, once `SE_InitPlugin` has run.
pub(super) fn platform() -> Option<&'static Platform> {
    PLUGIN.get().map(|plugin| plugin.platform)
}

/// The platform name TensorFlow shows (`SP_Platform::name`).
const PLATFORM_NAME: &CStr = c"TFWASM";

/// Name and type of the zero-device platform registered when tfwasm cannot
/// register its real one (duplicate load, invalid device type): TensorFlow
/// aborts on an error from `SE_InitPlugin`, so this is how we decline.
const INERT_TYPE: &CStr = c"TFWASM_INERT";

/// Set when this copy of the library registers nothing: a second load in the
/// process (duplicate kernels would break lookups) or a TensorFlow outside
/// [`crate::config::SUPPORTED_TENSORFLOW`]. Its `TF_InitKernel` then
/// registers no kernel and its `TF_InitGraph` an inert pass.
static INERT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True if this library must stay inert.
pub(crate) fn is_inert() -> bool {
    INERT.load(std::sync::atomic::Ordering::SeqCst)
}

/// The TensorFlow this library was loaded into, from `TF_Version()`.
pub(crate) fn tensorflow_version() -> Option<&'static TensorflowVersion> {
    static VERSION: OnceLock<Option<TensorflowVersion>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            // SAFETY: TF_Version has no preconditions and returns a static
            // NUL-terminated string (or null, which is checked).
            let text = unsafe { super::ffi::c_api::TF_Version() };
            if text.is_null() {
                return None;
            }
            // SAFETY: non-null, NUL-terminated, static.
            let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
            TensorflowVersion::parse(&text)
        })
        .as_ref()
}

/// Entry point TensorFlow calls after loading the library.
///
/// # Safety
/// `params` and `status` are valid pointers supplied by TensorFlow.
#[no_mangle]
pub unsafe extern "C" fn SE_InitPlugin(params: *mut SE_PlatformRegistrationParams, status: *mut TF_Status) {
    crate::config::init_logging();
    ffi_guard(status, || {
        // SAFETY: TensorFlow passes a valid, exclusive params struct for this call.
        let params =
            unsafe { params.as_mut() }.ok_or_else(|| Error::InvalidArgument("null registration params".into()))?;
        // An error status here makes TensorFlow abort the process, so the only
        // error we report is one TensorFlow would abort on anyway (bad structs).
        // A broken guest or policy yields a platform with zero devices instead.
        if params.platform.is_null() || params.platform_fns.is_null() {
            return Err(Error::InvalidArgument("registration params without platform structs".into()));
        }
        let duplicate = PLUGIN.get().is_some() || crate::config::other_copy_loaded();
        let unsupported = match tensorflow_version() {
            Some(version) => version.check_supported().err(),
            None => Some(Error::Config("TF_Version() gave no version tfwasm can read".into())),
        };
        let device_type = match (crate::config::device_type(), unsupported) {
            (Ok(_), _) if duplicate => {
                // Registering the same device type twice aborts TensorFlow.
                // Register an inert platform instead and say what happened.
                tracing::error!(
                    "tfwasm: the plugin is loaded twice in this process (probably installed in \
                     site-packages/tensorflow-plugins and also named by TF_PLUGGABLE_DEVICE_LIBRARY_PATH={:?}). \
                     The second copy registers nothing; unset TF_PLUGGABLE_DEVICE_LIBRARY_PATH.",
                    std::env::var("TF_PLUGGABLE_DEVICE_LIBRARY_PATH").unwrap_or_default()
                );
                INERT.store(true, std::sync::atomic::Ordering::SeqCst);
                INERT_TYPE
            }
            (Ok(_), Some(unsupported)) => {
                // Our structs and kernels may not be what this TensorFlow
                // expects: register nothing, keep the process, say why.
                tracing::error!("{unsupported}. tfwasm registers no devices.");
                INERT.store(true, std::sync::atomic::Ordering::SeqCst);
                INERT_TYPE
            }
            (Ok(t), None) => t,
            (Err(e), _) => {
                // TF aborts on an invalid type; register an inert one so the
                // process lives, with no devices, and say why.
                tracing::error!("{e}. tfwasm registers no devices.");
                INERT_TYPE
            }
        };
        let inert = device_type == INERT_TYPE;
        let plugin = match (inert, PLUGIN.get()) {
            (false, _) | (true, None) => PLUGIN.get_or_init(|| {
                let platform = Box::leak(Box::new(if inert {
                    Platform { devices: Vec::new(), failure: None }
                } else {
                    Platform::from_policy(crate::config::policy(), &device_type.to_string_lossy())
                }));
                Plugin { device_type, platform }
            }),
            (true, Some(existing)) => existing,
        };
        let (platform_name, device_type) =
            if inert { (INERT_TYPE, INERT_TYPE) } else { (PLATFORM_NAME, plugin.device_type) };

        params.major_version = SE_MAJOR;
        params.minor_version = SE_MINOR;
        params.patch_version = SE_PATCH;
        // SAFETY: checked non-null above; TensorFlow owns these structs and
        // expects us to fill them in.
        let platform = unsafe { &mut *params.platform };
        platform.struct_size = SP_Platform::struct_size();
        // `ext` marks the inert platform, whose callbacks report zero devices.
        platform.ext = if inert { INERT_TYPE.as_ptr() as *mut c_void } else { ptr::null_mut() };
        platform.name = platform_name.as_ptr();
        platform.type_ = device_type.as_ptr();
        platform.supports_unified_memory = 0;
        // The guest places every allocation itself; TF's BFC pool on top would
        // hide all placement decisions from it.
        platform.use_bfc_allocator = 0;
        platform.force_memory_growth = 0;
        // SAFETY: as above.
        let fns = unsafe { &mut *params.platform_fns };
        *fns = SP_PlatformFns {
            get_device_count: Some(get_device_count),
            create_device: Some(create_device),
            destroy_device: Some(destroy_device),
            create_device_fns: Some(create_device_fns),
            destroy_device_fns: Some(destroy_device_fns),
            create_stream_executor: Some(create_stream_executor),
            destroy_stream_executor: Some(destroy_stream_executor),
            create_timer_fns: Some(create_timer_fns),
            destroy_timer_fns: Some(destroy_timer_fns),
            ..Default::default()
        };
        params.destroy_platform = Some(destroy_platform);
        params.destroy_platform_fns = Some(destroy_platform_fns);
        Ok(())
    });
}

// ---------------------------------------------------------------- platform

unsafe extern "C" fn destroy_platform(_platform: *mut SP_Platform) {}
unsafe extern "C" fn destroy_platform_fns(_fns: *mut SP_PlatformFns) {}

unsafe extern "C" fn get_device_count(platform: *const SP_Platform, count: *mut i32, status: *mut TF_Status) {
    ffi_guard(status, || {
        // SAFETY: TF passes the SP_Platform we filled in SE_InitPlugin.
        let inert = unsafe { platform.as_ref() }.is_some_and(|p| !p.ext.is_null());
        let n = if inert { 0 } else { plugin()?.platform.devices.len() as i32 };
        // SAFETY: TensorFlow passes a valid out-pointer (checked for null).
        unsafe { count.as_mut() }.map(|c| *c = n).ok_or_else(|| Error::InvalidArgument("null device_count".into()))
    });
}

unsafe extern "C" fn create_device(
    _platform: *const SP_Platform,
    params: *mut SE_CreateDeviceParams,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        // SAFETY: valid for this call per the SE ABI; null-checked.
        let params = unsafe { params.as_mut() }.ok_or_else(|| Error::InvalidArgument("null device params".into()))?;
        // SAFETY: TF allocates the SP_Device and sets its struct_size.
        let sp = unsafe { params.device.as_mut() }.ok_or_else(|| Error::InvalidArgument("null SP_Device".into()))?;
        let ordinal = u32::try_from(params.ordinal).map_err(|_| Error::InvalidArgument("negative ordinal".into()))?;
        let device = plugin()?
            .platform
            .device(ordinal)
            .ok_or_else(|| Error::InvalidArgument(format!("no device with ordinal {ordinal}")))?;
        let identity = device.identity();
        sp.struct_size = SP_Device::struct_size();
        sp.ordinal = params.ordinal;
        sp.device_handle = Arc::as_ptr(device) as *mut c_void;
        sp.hardware_name = identity.hardware_name.as_ptr();
        sp.device_vendor = identity.vendor.as_ptr();
        sp.pci_bus_id = if identity.pci_bus_id.is_empty() { ptr::null() } else { identity.pci_bus_id.as_ptr() };
        Ok(())
    });
}

unsafe extern "C" fn destroy_device(_platform: *const SP_Platform, device: *mut SP_Device) {
    // Devices live as long as the process; TF only forgets its handle.
    if let Some(device) = unsafe { device.as_mut() } {
        device.device_handle = ptr::null_mut();
    }
}

unsafe extern "C" fn create_device_fns(
    _platform: *const SP_Platform,
    params: *mut SE_CreateDeviceFnsParams,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        // SAFETY: valid for this call; TF owns the SP_DeviceFns it points to.
        let fns = unsafe { params.as_mut().and_then(|p| p.device_fns.as_mut()) }
            .ok_or_else(|| Error::InvalidArgument("null device fns".into()))?;
        *fns = SP_DeviceFns {
            get_numa_node: Some(get_numa_node),
            get_memory_bandwidth: Some(get_memory_bandwidth),
            get_gflops: Some(get_gflops),
            ..Default::default()
        };
        Ok(())
    });
}

unsafe extern "C" fn destroy_device_fns(_platform: *const SP_Platform, _fns: *mut SP_DeviceFns) {}

unsafe extern "C" fn get_numa_node(device: *const SP_Device) -> i32 {
    ffi_guard_or(-1, "get_numa_node", || Ok(device_of(device)?.identity().info.numa_node))
}

unsafe extern "C" fn get_memory_bandwidth(device: *const SP_Device) -> i64 {
    ffi_guard_or(0, "get_memory_bandwidth", || {
        Ok(i64::try_from(device_of(device)?.identity().info.memory_bandwidth).unwrap_or(i64::MAX))
    })
}

unsafe extern "C" fn get_gflops(device: *const SP_Device) -> f64 {
    ffi_guard_or(0.0, "get_gflops", || Ok(device_of(device)?.identity().info.gflops))
}

unsafe extern "C" fn create_stream_executor(
    _platform: *const SP_Platform,
    params: *mut SE_CreateStreamExecutorParams,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        // SAFETY: valid for this call; TF owns the SP_StreamExecutor.
        let se = unsafe { params.as_mut().and_then(|p| p.stream_executor.as_mut()) }
            .ok_or_else(|| Error::InvalidArgument("null stream executor".into()))?;
        *se = SP_StreamExecutor {
            allocate: Some(allocate),
            deallocate: Some(deallocate),
            host_memory_allocate: Some(host_memory_allocate),
            host_memory_deallocate: Some(host_memory_deallocate),
            unified_memory_allocate: Some(unified_memory_allocate),
            unified_memory_deallocate: Some(unified_memory_deallocate),
            get_allocator_stats: Some(get_allocator_stats),
            device_memory_usage: Some(device_memory_usage),
            create_stream: Some(create_stream),
            destroy_stream: Some(destroy_stream),
            create_stream_dependency: Some(create_stream_dependency),
            get_stream_status: Some(get_stream_status),
            create_event: Some(create_event),
            destroy_event: Some(destroy_event),
            get_event_status: Some(get_event_status),
            record_event: Some(record_event),
            wait_for_event: Some(wait_for_event),
            create_timer: Some(create_timer),
            destroy_timer: Some(destroy_timer),
            start_timer: Some(start_timer),
            stop_timer: Some(stop_timer),
            memcpy_dtoh: Some(memcpy_dtoh),
            memcpy_htod: Some(memcpy_htod),
            memcpy_dtod: Some(memcpy_dtod),
            sync_memcpy_dtoh: Some(sync_memcpy_dtoh),
            sync_memcpy_htod: Some(sync_memcpy_htod),
            sync_memcpy_dtod: Some(sync_memcpy_dtod),
            block_host_for_event: Some(block_host_for_event),
            block_host_until_done: Some(block_host_until_done),
            synchronize_all_activity: Some(synchronize_all_activity),
            mem_zero: Some(mem_zero),
            memset: Some(memset),
            memset32: Some(memset32),
            host_callback: Some(host_callback),
            ..Default::default()
        };
        Ok(())
    });
}

unsafe extern "C" fn destroy_stream_executor(_platform: *const SP_Platform, _se: *mut SP_StreamExecutor) {}

unsafe extern "C" fn create_timer_fns(_platform: *const SP_Platform, fns: *mut SP_TimerFns, status: *mut TF_Status) {
    ffi_guard(status, || {
        // SAFETY: TF owns the struct and passes it for us to fill.
        let fns = unsafe { fns.as_mut() }.ok_or_else(|| Error::InvalidArgument("null timer fns".into()))?;
        *fns = SP_TimerFns { nanoseconds: Some(timer_nanoseconds), ..Default::default() };
        Ok(())
    });
}

unsafe extern "C" fn destroy_timer_fns(_platform: *const SP_Platform, _fns: *mut SP_TimerFns) {}

// ------------------------------------------------------------------ helpers

/// Our device behind an `SP_Device`.
fn device_of<'a>(device: *const SP_Device) -> Result<&'a Device, Error> {
    // SAFETY: TF passes the SP_Device we filled in `create_device`; its
    // handle points at a `Device` owned by the process-lifetime platform.
    let handle = unsafe { device.as_ref() }.map(|d| d.device_handle).unwrap_or(ptr::null_mut());
    if handle.is_null() {
        return Err(Error::InvalidArgument("null or destroyed SP_Device".into()));
    }
    // SAFETY: see above; devices are never freed while the process runs.
    Ok(unsafe { &*(handle as *const Device) })
}

/// The `Arc` of a device (streams need it to reach the device from their thread).
fn device_arc(device: *const SP_Device) -> Result<&'static Arc<Device>, Error> {
    let raw = device_of(device)? as *const Device;
    plugin()?
        .platform
        .devices
        .iter()
        .find(|d| Arc::as_ptr(d) == raw)
        .ok_or_else(|| Error::InvalidArgument("unknown SP_Device".into()))
}

/// Waits until every piece of work TensorFlow queued on `stream` so far has
/// run. Our kernels compute on the host when TensorFlow calls them, not in
/// stream order, so one that reads its inputs must first let the stream
/// catch up: TensorFlow queues some copies on a kernel's stream and treats
/// their destination as ready at once (a same-device copy is a
/// `memcpy_dtod` on the compute stream followed immediately by the
/// consumer), as a GPU would order them.
pub(crate) fn finish_queued_work(stream: SP_Stream) -> Result<(), Error> {
    let h = handle(stream);
    match plugin()?.platform.device(device::ordinal_of(h)) {
        Some(device) => device.block_until_done(h),
        None => Err(Error::InvalidArgument(format!("stream handle {h:#x} names no device"))),
    }
}

fn handle(raw: *mut c_void) -> Handle {
    raw as usize as Handle
}

fn raw_handle(handle: Handle) -> *mut c_void {
    handle as usize as *mut c_void
}

/// Address and validated extent of device memory TensorFlow passed us.
fn device_range(mem: *const SP_DeviceMemoryBase, size: u64, what: &str) -> Result<SendPtr, Error> {
    // SAFETY: TF passes a valid SP_DeviceMemoryBase for the call's duration.
    let opaque = unsafe { mem.as_ref() }.map(|m| m.opaque).unwrap_or(ptr::null_mut()).cast::<u8>();
    if size == 0 {
        return Ok(SendPtr(opaque));
    }
    if opaque.is_null() || !plugin()?.platform.owns(opaque, size) {
        return Err(Error::InvalidArgument(format!(
            "{what}: {size} bytes at {opaque:?} are not inside any tfwasm device region"
        )));
    }
    Ok(SendPtr(opaque))
}

/// Whether `len` bytes at `ptr` lie inside one of our devices' regions
/// (device memory); false for host memory, such as an input TensorFlow
/// keeps in host memory for a kernel.
pub(super) fn in_device_memory(ptr: *const u8, len: u64) -> bool {
    plugin().is_ok_and(|plugin| plugin.platform.owns(ptr, len))
}

fn host_range(ptr: *const c_void, size: u64, what: &str) -> Result<SendPtr, Error> {
    if ptr.is_null() && size > 0 {
        return Err(Error::InvalidArgument(format!("{what}: null host pointer")));
    }
    Ok(SendPtr(ptr as *mut u8))
}

/// Copies `len` bytes; the regions were validated when the work was made.
fn copy_work(dst: SendPtr, src: SendPtr, len: u64) -> device::WorkFn {
    Box::new(move || {
        if len > 0 {
            // SAFETY: both ranges were checked (device side inside a region,
            // host side non-null), and TF keeps them alive and leaves them
            // alone until the stream work completes; `copy_bytes` tolerates
            // overlap.
            unsafe { device::copy_bytes(src.get(), dst.get(), len as usize) };
        }
        Ok(())
    })
}

fn fill_work(dst: SendPtr, size: u64, pattern: u32, word: bool) -> device::WorkFn {
    Box::new(move || {
        if size == 0 {
            return Ok(());
        }
        if word {
            let dst = dst.get();
            if size % 4 != 0 || (dst as usize) % 4 != 0 {
                return Err(format!("memset32 of {size} bytes at {dst:?} is not 4-byte aligned"));
            }
            // SAFETY: validated device range, 4-byte aligned, size a multiple of 4.
            let words = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u32>(), (size / 4) as usize) };
            words.fill(pattern);
        } else {
            // SAFETY: validated device range kept alive by TF until completion.
            unsafe { ptr::write_bytes(dst.get(), pattern as u8, size as usize) };
        }
        Ok(())
    })
}

// --------------------------------------------------------------- allocation

thread_local! {
    /// Why the last allocation on this thread failed. TensorFlow turns a null
    /// allocation into a generic "OOM when allocating"; kernels allocate on
    /// the calling thread, so they can pick up our reason (which names the
    /// guest and says whether it trapped, timed out or really ran out).
    static LAST_ALLOCATION_FAILURE: std::cell::RefCell<Option<Error>> = const { std::cell::RefCell::new(None) };
}

/// The reason the last allocation on this thread failed, if it did.
pub(crate) fn take_allocation_failure() -> Option<Error> {
    LAST_ALLOCATION_FAILURE.with_borrow_mut(Option::take)
}

unsafe extern "C" fn allocate(device: *const SP_Device, size: u64, _memory_space: i64, mem: *mut SP_DeviceMemoryBase) {
    // SAFETY: TF passes a valid out-struct; zero it first so a failure reads as null.
    let Some(mem) = (unsafe { mem.as_mut() }) else { return };
    mem.opaque = ptr::null_mut();
    mem.size = 0;
    LAST_ALLOCATION_FAILURE.with_borrow_mut(|last| *last = None);
    let result = ffi_guard_or(None, "allocate", || {
        let device = device_of(device)?;
        match device.allocate(size) {
            Ok(ptr) => Ok(Some(ptr)),
            Err(e) => {
                LAST_ALLOCATION_FAILURE.with_borrow_mut(|last| *last = Some(e.clone()));
                // TF turns a null pointer into ResourceExhausted ("OOM when
                // allocating ..."); the log carries our reason and the guest.
                match &e {
                    Error::OutOfMemory { .. } => tracing::warn!("{e}"),
                    // Already logged when the device replaced the instance.
                    e if e.is_guest_fault() => tracing::debug!("{e}"),
                    _ => tracing::error!("{e}"),
                }
                Ok(None)
            }
        }
    });
    if let Some(ptr) = result {
        mem.struct_size = SP_DeviceMemoryBase::struct_size();
        mem.opaque = ptr.cast();
        mem.size = size;
    }
}

unsafe extern "C" fn deallocate(device: *const SP_Device, mem: *mut SP_DeviceMemoryBase) {
    ffi_guard_or((), "deallocate", || {
        // SAFETY: TF passes the SP_DeviceMemoryBase it got from `allocate`.
        let Some(mem) = (unsafe { mem.as_mut() }) else { return Ok(()) };
        if mem.opaque.is_null() {
            return Ok(());
        }
        device_of(device)?.deallocate(mem.opaque.cast())?;
        mem.opaque = ptr::null_mut();
        Ok(())
    })
}

unsafe extern "C" fn host_memory_allocate(_device: *const SP_Device, size: u64) -> *mut c_void {
    let mut out = ptr::null_mut();
    // SAFETY: posix_memalign writes an aligned pointer or leaves `out` untouched on failure.
    let rc = unsafe { libc::posix_memalign(&mut out, device::ALIGNMENT as usize, size.max(1) as usize) };
    if rc == 0 {
        out
    } else {
        ptr::null_mut()
    }
}

unsafe extern "C" fn host_memory_deallocate(_device: *const SP_Device, mem: *mut c_void) {
    // SAFETY: `mem` came from posix_memalign in host_memory_allocate (or is null).
    unsafe { libc::free(mem) };
}

unsafe extern "C" fn unified_memory_allocate(_device: *const SP_Device, _bytes: u64) -> *mut c_void {
    // The platform says supports_unified_memory = false; TF does not call this.
    ptr::null_mut()
}

unsafe extern "C" fn unified_memory_deallocate(_device: *const SP_Device, _location: *mut c_void) {}

unsafe extern "C" fn get_allocator_stats(device: *const SP_Device, stats: *mut SP_AllocatorStats) -> TF_Bool {
    ffi_guard_or(0, "get_allocator_stats", || {
        let usage = device_of(device)?.usage_or_host();
        // SAFETY: TF passes a valid out-struct for this call.
        let Some(stats) = (unsafe { stats.as_mut() }) else { return Ok(0) };
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        *stats = SP_AllocatorStats {
            num_allocs: clamp(usage.num_allocs),
            bytes_in_use: clamp(usage.bytes_in_use),
            peak_bytes_in_use: clamp(usage.peak_bytes_in_use),
            largest_alloc_size: clamp(usage.largest_alloc_size),
            has_bytes_limit: 1,
            bytes_limit: clamp(usage.limit),
            largest_free_block_bytes: clamp(usage.largest_free_block),
            ..Default::default()
        };
        Ok(1)
    })
}

unsafe extern "C" fn device_memory_usage(device: *const SP_Device, free: *mut i64, total: *mut i64) -> TF_Bool {
    ffi_guard_or(0, "device_memory_usage", || {
        let usage = device_of(device)?.usage_or_host();
        // SAFETY: TF passes valid out-pointers (null-checked).
        unsafe {
            if let Some(free) = free.as_mut() {
                *free = i64::try_from(usage.limit.saturating_sub(usage.bytes_in_use)).unwrap_or(i64::MAX);
            }
            if let Some(total) = total.as_mut() {
                *total = i64::try_from(usage.limit).unwrap_or(i64::MAX);
            }
        }
        Ok(1)
    })
}

// ------------------------------------------------------------------ streams

unsafe extern "C" fn create_stream(device: *const SP_Device, stream: *mut SP_Stream, status: *mut TF_Status) {
    ffi_guard(status, || {
        let h = device_arc(device)?.create_stream()?;
        // SAFETY: TF passes a valid out-pointer.
        unsafe { stream.as_mut() }
            .map(|s| *s = raw_handle(h))
            .ok_or_else(|| Error::InvalidArgument("null stream out-pointer".into()))
    });
}

unsafe extern "C" fn destroy_stream(device: *const SP_Device, stream: SP_Stream) {
    ffi_guard_or((), "destroy_stream", || {
        device_of(device)?.destroy_stream(handle(stream));
        Ok(())
    })
}

unsafe extern "C" fn create_stream_dependency(
    device: *const SP_Device,
    dependent: SP_Stream,
    other: SP_Stream,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let (dependent, other) = (handle(dependent), handle(other));
        // `other` may be a stream of another device (device-to-device copies).
        let owner = plugin()?
            .platform
            .device(device::ordinal_of(other))
            .ok_or_else(|| Error::InvalidArgument(format!("stream handle {other:#x} names no device")))?;
        device_of(device)?.add_dependency(dependent, other, owner.stream_queue(other)?)
    });
}

unsafe extern "C" fn get_stream_status(device: *const SP_Device, stream: SP_Stream, status: *mut TF_Status) {
    ffi_guard(status, || device_of(device)?.stream_status(handle(stream)));
}

unsafe extern "C" fn create_event(device: *const SP_Device, event: *mut SP_Event, status: *mut TF_Status) {
    ffi_guard(status, || {
        let h = device_of(device)?.create_event()?;
        // SAFETY: TF passes a valid out-pointer.
        unsafe { event.as_mut() }
            .map(|e| *e = raw_handle(h))
            .ok_or_else(|| Error::InvalidArgument("null event out-pointer".into()))
    });
}

unsafe extern "C" fn destroy_event(device: *const SP_Device, event: SP_Event) {
    ffi_guard_or((), "destroy_event", || {
        device_of(device)?.destroy_event(handle(event));
        Ok(())
    })
}

unsafe extern "C" fn get_event_status(device: *const SP_Device, event: SP_Event) -> SE_EventStatus {
    ffi_guard_or(SE_EventStatus::SE_EVENT_ERROR, "get_event_status", || {
        Ok(match device_of(device)?.event_status(handle(event))? {
            EventStatus::Unknown => SE_EventStatus::SE_EVENT_UNKNOWN,
            EventStatus::Pending => SE_EventStatus::SE_EVENT_PENDING,
            EventStatus::Complete => SE_EventStatus::SE_EVENT_COMPLETE,
            EventStatus::Error => SE_EventStatus::SE_EVENT_ERROR,
        })
    })
}

unsafe extern "C" fn record_event(
    device: *const SP_Device,
    stream: SP_Stream,
    event: SP_Event,
    status: *mut TF_Status,
) {
    ffi_guard(status, || device_of(device)?.record_event(handle(stream), handle(event)));
}

unsafe extern "C" fn wait_for_event(
    device: *const SP_Device,
    stream: SP_Stream,
    event: SP_Event,
    status: *mut TF_Status,
) {
    ffi_guard(status, || device_of(device)?.wait_for_event(handle(stream), handle(event)));
}

// ------------------------------------------------------------------- timers

unsafe extern "C" fn create_timer(device: *const SP_Device, timer: *mut SP_Timer, status: *mut TF_Status) {
    ffi_guard(status, || {
        let h = device_of(device)?.create_timer()?;
        // SAFETY: TF passes a valid out-pointer.
        unsafe { timer.as_mut() }
            .map(|t| *t = raw_handle(h))
            .ok_or_else(|| Error::InvalidArgument("null timer out-pointer".into()))
    });
}

unsafe extern "C" fn destroy_timer(device: *const SP_Device, timer: SP_Timer) {
    ffi_guard_or((), "destroy_timer", || {
        device_of(device)?.destroy_timer(handle(timer));
        Ok(())
    })
}

unsafe extern "C" fn start_timer(device: *const SP_Device, stream: SP_Stream, timer: SP_Timer, status: *mut TF_Status) {
    ffi_guard(status, || device_of(device)?.mark_timer(handle(stream), handle(timer), true));
}

unsafe extern "C" fn stop_timer(device: *const SP_Device, stream: SP_Stream, timer: SP_Timer, status: *mut TF_Status) {
    ffi_guard(status, || device_of(device)?.mark_timer(handle(stream), handle(timer), false));
}

unsafe extern "C" fn timer_nanoseconds(timer: SP_Timer) -> u64 {
    ffi_guard_or(0, "timer nanoseconds", || {
        let h = handle(timer);
        let device = plugin()?
            .platform
            .device(device::ordinal_of(h))
            .ok_or_else(|| Error::InvalidArgument(format!("timer handle {h:#x} names no device")))?;
        device.timer_nanoseconds(h)
    })
}

// ------------------------------------------------------------------- copies

unsafe extern "C" fn memcpy_dtoh(
    device: *const SP_Device,
    stream: SP_Stream,
    dst: *mut c_void,
    src: *const SP_DeviceMemoryBase,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work = copy_work(host_range(dst, size, "memcpy_dtoh")?, device_range(src, size, "memcpy_dtoh")?, size);
        device_of(device)?.submit(handle(stream), WorkKind::CopyDeviceToHost, work, Some(size))
    });
}

unsafe extern "C" fn memcpy_htod(
    device: *const SP_Device,
    stream: SP_Stream,
    dst: *mut SP_DeviceMemoryBase,
    src: *const c_void,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work = copy_work(device_range(dst, size, "memcpy_htod")?, host_range(src, size, "memcpy_htod")?, size);
        device_of(device)?.submit(handle(stream), WorkKind::CopyHostToDevice, work, Some(size))
    });
}

unsafe extern "C" fn memcpy_dtod(
    device: *const SP_Device,
    stream: SP_Stream,
    dst: *mut SP_DeviceMemoryBase,
    src: *const SP_DeviceMemoryBase,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work = copy_work(device_range(dst, size, "memcpy_dtod")?, device_range(src, size, "memcpy_dtod")?, size);
        device_of(device)?.submit(handle(stream), WorkKind::CopyDeviceToDevice, work, Some(size))
    });
}

unsafe extern "C" fn sync_memcpy_dtoh(
    device: *const SP_Device,
    dst: *mut c_void,
    src: *const SP_DeviceMemoryBase,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work =
            copy_work(host_range(dst, size, "sync_memcpy_dtoh")?, device_range(src, size, "sync_memcpy_dtoh")?, size);
        device_of(device)?.run_now(Path::DeviceToHost, size, work)
    });
}

unsafe extern "C" fn sync_memcpy_htod(
    device: *const SP_Device,
    dst: *mut SP_DeviceMemoryBase,
    src: *const c_void,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work =
            copy_work(device_range(dst, size, "sync_memcpy_htod")?, host_range(src, size, "sync_memcpy_htod")?, size);
        device_of(device)?.run_now(Path::HostToDevice, size, work)
    });
}

unsafe extern "C" fn sync_memcpy_dtod(
    device: *const SP_Device,
    dst: *mut SP_DeviceMemoryBase,
    src: *const SP_DeviceMemoryBase,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work =
            copy_work(device_range(dst, size, "sync_memcpy_dtod")?, device_range(src, size, "sync_memcpy_dtod")?, size);
        device_of(device)?.run_now(Path::DeviceToDevice, size, work)
    });
}

// ------------------------------------------------------------ synchronising

unsafe extern "C" fn block_host_for_event(device: *const SP_Device, event: SP_Event, status: *mut TF_Status) {
    ffi_guard(status, || device_of(device)?.block_for_event(handle(event)));
}

unsafe extern "C" fn block_host_until_done(device: *const SP_Device, stream: SP_Stream, status: *mut TF_Status) {
    ffi_guard(status, || device_of(device)?.block_until_done(handle(stream)));
}

unsafe extern "C" fn synchronize_all_activity(device: *const SP_Device, status: *mut TF_Status) {
    ffi_guard(status, || {
        device_of(device)?.synchronize_all();
        Ok(())
    });
}

// -------------------------------------------------------------------- fills

unsafe extern "C" fn mem_zero(
    device: *const SP_Device,
    stream: SP_Stream,
    location: *mut SP_DeviceMemoryBase,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work = fill_work(device_range(location, size, "mem_zero")?, size, 0, false);
        device_of(device)?.submit(handle(stream), WorkKind::Memset, work, Some(size))
    });
}

unsafe extern "C" fn memset(
    device: *const SP_Device,
    stream: SP_Stream,
    location: *mut SP_DeviceMemoryBase,
    pattern: u8,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work = fill_work(device_range(location, size, "memset")?, size, u32::from(pattern), false);
        device_of(device)?.submit(handle(stream), WorkKind::Memset, work, Some(size))
    });
}

unsafe extern "C" fn memset32(
    device: *const SP_Device,
    stream: SP_Stream,
    location: *mut SP_DeviceMemoryBase,
    pattern: u32,
    size: u64,
    status: *mut TF_Status,
) {
    ffi_guard(status, || {
        let work = fill_work(device_range(location, size, "memset32")?, size, pattern, true);
        device_of(device)?.submit(handle(stream), WorkKind::Memset, work, Some(size))
    });
}

/// A TF callback and its argument, carried to the stream thread.
struct Callback(unsafe extern "C" fn(*mut c_void, *mut TF_Status), SendPtr);

unsafe extern "C" fn host_callback(
    device: *const SP_Device,
    stream: SP_Stream,
    callback: SE_StatusCallbackFn,
    arg: *mut c_void,
) -> TF_Bool {
    ffi_guard_or(0, "host_callback", || {
        let callback =
            Callback(callback.ok_or_else(|| Error::InvalidArgument("null host callback".into()))?, SendPtr(arg.cast()));
        let work: device::WorkFn = Box::new(move || {
            let Callback(function, arg) = callback;
            // SAFETY: TF_NewStatus/TF_DeleteStatus pair; the callback and its
            // argument come from TF, which owns their contract.
            unsafe {
                let status = super::ffi::status::TF_NewStatus();
                function(arg.get().cast(), status);
                super::ffi::status::TF_DeleteStatus(status);
            }
            Ok(())
        });
        device_of(device)?.submit(handle(stream), WorkKind::HostCallback, work, None)?;
        Ok(1)
    })
}
