//! From an `HloModuleProto` to a [`Program`]: every reachable instruction of
//! the entry computation becomes a [`Step`] over tfwasm's kernels (or an
//! alias of its operand's bytes), and every step's output gets a slot of
//! memory, reused once its value is dead.
//!
//! Stage 1 runs elementwise chains unfused, one step per instruction.

use std::collections::HashMap;

use tfwasm_kernels::binary::BinaryPlan;
use tfwasm_kernels::error::Error as KernelError;
use tfwasm_kernels::matmul::BatchMatMulPlan;
use tfwasm_kernels::{Attrs, BinaryOp, DType, Kernel, MatMulAttrs, MatMulPlan};
use tfwasm_proto::hlo::{HloComputationProto, HloInstructionProto, HloModuleProto};

use crate::buffer::{ArrayShape, ElementType, HostBuffer};
use crate::error::{short_name, Origin, Site, XlaError};
use crate::hlo::{self, Computation, Shape};
use crate::literal::literal_to_buffer;

/// Where a value's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    /// The caller's argument.
    Param(usize),
    /// One of the program's constants.
    Const(usize),
    /// A slot of the run's arena (before slot assignment: the step that
    /// defines it).
    Slot(usize),
}

/// An array value: where it is, and how it is seen (a reshape sees the same
/// bytes with other dimensions, a bitcast-convert with another type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueRef {
    pub loc: Loc,
    pub shape: ArrayShape,
}

#[derive(Debug, Clone)]
enum Value {
    Array(ValueRef),
    Tuple(Vec<Value>),
}

/// Elementwise binary ops (same-shaped operands, as HLO requires).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Max,
    Min,
    Pow,
    And,
    Or,
    Xor,
}

impl BinaryKind {
    fn of(opcode: &str) -> Option<BinaryKind> {
        Some(match opcode {
            "add" => BinaryKind::Add,
            "subtract" => BinaryKind::Sub,
            "multiply" => BinaryKind::Mul,
            "divide" => BinaryKind::Div,
            "remainder" => BinaryKind::Rem,
            "maximum" => BinaryKind::Max,
            "minimum" => BinaryKind::Min,
            "power" => BinaryKind::Pow,
            "and" => BinaryKind::And,
            "or" => BinaryKind::Or,
            "xor" => BinaryKind::Xor,
            _ => return None,
        })
    }

    /// The float32 kernel op computing it, where there is one.
    pub(crate) fn f32_kernel(self) -> Option<BinaryOp> {
        Some(match self {
            BinaryKind::Add => BinaryOp::Add,
            BinaryKind::Sub => BinaryOp::Sub,
            BinaryKind::Mul => BinaryOp::Mul,
            BinaryKind::Div => BinaryOp::RealDiv,
            BinaryKind::Max => BinaryOp::Maximum,
            BinaryKind::Min => BinaryOp::Minimum,
            BinaryKind::Pow => BinaryOp::Pow,
            _ => return None,
        })
    }

    fn supports(self, ty: ElementType) -> bool {
        let bitwise = matches!(self, BinaryKind::And | BinaryKind::Or | BinaryKind::Xor);
        match ty {
            ElementType::Pred => bitwise,
            ElementType::F32 | ElementType::F64 => !bitwise,
            ElementType::S32 | ElementType::S64 | ElementType::U8 | ElementType::U64 => true,
            ElementType::F16 | ElementType::BF16 => false,
        }
    }
}

/// Elementwise unary ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnaryKind {
    Neg,
    Abs,
    Sign,
    Exp,
    Expm1,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Tanh,
    Logistic,
    Floor,
    Ceil,
    RoundEven,
    Sin,
    Cos,
    Tan,
    Erf,
    Not,
    IsFinite,
}

impl UnaryKind {
    fn of(opcode: &str) -> Option<UnaryKind> {
        Some(match opcode {
            "negate" => UnaryKind::Neg,
            "abs" => UnaryKind::Abs,
            "sign" => UnaryKind::Sign,
            "exponential" => UnaryKind::Exp,
            "exponential-minus-one" => UnaryKind::Expm1,
            "log" => UnaryKind::Log,
            "log-plus-one" => UnaryKind::Log1p,
            "sqrt" => UnaryKind::Sqrt,
            "rsqrt" => UnaryKind::Rsqrt,
            "tanh" => UnaryKind::Tanh,
            "logistic" => UnaryKind::Logistic,
            "floor" => UnaryKind::Floor,
            "ceil" => UnaryKind::Ceil,
            "round-nearest-even" => UnaryKind::RoundEven,
            "sine" => UnaryKind::Sin,
            "cosine" => UnaryKind::Cos,
            "tan" => UnaryKind::Tan,
            "erf" => UnaryKind::Erf,
            "not" => UnaryKind::Not,
            "is-finite" => UnaryKind::IsFinite,
            _ => return None,
        })
    }

    fn supports(self, ty: ElementType, out: ElementType) -> bool {
        match self {
            UnaryKind::IsFinite => matches!(ty, ElementType::F32 | ElementType::F64) && out == ElementType::Pred,
            _ if ty != out => false,
            UnaryKind::Not => !matches!(ty, ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16),
            UnaryKind::Neg | UnaryKind::Abs | UnaryKind::Sign => {
                !matches!(ty, ElementType::Pred | ElementType::F16 | ElementType::BF16)
            }
            UnaryKind::Erf => ty == ElementType::F32,
            _ => matches!(ty, ElementType::F32 | ElementType::F64),
        }
    }
}

