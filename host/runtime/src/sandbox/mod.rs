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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable, ResourceTableError};
use wasmtime::{Config, Engine, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, WasmBacktrace};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::error::Error;
use crate::policy::{Capabilities, Limits, Policy};

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

/// The version of the `tfwasm:device` package this host speaks.
pub const DEVICE_WIT_VERSION: &str = "0.1.0";

/// WASI resources (streams, pollables, descriptors) one instance may hold at
/// once. Each is host memory outside the guest's `limits.memory-bytes`: a
/// guest that never drops them reached wasmtime's own cap of 100,000 handles
/// per store holding ~8 MB of the host's (measured). A device guest needs a
/// handful.
pub const MAX_GUEST_RESOURCES: usize = 4096;

/// Elements one table of a guest may grow to.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Characters of a guest's log line the host passes on.
const MAX_LOG_CHARS: usize = 4096;

/// Guest calls in progress, and calls ever started, process-wide. The epoch
/// ticker parks after `IDLE_PARK` without a call and is woken by the next
/// one, so an idle process does not wake 1000×/s, while a busy one pays no
/// wake-up per call (only a load of `TICKER_PARKED`).
static ACTIVE_CALLS: AtomicUsize = AtomicUsize::new(0);
static CALLS_STARTED: AtomicUsize = AtomicUsize::new(0);
static TICKER_PARKED: AtomicBool = AtomicBool::new(false);
static TICKER: OnceLock<std::thread::Thread> = OnceLock::new();
const IDLE_PARK: Duration = Duration::from_millis(200);

/// The ticker's sleep while no call is running. A training step calls its
/// device guest briefly but often (a stream ticket per copy, ~40 per Keras
/// LSTM step), so the ticker never parks; between calls it need not tick
/// every `EPOCH_TICK`. A call that starts during this sleep gets its first
/// tick up to this much late: its deadline may fire that much later, never
/// earlier. The ticker then wakes 100×/s instead of 1000×/s on a 2-core
/// machine where each wake-up takes a core from the step.
const IDLE_TICK: Duration = Duration::from_millis(10);

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

