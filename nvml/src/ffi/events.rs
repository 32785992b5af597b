//! `nvmlEventSet_t` and its functions, over [`crate::events`]: a set is a number handed out as
//! the handle; waiting reads the document again every [`POLL`] until a fault is due or the
//! caller's timeout passes.

use std::{
    collections::BTreeMap,
    ffi::{c_uint, c_ulonglong, c_void},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    DeviceHandle, ERROR_INVALID_ARGUMENT, ERROR_TIMEOUT, Return, SUCCESS, answer, gpu, loaded, put,
};
use crate::events::{Fault, Registrations, SUPPORTED};

/// `nvmlEventSet_t`.
pub type EventSetHandle = *mut c_void;

/// `nvmlEventData_t`.
#[repr(C)]
#[derive(Debug)]
pub struct EventData {
    pub device: DeviceHandle,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// What the instance IDs of an event of a whole GPU read.
const WHOLE_GPU: c_uint = 0xFFFF_FFFF;
/// How often a waiting caller's document is read again.
const POLL: Duration = Duration::from_millis(250);

/// Live sets by handle; a handle not here (freed, or never made) is refused.
static SETS: Mutex<BTreeMap<usize, Registrations>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicUsize = AtomicUsize::new(1);

fn sets() -> MutexGuard<'static, BTreeMap<usize, Registrations>> {
    SETS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut EventSetHandle) -> Return {
    answer(loaded().map(|_| {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let written = unsafe { put(set, id as EventSetHandle) };
        if written == SUCCESS {
            sets().insert(id, Registrations::default());
        }
        written
    }))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: EventSetHandle) -> Return {
    match sets().remove(&(set as usize)) {
        Some(_) => SUCCESS,
        None => ERROR_INVALID_ARGUMENT,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: DeviceHandle,
    types: *mut c_ulonglong,
) -> Return {
    answer(gpu(device).map(|_| unsafe { put(types, SUPPORTED) }))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: DeviceHandle,
    types: c_ulonglong,
    set: EventSetHandle,
) -> Return {
    answer(
        gpu(device).map(|device| match sets().get_mut(&(set as usize)) {
            Some(registrations) => {
                registrations.register(&device.uuid, types);
                SUCCESS
            }
            None => ERROR_INVALID_ARGUMENT,
        }),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: EventSetHandle,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> Return {
    if data.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
    loop {
        let (machine, source) = match loaded() {
            Ok(loaded) => loaded,
            Err(error) => return error,
        };
        // A document that cannot be read now changes nothing: no fault is invented.
        let now = source.load().ok();
        let due = match sets().get_mut(&(set as usize)) {
            Some(registrations) => {
                now.and_then(|now| registrations.next_fault(&now, Instant::now()))
            }
            None => return ERROR_INVALID_ARGUMENT,
        };
        // Handles are the loaded machine's; a GPU the document gained since has none.
        let handle = due.as_ref().and_then(|fault: &Fault| {
            machine
                .devices
                .iter()
                .find(|d| d.uuid == fault.uuid)
                .map(|d| (d as *const super::Device).cast::<c_void>())
        });
        if let (Some(fault), Some(device)) = (due, handle) {
            let event = EventData {
                device,
                event_type: fault.event_type,
                event_data: fault.xid,
                gpu_instance_id: WHOLE_GPU,
                compute_instance_id: WHOLE_GPU,
            };
            return unsafe { put(data, event) };
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return ERROR_TIMEOUT;
        }
        std::thread::sleep(left.min(POLL));
    }
}
