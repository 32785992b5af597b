//! Run:ai's dynamic MIG, answered as the reference's mig-faker answers it, and made real.
//!
//! Run:ai partitions GPUs on demand by writing node annotation
//! [`RUNAI_MIG_CONFIG`](fakegpu_model::names::annotation::RUNAI_MIG_CONFIG): mig-parted's `selected`
//! list, each entry naming GPU indices, whether MIG is on, and the instances by profile and
//! memory-slice position. It then waits for label
//! [`MIG_CONFIG_STATE`](fakegpu_model::names::label::MIG_CONFIG_STATE) and reads annotation
//! [`RUNAI_MIG_MAPPING`](fakegpu_model::names::annotation::RUNAI_MIG_MAPPING): per GPU, each instance's
//! position, MIG UUID and GPU-instance profile ID (what the reference calls
//! `gpu_instance_id`: 19 for `1g.10gb`, 5 for `4g.40gb`).
//!
//! The reference only writes that answer. Here the GPUs named also take the instances asked
//! for, in place of the pool's layout for them, so everything that reads the node (resources,
//! GFD labels, slices, metrics, nvidia-smi) sees the partition, as on a real node after
//! mig-manager ran. A configuration that cannot be had changes nothing but the state label.

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use serde::{Deserialize, Serialize};

use fakegpu_model::{
    mig_slices::{MemorySlices, placements},
    names::label::{MIG_CONFIG_STATE_FAILED, MIG_CONFIG_STATE_SUCCESS},
    profiles::GpuProfile,
    topology::mig_uuid,
};

use super::{
    MigStrategy,
    mig::{MigError, MigInstance, MigPlan, check_counts, profile_named},
    resolve::ResolvedGpu,
};

/// GPU index -> its instances by placement; an empty list: MIG off, the GPU is whole.
pub type GpuLayouts = BTreeMap<u32, Vec<MigInstance>>;

/// The annotation's document; keys Run:ai writes and this does not read (`version`) are
/// ignored, as the reference ignores them.
#[derive(Deserialize)]
struct MigConfigDocument {
    #[serde(rename = "mig-configs")]
    mig_configs: SelectedConfigs,
}

#[derive(Deserialize)]
struct SelectedConfigs {
    #[serde(default)]
    selected: Vec<SelectedDevices>,
}

#[derive(Deserialize)]
struct SelectedDevices {
    #[serde(default)]
    devices: Vec<DeviceIndex>,
    #[serde(rename = "mig-enabled", default)]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: Vec<RequestedInstance>,
}

/// Run:ai writes indices as strings (`"0"`); a hand-written document may use numbers.
#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceIndex {
    Number(u32),
    Text(String),
}

#[derive(Deserialize)]
struct RequestedInstance {
    name: String,
    position: u32,
    /// Memory slices; checked against the profile's when given.
    #[serde(default)]
    size: Option<u32>,
}

/// One instance in the mapping annotation, with the reference's field names.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
struct MappedInstance {
    position: u32,
    device_uuid: String,
    gpu_instance_id: u32,
}

/// Why a configuration cannot be had; the node keeps the layout it has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MigConfigError {
    #[error("not a MIG configuration (mig-configs.selected[]): {0}")]
    Malformed(String),
    #[error("{0} does not support MIG")]
    NotCapable(String),
    #[error("device {0:?} is not a GPU index")]
    BadIndex(String),
    #[error("GPU {gpu} does not exist: the node has {count} GPUs")]
    NoSuchGpu { gpu: u32, count: u32 },
    #[error("GPU {0} is selected more than once")]
    Repeated(u32),
    #[error("GPU {0}: mig-devices are listed but mig-enabled is false")]
    DevicesWithoutMig(u32),
    #[error("GPU {gpu}: {source}")]
    Layout { gpu: u32, source: MigError },
    #[error("GPU {gpu}: {profile} takes {slices} memory slices, not size {size}")]
    WrongSize {
        gpu: u32,
        profile: &'static str,
        slices: u32,
        size: u32,
    },
    #[error("GPU {gpu}: {profile} cannot start at memory slice {position} (it can at {valid})")]
    BadPosition {
        gpu: u32,
        profile: &'static str,
        position: u32,
        valid: String,
    },
    #[error("GPU {gpu}: {profile} at memory slice {position} overlaps another instance")]
    Overlap {
        gpu: u32,
        profile: &'static str,
        position: u32,
    },
    #[error("GPU {gpu}: instances do not fit ({reason})")]
    DoesNotFit { gpu: u32, reason: String },
    #[error("the pool's MIG strategy is single; dynamic MIG needs mixed or none")]
    SingleStrategy,
}

