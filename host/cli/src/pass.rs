//! `tfwasm pass run` and `tfwasm pass check`: a pass guest on graphs,
//! without TensorFlow, through the same pipeline and the same checks of
//! every answer as inside the plugin ([`tfwasm_runtime::passes`]).
//! TensorFlow's op registry comes from the snapshot kept in `proto/ops/`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;
use tfwasm_runtime::passes::catalog::Catalog;
use tfwasm_runtime::passes::{PassProgram, Pipeline, RunContext};
use tfwasm_runtime::policy::PassSection;

/// Graphs captured from TensorFlow 2.21 as it hands them to the optimizer
/// (`tests/fixtures/graphs`): what `pass check` runs a pass on.
pub const GOLDEN: &[(&str, &[u8])] = &[
    ("keras_mlp_step", include_bytes!("../../../tests/fixtures/graphs/keras_mlp_step.pb")),
    ("keras_mlp_step_call", include_bytes!("../../../tests/fixtures/graphs/keras_mlp_step_call.pb")),
    ("keras_cnn_step", include_bytes!("../../../tests/fixtures/graphs/keras_cnn_step.pb")),
    ("keras_cnn_step_call", include_bytes!("../../../tests/fixtures/graphs/keras_cnn_step_call.pb")),
    ("embedding_lstm", include_bytes!("../../../tests/fixtures/graphs/embedding_lstm.pb")),
    ("embedding_lstm_call", include_bytes!("../../../tests/fixtures/graphs/embedding_lstm_call.pb")),
    ("while_cond", include_bytes!("../../../tests/fixtures/graphs/while_cond.pb")),
    ("jit_function", include_bytes!("../../../tests/fixtures/graphs/jit_function.pb")),
    ("jit_function_call", include_bytes!("../../../tests/fixtures/graphs/jit_function_call.pb")),
];

/// What one run of a pass on one graph did.
#[derive(Debug, Serialize)]
pub struct Run {
    pub graph: String,
    pub nodes_before: usize,
    pub nodes_after: usize,
    /// `false` when the pass failed or its answer was refused.
    pub accepted: bool,
    pub changed: bool,
    pub rewrites: Vec<(String, String)>,
    pub failure: Option<String>,
    pub milliseconds: f64,
}

fn run_once(
    pipeline: &Pipeline,
    name: &str,
    graph: &[u8],
    preserve: &[String],
    catalog: &Catalog,
) -> Result<(Run, Option<Vec<u8>>)> {
    let before = GraphDef::decode(graph).with_context(|| format!("{name} is not a serialized GraphDef"))?;
    let context =
        RunContext { device_type: "WASM", preserve, fetch: &[], kernels: catalog.kernels(), catalog, device_count: 1 };
    let started = Instant::now();
    let outcome = pipeline.run(graph, &context).map_err(|e| anyhow!("{e}"))?;
    let milliseconds = started.elapsed().as_secs_f64() * 1e3;
    let nodes_after = match &outcome.graph {
        Some(bytes) => GraphDef::decode(bytes.as_slice()).map(|g| g.node.len()).unwrap_or(0),
        None => before.node.len(),
    };
    let failure = outcome.failures.first().map(|(_, reason)| reason.clone());
    let run = Run {
        graph: name.to_owned(),
        nodes_before: before.node.len(),
        nodes_after,
        accepted: failure.is_none(),
        changed: outcome.graph.is_some(),
        rewrites: outcome.rewrites.iter().map(|r| (r.node.clone(), r.reason.clone())).collect(),
        failure,
        milliseconds,
    };
    Ok((run, outcome.graph))
}

/// `tfwasm pass run`: the pass on one graph; writes its answer to `output`.
pub fn run(section: &PassSection, graph: &Path, preserve: &[String], output: Option<&Path>) -> Result<Run> {
    let bytes = crate::graph::read_graph(graph)?;
    let pipeline = load(section)?;
    let catalog = Catalog::snapshot();
    let (run, answer) = run_once(&pipeline, &graph.display().to_string(), &bytes, preserve, &catalog)?;
    if let (Some(output), Some(answer)) = (output, answer.as_ref()) {
        crate::graph::write_graph(output, answer)?;
    }
    Ok(run)
}

