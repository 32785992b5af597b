//! fakegpu's `libcuda.so.1`: the CUDA driver library of a `backend: mock` node's driver root.
//!
//! A driver root holds the CUDA driver library beside NVML, and NVIDIA's components expect it:
//! the container toolkit's CDI discovery (which NVIDIA's device plugin and DRA driver use for
//! their CDI specs) finds the driver's libraries by `libcuda.so.<driver version>`, and mounts
//! it into the containers it gives GPUs. fakegpu simulates GPUs for schedulers, monitoring and
//! NVML's users; it runs no kernels. So this library answers the CUDA runtime what it asks
//! first, truthfully: the driver's CUDA version (from the node's document, as NVML gives it),
//! and `CUDA_ERROR_NO_DEVICE` from `cuInit`, so `torch.cuda.is_available()` is `False` and
//! `cudaGetDeviceCount` says "no CUDA-capable device is detected" rather than failing to load
//! a driver. Every entry point the runtime asks `cuGetProcAddress` for that is not here is
//! reported not found.
#![allow(unsafe_code, clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use fakegpu_model::{document_source, topology::NodeTopology};

/// `CUresult`.
pub type CuResult = c_uint;
pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;

/// `CUdriverProcAddressQueryResult`.
const PROC_ADDRESS_SUCCESS: c_int = 0;
const PROC_ADDRESS_SYMBOL_NOT_FOUND: c_int = 1;

/// Each result this library returns: its name (`cuGetErrorName`) and description
/// (`cuGetErrorString`), as the driver words them.
const RESULTS: [(CuResult, &CStr, &CStr); 6] = [
    (CUDA_SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (
        CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
];

/// The node's document, as NVML in this process reads it (see
/// [`fakegpu_model::document_source`]).
fn document() -> Option<NodeTopology> {
    let located = document_source::locate(cuDriverGetVersion as *const () as usize)?;
    let text = document_source::read(&located).ok()?;
    NodeTopology::from_yaml(&text).ok()
}

/// Simulated GPUs run no kernels: there is no device to initialise.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> CuResult {
    CUDA_ERROR_NO_DEVICE
}

/// The CUDA version of the node's driver (`12.4` -> 12040), as NVML's
/// `nvmlSystemGetCudaDriverVersion` gives it; the runtime compares it with its own before it
/// initialises.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    if version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match document() {
        Some(document) => {
            unsafe { version.write(document.cuda_driver_version()) };
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_NOT_INITIALIZED,
    }
}

/// `cuInit` never succeeds, so no device is counted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    if count.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_ERROR_NOT_INITIALIZED
}

fn described(
    result: CuResult,
    text: *mut *const c_char,
    field: fn(&(CuResult, &CStr, &CStr)) -> *const c_char,
) -> CuResult {
    let Some(entry) = RESULTS.iter().find(|(code, _, _)| *code == result) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if text.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsafe { text.write(field(entry)) };
    CUDA_SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(result: CuResult, name: *mut *const c_char) -> CuResult {
    described(result, name, |(_, name, _)| name.as_ptr())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(result: CuResult, text: *mut *const c_char) -> CuResult {
    described(result, text, |(_, _, text)| text.as_ptr())
}

/// The entry points this library has, by the names the runtime asks `cuGetProcAddress` for.
fn entry_point(symbol: &[u8]) -> Option<*mut c_void> {
    let pointer = match symbol {
        b"cuInit" => cuInit as *const (),
        b"cuDriverGetVersion" => cuDriverGetVersion as *const (),
        b"cuDeviceGetCount" => cuDeviceGetCount as *const (),
        b"cuGetErrorName" => cuGetErrorName as *const (),
        b"cuGetErrorString" => cuGetErrorString as *const (),
        b"cuGetProcAddress" => cuGetProcAddress_v2 as *const (),
        _ => return None,
    };
    Some(pointer as *mut c_void)
}

/// The CUDA 11.3 form, without the query result.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CuResult {
    unsafe { cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, std::ptr::null_mut()) }
}

