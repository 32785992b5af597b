//! What a simulated GPU's sensors and counters read, from how busy it is: one model for the
//! exporter's DCGM fields and for nvidia-smi, so that the same GPU shows the same temperature,
//! power and clocks on a dashboard and in a pod's `nvidia-smi`.
//!
//! Everything follows the GPU's utilization (what the exporter draws for the pods holding it):
//! idle, a GPU sits at its base clock, 30 C and a tenth of its power limit; at full load it
//! boosts and reaches 75 C and its limit. Errors (XID, remapped rows, PCIe replays) read zero
//! while the GPU is healthy.

use crate::topology::{GpuStatus, GpuTopology, PodGpuUsage, UtilizationBounds};

/// How busy a whole GPU is, and what bounds its readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Percent, at most 100.
    pub utilization: u8,
    /// Board power limit, W; `None` when the product's is unknown.
    pub power_limit: Option<u32>,
    /// An injected thermal fault: the GPU runs hot and clocks down.
    pub thermal_throttling: bool,
}

/// SM clock at rest, MHz.
pub const SM_CLOCK_IDLE: u32 = 345;
/// SM clock under load (the boost clock), MHz; nvidia-smi's `clocks.max.sm`.
pub const SM_CLOCK_MAX: u32 = 1980;
/// Memory clock, MHz: datacenter GPUs keep it at its maximum in P0, busy or not.
pub const MEMORY_CLOCK: u32 = 2619;
/// Temperature of a thermally throttled GPU, C: where datacenter GPUs slow down.
pub const THROTTLED_TEMPERATURE: u32 = 90;
/// PCIe traffic of a fully busy GPU, bytes per second, host to device (a tenth back).
const PCIE_RX_AT_FULL_LOAD: f64 = 2.0e9;

impl Load {
    fn busy(&self) -> f64 {
        f64::from(self.utilization.min(100)) / 100.0
    }

    /// Board power, W: a tenth of the limit idle, rising with utilization to the limit.
    pub fn power_draw(&self) -> Option<f64> {
        self.power_limit.map(|limit| {
            let idle = f64::from(limit) * 0.1;
            idle + (f64::from(limit) - idle) * self.busy()
        })
    }

    /// Board power as the driver reports it: whole milliwatts, NVML's unit, from which
    /// nvidia-smi prints its watts.
    pub fn power_draw_milliwatts(&self) -> Option<u32> {
        self.power_draw()
            .map(|watts| (watts * 1000.0).round() as u32)
    }

    /// GPU temperature, C: 30 idle, 75 at full load, 90 when thermally throttled.
    pub fn gpu_temperature(&self) -> u32 {
        if self.thermal_throttling {
            return THROTTLED_TEMPERATURE;
        }
        30 + u32::from(self.utilization.min(100)) * 45 / 100
    }

    /// Memory (HBM) temperature, C: a few degrees above the GPU's.
    pub fn memory_temperature(&self) -> u32 {
        self.gpu_temperature() + 3
    }

    /// SM clock, MHz: base idle, boost under load, half the boost at most when thermally
    /// throttled.
    pub fn sm_clock(&self) -> u32 {
        match (self.utilization > 0, self.thermal_throttling) {
            (false, _) => SM_CLOCK_IDLE,
            (true, false) => SM_CLOCK_MAX,
            (true, true) => SM_CLOCK_MAX / 2,
        }
    }

    /// Memory clock, MHz.
    pub fn memory_clock(&self) -> u32 {
        MEMORY_CLOCK
    }

    /// Memory-controller activity, percent (`utilization.memory`, `DCGM_FI_DEV_MEM_COPY_UTIL`):
    /// see [`memory_activity`].
    pub fn memory_utilization(&self) -> u32 {
        memory_activity(self.utilization)
    }

    /// Share of cycles the tensor pipes are active: half the time the GPU is busy (training
    /// kernels interleave tensor work with the rest).
    pub fn tensor_active(&self) -> f64 {
        self.busy() / 2.0
    }

    /// Share of cycles the memory interface is busy.
    pub fn dram_active(&self) -> f64 {
        f64::from(self.memory_utilization()) / 100.0
    }

    /// PCIe bytes per second received from the host.
    pub fn pcie_rx_rate(&self) -> f64 {
        PCIE_RX_AT_FULL_LOAD * self.busy()
    }

    /// PCIe bytes per second sent to the host.
    pub fn pcie_tx_rate(&self) -> f64 {
        self.pcie_rx_rate() / 10.0
    }
}

