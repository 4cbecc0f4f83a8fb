//! The device conformance suite: each clause of `wit/device/device.wit`
//! as a check that drives the guest through the runtime's device layer.
//!
//! The device layer validates every answer (placement in bounds, aligned,
//! disjoint; tickets in order; event states that agree with completions;
//! call time within the policy's deadline) and, when an answer is wrong,
//! refuses it, logs why naming the guest, and replaces or works around the
//! instance. A check therefore passes when its workload completes with the
//! expected results *and* the host had nothing to refuse: no replacement,
//! no "invalid answer", "trapped" or "deadline" line in the log.
//!
//! Each check runs on a fresh device (a fresh guest instance), so one
//! failure does not hide behind another.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use tfwasm_runtime::device::{Device, WorkFn, ALIGNMENT};
use tfwasm_runtime::error::Error;
use tfwasm_runtime::policy::Policy;
use tfwasm_runtime::sandbox::{DeviceConfig, DeviceError, EventStatus, GuestInstance, GuestProgram, WorkKind};

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub check: &'static str,
    pub clause: &'static str,
    pub passed: bool,
    /// Why it failed, or what it measured.
    pub detail: String,
}

/// What the runtime logged, for the checks to read.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    fn take(&self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut *self.0.lock())).into_owned()
    }
}

impl Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Routes the runtime's warnings and errors into a [`Log`].
pub fn capture_logs() -> Log {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .without_time()
        .with_target(false)
        .init();
    log
}

/// The first check, which `run` makes itself: the rest need a program.
const LOAD: (&str, &str) = ("load", "the component compiles and links with the imports the policy grants");

/// The checks after `load`, in the order they run.
const CHECKS: &[(&str, &str, Check)] = &[
    ("init", "`identity.init` runs once and describes a valid device", check_init),
    ("placement", "`memory.allocate` answers are aligned, inside the region and disjoint", check_placement),
    ("free-and-usage", "`memory.free` releases exactly, `memory.usage` agrees with what is live", check_free),
    ("unknown-offset", "`memory.free` of an offset that is not live says `unknown-handle`", check_unknown_offset),
    ("adopt", "after `memory.adopt`, placement avoids the adopted blocks, which free normally", check_adopt),
    ("out-of-memory", "a full device says out-of-memory, and recovers after a free", check_out_of_memory),
    ("concurrency", "allocations from several threads at once", check_concurrency),
    ("stream-order", "tickets keep each stream in order and honour dependencies", check_stream_order),
    ("events", "event states agree with completions; waits are honoured", check_events),
    ("timers", "`timer-elapsed` answers once both markers ran, with the time between them", check_timers),
];

type Check = fn(&Arc<GuestProgram>) -> Result<String, String>;

/// Runs every check; a guest that does not load fails `load` and skips the rest.
pub fn run(policy: &Policy, log: &Log) -> Vec<CheckResult> {
    log.take();
    let program = match GuestProgram::load(policy) {
        Ok(program) => program,
        Err(error) => {
            let mut results = vec![result(LOAD, Err(error.to_string()), log)];
            results.extend(CHECKS.iter().map(|&(check, clause, _)| CheckResult {
                check,
                clause,
                passed: false,
                detail: "not run: the guest did not load".into(),
            }));
            return results;
        }
    };
    let mut results = vec![result(LOAD, Ok(program.label().to_owned()), log)];
    for &(check, clause, run_check) in CHECKS {
        results.push(result((check, clause), run_check(&program), log));
    }
    results
}

/// A check's outcome, failed also when the host refused any answer meanwhile.
fn result((check, clause): (&'static str, &'static str), outcome: Result<String, String>, log: &Log) -> CheckResult {
    let logged = log.take();
    let refused: Vec<&str> = logged
        .lines()
        .filter(|line| ["invalid answer", "trapped", "deadline", "disabled"].iter().any(|word| line.contains(word)))
        .collect();
    match outcome {
        Err(reason) => CheckResult { check, clause, passed: false, detail: reason },
        Ok(_) if !refused.is_empty() => CheckResult {
            check,
            clause,
            passed: false,
            detail: format!("the host refused the guest: {}", refused[0].trim()),
        },
        Ok(detail) => CheckResult { check, clause, passed: true, detail },
    }
}

