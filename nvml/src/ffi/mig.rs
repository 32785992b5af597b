//! MIG's GPU and compute instances and their profiles (see [`crate::mig`]): what go-nvlib asks
//! to name a MIG device's profile (NVIDIA's device plugin and GPU feature discovery under the
//! `mixed` strategy) and what NVIDIA's DRA driver asks to describe MIG devices. The layout is
//! the document's: instances cannot be created or destroyed through the library.

use std::ffi::{c_char, c_uint, c_ulonglong, c_void};

use super::{
    DeviceHandle, ERROR_ARGUMENT_VERSION_MISMATCH, ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED, Return, SUCCESS, answer, c_array, gpu, handle_of,
    machine, mig, put, struct_version, struct_version_word,
};
use crate::{
    machine::{Device, MigInstance},
    mig::{CiProfile, ComputeInstance, GiProfile, GpuInstance, ci_profiles, remaining_capacity},
};

/// `nvmlGpuInstance_t`: the address of a [`MigInstance`]'s `gpu_instance`.
pub type GpuInstanceHandle = *const c_void;
/// `nvmlComputeInstance_t`: the address of a [`MigInstance`]'s `compute_instance`.
pub type ComputeInstanceHandle = *const c_void;

/// `NVML_GPU_INSTANCE_PROFILE_COUNT`, `NVML_COMPUTE_INSTANCE_PROFILE_COUNT`.
const GI_PROFILE_COUNT: c_uint = 0x12;
const CI_PROFILE_COUNT: c_uint = 0x9;
/// `NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED`, the only engine profile.
const ENGINE_PROFILE_SHARED: c_uint = 0;
/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`.
const NAME_SIZE: usize = 96;

/// `nvmlGpuInstanceProfileInfo_t`.
#[repr(C)]
#[derive(Debug)]
pub struct GiProfileInfo {
    pub id: c_uint,
    pub is_p2p_supported: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: c_ulonglong,
}

/// `nvmlGpuInstanceProfileInfo_v2_t`: v1's fields after the version, flattened as C lays
/// them out (the 64-bit memory size stays 8-aligned).
#[repr(C)]
pub struct GiProfileInfoV2 {
    pub version: c_uint,
    pub id: c_uint,
    pub is_p2p_supported: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: c_ulonglong,
    pub name: [c_char; NAME_SIZE],
}

/// `nvmlGpuInstanceProfileInfo_v3_t` (no P2P field; capabilities at the end).
#[repr(C)]
pub struct GiProfileInfoV3 {
    pub version: c_uint,
    pub id: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: c_ulonglong,
    pub name: [c_char; NAME_SIZE],
    pub capabilities: c_uint,
}

/// `nvmlComputeInstanceProfileInfo_t`.
#[repr(C)]
#[derive(Debug)]
pub struct CiProfileInfo {
    pub id: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
}

/// `nvmlComputeInstanceProfileInfo_v2_t`; v3 adds `capabilities`.
#[repr(C)]
pub struct CiProfileInfoV2 {
    pub version: c_uint,
    pub info: CiProfileInfo,
    pub name: [c_char; NAME_SIZE],
}

#[repr(C)]
pub struct CiProfileInfoV3 {
    pub v2: CiProfileInfoV2,
    pub capabilities: c_uint,
}

/// `nvmlGpuInstancePlacement_t` and `nvmlComputeInstancePlacement_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    pub start: c_uint,
    pub size: c_uint,
}

/// `nvmlGpuInstanceInfo_t`.
#[repr(C)]
pub struct GiInfo {
    pub device: DeviceHandle,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: Placement,
}

/// `nvmlComputeInstanceInfo_t`.
#[repr(C)]
pub struct CiInfo {
    pub device: DeviceHandle,
    pub gpu_instance: GpuInstanceHandle,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: Placement,
}

/// `nvmlDeviceAttributes_t`.
#[repr(C)]
pub struct Attributes {
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
    pub gpu_instance_slice_count: c_uint,
    pub compute_instance_slice_count: c_uint,
    pub memory_size_mb: c_ulonglong,
}

