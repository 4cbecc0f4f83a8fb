//! A test guest that misbehaves on request, for tfwasm's hostile-guest suite.
//!
//! It behaves like the reference device (it reuses its allocator and
//! ordering modules) until the policy option `mode` says otherwise.
//! `after = N` lets the first N allocations succeed before an
//! allocation-time misbehaviour starts.
//!
//! | mode | what it does |
//! | --- | --- |
//! | `init-error` | `init` returns an error |
//! | `trap-on-init` | `init` panics |
//! | `trap-on-allocate` | `allocate` panics |
//! | `loop-on-allocate` | `allocate` never returns (the host's deadline must stop it) |
//! | `out-of-bounds` | `allocate` returns an offset past the region |
//! | `overlap` | `allocate` returns the offset of a live allocation |
//! | `misaligned` | `allocate` returns an offset off the requested alignment |
//! | `oom-always` | `allocate` always says out-of-memory (honest, not a fault) |
//! | `grow-memory` | `allocate` grows guest memory until the host's cap stops it |
//! | `bad-seq` | tickets reuse sequence number 1 |
//! | `dangling-dependency` | tickets wait on work that was never submitted |
//! | `lie-event-complete` | `event-status` always says complete |
//! | `trap-on-submit` | `submit` panics |

#[path = "../../reference-device/src/allocator.rs"]
pub mod allocator;
#[path = "../../reference-device/src/ordering.rs"]
pub mod ordering;

