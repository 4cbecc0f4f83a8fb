//! A stopped session as the XSpace TensorBoard reads: one plane per device.
//!
//! The plane of `/device:WASM:N` is named `/device:CUSTOM:N`: xprof's trace
//! viewer shows planes whose name it knows as a device (`/device:GPU:`,
//! `/device:TPU:`, `/device:CUSTOM:`) and drops the others, a
//! `/device:WASM:` plane included. The device's own name is the plane stat
//! `device`.
//!
//! Lines, in this order:
//! - `Kernels (TensorFlow thread N)` / `Kernels (compute pool thread N)`:
//!   one event per kernel execution, named by the node, on the thread that
//!   ran it (so a line's events never overlap);
//! - `Stream N`: the copies and fills of one stream, when they ran;
//! - `Memory`: allocations and frees, with the bytes in use after each;
//! - `Guest calls`: every call into the device's guest;
//! - `Guest faults`: traps, timeouts and invalid answers, and what the device did.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tfwasm_proto::prost::Message;
use tfwasm_proto::xplane::{x_event, x_stat, XEvent, XEventMetadata, XLine, XPlane, XSpace, XStat, XStatMetadata};

use super::{Capture, Event, Record, ThreadId};
use crate::device::{Device, Path};

/// The prefix of the planes xprof shows as a device other than GPU and TPU.
pub const PLANE_PREFIX: &str = "/device:CUSTOM:";

/// The trace of `capture`: a plane for each of `devices`, events or not.
pub fn build(capture: &Capture, devices: &[Arc<Device>]) -> XSpace {
    let planes = devices.iter().map(|device| plane(capture, device)).collect();
    let mut warnings = Vec::new();
    if capture.dropped > 0 {
        warnings.push(format!(
            "tfwasm: {} device events were dropped (the oldest first): the session recorded more than \
             profiler.max-events = {} (policy); raise it or profile fewer steps",
            capture.dropped, capture.capacity
        ));
    }
    XSpace { planes, errors: Vec::new(), warnings, hostnames: Vec::new() }
}

pub fn encode(space: &XSpace) -> Vec<u8> {
    space.encode_to_vec()
}

/// Where an event goes; the order is the order of the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LineKey {
    Kernels(ThreadId),
    Stream(u64),
    Memory,
    GuestCalls,
    Faults,
}

impl LineKey {
    fn name(&self) -> String {
        match self {
            LineKey::Kernels(ThreadId { id, pool: false }) => format!("Kernels (TensorFlow thread {id})"),
            LineKey::Kernels(ThreadId { id, pool: true }) => format!("Kernels (compute pool thread {id})"),
            LineKey::Stream(handle) => format!("Stream {}", handle & 0xffff_ffff_ffff),
            LineKey::Memory => "Memory".to_owned(),
            LineKey::GuestCalls => "Guest calls".to_owned(),
            LineKey::Faults => "Guest faults".to_owned(),
        }
    }
}

fn plane(capture: &Capture, device: &Arc<Device>) -> XPlane {
    let ordinal = device.ordinal();
    let mut plane = PlaneBuilder::new(i64::from(ordinal), format!("{PLANE_PREFIX}{ordinal}"));
    let mut lines: BTreeMap<LineKey, Vec<XEvent>> = BTreeMap::new();
    let mut recorded = 0u64;
    for record in capture.records.iter().filter(|r| r.device == ordinal) {
        recorded += 1;
        let (key, event) = plane.event(capture, record);
        lines.entry(key).or_default().push(event);
    }
    let line_duration_ps = ps(capture.stop_ns.saturating_sub(capture.start_ns));
    for (id, (key, mut events)) in lines.into_iter().enumerate() {
        events.sort_by_key(|e| match e.data {
            Some(x_event::Data::OffsetPs(offset)) => offset,
            _ => 0,
        });
        let name = key.name();
        plane.plane.lines.push(XLine {
            id: id as i64 + 1,
            display_id: id as i64 + 1,
            name: name.clone(),
            display_name: name,
            timestamp_ns: capture.start_ns as i64,
            duration_ps: line_duration_ps,
            events,
        });
    }
    let stats = vec![
        plane.stat("device", Value::Str(device.name().to_owned())),
        plane.stat("guest", Value::Str(device.guest().to_owned())),
        plane.stat("recorded_events", Value::U64(recorded)),
        plane.stat("dropped_events", Value::U64(capture.dropped)),
        plane.stat("max_events", Value::U64(capture.capacity as u64)),
        plane.stat("guest_replacements", Value::U64(u64::from(device.replacements()))),
        plane.stat("memory_bytes", Value::U64(device.arena().len())),
    ];
    plane.plane.stats = stats;
    plane.plane
}

