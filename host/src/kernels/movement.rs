//! (being written)

use super::KernelDef;

pub const KERNELS: &[KernelDef] = &[];
