//! Stream, event and timer semantics of the reference device.
//!
//! Each stream is an in-order queue: its work gets increasing sequence
//! numbers. Cross-stream order comes from two requests TensorFlow makes:
//! "stream A waits for everything on B so far" (`add_dependency`) and
//! "stream A waits for event E" (`wait_event`). Both are remembered on the
//! waiting stream and attached to its next ticket. Pure Rust: tested natively.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderError {
    UnknownHandle(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dep {
    pub stream: u64,
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub seq: u64,
    pub after: Vec<Dep>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    Unknown,
    Pending,
    Complete,
    Error,
}

#[derive(Debug, Default)]
struct Stream {
    submitted: u64,
    completed: u64,
    /// Seq of the first failed work, with its message.
    failed: Option<(u64, String)>,
    /// Waits the next ticket must carry.
    pending: Vec<Dep>,
    /// Completion times of markers, by seq (only kept for timer markers).
    times: HashMap<u64, u64>,
}

#[derive(Debug, Default)]
struct Timer {
    start: Option<Dep>,
    stop: Option<Dep>,
}

#[derive(Debug, Default)]
pub struct Ordering {
    next_id: u64,
    streams: HashMap<u64, Stream>,
    /// Event → the marker it fires on, once recorded.
    events: HashMap<u64, Option<Dep>>,
    timers: HashMap<u64, Timer>,
}

impl Ordering {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn create_stream(&mut self) -> u64 {
        let id = self.fresh_id();
        self.streams.insert(id, Stream::default());
        id
    }

    pub fn destroy_stream(&mut self, s: u64) -> Result<(), OrderError> {
        self.streams.remove(&s).map(drop).ok_or(OrderError::UnknownHandle(s))
    }

    fn stream(&mut self, s: u64) -> Result<&mut Stream, OrderError> {
        self.streams.get_mut(&s).ok_or(OrderError::UnknownHandle(s))
    }

    pub fn submit(&mut self, s: u64) -> Result<Ticket, OrderError> {
        let stream = self.stream(s)?;
        stream.submitted += 1;
        let after = std::mem::take(&mut stream.pending);
        let seq = stream.submitted;
        // Drop waits that are already satisfied: a shorter ticket is cheaper
        // for the host, and equally safe.
        let after = after
            .into_iter()
            .filter(|dep| self.streams.get(&dep.stream).is_some_and(|o| o.completed < dep.seq))
            .collect();
        Ok(Ticket { seq, after })
    }

    pub fn complete(&mut self, s: u64, seq: u64, at_ns: u64, ok: bool) {
        // Completion of a destroyed stream's work is harmless; ignore it.
        let Some(stream) = self.streams.get_mut(&s) else { return };
        stream.completed = stream.completed.max(seq);
        stream.times.insert(seq, at_ns);
        if !ok && stream.failed.is_none() {
            stream.failed = Some((seq, format!("work {seq} failed")));
        }
        // Only timer markers need their times; forget the rest.
        let wanted: Vec<u64> = self
            .timers
            .values()
            .flat_map(|t| [t.start, t.stop])
            .flatten()
            .filter(|d| d.stream == s)
            .map(|d| d.seq)
            .collect();
        if let Some(stream) = self.streams.get_mut(&s) {
            stream.times.retain(|seq, _| wanted.contains(seq));
        }
    }

    pub fn add_dependency(&mut self, dependent: u64, other: u64) -> Result<(), OrderError> {
        let target = self.stream(other)?;
        let dep = Dep { stream: other, seq: target.submitted };
        let outstanding = target.submitted > target.completed;
        let stream = self.stream(dependent)?;
        if outstanding && dependent != other {
            stream.pending.push(dep);
        }
        Ok(())
    }

    pub fn stream_status(&self, s: u64) -> Result<Result<(), String>, OrderError> {
        let stream = self.streams.get(&s).ok_or(OrderError::UnknownHandle(s))?;
        Ok(match &stream.failed {
            Some((_, message)) => Err(message.clone()),
            None => Ok(()),
        })
    }

    pub fn create_event(&mut self) -> u64 {
        let id = self.fresh_id();
        self.events.insert(id, None);
        id
    }

    pub fn destroy_event(&mut self, e: u64) -> Result<(), OrderError> {
        self.events.remove(&e).map(drop).ok_or(OrderError::UnknownHandle(e))
    }

    /// The event fires with a marker placed after everything on `s` so far.
    pub fn record_event(&mut self, s: u64, e: u64) -> Result<Ticket, OrderError> {
        if !self.events.contains_key(&e) {
            return Err(OrderError::UnknownHandle(e));
        }
        let ticket = self.submit(s)?;
        self.events.insert(e, Some(Dep { stream: s, seq: ticket.seq }));
        Ok(ticket)
    }

    pub fn wait_event(&mut self, s: u64, e: u64) -> Result<(), OrderError> {
        let marker = *self.events.get(&e).ok_or(OrderError::UnknownHandle(e))?;
        let stream = self.stream(s)?;
        if let Some(dep) = marker {
            if dep.stream != s {
                stream.pending.push(dep);
            }
        }
        Ok(())
    }

    pub fn event_status(&self, e: u64) -> EventState {
        let Some(Some(dep)) = self.events.get(&e) else { return EventState::Unknown };
        let Some(stream) = self.streams.get(&dep.stream) else { return EventState::Unknown };
        if stream.completed < dep.seq {
            return EventState::Pending;
        }
        match stream.failed {
            Some((failed_at, _)) if failed_at <= dep.seq => EventState::Error,
            _ => EventState::Complete,
        }
    }

    pub fn create_timer(&mut self) -> u64 {
        let id = self.fresh_id();
        self.timers.insert(id, Timer::default());
        id
    }

    pub fn destroy_timer(&mut self, t: u64) -> Result<(), OrderError> {
        self.timers.remove(&t).map(drop).ok_or(OrderError::UnknownHandle(t))
    }

    pub fn mark_timer(&mut self, s: u64, t: u64, start: bool) -> Result<Ticket, OrderError> {
        if !self.timers.contains_key(&t) {
            return Err(OrderError::UnknownHandle(t));
        }
        let ticket = self.submit(s)?;
        let dep = Some(Dep { stream: s, seq: ticket.seq });
        let timer = self.timers.get_mut(&t).expect("checked above");
        if start {
            *timer = Timer { start: dep, stop: None };
        } else {
            timer.stop = dep;
        }
        Ok(ticket)
    }

    pub fn timer_elapsed(&self, t: u64) -> Option<u64> {
        let timer = self.timers.get(&t)?;
        let time = |dep: Option<Dep>| {
            let dep = dep?;
            self.streams.get(&dep.stream)?.times.get(&dep.seq).copied()
        };
        Some(time(timer.stop)?.saturating_sub(time(timer.start)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_increase_per_stream() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        let b = o.create_stream();
        assert_eq!(o.submit(a).unwrap().seq, 1);
        assert_eq!(o.submit(a).unwrap().seq, 2);
        assert_eq!(o.submit(b).unwrap().seq, 1);
        assert_eq!(o.submit(99), Err(OrderError::UnknownHandle(99)));
    }

    #[test]
    fn events_order_streams() {
        let mut o = Ordering::default();
        let (a, b) = (o.create_stream(), o.create_stream());
        let e = o.create_event();
        assert_eq!(o.event_status(e), EventState::Unknown);
        o.submit(a).unwrap();
        let marker = o.record_event(a, e).unwrap();
        assert_eq!(marker.seq, 2);
        assert_eq!(o.event_status(e), EventState::Pending);
        o.wait_event(b, e).unwrap();
        let ticket = o.submit(b).unwrap();
        assert_eq!(ticket.after, vec![Dep { stream: a, seq: 2 }]);
        // The wait is consumed by the first ticket.
        assert!(o.submit(b).unwrap().after.is_empty());
        o.complete(a, 1, 10, true);
        assert_eq!(o.event_status(e), EventState::Pending);
        o.complete(a, 2, 20, true);
        assert_eq!(o.event_status(e), EventState::Complete);
    }

    #[test]
    fn satisfied_waits_are_dropped() {
        let mut o = Ordering::default();
        let (a, b) = (o.create_stream(), o.create_stream());
        o.submit(a).unwrap();
        o.complete(a, 1, 5, true);
        o.add_dependency(b, a).unwrap();
        assert!(o.submit(b).unwrap().after.is_empty());
        o.submit(a).unwrap();
        o.add_dependency(b, a).unwrap();
        assert_eq!(o.submit(b).unwrap().after, vec![Dep { stream: a, seq: 2 }]);
    }

    #[test]
    fn failures_mark_the_stream_and_later_events() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        let e = o.create_event();
        o.submit(a).unwrap();
        o.record_event(a, e).unwrap();
        o.complete(a, 1, 1, false);
        o.complete(a, 2, 2, true);
        assert_eq!(o.event_status(e), EventState::Error);
        assert!(o.stream_status(a).unwrap().is_err());
    }

    #[test]
    fn timers_use_completion_times() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        let t = o.create_timer();
        let start = o.mark_timer(a, t, true).unwrap();
        o.submit(a).unwrap();
        let stop = o.mark_timer(a, t, false).unwrap();
        assert_eq!(o.timer_elapsed(t), None);
        o.complete(a, start.seq, 1_000, true);
        o.complete(a, 2, 1_500, true);
        assert_eq!(o.timer_elapsed(t), None);
        o.complete(a, stop.seq, 4_000, true);
        assert_eq!(o.timer_elapsed(t), Some(3_000));
        assert_eq!(o.destroy_timer(t), Ok(()));
        assert_eq!(o.timer_elapsed(t), None);
    }
}