pub fn print_table(policy: &Policy, results: &[CheckResult]) {
    println!("device conformance: {} ({})", policy.guest.name, policy.guest.path.display());
    for r in results {
        println!("  {:<15} {}  {}", r.check, if r.passed { "pass" } else { "FAIL" }, r.detail);
    }
    let failed = results.iter().filter(|r| !r.passed).count();
    println!("{} of {} checks passed", results.len() - failed, results.len());
}

/// A fresh device on `program`'s policy, or the reason it failed.
fn device(program: &Arc<GuestProgram>) -> Result<Arc<Device>, String> {
    Device::new(program, "WASM", 0).map_err(|e| e.to_string())
}

/// `program`'s guest and limits over a region of `bytes`.
fn with_region(program: &Arc<GuestProgram>, bytes: u64) -> Result<Arc<GuestProgram>, String> {
    let mut policy = program.policy().clone();
    policy.device.memory_bytes = bytes;
    policy.device.recycle_bytes = 0;
    GuestProgram::load(&policy).map_err(|e| e.to_string())
}

fn unreplaced(device: &Device) -> Result<(), String> {
    match (device.replacements(), device.last_fault()) {
        (0, _) => Ok(()),
        (n, Some(fault)) => Err(format!("the host replaced the guest instance {n} time(s); last: {fault}")),
        (n, None) => Err(format!("the host replaced the guest instance {n} time(s)")),
    }
}

fn check_init(program: &Arc<GuestProgram>) -> Result<String, String> {
    let started = Instant::now();
    let device = device(program)?;
    let info = &device.identity().info;
    Ok(format!("\"{}\" by \"{}\", in {:.1} ms", info.hardware_name, info.vendor, started.elapsed().as_secs_f64() * 1e3))
}

fn check_placement(program: &Arc<GuestProgram>) -> Result<String, String> {
    let device = device(&with_region(program, 64 << 20)?)?;
    let arena = device.arena();
    let mut live = BTreeMap::new();
    for size in [1u64, 3, 64, 255, 256, 257, 4096, 12_345, 1 << 20, 7, 999_983, 2, 31, 65_537] {
        let ptr = device.allocate(size).map_err(|e| format!("allocate({size}): {e}"))?;
        let offset = arena.offset_of(ptr).ok_or("an allocation outside the region")?;
        if offset % ALIGNMENT != 0 {
            return Err(format!("allocate({size}) at offset {offset}, not a multiple of {ALIGNMENT}"));
        }
        live.insert(offset, size);
    }
    let spans: Vec<_> = live.iter().collect();
    if let Some(pair) = spans.windows(2).find(|pair| pair[0].0 + pair[0].1 > *pair[1].0) {
        return Err(format!("allocations overlap: {pair:?}"));
    }
    unreplaced(&device)?;
    Ok(format!("{} allocations, aligned to {ALIGNMENT}, disjoint", live.len()))
}

