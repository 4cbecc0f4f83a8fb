//! A graph-optimizer pass that misbehaves on purpose, for tfwasm's
//! hostile-pass suite: a wasm guest of world `pass` (`wit/optimizer`,
//! `tfwasm:optimizer@0.1.0`).
//!
//! Its `[pass.config]` option `mode` picks the misbehaviour, read on every
//! call; `delay-ms` (default 50) is how long `slow` takes; `after = N`
//! (default 0) lets the first N calls of an instance answer "unchanged", so
//! a test sees that the instance replacing a faulted one starts afresh and
//! works before it misbehaves again. An unknown mode
//! or a malformed option is an error on every call, so a typo in a test
//! policy cannot pass for an honest pass. Whatever the mode, the host must
//! leave TensorFlow with the graph it gave the pass, log the pass's name and
//! the reason, and keep the process (and the other passes) running.
//!
//! The graph edits ([`edits`]) decode the GraphDef with prost, change it the
//! way a buggy pass would and encode it again: the answer is a real graph
//! with one thing wrong, so the host's check of that one thing is what
//! refuses it.
//!
//! | mode | what it does | the host's reason |
//! | --- | --- | --- |
//! | `honest` (or absent) | answers "unchanged" | none |
//! | `slow` | busy-waits `delay-ms` on the host clock, then answers "unchanged": legal | none |
//! | `garbage` | answers the first half of the graph's bytes | not a GraphDef |
//! | `drop-preserved` | removes a node TensorFlow asked to keep (the last node when it asked none) and every edge from it | … is gone |
//! | `dangling-input` | gives a node on the device a control input from a node that does not exist | … names no node |
//! | `unknown-op` | renames a node's op to one TensorFlow does not know (declared in `emits`) | … does not know |
//! | `cycle` | adds a control edge back from a node to the node it reads | … cycle outside any loop |
//! | `no-kernel` | places a float64 `MatMul` on the device, which has float32 ones only | … has no kernel for it |
//! | `huge` | builds a 256 MiB answer from copies of the graph: its memory cap stops it | trapped … past its cap |
//! | `loop` | never returns | exceeded its deadline |
//! | `trap` | panics | trapped … panicked |
//! | `error` | returns an error | returned an error |
//! | `missing-device` | moves a node on the device to `device:TYPE:9` | … no device of this process |
//! | `missing-cpu` | moves it to `device:CPU:3` | … no device of this process |
//! | `other-job` | moves it to a CPU of `/job:worker` | … no device of this process |
//! | `missing-input` | drops the last data input of a node on the device | … data input(s), and its op takes … |
//! | `wrong-dtype` | a float node on the device claims `T: double` | … expects double there |
//! | `cast-dst` | a read `Cast` casts to another type | … expects … there |
//! | `all-to-cpu` | every node on the device but arguments and results moves to the CPU | … a resource is used on its own device |
//! | `xla-on` | a jit call on the device asks for XLA again | … XLA turned back on |
//! | `versions` | changes the GraphDef's versions | … never the versions |
//! | `grow` | appends 20,000 `NoOp`s | … more than the pass's max-growth allows |
//! | `log-flood` | logs a warning in a loop until its deadline | exceeded its deadline; its lines past the log budget are dropped |
//!
//! Semantic modes ([`semantic`]): answers every check of the host accepts,
//! but that compute something else; `tfwasm pass verify` must fail them,
//! naming the node.
//!
//! | mode | what it does | what verify names |
//! | --- | --- | --- |
//! | `add-to-sub` | a float32 `AddV2` on a path to a fetch or an update becomes `Sub` | the node, upstream of a fetch or update that differs |
//! | `edit-const` | a float32 `Const` feeding a variable update gets 0.5 added | the constant |
//! | `neuter-assign` | an `Assign*VariableOp` writes back a read of its own variable | the assignment, and the variable that stopped learning |
//!
//! Built on `tfwasm-pass-sdk`, like the reference passes: everything is plain Rust, tested natively
//! (`cargo test -p tfwasm-hostile-pass`).

