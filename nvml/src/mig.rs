//! MIG as NVML describes it (pure, no FFI): the GPU-instance profiles a product offers, the
//! compute-instance profiles of a GPU instance, and the GPU and compute instances of the
//! document's layout. go-nvlib builds its profile names (`1g.10gb`, `1c.3g.20gb`) from these
//! answers, NVIDIA's device plugin names its `nvidia.com/mig-*` resources after them and its
//! DRA driver its MIG devices, so they follow the driver's numbering.

use fakegpu_model::mig_slices::{MemorySlices, placements};
use fakegpu_model::{
    profiles::{MIG_COMPUTE_SLICES, MigEngines, MigProfile},
    topology::MigDevice,
};

/// A GPU-instance profile, as `nvmlDeviceGetGpuInstanceProfileInfo` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GiProfile {
    /// NVML's profile index (`NVML_GPU_INSTANCE_PROFILE_1_SLICE` = 0, ...): what callers ask by.
    pub index: u32,
    /// The driver's profile ID (19 for a 1g, ...): what instances report.
    pub id: u32,
    pub compute_slices: u32,
    pub memory_slices: u32,
    /// How many instances of it one GPU holds.
    pub instances: u32,
    pub multiprocessors: u32,
    pub engines: MigEngines,
    pub memory_mib: u64,
    /// `MIG 1g.10gb`, as `nvidia-smi mig -lgip` lists it.
    pub name: String,
    /// Memory slices an instance may start at.
    pub placements: Vec<u32>,
}

/// A compute-instance profile of a GPU instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CiProfile {
    /// NVML's profile index (`NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE` = 0, ...), which the
    /// driver also reports as the profile's ID.
    pub index: u32,
    pub compute_slices: u32,
    /// How many fit in the GPU instance.
    pub instances: u32,
    pub multiprocessors: u32,
}

/// A MIG instance's GPU instance: its handle is this value's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInstance {
    /// The driver's GPU-instance ID (nvidia-smi's `GI ID`).
    pub id: u32,
    pub profile_id: u32,
    /// `1g.10gb`, as the driver names the profile.
    pub profile: String,
    pub placement_start: u32,
    pub memory_slices: u32,
    pub compute_slices: u32,
    pub multiprocessors: u32,
    pub engines: MigEngines,
    pub memory_mib: u64,
}

/// The one compute instance spanning its GPU instance (fakegpu's layouts do not divide GPU
/// instances further): ID 0, as the driver numbers the first. Its handle is its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeInstance {
    pub id: u32,
    /// [`CiProfile::index`] of a profile as large as the GPU instance.
    pub profile_id: u32,
    pub compute_slices: u32,
}

/// NVML's GPU-instance profile index for the driver's profile ID; `None` for an ID NVML
/// has no index for here.
fn gi_profile_index(id: u32) -> Option<u32> {
    Some(match id {
        19 => 0, // 1_SLICE
        14 => 1, // 2_SLICE
        9 => 2,  // 3_SLICE
        5 => 3,  // 4_SLICE
        0 => 4,  // 7_SLICE
        20 => 7, // 1_SLICE_REV1: one slice with the media engines (`+me`)
        15 => 9, // 1_SLICE_REV2: one compute slice, two memory slices
        _ => return None,
    })
}

/// NVML's compute-instance profile index for a compute instance of `slices` compute slices.
fn ci_profile_index(slices: u32) -> Option<u32> {
    Some(match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        8 => 5,
        6 => 6,
        _ => return None,
    })
}

/// The GPU-instance profiles of a product's catalog entry, in NVML's index order.
pub fn gi_profiles(catalog: &[MigProfile]) -> Vec<GiProfile> {
    let mut profiles: Vec<GiProfile> = catalog
        .iter()
        .filter_map(|p| {
            Some(GiProfile {
                index: gi_profile_index(p.gi_profile_id)?,
                id: p.gi_profile_id,
                compute_slices: p.compute_slices,
                memory_slices: p.memory_slices,
                instances: p.max_instances,
                multiprocessors: p.multiprocessors,
                engines: p.engines,
                memory_mib: p.memory_mib,
                name: format!("MIG {}", p.name),
                placements: placements(p).collect(),
            })
        })
        .collect();
    profiles.sort_by_key(|p| p.index);
    profiles
}

/// The compute-instance profiles a GPU instance of `gpu_instance_slices` compute slices and
/// `multiprocessors` SMs offers: those the driver offers (on a 7-slice instance 1, 2, 3, 4 and
/// 7 slices; on a 4-slice one 1, 2 and 4), each with an even share of the SMs.
pub fn ci_profiles(gpu_instance_slices: u32, multiprocessors: u32) -> Vec<CiProfile> {
    let g = gpu_instance_slices;
    [1, 2, 3, 4, 6, 7, 8]
        .into_iter()
        .filter(|&c| c == g || (c < g && 2 * c <= g + 1))
        .filter_map(|c| {
            Some(CiProfile {
                index: ci_profile_index(c)?,
                compute_slices: c,
                instances: g / c,
                multiprocessors: multiprocessors * c / g.max(1),
            })
        })
        .collect()
}

