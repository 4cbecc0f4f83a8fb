//! Stream, event and timer semantics of the reference device.
//!
//! Each stream is an in-order queue: its work gets increasing sequence
//! numbers, and the host runs it in that order. Cross-stream order comes
//! from two requests TensorFlow makes: "stream A waits for everything on B
//! so far" (`add_dependency`) and "stream A waits for event E"
//! (`wait_event`). Both are remembered on the waiting stream and attached to
//! its next ticket; later work on A is ordered after that ticket anyway.
//!
//! Event and timer states are derived from the completions the host
//! reports, so they agree with the host's own view by construction.
//!
//! Ids come from one counter (streams, events and timers never share one)
//! and maps are `BTreeMap`s: deterministic, and no hash seed to ask WASI for.
//! Pure Rust, no WIT types: tested natively.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderError {
    /// A stream, event or timer id this device did not hand out, or destroyed.
    UnknownHandle(u64),
    /// The host reported completion of work the stream never ticketed.
    NotSubmitted { stream: u64, seq: u64 },
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderError::UnknownHandle(id) => write!(f, "unknown handle {id}"),
            OrderError::NotSubmitted { stream, seq } => {
                write!(f, "completion of seq {seq} on stream {stream}, which was never submitted")
            }
        }
    }
}

/// "Work `seq` on `stream`": a ticket's position, or a wait on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
    /// Seq of the latest ticket; 0 before the first.
    submitted: u64,
    /// Highest seq reported complete (completions arrive in seq order).
    completed: u64,
    /// The first failed work: its seq and what to tell TensorFlow.
    failure: Option<(u64, String)>,
    /// Waits on other streams that the next ticket must carry, at most one
    /// per stream: a later seq on a stream implies the earlier ones.
    waits: Vec<Dep>,
}

impl Stream {
    fn wait_for(&mut self, dep: Dep) {
        match self.waits.iter_mut().find(|w| w.stream == dep.stream) {
            Some(wait) => wait.seq = wait.seq.max(dep.seq),
            None => self.waits.push(dep),
        }
    }

