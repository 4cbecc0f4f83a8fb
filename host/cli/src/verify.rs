//! `tfwasm pass verify`: differential verification of a pass, which needs
//! TensorFlow's CPU runtime and so lives in Python
//! (`host/python/tfwasm/verify.py`). This command hands its arguments to
//! `python -m tfwasm pass verify` with `TFWASM_CLI` naming this binary, so
//! the engine runs the pass through the same pipeline and checks as
//! `pass run`. `TFWASM_PYTHON` picks the interpreter; the default is the
//! `python3` beside this binary (where the wheel installs both), else the
//! one on `PATH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

/// Imports the engine, or says plainly what this interpreter lacks.
const BOOTSTRAP: &str = "\
import sys
try:
    from tfwasm import verify
except ImportError as error:
    sys.stderr.write(
        f'tfwasm pass verify: {sys.executable} cannot import tfwasm.verify ({error}): use the Python '
        'the tfwasm wheel is installed in, e.g. TFWASM_PYTHON=.venv/bin/python\\n')
    sys.exit(2)
sys.exit(verify.main(sys.argv[1:]))
";

/// The interpreter verify runs in.
pub fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("TFWASM_PYTHON") {
        return python.into();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join("python3")));
    beside.filter(|p| p.is_file()).unwrap_or_else(|| "python3".into())
}

/// Runs the Python engine with `args`; its exit status is this command's.
pub fn run(args: &[OsString]) -> Result<ExitCode> {
    let python = python();
    let mut command = Command::new(&python);
    command.arg("-c").arg(BOOTSTRAP).args(args);
    if let Ok(exe) = std::env::current_exe() {
        command.env("TFWASM_CLI", exe);
    }
    let status = command.status().with_context(|| not_runnable(&python))?;
    Ok(match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(2)),
        None => {
            eprintln!("tfwasm pass verify: {} was killed ({status})", python.display());
            ExitCode::from(2)
        }
    })
}

fn not_runnable(python: &Path) -> String {
    format!(
        "tfwasm pass verify runs the graphs in TensorFlow, through Python, and cannot run {}: \
         set TFWASM_PYTHON to a Python with tensorflow-cpu and tfwasm installed",
        python.display()
    )
}