#[cfg(target_arch = "wasm32")]
#[path = "../../reference-device/src/glue.rs"]
mod glue;

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    use crate::allocator::BestFit;
    use crate::ordering::Ordering;

    wit_bindgen::generate!({
        path: "../../wit/device",
        world: "device",
    });

    use crate::glue::{self, alloc_error, order_error};

    use exports::tfwasm::device::identity::Guest as Identity;
    use exports::tfwasm::device::memory::{Guest as Memory, MemoryUsage};
    use exports::tfwasm::device::streams::{Dependency, EventState, Guest as Streams, Ticket, WorkKind};
    use tfwasm::device::types::{DeviceConfig, DeviceError, DeviceInfo};

    struct Device {
        mode: String,
        after: u64,
        allocations: u64,
        last_offset: Option<u64>,
        memory_size: u64,
        memory: BestFit,
        ordering: Ordering,
        hoard: Vec<Vec<u8>>,
    }

    thread_local! {
        static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
    }

    fn with<R>(f: impl FnOnce(&mut Device) -> Result<R, DeviceError>) -> Result<R, DeviceError> {
        DEVICE.with_borrow_mut(|device| match device {
            Some(device) => f(device),
            None => Err(DeviceError::Internal("init was not called".into())),
        })
    }

    fn mode_is(mode: &str) -> bool {
        DEVICE.with_borrow(|d| d.as_ref().is_some_and(|d| d.mode == mode))
    }

    /// Applies the stream-misbehaviour modes to an honest ticket.
    fn ticket(mode: &str, t: crate::ordering::Ticket, stream: u64) -> Ticket {
        let mut ticket = glue::ticket(t);
        if mode == "bad-seq" {
            ticket.seq = 1;
        }
        if mode == "dangling-dependency" {
            let seq = ticket.seq + 1_000;
            ticket.after.push(Dependency { stream, seq });
        }
        ticket
    }

    struct Hostile;

    impl Identity for Hostile {
        fn init(config: DeviceConfig) -> Result<DeviceInfo, String> {
            let option = |key: &str| config.options.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
            let mode = option("mode").unwrap_or_default();
            let after = option("after").and_then(|v| v.parse().ok()).unwrap_or(0);
            match mode.as_str() {
                "init-error" => return Err("hostile-device refuses to start (mode init-error)".into()),
                "trap-on-init" => panic!("hostile-device traps in init (mode trap-on-init)"),
                _ => {}
            }
            DEVICE.set(Some(Device {
                mode,
                after,
                allocations: 0,
                last_offset: None,
                memory_size: config.memory_size,
                memory: BestFit::new(config.memory_size),
                ordering: Ordering::default(),
                hoard: Vec::new(),
            }));
            Ok(DeviceInfo {
                hardware_name: "tfwasm hostile test device".into(),
                vendor: "tfwasm tests".into(),
                pci_bus_id: String::new(),
                numa_node: -1,
                memory_bandwidth: 1,
                gflops: 1.0,
            })
        }
    }

    impl Memory for Hostile {
        fn allocate(size: u64, alignment: u64) -> Result<u64, DeviceError> {
            with(|d| {
                d.allocations += 1;
                let misbehave = d.allocations > d.after;
                if misbehave {
                    match d.mode.as_str() {
                        "trap-on-allocate" => panic!("hostile-device traps in allocate"),
                        "loop-on-allocate" => loop {
                            std::hint::black_box(&d.allocations);
                        },
                        "out-of-bounds" => return Ok(d.memory_size + 4096),
                        "misaligned" => return Ok(alignment / 2 + 1),
                        "overlap" => {
                            if let Some(offset) = d.last_offset {
                                return Ok(offset);
                            }
                        }
                        "oom-always" => return Err(DeviceError::OutOfMemory(size)),
                        "grow-memory" => loop {
                            // Touch every page so the memory is really used.
                            d.hoard.push(vec![1u8; 1 << 20]);
                        },
                        _ => {}
                    }
                } else if d.mode == "oom-always" {
                    return Err(DeviceError::OutOfMemory(size));
                }
                let offset = d.memory.allocate(size, alignment).map_err(alloc_error)?;
                d.last_offset = Some(offset);
                Ok(offset)
            })
        }

        fn free(offset: u64) -> Result<(), DeviceError> {
            with(|d| d.memory.free(offset).map_err(alloc_error))
        }

        fn usage() -> MemoryUsage {
            glue::usage(with(|d| Ok(d.memory.stats())).unwrap_or_default())
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
            if mode_is("trap-on-submit") {
                panic!("hostile-device traps in submit");
            }
            with(|d| d.ordering.submit(s).map(|t| ticket(&d.mode, t, s)).map_err(order_error))
        }

        fn complete(s: u64, seq: u64, at_ns: u64, ok: bool) {
            let _ = with(|d| {
                d.ordering.complete(s, seq, at_ns, ok);
                Ok(())
            });
        }

        fn add_dependency(dependent: u64, other: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.add_dependency(dependent, other).map_err(order_error))
        }

        fn stream_status(s: u64) -> Result<(), String> {
            with(|d| d.ordering.stream_status(s).map_err(order_error)).unwrap_or_else(|_| Err(format!("unknown stream {s}")))
        }

        fn create_event() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_event()))
        }

        fn destroy_event(e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_event(e).map_err(order_error))
        }

        fn record_event(s: u64, e: u64) -> Result<Ticket, DeviceError> {
            with(|d| d.ordering.record_event(s, e).map(|t| ticket(&d.mode, t, s)).map_err(order_error))
        }

        fn wait_event(s: u64, e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.wait_event(s, e).map_err(order_error))
        }

        fn event_status(e: u64) -> EventState {
            if mode_is("lie-event-complete") {
                return EventState::Complete;
            }
            glue::event_state(with(|d| Ok(d.ordering.event_status(e))).ok())
        }

        fn create_timer() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_timer()))
        }

        fn destroy_timer(t: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_timer(t).map_err(order_error))
        }

        fn mark_timer(s: u64, t: u64, start: bool) -> Result<Ticket, DeviceError> {
            with(|d| d.ordering.mark_timer(s, t, start).map(|tk| ticket(&d.mode, tk, s)).map_err(order_error))
        }

        fn timer_elapsed(t: u64) -> Option<u64> {
            with(|d| Ok(d.ordering.timer_elapsed(t))).ok().flatten()
        }
    }

    export!(Hostile);
}
