//! The crate's one error type.

use std::fmt;

use tfwasm_kernels::error::Error as KernelError;
use tfwasm_proto::hlo::HloInstructionProto;

/// Where an instruction came from: the TensorFlow op tf2xla lowered into it
/// (`metadata.op_type` / `op_name`), so an error names what the user wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub op_type: String,
    pub op_name: String,
}

impl Origin {
    pub(crate) fn of(instruction: &HloInstructionProto) -> Origin {
        let metadata = instruction.metadata.as_ref();
        Origin {
            op_type: metadata.map(|m| m.op_type.clone()).unwrap_or_default(),
            op_name: metadata.map(|m| m.op_name.clone()).unwrap_or_default(),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.op_type.is_empty(), self.op_name.is_empty()) {
            (true, true) => f.write_str("from no recorded TensorFlow op"),
            (false, true) => write!(f, "from TensorFlow op {}", self.op_type),
            (true, false) => write!(f, "from TensorFlow node `{}`", self.op_name),
            (false, false) => write!(f, "from TensorFlow op {} `{}`", self.op_type, self.op_name),
        }
    }
}

/// Everything that can go wrong compiling or running a module. Messages
/// start with `tfwasm:` and name the module, and for an instruction its
/// opcode and the TensorFlow op it came from.
#[derive(Debug, thiserror::Error)]
pub enum XlaError {
    /// The bytes are not an `HloModuleProto`.
    #[error("tfwasm: XLA: cannot decode the HLO module: {0}")]
    Decode(#[from] tfwasm_proto::prost::DecodeError),

    /// The module breaks HLO's own rules (a missing operand, a shape that
    /// does not fit its opcode, ...).
    #[error("tfwasm: XLA module {module}: {reason}")]
    Invalid { module: String, reason: String },

    /// An instruction tfwasm has no plan for: compile fails, naming it.
    #[error(
        "tfwasm: XLA module {}: no plan for HLO `{}` (instruction {}, {}): {reason}. \
         Run this function without XLA (jit_compile=False) until tfwasm supports it",
        site.module, site.opcode, site.instruction, site.origin
    )]
    Unsupported { site: Box<Site>, reason: String },

    /// The caller's arguments do not match the module's parameters.
    #[error("tfwasm: XLA module {module}: argument {index}: {reason}")]
    Argument { module: String, index: usize, reason: String },

    /// A kernel refused or failed while running an instruction.
    #[error("tfwasm: XLA module {}: {} (`{}`, {}) failed: {source}", site.module, site.instruction, site.opcode, site.origin)]
    Kernel {
        site: Box<Site>,
        #[source]
        source: KernelError,
    },
}

/// The instruction an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The module's name, without tf2xla's attribute list.
    pub module: String,
    pub instruction: String,
    pub opcode: String,
    pub origin: Origin,
}

impl XlaError {
    /// The opcode an [`XlaError::Unsupported`] or [`XlaError::Kernel`] names.
    pub fn opcode(&self) -> Option<&str> {
        match self {
            XlaError::Unsupported { site, .. } | XlaError::Kernel { site, .. } => Some(&site.opcode),
            _ => None,
        }
    }
}

/// A module's name as errors show it: tf2xla's names carry the whole
/// function attribute list in brackets (`__inference_f_8[_XlaMustCompile=true,...].1`).
pub(crate) fn short_name(name: &str) -> String {
    match (name.find('['), name.rfind(']')) {
        (Some(open), Some(close)) if open < close => format!("{}{}", &name[..open], &name[close + 1..]),
        _ => name.to_owned(),
    }
}
