//! The wasm sandbox: one shared [`Engine`], one [`Store`] per guest instance.
//!
//! - [`GuestProgram`] is a compiled, linked guest (`InstancePre`), shared by
//!   every device that runs it.
//! - [`GuestInstance`] is one live instance with its own `Store`: its memory
//!   cap (wasmtime `StoreLimits`), its WASI context (empty unless the policy
//!   grants capabilities) and its per-call CPU deadline (epoch interruption,
//!   driven by one ticker thread for the whole process).
//!
//! Every call goes through [`GuestInstance::call`], which turns a trap, an
//! exhausted deadline or a failed memory grow into an [`Error`] that names
//! the guest. After such a fault the instance is never called again; the
//! owner replaces it with [`GuestProgram::instantiate`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, WasmBacktrace};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::error::Error;
use crate::policy::Policy;

pub mod cache;

wasmtime::component::bindgen!({
    path: "../../wit/device",
    world: "device",
});

pub use self::tfwasm::device::types::{DeviceConfig, DeviceError, DeviceInfo};
pub use exports::tfwasm::device::memory::MemoryUsage as Usage;
pub use exports::tfwasm::device::streams::{Dependency, EventState as EventStatus, Ticket, WorkKind};

/// Length of one epoch tick: the granularity of call deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Guest calls in progress, and calls ever started, process-wide. The epoch
/// ticker parks after `IDLE_TICKS` without a call and is woken by the next
/// one, so an idle process does not wake 1000×/s, while a busy one pays no
/// wake-up per call (only a load of `TICKER_PARKED`).
static ACTIVE_CALLS: AtomicUsize = AtomicUsize::new(0);
static CALLS_STARTED: AtomicUsize = AtomicUsize::new(0);
static TICKER_PARKED: AtomicBool = AtomicBool::new(false);
static TICKER: OnceLock<std::thread::Thread> = OnceLock::new();
const IDLE_TICKS: u32 = 200;

/// Marks a guest call as running for as long as it lives.
struct ActiveCall;

impl ActiveCall {
    fn start() -> ActiveCall {
        ACTIVE_CALLS.fetch_add(1, Ordering::SeqCst);
        CALLS_STARTED.fetch_add(1, Ordering::Relaxed);
        if TICKER_PARKED.load(Ordering::SeqCst) && TICKER_PARKED.swap(false, Ordering::SeqCst) {
            if let Some(ticker) = TICKER.get() {
                ticker.unpark();
            }
        }
        ActiveCall
    }
}

impl Drop for ActiveCall {
    fn drop(&mut self) {
        ACTIVE_CALLS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The epoch ticker's loop: one tick per `EPOCH_TICK` while guests run.
fn run_ticker(engine: wasmtime::EngineWeak) {
    let mut idle = 0;
    let mut seen = CALLS_STARTED.load(Ordering::Relaxed);
    while let Some(engine) = engine.upgrade() {
        engine.increment_epoch();
        drop(engine);
        std::thread::sleep(EPOCH_TICK);
        let started = CALLS_STARTED.load(Ordering::Relaxed);
        idle = if started == seen && ACTIVE_CALLS.load(Ordering::SeqCst) == 0 { idle + 1 } else { 0 };
        seen = started;
        if idle >= IDLE_TICKS {
            TICKER_PARKED.store(true, Ordering::SeqCst);
            // A call that started before the flag was visible must not be
            // left without ticks: look again before sleeping.
            if ACTIVE_CALLS.load(Ordering::SeqCst) == 0 {
                std::thread::park();
            }
            TICKER_PARKED.store(false, Ordering::SeqCst);
            idle = 0;
        }
    }
}

/// The process-wide engine. Created on first use, with a ticker thread that
/// advances its epoch so call deadlines fire.
pub fn engine() -> Result<&'static Engine, Error> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut config = Config::new();
            config.epoch_interruption(true);
            // Calls are synchronous and short; skip the async machinery (~3×
            // cheaper component calls in wasmtime 48).
            config.concurrency_support(false);
            // We live inside Python and TensorFlow, which own the process's
            // signal handlers (faulthandler, TF's own). Explicit bounds checks
            // cost guest code ~1.5× but guest calls are tiny and rare compared
            // with compute, and a guest fault can then never reach a foreign
            // signal handler and kill the process.
            config.signals_based_traps(false);
            // SAFETY: these Cranelift flags only disable Spectre mitigations that
            // rely on faulting loads, which wasmtime requires when signal-based
            // traps are off; they do not affect memory safety of the sandbox.
            unsafe {
                config.cranelift_flag_set("enable_heap_access_spectre_mitigation", "false");
                config.cranelift_flag_set("enable_table_access_spectre_mitigation", "false");
            }
            config.max_wasm_stack(512 << 10);
            let engine = Engine::new(&config).map_err(|e| format!("{e:#}"))?;
            let weak = engine.weak();
            let ticker = std::thread::Builder::new()
                .name("tfwasm-epoch".into())
                .spawn(move || run_ticker(weak))
                .map_err(|e| format!("cannot start the epoch ticker: {e}"))?;
            let _ = TICKER.set(ticker.thread().clone());
            Ok(engine)
        })
        .as_ref()
        .map_err(|e| Error::Internal(format!("cannot create the wasm engine: {e}")))
}