pub mod edits;
pub mod semantic;

pub use edits::Edit;
use tfwasm_pass_sdk::{self as sdk, host, Pass};

/// The misbehaviour asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Honest,
    Slow,
    /// A wrong answer: the graph, edited.
    Edit(Edit),
    Huge,
    Loop,
    Trap,
    Error,
    /// Logs warnings in a loop until the host's deadline stops it.
    LogFlood,
}

impl Mode {
    /// Every mode, by its name in the policy.
    pub const ALL: [(&'static str, Mode); 26] = [
        ("honest", Mode::Honest),
        ("slow", Mode::Slow),
        ("garbage", Mode::Edit(Edit::Garbage)),
        ("drop-preserved", Mode::Edit(Edit::DropPreserved)),
        ("dangling-input", Mode::Edit(Edit::DanglingInput)),
        ("unknown-op", Mode::Edit(Edit::UnknownOp)),
        ("cycle", Mode::Edit(Edit::Cycle)),
        ("no-kernel", Mode::Edit(Edit::NoKernel)),
        ("huge", Mode::Huge),
        ("loop", Mode::Loop),
        ("trap", Mode::Trap),
        ("error", Mode::Error),
        ("missing-device", Mode::Edit(Edit::MissingDevice)),
        ("missing-cpu", Mode::Edit(Edit::MissingCpu)),
        ("other-job", Mode::Edit(Edit::OtherJob)),
        ("missing-input", Mode::Edit(Edit::MissingInput)),
        ("wrong-dtype", Mode::Edit(Edit::WrongDtype)),
        ("cast-dst", Mode::Edit(Edit::CastDst)),
        ("all-to-cpu", Mode::Edit(Edit::AllToCpu)),
        ("xla-on", Mode::Edit(Edit::XlaOn)),
        ("versions", Mode::Edit(Edit::Versions)),
        ("grow", Mode::Edit(Edit::Grow)),
        ("log-flood", Mode::LogFlood),
        // Semantic edits (verify must catch these).
        ("add-to-sub", Mode::Edit(Edit::AddToSub)),
        ("edit-const", Mode::Edit(Edit::EditConst)),
        ("neuter-assign", Mode::Edit(Edit::NeuterAssign)),
    ];
}

/// The pass's options (`context.options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub mode: Mode,
    /// How long `slow` busy-waits.
    pub delay_ms: u64,
    /// Calls of an instance that answer honestly before the misbehaviour.
    pub after: u64,
}

