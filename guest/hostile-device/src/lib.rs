//! A test guest that misbehaves on request, for tfwasm's hostile-guest suite.
//!
//! It is the reference device (it includes the reference guest's allocator,
//! ordering and glue modules) until the policy option `mode` selects a
//! misbehaviour. `after = N` (default 0) lets the first N `allocate` calls
//! of an instance answer honestly; the allocation modes misbehave from call
//! N + 1 on. The stream modes ignore `after` and lie from the first answer.
//! An unknown `mode` or a malformed `after` fails `init`, so a typo in a
//! test policy cannot silently produce an honest device.
//!
//! | mode | what it does |
//! | --- | --- |
//! | (absent) | nothing: an honest device |
//! | `init-error` | `init` returns an error |
//! | `trap-on-init` | `init` panics (a trap) |
//! | `trap-on-allocate` | `allocate` panics |
//! | `loop-on-allocate` | `allocate` never returns: the host's deadline must stop it |
//! | `out-of-bounds` | `allocate` returns a range that ends past the region (starts past it when it must) |
//! | `overlap` | `allocate` returns the offset of a live allocation (honest while none is live) |
//! | `misaligned` | `allocate` returns an offset one byte past an aligned one (honest for alignment 1) |
//! | `oom-always` | `allocate` says out-of-memory: honest, not a fault |
//! | `grow-memory` | `allocate` grabs and touches 1 MiB after 1 MiB until the host's memory cap makes growth fail, which aborts the guest |
//! | `bad-seq` | tickets repeat the stream's previous seq (0 for the first) instead of increasing |
//! | `dangling-dependency` | tickets wait for work 1000 tickets beyond what another stream (or, with one stream, this one) submitted |
//! | `lie-event-complete` | `event-status` always says complete |
//! | `trap-on-submit` | `submit` panics |
//! | `refuse-every-other-submit` | `submit` honestly refuses (`internal`) every second call |
//! | `loop-on-usage` | `usage` never returns (TensorFlow asks for it while it creates its devices) |

#[path = "../../reference-device/src/allocator.rs"]
pub mod allocator;
#[path = "../../reference-device/src/ordering.rs"]
pub mod ordering;

#[cfg(target_arch = "wasm32")]
#[path = "../../reference-device/src/glue.rs"]
mod glue;

/// The misbehaviour an instance was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Honest,
    InitError,
    TrapOnInit,
    TrapOnAllocate,
    LoopOnAllocate,
    OutOfBounds,
    Overlap,
    Misaligned,
    OomAlways,
    GrowMemory,
    BadSeq,
    DanglingDependency,
    LieEventComplete,
    TrapOnSubmit,
    RefuseEveryOtherSubmit,
    LoopOnUsage,
}

impl Mode {
    const NAMES: [(&'static str, Mode); 15] = [
        ("init-error", Mode::InitError),
        ("trap-on-init", Mode::TrapOnInit),
        ("trap-on-allocate", Mode::TrapOnAllocate),
        ("loop-on-allocate", Mode::LoopOnAllocate),
        ("out-of-bounds", Mode::OutOfBounds),
        ("overlap", Mode::Overlap),
        ("misaligned", Mode::Misaligned),
        ("oom-always", Mode::OomAlways),
        ("grow-memory", Mode::GrowMemory),
        ("bad-seq", Mode::BadSeq),
        ("dangling-dependency", Mode::DanglingDependency),
        ("lie-event-complete", Mode::LieEventComplete),
        ("trap-on-submit", Mode::TrapOnSubmit),
        ("refuse-every-other-submit", Mode::RefuseEveryOtherSubmit),
        ("loop-on-usage", Mode::LoopOnUsage),
    ];

    fn parse(name: &str) -> Option<Mode> {
        Mode::NAMES.iter().find(|(n, _)| *n == name).map(|&(_, mode)| mode)
    }
}

/// The options this guest reads: `mode` and `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub mode: Mode,
    /// Honest `allocate` calls before an allocation mode misbehaves.
    pub after: u64,
    /// Options this guest does not know, to warn about.
    pub unknown: Vec<String>,
}