    /// State of an event whose marker is `seq` on this stream.
    fn marker_state(&self, seq: u64) -> EventState {
        if self.completed < seq {
            // Even if earlier work failed: the host reports a marker's
            // state only once it ran, and the two views must agree.
            return EventState::Pending;
        }
        match self.failure {
            Some((failed, _)) if failed <= seq => EventState::Error,
            _ => EventState::Complete,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventBinding {
    /// Created, never recorded.
    Unrecorded,
    /// Fires when this marker completes.
    Marker(Dep),
    /// Its stream was destroyed; the state it had then is final.
    Settled(EventState),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerMark {
    Unset,
    Pending(Dep),
    /// Host time at which the marker completed.
    At(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    Start,
    Stop,
}

#[derive(Debug)]
struct Timer {
    start: TimerMark,
    stop: TimerMark,
}

impl Timer {
    fn mark(&mut self, edge: Edge) -> &mut TimerMark {
        match edge {
            Edge::Start => &mut self.start,
            Edge::Stop => &mut self.stop,
        }
    }
}

#[derive(Debug, Default)]
pub struct Ordering {
    next_id: u64,
    streams: BTreeMap<u64, Stream>,
    events: BTreeMap<u64, EventBinding>,
    timers: BTreeMap<u64, Timer>,
    /// Timer markers not yet completed → their timer, so `complete` (called
    /// for every piece of work) need not look at every timer.
    timer_markers: BTreeMap<Dep, (u64, Edge)>,
}

impl Ordering {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn stream(&mut self, s: u64) -> Result<&mut Stream, OrderError> {
        self.streams.get_mut(&s).ok_or(OrderError::UnknownHandle(s))
    }

    /// True while `dep` names work that has not completed. Work on a
    /// destroyed stream has completed: the host drains a stream first.
    fn outstanding(&self, dep: Dep) -> bool {
        self.streams.get(&dep.stream).is_some_and(|stream| stream.completed < dep.seq)
    }

    /// Each stream with the seq of its latest ticket, in creation order.
    pub fn streams(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.streams.iter().map(|(&id, stream)| (id, stream.submitted))
    }

    pub fn create_stream(&mut self) -> u64 {
        let id = self.fresh_id();
        self.streams.insert(id, Stream::default());
        id
    }

    /// Forgets `s`. The host drains a stream before destroying it, so the
    /// events recorded on it keep the state they have now.
    pub fn destroy_stream(&mut self, s: u64) -> Result<(), OrderError> {
        let stream = self.streams.remove(&s).ok_or(OrderError::UnknownHandle(s))?;
        for binding in self.events.values_mut() {
            if let EventBinding::Marker(dep) = *binding {
                if dep.stream == s {
                    let state = match stream.marker_state(dep.seq) {
                        // Nothing will ever complete it now: failing is better
                        // than leaving TensorFlow polling forever.
                        EventState::Pending => EventState::Error,
                        state => state,
                    };
                    *binding = EventBinding::Settled(state);
                }
            }
        }
        self.timer_markers.retain(|dep, _| dep.stream != s);
        Ok(())
    }

    /// Orders the next piece of work on `s`: the next seq, carrying the
    /// waits requested since the previous ticket that are still outstanding.
    pub fn submit(&mut self, s: u64) -> Result<Ticket, OrderError> {
        let stream = self.stream(s)?;
        stream.submitted += 1;
        let seq = stream.submitted;
        let waits = std::mem::take(&mut stream.waits);
        // Satisfied waits are dropped: a shorter ticket is cheaper for the
        // host, and equally safe.
        let after = waits.into_iter().filter(|&dep| self.outstanding(dep)).collect();
        Ok(Ticket { seq, after })
    }

    /// Records that work `seq` on `s` ran at host time `at_ns`.
    ///
    /// A seq beyond the last ticket (the host ordered some work itself) is
    /// still recorded, and the stream's next seq moves past it, but it is
    /// reported as `NotSubmitted` so the caller can log it.
    pub fn complete(&mut self, s: u64, seq: u64, at_ns: u64, ok: bool) -> Result<(), OrderError> {
        let stream = self.stream(s)?;
        let never_submitted = seq > stream.submitted;
        stream.submitted = stream.submitted.max(seq);
        stream.completed = stream.completed.max(seq);
        if !ok && stream.failure.is_none() {
            stream.failure = Some((seq, format!("work {seq} on stream {s} failed")));
        }
        let marker = Dep { stream: s, seq };
        if let Some((t, edge)) = self.timer_markers.remove(&marker) {
            if let Some(mark) = self.timers.get_mut(&t).map(|timer| timer.mark(edge)) {
                if *mark == TimerMark::Pending(marker) {
                    *mark = TimerMark::At(at_ns);
                }
            }
        }
        match never_submitted {
            true => Err(OrderError::NotSubmitted { stream: s, seq }),
            false => Ok(()),
        }
    }

    /// The next ticket on `dependent` waits for everything on `other` so far.
    pub fn add_dependency(&mut self, dependent: u64, other: u64) -> Result<(), OrderError> {
        let target = self.streams.get(&other).ok_or(OrderError::UnknownHandle(other))?;
        let dep = Dep { stream: other, seq: target.submitted };
        let outstanding = self.outstanding(dep);
        let stream = self.stream(dependent)?;
        // A stream already runs in order after its own work.
        if outstanding && dependent != other {
            stream.wait_for(dep);
        }
        Ok(())
    }

    /// `Err` with the first failure on `s`, if any.
    pub fn stream_status(&self, s: u64) -> Result<Result<(), String>, OrderError> {
        let stream = self.streams.get(&s).ok_or(OrderError::UnknownHandle(s))?;
        Ok(match &stream.failure {
            Some((_, message)) => Err(message.clone()),
            None => Ok(()),
        })
    }

    pub fn create_event(&mut self) -> u64 {
        let id = self.fresh_id();
        self.events.insert(id, EventBinding::Unrecorded);
        id
    }

    pub fn destroy_event(&mut self, e: u64) -> Result<(), OrderError> {
        self.events.remove(&e).map(drop).ok_or(OrderError::UnknownHandle(e))
    }

    /// The event fires with a marker placed after everything on `s` so far.
    /// Re-recording rebinds it: waits taken earlier keep the old marker.
    pub fn record_event(&mut self, s: u64, e: u64) -> Result<Ticket, OrderError> {
        if !self.events.contains_key(&e) {
            return Err(OrderError::UnknownHandle(e));
        }
        let ticket = self.submit(s)?;
        self.events.insert(e, EventBinding::Marker(Dep { stream: s, seq: ticket.seq }));
        Ok(ticket)
    }

    /// The next ticket on `s` waits for the event's current marker. Waiting
    /// for an event never recorded, or already fired, is a no-op.
    pub fn wait_event(&mut self, s: u64, e: u64) -> Result<(), OrderError> {
        let binding = *self.events.get(&e).ok_or(OrderError::UnknownHandle(e))?;
        let outstanding = match binding {
            EventBinding::Marker(dep) if dep.stream != s && self.outstanding(dep) => Some(dep),
            _ => None,
        };
        let stream = self.stream(s)?;
        if let Some(dep) = outstanding {
            stream.wait_for(dep);
        }
        Ok(())
    }

    pub fn event_status(&self, e: u64) -> EventState {
        match self.events.get(&e) {
            None | Some(EventBinding::Unrecorded) => EventState::Unknown,
            Some(EventBinding::Settled(state)) => *state,
            Some(EventBinding::Marker(dep)) => {
                self.streams.get(&dep.stream).map_or(EventState::Unknown, |stream| stream.marker_state(dep.seq))
            }
        }
    }

    pub fn create_timer(&mut self) -> u64 {
        let id = self.fresh_id();
        self.timers.insert(id, Timer { start: TimerMark::Unset, stop: TimerMark::Unset });
        id
    }

    pub fn destroy_timer(&mut self, t: u64) -> Result<(), OrderError> {
        let timer = self.timers.remove(&t).ok_or(OrderError::UnknownHandle(t))?;
        for mark in [timer.start, timer.stop] {
            if let TimerMark::Pending(dep) = mark {
                self.timer_markers.remove(&dep);
            }
        }
        Ok(())
    }

    /// Places the timer's start (which also clears its stop) or stop marker
    /// after everything on `s` so far.
    pub fn mark_timer(&mut self, s: u64, t: u64, start: bool) -> Result<Ticket, OrderError> {
        if !self.timers.contains_key(&t) {
            return Err(OrderError::UnknownHandle(t));
        }
        let ticket = self.submit(s)?;
        let marker = Dep { stream: s, seq: ticket.seq };
        let timer = self.timers.get_mut(&t).expect("checked above");
        let (edge, replaced) = if start {
            let replaced = [timer.start, timer.stop];
            *timer = Timer { start: TimerMark::Pending(marker), stop: TimerMark::Unset };
            (Edge::Start, replaced)
        } else {
            let replaced = [timer.stop, TimerMark::Unset];
            timer.stop = TimerMark::Pending(marker);
            (Edge::Stop, replaced)
        };
        for mark in replaced {
            if let TimerMark::Pending(dep) = mark {
                self.timer_markers.remove(&dep);
            }
        }
        self.timer_markers.insert(marker, (t, edge));
        Ok(ticket)
    }

    /// Host nanoseconds between the completions of the start and stop
    /// markers, once both have run.
    pub fn timer_elapsed(&self, t: u64) -> Option<u64> {
        match *self.timers.get(&t)? {
            Timer { start: TimerMark::At(start), stop: TimerMark::At(stop) } => Some(stop.saturating_sub(start)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(stream: u64, seq: u64) -> Dep {
        Dep { stream, seq }
    }

    #[test]
    fn sequence_numbers_increase_per_stream() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        let b = o.create_stream();
        assert_eq!(o.submit(a).unwrap().seq, 1);
        assert_eq!(o.submit(a).unwrap().seq, 2);
        assert_eq!(o.submit(b).unwrap().seq, 1);
        assert_eq!(o.submit(99), Err(OrderError::UnknownHandle(99)));
        assert_eq!(o.destroy_stream(a), Ok(()));
        assert_eq!(o.submit(a), Err(OrderError::UnknownHandle(a)));
        assert_eq!(o.destroy_stream(a), Err(OrderError::UnknownHandle(a)));
    }

    #[test]
    fn ids_are_distinct_across_kinds() {
        let mut o = Ordering::default();
        let ids = [o.create_stream(), o.create_event(), o.create_timer(), o.create_stream()];
        let mut sorted = ids.to_vec();
        sorted.dedup();
        assert_eq!(sorted.len(), 4);
        assert!(!ids.contains(&0));
        assert_eq!(o.destroy_event(ids[0]), Err(OrderError::UnknownHandle(ids[0])), "a stream id is no event");
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
        assert_eq!(ticket.after, vec![dep(a, 2)]);
        // The wait is consumed by the first ticket.
        assert!(o.submit(b).unwrap().after.is_empty());
        o.complete(a, 1, 10, true).unwrap();
        assert_eq!(o.event_status(e), EventState::Pending);
        o.complete(a, 2, 20, true).unwrap();
        assert_eq!(o.event_status(e), EventState::Complete);
        // Waiting for a fired event adds nothing.
        o.wait_event(b, e).unwrap();
        assert!(o.submit(b).unwrap().after.is_empty());
    }

    #[test]
    fn waits_are_merged_and_carried_by_markers() {
        let mut o = Ordering::default();
        let (a, b, c) = (o.create_stream(), o.create_stream(), o.create_stream());
        o.submit(a).unwrap();
        o.add_dependency(c, a).unwrap();
        o.submit(a).unwrap();
        o.add_dependency(c, a).unwrap();
        o.submit(b).unwrap();
        o.add_dependency(c, b).unwrap();
        o.add_dependency(c, c).unwrap(); // a stream never waits on itself
        let e = o.create_event();
        // The event's marker carries the pending waits.
        let marker = o.record_event(c, e).unwrap();
        assert_eq!(marker, Ticket { seq: 1, after: vec![dep(a, 2), dep(b, 1)] });
        assert!(o.submit(c).unwrap().after.is_empty());
        // A wait on an event recorded on the same stream is implied by order.
        let e2 = o.create_event();
        o.record_event(c, e2).unwrap();
        o.wait_event(c, e2).unwrap();
        assert!(o.submit(c).unwrap().after.is_empty());
        // Unrecorded events are no-ops; unknown ids are errors.
        let never = o.create_event();
        o.wait_event(a, never).unwrap();
        assert!(o.submit(a).unwrap().after.is_empty());
        assert_eq!(o.wait_event(a, 999), Err(OrderError::UnknownHandle(999)));
        assert_eq!(o.wait_event(999, e), Err(OrderError::UnknownHandle(999)));
        assert_eq!(o.add_dependency(a, 999), Err(OrderError::UnknownHandle(999)));
        assert_eq!(o.add_dependency(999, a), Err(OrderError::UnknownHandle(999)));
    }

    #[test]
    fn satisfied_waits_are_dropped() {
        let mut o = Ordering::default();
        let (a, b) = (o.create_stream(), o.create_stream());
        o.submit(a).unwrap();
        o.complete(a, 1, 5, true).unwrap();
        o.add_dependency(b, a).unwrap();
        assert!(o.submit(b).unwrap().after.is_empty());
        o.submit(a).unwrap();
        o.add_dependency(b, a).unwrap();
        // Completed between the request and the ticket: dropped too.
        o.complete(a, 2, 6, true).unwrap();
        assert!(o.submit(b).unwrap().after.is_empty());
        o.submit(a).unwrap();
        o.add_dependency(b, a).unwrap();
        assert_eq!(o.submit(b).unwrap().after, vec![dep(a, 3)]);
    }

    #[test]
    fn events_can_be_rerecorded() {
        let mut o = Ordering::default();
        let (a, b) = (o.create_stream(), o.create_stream());
        let e = o.create_event();
        let first = o.record_event(a, e).unwrap();
        o.wait_event(b, e).unwrap();
        o.complete(a, first.seq, 1, true).unwrap();
        assert_eq!(o.event_status(e), EventState::Complete);
        let second = o.record_event(a, e).unwrap();
        assert_eq!(o.event_status(e), EventState::Pending);
        o.wait_event(b, e).unwrap();
        assert_eq!(o.submit(b).unwrap().after, vec![dep(a, second.seq)]);
        o.complete(a, second.seq, 2, true).unwrap();
        assert_eq!(o.event_status(e), EventState::Complete);
        assert_eq!(o.destroy_event(e), Ok(()));
        assert_eq!(o.event_status(e), EventState::Unknown);
        assert_eq!(o.record_event(a, e), Err(OrderError::UnknownHandle(e)));
    }

    #[test]
    fn failures_mark_the_stream_and_later_events() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        let (before, after) = (o.create_event(), o.create_event());
        o.record_event(a, before).unwrap();
        o.submit(a).unwrap();
        o.record_event(a, after).unwrap();
        assert_eq!(o.stream_status(a), Ok(Ok(())));
        o.complete(a, 1, 1, true).unwrap();
        o.complete(a, 2, 2, false).unwrap();
        // Not run yet: pending, even though the stream failed before it.
        assert_eq!(o.event_status(after), EventState::Pending);
        o.complete(a, 3, 3, true).unwrap();
        assert_eq!(o.event_status(before), EventState::Complete);
        assert_eq!(o.event_status(after), EventState::Error);
        let message = o.stream_status(a).unwrap().unwrap_err();
        assert!(message.contains("work 2"), "{message}");
        assert_eq!(o.stream_status(42), Err(OrderError::UnknownHandle(42)));
    }

    #[test]
    fn events_outlive_their_stream() {
        let mut o = Ordering::default();
        let (a, b) = (o.create_stream(), o.create_stream());
        let (done, failed, never_ran) = (o.create_event(), o.create_event(), o.create_event());
        o.record_event(a, done).unwrap();
        o.complete(a, 1, 1, true).unwrap();
        o.record_event(b, failed).unwrap();
        o.complete(b, 1, 1, false).unwrap();
        o.record_event(b, never_ran).unwrap();
        o.destroy_stream(a).unwrap();
        o.destroy_stream(b).unwrap();
        assert_eq!(o.event_status(done), EventState::Complete);
        assert_eq!(o.event_status(failed), EventState::Error);
        assert_eq!(o.event_status(never_ran), EventState::Error);
        // Waiting on work of a destroyed (drained) stream adds nothing.
        let c = o.create_stream();
        o.wait_event(c, done).unwrap();
        assert!(o.submit(c).unwrap().after.is_empty());
    }

    #[test]
    fn completions_beyond_the_last_ticket_are_reported_and_skipped() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        o.submit(a).unwrap();
        assert_eq!(o.complete(a, 3, 1, true), Err(OrderError::NotSubmitted { stream: a, seq: 3 }));
        // The next ticket still moves past everything the host ran.
        assert_eq!(o.submit(a).unwrap().seq, 4);
        assert_eq!(o.complete(77, 1, 1, true), Err(OrderError::UnknownHandle(77)));
    }

    #[test]
    fn timers_use_completion_times() {
        let mut o = Ordering::default();
        let a = o.create_stream();
        let t = o.create_timer();
        assert_eq!(o.timer_elapsed(t), None);
        let start = o.mark_timer(a, t, true).unwrap();
        o.submit(a).unwrap();
        let stop = o.mark_timer(a, t, false).unwrap();
        assert_eq!(o.timer_elapsed(t), None);
        o.complete(a, start.seq, 1_000, true).unwrap();
        o.complete(a, 2, 1_500, true).unwrap();
        assert_eq!(o.timer_elapsed(t), None);
        o.complete(a, stop.seq, 4_000, true).unwrap();
        assert_eq!(o.timer_elapsed(t), Some(3_000));
        // Restarting clears the old measurement.
        let restart = o.mark_timer(a, t, true).unwrap();
        assert_eq!(o.timer_elapsed(t), None);
        o.complete(a, restart.seq, 5_000, true).unwrap();
        let stop = o.mark_timer(a, t, false).unwrap();
        o.complete(a, stop.seq, 5_250, true).unwrap();
        assert_eq!(o.timer_elapsed(t), Some(250));
        assert!(o.timer_markers.is_empty(), "completed markers are forgotten");
        assert_eq!(o.destroy_timer(t), Ok(()));
        assert_eq!(o.timer_elapsed(t), None);
        assert_eq!(o.destroy_timer(t), Err(OrderError::UnknownHandle(t)));
        assert_eq!(o.mark_timer(a, t, true), Err(OrderError::UnknownHandle(t)));
    }

    #[test]
    fn timers_span_streams_and_survive_them() {
        let mut o = Ordering::default();
        let (a, b) = (o.create_stream(), o.create_stream());
        let t = o.create_timer();
        let start = o.mark_timer(a, t, true).unwrap();
        let stop = o.mark_timer(b, t, false).unwrap();
        o.complete(b, stop.seq, 900, true).unwrap();
        o.complete(a, start.seq, 100, true).unwrap();
        o.destroy_stream(a).unwrap();
        o.destroy_stream(b).unwrap();
        assert_eq!(o.timer_elapsed(t), Some(800));
    }

    /// Drives several streams at random like a host would (submitting,
    /// completing in seq order, adding waits) and checks every ticket.
    #[test]
    fn randomized_tickets_are_well_formed() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut o = Ordering::default();
        let streams: Vec<u64> = (0..4).map(|_| o.create_stream()).collect();
        let events: Vec<u64> = (0..3).map(|_| o.create_event()).collect();
        // Host view per stream: last seq issued, last seq completed.
        let mut issued = vec![0u64; streams.len()];
        let mut done = vec![0u64; streams.len()];
        let index = |id: u64| streams.iter().position(|&s| s == id).unwrap();
        for _ in 0..5_000 {
            let i = (next() % streams.len() as u64) as usize;
            let s = streams[i];
            let ticket = match next() % 6 {
                0 if done[i] < issued[i] => {
                    done[i] += 1;
                    o.complete(s, done[i], done[i], true).unwrap();
                    None
                }
                1 => {
                    o.add_dependency(s, streams[(next() % streams.len() as u64) as usize]).unwrap();
                    None
                }
                2 => {
                    o.wait_event(s, events[(next() % events.len() as u64) as usize]).unwrap();
                    None
                }
                3 => Some(o.record_event(s, events[(next() % events.len() as u64) as usize]).unwrap()),
                _ => Some(o.submit(s).unwrap()),
            };
            if let Some(ticket) = ticket {
                assert_eq!(ticket.seq, issued[i] + 1, "seqs increase by one");
                issued[i] = ticket.seq;
                for dep in &ticket.after {
                    let j = index(dep.stream);
                    assert_ne!(j, i, "no wait on the own stream");
                    assert!(dep.seq <= issued[j], "wait on work not yet submitted");
                    assert!(dep.seq > done[j], "wait on work already complete");
                }
                let mut waited: Vec<u64> = ticket.after.iter().map(|d| d.stream).collect();
                waited.sort_unstable();
                waited.dedup();
                assert_eq!(waited.len(), ticket.after.len(), "one wait per stream");
            }
            for &e in &events {
                let state = o.event_status(e);
                assert!(matches!(state, EventState::Unknown | EventState::Pending | EventState::Complete), "{state:?}");
            }
        }
    }
}
