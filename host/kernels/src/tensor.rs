//! The kernel-facing view of TensorFlow: element types, tensors, the
//! per-call [`OpContext`] and the per-node [`Attrs`].
//!
//! Kernels are written against these types only. `abi/kernels.rs` implements
//! [`OpContext`] and [`Attrs`] over TensorFlow's C handles; [`LocalContext`]
//! implements them over plain vectors, so every kernel is unit-tested
//! without TensorFlow.

use std::any::Any;
use std::cell::{RefCell, UnsafeCell};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::shape::{element_count, Dims, ShapeDisplay};
use crate::error::Error;

/// The element types tfwasm kernels handle, named as TensorFlow does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// IEEE half precision (Keras' `mixed_float16`).
    F16,
    /// bfloat16: float32's exponent with 8 bits of mantissa
    /// (`mixed_bfloat16`).
    BF16,
    F64,
    I32,
    I64,
    U8,
    U64,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// TensorFlow's Python name for the type, as users see it.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F64 => "float64",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U64 => "uint64",
            DType::Bool => "bool",
        }
    }

    /// TensorFlow's `DataType` number for the type, the same in its C API
    /// (`TF_DataType`) and in its protos (`GraphDef` attributes).
    pub const fn datatype(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::F64 => 2,
            DType::I32 => 3,
            DType::U8 => 4,
            DType::I64 => 9,
            DType::Bool => 10,
            DType::BF16 => 14,
            DType::F16 => 19,
            DType::U64 => 23,
        }
    }

    /// The type whose `DataType` number is `number`, if tfwasm has one.
    pub const fn from_datatype(number: i64) -> Option<DType> {
        Some(match number {
            1 => DType::F32,
            2 => DType::F64,
            3 => DType::I32,
            4 => DType::U8,
            9 => DType::I64,
            10 => DType::Bool,
            14 => DType::BF16,
            19 => DType::F16,
            23 => DType::U64,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// TensorFlow's `bool` element: one byte, 0 or 1. A newtype over `u8` so a
/// byte that is neither (never written by TensorFlow, but memory is memory)
/// is still a valid value; it reads as `true`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct TfBool(pub u8);

impl TfBool {
    pub const fn get(self) -> bool {
        self.0 != 0
    }
}

impl From<bool> for TfBool {
    fn from(value: bool) -> Self {
        TfBool(value as u8)
    }
}

/// A Rust type that is the in-memory representation of one [`DType`].
///
/// # Safety
/// Every bit pattern of `Self`'s size must be a valid `Self`, and
/// `size_of::<Self>() == DTYPE.size()`: tensor bytes are reinterpreted as
/// `Self` without checks.
pub unsafe trait Element: Copy + Default + Send + Sync + fmt::Debug + 'static {
    const DTYPE: DType;
}

// SAFETY: plain numbers (every bit pattern valid) of the sizes `DType::size` gives.
unsafe impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
// SAFETY: `half`'s types are `repr(transparent)` over `u16`; every bit
// pattern is a number, an infinity or a NaN.
unsafe impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}
// SAFETY: as above.
unsafe impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
}
// SAFETY: as above.
unsafe impl Element for f64 {
    const DTYPE: DType = DType::F64;
}
// SAFETY: as above.
unsafe impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
// SAFETY: as above.
unsafe impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
// SAFETY: as above.
unsafe impl Element for u8 {
    const DTYPE: DType = DType::U8;
}
// SAFETY: as above.
unsafe impl Element for u64 {
    const DTYPE: DType = DType::U64;
}
// SAFETY: `TfBool` is `repr(transparent)` over `u8`.
unsafe impl Element for TfBool {
    const DTYPE: DType = DType::Bool;
}

/// An unsigned integer as wide as an element, for kernels that only move
/// elements (transpose, concat, slice, gather, …) and so handle every type
/// of that width alike: `bool` and `uint8` as `u8`, `float16` as `u16`,
/// `float32` and `int32` as `u32`, `float64` and `int64` as `u64`.
///
/// # Safety
/// Every bit pattern is a valid `Self`, and `align_of::<Self>()` is at most
/// the alignment TensorFlow gives any tensor of that element width.
pub unsafe trait Word: Copy + Default + PartialEq + Send + Sync + fmt::Debug + 'static {}