/// The epoch ticker's loop: one tick per `EPOCH_TICK` while guests run, one
/// per `IDLE_TICK` between calls.
fn run_ticker(engine: wasmtime::EngineWeak) {
    let mut idle = Duration::ZERO;
    let mut seen = CALLS_STARTED.load(Ordering::Relaxed);
    while let Some(engine) = engine.upgrade() {
        engine.increment_epoch();
        drop(engine);
        let tick = if ACTIVE_CALLS.load(Ordering::SeqCst) == 0 { IDLE_TICK } else { EPOCH_TICK };
        std::thread::sleep(tick);
        let started = CALLS_STARTED.load(Ordering::Relaxed);
        idle = if started == seen && ACTIVE_CALLS.load(Ordering::SeqCst) == 0 { idle + tick } else { Duration::ZERO };
        seen = started;
        if idle >= IDLE_PARK {
            TICKER_PARKED.store(true, Ordering::SeqCst);
            // A call that started before the flag was visible must not be
            // left without ticks: look again before sleeping.
            if ACTIVE_CALLS.load(Ordering::SeqCst) == 0 {
                std::thread::park();
            }
            TICKER_PARKED.store(false, Ordering::SeqCst);
            idle = Duration::ZERO;
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
    /// How messages name the guest: `guest 'NAME' (FILE)` or `pass 'NAME' (FILE)`.
    pub(crate) guest: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    limits: GuestLimits,
    /// A device guest's open annotation spans, and its device.
    pub(crate) annotations: crate::profiler::annotations::Annotations,
    /// What the guest may still log in this call and this second.
    log: LogBudget,
}

/// The policy's log budget of a guest, per call and per second. A line past
/// either budget is dropped and counted; the host reports the count at most
/// once a second, so a guest logging in a loop costs its budget, never the
/// host's disk. The second's budget belongs to the guest (its label), not
/// to one instance: a pass re-instantiated after each fault gets no fresh one.
#[derive(Debug)]
struct LogBudget {
    per_call: (u32, u64),
    per_second: (u32, u64),
    call: (u32, u64),
    window: Arc<parking_lot::Mutex<LogWindow>>,
}

/// One guest's log second, shared by its instances.
#[derive(Debug)]
struct LogWindow {
    started: Instant,
    used: (u32, u64),
    dropped: (u64, u64),
    last_report: Option<Instant>,
}

impl LogBudget {
    fn new(label: &str, limits: &Limits) -> Self {
        static WINDOWS: OnceLock<parking_lot::Mutex<HashMap<String, Arc<parking_lot::Mutex<LogWindow>>>>> =
            OnceLock::new();
        let window = WINDOWS
            .get_or_init(Default::default)
            .lock()
            .entry(label.to_owned())
            .or_insert_with(|| {
                Arc::new(parking_lot::Mutex::new(LogWindow {
                    started: Instant::now(),
                    used: (0, 0),
                    dropped: (0, 0),
                    last_report: None,
                }))
            })
            .clone();
        LogBudget {
            per_call: (limits.log_lines_per_call, limits.log_bytes_per_call),
            per_second: (limits.log_lines_per_second, limits.log_bytes_per_second),
            call: (0, 0),
            window,
        }
    }

    /// Whether a line of `bytes` may be written; counts it either way.
    fn admit(&mut self, bytes: usize) -> bool {
        let bytes = bytes as u64;
        let mut window = self.window.lock();
        if window.started.elapsed() >= Duration::from_secs(1) {
            window.used = (0, 0);
            window.started = Instant::now();
        }
        let fits = |used: (u32, u64), budget: (u32, u64)| used.0 < budget.0 && used.1.saturating_add(bytes) <= budget.1;
        if fits(self.call, self.per_call) && fits(window.used, self.per_second) {
            self.call = (self.call.0 + 1, self.call.1.saturating_add(bytes));
            window.used = (window.used.0 + 1, window.used.1.saturating_add(bytes));
            true
        } else {
            window.dropped = (window.dropped.0 + 1, window.dropped.1 + bytes);
            false
        }
    }

    /// A new call starts with its own per-call budget.
    fn begin_call(&mut self) {
        self.call = (0, 0);
    }

    /// The lines dropped since the last report, when one is due (never more
    /// than once a second).
    fn report(&mut self) -> Option<(u64, u64)> {
        let mut window = self.window.lock();
        if window.dropped.0 == 0 || window.last_report.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            return None;
        }
        window.last_report = Some(Instant::now());
        Some(std::mem::take(&mut window.dropped))
    }
}

/// wasmtime's `StoreLimits`, plus a record of the growth it refused, so a
/// guest that dies of it gets an error naming the cap instead of a bare trap.
struct GuestLimits {
    inner: StoreLimits,
    memory_cap: usize,
    refused_growth: Option<usize>,
    refused_table_growth: Option<usize>,
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
        let allowed = self.inner.table_growing(current, desired, maximum)?;
        if !allowed {
            self.refused_table_growth = Some(desired);
        }
        Ok(allowed)
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
        self.log_line(level.into(), &message);
    }

    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }
}

impl self::tfwasm::device::types::Host for GuestState {}

