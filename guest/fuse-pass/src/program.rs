//! What a `_TfwasmFusedElementwise` node may compute: the ops it accepts,
//! the postfix program of its `expr` attribute and that program's limits.
//!
//! This is the op's contract, and the host's kernel owns it:
//! `host/kernels/src/fused.rs` (`UNARY`, `BINARY`, `step_for_op`,
//! `Program::new`, `MAX_DEPTH`, `MAX_STEPS`). The guest cannot link that
//! crate (it is native compute), so it keeps this copy; the test
//! `fusable_ops_match_the_kernel` in `tests/equivalence.rs` fails when the
//! two drift apart.

/// The fused op, as registered with TensorFlow.
pub const OP: &str = "_TfwasmFusedElementwise";

/// Deepest operand stack a program may need.
pub const MAX_DEPTH: usize = 16;

/// Most steps in a program.
pub const MAX_STEPS: usize = 256;

/// A float32 TensorFlow op the fused kernel computes.
#[derive(Debug, PartialEq, Eq)]
pub struct FusableOp {
    /// The TensorFlow op name a node carries.
    pub op: &'static str,
    /// Its token in `expr`: the kernel's canonical name (`Add` and `AddV2`
    /// are both `AddV2`, `Inv` is `Reciprocal`).
    pub token: &'static str,
    /// Data inputs: 1 or 2.
    pub arity: usize,
}

const fn unary(op: &'static str, token: &'static str) -> FusableOp {
    FusableOp { op, token, arity: 1 }
}

const fn binary(op: &'static str, token: &'static str) -> FusableOp {
    FusableOp { op, token, arity: 2 }
}

/// Every op the fused kernel accepts: its elementwise float32 ops whose
/// kernels have no attribute besides `T`, `BiasAdd` (NHWC only: the
/// fusion checks `data_format`), and `TanhGrad`/`SigmoidGrad` (operands of
/// one shape: the kernel checks).
pub const FUSABLE: &[FusableOp] = &[
    unary("Neg", "Neg"),
    unary("Abs", "Abs"),
    unary("Exp", "Exp"),
    unary("Log", "Log"),
    unary("Log1p", "Log1p"),
    unary("Sqrt", "Sqrt"),
    unary("Rsqrt", "Rsqrt"),
    unary("Square", "Square"),
    unary("Reciprocal", "Reciprocal"),
    unary("Inv", "Reciprocal"),
    unary("Tanh", "Tanh"),
    unary("Sigmoid", "Sigmoid"),
    unary("Relu", "Relu"),
    unary("Relu6", "Relu6"),
    unary("Elu", "Elu"),
    unary("Selu", "Selu"),
    unary("Softplus", "Softplus"),
    unary("Softsign", "Softsign"),
    unary("Erf", "Erf"),
    unary("Erfc", "Erfc"),
    unary("Sin", "Sin"),
    unary("Cos", "Cos"),
    unary("Tan", "Tan"),
    unary("Sign", "Sign"),
    unary("Floor", "Floor"),
    unary("Ceil", "Ceil"),
    unary("Round", "Round"),
    binary("Add", "AddV2"),
    binary("AddV2", "AddV2"),
    binary("Sub", "Sub"),
    binary("Mul", "Mul"),
    binary("RealDiv", "RealDiv"),
    binary("DivNoNan", "DivNoNan"),
    binary("Maximum", "Maximum"),
    binary("Minimum", "Minimum"),
    binary("Pow", "Pow"),
    binary("SquaredDifference", "SquaredDifference"),
    binary("BiasAdd", "BiasAdd"),
    binary("TanhGrad", "TanhGrad"),
    binary("SigmoidGrad", "SigmoidGrad"),
];

/// The fusable op named `op`, if the kernel computes it.
pub fn fusable(op: &str) -> Option<&'static FusableOp> {
    FUSABLE.iter().find(|f| f.op == op)
}

/// One step of a program, in postfix order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Push input `k`.
    Input(usize),
    /// Pop the op's operands, push its result.
    Op(&'static FusableOp),
}

/// The `expr` text of `steps` over `inputs` inputs, if the kernel accepts
/// the program: at most [`MAX_STEPS`] steps, never an empty pop nor a stack
/// deeper than [`MAX_DEPTH`], one value left, every input below `inputs`
/// read and no other (the checks of the kernel's `Program::new`).
pub fn expr(steps: &[Step], inputs: usize) -> Result<String, String> {
    if steps.len() > MAX_STEPS {
        return Err(format!("{} steps, at most {MAX_STEPS} allowed", steps.len()));
    }
    let mut depth = 0usize;
    let mut read = vec![false; inputs];
    for (i, step) in steps.iter().enumerate() {
        let (pops, pushes) = match *step {
            Step::Input(k) if k >= inputs => return Err(format!("step {i} reads input ${k} of {inputs}")),
            Step::Input(k) => {
                read[k] = true;
                (0, 1)
            }
            Step::Op(op) => (op.arity, 1),
        };
        depth = depth.checked_sub(pops).ok_or_else(|| format!("step {i} pops an empty stack"))? + pushes;
        if depth > MAX_DEPTH {
            return Err(format!("needs a stack deeper than {MAX_DEPTH}"));
        }
    }
    if depth != 1 {
        return Err(format!("leaves {depth} values, not 1"));
    }
    if let Some(k) = read.iter().position(|r| !r) {
        return Err(format!("never reads input ${k}"));
    }
    let mut text = String::with_capacity(steps.len() * 6);
    for step in steps {
        if !text.is_empty() {
            text.push(' ');
        }
        match step {
            Step::Input(k) => {
                text.push('$');
                text.push_str(&k.to_string());
            }
            Step::Op(op) => text.push_str(op.token),
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str) -> Step {
        Step::Op(fusable(name).unwrap())
    }

    #[test]
    fn programs_print_in_the_kernels_tokens() {
        let steps = [Step::Input(0), Step::Input(1), op("Add"), op("Inv"), Step::Input(0), op("Mul")];
        assert_eq!(expr(&steps, 2).unwrap(), "$0 $1 AddV2 Reciprocal $0 Mul");
    }

    #[test]
    fn programs_the_kernel_refuses_are_refused() {
        assert!(expr(&[Step::Input(0), op("Add")], 1).is_err(), "empty pop");
        assert!(expr(&[Step::Input(0), Step::Input(0)], 1).is_err(), "two values left");
        assert!(expr(&[Step::Input(1)], 1).is_err(), "input out of range");
        assert!(expr(&[Step::Input(0)], 2).is_err(), "input never read");
        let deep: Vec<Step> = (0..=MAX_DEPTH).map(|_| Step::Input(0)).collect();
        assert!(expr(&deep, 1).unwrap_err().contains("deeper"));
        let mut long = vec![Step::Input(0)];
        long.extend((0..MAX_STEPS).map(|_| op("Neg")));
        assert!(expr(&long, 1).unwrap_err().contains("steps"));
        long.pop();
        assert!(expr(&long, 1).is_ok());
    }

    #[test]
    fn every_name_is_listed_once() {
        for (i, a) in FUSABLE.iter().enumerate() {
            assert!(FUSABLE[i + 1..].iter().all(|b| b.op != a.op), "{} twice", a.op);
            assert!(a.arity == 1 || a.arity == 2);
        }
        assert!(fusable("MatMul").is_none());
    }
}
