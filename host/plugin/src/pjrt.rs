//! The PJRT client of the WASM device (issue 45, stage 1; cargo feature
//! `pjrt`): what TensorFlow's XLA launches reach through the PJRT C API,
//! as safe types. `abi/pjrt` converts pointers and calls these.
//!
//! TensorFlow keeps its StreamExecutor `PluggableDevice` as the WASM device
//! (the C++ shim lets its XLA launches go through this client): tensors stay
//! blocks of the device's guest-placed region, so the client never copies
//! between host and device.
//!
//! - [`Client`]: one per process, never destroyed (TensorFlow's global
//!   resource manager keeps it until exit); one [`PjrtDevice`] per device of
//!   the StreamExecutor platform, each with one memory (its region).
//! - [`Buffer`]: an array on a device. A *view* wraps a TensorFlow tensor's
//!   device memory (checked to lie in the device's region) and runs the
//!   tensor's release callback exactly once when dropped; an *owned* buffer
//!   was allocated in the region through the same guest-placed path as the
//!   StreamExecutor `allocate` and is freed there when dropped.
//! - [`LoadedExecutable`]: a module compiled by `tfwasm-xla`;
//!   [`LoadedExecutable::execute`] first lets the device's streams finish
//!   what TensorFlow queued (as our kernels do: PJRT launches are not
//!   ordered against them by TensorFlow), then runs on the calling thread
//!   with arguments read in place and outputs written into fresh owned
//!   buffers. Completion is synchronous: every event is ready.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use tfwasm_xla::{ArrayShape, ElementType, Executable, XlaError};

use crate::device::{Device, Platform};
use crate::error::code::{INVALID_ARGUMENT, UNIMPLEMENTED};
use crate::error::Error;

/// What the client reports as its platform (`PJRT_Client_PlatformName`).
pub const PLATFORM_NAME: &str = "wasm";

/// The process's PJRT client: the StreamExecutor platform's devices.
#[derive(Debug)]
pub struct Client {
    devices: Vec<PjrtDevice>,
    platform_version: String,
}

impl Client {
    pub fn new(platform: &Platform) -> Client {
        let devices = platform.devices.iter().map(|device| PjrtDevice::new(Arc::clone(device))).collect();
        Client { devices, platform_version: format!("tfwasm {}", env!("CARGO_PKG_VERSION")) }
    }

    pub fn devices(&self) -> &[PjrtDevice] {
        &self.devices
    }

    pub fn platform_version(&self) -> &str {
        &self.platform_version
    }

    /// The device with PJRT id (and local hardware id) `id`: its ordinal.
    pub fn device(&self, id: i64) -> Result<&PjrtDevice, Error> {
        usize::try_from(id).ok().and_then(|i| self.devices.get(i)).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "no PJRT device with id {id} (the WASM client has {} devices)",
                self.devices.len()
            ))
        })
    }

    /// Compiles a program of format `format` (only `"hlo"`: a serialized
    /// `HloModuleProto`, what TensorFlow 2.21 sends). An instruction
    /// tfwasm cannot plan fails here, naming its opcode and TensorFlow op.
    pub fn compile(&self, format: &str, code: &[u8]) -> Result<LoadedExecutable, Error> {
        if format != "hlo" {
            return Err(Error::InvalidArgument(format!(
                "PJRT_Client_Compile: program format {format:?} is not supported by the WASM device (only \"hlo\", \
                 a serialized HloModuleProto)"
            )));
        }
        let executable = Executable::compile(code).map_err(xla_error)?;
        Ok(LoadedExecutable { executable, deleted: AtomicBool::new(false) })
    }
}

/// An XLA error as the host's: `Unsupported` is UNIMPLEMENTED (the message
/// names the opcode and the TensorFlow op), the rest INVALID_ARGUMENT.
fn xla_error(error: XlaError) -> Error {
    let code = match error {
        XlaError::Unsupported { .. } => UNIMPLEMENTED,
        _ => INVALID_ARGUMENT,
    };
    Error::Tensorflow { code, message: error.to_string() }
}

