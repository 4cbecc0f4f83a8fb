//! The import `tfwasm:profiler/annotations` that device guests of world
//! `annotated-device` use to annotate their device's trace. The host links
//! it into every device guest's instance (a guest of the plain device world
//! does not import it, and is unaffected).
//!
//! An annotation is recorded like the host's own events, on the calling
//! thread, for the device whose instance made the call, and only while a
//! session runs. What a guest hands over is cut to the sizes below: a guest
//! cannot grow the trace, or the host's memory, beyond the ring's bound.

use std::collections::HashMap;

use super::xspace::Value;
use super::{Event, Record};
use crate::sandbox::{guest_text, GuestState};

wasmtime::component::bindgen!({
    path: "../../wit/profiler",
    world: "annotator",
});

use self::tfwasm::profiler::types::{Stat, StatValue};
pub use self::Annotator as AnnotatorWorld;

/// Characters of an annotation's name, and of a stat's key or text.
pub const MAX_NAME_CHARS: usize = 256;
pub const MAX_TEXT_CHARS: usize = 1024;
/// Stats one annotation keeps.
pub const MAX_STATS: usize = 16;
/// Spans one instance may have open; more are not recorded.
pub const MAX_OPEN_SPANS: usize = 1024;

/// What one device guest's instance has open, and which device it serves.
#[derive(Debug, Default)]
pub struct Annotations {
    /// The device's ordinal; `None` for an instance that is not a device's
    /// (its annotations are dropped).
    pub device: Option<u32>,
    open: HashMap<u64, OpenSpan>,
    next_span: u64,
}

#[derive(Debug)]
struct OpenSpan {
    name: Box<str>,
    stats: Vec<(String, Value)>,
    start_ns: u64,
}

fn kept(stats: Vec<Stat>) -> Vec<(String, Value)> {
    stats
        .into_iter()
        .take(MAX_STATS)
        .map(|stat| {
            let value = match stat.value {
                StatValue::Text(text) => Value::Str(guest_text(&text, MAX_TEXT_CHARS)),
                StatValue::Unsigned(n) => Value::U64(n),
                StatValue::Signed(n) => Value::I64(n),
                StatValue::Real(x) => Value::F64(x),
            };
            (guest_text(&stat.key, MAX_NAME_CHARS), value)
        })
        .collect()
}

fn record(device: u32, start_ns: u64, name: Box<str>, stats: Vec<(String, Value)>) {
    super::record(Record {
        device,
        thread: super::current_thread(),
        start_ns,
        end_ns: super::now_ns(),
        event: Event::Annotation { name, stats },
    });
}

impl self::tfwasm::profiler::annotations::Host for GuestState {
    fn active(&mut self) -> bool {
        super::active()
    }

    fn instant(&mut self, name: String, stats: Vec<Stat>) {
        if let (Some(device), true) = (self.annotations.device, super::active()) {
            record(device, super::now_ns(), guest_text(&name, MAX_NAME_CHARS).into(), kept(stats));
        }
    }

    fn begin_span(&mut self, name: String, stats: Vec<Stat>) -> u64 {
        let annotations = &mut self.annotations;
        annotations.next_span += 1;
        let id = annotations.next_span;
        if annotations.device.is_some() && super::active() && annotations.open.len() < MAX_OPEN_SPANS {
            let span = OpenSpan {
                name: guest_text(&name, MAX_NAME_CHARS).into(),
                stats: kept(stats),
                start_ns: super::now_ns(),
            };
            annotations.open.insert(id, span);
        }
        id
    }

    fn end_span(&mut self, id: u64) {
        let Some(span) = self.annotations.open.remove(&id) else { return };
        if let (Some(device), true) = (self.annotations.device, super::active()) {
            record(device, span.start_ns, span.name, span.stats);
        }
    }
}

impl self::tfwasm::profiler::types::Host for GuestState {}