// SAFETY: plain unsigned integers, aligned to their size, which is the
// alignment of every element type of that size.
unsafe impl Word for u8 {}
// SAFETY: as above.
unsafe impl Word for u16 {}
// SAFETY: as above.
unsafe impl Word for u32 {}
// SAFETY: as above.
unsafe impl Word for u64 {}

/// Evaluates `$body` with `$w` the [`Word`] as wide as `$dtype`'s elements.
macro_rules! by_width {
    ($dtype:expr, $w:ident => $body:expr) => {
        match $dtype.size() {
            1 => {
                type $w = u8;
                $body
            }
            2 => {
                type $w = u16;
                $body
            }
            4 => {
                type $w = u32;
                $body
            }
            8 => {
                type $w = u64;
                $body
            }
            width => unreachable!("no element type is {width} bytes wide"),
        }
    };
}
pub(crate) use by_width;

/// One tensor a kernel reads or writes: its type, shape and (borrowed)
/// bytes. Backed by a TensorFlow handle (released on drop) or, in tests, by
/// a vector.
pub struct Tensor {
    dtype: DType,
    shape: Dims,
    len: usize,
    /// Start of `len * dtype.size()` bytes; `None` when `len == 0`.
    data: Option<NonNull<u8>>,
    writable: bool,
    /// Keeps the bytes alive: a TensorFlow handle or a local vector.
    _owner: Owner,
}

/// What keeps a [`Tensor`]'s bytes alive. Built only through
/// [`Owner::handle`] (unsafe: its release runs on drop) or [`Owner::value`].
pub struct Owner(Kept);

enum Kept {
    /// A reference that `release` gives back when the tensor drops: a
    /// TensorFlow `TF_Tensor`, held without a box of its own (a small op's
    /// whole compute is a few microseconds; an allocation per tensor shows).
    Handle { handle: NonNull<std::ffi::c_void>, release: unsafe fn(NonNull<std::ffi::c_void>) },
    /// Any owned value: a vector, a shared buffer (held only to be dropped).
    Value(#[allow(dead_code)] Box<dyn Any + Send>),
}

impl Owner {
    /// An owner that calls `release(handle)` once, when dropped.
    ///
    /// # Safety
    /// `release(handle)` must be sound to call exactly once, from any
    /// thread, at any time before the handle's library is unloaded.
    pub unsafe fn handle(handle: NonNull<std::ffi::c_void>, release: unsafe fn(NonNull<std::ffi::c_void>)) -> Owner {
        Owner(Kept::Handle { handle, release })
    }

    /// An owner that keeps `value`.
    pub fn value(value: impl Any + Send) -> Owner {
        Owner(Kept::Value(Box::new(value)))
    }
}

// SAFETY: a `Handle` may be released from any thread (the contract of
// `Owner::handle`, its only constructor); a `Value` is `Send`.
unsafe impl Send for Owner {}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Kept::Handle { handle, release } = self.0 {
            // SAFETY: per `Owner::handle`, sound once; drop runs once.
            unsafe { release(handle) };
        }
    }
}

// SAFETY: a `Tensor` owns (a reference on) its buffer through `_owner`,
// which is `Send`; the raw pointer is only turned into slices borrowing the
// `Tensor`, with `&mut` access only through `&mut Tensor`.
unsafe impl Send for Tensor {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl Sync for Tensor {}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({} {})", self.dtype, ShapeDisplay(&self.shape))
    }
}

impl Tensor {
    /// Wraps memory owned by `owner`.
    ///
    /// # Safety
    /// If `len > 0`, `data` points to `len * dtype.size()` initialised bytes,
    /// aligned for `dtype`, that stay valid while `owner` lives and that no
    /// one else writes while the tensor lives. If `writable`, no one else
    /// reads them either (it is a fresh output).
    pub unsafe fn from_raw(
        dtype: DType,
        shape: &[usize],
        data: Option<NonNull<u8>>,
        writable: bool,
        owner: Owner,
    ) -> Result<Self, Error> {
        let len = element_count(shape)
            .ok_or_else(|| Error::Internal(format!("tensor shape {} is too large", ShapeDisplay(shape))))?;
        let data = if len == 0 { None } else { data };
        if len > 0 && data.is_none() {
            return Err(Error::Internal(format!("a {dtype} tensor of shape {} has no data", ShapeDisplay(shape))));
        }
        Ok(Tensor { dtype, shape: Dims::from_slice(shape), len, data, writable, _owner: owner })
    }