fn check_free(program: &Arc<GuestProgram>) -> Result<String, String> {
    let device = device(&with_region(program, 16 << 20)?)?;
    let sizes = [100u64, 5000, 1 << 20, 17, 300_000];
    let ptrs = sizes.iter().map(|&s| device.allocate(s).map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>()?;
    let usage = device.usage().map_err(|e| e.to_string())?;
    if usage.bytes_in_use < sizes.iter().sum::<u64>() {
        return Err(format!(
            "usage says {} bytes in use with {} placed",
            usage.bytes_in_use,
            sizes.iter().sum::<u64>()
        ));
    }
    for ptr in ptrs {
        device.deallocate(ptr).map_err(|e| e.to_string())?;
    }
    let usage = device.usage().map_err(|e| e.to_string())?;
    if usage.bytes_in_use != 0 {
        return Err(format!("{} bytes still in use after every block was freed", usage.bytes_in_use));
    }
    // Everything free again: the whole region is one block.
    let all = device.allocate(16 << 20).map_err(|e| format!("the whole region after freeing everything: {e}"))?;
    device.deallocate(all).map_err(|e| e.to_string())?;
    unreplaced(&device)?;
    Ok("usage back to 0, the whole region allocatable again".into())
}

/// A bare instance of the guest, initialised for a region of `bytes`: the
/// checks below ask it what the device layer never would (the host knows
/// what is live and does not pass on a free of an unknown offset).
fn bare_instance(program: &Arc<GuestProgram>, bytes: u64) -> Result<GuestInstance, String> {
    let mut instance = program.instantiate().map_err(|e| e.to_string())?;
    let config = DeviceConfig { ordinal: 0, memory_size: bytes, options: program.policy().guest_options() };
    instance
        .with_bindings("identity.init", |g, s| g.tfwasm_device_identity().call_init(s, &config))
        .map_err(|e| e.to_string())?
        .map_err(|reason| format!("init refused: {reason}"))?;
    Ok(instance)
}

fn allocate(instance: &mut GuestInstance, size: u64) -> Result<Result<u64, DeviceError>, String> {
    instance
        .with_bindings("memory.allocate", |g, s| g.tfwasm_device_memory().call_allocate(s, size, ALIGNMENT))
        .map_err(|e| e.to_string())
}

fn free(instance: &mut GuestInstance, offset: u64) -> Result<Result<(), DeviceError>, String> {
    instance
        .with_bindings("memory.free", |g, s| g.tfwasm_device_memory().call_free(s, offset))
        .map_err(|e| e.to_string())
}

fn check_unknown_offset(program: &Arc<GuestProgram>) -> Result<String, String> {
    let region = 16u64 << 20;
    let mut instance = bare_instance(program, region)?;
    let expect_unknown = |answer: Result<(), DeviceError>, what: &str| match answer {
        Err(DeviceError::UnknownHandle(_)) => Ok(()),
        Err(other) => Err(format!("free of {what}: {other:?}, not unknown-handle")),
        Ok(()) => Err(format!("free of {what} succeeded")),
    };
    expect_unknown(free(&mut instance, 3 * ALIGNMENT)?, "an offset never allocated")?;
    expect_unknown(free(&mut instance, region + ALIGNMENT)?, "an offset past the region")?;
    let offset = allocate(&mut instance, 1000)?.map_err(|e| format!("allocate(1000): {e:?}"))?;
    if offset % ALIGNMENT == 0 && offset + 1000 <= region {
        expect_unknown(free(&mut instance, offset + ALIGNMENT)?, "an offset inside a live block")?;
    }
    free(&mut instance, offset)?.map_err(|e| format!("free of a live block: {e:?}"))?;
    expect_unknown(free(&mut instance, offset)?, "a block already freed")?;
    Ok("never allocated, past the region, inside a block, freed twice: each unknown-handle".into())
}

fn check_adopt(program: &Arc<GuestProgram>) -> Result<String, String> {
    let region = 16u64 << 20;
    let mut instance = bare_instance(program, region)?;
    // What a replaced instance inherits: blocks at the start, the middle and the end.
    let adopted = [(0, 1u64 << 20), (5 << 20, 300), (8 << 20, 2 << 20), (region - 4096, 4096)];
    instance
        .with_bindings("memory.adopt", |g, s| g.tfwasm_device_memory().call_adopt(s, &adopted))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("adopt refused: {e:?}"))?;
    let overlaps = |offset: u64, size: u64| adopted.iter().find(|&&(o, s)| offset < o + s && o < offset + size);
    let mut placed = 0u64;
    loop {
        let size = 1u64 << 20;
        match allocate(&mut instance, size)? {
            Ok(offset) => {
                if let Some(block) = overlaps(offset, size) {
                    return Err(format!("allocate({size}) at {offset} overlaps the adopted block {block:?}"));
                }
                placed += size;
            }
            Err(DeviceError::OutOfMemory(_)) => break,
            Err(other) => return Err(format!("allocate after adopt: {other:?}")),
        }
        if placed > region {
            return Err("more placed than the region holds".into());
        }
    }
    let adopted_bytes: u64 = adopted.iter().map(|&(_, s)| s).sum();
    if placed + adopted_bytes + (2 << 20) < region {
        return Err(format!("out of memory with {placed} bytes placed around {adopted_bytes} adopted in {region}"));
    }
    let usage = instance
        .with_bindings("memory.usage", |g, s| g.tfwasm_device_memory().call_usage(s))
        .map_err(|e| e.to_string())?;
    if usage.bytes_in_use < placed + adopted_bytes {
        return Err(format!("usage says {} bytes in use, {} are live", usage.bytes_in_use, placed + adopted_bytes));
    }
    for &(offset, _) in &adopted {
        free(&mut instance, offset)?.map_err(|e| format!("free of the adopted block at {offset}: {e:?}"))?;
    }
    Ok(format!("{} MiB placed around {} adopted blocks, which then freed", placed >> 20, adopted.len()))
}

