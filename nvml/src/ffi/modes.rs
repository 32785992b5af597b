//! The modes and states nvidia-smi's table shows for a whole GPU, as a data-centre GPU in
//! service reports them (and fakegpu's own nvidia-smi prints them): persistence mode on, no
//! display, ECC enabled, performance state P0, the default compute mode. Plus the versioned
//! memory query nvidia-smi reads its Memory-Usage column from.

use std::ffi::{c_uint, c_ulonglong};

use super::{DeviceHandle, ERROR_INVALID_ARGUMENT, Return, answer, gpu, put, resolve};

const ENABLED: c_uint = 1;
const DISABLED: c_uint = 0;
/// `NVML_PSTATE_0`.
const PSTATE_0: c_uint = 0;
/// `NVML_COMPUTEMODE_DEFAULT`.
const COMPUTE_MODE_DEFAULT: c_uint = 0;
/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`.
const MEMORY_V2: c_uint = super::struct_version_word::<MemoryV2>(2);

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Debug)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    /// Framebuffer the driver and firmware keep: none on a simulated GPU.
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

unsafe fn put_gpu_value(handle: DeviceHandle, out: *mut c_uint, value: c_uint) -> Return {
    answer(gpu(handle).map(|_| unsafe { put(out, value) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { put_gpu_value(handle, out, ENABLED) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { put_gpu_value(handle, out, DISABLED) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { put_gpu_value(handle, out, PSTATE_0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { put_gpu_value(handle, out, COMPUTE_MODE_DEFAULT) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    handle: DeviceHandle,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Return {
    if pending.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    answer(gpu(handle).map(|_| unsafe {
        put(pending, ENABLED);
        put(current, ENABLED)
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    handle: DeviceHandle,
    out: *mut MemoryV2,
) -> Return {
    if let Err(error) = unsafe { super::expect_version(out.cast(), MEMORY_V2) } {
        return error;
    }
    answer(resolve(handle).map(|h| {
        let total = h.memory_bytes();
        let used = h.memory_used_bytes().min(total);
        let memory = MemoryV2 {
            version: MEMORY_V2,
            total,
            reserved: 0,
            free: total - used,
            used,
        };
        unsafe { put(out, memory) }
    }))
}
