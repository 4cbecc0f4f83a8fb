//! `tfwasm profiler check`: a profiler guest (world `profiler`,
//! `wit/profiler`) on recorded sessions, without TensorFlow, through the
//! same call and the same checks of its answer as the plugin's collect
//! ([`tfwasm_runtime::profiler::guest`]).
//!
//! The sessions are made here, record by record, as a device records them
//! inside TensorFlow: a Keras-like training step (copies on two streams,
//! kernels on a TensorFlow thread and on the compute pool, allocations and
//! frees, guest calls, an annotation of the device guest), the same on two
//! devices, a guest fault and its replacement, an empty session, and a full
//! ring (`profiler.max-events` records, the oldest dropped), which is the
//! largest answer a guest is ever asked for.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use tfwasm_runtime::device::Path as CopyPath;
use tfwasm_runtime::policy::ProfilerGuestSection;
use tfwasm_runtime::profiler::guest::ProfilerProgram;
use tfwasm_runtime::profiler::xspace::{self, Value};
use tfwasm_runtime::profiler::{Capture, DeviceLabel, Event, Record, ThreadId, DEFAULT_MAX_EVENTS};

/// A wall-clock-like start: 2026-01-01, in nanoseconds since the epoch.
const T0: u64 = 1_767_225_600_000_000_000;
/// Nanoseconds one recorded training step spans.
const STEP_NS: u64 = 2_000_000;

/// One check's outcome.
#[derive(Debug, Serialize)]
pub struct Check {
    pub session: String,
    pub records: usize,
    pub passed: bool,
    /// Lines the answer gives each device, summed over devices.
    pub lines: usize,
    /// Events on those lines (recorded ones placed, and the guest's own).
    pub events: usize,
    pub failure: Option<String>,
    pub milliseconds: f64,
}

/// Loads the guest, then asks it to shape every session. A guest that does
/// not load fails the first check with the reason, and nothing else runs.
/// With `out`, the trace of the training step as the guest shaped it (or
/// the host's own lines, with the reason, if it failed) is written there.
pub fn check(section: &ProfilerGuestSection, max_events: usize, out: Option<&Path>) -> Result<Vec<Check>> {
    let program = match ProfilerProgram::load(section, None) {
        Ok(program) => program,
        Err(error) => {
            let failure = Some(error.to_string());
            return Ok(vec![Check {
                session: "load".into(),
                records: 0,
                passed: false,
                lines: 0,
                events: 0,
                failure,
                milliseconds: 0.0,
            }]);
        }
    };
    let mut checks = Vec::new();
    for (name, capture, devices) in sessions(max_events.max(1)) {
        let started = Instant::now();
        let shaped = program.shape(&capture, &devices);
        let milliseconds = started.elapsed().as_secs_f64() * 1e3;
        let (lines, events) = shaped.as_ref().map_or((0, 0), |shape| {
            let planes = shape.planes.values();
            (planes.clone().map(|p| p.lines.len()).sum(), planes.flat_map(|p| &p.lines).map(|l| l.events.len()).sum())
        });
        if name == TRAINING_STEP {
            if let Some(out) = out {
                let status = match &shaped {
                    Ok(_) => format!("{}: shaped the trace", program.label()),
                    Err(error) => format!("{error}; the trace shows the host's own lines"),
                };
                let space = xspace::build(&capture, &devices, shaped.as_ref().ok(), &status);
                std::fs::write(out, xspace::encode(&space)).with_context(|| format!("writing {}", out.display()))?;
            }
        }
        checks.push(Check {
            session: name.to_owned(),
            records: capture.records.len(),
            passed: shaped.is_ok(),
            lines,
            events,
            failure: shaped.err().map(|e| e.to_string()),
            milliseconds,
        });
    }
    Ok(checks)
}

pub fn print(path: &Path, checks: &[Check]) {
    println!("profiler guest {}", path.display());
    let width = checks.iter().map(|c| c.session.len()).max().unwrap_or(0);
    for check in checks {
        let verdict = match &check.failure {
            None => format!("pass  {} lines, {} events, {:.1} ms", check.lines, check.events, check.milliseconds),
            Some(reason) => format!("FAIL  {reason}"),
        };
        println!("  {:<width$}  {:>7} records  {verdict}", check.session, check.records);
    }
    let passed = checks.iter().filter(|c| c.passed).count();
    println!("{passed} of {} checks passed", checks.len());
}

const TRAINING_STEP: &str = "a training step";

