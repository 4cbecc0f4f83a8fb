//! The device guest written in C (`guest/c-device`, built by its `build.sh`)
//! is held to the contract like the reference guest: every check passes, the
//! component imports nothing but its world's own interfaces (no WASI), and
//! driven by the same calls, it gives the reference guest's answers.

use std::collections::BTreeSet;
use std::path::PathBuf;

use tfwasm_runtime::policy::Policy;
use tfwasm_runtime::sandbox::{Device, DeviceConfig, GuestInstance, GuestProgram, GuestState, WorkKind};
use wasmtime::Store;

use super::{guest, results, tfwasm, workspace};

fn c_guest() -> PathBuf {
    let path = workspace().join("target/wasm32-wasip2/guest/tfwasm_c_device.wasm");
    assert!(path.is_file(), "{} is not built: bash guest/c-device/build.sh", path.display());
    path
}

#[test]
fn the_c_guest_passes_every_check_the_reference_guest_passes() {
    let c = c_guest();
    let (code, out) = tfwasm(&["check", "--json", c.to_str().unwrap()]);
    let checks = results(&out);
    let failed: Vec<&str> = checks.iter().filter(|(_, passed)| !passed).map(|(name, _)| name.as_str()).collect();
    assert!(failed.is_empty(), "the C guest failed {failed:?}\n{out}");
    assert_eq!(code, 0, "{out}");
    // The same suite ran: no check is missing.
    let reference = guest("tfwasm_reference_device.wasm");
    let (_, reference_out) = tfwasm(&["check", "--json", reference.to_str().unwrap()]);
    let names = |checks: &[(String, bool)]| checks.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&checks), names(&results(&reference_out)));
    // And it was the C guest that answered: `init` quotes its device name.
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    let init = value.as_array().unwrap().iter().find(|r| r["check"] == "init").expect("an init check");
    assert!(init["detail"].as_str().unwrap().contains("\"tfwasm C device\""), "{init}");
}

