//! The processes running on a GPU or MIG instance, and their names. A caller sees its own
//! pod's use of a GPU as its container's main process, and a caller that is no pod's (on the
//! node's host) every pod's, under the PIDs its `/proc` gives them (see `machine::Process`,
//! `crate::host`); a pod's container sees no other pod's, as the real driver shows a caller only
//! its own PID namespace's. Tools that list processes (nvidia-smi, gpustat, nvitop, pynvml
//! scripts) then see what they see on a real node.

use std::ffi::{c_char, c_uint, c_ulonglong};

use super::{
    ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT, ERROR_NOT_FOUND, Handle, Return, SUCCESS,
    answer, machine, resolve,
};
use fakegpu_model::telemetry::memory_activity;

use crate::{host::PodProcesses, machine::Process};

/// A process as it is listed: with the PID the caller knows it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub pid: c_uint,
    pub process: Process,
}

/// `processes` with their PIDs: the caller's own have theirs, other pods' are looked for in this
/// process's `/proc` (only when there are any), and those not found there are left out.
fn listed(processes: Vec<Process>, host: impl FnOnce() -> PodProcesses) -> Vec<Listed> {
    let host = processes.iter().any(|p| p.pid.is_none()).then(host);
    processes
        .into_iter()
        .filter_map(|process| {
            let pid = match process.pid {
                Some(pid) => pid,
                None => host.as_ref()?.main_process(&process.pod)?,
            };
            Some(Listed { pid, process })
        })
        .collect()
}

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t`, which is also `nvmlProcessInfo_t` (the `_v3` functions').
#[repr(C)]
pub struct ProcessInfoV2 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    /// `0xFFFFFFFF` outside MIG.
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// What NVML writes for a GPU-instance or compute-instance ID outside MIG.
const NO_INSTANCE: c_uint = c_uint::MAX;

impl From<&Listed> for ProcessInfoV1 {
    fn from(listed: &Listed) -> Self {
        Self {
            pid: listed.pid,
            used_gpu_memory: listed.process.used_memory_bytes,
        }
    }
}

impl From<&Listed> for ProcessInfoV2 {
    fn from(listed: &Listed) -> Self {
        let (gpu_instance_id, compute_instance_id) = listed
            .process
            .instance
            .unwrap_or((NO_INSTANCE, NO_INSTANCE));
        Self {
            pid: listed.pid,
            used_gpu_memory: listed.process.used_memory_bytes,
            gpu_instance_id,
            compute_instance_id,
        }
    }
}

impl Handle {
    /// The processes on the GPU or instance now (see `current`) as the caller is shown them.
    pub(super) fn processes(&self) -> Vec<Listed> {
        let now = self.now(|d| d.processes.clone(), |i| i.processes.clone());
        listed(now, PodProcesses::scan)
    }
}

/// Fills a caller's process list as NVML does: `*count` is the room in `infos` going in and the
/// number of processes coming out; too little room (a count of 0 asks how many, `infos` may
/// then be null) answers `NVML_ERROR_INSUFFICIENT_SIZE` with the number needed.
pub(super) unsafe fn fill<T: for<'a> From<&'a Listed>>(
    processes: &[Listed],
    count: *mut c_uint,
    infos: *mut T,
) -> Return {
    if count.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let room = unsafe { count.read() } as usize;
    unsafe { count.write(processes.len() as c_uint) };
    if room < processes.len() {
        return ERROR_INSUFFICIENT_SIZE;
    }
    if processes.is_empty() {
        return SUCCESS;
    }
    if infos.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    for (i, process) in processes.iter().enumerate() {
        unsafe { infos.add(i).write(T::from(process)) };
    }
    SUCCESS
}

/// A compute-process list of `handle` in the layout `T` (NVML's and the export table's).
pub(super) unsafe fn compute<T: for<'a> From<&'a Listed>>(
    handle: super::DeviceHandle,
    count: *mut c_uint,
    infos: *mut T,
) -> Return {
    answer(resolve(handle).map(|h| unsafe { fill(&h.processes(), count, infos) }))
}

/// A list of `handle` that is always empty (graphics, MPS), in the layout `T`: no simulated pod
/// draws graphics or runs under MPS. Real NVML answers these on every data-center GPU, so tools
/// get an empty list, not an error.
pub(super) unsafe fn none<T: for<'a> From<&'a Listed>>(
    handle: super::DeviceHandle,
    count: *mut c_uint,
    infos: *mut T,
) -> Return {
    answer(resolve(handle).map(|_| unsafe { fill(&[], count, infos) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    handle: super::DeviceHandle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> Return {
    unsafe { compute(handle, count, infos) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    handle: super::DeviceHandle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Return {
    unsafe { compute(handle, count, infos) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    handle: super::DeviceHandle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Return {
    unsafe { compute(handle, count, infos) }
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    /// CPU time of the sample, microseconds since the epoch.
    pub time_stamp: c_ulonglong,
    pub sm: c_uint,
    pub memory: c_uint,
    pub encoder: c_uint,
    pub decoder: c_uint,
}

/// The caller's processes' utilization on a whole GPU (nvitop's `%SM` and `%GMBW`): each
/// process's draw for this period, sampled now. As NVML: a partitioned GPU or a MIG device does
/// not support it, no busy process is `NVML_ERROR_NOT_FOUND`, a null buffer (or too small a
/// one) asks how many samples there are.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    handle: super::DeviceHandle,
    samples: *mut ProcessUtilizationSample,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> Return {
    answer(resolve(handle).and_then(|h| {
        if count.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        if !matches!(h, Handle::Gpu(device) if !device.mig_enabled) {
            return Err(super::ERROR_NOT_SUPPORTED);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as c_ulonglong);
        // Every sample is taken now: none is newer than a time not yet passed.
        if now <= last_seen {
            return Err(ERROR_NOT_FOUND);
        }
        let busy: Vec<Listed> = h
            .processes()
            .into_iter()
            .filter(|listed| listed.process.sm_utilization > 0)
            .collect();
        if busy.is_empty() {
            return Err(ERROR_NOT_FOUND);
        }
        let room = unsafe { count.read() } as usize;
        unsafe { count.write(busy.len() as c_uint) };
        if samples.is_null() || room < busy.len() {
            return Err(ERROR_INSUFFICIENT_SIZE);
        }
        for (i, listed) in busy.iter().enumerate() {
            let load = listed.process.sm_utilization;
            let sample = ProcessUtilizationSample {
                pid: listed.pid,
                time_stamp: now,
                sm: c_uint::from(load),
                memory: memory_activity(load),
                encoder: 0,
                decoder: 0,
            };
            unsafe { samples.add(i).write(sample) };
        }
        Ok(SUCCESS)
    }))
}

/// Graphics and MPS lists: none (see [`none`]).
macro_rules! no_processes {
    ($($name:ident)*) => {
        $(
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(
                handle: super::DeviceHandle,
                count: *mut c_uint,
                infos: *mut ProcessInfoV2,
            ) -> Return {
                unsafe { none(handle, count, infos) }
            }
        )*
    };
}

no_processes! {
    nvmlDeviceGetGraphicsRunningProcesses
    nvmlDeviceGetGraphicsRunningProcesses_v2
    nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses
    nvmlDeviceGetMPSComputeRunningProcesses_v2
    nvmlDeviceGetMPSComputeRunningProcesses_v3
}

/// The name a process was started by: the first word of its command line (`python3`,
/// `/usr/bin/nvidia-smi`), else its kernel name (a process that cleared its command line).
pub(super) fn process_name(pid: c_uint) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let first = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    if !first.is_empty() {
        return Some(String::from_utf8_lossy(first).into_owned());
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_owned()).filter(|name| !name.is_empty())
}

/// `nvmlSystemGetProcessName`: the name cropped to `length` bytes with its NUL, as NVML crops it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> Return {
    answer(machine().and_then(|_| {
        if name.is_null() || length == 0 {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        let text = process_name(pid).ok_or(ERROR_NOT_FOUND)?;
        let bytes = &text.as_bytes()[..text.len().min(length as usize - 1)];
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), name, bytes.len());
            name.add(bytes.len()).write(0);
        }
        Ok(SUCCESS)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, instance: Option<(u32, u32)>) -> Listed {
        Listed {
            pid,
            process: Process {
                pid: Some(pid),
                pod: format!("uid-{pid}"),
                used_memory_bytes: u64::from(pid) << 30,
                instance,
                sm_utilization: 0,
            },
        }
    }

    #[test]
    fn other_pods_processes_are_listed_by_the_pids_found_for_them() {
        let own = process(1, None).process;
        let other = |pod: &str| Process {
            pid: None,
            pod: pod.into(),
            ..own.clone()
        };
        let on_host = || {
            let mut found = std::collections::BTreeMap::new();
            found.insert("uid-seen".to_owned(), 4242);
            PodProcesses::from(found)
        };
        let listed_pids = |processes: Vec<Process>| -> Vec<u32> {
            listed(processes, on_host).iter().map(|l| l.pid).collect()
        };
        assert_eq!(listed_pids(vec![own.clone()]), [1]);
        assert_eq!(
            listed_pids(vec![other("uid-seen"), other("uid-gone")]),
            [4242]
        );
        // Only a list with another pod's process looks at /proc.
        let listed = listed(vec![own], || panic!("scanned /proc for the caller's own"));
        assert_eq!(listed.len(), 1);
    }

    #[test]
    fn a_list_asks_for_room_then_fills_it() {
        let processes = [process(1, None), process(7, Some((3, 0)))];
        let mut count: c_uint = 0;
        let result = unsafe { fill::<ProcessInfoV2>(&processes, &mut count, std::ptr::null_mut()) };
        assert_eq!((result, count), (ERROR_INSUFFICIENT_SIZE, 2));
        let mut infos: Vec<ProcessInfoV2> = (0..3)
            .map(|_| ProcessInfoV2 {
                pid: 0,
                used_gpu_memory: 0,
                gpu_instance_id: 0,
                compute_instance_id: 0,
            })
            .collect();
        count = 3;
        let result = unsafe { fill(&processes, &mut count, infos.as_mut_ptr()) };
        assert_eq!((result, count), (SUCCESS, 2));
        assert_eq!(
            (
                infos[0].pid,
                infos[0].used_gpu_memory,
                infos[0].gpu_instance_id
            ),
            (1, 1 << 30, NO_INSTANCE)
        );
        assert_eq!(
            (
                infos[1].pid,
                infos[1].gpu_instance_id,
                infos[1].compute_instance_id
            ),
            (7, 3, 0)
        );
        // None at all: success with a count of 0, whatever the room.
        count = 0;
        let result = unsafe { fill::<ProcessInfoV1>(&[], &mut count, std::ptr::null_mut()) };
        assert_eq!((result, count), (SUCCESS, 0));
        let result =
            unsafe { fill::<ProcessInfoV1>(&[], std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(result, ERROR_INVALID_ARGUMENT);
    }

    #[test]
    fn the_layouts_are_nvmls() {
        assert_eq!(size_of::<ProcessInfoV1>(), 16);
        assert_eq!(size_of::<ProcessInfoV2>(), 24);
        assert_eq!(size_of::<ProcessUtilizationSample>(), 32);
    }

    #[test]
    fn a_process_is_named_by_its_command_line() {
        let me = std::process::id();
        let exe = std::env::args().next().unwrap_or_default();
        assert_eq!(process_name(me), Some(exe));
        assert_eq!(process_name(u32::MAX), None);
    }
}
