//! Faults declared on a pool (`spec.faults`) or on a node (annotation
//! [`fakegpu_model::names::annotation::GPU_FAULTS`], the same list as JSON), and what they put
//! on each GPU ([`GpuFaults`], as the topology document records it).

use fakegpu_model::faults::GpuFaults;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

/// A fault on some GPUs of each node it applies to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct GpuFault {
    /// Indices of the GPUs it is on (`nvidia0` is 0); empty: every GPU of the node. Indices
    /// beyond the node's GPUs are ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[validate(length(max = 64))]
    pub gpus: Vec<u32>,
    /// An XID error the GPUs raise (e.g. 79: fallen off the bus, 48: double-bit ECC, 13: an
    /// application's fault). Any XID but the application ones (13, 31, 43, 45, 68, 109) takes
    /// the GPU out of service, as NVIDIA's device plugin does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 1000))]
    pub xid: Option<u32>,
    /// How often the XID recurs, per minute (NVML's XID events, `DCGM_EXP_XID_ERRORS_COUNT`);
    /// unset: it is raised once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 600))]
    pub xid_per_minute: Option<u32>,
    /// Correctable (single-bit) ECC errors since the driver loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(max = 1_000_000_000))]
    pub ecc_correctable: Option<u64>,
    /// Uncorrectable (double-bit) ECC errors since the driver loaded; any takes the GPU out of
    /// service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(max = 1_000_000_000))]
    pub ecc_uncorrectable: Option<u64>,
    /// The GPU is thermally throttled: it runs at 90 C with its SM clock halved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thermal_throttling: bool,
}

impl GpuFault {
    fn applies_to(&self, gpu: u32) -> bool {
        self.gpus.is_empty() || self.gpus.contains(&gpu)
    }
}

/// What `declared` (in order: a later declaration's values win) puts on GPU `gpu`.
pub fn on_gpu<'a>(gpu: u32, declared: impl IntoIterator<Item = &'a GpuFault>) -> GpuFaults {
    declared
        .into_iter()
        .filter(|fault| fault.applies_to(gpu))
        .fold(GpuFaults::default(), |mut faults, fault| {
            if let Some(xid) = fault.xid {
                faults.xid = Some(xid);
                faults.xid_per_minute = fault.xid_per_minute.unwrap_or(0);
            }
            faults.ecc_correctable = fault.ecc_correctable.unwrap_or(faults.ecc_correctable);
            faults.ecc_uncorrectable = fault.ecc_uncorrectable.unwrap_or(faults.ecc_uncorrectable);
            faults.thermal_throttling |= fault.thermal_throttling;
            faults
        })
}

/// The fields a [`GpuFault`] has, as JSON spells them.
const FIELDS: [&str; 6] = [
    "gpus",
    "xid",
    "xidPerMinute",
    "eccCorrectable",
    "eccUncorrectable",
    "thermalThrottling",
];

/// The faults a node annotation declares: a JSON list of [`GpuFault`]s, each within the bounds
/// the pool field has. An unknown field is an error, not ignored: `gpu` for `gpus` would
/// otherwise put the fault on every GPU.
pub fn parse_annotation(value: &str) -> Result<Vec<GpuFault>, String> {
    let entries: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(value).map_err(|e| e.to_string())?;
    if let Some(unknown) = entries
        .iter()
        .flat_map(|entry| entry.keys())
        .find(|key| !FIELDS.contains(&key.as_str()))
    {
        return Err(format!(
            "unknown field {unknown:?} (known: {})",
            FIELDS.join(", ")
        ));
    }
    let faults: Vec<GpuFault> = entries
        .into_iter()
        .map(|entry| serde_json::from_value(serde_json::Value::Object(entry)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for fault in &faults {
        fault
            .validate()
            .map_err(|e| e.to_string().replace('\n', "; "))?;
    }
    Ok(faults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_fold_per_gpu_and_later_ones_win() {
        let declared = parse_annotation(
            r#"[{"xid": 13}, {"gpus": [1], "xid": 48, "eccUncorrectable": 2},
                {"gpus": [2], "thermalThrottling": true, "eccCorrectable": 7}]"#,
        )
        .expect("valid");
        let zero = on_gpu(0, &declared);
        assert_eq!(zero.xid, Some(13));
        assert!(!zero.out_of_service(), "13 is an application's XID");
        let one = on_gpu(1, &declared);
        assert_eq!(one.xid_period(), None);
        assert_eq!((one.xid, one.ecc_uncorrectable), (Some(48), 2));
        assert!(one.out_of_service());
        assert_eq!(one.describe(), "XID 48, 2 uncorrectable ECC errors");
        let two = on_gpu(2, &declared);
        assert!(two.thermal_throttling && !two.out_of_service());
        assert!(on_gpu(3, &[]).is_empty());
        assert_eq!(zero.reported_xid(true), Some(13));
        let hot = GpuFaults {
            thermal_throttling: true,
            ..GpuFaults::default()
        };
        assert_eq!(hot.reported_xid(true), None);
        assert_eq!(on_gpu(3, &[]).reported_xid(false), Some(79));
        let ecc = GpuFaults {
            ecc_uncorrectable: 1,
            ..GpuFaults::default()
        };
        assert_eq!(ecc.reported_xid(false), Some(48));
    }

    #[test]
    fn a_bad_annotation_says_why() {
        assert!(parse_annotation("xid=79").is_err());
        assert!(
            parse_annotation(r#"[{"xid": 0}]"#)
                .expect_err("out of range")
                .contains("xid")
        );
        assert!(
            parse_annotation(r#"[{"gpu": [1], "xid": 79}]"#)
                .expect_err("a typo")
                .contains("\"gpu\"")
        );
    }

    #[test]
    fn a_recurring_xid_has_its_period() {
        let declared =
            parse_annotation(r#"[{"xid": 79, "xidPerMinute": 6}, {"gpus": [1], "xid": 13}]"#)
                .expect("valid");
        let zero = on_gpu(0, &declared);
        assert_eq!(zero.xid_period(), Some(std::time::Duration::from_secs(10)));
        assert_eq!(zero.describe(), "XID 79 (6 a minute)");
        // A later XID without a rate is raised once.
        assert_eq!(on_gpu(1, &declared).xid_period(), None);
        assert!(parse_annotation(r#"[{"xid": 79, "xidPerMinute": 0}]"#).is_err());
    }
}
