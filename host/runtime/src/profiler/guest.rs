//! Profiler guests (world `profiler` of `wit/profiler`,
//! `tfwasm:profiler@0.1.0`): at collect time the policy's profiler guest
//! gets the session's records and answers the shape of each device's plane.
//!
//! The answer is checked here ([`check`]) before the trace is written; a
//! guest that traps, overruns its deadline, fails or answers something the
//! checks refuse costs only its shape: [`super::xspace`] then writes the
//! host's own lines, and the plane stat `profiler_guest` says why.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::{HasSelf, Linker};

use super::xspace::{Shape, ShapedEvent, ShapedLine, ShapedPlane, Value};
use super::{Capture, DeviceLabel, Event, Record};
use crate::error::Error;
use crate::policy::ProfilerGuestSection;
use crate::sandbox::{cache, guarded, guest_text, new_store, GuestSource, GuestState, World};

wasmtime::component::bindgen!({
    path: "../../wit/profiler",
    world: "profiler",
});

use self::tfwasm::profiler::types::{
    Device as WitDevice, DeviceTrace, EventKind, RecordedEvent, Session, Stat, StatValue, TraceEvent,
};

/// The version of the `tfwasm:profiler` package this host speaks.
pub const PROFILER_WIT_VERSION: &str = "0.1.0";

pub(crate) const PROFILER_WORLD: World = World {
    package: "tfwasm:profiler",
    version: PROFILER_WIT_VERSION,
    name: "profiler",
    exports: &["shaper"],
    wit: "wit/profiler",
};

/// Lines one device's plane may have.
pub const MAX_LINES: usize = 256;
/// Events of the guest's own (not recorded ones) one answer may hold.
pub const MAX_OWN_EVENTS: usize = 65_536;
/// Characters of a line's or an event's name, and of a stat's text.
pub const MAX_NAME_CHARS: usize = 256;
pub const MAX_TEXT_CHARS: usize = 1024;
/// Stats one event or plane may carry.
pub const MAX_STATS: usize = 32;

impl self::tfwasm::profiler::host::Host for GuestState {
    fn log(&mut self, level: self::tfwasm::profiler::host::LogLevel, message: String) {
        self.log_line(level.into(), &message);
    }
}

impl self::tfwasm::profiler::types::Host for GuestState {}

/// A compiled, linked profiler guest.
pub struct ProfilerProgram {
    /// `profiler 'NAME' (FILE)`.
    label: Arc<str>,
    section: ProfilerGuestSection,
    pre: ProfilerPre<GuestState>,
}

impl std::fmt::Debug for ProfilerProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfilerProgram").field("label", &self.label).finish()
    }
}

