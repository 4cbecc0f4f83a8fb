//! A test guest that misbehaves on request, for tfwasm's hostile-guest suite.
//!
//! It is the reference device (it includes the reference guest's allocator,
//! ordering and glue modules) until the policy option `mode` selects a
//! misbehaviour, or several separated by commas (`mode = "trap-on-allocate,
//! loop-on-adopt"`: the instance that replaces the trapped one then loops
//! while it adopts the live allocations). `after = N` (default 0) lets the
//! first N `allocate` calls of an instance answer honestly; the allocation
//! modes misbehave from call N + 1 on. The other modes ignore `after` and
//! misbehave from the first answer. `delay-ms = N` (default 5) is how long
//! `slow` takes over each answer. An unknown `mode` or a malformed option
//! fails `init`, so a typo in a test policy cannot silently produce an
//! honest device.
//!
//! Misbehaviour that Rust cannot express (a wrong WIT version, a missing
//! export, imports of WASI interfaces, `memory.grow` and `table.grow` bombs,
//! answers whose strings and lists lie about their place in memory) lives in
//! the hand-written WAT guests of `guest/hostile-wat`.
//!
//! | mode | what it does |
//! | --- | --- |
//! | (absent) | nothing: an honest device |
//! | `init-error` | `init` returns an error |
//! | `trap-on-init` | `init` panics (a trap) |
//! | `trap-on-allocate` | `allocate` panics |
//! | `loop-on-EXPORT` | the export never returns: the host's deadline must stop it. EXPORT is any export of the world: `init`, `allocate`, `free`, `usage`, `adopt`, `create-stream`, `destroy-stream`, `submit`, `complete`, `add-dependency`, `stream-status`, `create-event`, `destroy-event`, `record-event`, `wait-event`, `event-status`, `create-timer`, `destroy-timer`, `mark-timer`, `timer-elapsed` |
//! | `out-of-bounds` | `allocate` returns a range that ends past the region (starts past it when it must) |
//! | `offset-overflow` | `allocate` returns an aligned offset so close to 2^64 that offset + size overflows |
//! | `overlap` | `allocate` returns the offset of a live allocation (honest while none is live) |
//! | `misaligned` | `allocate` returns an offset one byte past an aligned one (honest for alignment 1) |
//! | `oom-always` | `allocate` says out-of-memory: honest, not a fault |
//! | `grow-memory` | `allocate` grabs and touches 1 MiB after 1 MiB until the host's memory cap makes growth fail, which aborts the guest |
//! | `deep-recursion` | `allocate` recurses with 4 KiB frames until the guest's own stack, in its linear memory, runs out |
//! | `exit` | `allocate` calls `std::process::exit(3)` (WASI `cli/exit`, which carries failure but no code: the host sees exit(1)); it must end the call, not the process |
//! | `huge-refusal` | `allocate` refuses with a 4 MiB `invalid-argument` message full of newlines and terminal escapes |
//! | `huge-name` | `init` describes a device whose hardware name is 4 MiB long |
//! | `log-forgery` | `init` logs a warning carrying a newline, a line that poses as another guest's, and terminal escapes |
//! | `std-tour` | `init` uses a `HashMap`, `Instant`, `SystemTime` and `std::fs` on an unused path, as a vendor's first guest would: legal (the build imports what they need, which no policy has to grant) |
//! | `slow` | every export busy-waits `delay-ms` on the host clock, then answers honestly: legal, not a fault |
//! | `bad-seq` | tickets repeat the stream's previous seq (0 for the first) instead of increasing |
//! | `seq-jump` | tickets jump to seq 2^64 - 1, leaving the stream no room to count on |
//! | `dangling-dependency` | tickets wait for work 1000 tickets beyond what another stream (or, with one stream, this one) submitted |
//! | `huge-ticket` | every ticket repeats its dependency (or one on its stream's earlier work) 200,000 times: legal, redundant |
//! | `lie-event-complete` | `event-status` always says complete |
//! | `lie-timer-elapsed` | `timer-elapsed` reports 1 ns for every timer, whether its markers ran or not |
//! | `trap-on-submit` | `submit` panics |
//! | `refuse-every-other-submit` | `submit` honestly refuses (`internal`) every second call |

#[path = "../../reference-device/src/allocator.rs"]
pub mod allocator;
#[path = "../../reference-device/src/ordering.rs"]
pub mod ordering;