/// Per-store state: the WASI context and the limits of one instance.
pub struct GuestState {
    guest: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    limits: GuestLimits,
}

/// wasmtime's `StoreLimits`, plus a record of the growth it refused, so a
/// guest that dies of it gets an error naming the cap instead of a bare trap.
struct GuestLimits {
    inner: StoreLimits,
    memory_cap: usize,
    refused_growth: Option<usize>,
}

impl ResourceLimiter for GuestLimits {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.refused_growth = Some(desired);
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl self::tfwasm::device::host::Host for GuestState {
    fn log(&mut self, level: self::tfwasm::device::host::LogLevel, message: String) {
        use self::tfwasm::device::host::LogLevel;
        // Guests cannot flood the log with megabyte lines.
        let message: String = message.chars().take(4096).collect();
        let guest = &*self.guest;
        match level {
            LogLevel::Trace => tracing::trace!("{guest}: {message}"),
            LogLevel::Debug => tracing::debug!("{guest}: {message}"),
            LogLevel::Info => tracing::info!("{guest}: {message}"),
            LogLevel::Warn => tracing::warn!("{guest}: {message}"),
            LogLevel::Error => tracing::error!("{guest}: {message}"),
        }
    }

    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }
}

impl self::tfwasm::device::types::Host for GuestState {}

/// Nanoseconds on the host's monotonic clock, from the first call.
pub fn monotonic_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A compiled and linked guest, ready to instantiate.
pub struct GuestProgram {
    /// `guest 'NAME' (FILE)`: how every message refers to this guest.
    label: Arc<str>,
    policy: Policy,
    pre: DevicePre<GuestState>,
}

impl std::fmt::Debug for GuestProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestProgram").field("label", &self.label).finish()
    }
}

impl GuestProgram {
    /// Reads, compiles (or finds in the cache, see [`cache`]) and links the
    /// guest the policy names.
    pub fn load(policy: &Policy) -> Result<Arc<GuestProgram>, Error> {
        Self::load_with_cache(policy, cache::default_dir().as_deref())
    }

    /// [`GuestProgram::load`] with an explicit cache directory (`None`: no cache).
    pub fn load_with_cache(policy: &Policy, cache_dir: Option<&std::path::Path>) -> Result<Arc<GuestProgram>, Error> {
        let label = guest_label(&policy.guest.name, &policy.guest.path);
        let load_err = |reason: String| Error::GuestLoad { guest: label.clone(), reason };
        let engine = engine()?;
        let started = Instant::now();
        let bytes = std::fs::read(&policy.guest.path)
            .map_err(|e| load_err(format!("cannot read {}: {e}", policy.guest.path.display())))?;
        if let Some(pinned) = &policy.guest.sha256 {
            let actual = cache::sha256_hex(&bytes);
            if !actual.eq_ignore_ascii_case(pinned) {
                return Err(load_err(format!(
                    "{} is not the guest the policy pins: guest.sha256 = {pinned}, the file's SHA-256 is {actual}",
                    policy.guest.path.display()
                )));
            }
        }
        let (component, cached) = cache::compile(engine, &bytes, cache_dir).map_err(|e| {
            load_err(format!(
                "not a valid wasm component ({:#}); build guests for wasm32-wasip2 with wit-bindgen against wit/device",
                e
            ))
        })?;
        let mut linker = Linker::<GuestState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| Error::Internal(format!("cannot link WASI: {e:#}")))?;
        Device::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| Error::Internal(format!("cannot link the host interface: {e:#}")))?;
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(|e| load_err(format!("its imports do not match what tfwasm provides: {e:#}")))?;
        let pre = DevicePre::new(instance_pre)
            .map_err(|e| load_err(format!("it does not export the `tfwasm:device/device@0.1.0` world: {e:#}")))?;
        let how = if cached { "loaded from the compile cache" } else { "compiled" };
        tracing::info!("{label}: {how} and linked in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
        Ok(Arc::new(GuestProgram { label: label.into(), policy: policy.clone(), pre }))
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A fresh instance in a fresh store. Does not call `init`.
    pub fn instantiate(self: &Arc<Self>) -> Result<GuestInstance, Error> {
        let engine = self.pre.engine();
        let mut wasi = WasiCtxBuilder::new();
        if self.policy.capabilities.stderr {
            wasi.inherit_stderr();
        }
        for preopen in &self.policy.capabilities.preopens {
            wasi.preopened_dir(&preopen.host, &preopen.guest, FsPerms::ReadOnly).map_err(|e| Error::GuestLoad {
                guest: self.label.to_string(),
                reason: format!("cannot preopen {}: {e:#}", preopen.host.display()),
            })?;
        }
        let memory_cap = usize::try_from(self.policy.limits.memory_bytes).unwrap_or(usize::MAX);
        let limits = GuestLimits {
            inner: StoreLimitsBuilder::new()
                .memory_size(memory_cap)
                .table_elements(100_000)
                .instances(32)
                .tables(32)
                .memories(8)
                .build(),
            memory_cap,
            refused_growth: None,
        };
        let state = GuestState { guest: self.label.clone(), wasi: wasi.build(), table: ResourceTable::new(), limits };
        let mut store = Store::new(engine, state);
        store.limiter(|state| &mut state.limits);
        store.epoch_deadline_trap();
        let mut instance = GuestInstance { program: self.clone(), store, bindings: None, fault: None };
        let bindings = instance.call("instantiate", |store, _| {
            // `pre` was built by this engine; instantiation runs the guest's start code.
            self.pre.instantiate(store)
        });
        match bindings {
            Ok(bindings) => {
                instance.bindings = Some(bindings);
                Ok(instance)
            }
            Err(e) => Err(e),
        }
    }
}