impl Options {
    pub fn new(options: &[(String, String)]) -> Result<Options, String> {
        let mut parsed = Options { mode: Mode::Honest, delay_ms: 50, after: 0 };
        for (key, value) in options {
            let value = value.trim();
            match key.as_str() {
                "mode" => {
                    parsed.mode =
                        Mode::ALL.iter().find(|(name, _)| *name == value).map(|&(_, m)| m).ok_or_else(|| {
                            let names: Vec<&str> = Mode::ALL.iter().map(|(name, _)| *name).collect();
                            format!("unknown mode {value:?} (modes: {})", names.join(", "))
                        })?
                }
                "delay-ms" => {
                    parsed.delay_ms =
                        value.parse().map_err(|_| format!("option delay-ms = {value:?} is not a number"))?
                }
                "after" => {
                    parsed.after = value.parse().map_err(|_| format!("option after = {value:?} is not a number"))?
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(parsed)
    }
}

/// What `huge` tries to build: far past any cap a policy gives a pass in
/// the suite (the default cap is 256 MiB too, which the copies' doubling
/// overshoots).
pub const HUGE_BYTES: usize = 256 << 20;

/// `graph` repeated until it is [`HUGE_BYTES`] long. Under a smaller memory
/// cap the guest's allocator fails first, which aborts it.
pub fn huge_answer(graph: &[u8]) -> Vec<u8> {
    let piece: &[u8] = if graph.is_empty() { &[0; 4096] } else { graph };
    let mut answer = Vec::new();
    while answer.len() < HUGE_BYTES {
        answer.extend_from_slice(piece);
    }
    answer
}

thread_local! {
    /// `optimize` calls this instance has answered.
    static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The pass, as `tfwasm_pass_sdk::export_pass!` exports it.
pub struct HostilePass;

impl Pass for HostilePass {
    const NAME: &'static str = "hostile";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SUMMARY: &'static str = "misbehaves on purpose (policy option mode), for tfwasm's hostile-pass suite";
    type Plan = Options;

    fn emits() -> Vec<&'static str> {
        edits::EMITS.iter().chain(&semantic::EMITS).copied().collect()
    }

    fn plan(context: &sdk::Context) -> Result<(Options, Vec<String>), String> {
        Ok((Options::new(&context.options)?, Vec::new()))
    }

    fn optimize(graph: &[u8], context: &sdk::Context, options: Options) -> Result<sdk::Answer, String> {
        let call = CALLS.get() + 1;
        CALLS.set(call);
        if call <= options.after {
            return Ok(sdk::Answer::Unchanged);
        }
        let rewritten = |graph: Vec<u8>, node: String, reason: String| sdk::Answer::Rewritten {
            graph,
            report: vec![sdk::Rewrite { node, reason }],
        };
        match options.mode {
            Mode::Honest => Ok(sdk::Answer::Unchanged),
            Mode::Slow => {
                let until = host::now_ns().saturating_add(options.delay_ms.saturating_mul(1_000_000));
                while host::now_ns() < until {
                    std::hint::spin_loop();
                }
                Ok(sdk::Answer::Unchanged)
            }
            Mode::Error => Err("asked to fail (mode = \"error\"): this pass refuses every graph".into()),
            Mode::Trap => panic!("asked to trap (mode = \"trap\")"),
            Mode::Loop => {
                host::log(host::Level::Debug, "mode = \"loop\": looping until the host's deadline");
                let mut spins = 0u64;
                loop {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            }
            Mode::LogFlood => {
                let mut line = 0u64;
                loop {
                    line += 1;
                    host::log(
                        host::Level::Warn,
                        &format!("mode = \"log-flood\": line {line} of a pass that never stops talking"),
                    );
                }
            }
            Mode::Huge => Ok(rewritten(huge_answer(graph), String::new(), "copies of the graph".into())),
            Mode::Edit(edit) => {
                let context =
                    edits::Context { device_type: context.device_type.clone(), preserve: context.preserve.clone() };
                match edits::apply(edit, graph, &context)? {
                    edits::Answer::Unchanged => {
                        host::log(host::Level::Info, &format!("{edit:?}: nothing in this graph to spoil"));
                        Ok(sdk::Answer::Unchanged)
                    }
                    edits::Answer::Rewritten { graph, node, reason } => Ok(rewritten(graph, node, reason)),
                }
            }
        }
    }
}

tfwasm_pass_sdk::export_pass!(HostilePass);

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Result<Options, String> {
        Options::new(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>())
    }

    #[test]
    fn every_mode_parses_and_a_typo_is_an_error() {
        assert_eq!(options(&[]).unwrap(), Options { mode: Mode::Honest, delay_ms: 50, after: 0 });
        for (name, mode) in Mode::ALL {
            assert_eq!(options(&[("mode", name)]).unwrap().mode, mode);
        }
        assert_eq!(options(&[("mode", "slow"), ("delay-ms", "7")]).unwrap().delay_ms, 7);
        assert!(options(&[("mode", "trapp")]).unwrap_err().contains("unknown mode \"trapp\""));
        assert_eq!(options(&[("mode", "trap"), ("after", "1")]).unwrap().after, 1);
        assert!(options(&[("after", "-1")]).unwrap_err().contains("after"));
        assert!(options(&[("delay-ms", "soon")]).unwrap_err().contains("delay-ms"));
        assert!(options(&[("speed", "max")]).unwrap_err().contains("speed"));
    }
}
