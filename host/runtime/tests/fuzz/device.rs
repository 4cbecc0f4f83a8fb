//! Real devices running a guest that lies at random (`guest/fuzz-device`).
//!
//! A case is a device (its ordinal seeds the guest's lies) and a sequence
//! of what TensorFlow asks of it: allocations and frees, streams and work
//! on them (some run at once, some queue behind slow work), events
//! recorded, waited on and polled, dependencies, timers, usage reports.
//! The guest logs each lie before it tells it; the test counts those
//! lines, and after every step checks that:
//!
//! - the guest's instance was replaced exactly once per lie, and never
//!   for an honest answer (the device is disabled, by design, after
//!   `MAX_REPLACEMENTS` lies: from then on the guest is not asked);
//! - every allocation the host accepted is inside the region, aligned and
//!   disjoint from every live one, and the host's record of what is live
//!   is the model's, refusals and replacements included;
//! - nothing hangs: every stream drains within a bound, every piece of
//!   work ran exactly once, and every recorded event is complete after.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use tfwasm_runtime::device::{Device, WorkFn, ALIGNMENT, MAX_REPLACEMENTS};
use tfwasm_runtime::policy::Policy;
use tfwasm_runtime::sandbox::{EventStatus, GuestProgram, WorkKind};
use tfwasm_runtime::Error;

/// Size of each device's region: small, so that allocations run out.
const MEMORY: u64 = (1 << 20) + 100;

/// How long a stream may take to drain. Its work sleeps at most a
/// millisecond per piece: hitting this is a hang.
const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// Builds `guest/fuzz-device` (once per test run) and returns its path.
fn fuzz_guest() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .current_dir(&workspace)
                .args(["build", "--quiet", "--target", "wasm32-wasip2", "--profile", "guest"])
                .args(["-p", "tfwasm-fuzz-device"])
                .status()
                .expect("run cargo to build the fuzz guest");
            assert!(status.success(), "building guest/fuzz-device failed");
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace.join("target"), PathBuf::from);
            let path = target.join("wasm32-wasip2/guest/tfwasm_fuzz_device.wasm");
            assert!(path.exists(), "{} was not built", path.display());
            path
        })
        .clone()
}

/// The guest loaded with `lie-rate` `rate` (index into [`RATES`]).
fn program(rate: usize) -> Arc<GuestProgram> {
    static PROGRAMS: OnceLock<Vec<Arc<GuestProgram>>> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        RATES
            .iter()
            .map(|rate| {
                let mut policy = Policy::for_guest("fuzz-device", fuzz_guest());
                policy.device.memory_bytes = MEMORY;
                policy.device.recycle_bytes = 0;
                policy.device.huge_pages = false;
                policy.guest.config.insert("seed".into(), toml::Value::Integer(20_240_611));
                policy.guest.config.insert("lie-rate".into(), toml::Value::String(rate.to_string()));
                unbudgeted_log(&mut policy);
                GuestProgram::load(&policy).expect("the fuzz guest loads")
            })
            .collect()
    })[rate]
        .clone()
}

/// The guest confesses every lie in a log line the test counts, thousands a
/// second: the policy's log budget, which would drop some, is lifted.
fn unbudgeted_log(policy: &mut Policy) {
    policy.limits.log_lines_per_call = u32::MAX;
    policy.limits.log_bytes_per_call = u64::MAX;
    policy.limits.log_lines_per_second = u32::MAX;
    policy.limits.log_bytes_per_second = u64::MAX;
}

/// A device whose guest lies in every `allocate` and nowhere else: one
/// allocation replaces its instance, on purpose.
fn lies_in_allocate_only(ordinal: u32) -> Arc<Device> {
    let mut policy = Policy::for_guest("fuzz-device", fuzz_guest());
    policy.device.memory_bytes = MEMORY;
    policy.device.huge_pages = false;
    policy.guest.config.insert("lie-rate".into(), toml::Value::String("1".into()));
    policy.guest.config.insert("lie-in".into(), toml::Value::String("allocate".into()));
    unbudgeted_log(&mut policy);
    let program = GuestProgram::load(&policy).expect("the fuzz guest loads");
    Device::new(&program, "WASM", ordinal).expect("the device starts")
}

