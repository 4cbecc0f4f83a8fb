//! `_TfwasmFusedElementwise`: a tree of float32 elementwise ops computed in
//! one pass over the output.
//!
//! The graph pass (the plugin's graph pass (`graph::fuse`)) replaces a chain such as Adam's
//! `m·α / (√v + ε)` (a `Mul`, a `Sqrt`, an `AddV2` and a `RealDiv`: four
//! nodes, four outputs written and read back) by one node of this op. Its
//! `expr` attribute is the tree in postfix: `$k` pushes input `k`, an op
//! name pops its operands and pushes its result. The example is
//! `$0 $1 Mul $2 Sqrt $3 AddV2 RealDiv`.
//!
//! Semantics are those of the ops it replaces, bit for bit. Every step's
//! shapes are checked as that op checks them ([`Program::output_shape`]:
//! broadcasting, and `BiasAdd`'s rules). Inputs then broadcast together as
//! NumPy does: an elementwise tree's output is the broadcast of all its
//! inputs, whatever the intermediate shapes were. Each step is computed by
//! the same element function as the unfused kernel ([`UnaryOp::run`],
//! [`BinaryOp::apply_f32`]), rounding to float32 after every step as they
//! do.
//!
//! The output is computed in blocks of [`BLOCK`] elements that stay in the
//! L1 cache: each step reads its operands' blocks and writes one block.
//! Operands that are the same for every element (single-element inputs, and
//! any subtree of them, such as Adam's bias corrections) are computed once
//! per execution, before the first block ([`Program::fold`]). An input that
//! repeats along the output's outer dimensions (a bias) is read from a tile
//! of its pattern; any other repeating input is gathered block by block.
//! Large outputs are split across the compute pool as the unfused kernels
//! are.

use smallvec::SmallVec;

use super::binary::{fill_chunked, BinaryOp};
use super::shape::{broadcast_shape, element_count, Dims, ShapeDisplay};
use super::unary::{GradOp, UnaryOp};
use super::{types, Attrs, Kernel, KernelDef, OpContext};
use crate::error::Error;

/// The op name registered with TensorFlow (`abi::kernels::register_fused_op`).
pub const OP: &str = "_TfwasmFusedElementwise";

/// Elements per block: 4 KiB per operand, so the handful of blocks a
/// program holds at once stay in a 32 KiB L1 cache, while the per-block
/// work of the interpreter (a match and a slice per step) is spread over
/// enough elements. Against 512, Keras' Adam trees took 10–30% less time
/// per element on one thread (2048 measured the same as 1024).
pub const BLOCK: usize = 1024;

/// Deepest operand stack a program may need (a generous bound on what the
/// graph pass builds; it keeps a hostile `expr` from asking for much memory).
pub const MAX_DEPTH: usize = 16;

/// Most steps in a program.
pub const MAX_STEPS: usize = 256;

/// Synchronous, like the products: an asynchronous registration let a large
/// fused node finish on the compute pool while the executor went on, but it
/// made TensorFlow hand every node after every fused node to its inter-op
/// pool (`docs/architecture.md`, "deferred").
pub const KERNELS: &[KernelDef] = &[KernelDef::new(OP, types::T_F32, |attrs| Ok(Box::new(FusedKernel::new(attrs)?)))];

/// One step of a program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Push input `k`.
    Input(usize),
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `BiasAdd` in NHWC layout: `x + bias` along the last dimension, with
    /// its own shape rules (checked by [`Program::output_shape`]).
    BiasAdd,
    /// `TanhGrad(y, dy)` or `SigmoidGrad(y, dy)`: operands of one shape.
    /// Recurrent layers' gradients chain them with products
    /// (`SigmoidGrad(i, dc·g)`) on every step of their loop.
    Grad(GradOp),
}

impl Step {
    /// The step's token in `expr`: `$k`, or the TensorFlow op name.
    fn name(self) -> String {
        match self {
            Step::Input(k) => format!("${k}"),
            Step::Unary(op) => UNARY.iter().find(|(_, u)| *u == op).map_or("?", |(name, _)| name).to_owned(),
            Step::Binary(op) => op.op_name().to_owned(),
            Step::BiasAdd => "BiasAdd".to_owned(),
            Step::Grad(op) => GRAD.iter().find(|(_, g)| *g == op).map_or("?", |(name, _)| name).to_owned(),
        }
    }

    /// The arithmetic of a two-operand step (`BiasAdd` adds).
    fn binary_op(self) -> BinaryOp {
        match self {
            Step::Binary(op) => op,
            Step::BiasAdd => BinaryOp::Add,
            Step::Input(_) | Step::Unary(_) | Step::Grad(_) => unreachable!("not a broadcasting two-operand step"),
        }
    }
}

/// The ops a program may contain, by TensorFlow op name: every float32
/// elementwise op whose kernel has no attribute besides `T`.
const UNARY: &[(&str, UnaryOp)] = &[
    ("Neg", UnaryOp::Neg),
    ("Abs", UnaryOp::Abs),
    ("Exp", UnaryOp::Exp),
    ("Log", UnaryOp::Log),
    ("Log1p", UnaryOp::Log1p),
    ("Sqrt", UnaryOp::Sqrt),
    ("Rsqrt", UnaryOp::Rsqrt),
    ("Square", UnaryOp::Square),
    ("Reciprocal", UnaryOp::Reciprocal),
    ("Inv", UnaryOp::Reciprocal),
    ("Tanh", UnaryOp::Tanh),
    ("Sigmoid", UnaryOp::Sigmoid),
    ("Relu", UnaryOp::Relu),
    ("Relu6", UnaryOp::Relu6),
    ("Elu", UnaryOp::Elu),
    ("Selu", UnaryOp::Selu),
    ("Softplus", UnaryOp::Softplus),
    ("Softsign", UnaryOp::Softsign),
    ("Erf", UnaryOp::Erf),
    ("Erfc", UnaryOp::Erfc),
    ("Sin", UnaryOp::Sin),
    ("Cos", UnaryOp::Cos),
    ("Tan", UnaryOp::Tan),
    ("Sign", UnaryOp::Sign),
    ("Floor", UnaryOp::Floor),
    ("Ceil", UnaryOp::Ceil),
    ("Round", UnaryOp::Round),
];

