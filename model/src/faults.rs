//! What faults put on a simulated GPU, as its topology document records them ([`GpuFaults`]),
//! and shown where a real fault shows: dcgm-exporter's XID and ECC series, nvidia-smi, NVML's
//! XID events, the device plugin's health (and so the node's allocatable), a node condition and
//! an Event. The declarations (a pool's `spec.faults`, the node annotation
//! [`crate::names::annotation::GPU_FAULTS`]) are the API's, in `fakegpu_api::faults`.

use serde::{Deserialize, Serialize};

/// XID 79, "GPU has fallen off the bus": what a GPU marked unhealthy without an XID of its own
/// reports.
pub const XID_FALLEN_OFF_THE_BUS: u32 = 79;
/// XID 48, a double-bit ECC error: what an uncorrectable ECC error without an XID reports.
pub const XID_DOUBLE_BIT_ECC: u32 = 48;

/// XIDs that an application causes and the GPU survives; NVIDIA's device plugin leaves GPUs
/// that raise them healthy (its default skip list).
pub const APPLICATION_XIDS: [u32; 6] = [13, 31, 43, 45, 68, 109];

/// The faults one GPU has, as its topology document records them; empty when healthy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GpuFaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// How often the XID recurs, per minute; 0: once.
    #[serde(default, skip_serializing_if = "is_zero_rate")]
    pub xid_per_minute: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ecc_correctable: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ecc_uncorrectable: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thermal_throttling: bool,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

fn is_zero_rate(rate: &u32) -> bool {
    *rate == 0
}

impl GpuFaults {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the GPU is out of service: an XID other than an application's, or an
    /// uncorrectable ECC error.
    pub fn out_of_service(&self) -> bool {
        self.xid.is_some_and(|xid| !APPLICATION_XIDS.contains(&xid)) || self.ecc_uncorrectable > 0
    }

    /// The XID the GPU reports (NVML's events, `DCGM_FI_DEV_XID_ERRORS`, NVIDIA's DRA taint):
    /// the injected one, else 48 for an uncorrectable ECC error, else 79 when the GPU is
    /// unhealthy (`healthy` false) for no injected reason.
    pub fn reported_xid(&self, healthy: bool) -> Option<u32> {
        self.xid
            .or((self.ecc_uncorrectable > 0).then_some(XID_DOUBLE_BIT_ECC))
            .or((!healthy).then_some(XID_FALLEN_OFF_THE_BUS))
    }

    /// How long until an injected XID recurs; `None` when it is raised once.
    pub fn xid_period(&self) -> Option<std::time::Duration> {
        (self.xid.is_some() && self.xid_per_minute > 0)
            .then(|| std::time::Duration::from_secs(60) / self.xid_per_minute)
    }

    /// A short account, for conditions and Events: `XID 48, 2 uncorrectable ECC errors`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (self.xid, self.xid_per_minute) {
            (Some(xid), 0) => parts.push(format!("XID {xid}")),
            (Some(xid), rate) => parts.push(format!("XID {xid} ({rate} a minute)")),
            (None, _) => {}
        }
        if self.ecc_uncorrectable > 0 {
            parts.push(format!(
                "{} uncorrectable ECC errors",
                self.ecc_uncorrectable
            ));
        }
        if self.ecc_correctable > 0 {
            parts.push(format!("{} correctable ECC errors", self.ecc_correctable));
        }
        if self.thermal_throttling {
            parts.push("thermal throttling".to_owned());
        }
        parts.join(", ")
    }
}
