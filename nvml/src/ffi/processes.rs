//! The processes running on a GPU or MIG instance: none that this process can see. The
//! topology document knows which pods hold a GPU, not their processes' IDs, and the real driver
//! shows a caller only the processes of its own PID namespace, so an empty list is what a
//! container or a host-side tool reads for other pods' work. Real NVML answers these queries
//! on every data-center GPU, so tools that list processes (gpustat, nvitop, pynvml scripts)
//! get an empty list rather than `NVML_ERROR_NOT_SUPPORTED`.

use std::ffi::{c_uint, c_void};

use super::{DeviceHandle, ERROR_INVALID_ARGUMENT, Return, SUCCESS, resolve};

/// Answers a process-list query for `handle`: `*count` set to the number of processes (none),
/// the caller's array (`infos`, of whichever `nvmlProcessInfo` version) left untouched, since
/// nothing is written to it; a null array is the documented way of asking for the count.
unsafe fn no_processes(handle: DeviceHandle, count: *mut c_uint, _infos: *mut c_void) -> Return {
    if count.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    match resolve(handle) {
        Ok(_) => {
            unsafe { count.write(0) };
            SUCCESS
        }
        Err(error) => error,
    }
}

macro_rules! process_lists {
    ($($name:ident)*) => {
        $(
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(
                handle: DeviceHandle,
                count: *mut c_uint,
                infos: *mut c_void,
            ) -> Return {
                unsafe { no_processes(handle, count, infos) }
            }
        )*
    };
}

process_lists! {
    nvmlDeviceGetComputeRunningProcesses
    nvmlDeviceGetComputeRunningProcesses_v2
    nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetGraphicsRunningProcesses
    nvmlDeviceGetGraphicsRunningProcesses_v2
    nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses
    nvmlDeviceGetMPSComputeRunningProcesses_v2
    nvmlDeviceGetMPSComputeRunningProcesses_v3
}
