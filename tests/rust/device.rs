//! The reference guest driven through the core layer: placement, accounting,
//! out-of-memory and recovery, stream ordering, events and timers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tfwasm::device::{Platform, ALIGNMENT};
use tfwasm::sandbox::{EventStatus, WorkKind};
use tfwasm::Error;

use crate::support::*;

#[test]
fn allocations_are_aligned_disjoint_and_inside_the_region() {
    let device = reference_device(64 << 20);
    let arena = device.arena();
    let mut live = BTreeMap::new();
    // Odd sizes, including 0 (TensorFlow may ask for it) and 1.
    for size in [0u64, 1, 3, 64, 65, 4096, 12345, 1 << 20, 7, 999_983] {
        let ptr = device.allocate(size).unwrap();
        let offset = arena.offset_of(ptr).expect("inside the region");
        assert_eq!(offset % ALIGNMENT, 0, "allocation of {size} bytes is aligned");
        assert!(arena.contains(ptr, size.max(1)));
        live.insert(offset, size.max(1));
    }
    let spans: Vec<_> = live.iter().collect();
    for pair in spans.windows(2) {
        assert!(pair[0].0 + pair[0].1 <= *pair[1].0, "allocations overlap: {pair:?}");
    }
    let usage = device.usage().unwrap();
    assert!(usage.bytes_in_use >= live.values().sum::<u64>());
    assert_eq!(usage.num_allocs, 10);
    assert_eq!(usage.limit, 64 << 20);
    // Free everything: the guest coalesces back into one block.
    for offset in live.keys() {
        device.deallocate(unsafe { arena.base().add(*offset as usize) }).unwrap();
    }
    let usage = device.usage().unwrap();
    assert_eq!(usage.bytes_in_use, 0);
    assert_eq!(usage.largest_free_block, 64 << 20);
}

#[test]
fn memory_is_host_addressable() {
    let device = reference_device(8 << 20);
    let ptr = device.allocate(4096).unwrap();
    // SAFETY: 4096 bytes were just allocated at ptr.
    unsafe {
        std::ptr::write_bytes(ptr, 0xAB, 4096);
        assert_eq!(*ptr.add(4095), 0xAB);
    }
    device.deallocate(ptr).unwrap();
}

#[test]
fn out_of_memory_then_recovery() {
    let device = reference_device(4 << 20);
    let a = device.allocate(3 << 20).unwrap();
    let err = device.allocate(2 << 20).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { requested, .. } if requested == 2 << 20), "{err}");
    let message = err.to_string();
    assert!(message.contains("reference-device") && message.contains("/device:WASM:0"), "{message}");
    assert_eq!(err.tf_code(), tfwasm::abi::ffi::status::TF_RESOURCE_EXHAUSTED);
    device.deallocate(a).unwrap();
    let b = device.allocate(4 << 20).expect("after freeing, the whole region is available again");
    device.deallocate(b).unwrap();
}

#[test]
fn unknown_pointer_is_rejected() {
    let device = reference_device(4 << 20);
    let local = 0u8;
    assert!(matches!(device.deallocate(&local), Err(Error::InvalidArgument(_))));
}

#[test]
fn concurrent_allocations_from_many_threads() {
    let device = reference_device(256 << 20);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let device = &device;
            scope.spawn(move || {
                for i in 0..200u64 {
                    let size = 64 + (t * 977 + i * 131) % 40_000;
                    let ptr = device.allocate(size).unwrap();
                    // SAFETY: fresh allocation of `size` bytes.
                    unsafe { std::ptr::write_bytes(ptr, t as u8, size as usize) };
                    device.deallocate(ptr).unwrap();
                }
            });
        }
    });
    assert_eq!(device.usage().unwrap().bytes_in_use, 0);
}

fn logger(log: &Arc<Mutex<Vec<&'static str>>>, name: &'static str, delay_ms: u64) -> tfwasm::device::WorkFn {
    let log = log.clone();
    Box::new(move || {
        std::thread::sleep(Duration::from_millis(delay_ms));
        log.lock().push(name);
        Ok(())
    })
}

