//! Running a [`Program`]: steps in order over the arguments, the constants
//! and an arena of slots, then the outputs copied out.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use tfwasm_kernels::error::Error as KernelError;
use tfwasm_kernels::unary::UnaryOp;
use tfwasm_kernels::{DType, OpContext, Tensor};
use tfwasm_proto::hlo::HloModuleProto;
use tfwasm_proto::prost::Message;

use crate::buffer::{ArrayShape, ElementType, HostBuffer, Storage, View};
use crate::elementwise;
use crate::error::{Site, XlaError};
use crate::plan::{self, Loc, Program, Step, StepOp, UnaryKind, ValueRef};

/// A compiled module: decode and plan once, run many times (from several
/// threads at once, each run with its own arena).
pub struct Executable {
    program: Program,
    /// Arenas of finished runs, kept for the next (no allocation per run).
    arenas: Mutex<Vec<Vec<Arc<Storage>>>>,
}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("name", &self.program.name)
            .field("steps", &self.program.steps.len())
            .field("slots", &self.program.slot_bytes.len())
            .finish()
    }
}

impl Executable {
    /// Decodes a serialized `HloModuleProto` (PJRT's format `"hlo"`) and
    /// plans it.
    pub fn compile(module: &[u8]) -> Result<Executable, XlaError> {
        Executable::from_module(&HloModuleProto::decode(module)?)
    }

    /// Plans a decoded module.
    pub fn from_module(module: &HloModuleProto) -> Result<Executable, XlaError> {
        Ok(Executable { program: plan::plan(module)?, arenas: Mutex::new(Vec::new()) })
    }

    /// The module's name, without tf2xla's attribute list.
    pub fn name(&self) -> &str {
        &self.program.name
    }

    /// What each argument must be.
    pub fn parameters(&self) -> &[ArrayShape] {
        &self.program.params
    }

    /// What [`Executable::run`] returns, in order.
    pub fn outputs(&self) -> Vec<ArrayShape> {
        self.program.outputs.iter().map(|o| o.shape.clone()).collect()
    }

    /// Whether the module's result is a tuple (of [`Executable::outputs`])
    /// rather than one array.
    pub fn tuple_result(&self) -> bool {
        self.program.tuple_result
    }

    /// Steps a run executes (instructions that are not a view of another).
    pub fn step_count(&self) -> usize {
        self.program.steps.len()
    }

    /// Bytes of a run's arena (intermediate values, after reuse).
    pub fn arena_bytes(&self) -> usize {
        self.program.slot_bytes.iter().sum()
    }

    /// Runs the module on `arguments` (one per parameter, of its shape) and
    /// returns its result's arrays as fresh buffers.
    pub fn run(&self, arguments: &[HostBuffer]) -> Result<Vec<HostBuffer>, XlaError> {
        let program = &self.program;
        if arguments.len() != program.params.len() {
            return Err(self.argument_error(
                arguments.len(),
                format!("{} arguments given, the module takes {}", arguments.len(), program.params.len()),
            ));
        }
        for (i, (argument, param)) in arguments.iter().zip(&program.params).enumerate() {
            if argument.shape() != param {
                return Err(self.argument_error(i, format!("a {} buffer for parameter {param}", argument.shape())));
            }
        }
        let storages: Vec<Arc<Storage>> = arguments.iter().map(|a| Arc::clone(&a.view().storage)).collect();
        let mut outputs = Vec::with_capacity(program.outputs.len());
        self.execute(&storages, |_, shape, bytes| {
            outputs.push(HostBuffer::from_storage(shape.clone(), Storage::from_bytes(bytes)));
        })?;
        Ok(outputs)
    }

    /// Runs the module on the caller's memory: `arguments[i]` holds
    /// parameter `i`'s bytes (row-major, [`Executable::parameters`]), read in
    /// place and never written; each output's bytes are written to
    /// `outputs[i]` ([`Executable::outputs`]). Arguments may alias each
    /// other; an output must not alias an argument. Each slice is exactly
    /// its array's size and aligned to its element size.
    pub fn run_into(&self, arguments: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), XlaError> {
        let program = &self.program;
        if arguments.len() != program.params.len() {
            return Err(self.argument_error(
                arguments.len(),
                format!("{} arguments given, the module takes {}", arguments.len(), program.params.len()),
            ));
        }
        for (i, (bytes, param)) in arguments.iter().zip(&program.params).enumerate() {
            check_memory(bytes, param).map_err(|reason| self.argument_error(i, reason))?;
        }
        if outputs.len() != program.outputs.len() {
            return Err(XlaError::Invalid {
                module: program.name.clone(),
                reason: format!(
                    "{} output buffers given, the module has {} outputs",
                    outputs.len(),
                    program.outputs.len()
                ),
            });
        }
        for (i, (bytes, output)) in outputs.iter().zip(&program.outputs).enumerate() {
            check_memory(bytes, &output.shape).map_err(|reason| XlaError::Invalid {
                module: program.name.clone(),
                reason: format!("output {i}: {reason}"),
            })?;
        }
        // SAFETY: the storages are dropped at the end of this function,
        // while `arguments` is borrowed; the executor never writes a
        // parameter (the planner gives no step a parameter as its output).
        let storages: Vec<Arc<Storage>> = arguments.iter().map(|bytes| unsafe { Storage::borrowed(bytes) }).collect();
        let outcome = self.execute(&storages, |i, _, bytes| outputs[i].copy_from_slice(bytes));
        // No view of the caller's memory outlives the run.
        assert!(storages.iter().all(|s| Arc::strong_count(s) == 1), "a view of an argument outlived the run");
        outcome
    }

