//! Hostile passes: the pipeline with guest/hostile-pass in each of its
//! modes, on a Keras train step captured from TensorFlow. Whatever the pass
//! does, the run succeeds, TensorFlow keeps the graph it gave the pass, the
//! failure names the cause, the pass list counts it, the next pass gets the
//! graph the failed one was given, a faulted instance is replaced by a fresh
//! one, and a pass that keeps failing is disabled until it is enabled again.
//! Legal passes (honest, slow) are never blamed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tfwasm::passes::catalog::Catalog;
use tfwasm::passes::pipeline::MAX_CONSECUTIVE_FAILURES;
use tfwasm::passes::{PassStatus, Pipeline, RunContext, RunOutcome};
use tfwasm::policy::{PassSection, Policy};
use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;

use crate::support::{logged, pass_guest, workspace};

/// The deadline and memory cap the hostile pass runs under, as in
/// policies/hostile-pass.toml.
const DEADLINE_MS: u64 = 200;
const MEMORY_BYTES: u64 = 16 << 20;

fn hostile_pass() -> PathBuf {
    pass_guest("tfwasm-hostile-pass")
}

fn fuse_pass() -> PathBuf {
    pass_guest("tfwasm-fuse-pass")
}

/// A `[[pass]]` entry for the hostile pass with `options` as its `[pass.config]`.
fn hostile(options: &[(&str, &str)]) -> PassSection {
    let mut text = format!(
        "name = \"hostile\"\npath = {:?}\n[limits]\nmemory-bytes = {MEMORY_BYTES}\ncall-deadline-ms = {DEADLINE_MS}\n\
         [config]\n",
        hostile_pass().to_str().unwrap()
    );
    for (key, value) in options {
        text.push_str(&format!("{key} = {value:?}\n"));
    }
    toml::from_str(&text).unwrap()
}

fn fuse() -> PassSection {
    toml::from_str(&format!("name = \"fuse\"\npath = {:?}\n", fuse_pass().to_str().unwrap())).unwrap()
}

fn load(sections: &[PassSection]) -> Pipeline {
    let pipeline = Pipeline::load(sections, None);
    assert_eq!(pipeline.status().len(), sections.len(), "every pass loads");
    pipeline
}

/// The train step of a Keras MLP fitted with Adam (TensorFlow's graph as the
/// plugin's optimizer got it).
fn keras_step() -> Vec<u8> {
    std::fs::read(workspace().join("tests/fixtures/graphs/keras_mlp_step.pb")).unwrap()
}

/// What TensorFlow asks to keep in a function body: its arguments and
/// results, and the nodes with side effects (variable updates, the step's
/// `NoOp`).
fn preserve_of(graph: &[u8]) -> Vec<String> {
    let kept = ["_Retval", "_Arg", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "NoOp"];
    let graph = GraphDef::decode(graph).unwrap();
    let mut names: Vec<(usize, String)> = graph
        .node
        .into_iter()
        .filter_map(|n| kept.iter().position(|op| *op == n.op).map(|rank| (rank, n.name)))
        .collect();
    names.sort();
    names.into_iter().map(|(_, name)| name).collect()
}

/// Runs `pipeline` on the Keras step with its realistic preserve list.
fn run(pipeline: &Pipeline) -> RunOutcome {
    run_on(pipeline, &keras_step())
}

/// Runs `pipeline` on `graph` (a golden graph's bytes) with its realistic preserve list.
fn run_on(pipeline: &Pipeline, graph: &[u8]) -> RunOutcome {
    let catalog = Catalog::snapshot();
    let graph = graph.to_vec();
    let preserve = preserve_of(&graph);
    let context = RunContext {
        device_type: "WASM",
        preserve: &preserve,
        fetch: &preserve[..2],
        kernels: catalog.kernels(),
        catalog: &catalog,
        device_count: 1,
    };
    pipeline.run(&graph, &context).expect("a failing pass never fails the run")
}

fn status(pipeline: &Pipeline, slot: &str) -> PassStatus {
    pipeline.status().into_iter().find(|s| s.slot == slot).unwrap()
}

/// One call of the hostile pass in `mode` fails for a reason containing
/// every one of `why`: TensorFlow keeps its graph, and the pass list says so.
fn fails(mode: &str, why: &[&str]) -> String {
    fails_on(&keras_step(), mode, why)
}

