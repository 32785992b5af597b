//! A whole GPU's sensors and error counters: temperature, power, clocks, utilization and ECC
//! errors, from the model the exporter and fakegpu's nvidia-smi read
//! (`fakegpu_model::telemetry`), for the GPU as the document has it at the call (its pods, their
//! utilization drawn as the exporter draws it for this moment, its injected faults).

use std::ffi::{c_int, c_longlong, c_uint, c_ulonglong};

use fakegpu_model::telemetry::{MEMORY_CLOCK, SM_CLOCK_MAX};

use super::{
    DeviceHandle, ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED, Handle, Return, SUCCESS, answer,
    expect_version, gpu_now, put, resolve,
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
const TEMPERATURE_V1: c_uint = super::struct_version_word::<TemperatureV1>(1);

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

/// `nvmlFieldValue_t`: a field asked for (`field_id`, `scope_id`) and its answer.
#[repr(C)]
#[derive(Debug)]
pub struct FieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: c_longlong,
    pub latency_usec: c_longlong,
    pub value_type: c_uint,
    pub nvml_return: Return,
    pub value: c_ulonglong,
}

/// `NVML_FI_DEV_POWER_*` (milliwatts), as nvml.h numbers them.
const FIELD_POWER_AVERAGE: c_uint = 185;
const FIELD_POWER_INSTANT: c_uint = 186;
const FIELD_POWER_MAX_LIMIT: c_uint = 188;
const FIELD_POWER_DEFAULT_LIMIT: c_uint = 189;
const FIELD_POWER_CURRENT_LIMIT: c_uint = 190;
const FIELD_POWER_REQUESTED_LIMIT: c_uint = 192;
/// `NVML_POWER_SCOPE_GPU`: the power fields' scope for the GPU itself (not its module).
const POWER_SCOPE_GPU: c_uint = 0;
/// `NVML_VALUE_TYPE_UNSIGNED_INT`.
const VALUE_UNSIGNED_INT: c_uint = 1;

/// One field of `device` now: the power fields of the GPU's own scope from the model (its draw,
/// its limit as every limit but the minimum, which the catalog does not know); no other.
fn field(device: &Device, field_id: c_uint, scope_id: c_uint) -> Result<c_uint, Return> {
    match (field_id, scope_id) {
        (FIELD_POWER_AVERAGE | FIELD_POWER_INSTANT, POWER_SCOPE_GPU) => device
            .load
            .power_draw_milliwatts()
            .ok_or(ERROR_NOT_SUPPORTED),
        (
            FIELD_POWER_MAX_LIMIT
            | FIELD_POWER_DEFAULT_LIMIT
            | FIELD_POWER_CURRENT_LIMIT
            | FIELD_POWER_REQUESTED_LIMIT,
            POWER_SCOPE_GPU,
        ) => limit_mw(device),
        _ => Err(ERROR_NOT_SUPPORTED),
    }
}

/// Each field asked for is answered on its own (`nvmlReturn` per field) and the call succeeds,
/// as NVML answers a batch: the power fields from the model, every other field
/// `NVML_ERROR_NOT_SUPPORTED`, every field of a MIG device too. nvidia-smi `-q` reads its power
/// readings and limits this way and trusts each field's result; refusing the whole call left
/// it printing whatever its buffer held (limits of millions of watts).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    handle: DeviceHandle,
    count: c_int,
    values: *mut FieldValue,
) -> Return {
    let Ok(count) = usize::try_from(count) else {
        return ERROR_INVALID_ARGUMENT;
    };
    if values.is_null() && count > 0 {
        return ERROR_INVALID_ARGUMENT;
    }
    let device = match resolve(handle) {
        Ok(Handle::Gpu(_)) => Some(match gpu_now(handle) {
            Ok(device) => device,
            Err(error) => return error,
        }),
        Ok(Handle::Mig(..)) => None,
        Err(error) => return error,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| {
            c_longlong::try_from(t.as_micros()).unwrap_or(c_longlong::MAX)
        });
    for i in 0..count {
        let value = unsafe { &mut *values.add(i) };
        value.timestamp = now;
        value.latency_usec = 0;
        let answered = device
            .as_ref()
            .ok_or(ERROR_NOT_SUPPORTED)
            .and_then(|d| field(d, value.field_id, value.scope_id));
        match answered {
            Ok(reading) => {
                value.value_type = VALUE_UNSIGNED_INT;
                value.value = c_ulonglong::from(reading);
                value.nvml_return = SUCCESS;
            }
            Err(error) => value.nvml_return = error,
        }
    }
    SUCCESS
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
