//! The profiler's host side: what the device records while a profiling
//! session runs, and the session's lifecycle (start, stop, collect).
//!
//! ```text
//! kernels, copies, allocations, guest calls ──record()──▶ Ring (bounded, drop-oldest)
//!                                                            │ stop()
//! start() ─▶ Running ─▶ stop() ─▶ Stopped(Capture) ─▶ prepare(devices) ─▶ XSpace bytes ─▶ write_into()
//! ```
//!
//! Nothing is recorded while no session runs: every recording site first
//! asks [`active`], one relaxed atomic load. While one runs, the [`Ring`]
//! holds at most `profiler.max-events` records (policy); when it is full
//! the oldest record goes and the session's dropped count grows, which the
//! trace reports.
//!
//! Timestamps are wall-clock nanoseconds since the Unix epoch, the clock
//! TensorFlow's own planes use, so the device's events line up with the
//! host's in the trace viewer.
//!
//! [`xspace`] turns a stopped session into the planes TensorBoard shows,
//! shaped by the policy's profiler guest ([`guest`]) when there is one.
//! The session is process-wide (TensorFlow runs one profiler session at a
//! time) and every function here is thread-safe.

pub mod annotations;
pub mod guest;
pub mod xspace;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::device::{Device, Path};
use crate::error::Error;
use crate::policy::{ProfilerGuestSection, ProfilerSection};
use guest::ProfilerProgram;

/// Records a session keeps when the policy does not say (`profiler.max-events`).
pub const DEFAULT_MAX_EVENTS: usize = 1 << 18;

/// Set while a session runs: the one load every recording site pays.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// How many records the ring keeps (policy `profiler.max-events`).
static CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_EVENTS);

static RING: Mutex<Ring> = Mutex::new(Ring { records: VecDeque::new(), dropped: 0, capacity: DEFAULT_MAX_EVENTS });

static SESSION: Mutex<Session> = Mutex::new(Session { phase: Phase::Idle, pending: None });

/// The profiler guest that shapes the trace: named by the policy, loaded at
/// the first collection that needs it.
static GUEST: Mutex<GuestSetting> = Mutex::new(GuestSetting::None);

enum GuestSetting {
    None,
    Named(ProfilerGuestSection),
    Loaded(Arc<ProfilerProgram>),
    /// Loading failed: said in every trace, not retried.
    Broken(String),
}

/// True while a profiling session runs. The hot-path check.
#[cfg(feature = "profiler")]
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Built without the profiler: never, so every recording site compiles away.
#[cfg(not(feature = "profiler"))]
#[inline(always)]
pub const fn active() -> bool {
    false
}

/// Wall-clock nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Takes the policy's `[profiler]` section: the ring's size from the next
/// session on, and the profiler guest, loaded when a trace needs it.
pub fn configure(section: &ProfilerSection) {
    set_capacity(usize::try_from(section.max_events).unwrap_or(usize::MAX));
    *GUEST.lock() = match &section.guest {
        Some(guest) => GuestSetting::Named(guest.clone()),
        None => GuestSetting::None,
    };
}

/// Sets the profiler guest directly (`None`: the host's own lines): for
/// tests and tools.
pub fn set_guest(program: Option<Arc<ProfilerProgram>>) {
    *GUEST.lock() = match program {
        Some(program) => GuestSetting::Loaded(program),
        None => GuestSetting::None,
    };
}

/// The profiler guest to ask, loading it on first use; or why there is none.
fn profiler_guest() -> Result<Option<Arc<ProfilerProgram>>, String> {
    let mut setting = GUEST.lock();
    let loaded = match &*setting {
        GuestSetting::None => return Ok(None),
        GuestSetting::Loaded(program) => return Ok(Some(program.clone())),
        GuestSetting::Broken(reason) => return Err(reason.clone()),
        GuestSetting::Named(section) => ProfilerProgram::load_cached(section),
    };
    match loaded {
        Ok(program) => {
            *setting = GuestSetting::Loaded(program.clone());
            Ok(Some(program))
        }
        Err(error) => {
            tracing::error!("{error}; traces show the host's own lines");
            *setting = GuestSetting::Broken(error.to_string());
            Err(error.to_string())
        }
    }
}

