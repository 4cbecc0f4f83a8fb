//! The profiler's host side without TensorFlow: a session on a device
//! running the reference guest, collected into the XSpace TensorBoard reads
//! and decoded again with our own schema; shaped by the reference profiler
//! guest, and by a hostile one whose every lie leaves the host's own lines.
//!
//! The session is process-wide, so these tests take [`SESSION`] in turn.
//! Other tests of this binary use devices meanwhile, and their records land
//! in the same session: the assertions look for what these tests did
//! themselves (allocations of sizes no other test uses).

use std::sync::Arc;

use parking_lot::Mutex;
use tfwasm::device::Device;
use tfwasm::policy::{Limits, ProfilerGuestSection};
use tfwasm::sandbox::WorkKind;
use tfwasm::Error;
use tfwasm_proto::prost::Message;
use tfwasm_proto::xplane::{x_stat, XEvent, XLine, XPlane, XSpace};
use tfwasm_runtime::profiler::guest::ProfilerProgram;
use tfwasm_runtime::profiler::{self, xspace::PLANE_PREFIX};

use crate::support::{guest, hostile_device, reference_device};

static SESSION: Mutex<()> = Mutex::new(());

/// Takes the session for one test, with the host's own shaping unless it
/// sets a profiler guest.
fn session() -> parking_lot::MutexGuard<'static, ()> {
    let guard = SESSION.lock();
    profiler::set_guest(None);
    guard
}

fn profiler_guest(file: &str, name: &str, options: &[(&str, &str)]) -> Arc<ProfilerProgram> {
    let section = ProfilerGuestSection {
        name: name.into(),
        path: guest(file),
        sha256: None,
        limits: Limits::with(256 << 20, 500),
        config: options.iter().map(|(k, v)| ((*k).to_owned(), toml::Value::String((*v).to_owned()))).collect(),
    };
    ProfilerProgram::load(&section, None).expect("the profiler guest loads")
}

fn stat_text(plane: &XPlane, name: &str) -> String {
    plane
        .stats
        .iter()
        .find(|s| plane.stat_metadata[&s.metadata_id].name == name)
        .and_then(|s| match &s.value {
            Some(x_stat::Value::StrValue(text)) => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no text stat {name}"))
}

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
    let _session = session();
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
    let _session = session();
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
    let _session = session();
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
    let _session = session();
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
    let _session = session();
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

/// A session of one allocation of `size`, shaped by `program`.
fn shaped_session(program: Arc<ProfilerProgram>, size: u64) -> XSpace {
    let device = reference_device(64 << 20);
    profiler::set_guest(Some(program));
    profiler::start().unwrap();
    let ptr = device.allocate(size).unwrap();
    device.deallocate(ptr).unwrap();
    profiler::stop().unwrap();
    let space = collect(std::slice::from_ref(&device));
    profiler::set_guest(None);
    space
}

#[test]
fn the_reference_profiler_guest_shapes_the_devices_plane() {
    let _session = session();
    let program = profiler_guest("tfwasm_reference_profiler.wasm", "reference-profiler", &[]);
    let space = shaped_session(program, 61_111);
    let plane = plane(&space, 0);
    let status = stat_text(plane, "profiler_guest");
    assert!(status.contains("reference-profiler") && status.contains("shaped the trace"), "{status}");
    assert_eq!(stat_u64(plane, &plane.stats, "kernel_executions"), Some(0), "the guest's own plane stat");
    let names: Vec<_> = memory_events(plane, 61_111).iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["Allocate", "Free"], "the recorded events, on the guest's Memory line");
    assert!(plane.lines.iter().any(|l| l.name == "Guest calls"));
}

#[test]
fn a_hostile_profiler_guest_costs_only_its_own_shape() {
    let _session = session();
    let cases = [
        ("trap", "panicked"),
        ("loop", "deadline"),
        ("error", "asked to fail"),
        ("flood", "of its own"),
        ("lying-ids", "does not exist"),
        ("wrong-device", "does not exist"),
        ("absurd-time", "outside the session"),
        ("long-name", "characters"),
        ("typo", "unknown mode"),
    ];
    for (index, (mode, reason)) in cases.into_iter().enumerate() {
        let program = profiler_guest("tfwasm_hostile_profiler.wasm", "hostile-profiler", &[("mode", mode)]);
        let size = 62_000 + index as u64;
        let space = shaped_session(program, size);
        let plane = plane(&space, 0);
        let status = stat_text(plane, "profiler_guest");
        assert!(
            status.contains("hostile-profiler") && status.contains(reason) && status.contains("host's own lines"),
            "{mode}: {status}"
        );
        let names: Vec<_> = memory_events(plane, size).iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["Allocate", "Free"], "{mode}: the host's own lines are in the trace");
        assert!(plane.lines.iter().all(|l| l.name != "lies"), "{mode}: nothing of the guest's answer is kept");
    }
    // An honest answer that shapes no device leaves the host's lines too, without complaint.
    let program = profiler_guest("tfwasm_hostile_profiler.wasm", "hostile-profiler", &[("mode", "honest")]);
    let space = shaped_session(program, 63_000);
    let plane = plane(&space, 0);
    assert!(stat_text(plane, "profiler_guest").contains("shaped the trace"));
    assert_eq!(memory_events(plane, 63_000).len(), 2);
}

#[test]
fn the_reference_device_guest_annotates_its_allocators_state() {
    let _session = session();
    let device = reference_device(64 << 20);
    profiler::start().unwrap();
    for _ in 0..200 {
        let ptr = device.allocate(64_123).unwrap();
        device.deallocate(ptr).unwrap();
    }
    profiler::stop().unwrap();
    let space = collect(std::slice::from_ref(&device));
    let plane = plane(&space, 0);
    let annotations = line(plane, "Annotations");
    let samples: Vec<_> = annotations.events.iter().filter(|e| event_name(plane, e) == "allocator").collect();
    // 400 guest calls, one sample every 64th.
    assert!(samples.len() >= 6, "{} allocator samples", samples.len());
    assert!(samples.iter().all(|e| stat_u64(plane, &e.stats, "limit") == Some(64 << 20)));
    assert!(samples.iter().all(|e| stat_u64(plane, &e.stats, "bytes_in_use").is_some()));
}