    /// A tensor over a vector (tests, scratch space).
    pub fn from_vec<T: Element>(shape: &[usize], values: Vec<T>) -> Result<Self, Error> {
        if element_count(shape) != Some(values.len()) {
            return Err(Error::Internal(format!("{} values for shape {}", values.len(), ShapeDisplay(shape))));
        }
        let mut values = values.into_boxed_slice();
        let data = NonNull::new(values.as_mut_ptr().cast::<u8>());
        // SAFETY: the boxed slice holds `len` initialised `T`s, aligned, and
        // moves into `_owner` without moving its heap buffer.
        unsafe { Tensor::from_raw(T::DTYPE, shape, data, true, Owner::value(values)) }
    }

    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Self, Error> {
        let len = element_count(shape)
            .ok_or_else(|| Error::Internal(format!("tensor shape {} is too large", ShapeDisplay(shape))))?;
        match dtype {
            DType::F32 => Tensor::from_vec(shape, vec![0f32; len]),
            DType::F16 => Tensor::from_vec(shape, vec![half::f16::ZERO; len]),
            DType::BF16 => Tensor::from_vec(shape, vec![half::bf16::ZERO; len]),
            DType::F64 => Tensor::from_vec(shape, vec![0f64; len]),
            DType::I32 => Tensor::from_vec(shape, vec![0i32; len]),
            DType::I64 => Tensor::from_vec(shape, vec![0i64; len]),
            DType::U8 => Tensor::from_vec(shape, vec![0u8; len]),
            DType::U64 => Tensor::from_vec(shape, vec![0u64; len]),
            DType::Bool => Tensor::from_vec(shape, vec![TfBool(0); len]),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check_dtype<T: Element>(&self) -> Result<(), Error> {
        if self.dtype == T::DTYPE {
            Ok(())
        } else {
            Err(Error::Internal(format!("a {} tensor read as {}", self.dtype, T::DTYPE)))
        }
    }

    /// The elements, row-major.
    pub fn data<T: Element>(&self) -> Result<&[T], Error> {
        self.check_dtype::<T>()?;
        Ok(match self.data {
            None => &[],
            // SAFETY: per `from_raw`'s contract `data` holds `len` valid,
            // aligned `T`s (the dtype matches), alive as long as `self`.
            Some(data) => unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<T>(), self.len) },
        })
    }