/// One device of the client: a StreamExecutor device and its one memory.
#[derive(Debug)]
pub struct PjrtDevice {
    device: Arc<Device>,
    description: DeviceDescription,
    memory: PjrtMemory,
}

impl PjrtDevice {
    fn new(device: Arc<Device>) -> PjrtDevice {
        let id = device.ordinal();
        let description = DeviceDescription {
            id,
            kind: device.name().split(':').next().unwrap_or("WASM").to_owned(),
            debug_string: device.name().to_owned(),
            to_string: format!("WasmDevice(id={id}, guest={})", device.guest()),
        };
        let memory = PjrtMemory {
            id,
            kind: "device".to_owned(),
            debug_string: format!("{} device memory", device.name()),
            to_string: format!("WasmMemory(id={id})"),
        };
        PjrtDevice { device, description, memory }
    }

    pub fn id(&self) -> u32 {
        self.device.ordinal()
    }

    pub fn description(&self) -> &DeviceDescription {
        &self.description
    }

    pub fn memory(&self) -> &PjrtMemory {
        &self.memory
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// A buffer over TensorFlow's device memory at `address` holding an
    /// array of `shape`: the bytes must lie inside this device's region.
    /// `on_delete` runs once, when the buffer is dropped.
    pub fn view(
        &self,
        address: usize,
        shape: ArrayShape,
        on_delete: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Buffer, Error> {
        let bytes = shape.bytes() as u64;
        if bytes > 0 && (address == 0 || !self.device.arena().contains(address as *const u8, bytes)) {
            // Not a view, so the callback is not ours to keep: TensorFlow
            // releases its tensor itself when the entry fails.
            return Err(Error::InvalidArgument(format!(
                "PJRT_Client_CreateViewOfDeviceBuffer: {bytes} bytes ({shape}) at {address:#x} are not inside the \
                 region of {}",
                self.device.name()
            )));
        }
        Ok(Buffer::new(self, address, shape, Backing::View(on_delete)))
    }

    /// A fresh buffer of `shape` in this device's region, placed by the
    /// guest as every allocation is.
    pub fn allocate(&self, shape: ArrayShape) -> Result<Buffer, Error> {
        let address = self.device.allocate(shape.bytes() as u64)? as usize;
        Ok(Buffer::new(self, address, shape, Backing::Owned))
    }
}

/// What `PJRT_DeviceDescription_*` report.
#[derive(Debug)]
pub struct DeviceDescription {
    pub id: u32,
    pub kind: String,
    pub debug_string: String,
    pub to_string: String,
}

/// A device's one memory: its region.
#[derive(Debug)]
pub struct PjrtMemory {
    pub id: u32,
    pub kind: String,
    pub debug_string: String,
    pub to_string: String,
}

enum Backing {
    /// TensorFlow's memory; its release callback, run once on drop.
    View(Option<Box<dyn FnOnce() + Send>>),
    /// Ours: freed into the device region on drop.
    Owned,
}

/// An array in a device's region.
pub struct Buffer {
    device: Arc<Device>,
    device_id: u32,
    address: usize,
    shape: ArrayShape,
    /// The dimensions as PJRT reports them (`int64_t`), kept for pointers.
    dims: Vec<i64>,
    backing: Backing,
    external_references: AtomicI64,
    deleted: AtomicBool,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backing {
            Backing::View(_) => "view",
            Backing::Owned => "owned",
        };
        write!(f, "Buffer({kind} {} at {:#x} on {})", self.shape, self.address, self.device.name())
    }
}

impl Buffer {
    fn new(device: &PjrtDevice, address: usize, shape: ArrayShape, backing: Backing) -> Buffer {
        let dims = shape.dims.iter().map(|&d| d as i64).collect();
        Buffer {
            device: Arc::clone(&device.device),
            device_id: device.id(),
            address,
            shape,
            dims,
            backing,
            external_references: AtomicI64::new(0),
            deleted: AtomicBool::new(false),
        }
    }

