//! Host buffers: the arrays a module takes and returns, and the storage its
//! instructions compute into.

use std::cell::UnsafeCell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use tfwasm_kernels::error::Error as KernelError;
use tfwasm_kernels::{DType, Element, Owner, ShapeDisplay, Tensor};
use tfwasm_proto::hlo::PrimitiveType;

/// The XLA element types tfwasm executes: those with a kernel [`DType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    Pred,
    U8,
    S32,
    S64,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl ElementType {
    pub const fn dtype(self) -> DType {
        match self {
            ElementType::Pred => DType::Bool,
            ElementType::U8 => DType::U8,
            ElementType::S32 => DType::I32,
            ElementType::S64 => DType::I64,
            ElementType::U64 => DType::U64,
            ElementType::F16 => DType::F16,
            ElementType::BF16 => DType::BF16,
            ElementType::F32 => DType::F32,
            ElementType::F64 => DType::F64,
        }
    }

    pub const fn from_dtype(dtype: DType) -> ElementType {
        match dtype {
            DType::Bool => ElementType::Pred,
            DType::U8 => ElementType::U8,
            DType::I32 => ElementType::S32,
            DType::I64 => ElementType::S64,
            DType::U64 => ElementType::U64,
            DType::F16 => ElementType::F16,
            DType::BF16 => ElementType::BF16,
            DType::F32 => ElementType::F32,
            DType::F64 => ElementType::F64,
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        self.dtype().size()
    }

    /// The wire number (`PrimitiveType`).
    pub fn primitive(self) -> PrimitiveType {
        match self {
            ElementType::Pred => PrimitiveType::Pred,
            ElementType::U8 => PrimitiveType::U8,
            ElementType::S32 => PrimitiveType::S32,
            ElementType::S64 => PrimitiveType::S64,
            ElementType::U64 => PrimitiveType::U64,
            ElementType::F16 => PrimitiveType::F16,
            ElementType::BF16 => PrimitiveType::Bf16,
            ElementType::F32 => PrimitiveType::F32,
            ElementType::F64 => PrimitiveType::F64,
        }
    }

    /// The type of wire number `number`, or the reason tfwasm has none.
    pub fn from_primitive(number: i32) -> Result<ElementType, String> {
        Ok(match PrimitiveType::try_from(number) {
            Ok(PrimitiveType::Pred) => ElementType::Pred,
            Ok(PrimitiveType::U8) => ElementType::U8,
            Ok(PrimitiveType::S32) => ElementType::S32,
            Ok(PrimitiveType::S64) => ElementType::S64,
            Ok(PrimitiveType::U64) => ElementType::U64,
            Ok(PrimitiveType::F16) => ElementType::F16,
            Ok(PrimitiveType::Bf16) => ElementType::BF16,
            Ok(PrimitiveType::F32) => ElementType::F32,
            Ok(PrimitiveType::F64) => ElementType::F64,
            Ok(other) => return Err(format!("element type {} is not supported", other.as_str_name().to_lowercase())),
            Err(_) => return Err(format!("unknown element type number {number}")),
        })
    }

    /// XLA's name for the type (`f32`, `pred`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ElementType::Pred => "pred",
            ElementType::U8 => "u8",
            ElementType::S32 => "s32",
            ElementType::S64 => "s64",
            ElementType::U64 => "u64",
            ElementType::F16 => "f16",
            ElementType::BF16 => "bf16",
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
        }
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An array type: element type and dimensions (row-major, XLA's default
/// descending layout).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub ty: ElementType,
    pub dims: Vec<usize>,
}

impl ArrayShape {
    pub fn new(ty: ElementType, dims: &[usize]) -> ArrayShape {
        ArrayShape { ty, dims: dims.to_vec() }
    }

    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> usize {
        self.len() * self.ty.size()
    }
}

impl fmt::Display for ArrayShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(usize::to_string).collect();
        write!(f, "{}[{}]", self.ty, dims.join(","))
    }
}

/// Bytes, 8-aligned, written through raw pointers by the one step that
/// owns them at a time (the plan guarantees it) and read by later steps;
/// or, for [`crate::Executable::run_into`], the caller's argument bytes,
/// only ever read.
pub(crate) struct Storage {
    memory: Memory,
    bytes: usize,
}

enum Memory {
    Owned(Box<[UnsafeCell<u64>]>),
    /// The caller's bytes, borrowed for one run: every `Arc` of such a
    /// storage is dropped before the run returns (`run_into` checks).
    Borrowed(NonNull<u8>),
}

// SAFETY: the bytes are plain data. Writes happen only through the one
// writable tensor the executor hands the step that owns the storage, while
// no reader exists (the plan never gives a step's output the storage of a
// value still live); everything else reads.
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}

impl Storage {
    pub(crate) fn zeroed(bytes: usize) -> Arc<Storage> {
        let words = bytes.div_ceil(8);
        Arc::new(Storage { memory: Memory::Owned((0..words).map(|_| UnsafeCell::new(0)).collect()), bytes })
    }