/// Comparison directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Direction {
    fn of(name: &str) -> Option<Direction> {
        Some(match name {
            "EQ" => Direction::Eq,
            "NE" => Direction::Ne,
            "LT" => Direction::Lt,
            "LE" => Direction::Le,
            "GT" => Direction::Gt,
            "GE" => Direction::Ge,
            _ => return None,
        })
    }

    pub(crate) fn kernel_op(self) -> BinaryOp {
        match self {
            Direction::Eq => BinaryOp::Equal,
            Direction::Ne => BinaryOp::NotEqual,
            Direction::Lt => BinaryOp::Less,
            Direction::Le => BinaryOp::LessEqual,
            Direction::Gt => BinaryOp::Greater,
            Direction::Ge => BinaryOp::GreaterEqual,
        }
    }
}

/// The combining op of a reduce's `to_apply` computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reducer {
    Add,
    Mul,
    Max,
    Min,
    And,
    Or,
}

impl Reducer {
    pub(crate) fn as_binary(self) -> BinaryKind {
        match self {
            Reducer::Add => BinaryKind::Add,
            Reducer::Mul => BinaryKind::Mul,
            Reducer::Max => BinaryKind::Max,
            Reducer::Min => BinaryKind::Min,
            Reducer::And => BinaryKind::And,
            Reducer::Or => BinaryKind::Or,
        }
    }

    /// The float32 kernel that reduces this way, and its identity.
    fn f32_kernel(self) -> Option<(&'static str, f32)> {
        Some(match self {
            Reducer::Add => ("Sum", 0.0),
            Reducer::Mul => ("Prod", 1.0),
            Reducer::Max => ("Max", f32::NEG_INFINITY),
            Reducer::Min => ("Min", f32::INFINITY),
            _ => return None,
        })
    }
}

/// What a step computes.
pub(crate) enum StepOp {
    /// A tfwasm kernel, on the step's inputs (each seen with the given
    /// dimensions, or its own), then `extra` constant inputs (a
    /// permutation, a shape, axes: what TensorFlow's op takes as tensors).
    Kernel {
        kernel: Box<dyn Kernel>,
        views: Vec<Option<Vec<usize>>>,
        extra: Vec<HostBuffer>,
    },
    /// A float32 product of two matrices.
    MatMul(MatMulPlan),
    /// A float32 product per batch.
    BatchMatMul(BatchMatMulPlan),
    /// Another type's product, by hand: `[batch, m, k] · [batch, k, n]`
    /// with the operands possibly transposed.
    NaiveDot {
        batch: usize,
        m: usize,
        k: usize,
        n: usize,
        transpose_a: bool,
        transpose_b: bool,
    },
    /// Elementwise, same shapes.
    Binary {
        kind: BinaryKind,
        plan: BinaryPlan,
    },
    Unary(UnaryKind),
    /// Elementwise comparison into `pred`.
    Compare {
        plan: BinaryPlan,
    },
    /// Elementwise type conversion.
    Convert,
    /// `out[..., i, ...] = i` along `dim`.
    Iota {
        dim: usize,
    },
    /// A float32 reduction by a kernel (`Sum`, `Max`, ...) over `axes`, then
    /// combined with the init value unless that is the reducer's identity.
    /// An empty input gives the init value.
    ReduceF32 {
        kernel: Box<dyn Kernel>,
        axes: HostBuffer,
        reducer: Reducer,
        init_is_identity: bool,
    },
    /// Another type's reduction, by hand.
    Reduce {
        reducer: Reducer,
        reduced: Vec<bool>,
    },
}

/// One instruction to run.
pub(crate) struct Step {
    pub instruction: String,
    pub opcode: String,
    pub origin: Origin,
    pub op: StepOp,
    pub inputs: Vec<ValueRef>,
    pub output: ValueRef,
}

/// A module planned: what [`crate::Executable`] runs.
pub(crate) struct Program {
    pub name: String,
    pub params: Vec<ArrayShape>,
    pub constants: Vec<HostBuffer>,
    pub steps: Vec<Step>,
    /// Bytes of each slot of a run's arena.
    pub slot_bytes: Vec<usize>,
    /// The root's arrays, in order (one unless the root is a tuple).
    pub outputs: Vec<ValueRef>,
    pub tuple_result: bool,
}

/// Attributes for the kernels the planner builds: integers only.
struct IntAttrs(&'static [(&'static str, i64)]);

impl Attrs for IntAttrs {
    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| *n == name)
    }
    fn bool(&self, name: &str) -> Result<bool, KernelError> {
        Err(KernelError::Internal(format!("no attribute {name}")))
    }
    fn int(&self, name: &str) -> Result<i64, KernelError> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .ok_or_else(|| KernelError::Internal(format!("no attribute {name}")))
    }
    fn float(&self, name: &str) -> Result<f32, KernelError> {
        Err(KernelError::Internal(format!("no attribute {name}")))
    }
    fn ints(&self, name: &str) -> Result<Vec<i64>, KernelError> {
        Err(KernelError::Internal(format!("no attribute {name}")))
    }
    fn string(&self, name: &str) -> Result<String, KernelError> {
        Err(KernelError::Internal(format!("no attribute {name}")))
    }
    fn dtype(&self, name: &str) -> Result<DType, KernelError> {
        Err(KernelError::Internal(format!("no attribute {name}")))
    }
}

