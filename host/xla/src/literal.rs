//! XLA literals (`LiteralProto`): a module's constants, and the recorded
//! arguments and results the tests replay.

use tfwasm_kernels::TfBool;
use tfwasm_proto::hlo::{LiteralProto, ShapeProto};

use crate::buffer::{ArrayShape, ElementType, HostBuffer};
use crate::hlo::array_shape;

/// The array a literal holds. Tuple literals are refused (tf2xla makes
/// none for constants; a tuple result is read element by element).
pub fn literal_to_buffer(literal: &LiteralProto) -> Result<HostBuffer, String> {
    let shape = literal.shape.as_ref().ok_or("a literal without a shape")?;
    let shape = array_shape(shape)?;
    let count = shape.len();
    let wrong = |what: &str, got: usize| format!("a {shape} literal with {got} {what}");
    let bytes: Vec<u8> = match shape.ty {
        ElementType::Pred => {
            if literal.preds.len() != count {
                return Err(wrong("preds", literal.preds.len()));
            }
            literal.preds.iter().map(|&b| b as u8).collect()
        }
        ElementType::U8 => literal.u8s.clone(),
        ElementType::S32 => {
            if literal.s32s.len() != count {
                return Err(wrong("s32s", literal.s32s.len()));
            }
            literal.s32s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        ElementType::S64 => {
            if literal.s64s.len() != count {
                return Err(wrong("s64s", literal.s64s.len()));
            }
            literal.s64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        ElementType::U64 => {
            if literal.u64s.len() != count {
                return Err(wrong("u64s", literal.u64s.len()));
            }
            literal.u64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        ElementType::F32 => {
            if literal.f32s.len() != count {
                return Err(wrong("f32s", literal.f32s.len()));
            }
            literal.f32s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        ElementType::F64 => {
            if literal.f64s.len() != count {
                return Err(wrong("f64s", literal.f64s.len()));
            }
            literal.f64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        // Packed little-endian 16-bit values.
        ElementType::F16 => literal.f16s.clone(),
        ElementType::BF16 => literal.bf16s.clone(),
    };
    // The host is little-endian (x86_64, aarch64): the wire's bytes are the
    // elements' bytes.
    HostBuffer::from_bytes(shape.ty, &shape.dims, &bytes)
}

/// A literal holding `buffer` (tests, and modules built by hand).
pub fn buffer_to_literal(buffer: &HostBuffer) -> LiteralProto {
    let shape = shape_proto(buffer.shape());
    let bytes = buffer.bytes();
    let mut literal = LiteralProto { shape: Some(shape), ..Default::default() };
    macro_rules! words {
        ($t:ty, $n:literal) => {
            bytes
                .chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_else(|_| unreachable!())))
                .collect()
        };
    }
    match buffer.element_type() {
        ElementType::Pred => literal.preds = bytes.iter().map(|&b| TfBool(b).get()).collect(),
        ElementType::U8 => literal.u8s = bytes.to_vec(),
        ElementType::S32 => literal.s32s = words!(i32, 4),
        ElementType::S64 => literal.s64s = words!(i64, 8),
        ElementType::U64 => literal.u64s = words!(u64, 8),
        ElementType::F32 => literal.f32s = words!(f32, 4),
        ElementType::F64 => literal.f64s = words!(f64, 8),
        ElementType::F16 => literal.f16s = bytes.to_vec(),
        ElementType::BF16 => literal.bf16s = bytes.to_vec(),
    }
    literal
}

/// The wire shape of an array, with the default layout.
pub fn shape_proto(shape: &ArrayShape) -> ShapeProto {
    let rank = shape.dims.len() as i64;
    ShapeProto {
        element_type: shape.ty.primitive() as i32,
        dimensions: shape.dims.iter().map(|&d| d as i64).collect(),
        layout: Some(tfwasm_proto::hlo::LayoutProto {
            minor_to_major: (0..rank).rev().collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}