    pub fn shape(&self) -> &ArrayShape {
        &self.shape
    }

    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    pub fn element_type(&self) -> ElementType {
        self.shape.ty
    }

    pub fn device_id(&self) -> u32 {
        self.device_id
    }

    /// The device address of the first element: what TensorFlow's tensor
    /// over an output buffer points at.
    pub fn address(&self) -> usize {
        self.address
    }

    pub fn size_in_bytes(&self) -> usize {
        self.shape.bytes()
    }

    pub fn is_view(&self) -> bool {
        matches!(self.backing, Backing::View(_))
    }

    pub fn add_external_reference(&self, delta: i64) -> Result<(), Error> {
        let before = self.external_references.fetch_add(delta, Ordering::AcqRel);
        if before + delta < 0 {
            self.external_references.fetch_sub(delta, Ordering::AcqRel);
            return Err(Error::InvalidArgument(format!("{self:?}: external reference count would drop below 0")));
        }
        Ok(())
    }

    pub fn external_references(&self) -> i64 {
        self.external_references.load(Ordering::Acquire)
    }

    /// `PJRT_Buffer_Delete`: the data may no longer be used; the memory is
    /// released when the buffer is destroyed.
    pub fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// The buffer's bytes.
    ///
    /// # Safety
    /// Nobody writes them while the slice lives (TensorFlow hands a buffer
    /// to one launch at a time and keeps the tensor alive).
    unsafe fn bytes(&self) -> &[u8] {
        if self.shape.bytes() == 0 {
            return &[];
        }
        // SAFETY: a view was checked to lie inside the device region, an
        // owned buffer was allocated there with this size; the region stays
        // mapped for the process; no writer per the caller.
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.shape.bytes()) }
    }

    /// Copies the buffer's bytes into `dst` (exactly its size).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), Error> {
        if dst.len() != self.size_in_bytes() {
            return Err(Error::InvalidArgument(format!(
                "{self:?}: a {}-byte host buffer for {} bytes",
                dst.len(),
                self.size_in_bytes()
            )));
        }
        finish_device_work(&self.device);
        // SAFETY: TensorFlow does not write a buffer it reads back.
        dst.copy_from_slice(unsafe { self.bytes() });
        Ok(())
    }

    /// Fills an owned buffer from host bytes (exactly its size).
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<(), Error> {
        if !matches!(self.backing, Backing::Owned) || src.len() != self.size_in_bytes() {
            return Err(Error::Internal(format!("{self:?}: filled from {} host bytes", src.len())));
        }
        if !src.is_empty() {
            // SAFETY: an owned buffer of exactly `src.len()` bytes nobody
            // else sees yet (`&mut self`).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.address as *mut u8, src.len()) };
        }
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match &mut self.backing {
            Backing::View(on_delete) => {
                if let Some(release) = on_delete.take() {
                    release();
                }
            }
            Backing::Owned => {
                if let Err(error) = self.device.deallocate(self.address as *const u8) {
                    tracing::error!("tfwasm: PJRT buffer {self:?}: {error}");
                }
            }
        }
    }
}

/// Lets the device's streams run what TensorFlow queued on them, when any
/// stream work is outstanding at all (the common case is none).
fn finish_device_work(device: &Device) {
    if crate::device::streams::any_outstanding() {
        device.synchronize_all();
    }
}

/// A compiled module, ready to run on any device of the client
/// (TensorFlow compiles portable executables and names the device at
/// each launch).
pub struct LoadedExecutable {
    executable: Executable,
    deleted: AtomicBool,
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedExecutable({:?})", self.executable)
    }
}

impl LoadedExecutable {
    pub fn name(&self) -> &str {
        self.executable.name()
    }

    pub fn num_outputs(&self) -> usize {
        self.executable.outputs().len()
    }

    pub fn outputs(&self) -> Vec<ArrayShape> {
        self.executable.outputs()
    }