impl ProfilerProgram {
    /// Reads, compiles (or finds in the compile cache) and links the guest
    /// `section` names.
    pub fn load(section: &ProfilerGuestSection, cache_dir: Option<&std::path::Path>) -> Result<Arc<Self>, Error> {
        let file = section.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let label = format!("profiler '{}' ({file})", section.name);
        let started = Instant::now();
        let source = GuestSource {
            label: &label,
            path: &section.path,
            sha256: section.sha256.as_deref(),
            capabilities: &Default::default(),
            world: &PROFILER_WORLD,
        };
        let compiled = source.compile(cache_dir)?;
        let add_host =
            |linker: &mut Linker<GuestState>| Profiler::add_to_linker::<_, HasSelf<_>>(linker, |state| state);
        let pre = source.link(&compiled, add_host, ProfilerPre::new)?;
        let cached = compiled.cached;
        let how = if cached { "loaded from the compile cache" } else { "compiled" };
        tracing::debug!("{label}: {how} in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
        Ok(Arc::new(ProfilerProgram { label: label.into(), section: section.clone(), pre }))
    }

    /// [`ProfilerProgram::load`] with the process's compile cache.
    pub fn load_cached(section: &ProfilerGuestSection) -> Result<Arc<Self>, Error> {
        Self::load(section, cache::default_dir().as_deref())
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Asks a fresh instance for the shape of `capture`'s trace and checks
    /// the answer.
    pub fn shape(&self, capture: &Capture, devices: &[DeviceLabel]) -> Result<Shape, Error> {
        let limits = &self.section.limits;
        let mut store = new_store(self.pre.engine(), &self.label, limits, &Default::default())?;
        let deadline = limits.call_deadline_ms;
        let bindings = guarded(&mut store, deadline, "instantiate", |store| self.pre.instantiate(store))?;
        let session = Session {
            start_ns: capture.start_ns,
            stop_ns: capture.stop_ns,
            dropped: capture.dropped,
            devices: devices
                .iter()
                .map(|d| WitDevice { ordinal: d.ordinal, name: d.name.clone(), guest: d.guest.clone() })
                .collect(),
            options: self.section.options(),
        };
        let events: Vec<RecordedEvent> = capture.records.iter().enumerate().map(|(id, r)| recorded(id, r)).collect();
        let answer = guarded(&mut store, deadline, "shaper.shape", |store| {
            bindings.tfwasm_profiler_shaper().call_shape(store, &session, &events)
        })?;
        let traces = answer.map_err(|message| Error::GuestRefused {
            guest: self.label.to_string(),
            call: "shaper.shape".into(),
            reason: guest_text(&message, MAX_TEXT_CHARS),
        })?;
        check(&traces, capture, devices).map_err(|reason| Error::GuestInvalid {
            guest: self.label.to_string(),
            call: "shaper.shape".into(),
            reason,
        })
    }
}

/// A record as the guest sees it.
fn recorded(id: usize, record: &Record) -> RecordedEvent {
    let text = |key: &str, value: &str| Stat { key: key.into(), value: StatValue::Text(value.into()) };
    let unsigned = |key: &str, value: u64| Stat { key: key.into(), value: StatValue::Unsigned(value) };
    let (kind, name, stats) = match &record.event {
        Event::Kernel { name, op, shapes, bytes, deferred } => (
            EventKind::Kernel,
            name.to_string(),
            vec![
                text("op_type", op),
                text("input_shapes", shapes),
                unsigned("input_bytes", *bytes),
                unsigned("deferred", u64::from(*deferred)),
            ],
        ),
        Event::Copy { path, stream, bytes } => (
            EventKind::Copy,
            super::xspace::path_name(*path).to_owned(),
            vec![unsigned("bytes", *bytes), unsigned("stream", *stream)],
        ),
        Event::Allocation { offset, size, in_use_after } => (
            EventKind::Allocation,
            "Allocate".to_owned(),
            vec![unsigned("offset", *offset), unsigned("bytes", *size), unsigned("bytes_in_use", *in_use_after)],
        ),
        Event::Free { offset, size, in_use_after } => (
            EventKind::Free,
            "Free".to_owned(),
            vec![unsigned("offset", *offset), unsigned("bytes", *size), unsigned("bytes_in_use", *in_use_after)],
        ),
        Event::GuestCall { call } => (EventKind::GuestCall, call.to_string(), vec![]),
        Event::Annotation { name, stats } => {
            let stats = stats
                .iter()
                .map(|(key, value)| Stat {
                    key: key.clone(),
                    value: match value {
                        Value::Str(text) => StatValue::Text(text.clone()),
                        Value::U64(n) => StatValue::Unsigned(*n),
                        Value::I64(n) => StatValue::Signed(*n),
                        Value::F64(x) => StatValue::Real(*x),
                    },
                })
                .collect();
            (EventKind::Annotation, name.to_string(), stats)
        }
        Event::Fault { guest, reason, outcome } => (
            EventKind::Fault,
            "Guest fault".to_owned(),
            vec![text("guest", guest), text("reason", reason), text("outcome", outcome)],
        ),
    };
    RecordedEvent {
        id: id as u64,
        device: record.device,
        kind,
        thread: record.thread.id,
        pool_thread: record.thread.pool,
        start_ns: record.start_ns,
        end_ns: record.end_ns,
        name,
        stats,
    }
}

/// The checks of a guest's answer; the shape it describes if it passes.
pub fn check(traces: &[DeviceTrace], capture: &Capture, devices: &[DeviceLabel]) -> Result<Shape, String> {
    let known: HashSet<u32> = devices.iter().map(|d| d.ordinal).collect();
    let mut planes = HashMap::new();
    let mut own_events = 0usize;
    let mut total_events = 0usize;
    for trace in traces {
        let device = trace.device;
        if !known.contains(&device) {
            return Err(format!("a trace for device {device}, which does not exist"));
        }
        if planes.contains_key(&device) {
            return Err(format!("two traces for device {device}"));
        }
        if trace.lines.len() > MAX_LINES {
            return Err(format!("{} lines for device {device}, at most {MAX_LINES}", trace.lines.len()));
        }
        let mut lines = Vec::with_capacity(trace.lines.len());
        for line in &trace.lines {
            let line_name = name(&line.name, "a line")?;
            let mut events = Vec::new();
            for event in &line.events {
                let (start_ns, end_ns) = match event.recorded {
                    Some(id) => {
                        let record = usize::try_from(id)
                            .ok()
                            .and_then(|id| capture.records.get(id))
                            .ok_or_else(|| format!("line {line_name:?}: recorded event {id} does not exist"))?;
                        if record.device != device {
                            return Err(format!(
                                "line {line_name:?}: recorded event {id} is device {}'s, not device {device}'s",
                                record.device
                            ));
                        }
                        (record.start_ns, record.end_ns)
                    }
                    None => {
                        own_events += 1;
                        if own_events > MAX_OWN_EVENTS {
                            return Err(format!("more than {MAX_OWN_EVENTS} events of its own"));
                        }
                        own_times(event, capture).map_err(|why| format!("line {line_name:?}: {why}"))?
                    }
                };
                total_events += 1;
                if total_events > capture.records.len() + MAX_OWN_EVENTS {
                    return Err(format!(
                        "more events than the session's {} records and {MAX_OWN_EVENTS} of its own",
                        capture.records.len()
                    ));
                }
                events.push(ShapedEvent {
                    start_ns,
                    end_ns,
                    name: name(&event.name, "an event")?,
                    stats: stats(&event.stats)?,
                });
            }
            lines.push(ShapedLine { name: line_name, events });
        }
        planes.insert(device, ShapedPlane { lines, stats: stats(&trace.stats)? });
    }
    Ok(Shape { planes })
}

fn own_times(event: &TraceEvent, capture: &Capture) -> Result<(u64, u64), String> {
    let session = capture.start_ns..=capture.stop_ns;
    if event.start_ns > event.end_ns {
        return Err(format!("event {:?} ends before it starts", guest_text(&event.name, 64)));
    }
    if !session.contains(&event.start_ns) || !session.contains(&event.end_ns) {
        return Err(format!(
            "event {:?} at {}..{} ns lies outside the session ({}..{} ns)",
            guest_text(&event.name, 64),
            event.start_ns,
            event.end_ns,
            capture.start_ns,
            capture.stop_ns
        ));
    }
    Ok((event.start_ns, event.end_ns))
}

fn name(text: &str, what: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err(format!("{what} without a name"));
    }
    if text.chars().count() > MAX_NAME_CHARS {
        return Err(format!("{what} named with more than {MAX_NAME_CHARS} characters"));
    }
    Ok(text.to_owned())
}

fn stats(stats: &[Stat]) -> Result<Vec<(String, Value)>, String> {
    if stats.len() > MAX_STATS {
        return Err(format!("{} stats on one event or plane, at most {MAX_STATS}", stats.len()));
    }
    stats
        .iter()
        .map(|stat| {
            let key = name(&stat.key, "a stat")?;
            let value = match &stat.value {
                StatValue::Text(text) if text.chars().count() > MAX_TEXT_CHARS => {
                    return Err(format!("stat {key:?} holds more than {MAX_TEXT_CHARS} characters"))
                }
                StatValue::Text(text) => Value::Str(text.clone()),
                StatValue::Unsigned(n) => Value::U64(*n),
                StatValue::Signed(n) => Value::I64(*n),
                StatValue::Real(x) => Value::F64(*x),
            };
            Ok((key, value))
        })
        .collect()
}