#[test]
fn the_c_guest_imports_no_wasi() {
    let (code, out) = tfwasm(&["info", "--json", c_guest().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["exports_packages"][0], "tfwasm:device@0.1.0");
    let imports: Vec<&str> = value["imports"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
    // `host` for its functions, `types` for the types the exports share.
    assert!(imports.contains(&"tfwasm:device/host@0.1.0"), "{imports:?}");
    assert!(
        imports.iter().all(|i| i.starts_with("tfwasm:device/") && i.ends_with("@0.1.0")),
        "a C guest needs no WASI (and so no adapter): {imports:?}"
    );
}

/// The two guests side by side: every question goes to both, and their
/// answers must be equal.
struct SideBySide {
    c: GuestInstance,
    reference: GuestInstance,
    step: usize,
    /// The kinds of answer seen (`call → answer` without its numbers), so the
    /// test can tell that the calls reached every outcome worth comparing.
    seen: BTreeSet<String>,
}

impl SideBySide {
    fn new(config: &DeviceConfig) -> SideBySide {
        let instance = |path: PathBuf, name: &str| {
            let program = GuestProgram::load(&Policy::for_guest(name, path)).unwrap();
            program.instantiate().unwrap()
        };
        let mut both = SideBySide {
            c: instance(c_guest(), "c-device"),
            reference: instance(guest("tfwasm_reference_device.wasm"), "reference-device"),
            step: 0,
            seen: BTreeSet::new(),
        };
        both.ask("init", |g, s| g.tfwasm_device_identity().call_init(s, config)).unwrap();
        both
    }

    /// Asks both guests; returns the answer they agree on. The generated
    /// types have no `PartialEq`: answers are compared as written out.
    fn ask<R: std::fmt::Debug>(
        &mut self,
        what: &str,
        call: impl Fn(&Device, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> R {
        self.step += 1;
        let c = self.c.with_bindings(what, &call).unwrap_or_else(|e| panic!("step {}: {what}: {e}", self.step));
        let reference =
            self.reference.with_bindings(what, &call).unwrap_or_else(|e| panic!("step {}: {what}: {e}", self.step));
        let answer = format!("{reference:?}");
        assert_eq!(
            format!("{c:?}"),
            answer,
            "step {}: {what}: the C guest's answer, then the reference guest's",
            self.step
        );
        self.seen.insert(format!("{what} → {}", answer.replace(|c: char| c.is_ascii_digit(), "")));
        reference
    }
}

/// xorshift64: the same calls on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len() as u64) as usize])
    }
}

#[test]
fn the_c_guest_answers_every_call_as_the_reference_guest_does() {
    let region = 16u64 << 20;
    let options = [("hardware-name", "side by side"), ("gflops", "2.5"), ("memory-limit", "16000000"), ("colour", "x")];
    let config = DeviceConfig {
        ordinal: 0,
        memory_size: region,
        options: options.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect(),
    };
    let mut both = SideBySide::new(&config);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // What the guests handed out, as the host sees it.
    let mut live: Vec<u64> = Vec::new();
    let mut streams: Vec<(u64, u64, u64)> = Vec::new(); // (id, last seq ticketed, last seq completed)
    let (mut events, mut timers): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    let bogus = |rng: &mut Rng| rng.below(200);
    for _ in 0..4000 {
        let stream = rng.pick(&streams).map(|(id, ..)| id).unwrap_or(1);
        let event = rng.pick(&events).unwrap_or(2);
        match rng.below(20) {
            0..=5 => {
                let size = match rng.below(10) {
                    0 => 0,
                    1..=3 => 1 + rng.below(1 << 20),
                    _ => 1 + rng.below(5000),
                };
                let alignment = [0, 1, 48, 64, 256, 256, 256, 4096, 1 << 20][rng.below(9) as usize];
                let answer = both.ask("allocate", |g, s| g.tfwasm_device_memory().call_allocate(s, size, alignment));
                live.extend(answer.ok());
            }
            6..=9 => {
                let offset = match rng.below(5) {
                    0 => rng.below(region),
                    _ => rng.pick(&live).unwrap_or(0),
                };
                if both.ask("free", |g, s| g.tfwasm_device_memory().call_free(s, offset)).is_ok() {
                    live.retain(|&o| o != offset);
                }
            }
            10 => {
                both.ask("usage", |g, s| g.tfwasm_device_memory().call_usage(s));
            }
            11 => {
                let ranges: Vec<(u64, u64)> =
                    (0..1 + rng.below(3)).map(|_| (rng.below(region / 256) * 256, 1 + rng.below(3000))).collect();
                if both.ask("adopt", |g, s| g.tfwasm_device_memory().call_adopt(s, &ranges)).is_ok() {
                    live.extend(ranges.iter().map(|&(offset, _)| offset));
                }
            }
            12 => match rng.below(8) {
                0 => {
                    let id = both.ask("create-stream", |g, s| g.tfwasm_device_streams().call_create_stream(s));
                    streams.push((id.unwrap(), 0, 0));
                }
                1 if streams.len() > 2 => {
                    // The host drains a stream before destroying it.
                    let (id, ticketed, completed) = streams.remove(rng.below(streams.len() as u64) as usize);
                    for seq in completed + 1..=ticketed {
                        both.ask("complete", |g, s| g.tfwasm_device_streams().call_complete(s, id, seq, seq, true));
                    }
                    both.ask("destroy-stream", |g, s| g.tfwasm_device_streams().call_destroy_stream(s, id)).unwrap();
                }
                2 => events
                    .push(both.ask("create-event", |g, s| g.tfwasm_device_streams().call_create_event(s)).unwrap()),
                3 if events.len() > 3 => {
                    let e = events.remove(rng.below(events.len() as u64) as usize);
                    both.ask("destroy-event", |g, s| g.tfwasm_device_streams().call_destroy_event(s, e)).unwrap();
                }
                4 => timers
                    .push(both.ask("create-timer", |g, s| g.tfwasm_device_streams().call_create_timer(s)).unwrap()),
                5 => {
                    let e = bogus(&mut rng);
                    both.ask("event-status", |g, s| g.tfwasm_device_streams().call_event_status(s, e));
                }
                6 => {
                    let (a, b) = (bogus(&mut rng), bogus(&mut rng));
                    let _ = both.ask("add-dependency", |g, s| g.tfwasm_device_streams().call_add_dependency(s, a, b));
                }
                _ => {
                    let t = bogus(&mut rng);
                    both.ask("timer-elapsed", |g, s| g.tfwasm_device_streams().call_timer_elapsed(s, t));
                }
            },
            13 | 14 => {
                let kind =
                    [WorkKind::CopyHostToDevice, WorkKind::Memset, WorkKind::HostCallback][rng.below(3) as usize];
                let ticket = both.ask("submit", |g, s| g.tfwasm_device_streams().call_submit(s, stream, kind));
                if let (Ok(ticket), Some(entry)) = (ticket, streams.iter_mut().find(|(id, ..)| *id == stream)) {
                    entry.1 = ticket.seq;
                }
            }
            15 => {
                // Completions in seq order, now and then a failed one.
                let behind: Vec<usize> = (0..streams.len()).filter(|&i| streams[i].2 < streams[i].1).collect();
                if let Some(i) = rng.pick(&behind) {
                    let entry = &mut streams[i];
                    entry.2 += 1;
                    let (id, seq, ok) = (entry.0, entry.2, rng.below(20) != 0);
                    both.ask("complete", |g, s| g.tfwasm_device_streams().call_complete(s, id, seq, 1000 * seq, ok));
                }
                // What the completions change: event states, timer readings.
                if let Some(e) = rng.pick(&events) {
                    both.ask("event-status", |g, s| g.tfwasm_device_streams().call_event_status(s, e));
                }
                if let Some(t) = rng.pick(&timers) {
                    both.ask("timer-elapsed", |g, s| g.tfwasm_device_streams().call_timer_elapsed(s, t));
                }
            }
            16 => {
                let other = rng.pick(&streams).map(|(id, ..)| id).unwrap_or(1);
                let _ =
                    both.ask("add-dependency", |g, s| g.tfwasm_device_streams().call_add_dependency(s, stream, other));
            }
            17 => {
                let answer =
                    both.ask("record-event", |g, s| g.tfwasm_device_streams().call_record_event(s, stream, event));
                if let (Ok(ticket), Some(entry)) = (answer, streams.iter_mut().find(|(id, ..)| *id == stream)) {
                    entry.1 = ticket.seq;
                }
                both.ask("event-status", |g, s| g.tfwasm_device_streams().call_event_status(s, event));
            }
            18 => {
                let _ = both.ask("wait-event", |g, s| g.tfwasm_device_streams().call_wait_event(s, stream, event));
                let _ = both.ask("stream-status", |g, s| g.tfwasm_device_streams().call_stream_status(s, stream));
            }
            _ => {
                let Some(t) = rng.pick(&timers) else { continue };
                let start = rng.below(2) == 0;
                let answer =
                    both.ask("mark-timer", |g, s| g.tfwasm_device_streams().call_mark_timer(s, stream, t, start));
                if let (Ok(ticket), Some(entry)) = (answer, streams.iter_mut().find(|(id, ..)| *id == stream)) {
                    entry.1 = ticket.seq;
                }
                both.ask("timer-elapsed", |g, s| g.tfwasm_device_streams().call_timer_elapsed(s, t));
            }
        }
    }
    // Both ran out of memory, refused, ticketed and completed alike; and
    // freeing what is left gives both the whole region back.
    for offset in live {
        both.ask("free", |g, s| g.tfwasm_device_memory().call_free(s, offset)).unwrap();
    }
    let usage = both.ask("usage", |g, s| g.tfwasm_device_memory().call_usage(s));
    assert_eq!((usage.bytes_in_use, usage.largest_free_block), (0, 16_000_000));
    assert!(usage.num_allocs > 500, "{usage:?}");
    // The calls reached each outcome worth comparing.
    let expected = [
        "allocate → Ok(",
        "allocate → Err(DeviceError::OutOfMemory(",
        "allocate → Err(DeviceError::InvalidArgument(",
        "free → Err(DeviceError::UnknownHandle(",
        "adopt → Ok(",
        "adopt → Err(DeviceError::InvalidArgument(",
        "add-dependency → Err(DeviceError::UnknownHandle(",
        "submit → Ok(Ticket { seq: , after: [Dependency",
        "record-event → Ok(Ticket { seq: , after: [Dependency",
        "event-status → EventState::Pending",
        "event-status → EventState::Complete",
        "event-status → EventState::Error",
        "stream-status → Err(",
        "timer-elapsed → Some(",
    ];
    let missing: Vec<&str> = expected.iter().copied().filter(|e| !both.seen.iter().any(|s| s.starts_with(e))).collect();
    assert!(missing.is_empty(), "never answered: {missing:?}\nseen: {:#?}", both.seen);
}
