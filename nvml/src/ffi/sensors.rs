//! A whole GPU's sensors and error counters: temperature, power, clocks, utilization and ECC
//! errors, from the model the exporter and fakegpu's nvidia-smi read
//! (`fakegpu_api::telemetry`), for the GPU as the document has it at the call (its pods, their
//! utilization drawn as the exporter draws it for this moment, its injected faults).

use std::ffi::{c_uint, c_ulonglong};

use fakegpu_api::telemetry::{MEMORY_CLOCK, SM_CLOCK_MAX};

use super::{
    DeviceHandle, ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED, Return, answer, expect_version,
    gpu_now, put,
};
use crate::machine::Device;

/// `NVML_TEMPERATURE_GPU`.
const TEMPERATURE_GPU: c_uint = 0;
/// `nvmlClockType_t`.
const CLOCK_GRAPHICS: c_uint = 0;
const CLOCK_SM: c_uint = 1;
const CLOCK_MEM: c_uint = 2;
/// `nvmlMemoryErrorType_t`.
const MEMORY_ERROR_CORRECTED: c_uint = 0;
const MEMORY_ERROR_UNCORRECTED: c_uint = 1;
/// `nvmlEccCounterType_t`: both count the same here (the driver has not reloaded since).
const VOLATILE_ECC: c_uint = 0;
const AGGREGATE_ECC: c_uint = 1;

/// `nvmlUtilization_t`: percent of the last sample period.
#[repr(C)]
#[derive(Debug)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// Writes what `read` answers for the whole GPU behind `handle`.
unsafe fn query<T>(
    handle: DeviceHandle,
    out: *mut T,
    read: impl FnOnce(&Device) -> Result<T, Return>,
) -> Return {
    answer(gpu_now(handle).and_then(|device| Ok(unsafe { put(out, read(&device)?) })))
}

/// The power limit in mW; products without a known one do not support power queries.
fn limit_mw(device: &Device) -> Result<c_uint, Return> {
    device
        .load
        .power_limit
        .map(|watts| watts.saturating_mul(1000))
        .ok_or(ERROR_NOT_SUPPORTED)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    handle: DeviceHandle,
    sensor: c_uint,
    out: *mut c_uint,
) -> Return {
    unsafe {
        query(handle, out, |d| match sensor {
            TEMPERATURE_GPU => Ok(d.load.gpu_temperature()),
            _ => Err(ERROR_INVALID_ARGUMENT),
        })
    }
}

/// `nvmlTemperature_v1_t`: the caller names the sensor, the library writes the reading.
#[repr(C)]
pub struct TemperatureV1 {
    pub version: c_uint,
    pub sensor: c_uint,
    pub temperature: std::ffi::c_int,
}

/// `nvmlTemperature_v1`: the struct's size, version 1 in the top byte.
const TEMPERATURE_V1: c_uint = size_of::<TemperatureV1>() as c_uint | (1 << 24);

/// The versioned temperature query newer NVML users (nvitop) ask first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    handle: DeviceHandle,
    out: *mut TemperatureV1,
) -> Return {
    answer(
        unsafe { expect_version(out.cast(), TEMPERATURE_V1) }.and_then(|()| {
            let sensor = unsafe { (*out).sensor };
            let device = gpu_now(handle)?;
            let reading = match sensor {
                TEMPERATURE_GPU => device.load.gpu_temperature(),
                _ => return Err(ERROR_INVALID_ARGUMENT),
            };
            unsafe { (*out).temperature = reading as std::ffi::c_int };
            Ok(super::SUCCESS)
        }),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(handle: DeviceHandle, out: *mut c_uint) -> Return {
    unsafe {
        query(handle, out, |d| {
            d.load.power_draw_milliwatts().ok_or(ERROR_NOT_SUPPORTED)
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { query(handle, out, limit_mw) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { query(handle, out, limit_mw) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    unsafe { query(handle, out, limit_mw) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    handle: DeviceHandle,
    clock: c_uint,
    out: *mut c_uint,
) -> Return {
    unsafe {
        query(handle, out, |d| match clock {
            CLOCK_GRAPHICS | CLOCK_SM => Ok(d.load.sm_clock()),
            CLOCK_MEM => Ok(d.load.memory_clock()),
            _ => Err(ERROR_NOT_SUPPORTED),
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    handle: DeviceHandle,
    clock: c_uint,
    out: *mut c_uint,
) -> Return {
    unsafe {
        query(handle, out, |_| match clock {
            CLOCK_GRAPHICS | CLOCK_SM => Ok(SM_CLOCK_MAX),
            CLOCK_MEM => Ok(MEMORY_CLOCK),
            _ => Err(ERROR_NOT_SUPPORTED),
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    handle: DeviceHandle,
    out: *mut Utilization,
) -> Return {
    unsafe {
        query(handle, out, |d| {
            // A MIG-enabled GPU has no whole-GPU utilization (nvidia-smi prints `N/A`).
            if d.mig_enabled {
                return Err(ERROR_NOT_SUPPORTED);
            }
            Ok(Utilization {
                gpu: c_uint::from(d.load.utilization),
                memory: d.load.memory_utilization(),
            })
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    handle: DeviceHandle,
    error_type: c_uint,
    counter_type: c_uint,
    out: *mut c_ulonglong,
) -> Return {
    unsafe {
        query(handle, out, |d| {
            if !matches!(counter_type, VOLATILE_ECC | AGGREGATE_ECC) {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            match error_type {
                MEMORY_ERROR_CORRECTED => Ok(d.ecc_errors.0),
                MEMORY_ERROR_UNCORRECTED => Ok(d.ecc_errors.1),
                _ => Err(ERROR_INVALID_ARGUMENT),
            }
        })
    }
}