/// An entry point by name; the ones this library lacks are not found (`*pfn` null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    _cuda_version: c_int,
    _flags: u64,
    status: *mut c_int,
) -> CuResult {
    if symbol.is_null() || pfn.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let name = unsafe { CStr::from_ptr(symbol) };
    let found = entry_point(name.to_bytes());
    unsafe { pfn.write(found.unwrap_or(std::ptr::null_mut())) };
    if !status.is_null() {
        let query = if found.is_some() {
            PROC_ADDRESS_SUCCESS
        } else {
            PROC_ADDRESS_SYMBOL_NOT_FOUND
        };
        unsafe { status.write(query) };
    }
    if found.is_some() {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_FOUND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_no_device_to_initialise() {
        assert_eq!(cuInit(0), CUDA_ERROR_NO_DEVICE);
        let mut count = -1;
        assert_eq!(
            unsafe { cuDeviceGetCount(&mut count) },
            CUDA_ERROR_NOT_INITIALIZED
        );
        assert_eq!(
            unsafe { cuDeviceGetCount(std::ptr::null_mut()) },
            CUDA_ERROR_INVALID_VALUE
        );
        let mut text = std::ptr::null();
        assert_eq!(
            unsafe { cuGetErrorString(CUDA_ERROR_NO_DEVICE, &mut text) },
            CUDA_SUCCESS
        );
        assert_eq!(
            unsafe { CStr::from_ptr(text) },
            c"no CUDA-capable device is detected"
        );
        assert_eq!(
            unsafe { cuGetErrorName(CUDA_ERROR_NO_DEVICE, &mut text) },
            CUDA_SUCCESS
        );
        assert_eq!(unsafe { CStr::from_ptr(text) }, c"CUDA_ERROR_NO_DEVICE");
        assert_eq!(
            unsafe { cuGetErrorName(12345, &mut text) },
            CUDA_ERROR_INVALID_VALUE
        );
    }

    #[test]
    fn the_runtime_finds_the_entry_points_there_are() {
        let mut pfn = std::ptr::null_mut();
        let mut status = -1;
        let found =
            unsafe { cuGetProcAddress_v2(c"cuInit".as_ptr(), &mut pfn, 12040, 0, &mut status) };
        assert_eq!((found, status), (CUDA_SUCCESS, PROC_ADDRESS_SUCCESS));
        let init: extern "C" fn(c_uint) -> CuResult = unsafe { std::mem::transmute(pfn) };
        assert_eq!(init(0), CUDA_ERROR_NO_DEVICE);
        let missing = unsafe {
            cuGetProcAddress_v2(c"cuCtxCreate".as_ptr(), &mut pfn, 12040, 0, &mut status)
        };
        assert_eq!(
            (missing, status, pfn.is_null()),
            (CUDA_ERROR_NOT_FOUND, PROC_ADDRESS_SYMBOL_NOT_FOUND, true)
        );
        let old = unsafe { cuGetProcAddress(c"cuDriverGetVersion".as_ptr(), &mut pfn, 11030, 0) };
        assert_eq!((old, pfn.is_null()), (CUDA_SUCCESS, false));
    }

    #[test]
    fn the_driver_s_cuda_version_is_the_document_s() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("fakegpu-cuda-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("topology.yml");
        let document = NodeTopology {
            cuda_version: "12.4".into(),
            ..NodeTopology::default()
        };
        std::fs::write(&path, document.to_yaml()?)?;
        // SAFETY: the only test of this crate that reads the environment.
        unsafe { std::env::set_var(fakegpu_model::names::nvml::TOPOLOGY_ENV, &path) };
        let mut version = 0;
        assert_eq!(unsafe { cuDriverGetVersion(&mut version) }, CUDA_SUCCESS);
        assert_eq!(version, 12040);
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(
            unsafe { cuDriverGetVersion(&mut version) },
            CUDA_ERROR_NOT_INITIALIZED,
            "no document"
        );
        Ok(())
    }
}
