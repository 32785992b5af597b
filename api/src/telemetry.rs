//! What a simulated GPU's sensors and counters read, from how busy it is: one model for the
//! exporter's DCGM fields and for nvidia-smi, so that the same GPU shows the same temperature,
//! power and clocks on a dashboard and in a pod's `nvidia-smi`.
//!
//! Everything follows the GPU's utilization (what the exporter draws for the pods holding it):
//! idle, a GPU sits at its base clock, 30 C and a tenth of its power limit; at full load it
//! boosts and reaches 75 C and its limit. Errors (XID, remapped rows, PCIe replays) read zero
//! while the GPU is healthy.

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
    /// two fifths of the GPU's.
    pub fn memory_utilization(&self) -> u32 {
        u32::from(self.utilization.min(100)) * 2 / 5
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

/// The utilization of a GPU or MIG instance for a reader without the exporter's draws (the
/// NVML library reads only the document): each pod holding it at the middle of its range.
pub fn settled_utilization(status: &crate::topology::GpuStatus) -> u8 {
    let sum: u32 = status
        .pod_gpu_usage_status
        .values()
        .map(|usage| {
            let range = &usage.utilization;
            (u32::from(range.min) + u32::from(range.max)) / 2
        })
        .sum();
    u8::try_from(sum.min(100)).unwrap_or(100)
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
        let hot = Load {
            thermal_throttling: true,
            ..busy
        };
        assert_eq!((hot.gpu_temperature(), hot.sm_clock()), (90, 990));
    }

    #[test]
    fn without_draws_each_pod_sits_at_the_middle_of_its_range() {
        use crate::topology::{GpuStatus, PodGpuUsage, UtilizationBounds};
        let pod = |min, max| PodGpuUsage {
            utilization: UtilizationBounds { min, max },
            fb_used: 0,
            use_knative_utilization: false,
        };
        let mut status = GpuStatus::default();
        assert_eq!(settled_utilization(&status), 0);
        status.pod_gpu_usage_status.insert("a".into(), pod(20, 40));
        status.pod_gpu_usage_status.insert("b".into(), pod(10, 10));
        assert_eq!(settled_utilization(&status), 40);
        // Shares that add up past the whole GPU read as a full one.
        status
            .pod_gpu_usage_status
            .insert("c".into(), pod(100, 100));
        assert_eq!(settled_utilization(&status), 100);
    }

    #[test]
    fn a_partitioned_gpu_is_as_busy_as_its_instances_by_memory() {
        // A busy half and an idle half.
        assert_eq!(partitioned_utilization([(80, 40), (0, 40)], 80), 40);
        assert_eq!(partitioned_utilization([], 80), 0);
        assert_eq!(partitioned_utilization([(100, 80)], 0), 100);
    }
}