fn check_out_of_memory(program: &Arc<GuestProgram>) -> Result<String, String> {
    let region = 16u64 << 20;
    let device = device(&with_region(program, region)?)?;
    let mut placed = Vec::new();
    loop {
        match device.allocate(1 << 20) {
            Ok(ptr) => placed.push(ptr),
            Err(Error::OutOfMemory { .. }) => break,
            Err(other) => return Err(format!("after {} MiB: {other}", placed.len())),
        }
        if placed.len() > 16 {
            return Err("more than 16 MiB placed in a 16 MiB region".into());
        }
    }
    if placed.len() < 8 {
        return Err(format!("out of memory after only {} MiB of a 16 MiB region", placed.len()));
    }
    let freed = placed.pop().ok_or("nothing was placed")?;
    device.deallocate(freed).map_err(|e| e.to_string())?;
    let again = device.allocate(1 << 20).map_err(|e| format!("no recovery after a free: {e}"))?;
    device.deallocate(again).map_err(|e| e.to_string())?;
    for ptr in placed {
        device.deallocate(ptr).map_err(|e| e.to_string())?;
    }
    unreplaced(&device)?;
    Ok("out-of-memory reported, then recovered".into())
}

fn check_concurrency(program: &Arc<GuestProgram>) -> Result<String, String> {
    let device = device(&with_region(program, 256 << 20)?)?;
    let errors = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (device, errors) = (&device, &errors);
            scope.spawn(move || {
                let mut mine = Vec::new();
                for i in 0..100u64 {
                    match device.allocate(1 + (thread * 7919 + i * 104_729) % 200_000) {
                        Ok(ptr) => mine.push(ptr as usize),
                        Err(e) => errors.lock().push(e.to_string()),
                    }
                    if i % 3 == 2 {
                        if let Some(ptr) = mine.pop() {
                            if let Err(e) = device.deallocate(ptr as *const u8) {
                                errors.lock().push(e.to_string());
                            }
                        }
                    }
                }
                for ptr in mine {
                    if let Err(e) = device.deallocate(ptr as *const u8) {
                        errors.lock().push(e.to_string());
                    }
                }
            });
        }
    });
    if let Some(first) = errors.lock().first() {
        return Err(first.clone());
    }
    let usage = device.usage().map_err(|e| e.to_string())?;
    if usage.bytes_in_use != 0 {
        return Err(format!("{} bytes in use after all threads freed theirs", usage.bytes_in_use));
    }
    unreplaced(&device)?;
    Ok("4 threads × 100 allocations".into())
}

fn logger(log: &Arc<Mutex<Vec<&'static str>>>, name: &'static str, delay_ms: u64) -> WorkFn {
    let log = log.clone();
    Box::new(move || {
        std::thread::sleep(Duration::from_millis(delay_ms));
        log.lock().push(name);
        Ok(())
    })
}

