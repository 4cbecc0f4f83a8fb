//! Reading a decoded module: shapes (with the layout check), computations
//! and instructions by id.

use std::collections::HashMap;

use tfwasm_proto::hlo::{HloComputationProto, HloInstructionProto, HloModuleProto, PrimitiveType, ShapeProto};

use crate::buffer::{ArrayShape, ElementType};

/// An instruction's shape: an array, or a tuple of shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    Array(ArrayShape),
    Tuple(Vec<Shape>),
}

/// The shape of `proto`, or why tfwasm cannot hold it.
pub fn shape(proto: &ShapeProto) -> Result<Shape, String> {
    if proto.element_type == PrimitiveType::Tuple as i32 {
        return proto.tuple_shapes.iter().map(shape).collect::<Result<_, _>>().map(Shape::Tuple);
    }
    array_shape(proto).map(Shape::Array)
}

/// The array shape of `proto`: a known element type, static dimensions and
/// the default layout (row-major, `minor_to_major` = `{n-1, ..., 0}`).
pub fn array_shape(proto: &ShapeProto) -> Result<ArrayShape, String> {
    let ty = ElementType::from_primitive(proto.element_type)?;
    let dims = proto
        .dimensions
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} is negative")))
        .collect::<Result<Vec<_>, _>>()?;
    if proto.is_dynamic_dimension.iter().any(|&dynamic| dynamic) {
        return Err(format!("dynamic dimensions ({:?}) are not supported", proto.is_dynamic_dimension));
    }
    if dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none_or(|n| n.checked_mul(ty.size()).is_none()) {
        return Err(format!("shape {ty}{dims:?} is too large"));
    }
    if let Some(layout) = &proto.layout {
        let rank = dims.len() as i64;
        let default = layout.minor_to_major.is_empty() || layout.minor_to_major.iter().copied().eq((0..rank).rev());
        if !default || !layout.tiles.is_empty() || layout.element_size_in_bits != 0 || layout.memory_space != 0 {
            return Err(format!(
                "layout {{{}}}{}{} is not supported: tfwasm runs the default descending layout {{{}}} only",
                layout.minor_to_major.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
                if layout.tiles.is_empty() { "" } else { " with tiles" },
                if layout.memory_space != 0 { " in another memory space" } else { "" },
                (0..rank).rev().map(|d| d.to_string()).collect::<Vec<_>>().join(","),
            ));
        }
    }
    Ok(ArrayShape { ty, dims })
}

/// A computation's instructions by id.
///
/// TensorFlow 2.21's XLA numbers an instruction `computation id << 32 |
/// local id`, and names operands either way (the entry computation of a
/// captured module by local id, its reducers by the whole id): both resolve.
pub(crate) struct Computation<'m> {
    pub proto: &'m HloComputationProto,
    by_id: HashMap<i64, usize>,
    by_local_id: HashMap<i64, usize>,
}

impl<'m> Computation<'m> {
    pub fn new(proto: &'m HloComputationProto) -> Computation<'m> {
        let by_id = proto.instructions.iter().enumerate().map(|(i, instr)| (instr.id, i)).collect();
        let by_local_id = proto.instructions.iter().enumerate().map(|(i, instr)| (instr.id & 0xffff_ffff, i)).collect();
        Computation { proto, by_id, by_local_id }
    }

    /// The position of instruction `id`.
    pub fn index(&self, id: i64) -> Option<usize> {
        self.by_id.get(&id).or_else(|| self.by_local_id.get(&(id & 0xffff_ffff))).copied()
    }

    pub fn instruction(&self, id: i64) -> Option<&'m HloInstructionProto> {
        self.index(id).map(|i| &self.proto.instructions[i])
    }

    /// The root: `root_id`, else (older producers) the last instruction.
    pub fn root(&self) -> Option<usize> {
        self.index(self.proto.root_id).or(self.proto.instructions.len().checked_sub(1))
    }
}

/// The module's computations by id, and which is the entry.
pub(crate) fn entry_computation(module: &HloModuleProto) -> Result<&HloComputationProto, String> {
    module
        .computations
        .iter()
        .find(|c| !module.entry_computation_name.is_empty() && c.name == module.entry_computation_name)
        .or_else(|| module.computations.iter().find(|c| c.id == module.entry_computation_id))
        .or_else(|| module.computations.last())
        .ok_or_else(|| "the module has no computation".to_owned())
}
