//! Pass guests and the pipeline that runs them.
//!
//! - [`PassProgram`]: one compiled, linked pass file and what it said of
//!   itself (`describe`), checked before it may join a pipeline.
//! - [`Pipeline`]: the policy's passes in order. Each slot holds the
//!   current program behind an `ArcSwap`, so [`Pipeline::swap`] installs a
//!   new one atomically while calls in flight finish on the old; one
//!   instance per slot, re-instantiated after a fault; counters for the pass
//!   list; a pass that fails [`MAX_CONSECUTIVE_FAILURES`] times in a row is
//!   disabled with a message.
//!
//! [`Pipeline::run`] gives a graph to each enabled pass in turn and checks
//! every answer ([`super::validate`]) before the next pass sees it. A pass
//! that traps, overruns its deadline, returns an error or answers a graph
//! that fails a check is logged (name, digest, reason) and skipped: the
//! next pass gets the graph the failed one was given.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;
use wasmtime::component::HasSelf;
use wasmtime::Store;

use super::catalog::{KernelTable, DEVICE_DEFAULT_OPS};
use super::validate::{check_answer, Expectations, OpCatalog};
use crate::error::Error;
use crate::policy::PassSection;
use crate::sandbox::{guarded, guest_text, monotonic_ns, new_store, Compiled, GuestSource, GuestState, World};

wasmtime::component::bindgen!({
    path: "../../wit/optimizer",
    world: "pass",
});

use self::tfwasm::optimizer::types::{
    GraphContext, Kernel as WitKernel, Outcome, PassInfo, Rewrite as WitRewrite, TypeConstraint as WitTypeConstraint,
};

/// The version of the `tfwasm:optimizer` package this host speaks.
pub const OPTIMIZER_WIT_VERSION: &str = "0.1.0";

pub(crate) const PASS_WORLD: World = World {
    package: "tfwasm:optimizer",
    version: OPTIMIZER_WIT_VERSION,
    name: "pass",
    exports: &["optimizer"],
    wit: "wit/optimizer",
};

/// Failures in a row after which a pass is disabled.
pub const MAX_CONSECUTIVE_FAILURES: u64 = 8;

/// Characters of a pass's name, version, summary or report the host keeps.
const MAX_TEXT: usize = 256;

/// Ops one pass may declare it emits, and report entries it may return.
const MAX_LIST: usize = 4096;

impl self::tfwasm::optimizer::host::Host for GuestState {
    fn log(&mut self, level: self::tfwasm::optimizer::host::LogLevel, message: String) {
        self.log_line(level.into(), &message);
    }

    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }
}

impl self::tfwasm::optimizer::types::Host for GuestState {}

/// What a pass said of itself, cut to sizes the host keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub name: String,
    pub version: String,
    pub summary: String,
    pub emits: Vec<String>,
}

/// A compiled, linked pass file that described itself.
pub struct PassProgram {
    /// `pass 'NAME' (FILE)`.
    label: Arc<str>,
    section: PassSection,
    sha256: String,
    described: Described,
    pre: PassPre<GuestState>,
}

impl std::fmt::Debug for PassProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassProgram").field("label", &self.label).field("sha256", &self.sha256).finish()
    }
}

