//! The reference device guest: what tfwasm loads as `/device:WASM:N` unless a
//! policy names another guest.
//!
//! - [`allocator::BestFit`] places allocations (best fit, coalescing).
//! - [`ordering::Ordering`] orders stream work and tracks events and timers.
//! - This file maps the WIT world `tfwasm:device/device` onto them.
//!
//! All state lives in one `RefCell`: the host never calls an instance
//! concurrently. The two modules are plain Rust, tested natively with
//! `cargo test -p tfwasm-reference-device`.

pub mod allocator;
pub mod ordering;

#[cfg(target_arch = "wasm32")]
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

    use crate::glue::{self, alloc_error, order_error, ticket};

    use exports::tfwasm::device::identity::Guest as Identity;
    use exports::tfwasm::device::memory::{Guest as Memory, MemoryUsage};
    use exports::tfwasm::device::streams::{EventState, Guest as Streams, Ticket, WorkKind};
    use tfwasm::device::host::{log, LogLevel};
    use tfwasm::device::types::{DeviceConfig, DeviceError, DeviceInfo};

    struct Device {
        memory: BestFit,
        ordering: Ordering,
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

    struct Reference;

    impl Identity for Reference {
        fn init(config: DeviceConfig) -> Result<DeviceInfo, String> {
            let mut info = DeviceInfo {
                hardware_name: "tfwasm reference device".into(),
                vendor: "tfwasm".into(),
                pci_bus_id: String::new(),
                numa_node: -1,
                // A plain DDR4 channel and two modern cores: only TF's cost model reads these.
                memory_bandwidth: 20_000_000_000,
                gflops: 100.0,
            };
            let mut limit = config.memory_size;
            let number = |key: &str, value: &str| -> Result<u64, String> {
                value.trim().parse::<u64>().map_err(|_| format!("option {key} = {value:?} is not a non-negative integer"))
            };
            for (key, value) in &config.options {
                match key.as_str() {
                    "hardware-name" => info.hardware_name = value.clone(),
                    "vendor" => info.vendor = value.clone(),
                    "memory-bandwidth" => info.memory_bandwidth = number(key, value)?,
                    "gflops" => {
                        info.gflops = value.trim().parse::<f64>().map_err(|_| format!("option gflops = {value:?} is not a number"))?
                    }
                    "memory-limit" => limit = number(key, value)?.min(config.memory_size),
                    other => log(LogLevel::Warn, &format!("ignoring unknown option {other:?}")),
                }
            }
            log(
                LogLevel::Info,
                &format!("device {} ready: {} bytes of device memory, best-fit placement", config.ordinal, limit),
            );
            DEVICE.set(Some(Device { memory: BestFit::new(limit), ordering: Ordering::default() }));
            Ok(info)
        }
    }

    impl Memory for Reference {
        fn allocate(size: u64, alignment: u64) -> Result<u64, DeviceError> {
            with(|d| d.memory.allocate(size, alignment).map_err(alloc_error))
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

    impl Streams for Reference {
        fn create_stream() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_stream()))
        }

        fn destroy_stream(s: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_stream(s).map_err(order_error))
        }

        fn submit(s: u64, _kind: WorkKind) -> Result<Ticket, DeviceError> {
            with(|d| d.ordering.submit(s).map(ticket).map_err(order_error))
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
            match with(|d| d.ordering.stream_status(s).map_err(order_error)) {
                Ok(status) => status,
                Err(_) => Err(format!("unknown stream {s}")),
            }
        }

        fn create_event() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_event()))
        }

        fn destroy_event(e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_event(e).map_err(order_error))
        }

        fn record_event(s: u64, e: u64) -> Result<Ticket, DeviceError> {
            with(|d| d.ordering.record_event(s, e).map(ticket).map_err(order_error))
        }

        fn wait_event(s: u64, e: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.wait_event(s, e).map_err(order_error))
        }

        fn event_status(e: u64) -> EventState {
            glue::event_state(with(|d| Ok(d.ordering.event_status(e))).ok())
        }

        fn create_timer() -> Result<u64, DeviceError> {
            with(|d| Ok(d.ordering.create_timer()))
        }

        fn destroy_timer(t: u64) -> Result<(), DeviceError> {
            with(|d| d.ordering.destroy_timer(t).map_err(order_error))
        }

        fn mark_timer(s: u64, t: u64, start: bool) -> Result<Ticket, DeviceError> {
            with(|d| d.ordering.mark_timer(s, t, start).map(ticket).map_err(order_error))
        }

        fn timer_elapsed(t: u64) -> Option<u64> {
            with(|d| Ok(d.ordering.timer_elapsed(t))).ok().flatten()
        }
    }

    export!(Reference);
}
