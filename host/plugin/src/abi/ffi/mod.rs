//! Our own `#[repr(C)]` mirrors of the C structs and functions TensorFlow
//! 2.21 exposes to plugins. `tests/rust/layout.rs` checks every size and
//! field offset against the headers that ship in the installed wheel.

/// `Default` for a versioned struct: all zeros but `struct_size`, which is
/// the header's size constant (`versioned_default!(Ty, TY_STRUCT_SIZE)`) or
/// the end of the last field this crate mirrors (`versioned_default!(Ty,
/// end of last_field)`); and `Ty::struct_size()` giving it.
macro_rules! versioned_default {
    ($ty:ident, $size:ident) => {
        versioned_default!(@impl $ty, $size);
    };
    ($ty:ident, end of $last:ident) => {
        versioned_default!(@impl $ty, offset_of_end!($ty, $last));
    };
    (@impl $ty:ident, $size:expr) => {
        impl $ty {
            /// The `struct_size` this crate writes.
            pub const fn struct_size() -> usize {
                $size
            }
        }
        impl Default for $ty {
            fn default() -> Self {
                // SAFETY: every field of the structs this is used for is an
                // integer, a bool, a float, a raw pointer, an `Option<fn>` or
                // a `TF_TriState` (whose 0 is `Default`); all-zero is a valid
                // value for each of them.
                let mut value: Self = unsafe { std::mem::zeroed() };
                value.struct_size = Self::struct_size();
                value
            }
        }
    };
}

pub mod c_api;
pub mod done;
pub mod grappler;
pub mod kernels;
pub mod npd;
pub mod pjrt;
pub mod profiler;
pub mod status;
pub mod stream_executor;