/// Work that holds its stream for a while, so later work queues behind it.
fn slow_work() -> WorkFn {
    Box::new(|| {
        std::thread::sleep(Duration::from_millis(50));
        Ok(())
    })
}

/// The tests here run guests that log, one at a time: `tracing` caches
/// whether a log call site has a listener, and a guest logging on another
/// test's thread while the confessions subscriber is being installed can
/// leave that cache saying "nobody listens" (seen on a fresh build: every
/// confession lost, every lie taken for an honest answer).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn markers_of_objects_the_guest_does_not_know_keep_its_seqs() {
    let _serial = one_at_a_time();
    // Found by the fuzz test below: an event (or timer) made before a
    // replacement, recorded on a stream made after it, got a seq the host
    // chose without telling the guest, which then handed out the same seq
    // for the next work and was replaced for it.
    let device = lies_in_allocate_only(1);
    let (event, timer) = (device.create_event().unwrap(), device.create_timer().unwrap());
    assert!(matches!(device.allocate(256), Err(Error::GuestInvalid { .. })));
    assert_eq!(device.replacements(), 1);
    let stream = device.create_stream().unwrap();
    device.submit(stream, WorkKind::HostCallback, slow_work(), None).unwrap();
    device.record_event(stream, event).unwrap();
    device.mark_timer(stream, timer, true).unwrap();
    device.submit(stream, WorkKind::CopyHostToDevice, Box::new(|| Ok(())), Some(64)).unwrap();
    device.block_until_done(stream).unwrap();
    assert_eq!(device.replacements(), 1, "{:?}", device.last_fault());
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Complete);
}

#[test]
fn waits_the_guest_was_never_told_of_are_the_hosts() {
    let _serial = one_at_a_time();
    // Found by the fuzz test below: a stream made after a replacement was
    // made to wait on one the guest no longer knows; the guest's ticket
    // could not carry that wait, and the host replaced it for leaving it out.
    let device = lies_in_allocate_only(2);
    let old = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    assert!(matches!(device.allocate(256), Err(Error::GuestInvalid { .. })));
    let new = device.create_stream().unwrap();
    device.submit(old, WorkKind::HostCallback, slow_work(), None).unwrap();
    device.record_event(old, event).unwrap();
    device.add_dependency(new, old, device.stream_queue(old).unwrap()).unwrap();
    device.wait_for_event(new, event).unwrap();
    let ran_after = Arc::new(AtomicU64::new(0));
    let (old_queue, flag) = (device.stream_queue(old).unwrap(), ran_after.clone());
    let work: WorkFn = Box::new(move || {
        // The host still orders it after the work it waits for.
        flag.store(u64::from(old_queue.completed() >= 2), Ordering::SeqCst);
        Ok(())
    });
    device.submit(new, WorkKind::HostCallback, work, None).unwrap();
    device.block_until_done(new).unwrap();
    assert_eq!(device.replacements(), 1, "{:?}", device.last_fault());
    assert_eq!(ran_after.load(Ordering::SeqCst), 1, "the work ran before what it waited for");
}

/// Lie rates: rare (long honest stretches between lies, deep states) and
/// frequent (replacement after replacement, then a disabled device).
const RATES: [f64; 2] = [0.04, 0.3];

/// The lies the guest confessed on this thread since the last
/// [`Confessions::take`], and the host's reasons for replacing instances
/// (to say why, when the two disagree).
#[derive(Clone, Default)]
struct Confessions(Arc<Mutex<Vec<String>>>, Arc<Mutex<Vec<String>>>);

impl Confessions {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn faults(&self) -> Vec<String> {
        std::mem::take(&mut *self.1.lock().unwrap())
    }
}

