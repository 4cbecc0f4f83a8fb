//! Entry points for tfwasm's own tools, not part of any TensorFlow ABI:
//! the Python package (`tfwasm.traffic()`) reads them with `ctypes` from the
//! library TensorFlow loaded.

use std::ffi::c_int;

use super::ffi_guard_or;
use super::stream_executor::platform;
use crate::device::Path;
use crate::error::Error;

/// What [`tfwasm_device_traffic`] writes: per path (host→device,
/// device→host, device→device, fill), the copies submitted and their bytes.
/// `struct_size` comes first so later versions can grow it.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct TfwasmTraffic {
    pub struct_size: usize,
    pub copies: [u64; 4],
    pub bytes: [u64; 4],
}

pub const TFWASM_TRAFFIC_STRUCT_SIZE: usize = std::mem::size_of::<TfwasmTraffic>();

/// Fills `out` with device `ordinal`'s traffic so far. Returns 1, or 0 when
/// there is no such device, `out` is null or its `struct_size` is smaller
/// than this version writes.
///
/// # Safety
/// `out` is null or points to a writable `TfwasmTraffic` whose
/// `struct_size` the caller set.
#[no_mangle]
pub unsafe extern "C" fn tfwasm_device_traffic(ordinal: u32, out: *mut TfwasmTraffic) -> c_int {
    ffi_guard_or(0, "tfwasm_device_traffic", || {
        // SAFETY: per this function's contract, `out` is null or valid.
        let Some(out) = (unsafe { out.as_mut() }) else {
            return Err(Error::InvalidArgument("null TfwasmTraffic".into()));
        };
        if out.struct_size < TFWASM_TRAFFIC_STRUCT_SIZE {
            return Err(Error::InvalidArgument(format!("TfwasmTraffic struct_size {} is too small", out.struct_size)));
        }
        let Some(device) = platform().and_then(|p| p.device(ordinal)) else {
            return Ok(0);
        };
        let mut filled = TfwasmTraffic { struct_size: TFWASM_TRAFFIC_STRUCT_SIZE, ..Default::default() };
        for path in Path::ALL {
            (filled.copies[path as usize], filled.bytes[path as usize]) = device.traffic().read(path);
        }
        *out = filled;
        Ok(1)
    })
}