const BINARY: &[(&str, BinaryOp)] = &[
    ("Add", BinaryOp::Add),
    ("AddV2", BinaryOp::Add),
    ("Sub", BinaryOp::Sub),
    ("Mul", BinaryOp::Mul),
    ("RealDiv", BinaryOp::RealDiv),
    ("DivNoNan", BinaryOp::DivNoNan),
    ("Maximum", BinaryOp::Maximum),
    ("Minimum", BinaryOp::Minimum),
    ("Pow", BinaryOp::Pow),
    ("SquaredDifference", BinaryOp::SquaredDifference),
];

/// The gradients of two float32 inputs of one shape (`y`, `dy`) a program
/// may contain, computed by the unfused kernels' own element functions
/// ([`GradOp::run`]).
const GRAD: &[(&str, GradOp)] = &[("TanhGrad", GradOp::Tanh), ("SigmoidGrad", GradOp::Sigmoid)];

/// The step a float32 node of TensorFlow op `op` becomes in a program, if
/// the op can be fused. `Input` is never returned.
pub fn step_for_op(op: &str) -> Option<Step> {
    if op == "BiasAdd" {
        return Some(Step::BiasAdd);
    }
    UNARY
        .iter()
        .find(|(name, _)| *name == op)
        .map(|&(_, op)| Step::Unary(op))
        .or_else(|| BINARY.iter().find(|(name, _)| *name == op).map(|&(_, op)| Step::Binary(op)))
        .or_else(|| GRAD.iter().find(|(name, _)| *name == op).map(|&(_, op)| Step::Grad(op)))
}

/// A validated postfix program over `inputs` inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    steps: Vec<Step>,
    inputs: usize,
}

impl Program {
    /// Checks that `steps` leave exactly one value, never pop an empty
    /// stack, read every input below `inputs` and no other, and stay within
    /// [`MAX_DEPTH`] and [`MAX_STEPS`].
    pub fn new(steps: Vec<Step>, inputs: usize) -> Result<Self, String> {
        if steps.len() > MAX_STEPS {
            return Err(format!("{} steps, at most {MAX_STEPS} allowed", steps.len()));
        }
        let mut depth = 0usize;
        for (i, step) in steps.iter().enumerate() {
            let (pops, pushes) = match *step {
                Step::Input(k) if k >= inputs => return Err(format!("step {i} reads input ${k} of {inputs}")),
                Step::Input(_) => (0, 1),
                Step::Unary(_) => (1, 1),
                Step::Binary(op) if op.apply_f32(&[0.0], 0, &[0.0], 0, &mut [0.0]) => (2, 1),
                Step::Binary(op) => return Err(format!("step {i}: {} is not float32 arithmetic", op.op_name())),
                Step::BiasAdd | Step::Grad(_) => (2, 1),
            };
            depth = depth.checked_sub(pops).ok_or_else(|| format!("step {i} pops an empty stack"))? + pushes;
            if depth > MAX_DEPTH {
                return Err(format!("needs a stack deeper than {MAX_DEPTH}"));
            }
        }
        if depth != 1 {
            return Err(format!("leaves {depth} values, not 1"));
        }
        if let Some(k) = (0..inputs).find(|&k| !steps.contains(&Step::Input(k))) {
            return Err(format!("never reads input ${k}"));
        }
        Ok(Program { steps, inputs })
    }

