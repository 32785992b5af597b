//! The C ABI of fakegpu's libnvidia-ml, as a program that loads it calls it: every exported
//! function of each shape, with null pointers, buffers shorter and longer than the answer,
//! handles that are valid, of the wrong kind, stale or made up, and indices out of range, from
//! one to three threads at once. Each call must return an NVML code and touch nothing outside
//! the buffers it was given (AddressSanitizer), nor leak (LeakSanitizer).
//!
//! The node is the NVML tests' A100 with MIG instances. Buffers are allocated at exactly the
//! size the caller declares (nvml.h's struct sizes, the version word of a versioned struct, the
//! count of an array), so a write past them is caught.
#![no_main]

use std::{
    alloc::{Layout, alloc_zeroed, dealloc},
    ffi::{c_char, c_int, c_uint, c_ulonglong, c_void},
    sync::Once,
};

use libfuzzer_sys::{arbitrary::Unstructured, fuzz_target};

// Links the library: its exported functions are called through their C names below.
use nvidia_ml as _;

type Return = c_uint;
type Handle = *const c_void;

unsafe extern "C" {
    fn nvmlInit() -> Return;
    fn nvmlInit_v2() -> Return;
    fn nvmlInitWithFlags(flags: c_uint) -> Return;
    fn nvmlShutdown() -> Return;
    fn nvmlErrorString(result: Return) -> *const c_char;
    fn nvmlSystemGetDriverVersion(out: *mut c_char, length: c_uint) -> Return;
    fn nvmlSystemGetNVMLVersion(out: *mut c_char, length: c_uint) -> Return;
    fn nvmlSystemGetCudaDriverVersion(out: *mut c_int) -> Return;
    fn nvmlSystemGetCudaDriverVersion_v2(out: *mut c_int) -> Return;
    fn nvmlSystemGetProcessName(pid: c_uint, out: *mut c_char, length: c_uint) -> Return;
    fn nvmlDeviceGetCount(out: *mut c_uint) -> Return;
    fn nvmlDeviceGetCount_v2(out: *mut c_uint) -> Return;
    fn nvmlDeviceGetHandleByIndex(index: c_uint, out: *mut Handle) -> Return;
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut Handle) -> Return;
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, out: *mut Handle) -> Return;
    fn nvmlDeviceGetHandleByPciBusId(bus: *const c_char, out: *mut Handle) -> Return;
    fn nvmlDeviceGetHandleByPciBusId_v2(bus: *const c_char, out: *mut Handle) -> Return;
    fn nvmlDeviceGetName(handle: Handle, out: *mut c_char, length: c_uint) -> Return;
    fn nvmlDeviceGetUUID(handle: Handle, out: *mut c_char, length: c_uint) -> Return;
    fn nvmlDeviceGetMigDeviceHandleByIndex(
        handle: Handle,
        index: c_uint,
        out: *mut Handle,
    ) -> Return;
    fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: Handle, out: *mut Handle) -> Return;
    fn nvmlDeviceGetTopologyCommonAncestor(a: Handle, b: Handle, out: *mut c_uint) -> Return;
    fn nvmlDeviceGetMemoryErrorCounter(
        handle: Handle,
        error: c_uint,
        counter: c_uint,
        location: c_uint,
        out: *mut u64,
    ) -> Return;
    fn nvmlDeviceGetTotalEccErrors(
        handle: Handle,
        error: c_uint,
        counter: c_uint,
        out: *mut c_ulonglong,
    ) -> Return;
    fn nvmlDeviceGetGpuInstances(
        handle: Handle,
        profile: c_uint,
        out: *mut Handle,
        count: *mut c_uint,
    ) -> Return;
    fn nvmlDeviceGetGpuInstanceById(handle: Handle, id: c_uint, out: *mut Handle) -> Return;
    fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        handle: Handle,
        profile: c_uint,
        out: *mut c_void,
        count: *mut c_uint,
    ) -> Return;
    fn nvmlGpuInstanceGetComputeInstances(
        gi: Handle,
        profile: c_uint,
        out: *mut Handle,
        count: *mut c_uint,
    ) -> Return;
    fn nvmlGpuInstanceGetComputeInstanceById(gi: Handle, id: c_uint, out: *mut Handle) -> Return;
    fn nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        gi: Handle,
        profile: c_uint,
        out: *mut c_uint,
    ) -> Return;
    fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi: Handle,
        profile: c_uint,
        engine: c_uint,
        out: *mut c_void,
    ) -> Return;
    fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        gi: Handle,
        profile: c_uint,
        engine: c_uint,
        out: *mut c_void,
    ) -> Return;
    fn nvmlGpuInstanceGetInfo(gi: Handle, out: *mut c_void) -> Return;
    fn nvmlComputeInstanceGetInfo(ci: Handle, out: *mut c_void) -> Return;
    fn nvmlComputeInstanceGetInfo_v2(ci: Handle, out: *mut c_void) -> Return;
    fn nvmlDeviceGetComputeRunningProcesses(
        handle: Handle,
        count: *mut c_uint,
        out: *mut c_void,
    ) -> Return;
    fn nvmlDeviceGetProcessUtilization(
        handle: Handle,
        out: *mut c_void,
        count: *mut c_uint,
        since: c_ulonglong,
    ) -> Return;
    fn nvmlDeviceGetFieldValues(handle: Handle, count: c_int, out: *mut c_void) -> Return;
    fn nvmlEventSetCreate(out: *mut Handle) -> Return;
    fn nvmlEventSetFree(set: Handle) -> Return;
    fn nvmlDeviceRegisterEvents(handle: Handle, types: c_ulonglong, set: Handle) -> Return;
    fn nvmlEventSetWait_v2(set: Handle, out: *mut c_void, timeout_ms: c_uint) -> Return;
    fn nvmlInternalGetExportTable(out: *mut *const c_void, guid: *const [u8; 16]) -> Return;
}

