//! # The `tfwasm` command
//!
//! What a device vendor runs on a laptop, on any OS, without TensorFlow:
//!
//! - `tfwasm check GUEST.wasm [--policy P] [--json]`: the device
//!   conformance suite ([`conformance`]). Each clause of the WIT contract
//!   becomes a check that drives the guest through `tfwasm-runtime`'s device
//!   layer, the same code that validates every answer inside TensorFlow; a
//!   check fails when the host had to refuse an answer, replace the
//!   instance or stop a call at its deadline. Exit status 1 when any fails.
//!   A component that exports a pass or a profiler gets its own world's
//!   suite instead (`pass check`, `profiler check`).
//! - `tfwasm info GUEST.wasm`: the component's WIT packages, imports,
//!   exports, size and SHA-256 digest.
//! - `tfwasm policy check P.toml`: whether a policy loads as the plugin
//!   would load it (TOML errors say their line), and whether what it names
//!   exists.
//! - `tfwasm precompile GUEST.wasm… [--policy P]`: fills the compile cache
//!   the plugin reads ([`precompile`]).
//! - `tfwasm graph roundtrip IN.pb OUT.pb`: a GraphDef through tfwasm's
//!   schema, as a pass guest sees it ([`graph`]).
//! - `tfwasm pass run PASS.wasm GRAPH.pb` and `tfwasm pass check
//!   PASS.wasm`: a graph-optimizer pass through the plugin's pipeline and
//!   checks, on a graph or on golden graphs from TensorFlow ([`pass`]).
//! - `tfwasm pass verify PASS.wasm [GRAPH.pb…] [--report R.json]`: the
//!   golden graphs (or these) run in TensorFlow before and after the pass;
//!   delegated to `python -m tfwasm pass verify` ([`verify`]).
//! - `tfwasm graph golden DIR`: writes the golden graphs `pass check` and
//!   `pass verify` run.
//! - `tfwasm profiler check PROFILER.wasm [-o trace.xplane.pb]`: a profiler
//!   guest on recorded sessions, through the plugin's checks of its answer
//!   ([`profiler`]).

mod conformance;
mod graph;
mod info;
mod pass;
mod precompile;
mod profiler;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tfwasm_runtime::policy::{PassSection, Policy, ProfilerGuestSection};