/// The layouts `text` asks for on a node of `gpu`'s GPUs.
pub fn parse(text: &str, gpu: &ResolvedGpu) -> Result<GpuLayouts, MigConfigError> {
    let document: MigConfigDocument =
        serde_yaml::from_str(text).map_err(|e| MigConfigError::Malformed(e.to_string()))?;
    let catalog = gpu
        .catalog
        .filter(|p| p.mig_capable())
        .ok_or_else(|| MigConfigError::NotCapable(gpu.product.clone()))?;
    let mut layouts = GpuLayouts::new();
    for entry in &document.mig_configs.selected {
        for device in &entry.devices {
            let index = gpu_index(device, gpu.count)?;
            let instances = if entry.mig_enabled {
                instances(index, &entry.mig_devices, catalog, &gpu.product)?
            } else if entry.mig_devices.is_empty() {
                Vec::new()
            } else {
                return Err(MigConfigError::DevicesWithoutMig(index));
            };
            if layouts.insert(index, instances).is_some() {
                return Err(MigConfigError::Repeated(index));
            }
        }
    }
    Ok(layouts)
}

fn gpu_index(device: &DeviceIndex, count: u32) -> Result<u32, MigConfigError> {
    let index = match device {
        DeviceIndex::Number(n) => *n,
        DeviceIndex::Text(text) => text
            .trim()
            .parse()
            .map_err(|_| MigConfigError::BadIndex(text.clone()))?,
    };
    if index >= count {
        return Err(MigConfigError::NoSuchGpu { gpu: index, count });
    }
    Ok(index)
}

