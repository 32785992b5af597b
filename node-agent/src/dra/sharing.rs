//! How a claim's GPUs are shared, from its opaque configuration for driver `gpu.nvidia.com`:
//!
//! - NVIDIA's DRA driver: `GpuConfig` (or `MigDeviceConfig`) of `resource.nvidia.com/v1beta1`,
//!   `sharing.strategy` `TimeSlicing` (`timeSlicingConfig.interval`: `Default`, `Short`,
//!   `Medium`, `Long`) or `MPS` (`mpsConfig.defaultActiveThreadPercentage`, 0-100);
//! - the reference's plugin: dra-example-driver's `GpuConfig` of
//!   `gpu.resource.example.com/v1alpha1`, `TimeSlicing` or `SpacePartitioning`
//!   (`spacePartitioningConfig.partitionCount`, at least 1).
//!
//! Nothing is time-sliced or partitioned and no MPS daemon runs: the choice reaches the
//! container as environment, as the reference shows it (`GPU_DEVICE_<D>_SHARING_STRATEGY`,
//! `_TIMESLICE_INTERVAL`, `_PARTITION_COUNT`), and for MPS as the variable an MPS client reads
//! (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`). A device without configuration is time-sliced at the
//! default interval, as the reference prepends for it. A configuration that cannot be had fails
//! the claim's prepare with the reason, so the pod's events name it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// NVIDIA's DRA driver's configuration API.
pub const NVIDIA_API_VERSION: &str = "resource.nvidia.com/v1beta1";
/// The reference's (dra-example-driver's) configuration API.
pub const EXAMPLE_API_VERSION: &str = "gpu.resource.example.com/v1alpha1";

const INTERVALS: [&str; 4] = ["Default", "Short", "Medium", "Long"];

/// What a prepared device's sharing is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "strategy")]
pub enum Sharing {
    TimeSlicing {
        interval: String,
    },
    #[serde(rename = "MPS")]
    Mps {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        active_thread_percentage: Option<u8>,
    },
    SpacePartitioning {
        partition_count: u32,
    },
}

impl Default for Sharing {
    fn default() -> Self {
        Self::TimeSlicing {
            interval: "Default".into(),
        }
    }
}

