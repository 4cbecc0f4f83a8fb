//! Fuzz tests of the device layer's checks on guest answers.
//!
//! - [`arena`]: the placement validator ([`DeviceArena::commit`]) driven
//!   directly with random placements, honest and lying, against a model of
//!   what is live.
//! - [`device`]: real [`Device`]s running `guest/fuzz-device`, a guest
//!   that lies at random (placements, tickets, event states, usage) and
//!   says when; every lie must cost the instance, no honest answer may, and
//!   what the host accepted must stay consistent.
//!
//! - [`pass_answers`]: the checks of what an optimizer pass answers, on
//!   arbitrary bytes and on graphs captured from TensorFlow, edited as a
//!   hostile pass would.
//!
//! Case counts are sized for CI (all fuzz tests of the workspace in well
//! under a minute on two cores); `PROPTEST_CASES=N` runs N cases per test
//! instead (docs/architecture.md, "Fuzzing").
//!
//! [`DeviceArena::commit`]: tfwasm_runtime::device::DeviceArena::commit
//! [`Device`]: tfwasm_runtime::device::Device

mod arena;
mod device;
mod pass_answers;

use std::io::Write;
use std::time::Instant;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Runs `cases` cases (or `PROPTEST_CASES`) of `strategy` through `test`,
/// and says on the terminal how many ran, how long they took and what
/// `summary` reports (outside the harness's capture, so a plain
/// `cargo test` shows it).
pub fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
    summary: impl FnOnce() -> String,
) where
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(cases);
    let config = Config { cases, failure_persistence: None, max_shrink_time: 120_000, ..Config::default() };
    let started = Instant::now();
    let outcome = TestRunner::new(config).run(&strategy, test);
    let _ = writeln!(
        std::io::stderr(),
        "fuzz {name}: {cases} cases in {:.1} s ({})",
        started.elapsed().as_secs_f64(),
        summary()
    );
    if let Err(failure) = outcome {
        panic!("fuzz {name}: {failure}");
    }
}