impl PassProgram {
    /// Reads, compiles (or finds in the compile cache), links and
    /// instantiates the pass `section` names, and asks it to describe
    /// itself. Any failure is an error naming the file; nothing is kept.
    pub fn load(section: &PassSection, cache_dir: Option<&std::path::Path>) -> Result<Arc<PassProgram>, Error> {
        let label = pass_label(&section.name, &section.path);
        let load_err = |reason: String| Error::GuestLoad { guest: label.clone(), reason };
        let started = Instant::now();
        let source = GuestSource {
            label: &label,
            path: &section.path,
            sha256: section.sha256.as_deref(),
            capabilities: &section.capabilities,
            world: &PASS_WORLD,
        };
        let compiled = source.compile(cache_dir)?;
        let pre = source.link(
            &compiled,
            |linker| Pass::add_to_linker::<_, HasSelf<_>>(linker, |state| state),
            PassPre::new,
        )?;
        let Compiled { cached, sha256, .. } = compiled;
        if let Some(report) = &section.verified {
            super::verified::check(report, &sha256, &section.options()).map_err(load_err)?;
        }
        let mut program = PassProgram {
            label: label.clone().into(),
            section: section.clone(),
            sha256,
            described: Described { name: String::new(), version: String::new(), summary: String::new(), emits: vec![] },
            pre,
        };
        let mut instance = program.instantiate()?;
        let info = instance.call("describe", |pass, store| pass.tfwasm_optimizer_optimizer().call_describe(store))?;
        program.described = described(info).map_err(load_err)?;
        let how = if cached { "loaded from the compile cache" } else { "compiled" };
        tracing::info!(
            "{label}: {} {} {how} and described in {:.1} ms",
            program.described.name,
            program.described.version,
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(Arc::new(program))
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn described(&self) -> &Described {
        &self.described
    }

    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    pub fn section(&self) -> &PassSection {
        &self.section
    }

    fn instantiate(&self) -> Result<PassInstance, Error> {
        let mut store = new_store(self.pre.engine(), &self.label, &self.section.limits, &self.section.capabilities)?;
        let deadline = self.section.limits.call_deadline_ms;
        let bindings = guarded(&mut store, deadline, "instantiate", |store| self.pre.instantiate(store))?;
        Ok(PassInstance { store, bindings, deadline_ms: deadline })
    }
}

/// `pass 'fuse-elementwise' (fuse_pass.wasm)`.
pub fn pass_label(name: &str, path: &std::path::Path) -> String {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    format!("pass '{name}' ({file})")
}

/// `pass-info` with every string cut and escaped.
fn described(info: PassInfo) -> Result<Described, String> {
    if info.name.trim().is_empty() {
        return Err("`describe` returned an empty name".into());
    }
    if info.emits.len() > MAX_LIST {
        return Err(format!("`describe` declared {} ops it emits, at most {MAX_LIST} allowed", info.emits.len()));
    }
    Ok(Described {
        name: guest_text(&info.name, MAX_TEXT),
        version: guest_text(&info.version, MAX_TEXT),
        summary: guest_text(&info.summary, MAX_TEXT),
        emits: info.emits.iter().map(|op| guest_text(op, MAX_TEXT)).collect(),
    })
}

/// One live instance of a pass.
struct PassInstance {
    store: Store<GuestState>,
    bindings: Pass,
    deadline_ms: u64,
}

impl PassInstance {
    fn call<R>(
        &mut self,
        call: &str,
        body: impl FnOnce(&Pass, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        let bindings = &self.bindings;
        guarded(&mut self.store, self.deadline_ms, call, |store| body(bindings, store))
    }
}

/// What TensorFlow asks of a pipeline run besides the graph.
pub struct RunContext<'a> {
    pub device_type: &'a str,
    pub preserve: &'a [String],
    pub fetch: &'a [String],
    pub kernels: &'a KernelTable,
    pub catalog: &'a dyn OpCatalog,
    /// How many devices of `device_type` the process has.
    pub device_count: usize,
}

/// One rewrite a pass reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub pass: String,
    pub node: String,
    pub reason: String,
}

/// What a pipeline run made of a graph.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// The new graph, or `None` when every pass left it unchanged (or failed).
    pub graph: Option<Vec<u8>>,
    pub rewrites: Vec<Rewrite>,
    /// `(pass, reason)` of each pass that failed on this graph.
    pub failures: Vec<(String, String)>,
}

/// A pass's entry in the pass list.
#[derive(Debug, Clone)]
pub struct PassStatus {
    /// The policy's name for the slot.
    pub slot: String,
    pub name: String,
    pub version: String,
    pub summary: String,
    pub path: PathBuf,
    pub sha256: String,
    pub enabled: bool,
    /// Why the host turned it off, if it did.
    pub disabled: Option<String>,
    pub calls: u64,
    pub rewrites: u64,
    pub failures: u64,
    pub last_error: Option<String>,
    /// Programs installed in this slot since the pipeline started (1 + swaps).
    pub generation: u64,
}

/// One position of the pipeline.
struct Slot {
    name: String,
    program: ArcSwap<PassProgram>,
    /// The instance of the current program (`None` after a fault or a swap).
    instance: Mutex<Option<(Arc<PassProgram>, PassInstance)>>,
    enabled: AtomicBool,
    disabled: Mutex<Option<String>>,
    calls: AtomicU64,
    rewrites: AtomicU64,
    failures: AtomicU64,
    failures_in_a_row: AtomicU64,
    last_error: Mutex<Option<String>>,
    generation: AtomicU64,
}

/// The policy's passes, in order.
pub struct Pipeline {
    slots: Vec<Slot>,
}

impl Pipeline {
    /// Loads every pass of the policy. A pass that fails to load is left
    /// out with an error in the log; the others run.
    pub fn load(sections: &[PassSection], cache_dir: Option<&std::path::Path>) -> Pipeline {
        Pipeline::from_programs(sections.iter().filter_map(|section| match PassProgram::load(section, cache_dir) {
            Ok(program) => Some(program),
            Err(error) => {
                tracing::error!("tfwasm: {error}; the pipeline runs without it");
                None
            }
        }))
    }