/// Functions of one shape: a handle and one out-pointer to a fixed-size value.
type Fixed = unsafe extern "C" fn(Handle, *mut c_void) -> Return;
/// A handle, one argument, one out-pointer.
type WithArg = unsafe extern "C" fn(Handle, c_uint, *mut c_void) -> Return;
/// A handle, a count in and out, an array of that many entries.
type Processes = unsafe extern "C" fn(Handle, *mut c_uint, *mut c_void) -> Return;
/// A handle and two out-pointers.
type TwoOut = unsafe extern "C" fn(Handle, *mut c_void, *mut c_void) -> Return;

/// Declares functions of one shape by their C names, each with nvml.h's size of the value it
/// writes (none given: a versioned struct, sized by its version word).
macro_rules! table {
    ($ty:ty; $params:tt; $($name:ident $(: $size:expr)?),* $(,)?) => {{
        unsafe extern "C" {
            $(fn $name $params -> Return;)*
        }
        [$((stringify!($name), $name as $ty, 0 $(+ $size)?)),*]
    }};
}

fn fixed() -> [(&'static str, Fixed, usize); 27] {
    table!(Fixed; (h: Handle, out: *mut c_void);
        nvmlDeviceGetIndex: 4, nvmlDeviceGetMinorNumber: 4, nvmlDeviceGetBrand: 4,
        nvmlDeviceGetArchitecture: 4, nvmlDeviceGetMaxMigDeviceCount: 4,
        nvmlDeviceIsMigDeviceHandle: 4, nvmlDeviceGetGpuInstanceId: 4,
        nvmlDeviceGetComputeInstanceId: 4, nvmlDeviceGetPersistenceMode: 4,
        nvmlDeviceGetDisplayActive: 4, nvmlDeviceGetPerformanceState: 4,
        nvmlDeviceGetComputeMode: 4, nvmlDeviceGetPowerUsage: 4,
        nvmlDeviceGetEnforcedPowerLimit: 4,
        nvmlDeviceGetPowerManagementLimit: 4,
        nvmlDeviceGetPowerManagementDefaultLimit: 4,
        nvmlDeviceGetSupportedEventTypes: 8,
        // nvmlMemory_t, nvmlBAR1Memory_t, nvmlPciInfo_t, nvmlDeviceAttributes_t,
        // nvmlUtilization_t.
        nvmlDeviceGetMemoryInfo: 24, nvmlDeviceGetBAR1MemoryInfo: 24,
        nvmlDeviceGetPciInfo_v3: 68, nvmlDeviceGetPciInfo_v2: 68, nvmlDeviceGetPciInfo: 68,
        nvmlDeviceGetAttributes_v2: 40, nvmlDeviceGetAttributes: 40,
        nvmlDeviceGetUtilizationRates: 8,
        // nvmlMemory_v2_t, nvmlPciInfoExt_v1_t.
        nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetPciInfoExt,
    )
}

fn with_arg() -> [(&'static str, WithArg, usize); 7] {
    table!(WithArg; (h: Handle, arg: c_uint, out: *mut c_void);
        nvmlDeviceGetTemperature: 4, nvmlDeviceGetClockInfo: 4, nvmlDeviceGetMaxClockInfo: 4,
        nvmlDeviceGetGpuInstanceRemainingCapacity: 4,
        // nvmlGpuInstanceProfileInfo_t; then versioned ones.
        nvmlDeviceGetGpuInstanceProfileInfo: 48,
        nvmlDeviceGetGpuInstanceProfileInfoV, nvmlDeviceGetGpuInstanceProfileInfoByIdV,
    )
}

/// The process lists with entries of `nvmlProcessInfo_v2_t`'s layout (v3's too).
fn processes() -> [(&'static str, Processes, usize); 8] {
    table!(Processes; (h: Handle, count: *mut c_uint, out: *mut c_void);
        nvmlDeviceGetComputeRunningProcesses_v2, nvmlDeviceGetComputeRunningProcesses_v3,
        nvmlDeviceGetGraphicsRunningProcesses, nvmlDeviceGetGraphicsRunningProcesses_v2,
        nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlDeviceGetMPSComputeRunningProcesses,
        nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlDeviceGetMPSComputeRunningProcesses_v3)
}

fn two_out() -> [(&'static str, TwoOut, usize); 3] {
    table!(TwoOut; (h: Handle, a: *mut c_void, b: *mut c_void);
        nvmlDeviceGetMigMode: 4, nvmlDeviceGetEccMode: 4, nvmlDeviceGetCudaComputeCapability: 4)
}

unsafe extern "C" {
    fn nvmlDeviceGetTemperatureV(handle: Handle, out: *mut c_void) -> Return;
}

/// A struct version word (`NVML_STRUCT_VERSION`: version in the top byte, size below): mostly
/// of plausible sizes and versions, which the library's own versions are among.
fn version(u: &mut Unstructured) -> c_uint {
    if u.ratio(1, 8).unwrap_or(false) {
        return u.arbitrary().unwrap_or(0);
    }
    let size: c_uint = 4 * u.int_in_range(1..=64).unwrap_or(1);
    let version: c_uint = u.int_in_range(1..=4).unwrap_or(1);
    size | (version << 24)
}

/// A zeroed allocation of exactly `size` bytes (8-aligned), freed on drop; AddressSanitizer
/// reports any access past it.
struct Buffer {
    pointer: *mut u8,
    layout: Layout,
}

impl Buffer {
    fn new(size: usize) -> Self {
        let layout = Layout::from_size_align(size.max(1), 8).expect("layout");
        let pointer = unsafe { alloc_zeroed(layout) };
        assert!(!pointer.is_null());
        Self { pointer, layout }
    }

    fn with_version(version: c_uint) -> Self {
        // The size is the version word's low 24 bits; at least the word itself.
        let buffer = Self::new(((version & 0x00ff_ffff) as usize).clamp(4, 1 << 16));
        unsafe { buffer.pointer.cast::<c_uint>().write(version) };
        buffer
    }

    fn out<T>(&self) -> *mut T {
        self.pointer.cast()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { dealloc(self.pointer, self.layout) };
    }
}

/// Handles a thread has seen, as addresses.
#[derive(Default)]
struct Seen {
    devices: Vec<usize>,
    gpu_instances: Vec<usize>,
    compute_instances: Vec<usize>,
    event_sets: Vec<usize>,
    /// Balance of this thread's inits and shutdowns, so that it never takes the harness's
    /// own reference.
    inits: u32,
}

/// An out-pointer: null, or a buffer of the value's size (a shorter one is the caller's fault in
/// NVML as in any C API; lengths that callers declare are fuzzed where the API takes them).
fn buffer(u: &mut Unstructured, size: usize) -> Option<Buffer> {
    (!u.ratio(1, 8).unwrap_or(false)).then(|| Buffer::new(size))
}

fn ptr<T>(buffer: &Option<Buffer>) -> *mut T {
    buffer.as_ref().map_or(std::ptr::null_mut(), Buffer::out)
}

/// A handle of the kind wanted (mostly), of another kind, null, made up, or freed.
fn handle(u: &mut Unstructured, kinds: &[&Vec<usize>]) -> Handle {
    let choice = u.int_in_range(0..=9_u8).unwrap_or(0);
    let pool = kinds[(choice as usize) % kinds.len()];
    match choice {
        0 => std::ptr::null(),
        1 => u.arbitrary::<usize>().unwrap_or(1) as Handle,
        2 => 8 as Handle,
        _ if pool.is_empty() => std::ptr::null(),
        _ => pool[u.choose_index(pool.len()).unwrap_or(0)] as Handle,
    }
}

/// The first `count` handles a call wrote to `array`, kept (up to 64) when it succeeded.
fn remember_array(list: &mut Vec<usize>, code: Return, array: &Option<Buffer>, count: c_uint) {
    let Some(array) = array.as_ref().filter(|_| code == 0) else {
        return;
    };
    for i in 0..count as usize {
        let handle = unsafe { *array.out::<Handle>().add(i) };
        if !handle.is_null() && list.len() < 64 {
            list.push(handle as usize);
        }
    }
}

/// The handle a call wrote to `out`, kept when it succeeded.
fn remember(list: &mut Vec<usize>, code: Return, out: &Option<Buffer>) {
    remember_array(list, code, out, 1);
}

/// The older or the newer of two entry points of one call (NVML keeps both exported).
macro_rules! either {
    ($u:expr, $older:expr, $newer:expr) => {
        if $u.ratio(1, 3).unwrap_or(false) {
            $older
        } else {
            $newer
        }
    };
}

/// One call chosen by the fuzzer; false when the input is used up.
fn call(u: &mut Unstructured, seen: &mut Seen) -> bool {
    let Ok(op) = u.int_in_range(0..=27_u8) else {
        return false;
    };
    let arg: c_uint = u.arbitrary().unwrap_or(0);
    let small: c_uint = u.int_in_range(0..=12).unwrap_or(0);
    let length: c_uint = u.int_in_range(0..=300).unwrap_or(0);
    let devices = seen.devices.clone();
    let gis = seen.gpu_instances.clone();
    let cis = seen.compute_instances.clone();
    let sets = seen.event_sets.clone();
    unsafe {
        let code = match op {
            0 => {
                seen.inits += 1;
                match small % 3 {
                    0 => nvmlInit(),
                    1 => nvmlInitWithFlags(arg),
                    _ => nvmlInit_v2(),
                }
            }
            1 if seen.inits > 0 => {
                seen.inits -= 1;
                nvmlShutdown()
            }
            1 => 0,
            2 => {
                let text = nvmlErrorString(arg % 1000);
                assert!(!text.is_null());
                let _ = std::ffi::CStr::from_ptr(text);
                0
            }
            3 | 4 => {
                let out = Buffer::new(length as usize);
                let f = if op == 3 {
                    nvmlSystemGetDriverVersion
                } else {
                    nvmlSystemGetNVMLVersion
                };
                let pointer = if u.ratio(1, 8).unwrap_or(false) {
                    std::ptr::null_mut()
                } else {
                    out.out()
                };
                f(pointer, length)
            }
            5 => {
                let out = buffer(u, 4);
                either!(
                    u,
                    nvmlSystemGetCudaDriverVersion,
                    nvmlSystemGetCudaDriverVersion_v2
                )(ptr(&out))
            }
            6 => {
                let out = Buffer::new(length as usize);
                nvmlSystemGetProcessName(arg, out.out(), length)
            }
            7 => {
                let out = buffer(u, 4);
                either!(u, nvmlDeviceGetCount, nvmlDeviceGetCount_v2)(ptr(&out))
            }
            8 => {
                let out = buffer(u, 8);
                let f = either!(u, nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2);
                let code = f(small, ptr(&out));
                remember(&mut seen.devices, code, &out);
                code
            }
            9 | 10 => {
                let text: Vec<u8> = u.arbitrary().unwrap_or_default();
                let mut text: Vec<u8> = text.into_iter().filter(|b| *b != 0).collect();
                text.push(0);
                let out = buffer(u, 8);
                let name = if u.ratio(1, 10).unwrap_or(false) {
                    std::ptr::null()
                } else {
                    text.as_ptr().cast()
                };
                if op == 9 {
                    nvmlDeviceGetHandleByUUID(name, ptr(&out))
                } else {
                    either!(
                        u,
                        nvmlDeviceGetHandleByPciBusId,
                        nvmlDeviceGetHandleByPciBusId_v2
                    )(name, ptr(&out))
                }
            }
            11 | 12 => {
                let out = Buffer::new(length as usize);
                let h = handle(u, &[&devices]);
                if op == 11 {
                    nvmlDeviceGetName(h, out.out(), length)
                } else {
                    nvmlDeviceGetUUID(h, out.out(), length)
                }
            }
            13 => {
                let table = fixed();
                let (_, f, size) = table[u.choose_index(table.len()).unwrap_or(0)];
                let h = handle(u, &[&devices]);
                if size == 0 {
                    let out = Buffer::with_version(version(u));
                    f(h, out.out())
                } else {
                    let out = buffer(u, size);
                    f(h, ptr(&out))
                }
            }
            14 => {
                let table = with_arg();
                let (_, f, size) = table[u.choose_index(table.len()).unwrap_or(0)];
                let h = handle(u, &[&devices]);
                if size == 0 {
                    let out = Buffer::with_version(version(u));
                    f(h, small, out.out())
                } else {
                    let out = buffer(u, size);
                    f(h, small, ptr(&out))
                }
            }
            15 => {
                let table = two_out();
                let (_, f, size) = table[u.choose_index(table.len()).unwrap_or(0)];
                let (a, b) = (buffer(u, size), buffer(u, size));
                f(handle(u, &[&devices]), ptr(&a), ptr(&b))
            }
            16 => {
                let out = Buffer::with_version(version(u));
                // The sensor asked for, where the caller's struct has room for it.
                if out.layout.size() >= 8 && u.ratio(1, 2).unwrap_or(false) {
                    out.out::<c_uint>().add(1).write(small);
                }
                nvmlDeviceGetTemperatureV(handle(u, &[&devices]), out.out())
            }
            17 => {
                let out = buffer(u, 8);
                let code =
                    nvmlDeviceGetMigDeviceHandleByIndex(handle(u, &[&devices]), small, ptr(&out));
                remember(&mut seen.devices, code, &out);
                code
            }
            18 => {
                let out = buffer(u, 8);
                nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle(u, &[&devices]), ptr(&out))
            }
            19 => {
                let out = buffer(u, 4);
                nvmlDeviceGetTopologyCommonAncestor(
                    handle(u, &[&devices]),
                    handle(u, &[&devices]),
                    ptr(&out),
                )
            }
            20 => {
                let out = buffer(u, 8);
                let h = handle(u, &[&devices]);
                if u.ratio(1, 2).unwrap_or(false) {
                    nvmlDeviceGetMemoryErrorCounter(h, small % 3, arg % 3, small, ptr(&out))
                } else {
                    nvmlDeviceGetTotalEccErrors(h, small % 3, arg % 3, ptr(&out))
                }
            }
            // Arrays: a count in and out, and an array of that many entries (or null, to ask
            // for the count).
            21..=24 => {
                let count = small;
                let mut count_word = count;
                let counted = !u.ratio(1, 10).unwrap_or(false);
                let count_ptr: *mut c_uint = if counted {
                    &mut count_word
                } else {
                    std::ptr::null_mut()
                };
                let h = handle(u, &[&devices, &gis]);
                match op {
                    // nvmlProcessInfo_v1_t, v2 (v3's layout), nvmlProcessUtilizationSample_t.
                    21 => {
                        let v1 = u.ratio(1, 2).unwrap_or(false);
                        let size = if v1 { 16 } else { 24 };
                        let array = (count > 0).then(|| Buffer::new(size * count as usize));
                        let f = if v1 {
                            nvmlDeviceGetComputeRunningProcesses
                        } else {
                            let newer = processes();
                            newer[u.choose_index(newer.len()).unwrap_or(0)].1
                        };
                        f(h, count_ptr, ptr(&array))
                    }
                    22 => {
                        let array = (count > 0).then(|| Buffer::new(32 * count as usize));
                        nvmlDeviceGetProcessUtilization(h, ptr(&array), count_ptr, arg.into())
                    }
                    // nvmlGpuInstancePlacement_t; then GPU instance handles.
                    23 => {
                        let array = (count > 0).then(|| Buffer::new(8 * count as usize));
                        if u.ratio(1, 2).unwrap_or(false) {
                            nvmlDeviceGetGpuInstancePossiblePlacements_v2(
                                h,
                                arg % 24,
                                ptr(&array),
                                count_ptr,
                            )
                        } else {
                            let code =
                                nvmlDeviceGetGpuInstances(h, arg % 24, ptr(&array), count_ptr);
                            remember_array(
                                &mut seen.gpu_instances,
                                code,
                                &array,
                                count_word.min(count),
                            );
                            code
                        }
                    }
                    _ => {
                        let array = (count > 0).then(|| Buffer::new(8 * count as usize));
                        let gi = handle(u, &[&gis, &devices]);
                        let code = nvmlGpuInstanceGetComputeInstances(
                            gi,
                            arg % 10,
                            ptr(&array),
                            count_ptr,
                        );
                        remember_array(
                            &mut seen.compute_instances,
                            code,
                            &array,
                            count_word.min(count),
                        );
                        code
                    }
                }
            }
            25 => {
                let gi = handle(u, &[&gis, &devices]);
                match u.int_in_range(0..=5_u8).unwrap_or(0) {
                    0 => {
                        let out = buffer(u, 8);
                        let code =
                            nvmlDeviceGetGpuInstanceById(handle(u, &[&devices]), small, ptr(&out));
                        remember(&mut seen.gpu_instances, code, &out);
                        code
                    }
                    1 => {
                        let out = buffer(u, 8);
                        let code = nvmlGpuInstanceGetComputeInstanceById(gi, small, ptr(&out));
                        remember(&mut seen.compute_instances, code, &out);
                        code
                    }
                    2 => {
                        let out = buffer(u, 4);
                        nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, small, ptr(&out))
                    }
                    // nvmlComputeInstanceProfileInfo_t; then versioned.
                    3 => {
                        let out = buffer(u, 36);
                        nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, small, arg % 2, ptr(&out))
                    }
                    4 => {
                        let out = Buffer::with_version(version(u));
                        nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, small, arg % 2, out.out())
                    }
                    // nvmlGpuInstanceInfo_t, nvmlComputeInstanceInfo_t.
                    _ => {
                        if u.ratio(1, 2).unwrap_or(false) {
                            let out = buffer(u, 24);
                            nvmlGpuInstanceGetInfo(gi, ptr(&out))
                        } else {
                            let out = buffer(u, 32);
                            let f = either!(
                                u,
                                nvmlComputeInstanceGetInfo,
                                nvmlComputeInstanceGetInfo_v2
                            );
                            f(handle(u, &[&cis, &gis]), ptr(&out))
                        }
                    }
                }
            }
            26 => {
                // nvmlFieldValue_t: the caller fills in the field ids.
                let count = small as usize;
                let out = Buffer::new(40 * count.max(1));
                for i in 0..count {
                    out.out::<c_uint>()
                        .add(i * 10)
                        .write(u.int_in_range(0..=300).unwrap_or(0));
                }
                let declared = if u.ratio(1, 8).unwrap_or(false) {
                    -(small as c_int)
                } else {
                    count as c_int
                };
                nvmlDeviceGetFieldValues(handle(u, &[&devices]), declared, out.out())
            }
            _ => match u.int_in_range(0..=4_u8).unwrap_or(0) {
                0 => {
                    let out = buffer(u, 8);
                    let code = nvmlEventSetCreate(ptr(&out));
                    remember(&mut seen.event_sets, code, &out);
                    code
                }
                1 => nvmlDeviceRegisterEvents(
                    handle(u, &[&devices]),
                    u.arbitrary().unwrap_or(0),
                    handle(u, &[&sets]),
                ),
                2 => {
                    // nvmlEventData_t.
                    let out = buffer(u, 32);
                    nvmlEventSetWait_v2(handle(u, &[&sets]), ptr(&out), small % 3)
                }
                3 => {
                    // Freed sets stay in the list: later calls pass them as stale handles.
                    nvmlEventSetFree(handle(u, &[&sets]))
                }
                _ => {
                    let guid: [u8; 16] = u.arbitrary().unwrap_or_default();
                    let mut out: *const c_void = std::ptr::null();
                    let guid_ptr = if u.ratio(1, 8).unwrap_or(false) {
                        std::ptr::null()
                    } else {
                        &guid
                    };
                    nvmlInternalGetExportTable(&mut out, guid_ptr)
                }
            },
        };
        assert!(
            code == 0 || (1..=30).contains(&code) || code == 999,
            "op {op}: return {code}"
        );
    }
    true
}