/// What a trace needs to know of a device.
#[derive(Debug, Clone)]
pub struct DeviceLabel {
    pub ordinal: u32,
    /// `/device:WASM:0`.
    pub name: String,
    /// The device guest's label.
    pub guest: String,
    pub replacements: u32,
    pub memory_bytes: u64,
}

impl DeviceLabel {
    pub fn of(device: &Device) -> DeviceLabel {
        DeviceLabel {
            ordinal: device.ordinal(),
            name: device.name().to_owned(),
            guest: device.guest().to_owned(),
            replacements: device.replacements(),
            memory_bytes: device.arena().len(),
        }
    }
}

/// Sets how many records a session keeps (at least one), from the next
/// session on.
pub fn set_capacity(max_events: usize) {
    CAPACITY.store(max_events.max(1), Ordering::Relaxed);
}

/// A small number naming the calling thread in the trace, and whether it is
/// a worker of the compute pool.
pub fn current_thread() -> ThreadId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ThreadId { id: ID.with(|id| *id), pool: crate::pool::on_worker() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId {
    pub id: u64,
    pub pool: bool,
}

/// One thing a device did, when, and on which thread.
#[derive(Debug, Clone)]
pub struct Record {
    /// The device's ordinal.
    pub device: u32,
    pub thread: ThreadId,
    pub start_ns: u64,
    pub end_ns: u64,
    pub event: Event,
}

#[derive(Debug, Clone)]
pub enum Event {
    /// One execution of one of the device's kernels.
    Kernel {
        /// The node's name in TensorFlow's graph.
        name: Arc<str>,
        /// The op type, e.g. `MatMul`.
        op: &'static str,
        /// The inputs' shapes, e.g. `[32,784] [784,128]`.
        shapes: Box<str>,
        /// Bytes of the inputs.
        bytes: u64,
        /// True when it ran on the compute pool after its compute callback returned.
        deferred: bool,
    },
    /// A copy or fill, when it ran.
    Copy { path: Path, stream: u64, bytes: u64 },
    /// An allocation TensorFlow asked for, and the device's bytes in use after it.
    Allocation { offset: u64, size: u64, in_use_after: u64 },
    /// A free, and the device's bytes in use after it (blocks the host
    /// keeps for reuse count as in use).
    Free { offset: u64, size: u64, in_use_after: u64 },
    /// One call into the device's guest.
    GuestCall { call: Box<str> },
    /// A guest fault and what the device did about it.
    Fault { guest: Box<str>, reason: Box<str>, outcome: Box<str> },
    /// An instant event (start = end) or a span a device guest added.
    Annotation { name: Box<str>, stats: Vec<(String, xspace::Value)> },
}

/// Keeps `record` if a session runs.
pub fn record(record: Record) {
    if !active() {
        return;
    }
    let mut ring = RING.lock();
    while ring.records.len() >= ring.capacity {
        ring.records.pop_front();
        ring.dropped += 1;
    }
    ring.records.push_back(record);
}

/// The records of the running session, oldest first.
struct Ring {
    records: VecDeque<Record>,
    /// Records pushed out by newer ones.
    dropped: u64,
    /// At most this many records, fixed when the session starts.
    capacity: usize,
}

/// A stopped session: what the trace is built from.
#[derive(Debug, Default, Clone)]
pub struct Capture {
    pub start_ns: u64,
    pub stop_ns: u64,
    pub records: Vec<Record>,
    /// Records the ring had no room for.
    pub dropped: u64,
    /// The ring's size during the session.
    pub capacity: usize,
}

struct Session {
    phase: Phase,
    /// The serialized XSpace between the size query and the copy.
    pending: Option<Vec<u8>>,
}

enum Phase {
    Idle,
    Running { start_ns: u64 },
    Stopped(Capture),
}

/// Starts a session: recording begins. Fails if one runs already.
/// Data of an earlier session that was never collected is dropped.
pub fn start() -> Result<(), Error> {
    start_with_capacity(CAPACITY.load(Ordering::Relaxed))
}

/// [`start`], keeping at most `max_events` records (at least one) in this
/// session whatever the policy says: for tests and tools.
pub fn start_with_capacity(max_events: usize) -> Result<(), Error> {
    if cfg!(not(feature = "profiler")) {
        return Err(Error::Profiler("tfwasm was built without the profiler (cargo feature `profiler`)".into()));
    }
    let mut session = SESSION.lock();
    if let Phase::Running { .. } = session.phase {
        return Err(Error::Profiler("a profiling session is already running; stop it first".into()));
    }
    session.pending = None;
    {
        let mut ring = RING.lock();
        ring.records = VecDeque::new();
        ring.dropped = 0;
        ring.capacity = max_events.max(1);
    }
    session.phase = Phase::Running { start_ns: now_ns() };
    ACTIVE.store(true, Ordering::SeqCst);
    Ok(())
}

/// Stops the running session and keeps what it recorded for collection.
/// Stopping when no session runs changes nothing.
pub fn stop() -> Result<(), Error> {
    let mut session = SESSION.lock();
    stop_locked(&mut session);
    Ok(())
}

fn stop_locked(session: &mut Session) {
    let Phase::Running { start_ns } = session.phase else { return };
    ACTIVE.store(false, Ordering::SeqCst);
    let stop_ns = now_ns();
    let (records, dropped, capacity) = {
        let mut ring = RING.lock();
        let records = std::mem::take(&mut ring.records);
        (Vec::from(records), std::mem::take(&mut ring.dropped), ring.capacity)
    };
    session.phase = Phase::Stopped(Capture { start_ns, stop_ns, records, dropped, capacity });
}

/// Serializes the stopped session (stopping it first if it runs) into an
/// XSpace with one plane per device, keeps the bytes for [`write_into`],
/// and returns their length. Asking again before [`write_into`] returns the
/// same length. With no session, the planes hold no events.
pub fn prepare(devices: &[Arc<Device>]) -> Result<usize, Error> {
    prepare_locked(&mut SESSION.lock(), devices)
}

fn prepare_locked(session: &mut Session, devices: &[Arc<Device>]) -> Result<usize, Error> {
    if let Some(pending) = &session.pending {
        return Ok(pending.len());
    }
    stop_locked(session);
    let capture = match std::mem::replace(&mut session.phase, Phase::Idle) {
        Phase::Stopped(capture) => capture,
        _ => {
            let now = now_ns();
            Capture { start_ns: now, stop_ns: now, capacity: CAPACITY.load(Ordering::Relaxed), ..Capture::default() }
        }
    };
    let labels: Vec<DeviceLabel> = devices.iter().map(|device| DeviceLabel::of(device)).collect();
    let (shape, status) = match profiler_guest() {
        Ok(None) => (None, "none: the host's own lines".to_owned()),
        Ok(Some(program)) => match program.shape(&capture, &labels) {
            Ok(shape) => (Some(shape), format!("{}: shaped the trace", program.label())),
            Err(error) => {
                tracing::warn!("{error}; the trace shows the host's own lines");
                (None, format!("{error}; the trace shows the host's own lines"))
            }
        },
        Err(reason) => (None, format!("{reason}; the trace shows the host's own lines")),
    };
    let bytes = xspace::encode(&xspace::build(&capture, &labels, shape.as_ref(), &status));
    let len = bytes.len();
    session.pending = Some(bytes);
    Ok(len)
}

/// Copies the bytes [`prepare`] made into `out` and forgets them; returns
/// their length. Fails, keeping them, if `out` is too small.
pub fn write_into(devices: &[Arc<Device>], out: &mut [u8]) -> Result<usize, Error> {
    let mut session = SESSION.lock();
    prepare_locked(&mut session, devices)?;
    let Some(pending) = session.pending.as_ref() else {
        return Err(Error::Internal("profiler: the prepared trace vanished".into()));
    };
    if out.len() < pending.len() {
        return Err(Error::Profiler(format!(
            "the trace needs {} bytes, the buffer holds {}; ask for the size first",
            pending.len(),
            out.len()
        )));
    }
    let len = pending.len();
    out[..len].copy_from_slice(pending);
    session.pending = None;
    Ok(len)
}

/// Measures `work` as a record of `event` on device `device` while a
/// session runs; otherwise just runs it.
pub fn span<R>(device: u32, event: impl FnOnce() -> Event, work: impl FnOnce() -> R) -> R {
    if !active() {
        return work();
    }
    let start_ns = now_ns();
    let result = work();
    let end_ns = now_ns();
    record(Record { device, thread: current_thread(), start_ns, end_ns, event: event() });
    result
}
