//! tfwasm-xla end to end: modules TensorFlow 2.21 handed PJRT, replayed
//! against what TensorFlow's own CPU XLA computed for them
//! (`tests/fixtures/hlo/record.py`), and modules built here for the shapes
//! and errors those do not reach.

use tfwasm_proto::prost::Message;
use tfwasm_xla::literal::{buffer_to_literal, literal_to_buffer, shape_proto};
use tfwasm_xla::proto::{
    DotDimensionNumbers, HloComputationProto, HloInstructionProto, HloModuleProto, HloSnapshot, LiteralProto,
    OpMetadata, PrimitiveType, ShapeProto,
};
use tfwasm_xla::{ArrayShape, ElementType, Executable, HostBuffer, XlaError};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../../tests/fixtures/hlo/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A recorded run: its arguments, and the result's arrays.
fn snapshot(name: &str) -> (Vec<HostBuffer>, Vec<HostBuffer>) {
    let snapshot = HloSnapshot::decode(fixture(name).as_slice()).unwrap();
    let arguments = snapshot.arguments.iter().map(|l| literal_to_buffer(l).unwrap()).collect();
    let result = snapshot.result.unwrap();
    let is_tuple = result.shape.as_ref().unwrap().element_type == PrimitiveType::Tuple as i32;
    let results = if is_tuple {
        result.tuple_literals.iter().map(|l| literal_to_buffer(l).unwrap()).collect()
    } else {
        vec![literal_to_buffer(&result).unwrap()]
    };
    (arguments, results)
}

/// Every element within `atol + rtol·|expected|` (floats), or equal.
fn assert_close(what: &str, got: &HostBuffer, expected: &HostBuffer, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), expected.shape(), "{what}: shape");
    let (g, e): (Vec<f64>, Vec<f64>) = match got.element_type() {
        ElementType::F32 => (
            got.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
            expected.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
        ),
        ElementType::F64 => (got.to_vec::<f64>().unwrap(), expected.to_vec::<f64>().unwrap()),
        _ => {
            assert_eq!(got.bytes(), expected.bytes(), "{what}: values");
            return;
        }
    };
    for (i, (g, e)) in g.iter().zip(&e).enumerate() {
        let same = g == e || (g.is_nan() && e.is_nan());
        assert!(same || (g - e).abs() <= atol + rtol * e.abs(), "{what}: element {i} is {g}, expected {e}");
    }
}

fn replay(module: &str, run: &str) {
    let executable = Executable::compile(&fixture(module)).unwrap();
    let (arguments, expected) = snapshot(run);
    let got = executable.run(&arguments).unwrap();
    assert_eq!(got.len(), expected.len(), "{run}: outputs");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_close(&format!("{run}: output {i}"), g, e, 1e-5, 1e-6);
    }
}

mod captured {
    use super::*;