/// Memory-controller activity of work keeping the SMs `utilization` percent busy: two fifths
/// of it (a GPU's, or one process's share of it).
pub fn memory_activity(utilization: u8) -> u32 {
    u32::from(utilization.min(100)) * 2 / 5
}

/// How long a drawn utilization holds by default, seconds: a dashboard sees values that move,
/// but not on every scrape.
pub const DEFAULT_DRAW_INTERVAL_SECONDS: u64 = 10;

/// The draw interval of a process that draws for itself (the NVML library, nvidia-smi):
/// [`crate::names::exporter::DRAW_INTERVAL_ENV`] in seconds as the exporter reads it, else
/// the default.
pub fn draw_interval_from_env() -> std::time::Duration {
    let seconds = std::env::var(crate::names::exporter::DRAW_INTERVAL_ENV)
        .ok()
        .and_then(|seconds| seconds.trim().parse().ok())
        .unwrap_or(DEFAULT_DRAW_INTERVAL_SECONDS);
    std::time::Duration::from_secs(seconds)
}

/// The draw period `now` falls in: the time since the Unix epoch in whole `interval`s. Every
/// process on every machine (with its clock set) is in the same period at the same moment.
pub fn draw_period(now: std::time::SystemTime, interval: std::time::Duration) -> u64 {
    let since_epoch = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    since_epoch.as_secs() / interval.as_secs().max(1)
}

/// Pod `pod`'s utilization of `target` (a GPU's or MIG instance's UUID) in draw period
/// `period`: a value of `range` (both ends inclusive; the reference never reaches the maximum)
/// that depends on nothing else, so that the exporter's metrics, fakegpu's nvidia-smi and the
/// NVML library, each drawing for itself, agree, and a new period draws anew.
pub fn drawn_utilization(pod: &str, target: &str, range: UtilizationBounds, period: u64) -> u8 {
    let (min, max) = (range.min.min(range.max), range.max.max(range.min));
    let span = u64::from(max - min) + 1;
    // FNV-1a over the names (stable across builds, unlike std's hasher), then SplitMix64's
    // finalizer over it and the period, so neighbouring periods draw unrelated values.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in pod.bytes().chain([0xff]).chain(target.bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut z = hash ^ period.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    min + u8::try_from(z % span).unwrap_or(0)
}

/// The utilization of a GPU or MIG instance with `status`'s pods on it: the sum of `value` of
/// each pod (its UID and usage), at most 100.
pub fn total(status: &GpuStatus, value: impl Fn(&str, &PodGpuUsage) -> u8) -> u8 {
    let sum: u32 = status
        .pod_gpu_usage_status
        .iter()
        .map(|(pod, usage)| u32::from(value(pod, usage)))
        .sum();
    u8::try_from(sum.min(100)).unwrap_or(100)
}

/// [`total`] of `target` (a GPU's or MIG instance's UUID) with each pod's draw of period
/// `period`. The exporter's Knative request rates are the exporter's alone; a reader of the
/// document draws for those pods too.
pub fn drawn_total(status: &GpuStatus, target: &str, period: u64) -> u8 {
    total(status, |pod, usage| {
        drawn_utilization(pod, target, usage.utilization, period)
    })
}

/// The utilization of `gpu` (whose memory is `memory` MiB), each GPU or MIG instance's from
/// `of(target, status)` (`target`: its UUID): a whole GPU's own; a partitioned GPU's its
/// instances' together (see [`partitioned_utilization`]), which its sensors follow.
pub fn gpu_utilization(
    gpu: &GpuTopology,
    memory: u64,
    mut of: impl FnMut(&str, &GpuStatus) -> u8,
) -> u8 {
    if gpu.mig_devices.is_empty() {
        return of(&gpu.id, &gpu.status);
    }
    let instances: Vec<(u8, u64)> = gpu
        .mig_devices
        .iter()
        .map(|mig| (of(&mig.uuid, &mig.status), mig.memory))
        .collect();
    partitioned_utilization(instances, memory)
}