/// [`fails`] on `graph`.
fn fails_on(graph: &[u8], mode: &str, why: &[&str]) -> String {
    let pipeline = load(&[hostile(&[("mode", mode)])]);
    let outcome = run_on(&pipeline, graph);
    assert!(outcome.graph.is_none(), "{mode}: TensorFlow must keep its own graph");
    assert!(outcome.rewrites.is_empty(), "{mode}: {:?}", outcome.rewrites);
    let [(slot, reason)] = &outcome.failures[..] else {
        panic!("{mode}: one failure expected, got {:?}", outcome.failures)
    };
    assert_eq!(slot, "hostile");
    for part in why {
        assert!(reason.contains(part), "{mode}: the reason does not say {part:?}: {reason}");
    }
    let status = status(&pipeline, "hostile");
    assert_eq!((status.calls, status.rewrites, status.failures), (1, 0, 1), "{mode}: {status:?}");
    assert_eq!(status.last_error.as_deref(), Some(reason.as_str()), "{mode}");
    assert!(status.enabled && status.disabled.is_none(), "{mode}: one failure does not disable: {status:?}");
    reason.clone()
}

#[test]
fn garbage_is_refused_as_not_a_graph() {
    fails("garbage", &["its answer was refused", "is not a GraphDef"]);
}

#[test]
fn a_dropped_preserved_node_is_refused() {
    fails("drop-preserved", &["its answer was refused", "which TensorFlow asked to keep, is gone"]);
}

#[test]
fn a_dangling_input_is_refused() {
    fails("dangling-input", &["`^hostile/nowhere`", "names no node"]);
}

#[test]
fn an_unknown_op_is_refused_even_when_declared() {
    fails("unknown-op", &["`_HostileEverythingFused`", "TensorFlow does not know"]);
}

#[test]
fn a_cycle_outside_loops_is_refused() {
    fails("cycle", &["the answer has a cycle outside any loop"]);
}

#[test]
fn a_node_the_device_has_no_kernel_for_is_refused() {
    fails("no-kernel", &["`hostile/gram` (MatMul)", "WASM device, which has no kernel for it"]);
}

#[test]
fn a_pass_that_outgrows_its_memory_cap_traps() {
    fails("huge", &["pass 'hostile'", "`optimize` trapped", "past its cap of 16777216 bytes"]);
}

#[test]
fn a_pass_that_never_returns_is_stopped_at_the_deadline() {
    let started = Instant::now();
    fails("loop", &["`optimize` exceeded its 200 ms deadline"]);
    assert!(started.elapsed() < Duration::from_secs(5), "stopped near the deadline: {:?}", started.elapsed());
}

#[test]
fn a_panicking_pass_traps() {
    fails("trap", &["`optimize` trapped", "panicked"]);
}

#[test]
fn an_error_is_a_failure_with_the_pass_own_words() {
    fails("error", &["it returned an error: asked to fail"]);
}

#[test]
fn a_typo_in_the_mode_is_an_error_not_an_honest_pass() {
    fails("trapp", &["it returned an error: unknown mode \"trapp\""]);
}

#[test]
fn honest_and_slow_passes_are_not_blamed() {
    let pipeline = load(&[hostile(&[("mode", "honest")]), {
        let mut slow = hostile(&[("mode", "slow"), ("delay-ms", "50")]);
        slow.name = "slow".into();
        slow
    }]);
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = run(&pipeline);
        assert!(started.elapsed() >= Duration::from_millis(50), "slow took {:?}", started.elapsed());
        assert!(outcome.failures.is_empty() && outcome.graph.is_none(), "{:?}", outcome.failures);
    }
    for status in pipeline.status() {
        assert_eq!((status.calls, status.failures), (3, 0), "{status:?}");
        assert!(status.last_error.is_none() && status.disabled.is_none(), "{status:?}");
    }
    // Slower than the deadline is a loop to the host.
    let mut slower = hostile(&[("mode", "slow"), ("delay-ms", "400")]);
    slower.limits.call_deadline_ms = 40;
    let outcome = run(&load(&[slower]));
    assert!(outcome.failures[0].1.contains("exceeded its 40 ms deadline"), "{:?}", outcome.failures);
}

/// The graph the reference pass makes of the Keras step on its own.
fn fused_alone() -> Vec<u8> {
    let outcome = run(&load(&[fuse()]));
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    outcome.graph.expect("the reference pass fuses Adam's updates")
}