impl GuestState {
    /// A line the guest asked the host to log, tagged with the guest's name.
    /// Guests can neither flood the log nor forge lines in it.
    pub(crate) fn log_line(&mut self, level: tracing::Level, message: &str) {
        let message = guest_text(message, MAX_LOG_CHARS);
        if !self.log.admit(message.len()) {
            return;
        }
        let guest = &*self.guest;
        match level {
            tracing::Level::TRACE => tracing::trace!("{guest}: {message}"),
            tracing::Level::DEBUG => tracing::debug!("{guest}: {message}"),
            tracing::Level::INFO => tracing::info!("{guest}: {message}"),
            tracing::Level::WARN => tracing::warn!("{guest}: {message}"),
            _ => tracing::error!("{guest}: {message}"),
        }
    }
}

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
        let started = Instant::now();
        let source = GuestSource {
            label: &label,
            path: &policy.guest.path,
            sha256: policy.guest.sha256.as_deref(),
            capabilities: &policy.capabilities,
            world: &DEVICE_WORLD,
        };
        let compiled = source.compile(cache_dir)?;
        let add_host = |linker: &mut Linker<GuestState>| {
            Device::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
            // World `annotated-device`: guests that annotate their trace import it.
            crate::profiler::annotations::AnnotatorWorld::add_to_linker::<_, HasSelf<_>>(linker, |state| state)
        };
        let pre = source.link(&compiled, add_host, DevicePre::new)?;
        let cached = compiled.cached;
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
        let store = new_store(self.pre.engine(), &self.label, &self.policy.limits, &self.policy.capabilities)?;
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

    /// Makes the annotations this instance adds (world `annotated-device`)
    /// part of device `ordinal`'s trace.
    pub fn annotate_for(&mut self, ordinal: u32) {
        self.store.data_mut().annotations.device = Some(ordinal);
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
        let bindings = self.bindings.as_ref();
        let outcome = guarded(&mut self.store, deadline_ms, call, |store| body(store, bindings));
        if let Err(fault) = &outcome {
            self.fault = Some(fault.clone());
        }
        outcome
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

/// A fresh store for one instance of the guest `label`: its memory cap and
/// table limits, a WASI context holding only what `capabilities` grant, at
/// most [`MAX_GUEST_RESOURCES`] resources, and epoch deadlines that trap.
pub(crate) fn new_store(
    engine: &Engine,
    label: &Arc<str>,
    limits: &Limits,
    capabilities: &Capabilities,
) -> Result<Store<GuestState>, Error> {
    let mut wasi = WasiCtxBuilder::new();
    if capabilities.stderr {
        wasi.inherit_stderr();
    }
    for preopen in &capabilities.preopens {
        wasi.preopened_dir(&preopen.host, &preopen.guest, FsPerms::ReadOnly).map_err(|e| Error::GuestLoad {
            guest: label.to_string(),
            reason: format!("cannot preopen {}: {e:#}", preopen.host.display()),
        })?;
    }
    let memory_cap = usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX);
    let log = LogBudget::new(label, limits);
    let limits = GuestLimits {
        inner: StoreLimitsBuilder::new()
            .memory_size(memory_cap)
            .table_elements(MAX_TABLE_ELEMENTS)
            .instances(32)
            .tables(32)
            .memories(8)
            .build(),
        memory_cap,
        refused_growth: None,
        refused_table_growth: None,
    };
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_GUEST_RESOURCES);
    let state =
        GuestState { guest: label.clone(), wasi: wasi.build(), table, limits, annotations: Default::default(), log };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    store.epoch_deadline_trap();
    Ok(store)
}

/// Runs one host→guest call under a deadline of `deadline_ms` and maps a
/// trap, a deadline stop or a refused growth to an error that names the
/// guest and the export (`call`).
pub(crate) fn guarded<R>(
    store: &mut Store<GuestState>,
    deadline_ms: u64,
    call: &str,
    body: impl FnOnce(&mut Store<GuestState>) -> wasmtime::Result<R>,
) -> Result<R, Error> {
    let ticks = deadline_ms.div_ceil(EPOCH_TICK.as_millis() as u64).max(1);
    store.set_epoch_deadline(ticks);
    store.data_mut().log.begin_call();
    let running = ActiveCall::start();
    let outcome = body(store);
    drop(running);
    if let Some((lines, bytes)) = store.data_mut().log.report() {
        tracing::warn!(
            "{}: {lines} log lines ({bytes} bytes) dropped past its log budget (policy limits.log-lines-per-call, \
             log-bytes-per-call, log-lines-per-second, log-bytes-per-second)",
            store.data().guest
        );
    }
    outcome.map_err(|error| {
        let guest = store.data().guest.to_string();
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Error::GuestTimeout { guest, call: call.to_owned(), deadline_ms },
            trap => {
                let mut reason = describe_trap(trap.copied(), &error);
                let limits = &store.data().limits;
                if let Some(desired) = limits.refused_growth {
                    reason.push_str(&format!(
                        "; before it, the guest asked to grow its memory to {desired} bytes, past its cap of {} \
                         bytes (policy limits.memory-bytes)",
                        limits.memory_cap
                    ));
                }
                if let Some(desired) = limits.refused_table_growth {
                    reason.push_str(&format!(
                        "; before it, the guest asked to grow a table to {desired} elements, past the host's cap \
                         of {MAX_TABLE_ELEMENTS}"
                    ));
                }
                Error::GuestTrap { guest, call: call.to_owned(), reason }
            }
        }
    })
}

