//! Conversions between the pure modules and the WIT types, shared by every
//! guest in this workspace that builds on them (the hostile test guest
//! includes this file too). Each crate generates its bindings in its own
//! `component` module, which is what `crate::component` names here.

use crate::allocator::{AllocError, Stats};
use crate::component::exports::tfwasm::device::memory::MemoryUsage;
use crate::component::exports::tfwasm::device::streams::{Dependency, EventState, Ticket};
use crate::component::tfwasm::device::types::DeviceError;
use crate::ordering::{self, Dep, OrderError};

/// What every export but `init` answers before `init` succeeded.
pub fn init_not_called() -> DeviceError {
    DeviceError::Internal("init not called".into())
}

/// A device error as a sentence, for the log and for `stream-status`.
pub fn describe(error: &DeviceError) -> String {
    match error {
        DeviceError::OutOfMemory(n) => format!("out of memory for {n} bytes"),
        DeviceError::UnknownHandle(h) => format!("unknown handle {h}"),
        DeviceError::InvalidArgument(m) | DeviceError::Internal(m) => m.clone(),
    }
}

pub fn alloc_error(e: AllocError) -> DeviceError {
    match e {
        AllocError::OutOfMemory(n) => DeviceError::OutOfMemory(n),
        AllocError::UnknownOffset(o) => DeviceError::UnknownHandle(o),
        AllocError::Invalid(m) => DeviceError::InvalidArgument(m),
    }
}

pub fn order_error(e: OrderError) -> DeviceError {
    match e {
        OrderError::UnknownHandle(h) => DeviceError::UnknownHandle(h),
        e @ OrderError::NotSubmitted { .. } => DeviceError::InvalidArgument(e.to_string()),
    }
}

pub fn usage(stats: Stats) -> MemoryUsage {
    MemoryUsage {
        bytes_in_use: stats.bytes_in_use,
        peak_bytes_in_use: stats.peak_bytes_in_use,
        num_allocs: stats.num_allocs,
        largest_alloc_size: stats.largest_alloc_size,
        largest_free_block: stats.largest_free_block,
        limit: stats.limit,
    }
}

pub fn ticket(t: ordering::Ticket) -> Ticket {
    Ticket { seq: t.seq, after: t.after.into_iter().map(|Dep { stream, seq }| Dependency { stream, seq }).collect() }
}

/// `None` (no device yet) reads as unknown.
pub fn event_state(state: Option<ordering::EventState>) -> EventState {
    match state {
        Some(ordering::EventState::Pending) => EventState::Pending,
        Some(ordering::EventState::Complete) => EventState::Complete,
        Some(ordering::EventState::Error) => EventState::Error,
        Some(ordering::EventState::Unknown) | None => EventState::Unknown,
    }
}