    /// The elements of a fresh output, for writing.
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T], Error> {
        self.check_dtype::<T>()?;
        if !self.writable {
            return Err(Error::Internal("a kernel tried to write one of its inputs".into()));
        }
        Ok(match self.data {
            None => &mut [],
            // SAFETY: as in `data`; a writable tensor's bytes are ours alone
            // (`from_raw`'s contract) and `&mut self` makes the slice unique.
            Some(data) => unsafe { std::slice::from_raw_parts_mut(data.as_ptr().cast::<T>(), self.len) },
        })
    }

    fn check_width<W: Word>(&self) -> Result<(), Error> {
        if self.dtype.size() == size_of::<W>() {
            Ok(())
        } else {
            Err(Error::Internal(format!("a {} tensor read as {}-byte words", self.dtype, size_of::<W>())))
        }
    }

    /// The elements as words of their width, whatever the dtype (see [`Word`]).
    pub fn words<W: Word>(&self) -> Result<&[W], Error> {
        self.check_width::<W>()?;
        Ok(match self.data {
            None => &[],
            // SAFETY: per `from_raw`'s contract `data` holds `len` elements
            // of `W`'s size, aligned for their dtype and so for `W`
            // (`Word`'s contract), alive as long as `self`; any bits are a `W`.
            Some(data) => unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<W>(), self.len) },
        })
    }

    /// The elements of a fresh output as words of their width, for writing.
    pub fn words_mut<W: Word>(&mut self) -> Result<&mut [W], Error> {
        self.check_width::<W>()?;
        if !self.writable {
            return Err(Error::Internal("a kernel tried to write one of its inputs".into()));
        }
        Ok(match self.data {
            None => &mut [],
            // SAFETY: as in `words`; a writable tensor's bytes are ours
            // alone and `&mut self` makes the slice unique.
            Some(data) => unsafe { std::slice::from_raw_parts_mut(data.as_ptr().cast::<W>(), self.len) },
        })
    }

    /// The single element of a one-element tensor, as a word of its width.
    pub fn scalar_word<W: Word>(&self) -> Result<W, Error> {
        match self.words::<W>()? {
            [value] => Ok(*value),
            _ => Err(Error::InvalidArgument(format!("expected a scalar, got shape {}", ShapeDisplay(&self.shape)))),
        }
    }

    /// The raw bytes, whatever the dtype (`Bitcast`).
    pub fn bytes(&self) -> &[u8] {
        match self.data {
            None => &[],
            // SAFETY: per `from_raw`'s contract `data` holds
            // `len * dtype.size()` initialised bytes alive as long as
            // `self`; `u8` needs no alignment.
            Some(data) => unsafe { std::slice::from_raw_parts(data.as_ptr(), self.len * self.dtype.size()) },
        }
    }

    /// The raw bytes of a fresh output, for writing.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], Error> {
        if !self.writable {
            return Err(Error::Internal("a kernel tried to write one of its inputs".into()));
        }
        Ok(match self.data {
            None => &mut [],
            // SAFETY: as in `bytes`; a writable tensor's bytes are ours
            // alone and `&mut self` makes the slice unique.
            Some(data) => unsafe { std::slice::from_raw_parts_mut(data.as_ptr(), self.len * self.dtype.size()) },
        })
    }

    /// The single element of a scalar (or one-element) tensor.
    pub fn scalar<T: Element>(&self) -> Result<T, Error> {
        match self.data::<T>()? {
            [value] => Ok(*value),
            _ => Err(Error::InvalidArgument(format!("expected a scalar, got shape {}", ShapeDisplay(&self.shape)))),
        }
    }

    /// An int32 or int64 tensor (shapes, axes, indices) as `i64`s.
    pub fn to_i64s(&self) -> Result<Vec<i64>, Error> {
        match self.dtype {
            DType::I32 => Ok(self.data::<i32>()?.iter().map(|&v| i64::from(v)).collect()),
            DType::I64 => Ok(self.data::<i64>()?.to_vec()),
            other => Err(Error::InvalidArgument(format!("expected an int32 or int64 tensor, got {other}"))),
        }
    }

    /// A copy of the elements (tests).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, Error> {
        self.data::<T>().map(<[T]>::to_vec)
    }
}

/// One execution of a kernel: its inputs, and its outputs to produce.
/// Indexes are TensorFlow's flat input/output positions.
pub trait OpContext {
    fn num_inputs(&self) -> usize;

    fn num_outputs(&self) -> usize;

    fn input(&self, index: usize) -> Result<Tensor, Error>;

    /// The dtype TensorFlow expects for output `index`.
    fn output_dtype(&self, index: usize) -> Result<DType, Error>;

    /// Allocates output `index` on the device with the expected dtype.
    fn allocate_output(&self, index: usize, shape: &[usize]) -> Result<Tensor, Error>;

    /// Makes output `index` share an input's buffer (same bytes, same
    /// shape), e.g. for ops that only rename a tensor.
    fn forward_input(&self, input: usize, output: usize) -> Result<(), Error>;

    /// Output `index` of `shape`, in the buffer of one of the `candidates`
    /// (input index and the kernel's handle on it) where TensorFlow allows
    /// it, else freshly allocated. TensorFlow forwards an input with the
    /// output's dtype and element count that nothing else holds, and
    /// *requires* a forward where it runs a kernel inside another op (a
    /// collective's merge writes into its accumulator). The handles are
    /// taken so that the kernel holds none of a buffer it may be given to
    /// write: the place hands back every candidate but the forwarded one.
    fn forward_or_allocate_output(
        &self,
        index: usize,
        shape: &[usize],
        candidates: Vec<(usize, Tensor)>,
    ) -> Result<OutputPlace, Error> {
        Ok(OutputPlace::allocated(self.allocate_output(index, shape)?, candidates))
    }
}