/// The recorded sessions a profiler guest is checked on; the full ring
/// holds `max_events` records.
fn sessions(max_events: usize) -> Vec<(&'static str, Capture, Vec<DeviceLabel>)> {
    let one = vec![device(0, 0)];
    let two = vec![device(0, 0), device(1, 0)];

    let mut step = Vec::new();
    training_step(0, T0, &mut step);

    let mut pair = Vec::new();
    training_step(0, T0, &mut pair);
    training_step(1, T0 + STEP_NS / 3, &mut pair);
    pair.sort_by_key(|r| r.start_ns);

    let mut faulted = Vec::new();
    training_step(0, T0, &mut faulted);
    faulted.push(record(
        0,
        thread(1, false),
        T0 + STEP_NS,
        0,
        Event::Fault {
            guest: "guest 'reference-device' (reference_device.wasm)".into(),
            reason: "`memory.allocate` exceeded its 250 ms deadline".into(),
            outcome: "a new instance replaces it".into(),
        },
    ));
    training_step(0, T0 + 2 * STEP_NS, &mut faulted);

    // A full ring: the newest `max_events` records of a longer session.
    let mut full = Vec::with_capacity(max_events + 64);
    let mut at = T0;
    while full.len() < max_events {
        training_step(0, at, &mut full);
        at += STEP_NS;
    }
    let dropped = (full.len() - max_events) as u64 + 10_000;
    full.drain(..full.len() - max_events);

    vec![
        ("an empty session", capture(T0, T0 + STEP_NS, Vec::new(), 0), one.clone()),
        (TRAINING_STEP, capture(T0, T0 + STEP_NS, step, 0), one.clone()),
        ("two devices", capture(T0, T0 + 2 * STEP_NS, pair, 0), two),
        ("a guest fault", capture(T0, T0 + 3 * STEP_NS, faulted, 0), vec![device(0, 1)]),
        ("a full ring", Capture { capacity: max_events, ..capture(T0, at, full, dropped) }, one),
    ]
}

fn capture(start_ns: u64, stop_ns: u64, records: Vec<Record>, dropped: u64) -> Capture {
    Capture { start_ns, stop_ns, records, dropped, capacity: DEFAULT_MAX_EVENTS }
}

fn device(ordinal: u32, replacements: u32) -> DeviceLabel {
    DeviceLabel {
        ordinal,
        name: format!("/device:WASM:{ordinal}"),
        guest: "guest 'reference-device' (reference_device.wasm)".into(),
        replacements,
        memory_bytes: 4 << 30,
    }
}

fn thread(id: u64, pool: bool) -> ThreadId {
    ThreadId { id, pool }
}

fn record(device: u32, thread: ThreadId, start_ns: u64, duration_ns: u64, event: Event) -> Record {
    Record { device, thread, start_ns, end_ns: start_ns + duration_ns, event }
}

/// One Keras MLP train step as a device records it, within `STEP_NS` of
/// `t0`: inputs copied in, forward and backward kernels (some deferred to
/// the compute pool), the allocator's traffic and the guest calls behind
/// it, the loss copied out, and one annotation from the device guest.
fn training_step(device: u32, t0: u64, out: &mut Vec<Record>) {
    let tf = thread(1 + u64::from(device) * 10, false);
    let pool = thread(2 + u64::from(device) * 10, true);
    let mut in_use = 0u64;
    let mut at = t0;
    let mut next = |duration: u64| {
        let start = at;
        at += duration + 1_000;
        start
    };
    let mut allocate = |out: &mut Vec<Record>, at: u64, offset: u64, size: u64| {
        in_use += size;
        out.push(record(device, tf, at, 2_000, Event::GuestCall { call: "memory.allocate".into() }));
        out.push(record(device, tf, at, 3_000, Event::Allocation { offset, size, in_use_after: in_use }));
    };
    allocate(out, next(3_000), 0, 128 * 784 * 4);
    out.push(record(
        device,
        tf,
        next(20_000),
        20_000,
        Event::Copy { path: CopyPath::HostToDevice, stream: 1, bytes: 128 * 784 * 4 },
    ));
    allocate(out, next(3_000), 1 << 20, 128 * 512 * 4);
    let kernels: [(&str, &'static str, &str, u64, bool); 6] = [
        ("sequential/dense/MatMul", "_FusedMatMul", "[128,784] [784,512] [512]", 1_607_680, true),
        ("sequential/dense_1/MatMul", "_FusedMatMul", "[128,512] [512,256] [256]", 787_456, true),
        ("sequential/dense_2/MatMul", "MatMul", "[128,256] [256,10]", 141_312, false),
        ("gradient_tape/sequential/dense_2/MatMul_1", "MatMul", "[128,256] [128,10]", 136_192, false),
        ("gradient_tape/sequential/dense_1/ReluGrad", "ReluGrad", "[128,256] [128,256]", 262_144, false),
        ("Adam/update/_TfwasmFusedElementwise", "_TfwasmFusedElementwise", "[784,512] [784,512]", 3_211_264, true),
    ];
    for (name, op, shapes, bytes, deferred) in kernels {
        let ran_on = if deferred { pool } else { tf };
        out.push(record(
            device,
            ran_on,
            next(150_000),
            150_000,
            Event::Kernel { name: Arc::from(name), op, shapes: shapes.into(), bytes, deferred },
        ));
    }
    out.push(record(
        device,
        tf,
        next(0),
        0,
        Event::Annotation {
            name: "allocator".into(),
            stats: vec![
                ("live_blocks".into(), Value::U64(2)),
                ("largest_free".into(), Value::U64(4 << 30)),
                ("fragmentation".into(), Value::F64(0.0)),
                ("delta".into(), Value::I64(-1)),
                ("strategy".into(), Value::Str("first-fit".into())),
            ],
        },
    ));
    out.push(record(device, tf, next(5_000), 5_000, Event::Copy { path: CopyPath::DeviceToHost, stream: 2, bytes: 4 }));
    out.push(record(device, tf, next(2_000), 2_000, Event::Copy { path: CopyPath::Fill, stream: 1, bytes: 512 * 4 }));
    for (offset, size) in [(1 << 20, 128 * 512 * 4), (0, 128 * 784 * 4)] {
        in_use -= size;
        out.push(record(device, tf, next(1_000), 1_000, Event::Free { offset, size, in_use_after: in_use }));
    }
}
