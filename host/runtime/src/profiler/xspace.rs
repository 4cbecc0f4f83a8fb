//! A stopped session as the XSpace TensorBoard reads: one plane per device.
//!
//! The plane of `/device:WASM:N` is named `/device:CUSTOM:N`: xprof's trace
//! viewer shows planes whose name it knows as a device (`/device:GPU:`,
//! `/device:TPU:`, `/device:CUSTOM:`) and drops the others, a
//! `/device:WASM:` plane included. The device's own name is the plane stat
//! `device`.
//!
//! Each plane's lines come from the policy's profiler guest ([`Shape`],
//! checked in [`super::guest`]) or, without one or when it failed, from the
//! host's own shaping ([`host_lines`]), in this order:
//! - `Kernels (TensorFlow thread N)` / `Kernels (compute pool thread N)`:
//!   one event per kernel execution, named by the node, on the thread that
//!   ran it (so a line's events never overlap);
//! - `Stream N`: the copies and fills of one stream, when they ran;
//! - `Memory`: allocations and frees, with the bytes in use after each;
//! - `Guest calls`: every call into the device's guest;
//! - `Guest faults`: traps, timeouts and invalid answers, and what the device did;
//! - `Annotations`: what the device guest added through the import
//!   `tfwasm:profiler/annotations`.

use std::collections::{BTreeMap, HashMap};

use tfwasm_proto::prost::Message;
use tfwasm_proto::xplane::{x_event, x_stat, XEvent, XEventMetadata, XLine, XPlane, XSpace, XStat, XStatMetadata};

use super::{Capture, DeviceLabel, Event, Record, ThreadId};
use crate::device::Path;

/// The prefix of the planes xprof shows as a device other than GPU and TPU.
pub const PLANE_PREFIX: &str = "/device:CUSTOM:";

/// A stat's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// The trace's shape as a profiler guest answered it, checked: planes by
/// device ordinal. A device without an entry gets the host's lines.
#[derive(Debug, Default)]
pub struct Shape {
    pub planes: HashMap<u32, ShapedPlane>,
}

#[derive(Debug)]
pub struct ShapedPlane {
    pub lines: Vec<ShapedLine>,
    pub stats: Vec<(String, Value)>,
}

#[derive(Debug)]
pub struct ShapedLine {
    pub name: String,
    pub events: Vec<ShapedEvent>,
}

#[derive(Debug)]
pub struct ShapedEvent {
    pub start_ns: u64,
    pub end_ns: u64,
    pub name: String,
    pub stats: Vec<(String, Value)>,
}

/// The trace of `capture`: a plane for each of `devices`, events or not,
/// shaped by `shape` where it has the device. `guest_status` becomes the
/// plane stat `profiler_guest`.
pub fn build(capture: &Capture, devices: &[DeviceLabel], shape: Option<&Shape>, guest_status: &str) -> XSpace {
    let planes = devices
        .iter()
        .map(|device| {
            let shaped = shape.and_then(|shape| shape.planes.get(&device.ordinal));
            plane(capture, device, shaped, guest_status)
        })
        .collect();
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

fn plane(capture: &Capture, device: &DeviceLabel, shaped: Option<&ShapedPlane>, guest_status: &str) -> XPlane {
    let ordinal = device.ordinal;
    let mut plane = PlaneBuilder::new(i64::from(ordinal), format!("{PLANE_PREFIX}{ordinal}"));
    let recorded = capture.records.iter().filter(|r| r.device == ordinal).count() as u64;
    let own;
    let (lines, guest_stats) = match shaped {
        Some(shaped) => (&shaped.lines, &shaped.stats[..]),
        None => {
            own = host_lines(capture, ordinal);
            (&own, &[][..])
        }
    };
    let line_duration_ps = ps(capture.stop_ns.saturating_sub(capture.start_ns));
    for (index, line) in lines.iter().enumerate() {
        let mut events: Vec<XEvent> = line.events.iter().map(|event| plane.event(capture, event)).collect();
        events.sort_by_key(|e| match e.data {
            Some(x_event::Data::OffsetPs(offset)) => offset,
            _ => 0,
        });
        let id = index as i64 + 1;
        plane.plane.lines.push(XLine {
            id,
            display_id: id,
            name: line.name.clone(),
            display_name: line.name.clone(),
            timestamp_ns: capture.start_ns as i64,
            duration_ps: line_duration_ps,
            events,
        });
    }
    let mut stats = vec![
        plane.stat("device", Value::Str(device.name.clone())),
        plane.stat("guest", Value::Str(device.guest.clone())),
        plane.stat("recorded_events", Value::U64(recorded)),
        plane.stat("dropped_events", Value::U64(capture.dropped)),
        plane.stat("max_events", Value::U64(capture.capacity as u64)),
        plane.stat("guest_replacements", Value::U64(u64::from(device.replacements))),
        plane.stat("memory_bytes", Value::U64(device.memory_bytes)),
        plane.stat("profiler_guest", Value::Str(guest_status.to_owned())),
    ];
    for (key, value) in guest_stats {
        stats.push(plane.stat(key, value.clone()));
    }
    plane.plane.stats = stats;
    plane.plane
}

fn ps(ns: u64) -> i64 {
    i64::try_from(ns.saturating_mul(1000)).unwrap_or(i64::MAX)
}

struct PlaneBuilder {
    plane: XPlane,
    event_ids: HashMap<String, i64>,
    stat_ids: HashMap<String, i64>,
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

    fn stat(&mut self, name: &str, value: Value) -> XStat {
        let id = match self.stat_ids.get(name) {
            Some(id) => *id,
            None => {
                let id = self.stat_ids.len() as i64 + 1;
                self.stat_ids.insert(name.to_owned(), id);
                let metadata = XStatMetadata { id, name: name.to_owned(), description: String::new() };
                self.plane.stat_metadata.insert(id, metadata);
                id
            }
        };
        let value = match value {
            Value::Str(s) => x_stat::Value::StrValue(s),
            Value::U64(n) => x_stat::Value::Uint64Value(n),
            Value::I64(n) => x_stat::Value::Int64Value(n),
            Value::F64(x) => x_stat::Value::DoubleValue(x),
        };
        XStat { metadata_id: id, value: Some(value) }
    }

    fn event(&mut self, capture: &Capture, event: &ShapedEvent) -> XEvent {
        // Work that began before the session shows from its start.
        let start = event.start_ns.clamp(capture.start_ns, capture.stop_ns.max(capture.start_ns));
        let end = event.end_ns.max(start);
        let stats = event.stats.iter().map(|(key, value)| self.stat(key, value.clone())).collect();
        XEvent {
            metadata_id: self.event_id(&event.name),
            data: Some(x_event::Data::OffsetPs(ps(start - capture.start_ns))),
            duration_ps: ps(end - start),
            stats,
        }
    }
}

/// Where the host puts an event; the order is the order of the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LineKey {
    Kernels(ThreadId),
    Stream(u64),
    Memory,
    GuestCalls,
    Faults,
    Annotations,
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
            LineKey::Annotations => "Annotations".to_owned(),
        }
    }
}

