//! The reference device guest: what tfwasm loads as `/device:WASM:N` unless a
//! policy names another guest.
//!
//! - [`settings::Settings`] reads the policy's `[guest.config]` options.
//! - [`allocator::BestFit`] places allocations (best fit, coalescing).
//! - [`ordering::Ordering`] orders stream work and tracks events and timers.
//! - The `component` module maps the WIT world `tfwasm:device/device` onto
//!   them; `glue` converts between their types and the WIT ones.
//!
//! All state lives in one `RefCell`: the host never calls an instance
//! concurrently, and wasm32-wasip2 has a single thread. Every export other
//! than `init` answers "init not called" until `init` succeeded, instead of
//! trapping. The pure modules are tested natively with
//! `cargo test -p tfwasm-reference-device`; the bindings exist only on wasm,
//! since their host imports cannot link into a native test binary.

pub mod allocator;
pub mod ordering;
pub mod settings;

#[cfg(target_arch = "wasm32")]
mod glue;

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    use crate::allocator::BestFit;
    use crate::ordering::Ordering;
    use crate::settings::Settings;

    // The device world plus the profiler's `annotations` import
    // (`tfwasm:profiler/annotated-device`).
    wit_bindgen::generate!({
        path: "../../wit/profiler",
        world: "annotated-device",
        // The device interfaces come from the package tfwasm:device (wit/profiler/deps).
        generate_all,
    });

    use crate::glue::{self, alloc_error, order_error, ticket};

    use exports::tfwasm::device::identity::Guest as Identity;
    use exports::tfwasm::device::memory::{Guest as Memory, MemoryUsage};
    use exports::tfwasm::device::streams::{EventState, Guest as Streams, Ticket, WorkKind};
    use tfwasm::device::host::{log, LogLevel};
    use tfwasm::device::types::{DeviceConfig, DeviceError, DeviceInfo};
    use tfwasm::profiler::annotations;
    use tfwasm::profiler::types::{Stat, StatValue};

    struct Device {
        memory: BestFit,
        ordering: Ordering,
    }

    thread_local! {
        static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
        /// Allocations and frees answered, for sampling the allocator's state.
        static MEMORY_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Every [`SAMPLE_EVERY`]th allocation or free, while a profiling
    /// session runs, the allocator's state goes into the device's trace as
    /// an `allocator` annotation. Asking whether a session runs is a host
    /// call, hence the sampling.
    const SAMPLE_EVERY: u64 = 64;

    fn sample_allocator(device: &Device) {
        let calls = MEMORY_CALLS.get() + 1;
        MEMORY_CALLS.set(calls);
        if calls % SAMPLE_EVERY != 0 || !annotations::active() {
            return;
        }
        let stats = device.memory.stats();
        let stat = |key: &str, value: u64| Stat { key: key.into(), value: StatValue::Unsigned(value) };
        annotations::instant(
            "allocator",
            &[
                stat("bytes_in_use", stats.bytes_in_use),
                stat("largest_free_block", stats.largest_free_block),
                stat("peak_bytes_in_use", stats.peak_bytes_in_use),
                stat("limit", stats.limit),
            ],
        );
    }

    fn with<R>(f: impl FnOnce(&mut Device) -> Result<R, DeviceError>) -> Result<R, DeviceError> {
        DEVICE.with_borrow_mut(|device| match device {
            Some(device) => f(device),
            None => Err(glue::init_not_called()),
        })
    }

    struct Reference;

    impl Identity for Reference {
        fn init(config: DeviceConfig) -> Result<DeviceInfo, String> {
            // A second init would silently drop every live allocation.
            if DEVICE.with_borrow(Option::is_some) {
                return Err("init called twice; the device is already set up".into());
            }
            let (settings, warnings) = Settings::parse(config.memory_size, &config.options)?;
            for warning in warnings {
                log(LogLevel::Warn, &warning);
            }
            log(
                LogLevel::Info,
                &format!(
                    "device {}: {} of {} bytes of device memory, best-fit placement",
                    config.ordinal, settings.memory_limit, config.memory_size
                ),
            );
            DEVICE.set(Some(Device { memory: BestFit::new(settings.memory_limit), ordering: Ordering::default() }));
            Ok(DeviceInfo {
                hardware_name: settings.hardware_name,
                vendor: settings.vendor,
                pci_bus_id: String::new(),
                numa_node: -1,
                memory_bandwidth: settings.memory_bandwidth,
                gflops: settings.gflops,
            })
        }
    }

    impl Memory for Reference {
        fn allocate(size: u64, alignment: u64) -> Result<u64, DeviceError> {
            with(|d| {
                let placed = d.memory.allocate(size, alignment).map_err(alloc_error);
                sample_allocator(d);
                placed
            })
        }

        fn free(offset: u64) -> Result<(), DeviceError> {
            with(|d| {
                let freed = d.memory.free(offset).map_err(alloc_error);
                sample_allocator(d);
                freed
            })
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
            // Every kind of work is ordered alike: in stream order.
            with(|d| d.ordering.submit(s).map(ticket).map_err(order_error))
        }

        fn complete(s: u64, seq: u64, at_ns: u64, ok: bool) {
            // No way to answer: a completion that makes no sense is logged.
            let outcome = with(|d| d.ordering.complete(s, seq, at_ns, ok).map_err(order_error));
            if let Err(e) = outcome {
                log(LogLevel::Warn, &format!("streams.complete(stream {s}, seq {seq}): {}", glue::describe(&e)));
            }
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