/// A WIT world the sandbox runs guests of.
pub(crate) struct World {
    /// `tfwasm:device`
    pub package: &'static str,
    /// The version this host speaks.
    pub version: &'static str,
    /// The world's name, for messages.
    pub name: &'static str,
    /// The interfaces a guest of the world exports.
    pub exports: &'static [&'static str],
    /// Where the world's WIT lives in the repository, for messages.
    pub wit: &'static str,
}

pub(crate) const DEVICE_WORLD: World = World {
    package: "tfwasm:device",
    version: DEVICE_WIT_VERSION,
    name: "device",
    exports: &["identity", "memory", "streams"],
    wit: "wit/device",
};

impl World {
    /// The message for a component built against another version of this
    /// world's package (imported or exported, at a version the linker would
    /// not match), if it is one.
    fn other_version<'a>(&self, names: impl Iterator<Item = &'a &'a str>) -> Option<String> {
        let others: std::collections::BTreeSet<String> = names
            .map(|name| package_of(name))
            .filter(|(package, _)| *package == self.package)
            .filter(|(_, version)| !version.is_some_and(|v| semver_compatible(v, self.version)))
            .map(|(package, version)| version.map_or_else(|| package.to_owned(), |v| format!("{package}@{v}")))
            .collect();
        if others.is_empty() {
            return None;
        }
        let others: Vec<String> = others.into_iter().collect();
        Some(format!(
            "it is built against {}, but this host speaks {}@{}: rebuild it against this release's {}",
            others.join(" and "),
            self.package,
            self.version,
            self.wit
        ))
    }

    /// Which of the world's interfaces a component with these exports lacks.
    pub(crate) fn missing_exports(&self, exports: &[String]) -> String {
        let wanted: Vec<String> =
            self.exports.iter().map(|i| format!("{}/{i}@{}", self.package, self.version)).collect();
        let missing: Vec<&str> = wanted.iter().filter(|w| !exports.contains(w)).map(String::as_str).collect();
        if missing.is_empty() {
            format!("it does not export the `{}/{}@{}` world", self.package, self.name, self.version)
        } else {
            format!(
                "it does not export {} (a {} guest exports {})",
                missing.join(", "),
                self.name,
                self.exports.join(", ")
            )
        }
    }
}

/// A guest file to load: read, pinned, compiled (or found in the cache),
/// and checked against its world and its policy's capabilities.
pub(crate) struct GuestSource<'a> {
    pub label: &'a str,
    pub path: &'a std::path::Path,
    pub sha256: Option<&'a str>,
    pub capabilities: &'a Capabilities,
    pub world: &'a World,
}

/// What [`GuestSource::compile`] made of a file.
pub(crate) struct Compiled {
    pub component: Component,
    /// Whether it came from the compile cache.
    pub cached: bool,
    pub exports: Vec<String>,
    /// The file's SHA-256, hex.
    pub sha256: String,
}