#[cfg(target_arch = "wasm32")]
#[path = "../../reference-device/src/glue.rs"]
mod glue;

/// An export of the `device` world, for `loop-on-EXPORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Init,
    Allocate,
    Free,
    Usage,
    Adopt,
    CreateStream,
    DestroyStream,
    Submit,
    Complete,
    AddDependency,
    StreamStatus,
    CreateEvent,
    DestroyEvent,
    RecordEvent,
    WaitEvent,
    EventStatus,
    CreateTimer,
    DestroyTimer,
    MarkTimer,
    TimerElapsed,
}

impl Export {
    /// Every export, by its WIT name.
    pub const ALL: [(&'static str, Export); 20] = [
        ("init", Export::Init),
        ("allocate", Export::Allocate),
        ("free", Export::Free),
        ("usage", Export::Usage),
        ("adopt", Export::Adopt),
        ("create-stream", Export::CreateStream),
        ("destroy-stream", Export::DestroyStream),
        ("submit", Export::Submit),
        ("complete", Export::Complete),
        ("add-dependency", Export::AddDependency),
        ("stream-status", Export::StreamStatus),
        ("create-event", Export::CreateEvent),
        ("destroy-event", Export::DestroyEvent),
        ("record-event", Export::RecordEvent),
        ("wait-event", Export::WaitEvent),
        ("event-status", Export::EventStatus),
        ("create-timer", Export::CreateTimer),
        ("destroy-timer", Export::DestroyTimer),
        ("mark-timer", Export::MarkTimer),
        ("timer-elapsed", Export::TimerElapsed),
    ];
}

/// The misbehaviour an instance was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Honest,
    InitError,
    TrapOnInit,
    TrapOnAllocate,
    LoopOn(Export),
    OutOfBounds,
    OffsetOverflow,
    Overlap,
    Misaligned,
    OomAlways,
    GrowMemory,
    DeepRecursion,
    Exit,
    HugeRefusal,
    HugeName,
    LogForgery,
    Slow,
    BadSeq,
    SeqJump,
    DanglingDependency,
    HugeTicket,
    LieEventComplete,
    LieTimerElapsed,
    TrapOnSubmit,
    RefuseEveryOtherSubmit,
    StdTour,
}

impl Mode {
    /// The modes other than `loop-on-EXPORT`, by name.
    const NAMES: [(&'static str, Mode); 24] = [
        ("init-error", Mode::InitError),
        ("trap-on-init", Mode::TrapOnInit),
        ("trap-on-allocate", Mode::TrapOnAllocate),
        ("out-of-bounds", Mode::OutOfBounds),
        ("offset-overflow", Mode::OffsetOverflow),
        ("overlap", Mode::Overlap),
        ("misaligned", Mode::Misaligned),
        ("oom-always", Mode::OomAlways),
        ("grow-memory", Mode::GrowMemory),
        ("deep-recursion", Mode::DeepRecursion),
        ("exit", Mode::Exit),
        ("huge-refusal", Mode::HugeRefusal),
        ("huge-name", Mode::HugeName),
        ("log-forgery", Mode::LogForgery),
        ("std-tour", Mode::StdTour),
        ("slow", Mode::Slow),
        ("bad-seq", Mode::BadSeq),
        ("seq-jump", Mode::SeqJump),
        ("dangling-dependency", Mode::DanglingDependency),
        ("huge-ticket", Mode::HugeTicket),
        ("lie-event-complete", Mode::LieEventComplete),
        ("lie-timer-elapsed", Mode::LieTimerElapsed),
        ("trap-on-submit", Mode::TrapOnSubmit),
        ("refuse-every-other-submit", Mode::RefuseEveryOtherSubmit),
    ];

    /// Every mode name this guest knows, `loop-on-EXPORT` spelt out per export.
    pub fn names() -> impl Iterator<Item = (String, Mode)> {
        let loops = Export::ALL.iter().map(|&(export, e)| (format!("loop-on-{export}"), Mode::LoopOn(e)));
        Mode::NAMES.iter().map(|&(name, mode)| (name.to_owned(), mode)).chain(loops)
    }

    fn parse(name: &str) -> Option<Mode> {
        if let Some(export) = name.strip_prefix("loop-on-") {
            return Export::ALL.iter().find(|(n, _)| *n == export).map(|&(_, e)| Mode::LoopOn(e));
        }
        Mode::NAMES.iter().find(|(n, _)| *n == name).map(|&(_, mode)| mode)
    }

    /// Whether this mode changes `allocate`'s answer (and so honours `after`).
    pub fn misplaces(self) -> bool {
        matches!(
            self,
            Mode::TrapOnAllocate
                | Mode::LoopOn(Export::Allocate)
                | Mode::OutOfBounds
                | Mode::OffsetOverflow
                | Mode::Overlap
                | Mode::Misaligned
                | Mode::OomAlways
                | Mode::GrowMemory
                | Mode::DeepRecursion
                | Mode::Exit
                | Mode::HugeRefusal
        )
    }
}

/// The options this guest reads: `mode`, `after` and `delay-ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Empty for an honest device.
    pub modes: Vec<Mode>,
    /// Honest `allocate` calls before an allocation mode misbehaves.
    pub after: u64,
    /// What `slow` spends on each answer.
    pub delay_ms: u64,
    /// Options this guest does not know, to warn about.
    pub unknown: Vec<String>,
}

