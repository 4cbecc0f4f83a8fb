//! Hostile guests: every misbehaviour becomes an error that names the guest,
//! nothing reaches TensorFlow unchecked, and the device keeps working (or is
//! disabled with a reason).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tfwasm::device::MAX_REPLACEMENTS;
use tfwasm::sandbox::{EventStatus, WorkKind};
use tfwasm::Error;

use crate::support::*;

fn assert_names_guest(error: &Error) {
    let message = error.to_string();
    assert!(message.starts_with("tfwasm:"), "{message}");
    assert!(message.contains("hostile-device"), "message does not name the guest: {message}");
}

/// The misbehaving call fails with `expected`; afterwards a fresh instance
/// serves correct allocations again, around the allocations still live.
fn faults_then_recovers(mode: &str, expected: fn(&Error) -> bool) {
    let device = hostile_device(mode, 2);
    let a = device.allocate(1000).unwrap();
    let b = device.allocate(1000).unwrap();
    let err = device.allocate(1000).unwrap_err();
    assert!(expected(&err), "{mode}: unexpected error {err}");
    assert_names_guest(&err);
    assert_eq!(device.replacements(), 1, "{mode}: the faulty instance is replaced");
    // The new instance adopted `a` and `b`: its answers must avoid them (the
    // arena would reject an overlap as an invalid answer).
    let c = device.allocate(1000).expect("the replacement instance allocates");
    assert!(c != a && c != b);
    assert_eq!(device.replacements(), 1);
    for p in [a, b, c] {
        device.deallocate(p).unwrap();
    }
}

#[test]
fn trap_during_allocate() {
    faults_then_recovers("trap-on-allocate", |e| {
        // The message says what trapped and where, with no empty backtrace header.
        let message = e.to_string();
        matches!(e, Error::GuestTrap { call, .. } if call == "memory.allocate")
            && message.contains("panicked")
            && !message.trim_end().ends_with(':')
    });
}

#[test]
fn endless_loop_hits_the_deadline() {
    faults_then_recovers("loop-on-allocate", |e| {
        matches!(e, Error::GuestTimeout { .. }) && e.to_string().contains("deadline")
    });
}

#[test]
fn out_of_bounds_offset_is_rejected() {
    faults_then_recovers(
        "out-of-bounds",
        |e| matches!(e, Error::GuestInvalid { reason, .. } if reason.contains("out of bounds")),
    );
}

#[test]
fn overlapping_offset_is_rejected() {
    faults_then_recovers("overlap", |e| matches!(e, Error::GuestInvalid { reason, .. } if reason.contains("overlaps")));
}

#[test]
fn misaligned_offset_is_rejected() {
    faults_then_recovers(
        "misaligned",
        |e| matches!(e, Error::GuestInvalid { reason, .. } if reason.contains("aligned")),
    );
}

#[test]
fn memory_cap_stops_a_growing_guest() {
    let mut policy = policy("hostile-device", hostile_guest(), 16 << 20, &[("mode", "grow-memory"), ("after", "0")]);
    policy.limits.memory_bytes = 4 << 20;
    let device = device(&policy);
    let err = device.allocate(64).unwrap_err();
    assert!(matches!(err, Error::GuestTrap { .. }), "{err}");
    assert_names_guest(&err);
    let message = err.to_string();
    assert!(message.contains("limits.memory-bytes") && message.contains("4194304"), "{message}");
}

#[test]
fn oom_always_is_resource_exhausted_not_a_fault() {
    let device = hostile_device("oom-always", 0);
    let err = device.allocate(64).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert_eq!(device.replacements(), 0);
}