/// The instances requested for GPU `gpu`, each where it was asked to be.
fn instances(
    gpu: u32,
    requested: &[RequestedInstance],
    catalog: &'static GpuProfile,
    product: &str,
) -> Result<Vec<MigInstance>, MigConfigError> {
    let mut slices = MemorySlices::default();
    let mut placed = Vec::new();
    for request in requested {
        let profile = profile_named(catalog, product, &request.name)
            .map_err(|source| MigConfigError::Layout { gpu, source })?;
        if let Some(size) = request.size.filter(|s| *s != profile.memory_slices) {
            return Err(MigConfigError::WrongSize {
                gpu,
                profile: profile.name,
                slices: profile.memory_slices,
                size,
            });
        }
        if !placements(profile).any(|start| start == request.position) {
            return Err(MigConfigError::BadPosition {
                gpu,
                profile: profile.name,
                position: request.position,
                valid: placements(profile)
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if !slices.is_free(profile, request.position) {
            return Err(MigConfigError::Overlap {
                gpu,
                profile: profile.name,
                position: request.position,
            });
        }
        slices.take(profile, request.position);
        placed.push(MigInstance {
            profile,
            placement_start: request.position,
        });
    }
    let profiles: Vec<_> = placed.iter().map(|i| i.profile).collect();
    check_counts(&profiles).map_err(|reason| MigConfigError::DoesNotFit { gpu, reason })?;
    placed.sort_by_key(|i| i.placement_start);
    Ok(placed)
}

/// `plan` (the pool's) with `layouts` in place of its layout for the GPUs they name. The node
/// is then under the mixed strategy, as Run:ai's dynamic MIG requires of the GPU Operator.
pub fn apply(plan: Option<&MigPlan>, layouts: &GpuLayouts) -> Result<MigPlan, MigConfigError> {
    if plan.is_some_and(|p| p.strategy == MigStrategy::Single) {
        return Err(MigConfigError::SingleStrategy);
    }
    let mut gpus = plan.map(|p| p.gpus.clone()).unwrap_or_default();
    for (gpu, instances) in layouts {
        if instances.is_empty() {
            gpus.remove(gpu);
        } else {
            gpus.insert(*gpu, instances.clone());
        }
    }
    Ok(MigPlan {
        strategy: MigStrategy::Mixed,
        gpus,
    })
}

/// The value of the mapping annotation for `layouts` on `node`. UUIDs are the topology
/// document's (stable, where the reference draws new ones each time), so Run:ai, nvidia-smi,
/// the metrics and the device plugin name an instance alike.
pub fn mapping(node: &str, layouts: &GpuLayouts) -> String {
    let mapped: BTreeMap<u32, Vec<MappedInstance>> = layouts
        .iter()
        .map(|(gpu, instances)| {
            let entries = instances
                .iter()
                .map(|i| MappedInstance {
                    position: i.placement_start,
                    device_uuid: mig_uuid(node, *gpu, i.placement_start),
                    gpu_instance_id: i.profile.gi_profile_id,
                })
                .collect();
            (*gpu, entries)
        })
        .collect();
    // A map of plain structs always serializes.
    BASE64.encode(serde_json::to_vec(&mapped).unwrap_or_default())
}

/// The layouts a [`mapping`] records for GPUs of `catalog`'s product; `None` when the value does
/// not decode, or names a profile ID the product lacks.
pub fn layouts_of_mapping(value: &str, catalog: &'static GpuProfile) -> Option<GpuLayouts> {
    let json = BASE64.decode(value.trim()).ok()?;
    let mapped: BTreeMap<u32, Vec<MappedInstance>> = serde_json::from_slice(&json).ok()?;
    mapped
        .into_iter()
        .map(|(gpu, entries)| {
            let instances = entries
                .iter()
                .map(|entry| {
                    let profile = catalog
                        .mig_profiles
                        .iter()
                        .find(|p| p.gi_profile_id == entry.gpu_instance_id)?;
                    Some(MigInstance {
                        profile,
                        placement_start: entry.position,
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            Some((gpu, instances))
        })
        .collect()
}

/// What a node's MIG comes to once its dynamic configuration is taken into account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMig {
    /// The node's MIG plan: the pool's, with the configured GPUs' layouts in place.
    pub plan: Option<MigPlan>,
    /// Label [`MIG_CONFIG_STATE`](fakegpu_model::names::label::MIG_CONFIG_STATE), with a configuration.
    pub state: Option<&'static str>,
    /// Annotation [`RUNAI_MIG_MAPPING`](fakegpu_model::names::annotation::RUNAI_MIG_MAPPING).
    pub mapping: Option<String>,
    /// Why the configuration was not applied.
    pub error: Option<MigConfigError>,
}

/// The MIG of node `node` of `gpu`'s pool, with configuration `config` (the annotation's value)
/// and the mapping it carries now. A configuration that cannot be had leaves the node as the
/// last one applied left it (the current mapping records that) and marks the state failed.
pub fn node_mig(
    gpu: &ResolvedGpu,
    node: &str,
    config: Option<&str>,
    current_mapping: Option<&str>,
) -> NodeMig {
    let Some(config) = config else {
        return NodeMig {
            plan: gpu.mig.clone(),
            state: None,
            mapping: None,
            error: None,
        };
    };
    let applied =
        parse(config, gpu).and_then(|layouts| Ok((apply(gpu.mig.as_ref(), &layouts)?, layouts)));
    match applied {
        Ok((plan, layouts)) => NodeMig {
            plan: Some(plan),
            state: Some(MIG_CONFIG_STATE_SUCCESS),
            mapping: Some(mapping(node, &layouts)),
            error: None,
        },
        Err(error) => {
            let before = current_mapping
                .zip(gpu.catalog)
                .and_then(|(value, catalog)| {
                    let layouts = layouts_of_mapping(value, catalog)?;
                    apply(gpu.mig.as_ref(), &layouts).ok()
                });
            NodeMig {
                plan: before.or_else(|| gpu.mig.clone()),
                state: Some(MIG_CONFIG_STATE_FAILED),
                mapping: current_mapping.map(str::to_owned),
                error: Some(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pool::resolve::resolve_pool;

    fn gpu(pool: serde_json::Value) -> ResolvedGpu {
        resolve_pool(&serde_json::from_value(pool).expect("test spec")).expect("resolves")
    }

    fn a100() -> ResolvedGpu {
        gpu(json!({"gpu": {"profile": "a100-80gb"}}))
    }

    const CONFIG: &str = r#"
version: v1
mig-configs:
  selected:
  - devices: ["1"]
    mig-enabled: true
    mig-devices:
    - {name: 4g.40gb, position: 0, size: 4}
    - {name: 1g.10gb, position: 5, size: 1}
  - devices: ["2"]
    mig-enabled: false
"#;

    fn decoded(value: &str) -> serde_json::Value {
        serde_json::from_slice(&BASE64.decode(value).expect("base64")).expect("JSON")
    }

    #[test]
    fn a_configuration_gives_its_instances_and_the_reference_mapping() {
        let gpu = a100();
        let mig = node_mig(&gpu, "n1", Some(CONFIG), None);
        assert_eq!(mig.error, None);
        assert_eq!(mig.state, Some("success"));
        let plan = mig.plan.expect("plan");
        assert_eq!(plan.strategy, MigStrategy::Mixed);
        let placed: Vec<_> = plan.gpus[&1]
            .iter()
            .map(|i| (i.profile.name, i.placement_start))
            .collect();
        assert_eq!(placed, [("4g.40gb", 0), ("1g.10gb", 5)]);
        assert!(!plan.is_partitioned(2) && !plan.is_partitioned(0));
        // The reference's profile IDs for 80GB parts: 4g.40gb 5, 1g.10gb 19.
        assert_eq!(
            decoded(&mig.mapping.expect("mapping")),
            json!({
                "1": [
                    {"position": 0, "device_uuid": mig_uuid("n1", 1, 0), "gpu_instance_id": 5},
                    {"position": 5, "device_uuid": mig_uuid("n1", 1, 5), "gpu_instance_id": 19},
                ],
                "2": [],
            })
        );
    }

    #[test]
    fn the_configuration_replaces_the_pools_layout_for_its_gpus_only() {
        let gpu = gpu(
            json!({"gpu": {"profile": "a100-80gb"}, "mig": {"strategy": "mixed",
            "layout": [{"gpus": [1, 2, 3], "profiles": ["7g.80gb"]}]}}),
        );
        let plan = node_mig(&gpu, "n1", Some(CONFIG), None).plan.expect("plan");
        assert_eq!(plan.gpus[&1].len(), 2);
        assert!(
            !plan.is_partitioned(2),
            "mig-enabled false makes GPU 2 whole"
        );
        assert_eq!(plan.gpus[&3][0].profile.name, "7g.80gb");
        let single = gpu_single();
        let mig = node_mig(&single, "n1", Some(CONFIG), None);
        assert_eq!(mig.error, Some(MigConfigError::SingleStrategy));
    }

    fn gpu_single() -> ResolvedGpu {
        gpu(
            json!({"gpu": {"profile": "a100-80gb"}, "mig": {"strategy": "single",
            "layout": [{"profiles": ["7g.80gb"]}]}}),
        )
    }

    #[test]
    fn a_bad_configuration_keeps_the_last_applied_layout() {
        let gpu = a100();
        let good = node_mig(&gpu, "n1", Some(CONFIG), None);
        let mapping = good.mapping.clone().expect("mapping");
        let bad = node_mig(
            &gpu,
            "n1",
            Some(
                "mig-configs: {selected: [{devices: [\"1\"], mig-enabled: true, mig-devices: [{name: 2g.20gb, position: 1}]}]}",
            ),
            Some(&mapping),
        );
        assert_eq!(bad.state, Some("failed"));
        assert_eq!(bad.plan, good.plan, "the node keeps what it had");
        assert_eq!(bad.mapping.as_deref(), Some(mapping.as_str()));
        let message = bad.error.expect("error").to_string();
        assert!(
            message.contains("2g.20gb cannot start at memory slice 1 (it can at 0, 2, 4)"),
            "{message}"
        );
        // Without a mapping of its own, the node has the pool's layout.
        let first = node_mig(&gpu, "n1", Some("nonsense"), None);
        assert_eq!((first.plan, first.state), (None, Some("failed")));
    }

    #[test]
    fn bad_configurations_are_named() {
        let entry = |devices: &str, enabled: bool, instances: &str| {
            format!(
                "mig-configs:\n  selected:\n  - devices: {devices}\n    mig-enabled: {enabled}\n    mig-devices: {instances}\n"
            )
        };
        let cases = [
            ("- just a list".to_owned(), "not a MIG configuration"),
            (entry("[\"x\"]", true, "[]"), "\"x\" is not a GPU index"),
            (
                entry("[\"8\"]", true, "[]"),
                "GPU 8 does not exist: the node has 8 GPUs",
            ),
            (
                entry("[0, \"0\"]", true, "[]"),
                "GPU 0 is selected more than once",
            ),
            (
                entry("[0]", false, "[{name: 1g.10gb, position: 0}]"),
                "mig-enabled is false",
            ),
            (
                entry("[0]", true, "[{name: 1g.5gb, position: 0}]"),
                "GPU 0: \"1g.5gb\" is not a MIG profile of NVIDIA A100-SXM4-80GB",
            ),
            (
                entry("[0]", true, "[{name: 3g.40gb, position: 0, size: 2}]"),
                "3g.40gb takes 4 memory slices, not size 2",
            ),
            (
                entry(
                    "[0]",
                    true,
                    "[{name: 3g.40gb, position: 0}, {name: 1g.10gb, position: 3}]",
                ),
                "1g.10gb at memory slice 3 overlaps",
            ),
            (
                entry(
                    "[0]",
                    true,
                    "[{name: 4g.40gb, position: 0}, {name: 3g.40gb, position: 4}, {name: 1g.10gb, position: 4}]",
                ),
                "overlaps",
            ),
            (
                entry(
                    "[0]",
                    true,
                    "[{name: 1g.10gb+me, position: 0}, {name: 1g.10gb+me, position: 1}]",
                ),
                "2 x 1g.10gb+me, at most 1",
            ),
        ];
        let gpu = a100();
        for (config, message) in cases {
            let error = parse(&config, &gpu).expect_err(&config).to_string();
            assert!(error.contains(message), "{config}: {error}");
        }
        let l40s = gpu_l40s();
        assert!(matches!(
            parse(CONFIG, &l40s),
            Err(MigConfigError::NotCapable(_))
        ));
    }

    fn gpu_l40s() -> ResolvedGpu {
        gpu(json!({"gpu": {"profile": "l40s"}}))
    }

    #[test]
    fn positions_are_nvmls_placements() {
        // Memory slice 7 is free, but a 1g's compute slice would be an eighth.
        let config = "mig-configs: {selected: [{devices: [\"0\"], mig-enabled: true, mig-devices: [{name: 4g.40gb, position: 0}, {name: 2g.20gb, position: 4}, {name: 1g.10gb, position: 7}]}]}";
        let error = parse(config, &a100()).expect_err("no 1g at 7");
        assert!(
            error
                .to_string()
                .contains("1g.10gb cannot start at memory slice 7 (it can at 0, 1, 2, 3, 4, 5, 6)"),
            "{error}"
        );
    }

    #[test]
    fn a_mapping_decodes_to_its_layouts() {
        let gpu = a100();
        let layouts = parse(CONFIG, &gpu).expect("valid");
        let catalog = gpu.catalog.expect("catalog");
        assert_eq!(
            layouts_of_mapping(&mapping("n1", &layouts), catalog),
            Some(layouts)
        );
        assert_eq!(layouts_of_mapping("not base64!", catalog), None);
        let foreign = BASE64
            .encode(r#"{"0": [{"position": 0, "device_uuid": "MIG-x", "gpu_instance_id": 99}]}"#);
        assert_eq!(layouts_of_mapping(&foreign, catalog), None);
    }
}