/// Keeps the guest's `lie: ...` log lines, which the sandbox logs as
/// `<guest>: lie: <call> <kind>`.
impl tracing::Subscriber for Confessions {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if let Some(at) = message.0.find(": lie: ") {
            self.0.lock().unwrap().push(message.0[at + ": lie: ".len()..].to_owned());
        } else if message.0.contains("replaces the instance") {
            self.1.lock().unwrap().push(message.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[derive(Debug, Clone)]
enum Op {
    Allocate(u64),
    Free(Index),
    FreeUnknown(u64),
    CreateStream,
    DestroyStream(Index),
    /// Work on a stream: a small copy (runs at once on an idle stream) or a
    /// callback (queued), which `slow` makes sleep so later work waits.
    Submit {
        stream: Index,
        copy: bool,
        slow: bool,
    },
    CreateEvent,
    RecordEvent(Index, Index),
    WaitEvent(Index, Index),
    EventStatus(Index),
    AddDependency(Index, Index),
    BlockUntilDone(Index),
    Usage,
    CreateTimer,
    MarkTimer(Index, Index, bool),
    TimerNanoseconds(Index),
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![4 => 1u64..4096, 2 => 4096u64..1 << 17, 1 => (1u64 << 17)..MEMORY + 1];
    prop_oneof![
        6 => size.prop_map(Op::Allocate),
        4 => any::<Index>().prop_map(Op::Free),
        1 => any::<u64>().prop_map(Op::FreeUnknown),
        2 => Just(Op::CreateStream),
        1 => any::<Index>().prop_map(Op::DestroyStream),
        8 => (any::<Index>(), any::<bool>(), prop::bool::weighted(0.3))
            .prop_map(|(stream, copy, slow)| Op::Submit { stream, copy, slow }),
        2 => Just(Op::CreateEvent),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(s, e)| Op::RecordEvent(s, e)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(s, e)| Op::WaitEvent(s, e)),
        3 => any::<Index>().prop_map(Op::EventStatus),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Op::AddDependency(a, b)),
        1 => any::<Index>().prop_map(Op::BlockUntilDone),
        2 => Just(Op::Usage),
        1 => Just(Op::CreateTimer),
        1 => (any::<Index>(), any::<Index>(), any::<bool>()).prop_map(|(s, t, start)| Op::MarkTimer(s, t, start)),
        1 => any::<Index>().prop_map(Op::TimerNanoseconds),
    ]
}

/// A stream as the test knows it: its handle, and how many pieces of work
/// were submitted to it and have run.
struct Stream {
    handle: u64,
    submitted: u64,
    ran: Arc<AtomicU64>,
}

/// What the test expects of a device: the live allocations (offset →
/// size), its streams, and its events with the stream each was last
/// recorded on.
#[derive(Default)]
struct Model {
    live: BTreeMap<u64, u64>,
    streams: Vec<Stream>,
    events: Vec<(u64, Option<u64>)>,
    timers: Vec<u64>,
}

fn pick<'a, T>(items: &'a [T], index: &Index) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[index.index(items.len())])
}

/// Blocks until `handle` drained, failing the case if that takes longer
/// than [`DRAIN_LIMIT`].
fn drain(device: &Arc<Device>, handle: u64) -> Result<(), TestCaseError> {
    let (done, result) = mpsc::channel();
    let device = device.clone();
    std::thread::spawn(move || {
        let _ = done.send(device.block_until_done(handle));
    });
    match result.recv_timeout(DRAIN_LIMIT) {
        Ok(outcome) => outcome.map_err(|e| TestCaseError::fail(format!("drain of {handle:#x}: {e}"))),
        Err(_) => Err(TestCaseError::fail(format!("stream {handle:#x} did not drain within {DRAIN_LIMIT:?}"))),
    }
}

