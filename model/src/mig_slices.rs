//! Where MIG instances sit on a GPU's eight memory slices, as NVML places them: the pool's MIG
//! layout (`fakegpu_api::pool::mig`) and the NVML library's capacity answers both place with it.

use crate::profiles::{
    MIG_COMPUTE_SLICES as COMPUTE_SLICES, MIG_MEMORY_SLICES as MEMORY_SLICES, MigProfile,
};

/// Memory slices an instance of `profile` occupies.
fn size(profile: &MigProfile) -> u32 {
    profile.memory_slices.clamp(1, MEMORY_SLICES)
}

/// Where an instance of `profile` may start, as NVML lists its placements: multiples of its
/// memory size whose compute slices stay within the seven (`start + compute <= 7`). So on an
/// A100 or H100 a 1g starts at 0-6, a 2g at 0, 2 or 4, a 3g at 0 or 4, a 4g at 0 only, and
/// memory slice 7 is reached only by a 3g at 4, a two-slice 1g at 6 or the whole GPU.
pub fn placements(profile: &MigProfile) -> impl Iterator<Item = u32> {
    let size = size(profile);
    let compute = profile.compute_slices;
    (0..=MEMORY_SLICES - size)
        .step_by(size as usize)
        .filter(move |start| start + compute <= COMPUTE_SLICES)
}

/// The memory slices of one GPU, as instances take them.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemorySlices([bool; MEMORY_SLICES as usize]);

impl MemorySlices {
    /// Whether the slices an instance of `profile` at `start` would take are free.
    pub fn is_free(&self, profile: &MigProfile, start: u32) -> bool {
        self.run_is_free(start, size(profile))
    }

    /// Takes the slices of an instance of `profile` at `start`.
    pub fn take(&mut self, profile: &MigProfile, start: u32) {
        self.take_run(start, size(profile));
    }

    /// Whether the `count` slices from `start` are all free, and all on the GPU.
    pub fn run_is_free(&self, start: u32, count: u32) -> bool {
        (start..start + count).all(|s| self.0.get(s as usize) == Some(&false))
    }

    /// Takes the `count` slices from `start`; those past the GPU's last are ignored.
    pub fn take_run(&mut self, start: u32, count: u32) {
        for slice in start..start + count {
            if let Some(taken) = self.0.get_mut(slice as usize) {
                *taken = true;
            }
        }
    }
}