    /// A pipeline of programs already loaded, in order, each in a slot named
    /// by its policy entry.
    pub fn from_programs(programs: impl IntoIterator<Item = Arc<PassProgram>>) -> Pipeline {
        let slots = programs
            .into_iter()
            .map(|program| Slot {
                name: program.section.name.clone(),
                enabled: AtomicBool::new(program.section.enabled),
                program: ArcSwap::new(program),
                instance: Mutex::new(None),
                disabled: Mutex::new(None),
                calls: AtomicU64::new(0),
                rewrites: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                failures_in_a_row: AtomicU64::new(0),
                last_error: Mutex::new(None),
                generation: AtomicU64::new(1),
            })
            .collect();
        Pipeline { slots }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The pass list.
    pub fn status(&self) -> Vec<PassStatus> {
        self.slots
            .iter()
            .map(|slot| {
                let program = slot.program.load();
                PassStatus {
                    slot: slot.name.clone(),
                    name: program.described.name.clone(),
                    version: program.described.version.clone(),
                    summary: program.described.summary.clone(),
                    path: program.section.path.clone(),
                    sha256: program.sha256.clone(),
                    enabled: slot.enabled.load(Ordering::Relaxed),
                    disabled: slot.disabled.lock().clone(),
                    calls: slot.calls.load(Ordering::Relaxed),
                    rewrites: slot.rewrites.load(Ordering::Relaxed),
                    failures: slot.failures.load(Ordering::Relaxed),
                    last_error: slot.last_error.lock().clone(),
                    generation: slot.generation.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    fn slot(&self, name: &str) -> Result<&Slot, Error> {
        self.slots.iter().find(|slot| slot.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.slots.iter().map(|s| s.name.as_str()).collect();
            Error::InvalidArgument(format!("no pass named {name:?} in the pipeline (passes: {})", names.join(", ")))
        })
    }

    /// Turns a pass on (clearing a disable after failures) or off.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<(), Error> {
        let slot = self.slot(name)?;
        if enabled {
            *slot.disabled.lock() = None;
            slot.failures_in_a_row.store(0, Ordering::Relaxed);
        }
        slot.enabled.store(enabled, Ordering::Relaxed);
        Ok(())
    }

    /// Replaces the program of pass `name` with the file at `path`. The new
    /// file is compiled, instantiated and described before anything
    /// changes; if any of that fails the old program stays and the error
    /// says why. Calls in flight finish on the old program.
    pub fn swap(
        &self,
        name: &str,
        path: &std::path::Path,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<Arc<PassProgram>, Error> {
        let slot = self.slot(name)?;
        let mut section = slot.program.load().section.clone();
        section.path = path.to_owned();
        // A pin names one file's digest; a swap is the operator's choice of another.
        section.sha256 = None;
        let program = PassProgram::load(&section, cache_dir)?;
        slot.program.store(program.clone());
        slot.generation.fetch_add(1, Ordering::Relaxed);
        slot.failures_in_a_row.store(0, Ordering::Relaxed);
        *slot.disabled.lock() = None;
        tracing::info!(
            "tfwasm: pass {name:?} is now {} {} ({}, sha256 {})",
            program.described.name,
            program.described.version,
            path.display(),
            &program.sha256[..12]
        );
        Ok(program)
    }

    /// Gives `graph` to every enabled pass in order; see the module doc.
    pub fn run(&self, graph: &[u8], context: &RunContext<'_>) -> Result<RunOutcome, Error> {
        let mut outcome = RunOutcome::default();
        if !self.slots.iter().any(|slot| slot.enabled.load(Ordering::Relaxed)) {
            return Ok(outcome);
        }
        let mut current = GraphDef::decode(graph).map_err(|e| {
            Error::InvalidArgument(format!("the graph TensorFlow gave the passes does not decode: {e}"))
        })?;
        let mut bytes: Option<Vec<u8>> = None;
        let wit_context = GraphContext {
            device_type: context.device_type.to_owned(),
            preserve: context.preserve.to_vec(),
            fetch: context.fetch.to_vec(),
            kernels: wit_kernels(context.kernels),
            options: Vec::new(),
        };
        for slot in &self.slots {
            if !slot.enabled.load(Ordering::Relaxed) || slot.disabled.lock().is_some() {
                continue;
            }
            let program = slot.program.load_full();
            let given = bytes.as_deref().unwrap_or(graph);
            slot.calls.fetch_add(1, Ordering::Relaxed);
            let mut call_context = wit_context.clone();
            call_context.options = program.section.options();
            match self.call_pass(slot, &program, given, &call_context, &current, context) {
                Ok(None) => slot.failures_in_a_row.store(0, Ordering::Relaxed),
                Ok(Some((graph, rewritten, report))) => {
                    slot.failures_in_a_row.store(0, Ordering::Relaxed);
                    slot.rewrites.fetch_add(1, Ordering::Relaxed);
                    outcome.rewrites.extend(report.into_iter().map(|r| Rewrite {
                        pass: program.described.name.clone(),
                        node: guest_text(&r.node, MAX_TEXT),
                        reason: guest_text(&r.reason, MAX_TEXT),
                    }));
                    current = rewritten;
                    bytes = Some(graph);
                }
                Err(reason) => {
                    let failures = slot.failures.fetch_add(1, Ordering::Relaxed) + 1;
                    let in_a_row = slot.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(
                        "tfwasm: {} (sha256 {}) failed, TensorFlow goes on without its rewrite: {reason} \
                         (failure {failures})",
                        program.label,
                        &program.sha256[..12]
                    );
                    if in_a_row >= MAX_CONSECUTIVE_FAILURES {
                        let why = format!("{in_a_row} failures in a row, the last: {reason}");
                        tracing::error!(
                            "tfwasm: {} is disabled after {why}. tfwasm.passes.enable({:?}) turns it on again.",
                            program.label,
                            slot.name
                        );
                        *slot.disabled.lock() = Some(why);
                    }
                    *slot.last_error.lock() = Some(reason.clone());
                    outcome.failures.push((slot.name.clone(), reason));
                }
            }
        }
        outcome.graph = bytes;
        Ok(outcome)
    }

    /// One pass on one graph: `None` for "unchanged", the checked answer
    /// otherwise, or why it failed.
    #[allow(clippy::type_complexity)]
    fn call_pass(
        &self,
        slot: &Slot,
        program: &Arc<PassProgram>,
        graph: &[u8],
        wit_context: &GraphContext,
        given: &GraphDef,
        context: &RunContext<'_>,
    ) -> Result<Option<(Vec<u8>, GraphDef, Vec<WitRewrite>)>, String> {
        let mut held = slot.instance.lock();
        // A swapped-in program gets a fresh instance; so does one after a fault.
        if held.as_ref().is_none_or(|(running, _)| !Arc::ptr_eq(running, program)) {
            *held = Some((program.clone(), program.instantiate().map_err(|e| e.to_string())?));
        }
        let (_, instance) = held.as_mut().expect("set above");
        let answer = instance
            .call("optimize", |pass, store| pass.tfwasm_optimizer_optimizer().call_optimize(store, graph, wit_context));
        let answer = match answer {
            Ok(answer) => answer,
            Err(fault) => {
                *held = None; // never call a faulted instance again
                return Err(fault.to_string());
            }
        };
        drop(held);
        match answer {
            Err(refusal) => Err(format!("it returned an error: {}", guest_text(&refusal, 1024))),
            Ok(Outcome::Unchanged) => Ok(None),
            Ok(Outcome::Rewritten(rewritten)) => {
                if rewritten.report.len() > MAX_LIST {
                    return Err(format!(
                        "its report has {} entries, at most {MAX_LIST} allowed",
                        rewritten.report.len()
                    ));
                }
                let expect = Expectations {
                    device_type: context.device_type,
                    preserve: context.preserve,
                    emits: &program.described.emits,
                    device_count: context.device_count,
                    max_growth: program.section.max_growth,
                };
                let checked = check_answer(given, &rewritten.graph, &expect, context.catalog)
                    .map_err(|refusal| format!("its answer was refused: {refusal}"))?;
                Ok(Some((rewritten.graph, checked, rewritten.report)))
            }
        }
    }
}

/// The device's kernels as a pass sees them: the table's, and TensorFlow's
/// own kernels for every device (`ReadVariableOp`, `AssignVariableOp`, …),
/// which [`KernelTable::supports`] counts too.
fn wit_kernels(table: &KernelTable) -> Vec<WitKernel> {
    let mut kernels: Vec<WitKernel> = table
        .kernels()
        .map(|kernel| WitKernel {
            op: kernel.op.clone(),
            types: kernel
                .types
                .iter()
                .map(|c| WitTypeConstraint { attr: c.attr.clone(), dtypes: c.dtypes.clone() })
                .collect(),
        })
        .collect();
    kernels.extend(DEVICE_DEFAULT_OPS.iter().map(|op| WitKernel { op: (*op).to_owned(), types: Vec::new() }));
    kernels
}