    /// Parses the `expr` attribute (tokens separated by spaces).
    pub fn parse(expr: &str, inputs: usize) -> Result<Self, String> {
        let steps = expr
            .split_ascii_whitespace()
            .map(|token| match token.strip_prefix('$') {
                Some(k) => k.parse().map(Step::Input).map_err(|_| format!("bad input reference {token:?}")),
                None => step_for_op(token).ok_or_else(|| format!("{token:?} is not an op a fused kernel computes")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Program::new(steps, inputs)
    }

    /// The `expr` attribute for this program.
    pub fn expr(&self) -> String {
        self.steps.iter().map(|step| step.name()).collect::<Vec<_>>().join(" ")
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// The output shape for inputs of these shapes, checking every step as
    /// the op it replaces would: operands that broadcast, and `BiasAdd`'s
    /// rules (a value of rank 2 or more, a 1-D bias as long as its last
    /// dimension). The error names the step's op.
    pub fn output_shape(&self, shapes: &[&[usize]]) -> Result<Dims, Error> {
        let mut stack: SmallVec<[Dims; MAX_DEPTH]> = SmallVec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let shape = match *step {
                Step::Input(k) => Dims::from_slice(shapes[k]),
                Step::Unary(_) => stack.pop().expect("validated program"),
                Step::Binary(_) | Step::BiasAdd | Step::Grad(_) => {
                    let (b, a) = (stack.pop().expect("validated program"), stack.pop().expect("validated program"));
                    let fail =
                        |what: String| Error::InvalidArgument(format!("{OP} (step {i}, {}): {what}", step.name()));
                    if let Step::Grad(_) = step {
                        // The unfused kernel takes any two inputs of one
                        // element count (and `y`'s shape); a gradient
                        // pass only ever pairs a value with its own
                        // gradient, of its shape, and broadcasting
                        // between other shapes would be wrong.
                        if a != b {
                            return Err(fail(format!(
                                "y and dy must have the same shape: {} vs. {}",
                                ShapeDisplay(&a),
                                ShapeDisplay(&b)
                            )));
                        }
                        a
                    } else if let Step::BiasAdd = step {
                        if a.len() < 2 {
                            return Err(fail(format!("Input tensor must be at least 2D: {}", ShapeDisplay(&a))));
                        }
                        if b.len() != 1 {
                            return Err(fail(format!("Biases must be 1D: {}", ShapeDisplay(&b))));
                        }
                        if b[0] != a[a.len() - 1] {
                            return Err(fail(format!(
                                "Must provide as many biases as the last dimension of the input tensor: {} vs. {}",
                                ShapeDisplay(&b),
                                ShapeDisplay(&a)
                            )));
                        }
                        a
                    } else {
                        broadcast_shape(&a, &b).ok_or_else(|| {
                            fail(format!("Incompatible shapes: {} vs. {}", ShapeDisplay(&a), ShapeDisplay(&b)))
                        })?
                    }
                }
            };
            stack.push(shape);
        }
        Ok(stack.pop().expect("validated program"))
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// This program's steps for one execution, with every value that is the
    /// same for all elements computed now: a single-element input becomes
    /// [`Folded::Uniform`], and so does any step whose operands all are
    /// (Adam's `lr·√(1-β₂ᵗ)/(1-β₁ᵗ)`, fourteen steps with two `Pow`s),
    /// instead of being recomputed for every block. The arithmetic is the
    /// unfused kernels' own, on one element, so the results do not change.
    fn fold(&self, plan: &Plan, inputs: &[&[f32]]) -> Vec<Folded> {
        let mut folded = Vec::with_capacity(self.steps.len());
        // Per stack value: where its steps start in `folded`, and its value
        // when it is the same for every element.
        let mut stack = SmallVec::<[(usize, Option<f32>); MAX_DEPTH]>::new();
        for &step in &self.steps {
            let start = folded.len();
            let (at, uniform) = match step {
                Step::Input(k) => match plan.inputs[k] {
                    Layout::Single => (start, Some(inputs[k][0])),
                    _ => {
                        folded.push(Folded::Input(k));
                        (start, None)
                    }
                },
                Step::Unary(op) => match pop(&mut stack) {
                    (at, Some(x)) => (at, Some(unary_scalar(op, x))),
                    (at, None) => {
                        folded.push(Folded::Op(step));
                        (at, None)
                    }
                },
                Step::Binary(_) | Step::BiasAdd | Step::Grad(_) => match (pop(&mut stack), pop(&mut stack)) {
                    ((_, Some(y)), (at, Some(x))) => (at, Some(two_operand_scalar(step, x, y))),
                    (_, (at, _)) => {
                        folded.push(Folded::Op(step));
                        (at, None)
                    }
                },
            };
            if let Some(v) = uniform {
                folded.truncate(at);
                folded.push(Folded::Uniform(v));
            }
            stack.push((at, uniform));
        }
        folded
    }
}

/// Fills `out`, output elements `start..start + out.len()`, with folded
/// `steps`, block by block. Inputs that repeat along some dimensions (a
/// bias, a column) are gathered into a block of their own first, so blocks
/// stay full whatever the shapes.
fn fill(steps: &[Folded], plan: &Plan, inputs: &[&[f32]], tiles: &[Vec<f32>], start: usize, out: &mut [f32]) {
    let block = out.len().min(BLOCK);
    let mut scratch = Scratch::new(block);
    let mut gathered: SmallVec<[Vec<f32>; 8]> = plan
        .inputs
        .iter()
        .map(|layout| if matches!(layout, Layout::Strided(_)) { vec![0.0; block] } else { Vec::new() })
        .collect();
    let end = start + out.len();
    let mut at = start;
    while at < end {
        let len = (end - at).min(BLOCK);
        for ((layout, data), buffer) in plan.inputs.iter().zip(inputs).zip(&mut gathered) {
            if let Layout::Strided(strides) = layout {
                plan.gather(strides, data, at, &mut buffer[..len]);
            }
        }
        // Input `k`'s elements for this block, looked up only for the
        // inputs the folded steps read (a single-element input is folded
        // into them).
        let gathered = &gathered;
        let operand = |k: usize| -> &[f32] {
            match plan.inputs[k] {
                Layout::Full => &inputs[k][at..at + len],
                Layout::Single => unreachable!("Program::fold turns single-element inputs into values"),
                Layout::Periodic(period) => &tiles[k][at % period..at % period + len],
                Layout::Strided(_) => &gathered[k][..len],
            }
        };
        eval(steps, operand, &mut scratch, &mut out[at - start..at - start + len]);
        at += len;
    }
}

/// `op` on one element, as its kernel computes it.
fn unary_scalar(op: UnaryOp, x: f32) -> f32 {
    let mut y = [0.0];
    op.run(&[x], &mut y);
    y[0]
}

/// `op` on one pair of elements, as its kernel computes it.
fn binary_scalar(op: BinaryOp, x: f32, y: f32) -> f32 {
    let mut z = [0.0];
    op.apply_f32(&[x], 0, &[y], 0, &mut z);
    z[0]
}

/// A two-operand step on one pair of elements, as its kernel computes it.
fn two_operand_scalar(step: Step, x: f32, y: f32) -> f32 {
    match step {
        Step::Grad(op) => {
            let mut z = [0.0];
            op.run(&[x], &[y], &mut z);
            z[0]
        }
        _ => binary_scalar(step.binary_op(), x, y),
    }
}

/// `op` over a span whose operands have an element each per output element
/// (step 1) or one repeated (step 0): the kernel's own element function.
fn grad_span(op: GradOp, (x, x_step): (&[f32], usize), (y, y_step): (&[f32], usize), dest: &mut [f32]) {
    if x_step == 1 && y_step == 1 {
        return op.run(&x[..dest.len()], &y[..dest.len()], dest);
    }
    // A repeated operand. `y` and `dy` have one shape, so one of them is a
    // single element only if both are, and then `Program::fold` computed the
    // step already; kept for safety: spell the repeat out.
    let spread = |v: &[f32], step: usize| -> Vec<f32> { (0..dest.len()).map(|i| v[i * step]).collect() };
    op.run(&spread(x, x_step), &spread(y, y_step), dest);
}

/// A step as one execution runs it ([`Program::fold`]).
#[derive(Debug, Clone, Copy)]
enum Folded {
    /// Push input `k`, which has a value per element.
    Input(usize),
    /// Push a value shared by every element.
    Uniform(f32),
    /// A `Unary`, `Binary`, `BiasAdd` or `Grad` step with at least one operand that
    /// has a value per element.
    Op(Step),
}

/// Evaluates folded `steps` on one span of `out.len()` elements.
fn eval<'a>(steps: &[Folded], operand: impl Fn(usize) -> &'a [f32], scratch: &mut Scratch, out: &mut [f32]) {
    let len = out.len();
    let last = steps.len() - 1;
    let mut stack = SmallVec::<[Value; MAX_DEPTH]>::new();
    for (i, step) in steps.iter().enumerate() {
        let value = match *step {
            Folded::Input(k) => Value::Input(operand(k)),
            Folded::Uniform(v) => Value::Uniform(v),
            Folded::Op(Step::Unary(op)) => match pop(&mut stack) {
                Value::Uniform(_) => unreachable!("Program::fold computes unary steps of uniform values"),
                x => scratch.write(i == last, out, &[x], |buffers, dest| op.run(view(buffers, &x, len).0, dest)),
            },
            // A uniform operand is read with step 0: one element, repeated.
            Folded::Op(step) => {
                let (y, x) = (pop(&mut stack), pop(&mut stack));
                scratch.write(i == last, out, &[x, y], |buffers, dest| {
                    let ((x, x_step), (y, y_step)) = (view(buffers, &x, len), view(buffers, &y, len));
                    match step {
                        Step::Grad(op) => grad_span(op, (x, x_step), (y, y_step), dest),
                        _ => {
                            step.binary_op().apply_f32(x, x_step, y, y_step, dest);
                        }
                    }
                })
            }
        };
        stack.push(value);
    }
    match pop(&mut stack) {
        Value::Uniform(v) => out.fill(v),
        Value::Input(x) => out.copy_from_slice(&x[..len]),
        // The last step wrote into `out`.
        Value::Out => {}
        Value::Buffer(_) => unreachable!("the last step writes to the output"),
    }
}

/// The top of a span's operand stack.
fn pop<T>(stack: &mut SmallVec<[T; MAX_DEPTH]>) -> T {
    // `Program::new` proved the stack never underflows.
    stack.pop().expect("a validated program never pops an empty stack")
}

/// What a stack slot holds during one span.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    /// The same value for every element of the span.
    Uniform(f32),
    /// The span's elements of an input.
    Input(&'a [f32]),
    /// Scratch buffer `k`.
    Buffer(usize),
    /// The span's output (only ever the last value).
    Out,
}

/// A value's elements for a span of `len`, and their step (0: one element,
/// repeated).
fn view<'v>(buffers: &'v [Vec<f32>], value: &'v Value<'_>, len: usize) -> (&'v [f32], usize) {
    match value {
        Value::Uniform(v) => (std::slice::from_ref(v), 0),
        Value::Input(x) => (&x[..len], 1),
        Value::Buffer(k) => (&buffers[*k][..len], 1),
        Value::Out => unreachable!("the output is never an operand"),
    }
}

/// The scratch blocks of one chunk. Every buffer is either on the span's
/// operand stack or in the free list.
struct Scratch {
    buffers: Vec<Vec<f32>>,
    free: Vec<usize>,
    block: usize,
}

impl Scratch {
    fn new(block: usize) -> Self {
        Scratch { buffers: Vec::new(), free: Vec::new(), block }
    }

    /// Runs `compute(buffers, dest)` for a step whose operands were
    /// `popped`: `dest` is the span's output for the program's last step,
    /// else a free scratch buffer. Then frees the operands' buffers.
    fn write<'v>(
        &mut self,
        last: bool,
        out: &mut [f32],
        popped: &[Value<'v>],
        compute: impl FnOnce(&[Vec<f32>], &mut [f32]),
    ) -> Value<'v> {
        let value = if last {
            compute(&self.buffers, out);
            Value::Out
        } else {
            let k = self.free.pop().unwrap_or_else(|| {
                self.buffers.push(vec![0.0; self.block]);
                self.buffers.len() - 1
            });
            // Taken out while the step reads the other buffers; `k` is not
            // one of the operands (they are released only below).
            let mut dest = std::mem::take(&mut self.buffers[k]);
            compute(&self.buffers, &mut dest[..out.len()]);
            self.buffers[k] = dest;
            Value::Buffer(k)
        };
        self.free.extend(popped.iter().filter_map(|v| match v {
            Value::Buffer(k) => Some(*k),
            _ => None,
        }));
        value
    }
}

/// How each input maps onto the output.
#[derive(Debug)]
struct Plan {
    shape: Dims,
    len: usize,
    inputs: SmallVec<[Layout; 8]>,
}

#[derive(Debug)]
enum Layout {
    /// As many elements as the output, in the same order.
    Full,
    /// One element, repeated.
    Single,
    /// `len` elements repeating along the output: the input's shape (past
    /// its leading 1s) is the output's innermost dimensions, like a bias.
    /// Read from a tile of the pattern repeated to [`BLOCK`] + `len`
    /// elements (built once per execution, see [`Plan::tiles`]), so every
    /// block is one slice of it.
    Periodic(usize),
    /// Element strides along each output dimension (0 where it repeats).
    Strided(Dims),
}

/// Longest pattern read through a tile; longer ones are gathered per block
/// (in runs of at least this length, which copy fast).
const MAX_TILE_PERIOD: usize = 16 * 1024;

impl Plan {
    /// The layouts of inputs with these shapes against `shape`, the output
    /// shape [`Program::output_shape`] checked: the broadcast of them all,
    /// since a program reads every input.
    fn new(shapes: &[&[usize]], shape: Dims) -> Result<Self, Error> {
        let rank = shape.len();
        let dim_of = |shape: &[usize], i: usize| if i + shape.len() < rank { 1 } else { shape[i + shape.len() - rank] };
        let len = element_count(&shape).ok_or_else(|| {
            Error::InvalidArgument(format!("{OP}: output shape {} is too large", ShapeDisplay(&shape)))
        })?;
        let inputs = shapes
            .iter()
            .map(|s| {
                let count = element_count(s).unwrap_or(usize::MAX);
                if count == len {
                    Layout::Full
                } else if count == 1 {
                    Layout::Single
                } else if count <= MAX_TILE_PERIOD && {
                    let core = &s[s.iter().position(|&d| d != 1).unwrap_or(s.len())..];
                    core == &shape[rank - core.len()..]
                } {
                    Layout::Periodic(count)
                } else {
                    let mut strides: Dims = smallvec::smallvec![0; rank];
                    let mut stride = 1;
                    for i in (0..rank).rev() {
                        let d = dim_of(s, i);
                        if d != 1 {
                            strides[i] = stride;
                            stride *= d;
                        }
                    }
                    Layout::Strided(strides)
                }
            })
            .collect();
        Ok(Plan { shape, len, inputs })
    }