    #[test]
    fn eager_jit_matmul_plus_one_matches_tensorflow() {
        let executable = Executable::compile(&fixture("matmul_plus1.hlo.pb")).unwrap();
        assert_eq!(executable.parameters(), &[ArrayShape::new(ElementType::F32, &[2, 2])]);
        assert!(!executable.tuple_result(), "TensorFlow unpacks the one-element tuple");
        // The reshapes, the order-keeping transpose, the tuple and its
        // element are views: dot, broadcast and add run.
        assert_eq!(executable.step_count(), 3);
        let x = HostBuffer::from_slice(&[2, 2], &[0f32, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(executable.run(&[x]).unwrap()[0].to_vec::<f32>().unwrap(), [3.0, 4.0, 7.0, 12.0]);
        replay("matmul_plus1.hlo.pb", "matmul_plus1.run1.pb");
    }

    #[test]
    fn keras_dense_adam_train_steps_match_tensorflow() {
        let executable = Executable::compile(&fixture("keras_mlp_adam_step.hlo.pb")).unwrap();
        assert_eq!(executable.parameters().len(), 18);
        assert_eq!(executable.outputs().len(), 16);
        assert_eq!(executable.parameters()[9], ArrayShape::new(ElementType::S64, &[]));
        // The first step (zero Adam slots, iteration 0) and the second.
        replay("keras_mlp_adam_step.hlo.pb", "keras_mlp_adam_step.run1.pb");
        replay("keras_mlp_adam_step.hlo.pb", "keras_mlp_adam_step.run2.pb");
    }

    #[test]
    fn an_executable_runs_again_and_from_several_threads() {
        let executable = Executable::compile(&fixture("keras_mlp_adam_step.hlo.pb")).unwrap();
        let (arguments, expected) = snapshot("keras_mlp_adam_step.run2.pb");
        let first = executable.run(&arguments).unwrap();
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..3).map(|_| scope.spawn(|| executable.run(&arguments).unwrap())).collect();
            for run in runs {
                let again = run.join().unwrap();
                for (a, b) in again.iter().zip(&first) {
                    assert_eq!(a.bytes(), b.bytes(), "runs are deterministic");
                }
            }
        });
        assert_close("loss", &first[0], &expected[0], 1e-5, 1e-6);
    }

    /// The PJRT path: arguments read in place from the caller's memory
    /// (aliasing each other, as two views of one tensor do), outputs
    /// written into the caller's memory; the same values as `run`.
    #[test]
    fn run_into_reads_and_writes_the_callers_memory() {
        let executable = Executable::compile(&fixture("keras_mlp_adam_step.hlo.pb")).unwrap();
        let (arguments, expected) = snapshot("keras_mlp_adam_step.run1.pb");
        let inputs: Vec<&[u8]> = arguments.iter().map(HostBuffer::bytes).collect();
        let mut storage: Vec<Vec<u64>> =
            executable.outputs().iter().map(|o| vec![0u64; o.bytes().div_ceil(8)]).collect();
        let mut outputs: Vec<&mut [u8]> = storage
            .iter_mut()
            .zip(executable.outputs())
            .map(|(words, shape)| {
                // SAFETY: the words are plain data, 8-aligned, at least
                // `shape.bytes()` long; the byte view replaces the borrow.
                let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) };
                &mut bytes[..shape.bytes()]
            })
            .collect();
        executable.run_into(&inputs, &mut outputs).unwrap();
        for (i, ((bytes, shape), e)) in outputs.iter().zip(executable.outputs()).zip(&expected).enumerate() {
            let got = HostBuffer::from_bytes(shape.ty, &shape.dims, bytes).unwrap();
            assert_close(&format!("run_into output {i}"), &got, e, 1e-5, 1e-6);
        }

        let square = Executable::compile(&fixture("matmul_plus1.hlo.pb")).unwrap();
        let x = HostBuffer::from_slice(&[2, 2], &[0f32, 1.0, 2.0, 3.0]).unwrap();
        let mut out = [0f32; 4];
        // SAFETY: four f32 are 16 plain bytes.
        let out_bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), 16) };
        square.run_into(&[x.bytes()], &mut [out_bytes]).unwrap();
        assert_eq!(out, [3.0, 4.0, 7.0, 12.0]);
        // Wrong sizes and misaligned memory are refused, naming the slot.
        let error = square.run_into(&[&x.bytes()[..12]], &mut [&mut [0u8; 16]]).unwrap_err().to_string();
        assert!(error.contains("argument 0: 12 bytes for f32[2,2], which needs 16"), "{error}");
        let error = square.run_into(&[x.bytes()], &mut [&mut [0u8; 8]]).unwrap_err().to_string();
        assert!(error.contains("output 0: 8 bytes"), "{error}");
        let unaligned = [0u8; 17];
        let error = square.run_into(&[&unaligned[1..]], &mut [&mut [0u8; 16]]);
        if (unaligned[1..].as_ptr() as usize) % 4 != 0 {
            assert!(error.unwrap_err().to_string().contains("not aligned to 4 bytes"));
        }
    }

    #[test]
    fn wrong_arguments_are_refused_naming_the_parameter() {
        let executable = Executable::compile(&fixture("matmul_plus1.hlo.pb")).unwrap();
        let error = executable.run(&[]).unwrap_err();
        assert!(error.to_string().contains("0 arguments given, the module takes 1"), "{error}");
        let wrong = HostBuffer::zeros(ElementType::F32, &[2, 3]);
        let error = executable.run(&[wrong]).unwrap_err().to_string();
        assert!(error.contains("argument 0") && error.contains("f32[2,3]") && error.contains("f32[2,2]"), "{error}");
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let error = Executable::compile(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(matches!(error, XlaError::Decode(_)), "{error}");
    }
}

