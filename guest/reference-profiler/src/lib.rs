//! The reference profiler guest: a wasm guest of world `profiler`
//! (`wit/profiler`, `tfwasm:profiler@0.1.0`) that shapes each WASM device's
//! plane in TensorBoard's trace viewer.
//!
//! It keeps every event the host recorded, on the lines a GPU trace has:
//! one `Kernels (...)` line per host thread that ran kernels (so no line's
//! events overlap), one `Stream N` line per stream for its copies and fills,
//! `Memory` for allocations and frees, `Guest calls`, `Guest faults` and
//! `Annotations` (what the device guest added itself).
//! Kernel events carry TensorFlow's `tf_op` stat (`node:Type`), which
//! xprof's tools use to name ops. On top of that it adds what a reader of
//! the trace asks first:
//! - a `Device busy` line: one span per burst of kernel work (kernels less
//!   than [`BUSY_GAP_NS`] apart), with the burst's kernel count;
//! - plane stats `kernel_executions` and `kernel_time_by_op` (the op types
//!   that took the most kernel time, with their shares).
//!
//! The pure parts ([`busy_spans`], [`time_by_op`]) are tested natively with
//! `cargo test -p tfwasm-reference-profiler`; the bindings exist only on
//! wasm, since their host import cannot link into a native test binary.

use std::collections::BTreeMap;

/// Kernels closer than this belong to one busy span.
pub const BUSY_GAP_NS: u64 = 100_000;

/// Op types `kernel_time_by_op` names.
pub const TOP_OPS: usize = 5;

/// Merges `(start, end)` intervals whose gaps are below `gap` into spans
/// `(start, end, how many intervals)`, in time order.
pub fn busy_spans(mut intervals: Vec<(u64, u64)>, gap: u64) -> Vec<(u64, u64, u64)> {
    intervals.sort_unstable();
    let mut spans: Vec<(u64, u64, u64)> = Vec::new();
    for (start, end) in intervals {
        match spans.last_mut() {
            Some(last) if start <= last.1.saturating_add(gap) => {
                last.1 = last.1.max(end);
                last.2 += 1;
            }
            _ => spans.push((start, end.max(start), 1)),
        }
    }
    spans
}

/// `MatMul 41% (40), AddV2 12% (48), ...`: the op types with the most kernel
/// time, from `(op type, nanoseconds)` pairs.
pub fn time_by_op<'a>(kernels: impl IntoIterator<Item = (&'a str, u64)>) -> String {
    let mut by_op: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (op, ns) in kernels {
        let entry = by_op.entry(op).or_default();
        entry.0 += ns;
        entry.1 += 1;
    }
    let total: u64 = by_op.values().map(|(ns, _)| ns).sum::<u64>().max(1);
    let mut ops: Vec<_> = by_op.into_iter().collect();
    ops.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    ops.iter()
        .take(TOP_OPS)
        .map(|(op, (ns, count))| format!("{op} {}% ({count})", ns * 100 / total))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(target_arch = "wasm32")]
mod component {
    use std::collections::BTreeMap;

    use crate::{busy_spans, time_by_op, BUSY_GAP_NS};

    wit_bindgen::generate!({
        path: "../../wit/profiler",
        world: "profiler",
    });

    use exports::tfwasm::profiler::shaper::Guest;
    use tfwasm::profiler::types::{
        DeviceTrace, EventKind, RecordedEvent, Session, Stat, StatValue, TraceEvent, TraceLine,
    };

    /// Where an event goes; the order is the order of the lines.
    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Line {
        Busy,
        Kernels { pool: bool, thread: u64 },
        Stream(u64),
        Memory,
        GuestCalls,
        Faults,
        Annotations,
    }

    impl Line {
        fn name(self) -> String {
            match self {
                Line::Busy => "Device busy".into(),
                Line::Kernels { pool: false, thread } => format!("Kernels (TensorFlow thread {thread})"),
                Line::Kernels { pool: true, thread } => format!("Kernels (compute pool thread {thread})"),
                Line::Stream(stream) => format!("Stream {}", stream & 0xffff_ffff_ffff),
                Line::Memory => "Memory".into(),
                Line::GuestCalls => "Guest calls".into(),
                Line::Faults => "Guest faults".into(),
                Line::Annotations => "Annotations".into(),
            }
        }
    }

    fn text(event: &RecordedEvent, key: &str) -> Option<String> {
        event.stats.iter().find(|s| s.key == key).and_then(|s| match &s.value {
            StatValue::Text(text) => Some(text.clone()),
            _ => None,
        })
    }