    fn check(&self, inputs: &[&[f32]], out_len: usize) -> Result<(), Error> {
        if out_len != self.len || inputs.len() != self.inputs.len() {
            return Err(Error::Internal(format!(
                "{OP}: {} inputs and {out_len} outputs for a plan of {}",
                inputs.len(),
                self.len
            )));
        }
        for (k, (data, layout)) in inputs.iter().zip(&self.inputs).enumerate() {
            let needed = match layout {
                Layout::Full => self.len,
                Layout::Single => 1,
                Layout::Periodic(period) => *period,
                // The last element a stride reaches, plus one.
                Layout::Strided(strides) => {
                    1 + strides.iter().zip(&self.shape).map(|(s, d)| s * (d - 1)).sum::<usize>()
                }
            };
            if self.len > 0 && data.len() < needed {
                return Err(Error::InvalidArgument(format!(
                    "{OP}: input {k} has {} elements, needs {needed}",
                    data.len()
                )));
            }
        }
        Ok(())
    }

    /// The tile of each periodic input (empty for the others).
    fn tiles(&self, inputs: &[&[f32]]) -> SmallVec<[Vec<f32>; 8]> {
        self.inputs
            .iter()
            .zip(inputs)
            .map(|(layout, data)| match *layout {
                Layout::Periodic(period) => data[..period].iter().copied().cycle().take(period + BLOCK).collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// Copies the elements of a strided input for output elements
    /// `at..at + out.len()` into `out`: row by row of the innermost output
    /// dimension, each row a copy (or a fill where the input repeats along
    /// it), the row's offset advanced like an odometer.
    fn gather(&self, strides: &[usize], data: &[f32], at: usize, out: &mut [f32]) {
        let rank = self.shape.len();
        let (row_len, inner) = (self.shape[rank - 1], strides[rank - 1]);
        let (mut row, mut column) = (at / row_len, at % row_len);
        let mut index: SmallVec<[usize; 6]> = smallvec::smallvec![0; rank - 1];
        let mut offset = 0;
        for i in (0..rank - 1).rev() {
            index[i] = row % self.shape[i];
            offset += index[i] * strides[i];
            row /= self.shape[i];
        }
        let mut filled = 0;
        while filled < out.len() {
            let run = (row_len - column).min(out.len() - filled);
            let dst = &mut out[filled..filled + run];
            if inner == 0 {
                dst.fill(data[offset]);
            } else {
                dst.copy_from_slice(&data[offset + column..offset + column + run]);
            }
            filled += run;
            column += run;
            if column == row_len {
                column = 0;
                for i in (0..rank - 1).rev() {
                    index[i] += 1;
                    offset += strides[i];
                    if index[i] < self.shape[i] {
                        break;
                    }
                    offset -= strides[i] * self.shape[i];
                    index[i] = 0;
                }
            }
        }
    }
}

/// The kernel: one node's program.
#[derive(Debug)]
pub struct FusedKernel {
    program: Program,
}

impl FusedKernel {
    pub fn new(attrs: &dyn Attrs) -> Result<Self, Error> {
        let inputs =
            usize::try_from(attrs.int("N")?).map_err(|_| Error::InvalidArgument(format!("{OP}: negative N")))?;
        let expr = attrs.string("expr")?;
        let program =
            Program::parse(&expr, inputs).map_err(|e| Error::InvalidArgument(format!("{OP}: expr {expr:?}: {e}")))?;
        Ok(FusedKernel { program })
    }
}

impl Kernel for FusedKernel {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        super::expect_inputs(OP, ctx, self.program.inputs())?;
        let tensors = (0..self.program.inputs()).map(|k| ctx.input(k)).collect::<Result<Vec<_>, _>>()?;
        let shapes: SmallVec<[&[usize]; 8]> = tensors.iter().map(|t| t.shape()).collect();
        // Each step's shapes as the unfused op checks them; the plan then
        // lays every input out against the output shape.
        let plan = Plan::new(&shapes, self.program.output_shape(&shapes)?)?;
        let mut out = ctx.allocate_output(0, &plan.shape)?;
        if plan.len == 0 {
            return Ok(());
        }
        let data = tensors.iter().map(|t| t.data::<f32>()).collect::<Result<SmallVec<[&[f32]; 8]>, _>>()?;
        let out = out.data_mut::<f32>()?;
        plan.check(&data, out.len())?;
        let tiles = plan.tiles(&data);
        let steps = self.program.fold(&plan, &data);
        fill_chunked(out, |start, chunk| fill(&steps, &plan, &data, &tiles, start, chunk));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::BinaryPlan;
    use crate::tensor::{DType, LocalContext, Tensor};

    struct FusedAttrs {
        n: i64,
        expr: &'static str,
    }

    impl Attrs for FusedAttrs {
        fn has(&self, name: &str) -> bool {
            matches!(name, "N" | "expr")
        }
        fn bool(&self, name: &str) -> Result<bool, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn int(&self, name: &str) -> Result<i64, Error> {
            if name == "N" {
                Ok(self.n)
            } else {
                Err(Error::Internal(format!("no attribute {name}")))
            }
        }
        fn float(&self, name: &str) -> Result<f32, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
            Err(Error::Internal(format!("no attribute {name}")))
        }
        fn string(&self, name: &str) -> Result<String, Error> {
            if name == "expr" {
                Ok(self.expr.to_owned())
            } else {
                Err(Error::Internal(format!("no attribute {name}")))
            }
        }
        fn dtype(&self, _: &str) -> Result<DType, Error> {
            Ok(DType::F32)
        }
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        (0..len)
            .map(|i| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let v = (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0;
                // Zeros (for DivNoNan and Sqrt's edge) and the odd NaN.
                match i % 23 {
                    3 => 0.0,
                    11 => f32::NAN,
                    _ => v,
                }
            })
            .collect()
    }

    /// The unfused result: every step run by the op's own kernel code on
    /// whole (broadcast) tensors, one after the other.
    fn unfused(program: &Program, inputs: &[(Vec<usize>, Vec<f32>)]) -> (Vec<usize>, Vec<f32>) {
        let mut stack: Vec<(Vec<usize>, Vec<f32>)> = Vec::new();
        for step in program.steps() {
            let value = match *step {
                Step::Input(k) => inputs[k].clone(),
                Step::Unary(op) => {
                    let (shape, x) = stack.pop().unwrap();
                    let mut y = vec![0.0; x.len()];
                    op.run(&x, &mut y);
                    (shape, y)
                }
                Step::Grad(op) => {
                    let (_, dy) = stack.pop().unwrap();
                    let (shape, y) = stack.pop().unwrap();
                    let mut out = vec![0.0; y.len()];
                    op.run(&y, &dy, &mut out);
                    (shape, out)
                }
                Step::Binary(_) | Step::BiasAdd => {
                    let (b_shape, b) = stack.pop().unwrap();
                    let (a_shape, a) = stack.pop().unwrap();
                    let plan = BinaryPlan::new(step.binary_op(), &a_shape, &b_shape).unwrap();
                    let mut out = vec![0.0; plan.output_len()];
                    plan.run(&a, &b, &mut out).unwrap();
                    (plan.output_shape().to_vec(), out)
                }
            };
            stack.push(value);
        }
        stack.pop().unwrap()
    }

    fn fused(expr: &'static str, inputs: &[(Vec<usize>, Vec<f32>)]) -> Result<Tensor, Error> {
        let kernel = FusedKernel::new(&FusedAttrs { n: inputs.len() as i64, expr })?;
        let tensors = inputs.iter().map(|(s, v)| Tensor::from_vec(s, v.clone()).unwrap()).collect();
        Ok(LocalContext::run(&kernel, tensors, &[DType::F32])?.remove(0))
    }

    /// Fused and unfused agree bit for bit (NaN with NaN) on these shapes.
    fn check(expr: &'static str, shapes: &[&[usize]]) {
        let inputs: Vec<(Vec<usize>, Vec<f32>)> =
            shapes.iter().enumerate().map(|(k, s)| (s.to_vec(), values(s.iter().product(), k as u32 + 1))).collect();
        let program = Program::parse(expr, inputs.len()).unwrap();
        let (want_shape, want) = unfused(&program, &inputs);
        let got = fused(expr, &inputs).unwrap();
        assert_eq!(got.shape(), want_shape.as_slice(), "{expr} {shapes:?}");
        let got = got.to_vec::<f32>().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{expr} {shapes:?} @{i}: {g} vs {w}");
        }
    }

    /// Keras' Adam: `m·α / (√v + ε)` with α and ε scalars, and α's own
    /// scalar tree (bias corrections from the step count).
    const ADAM_UPDATE: &str = "$0 $1 Mul $2 Sqrt $3 AddV2 RealDiv";
    const ADAM_ALPHA: &str = "$0 $1 $2 $3 Pow Sub Sqrt Mul $1 $4 $3 Pow Sub RealDiv";

    #[test]
    fn fused_matches_the_unfused_kernels_bit_for_bit() {
        for shapes in [
            &[&[5usize, 7][..], &[], &[5, 7], &[]][..],
            &[&[1], &[], &[1], &[1]],
            &[&[1, 1], &[1], &[], &[1, 1]],
            &[&[13, 17], &[1, 1], &[13, 17], &[]],
            // Broadcast in every direction: rows, columns, a prime length.
            &[&[3, 1], &[1, 5], &[5], &[3, 5]],
            &[&[2, 3, 1], &[3, 1], &[1, 7], &[]],
            // Large enough to split across the pool, with spans cut mid-row.
            &[&[301, 257], &[], &[301, 257], &[257]],
            &[&[600, 300], &[600, 1], &[600, 300], &[]],
        ] {
            check(ADAM_UPDATE, shapes);
        }
        check(ADAM_ALPHA, &[&[], &[], &[], &[], &[]]);
        check("$0 $1 Sub $2 Mul", &[&[784, 512], &[784, 512], &[]]);
        check("$0 Square $1 Sub $2 Mul", &[&[511], &[511], &[]]);
        // Every op a program may hold, deep enough to need several buffers.
        check("$0 Exp $1 Tanh $0 Sigmoid Mul AddV2 Log1p Neg Abs Rsqrt $1 Relu6 Maximum", &[&[1031], &[1031]]);
        check("$0 Elu Selu Softplus Softsign Erf Sign $1 Floor $0 Ceil Round Minimum Pow", &[&[64, 3], &[3]]);
        // Exact GELU as TensorFlow writes it: 0.5·x·erfc(-x·(1/√2)).
        check("$1 $0 Mul $0 Neg $2 Mul Erfc Mul", &[&[257, 131], &[], &[]]);
        check("$0 $1 DivNoNan $0 $1 SquaredDifference Add $0 Reciprocal Inv Relu Log Sub", &[&[9, 40], &[40]]);
        // A layer's bias and activation: a bias of 8 channels repeats every
        // 8 elements (gathered per block), one of 1531 spans blocks.
        check("$0 $1 BiasAdd Relu", &[&[64, 28, 28, 8], &[8]]);
        check("$0 $1 BiasAdd Relu", &[&[128, 512], &[512]]);
        check("$0 $1 BiasAdd Relu", &[&[7, 1531], &[1531]]);
        check("$0 $1 BiasAdd $2 Mul", &[&[3, 1, 5], &[5], &[7, 1, 1, 1]]);
        // Inputs that repeat along inner and outer dimensions at once.
        check("$0 $1 Mul $2 Add", &[&[5, 1, 7], &[1, 3, 1], &[3, 7]]);
        // A program that is only an input (a copy), or only scalars.
        check("$0", &[&[6]]);
        check("$0 $1 Mul Exp", &[&[], &[1, 1]]);
        // An LSTM step's gate gradients: SigmoidGrad(i, dc·g), TanhGrad(g,
        // dc·i), and the cell's TanhGrad(tanh c, dh·o) summed with dc; large
        // enough for the pool, and of single elements (folded).
        for shape in [&[64usize, 64][..], &[1031], &[301, 257], &[1, 1]] {
            check("$0 $1 $2 Mul SigmoidGrad", &[shape, shape, shape]);
            check("$0 $1 $2 Mul TanhGrad $3 AddV2", &[shape, shape, shape, shape]);
        }
        check("$0 $1 TanhGrad $2 Mul", &[&[1, 1], &[1, 1], &[5, 3]]);
    }

    #[test]
    fn gradients_need_operands_of_one_shape() {
        for (y, dy) in [(vec![4, 3], vec![3, 4]), (vec![12], vec![4, 3]), (vec![4, 3], vec![3])] {
            let inputs = [(y.clone(), vec![0.5; y.iter().product()]), (dy.clone(), vec![1.0; dy.iter().product()])];
            for op in ["TanhGrad", "SigmoidGrad"] {
                let expr = if op == "TanhGrad" { "$0 $1 TanhGrad" } else { "$0 $1 SigmoidGrad" };
                let error = fused(expr, &inputs).unwrap_err().to_string();
                assert!(error.contains(op) && error.contains("same shape"), "{error}");
            }
        }
    }

    /// Keras' Adam update of a variable as the graph pass fuses it:
    /// `var - m·α / (ε + √v)` with `α = lr·√(1-β₂ᵗ) / (1-β₁ᵗ)`; `$0` is the
    /// variable, `$1` m, `$8` v, the rest scalars.
    const KERAS_ADAM_VARIABLE: &str =
        "$0 $1 $2 $3 $4 $5 Pow Sub Sqrt Mul $3 $6 $5 Pow Sub RealDiv Mul $7 $8 Sqrt AddV2 RealDiv Sub";

    #[test]
    fn scalar_subtrees_fold_once_per_execution() {
        let full: &[usize] = &[301, 257];
        let shapes: [&[usize]; 9] = [full, full, &[], &[], &[], &[], &[], &[], full];
        check(KERAS_ADAM_VARIABLE, &shapes);
        check(KERAS_ADAM_VARIABLE, &[&[13, 17], &[13, 17], &[], &[1], &[], &[1, 1], &[], &[], &[13, 17]]);

        // Fourteen scalar steps become one value; so does ε. Five steps
        // remain per block.
        let program = Program::parse(KERAS_ADAM_VARIABLE, 9).unwrap();
        // lr, 1, β₂, t, β₁, ε; 0.5 for the tensors.
        let scalars = [0.001, 1.0, 0.999, 3.0, 0.9, 1e-7];
        let data: Vec<Vec<f32>> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| vec![*scalars.get(k.wrapping_sub(2)).unwrap_or(&0.5); s.iter().product()])
            .collect();
        let inputs: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
        let plan = Plan::new(&shapes, program.output_shape(&shapes).unwrap()).unwrap();
        let folded = program.fold(&plan, &inputs);
        let render = |step: &Folded| match *step {
            Folded::Input(k) => format!("${k}"),
            Folded::Uniform(_) => "u".to_owned(),
            Folded::Op(step) => step.name(),
        };
        let rendered: Vec<String> = folded.iter().map(render).collect();
        assert_eq!(rendered.join(" "), "$0 $1 u Mul u $8 Sqrt AddV2 RealDiv Sub");
        let alpha = 0.001 * (1.0 - binary_scalar(BinaryOp::Pow, 0.999, 3.0)).sqrt()
            / (1.0 - binary_scalar(BinaryOp::Pow, 0.9, 3.0));
        assert!(matches!(folded[2], Folded::Uniform(v) if v == alpha), "{:?}", folded[2]);

        // Scalars of any rank fold; a one-element output reads its inputs.
        let program = Program::parse("$0 $1 Mul Exp $2 AddV2", 3).unwrap();
        for (shapes, want) in
            [([&[][..], &[1, 1], &[4]], "u $2 AddV2"), ([&[], &[1, 1], &[1]], "$0 $1 Mul Exp $2 AddV2")]
        {
            let plan = Plan::new(&shapes, program.output_shape(&shapes).unwrap()).unwrap();
            let folded = program.fold(&plan, &[&[2.0], &[0.5], &[1.0; 4]]);
            let rendered: Vec<String> = folded.iter().map(render).collect();
            assert_eq!(rendered.join(" "), want);
        }
    }