/// The load of a partitioned GPU from its instances' utilization and framebuffer: each
/// instance weighs its share of the memory.
pub fn partitioned_utilization(instances: impl IntoIterator<Item = (u8, u64)>, memory: u64) -> u8 {
    let weighted: u64 = instances
        .into_iter()
        .map(|(utilization, instance_memory)| u64::from(utilization.min(100)) * instance_memory)
        .sum();
    u8::try_from(weighted / memory.max(1))
        .unwrap_or(100)
        .min(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_follow_the_load_within_the_product_s_bounds() {
        let idle = Load {
            utilization: 0,
            power_limit: Some(700),
            thermal_throttling: false,
        };
        let busy = Load {
            utilization: 100,
            ..idle
        };
        assert_eq!(idle.power_draw(), Some(70.0));
        assert_eq!(busy.power_draw(), Some(700.0));
        assert_eq!((idle.gpu_temperature(), busy.gpu_temperature()), (30, 75));
        assert!(busy.memory_temperature() > busy.gpu_temperature());
        assert_eq!((idle.sm_clock(), busy.sm_clock()), (345, 1980));
        assert_eq!(busy.memory_utilization(), 40);
        assert_eq!(busy.dram_active(), 0.4);
        assert_eq!(idle.pcie_rx_rate(), 0.0);
        assert!(busy.pcie_tx_rate() < busy.pcie_rx_rate());
        let unknown = Load {
            power_limit: None,
            ..busy
        };
        assert_eq!(unknown.power_draw(), None);
        assert_eq!(unknown.power_draw_milliwatts(), None);
        let hot = Load {
            thermal_throttling: true,
            ..busy
        };
        assert_eq!((hot.gpu_temperature(), hot.sm_clock()), (90, 990));
    }

    #[test]
    fn draws_cover_the_range_and_hold_for_the_period() {
        let range = |min, max| UtilizationBounds { min, max };
        let seen: std::collections::BTreeSet<u8> = (0..2000)
            .map(|i| drawn_utilization(&format!("p{i}"), "GPU-0", range(10, 12), 7))
            .collect();
        assert_eq!(seen, [10, 11, 12].into());
        // The same pod, GPU and period: the same value, whoever asks.
        let once = drawn_utilization("p", "GPU-0", range(0, 100), 7);
        assert_eq!(drawn_utilization("p", "GPU-0", range(0, 100), 7), once);
        // Other periods draw anew: not all the same.
        let later: std::collections::BTreeSet<u8> = (8..40)
            .map(|period| drawn_utilization("p", "GPU-0", range(0, 100), period))
            .collect();
        assert!(later.len() > 10, "{later:?}");
        // Reversed bounds read as the range they span; a constant is that constant.
        assert!((20..=40).contains(&drawn_utilization("p", "g", range(40, 20), 1)));
        assert_eq!(drawn_utilization("p", "g", range(42, 42), 1), 42);
    }

    #[test]
    fn periods_are_whole_intervals_since_the_epoch() {
        use std::time::{Duration, UNIX_EPOCH};
        let ten = Duration::from_secs(10);
        assert_eq!(
            draw_period(UNIX_EPOCH + Duration::from_secs(1_234_569), ten),
            123_456
        );
        assert_eq!(
            draw_period(UNIX_EPOCH + Duration::from_secs(1_234_570), ten),
            123_457
        );
        // A zero interval reads as one second rather than dividing by zero.
        assert_eq!(
            draw_period(UNIX_EPOCH + Duration::from_secs(5), Duration::ZERO),
            5
        );
    }

    #[test]
    fn a_target_s_total_is_its_pods_draws_at_most_a_whole_gpu() {
        let pod = |min, max| PodGpuUsage {
            utilization: UtilizationBounds { min, max },
            fb_used: 0,
            use_knative_utilization: false,
        };
        let mut status = GpuStatus::default();
        assert_eq!(drawn_total(&status, "GPU-0", 3), 0);
        status.pod_gpu_usage_status.insert("a".into(), pod(20, 20));
        status.pod_gpu_usage_status.insert("b".into(), pod(10, 10));
        assert_eq!(drawn_total(&status, "GPU-0", 3), 30);
        // Shares that add up past the whole GPU read as a full one.
        status
            .pod_gpu_usage_status
            .insert("c".into(), pod(100, 100));
        assert_eq!(drawn_total(&status, "GPU-0", 3), 100);
    }

    #[test]
    fn a_partitioned_gpu_is_as_busy_as_its_instances_by_memory() {
        // A busy half and an idle half.
        assert_eq!(partitioned_utilization([(80, 40), (0, 40)], 80), 40);
        assert_eq!(partitioned_utilization([], 80), 0);
        assert_eq!(partitioned_utilization([(100, 80)], 0), 100);
    }
}
