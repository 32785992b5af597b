//! `nvmlInternalGetExportTable`: the undocumented entry point NVIDIA's own `nvidia-smi` calls on
//! every run (it reports "Mismatch in versions between nvidia-smi and NVML" without it). It
//! hands out a table of function pointers for one GUID. Observed with the 535.261.03 and
//! 550.163.01 binaries: slot 81 is "device handle by index" (`fn(index, *device, flags)`), slots
//! 213-215 fill the compute, graphics and MPS process lists behind the Processes box and
//! `--query-compute-apps` (`fn(device, *count, *entries)`: room for 500 going in, entries of
//! [`DriverProcess`]), slot 26 is a logging hook, `nvidia-smi topo -m` stops ("Failed to run
//! topology matrix") unless slot 23 succeeds, and every other slot answers
//! `NVML_ERROR_NOT_SUPPORTED`, as an unknown NVML function does. (Slots that succeeded without
//! writing their answer made `nvidia-smi -q` print what its buffers held: a PCIe "Host Max" of
//! 32523, a T.Limit temperature of 0 C, "0.185 mV"; refused, they print `N/A`.) The ABI is
//! reverse-engineered and may change with the driver branch: `smi/tests/real_nvidia_smi.rs`
//! runs the real binaries against it.

use std::ffi::{c_char, c_uint, c_void};

use super::{
    DeviceHandle, ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED, Return, SUCCESS, c_array,
    processes::{self, Listed, ProcessInfoV2, process_name},
};

/// `6c3efec4-8fc9-4e6c-a327-ee696e12f7c4`, as the caller lays it out (a Windows-style GUID:
/// the first three fields little-endian).
const GUID: [u8; 16] = [
    0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e, 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4,
];

/// Slots in the table, the size word included; the highest slot nvidia-smi calls is 215.
const SLOTS: usize = 256;
const HANDLE_BY_INDEX: usize = 81;
/// Slots that succeed without an answer: the logging hook, and what `topo -m` needs (it then
/// prints the GPU pairs' links as its binary makes them out).
const SUCCEEDING: [usize; 2] = [26, 23];
const COMPUTE_PROCESSES: usize = 213;
/// Graphics and MPS: none, see `processes`.
const OTHER_PROCESSES: [usize; 2] = [214, 215];

/// The longest process name an entry holds, its NUL included.
const NAME_BYTES: usize = 4096;

/// One entry of the driver's process lists, 4128 bytes, as the real binaries read it (found by
/// filling entries and reading what `--query-compute-apps` and the table printed): NVML's
/// `nvmlProcessInfo_v2_t` fields first, 8 bytes nvidia-smi does not print, then the process's
/// name, which the table prints (it leaves out a process whose name is empty) where the query
/// asks `nvmlSystemGetProcessName` instead.
#[repr(C)]
pub struct DriverProcess {
    info: ProcessInfoV2,
    unread: u64,
    name: [c_char; NAME_BYTES],
}

impl From<&Listed> for DriverProcess {
    fn from(listed: &Listed) -> Self {
        Self {
            info: ProcessInfoV2::from(listed),
            unread: 0,
            name: c_array(&process_name(listed.pid).unwrap_or_default()),
        }
    }
}

/// [`SUCCEEDING`]: success, arguments untouched.
extern "C" fn succeed() -> Return {
    SUCCESS
}

/// Every slot without a known meaning.
extern "C" fn refuse() -> Return {
    ERROR_NOT_SUPPORTED
}

extern "C" fn handle_by_index(index: c_uint, out: *mut DeviceHandle, _flags: c_uint) -> Return {
    unsafe { super::nvmlDeviceGetHandleByIndex_v2(index, out) }
}

/// The caller's compute processes on `device`, as NVML's `nvmlDeviceGetComputeRunningProcesses`
/// lists them.
extern "C" fn compute_processes(
    device: DeviceHandle,
    count: *mut c_uint,
    entries: *mut DriverProcess,
) -> Return {
    unsafe { processes::compute(device, count, entries) }
}

extern "C" fn no_processes(
    device: DeviceHandle,
    count: *mut c_uint,
    entries: *mut DriverProcess,
) -> Return {
    unsafe { processes::none(device, count, entries) }
}

struct Table([*const c_void; SLOTS]);

// The table holds only function addresses and its size, never written after it is built.
unsafe impl Sync for Table {}

static TABLE: Table = {
    let mut slots = [refuse as *const c_void; SLOTS];
    let mut i = 0;
    while i < SUCCEEDING.len() {
        slots[SUCCEEDING[i]] = succeed as *const c_void;
        i += 1;
    }
    slots[0] = (SLOTS * size_of::<*const c_void>()) as *const c_void;
    slots[HANDLE_BY_INDEX] = handle_by_index as *const c_void;
    slots[COMPUTE_PROCESSES] = compute_processes as *const c_void;
    let mut i = 0;
    while i < OTHER_PROCESSES.len() {
        slots[OTHER_PROCESSES[i]] = no_processes as *const c_void;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_the_size_nvidia_smi_steps_by() {
        assert_eq!(size_of::<DriverProcess>(), 4128);
        assert_eq!(std::mem::offset_of!(DriverProcess, name), 32);
    }
}