    #[test]
    fn empty_outputs_compute_nothing() {
        for shapes in [&[&[0usize][..], &[]][..], &[&[0, 3], &[3]], &[&[4, 0], &[1, 0]]] {
            let inputs: Vec<_> = shapes.iter().map(|s| (s.to_vec(), vec![1.0; s.iter().product()])).collect();
            let out = fused("$0 $1 AddV2", &inputs).unwrap();
            assert_eq!(out.len(), 0, "{shapes:?}");
        }
    }

    #[test]
    fn incompatible_shapes_fail_naming_the_op() {
        let inputs = [(vec![3], vec![1.0; 3]), (vec![2, 4], vec![1.0; 8])];
        let error = fused("$0 $1 Mul", &inputs).unwrap_err().to_string();
        assert!(error.contains(OP) && error.contains("Incompatible shapes"), "{error}");
    }

    #[test]
    fn bias_add_keeps_its_shape_rules() {
        for (shapes, why) in [
            (&[&[5usize][..], &[5]][..], "at least 2D"),
            (&[&[2, 5], &[1, 5]], "Biases must be 1D"),
            (&[&[2, 5], &[4]], "as many biases"),
        ] {
            let inputs: Vec<_> = shapes.iter().map(|s| (s.to_vec(), vec![1.0; s.iter().product()])).collect();
            let error = fused("$0 $1 BiasAdd", &inputs).unwrap_err().to_string();
            assert!(error.contains("BiasAdd") && error.contains(why), "{shapes:?}: {error}");
        }
        // An add would broadcast [2, 5] + [1, 5]; the error names the step.
        let inputs = [(vec![2, 5], vec![1.0; 10]), (vec![3], vec![1.0; 3])];
        let error = fused("$0 Neg $1 Sub", &inputs).unwrap_err().to_string();
        assert!(error.contains("step 3, Sub") && error.contains("Incompatible shapes: [2,5] vs. [3]"), "{error}");
    }