/// Where [`OpContext::forward_or_allocate_output`] put an output.
pub struct OutputPlace {
    /// The output, writable. When forwarded it holds the input's values.
    pub output: Tensor,
    /// The position among the candidates of the input whose buffer the
    /// output took, if one was forwarded.
    pub forwarded: Option<usize>,
    /// The candidates in the order given, `None` for the forwarded one
    /// (its values are the output's now).
    pub inputs: Vec<Option<Tensor>>,
}

impl OutputPlace {
    /// A freshly allocated `output`, every candidate handed back.
    pub fn allocated(output: Tensor, candidates: Vec<(usize, Tensor)>) -> OutputPlace {
        OutputPlace { output, forwarded: None, inputs: candidates.into_iter().map(|(_, t)| Some(t)).collect() }
    }
}

/// Whether `candidate` may hold an output of `dtype` and `len` elements:
/// TensorFlow's own conditions on the values (it checks the rest).
pub fn may_forward(candidate: &Tensor, dtype: DType, len: usize) -> bool {
    candidate.dtype() == dtype && candidate.len() == len
}

/// The attributes of the node a kernel is built for.
pub trait Attrs {
    fn has(&self, name: &str) -> bool;
    fn bool(&self, name: &str) -> Result<bool, Error>;
    fn int(&self, name: &str) -> Result<i64, Error>;
    fn float(&self, name: &str) -> Result<f32, Error>;
    fn ints(&self, name: &str) -> Result<Vec<i64>, Error>;
    fn string(&self, name: &str) -> Result<String, Error>;
    /// A type attribute; an error for types tfwasm has no [`DType`] for.
    fn dtype(&self, name: &str) -> Result<DType, Error>;
    /// A `list(string)` attribute (the fused products' `fused_ops`). Only
    /// the kernels that read one need it, so sources of attributes that
    /// never build those (most tests) keep this default, which refuses.
    fn strings(&self, name: &str) -> Result<Vec<String>, Error> {
        Err(Error::Internal(format!("attribute {name}: these attributes hold no string lists")))
    }
}

/// An [`OpContext`] over vectors, for tests and tools without TensorFlow.
/// Allocated outputs are filled with a marker (NaN for floats) so a kernel
/// that leaves an element unwritten fails its test.
pub struct LocalContext {
    inputs: Vec<Tensor>,
    output_dtypes: Vec<DType>,
    outputs: RefCell<Vec<Option<LocalOutput>>>,
}

/// An output a kernel allocated or forwarded, kept to be read back.
enum LocalOutput {
    Allocated(Scratch),
    Forwarded(usize),
}

/// A tensor in host memory outside TensorFlow that one writer fills and
/// that is read back once the writer is done: the outputs of a
/// [`LocalContext`], and the float32 results of a kernel run for a
/// narrower type (`half`).
pub struct Scratch {
    dtype: DType,
    shape: Vec<usize>,
    buffer: Arc<SharedBuffer>,
}

impl Scratch {
    /// A scratch tensor of every byte `fill`, and the writable tensor over it.
    pub fn new(dtype: DType, shape: &[usize], fill: u8) -> Result<(Scratch, Tensor), Error> {
        let len = element_count(shape).ok_or_else(|| Error::Internal("output shape too large".into()))?;
        let buffer = SharedBuffer::new(len * dtype.size(), fill);
        let tensor =
            // SAFETY: a fresh buffer of the tensor's bytes, aligned to 8;
            // `read` hands it out again only once the writer is done.
            unsafe { Tensor::from_raw(dtype, shape, Some(buffer.ptr()), true, Owner::value(Arc::clone(&buffer)))? };
        Ok((Scratch { dtype, shape: shape.to_vec(), buffer }, tensor))
    }

    /// The contents, read-only. The writable tensor `new` returned must be
    /// gone (its kernel returned), as every caller here ensures.
    pub fn read(&self) -> Result<Tensor, Error> {
        // SAFETY: the buffer holds the bytes of `shape` (allocated for it),
        // aligned to 8, and its writer is done.
        unsafe {
            Tensor::from_raw(
                self.dtype,
                &self.shape,
                Some(self.buffer.ptr()),
                false,
                Owner::value(Arc::clone(&self.buffer)),
            )
        }
    }
}