/// The harness's own reference: NVML stays initialised for the process, so threads' shutdowns
/// never drop the last one (a machine is read again on the next init, and the last one kept
/// alive for handles held across the shutdown; see docs/src/development/fuzzing.md).
static SETUP: Once = Once::new();

fn setup() {
    SETUP.call_once(|| {
        let path =
            std::env::temp_dir().join(format!("fakegpu-fuzz-nvml-{}.yml", std::process::id()));
        std::fs::write(
            &path,
            include_str!("../../nvml/tests/documents/a100-mig.yml"),
        )
        .expect("document written");
        // Before any thread runs.
        unsafe { std::env::set_var("FAKEGPU_NVML_TOPOLOGY", &path) };
        assert_eq!(unsafe { nvmlInit_v2() }, 0, "the document loads");
    });
}

fuzz_target!(|data: &[u8]| {
    setup();
    fakegpu_fuzz::in_threads(data, |part| {
        let mut u = Unstructured::new(part);
        let mut seen = Seen::default();
        for _ in 0..64 {
            if !call(&mut u, &mut seen) {
                break;
            }
        }
        for _ in 0..seen.inits {
            unsafe { nvmlShutdown() };
        }
        for set in seen.event_sets {
            unsafe { nvmlEventSetFree(set as Handle) };
        }
    });
});