/// The GPU and compute instance behind a MIG device of the document.
pub fn instances(mig: &MigDevice) -> (GpuInstance, ComputeInstance) {
    let gpu_instance = GpuInstance {
        id: mig.gpu_instance_id(),
        profile_id: mig.gi_profile_id,
        profile: mig.profile.clone(),
        placement_start: mig.placement_start,
        memory_slices: mig.memory_slices,
        compute_slices: mig.compute_slices,
        multiprocessors: mig.multiprocessors,
        engines: mig.engines,
        memory_mib: mig.memory,
    };
    let compute_instance = ComputeInstance {
        id: 0,
        profile_id: ci_profile_index(mig.compute_slices).unwrap_or_default(),
        compute_slices: mig.compute_slices,
    };
    (gpu_instance, compute_instance)
}

/// How many more instances of `profile` fit beside `existing`: free placements, within the
/// compute slices left and the profile's own limit.
pub fn remaining_capacity<'a>(
    profile: &GiProfile,
    existing: impl IntoIterator<Item = &'a GpuInstance>,
) -> u32 {
    let mut memory = MemorySlices::default();
    let (mut compute_used, mut same) = (0, 0);
    for instance in existing {
        memory.take_run(instance.placement_start, instance.memory_slices);
        compute_used += instance.compute_slices;
        same += u32::from(instance.profile_id == profile.id);
    }
    let free_placements = profile
        .placements
        .iter()
        .filter(|&&start| memory.run_is_free(start, profile.memory_slices))
        .count() as u32;
    let by_compute =
        MIG_COMPUTE_SLICES.saturating_sub(compute_used) / profile.compute_slices.max(1);
    free_placements
        .min(by_compute)
        .min(profile.instances.saturating_sub(same))
}

#[cfg(test)]
mod tests {
    use fakegpu_model::profiles::profile_by_product;

    use super::*;

    fn a100() -> Vec<GiProfile> {
        gi_profiles(
            profile_by_product("NVIDIA A100-SXM4-40GB")
                .expect("catalog")
                .mig_profiles,
        )
    }

    #[test]
    fn profiles_are_numbered_as_nvml_numbers_them() {
        let indexed: Vec<_> = a100()
            .iter()
            .map(|p| (p.index, p.id, p.name.clone()))
            .collect();
        assert_eq!(
            indexed,
            [
                (0, 19, "MIG 1g.5gb".to_owned()),
                (1, 14, "MIG 2g.10gb".to_owned()),
                (2, 9, "MIG 3g.20gb".to_owned()),
                (3, 5, "MIG 4g.20gb".to_owned()),
                (4, 0, "MIG 7g.40gb".to_owned()),
                (7, 20, "MIG 1g.5gb+me".to_owned()),
                (9, 15, "MIG 1g.10gb".to_owned()),
            ]
        );
        let three = &a100()[2];
        assert_eq!(three.placements, [0, 4]);
    }

    #[test]
    fn a_gpu_instance_offers_the_driver_s_compute_instance_profiles() {
        let slices = |g| -> Vec<u32> {
            ci_profiles(g, 14 * g)
                .iter()
                .map(|p| p.compute_slices)
                .collect()
        };
        assert_eq!(slices(7), [1, 2, 3, 4, 7]);
        assert_eq!(slices(4), [1, 2, 4]);
        assert_eq!(slices(3), [1, 2, 3]);
        assert_eq!(slices(1), [1]);
        let whole = ci_profiles(7, 98);
        assert_eq!((whole[0].instances, whole[0].multiprocessors), (7, 14));
        assert_eq!((whole[4].index, whole[4].instances), (4, 1));
    }

    #[test]
    fn capacity_left_counts_free_placements_and_compute_slices() {
        let profiles = a100();
        let by_id = |id| profiles.iter().find(|p| p.id == id).expect("profile");
        let instance = |profile: &GiProfile, start| GpuInstance {
            id: 0,
            profile_id: profile.id,
            profile: String::new(),
            placement_start: start,
            memory_slices: profile.memory_slices,
            compute_slices: profile.compute_slices,
            multiprocessors: 0,
            engines: MigEngines::default(),
            memory_mib: 0,
        };
        assert_eq!(remaining_capacity(by_id(19), []), 7);
        // A 4g at 0: a 3g still fits at 4, 1g's at 4-6, no second 4g.
        let four = [instance(by_id(5), 0)];
        assert_eq!(remaining_capacity(by_id(9), &four), 1);
        assert_eq!(remaining_capacity(by_id(19), &four), 3);
        assert_eq!(remaining_capacity(by_id(5), &four), 0);
        // The one `+me` instance a GPU may have is taken.
        let media = [instance(by_id(20), 0)];
        assert_eq!(remaining_capacity(by_id(20), &media), 0);
    }
}
