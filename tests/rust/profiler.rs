//! The profiler's host side without TensorFlow: a session on a device
//! running the reference guest, collected into the XSpace TensorBoard reads
//! and decoded again with our own schema.
//!
//! The session is process-wide, so these tests take [`SESSION`] in turn.
//! Other tests of this binary use devices meanwhile, and their records land
//! in the same session: the assertions look for what these tests did
//! themselves (allocations of sizes no other test uses).

use std::sync::Arc;

use parking_lot::Mutex;
use tfwasm::device::Device;
use tfwasm::sandbox::WorkKind;
use tfwasm::Error;
use tfwasm_proto::prost::Message;
use tfwasm_proto::xplane::{x_stat, XEvent, XLine, XPlane, XSpace};
use tfwasm_runtime::profiler::{self, xspace::PLANE_PREFIX};

use crate::support::{hostile_device, reference_device};

static SESSION: Mutex<()> = Mutex::new(());

/// Collects the stopped session the way TensorFlow does: size query, then copy.
fn collect(devices: &[Arc<Device>]) -> XSpace {
    let len = profiler::prepare(devices).expect("size query");
    assert_eq!(profiler::prepare(devices).unwrap(), len, "asking twice gives the same size");
    let mut buffer = vec![0u8; len];
    assert_eq!(profiler::write_into(devices, &mut buffer).unwrap(), len);
    XSpace::decode(buffer.as_slice()).expect("the trace decodes")
}

fn plane(space: &XSpace, ordinal: u32) -> &XPlane {
    let name = format!("{PLANE_PREFIX}{ordinal}");
    space.planes.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no plane {name}"))
}

fn line<'a>(plane: &'a XPlane, name: &str) -> &'a XLine {
    plane.lines.iter().find(|l| l.name.starts_with(name)).unwrap_or_else(|| panic!("no line {name}"))
}

fn event_name<'a>(plane: &'a XPlane, event: &XEvent) -> &'a str {
    &plane.event_metadata[&event.metadata_id].name
}

fn stat_u64(plane: &XPlane, stats: &[tfwasm_proto::xplane::XStat], name: &str) -> Option<u64> {
    stats.iter().find(|s| plane.stat_metadata[&s.metadata_id].name == name).and_then(|s| match s.value {
        Some(x_stat::Value::Uint64Value(v)) => Some(v),
        _ => None,
    })
}

/// Events on the `Memory` line of `plane` whose `bytes` stat is `size`.
fn memory_events(plane: &XPlane, size: u64) -> Vec<(&str, u64)> {
    let Some(memory) = plane.lines.iter().find(|l| l.name == "Memory") else { return Vec::new() };
    memory
        .events
        .iter()
        .filter(|e| stat_u64(plane, &e.stats, "bytes") == Some(size))
        .map(|e| (event_name(plane, e), stat_u64(plane, &e.stats, "bytes_in_use").unwrap()))
        .collect()
}

#[test]
fn a_session_records_allocations_copies_and_guest_calls_on_the_devices_plane() {
    let _session = SESSION.lock();
    let device = reference_device(64 << 20);
    let before = profiler::now_ns();
    profiler::start().unwrap();
    let ptr = device.allocate(123_457).unwrap();
    let stream = device.create_stream().unwrap();
    device.submit(stream, WorkKind::Memset, Box::new(|| Ok(())), Some(4096)).unwrap();
    device.block_until_done(stream).unwrap();
    device.deallocate(ptr).unwrap();
    profiler::stop().unwrap();
    let after = profiler::now_ns();
    let space = collect(std::slice::from_ref(&device));

    let plane = plane(&space, 0);
    assert_eq!(
        memory_events(plane, 123_457).iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        ["Allocate", "Free"],
        "one allocation and one free of the size this test used"
    );
    let (_, in_use_after_allocation) = memory_events(plane, 123_457)[0];
    assert!(in_use_after_allocation >= 123_457, "bytes in use after the allocation include it");
    let copies: Vec<_> = plane.lines.iter().filter(|l| l.name.starts_with("Stream ")).flat_map(|l| &l.events).collect();
    assert!(
        copies.iter().any(|e| event_name(plane, e) == "Memset" && stat_u64(plane, &e.stats, "bytes") == Some(4096)),
        "the fill is on a stream line"
    );
    let calls = line(plane, "Guest calls");
    assert!(calls.events.iter().any(|e| event_name(plane, e) == "memory.allocate"));
    for line in &plane.lines {
        let start = u64::try_from(line.timestamp_ns).unwrap();
        assert!((before..=after).contains(&start), "{}: line starts at the session's wall-clock start", line.name);
        for event in &line.events {
            let Some(tfwasm_proto::xplane::x_event::Data::OffsetPs(offset)) = event.data else { panic!("no offset") };
            assert!(offset >= 0 && offset + event.duration_ps <= line.duration_ps + 1_000_000, "{}: inside", line.name);
        }
    }
    let stats: Vec<_> = plane.stats.iter().map(|s| plane.stat_metadata[&s.metadata_id].name.as_str()).collect();
    for name in ["device", "guest", "dropped_events", "recorded_events"] {
        assert!(stats.contains(&name), "plane stat {name}");
    }
}