    pub fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Runs on `device` with `arguments` (read in place) and returns the
    /// outputs as fresh owned buffers in the device's region, after the
    /// device's queued stream work has run.
    pub fn execute(&self, device: &PjrtDevice, arguments: &[&Buffer]) -> Result<Vec<Buffer>, Error> {
        if self.is_deleted() {
            return Err(Error::InvalidArgument(format!("{}: the executable was deleted", self.name())));
        }
        for (i, argument) in arguments.iter().enumerate() {
            if argument.device_id != device.id() {
                return Err(Error::InvalidArgument(format!(
                    "{}: argument {i} lives on device {}, the launch runs on {}",
                    self.name(),
                    argument.device_id,
                    device.id()
                )));
            }
            if argument.is_deleted() {
                return Err(Error::InvalidArgument(format!("{}: argument {i} was deleted", self.name())));
            }
        }
        finish_device_work(&device.device);
        let mut outputs =
            self.outputs().into_iter().map(|shape| device.allocate(shape)).collect::<Result<Vec<_>, _>>()?;
        // SAFETY: arguments are only read while the slices live; outputs are
        // fresh allocations no argument overlaps.
        let inputs: Vec<&[u8]> = arguments.iter().map(|a| unsafe { a.bytes() }).collect();
        let mut slices: Vec<&mut [u8]> = outputs
            .iter_mut()
            .map(|o| {
                if o.size_in_bytes() == 0 {
                    return &mut [][..];
                }
                // SAFETY: an owned allocation of this size, only written here.
                unsafe { std::slice::from_raw_parts_mut(o.address as *mut u8, o.size_in_bytes()) }
            })
            .collect();
        self.executable.run_into(&inputs, &mut slices).map_err(xla_error)?;
        Ok(outputs)
    }
}

/// The TensorFlow whose headers the C++ shim was compiled against
/// (`host/plugin/build.rs`, from the wheel's dist-info), as `TF_Version()`
/// writes it.
pub const SHIM_TENSORFLOW: &str = env!("TFWASM_PJRT_SHIM_TENSORFLOW");

/// The environment variable that turns XLA through PJRT off (`off` or `0`):
/// the shim then installs nothing, as in another TensorFlow.
pub const SWITCH_ENV: &str = "TFWASM_PJRT";

/// Whether the shim may install itself: only in the exact TensorFlow it
/// was built for (it relies on one build's private layouts), and unless
/// `switch` (the value of [`SWITCH_ENV`]) turns it off. The error is the
/// one line the log shows.
pub fn shim_gate(built: &str, running: Option<&str>, switch: Option<&str>) -> Result<(), String> {
    if let Some(value) = switch.filter(|v| matches!(v.trim(), "0" | "off" | "false")) {
        return Err(format!("{SWITCH_ENV}={value} turns it off"));
    }
    match running {
        Some(running) if running == built => Ok(()),
        running => Err(format!(
            "this plugin's PJRT shim was built for TensorFlow {built}, this is {}; rebuild the plugin with the \
             pjrt feature against this TensorFlow's headers (eager jit_compile=True functions fail on the device \
             until then, everything else works)",
            running.unwrap_or("a TensorFlow whose version tfwasm cannot read")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_installs_only_in_its_own_tensorflow_and_unless_switched_off() {
        assert_eq!(shim_gate("2.21.0", Some("2.21.0"), None), Ok(()));
        assert_eq!(shim_gate("2.21.0", Some("2.21.0"), Some("on")), Ok(()));
        let other = shim_gate("2.21.0", Some("2.22.0-dev20250601"), None).unwrap_err();
        assert!(other.contains("built for TensorFlow 2.21.0, this is 2.22.0-dev20250601"), "{other}");
        assert!(shim_gate("2.21.0", None, None).unwrap_err().contains("cannot read"));
        for off in ["off", "0", "false"] {
            assert_eq!(shim_gate("2.21.0", Some("2.21.0"), Some(off)), Err(format!("TFWASM_PJRT={off} turns it off")));
        }
    }
}