/// Builds a module of one entry computation (and reducers) by hand.
#[derive(Default)]
struct Builder {
    instructions: Vec<HloInstructionProto>,
    reducers: Vec<HloComputationProto>,
    params: usize,
}

fn shape(ty: ElementType, dims: &[usize]) -> ShapeProto {
    shape_proto(&ArrayShape::new(ty, dims))
}

impl Builder {
    fn add(&mut self, mut instruction: HloInstructionProto) -> i64 {
        let id = self.instructions.len() as i64 + 1;
        instruction.id = id;
        if instruction.name.is_empty() {
            instruction.name = format!("{}.{id}", instruction.opcode);
        }
        self.instructions.push(instruction);
        id
    }

    fn param(&mut self, ty: ElementType, dims: &[usize]) -> i64 {
        self.params += 1;
        self.add(HloInstructionProto {
            opcode: "parameter".into(),
            shape: Some(shape(ty, dims)),
            parameter_number: self.params as i64 - 1,
            ..Default::default()
        })
    }

    fn constant(&mut self, value: &HostBuffer) -> i64 {
        self.add(HloInstructionProto {
            opcode: "constant".into(),
            shape: Some(shape_proto(value.shape())),
            literal: Some(buffer_to_literal(value)),
            ..Default::default()
        })
    }

    fn op(&mut self, opcode: &str, ty: ElementType, dims: &[usize], operands: &[i64]) -> i64 {
        self.add(HloInstructionProto {
            opcode: opcode.into(),
            shape: Some(shape(ty, dims)),
            operand_ids: operands.to_vec(),
            ..Default::default()
        })
    }

    fn with_dims(&mut self, opcode: &str, ty: ElementType, dims: &[usize], operands: &[i64], attr: &[i64]) -> i64 {
        let id = self.op(opcode, ty, dims, operands);
        self.instructions.last_mut().unwrap().dimensions = attr.to_vec();
        id
    }

    fn dot(&mut self, dims: &[usize], a: i64, b: i64, lhs_contract: i64, rhs_contract: i64) -> i64 {
        let id = self.op("dot", ElementType::F32, dims, &[a, b]);
        self.instructions.last_mut().unwrap().dot_dimension_numbers = Some(DotDimensionNumbers {
            lhs_contracting_dimensions: vec![lhs_contract],
            rhs_contracting_dimensions: vec![rhs_contract],
            ..Default::default()
        });
        id
    }

    /// A reducer computation `p0 (opcode) p1` of scalars; its id.
    fn reducer(&mut self, opcode: &str, ty: ElementType) -> i64 {
        let id = 100 + self.reducers.len() as i64;
        let scalar = || Some(shape(ty, &[]));
        let p = |n: i64| HloInstructionProto {
            opcode: "parameter".into(),
            name: format!("p{n}"),
            shape: scalar(),
            parameter_number: n,
            id: (id << 32) | (n + 1),
            ..Default::default()
        };
        let root = HloInstructionProto {
            opcode: opcode.into(),
            name: "combine".into(),
            shape: scalar(),
            id: (id << 32) | 3,
            operand_ids: vec![(id << 32) | 1, (id << 32) | 2],
            ..Default::default()
        };
        self.reducers.push(HloComputationProto {
            name: format!("reducer_{opcode}"),
            id,
            root_id: (id << 32) | 3,
            instructions: vec![p(0), p(1), root],
            ..Default::default()
        });
        id
    }

    fn reduce(&mut self, dims: &[usize], x: i64, init: i64, over: &[i64], reducer: i64) -> i64 {
        let id = self.with_dims("reduce", ElementType::F32, dims, &[x, init], over);
        self.instructions.last_mut().unwrap().called_computation_ids = vec![reducer];
        id
    }

