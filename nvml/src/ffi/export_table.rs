//! `nvmlInternalGetExportTable`: the undocumented entry point NVIDIA's own `nvidia-smi` calls on
//! every run (it reports "Mismatch in versions between nvidia-smi and NVML" without it). It
//! hands out a table of function pointers for one GUID. Observed with the 535.261.03 and
//! 550.163.01 binaries: slot 81 is "device handle by index" (`fn(index, *device, flags)`), slots
//! 213-215 fill the process lists behind the Processes box and `--query-compute-apps` (the
//! count written through their second argument), slot 26 is a logging hook, and every other
//! slot nvidia-smi reaches is satisfied by success. The ABI is reverse-engineered and may change
//! with the driver branch: `hack/nvidia-smi-check.sh` runs the real binaries against it.

use std::ffi::{c_uint, c_void};

use super::{DeviceHandle, ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED, Return, SUCCESS, gpu};

/// `6c3efec4-8fc9-4e6c-a327-ee696e12f7c4`, as the caller lays it out (a Windows-style GUID:
/// the first three fields little-endian).
const GUID: [u8; 16] = [
    0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e, 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4,
];

/// Slots in the table, the size word included; the highest slot nvidia-smi calls is 215.
const SLOTS: usize = 256;
const HANDLE_BY_INDEX: usize = 81;
const PROCESS_LISTS: [usize; 3] = [213, 214, 215];

/// Every slot without a known meaning: success, arguments untouched.
extern "C" fn succeed() -> Return {
    SUCCESS
}

extern "C" fn handle_by_index(index: c_uint, out: *mut DeviceHandle, _flags: c_uint) -> Return {
    unsafe { super::nvmlDeviceGetHandleByIndex_v2(index, out) }
}

/// No processes: the document knows which pods hold a GPU, not their processes' IDs.
extern "C" fn no_processes(device: DeviceHandle, count: *mut c_uint) -> Return {
    if count.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    match gpu(device) {
        Ok(_) | Err(ERROR_NOT_SUPPORTED) => {
            unsafe { count.write(0) };
            SUCCESS
        }
        Err(error) => error,
    }
}

struct Table([*const c_void; SLOTS]);

// The table holds only function addresses and its size, never written after it is built.
unsafe impl Sync for Table {}

static TABLE: Table = {
    let mut slots = [succeed as *const c_void; SLOTS];
    slots[0] = (SLOTS * size_of::<*const c_void>()) as *const c_void;
    slots[HANDLE_BY_INDEX] = handle_by_index as *const c_void;
    let mut i = 0;
    while i < PROCESS_LISTS.len() {
        slots[PROCESS_LISTS[i]] = no_processes as *const c_void;
        i += 1;
    }
    Table(slots)
};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInternalGetExportTable(
    out: *mut *const c_void,
    guid: *const [u8; 16],
) -> Return {
    if out.is_null() || guid.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    if unsafe { guid.read() } != GUID {
        return ERROR_NOT_SUPPORTED;
    }
    unsafe { out.write(TABLE.0.as_ptr().cast()) };
    SUCCESS
}