impl GuestSource<'_> {
    /// Why this guest could not be loaded, naming it.
    fn load_err(&self, reason: String) -> Error {
        Error::GuestLoad { guest: self.label.to_owned(), reason }
    }

    /// The component, whether it came from the cache, its export names and
    /// the file's digest.
    pub(crate) fn compile(&self, cache_dir: Option<&std::path::Path>) -> Result<Compiled, Error> {
        let engine = engine()?;
        let bytes =
            std::fs::read(self.path).map_err(|e| self.load_err(format!("cannot read {}: {e}", self.path.display())))?;
        let sha256 = cache::sha256_hex(&bytes);
        if let Some(pinned) = self.sha256 {
            if !sha256.eq_ignore_ascii_case(pinned) {
                return Err(self.load_err(format!(
                    "{} is not the guest the policy pins: sha256 = {pinned}, the file's SHA-256 is {sha256}",
                    self.path.display()
                )));
            }
        }
        let (component, cached) = cache::compile(engine, &bytes, cache_dir).map_err(|e| {
            self.load_err(format!(
                "not a valid wasm component ({e:#}); build guests for wasm32-wasip2 with wit-bindgen against {}",
                self.world.wit
            ))
        })?;
        let ty = component.component_type();
        let imports: Vec<&str> = ty.imports(engine).map(|(name, _)| name).collect();
        let exports: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
        if let Some(reason) = self.world.other_version(imports.iter().chain(&exports)) {
            return Err(self.load_err(reason));
        }
        let lacks = |interface: &&str| {
            let wanted = format!("{}/{interface}", self.world.package);
            !exports.iter().any(|name| name.split('@').next() == Some(wanted.as_str()))
        };
        let exports: Vec<String> = exports.iter().map(|name| (*name).to_owned()).collect();
        // What it exports says what it is: a guest of another world gets
        // that said, not a list of imports the linker could not match.
        if self.world.exports.iter().any(lacks) {
            return Err(self.load_err(self.world.missing_exports(&exports)));
        }
        if let Some(reason) = refused_imports(&imports, self.capabilities) {
            return Err(self.load_err(reason));
        }
        Ok(Compiled { component, cached, exports, sha256 })
    }

    /// Links `compiled` against WASI and the world's host interfaces
    /// (`add_host`), checks its imports, and makes the world's typed
    /// `InstancePre` (`new_pre`, e.g. `PassPre::new`), which checks its
    /// exports: what a program keeps to instantiate from.
    pub(crate) fn link<P>(
        &self,
        compiled: &Compiled,
        add_host: impl FnOnce(&mut Linker<GuestState>) -> wasmtime::Result<()>,
        new_pre: impl FnOnce(InstancePre<GuestState>) -> wasmtime::Result<P>,
    ) -> Result<P, Error> {
        let mut linker = Linker::<GuestState>::new(engine()?);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| Error::Internal(format!("cannot link WASI: {e:#}")))?;
        add_host(&mut linker).map_err(|e| Error::Internal(format!("cannot link the host interfaces: {e:#}")))?;
        let instance_pre = linker
            .instantiate_pre(&compiled.component)
            .map_err(|e| self.load_err(format!("its imports do not match what tfwasm provides: {e:#}")))?;
        new_pre(instance_pre)
            .map_err(|e| self.load_err(format!("{} ({e:#})", self.world.missing_exports(&compiled.exports))))
    }
}

/// `tracing::Level` of a WIT `log-level`: each world's host interface has
/// its own enum with the same five cases.
macro_rules! tracing_level_from {
    ($($log_level:path),+ $(,)?) => {$(
        impl From<$log_level> for tracing::Level {
            fn from(level: $log_level) -> tracing::Level {
                use $log_level as L;
                match level {
                    L::Trace => tracing::Level::TRACE,
                    L::Debug => tracing::Level::DEBUG,
                    L::Info => tracing::Level::INFO,
                    L::Warn => tracing::Level::WARN,
                    L::Error => tracing::Level::ERROR,
                }
            }
        }
    )+};
}

tracing_level_from!(
    self::tfwasm::device::host::LogLevel,
    crate::passes::pipeline::tfwasm::optimizer::host::LogLevel,
    crate::profiler::guest::tfwasm::profiler::host::LogLevel,
);

/// `wasm trap: ... (hint) in function F` from a wasmtime error.
fn describe_trap(trap: Option<Trap>, error: &wasmtime::Error) -> String {
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return format!("the guest called exit({}) (WASI cli/exit); a device guest answers, it does not exit", exit.0);
    }
    let mut reason = match trap {
        Some(trap) => trap.to_string(),
        None => guest_text(&error.root_cause().to_string(), 1024),
    };
    if matches!(error.root_cause().downcast_ref::<ResourceTableError>(), Some(ResourceTableError::Full)) {
        reason.push_str(&format!(" (the guest holds more than {MAX_GUEST_RESOURCES} WASI resources at once)"));
    }
    reason.push_str(match trap {
        Some(Trap::UnreachableCodeReached) => " (a Rust guest panicked, aborted or hit `unreachable`)",
        // A Rust guest's stack lives in its linear memory: running out of it
        // ends here too, not in a stack overflow.
        Some(Trap::MemoryOutOfBounds) => " (outside the guest's own memory, or a Rust guest's stack ran out)",
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
        // A function's name comes from the guest's name section: its text.
        reason.push_str(&format!(" in `{}`", guest_text(&function, 256)));
    }
    reason
}

