//! The host's services (`tfwasm:optimizer/host`): its log and its clock.
//! Natively, where no host exists, the log goes to stderr and the clock is
//! the process's own, so a pass's code runs unchanged in `cargo test`.

/// How much a log line matters (`log-level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Writes a line to the host's log, which tags it with the pass's name.
pub fn log(level: Level, message: &str) {
    imp::log(level, message)
}

/// The host's monotonic clock, in nanoseconds.
pub fn now_ns() -> u64 {
    imp::now_ns()
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::Level;
    use crate::bindings::tfwasm::optimizer::host::{self, LogLevel};

    pub fn log(level: Level, message: &str) {
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        host::log(level, message)
    }

    pub fn now_ns() -> u64 {
        host::now_ns()
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::sync::OnceLock;
    use std::time::Instant;

    use super::Level;

    pub fn log(level: Level, message: &str) {
        if level >= Level::Info {
            eprintln!("pass [{level:?}] {message}");
        }
    }

    pub fn now_ns() -> u64 {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}
