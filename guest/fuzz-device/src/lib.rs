//! A test guest that lies at random, for the fuzz tests of the host's
//! answer validation (`host/runtime/tests/fuzz/`).
//!
//! It is the reference device (it includes the reference guest's
//! allocator, ordering and glue modules), except that each answer the host
//! can check is, with probability `lie-rate`, replaced by a lie drawn from
//! a seeded generator: a placement out of bounds, past the end of the
//! address space, misaligned or over a live allocation; a ticket whose seq
//! does not move forward, that waits on its own later work, on work never
//! submitted, on an unknown stream, or that drops a wait it owes; an event
//! state that contradicts the work's; a usage report that does not fit the
//! region. Every lie is logged (`info`, `lie: <call> <kind>`) before it is
//! told, so a test can count them: each must cost the instance exactly
//! once, and an honest answer never.
//!
//! Options (`[guest.config]`): `seed` (an integer, default 0), mixed with
//! the device's ordinal so that devices of one policy lie differently,
//! `lie-rate` (0 to 1, default 0.1), and `lie-in` (default all: a
//! comma-separated list of `allocate`, `submit`, `record-event`,
//! `mark-timer`, `event-status`, `usage`), the only calls that may lie. A
//! malformed value fails `init`.

#[path = "../../reference-device/src/allocator.rs"]
pub mod allocator;
#[path = "../../reference-device/src/ordering.rs"]
pub mod ordering;

#[cfg(target_arch = "wasm32")]
#[path = "../../reference-device/src/glue.rs"]
mod glue;

/// The options this guest reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub seed: u64,
    pub lie_rate: f64,
    /// The calls that may lie (`None`: all of them).
    pub lie_in: Option<Vec<String>>,
    /// Options this guest does not know, to warn about.
    pub unknown: Vec<String>,
}

impl Config {
    pub fn parse(options: &[(String, String)]) -> Result<Config, String> {
        let mut config = Config { seed: 0, lie_rate: 0.1, lie_in: None, unknown: Vec::new() };
        for (key, value) in options {
            match key.as_str() {
                "seed" => {
                    config.seed =
                        value.trim().parse().map_err(|_| format!("option seed = {value:?} is not an integer"))?;
                }
                "lie-rate" => {
                    config.lie_rate = value
                        .trim()
                        .parse()
                        .ok()
                        .filter(|rate: &f64| (0.0..=1.0).contains(rate))
                        .ok_or_else(|| format!("option lie-rate = {value:?} is not a number from 0 to 1"))?;
                }
                "lie-in" => {
                    let calls: Vec<String> = value.split(',').map(|c| c.trim().to_owned()).collect();
                    if let Some(bad) = calls.iter().find(|c| !CALLS.contains(&c.as_str())) {
                        return Err(format!("option lie-in names {bad:?}, not one of {}", CALLS.join(", ")));
                    }
                    config.lie_in = Some(calls);
                }
                other => config.unknown.push(other.to_owned()),
            }
        }
        Ok(config)
    }
}

/// The calls whose answers the host checks, and this guest may lie in.
pub const CALLS: [&str; 6] = ["allocate", "submit", "record-event", "mark-timer", "event-status", "usage"];