const NO_ATTRS: IntAttrs = IntAttrs(&[]);
const SLICE_ATTRS: IntAttrs = IntAttrs(&[
    ("begin_mask", 0),
    ("end_mask", 0),
    ("ellipsis_mask", 0),
    ("new_axis_mask", 0),
    ("shrink_axis_mask", 0),
]);

/// The kernel tfwasm registers for TensorFlow op `op`. The movement
/// kernels move words of any width, whatever types their registration
/// lists.
fn kernel(op: &str, attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, String> {
    let def = tfwasm_kernels::registered()
        .iter()
        .find(|def| def.op == op)
        .ok_or_else(|| format!("tfwasm-kernels has no {op} kernel"))?;
    def.create(attrs).map_err(|e| e.to_string())
}

fn i64s(values: impl IntoIterator<Item = usize>) -> HostBuffer {
    let values: Vec<i64> = values.into_iter().map(|v| v as i64).collect();
    HostBuffer::from_slice(&[values.len()], &values).unwrap_or_else(|_| unreachable!("a vector of its own length"))
}

/// Plans `module`'s entry computation.
pub(crate) fn plan(module: &HloModuleProto) -> Result<Program, XlaError> {
    let name = short_name(&module.name);
    let invalid = |reason: String| XlaError::Invalid { module: name.clone(), reason };
    let entry = hlo::entry_computation(module).map_err(&invalid)?;
    let computations: HashMap<i64, &HloComputationProto> = module.computations.iter().map(|c| (c.id, c)).collect();
    let comp = Computation::new(entry);
    let root = comp.root().ok_or_else(|| invalid(format!("entry computation {} is empty", entry.name)))?;

    // Only what the root needs runs.
    let mut needed = vec![false; entry.instructions.len()];
    let mut stack = vec![root];
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut needed[i], true) {
            continue;
        }
        for id in &entry.instructions[i].operand_ids {
            let operand = comp.index(*id).ok_or_else(|| {
                invalid(format!(
                    "instruction {} names operand id {id}, which does not exist",
                    entry.instructions[i].name
                ))
            })?;
            stack.push(operand);
        }
    }

    let mut planner = Planner {
        module: name.clone(),
        computations,
        params: Vec::new(),
        constants: Vec::new(),
        steps: Vec::new(),
        values: vec![None; entry.instructions.len()],
        comp: &comp,
    };
    // Every parameter takes an argument, used or not.
    for instr in &entry.instructions {
        if instr.opcode == "parameter" {
            let shape = planner.array_shape(instr)?;
            let number = usize::try_from(instr.parameter_number)
                .map_err(|_| invalid(format!("parameter {} has number {}", instr.name, instr.parameter_number)))?;
            if planner.params.len() <= number {
                planner.params.resize(number + 1, None);
            }
            if planner.params[number].replace(shape).is_some() {
                return Err(invalid(format!("two parameters have number {number}")));
            }
        }
    }
    let params: Vec<ArrayShape> = planner
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| p.clone().ok_or_else(|| invalid(format!("no parameter has number {i}"))))
        .collect::<Result<_, _>>()?;

    for (i, instr) in entry.instructions.iter().enumerate() {
        if needed[i] {
            let value = planner.instruction(instr)?;
            planner.values[i] = Some(value);
        }
    }
    let (outputs, tuple_result) = match planner.values[root].clone() {
        Some(Value::Array(array)) => (vec![array], false),
        Some(Value::Tuple(elements)) => {
            let arrays = elements
                .into_iter()
                .map(|e| match e {
                    Value::Array(a) => Ok(a),
                    Value::Tuple(_) => Err(planner.unsupported(&entry.instructions[root], "a nested tuple result")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            (arrays, true)
        }
        None => unreachable!("the root is needed"),
    };
    let Planner { constants, mut steps, .. } = planner;
    let (slot_bytes, outputs) = assign_slots(&mut steps, outputs);
    Ok(Program { name, params, constants, steps, slot_bytes, outputs, tuple_result })
}

struct Planner<'m, 'c> {
    module: String,
    computations: HashMap<i64, &'m HloComputationProto>,
    params: Vec<Option<ArrayShape>>,
    constants: Vec<HostBuffer>,
    steps: Vec<Step>,
    values: Vec<Option<Value>>,
    comp: &'c Computation<'m>,
}

impl Planner<'_, '_> {
    fn unsupported(&self, instr: &HloInstructionProto, reason: impl Into<String>) -> XlaError {
        XlaError::Unsupported {
            site: Box::new(Site {
                module: self.module.clone(),
                opcode: instr.opcode.clone(),
                instruction: instr.name.clone(),
                origin: Origin::of(instr),
            }),
            reason: reason.into(),
        }
    }

    fn invalid(&self, instr: &HloInstructionProto, reason: impl std::fmt::Display) -> XlaError {
        XlaError::Invalid {
            module: self.module.clone(),
            reason: format!("instruction {} (`{}`, {}): {reason}", instr.name, instr.opcode, Origin::of(instr)),
        }
    }

    fn shape(&self, instr: &HloInstructionProto) -> Result<Shape, XlaError> {
        let proto = instr.shape.as_ref().ok_or_else(|| self.invalid(instr, "no shape"))?;
        hlo::shape(proto).map_err(|reason| self.unsupported(instr, reason))
    }

    fn array_shape(&self, instr: &HloInstructionProto) -> Result<ArrayShape, XlaError> {
        match self.shape(instr)? {
            Shape::Array(shape) => Ok(shape),
            Shape::Tuple(_) => Err(self.unsupported(instr, "a tuple-shaped value here")),
        }
    }

    fn operand(&self, instr: &HloInstructionProto, n: usize) -> Result<&Value, XlaError> {
        let id = instr.operand_ids.get(n).ok_or_else(|| self.invalid(instr, format!("no operand {n}")))?;
        let index = self.comp.index(*id).unwrap_or_else(|| unreachable!("operands were resolved"));
        Ok(self.values[index].as_ref().unwrap_or_else(|| unreachable!("operands are planned first")))
    }

    fn array(&self, instr: &HloInstructionProto, n: usize) -> Result<ValueRef, XlaError> {
        match self.operand(instr, n)? {
            Value::Array(array) => Ok(array.clone()),
            Value::Tuple(_) => Err(self.unsupported(instr, format!("operand {n} is a tuple"))),
        }
    }

    fn arrays(&self, instr: &HloInstructionProto) -> Result<Vec<ValueRef>, XlaError> {
        (0..instr.operand_ids.len()).map(|n| self.array(instr, n)).collect()
    }

    fn expect_operands(&self, instr: &HloInstructionProto, count: usize) -> Result<(), XlaError> {
        if instr.operand_ids.len() == count {
            Ok(())
        } else {
            Err(self.invalid(instr, format!("{} operands, expected {count}", instr.operand_ids.len())))
        }
    }

    fn step(&mut self, instr: &HloInstructionProto, op: StepOp, inputs: Vec<ValueRef>, shape: ArrayShape) -> Value {
        let output = ValueRef { loc: Loc::Slot(self.steps.len()), shape };
        self.steps.push(Step {
            instruction: instr.name.clone(),
            opcode: instr.opcode.clone(),
            origin: Origin::of(instr),
            op,
            inputs,
            output: output.clone(),
        });
        Value::Array(output)
    }

    fn dims_of(&self, instr: &HloInstructionProto, rank: usize) -> Result<Vec<usize>, XlaError> {
        instr
            .dimensions
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d < rank)
                    .ok_or_else(|| self.invalid(instr, format!("dimension {d} out of range for rank {rank}")))
            })
            .collect()
    }

    fn instruction(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        let opcode = instr.opcode.as_str();
        if let Some(kind) = BinaryKind::of(opcode) {
            return self.binary(instr, kind);
        }
        if let Some(kind) = UnaryKind::of(opcode) {
            self.expect_operands(instr, 1)?;
            let shape = self.array_shape(instr)?;
            let x = self.array(instr, 0)?;
            if x.shape.dims != shape.dims {
                return Err(self.invalid(instr, format!("operand {} for result {shape}", x.shape)));
            }
            if !kind.supports(x.shape.ty, shape.ty) {
                return Err(
                    self.unsupported(instr, format!("{opcode} of {} into {} is not implemented", x.shape.ty, shape.ty))
                );
            }
            return Ok(self.step(instr, StepOp::Unary(kind), vec![x], shape));
        }
        match opcode {
            "parameter" => {
                let shape = self.array_shape(instr)?;
                Ok(Value::Array(ValueRef { loc: Loc::Param(instr.parameter_number as usize), shape }))
            }
            "constant" => {
                let literal =
                    instr.literal.as_ref().ok_or_else(|| self.invalid(instr, "a constant without a literal"))?;
                let buffer = literal_to_buffer(literal).map_err(|reason| self.unsupported(instr, reason))?;
                let shape = self.array_shape(instr)?;
                if buffer.shape() != &shape {
                    return Err(self.invalid(instr, format!("a {} literal for shape {shape}", buffer.shape())));
                }
                self.constants.push(buffer);
                Ok(Value::Array(ValueRef { loc: Loc::Const(self.constants.len() - 1), shape }))
            }
            "tuple" => Ok(Value::Tuple(
                (0..instr.operand_ids.len()).map(|n| self.operand(instr, n).cloned()).collect::<Result<_, _>>()?,
            )),
            "get-tuple-element" => {
                self.expect_operands(instr, 1)?;
                match self.operand(instr, 0)? {
                    Value::Tuple(elements) => elements
                        .get(instr.tuple_index as usize)
                        .cloned()
                        .ok_or_else(|| self.invalid(instr, format!("tuple index {} out of range", instr.tuple_index))),
                    Value::Array(_) => Err(self.invalid(instr, "operand is not a tuple")),
                }
            }
            // Values are immutable: a copy, a reshape or a bitcast sees the
            // operand's bytes with its own dimensions.
            "reshape" | "copy" | "bitcast" => {
                self.expect_operands(instr, 1)?;
                let shape = self.array_shape(instr)?;
                let x = self.array(instr, 0)?;
                if x.shape.ty != shape.ty || x.shape.len() != shape.len() {
                    return Err(self.invalid(instr, format!("operand {} for result {shape}", x.shape)));
                }
                Ok(Value::Array(ValueRef { loc: x.loc, shape }))
            }
            "bitcast-convert" => {
                self.expect_operands(instr, 1)?;
                let shape = self.array_shape(instr)?;
                let x = self.array(instr, 0)?;
                if x.shape.ty.size() != shape.ty.size() || x.shape.dims != shape.dims {
                    return Err(self.unsupported(
                        instr,
                        format!("bitcast-convert of {} to {shape} changes the element width", x.shape),
                    ));
                }
                Ok(Value::Array(ValueRef { loc: x.loc, shape }))
            }
            "convert" => {
                self.expect_operands(instr, 1)?;
                let shape = self.array_shape(instr)?;
                let x = self.array(instr, 0)?;
                if x.shape.dims != shape.dims {
                    return Err(self.invalid(instr, format!("operand {} for result {shape}", x.shape)));
                }
                if x.shape.ty == shape.ty {
                    return Ok(Value::Array(ValueRef { loc: x.loc, shape }));
                }
                let half = |t: ElementType| matches!(t, ElementType::F16 | ElementType::BF16);
                if half(x.shape.ty) || half(shape.ty) {
                    return Err(
                        self.unsupported(instr, format!("convert {} to {} is not implemented", x.shape.ty, shape.ty))
                    );
                }
                Ok(self.step(instr, StepOp::Convert, vec![x], shape))
            }
            "broadcast" => self.broadcast(instr),
            "transpose" => self.transpose(instr),
            "slice" => self.slice(instr),
            "concatenate" => self.concatenate(instr),
            "select" => {
                self.expect_operands(instr, 3)?;
                let shape = self.array_shape(instr)?;
                let inputs = self.arrays(instr)?;
                let ok = inputs[0].shape.ty == ElementType::Pred
                    && (inputs[0].shape.dims == shape.dims || inputs[0].shape.dims.is_empty())
                    && inputs[1].shape == shape
                    && inputs[2].shape == shape;
                if !ok {
                    return Err(self.invalid(
                        instr,
                        format!("select({}, {}, {}) for {shape}", inputs[0].shape, inputs[1].shape, inputs[2].shape),
                    ));
                }
                let kernel = kernel("SelectV2", &NO_ATTRS).map_err(|r| self.unsupported(instr, r))?;
                Ok(self.step(instr, StepOp::Kernel { kernel, views: vec![None; 3], extra: vec![] }, inputs, shape))
            }
            "compare" => self.compare(instr),
            "iota" => {
                let shape = self.array_shape(instr)?;
                let dim = *self
                    .dims_of(instr, shape.dims.len())?
                    .first()
                    .ok_or_else(|| self.invalid(instr, "no iota dimension"))?;
                if matches!(shape.ty, ElementType::Pred | ElementType::F16 | ElementType::BF16) {
                    return Err(self.unsupported(instr, format!("iota of {} is not implemented", shape.ty)));
                }
                Ok(self.step(instr, StepOp::Iota { dim }, vec![], shape))
            }
            "dot" => self.dot(instr),
            "reduce" => self.reduce(instr),
            _ => Err(self.unsupported(instr, "tfwasm has no plan for this opcode yet")),
        }
    }

    fn binary(&mut self, instr: &HloInstructionProto, kind: BinaryKind) -> Result<Value, XlaError> {
        self.expect_operands(instr, 2)?;
        let shape = self.array_shape(instr)?;
        let (a, b) = (self.array(instr, 0)?, self.array(instr, 1)?);
        if a.shape != shape || b.shape != shape {
            return Err(self.invalid(instr, format!("operands {} and {} for result {shape}", a.shape, b.shape)));
        }
        if !kind.supports(shape.ty) {
            return Err(self.unsupported(instr, format!("{} of {} is not implemented", instr.opcode, shape.ty)));
        }
        let op = kind.f32_kernel().filter(|_| shape.ty == ElementType::F32).unwrap_or(BinaryOp::Add);
        let plan = BinaryPlan::new(op, &a.shape.dims, &b.shape.dims).map_err(|e| self.invalid(instr, e))?;
        Ok(self.step(instr, StepOp::Binary { kind, plan }, vec![a, b], shape))
    }

    fn compare(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        self.expect_operands(instr, 2)?;
        let shape = self.array_shape(instr)?;
        let (a, b) = (self.array(instr, 0)?, self.array(instr, 1)?);
        if a.shape != b.shape || a.shape.dims != shape.dims || shape.ty != ElementType::Pred {
            return Err(self.invalid(instr, format!("compare({}, {}) into {shape}", a.shape, b.shape)));
        }
        let direction = Direction::of(&instr.comparison_direction)
            .ok_or_else(|| self.unsupported(instr, format!("comparison direction {:?}", instr.comparison_direction)))?;
        if instr.comparison_type == "TOTALORDER" {
            return Err(self.unsupported(instr, "total-order comparison of floats is not implemented"));
        }
        if matches!(a.shape.ty, ElementType::F16 | ElementType::BF16) {
            return Err(self.unsupported(instr, format!("compare of {} is not implemented", a.shape.ty)));
        }
        let plan =
            BinaryPlan::new(direction.kernel_op(), &a.shape.dims, &b.shape.dims).map_err(|e| self.invalid(instr, e))?;
        Ok(self.step(instr, StepOp::Compare { plan }, vec![a, b], shape))
    }

    fn broadcast(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        self.expect_operands(instr, 1)?;
        let shape = self.array_shape(instr)?;
        let x = self.array(instr, 0)?;
        let map = self.dims_of(instr, shape.dims.len())?;
        let fits = x.shape.ty == shape.ty
            && map.len() == x.shape.dims.len()
            && map.iter().zip(&x.shape.dims).all(|(&d, &extent)| shape.dims[d] == extent);
        if !fits {
            return Err(self.invalid(instr, format!("broadcast of {} along {map:?} into {shape}", x.shape)));
        }
        if map.windows(2).any(|w| w[0] >= w[1]) {
            return Err(self.unsupported(instr, format!("a broadcast that reorders dimensions ({map:?})")));
        }
        if x.shape.len() == shape.len() {
            // Only dimensions of extent 1 are added: the same bytes.
            return Ok(Value::Array(ValueRef { loc: x.loc, shape }));
        }
        // The operand seen with the output's rank, 1 where it broadcasts.
        let mut view = vec![1; shape.dims.len()];
        for (&d, &extent) in map.iter().zip(&x.shape.dims) {
            view[d] = extent;
        }
        let kernel = kernel("BroadcastTo", &NO_ATTRS).map_err(|r| self.unsupported(instr, r))?;
        let extra = vec![i64s(shape.dims.iter().copied())];
        Ok(self.step(instr, StepOp::Kernel { kernel, views: vec![Some(view)], extra }, vec![x], shape))
    }

    fn transpose(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        self.expect_operands(instr, 1)?;
        let shape = self.array_shape(instr)?;
        let x = self.array(instr, 0)?;
        let perm = self.dims_of(instr, x.shape.dims.len())?;
        let mut seen = vec![false; perm.len()];
        let fits = perm.len() == x.shape.dims.len()
            && x.shape.ty == shape.ty
            && perm.iter().all(|&p| !std::mem::replace(&mut seen[p], true))
            && perm.iter().zip(&shape.dims).all(|(&p, &extent)| x.shape.dims[p] == extent);
        if !fits {
            return Err(self.invalid(instr, format!("transpose of {} by {perm:?} into {shape}", x.shape)));
        }
        // Dimensions of extent > 1 kept in order: the same bytes.
        let moved: Vec<usize> = perm.iter().copied().filter(|&p| x.shape.dims[p] != 1).collect();
        if moved.windows(2).all(|w| w[0] < w[1]) {
            return Ok(Value::Array(ValueRef { loc: x.loc, shape }));
        }
        let kernel = kernel("Transpose", &NO_ATTRS).map_err(|r| self.unsupported(instr, r))?;
        let extra = vec![i64s(perm)];
        Ok(self.step(instr, StepOp::Kernel { kernel, views: vec![None], extra }, vec![x], shape))
    }

    fn slice(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        self.expect_operands(instr, 1)?;
        let shape = self.array_shape(instr)?;
        let x = self.array(instr, 0)?;
        let dims = &instr.slice_dimensions;
        let fits = dims.len() == x.shape.dims.len()
            && x.shape.ty == shape.ty
            && dims.iter().zip(&x.shape.dims).zip(&shape.dims).all(|((s, &extent), &out)| {
                s.stride > 0
                    && 0 <= s.start
                    && s.start <= s.limit
                    && s.limit as usize <= extent
                    && ((s.limit - s.start) as usize).div_ceil(s.stride as usize) == out
            });
        if !fits {
            return Err(self.invalid(instr, format!("slice of {} into {shape}", x.shape)));
        }
        if shape.dims == x.shape.dims {
            return Ok(Value::Array(ValueRef { loc: x.loc, shape }));
        }
        let kernel = kernel("StridedSlice", &SLICE_ATTRS).map_err(|r| self.unsupported(instr, r))?;
        let extra = vec![
            i64s(dims.iter().map(|s| s.start as usize)),
            i64s(dims.iter().map(|s| s.limit as usize)),
            i64s(dims.iter().map(|s| s.stride as usize)),
        ];
        Ok(self.step(instr, StepOp::Kernel { kernel, views: vec![None], extra }, vec![x], shape))
    }

    fn concatenate(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        let shape = self.array_shape(instr)?;
        let inputs = self.arrays(instr)?;
        let axis =
            *self.dims_of(instr, shape.dims.len())?.first().ok_or_else(|| self.invalid(instr, "no dimension"))?;
        let total: usize = inputs.iter().map(|x| x.shape.dims.get(axis).copied().unwrap_or(0)).sum();
        let fits = !inputs.is_empty()
            && total == shape.dims[axis]
            && inputs.iter().all(|x| {
                x.shape.ty == shape.ty
                    && x.shape.dims.len() == shape.dims.len()
                    && x.shape.dims.iter().zip(&shape.dims).enumerate().all(|(d, (a, b))| d == axis || a == b)
            });
        if !fits {
            return Err(self.invalid(instr, format!("concatenate along {axis} into {shape}")));
        }
        if inputs.len() == 1 {
            return Ok(Value::Array(ValueRef { loc: inputs[0].loc, shape }));
        }
        let kernel = kernel("ConcatV2", &NO_ATTRS).map_err(|r| self.unsupported(instr, r))?;
        let extra = vec![HostBuffer::scalar(axis as i64)];
        let views = vec![None; inputs.len()];
        Ok(self.step(instr, StepOp::Kernel { kernel, views, extra }, inputs, shape))
    }

    fn dot(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        self.expect_operands(instr, 2)?;
        let shape = self.array_shape(instr)?;
        let (a, b) = (self.array(instr, 0)?, self.array(instr, 1)?);
        let numbers = instr.dot_dimension_numbers.clone().unwrap_or_default();
        let (ad, bd) = (&a.shape.dims, &b.shape.dims);
        let nb = numbers.lhs_batch_dimensions.len();
        let leading = |dims: &[i64]| dims.iter().copied().eq(0..nb as i64);
        let describe = || {
            format!(
                "dot of {} and {} (lhs batch {:?} contracting {:?}, rhs batch {:?} contracting {:?})",
                a.shape,
                b.shape,
                numbers.lhs_batch_dimensions,
                numbers.lhs_contracting_dimensions,
                numbers.rhs_batch_dimensions,
                numbers.rhs_contracting_dimensions
            )
        };
        if !leading(&numbers.lhs_batch_dimensions)
            || !leading(&numbers.rhs_batch_dimensions)
            || numbers.lhs_contracting_dimensions.len() != 1
            || numbers.rhs_contracting_dimensions.len() != 1
            || ad.len() < nb + 1
            || ad.len() > nb + 2
            || bd.len() < nb + 1
            || bd.len() > nb + 2
            || ad[..nb] != bd[..nb]
        {
            return Err(self.unsupported(
                instr,
                format!("{}: only leading batch dimensions and one contracting dimension are implemented", describe()),
            ));
        }
        if a.shape.ty != shape.ty || b.shape.ty != shape.ty {
            return Err(self.unsupported(instr, format!("{} into {shape}: mixed element types", describe())));
        }
        let (ac, bc) = (numbers.lhs_contracting_dimensions[0] as usize, numbers.rhs_contracting_dimensions[0] as usize);
        // lhs: [batch.., m, k] or [batch.., k, m] (transposed) or [batch.., k].
        let (m, k, transpose_a) = match (ad.len() - nb, ac.wrapping_sub(nb)) {
            (1, 0) => (1, ad[nb], false),
            (2, 1) => (ad[nb], ad[nb + 1], false),
            (2, 0) => (ad[nb + 1], ad[nb], true),
            _ => return Err(self.invalid(instr, describe())),
        };
        // rhs: [batch.., k, n] or [batch.., n, k] (transposed) or [batch.., k].
        let (k_b, n, transpose_b) = match (bd.len() - nb, bc.wrapping_sub(nb)) {
            (1, 0) => (bd[nb], 1, false),
            (2, 0) => (bd[nb], bd[nb + 1], false),
            (2, 1) => (bd[nb + 1], bd[nb], true),
            _ => return Err(self.invalid(instr, describe())),
        };
        let batch: usize = ad[..nb].iter().product();
        if k != k_b || shape.len() != batch * m * n || shape.dims[..nb.min(shape.dims.len())] != ad[..nb] {
            return Err(self.invalid(instr, format!("{} into {shape}", describe())));
        }
        let a_mat = if transpose_a { [k, m] } else { [m, k] };
        let b_mat = if transpose_b { [n, k] } else { [k, n] };
        let attrs = MatMulAttrs { transpose_a, transpose_b };
        let op = match shape.ty {
            ElementType::F32 if nb == 0 => {
                StepOp::MatMul(MatMulPlan::new(attrs, &a_mat, &b_mat).map_err(|e| self.invalid(instr, e))?)
            }
            ElementType::F32 => StepOp::BatchMatMul(
                BatchMatMulPlan::new(attrs, &[batch, a_mat[0], a_mat[1]], &[batch, b_mat[0], b_mat[1]])
                    .map_err(|e| self.invalid(instr, e))?,
            ),
            ElementType::F64 | ElementType::S32 | ElementType::S64 => {
                StepOp::NaiveDot { batch, m, k, n, transpose_a, transpose_b }
            }
            other => return Err(self.unsupported(instr, format!("dot of {other} is not implemented"))),
        };
        Ok(self.step(instr, op, vec![a, b], shape))
    }

    /// The combining op of reducer computation `id`: two scalar parameters
    /// and one binary op of them.
    fn reducer(&self, instr: &HloInstructionProto) -> Result<Reducer, XlaError> {
        let id = *instr.called_computation_ids.first().ok_or_else(|| self.invalid(instr, "no reducer computation"))?;
        let comp = self.computations.get(&id).ok_or_else(|| self.invalid(instr, format!("no computation {id}")))?;
        let computation = Computation::new(comp);
        let root = computation.root().map(|r| &comp.instructions[r]);
        let params: Vec<i64> =
            comp.instructions.iter().filter(|i| i.opcode == "parameter").map(|i| i.parameter_number).collect();
        let recognised = root.filter(|root| {
            comp.instructions.len() == 3
                && params.len() == 2
                && root.operand_ids.len() == 2
                && root
                    .operand_ids
                    .iter()
                    .all(|id| computation.instruction(*id).is_some_and(|i| i.opcode == "parameter"))
                && root.operand_ids[0] != root.operand_ids[1]
        });
        let reducer = recognised.and_then(|root| {
            Some(match root.opcode.as_str() {
                "add" => Reducer::Add,
                "multiply" => Reducer::Mul,
                "maximum" => Reducer::Max,
                "minimum" => Reducer::Min,
                "and" => Reducer::And,
                "or" => Reducer::Or,
                _ => return None,
            })
        });
        reducer.ok_or_else(|| {
            let ops: Vec<&str> = comp.instructions.iter().map(|i| i.opcode.as_str()).collect();
            self.unsupported(
                instr,
                format!(
                    "reducer computation {} ({}) is not one of add, multiply, maximum, minimum, and, or of its two parameters",
                    comp.name,
                    ops.join(", ")
                ),
            )
        })
    }

    fn reduce(&mut self, instr: &HloInstructionProto) -> Result<Value, XlaError> {
        if instr.operand_ids.len() != 2 {
            return Err(
                self.unsupported(instr, format!("a reduce of {} operands (variadic)", instr.operand_ids.len() / 2))
            );
        }
        let shape = self.array_shape(instr)?;
        let (x, init) = (self.array(instr, 0)?, self.array(instr, 1)?);
        let dims = self.dims_of(instr, x.shape.dims.len())?;
        let mut reduced = vec![false; x.shape.dims.len()];
        for &d in &dims {
            if std::mem::replace(&mut reduced[d], true) {
                return Err(self.invalid(instr, format!("dimension {d} reduced twice")));
            }
        }
        let kept: Vec<usize> = x.shape.dims.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).collect();
        if kept != shape.dims || x.shape.ty != shape.ty || init.shape != ArrayShape::new(shape.ty, &[]) {
            return Err(
                self.invalid(instr, format!("reduce of {} (init {}) over {dims:?} into {shape}", x.shape, init.shape))
            );
        }
        let reducer = self.reducer(instr)?;
        if !reducer.as_binary().supports(shape.ty) {
            return Err(self.unsupported(instr, format!("a {reducer:?} reduction of {}", shape.ty)));
        }
        let op = match reducer.f32_kernel().filter(|_| shape.ty == ElementType::F32) {
            Some((op, identity)) => {
                let init_is_identity = match init.loc {
                    Loc::Const(c) => self.constants[c].to_vec::<f32>().is_ok_and(|v| v == [identity]),
                    _ => false,
                };
                let kernel = kernel(op, &NO_ATTRS).map_err(|r| self.unsupported(instr, r))?;
                StepOp::ReduceF32 { kernel, axes: i64s(dims), reducer, init_is_identity }
            }
            None => StepOp::Reduce { reducer, reduced },
        };
        Ok(self.step(instr, op, vec![x, init], shape))
    }
}