fn gi_profile_by_index(device: &Device, index: c_uint) -> Result<&GiProfile, Return> {
    if index >= GI_PROFILE_COUNT {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let profile = device.gi_profiles.iter().find(|p| p.index == index);
    profile.ok_or(ERROR_NOT_SUPPORTED)
}

fn gi_profile_by_id(device: &Device, id: c_uint) -> Result<&GiProfile, Return> {
    let profile = device.gi_profiles.iter().find(|p| p.id == id);
    profile.ok_or(ERROR_INVALID_ARGUMENT)
}

fn gi_profile_info(profile: &GiProfile) -> GiProfileInfo {
    GiProfileInfo {
        id: profile.id,
        is_p2p_supported: 0,
        slice_count: profile.compute_slices,
        instance_count: profile.instances,
        multiprocessor_count: profile.multiprocessors,
        copy_engine_count: profile.engines.copy,
        decoder_count: profile.engines.decoder,
        encoder_count: profile.engines.encoder,
        jpeg_count: profile.engines.jpeg,
        ofa_count: profile.engines.ofa,
        memory_size_mb: profile.memory_mib,
    }
}

/// The version words (`NVML_STRUCT_VERSION`: the struct's size, the version in the top byte) of
/// the versioned profile infos. The whole word is compared, not the version alone: a caller's
/// struct of another size (another header's) is refused, never written past its end.
const GI_PROFILE_V2: c_uint = struct_version_word::<GiProfileInfoV2>(2);
const GI_PROFILE_V3: c_uint = struct_version_word::<GiProfileInfoV3>(3);
const CI_PROFILE_V2: c_uint = struct_version_word::<CiProfileInfoV2>(2);
const CI_PROFILE_V3: c_uint = struct_version_word::<CiProfileInfoV3>(3);

/// Writes a versioned GPU-instance profile info (v2 or v3, as the caller's struct says).
unsafe fn put_gi_profile_v(profile: &GiProfile, out: *mut c_void) -> Result<Return, Return> {
    let stamp = unsafe { struct_version(out.cast()) }?;
    let info = gi_profile_info(profile);
    let name = c_array::<NAME_SIZE>(&profile.name);
    Ok(match stamp {
        GI_PROFILE_V2 => unsafe {
            put(
                out.cast::<GiProfileInfoV2>(),
                GiProfileInfoV2 {
                    version: stamp,
                    id: info.id,
                    is_p2p_supported: info.is_p2p_supported,
                    slice_count: info.slice_count,
                    instance_count: info.instance_count,
                    multiprocessor_count: info.multiprocessor_count,
                    copy_engine_count: info.copy_engine_count,
                    decoder_count: info.decoder_count,
                    encoder_count: info.encoder_count,
                    jpeg_count: info.jpeg_count,
                    ofa_count: info.ofa_count,
                    memory_size_mb: info.memory_size_mb,
                    name,
                },
            )
        },
        GI_PROFILE_V3 => unsafe {
            put(
                out.cast::<GiProfileInfoV3>(),
                GiProfileInfoV3 {
                    version: stamp,
                    id: info.id,
                    slice_count: info.slice_count,
                    instance_count: info.instance_count,
                    multiprocessor_count: info.multiprocessor_count,
                    copy_engine_count: info.copy_engine_count,
                    decoder_count: info.decoder_count,
                    encoder_count: info.encoder_count,
                    jpeg_count: info.jpeg_count,
                    ofa_count: info.ofa_count,
                    memory_size_mb: info.memory_size_mb,
                    name,
                    capabilities: 0,
                },
            )
        },
        _ => return Err(ERROR_ARGUMENT_VERSION_MISMATCH),
    })
}

/// The GPU and instance a GPU-instance handle names.
fn gpu_instance(
    handle: GpuInstanceHandle,
) -> Result<(&'static Device, &'static MigInstance), Return> {
    find_instance(|i| std::ptr::eq(handle, (&i.gpu_instance as *const GpuInstance).cast()))
}

/// The GPU and instance a compute-instance handle names.
fn compute_instance(
    handle: ComputeInstanceHandle,
) -> Result<(&'static Device, &'static MigInstance), Return> {
    find_instance(|i| {
        std::ptr::eq(
            handle,
            (&i.compute_instance as *const ComputeInstance).cast(),
        )
    })
}

fn find_instance(
    matches: impl Fn(&'static MigInstance) -> bool,
) -> Result<(&'static Device, &'static MigInstance), Return> {
    machine()?
        .devices
        .iter()
        .find_map(|d| d.mig_devices.iter().find(|i| matches(i)).map(|i| (d, i)))
        .ok_or(ERROR_INVALID_ARGUMENT)
}

/// Copies `items` into the caller's array of `*count` entries (NVML's convention: a null array
/// asks for the count; too small an array gets `ERROR_INSUFFICIENT_SIZE` and the count needed).
unsafe fn put_list<T>(items: Vec<T>, out: *mut T, count: *mut c_uint) -> Result<Return, Return> {
    if count.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let room = unsafe { count.read() } as usize;
    let needed = items.len() as c_uint;
    unsafe { count.write(needed) };
    if out.is_null() {
        return Ok(SUCCESS);
    }
    if room < items.len() {
        return Err(ERROR_INSUFFICIENT_SIZE);
    }
    for (i, item) in items.into_iter().enumerate() {
        unsafe { out.add(i).write(item) };
    }
    Ok(SUCCESS)
}

fn ci_profile_of(
    instance: &MigInstance,
    index: c_uint,
    engines: c_uint,
) -> Result<CiProfile, Return> {
    if index >= CI_PROFILE_COUNT || engines != ENGINE_PROFILE_SHARED {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let gi = &instance.gpu_instance;
    ci_profiles(gi.compute_slices, gi.multiprocessors)
        .into_iter()
        .find(|p| p.index == index)
        .ok_or(ERROR_NOT_SUPPORTED)
}

fn ci_profile_info(instance: &MigInstance, profile: &CiProfile) -> CiProfileInfo {
    let engines = &instance.gpu_instance.engines;
    CiProfileInfo {
        id: profile.index,
        slice_count: profile.compute_slices,
        instance_count: profile.instances,
        multiprocessor_count: profile.multiprocessors,
        shared_copy_engine_count: engines.copy,
        shared_decoder_count: engines.decoder,
        shared_encoder_count: engines.encoder,
        shared_jpeg_count: engines.jpeg,
        shared_ofa_count: engines.ofa,
    }
}

// --- GPU-instance profiles of a whole GPU -----------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    handle: DeviceHandle,
    profile: c_uint,
    out: *mut GiProfileInfo,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        let info = gi_profile_info(gi_profile_by_index(d, profile)?);
        Ok(unsafe { put(out, info) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    handle: DeviceHandle,
    profile: c_uint,
    out: *mut c_void,
) -> Return {
    answer(
        gpu(handle)
            .and_then(|d| unsafe { put_gi_profile_v(gi_profile_by_index(d, profile)?, out) }),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    handle: DeviceHandle,
    profile_id: c_uint,
    out: *mut c_void,
) -> Return {
    answer(
        gpu(handle)
            .and_then(|d| unsafe { put_gi_profile_v(gi_profile_by_id(d, profile_id)?, out) }),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    handle: DeviceHandle,
    profile_id: c_uint,
    out: *mut Placement,
    count: *mut c_uint,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        let profile = gi_profile_by_id(d, profile_id)?;
        let placements = profile
            .placements
            .iter()
            .map(|&start| Placement {
                start,
                size: profile.memory_slices,
            })
            .collect();
        unsafe { put_list(placements, out, count) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    handle: DeviceHandle,
    profile_id: c_uint,
    count: *mut c_uint,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        let profile = gi_profile_by_id(d, profile_id)?;
        let left = remaining_capacity(profile, d.mig_devices.iter().map(|i| &i.gpu_instance));
        Ok(unsafe { put(count, left) })
    }))
}

// --- the document's GPU instances -------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    handle: DeviceHandle,
    profile_id: c_uint,
    out: *mut GpuInstanceHandle,
    count: *mut c_uint,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        gi_profile_by_id(d, profile_id)?;
        let instances = d
            .mig_devices
            .iter()
            .filter(|i| i.gpu_instance.profile_id == profile_id)
            .map(|i| handle_of(&i.gpu_instance))
            .collect();
        unsafe { put_list(instances, out, count) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    handle: DeviceHandle,
    id: c_uint,
    out: *mut GpuInstanceHandle,
) -> Return {
    answer(gpu(handle).and_then(|d| {
        if !d.mig_enabled {
            return Err(ERROR_NOT_SUPPORTED);
        }
        let instance = d.mig_devices.iter().find(|i| i.gpu_instance.id == id);
        let instance = instance.ok_or(ERROR_NOT_FOUND)?;
        Ok(unsafe { put(out, handle_of(&instance.gpu_instance)) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    handle: GpuInstanceHandle,
    out: *mut GiInfo,
) -> Return {
    answer(gpu_instance(handle).map(|(device, instance)| {
        let gi = &instance.gpu_instance;
        let info = GiInfo {
            device: handle_of(device),
            id: gi.id,
            profile_id: gi.profile_id,
            placement: Placement {
                start: gi.placement_start,
                size: gi.memory_slices,
            },
        };
        unsafe { put(out, info) }
    }))
}

// --- compute instances ------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    handle: GpuInstanceHandle,
    profile: c_uint,
    engines: c_uint,
    out: *mut CiProfileInfo,
) -> Return {
    answer(gpu_instance(handle).and_then(|(_, instance)| {
        let info = ci_profile_info(instance, &ci_profile_of(instance, profile, engines)?);
        Ok(unsafe { put(out, info) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    handle: GpuInstanceHandle,
    profile: c_uint,
    engines: c_uint,
    out: *mut c_void,
) -> Return {
    answer(gpu_instance(handle).and_then(|(_, instance)| {
        let ci = ci_profile_of(instance, profile, engines)?;
        let stamp = unsafe { struct_version(out.cast()) }?;
        let v2 = CiProfileInfoV2 {
            version: stamp,
            info: ci_profile_info(instance, &ci),
            name: c_array(&ci_profile_name(instance, &ci)),
        };
        Ok(match stamp {
            CI_PROFILE_V2 => unsafe { put(out.cast::<CiProfileInfoV2>(), v2) },
            CI_PROFILE_V3 => unsafe {
                put(
                    out.cast::<CiProfileInfoV3>(),
                    CiProfileInfoV3 {
                        v2,
                        capabilities: 0,
                    },
                )
            },
            _ => return Err(ERROR_ARGUMENT_VERSION_MISMATCH),
        })
    }))
}

/// `MIG 1c.3g.20gb` (`MIG 3g.20gb` for the profile spanning the GPU instance), as
/// `nvidia-smi mig -lcip` lists compute-instance profiles.
fn ci_profile_name(instance: &MigInstance, ci: &CiProfile) -> String {
    let gi = &instance.gpu_instance;
    let gi_name = &gi.profile;
    if ci.compute_slices == gi.compute_slices {
        format!("MIG {gi_name}")
    } else {
        format!("MIG {}c.{gi_name}", ci.compute_slices)
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    handle: GpuInstanceHandle,
    profile: c_uint,
    count: *mut c_uint,
) -> Return {
    // The one compute instance spans the GPU instance: nothing else fits.
    answer(gpu_instance(handle).and_then(|(_, instance)| {
        ci_profile_of(instance, profile, ENGINE_PROFILE_SHARED)?;
        Ok(unsafe { put(count, 0) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    handle: GpuInstanceHandle,
    profile: c_uint,
    out: *mut ComputeInstanceHandle,
    count: *mut c_uint,
) -> Return {
    answer(gpu_instance(handle).and_then(|(_, instance)| {
        ci_profile_of(instance, profile, ENGINE_PROFILE_SHARED)?;
        let ci = &instance.compute_instance;
        let instances = if ci.profile_id == profile {
            vec![handle_of(ci)]
        } else {
            Vec::new()
        };
        unsafe { put_list(instances, out, count) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    handle: GpuInstanceHandle,
    id: c_uint,
    out: *mut ComputeInstanceHandle,
) -> Return {
    answer(gpu_instance(handle).and_then(|(_, instance)| {
        let ci = &instance.compute_instance;
        if ci.id != id {
            return Err(ERROR_NOT_FOUND);
        }
        Ok(unsafe { put(out, handle_of(ci)) })
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    handle: ComputeInstanceHandle,
    out: *mut CiInfo,
) -> Return {
    answer(compute_instance(handle).map(|(device, instance)| {
        let ci = &instance.compute_instance;
        let info = CiInfo {
            device: handle_of(device),
            gpu_instance: handle_of(&instance.gpu_instance),
            id: ci.id,
            profile_id: ci.profile_id,
            placement: Placement {
                start: 0,
                size: ci.compute_slices,
            },
        };
        unsafe { put(out, info) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo(
    handle: ComputeInstanceHandle,
    out: *mut CiInfo,
) -> Return {
    unsafe { nvmlComputeInstanceGetInfo_v2(handle, out) }
}

// --- a MIG device's attributes ----------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    handle: DeviceHandle,
    out: *mut Attributes,
) -> Return {
    // NVML answers this for MIG devices only.
    answer(mig(handle, ERROR_NOT_SUPPORTED).map(|(_, instance)| {
        let gi = &instance.gpu_instance;
        let attributes = Attributes {
            multiprocessor_count: gi.multiprocessors,
            shared_copy_engine_count: gi.engines.copy,
            shared_decoder_count: gi.engines.decoder,
            shared_encoder_count: gi.engines.encoder,
            shared_jpeg_count: gi.engines.jpeg,
            shared_ofa_count: gi.engines.ofa,
            gpu_instance_slice_count: gi.compute_slices,
            compute_instance_slice_count: instance.compute_instance.compute_slices,
            memory_size_mb: gi.memory_mib,
        };
        unsafe { put(out, attributes) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetAttributes(
    handle: DeviceHandle,
    out: *mut Attributes,
) -> Return {
    unsafe { nvmlDeviceGetAttributes_v2(handle, out) }
}