#[test]
fn the_next_pass_gets_the_graph_the_failed_one_was_given() {
    let alone = fused_alone();
    for mode in ["unknown-op", "drop-preserved", "garbage", "error"] {
        let pipeline = load(&[hostile(&[("mode", mode)]), fuse()]);
        let outcome = run(&pipeline);
        assert_eq!(outcome.failures.len(), 1, "{mode}: {:?}", outcome.failures);
        assert_eq!(outcome.failures[0].0, "hostile");
        assert!(outcome.rewrites.iter().all(|r| r.pass == "fuse-elementwise"), "{mode}");
        // Had the fuse pass seen the spoiled graph, its answer would differ
        // (or be refused): it is node for node what it makes of TensorFlow's.
        assert_eq!(outcome.graph.as_deref(), Some(alone.as_slice()), "{mode}: the fuse pass saw another graph");
        let fuse = status(&pipeline, "fuse");
        assert_eq!((fuse.calls, fuse.rewrites, fuse.failures), (1, 1, 0), "{fuse:?}");
    }
}

#[test]
fn a_faulted_instance_is_replaced_by_a_fresh_one_that_works() {
    let alone = fused_alone();
    // `after = 1`: each instance answers its first call honestly, then
    // faults. Honest, fault, honest, fault: every fault was followed by a
    // new instance, and the pass after it rewrote every time.
    for (mode, why) in [("trap", "trapped"), ("huge", "past its cap"), ("loop", "deadline")] {
        let pipeline = load(&[hostile(&[("mode", mode), ("after", "1")]), fuse()]);
        for call in 1..=4 {
            let outcome = run(&pipeline);
            let faulted = call % 2 == 0;
            assert_eq!(outcome.failures.len(), usize::from(faulted), "{mode}, call {call}: {:?}", outcome.failures);
            if faulted {
                assert!(outcome.failures[0].1.contains(why), "{mode}: {:?}", outcome.failures);
            }
            assert_eq!(outcome.graph.as_deref(), Some(alone.as_slice()), "{mode}, call {call}");
        }
        let hostile = status(&pipeline, "hostile");
        assert_eq!((hostile.calls, hostile.failures), (4, 2), "{mode}: {hostile:?}");
        assert!(hostile.disabled.is_none(), "{mode}: failures between successes are not in a row");
        assert_eq!(status(&pipeline, "fuse").rewrites, 4);
    }
}

#[test]
fn a_pass_that_keeps_failing_is_disabled_until_enabled() {
    let pipeline = load(&[hostile(&[("mode", "cycle")]), fuse()]);
    for call in 1..=MAX_CONSECUTIVE_FAILURES {
        let outcome = run(&pipeline);
        assert_eq!(outcome.failures.len(), 1, "call {call}");
        let status = status(&pipeline, "hostile");
        assert_eq!(status.disabled.is_some(), call == MAX_CONSECUTIVE_FAILURES, "call {call}: {status:?}");
    }
    let disabled = status(&pipeline, "hostile");
    let why = disabled.disabled.as_deref().unwrap();
    assert!(why.starts_with("8 failures in a row, the last: ") && why.contains("cycle"), "{why}");
    assert!(disabled.enabled, "disabled by the host, not by the operator");

    // Disabled: not called, and the pipeline goes on without it.
    let outcome = run(&pipeline);
    assert!(outcome.failures.is_empty() && outcome.graph.is_some(), "{:?}", outcome.failures);
    assert_eq!(status(&pipeline, "hostile").calls, MAX_CONSECUTIVE_FAILURES);

    // Enabled again: called again, and a new count of failures in a row starts.
    pipeline.set_enabled("hostile", true).unwrap();
    let revived = status(&pipeline, "hostile");
    assert!(revived.disabled.is_none() && revived.enabled, "{revived:?}");
    assert_eq!(run(&pipeline).failures.len(), 1);
    let status = status(&pipeline, "hostile");
    assert_eq!((status.calls, status.failures), (MAX_CONSECUTIVE_FAILURES + 1, MAX_CONSECUTIVE_FAILURES + 1));
    assert!(status.disabled.is_none(), "one failure after a revival does not disable: {status:?}");
}

#[test]
fn the_log_names_the_pass_its_digest_and_the_reason() {
    let pipeline = load(&[hostile(&[("mode", "dangling-input")])]);
    let digest = status(&pipeline, "hostile").sha256;
    let log = logged(|| {
        for _ in 0..MAX_CONSECUTIVE_FAILURES {
            run(&pipeline);
        }
    });
    let failed: Vec<&str> =
        log.lines().filter(|l| l.contains("failed, TensorFlow goes on without its rewrite")).collect();
    assert_eq!(failed.len() as u64, MAX_CONSECUTIVE_FAILURES, "{log}");
    let prefix = format!("tfwasm: pass 'hostile' (tfwasm_hostile_pass.wasm) (sha256 {})", &digest[..12]);
    assert!(failed[0].contains(&prefix), "{}", failed[0]);
    assert!(failed[0].contains("names no node") && failed[0].ends_with("(failure 1)"), "{}", failed[0]);
    let disabled = log.lines().find(|l| l.contains("is disabled after")).unwrap_or_else(|| panic!("{log}"));
    assert!(disabled.contains("tfwasm.passes.enable(\"hostile\")"), "{disabled}");
}