/// Bytes written through a raw pointer by the kernel while the context keeps
/// a reference to read them afterwards.
struct SharedBuffer(Box<[UnsafeCell<u64>]>);

// SAFETY: the buffer is written only by the kernel holding the one writable
// `Tensor` over it, and read by the context after the kernel returned.
unsafe impl Send for SharedBuffer {}
// SAFETY: as above.
unsafe impl Sync for SharedBuffer {}

impl SharedBuffer {
    fn new(bytes: usize, fill: u8) -> Arc<Self> {
        let words = bytes.div_ceil(8);
        let buffer = Arc::new(SharedBuffer((0..words).map(|_| UnsafeCell::new(0)).collect()));
        // SAFETY: `words * 8 >= bytes` writable bytes; no other reference
        // reads them yet.
        unsafe { std::ptr::write_bytes(buffer.ptr().as_ptr(), fill, bytes) };
        buffer
    }

    fn ptr(&self) -> NonNull<u8> {
        // The slice pointer carries provenance over every word; UnsafeCell
        // makes writing through it sound while `&self` exists.
        NonNull::new(UnsafeCell::raw_get(self.0.as_ptr()).cast::<u8>()).unwrap_or(NonNull::dangling())
    }
}

impl LocalContext {
    pub fn new(inputs: Vec<Tensor>, output_dtypes: &[DType]) -> Self {
        LocalContext {
            inputs,
            output_dtypes: output_dtypes.to_vec(),
            outputs: RefCell::new(output_dtypes.iter().map(|_| None).collect()),
        }
    }

    /// Runs `kernel` on `inputs` and returns its outputs (an error if it
    /// failed or left an output unset).
    pub fn run(kernel: &dyn super::Kernel, inputs: Vec<Tensor>, output_dtypes: &[DType]) -> Result<Vec<Tensor>, Error> {
        let ctx = LocalContext::new(inputs, output_dtypes);
        kernel.compute(&ctx)?;
        (0..output_dtypes.len())
            .map(|i| ctx.output(i).ok_or_else(|| Error::Internal(format!("the kernel did not set output {i}"))))
            .collect()
    }

    /// Output `index` once the kernel has produced it (read-only).
    pub fn output(&self, index: usize) -> Option<Tensor> {
        let outputs = self.outputs.borrow();
        match outputs.get(index)?.as_ref()? {
            LocalOutput::Forwarded(input) => self.input(*input).ok(),
            LocalOutput::Allocated(scratch) => scratch.read().ok(),
        }
    }
}

impl OpContext for LocalContext {
    fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    fn num_outputs(&self) -> usize {
        self.output_dtypes.len()
    }

    fn input(&self, index: usize) -> Result<Tensor, Error> {
        let tensor = self.inputs.get(index).ok_or_else(|| Error::Internal(format!("no input {index}")))?;
        // Each handle gets its own copy, so it may outlive the context.
        let bytes = tensor.len * tensor.dtype.size();
        let buffer = SharedBuffer::new(bytes, 0);
        if let Some(src) = tensor.data {
            // SAFETY: `src` holds `bytes` bytes; the buffer is fresh.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buffer.ptr().as_ptr(), bytes) };
        }
        // SAFETY: the fresh buffer holds the copied bytes, aligned to 8.
        unsafe { Tensor::from_raw(tensor.dtype, &tensor.shape, Some(buffer.ptr()), false, Owner::value(buffer)) }
    }

    fn output_dtype(&self, index: usize) -> Result<DType, Error> {
        self.output_dtypes.get(index).copied().ok_or_else(|| Error::Internal(format!("no output {index}")))
    }

    fn allocate_output(&self, index: usize, shape: &[usize]) -> Result<Tensor, Error> {
        let (scratch, tensor) = Scratch::new(self.output_dtype(index)?, shape, 0xFF)?;
        self.outputs.borrow_mut()[index] = Some(LocalOutput::Allocated(scratch));
        Ok(tensor)
    }

    fn forward_input(&self, input: usize, output: usize) -> Result<(), Error> {
        if input >= self.inputs.len() || output >= self.output_dtypes.len() {
            return Err(Error::Internal(format!("cannot forward input {input} to output {output}")));
        }
        self.outputs.borrow_mut()[output] = Some(LocalOutput::Forwarded(input));
        Ok(())
    }