/// The host's own lines of device `ordinal`.
pub fn host_lines(capture: &Capture, ordinal: u32) -> Vec<ShapedLine> {
    let mut lines: BTreeMap<LineKey, Vec<ShapedEvent>> = BTreeMap::new();
    for record in capture.records.iter().filter(|r| r.device == ordinal) {
        let (key, event) = host_event(record);
        lines.entry(key).or_default().push(event);
    }
    lines.into_iter().map(|(key, events)| ShapedLine { name: key.name(), events }).collect()
}

fn host_event(record: &Record) -> (LineKey, ShapedEvent) {
    let thread = ("thread".to_owned(), Value::U64(record.thread.id));
    let stat = |key: &str, value: Value| (key.to_owned(), value);
    let (key, name, stats) = match &record.event {
        Event::Kernel { name, op, shapes, bytes, deferred } => (
            LineKey::Kernels(record.thread),
            name.to_string(),
            vec![
                stat("tf_op", Value::Str(format!("{name}:{op}"))),
                stat("op_type", Value::Str((*op).to_owned())),
                stat("input_shapes", Value::Str(shapes.to_string())),
                stat("input_bytes", Value::U64(*bytes)),
                stat("deferred", Value::U64(u64::from(*deferred))),
                thread,
            ],
        ),
        Event::Copy { path, stream, bytes } => {
            (LineKey::Stream(*stream), path_name(*path).to_owned(), vec![stat("bytes", Value::U64(*bytes)), thread])
        }
        Event::Allocation { offset, size, in_use_after } => (
            LineKey::Memory,
            "Allocate".to_owned(),
            vec![
                stat("offset", Value::U64(*offset)),
                stat("bytes", Value::U64(*size)),
                stat("bytes_in_use", Value::U64(*in_use_after)),
            ],
        ),
        Event::Free { offset, size, in_use_after } => (
            LineKey::Memory,
            "Free".to_owned(),
            vec![
                stat("offset", Value::U64(*offset)),
                stat("bytes", Value::U64(*size)),
                stat("bytes_in_use", Value::U64(*in_use_after)),
            ],
        ),
        Event::GuestCall { call } => (LineKey::GuestCalls, call.to_string(), vec![]),
        Event::Annotation { name, stats } => (LineKey::Annotations, name.to_string(), stats.clone()),
        Event::Fault { guest, reason, outcome } => (
            LineKey::Faults,
            "Guest fault".to_owned(),
            vec![
                stat("guest", Value::Str(guest.to_string())),
                stat("reason", Value::Str(reason.to_string())),
                stat("outcome", Value::Str(outcome.to_string())),
            ],
        ),
    };
    (key, ShapedEvent { start_ns: record.start_ns, end_ns: record.end_ns, name, stats })
}

/// What a copy or fill is called in the trace (the names GPU traces use).
pub fn path_name(path: Path) -> &'static str {
    match path {
        Path::HostToDevice => "MemcpyH2D",
        Path::DeviceToHost => "MemcpyD2H",
        Path::DeviceToDevice => "MemcpyD2D",
        Path::Fill => "Memset",
    }
}