/// A guest's text as the host passes it on (log lines, refusal reasons, its
/// function names): at most `limit` characters, with control and bidi
/// characters escaped, so a guest can neither flood the log nor forge lines
/// in it (a newline, a carriage return or a terminal escape would let it
/// pose as the host or as another guest).
pub fn guest_text(text: &str, limit: usize) -> String {
    let mut out = String::with_capacity(text.len().min(limit) + 32);
    let mut chars = text.chars();
    for c in chars.by_ref().take(limit) {
        if c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if chars.next().is_some() {
        out.push_str(&format!("… ({} bytes in all)", text.len()));
    }
    out
}

/// `wasi:random/random@0.2.6` → (`wasi:random`, `Some("0.2.6")`).
fn package_of(name: &str) -> (&str, Option<&str>) {
    let (path, version) = match name.split_once('@') {
        Some((path, version)) => (path, Some(version)),
        None => (name, None),
    };
    (path.split('/').next().unwrap_or(path), version)
}

/// Why the policy refuses the WASI import `name` (`wasi:random/random@0.2.6`),
/// or `None` when it grants it.
///
/// Capabilities go by power, not by import name. What gives a guest nothing
/// it could use against the host or the user always links, so that what a
/// standard toolchain emits loads: WASI's streams and command-line
/// interfaces (no arguments, no environment, an empty stdin, output
/// discarded unless `capabilities.stderr`), the filesystem (empty unless the
/// policy preopens a directory: the preopens are the power, not the
/// interface), the clocks (the host's `now-ns` already tells the time), and
/// insecure randomness (a Rust `HashMap`'s seed is no secret). Secure
/// randomness needs `capabilities.random`. Sockets, HTTP, and anything
/// tfwasm does not provide, never.
pub fn refused_import(name: &str, capabilities: &Capabilities) -> Option<&'static str> {
    let interface = name.split('@').next().unwrap_or(name);
    match package_of(name).0 {
        "tfwasm:device" | "tfwasm:optimizer" | "tfwasm:profiler" | "wasi:io" | "wasi:cli" => None,
        "wasi:filesystem" | "wasi:clocks" => None,
        "wasi:random" if matches!(interface, "wasi:random/insecure" | "wasi:random/insecure-seed") => None,
        "wasi:random" if capabilities.random => None,
        "wasi:random" => Some("secure randomness: not granted (capabilities.random = true grants it)"),
        "wasi:sockets" | "wasi:http" => Some("the network: tfwasm never grants it"),
        _ => Some("tfwasm does not provide it"),
    }
}

/// The message for a guest with imports its policy refuses, if it has any:
/// each reason once, with the imports it covers.
fn refused_imports(imports: &[&str], capabilities: &Capabilities) -> Option<String> {
    let mut refused: Vec<(&str, Vec<&str>)> = Vec::new();
    for &name in imports {
        if let Some(why) = refused_import(name, capabilities) {
            match refused.iter_mut().find(|(reason, _)| *reason == why) {
                Some((_, names)) => names.push(name),
                None => refused.push((why, vec![name])),
            }
        }
    }
    if refused.is_empty() {
        return None;
    }
    let parts: Vec<String> = refused.iter().map(|(why, names)| format!("{} ({why})", names.join(", "))).collect();
    Some(format!("it imports what its policy does not grant: {}", parts.join("; ")))
}