    #[test]
    fn malformed_programs_are_refused_at_construction() {
        for (expr, n, why) in [
            ("$0 $1", 2, "leaves 2 values"),
            ("$0 Mul", 1, "pops an empty stack"),
            ("$2", 2, "reads input $2"),
            ("$0 Cast", 1, "\"Cast\" is not an op"),
            ("$x", 1, "bad input reference"),
            ("$1", 2, "never reads input $0"),
            ("", 1, "leaves 0 values"),
            ("$0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0 $0", 1, "deeper than"),
        ] {
            let error = FusedKernel::new(&FusedAttrs { n, expr }).unwrap_err().to_string();
            assert!(error.contains(OP) && error.contains(why), "{expr:?}: {error}");
        }
        let long = "$0 ".to_owned() + &"Neg ".repeat(MAX_STEPS);
        assert!(Program::parse(&long, 1).unwrap_err().contains("steps"));
        assert!(FusedKernel::new(&FusedAttrs { n: -1, expr: "$0" }).is_err());
    }

    #[test]
    fn expr_round_trips() {
        for (expr, inputs) in [(ADAM_UPDATE, 4), (ADAM_ALPHA, 5), ("$0 Inv", 1), ("$0 $1 Add", 2)] {
            let program = Program::parse(expr, inputs).unwrap();
            // Aliases (`Inv`, `Add`) come back as the name of their kernel.
            let again = Program::parse(&program.expr(), inputs).unwrap();
            assert_eq!(program, again);
        }
        assert_eq!(Program::parse(ADAM_UPDATE, 4).unwrap().expr(), ADAM_UPDATE);
    }
}
