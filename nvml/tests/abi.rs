//! The C ABI against what fuzzing found (fuzz/fuzz_targets/nvml_abi.rs).
#![allow(unsafe_code)] // Calls the library's C functions, as its users do.

use std::ffi::{c_uint, c_void};

// Links the library: its functions are called through their C names.
use nvidia_ml as _;

unsafe extern "C" {
    fn nvmlInit_v2() -> c_uint;
    fn nvmlShutdown() -> c_uint;
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut *const c_void) -> c_uint;
    fn nvmlDeviceGetGpuInstanceProfileInfoV(
        handle: *const c_void,
        profile: c_uint,
        out: *mut c_void,
    ) -> c_uint;
}

const SUCCESS: c_uint = 0;
const ARGUMENT_VERSION_MISMATCH: c_uint = 25;

/// `nvmlGpuInstanceProfileInfo_v3_t` is 152 bytes: a caller whose struct is smaller (another
/// header's) but says version 3 used to get all 152 written, past its end.
#[test]
fn a_versioned_struct_of_another_size_is_refused_not_overrun() {
    let document = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/documents/a100-mig.yml");
    // This test binary's only test: nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("FAKEGPU_NVML_TOPOLOGY", document) };
    assert_eq!(unsafe { nvmlInit_v2() }, SUCCESS);
    let mut gpu: *const c_void = std::ptr::null();
    assert_eq!(
        unsafe { nvmlDeviceGetHandleByIndex_v2(0, &mut gpu) },
        SUCCESS
    );
    // 19 words of 8 bytes: room for the real struct, so a write past a short one shows.
    let mut buffer = [0_u64; 19];
    for (size, expected) in [
        (24, ARGUMENT_VERSION_MISMATCH),
        (160, ARGUMENT_VERSION_MISMATCH),
        (152, SUCCESS),
    ] {
        buffer = [0; 19];
        let word: c_uint = size | (3 << 24);
        buffer[0] = u64::from(word);
        let answer =
            unsafe { nvmlDeviceGetGpuInstanceProfileInfoV(gpu, 0, buffer.as_mut_ptr().cast()) };
        assert_eq!(answer, expected, "a struct of {size} bytes");
        if expected != SUCCESS {
            assert!(
                buffer[1..].iter().all(|w| *w == 0),
                "written past the version word"
            );
        }
    }
    assert_ne!(buffer[1..], [0; 18], "the right size is answered");
    assert_eq!(unsafe { nvmlShutdown() }, SUCCESS);
}