    fn argument_error(&self, index: usize, reason: String) -> XlaError {
        XlaError::Argument { module: self.program.name.clone(), index, reason }
    }

    /// Runs the steps over `arguments` (checked against the parameters) and
    /// hands each output's bytes to `emit`, in order.
    fn execute(
        &self,
        arguments: &[Arc<Storage>],
        mut emit: impl FnMut(usize, &ArrayShape, &[u8]),
    ) -> Result<(), XlaError> {
        let program = &self.program;
        let arena = self.arenas.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let arena = arena.unwrap_or_else(|| program.slot_bytes.iter().map(|&bytes| Storage::zeroed(bytes)).collect());
        let view = |r: &ValueRef| -> View {
            let storage = match r.loc {
                Loc::Param(i) => Arc::clone(&arguments[i]),
                Loc::Const(i) => Arc::clone(&program.constants[i].view().storage),
                Loc::Slot(i) => Arc::clone(&arena[i]),
            };
            View { shape: r.shape.clone(), storage }
        };
        let mut result = Ok(());
        for step in &program.steps {
            let inputs: Vec<View> = step.inputs.iter().map(view).collect();
            let output = view(&step.output);
            if let Err(source) = run_step(step, &inputs, &output) {
                let site = Site {
                    module: program.name.clone(),
                    opcode: step.opcode.clone(),
                    instruction: step.instruction.clone(),
                    origin: step.origin.clone(),
                };
                result = Err(XlaError::Kernel { site: Box::new(site), source });
                break;
            }
        }
        if result.is_ok() {
            for (i, o) in program.outputs.iter().enumerate() {
                let v = view(o);
                // SAFETY: every step is done; nothing writes any more.
                emit(i, &v.shape, unsafe { v.storage.bytes(v.shape.bytes()) });
            }
        }
        self.arenas.lock().unwrap_or_else(|e| e.into_inner()).push(arena);
        result
    }
}

/// Why `bytes` cannot hold an array of `shape` in place, if it cannot.
fn check_memory(bytes: &[u8], shape: &ArrayShape) -> Result<(), String> {
    if bytes.len() != shape.bytes() {
        return Err(format!("{} bytes for {shape}, which needs {}", bytes.len(), shape.bytes()));
    }
    if !bytes.is_empty() && (bytes.as_ptr() as usize) % shape.ty.size() != 0 {
        return Err(format!("{shape} at {:?} is not aligned to {} bytes", bytes.as_ptr(), shape.ty.size()));
    }
    Ok(())
}

/// Runs one step. The planner gave its output a slot no input uses and no
/// live value holds, and steps run one at a time: the output tensor is the
/// only access to its bytes, the inputs are only read.
fn run_step(step: &Step, inputs: &[View], output: &View) -> Result<(), KernelError> {
    // SAFETY: (all tensors below) per the planner's slot assignment, as
    // above: inputs are read only, the output is written by this step alone.
    let input = |i: usize| unsafe { inputs[i].tensor(false) };
    let out = || unsafe { output.tensor(true) };
    match &step.op {
        StepOp::Kernel { kernel, views, extra } => {
            let mut args = Vec::with_capacity(inputs.len() + extra.len());
            for (view, dims) in inputs.iter().zip(views) {
                args.push((view.clone(), dims.clone()));
            }
            args.extend(extra.iter().map(|e| (e.view(), None)));
            let ctx = KernelCall { args, output, written: Cell::new(false) };
            kernel.compute(&ctx)?;
            if !ctx.written.get() {
                return Err(KernelError::Internal("the kernel produced no output".into()));
            }
            Ok(())
        }
        StepOp::MatMul(plan) => plan.run(input(0)?.data()?, input(1)?.data()?, out()?.data_mut()?),
        StepOp::BatchMatMul(plan) => plan.run(input(0)?.data()?, input(1)?.data()?, out()?.data_mut()?),
        StepOp::NaiveDot { batch, m, k, n, transpose_a, transpose_b } => elementwise::naive_dot(
            (*batch, *m, *k, *n),
            (*transpose_a, *transpose_b),
            &input(0)?,
            &input(1)?,
            &mut out()?,
        ),
        StepOp::Binary { kind, plan } => {
            let (a, b, mut o) = (input(0)?, input(1)?, out()?);
            match kind.f32_kernel() {
                Some(_) if o.dtype() == DType::F32 => plan.run(a.data()?, b.data()?, o.data_mut()?),
                _ => elementwise::binary(*kind, plan, &a, &b, &mut o),
            }
        }
        StepOp::Unary(kind) => {
            let (x, mut o) = (input(0)?, out()?);
            match f32_unary(*kind).filter(|_| x.dtype() == DType::F32) {
                Some(op) => {
                    op.run(x.data()?, o.data_mut()?);
                    Ok(())
                }
                None => elementwise::unary(*kind, &x, &mut o),
            }
        }
        StepOp::Compare { plan } => elementwise::compare(plan, &input(0)?, &input(1)?, &mut out()?),
        StepOp::Convert => elementwise::convert(&input(0)?, &mut out()?),
        StepOp::Iota { dim } => elementwise::iota(*dim, &mut out()?),
        StepOp::ReduceF32 { kernel, axes, reducer, init_is_identity } => {
            let init = input(1)?.scalar::<f32>()?;
            if inputs[0].shape.is_empty() {
                out()?.data_mut::<f32>()?.fill(init);
                return Ok(());
            }
            let ctx = KernelCall {
                args: vec![(inputs[0].clone(), None), (axes.view(), None)],
                output,
                written: Cell::new(false),
            };
            kernel.compute(&ctx)?;
            if !init_is_identity {
                let f = elementwise_f32(reducer.as_binary());
                for v in out()?.data_mut::<f32>()? {
                    *v = f(init, *v);
                }
            }
            Ok(())
        }
        StepOp::Reduce { reducer, reduced } => {
            elementwise::reduce(*reducer, reduced, &input(0)?, &input(1)?, &mut out()?)
        }
    }
}