fn load(section: &PassSection) -> Result<Pipeline> {
    // The load error, which `Pipeline::load` only logs, is the answer here.
    let program = PassProgram::load(section, None).map_err(|e| anyhow!("{e}"))?;
    Ok(Pipeline::from_programs([program]))
}

/// One check of `pass check`.
#[derive(Debug, Serialize)]
pub struct Check {
    pub check: String,
    pub passed: bool,
    pub detail: String,
}

/// `tfwasm pass check`: the pass loads and describes itself; on every golden
/// graph, with nothing and with everything preserved, its answer passes the
/// host's checks; and a second run on its own answer changes nothing more.
pub fn check(section: &PassSection) -> Vec<Check> {
    let mut checks = Vec::new();
    let program = match PassProgram::load(section, None) {
        Ok(program) => program,
        Err(error) => {
            checks.push(Check { check: "load".into(), passed: false, detail: error.to_string() });
            return checks;
        }
    };
    let described = program.described();
    checks.push(Check {
        check: "load".into(),
        passed: true,
        detail: format!(
            "{} {}: {} (emits {})",
            described.name,
            described.version,
            described.summary,
            described.emits.join(", ")
        ),
    });
    let catalog = Catalog::snapshot();
    let pipeline = Pipeline::from_programs([program.clone()]);
    for (name, graph) in GOLDEN {
        let all: Vec<String> =
            GraphDef::decode(*graph).map(|g| g.node.into_iter().map(|n| n.name).collect()).unwrap_or_default();
        for (preserved, preserve) in [("nothing preserved", &[][..]), ("all preserved", &all[..])] {
            let check = format!("{name}, {preserved}");
            // Each check stands alone: a pass the pipeline disabled after
            // failures in a row would otherwise "leave" every later graph
            // unchanged and pass those checks.
            let _ = pipeline.set_enabled(&section.name, true);
            let outcome = run_once(&pipeline, name, graph, preserve, &catalog).and_then(|(first, answer)| {
                if !first.accepted {
                    return Ok(Check {
                        check: check.clone(),
                        passed: false,
                        detail: first.failure.unwrap_or_default(),
                    });
                }
                let Some(answer) = answer else {
                    return Ok(Check {
                        check: check.clone(),
                        passed: true,
                        detail: format!("unchanged, {:.1} ms", first.milliseconds),
                    });
                };
                // TensorFlow's meta optimizer runs the plugin's pass twice.
                let (second, again) = run_once(&pipeline, name, &answer, preserve, &catalog)?;
                let stable = second.accepted && again.as_ref().is_none_or(|g| g == &answer);
                Ok(Check {
                    check: check.clone(),
                    passed: stable,
                    detail: if stable {
                        format!(
                            "{} → {} nodes, {} rewrites, {:.1} ms; a second run changes nothing",
                            first.nodes_before,
                            first.nodes_after,
                            first.rewrites.len(),
                            first.milliseconds
                        )
                    } else {
                        format!(
                            "a second run on its own answer {}",
                            second.failure.unwrap_or_else(|| "changed it again".into())
                        )
                    },
                })
            });
            checks.push(outcome.unwrap_or_else(|e| Check { check, passed: false, detail: format!("{e:#}") }));
        }
    }
    checks
}

pub fn print_checks(path: &PathBuf, checks: &[Check]) {
    println!("pass conformance: {}", path.display());
    let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    for c in checks {
        println!("  {:width$}  {}  {}", c.check, if c.passed { "pass" } else { "FAIL" }, c.detail);
    }
    let passed = checks.iter().filter(|c| c.passed).count();
    println!("{passed} of {} checks passed", checks.len());
}
