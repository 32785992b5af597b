//! The DCGM fields the exporter serves: dcgm-exporter's default counters, in the order, with
//! the types and HELP texts of its `default-counters.csv` (4.8), then its ECC counters, and
//! what each reads of a sample. Readings of the device (clocks, temperatures, power, PCIe) come from
//! [`fakegpu_model::telemetry`], the model nvidia-smi shows too.

use fakegpu_model::{names::dcgm, telemetry::Load};

use self::{
    Kind::{Counter, Gauge},
    Scope::{Every, WholeGpus},
};
use crate::render::GpuSample;

/// A Prometheus metric type, as dcgm-exporter declares its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gauge => "gauge",
            Self::Counter => "counter",
        }
    }
}

/// Which samples carry a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Whole GPUs and MIG instances; an instance reads its GPU's sensors (dcgm-exporter
    /// reports the device's clocks, temperatures and power on each instance of a MIG GPU).
    Every,
    /// Whole GPUs only: DCGM has no per-instance utilization (dcgm-exporter issue 50).
    WholeGpus,
}

#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub scope: Scope,
    pub value: fn(&GpuSample) -> f64,
    /// A label of this field's own (after the sample's) and its value for a sample, if any.
    pub label: Option<(&'static str, LabelValue)>,
}

/// The value of a field's own label for a sample; `None`: the series goes without it.
pub type LabelValue = fn(&GpuSample) -> Option<String>;

/// The load of the sample itself (a MIG instance's own, not its GPU's).
fn own(sample: &GpuSample) -> Load {
    Load {
        utilization: sample.utilization as u8,
        ..sample.device
    }
}

const fn field(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    scope: Scope,
    value: fn(&GpuSample) -> f64,
) -> Field {
    Field {
        name,
        kind,
        help,
        scope,
        value,
        label: None,
    }
}

/// Read when nothing simulated fails: no retries, no remapped rows, no vGPU, no video engines
/// busy, no NVLink traffic counted.
fn zero(_: &GpuSample) -> f64 {
    0.0
}

