//! The core layer: one [`Device`] per `/device:WASM:N`.
//!
//! A device asks its guest for every decision (placement, stream order,
//! event and timer state), checks each answer against what the host knows,
//! and only then acts. This is the one place where guest answers and
//! TensorFlow's handles are validated; below it, values are trusted.
//!
//! When a guest traps, runs past its deadline or gives an invalid answer,
//! the device logs an error naming the guest, throws the instance away and
//! starts a fresh one that adopts the allocations still live. Streams,
//! events and timers created before the replacement keep working in
//! host order (the host records the dependencies TensorFlow asked for, so it
//! can order work without the guest). After `MAX_REPLACEMENTS` the device is
//! disabled: allocations fail with a message that says why.

pub mod arena;
pub mod streams;

// foldhash instead of std's SipHash: these maps are touched on every
// allocation, free and event poll (SipHash was ~3% of a small graph node's
// time), and its per-process random seed still keeps guest-chosen offsets
// from forcing collisions.
use foldhash::{HashMap, HashMapExt, HashSet};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Error;
use crate::policy::Policy;
use crate::profiler::{self, Event, Record};
use crate::sandbox::{
    guest_text, DeviceConfig, DeviceError, DeviceInfo, EventStatus, GuestInstance, GuestProgram, Ticket, Usage,
    WorkKind,
};
pub use arena::{DeviceArena, Pages, ALIGNMENT};
pub use streams::{copy_bytes, SendPtr, StreamQueue, WorkFn};

/// How many times a device replaces a faulty guest instance before giving up.
pub const MAX_REPLACEMENTS: u32 = 8;

/// How far one ticket may move its stream's seq on. The contract only asks
/// for an increase, but a guest that jumped to near 2^64 would leave the host
/// no room to number the work it orders itself after replacing the guest
/// (the seq would wrap, and every wait on the stream would then pass at once).
pub const MAX_SEQ_STEP: u64 = 1 << 32;

/// Characters of a guest's refusal message that reach a log line or an error.
const MAX_REASON_CHARS: usize = 1024;

/// Copies and fills up to this size run on the calling thread when their
/// stream is idle (see [`StreamQueue::run_if_idle`]): a few tens of µs of
/// the caller's time at most, held under the guest lock.
const INLINE_WORK_MAX_BYTES: u64 = 1 << 20;

/// Handles given to TensorFlow encode the device ordinal in their top bits
/// so handle-only callbacks (`SP_TimerFns::nanoseconds`) find their device.
const ORDINAL_SHIFT: u32 = 48;

/// A stream, event or timer handle as TensorFlow sees it.
pub type Handle = u64;

pub fn ordinal_of(handle: Handle) -> u32 {
    (handle >> ORDINAL_SHIFT) as u32
}

/// A path data takes through a device: the copy and fill kinds of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    HostToDevice,
    DeviceToHost,
    /// Within the device or between two devices of the platform (the
    /// regions are host-addressable, so a copy between devices is one
    /// `memcpy` on the sending device's stream).
    DeviceToDevice,
    Fill,
}

impl Path {
    pub const ALL: [Path; 4] = [Path::HostToDevice, Path::DeviceToHost, Path::DeviceToDevice, Path::Fill];

    pub fn of(kind: WorkKind) -> Option<Path> {
        match kind {
            WorkKind::CopyHostToDevice => Some(Path::HostToDevice),
            WorkKind::CopyDeviceToHost => Some(Path::DeviceToHost),
            WorkKind::CopyDeviceToDevice => Some(Path::DeviceToDevice),
            WorkKind::Memset => Some(Path::Fill),
            WorkKind::HostCallback | WorkKind::EventMarker | WorkKind::TimerMarker => None,
        }
    }
}

/// How many copies and fills TensorFlow asked of a device, and their bytes,
/// by [`Path`]: counted as they are submitted, with relaxed atomics (a few
/// ns), for tools that ask where a program's data went.
#[derive(Debug, Default)]
pub struct Traffic {
    counts: [AtomicU64; Path::ALL.len()],
    bytes: [AtomicU64; Path::ALL.len()],
}

impl Traffic {
    pub fn record(&self, path: Path, bytes: u64) {
        self.counts[path as usize].fetch_add(1, Ordering::Relaxed);
        self.bytes[path as usize].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Copies (or fills) and bytes on `path` so far.
    pub fn read(&self, path: Path) -> (u64, u64) {
        (self.counts[path as usize].load(Ordering::Relaxed), self.bytes[path as usize].load(Ordering::Relaxed))
    }
}

/// What TensorFlow needs to describe a device, kept alive as C strings.
#[derive(Debug)]
pub struct Identity {
    pub info: DeviceInfo,
    pub hardware_name: CString,
    pub vendor: CString,
    pub pci_bus_id: CString,
}

/// Where a piece of work goes on its stream, and who decided.
struct Ordered {
    queue: Arc<StreamQueue>,
    seq: u64,
    after: Vec<(Arc<StreamQueue>, u64)>,
    /// False when the host ordered it (the guest never saw this work).
    by_guest: bool,
}

/// Host record of a stream.
struct StreamRecord {
    queue: Arc<StreamQueue>,
    /// The guest's id, while the instance that issued it is alive.
    guest_id: Option<u64>,
    /// Dependencies TensorFlow asked for that the next piece of work must
    /// honour, and that the guest was told of: its ticket must carry them.
    required: Vec<(Arc<StreamQueue>, u64)>,
    /// The same, for waits the guest could not be told of (on a stream or
    /// event it does not know, or that it declined): the host adds them.
    host_waits: Vec<(Arc<StreamQueue>, u64)>,
}

struct EventRecord {
    guest_id: Option<u64>,
    marker: Option<(Arc<StreamQueue>, u64)>,
    /// Whether the guest ordered the current marker (and so knows its state).
    guest_recorded: bool,
}

struct TimerRecord {
    guest_id: Option<u64>,
    start: Option<(Arc<StreamQueue>, u64)>,
    stop: Option<(Arc<StreamQueue>, u64)>,
    times: Arc<Mutex<[Option<u64>; 2]>>,
}

/// Everything guarded by the guest lock: the instance and the host's view of
/// the objects it manages, so both change together.
struct GuestSlot {
    instance: Option<GuestInstance>,
    replacements: u32,
    /// The fault behind the latest replacement.
    last_fault: Option<Error>,
    disabled: Option<String>,
    streams: HashMap<Handle, StreamRecord>,
    events: HashMap<Handle, EventRecord>,
    timers: HashMap<Handle, TimerRecord>,
    recycled: Recycled,
}

/// Freed blocks the host keeps to hand out again (policy
/// `device.recycle-bytes`). The guest placed each of them and still counts
/// it as live; so does the arena, so a guest answer overlapping one is
/// still caught.
#[derive(Default)]
struct Recycled {
    /// size → offsets, most recently freed last (its cache lines are warm).
    by_size: HashMap<u64, Vec<u64>>,
    /// Every kept offset, so a second free of the same block is caught.
    offsets: HashSet<u64>,
    bytes: u64,
}

impl Recycled {
    fn take(&mut self, size: u64) -> Option<u64> {
        let offset = self.by_size.get_mut(&size)?.pop()?;
        self.offsets.remove(&offset);
        self.bytes -= size;
        Some(offset)
    }