#[derive(Parser)]
#[command(name = "tfwasm", version, about = "Check and describe tfwasm guests, without TensorFlow")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the conformance suite of the guest's world against it: the device
    /// suite, or for a component that exports a pass or a profiler, what
    /// `pass check` or `profiler check` runs.
    Check {
        /// The guest component (.wasm).
        guest: PathBuf,
        /// A policy whose limits and `[guest.config]` to use (its guest path
        /// is replaced by GUEST); default: the guest alone, default limits.
        /// Device guests only.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe a guest component: WIT packages, imports, exports, size, digest.
    Info {
        guest: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Compile guests into the compile cache the plugin reads, so the next
    /// `import tensorflow` loads them in about a millisecond.
    Precompile {
        /// Guest components (.wasm).
        guests: Vec<PathBuf>,
        /// Also the guest this policy names.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The cache directory (default: `$TFWASM_CACHE_DIR`, else the user's cache, as the plugin).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Policies.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Graph-optimizer passes (world `pass`, wit/optimizer).
    Pass {
        #[command(subcommand)]
        command: PassCommand,
    },
    /// Profiler guests (world `profiler`, wit/profiler).
    Profiler {
        #[command(subcommand)]
        command: ProfilerCommand,
    },
    /// Graphs, as pass guests see them.
    Graph {
        #[command(subcommand)]
        command: GraphCommand,
    },
}

#[derive(Subcommand)]
enum PassCommand {
    /// Run a pass on a serialized GraphDef and say what it changed and
    /// whether the host's checks accept its answer.
    Run {
        /// The pass component (`.wasm`).
        pass: PathBuf,
        /// A GraphDef: serialized (`.pb`), or in text format (`.pbtxt`).
        graph: PathBuf,
        /// Write the pass's answer here (when it changed the graph); text
        /// format when the name ends in `.pbtxt`.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Node names TensorFlow would ask to keep (comma-separated).
        #[arg(long, value_delimiter = ',')]
        preserve: Vec<String>,
        /// `KEY=VALUE` options, as `[pass.config]` in a policy.
        #[arg(long = "config", value_parser = parse_option)]
        options: Vec<(String, String)>,
        #[arg(long)]
        json: bool,
    },
    /// The pass conformance suite: it loads and describes itself, and on
    /// golden graphs captured from TensorFlow its answers pass the host's
    /// checks and are stable under a second run.
    Check {
        pass: PathBuf,
        #[arg(long = "config", value_parser = parse_option)]
        options: Vec<(String, String)>,
        #[arg(long)]
        json: bool,
    },
    /// Differential verification in TensorFlow's CPU runtime: each golden
    /// graph (or each GRAPH.pb given) runs one step before and after the
    /// pass with the same seeded feeds and variables; every fetch and every
    /// variable's new value must agree. Runs `python -m tfwasm pass verify`
    /// (TFWASM_PYTHON picks the Python, which needs TensorFlow); see
    /// `tfwasm pass verify -- --help` for its options.
    Verify {
        /// PASS.wasm [GRAPH.pb ...] [--report R.json] [--config K=V] ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Subcommand)]
enum ProfilerCommand {
    /// The profiler conformance suite: it loads, and on recorded sessions
    /// (a training step, two devices, a guest fault, an empty session, a
    /// full ring) its answers pass the host's checks.
    Check {
        /// The profiler guest component (`.wasm`).
        guest: PathBuf,
        /// `KEY=VALUE` options, as `[profiler.guest.config]` in a policy.
        #[arg(long = "config", value_parser = parse_option)]
        options: Vec<(String, String)>,
        /// Records in the full ring, as `profiler.max-events` in a policy.
        #[arg(long, default_value_t = tfwasm_runtime::profiler::DEFAULT_MAX_EVENTS)]
        max_events: usize,
        /// Write the training step's trace, as the guest shaped it, here
        /// (an `.xplane.pb`: put it under `LOGDIR/plugins/profile/RUN/` to
        /// open it in TensorBoard).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// `"pass"` or `"profiler"` when `guest` is a component that exports that
/// world and not the device's; `None` for a device guest or anything that
/// does not load (the device suite says why).
fn other_world(guest: &std::path::Path) -> Option<&'static str> {
    let described = info::describe(guest).ok()?;
    let exports = |package: &str| described.exports_packages.iter().any(|p| p.starts_with(package));
    if exports("tfwasm:device") {
        None
    } else if exports("tfwasm:optimizer") {
        Some("pass")
    } else if exports("tfwasm:profiler") {
        Some("profiler")
    } else {
        None
    }
}

/// The policy entry (a `[[pass]]`, a `[profiler.guest]`) for a guest file
/// named on the command line: named after the file, with `--config` options
/// as its `config` table and defaults for the rest.
fn policy_entry<T: serde::de::DeserializeOwned>(path: &std::path::Path, options: &[(String, String)]) -> Result<T> {
    let name = path.file_stem().map_or_else(|| "guest".to_owned(), |s| s.to_string_lossy().into_owned());
    let config: toml::Table = options.iter().map(|(k, v)| (k.clone(), toml::Value::String(v.clone()))).collect();
    let mut entry = toml::Table::new();
    entry.insert("name".into(), name.into());
    entry.insert("path".into(), path.to_string_lossy().into_owned().into());
    entry.insert("config".into(), config.into());
    entry.try_into().with_context(|| format!("a policy entry for {}", path.display()))
}

fn parse_option(text: &str) -> Result<(String, String), String> {
    text.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

#[derive(Subcommand)]
enum GraphCommand {
    /// Decode a serialized GraphDef with tfwasm's schema and encode it again
    /// (map entries in key order): what a pass guest sees and answers. A
    /// name ending in `.pbtxt` is text format: the command also converts.
    Roundtrip { input: PathBuf, output: PathBuf },
    /// Write the golden graphs (captured from TensorFlow; what `pass check`
    /// and `pass verify` run) into DIR as NAME.pb.
    Golden { dir: PathBuf },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Check a policy as the plugin would load it, and what it names.
    Check { policy: PathBuf },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tfwasm: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Check { guest, policy, json } => {
            if let Some(world) = other_world(&guest) {
                if policy.is_some() {
                    anyhow::bail!(
                        "{} is a {world} guest: --policy is for device guests; use `tfwasm {world} check --config KEY=VALUE`",
                        guest.display()
                    );
                }
                eprintln!("{} is a {world} guest: running `tfwasm {world} check`", guest.display());
                let command = match world {
                    "pass" => Command::Pass { command: PassCommand::Check { pass: guest, options: Vec::new(), json } },
                    _ => Command::Profiler {
                        command: ProfilerCommand::Check {
                            guest,
                            options: Vec::new(),
                            max_events: tfwasm_runtime::profiler::DEFAULT_MAX_EVENTS,
                            output: None,
                            json,
                        },
                    },
                };
                return run(Cli { command });
            }
            let mut policy = match policy {
                Some(path) => Policy::load(&path).with_context(|| format!("policy {}", path.display()))?,
                None => Policy::for_guest(&guest_name(&guest), &guest),
            };
            policy.guest.path = guest;
            let log = conformance::capture_logs();
            let results = conformance::run(&policy, &log);
            if json {
                println!("{}", serde_json::to_string_pretty(&results)?);
            } else {
                conformance::print_table(&policy, &results);
            }
            Ok(if results.iter().all(|r| r.passed) { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Policy { command: PolicyCommand::Check { policy } } => Ok(check_policy(&policy)),
        Command::Pass { command: PassCommand::Run { pass, graph, output, preserve, options, json } } => {
            let section = policy_entry::<PassSection>(&pass, &options)?;
            let run = pass::run(&section, &graph, &preserve, output.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&run)?);
            } else {
                let verdict = match (&run.failure, run.changed) {
                    (Some(reason), _) => format!("FAILED: {reason}"),
                    (None, true) => "changed; the host's checks accept it".to_owned(),
                    (None, false) => "unchanged".to_owned(),
                };
                println!(
                    "{}: {} → {} nodes in {:.1} ms, {verdict}",
                    run.graph, run.nodes_before, run.nodes_after, run.milliseconds
                );
                for (node, reason) in &run.rewrites {
                    println!("  {node}: {reason}");
                }
            }
            Ok(if run.accepted { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Pass { command: PassCommand::Check { pass, options, json } } => {
            let section = policy_entry::<PassSection>(&pass, &options)?;
            let checks = pass::check(&section);
            if json {
                println!("{}", serde_json::to_string_pretty(&checks)?);
            } else {
                pass::print_checks(&pass, &checks);
            }
            Ok(if checks.iter().all(|c| c.passed) { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Profiler { command: ProfilerCommand::Check { guest, options, max_events, output, json } } => {
            let section = policy_entry::<ProfilerGuestSection>(&guest, &options)?;
            let checks = profiler::check(&section, max_events, output.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&checks)?);
            } else {
                profiler::print(&guest, &checks);
            }
            Ok(if checks.iter().all(|c| c.passed) { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Pass { command: PassCommand::Verify { args } } => verify::run(&args),
        Command::Graph { command: GraphCommand::Golden { dir } } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, graph) in pass::GOLDEN {
                let path = dir.join(format!("{name}.pb"));
                std::fs::write(&path, graph).with_context(|| format!("writing {}", path.display()))?;
                println!("{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Graph { command: GraphCommand::Roundtrip { input, output } } => {
            let kept = graph::roundtrip(&input, &output)?;
            println!(
                "{}: {} nodes, {} functions, {} bytes in, {} bytes out",
                output.display(),
                kept.nodes,
                kept.functions,
                kept.bytes_in,
                kept.bytes_out
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Precompile { mut guests, policy, cache_dir, json } => {
            if let Some(path) = policy {
                let policy = Policy::load(&path).with_context(|| format!("policy {}", path.display()))?;
                guests.push(policy.guest.path);
            }
            if guests.is_empty() {
                anyhow::bail!("nothing to precompile: name guests, or a policy with --policy");
            }
            let (dir, results) = precompile::run(&guests, cache_dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&results)?);
            } else {
                precompile::print(&dir, &results);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Info { guest, json } => {
            let described = info::describe(&guest)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&described)?);
            } else {
                info::print(&described);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Loads `path` as the plugin does, then looks at what it names; prints
/// every problem found, exit status 1 if any.
fn check_policy(path: &std::path::Path) -> ExitCode {
    let policy = match Policy::load(path) {
        Ok(policy) => policy,
        Err(error) => {
            println!("{error}");
            return ExitCode::from(1);
        }
    };
    let mut problems = Vec::new();
    if !policy.guest.path.is_file() {
        problems.push(format!("guest.path: no file at {}", policy.guest.path.display()));
    } else if let Err(error) = info::describe(&policy.guest.path) {
        problems.push(format!("guest.path: {error:#}"));
    }
    for preopen in &policy.capabilities.preopens {
        if !preopen.host.is_dir() {
            problems.push(format!("capabilities.preopens: no directory at {}", preopen.host.display()));
        }
    }
    if problems.is_empty() {
        println!(
            "{}: ok (guest {} at {}, {} device(s) of {} bytes, {} ms per call, {} bytes of guest memory)",
            path.display(),
            policy.guest.name,
            policy.guest.path.display(),
            policy.device.count,
            policy.device.memory_bytes,
            policy.limits.call_deadline_ms,
            policy.limits.memory_bytes
        );
        ExitCode::SUCCESS
    } else {
        for problem in &problems {
            println!("{}: {problem}", path.display());
        }
        ExitCode::from(1)
    }
}

/// The file's stem, as the guest's name in messages.
fn guest_name(path: &std::path::Path) -> String {
    path.file_stem().map_or_else(|| "guest".to_owned(), |stem| stem.to_string_lossy().into_owned())
}