#[test]
fn a_guest_that_always_traps_disables_the_device() {
    let device = hostile_device("trap-on-allocate", 0);
    for _ in 0..=MAX_REPLACEMENTS {
        assert!(matches!(device.allocate(64).unwrap_err(), Error::GuestTrap { .. }));
    }
    let err = device.allocate(64).unwrap_err();
    assert!(matches!(err, Error::DeviceDisabled { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("hostile-device") && message.contains("disabled"), "{message}");
    assert!(device.disabled().is_some());
}

#[test]
fn broken_guests_fail_to_load_with_a_reason() {
    let dir = std::env::temp_dir().join(format!("tfwasm-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("corrupt.wasm", b"definitely not wasm".to_vec(), "not a valid wasm component"),
        // An empty core module: valid wasm, but not a component.
        ("core.wasm", b"\0asm\x01\0\0\0".to_vec(), "not a valid wasm component"),
    ];
    for (file, bytes, expected) in cases {
        let path = dir.join(file);
        std::fs::write(&path, bytes).unwrap();
        let err = start_error(&policy("broken-guest", path, 1 << 20, &[]));
        let message = err.to_string();
        assert!(matches!(err, Error::GuestLoad { .. }), "{message}");
        assert!(message.contains("broken-guest") && message.contains(expected), "{message}");
    }
    let err = start_error(&policy("missing-guest", dir.join("nope.wasm"), 1 << 20, &[]));
    assert!(err.to_string().contains("cannot read"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn init_errors_and_traps_refuse_the_device() {
    let err = start_error(&policy("hostile-device", hostile_guest(), 1 << 20, &[("mode", "init-error")]));
    assert!(matches!(err, Error::GuestLoad { .. }), "{err}");
    assert_names_guest(&err);
    let err = start_error(&policy("hostile-device", hostile_guest(), 1 << 20, &[("mode", "trap-on-init")]));
    assert!(matches!(err, Error::GuestTrap { .. }), "{err}");
    assert_names_guest(&err);
}

/// Stream misbehaviour is caught by the ticket check; the work still runs in
/// host order, so TensorFlow never hangs on a lying guest.
fn stream_lie_is_survived(mode: &str) {
    let device = hostile_device(mode, 0);
    let a = device.create_stream().unwrap();
    let b = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    let ran_a = Arc::new(AtomicBool::new(false));
    let flag = ran_a.clone();
    device
        .submit(
            a,
            WorkKind::CopyHostToDevice,
            Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                flag.store(true, Ordering::SeqCst);
                Ok(())
            }),
            None,
        )
        .unwrap();
    device.record_event(a, event).unwrap();
    device.wait_for_event(b, event).unwrap();
    let seen = ran_a.clone();
    let ok = Arc::new(AtomicBool::new(false));
    let ok2 = ok.clone();
    // A small copy: runs inline if b is idle and the event's work done, else queues.
    device
        .submit(
            b,
            WorkKind::CopyDeviceToHost,
            Box::new(move || {
                ok2.store(seen.load(Ordering::SeqCst), Ordering::SeqCst);
                Ok(())
            }),
            Some(8),
        )
        .unwrap();
    // Whatever the guest says, the event's status is the host's truth.
    let status = device.event_status(event).unwrap();
    device.synchronize_all();
    assert!(ok.load(Ordering::SeqCst), "{mode}: b's work ran before the event it waits for");
    assert_eq!(device.event_status(event).unwrap(), EventStatus::Complete, "{mode}");
    assert!(matches!(status, EventStatus::Pending | EventStatus::Complete), "{mode}: {status:?}");
    assert!(device.replacements() >= 1, "{mode}: the lie was not detected");
}

#[test]
fn non_increasing_sequence_numbers() {
    stream_lie_is_survived("bad-seq");
}

#[test]
fn dangling_dependencies() {
    stream_lie_is_survived("dangling-dependency");
}

#[test]
fn events_reported_complete_too_early() {
    stream_lie_is_survived("lie-event-complete");
}

#[test]
fn trap_while_ordering_work() {
    stream_lie_is_survived("trap-on-submit");
}

/// An honest refusal is not a fault: the host orders that stream itself from
/// then on, so the guest's own sequence numbers never go stale and the guest
/// is never blamed for it.
#[test]
fn refused_submits_hand_the_stream_to_the_host() {
    let device = hostile_device("refuse-every-other-submit", 0);
    let s = device.create_stream().unwrap();
    let ran = Arc::new(std::sync::atomic::AtomicU64::new(0));
    for _ in 0..6 {
        let ran = ran.clone();
        device
            .submit(
                s,
                WorkKind::CopyHostToDevice,
                Box::new(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }),
                None,
            )
            .unwrap();
    }
    device.block_until_done(s).unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 6);
    assert_eq!(device.replacements(), 0, "a refusal is not a fault");
    assert!(device.stream_status(s).is_ok());
}

#[test]
fn a_pinned_digest_admits_only_that_guest() {
    let bytes = std::fs::read(reference_guest()).unwrap();
    let actual = tfwasm::sandbox::cache::sha256_hex(&bytes);
    let mut pinned = policy("reference-device", reference_guest(), 4 << 20, &[]);
    pinned.guest.sha256 = Some(actual.to_uppercase());
    device(&pinned);
    // Another guest under the same pin: refused, with both digests.
    let other = std::fs::read(hostile_guest()).unwrap();
    let mut swapped = pinned.clone();
    swapped.guest.path = hostile_guest();
    let error = start_error(&swapped);
    let message = error.to_string();
    assert!(matches!(error, Error::GuestLoad { .. }), "{message}");
    assert!(message.contains(&actual.to_uppercase()), "the pin is missing: {message}");
    assert!(message.contains(&tfwasm::sandbox::cache::sha256_hex(&other)), "the file's digest is missing: {message}");
    // A malformed pin is a policy error, before anything is read.
    swapped.guest.sha256 = Some("abc".into());
    assert!(swapped.validate().unwrap_err().contains("64 hex digits"));
}