/// dcgm-exporter's default counters, then the ECC and XID-window counters its file lists
/// commented out, which alerts on GPU errors enable and fault injection fills.
pub const FIELDS: [Field; 30] = [
    field(
        dcgm::SM_CLOCK,
        Gauge,
        "SM clock frequency (in MHz).",
        Every,
        |s| f64::from(s.device.sm_clock()),
    ),
    field(
        dcgm::MEM_CLOCK,
        Gauge,
        "Memory clock frequency (in MHz).",
        Every,
        |s| f64::from(s.device.memory_clock()),
    ),
    field(
        dcgm::MEMORY_TEMP,
        Gauge,
        "Memory temperature (in C).",
        Every,
        |s| f64::from(s.device.memory_temperature()),
    ),
    field(
        dcgm::GPU_TEMP,
        Gauge,
        "GPU temperature (in C).",
        Every,
        |s| f64::from(s.device.gpu_temperature()),
    ),
    field(dcgm::POWER_USAGE, Gauge, "Power draw (in W).", Every, |s| {
        s.device.power_draw().unwrap_or(0.0)
    }),
    field(
        dcgm::TOTAL_ENERGY_CONSUMPTION,
        Counter,
        "Total energy consumption since boot (in mJ).",
        Every,
        |s| s.energy_mj.round(),
    ),
    field(
        dcgm::PCIE_REPLAY_COUNTER,
        Counter,
        "Total number of PCIe retries.",
        Every,
        zero,
    ),
    field(
        dcgm::GPU_UTIL,
        Gauge,
        "GPU utilization (in %).",
        WholeGpus,
        |s| s.utilization,
    ),
    field(
        dcgm::MEM_COPY_UTIL,
        Gauge,
        "Memory utilization (in %).",
        WholeGpus,
        |s| f64::from(own(s).memory_utilization()),
    ),
    field(
        dcgm::ENC_UTIL,
        Gauge,
        "Encoder utilization (in %).",
        WholeGpus,
        zero,
    ),
    field(
        dcgm::DEC_UTIL,
        Gauge,
        "Decoder utilization (in %).",
        WholeGpus,
        zero,
    ),
    field(
        dcgm::XID_ERRORS,
        Gauge,
        "Value of the last XID error encountered.",
        Every,
        |s| f64::from(s.last_xid),
    ),
    field(
        dcgm::FB_FREE,
        Gauge,
        "Framebuffer memory free (in MiB).",
        Every,
        |s| s.fb_free,
    ),
    field(
        dcgm::FB_USED,
        Gauge,
        "Framebuffer memory used (in MiB).",
        Every,
        |s| s.fb_used,
    ),
    field(
        dcgm::FB_RESERVED,
        Gauge,
        "Framebuffer memory reserved (in MiB).",
        Every,
        zero,
    ),
    field(
        dcgm::NVLINK_BANDWIDTH_TOTAL,
        Gauge,
        "Total number of NVLink bandwidth counters for all lanes.",
        Every,
        zero,
    ),
    field(
        dcgm::VGPU_LICENSE_STATUS,
        Gauge,
        "vGPU License status",
        Every,
        zero,
    ),
    field(
        dcgm::UNCORRECTABLE_REMAPPED_ROWS,
        Counter,
        "Number of remapped rows for uncorrectable errors",
        Every,
        zero,
    ),
    field(
        dcgm::CORRECTABLE_REMAPPED_ROWS,
        Counter,
        "Number of remapped rows for correctable errors",
        Every,
        zero,
    ),
    field(
        dcgm::ROW_REMAP_FAILURE,
        Gauge,
        "Whether remapping of rows has failed",
        Every,
        zero,
    ),
    field(
        dcgm::GR_ENGINE_ACTIVE,
        Gauge,
        "Ratio of time the graphics engine is active.",
        Every,
        |s| s.utilization / 100.0,
    ),
    field(
        dcgm::PIPE_TENSOR_ACTIVE,
        Gauge,
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        Every,
        |s| own(s).tensor_active(),
    ),
    field(
        dcgm::DRAM_ACTIVE,
        Gauge,
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        Every,
        |s| own(s).dram_active(),
    ),
    field(
        dcgm::PCIE_TX_BYTES,
        Gauge,
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        Every,
        |s| own(s).pcie_tx_rate(),
    ),
    field(
        dcgm::PCIE_RX_BYTES,
        Gauge,
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        Every,
        |s| own(s).pcie_rx_rate(),
    ),
    field(
        dcgm::ECC_SBE_VOL_TOTAL,
        Counter,
        "Total number of single-bit volatile ECC errors.",
        Every,
        |s| s.ecc_correctable as f64,
    ),
    field(
        dcgm::ECC_DBE_VOL_TOTAL,
        Counter,
        "Total number of double-bit volatile ECC errors.",
        Every,
        |s| s.ecc_uncorrectable as f64,
    ),
    field(
        dcgm::ECC_SBE_AGG_TOTAL,
        Counter,
        "Total number of single-bit persistent ECC errors.",
        Every,
        |s| s.ecc_correctable as f64,
    ),
    field(
        dcgm::ECC_DBE_AGG_TOTAL,
        Counter,
        "Total number of double-bit persistent ECC errors.",
        Every,
        |s| s.ecc_uncorrectable as f64,
    ),
    // Per GPU and XID (label `xid`) in the window; a GPU without one has one 0 series without
    // the label, as dcgm-exporter's.
    Field {
        label: Some(("xid", |s| {
            (s.xid_window > 0).then(|| s.last_xid.to_string())
        })),
        ..field(
            dcgm::EXP_XID_ERRORS_COUNT,
            Gauge,
            "XID errors observed during the configured time window.",
            Every,
            |s| s.xid_window as f64,
        )
    },
];