    fn unsigned(event: &RecordedEvent, key: &str) -> Option<u64> {
        event.stats.iter().find(|s| s.key == key).and_then(|s| match s.value {
            StatValue::Unsigned(n) => Some(n),
            _ => None,
        })
    }

    fn stat(key: &str, value: StatValue) -> Stat {
        Stat { key: key.into(), value }
    }

    /// The recorded event as it shows: its name, and TensorFlow's `tf_op`
    /// stat on kernels.
    fn shown(event: &RecordedEvent) -> TraceEvent {
        let mut stats = event.stats.clone();
        if event.kind == EventKind::Kernel {
            let op = text(event, "op_type").unwrap_or_default();
            stats.insert(0, stat("tf_op", StatValue::Text(format!("{}:{op}", event.name))));
        }
        TraceEvent { recorded: Some(event.id), start_ns: 0, end_ns: 0, name: event.name.clone(), stats }
    }

    fn device_trace(session: &Session, ordinal: u32, events: &[RecordedEvent]) -> DeviceTrace {
        let mut lines: BTreeMap<Line, Vec<TraceEvent>> = BTreeMap::new();
        let mut kernels = Vec::new();
        for event in events.iter().filter(|e| e.device == ordinal) {
            let line = match event.kind {
                EventKind::Kernel => {
                    kernels.push(event);
                    Line::Kernels { pool: event.pool_thread, thread: event.thread }
                }
                EventKind::Copy => Line::Stream(unsigned(event, "stream").unwrap_or(0)),
                EventKind::Allocation | EventKind::Free => Line::Memory,
                EventKind::GuestCall => Line::GuestCalls,
                EventKind::Fault => Line::Faults,
                EventKind::Annotation => Line::Annotations,
            };
            lines.entry(line).or_default().push(shown(event));
        }
        // Busy spans, kept inside the session (a kernel may have started
        // before it): the host refuses events of ours outside it.
        let clamp = |ns: u64| ns.clamp(session.start_ns, session.stop_ns.max(session.start_ns));
        let intervals = kernels.iter().map(|k| (clamp(k.start_ns), clamp(k.end_ns))).collect();
        let busy: Vec<TraceEvent> = busy_spans(intervals, BUSY_GAP_NS)
            .into_iter()
            .map(|(start_ns, end_ns, count)| TraceEvent {
                recorded: None,
                start_ns,
                end_ns,
                name: "busy".into(),
                stats: vec![stat("kernels", StatValue::Unsigned(count))],
            })
            .collect();
        if !busy.is_empty() {
            lines.insert(Line::Busy, busy);
        }
        let by_op = time_by_op(kernels.iter().map(|k| {
            let op = k.stats.iter().find(|s| s.key == "op_type").and_then(|s| match &s.value {
                StatValue::Text(text) => Some(text.as_str()),
                _ => None,
            });
            (op.unwrap_or("?"), k.end_ns.saturating_sub(k.start_ns))
        }));
        DeviceTrace {
            device: ordinal,
            lines: lines.into_iter().map(|(line, events)| TraceLine { name: line.name(), events }).collect(),
            stats: vec![
                stat("kernel_executions", StatValue::Unsigned(kernels.len() as u64)),
                stat("kernel_time_by_op", StatValue::Text(by_op)),
            ],
        }
    }

    struct ReferenceProfiler;

    impl Guest for ReferenceProfiler {
        fn shape(session: Session, events: Vec<RecordedEvent>) -> Result<Vec<DeviceTrace>, String> {
            Ok(session.devices.iter().map(|device| device_trace(&session, device.ordinal, &events)).collect())
        }
    }

    export!(ReferenceProfiler);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_close_together_form_one_busy_span() {
        let spans = busy_spans(vec![(300, 400), (0, 100), (150, 200), (1_000_000, 1_000_100)], 60);
        assert_eq!(spans, vec![(0, 200, 2), (300, 400, 1), (1_000_000, 1_000_100, 1)]);
        assert!(busy_spans(vec![], 100).is_empty());
    }

    #[test]
    fn the_op_summary_names_the_costliest_ops_first() {
        let summary = time_by_op([("MatMul", 60), ("AddV2", 30), ("MatMul", 20), ("Relu", 10)]);
        assert_eq!(summary, "MatMul 66% (2), AddV2 25% (1), Relu 8% (1)");
    }
}