/// `guest 'reference-device' (reference_device.wasm)`.
pub fn guest_label(name: &str, path: &std::path::Path) -> String {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    format!("guest '{name}' ({file})")
}

/// One live instance of a guest, owning its `Store`.
pub struct GuestInstance {
    program: Arc<GuestProgram>,
    store: Store<GuestState>,
    bindings: Option<Device>,
    /// Set once the instance has trapped, timed out or lied; it is not called again.
    fault: Option<Error>,
}

impl GuestInstance {
    pub fn program(&self) -> &Arc<GuestProgram> {
        &self.program
    }

    pub fn label(&self) -> &str {
        &self.program.label
    }

    /// The fault that retired this instance, if any.
    pub fn fault(&self) -> Option<&Error> {
        self.fault.as_ref()
    }

    /// Marks the instance as no longer trustworthy (the host found its answer invalid).
    pub fn retire(&mut self, error: Error) {
        if self.fault.is_none() {
            self.fault = Some(error);
        }
    }

    /// Runs one host→guest call under the policy's deadline and maps failures
    /// to errors that name the guest. `call` names the export for messages.
    pub fn call<R>(
        &mut self,
        call: &str,
        body: impl FnOnce(&mut Store<GuestState>, Option<&Device>) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        if let Some(fault) = &self.fault {
            return Err(Error::GuestRefused {
                guest: self.program.label.to_string(),
                call: call.to_owned(),
                reason: format!("the instance is retired after an earlier fault ({fault})"),
            });
        }
        let deadline_ms = self.program.policy.limits.call_deadline_ms;
        let ticks = deadline_ms.div_ceil(EPOCH_TICK.as_millis() as u64).max(1);
        self.store.set_epoch_deadline(ticks);
        let running = ActiveCall::start();
        let outcome = body(&mut self.store, self.bindings.as_ref());
        drop(running);
        match outcome {
            Ok(value) => Ok(value),
            Err(error) => {
                let guest = self.program.label.to_string();
                let fault = match error.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => Error::GuestTimeout { guest, call: call.to_owned(), deadline_ms },
                    trap => {
                        let mut reason = describe_trap(trap.copied(), &error);
                        let limits = &self.store.data().limits;
                        if let Some(desired) = limits.refused_growth {
                            reason.push_str(&format!(
                                "; before it, the guest asked to grow its memory to {desired} bytes, past its cap of {} \
                                 bytes (policy limits.memory-bytes)",
                                limits.memory_cap
                            ));
                        }
                        Error::GuestTrap { guest, call: call.to_owned(), reason }
                    }
                };
                self.fault = Some(fault.clone());
                Err(fault)
            }
        }
    }

    /// The bindings of an instantiated guest.
    pub fn with_bindings<R>(
        &mut self,
        call: &str,
        body: impl FnOnce(&Device, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        self.call(call, |store, bindings| {
            let bindings = bindings.ok_or_else(|| wasmtime::Error::msg("guest not instantiated"))?;
            body(bindings, store)
        })
    }
}

/// `wasm trap: ... (hint) in function F` from a wasmtime error.
fn describe_trap(trap: Option<Trap>, error: &wasmtime::Error) -> String {
    let mut reason = match trap {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    reason.push_str(match trap {
        Some(Trap::UnreachableCodeReached) => " (a Rust guest panicked, aborted or hit `unreachable`)",
        Some(Trap::MemoryOutOfBounds) => " (out-of-bounds memory access)",
        Some(Trap::StackOverflow) => " (stack overflow)",
        _ => "",
    });
    // The innermost named frame of the guest's own code says where it happened
    // (skipping the panic and abort machinery of its standard library).
    let runtime = |name: &str| {
        ["std::", "core::", "alloc::", "__rust", "rust_", "abort", "panic"]
            .iter()
            .any(|p| name.starts_with(p) || name.contains("panic"))
    };
    let frame = error.downcast_ref::<WasmBacktrace>().and_then(|trace| {
        trace
            .frames()
            .iter()
            .filter_map(|f| f.func_name())
            .map(|name| format!("{:#}", rustc_demangle::demangle(name)))
            .find(|name| !runtime(name))
    });
    if let Some(function) = frame {
        reason.push_str(&format!(" in `{function}`"));
    }
    reason
}