#[test]
fn work_waits_for_recorded_events_across_streams() {
    let device = reference_device(4 << 20);
    let a = device.create_stream().unwrap();
    let b = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Unknown);
    let log = Arc::new(Mutex::new(Vec::new()));
    device.submit(a, WorkKind::CopyHostToDevice, logger(&log, "a-slow-copy", 100), None).unwrap();
    device.record_event(a, event).unwrap();
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Pending);
    device.wait_for_event(b, event).unwrap();
    device.submit(b, WorkKind::CopyDeviceToHost, logger(&log, "b-after-event", 0), None).unwrap();
    device.block_until_done(b).unwrap();
    assert_eq!(*log.lock(), vec!["a-slow-copy", "b-after-event"]);
    device.block_for_event(event).unwrap();
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Complete);
    // Events are pooled and re-recorded by TensorFlow.
    device.submit(a, WorkKind::Memset, logger(&log, "a-again", 50), None).unwrap();
    device.record_event(a, event).unwrap();
    device.block_for_event(event).unwrap();
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Complete);
    assert_eq!(device.replacements(), 0, "the reference guest never needs replacing");
    device.destroy_event(event);
    device.destroy_stream(a);
    device.destroy_stream(b);
}

#[test]
fn stream_dependency_orders_work() {
    let device = reference_device(4 << 20);
    let a = device.create_stream().unwrap();
    let b = device.create_stream().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    device.submit(a, WorkKind::CopyHostToDevice, logger(&log, "a", 80), None).unwrap();
    device.add_dependency(b, a, device.stream_queue(a).unwrap()).unwrap();
    device.submit(b, WorkKind::HostCallback, logger(&log, "b", 0), None).unwrap();
    device.synchronize_all();
    assert_eq!(*log.lock(), vec!["a", "b"]);
    assert!(device.stream_status(a).is_ok());
}

#[test]
fn failed_work_puts_the_stream_in_error() {
    let device = reference_device(4 << 20);
    let s = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    device.submit(s, WorkKind::Memset, Box::new(|| Err("memset32 misaligned".into())), None).unwrap();
    device.record_event(s, event).unwrap();
    device.block_until_done(s).unwrap();
    let err = device.stream_status(s).unwrap_err();
    assert!(err.to_string().contains("misaligned"), "{err}");
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Error);
}

#[test]
fn timers_measure_the_work_between_markers() {
    let device = reference_device(4 << 20);
    let s = device.create_stream().unwrap();
    let timer = device.create_timer().unwrap();
    device.mark_timer(s, timer, true).unwrap();
    device
        .submit(
            s,
            WorkKind::CopyDeviceToDevice,
            Box::new(|| {
                std::thread::sleep(Duration::from_millis(20));
                Ok(())
            }),
            None,
        )
        .unwrap();
    device.mark_timer(s, timer, false).unwrap();
    device.block_until_done(s).unwrap();
    let ns = device.timer_nanoseconds(timer).unwrap();
    assert!(ns >= 20_000_000, "timer measured {ns} ns for 20 ms of work");
    device.destroy_timer(timer);
}

#[test]
fn multiple_devices_have_separate_guests_and_regions() {
    let mut policy = policy("reference-device", reference_guest(), 8 << 20, &[]);
    policy.device.count = 2;
    let devices = Platform::start(&policy, "WASM").unwrap();
    assert_eq!(devices.len(), 2);
    let a = devices[0].allocate(6 << 20).unwrap();
    // Device 1 has its own 8 MiB, untouched by device 0's allocation.
    let b = devices[1].allocate(6 << 20).unwrap();
    assert!(devices[0].arena().contains(a, 6 << 20));
    assert!(devices[1].arena().contains(b, 6 << 20));
    assert!(!devices[0].arena().contains(b, 1));
    assert_eq!(devices[1].name(), "/device:WASM:1");
}

#[test]
fn guest_options_reach_the_guest() {
    let device = device(&policy("reference-device", reference_guest(), 8 << 20, &[("hardware-name", "Test Board 7")]));
    assert_eq!(device.identity().info.hardware_name, "Test Board 7");
    assert_eq!(device.identity().hardware_name.to_str().unwrap(), "Test Board 7");
}