#[test]
fn nothing_is_recorded_without_a_session() {
    let _session = SESSION.lock();
    let device = reference_device(64 << 20);
    let ptr = device.allocate(98_765).unwrap();
    device.deallocate(ptr).unwrap();
    profiler::start().unwrap();
    profiler::stop().unwrap();
    let ptr = device.allocate(98_765).unwrap();
    device.deallocate(ptr).unwrap();
    let space = collect(std::slice::from_ref(&device));
    assert!(memory_events(plane(&space, 0), 98_765).is_empty(), "work outside the session left records");
}

#[test]
fn the_ring_keeps_the_newest_records_and_counts_the_dropped() {
    let _session = SESSION.lock();
    let device = reference_device(64 << 20);
    profiler::start_with_capacity(16).unwrap();
    for _ in 0..100 {
        let ptr = device.allocate(77_777).unwrap();
        device.deallocate(ptr).unwrap();
    }
    profiler::stop().unwrap();
    let space = collect(std::slice::from_ref(&device));
    let plane = plane(&space, 0);
    let recorded = stat_u64(plane, &plane.stats, "recorded_events").unwrap();
    let dropped = stat_u64(plane, &plane.stats, "dropped_events").unwrap();
    assert!(recorded <= 16, "the ring holds at most 16 records, the trace has {recorded}");
    assert!(dropped >= 200 - 16, "200 allocations and frees, 16 kept: {dropped} dropped");
    let kept = memory_events(plane, 77_777);
    assert!(!kept.is_empty(), "the newest records are kept");
    assert_eq!(kept.last().unwrap().0, "Free", "the last thing the test did is in the trace");
    assert!(space.warnings.iter().any(|w| w.contains("dropped")), "the trace says events were dropped");
}

#[test]
fn sessions_restart_and_misuse_is_an_error_not_a_crash() {
    let _session = SESSION.lock();
    let device = reference_device(64 << 20);
    let devices = std::slice::from_ref(&device);
    profiler::start().unwrap();
    let again = profiler::start().unwrap_err();
    assert!(matches!(again, Error::Profiler(_)), "{again}");
    profiler::stop().unwrap();
    profiler::stop().unwrap();
    // A buffer too small is refused and the trace kept for a proper one.
    let len = profiler::prepare(devices).unwrap();
    let mut small = vec![0u8; len - 1];
    assert!(matches!(profiler::write_into(devices, &mut small), Err(Error::Profiler(_))));
    let mut buffer = vec![0u8; len];
    assert_eq!(profiler::write_into(devices, &mut buffer).unwrap(), len);
    // Many cycles, each with its own trace; collecting without a session
    // gives planes without events.
    for cycle in 0..200u64 {
        profiler::start().unwrap();
        let ptr = device.allocate(50_000 + cycle).unwrap();
        device.deallocate(ptr).unwrap();
        profiler::stop().unwrap();
        let space = collect(devices);
        assert_eq!(memory_events(plane(&space, 0), 50_000 + cycle).len(), 2, "cycle {cycle}");
        if cycle > 0 {
            assert!(memory_events(plane(&space, 0), 50_000 + cycle - 1).is_empty(), "cycle {cycle} sees the last one");
        }
    }
    let space = collect(devices);
    assert!(plane(&space, 0).lines.iter().all(|l| l.events.is_empty()));
}

#[test]
fn a_guest_fault_and_the_replacement_are_in_the_trace() {
    let _session = SESSION.lock();
    let device = hostile_device("trap-on-allocate", 1);
    profiler::start().unwrap();
    let a = device.allocate(1000).unwrap();
    let fault = device.allocate(1000).unwrap_err();
    profiler::stop().unwrap();
    device.deallocate(a).unwrap();
    let space = collect(std::slice::from_ref(&device));
    let plane = plane(&space, 0);
    let faults = line(plane, "Guest faults");
    let reason = faults.events[0]
        .stats
        .iter()
        .find_map(|s| match (&plane.stat_metadata[&s.metadata_id].name[..], &s.value) {
            ("reason", Some(x_stat::Value::StrValue(reason))) => Some(reason.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(reason, fault.to_string());
    assert_eq!(stat_u64(plane, &plane.stats, "guest_replacements"), Some(1));
}