impl Sharing {
    /// The environment of device variable `prefix` (`GPU_DEVICE_gpu_0`) in the container.
    pub fn env(&self, prefix: &str) -> Vec<String> {
        match self {
            Self::TimeSlicing { interval } => vec![
                format!("{prefix}_SHARING_STRATEGY=TimeSlicing"),
                format!("{prefix}_TIMESLICE_INTERVAL={interval}"),
            ],
            Self::Mps {
                active_thread_percentage,
            } => std::iter::once(format!("{prefix}_SHARING_STRATEGY=MPS"))
                .chain(
                    active_thread_percentage
                        .map(|p| format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={p}")),
                )
                .collect(),
            Self::SpacePartitioning { partition_count } => vec![
                format!("{prefix}_SHARING_STRATEGY=SpacePartitioning"),
                format!("{prefix}_PARTITION_COUNT={partition_count}"),
            ],
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Config {
    api_version: String,
    kind: String,
    #[serde(default)]
    sharing: Option<SharingConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SharingConfig {
    strategy: String,
    #[serde(default)]
    time_slicing_config: Option<TimeSlicingConfig>,
    #[serde(default)]
    mps_config: Option<MpsConfig>,
    #[serde(default)]
    space_partitioning_config: Option<SpacePartitioningConfig>,
}

#[derive(Deserialize)]
struct TimeSlicingConfig {
    #[serde(default)]
    interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MpsConfig {
    #[serde(default)]
    default_active_thread_percentage: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpacePartitioningConfig {
    partition_count: i64,
}

/// The sharing one opaque configuration asks for; `None` when it says nothing of sharing.
pub fn parse(parameters: &Value) -> Result<Option<Sharing>, String> {
    let config: Config = serde_json::from_value(parameters.clone())
        .map_err(|e| format!("opaque configuration for gpu.nvidia.com: {e}"))?;
    let nvidia = config.api_version == NVIDIA_API_VERSION;
    let example = config.api_version == EXAMPLE_API_VERSION;
    let kind_known = match config.kind.as_str() {
        "GpuConfig" => nvidia || example,
        "MigDeviceConfig" => nvidia,
        _ => false,
    };
    if !kind_known {
        return Err(format!(
            "opaque configuration {}/{} is not one gpu.nvidia.com takes (GpuConfig or MigDeviceConfig of {NVIDIA_API_VERSION}, GpuConfig of {EXAMPLE_API_VERSION})",
            config.api_version, config.kind
        ));
    }
    let Some(sharing) = config.sharing else {
        return Ok(None);
    };
    let sharing = match sharing.strategy.as_str() {
        "TimeSlicing" => {
            let interval = sharing
                .time_slicing_config
                .and_then(|c| c.interval)
                .unwrap_or_else(|| "Default".into());
            if !INTERVALS.contains(&interval.as_str()) {
                return Err(format!(
                    "sharing.timeSlicingConfig.interval {interval:?} is not one of {INTERVALS:?}"
                ));
            }
            Sharing::TimeSlicing { interval }
        }
        "MPS" if nvidia => {
            let percentage = sharing
                .mps_config
                .and_then(|c| c.default_active_thread_percentage)
                .map(|p| {
                    u8::try_from(p).ok().filter(|p| *p <= 100).ok_or_else(|| {
                        format!(
                            "sharing.mpsConfig.defaultActiveThreadPercentage {p} is not within 0-100"
                        )
                    })
                })
                .transpose()?;
            Sharing::Mps {
                active_thread_percentage: percentage,
            }
        }
        "SpacePartitioning" if example => {
            let count = sharing
                .space_partitioning_config
                .map(|c| c.partition_count)
                .ok_or("sharing.strategy SpacePartitioning needs spacePartitioningConfig")?;
            let partition_count = u32::try_from(count).ok().filter(|c| *c >= 1).ok_or_else(
                || {
                    format!(
                        "sharing.spacePartitioningConfig.partitionCount {count} is not at least 1"
                    )
                },
            )?;
            Sharing::SpacePartitioning { partition_count }
        }
        other => {
            let known = if nvidia {
                "TimeSlicing or MPS"
            } else {
                "TimeSlicing or SpacePartitioning"
            };
            return Err(format!(
                "sharing.strategy {other:?} of {} is not {known}",
                config.api_version
            ));
        }
    };
    Ok(Some(sharing))
}

/// The sharing of a device allocated for a request: the last of `configs` (the request's
/// opaque configurations in order, the class's before the claim's) that says anything of
/// sharing, else the default.
pub fn for_request<'a>(configs: impl Iterator<Item = &'a Value>) -> Result<Sharing, String> {
    let mut chosen = None;
    for parameters in configs {
        if let Some(sharing) = parse(parameters)? {
            chosen = Some(sharing);
        }
    }
    Ok(chosen.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nvidia(sharing: Value) -> Value {
        json!({"apiVersion": NVIDIA_API_VERSION, "kind": "GpuConfig", "sharing": sharing})
    }

    fn example(sharing: Value) -> Value {
        json!({"apiVersion": EXAMPLE_API_VERSION, "kind": "GpuConfig", "sharing": sharing})
    }

    #[test]
    fn reads_nvidia_s_and_the_reference_s_strategies() {
        let time =
            nvidia(json!({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}));
        assert_eq!(
            for_request([&time].into_iter()),
            Ok(Sharing::TimeSlicing {
                interval: "Long".into()
            })
        );
        let mps =
            nvidia(json!({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40}}));
        let sharing = for_request([&mps].into_iter()).expect("MPS");
        assert_eq!(
            sharing.env("GPU_DEVICE_gpu_0"),
            [
                "GPU_DEVICE_gpu_0_SHARING_STRATEGY=MPS",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40"
            ]
        );
        let space = example(
            json!({"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 3}}),
        );
        assert_eq!(
            for_request([&space].into_iter())
                .expect("space")
                .env("GPU_DEVICE_gpu_1"),
            [
                "GPU_DEVICE_gpu_1_SHARING_STRATEGY=SpacePartitioning",
                "GPU_DEVICE_gpu_1_PARTITION_COUNT=3"
            ]
        );
    }

    #[test]
    fn no_configuration_is_default_time_slicing_and_the_last_one_wins() {
        assert_eq!(
            for_request(std::iter::empty())
                .expect("default")
                .env("GPU_DEVICE_gpu_0"),
            [
                "GPU_DEVICE_gpu_0_SHARING_STRATEGY=TimeSlicing",
                "GPU_DEVICE_gpu_0_TIMESLICE_INTERVAL=Default"
            ]
        );
        let class = nvidia(json!({"strategy": "TimeSlicing"}));
        let claim = nvidia(json!({"strategy": "MPS"}));
        let silent = json!({"apiVersion": NVIDIA_API_VERSION, "kind": "GpuConfig"});
        assert_eq!(
            for_request([&class, &claim, &silent].into_iter()),
            Ok(Sharing::Mps {
                active_thread_percentage: None
            })
        );
    }

    #[test]
    fn refuses_what_neither_driver_takes_naming_the_field() {
        let error = |v: Value| for_request([&v].into_iter()).expect_err("refused");
        assert!(
            error(nvidia(
                json!({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}})
            ))
            .contains("timeSlicingConfig.interval")
        );
        assert!(
            error(nvidia(json!({"strategy": "SpacePartitioning"}))).contains("TimeSlicing or MPS")
        );
        assert!(
            error(example(json!({"strategy": "MPS"}))).contains("TimeSlicing or SpacePartitioning")
        );
        assert!(error(example(json!({"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 0}}))).contains("partitionCount"));
        assert!(
            error(nvidia(
                json!({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}})
            ))
            .contains("defaultActiveThreadPercentage")
        );
        assert!(
            error(json!({"apiVersion": "v1", "kind": "ConfigMap"}))
                .contains("is not one gpu.nvidia.com takes")
        );
        assert!(error(json!({"kind": "GpuConfig"})).contains("apiVersion"));
    }
}