fn check_stream_order(program: &Arc<GuestProgram>) -> Result<String, String> {
    let device = device(program)?;
    let fail = |e: Error| e.to_string();
    let (a, b) = (device.create_stream().map_err(fail)?, device.create_stream().map_err(fail)?);
    let log = Arc::new(Mutex::new(Vec::new()));
    for (name, delay) in [("a1", 30), ("a2", 0), ("a3", 10)] {
        device.submit(a, WorkKind::CopyHostToDevice, logger(&log, name, delay), None).map_err(fail)?;
    }
    device.add_dependency(b, a, device.stream_queue(a).map_err(fail)?).map_err(fail)?;
    device.submit(b, WorkKind::HostCallback, logger(&log, "b-after-a", 0), None).map_err(fail)?;
    device.synchronize_all();
    let order = log.lock().clone();
    if order != ["a1", "a2", "a3", "b-after-a"] {
        return Err(format!("work ran as {order:?}"));
    }
    device.stream_status(a).map_err(fail)?;
    device.destroy_stream(a);
    device.destroy_stream(b);
    unreplaced(&device)?;
    Ok("in order, dependency honoured".into())
}

fn check_events(program: &Arc<GuestProgram>) -> Result<String, String> {
    let device = device(program)?;
    let fail = |e: Error| e.to_string();
    let (a, b) = (device.create_stream().map_err(fail)?, device.create_stream().map_err(fail)?);
    let event = device.create_event().map_err(fail)?;
    let log = Arc::new(Mutex::new(Vec::new()));
    device.submit(a, WorkKind::CopyDeviceToHost, logger(&log, "a-slow", 80), None).map_err(fail)?;
    device.record_event(a, event).map_err(fail)?;
    let early = device.event_status(event).map_err(fail)?;
    if early != EventStatus::Pending {
        return Err(format!("the event is {early:?} while the work before it still runs"));
    }
    device.wait_for_event(b, event).map_err(fail)?;
    device.submit(b, WorkKind::Memset, logger(&log, "b-after-event", 0), None).map_err(fail)?;
    device.block_until_done(b).map_err(fail)?;
    device.block_for_event(event).map_err(fail)?;
    let order = log.lock().clone();
    if order != ["a-slow", "b-after-event"] {
        return Err(format!("the wait was not honoured: work ran as {order:?}"));
    }
    let late = device.event_status(event).map_err(fail)?;
    if late != EventStatus::Complete {
        return Err(format!("the event is {late:?} after its work completed"));
    }
    device.destroy_event(event);
    device.destroy_stream(a);
    device.destroy_stream(b);
    unreplaced(&device)?;
    Ok("pending, then complete; the wait held".into())
}

fn check_timers(program: &Arc<GuestProgram>) -> Result<String, String> {
    let device = device(program)?;
    let fail = |e: Error| e.to_string();
    let s = device.create_stream().map_err(fail)?;
    let timer = device.create_timer().map_err(fail)?;
    // The markers wait behind work held until the timer has been asked once.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let hold: WorkFn = Box::new(move || held.recv().map_err(|e| e.to_string()));
    device.submit(s, WorkKind::HostCallback, hold, None).map_err(fail)?;
    device.mark_timer(s, timer, true).map_err(fail)?;
    let log = Arc::new(Mutex::new(Vec::new()));
    device.submit(s, WorkKind::HostCallback, logger(&log, "timed", 30), None).map_err(fail)?;
    device.mark_timer(s, timer, false).map_err(fail)?;
    let early = device.timer_nanoseconds(timer).map_err(fail);
    let _ = release.send(());
    device.block_until_done(s).map_err(fail)?;
    if early? != 0 {
        return Err("an elapsed time before either marker ran".into());
    }
    let elapsed = device.timer_nanoseconds(timer).map_err(fail)?;
    if elapsed < 30_000_000 {
        return Err(format!("{elapsed} ns between markers around 30 ms of work"));
    }
    device.destroy_timer(timer);
    device.destroy_stream(s);
    unreplaced(&device)?;
    Ok(format!("{:.1} ms around 30 ms of work", elapsed as f64 / 1e6))
}