    fn put(&mut self, offset: u64, size: u64) {
        self.by_size.entry(size).or_default().push(offset);
        self.offsets.insert(offset);
        self.bytes += size;
    }

    fn drain(&mut self) -> Vec<u64> {
        self.offsets.clear();
        self.bytes = 0;
        self.by_size.drain().flat_map(|(_, offsets)| offsets).collect()
    }
}

pub struct Device {
    ordinal: u32,
    /// `/device:WASM:0`, for messages.
    name: String,
    program: Arc<GuestProgram>,
    config: DeviceConfig,
    identity: Identity,
    arena: DeviceArena,
    /// Policy `device.recycle-bytes`.
    recycle_limit: u64,
    slot: Mutex<GuestSlot>,
    next_handle: AtomicU64,
    traffic: Traffic,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.name).field("guest", &self.program.label()).finish()
    }
}

impl Device {
    /// Instantiates the guest for device `ordinal`, initialises it and maps
    /// the device region.
    pub fn new(program: &Arc<GuestProgram>, device_type: &str, ordinal: u32) -> Result<Arc<Device>, Error> {
        let policy = program.policy();
        let name = format!("/device:{device_type}:{ordinal}");
        let config = DeviceConfig { ordinal, memory_size: policy.device.memory_bytes, options: policy.guest_options() };
        let mut instance = program.instantiate()?;
        let info = init_instance(&mut instance, &config)?;
        let identity = Identity {
            hardware_name: c_string(&info.hardware_name),
            vendor: c_string(&info.vendor),
            pci_bus_id: c_string(&info.pci_bus_id),
            info,
        };
        let pages = if policy.device.huge_pages { Pages::Huge } else { Pages::Small };
        let arena = DeviceArena::new(policy.device.memory_bytes, pages).map_err(|e| {
            Error::Config(format!("{name}: cannot reserve {} bytes of device memory: {e}", policy.device.memory_bytes))
        })?;
        Ok(Arc::new(Device {
            ordinal,
            name,
            program: program.clone(),
            config,
            identity,
            arena,
            recycle_limit: policy.device.recycle_bytes,
            slot: Mutex::new(GuestSlot {
                instance: Some(instance),
                replacements: 0,
                last_fault: None,
                disabled: None,
                streams: HashMap::new(),
                events: HashMap::new(),
                timers: HashMap::new(),
                recycled: Recycled::default(),
            }),
            next_handle: AtomicU64::new(1),
            traffic: Traffic::default(),
        }))
    }

    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn guest(&self) -> &str {
        self.program.label()
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn arena(&self) -> &DeviceArena {
        &self.arena
    }

    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// Why the device is disabled, if it is.
    pub fn disabled(&self) -> Option<String> {
        self.slot.lock().disabled.clone()
    }

    /// How many times the guest instance was replaced after a fault.
    pub fn replacements(&self) -> u32 {
        self.slot.lock().replacements
    }

    /// The fault that led to the latest replacement: what the log said, for
    /// tools and tests (faults in calls TensorFlow does not wait on, such as
    /// `streams.complete`, reach no caller).
    pub fn last_fault(&self) -> Option<Error> {
        self.slot.lock().last_fault.clone()
    }

    fn new_handle(&self) -> Handle {
        (u64::from(self.ordinal) << ORDINAL_SHIFT) | self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    // ---------------------------------------------------------------- memory

    /// Allocates `size` bytes where the guest says, after checking the answer.
    /// A kept block of exactly this size is handed out again without asking
    /// (see [`Recycled`]); when the guest reports it is full, the kept
    /// blocks go back to it and it is asked once more.
    pub fn allocate(&self, size: u64) -> Result<*mut u8, Error> {
        // TensorFlow may ask for 0 bytes; it still wants a distinct non-null pointer.
        let size = size.max(1);
        let mut slot = self.slot.lock();
        if !profiler::active() {
            return self.allocate_locked(&mut slot, size);
        }
        let start_ns = profiler::now_ns();
        let outcome = self.allocate_locked(&mut slot, size);
        if let Ok(ptr) = outcome {
            let offset = ptr as u64 - self.arena.base() as u64;
            let in_use_after = self.arena.bytes_in_use();
            self.record(start_ns, Event::Allocation { offset, size, in_use_after });
        }
        outcome
    }

    fn allocate_locked(&self, slot: &mut GuestSlot, size: u64) -> Result<*mut u8, Error> {
        if slot.disabled.is_none() {
            if let Some(offset) = slot.recycled.take(size) {
                // SAFETY: the block was committed in the arena (offset + size
                // within the region) and is still recorded there as live.
                return Ok(unsafe { self.arena.base().add(offset as usize) });
            }
        }
        match self.place(slot, size) {
            Err(Error::OutOfMemory { .. }) if slot.recycled.bytes > 0 => {
                self.return_recycled(slot);
                self.place(slot, size)
            }
            outcome => outcome,
        }
    }

    /// Asks the guest where `size` bytes go and checks the answer.
    fn place(&self, slot: &mut GuestSlot, size: u64) -> Result<*mut u8, Error> {
        let answer = self
            .guest_call(slot, "memory.allocate", |g, s| g.tfwasm_device_memory().call_allocate(s, size, ALIGNMENT))?;
        match answer {
            Ok(offset) => match self.arena.commit(offset, size) {
                Ok(ptr) => Ok(ptr),
                Err(placement) => {
                    let error = Error::GuestInvalid {
                        guest: self.guest().to_owned(),
                        call: "memory.allocate".into(),
                        reason: placement.to_string(),
                    };
                    self.replace_instance(slot, &error);
                    Err(error)
                }
            },
            Err(DeviceError::OutOfMemory(_)) => Err(Error::OutOfMemory {
                device: self.name.clone(),
                guest: self.guest().to_owned(),
                requested: size,
                in_use: self.arena.bytes_in_use(),
                limit: self.arena.len(),
            }),
            Err(other) => Err(self.refused("memory.allocate", other)),
        }
    }

    /// Frees the allocation at `ptr`: keeps it for reuse when the policy
    /// allows and there is room, else gives it back to the guest. The host
    /// record is authoritative: the block is released even if the guest
    /// objects (it then only leaks in the guest's view, which stays safe).
    pub fn deallocate(&self, ptr: *const u8) -> Result<(), Error> {
        let mut slot = self.slot.lock();
        let start_ns = if profiler::active() { profiler::now_ns() } else { 0 };
        let Some((offset, size)) = self.arena.lookup(ptr) else {
            return Err(Error::InvalidArgument(format!("{}: deallocate of unknown pointer {ptr:?}", self.name)));
        };
        if slot.recycled.offsets.contains(&offset) {
            return Err(Error::InvalidArgument(format!("{}: pointer {ptr:?} freed twice", self.name)));
        }
        if slot.disabled.is_none() && slot.recycled.bytes + size <= self.recycle_limit {
            slot.recycled.put(offset, size);
        } else {
            self.free_block(&mut slot, offset);
        }
        if start_ns != 0 {
            // Blocks the host keeps for reuse still count as in use: the
            // trace shows the region as the device holds it.
            let in_use_after = self.arena.bytes_in_use();
            self.record(start_ns, Event::Free { offset, size, in_use_after });
        }
        Ok(())
    }

    /// Keeps a record of `event`, from `start_ns` to now, on this thread.
    fn record(&self, start_ns: u64, event: Event) {
        profiler::record(Record {
            device: self.ordinal,
            thread: profiler::current_thread(),
            start_ns,
            end_ns: profiler::now_ns(),
            event,
        });
    }

    /// Releases the block at `offset` in the arena and tells the guest.
    fn free_block(&self, slot: &mut GuestSlot, offset: u64) {
        // SAFETY: `offset` came from the arena, so it lies inside the region.
        let ptr = unsafe { self.arena.base().add(offset as usize) };
        if self.arena.release(ptr).is_none() {
            unreachable!("{}: a block the host recorded as live is missing from the arena", self.name);
        }
        if slot.instance.is_some() {
            match self.guest_call(slot, "memory.free", |g, s| g.tfwasm_device_memory().call_free(s, offset)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("{}", self.refused("memory.free", e)),
                Err(e) => tracing::debug!("{e}"),
            }
        }
    }

    /// Gives every kept block back to the guest.
    fn return_recycled(&self, slot: &mut GuestSlot) {
        for offset in slot.recycled.drain() {
            self.free_block(slot, offset);
        }
    }

    /// Bytes of freed blocks the host keeps for reuse.
    pub fn recycled_bytes(&self) -> u64 {
        self.slot.lock().recycled.bytes
    }

    /// The guest's usage report if it gives a valid one, else what the host
    /// knows itself (the region's size and the bytes placed in it). Answers
    /// TensorFlow needs to start (it asks every device for its memory while
    /// it creates the eager context) must not depend on the guest's good
    /// will: a guest that loops there would keep TensorFlow from starting,
    /// its CPU device included.
    pub fn usage_or_host(&self) -> Usage {
        self.usage().unwrap_or_else(|error| {
            tracing::warn!("{error}; {} reports the host's own count of its memory instead", self.name);
            self.host_usage()
        })
    }

    /// The region as the host sees it: its size, and the bytes of the
    /// blocks placed in it (the host's recycled blocks included).
    pub fn host_usage(&self) -> Usage {
        let limit = self.arena.len();
        let bytes_in_use = self.arena.bytes_in_use();
        Usage {
            bytes_in_use,
            peak_bytes_in_use: bytes_in_use,
            num_allocs: 0,
            largest_alloc_size: 0,
            largest_free_block: limit.saturating_sub(bytes_in_use),
            limit,
        }
    }

    /// The guest's usage report, checked against the region.
    /// Kept blocks go back to the guest first, so the report is exact.
    pub fn usage(&self) -> Result<Usage, Error> {
        let mut slot = self.slot.lock();
        self.return_recycled(&mut slot);
        let usage = self.guest_call(&mut slot, "memory.usage", |g, s| g.tfwasm_device_memory().call_usage(s))?;
        let limit_ok = usage.limit <= self.arena.len();
        if !limit_ok || usage.bytes_in_use > usage.limit || usage.largest_free_block > usage.limit {
            let error = Error::GuestInvalid {
                guest: self.guest().to_owned(),
                call: "memory.usage".into(),
                reason: format!(
                    "in use {} / largest free {} / limit {} do not fit the {} byte region",
                    usage.bytes_in_use,
                    usage.largest_free_block,
                    usage.limit,
                    self.arena.len()
                ),
            };
            self.replace_instance(&mut slot, &error);
            return Err(error);
        }
        Ok(usage)
    }

    // --------------------------------------------------------------- streams

    pub fn create_stream(self: &Arc<Self>) -> Result<Handle, Error> {
        let handle = self.new_handle();
        let weak = Arc::downgrade(self);
        let queue = StreamQueue::start(
            handle,
            Box::new(move |queue, seq, at_ns, outcome| match weak.upgrade() {
                Some(device) => device.on_complete(queue, seq, at_ns, outcome),
                None => queue.mark_completed(seq, outcome),
            }),
        )
        .map_err(|e| Error::Internal(format!("cannot start a stream thread: {e}")))?;
        let mut slot = self.slot.lock();
        let guest_id = self.optional_guest_id(&mut slot, "streams.create-stream", |g, s| {
            g.tfwasm_device_streams().call_create_stream(s)
        });
        slot.streams.insert(handle, StreamRecord { queue, guest_id, required: Vec::new(), host_waits: Vec::new() });
        Ok(handle)
    }

    pub fn destroy_stream(&self, handle: Handle) {
        let Some(queue) = self.slot.lock().streams.get(&handle).map(|r| r.queue.clone()) else {
            tracing::warn!("{}: destroy of unknown stream {handle:#x}", self.name);
            return;
        };
        // Let queued work finish before the guest forgets the stream.
        queue.drain();
        let mut slot = self.slot.lock();
        if let Some(record) = slot.streams.remove(&handle) {
            if let Some(id) = record.guest_id {
                self.ignore_refusal(&mut slot, "streams.destroy-stream", |g, s| {
                    g.tfwasm_device_streams().call_destroy_stream(s, id)
                });
            }
        }
        drop(slot);
        queue.close();
    }

    /// Runs `work` on stream `handle` in the order the guest decides.
    /// `bytes` is the size of a copy or fill, `None` for other work; a copy
    /// or fill of at most [`INLINE_WORK_MAX_BYTES`] runs at once on the
    /// calling thread when the stream is idle.
    pub fn submit(&self, handle: Handle, kind: WorkKind, work: WorkFn, bytes: Option<u64>) -> Result<(), Error> {
        let mut work = work;
        if let (Some(path), Some(bytes)) = (Path::of(kind), bytes) {
            self.traffic.record(path, bytes);
            if profiler::active() {
                work = self.profiled(path, handle, bytes, work);
            }
        }
        let mut slot = self.slot.lock();
        let ordered = self.order(&mut slot, handle, "streams.submit", |g, s, id| {
            g.tfwasm_device_streams().call_submit(s, id, kind)
        })?;
        self.run_or_enqueue(&mut slot, ordered, work, bytes.is_some_and(|bytes| bytes <= INLINE_WORK_MAX_BYTES));
        Ok(())
    }

    /// Runs a copy or fill TensorFlow waits for (`sync_memcpy_*`) on the
    /// calling thread, counting its traffic.
    pub fn run_now(&self, path: Path, bytes: u64, work: WorkFn) -> Result<(), Error> {
        self.traffic.record(path, bytes);
        let work = if profiler::active() { self.profiled(path, 0, bytes, work) } else { work };
        work().map_err(Error::Stream)
    }

    /// `work`, recording when it runs as a copy or fill on `stream`.
    fn profiled(&self, path: Path, stream: Handle, bytes: u64, work: WorkFn) -> WorkFn {
        let device = self.ordinal;
        Box::new(move || profiler::span(device, || Event::Copy { path, stream, bytes }, work))
    }

    /// Runs `work` now if it is small and its stream idle (publishing the
    /// completion under the guest lock the caller holds), else queues it.
    fn run_or_enqueue(&self, slot: &mut GuestSlot, ordered: Ordered, work: WorkFn, small: bool) {
        let Ordered { queue, seq, after, .. } = ordered;
        let work = if small {
            match queue.run_if_idle(seq, &after, work) {
                Ok((at_ns, outcome)) => return self.publish_completion(slot, &queue, seq, at_ns, outcome),
                Err(work) => work,
            }
        } else {
            work
        };
        queue.enqueue(seq, after, work);
    }

    /// The queue behind a stream handle of this device.
    pub fn stream_queue(&self, handle: Handle) -> Result<Arc<StreamQueue>, Error> {
        let slot = self.slot.lock();
        slot.streams.get(&handle).map(|r| r.queue.clone()).ok_or_else(|| self.unknown("stream", handle))
    }

    /// `dependent` waits for everything submitted to `other` so far.
    /// `other` may belong to another device (TensorFlow's device-to-device
    /// copies make one device's stream wait on the other's); pass its queue.
    pub fn add_dependency(&self, dependent: Handle, other: Handle, other_queue: Arc<StreamQueue>) -> Result<(), Error> {
        let mut slot = self.slot.lock();
        let other_id = slot.streams.get(&other).and_then(|r| r.guest_id);
        let record = slot.streams.get(&dependent).ok_or_else(|| self.unknown("stream", dependent))?;
        let target = other_queue.submitted();
        let pending = target > other_queue.completed() && dependent != other;
        // The guest's tickets must carry only the waits it was told of.
        let told = match (record.guest_id, other_id) {
            (Some(a), Some(b)) => self.ignore_refusal(&mut slot, "streams.add-dependency", |g, s| {
                g.tfwasm_device_streams().call_add_dependency(s, a, b)
            }),
            _ => false,
        };
        if pending {
            let record = slot.streams.get_mut(&dependent).expect("checked above, under the same lock");
            match told {
                true => record.required.push((other_queue, target)),
                false => record.host_waits.push((other_queue, target)),
            }
        }
        Ok(())
    }

    /// `Err` with the first failure on the stream, if any.
    pub fn stream_status(&self, handle: Handle) -> Result<(), Error> {
        let mut slot = self.slot.lock();
        let record = slot.streams.get(&handle).ok_or_else(|| self.unknown("stream", handle))?;
        let host = record.queue.error();
        if let Some(id) = record.guest_id {
            if let Ok(Err(guest_message)) = self.guest_call(&mut slot, "streams.stream-status", |g, s| {
                g.tfwasm_device_streams().call_stream_status(s, id)
            }) {
                if host.is_none() {
                    let message = guest_text(&guest_message, MAX_REASON_CHARS);
                    tracing::warn!("{}: reports stream {handle:#x} failed: {message}", self.guest());
                }
            }
        }
        match host {
            Some(message) => Err(Error::Stream(format!("{}: stream {handle:#x} failed: {message}", self.name))),
            None => Ok(()),
        }
    }

    /// Blocks until all work submitted to the stream has run.
    pub fn block_until_done(&self, handle: Handle) -> Result<(), Error> {
        let queue = self.slot.lock().streams.get(&handle).map(|r| r.queue.clone());
        queue.ok_or_else(|| self.unknown("stream", handle))?.drain();
        Ok(())
    }

    pub fn synchronize_all(&self) {
        let queues: Vec<_> = self.slot.lock().streams.values().map(|r| r.queue.clone()).collect();
        for queue in queues {
            queue.drain();
        }
    }

    // ---------------------------------------------------------------- events

    pub fn create_event(&self) -> Result<Handle, Error> {
        let handle = self.new_handle();
        let mut slot = self.slot.lock();
        let guest_id = self.optional_guest_id(&mut slot, "streams.create-event", |g, s| {
            g.tfwasm_device_streams().call_create_event(s)
        });
        slot.events.insert(handle, EventRecord { guest_id, marker: None, guest_recorded: false });
        Ok(handle)
    }

    pub fn destroy_event(&self, handle: Handle) {
        let mut slot = self.slot.lock();
        if let Some(EventRecord { guest_id: Some(id), .. }) = slot.events.remove(&handle) {
            self.ignore_refusal(&mut slot, "streams.destroy-event", |g, s| {
                g.tfwasm_device_streams().call_destroy_event(s, id)
            });
        }
    }

    pub fn record_event(&self, stream: Handle, event: Handle) -> Result<(), Error> {
        let mut slot = self.slot.lock();
        let event_id = slot.events.get(&event).ok_or_else(|| self.unknown("event", event))?.guest_id;
        // An event the guest does not know (made before its instance, or
        // one it declined to make) still gets its marker ordered by the
        // guest on a stream the guest orders: a seq the host took for
        // itself there would be the one the guest hands out next, and the
        // host would refuse that honest ticket as a bad seq.
        let ordered = match event_id {
            Some(event_id) => self.order(&mut slot, stream, "streams.record-event", |g, s, id| {
                g.tfwasm_device_streams().call_record_event(s, id, event_id)
            })?,
            None => self.order(&mut slot, stream, "streams.submit", |g, s, id| {
                g.tfwasm_device_streams().call_submit(s, id, WorkKind::EventMarker)
            })?,
        };
        let (queue, seq, by_guest) = (ordered.queue.clone(), ordered.seq, ordered.by_guest);
        self.run_or_enqueue(&mut slot, ordered, Box::new(|| Ok(())), true);
        if let Some(record) = slot.events.get_mut(&event) {
            record.marker = Some((queue, seq));
            record.guest_recorded = by_guest && event_id.is_some();
        }
        Ok(())
    }

    pub fn wait_for_event(&self, stream: Handle, event: Handle) -> Result<(), Error> {
        let mut slot = self.slot.lock();
        let record = slot.events.get(&event).ok_or_else(|| self.unknown("event", event))?;
        let (marker, event_id, guest_recorded) = (record.marker.clone(), record.guest_id, record.guest_recorded);
        let stream_id = slot.streams.get(&stream).ok_or_else(|| self.unknown("stream", stream))?.guest_id;
        // The guest knows the wait only if it ordered the event's marker.
        let told = match (stream_id, event_id) {
            (Some(s_id), Some(e_id)) => {
                let agreed = self.ignore_refusal(&mut slot, "streams.wait-event", |g, s| {
                    g.tfwasm_device_streams().call_wait_event(s, s_id, e_id)
                });
                agreed && guest_recorded
            }
            _ => false,
        };
        if let Some((queue, seq)) = marker {
            if queue.completed() < seq && queue.id != stream {
                let record = slot.streams.get_mut(&stream).expect("checked above, under the same lock");
                match told {
                    true => record.required.push((queue, seq)),
                    false => record.host_waits.push((queue, seq)),
                }
            }
        }
        Ok(())
    }

    /// The event's state as the guest reports it, checked against the host's
    /// own record of the marker's completion.
    pub fn event_status(&self, event: Handle) -> Result<EventStatus, Error> {
        let mut slot = self.slot.lock();
        let record = slot.events.get(&event).ok_or_else(|| self.unknown("event", event))?;
        let host = match &record.marker {
            None => EventStatus::Unknown,
            Some((queue, seq)) if queue.completed() >= *seq => match queue.error() {
                Some(_) => EventStatus::Error,
                None => EventStatus::Complete,
            },
            Some(_) => EventStatus::Pending,
        };
        // Only an event whose marker the guest ordered has a state it can know.
        let Some(id) = record.guest_id.filter(|_| record.guest_recorded || record.marker.is_none()) else {
            return Ok(host);
        };
        let Ok(guest) = self
            .guest_call(&mut slot, "streams.event-status", |g, s| g.tfwasm_device_streams().call_event_status(s, id))
        else {
            return Ok(host);
        };
        let terminal = |s: EventStatus| matches!(s, EventStatus::Complete | EventStatus::Error);
        let consistent = guest == host || (terminal(guest) && terminal(host));
        if !consistent {
            let error = Error::GuestInvalid {
                guest: self.guest().to_owned(),
                call: "streams.event-status".into(),
                reason: format!("reported {guest:?} for an event the host sees as {host:?}"),
            };
            self.replace_instance(&mut slot, &error);
        }
        Ok(host)
    }

    /// Blocks until the event's marker has run.
    pub fn block_for_event(&self, event: Handle) -> Result<(), Error> {
        let marker = {
            let slot = self.slot.lock();
            slot.events.get(&event).ok_or_else(|| self.unknown("event", event))?.marker.clone()
        };
        if let Some((queue, seq)) = marker {
            queue.wait_for(seq);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- timers

    pub fn create_timer(&self) -> Result<Handle, Error> {
        let handle = self.new_handle();
        let mut slot = self.slot.lock();
        let guest_id = self.optional_guest_id(&mut slot, "streams.create-timer", |g, s| {
            g.tfwasm_device_streams().call_create_timer(s)
        });
        slot.timers.insert(handle, TimerRecord { guest_id, start: None, stop: None, times: Default::default() });
        Ok(handle)
    }

    pub fn destroy_timer(&self, handle: Handle) {
        let mut slot = self.slot.lock();
        if let Some(TimerRecord { guest_id: Some(id), .. }) = slot.timers.remove(&handle) {
            self.ignore_refusal(&mut slot, "streams.destroy-timer", |g, s| {
                g.tfwasm_device_streams().call_destroy_timer(s, id)
            });
        }
    }

    /// Starts (`start`) or stops the timer once the stream's earlier work ran.
    pub fn mark_timer(&self, stream: Handle, timer: Handle, start: bool) -> Result<(), Error> {
        let mut slot = self.slot.lock();
        let timer_id = slot.timers.get(&timer).ok_or_else(|| self.unknown("timer", timer))?.guest_id;
        // As for events (`record_event`): the guest orders the marker of a
        // timer it does not know as plain work.
        let Ordered { queue, seq, after, .. } = match timer_id {
            Some(timer_id) => self.order(&mut slot, stream, "streams.mark-timer", |g, s, id| {
                g.tfwasm_device_streams().call_mark_timer(s, id, timer_id, start)
            })?,
            None => self.order(&mut slot, stream, "streams.submit", |g, s, id| {
                g.tfwasm_device_streams().call_submit(s, id, WorkKind::TimerMarker)
            })?,
        };
        let record = slot.timers.get_mut(&timer).expect("checked above, under the same lock");
        let times = record.times.clone();
        let index = usize::from(!start);
        if start {
            record.start = Some((queue.clone(), seq));
            record.stop = None;
            *times.lock() = [None, None];
        } else {
            record.stop = Some((queue.clone(), seq));
        }
        queue.enqueue(
            seq,
            after,
            Box::new(move || {
                times.lock()[index] = Some(crate::sandbox::monotonic_ns());
                Ok(())
            }),
        );
        Ok(())
    }

    /// Nanoseconds between the timer's markers; 0 until both ran.
    pub fn timer_nanoseconds(&self, timer: Handle) -> Result<u64, Error> {
        let mut slot = self.slot.lock();
        let record = slot.timers.get(&timer).ok_or_else(|| self.unknown("timer", timer))?;
        let done = |m: &Option<(Arc<StreamQueue>, u64)>| m.as_ref().is_some_and(|(q, seq)| q.completed() >= *seq);
        let both_ran = done(&record.start) && done(&record.stop);
        let host = match *record.times.lock() {
            [Some(a), Some(b)] if both_ran => Some(b.saturating_sub(a)),
            _ => None,
        };
        let Some(id) = record.guest_id else { return Ok(host.unwrap_or(0)) };
        match self
            .guest_call(&mut slot, "streams.timer-elapsed", |g, s| g.tfwasm_device_streams().call_timer_elapsed(s, id))
        {
            Ok(Some(elapsed)) if both_ran => Ok(elapsed),
            Ok(Some(_)) => {
                let error = Error::GuestInvalid {
                    guest: self.guest().to_owned(),
                    call: "streams.timer-elapsed".into(),
                    reason: "reported an elapsed time before both timer markers ran".into(),
                };
                self.replace_instance(&mut slot, &error);
                Ok(0)
            }
            _ => Ok(host.unwrap_or(0)),
        }
    }

    // -------------------------------------------------------------- internals

    /// Called on a stream thread after a job ran: tell the guest and publish
    /// the completion under the guest lock, so the two views never disagree.
    fn on_complete(&self, queue: &StreamQueue, seq: u64, at_ns: u64, outcome: Result<(), String>) {
        let mut slot = self.slot.lock();
        self.publish_completion(&mut slot, queue, seq, at_ns, outcome);
    }

    /// Tells the guest that `seq` ran and publishes it to the host.
    fn publish_completion(
        &self,
        slot: &mut GuestSlot,
        queue: &StreamQueue,
        seq: u64,
        at_ns: u64,
        outcome: Result<(), String>,
    ) {
        if let Err(message) = &outcome {
            tracing::error!("{}: work {seq} on stream {:#x} failed: {message}", self.name, queue.id);
        }
        if let Some(id) = slot.streams.get(&queue.id).and_then(|r| r.guest_id) {
            let ok = outcome.is_ok();
            if let Err(e) = self.guest_call(slot, "streams.complete", |g, s| {
                g.tfwasm_device_streams().call_complete(s, id, seq, at_ns, ok)
            }) {
                tracing::debug!("{e}");
            }
        }
        queue.mark_completed(seq, outcome);
    }

    /// Asks the guest to order a piece of work on `stream` and checks the
    /// ticket; falls back to host order when the guest cannot answer.
    fn order(
        &self,
        slot: &mut GuestSlot,
        stream: Handle,
        call: &str,
        ask: impl FnOnce(
            &crate::sandbox::Device,
            &mut wasmtime::Store<crate::sandbox::GuestState>,
            u64,
        ) -> wasmtime::Result<Result<Ticket, DeviceError>>,
    ) -> Result<Ordered, Error> {
        let record = slot.streams.get_mut(&stream).ok_or_else(|| self.unknown("stream", stream))?;
        let required = std::mem::take(&mut record.required);
        let host_waits = std::mem::take(&mut record.host_waits);
        let queue = record.queue.clone();
        let guest_id = record.guest_id;
        // Waits on another device's streams are beyond the guest's view (its
        // ids are per instance): the host always adds those itself, as it
        // does the waits the guest was not told of.
        let (local, mut foreign): (Vec<_>, Vec<_>) =
            required.into_iter().partition(|(q, _)| ordinal_of(q.id) == self.ordinal);
        foreign.extend(host_waits);
        let host_order = |mut after: Vec<(Arc<StreamQueue>, u64)>, foreign: Vec<(Arc<StreamQueue>, u64)>| {
            after.extend(foreign);
            Ordered { seq: queue.submitted() + 1, after, queue: queue.clone(), by_guest: false }
        };
        let Some(id) = guest_id else {
            return Ok(host_order(local, foreign));
        };
        let answer = self.guest_call(slot, call, |g, s| ask(g, s, id));
        let ticket = match answer {
            Ok(Ok(ticket)) => ticket,
            Ok(Err(refusal)) => {
                // The guest refuses to order this work; TF must still make
                // progress. The host now owns this stream's sequence (the
                // guest cannot learn the seq the host used), so it orders the
                // stream from here on instead of blaming the guest later.
                tracing::warn!("{}; the host orders stream {stream:#x} from now on", self.refused(call, refusal));
                if let Some(record) = slot.streams.get_mut(&stream) {
                    record.guest_id = None;
                }
                return Ok(host_order(local, foreign));
            }
            Err(_) => return Ok(host_order(local, foreign)),
        };
        match self.check_ticket(slot, &queue, &ticket, &local) {
            Ok(mut after) => {
                after.extend(foreign);
                Ok(Ordered { seq: ticket.seq, after, queue, by_guest: true })
            }
            Err(reason) => {
                let error = Error::GuestInvalid { guest: self.guest().to_owned(), call: call.to_owned(), reason };
                self.replace_instance(slot, &error);
                Ok(host_order(local, foreign))
            }
        }
    }

    /// A ticket is valid if its seq moves the stream forward, every
    /// dependency names work already submitted, and it honours every
    /// dependency TensorFlow asked for.
    fn check_ticket(
        &self,
        slot: &GuestSlot,
        queue: &Arc<StreamQueue>,
        ticket: &Ticket,
        required: &[(Arc<StreamQueue>, u64)],
    ) -> Result<Vec<(Arc<StreamQueue>, u64)>, String> {
        let last = queue.submitted();
        if ticket.seq <= last {
            return Err(format!("seq {} does not follow the stream's last seq {last} (bad seq)", ticket.seq));
        }
        if ticket.seq - last > MAX_SEQ_STEP {
            return Err(format!(
                "seq {} jumps more than {MAX_SEQ_STEP} past the stream's last seq {last} (bad seq)",
                ticket.seq
            ));
        }
        let mut after: Vec<(Arc<StreamQueue>, u64)> = Vec::new();
        for dep in &ticket.after {
            let other = slot
                .streams
                .values()
                .find(|r| r.guest_id == Some(dep.stream))
                .map(|r| r.queue.clone())
                .ok_or_else(|| format!("dependency on unknown stream {}", dep.stream))?;
            if Arc::ptr_eq(&other, queue) {
                if dep.seq >= ticket.seq {
                    return Err(format!("seq {} depends on its own later work {}", ticket.seq, dep.seq));
                }
                continue;
            }
            let submitted = other.submitted();
            if dep.seq > submitted {
                return Err(format!(
                    "dependency on seq {} of stream {} which has only {submitted} submitted (a dangling dependency would hang)",
                    dep.seq, dep.stream
                ));
            }
            // One wait per stream, on its latest seq: the others are implied,
            // and a guest that repeats a dependency a million times must not
            // make the host keep a million of them per piece of work.
            match after.iter_mut().find(|(q, _)| Arc::ptr_eq(q, &other)) {
                Some((_, seq)) => *seq = (*seq).max(dep.seq),
                None => after.push((other, dep.seq)),
            }
        }
        for (queue, seq) in required {
            let honoured = queue.completed() >= *seq || after.iter().any(|(q, s)| Arc::ptr_eq(q, queue) && s >= seq);
            if !honoured {
                return Err(format!("ticket ignores a required wait for seq {seq} on stream {:#x}", queue.id));
            }
        }
        Ok(after)
    }

    /// Runs one call on the live instance; a fault replaces the instance.
    fn guest_call<R>(
        &self,
        slot: &mut GuestSlot,
        call: &str,
        body: impl FnOnce(&crate::sandbox::Device, &mut wasmtime::Store<crate::sandbox::GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        if let Some(reason) = &slot.disabled {
            return Err(Error::DeviceDisabled { device: self.name.clone(), reason: reason.clone() });
        }
        let Some(instance) = slot.instance.as_mut() else {
            return Err(Error::Internal(format!("{}: no guest instance", self.name)));
        };
        let outcome = profiler::span(
            self.ordinal,
            || Event::GuestCall { call: call.into() },
            || instance.with_bindings(call, body),
        );
        match outcome {
            Ok(value) => Ok(value),
            Err(error) => {
                if error.is_guest_fault() {
                    self.replace_instance(slot, &error);
                }
                Err(error)
            }
        }
    }

    /// Creates a guest-side object; `None` (host-managed) if the guest cannot.
    fn optional_guest_id(
        &self,
        slot: &mut GuestSlot,
        call: &str,
        body: impl FnOnce(
            &crate::sandbox::Device,
            &mut wasmtime::Store<crate::sandbox::GuestState>,
        ) -> wasmtime::Result<Result<u64, DeviceError>>,
    ) -> Option<u64> {
        match self.guest_call(slot, call, body) {
            Ok(Ok(id)) => Some(id),
            Ok(Err(refusal)) => {
                tracing::warn!("{}; the host manages it instead", self.refused(call, refusal));
                None
            }
            Err(_) => None,
        }
    }

    /// A call whose refusal only needs logging; true if the guest agreed.
    fn ignore_refusal(
        &self,
        slot: &mut GuestSlot,
        call: &str,
        body: impl FnOnce(
            &crate::sandbox::Device,
            &mut wasmtime::Store<crate::sandbox::GuestState>,
        ) -> wasmtime::Result<Result<(), DeviceError>>,
    ) -> bool {
        match self.guest_call(slot, call, body) {
            Ok(Ok(())) => true,
            Ok(Err(refusal)) => {
                tracing::warn!("{}", self.refused(call, refusal));
                false
            }
            Err(e) => {
                tracing::debug!("{e}");
                false
            }
        }
    }

    /// Throws away a faulty instance and starts a fresh one that adopts the
    /// live allocations. Objects of the old instance become host-managed.
    fn replace_instance(&self, slot: &mut GuestSlot, fault: &Error) {
        if let Some(instance) = slot.instance.as_mut() {
            instance.retire(fault.clone());
        }
        for record in slot.streams.values_mut() {
            record.guest_id = None;
        }
        for record in slot.events.values_mut() {
            record.guest_id = None;
        }
        for record in slot.timers.values_mut() {
            record.guest_id = None;
        }
        slot.replacements += 1;
        slot.last_fault = Some(fault.clone());
        let fault_at = profiler::now_ns();
        let record_fault = |outcome: String| {
            if profiler::active() {
                let event = Event::Fault {
                    guest: self.guest().into(),
                    reason: fault.to_string().into(),
                    outcome: outcome.into(),
                };
                self.record(fault_at, event);
            }
        };
        if slot.replacements > MAX_REPLACEMENTS {
            let reason = format!(
                "{} failed {} times; last: {fault}. Fix the guest or its policy and restart the process",
                self.guest(),
                slot.replacements
            );
            tracing::error!("tfwasm: {} is disabled: {reason}", self.name);
            record_fault(format!("device disabled: {reason}"));
            slot.instance = None;
            slot.disabled = Some(reason);
            return;
        }
        tracing::error!(
            "{fault}; {} replaces the instance (replacement {} of at most {MAX_REPLACEMENTS})",
            self.name,
            slot.replacements
        );
        let fresh = self.program.instantiate().and_then(|mut instance| {
            init_instance(&mut instance, &self.config)?;
            let live = self.arena.live();
            match instance.with_bindings("memory.adopt", |g, s| g.tfwasm_device_memory().call_adopt(s, &live))? {
                Ok(()) => Ok(instance),
                Err(e) => Err(self.refused("memory.adopt", e)),
            }
        });
        match fresh {
            Ok(instance) => {
                record_fault(format!(
                    "instance replaced (replacement {} of at most {MAX_REPLACEMENTS})",
                    slot.replacements
                ));
                slot.instance = Some(instance);
            }
            Err(error) => {
                let reason = format!("could not replace the faulty instance of {}: {error}", self.guest());
                tracing::error!("tfwasm: {} is disabled: {reason}", self.name);
                record_fault(format!("device disabled: {reason}"));
                slot.instance = None;
                slot.disabled = Some(reason);
            }
        }
    }

    fn refused(&self, call: &str, error: DeviceError) -> Error {
        let reason = match error {
            DeviceError::OutOfMemory(n) => format!("out of memory for {n} bytes"),
            DeviceError::UnknownHandle(h) => format!("unknown handle {h}"),
            DeviceError::InvalidArgument(m) => format!("invalid argument: {}", guest_text(&m, MAX_REASON_CHARS)),
            DeviceError::Internal(m) => guest_text(&m, MAX_REASON_CHARS),
        };
        Error::GuestRefused { guest: self.guest().to_owned(), call: call.to_owned(), reason }
    }

    fn unknown(&self, what: &str, handle: Handle) -> Error {
        Error::InvalidArgument(format!("{}: unknown {what} handle {handle:#x}", self.name))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        for record in self.slot.get_mut().streams.values() {
            record.queue.close();
        }
    }
}

/// Calls the guest's `init` and checks what it says about itself.
fn init_instance(instance: &mut GuestInstance, config: &DeviceConfig) -> Result<DeviceInfo, Error> {
    instance.annotate_for(config.ordinal);
    let guest = instance.label().to_owned();
    let info = instance
        .with_bindings("identity.init", |g, s| g.tfwasm_device_identity().call_init(s, config))?
        .map_err(|reason| Error::GuestLoad {
            guest: guest.clone(),
            reason: format!("init refused: {}", guest_text(&reason, MAX_REASON_CHARS)),
        })?;
    let invalid = |reason: String| Error::GuestInvalid { guest: guest.clone(), call: "identity.init".into(), reason };
    for (field, value) in
        [("hardware-name", &info.hardware_name), ("vendor", &info.vendor), ("pci-bus-id", &info.pci_bus_id)]
    {
        if value.len() > 256 || value.contains('\0') {
            return Err(invalid(format!("{field} must be at most 256 bytes without NUL")));
        }
    }
    if !info.gflops.is_finite() || info.gflops < 0.0 {
        return Err(invalid(format!("gflops {} is not a finite non-negative number", info.gflops)));
    }
    Ok(info)
}

fn c_string(value: &str) -> CString {
    CString::new(value).unwrap_or_default()
}

/// Every device of the process, set up once from the policy.
#[derive(Debug)]
pub struct Platform {
    pub devices: Vec<Arc<Device>>,
    /// Why there are no devices, when there are none.
    pub failure: Option<Error>,
}

impl Platform {
    /// Starts one guest instance per device of `policy` (or of the error
    /// that loading it gave), and takes its `[profiler]` section. Never
    /// fails: a broken setup yields a platform with zero devices and the
    /// reason, logged once.
    pub fn from_policy(policy: Result<Policy, Error>, device_type: &str) -> Platform {
        if let Ok(policy) = &policy {
            profiler::configure(&policy.profiler);
        }
        match policy.and_then(|policy| Platform::start(&policy, device_type)) {
            Ok(devices) => Platform { devices, failure: None },
            Err(error) => {
                tracing::error!("{error}. TensorFlow continues without {device_type} devices.");
                Platform { devices: Vec::new(), failure: Some(error) }
            }
        }
    }

    /// Starts `policy.device.count` devices running the policy's guest.
    pub fn start(policy: &Policy, device_type: &str) -> Result<Vec<Arc<Device>>, Error> {
        let program = GuestProgram::load(policy)?;
        (0..policy.device.count).map(|ordinal| Device::new(&program, device_type, ordinal)).collect()
    }

    pub fn device(&self, ordinal: u32) -> Option<&Arc<Device>> {
        self.devices.get(ordinal as usize)
    }

    /// True if `[ptr, ptr + len)` lies in some device's region.
    pub fn owns(&self, ptr: *const u8, len: u64) -> bool {
        self.devices.iter().any(|d| d.arena().contains(ptr, len))
    }
}
