//! The C ABI of NVML (`nvml.h`): the one place of this crate with unsafe code. Each function
//! checks its pointers, takes its answer from the [`Machine`] of the loaded document and copies
//! it out; the contracts are NVML's, as its header documents them.
#![allow(unsafe_code, clippy::missing_safety_doc)]

mod events;
mod export_table;
mod mig;
mod modes;
mod not_supported;
mod processes;
mod sensors;

use std::{
    ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void},
    sync::Mutex,
};

use crate::{
    machine::{Device, Machine, MigInstance},
    source,
};

/// `nvmlReturn_t`.
pub type Return = c_uint;
pub const SUCCESS: Return = 0;
pub const ERROR_UNINITIALIZED: Return = 1;
pub const ERROR_INVALID_ARGUMENT: Return = 2;
pub const ERROR_NOT_SUPPORTED: Return = 3;
pub const ERROR_NOT_FOUND: Return = 6;
pub const ERROR_INSUFFICIENT_SIZE: Return = 7;
pub const ERROR_DRIVER_NOT_LOADED: Return = 9;
pub const ERROR_TIMEOUT: Return = 10;
pub const ERROR_ARGUMENT_VERSION_MISMATCH: Return = 25;
pub const ERROR_UNKNOWN: Return = 999;

/// `nvmlDevice_t`: the address of a [`Device`] or [`MigInstance`] of the loaded machine.
pub type DeviceHandle = *const c_void;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Debug)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlPciInfo_t`.
#[repr(C)]
#[derive(Debug)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// NVML is reference counted: each init takes a reference, each shutdown gives one back, and
/// the machine is read again on the first init after the last shutdown. Machines are leaked, so
/// that a handle kept across a shutdown points at memory that stays valid (it is refused).
struct State {
    references: u32,
    machine: Option<&'static Machine>,
    /// Where the machine was read from; events read it again.
    source: Option<source::Source>,
}

static STATE: Mutex<State> = Mutex::new(State {
    references: 0,
    machine: None,
    source: None,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn init() -> Return {
    let mut state = state();
    if state.references == 0 {
        let loaded = source::Source::locate(nvmlInit_v2 as *const () as usize)
            .and_then(|source| Ok((source.load()?, source)));
        match loaded {
            Ok((machine, source)) => {
                state.machine = Some(Box::leak(Box::new(machine)));
                state.source = Some(source);
            }
            Err(source::LoadError::Missing(_)) => return ERROR_DRIVER_NOT_LOADED,
            Err(_) => return ERROR_UNKNOWN,
        }
    }
    state.references += 1;
    SUCCESS
}

/// The loaded machine, if NVML is initialised.
fn machine() -> Result<&'static Machine, Return> {
    let state = state();
    match (state.references, state.machine) {
        (1.., Some(machine)) => Ok(machine),
        _ => Err(ERROR_UNINITIALIZED),
    }
}

/// The loaded machine and where it was read from, if NVML is initialised.
fn loaded() -> Result<(&'static Machine, source::Source), Return> {
    let state = state();
    match (state.references, state.machine, &state.source) {
        (1.., Some(machine), Some(source)) => Ok((machine, source.clone())),
        _ => Err(ERROR_UNINITIALIZED),
    }
}

/// What a handle names.
enum Handle {
    Gpu(&'static Device),
    Mig(&'static Device, &'static MigInstance),
}

fn resolve(handle: DeviceHandle) -> Result<Handle, Return> {
    let machine = machine()?;
    for device in &machine.devices {
        if std::ptr::eq(handle, (device as *const Device).cast()) {
            return Ok(Handle::Gpu(device));
        }
        for mig in &device.mig_devices {
            if std::ptr::eq(handle, (mig as *const MigInstance).cast()) {
                return Ok(Handle::Mig(device, mig));
            }
        }
    }
    Err(ERROR_INVALID_ARGUMENT)
}

impl Handle {
    fn name(&self) -> &'static str {
        match self {
            Self::Gpu(d) => &d.name,
            Self::Mig(_, i) => &i.name,
        }
    }

    fn uuid(&self) -> &'static str {
        match self {
            Self::Gpu(d) => &d.uuid,
            Self::Mig(_, i) => &i.uuid,
        }
    }

    fn memory_bytes(&self) -> u64 {
        match self {
            Self::Gpu(d) => d.memory_bytes,
            Self::Mig(_, i) => i.memory_bytes,
        }
    }

    /// What `of_gpu` or `of_mig` reads of the GPU or instance as the document has it now (see
    /// [`current`]); as of `nvmlInit` when the document cannot be read or no longer has it.
    fn now<T>(
        &self,
        of_gpu: impl FnOnce(&Device) -> T,
        of_mig: impl FnOnce(&MigInstance) -> T,
    ) -> T {
        match self {
            Self::Gpu(d) => match current(d) {
                Some(now) => of_gpu(&now),
                None => of_gpu(d),
            },
            Self::Mig(d, i) => {
                let now =
                    current(d).and_then(|n| n.mig_devices.into_iter().find(|m| m.uuid == i.uuid));
                match now {
                    Some(now) => of_mig(&now),
                    None => of_mig(i),
                }
            }
        }
    }

    /// Framebuffer used now.
    fn memory_used_bytes(&self) -> u64 {
        self.now(|d| d.memory_used_bytes, |i| i.memory_used_bytes)
    }
}

/// GPU `device` as the document has it now. A process keeps its handles from `nvmlInit` on
/// while the pods on its GPUs come and go and their utilization draws move with time, so the
/// readings that follow them (sensors, utilization, memory used) are taken from this, read
/// anew; `None` when the document cannot be read now or no longer has the GPU (callers then
/// answer as of `nvmlInit`).
fn current(device: &Device) -> Option<Device> {
    let (_, source) = loaded().ok()?;
    let machine = source.load().ok()?;
    machine.devices.into_iter().find(|d| d.uuid == device.uuid)
}

/// The whole GPU behind `handle` as the document has it now (see [`current`]).
fn gpu_now(handle: DeviceHandle) -> Result<Device, Return> {
    let device = gpu(handle)?;
    Ok(current(device).unwrap_or_else(|| device.clone()))
}

/// A whole GPU's handle; queries that only whole GPUs answer refuse MIG handles.
fn gpu(handle: DeviceHandle) -> Result<&'static Device, Return> {
    match resolve(handle)? {
        Handle::Gpu(device) => Ok(device),
        Handle::Mig(..) => Err(ERROR_NOT_SUPPORTED),
    }
}

/// A MIG instance's handle and its GPU; `not_mig` answers for a whole GPU's.
fn mig(
    handle: DeviceHandle,
    not_mig: Return,
) -> Result<(&'static Device, &'static MigInstance), Return> {
    match resolve(handle)? {
        Handle::Mig(device, instance) => Ok((device, instance)),
        Handle::Gpu(_) => Err(not_mig),
    }
}

fn handle_of<T>(item: &'static T) -> DeviceHandle {
    (item as *const T).cast()
}

/// `NVML_STRUCT_VERSION(T, version)`: the size of `T` below, the version in the top byte.
const fn struct_version_word<T>(version: c_uint) -> c_uint {
    size_of::<T>() as c_uint | (version << 24)
}

/// The version word a caller wrote at the start of a versioned struct (`NVML_STRUCT_VERSION`:
/// the version in the top byte, the struct's size below).
unsafe fn struct_version(out: *const c_uint) -> Result<c_uint, Return> {
    if out.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    Ok(unsafe { out.read() })
}

/// Whether the caller's versioned struct at `out` is the one version this library writes.
unsafe fn expect_version(out: *const c_uint, expected: c_uint) -> Result<(), Return> {
    match unsafe { struct_version(out) }? {
        version if version == expected => Ok(()),
        _ => Err(ERROR_ARGUMENT_VERSION_MISMATCH),
    }
}

/// Writes `value` to `out`.
unsafe fn put<T>(out: *mut T, value: T) -> Return {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    unsafe { out.write(value) };
    SUCCESS
}

/// Copies `text` and its terminating NUL into the `length` bytes at `out`.
unsafe fn put_str(out: *mut c_char, length: c_uint, text: &str) -> Return {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    if text.len() + 1 > length as usize {
        return ERROR_INSUFFICIENT_SIZE;
    }
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), out, text.len());
        out.add(text.len()).write(0);
    }
    SUCCESS
}

/// A C string argument, if it is one.
unsafe fn arg_str<'a>(text: *const c_char) -> Option<&'a str> {
    if text.is_null() {
        return None;
    }
    unsafe { CStr::from_ptr(text) }.to_str().ok()
}

/// `fixed`, NUL-padded, as a C char array.
fn c_array<const N: usize>(text: &str) -> [c_char; N] {
    let mut array = [0 as c_char; N];
    for (slot, byte) in array.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = byte as c_char;
    }
    array
}

fn answer(result: Result<Return, Return>) -> Return {
    result.unwrap_or_else(|error| error)
}

// --- initialisation and errors ---------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> Return {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> Return {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Return {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> Return {
    let mut state = state();
    if state.references == 0 {
        return ERROR_UNINITIALIZED;
    }
    state.references -= 1;
    if state.references == 0 {
        state.machine = None;
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: Return) -> *const c_char {
    let text: &'static CStr = match result {
        SUCCESS => c"Success",
        ERROR_UNINITIALIZED => c"Uninitialized",
        ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        ERROR_NOT_SUPPORTED => c"Not Supported",
        ERROR_NOT_FOUND => c"Not Found",
        ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

// --- system ----------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(out: *mut c_char, length: c_uint) -> Return {
    answer(machine().map(|m| unsafe { put_str(out, length, &m.driver_version) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(out: *mut c_char, length: c_uint) -> Return {
    answer(machine().map(|m| unsafe { put_str(out, length, &m.nvml_version) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(out: *mut c_int) -> Return {
    answer(machine().map(|m| unsafe { put(out, m.cuda_driver_version) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(out: *mut c_int) -> Return {
    unsafe { nvmlSystemGetCudaDriverVersion(out) }
}

// --- enumeration -----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(out: *mut c_uint) -> Return {
    answer(machine().map(|m| unsafe { put(out, m.devices.len() as c_uint) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(out: *mut c_uint) -> Return {
    unsafe { nvmlDeviceGetCount(out) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    out: *mut DeviceHandle,
) -> Return {
    answer(machine().and_then(|m| {
        let device = m
            .devices
            .get(index as usize)
            .ok_or(ERROR_INVALID_ARGUMENT)?;
        Ok(unsafe { put(out, handle_of(device)) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    out: *mut DeviceHandle,
) -> Return {
    unsafe { nvmlDeviceGetHandleByIndex(index, out) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    out: *mut DeviceHandle,
) -> Return {
    answer(machine().and_then(|m| {
        let uuid = unsafe { arg_str(uuid) }.ok_or(ERROR_INVALID_ARGUMENT)?;
        let handle = m.devices.iter().find_map(|d| {
            if d.uuid == uuid {
                return Some(handle_of(d));
            }
            d.mig_devices.iter().find(|i| i.uuid == uuid).map(handle_of)
        });
        Ok(unsafe { put(out, handle.ok_or(ERROR_NOT_FOUND)?) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    out: *mut DeviceHandle,
) -> Return {
    answer(machine().and_then(|m| {
        let bus_id = unsafe { arg_str(bus_id) }.ok_or(ERROR_INVALID_ARGUMENT)?;
        let device = m
            .devices
            .iter()
            .find(|d| {
                d.pci.bus_id.eq_ignore_ascii_case(bus_id)
                    || d.pci.bus_id_legacy.eq_ignore_ascii_case(bus_id)
            })
            .ok_or(ERROR_NOT_FOUND)?;
        Ok(unsafe { put(out, handle_of(device)) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    out: *mut DeviceHandle,
) -> Return {
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(bus_id, out) }
}

// --- identity --------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    handle: DeviceHandle,
    out: *mut c_char,
    length: c_uint,
) -> Return {
    answer(resolve(handle).map(|h| unsafe { put_str(out, length, h.name()) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    handle: DeviceHandle,
    out: *mut c_char,
    length: c_uint,
) -> Return {
    answer(resolve(handle).map(|h| unsafe { put_str(out, length, h.uuid()) }))
}

/// A GPU's NVML index; a MIG device's index among its GPU's, the one
/// `nvmlDeviceGetMigDeviceHandleByIndex` takes (NVIDIA's nvidia-smi prints it as `MIG Dev`, and
/// lists no MIG device it cannot number).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(handle: DeviceHandle, out: *mut c_uint) -> Return {
    answer(resolve(handle).and_then(|h| match h {
        Handle::Gpu(d) => Ok(unsafe { put(out, d.index) }),
        Handle::Mig(d, i) => {
            let index = d.mig_devices.iter().position(|m| std::ptr::eq(m, i));
            let index = index.ok_or(ERROR_INVALID_ARGUMENT)?;
            Ok(unsafe { put(out, index as c_uint) })
        }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    answer(gpu(handle).map(|d| unsafe { put(out, d.minor) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBrand(handle: DeviceHandle, out: *mut c_uint) -> Return {
    answer(gpu(handle).map(|d| unsafe { put(out, d.brand) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    answer(gpu(handle).map(|d| unsafe { put(out, d.architecture) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    handle: DeviceHandle,
    major: *mut c_int,
    minor: *mut c_int,
) -> Return {
    answer(gpu(handle).map(|d| {
        if major.is_null() || minor.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        unsafe {
            put(major, d.compute_capability.0);
            put(minor, d.compute_capability.1)
        }
    }))
}

/// `nvmlGpuTopologyLevel_t` for a pair of GPUs; MIG handles have no PCIe path of their own.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: DeviceHandle,
    device2: DeviceHandle,
    path_info: *mut c_uint,
) -> Return {
    answer(gpu(device1).and_then(|first| {
        let second = gpu(device2)?;
        Ok(unsafe { put(path_info, first.common_ancestor(second)) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(handle: DeviceHandle, out: *mut Memory) -> Return {
    answer(resolve(handle).map(|h| {
        let total = h.memory_bytes();
        let used = h.memory_used_bytes().min(total);
        unsafe {
            put(
                out,
                Memory {
                    total,
                    free: total - used,
                    used,
                },
            )
        }
    }))
}

/// `nvmlBAR1Memory_t`, bytes.
#[repr(C)]
pub struct Bar1Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// A MIG device's BAR1 aperture, none of it mapped: NVIDIA's nvidia-smi lists no MIG device
/// without it. Whole GPUs' apertures vary by board in ways the catalog does not record, so
/// they answer `NVML_ERROR_NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(
    handle: DeviceHandle,
    out: *mut Bar1Memory,
) -> Return {
    answer(mig(handle, ERROR_NOT_SUPPORTED).map(|(_, i)| unsafe {
        put(
            out,
            Bar1Memory {
                total: i.bar1_bytes,
                free: i.bar1_bytes,
                used: 0,
            },
        )
    }))
}