impl Config {
    pub fn parse(options: &[(String, String)]) -> Result<Config, String> {
        let mut config = Config { mode: Mode::Honest, after: 0, unknown: Vec::new() };
        for (key, value) in options {
            match key.as_str() {
                "mode" => {
                    config.mode = Mode::parse(value.trim()).ok_or_else(|| {
                        let known: Vec<&str> = Mode::NAMES.iter().map(|(n, _)| *n).collect();
                        format!("unknown mode {value:?}; known modes: {}", known.join(", "))
                    })?;
                }
                "after" => {
                    config.after = value
                        .trim()
                        .parse()
                        .map_err(|_| format!("option after = {value:?} is not a number of allocations"))?;
                }
                other => config.unknown.push(other.to_owned()),
            }
        }
        Ok(config)
    }
}

/// An offset whose `size`-byte range does not fit in a `memory_size`-byte
/// region. Preferably one that starts inside and ends outside (aligned, so
/// only the end check catches it); otherwise the first aligned offset past
/// the region.
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
    use crate::{out_of_bounds_offset, Config, Mode};

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
        mode: Mode,
        after: u64,
        allocate_calls: u64,
        memory_size: u64,
        memory: BestFit,
        ordering: Ordering,
        /// What `grow-memory` holds on to, so the allocations stay live.
        hoard: Vec<Vec<u8>>,
        /// `refuse-every-other-submit`: whether the next submit is refused.
        refusals_due: bool,
    }

    impl Device {
        /// Turns an honest ticket into the lie the stream modes ask for.
        fn ticket(&self, honest: ordering::Ticket, s: u64) -> Ticket {
            let mut honest = honest;
            match self.mode {
                Mode::BadSeq => honest.seq -= 1,
                Mode::DanglingDependency => {
                    let (stream, submitted) =
                        self.ordering.streams().find(|&(id, _)| id != s).unwrap_or((s, honest.seq));
                    honest.after.push(Dep { stream, seq: submitted + 1_000 });
                }
                _ => {}
            }
            glue::ticket(honest)
        }

        fn misbehaving_allocate(&mut self, size: u64, alignment: u64) -> Result<u64, DeviceError> {
            match self.mode {
                Mode::TrapOnAllocate => panic!("hostile-device traps in allocate (mode trap-on-allocate)"),
                Mode::LoopOnAllocate => loop {
                    // `black_box` keeps the loop from being optimised away.
                    std::hint::black_box(&mut self.allocate_calls);
                },
                Mode::OutOfBounds => Ok(out_of_bounds_offset(self.memory_size, size, alignment)),
                Mode::Overlap => {
                    let live = self.memory.live().next().map(|(offset, _)| offset);
                    live.map_or_else(|| self.memory.allocate(size, alignment).map_err(alloc_error), Ok)
                }
                // One byte into an honest block of `size + 1`: in bounds and
                // overlapping nothing, so only the alignment check can object.
                Mode::Misaligned if alignment > 1 => {
                    let offset = self.memory.allocate(size.saturating_add(1), alignment).map_err(alloc_error)?;
                    Ok(offset + 1)
                }
                Mode::OomAlways => Err(DeviceError::OutOfMemory(size)),
                Mode::GrowMemory => loop {
                    // A non-zero fill writes every page; when `memory.grow`
                    // is refused, the allocation failure aborts the guest.
                    self.hoard.push(vec![1u8; 1 << 20]);
                },
                _ => self.memory.allocate(size, alignment).map_err(alloc_error),
            }
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

    struct Hostile;

    impl Identity for Hostile {
        fn init(config: DeviceConfig) -> Result<DeviceInfo, String> {
            if DEVICE.with_borrow(Option::is_some) {
                return Err("init called twice; the device is already set up".into());
            }
            let Config { mode, after, unknown } = Config::parse(&config.options)?;
            match mode {
                Mode::InitError => return Err("hostile-device refuses to start (mode init-error)".into()),
                Mode::TrapOnInit => panic!("hostile-device traps in init (mode trap-on-init)"),
                _ => {}
            }
            for key in unknown {
                log(LogLevel::Warn, &format!("ignoring unknown option {key:?}"));
            }
            log(LogLevel::Info, &format!("device {}: hostile mode {mode:?} after {after} allocations", config.ordinal));
            DEVICE.set(Some(Device {
                mode,
                after,
                allocate_calls: 0,
                memory_size: config.memory_size,
                memory: BestFit::new(config.memory_size),
                ordering: Ordering::default(),
                hoard: Vec::new(),
                refusals_due: false,
            }));
            Ok(DeviceInfo {
                hardware_name: "tfwasm hostile test device".into(),
                vendor: "tfwasm tests".into(),
                pci_bus_id: String::new(),
                numa_node: -1,
                memory_bandwidth: 1_000_000_000,
                gflops: 1.0,
            })
        }
    }

    impl Memory for Hostile {
        fn allocate(size: u64, alignment: u64) -> Result<u64, DeviceError> {
            with(|d| {
                d.allocate_calls += 1;
                if d.allocate_calls <= d.after {
                    return d.memory.allocate(size, alignment).map_err(alloc_error);
                }
                d.misbehaving_allocate(size, alignment)
            })
        }

        fn free(offset: u64) -> Result<(), DeviceError> {
            with(|d| d.memory.free(offset).map_err(alloc_error))
        }

        fn usage() -> MemoryUsage {
            let stats = with(|d| {
                if d.mode == Mode::LoopOnUsage {
                    loop {
                        std::hint::black_box(&mut d.allocate_calls);
                    }
                }
                Ok(d.memory.stats())
            });
            glue::usage(stats.unwrap_or_default())
        }

        fn adopt(live: Vec<(u64, u64)>) -> Result<(), DeviceError> {
            with(|d| d.memory.adopt(&live).map_err(alloc_error))
        }
    }

    impl Streams for Hostile {
        fn create_stream() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_stream()))
        }

        fn destroy_stream(s: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_stream(s).map_err(order_error))
        }

        fn submit(s: u64, _kind: WorkKind) -> Result<Ticket, DeviceError> {
            with(|d| {
                if d.mode == Mode::TrapOnSubmit {
                    panic!("hostile-device traps in submit (mode trap-on-submit)");
                }
                if d.mode == Mode::RefuseEveryOtherSubmit {
                    d.refusals_due = !d.refusals_due;
                    if d.refusals_due {
                        return Err(DeviceError::Internal("hostile-device declines this submit".into()));
                    }
                }
                let honest = d.ordering.submit(s).map_err(order_error)?;
                Ok(d.ticket(honest, s))
            })
        }

        fn complete(s: u64, seq: u64, at_ns: u64, ok: bool) {
            // The lying modes make the host complete seqs it chose itself;
            // recording them quietly is all this guest needs.
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
                Ok(d.ticket(honest, s))
            })
        }

        fn wait_event(s: u64, e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.wait_event(s, e).map_err(order_error))
        }

        fn event_status(e: u64) -> EventState {
            let state = with(|d| Ok((d.mode, d.ordering.event_status(e)))).ok();
            match state {
                Some((Mode::LieEventComplete, _)) => EventState::Complete,
                other => glue::event_state(other.map(|(_, state)| state)),
            }
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
                Ok(d.ticket(honest, s))
            })
        }

        fn timer_elapsed(t: u64) -> Option<u64> {
            with(|d| Ok(d.ordering.timer_elapsed(t))).ok().flatten()
        }
    }

    export!(Hostile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    #[test]
    fn every_documented_mode_parses() {
        let docs = include_str!("lib.rs");
        for (name, mode) in Mode::NAMES {
            assert!(docs.contains(&format!("//! | `{name}` |")), "{name} is not in the mode table");
            let config = Config::parse(&options(&[("mode", name), ("after", "3")])).unwrap();
            assert_eq!((config.mode, config.after), (mode, 3));
        }
    }

    #[test]
    fn no_mode_is_honest_and_typos_are_refused() {
        assert_eq!(Config::parse(&[]).unwrap().mode, Mode::Honest);
        let err = Config::parse(&options(&[("mode", "trap-on-alocate")])).unwrap_err();
        assert!(err.contains("trap-on-alocate") && err.contains("trap-on-allocate"), "{err}");
        let err = Config::parse(&options(&[("after", "many")])).unwrap_err();
        assert!(err.contains("after"), "{err}");
        assert_eq!(Config::parse(&options(&[("colour", "red")])).unwrap().unknown, vec!["colour"]);
    }

    #[test]
    fn out_of_bounds_offsets_never_fit() {
        for (memory, size, alignment) in [
            (4096, 100, 64),
            (4096, 64, 64),
            (4096, 1, 1),
            (4096, 8192, 4096),
            (1000, 10, 64),
            (0, 1, 64),
            (1 << 28, 256, 256),
        ] {
            let offset = out_of_bounds_offset(memory, size, alignment);
            assert_eq!(offset % alignment, 0, "{memory} {size} {alignment}");
            assert!(offset + size > memory, "{memory} {size} {alignment}: {offset} fits");
        }
        // Straddling the end where possible, so the start alone looks fine.
        assert_eq!(out_of_bounds_offset(4096, 100, 64), 4032);
    }
}