#[test]
fn the_repo_policy_runs_the_hostile_pass() {
    hostile_pass();
    let policy = Policy::load(&workspace().join("policies/hostile-pass.toml")).unwrap();
    let [section] = &policy.passes[..] else { panic!("one [[pass]]: {:?}", policy.passes) };
    assert_eq!(section.name, "hostile");
    assert_eq!((section.limits.memory_bytes, section.limits.call_deadline_ms), (MEMORY_BYTES, DEADLINE_MS));
    let pipeline = load(&policy.passes);
    let outcome = run(&pipeline);
    assert!(outcome.graph.is_none(), "TensorFlow keeps its graph");
    assert!(outcome.failures[0].1.contains("does not know"), "{:?}", outcome.failures);
}

fn golden(name: &str) -> Vec<u8> {
    std::fs::read(workspace().join(format!("tests/fixtures/graphs/{name}.pb"))).unwrap()
}

#[test]
fn a_device_that_does_not_exist_is_refused() {
    // TensorFlow 2.21 segfaults partitioning a function with such a node.
    fails(
        "missing-device",
        &["is placed on `/job:localhost/replica:0/task:0/device:WASM:9`", "no device of this process"],
    );
    fails("missing-cpu", &["`/job:localhost/replica:0/task:0/device:CPU:3`", "no device of this process"]);
    fails("other-job", &["`/job:worker/replica:0/task:0/device:CPU:0`", "no device of this process"]);
}

#[test]
fn what_tensorflows_importer_refuses_is_refused_first() {
    fails("missing-input", &["data input(s), and its op takes"]);
    fails("wrong-dtype", &["is float from", "expects double there"]);
    fails("all-to-cpu", &["uses resource", "a resource is used on its own device"]);
    fails("versions", &["changes the graph's versions"]);
    // A Cast casting to what its readers do not take.
    fails("cast-dst", &["expects", "there"]);
}

#[test]
fn xla_turned_back_on_is_refused() {
    // The call as the passes get it: the host's legalization turned XLA off.
    let mut graph = GraphDef::decode(golden("jit_function_call").as_slice()).unwrap();
    let mut cleared = 0;
    for node in &mut graph.node {
        if let Some(flag) = node.attr.get_mut("_XlaMustCompile") {
            flag.value = Some(tfwasm_proto::graph::attr_value::Value::B(false));
            cleared += 1;
        }
    }
    assert!(cleared > 0, "the captured call asks for XLA");
    fails_on(&graph.encode_to_vec(), "xla-on", &["XLA turned back on"]);
}

#[test]
fn a_graph_grown_past_max_growth_is_refused() {
    fails("grow", &["the given graph 28917", "more than the pass's max-growth allows"]);
}

#[test]
fn a_log_flood_costs_the_log_budget() {
    // A name of its own: a guest's log second is shared by its instances,
    // and the other tests run the hostile pass at the same time.
    let mut section = hostile(&[("mode", "log-flood")]);
    section.name = "log-flood".into();
    let pipeline = load(&[section]);
    let log = logged(|| {
        for _ in 0..3 {
            let outcome = run(&pipeline);
            assert!(outcome.failures[0].1.contains("exceeded its 200 ms deadline"), "{:?}", outcome.failures);
        }
        std::thread::sleep(Duration::from_millis(1100));
        run(&pipeline);
    });
    let flood = log.lines().filter(|line| line.contains("never stops talking")).count();
    // Each call may log 100 lines (limits.log-lines-per-call), and the
    // calls share 200 a second: four calls in ~2 s, at most 400 lines.
    assert!((100..=400).contains(&flood), "{flood} lines of the flood reached the log");
    let bytes: usize = log.lines().filter(|line| line.contains("never stops talking")).map(|l| l.len() + 1).sum();
    assert!(bytes < 4 * (64 << 10), "{bytes} bytes");
    let dropped: Vec<&str> = log.lines().filter(|line| line.contains("dropped past its log budget")).collect();
    assert!(!dropped.is_empty() && dropped.len() <= 3, "the drops are reported, at most once a second: {log}");
    assert!(dropped[0].contains("pass 'log-flood'"), "{}", dropped[0]);
}