/// Whether an import of `wanted` is served by `provided`: the same major
/// version, or for 0.x the same minor (wasmtime's linker rule).
fn semver_compatible(wanted: &str, provided: &str) -> bool {
    let parts = |v: &str| -> Option<(u64, u64)> {
        let mut numbers = v.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
        Some((numbers.next()??, numbers.next()??))
    };
    match (parts(wanted), parts(provided)) {
        (Some((0, a)), Some((0, b))) => a == b,
        (Some((a, _)), Some((b, _))) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Preopen;

    #[test]
    fn guest_text_cannot_forge_or_flood_the_log() {
        let forged = "ok\ntfwasm: guest 'other' (other.wasm): fine\r\x1b[2J\u{202e}";
        let text = guest_text(forged, 4096);
        assert!(!text.chars().any(|c| c.is_control() || c == '\u{202e}'), "{text:?}");
        assert!(text.contains("ok\\ntfwasm: guest 'other'") && text.contains("\\u{1b}"), "{text:?}");
        let flood = "é".repeat(100_000);
        let text = guest_text(&flood, 100);
        assert!(text.starts_with(&"é".repeat(100)) && text.ends_with("(200000 bytes in all)"), "{text}");
        assert_eq!(guest_text("plain words, ünïcode", 100), "plain words, ünïcode");
    }

    #[test]
    fn imports_are_granted_by_their_power() {
        let none = Capabilities::default();
        // What a standard toolchain's guest imports and what gives it nothing.
        for granted in [
            "tfwasm:device/host@0.1.0",
            "wasi:io/streams@0.2.6",
            "wasi:cli/exit@0.2.0",
            "wasi:filesystem/preopens@0.2.6",
            "wasi:filesystem/types@0.2.6",
            "wasi:clocks/wall-clock@0.2.6",
            "wasi:clocks/monotonic-clock@0.2.0",
            "wasi:random/insecure-seed@0.2.6",
            "wasi:random/insecure@0.2.6",
        ] {
            assert_eq!(refused_import(granted, &none), None, "{granted}");
        }
        let cases = [
            ("wasi:random/random@0.2.6", "capabilities.random"),
            ("wasi:sockets/tcp@0.2.6", "network"),
            ("wasi:http/outgoing-handler@0.2.6", "network"),
            ("acme:gpu/driver@1.0.0", "does not provide"),
        ];
        for (name, why) in cases {
            let reason = refused_import(name, &none).unwrap_or_else(|| panic!("{name} was granted"));
            assert!(reason.contains(why), "{name}: {reason}");
        }
        let all = Capabilities {
            stderr: true,
            preopens: vec![Preopen { host: ".".into(), guest: "/data".into() }],
            clocks: true,
            random: true,
        };
        assert_eq!(refused_import("wasi:random/random@0.2.6", &all), None);
        assert!(refused_import("wasi:sockets/udp@0.2.6", &all).is_some(), "the network is never granted");
        // One reason, every import it covers.
        let message =
            refused_imports(&["wasi:io/error@0.2.6", "wasi:sockets/network@0.2.6", "wasi:sockets/tcp@0.2.6"], &all)
                .expect("sockets are refused");
        assert_eq!(
            message,
            "it imports what its policy does not grant: wasi:sockets/network@0.2.6, wasi:sockets/tcp@0.2.6 \
             (the network: tfwasm never grants it)"
        );
        assert_eq!(refused_imports(&["wasi:io/error@0.2.6", "tfwasm:device/host@0.1.0"], &none), None);
    }

    #[test]
    fn another_device_version_is_named() {
        let names = ["tfwasm:device/types@9.0.0", "wasi:io/error@0.2.6", "tfwasm:device/identity@9.0.0"];
        let reason = DEVICE_WORLD.other_version(names.iter()).expect("9.0.0 is not 0.1.0");
        assert!(
            reason.contains("built against tfwasm:device@9.0.0, but this host speaks tfwasm:device@0.1.0"),
            "{reason}"
        );
        let reason = DEVICE_WORLD.other_version(["tfwasm:device/host@0.2.0", "tfwasm:device/host"].iter()).unwrap();
        assert!(reason.contains("tfwasm:device and tfwasm:device@0.2.0"), "{reason}");
        assert_eq!(DEVICE_WORLD.other_version(["tfwasm:device/host@0.1.3", "tfwasm:device/memory@0.1.0"].iter()), None);
    }

    #[test]
    fn a_missing_export_is_named() {
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let reason =
            DEVICE_WORLD.missing_exports(&owned(&["tfwasm:device/identity@0.1.0", "tfwasm:device/memory@0.1.0"]));
        assert!(reason.contains("does not export tfwasm:device/streams@0.1.0"), "{reason}");
        assert!(!reason.contains("memory@"), "{reason}");
        let reason = DEVICE_WORLD.missing_exports(&[]);
        assert!(reason.contains("identity@0.1.0, tfwasm:device/memory@0.1.0, tfwasm:device/streams@0.1.0"), "{reason}");
    }
}