fn elementwise_f32(kind: plan::BinaryKind) -> fn(f32, f32) -> f32 {
    use elementwise::Num;
    match kind {
        plan::BinaryKind::Add => f32::add,
        plan::BinaryKind::Mul => f32::mul,
        plan::BinaryKind::Max => Num::max,
        _ => Num::min,
    }
}

/// The float32 kernel op of a unary kind, where the kernels have one.
fn f32_unary(kind: UnaryKind) -> Option<UnaryOp> {
    Some(match kind {
        UnaryKind::Neg => UnaryOp::Neg,
        UnaryKind::Abs => UnaryOp::Abs,
        UnaryKind::Sign => UnaryOp::Sign,
        UnaryKind::Exp => UnaryOp::Exp,
        UnaryKind::Log => UnaryOp::Log,
        UnaryKind::Log1p => UnaryOp::Log1p,
        UnaryKind::Sqrt => UnaryOp::Sqrt,
        UnaryKind::Rsqrt => UnaryOp::Rsqrt,
        UnaryKind::Tanh => UnaryOp::Tanh,
        UnaryKind::Logistic => UnaryOp::Sigmoid,
        UnaryKind::Floor => UnaryOp::Floor,
        UnaryKind::Ceil => UnaryOp::Ceil,
        UnaryKind::RoundEven => UnaryOp::Round,
        UnaryKind::Sin => UnaryOp::Sin,
        UnaryKind::Cos => UnaryOp::Cos,
        UnaryKind::Tan => UnaryOp::Tan,
        UnaryKind::Erf => UnaryOp::Erf,
        UnaryKind::Expm1 | UnaryKind::Not | UnaryKind::IsFinite => return None,
    })
}

/// The [`OpContext`] a kernel step runs in: its inputs (each maybe seen
/// with other dimensions), and one output, in the step's slot.
struct KernelCall<'a> {
    args: Vec<(View, Option<Vec<usize>>)>,
    output: &'a View,
    written: Cell<bool>,
}

impl OpContext for KernelCall<'_> {
    fn num_inputs(&self) -> usize {
        self.args.len()
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn input(&self, index: usize) -> Result<Tensor, KernelError> {
        let (view, dims) = self.args.get(index).ok_or_else(|| KernelError::Internal(format!("no input {index}")))?;
        // SAFETY: inputs are only read while the step runs (`run_step`).
        unsafe { view.tensor_as(dims.as_deref().unwrap_or(&view.shape.dims), false) }
    }

    fn output_dtype(&self, index: usize) -> Result<tfwasm_kernels::DType, KernelError> {
        match index {
            0 => Ok(self.output.shape.ty.dtype()),
            _ => Err(KernelError::Internal(format!("no output {index}"))),
        }
    }

    fn allocate_output(&self, index: usize, shape: &[usize]) -> Result<Tensor, KernelError> {
        if index != 0 || shape != self.output.shape.dims.as_slice() {
            return Err(KernelError::Internal(format!(
                "the kernel made output {index} of shape {shape:?}, the plan expects {}",
                self.output.shape
            )));
        }
        self.written.set(true);
        // SAFETY: the step's output slot is written by this kernel alone.
        unsafe { self.output.tensor(true) }
    }

    fn forward_input(&self, input: usize, output: usize) -> Result<(), KernelError> {
        // Values never share a slot with a live input: copy.
        let source = self.input(input)?;
        let mut target = self.allocate_output(output, &self.output.shape.dims)?;
        if source.dtype() != ElementType::dtype(self.output.shape.ty) || source.len() != target.len() {
            return Err(KernelError::Internal("forwarding an input of another type or size".into()));
        }
        target.bytes_mut()?.copy_from_slice(source.bytes());
        Ok(())
    }
}