impl Config {
    pub fn parse(options: &[(String, String)]) -> Result<Config, String> {
        let mut config = Config { modes: Vec::new(), after: 0, delay_ms: 5, unknown: Vec::new() };
        let number = |key: &str, value: &str| {
            value.trim().parse::<u64>().map_err(|_| format!("option {key} = {value:?} is not a whole number"))
        };
        for (key, value) in options {
            match key.as_str() {
                "mode" => {
                    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                        let mode = Mode::parse(name).ok_or_else(|| {
                            let known: Vec<String> = Mode::names().map(|(n, _)| n).collect();
                            format!("unknown mode {name:?}; known modes: {}", known.join(", "))
                        })?;
                        config.modes.push(mode);
                    }
                }
                "after" => config.after = number(key, value)?,
                "delay-ms" => config.delay_ms = number(key, value)?,
                other => config.unknown.push(other.to_owned()),
            }
        }
        Ok(config)
    }

    pub fn has(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
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

/// The last aligned offset below 2^64: for any `size` of at least
/// `alignment` (a power of two), offset + size wraps past 2^64, so a host
/// that adds before it compares would see a small end inside the region.
pub fn overflowing_offset(alignment: u64) -> u64 {
    u64::MAX / alignment.max(1) * alignment.max(1)
}

/// What `huge-refusal` says: 4 MiB of lines posing as the host's own.
pub fn huge_refusal() -> String {
    let line = "refused\n\x1b[2Jtfwasm: guest 'reference-device' (reference_device.wasm): all is well\r\n";
    line.repeat((4 << 20) / line.len())
}

/// What `log-forgery` logs.
pub const FORGED_LOG: &str =
    "starting\ntfwasm: guest 'reference-device' (reference_device.wasm): \x1b[32mall is well\x1b[0m\rtfwasm: ok";

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    use crate::allocator::BestFit;
    use crate::ordering::{self, Dep, Ordering};
    use crate::{huge_refusal, out_of_bounds_offset, overflowing_offset, Config, Export, Mode, FORGED_LOG};

    wit_bindgen::generate!({
        path: "../../wit/device",
        world: "device",
    });

    use crate::glue::{self, alloc_error, order_error};

    use exports::tfwasm::device::identity::Guest as Identity;
    use exports::tfwasm::device::memory::{Guest as Memory, MemoryUsage};
    use exports::tfwasm::device::streams::{EventState, Guest as Streams, Ticket, WorkKind};
    use tfwasm::device::host::{log, now_ns, LogLevel};
    use tfwasm::device::types::{DeviceConfig, DeviceError, DeviceInfo};

    /// How many times `huge-ticket` repeats a dependency.
    const HUGE_TICKET_DEPENDENCIES: usize = 200_000;

    struct Device {
        config: Config,
        allocate_calls: u64,
        memory_size: u64,
        memory: BestFit,
        ordering: Ordering,
        /// What `grow-memory` holds on to, so the allocations stay live.
        hoard: Vec<Vec<u8>>,
        /// `refuse-every-other-submit`: whether the next submit is refused.
        refusals_due: bool,
    }

    /// Never returns; `black_box` keeps the loop from being optimised away.
    fn spin() -> ! {
        let mut turns = 0u64;
        loop {
            turns = std::hint::black_box(turns.wrapping_add(1));
        }
    }

    /// What every export does before its answer: loop for `loop-on-EXPORT`,
    /// wait for `slow`.
    fn stall(config: &Config, export: Export) {
        if config.has(Mode::LoopOn(export)) {
            spin();
        }
        dawdle(config);
    }

    /// `slow`: busy-waits `delay-ms` on the host's clock.
    fn dawdle(config: &Config) {
        if config.has(Mode::Slow) {
            let until = now_ns().saturating_add(config.delay_ms.saturating_mul(1_000_000));
            while now_ns() < until {}
        }
    }

    /// Recurses until the stack in the guest's linear memory runs out: each
    /// level keeps a 4 KiB frame there, against 1 MiB of stack.
    #[inline(never)]
    fn descend(depth: u32) -> u32 {
        let frame = std::hint::black_box([depth as u8; 4096]);
        if depth == u32::MAX {
            return 0;
        }
        let below = descend(depth + 1);
        below.wrapping_add(u32::from(std::hint::black_box(&frame)[depth as usize % 4096]))
    }

    impl Device {
        /// Turns an honest ticket into the lie the stream modes ask for.
        fn ticket(&self, honest: ordering::Ticket, s: u64) -> Ticket {
            let mut honest = honest;
            if self.config.has(Mode::BadSeq) {
                honest.seq -= 1;
            }
            if self.config.has(Mode::SeqJump) {
                honest.seq = u64::MAX;
            }
            if self.config.has(Mode::DanglingDependency) {
                let (stream, submitted) = self.ordering.streams().find(|&(id, _)| id != s).unwrap_or((s, honest.seq));
                honest.after.push(Dep { stream, seq: submitted + 1_000 });
            }
            if self.config.has(Mode::HugeTicket) {
                let dep = honest.after.first().copied().unwrap_or(Dep { stream: s, seq: honest.seq - 1 });
                honest.after = vec![dep; HUGE_TICKET_DEPENDENCIES];
            }
            glue::ticket(honest)
        }

        fn misbehaving_allocate(&mut self, size: u64, alignment: u64) -> Result<u64, DeviceError> {
            let mode = self.config.modes.iter().copied().find(|m| m.misplaces()).unwrap_or(Mode::Honest);
            match mode {
                Mode::TrapOnAllocate => panic!("hostile-device traps in allocate (mode trap-on-allocate)"),
                Mode::LoopOn(Export::Allocate) => spin(),
                Mode::OutOfBounds => Ok(out_of_bounds_offset(self.memory_size, size, alignment)),
                Mode::OffsetOverflow => Ok(overflowing_offset(alignment)),
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
                Mode::DeepRecursion => Ok(u64::from(descend(0))),
                Mode::Exit => std::process::exit(3),
                Mode::HugeRefusal => Err(DeviceError::InvalidArgument(huge_refusal())),
                _ => self.memory.allocate(size, alignment).map_err(alloc_error),
            }
        }
    }

    thread_local! {
        static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
    }

    /// Runs `f` on the device set up by `init`, after the export's stall.
    fn with<R>(export: Export, f: impl FnOnce(&mut Device) -> Result<R, DeviceError>) -> Result<R, DeviceError> {
        DEVICE.with_borrow_mut(|device| match device {
            Some(device) => {
                // `allocate` stalls itself, after its honest calls.
                if export != Export::Allocate {
                    stall(&device.config, export);
                }
                f(device)
            }
            None => Err(glue::init_not_called()),
        })
    }

    /// What a vendor's first guest does with Rust's standard library: a
    /// `HashMap` (an insecure hash seed), `Instant` and `SystemTime` (the
    /// clocks), and `std::fs` on a path no policy preopens. Its code is in
    /// every build, so every build imports what these need: the host must
    /// load it under any policy, since none of it gives the guest power.
    fn std_tour() -> String {
        let started = std::time::Instant::now();
        let mut seen: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        seen.insert("hash seed", 1);
        let since_epoch =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let file = match std::fs::metadata("/tfwasm/unused/vendor.toml") {
            Ok(_) => "a file exists where no directory is preopened".to_owned(),
            Err(e) => format!("no file ({e})"),
        };
        format!(
            "std tour: a HashMap of {} entry, {since_epoch} s since the epoch, {file}, {} ns",
            seen.len(),
            started.elapsed().as_nanos()
        )
    }

    struct Hostile;

    impl Identity for Hostile {
        fn init(config: DeviceConfig) -> Result<DeviceInfo, String> {
            if DEVICE.with_borrow(Option::is_some) {
                return Err("init called twice; the device is already set up".into());
            }
            let parsed = Config::parse(&config.options)?;
            stall(&parsed, Export::Init);
            if parsed.has(Mode::InitError) {
                return Err("hostile-device refuses to start (mode init-error)".into());
            }
            if parsed.has(Mode::TrapOnInit) {
                panic!("hostile-device traps in init (mode trap-on-init)");
            }
            if parsed.has(Mode::LogForgery) {
                log(LogLevel::Warn, FORGED_LOG);
            }
            if parsed.has(Mode::StdTour) {
                log(LogLevel::Info, &std_tour());
            }
            for key in &parsed.unknown {
                log(LogLevel::Warn, &format!("ignoring unknown option {key:?}"));
            }
            log(
                LogLevel::Info,
                &format!(
                    "device {}: hostile modes {:?} after {} allocations",
                    config.ordinal, parsed.modes, parsed.after
                ),
            );
            let hardware_name =
                if parsed.has(Mode::HugeName) { "x".repeat(4 << 20) } else { "tfwasm hostile test device".into() };
            DEVICE.set(Some(Device {
                config: parsed,
                allocate_calls: 0,
                memory_size: config.memory_size,
                memory: BestFit::new(config.memory_size),
                ordering: Ordering::default(),
                hoard: Vec::new(),
                refusals_due: false,
            }));
            Ok(DeviceInfo {
                hardware_name,
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
            with(Export::Allocate, |d| {
                d.allocate_calls += 1;
                if d.allocate_calls <= d.config.after {
                    dawdle(&d.config);
                    return d.memory.allocate(size, alignment).map_err(alloc_error);
                }
                stall(&d.config, Export::Allocate);
                d.misbehaving_allocate(size, alignment)
            })
        }

        fn free(offset: u64) -> Result<(), DeviceError> {
            with(Export::Free, |d| d.memory.free(offset).map_err(alloc_error))
        }

        fn usage() -> MemoryUsage {
            let stats = with(Export::Usage, |d| Ok(d.memory.stats()));
            glue::usage(stats.unwrap_or_default())
        }

        fn adopt(live: Vec<(u64, u64)>) -> Result<(), DeviceError> {
            with(Export::Adopt, |d| d.memory.adopt(&live).map_err(alloc_error))
        }
    }

    impl Streams for Hostile {
        fn create_stream() -> Result<u64, DeviceError> {
            with(Export::CreateStream, |d| Ok(d.ordering.create_stream()))
        }

        fn destroy_stream(s: u64) -> Result<(), DeviceError> {
            with(Export::DestroyStream, |d| d.ordering.destroy_stream(s).map_err(order_error))
        }

        fn submit(s: u64, _kind: WorkKind) -> Result<Ticket, DeviceError> {
            with(Export::Submit, |d| {
                if d.config.has(Mode::TrapOnSubmit) {
                    panic!("hostile-device traps in submit (mode trap-on-submit)");
                }
                if d.config.has(Mode::RefuseEveryOtherSubmit) {
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
            let _ = with(Export::Complete, |d| d.ordering.complete(s, seq, at_ns, ok).map_err(order_error));
        }

        fn add_dependency(dependent: u64, other: u64) -> Result<(), DeviceError> {
            with(Export::AddDependency, |d| d.ordering.add_dependency(dependent, other).map_err(order_error))
        }

        fn stream_status(s: u64) -> Result<(), String> {
            with(Export::StreamStatus, |d| d.ordering.stream_status(s).map_err(order_error))
                .unwrap_or_else(|e| Err(glue::describe(&e)))
        }

        fn create_event() -> Result<u64, DeviceError> {
            with(Export::CreateEvent, |d| Ok(d.ordering.create_event()))
        }

        fn destroy_event(e: u64) -> Result<(), DeviceError> {
            with(Export::DestroyEvent, |d| d.ordering.destroy_event(e).map_err(order_error))
        }

        fn record_event(s: u64, e: u64) -> Result<Ticket, DeviceError> {
            with(Export::RecordEvent, |d| {
                let honest = d.ordering.record_event(s, e).map_err(order_error)?;
                Ok(d.ticket(honest, s))
            })
        }

        fn wait_event(s: u64, e: u64) -> Result<(), DeviceError> {
            with(Export::WaitEvent, |d| d.ordering.wait_event(s, e).map_err(order_error))
        }

        fn event_status(e: u64) -> EventState {
            let state =
                with(Export::EventStatus, |d| Ok((d.config.has(Mode::LieEventComplete), d.ordering.event_status(e))));
            match state {
                Ok((true, _)) => EventState::Complete,
                other => glue::event_state(other.ok().map(|(_, state)| state)),
            }
        }

        fn create_timer() -> Result<u64, DeviceError> {
            with(Export::CreateTimer, |d| Ok(d.ordering.create_timer()))
        }

        fn destroy_timer(t: u64) -> Result<(), DeviceError> {
            with(Export::DestroyTimer, |d| d.ordering.destroy_timer(t).map_err(order_error))
        }

        fn mark_timer(s: u64, t: u64, start: bool) -> Result<Ticket, DeviceError> {
            with(Export::MarkTimer, |d| {
                let honest = d.ordering.mark_timer(s, t, start).map_err(order_error)?;
                Ok(d.ticket(honest, s))
            })
        }

        fn timer_elapsed(t: u64) -> Option<u64> {
            with(Export::TimerElapsed, |d| {
                Ok(if d.config.has(Mode::LieTimerElapsed) { Some(1) } else { d.ordering.timer_elapsed(t) })
            })
            .ok()
            .flatten()
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
        let loop_row = docs.lines().find(|l| l.starts_with("//! | `loop-on-EXPORT` |")).expect("the loop row");
        for (name, mode) in Mode::names() {
            match mode {
                Mode::LoopOn(_) => {
                    let export = name.trim_start_matches("loop-on-");
                    assert!(loop_row.contains(&format!("`{export}`")), "{export} is not in the loop row");
                }
                _ => assert!(docs.contains(&format!("//! | `{name}` |")), "{name} is not in the mode table"),
            }
            let config = Config::parse(&options(&[("mode", &name), ("after", "3")])).unwrap();
            assert_eq!((config.modes, config.after), (vec![mode], 3));
        }
        assert_eq!(Mode::names().count(), Mode::NAMES.len() + Export::ALL.len());
    }

    #[test]
    fn modes_combine() {
        let config =
            Config::parse(&options(&[("mode", " trap-on-allocate ,loop-on-adopt"), ("delay-ms", "7")])).unwrap();
        assert_eq!(config.modes, vec![Mode::TrapOnAllocate, Mode::LoopOn(Export::Adopt)]);
        assert!(config.has(Mode::LoopOn(Export::Adopt)) && !config.has(Mode::Slow));
        assert_eq!(config.delay_ms, 7);
    }

    #[test]
    fn no_mode_is_honest_and_typos_are_refused() {
        assert!(Config::parse(&[]).unwrap().modes.is_empty());
        let err = Config::parse(&options(&[("mode", "trap-on-alocate")])).unwrap_err();
        assert!(err.contains("trap-on-alocate") && err.contains("trap-on-allocate"), "{err}");
        let err = Config::parse(&options(&[("mode", "loop-on-everything")])).unwrap_err();
        assert!(err.contains("loop-on-timer-elapsed"), "{err}");
        let err = Config::parse(&options(&[("after", "many")])).unwrap_err();
        assert!(err.contains("after"), "{err}");
        let err = Config::parse(&options(&[("delay-ms", "-1")])).unwrap_err();
        assert!(err.contains("delay-ms"), "{err}");
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

    #[test]
    fn overflowing_offsets_wrap() {
        for (size, alignment) in [(256, 256), (1000, 256), (1, 1), (4096, 4096), (5000, 4096)] {
            let offset = overflowing_offset(alignment);
            assert_eq!(offset % alignment, 0, "{size} {alignment}");
            assert!(offset.checked_add(size).is_none(), "{size} {alignment}: {offset} does not wrap");
            assert!(offset.wrapping_add(size) < size, "{size} {alignment}");
        }
    }

    #[test]
    fn forged_text_carries_what_a_log_must_not_pass_on() {
        for text in [FORGED_LOG, &huge_refusal()[..200]] {
            assert!(text.contains('\n') && text.contains('\x1b') && text.contains("tfwasm: guest"), "{text:?}");
        }
        assert!(huge_refusal().len() > 4_000_000);
    }
}