/// Gives every step's output a slot of the arena: after a value's last
/// read its slot is free for a later output (the smallest free slot that
/// fits, else the largest grown). A step's output never shares a slot with
/// its inputs, and outputs of the program keep theirs to the end.
fn assign_slots(steps: &mut [Step], outputs: Vec<ValueRef>) -> (Vec<usize>, Vec<ValueRef>) {
    let n = steps.len();
    let mut last_use: Vec<usize> = (0..n).collect();
    for (s, step) in steps.iter().enumerate() {
        for input in &step.inputs {
            if let Loc::Slot(v) = input.loc {
                last_use[v] = last_use[v].max(s);
            }
        }
    }
    for output in &outputs {
        if let Loc::Slot(v) = output.loc {
            last_use[v] = n;
        }
    }
    let mut frees_after = vec![Vec::new(); n];
    for (v, &last) in last_use.iter().enumerate() {
        if last < n {
            frees_after[last].push(v);
        }
    }
    let mut slot_of = vec![0; n];
    let mut slot_bytes: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for s in 0..n {
        let need = steps[s].output.shape.bytes();
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, &slot)| slot_bytes[slot] >= need)
            .min_by_key(|(_, &slot)| slot_bytes[slot]);
        let slot = match best.map(|(i, _)| i).or_else(|| (0..free.len()).max_by_key(|&i| slot_bytes[free[i]])) {
            Some(i) => free.swap_remove(i),
            None => {
                slot_bytes.push(0);
                slot_bytes.len() - 1
            }
        };
        slot_bytes[slot] = slot_bytes[slot].max(need);
        slot_of[s] = slot;
        for &v in &frees_after[s] {
            free.push(slot_of[v]);
        }
    }
    let remap = |r: &mut ValueRef| {
        if let Loc::Slot(v) = r.loc {
            r.loc = Loc::Slot(slot_of[v]);
        }
    };
    for step in steps.iter_mut() {
        step.inputs.iter_mut().for_each(remap);
        remap(&mut step.output);
    }
    let mut outputs = outputs;
    outputs.iter_mut().for_each(remap);
    (slot_bytes, outputs)
}