    /// Forwards the first candidate that may hold the output, as TensorFlow
    /// does when nothing else holds the input, so kernels' in-place paths
    /// run in tests: the output is a writable copy of its values.
    fn forward_or_allocate_output(
        &self,
        index: usize,
        shape: &[usize],
        candidates: Vec<(usize, Tensor)>,
    ) -> Result<OutputPlace, Error> {
        let dtype = self.output_dtype(index)?;
        let len = element_count(shape).ok_or_else(|| Error::Internal("output shape too large".into()))?;
        let Some(position) = candidates.iter().position(|(_, t)| may_forward(t, dtype, len)) else {
            return Ok(OutputPlace::allocated(self.allocate_output(index, shape)?, candidates));
        };
        let (scratch, mut output) = Scratch::new(dtype, shape, 0)?;
        output.bytes_mut()?.copy_from_slice(candidates[position].1.bytes());
        self.outputs.borrow_mut()[index] = Some(LocalOutput::Allocated(scratch));
        let inputs = candidates.into_iter().enumerate().map(|(i, (_, t))| (i != position).then_some(t)).collect();
        Ok(OutputPlace { output, forwarded: Some(position), inputs })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An owner that counts its releases in `counter` (one per test: tests
    /// run in parallel).
    macro_rules! counting_owner {
        ($counter:ident) => {{
            static $counter: AtomicUsize = AtomicUsize::new(0);
            unsafe fn release(_: NonNull<std::ffi::c_void>) {
                $counter.fetch_add(1, Ordering::SeqCst);
            }
            // SAFETY: the release only counts.
            (unsafe { Owner::handle(NonNull::dangling(), release) }, &$counter)
        }};
    }

    #[test]
    fn words_are_the_elements_bits_and_only_of_their_width() {
        let values = [1.5f32, -0.0, f32::from_bits(0x7fc0_1234)];
        let mut tensor = Tensor::from_vec(&[3], values.to_vec()).unwrap();
        let bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        assert_eq!(tensor.words::<u32>().unwrap(), bits.as_slice());
        assert!(tensor.scalar_word::<u32>().unwrap_err().to_string().contains("expected a scalar"));
        assert!(tensor.words::<u16>().is_err());
        assert!(tensor.words::<u64>().is_err());
        tensor.words_mut::<u32>().unwrap()[1] = 7;
        assert_eq!(tensor.to_vec::<f32>().unwrap()[1].to_bits(), 7);
        let flags = Tensor::from_vec(&[], vec![TfBool(1)]).unwrap();
        assert_eq!(flags.scalar_word::<u8>().unwrap(), 1);
        assert_eq!(by_width!(DType::F16, W => size_of::<W>()), 2);
        assert_eq!(by_width!(DType::I64, W => size_of::<W>()), 8);
        // An input is never writable, as words either.
        let (owner, _) = counting_owner!(UNUSED);
        let mut one = [0u8];
        // SAFETY: one byte that outlives the tensor; the owner only counts.
        let input = unsafe { Tensor::from_raw(DType::U8, &[1], NonNull::new(one.as_mut_ptr()), false, owner) };
        assert!(input.unwrap().words_mut::<u8>().is_err());
    }

    #[test]
    fn a_handle_owner_is_released_once_when_its_tensor_drops() {
        let (owner, released) = counting_owner!(RELEASED);
        let mut values = [1.0f32, 2.0, 3.0];
        let data = NonNull::new(values.as_mut_ptr().cast::<u8>());
        // SAFETY: three aligned f32s that outlive the tensor and that
        // nothing else touches meanwhile.
        let tensor = unsafe { Tensor::from_raw(DType::F32, &[3], data, false, owner) }.unwrap();
        assert_eq!(tensor.data::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
        assert_eq!(released.load(Ordering::SeqCst), 0);
        drop(tensor);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_tensor_refused_by_from_raw_still_releases_its_owner() {
        let (owner, released) = counting_owner!(RELEASED);
        // Four elements but no data: refused.
        // SAFETY: no data is read.
        let refused = unsafe { Tensor::from_raw(DType::F32, &[4], None, false, owner) };
        assert!(refused.is_err());
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }
}