/// One step; checks what its answer must be. `lied`: the guest confessed
/// a lie during the step.
fn step(device: &Arc<Device>, model: &mut Model, op: &Op, lied: impl Fn() -> bool) -> Result<(), TestCaseError> {
    let base = device.arena().base() as u64;
    match op {
        Op::Allocate(size) => match device.allocate(*size) {
            Ok(ptr) => {
                let offset = (ptr as u64).wrapping_sub(base);
                prop_assert!(
                    offset.checked_add(*size).is_some_and(|end| end <= MEMORY),
                    "[{offset}, +{size}) accepted"
                );
                prop_assert_eq!(offset % ALIGNMENT, 0, "offset {} accepted", offset);
                let overlapping = model.live.iter().find(|(&o, &s)| o < offset + size && offset < o + s);
                prop_assert!(overlapping.is_none(), "[{offset}, +{size}) accepted over {overlapping:?}");
                model.live.insert(offset, *size);
            }
            Err(Error::GuestInvalid { .. }) => prop_assert!(lied(), "an honest placement was refused"),
            Err(Error::OutOfMemory { .. } | Error::DeviceDisabled { .. }) => {}
            Err(other) => return Err(TestCaseError::fail(format!("allocate: {other}"))),
        },
        Op::Free(index) => {
            if let Some((&offset, _)) = pick(&model.live.iter().collect::<Vec<_>>(), index).copied() {
                device.deallocate((base + offset) as *const u8).map_err(|e| TestCaseError::fail(e.to_string()))?;
                model.live.remove(&offset);
            }
        }
        Op::FreeUnknown(offset) => {
            // Not the start of a live block: refused, and nothing changes.
            if !model.live.contains_key(&(offset % MEMORY)) {
                let outcome = device.deallocate((base + offset % MEMORY) as *const u8);
                prop_assert!(matches!(outcome, Err(Error::InvalidArgument(_))), "{outcome:?}");
            }
        }
        Op::CreateStream => {
            let handle = device.create_stream().map_err(|e| TestCaseError::fail(e.to_string()))?;
            model.streams.push(Stream { handle, submitted: 0, ran: Arc::default() });
        }
        Op::DestroyStream(index) => {
            if !model.streams.is_empty() {
                let stream = model.streams.remove(index.index(model.streams.len()));
                drain(device, stream.handle)?;
                device.destroy_stream(stream.handle);
                prop_assert_eq!(stream.ran.load(Ordering::SeqCst), stream.submitted);
            }
        }
        Op::Submit { stream, copy, slow } => {
            let Some(index) = (!model.streams.is_empty()).then(|| stream.index(model.streams.len())) else {
                return Ok(());
            };
            let stream = &mut model.streams[index];
            let (ran, slow) = (stream.ran.clone(), *slow);
            let work: WorkFn = Box::new(move || {
                if slow {
                    std::thread::sleep(Duration::from_micros(300));
                }
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
            let (kind, bytes) =
                if *copy { (WorkKind::CopyHostToDevice, Some(64)) } else { (WorkKind::HostCallback, None) };
            device.submit(stream.handle, kind, work, bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            stream.submitted += 1;
        }
        Op::CreateEvent => {
            let handle = device.create_event().map_err(|e| TestCaseError::fail(e.to_string()))?;
            model.events.push((handle, None));
        }
        Op::RecordEvent(s, e) => {
            if let (Some(stream), false) = (pick(&model.streams, s).map(|s| s.handle), model.events.is_empty()) {
                let count = model.events.len();
                let event = &mut model.events[e.index(count)];
                device.record_event(stream, event.0).map_err(|e| TestCaseError::fail(e.to_string()))?;
                event.1 = Some(stream);
            }
        }
        Op::WaitEvent(s, e) => {
            if let (Some(stream), Some(&(event, _))) = (pick(&model.streams, s), pick(&model.events, e)) {
                device.wait_for_event(stream.handle, event).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        Op::EventStatus(e) => {
            if let Some(&(event, recorded)) = pick(&model.events, e) {
                let status = device.event_status(event).map_err(|e| TestCaseError::fail(e.to_string()))?;
                if recorded.is_none() {
                    prop_assert_eq!(status, EventStatus::Unknown);
                }
                prop_assert!(status != EventStatus::Error, "no work fails here");
            }
        }
        Op::AddDependency(a, b) => {
            if let (Some(a), Some(b)) = (pick(&model.streams, a), pick(&model.streams, b)) {
                let queue = device.stream_queue(b.handle).map_err(|e| TestCaseError::fail(e.to_string()))?;
                device.add_dependency(a.handle, b.handle, queue).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        Op::BlockUntilDone(s) => {
            if let Some(stream) = pick(&model.streams, s) {
                drain(device, stream.handle)?;
            }
        }
        Op::Usage => match device.usage() {
            Ok(usage) => {
                prop_assert!(usage.limit <= MEMORY && usage.bytes_in_use <= usage.limit, "{usage:?} accepted");
                prop_assert!(usage.largest_free_block <= usage.limit, "{usage:?} accepted");
            }
            Err(Error::GuestInvalid { .. }) => prop_assert!(lied(), "an honest usage report was refused"),
            Err(Error::DeviceDisabled { .. }) => {}
            Err(other) => return Err(TestCaseError::fail(format!("usage: {other}"))),
        },
        Op::CreateTimer => {
            let handle = device.create_timer().map_err(|e| TestCaseError::fail(e.to_string()))?;
            model.timers.push(handle);
        }
        Op::MarkTimer(s, t, start) => {
            if let (Some(stream), Some(&timer)) = (pick(&model.streams, s), pick(&model.timers, t)) {
                device.mark_timer(stream.handle, timer, *start).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        Op::TimerNanoseconds(t) => {
            if let Some(&timer) = pick(&model.timers, t) {
                device.timer_nanoseconds(timer).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
    }
    Ok(())
}

#[test]
fn every_lie_costs_the_instance_and_nothing_else_does() {
    let _serial = one_at_a_time();
    let confessions = Confessions::default();
    let _capture = tracing::subscriber::set_default(confessions.clone());
    let told = Mutex::new(BTreeMap::<String, u64>::new());
    let disabled = AtomicU64::new(0);
    let strategy = (0..RATES.len(), 0u32..1 << 16, vec(op(), 1..80));
    let test = |(rate, ordinal, ops): (usize, u32, Vec<Op>)| {
        let device = Device::new(&program(rate), "WASM", ordinal).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut model = Model::default();
        confessions.take();
        let check = |device: &Arc<Device>, model: &Model, before: u32, lies: &[String]| {
            let replaced = device.replacements() - before;
            let faults = confessions.faults();
            prop_assert_eq!(replaced as usize, lies.len(), "replacements for the lies {:?}: {:?}", lies, faults);
            if let Some(reason) = device.disabled() {
                prop_assert!(device.replacements() > MAX_REPLACEMENTS, "disabled early: {}", reason);
            }
            let live: Vec<(u64, u64)> = model.live.iter().map(|(&o, &s)| (o, s)).collect();
            prop_assert_eq!(device.arena().live(), live);
            let mut told = told.lock().unwrap();
            for lie in lies {
                *told.entry(lie.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).or_default() += 1;
            }
            Ok(())
        };
        for op in &ops {
            let before = device.replacements();
            let seen = std::cell::RefCell::new(Vec::new());
            let lied = || {
                seen.borrow_mut().extend(confessions.take());
                !seen.borrow().is_empty()
            };
            step(&device, &mut model, op, lied).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
            let mut lies = seen.into_inner();
            lies.extend(confessions.take());
            check(&device, &model, before, &lies).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
        }
        // Everything drains; every piece of work ran once; every event
        // recorded is complete; what is live can be freed.
        for stream in &model.streams {
            drain(&device, stream.handle)?;
            prop_assert_eq!(stream.ran.load(Ordering::SeqCst), stream.submitted, "work lost or run twice");
            prop_assert!(device.stream_status(stream.handle).is_ok());
        }
        let before = device.replacements();
        for &(event, recorded) in &model.events {
            if recorded.is_some_and(|s| model.streams.iter().any(|stream| stream.handle == s)) {
                let status = device.event_status(event).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(status, EventStatus::Complete);
            }
        }
        for (&offset, _) in &model.live {
            let ptr = (device.arena().base() as u64 + offset) as *const u8;
            device.deallocate(ptr).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        model.live.clear();
        check(&device, &model, before, &confessions.take())?;
        prop_assert_eq!(device.host_usage().bytes_in_use, 0);
        disabled.fetch_add(u64::from(device.disabled().is_some()), Ordering::Relaxed);
        Ok(())
    };
    let summary = || {
        let told = told.lock().unwrap();
        let total: u64 = told.values().sum();
        let kinds: Vec<String> = told.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
        format!("{total} lies refused: {}; {} devices disabled", kinds.join(", "), disabled.load(Ordering::Relaxed))
    };
    crate::fuzz("lying guests", 300, strategy, test, summary);
}