    /// A storage over the caller's `bytes`, never written.
    ///
    /// # Safety
    /// Every `Arc` of the result is dropped while `bytes` is still borrowed,
    /// and nothing writes through it (the executor never writes a
    /// parameter).
    pub(crate) unsafe fn borrowed(bytes: &[u8]) -> Arc<Storage> {
        let ptr = NonNull::new(bytes.as_ptr().cast_mut()).unwrap_or(NonNull::dangling());
        Arc::new(Storage { memory: Memory::Borrowed(ptr), bytes: bytes.len() })
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Arc<Storage> {
        let storage = Storage::zeroed(bytes.len());
        // SAFETY: a fresh storage of `bytes.len()` bytes nobody else sees.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), storage.ptr().as_ptr(), bytes.len()) };
        storage
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        match &self.memory {
            // The slice pointer carries provenance over every word;
            // UnsafeCell makes writing through it sound while `&self` exists.
            Memory::Owned(words) => {
                NonNull::new(UnsafeCell::raw_get(words.as_ptr()).cast::<u8>()).unwrap_or(NonNull::dangling())
            }
            Memory::Borrowed(ptr) => *ptr,
        }
    }

    /// The first `len` bytes.
    ///
    /// # Safety
    /// Nobody writes them while the slice lives.
    pub(crate) unsafe fn bytes(&self, len: usize) -> &[u8] {
        assert!(len <= self.bytes, "reading {len} bytes of a {}-byte storage", self.bytes);
        // SAFETY: in bounds (checked), initialised (zeroed at creation),
        // no writer per the caller.
        unsafe { std::slice::from_raw_parts(self.ptr().as_ptr(), len) }
    }
}

/// An array in host memory: what [`crate::Executable::run`] takes and
/// returns. Immutable once made; cloning shares the bytes.
#[derive(Clone)]
pub struct HostBuffer {
    shape: ArrayShape,
    storage: Arc<Storage>,
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({})", self.shape)
    }
}

impl HostBuffer {
    /// Zeros.
    pub fn zeros(ty: ElementType, dims: &[usize]) -> HostBuffer {
        let shape = ArrayShape::new(ty, dims);
        let storage = Storage::zeroed(shape.bytes());
        HostBuffer { shape, storage }
    }

    /// A copy of `bytes`, which must be exactly the array's (row-major).
    pub fn from_bytes(ty: ElementType, dims: &[usize], bytes: &[u8]) -> Result<HostBuffer, String> {
        let shape = ArrayShape::new(ty, dims);
        if bytes.len() != shape.bytes() {
            return Err(format!("{} bytes for {shape}, which needs {}", bytes.len(), shape.bytes()));
        }
        Ok(HostBuffer { shape, storage: Storage::from_bytes(bytes) })
    }

    /// A copy of `values` (row-major) as an array of `dims`.
    pub fn from_slice<T: Element>(dims: &[usize], values: &[T]) -> Result<HostBuffer, String> {
        let ty = ElementType::from_dtype(T::DTYPE);
        // SAFETY: `Element` types are plain data of `DTYPE.size()` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) };
        HostBuffer::from_bytes(ty, dims, bytes)
    }

    /// A scalar.
    pub fn scalar<T: Element>(value: T) -> HostBuffer {
        HostBuffer::from_slice(&[], &[value]).unwrap_or_else(|_| unreachable!("one value is a scalar"))
    }

    pub(crate) fn from_storage(shape: ArrayShape, storage: Arc<Storage>) -> HostBuffer {
        debug_assert!(storage.len() >= shape.bytes());
        HostBuffer { shape, storage }
    }

    pub fn shape(&self) -> &ArrayShape {
        &self.shape
    }

    pub fn element_type(&self) -> ElementType {
        self.shape.ty
    }

    pub fn dims(&self) -> &[usize] {
        &self.shape.dims
    }

    pub fn len(&self) -> usize {
        self.shape.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shape.is_empty()
    }

    /// The elements' bytes, row-major.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a HostBuffer's storage is never written after it was made.
        unsafe { self.storage.bytes(self.shape.bytes()) }
    }

    /// The elements, if `T` is the element type.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, String> {
        if T::DTYPE != self.shape.ty.dtype() {
            return Err(format!("reading a {} buffer as {}", self.shape.ty, ElementType::from_dtype(T::DTYPE)));
        }
        let bytes = self.bytes();
        let mut out = vec![T::default(); self.len()];
        // SAFETY: `out` holds `len` elements of `size` bytes; every bit
        // pattern is a valid `T` (`Element`'s contract).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), bytes.len()) };
        Ok(out)
    }

    pub(crate) fn view(&self) -> View {
        View { shape: self.shape.clone(), storage: Arc::clone(&self.storage) }
    }
}

/// An array the executor reads or writes: a shape over (the start of) a
/// storage, which may be larger (a reused slot).
#[derive(Clone)]
pub(crate) struct View {
    pub(crate) shape: ArrayShape,
    pub(crate) storage: Arc<Storage>,
}

impl View {
    /// The view as a kernel tensor of `dims` (same element count).
    ///
    /// # Safety
    /// While the tensor lives nobody writes the view's bytes; if
    /// `writable`, nobody reads them either.
    pub(crate) unsafe fn tensor_as(&self, dims: &[usize], writable: bool) -> Result<Tensor, KernelError> {
        let count: usize = dims.iter().product();
        if count != self.shape.len() || self.shape.bytes() > self.storage.len() {
            return Err(KernelError::Internal(format!(
                "a view of {} taken as shape {}",
                self.shape,
                ShapeDisplay(dims)
            )));
        }
        let owner = Owner::value(Arc::clone(&self.storage));
        // SAFETY: the storage holds at least the view's bytes (checked),
        // 8-aligned, kept alive by `owner`; exclusivity per the caller.
        unsafe { Tensor::from_raw(self.shape.ty.dtype(), dims, Some(self.storage.ptr()), writable, owner) }
    }

    /// # Safety
    /// As [`View::tensor_as`].
    pub(crate) unsafe fn tensor(&self, writable: bool) -> Result<Tensor, KernelError> {
        // SAFETY: per the caller.
        unsafe { self.tensor_as(&self.shape.dims, writable) }
    }
}