    fn tuple(&mut self, elements: &[i64]) -> i64 {
        let shapes = elements.iter().map(|&e| self.instructions[e as usize - 1].shape.clone().unwrap()).collect();
        self.add(HloInstructionProto {
            opcode: "tuple".into(),
            shape: Some(ShapeProto {
                element_type: PrimitiveType::Tuple as i32,
                tuple_shapes: shapes,
                ..Default::default()
            }),
            operand_ids: elements.to_vec(),
            ..Default::default()
        })
    }

    fn build(self, root: i64) -> HloModuleProto {
        let entry = HloComputationProto {
            name: "main".into(),
            id: 1,
            root_id: root,
            instructions: self.instructions,
            ..Default::default()
        };
        let mut computations = self.reducers;
        computations.push(entry);
        HloModuleProto {
            name: "hand_built".into(),
            entry_computation_name: "main".into(),
            entry_computation_id: 1,
            computations,
            ..Default::default()
        }
    }
}

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 250.0 - 2.0).collect()
}

mod shapes {
    use super::*;

    /// `y = a·b + bias` (b transposed when asked), then column sums and row
    /// maxima of `y`, against plain loops, for empty, 1×1 and prime shapes.
    fn dense_and_reductions(m: usize, k: usize, n: usize, transpose_b: bool) {
        let f32 = ElementType::F32;
        let mut b = Builder::default();
        let pa = b.param(f32, &[m, k]);
        let pb = if transpose_b { b.param(f32, &[n, k]) } else { b.param(f32, &[k, n]) };
        let pbias = b.param(f32, &[n]);
        let product = b.dot(&[m, n], pa, pb, 1, if transpose_b { 1 } else { 0 });
        let bias = b.with_dims("broadcast", f32, &[m, n], &[pbias], &[1]);
        let y = b.op("add", f32, &[m, n], &[product, bias]);
        let zero = b.constant(&HostBuffer::scalar(0f32));
        let neg_inf = b.constant(&HostBuffer::scalar(f32::NEG_INFINITY));
        let add = b.reducer("add", f32);
        let max = b.reducer("maximum", f32);
        let sums = b.reduce(&[n], y, zero, &[0], add);
        let maxima = b.reduce(&[m], y, neg_inf, &[1], max);
        let root = b.tuple(&[y, sums, maxima]);
        let executable = Executable::from_module(&b.build(root)).unwrap();

        let (av, bv, biasv) = (values(m * k, 1), values(k * n, 2), values(n, 3));
        let b_at = |l: usize, j: usize| if transpose_b { bv[j * k + l] } else { bv[l * n + j] };
        let mut yv = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                yv[i * n + j] = (0..k).map(|l| av[i * k + l] * b_at(l, j)).sum::<f32>() + biasv[j];
            }
        }
        let sums_v: Vec<f32> = (0..n).map(|j| (0..m).map(|i| yv[i * n + j]).sum()).collect();
        let maxima_v: Vec<f32> =
            (0..m).map(|i| (0..n).map(|j| yv[i * n + j]).fold(f32::NEG_INFINITY, f32::max)).collect();

        let b_dims = if transpose_b { [n, k] } else { [k, n] };
        let arguments = [
            HostBuffer::from_slice(&[m, k], &av).unwrap(),
            HostBuffer::from_slice(&b_dims, &bv).unwrap(),
            HostBuffer::from_slice(&[n], &biasv).unwrap(),
        ];
        let got = executable.run(&arguments).unwrap();
        let what = format!("m={m} k={k} n={n} transpose_b={transpose_b}");
        assert_close(&format!("{what}: y"), &got[0], &HostBuffer::from_slice(&[m, n], &yv).unwrap(), 1e-5, 1e-5);
        assert_close(&format!("{what}: sums"), &got[1], &HostBuffer::from_slice(&[n], &sums_v).unwrap(), 1e-5, 1e-4);
        assert_close(
            &format!("{what}: maxima"),
            &got[2],
            &HostBuffer::from_slice(&[m], &maxima_v).unwrap(),
            1e-5,
            1e-5,
        );
    }

    #[test]
    fn empty_one_by_one_and_prime_shapes() {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (0, 3, 5), (3, 0, 5), (3, 5, 0), (0, 0, 0), (31, 1, 17), (1, 97, 1)] {
            dense_and_reductions(m, k, n, false);
            dense_and_reductions(m, k, n, true);
        }
    }

    #[test]
    fn integer_and_predicate_ops_follow_xla() {
        let (s32, pred, f32) = (ElementType::S32, ElementType::Pred, ElementType::F32);
        let mut b = Builder::default();
        let x = b.param(s32, &[5]);
        let y = b.param(s32, &[5]);
        let quotient = b.op("divide", s32, &[5], &[x, y]);
        let remainder = b.op("remainder", s32, &[5], &[x, y]);
        let less = b.op("compare", pred, &[5], &[x, y]);
        b.instructions.last_mut().unwrap().comparison_direction = "LT".into();
        let smaller = b.op("select", s32, &[5], &[less, x, y]);
        let as_float = b.op("convert", f32, &[5], &[smaller]);
        let index = b.with_dims("iota", s32, &[2, 3], &[], &[1]);
        let root = b.tuple(&[quotient, remainder, smaller, as_float, index]);
        let executable = Executable::from_module(&b.build(root)).unwrap();
        let x = HostBuffer::from_slice(&[5], &[7i32, -7, 5, i32::MIN, 3]).unwrap();
        let y = HostBuffer::from_slice(&[5], &[2i32, 2, 0, -1, 9]).unwrap();
        let got = executable.run(&[x, y]).unwrap();
        assert_eq!(got[0].to_vec::<i32>().unwrap(), [3, -3, -1, i32::MIN, 0]);
        assert_eq!(got[1].to_vec::<i32>().unwrap(), [1, -1, 5, 0, 3]);
        assert_eq!(got[2].to_vec::<i32>().unwrap(), [2, -7, 0, i32::MIN, 3]);
        assert_eq!(got[3].to_vec::<f32>().unwrap(), [2.0, -7.0, 0.0, i32::MIN as f32, 3.0]);
        assert_eq!(got[4].to_vec::<i32>().unwrap(), [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn transpose_slice_and_concatenate_move_elements() {
        let f32 = ElementType::F32;
        let mut b = Builder::default();
        let x = b.param(f32, &[2, 3]);
        let t = b.with_dims("transpose", f32, &[3, 2], &[x], &[1, 0]);
        let s = b.op("slice", f32, &[2, 1], &[t]);
        b.instructions.last_mut().unwrap().slice_dimensions = vec![
            tfwasm_xla::proto::hlo_instruction_proto::SliceDimensions { start: 1, limit: 3, stride: 1 },
            tfwasm_xla::proto::hlo_instruction_proto::SliceDimensions { start: 1, limit: 2, stride: 1 },
        ];
        let c = b.with_dims("concatenate", f32, &[2, 4], &[s, s, s, s], &[1]);
        let root = b.tuple(&[t, c]);
        let executable = Executable::from_module(&b.build(root)).unwrap();
        let got = executable.run(&[HostBuffer::from_slice(&[2, 3], &[0f32, 1., 2., 3., 4., 5.]).unwrap()]).unwrap();
        assert_eq!(got[0].to_vec::<f32>().unwrap(), [0., 3., 1., 4., 2., 5.]);
        assert_eq!(got[1].to_vec::<f32>().unwrap(), [4., 4., 4., 4., 5., 5., 5., 5.]);
    }

    #[test]
    fn outputs_are_separate_buffers_even_of_a_parameter() {
        let f32 = ElementType::F32;
        let mut b = Builder::default();
        let x = b.param(f32, &[3]);
        let root = b.tuple(&[x, x]);
        let executable = Executable::from_module(&b.build(root)).unwrap();
        let input = HostBuffer::from_slice(&[3], &[1f32, 2., 3.]).unwrap();
        let got = executable.run(std::slice::from_ref(&input)).unwrap();
        assert_eq!(got.len(), 2);
        assert_ne!(got[0].bytes().as_ptr(), got[1].bytes().as_ptr());
        assert_ne!(got[0].bytes().as_ptr(), input.bytes().as_ptr());
        assert_eq!(got[1].to_vec::<f32>().unwrap(), [1., 2., 3.]);
    }

    #[test]
    fn dead_values_give_their_slots_to_later_ones() {
        // A chain of 20 negations of [64] needs two slots, not twenty.
        let f32 = ElementType::F32;
        let mut b = Builder::default();
        let mut v = b.param(f32, &[64]);
        for _ in 0..20 {
            v = b.op("negate", f32, &[64], &[v]);
        }
        let executable = Executable::from_module(&b.build(v)).unwrap();
        assert_eq!(executable.step_count(), 20);
        assert_eq!(executable.arena_bytes(), 2 * 64 * 4);
        let got = executable.run(&[HostBuffer::from_slice(&[64], &values(64, 9)).unwrap()]).unwrap();
        assert_eq!(got[0].to_vec::<f32>().unwrap(), values(64, 9));
    }
}

mod errors {
    use super::*;

    #[test]
    fn an_opcode_without_a_plan_names_itself_and_the_tensorflow_op() {
        let f32 = ElementType::F32;
        let mut b = Builder::default();
        let x = b.param(f32, &[4]);
        let y = b.op("cbrt-of-something", f32, &[4], &[x]);
        b.instructions.last_mut().unwrap().metadata = Some(OpMetadata {
            op_type: "StatelessWhile".into(),
            op_name: "model/loop/while".into(),
            ..Default::default()
        });
        let error = Executable::from_module(&b.build(y)).unwrap_err();
        assert_eq!(error.opcode(), Some("cbrt-of-something"));
        let message = error.to_string();
        for needle in ["cbrt-of-something", "StatelessWhile", "model/loop/while", "jit_compile=False"] {
            assert!(message.contains(needle), "{message} lacks {needle}");
        }
    }

    #[test]
    fn the_keras_step_needs_every_opcode_it_uses_and_an_unknown_one_fails_compile() {
        let mut module = HloModuleProto::decode(fixture("keras_mlp_adam_step.hlo.pb").as_slice()).unwrap();
        let entry = module.computations.iter_mut().find(|c| c.name == module.entry_computation_name).unwrap();
        let sqrt = entry.instructions.iter_mut().find(|i| i.opcode == "sqrt").unwrap();
        sqrt.opcode = "rng-bit-generator".into();
        let error = Executable::from_module(&module).unwrap_err().to_string();
        assert!(error.contains("rng-bit-generator") && error.contains("TensorFlow op Sqrt"), "{error}");
    }

    #[test]
    fn a_non_default_layout_is_refused() {
        let mut b = Builder::default();
        let x = b.param(ElementType::F32, &[2, 3]);
        b.instructions[0].shape.as_mut().unwrap().layout.as_mut().unwrap().minor_to_major = vec![0, 1];
        let error = Executable::from_module(&b.build(x)).unwrap_err().to_string();
        assert!(error.contains("layout {0,1}") && error.contains("{1,0}"), "{error}");
    }

    #[test]
    fn an_unrecognised_reducer_is_refused() {
        let f32 = ElementType::F32;
        let mut b = Builder::default();
        let x = b.param(f32, &[4]);
        let zero = b.constant(&HostBuffer::scalar(0f32));
        let reducer = b.reducer("subtract", f32);
        let r = b.reduce(&[], x, zero, &[0], reducer);
        let error = Executable::from_module(&b.build(r)).unwrap_err().to_string();
        assert!(error.contains("reducer computation reducer_subtract"), "{error}");
    }

    #[test]
    fn literals_round_trip() {
        let buffer = HostBuffer::from_slice(&[2], &[1.5f64, -2.0]).unwrap();
        let literal: LiteralProto = buffer_to_literal(&buffer);
        assert_eq!(literal_to_buffer(&literal).unwrap().to_vec::<f64>().unwrap(), [1.5, -2.0]);
        let mut short = literal.clone();
        short.f64s.pop();
        assert!(literal_to_buffer(&short).unwrap_err().contains("f64[2] literal with 1 f64s"));
    }
}