#[test]
fn compiled_guests_are_cached_by_content_and_engine() {
    use tfwasm::sandbox::{cache, engine, GuestProgram};
    let dir = std::env::temp_dir().join(format!("tfwasm-cache-test-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let policy = policy("reference-device", reference_guest(), 8 << 20, &[]);
    let bytes = std::fs::read(&policy.guest.path).unwrap();
    let entry = cache::entry(&dir, engine().unwrap(), &bytes);
    assert!(!entry.exists());

    let first = GuestProgram::load_with_cache(&policy, Some(&dir)).unwrap();
    assert!(entry.is_file(), "the first load writes the cache entry");
    let second = GuestProgram::load_with_cache(&policy, Some(&dir)).unwrap();
    for program in [first, second] {
        let device = tfwasm::device::Device::new(&program, "WASM", 0).unwrap();
        let p = device.allocate(100).unwrap();
        device.deallocate(p).unwrap();
    }
    // A corrupt entry is ignored and replaced, never trusted.
    std::fs::write(&entry, b"garbage").unwrap();
    let program = GuestProgram::load_with_cache(&policy, Some(&dir)).unwrap();
    assert!(tfwasm::device::Device::new(&program, "WASM", 0).is_ok());
    assert!(std::fs::metadata(&entry).unwrap().len() > 1000, "the corrupt entry was rewritten");
    // Different bytes, different entry.
    let mut other = bytes.clone();
    other.extend_from_slice(&[0, 4, b'n', b'o', b'p', b'e']);
    assert_ne!(cache::entry(&dir, engine().unwrap(), &other), entry);
    std::fs::remove_dir_all(&dir).ok();
}

// ------------------------------------------------------------- recycling

fn recycling_device(
    name: &str,
    path: std::path::PathBuf,
    memory: u64,
    options: &[(&str, &str)],
) -> Arc<tfwasm::device::Device> {
    let mut policy = policy(name, path, memory, options);
    policy.device.recycle_bytes = memory;
    device(&policy)
}

#[test]
fn a_kept_block_is_reused_without_asking_the_guest() {
    // The hostile guest traps on every allocate after the first, so any
    // allocation after that which succeeds was served by the host.
    let device =
        recycling_device("hostile-device", hostile_guest(), 16 << 20, &[("mode", "trap-on-allocate"), ("after", "1")]);
    let first = device.allocate(1000).unwrap();
    device.deallocate(first).unwrap();
    assert_eq!(device.recycled_bytes(), 1000);
    for _ in 0..3 {
        let again = device.allocate(1000).expect("the kept block is handed out again");
        assert_eq!(again, first);
        assert_eq!(device.recycled_bytes(), 0);
        device.deallocate(again).unwrap();
    }
    assert_eq!(device.replacements(), 0, "the guest was never asked again");
    // Another size is the guest's decision: it traps, as configured.
    let err = device.allocate(999).unwrap_err();
    assert!(matches!(err, Error::GuestTrap { .. }), "{err}");
}

#[test]
fn kept_blocks_go_back_to_the_guest_when_it_is_full() {
    let device = recycling_device("reference-device", reference_guest(), 4 << 20, &[]);
    let a = device.allocate(3 << 20).unwrap();
    device.deallocate(a).unwrap();
    assert_eq!(device.recycled_bytes(), 3 << 20);
    // Only 1 MiB is free in the guest's view until the kept block returns.
    let b = device.allocate(2 << 20).expect("the kept 3 MiB go back to the guest, which then has room");
    assert_eq!(device.recycled_bytes(), 0);
    device.deallocate(b).unwrap();
    let err = device.allocate(5 << 20).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
}

#[test]
fn usage_reports_kept_blocks_as_free() {
    let device = recycling_device("reference-device", reference_guest(), 8 << 20, &[]);
    let blocks: Vec<_> = [4096u64, 4096, 12345].iter().map(|&size| device.allocate(size).unwrap()).collect();
    for &p in &blocks {
        device.deallocate(p).unwrap();
    }
    let usage = device.usage().unwrap();
    assert_eq!(usage.bytes_in_use, 0);
    assert_eq!(usage.largest_free_block, 8 << 20);
    assert_eq!(device.arena().bytes_in_use(), 0);
}

#[test]
fn a_second_free_of_a_kept_block_is_an_error() {
    let device = recycling_device("reference-device", reference_guest(), 8 << 20, &[]);
    let p = device.allocate(64).unwrap();
    device.deallocate(p).unwrap();
    let err = device.deallocate(p).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(ref m) if m.contains("freed twice")), "{err}");
    // The block is kept once, so it is handed out once.
    let q = device.allocate(64).unwrap();
    let r = device.allocate(64).unwrap();
    assert_ne!(q, r);
}
