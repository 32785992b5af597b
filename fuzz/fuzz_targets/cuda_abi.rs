//! The C ABI of fakegpu's libcuda, as the CUDA runtime calls it: any symbol name through
//! `cuGetProcAddress`, any result code through the error functions, null pointers, from one to
//! three threads. Each call returns a CUDA code and touches only what it was given.
#![no_main]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use libfuzzer_sys::{arbitrary::Unstructured, fuzz_target};

// Links the library: its exported functions are called through their C names below.
use cuda as _;

type CuResult = c_uint;

unsafe extern "C" {
    fn cuInit(flags: c_uint) -> CuResult;
    fn cuDriverGetVersion(version: *mut c_int) -> CuResult;
    fn cuDeviceGetCount(count: *mut c_int) -> CuResult;
    fn cuGetErrorName(result: CuResult, name: *mut *const c_char) -> CuResult;
    fn cuGetErrorString(result: CuResult, text: *mut *const c_char) -> CuResult;
    fn cuGetProcAddress(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
    ) -> CuResult;
    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
        status: *mut c_int,
    ) -> CuResult;
}

/// A known symbol (what the runtime asks for), or any text.
fn symbol(u: &mut Unstructured) -> Vec<u8> {
    const KNOWN: [&str; 7] = [
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGetCount",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuGetProcAddress",
        "cuCtxCreate",
    ];
    let mut name = if u.ratio(1, 2).unwrap_or(false) {
        KNOWN[u.choose_index(KNOWN.len()).unwrap_or(0)]
            .as_bytes()
            .to_vec()
    } else {
        u.arbitrary::<Vec<u8>>().unwrap_or_default()
    };
    name.retain(|b| *b != 0);
    name.push(0);
    name
}

fn call(u: &mut Unstructured) -> bool {
    let Ok(op) = u.int_in_range(0..=5_u8) else {
        return false;
    };
    let null = u.ratio(1, 6).unwrap_or(false);
    let code = unsafe {
        match op {
            0 => cuInit(u.arbitrary().unwrap_or(0)),
            1 | 2 => {
                let mut value: c_int = 0;
                let out = if null {
                    std::ptr::null_mut()
                } else {
                    &mut value
                };
                if op == 1 {
                    cuDriverGetVersion(out)
                } else {
                    cuDeviceGetCount(out)
                }
            }
            3 | 4 => {
                let result: CuResult = if u.ratio(1, 2).unwrap_or(false) {
                    u.int_in_range(0..=1000).unwrap_or(0)
                } else {
                    u.arbitrary().unwrap_or(0)
                };
                let mut text: *const c_char = std::ptr::null();
                let out = if null {
                    std::ptr::null_mut()
                } else {
                    &mut text
                };
                let f = if op == 3 {
                    cuGetErrorName
                } else {
                    cuGetErrorString
                };
                let code = f(result, out);
                if code == 0 {
                    assert!(!text.is_null());
                    let _ = CStr::from_ptr(text);
                }
                code
            }
            _ => {
                let name = symbol(u);
                let name_ptr = if null {
                    std::ptr::null()
                } else {
                    name.as_ptr().cast()
                };
                let mut pfn: *mut c_void = std::ptr::null_mut();
                let pfn_ptr = if u.ratio(1, 6).unwrap_or(false) {
                    std::ptr::null_mut()
                } else {
                    &mut pfn
                };
                let mut status: c_int = -1;
                let status_ptr = if u.ratio(1, 3).unwrap_or(false) {
                    std::ptr::null_mut()
                } else {
                    &mut status
                };
                let version: c_int = u.arbitrary().unwrap_or(0);
                if u.ratio(1, 2).unwrap_or(false) {
                    cuGetProcAddress(name_ptr, pfn_ptr, version, u.arbitrary().unwrap_or(0))
                } else {
                    cuGetProcAddress_v2(name_ptr, pfn_ptr, version, 0, status_ptr)
                }
            }
        }
    };
    // CUDA's codes: 0-999, CUDA_ERROR_UNKNOWN 999.
    assert!(code <= 999, "op {op}: {code}");
    true
}

fuzz_target!(|data: &[u8]| {
    fakegpu_fuzz::in_threads(data, |part| {
        let mut u = Unstructured::new(part);
        for _ in 0..64 {
            if !call(&mut u) {
                break;
            }
        }
    });
});