/// A MIG device's memory error counts, which nvidia-smi's MIG table prints: none (injected ECC
/// errors are the whole GPU's, `nvmlDeviceGetTotalEccErrors`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryErrorCounter(
    handle: DeviceHandle,
    _error_type: c_uint,
    _counter_type: c_uint,
    _location: c_uint,
    out: *mut u64,
) -> Return {
    answer(mig(handle, ERROR_NOT_SUPPORTED).map(|_| unsafe { put(out, 0) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    handle: DeviceHandle,
    out: *mut PciInfo,
) -> Return {
    answer(gpu(handle).map(|d| {
        let info = PciInfo {
            bus_id_legacy: c_array(&d.pci.bus_id_legacy),
            domain: d.pci.domain,
            bus: d.pci.bus,
            device: d.pci.device,
            pci_device_id: d.pci.pci_device_id,
            pci_sub_system_id: 0,
            bus_id: c_array(&d.pci.bus_id),
        };
        unsafe { put(out, info) }
    }))
}

/// `nvmlPciInfoExt_v1_t`.
#[repr(C)]
#[derive(Debug)]
pub struct PciInfoExt {
    pub version: c_uint,
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub base_class: c_uint,
    pub sub_class: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlPciInfoExt_v1`.
const PCI_INFO_EXT_V1: c_uint = struct_version_word::<PciInfoExt>(1);

/// nvidia-smi's `pci.bus_id` query field reads this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfoExt(
    handle: DeviceHandle,
    out: *mut PciInfoExt,
) -> Return {
    if let Err(error) = unsafe { expect_version(out.cast(), PCI_INFO_EXT_V1) } {
        return error;
    }
    answer(gpu(handle).map(|d| {
        let info = PciInfoExt {
            version: PCI_INFO_EXT_V1,
            domain: d.pci.domain,
            bus: d.pci.bus,
            device: d.pci.device,
            pci_device_id: d.pci.pci_device_id,
            pci_sub_system_id: 0,
            // A 3D controller, as data-centre GPUs enumerate (the driver root's sysfs agrees).
            base_class: 0x03,
            sub_class: 0x02,
            bus_id: c_array(&d.pci.bus_id),
        };
        unsafe { put(out, info) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    handle: DeviceHandle,
    out: *mut PciInfo,
) -> Return {
    unsafe { nvmlDeviceGetPciInfo_v3(handle, out) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(handle: DeviceHandle, out: *mut PciInfo) -> Return {
    unsafe { nvmlDeviceGetPciInfo_v3(handle, out) }
}

// --- MIG -------------------------------------------------------------------------------------

/// MIG instances an A100/H100-class GPU holds at most.
const MAX_MIG_DEVICES: c_uint = 7;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    handle: DeviceHandle,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        // A product that cannot do MIG has no mode (nvidia-smi then prints `N/A`, and GFD's
        // `mig.capable` is false).
        if !d.mig_enabled && d.gi_profiles.is_empty() {
            return Err(ERROR_NOT_SUPPORTED);
        }
        if current.is_null() || pending.is_null() {
            return Ok(ERROR_INVALID_ARGUMENT);
        }
        let mode = c_uint::from(d.mig_enabled);
        Ok(unsafe {
            put(current, mode);
            put(pending, mode)
        })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    answer(gpu(handle).map(|d| {
        let count = if d.mig_enabled { MAX_MIG_DEVICES } else { 0 };
        unsafe { put(out, count) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    handle: DeviceHandle,
    index: c_uint,
    out: *mut DeviceHandle,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        if !d.mig_enabled {
            return Err(ERROR_NOT_SUPPORTED);
        }
        let instance = d.mig_devices.get(index as usize).ok_or(ERROR_NOT_FOUND)?;
        Ok(unsafe { put(out, handle_of(instance)) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    answer(resolve(handle).map(|h| unsafe { put(out, c_uint::from(matches!(h, Handle::Mig(..)))) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    handle: DeviceHandle,
    out: *mut DeviceHandle,
) -> Return {
    answer(
        mig(handle, ERROR_INVALID_ARGUMENT)
            .map(|(parent, _)| unsafe { put(out, handle_of(parent)) }),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    answer(mig(handle, ERROR_NOT_SUPPORTED).map(|(_, i)| unsafe { put(out, i.gpu_instance.id) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    handle: DeviceHandle,
    out: *mut c_uint,
) -> Return {
    answer(
        mig(handle, ERROR_NOT_SUPPORTED).map(|(_, i)| unsafe { put(out, i.compute_instance.id) }),
    )
}