fn ps(ns: u64) -> i64 {
    i64::try_from(ns.saturating_mul(1000)).unwrap_or(i64::MAX)
}

enum Value {
    Str(String),
    U64(u64),
}

struct PlaneBuilder {
    plane: XPlane,
    event_ids: HashMap<String, i64>,
    stat_ids: HashMap<&'static str, i64>,
}

impl PlaneBuilder {
    fn new(id: i64, name: String) -> Self {
        PlaneBuilder {
            plane: XPlane { id, name, ..XPlane::default() },
            event_ids: HashMap::new(),
            stat_ids: HashMap::new(),
        }
    }

    fn event_id(&mut self, name: &str) -> i64 {
        if let Some(id) = self.event_ids.get(name) {
            return *id;
        }
        let id = self.event_ids.len() as i64 + 1;
        self.event_ids.insert(name.to_owned(), id);
        self.plane.event_metadata.insert(id, XEventMetadata { id, name: name.to_owned(), ..XEventMetadata::default() });
        id
    }

    fn stat(&mut self, name: &'static str, value: Value) -> XStat {
        let next = self.stat_ids.len() as i64 + 1;
        let id = *self.stat_ids.entry(name).or_insert(next);
        if id == next {
            self.plane
                .stat_metadata
                .insert(id, XStatMetadata { id, name: name.to_owned(), description: String::new() });
        }
        let value = match value {
            Value::Str(s) => x_stat::Value::StrValue(s),
            Value::U64(n) => x_stat::Value::Uint64Value(n),
        };
        XStat { metadata_id: id, value: Some(value) }
    }

    fn event(&mut self, capture: &Capture, record: &Record) -> (LineKey, XEvent) {
        let start = record.start_ns.clamp(capture.start_ns, capture.stop_ns.max(capture.start_ns));
        let end = record.end_ns.max(start);
        let thread = record.thread.id;
        let (key, name, stats) = match &record.event {
            Event::Kernel { name, op, shapes, bytes, deferred } => (
                LineKey::Kernels(record.thread),
                name.to_string(),
                vec![
                    self.stat("tf_op", Value::Str(format!("{name}:{op}"))),
                    self.stat("op_type", Value::Str((*op).to_owned())),
                    self.stat("input_shapes", Value::Str(shapes.to_string())),
                    self.stat("input_bytes", Value::U64(*bytes)),
                    self.stat("deferred", Value::U64(u64::from(*deferred))),
                    self.stat("thread", Value::U64(thread)),
                ],
            ),
            Event::Copy { path, stream, bytes } => (
                LineKey::Stream(*stream),
                path_name(*path).to_owned(),
                vec![self.stat("bytes", Value::U64(*bytes)), self.stat("thread", Value::U64(thread))],
            ),
            Event::Allocation { offset, size, in_use_after } => (
                LineKey::Memory,
                "Allocate".to_owned(),
                vec![
                    self.stat("offset", Value::U64(*offset)),
                    self.stat("bytes", Value::U64(*size)),
                    self.stat("bytes_in_use", Value::U64(*in_use_after)),
                ],
            ),
            Event::Free { offset, size, in_use_after } => (
                LineKey::Memory,
                "Free".to_owned(),
                vec![
                    self.stat("offset", Value::U64(*offset)),
                    self.stat("bytes", Value::U64(*size)),
                    self.stat("bytes_in_use", Value::U64(*in_use_after)),
                ],
            ),
            Event::GuestCall { call } => (LineKey::GuestCalls, call.to_string(), vec![]),
            Event::Fault { guest, reason, outcome } => (
                LineKey::Faults,
                "Guest fault".to_owned(),
                vec![
                    self.stat("guest", Value::Str(guest.to_string())),
                    self.stat("reason", Value::Str(reason.to_string())),
                    self.stat("outcome", Value::Str(outcome.to_string())),
                ],
            ),
        };
        let event = XEvent {
            metadata_id: self.event_id(&name),
            data: Some(x_event::Data::OffsetPs(ps(start - capture.start_ns))),
            duration_ps: ps(end - start),
            stats,
        };
        (key, event)
    }
}

/// What a copy or fill is called in the trace (the names GPU traces use).
fn path_name(path: Path) -> &'static str {
    match path {
        Path::HostToDevice => "MemcpyH2D",
        Path::DeviceToHost => "MemcpyD2H",
        Path::DeviceToDevice => "MemcpyD2D",
        Path::Fill => "Memset",
    }
}