/// SplitMix64: small, and good enough to decide when and how to lie.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for device `ordinal` of a policy seeded with `seed`.
    pub fn new(seed: u64, ordinal: u32) -> Rng {
        let mut rng = Rng(seed ^ u64::from(ordinal).wrapping_mul(0xa076_1d64_78bd_642f));
        rng.next();
        rng
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// An aligned offset whose `size`-byte range does not fit in a
/// `memory_size`-byte region: straddling its end where possible, else the
/// first aligned offset past it.
pub fn out_of_bounds_offset(memory_size: u64, size: u64, alignment: u64) -> u64 {
    let alignment = alignment.max(1);
    let last_aligned_start = memory_size.saturating_sub(1) / alignment * alignment;
    if memory_size > 0 && last_aligned_start.saturating_add(size) > memory_size {
        last_aligned_start
    } else {
        memory_size.checked_next_multiple_of(alignment).unwrap_or(memory_size)
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    use crate::allocator::BestFit;
    use crate::ordering::{self, Dep, Ordering};
    use crate::{out_of_bounds_offset, Config, Rng};

    wit_bindgen::generate!({
        path: "../../wit/device",
        world: "device",
    });

    use crate::glue::{self, alloc_error, order_error};

    use exports::tfwasm::device::identity::Guest as Identity;
    use exports::tfwasm::device::memory::{Guest as Memory, MemoryUsage};
    use exports::tfwasm::device::streams::{EventState, Guest as Streams, Ticket, WorkKind};
    use tfwasm::device::host::{log, LogLevel};
    use tfwasm::device::types::{DeviceConfig, DeviceError, DeviceInfo};

    struct Device {
        rng: Rng,
        lie_rate: f64,
        lie_in: Option<Vec<String>>,
        memory_size: u64,
        memory: BestFit,
        ordering: Ordering,
    }

    /// Says which lie comes, so the test can count it.
    fn confess(call: &str, kind: &str) {
        log(LogLevel::Info, &format!("lie: {call} {kind}"));
    }

    impl Device {
        fn lies(&mut self, call: &str) -> bool {
            let may = self.lie_in.as_ref().is_none_or(|calls| calls.iter().any(|c| c == call));
            may && self.rng.chance(self.lie_rate)
        }

        fn allocate(&mut self, size: u64, alignment: u64) -> Result<u64, DeviceError> {
            if !self.lies("allocate") {
                return self.memory.allocate(size, alignment).map_err(alloc_error);
            }
            let alignment = alignment.max(1);
            let live: Vec<(u64, u64)> = self.memory.live().collect();
            loop {
                match self.rng.below(4) {
                    0 => {
                        confess("allocate", "out-of-bounds");
                        return Ok(out_of_bounds_offset(self.memory_size, size, alignment));
                    }
                    1 => {
                        confess("allocate", "overflow");
                        return Ok(u64::MAX / alignment * alignment);
                    }
                    2 if alignment > 1 => {
                        let Ok(offset) = self.memory.allocate(size.saturating_add(alignment), alignment) else {
                            continue;
                        };
                        confess("allocate", "misaligned");
                        return Ok(offset + 1 + self.rng.below(alignment - 1));
                    }
                    3 if !live.is_empty() => {
                        let (offset, reserved) = live[self.rng.below(live.len() as u64) as usize];
                        confess("allocate", "overlap");
                        return Ok(offset + self.rng.below(reserved.div_ceil(alignment)) * alignment);
                    }
                    _ => {}
                }
            }
        }

        /// The honest ticket, or a lie about it.
        fn ticket(&mut self, call: &str, s: u64, honest: ordering::Ticket) -> Ticket {
            let mut ticket = honest;
            if !self.lies(call) {
                return glue::ticket(ticket);
            }
            let others: Vec<(u64, u64)> = self.ordering.streams().filter(|&(id, _)| id != s).collect();
            loop {
                match self.rng.below(5) {
                    0 => {
                        confess(call, "bad-seq");
                        ticket.seq = if self.rng.chance(0.5) { ticket.seq - 1 } else { 0 };
                    }
                    1 => {
                        confess(call, "waits-on-own-later-work");
                        ticket.after.push(Dep { stream: s, seq: ticket.seq + self.rng.below(3) });
                    }
                    2 if !others.is_empty() => {
                        let (stream, submitted) = others[self.rng.below(others.len() as u64) as usize];
                        confess(call, "dangling-dependency");
                        ticket.after.push(Dep { stream, seq: submitted + 1 + self.rng.below(1000) });
                    }
                    3 => {
                        let unknown = self.ordering.streams().map(|(id, _)| id).max().unwrap_or(0) + 1000;
                        confess(call, "unknown-stream");
                        ticket.after.push(Dep { stream: unknown, seq: 1 });
                    }
                    4 if !ticket.after.is_empty() => {
                        confess(call, "drops-a-wait");
                        ticket.after.clear();
                    }
                    _ => continue,
                }
                return glue::ticket(ticket);
            }
        }

        fn event_status(&mut self, e: u64) -> EventState {
            let honest = glue::event_state(Some(self.ordering.event_status(e)));
            if !self.lies("event-status") {
                return honest;
            }
            // The host accepts one terminal state for the other (a failure
            // the guest has not heard of yet): not a lie it could catch.
            let terminal = |s: EventState| matches!(s, EventState::Complete | EventState::Error);
            let states = [EventState::Unknown, EventState::Pending, EventState::Complete, EventState::Error];
            let lies: Vec<EventState> =
                states.into_iter().filter(|&s| s != honest && !(terminal(s) && terminal(honest))).collect();
            let lie = lies[self.rng.below(lies.len() as u64) as usize];
            confess("event-status", &format!("{lie:?} for {honest:?}"));
            lie
        }

        fn usage(&mut self) -> MemoryUsage {
            let mut usage = glue::usage(self.memory.stats());
            if !self.lies("usage") {
                return usage;
            }
            let beyond = |rng: &mut Rng, limit: u64| limit.saturating_add(1 + rng.below(1 << 20));
            match self.rng.below(3) {
                0 => {
                    confess("usage", "limit-past-the-region");
                    usage.limit = beyond(&mut self.rng, self.memory_size);
                }
                1 => {
                    confess("usage", "more-in-use-than-the-limit");
                    usage.bytes_in_use = beyond(&mut self.rng, usage.limit);
                }
                _ => {
                    confess("usage", "free-block-past-the-limit");
                    usage.largest_free_block = beyond(&mut self.rng, usage.limit);
                }
            }
            usage
        }
    }

    thread_local! {
        static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
    }

    fn with<R>(f: impl FnOnce(&mut Device) -> Result<R, DeviceError>) -> Result<R, DeviceError> {
        DEVICE.with_borrow_mut(|device| match device {
            Some(device) => f(device),
            None => Err(glue::init_not_called()),
        })
    }

    struct Fuzz;

    impl Identity for Fuzz {
        fn init(config: DeviceConfig) -> Result<DeviceInfo, String> {
            if DEVICE.with_borrow(Option::is_some) {
                return Err("init called twice; the device is already set up".into());
            }
            let Config { seed, lie_rate, lie_in, unknown } = Config::parse(&config.options)?;
            for key in unknown {
                log(LogLevel::Warn, &format!("ignoring unknown option {key:?}"));
            }
            DEVICE.set(Some(Device {
                rng: Rng::new(seed, config.ordinal),
                lie_rate,
                lie_in,
                memory_size: config.memory_size,
                memory: BestFit::new(config.memory_size),
                ordering: Ordering::default(),
            }));
            Ok(DeviceInfo {
                hardware_name: "tfwasm fuzz test device".into(),
                vendor: "tfwasm tests".into(),
                pci_bus_id: String::new(),
                numa_node: -1,
                memory_bandwidth: 1_000_000_000,
                gflops: 1.0,
            })
        }
    }

    impl Memory for Fuzz {
        fn allocate(size: u64, alignment: u64) -> Result<u64, DeviceError> {
            with(|d| d.allocate(size, alignment))
        }

        fn free(offset: u64) -> Result<(), DeviceError> {
            with(|d| d.memory.free(offset).map_err(alloc_error))
        }

        fn usage() -> MemoryUsage {
            with(|d| Ok(d.usage())).unwrap_or_else(|_| glue::usage(Default::default()))
        }

        fn adopt(live: Vec<(u64, u64)>) -> Result<(), DeviceError> {
            with(|d| d.memory.adopt(&live).map_err(alloc_error))
        }
    }

    impl Streams for Fuzz {
        fn create_stream() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_stream()))
        }

        fn destroy_stream(s: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_stream(s).map_err(order_error))
        }

        fn submit(s: u64, _kind: WorkKind) -> Result<Ticket, DeviceError> {
            with(|d| {
                let honest = d.ordering.submit(s).map_err(order_error)?;
                Ok(d.ticket("submit", s, honest))
            })
        }

        fn complete(s: u64, seq: u64, at_ns: u64, ok: bool) {
            let _ = with(|d| d.ordering.complete(s, seq, at_ns, ok).map_err(order_error));
        }

        fn add_dependency(dependent: u64, other: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.add_dependency(dependent, other).map_err(order_error))
        }

        fn stream_status(s: u64) -> Result<(), String> {
            with(|d| d.ordering.stream_status(s).map_err(order_error)).unwrap_or_else(|e| Err(glue::describe(&e)))
        }

        fn create_event() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_event()))
        }

        fn destroy_event(e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_event(e).map_err(order_error))
        }

        fn record_event(s: u64, e: u64) -> Result<Ticket, DeviceError> {
            with(|d| {
                let honest = d.ordering.record_event(s, e).map_err(order_error)?;
                Ok(d.ticket("record-event", s, honest))
            })
        }

        fn wait_event(s: u64, e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.wait_event(s, e).map_err(order_error))
        }

        fn event_status(e: u64) -> EventState {
            with(|d| Ok(d.event_status(e))).unwrap_or(EventState::Unknown)
        }

        fn create_timer() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_timer()))
        }

        fn destroy_timer(t: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_timer(t).map_err(order_error))
        }

        fn mark_timer(s: u64, t: u64, start: bool) -> Result<Ticket, DeviceError> {
            with(|d| {
                let honest = d.ordering.mark_timer(s, t, start).map_err(order_error)?;
                Ok(d.ticket("mark-timer", s, honest))
            })
        }

        // Never a lie: the host cannot tell a wrong duration once both
        // markers ran, and before that it may not have told this instance
        // of them (a timer marked on a stream the host orders itself).
        fn timer_elapsed(t: u64) -> Option<u64> {
            with(|d| Ok(d.ordering.timer_elapsed(t))).ok().flatten()
        }
    }

    export!(Fuzz);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    #[test]
    fn options_parse_and_typos_are_refused() {
        let config = Config::parse(&options(&[("seed", "123"), ("lie-rate", "0.25"), ("colour", "red")])).unwrap();
        assert_eq!((config.seed, config.lie_rate, config.unknown), (123, 0.25, vec!["colour".to_owned()]));
        assert_eq!((Config::parse(&[]).unwrap().lie_rate, Config::parse(&[]).unwrap().lie_in), (0.1, None));
        let only = Config::parse(&options(&[("lie-in", "allocate, usage")])).unwrap().lie_in;
        assert_eq!(only, Some(vec!["allocate".to_owned(), "usage".to_owned()]));
        for bad in [("seed", "x"), ("lie-rate", "1.5"), ("lie-rate", "-0.1"), ("lie-rate", "often"), ("lie-in", "free")]
        {
            let err = Config::parse(&options(&[bad])).unwrap_err();
            assert!(err.contains(bad.0), "{err}");
        }
    }

    #[test]
    fn the_rate_is_the_rate_and_devices_differ() {
        let mut rng = Rng::new(7, 0);
        let lies = (0..100_000).filter(|_| rng.chance(0.2)).count();
        assert!((19_000..21_000).contains(&lies), "{lies}");
        assert!((0..1000).all(|_| !rng.chance(0.0)));
        assert!((0..1000).all(|_| rng.chance(1.0)));
        assert_ne!(Rng::new(7, 0).next(), Rng::new(7, 1).next());
    }

    #[test]
    fn out_of_bounds_offsets_never_fit() {
        for (memory, size, alignment) in [(4096, 100, 256), (4096, 256, 256), (1000, 10, 256), (0, 1, 256)] {
            let offset = out_of_bounds_offset(memory, size, alignment);
            assert_eq!(offset % alignment, 0);
            assert!(offset + size > memory, "{memory} {size} {alignment}: {offset} fits");
        }
    }
}
