//! Benchmark (not a test): the cost of the host→guest boundary on the
//! allocation path, measured through the core layer with the reference guest.
//!
//! Prints nanoseconds per call for:
//! - `streams.event-status` of an unrecorded event: the floor, one call with
//!   a flat result;
//! - `memory.usage`: one call whose record result is read from guest memory;
//! - allocate + deallocate: two guest calls plus the host's placement check;
//! - the same pair against a native `Vec` allocation, as the reference ratio.
//!
//! Run: `cargo bench -p tfwasm --bench slice` (after building the guests).

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use tfwasm::device::Device;
use tfwasm::policy::Policy;
use tfwasm::sandbox::GuestProgram;

const ROUNDS: usize = 7;
const ITERS: usize = 20_000;

/// Median over rounds of ns per iteration.
fn measure(mut f: impl FnMut()) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..ITERS {
                f();
            }
            start.elapsed().as_nanos() as f64 / ITERS as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guest = root.join("target/wasm32-wasip2/guest/tfwasm_reference_device.wasm");
    assert!(guest.exists(), "build the guests first: {}", guest.display());
    let mut policy = Policy::for_guest("reference-device", guest);
    policy.device.memory_bytes = 1 << 30;
    let program = GuestProgram::load(&policy).expect("guest loads");
    let device = Device::new(&program, "WASM", 0).expect("device starts");

    // The boundary alone: a raw instance, no device lock or validation.
    let mut raw = program.instantiate().expect("instance");
    let config = tfwasm::sandbox::DeviceConfig { ordinal: 9, memory_size: 1 << 30, options: vec![] };
    raw.with_bindings("identity.init", |g, s| g.tfwasm_device_identity().call_init(s, &config)).unwrap().unwrap();
    let raw_ns = measure(|| {
        black_box(raw.with_bindings("memory.usage", |g, s| g.tfwasm_device_memory().call_usage(s)).unwrap());
    });

    // Warm up: page in code and guest memory.
    for _ in 0..10_000 {
        let p = device.allocate(256).unwrap();
        device.deallocate(p).unwrap();
    }
    let usage_ns = measure(|| {
        black_box(device.usage().unwrap());
    });
    // A never-recorded event: the guest looks it up and answers with a flat
    // enum, the closest this contract has to a bare call.
    let event = device.create_event().unwrap();
    let status_ns = measure(|| {
        black_box(device.event_status(black_box(event)).unwrap());
    });
    let pair_ns = measure(|| {
        let p = device.allocate(black_box(4096)).unwrap();
        device.deallocate(p).unwrap();
    });
    // With 64 tensors live the guest's free lists are no longer trivial.
    let held: Vec<_> = (0..64).map(|i| device.allocate(1024 + i * 64).unwrap()).collect();
    let busy_ns = measure(|| {
        let p = device.allocate(black_box(4096)).unwrap();
        device.deallocate(p).unwrap();
    });
    for p in held {
        device.deallocate(p).unwrap();
    }
    let native_ns = measure(|| {
        black_box(Vec::<u8>::with_capacity(black_box(4096)));
    });

    println!("host→guest boundary, allocation path (reference guest, median of {ROUNDS} rounds × {ITERS})");
    println!("  raw instance, memory.usage               {raw_ns:8.0} ns   goal ≤ 200 ns (boundary only)");
    println!("  streams.event-status (flat result)       {status_ns:8.0} ns   through the device layer");
    println!("  memory.usage (record through memory)     {usage_ns:8.0} ns");
    println!("  allocate + deallocate (2 guest calls)    {pair_ns:8.0} ns   = {:.0} ns per call", pair_ns / 2.0);
    println!("  … with 64 live allocations               {busy_ns:8.0} ns");
    println!("  native Vec alloc + free (reference)      {native_ns:8.1} ns");
    println!("  ratio allocate+deallocate ÷ native       {:8.1}×", pair_ns / native_ns.max(0.1));
}
