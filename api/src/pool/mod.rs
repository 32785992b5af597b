//! The `GpuNodePool` custom resource: which nodes get which simulated GPUs, and how they are served.
//!
//! Everything a node pool entry of the reference Helm chart (`topology.nodePools.<name>`)
//! expresses has a field here. The API server validates it (OpenAPI bounds, enums and patterns
//! from the attributes below, CEL rules from [`rules`]), so a bad object is refused at
//! `kubectl apply` with a message naming the field; the operator re-checks the same bounds
//! with [`validator::Validate`] for objects stored under an older CRD.

pub mod mig;
pub mod mig_config;
pub mod resolve;
pub mod rules;

use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity,
    apis::meta::v1::{Condition, LabelSelector},
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

use fakegpu_model::utilization::PATTERN as UTILIZATION_PATTERN;

/// A pool of nodes with simulated NVIDIA GPUs.
// Each `printcolumn(...)` repeats `type_`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[kube(
    group = "fakegpu.dev",
    version = "v1alpha1",
    kind = "GpuNodePool",
    plural = "gpunodepools",
    doc = "A pool of nodes with simulated NVIDIA GPUs: which nodes, which GPUs, served how.",
    shortname = "gnp",
    category = "fakegpu",
    status = "GpuNodePoolStatus",
    printcolumn(name = "Product", type_ = "string", json_path = ".status.product"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodeCount"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.gpuCount"),
    printcolumn(
        name = "Allocated",
        type_ = "integer",
        json_path = ".status.allocatedGpus"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = rules::node_selector_selects_some_nodes(),
    validation = rules::numa_zones_within_gpu_count(),
    validation = rules::gpus_per_zone_sum_to_gpu_count(),
    validation = rules::mig_needs_capable_profile(),
    validation = rules::mig_gpu_indices_within_count(),
)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodePoolSpec {
    /// Nodes that belong to this pool. Unset: the nodes labelled
    /// `run.ai/simulated-gpu-node-pool=<pool name>`, the reference fake GPU operator's convention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// The simulated GPUs of every node in the pool.
    #[validate(nested)]
    pub gpu: GpuSpec,

    /// Which kubelet-facing interfaces advertise the GPUs.
    #[serde(default)]
    pub interfaces: Interfaces,

    /// MIG partitioning. Unset: MIG is off (GPU feature discovery strategy `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub mig: Option<MigSpec>,

    /// NUMA layout, published as a NodeResourceTopology object per node. Unset: no NUMA data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub numa: Option<NumaSpec>,

    /// Simulated utilization of pods that do not say their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub utilization: Option<UtilizationSpec>,

    /// Extra extended resources every node of the pool advertises (the reference's `resources`
    /// list), e.g. `{name: nvidia.com/hostdev, count: 4}`. `nvidia.com/gpu` is not allowed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::cel::ListMerge::Map(vec!["name".into()]))]
    #[validate(length(max = 16), nested)]
    pub other_resources: Vec<OtherResource>,

    /// Faults injected into the GPUs of every node of the pool (XID errors, ECC errors,
    /// thermal throttling), shown where real faults show: dcgm-exporter's series, nvidia-smi,
    /// the device plugin's health, a node condition and an Event. A node's
    /// `fakegpu.dev/gpu-faults` annotation adds its own after these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[validate(length(max = 16), nested)]
    pub faults: Vec<crate::faults::GpuFault>,
}

/// How GPUs are simulated.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Fake,
    Mock,
}

/// The GPUs of each node: a builtin profile, explicit values, or a profile with overrides.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[x_kube(
    validation = rules::explicit_gpu_is_complete(),
    validation = rules::mock_needs_profile(),
    validation = rules::compute_capability_matches_profile(),
)]
#[serde(rename_all = "camelCase")]
pub struct GpuSpec {
    /// `fake`: fakegpu advertises the GPUs itself (device plugin, DRA, KWOK capacity).
    /// `mock`: NVIDIA's own device plugin, GPU feature discovery or DRA driver advertise them:
    /// on nodes with a kubelet fakegpu lays out a driver root (`status.driverRoot`) whose NVML
    /// library answers from the node's document, and runs none of its own kubelet plugins;
    /// KWOK nodes get labels but no capacity.
    #[serde(default)]
    pub backend: Backend,

    /// Builtin profile: a100, a100-80gb, b200, gb200, gb300, h100, h200, k80, l4, l40s, t4.
    /// Fields below override the profile's values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    #[validate(length(min = 1, max = 63))]
    pub profile: Option<String>,

    /// Product name as NVML reports it (`NVIDIA H100 80GB HBM3`); node labels carry it sanitised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 96))]
    pub product: Option<String>,

    /// GPUs per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 64))]
    pub count: Option<u32>,

    /// Framebuffer per GPU, MiB.
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 4_194_304))]
    pub memory_mib: Option<u64>,

    /// Driver version as NVML reports it, e.g. `550.163.01`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?$"))]
    #[validate(length(max = 16))]
    pub driver_version: Option<String>,

    /// Highest CUDA version the driver supports, e.g. `12.4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,2}\.[0-9]{1,2}$"))]
    #[validate(length(max = 5))]
    pub cuda_version: Option<String>,

    /// CUDA compute capability, e.g. `9.0`; decides the `nvidia.com/gpu.family` label. With a
    /// profile it may only restate the profile's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,2}\.[0-9]$"))]
    #[validate(length(max = 4))]
    pub compute_capability: Option<String>,
}

/// Kubelet-facing interfaces. KWOK nodes get the equivalent objects from the operator.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[x_kube(validation = rules::some_interface_served())]
#[serde(rename_all = "camelCase")]
pub struct Interfaces {
    /// Advertise `nvidia.com/gpu` as an extended resource (device plugin, KWOK node capacity).
    #[serde(default = "default_true")]
    pub device_plugin: bool,
    /// Publish ResourceSlices for DRA driver `gpu.nvidia.com`.
    #[serde(default)]
    pub dra: bool,
    /// Publish IMEX channels (DRA driver `compute-domain.nvidia.com`, device `channel-0` per
    /// node) and the compute-domain DeviceClass, for ComputeDomains (NVLink systems such as
    /// GB200 NVL72).
    #[serde(default, skip_serializing_if = "is_false")]
    pub compute_domains: bool,
}

fn is_false(value: &bool) -> bool {
    !value
}

impl Default for Interfaces {
    fn default() -> Self {
        Self {
            device_plugin: true,
            dra: false,
            compute_domains: false,
        }
    }
}

fn default_true() -> bool {
    true
}

/// GPU feature discovery MIG strategy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MigStrategy {
    Single,
    Mixed,
}

/// MIG partitioning of the pool's GPUs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[x_kube(validation = rules::single_strategy_is_homogeneous())]
#[serde(rename_all = "camelCase")]
pub struct MigSpec {
    /// `single`: every GPU is cut into one profile, advertised as `nvidia.com/gpu`.
    /// `mixed`: each profile is its own resource, `nvidia.com/mig-<profile>`.
    pub strategy: MigStrategy,
    /// Which MIG instances each GPU holds; a GPU not listed stays whole.
    #[validate(length(min = 1, max = 64), nested)]
    pub layout: Vec<MigLayout>,
}

/// The MIG instances of some GPUs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct MigLayout {
    /// GPU indices this entry applies to. Empty: every GPU of the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::cel::ListMerge::Set)]
    #[validate(length(max = 64))]
    pub gpus: Vec<u32>,
    /// MIG profiles to create on each of those GPUs, e.g. `["3g.40gb", "2g.20gb", "1g.10gb"]`;
    /// checked against the product's MIG profiles by the operator.
    #[validate(length(min = 1, max = 7))]
    #[schemars(inner(
        regex(pattern = r"^[1-8]g\.[0-9]{1,3}gb(\+me|\+gfx|\+me\.all|-me)?$"),
        length(max = 16)
    ))]
    pub profiles: Vec<String>,
}

/// Kubelet topology manager policy, as NodeResourceTopology reports it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyManagerPolicy {
    None,
    BestEffort,
    Restricted,
    #[default]
    SingleNumaNode,
}

/// Kubelet topology manager scope.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TopologyManagerScope {
    #[default]
    Container,
    Pod,
}

/// NUMA layout of every node in the pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[x_kube(
    validation = rules::gpus_per_zone_has_one_entry_per_zone(),
    validation = rules::positive_quantity("cpuPerZone"),
    validation = rules::positive_quantity("memoryPerZone"),
)]
#[serde(rename_all = "camelCase")]
pub struct NumaSpec {
    /// NUMA zones per node (`node-0`, `node-1`, ...).
    #[validate(range(min = 1, max = 8))]
    pub zones: u32,
    /// GPUs in each zone, in zone order. Unset: GPUs are spread evenly, lower zones first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[validate(length(max = 8))]
    pub gpus_per_zone: Vec<u32>,
    /// Distances between zones (ACPI SLIT style costs). Unset: self 10, remote 21.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub distances: Option<NumaDistances>,
    #[serde(default)]
    pub topology_manager_policy: TopologyManagerPolicy,
    #[serde(default)]
    pub topology_manager_scope: TopologyManagerScope,
    /// CPU per zone. Unset: the node's allocatable CPU divided by the zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_zone: Option<Quantity>,
    /// Memory per zone. Unset: the node's allocatable memory divided by the zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_per_zone: Option<Quantity>,
}

/// NUMA distances; a zone is always closer to itself than to another zone.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Validate)]
#[x_kube(validation = rules::remote_distance_exceeds_local())]
pub struct NumaDistances {
    /// Cost of a zone to itself.
    #[serde(rename = "self")]
    #[validate(range(min = 1, max = 254))]
    pub local: u32,
    /// Cost between two different zones.
    #[validate(range(min = 1, max = 255))]
    pub remote: u32,
}

/// Utilization of pods without a `run.ai/simulated-gpu-utilization` annotation.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct UtilizationSpec {
    /// `"N"` or `"MIN-MAX"` percent, inclusive: for pods with neither a
    /// `run.ai/simulated-gpu-utilization` annotation nor a workload type; each value is drawn
    /// from the range and held for the exporter's interval (default 10 s). Unset: 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = UTILIZATION_PATTERN))]
    #[x_kube(
        validation = rules::utilization_at_most_hundred(),
        validation = rules::utilization_min_not_above_max(),
    )]
    #[validate(length(max = 7))]
    pub default: Option<String>,
}

/// An extended resource advertised next to the GPUs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct OtherResource {
    /// Extended resource name, e.g. `nvidia.com/hostdev`.
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
    ))]
    #[x_kube(validation = rules::other_resource_is_not_gpu())]
    #[validate(length(min = 3, max = 253))]
    pub name: String,
    /// How many each node has.
    #[validate(range(max = 1024))]
    pub count: u32,
}

/// What the operator observed of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodePoolStatus {
    /// The generation the status describes; tools judge health only when it equals
    /// `metadata.generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (reasons `Reconciled`, `Progressing`, `UnknownProfile`, `InvalidSpec`,
    /// `InvalidMigLayout`, `InvalidSelector`, `NodeUpdateFailed`), `Stalled` (True when the pool
    /// cannot get ready without a change from the user), `Conflict` (a node several pools
    /// select), `Overbooked` (nodes whose pods ask for more GPUs than they have) and, for DRA
    /// pools, `DeviceClass` (False when another owner holds one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Resolved product name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// Nodes in the pool.
    #[serde(default)]
    pub node_count: u32,
    /// GPUs on all nodes of the pool.
    #[serde(default)]
    pub gpu_count: u32,
    /// GPUs held by pods.
    #[serde(default)]
    pub allocated_gpus: u32,
    /// `backend: mock`: where NVIDIA's components find the pool's NVML library on its nodes
    /// with a kubelet (the bundle's driver root; pass it as their `--driver-root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_root: Option<String>,
    /// How many of the pool's nodes serve each of its interfaces: every node serves the
    /// pool's `spec.interfaces`, less those its deploy labels turn off (see the book's
    /// "Interfaces per node").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_nodes: Option<ServingNodes>,
    /// Per-node summary, sorted by name; only the first 100 nodes are listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<PoolNodeStatus>,
}

/// Nodes serving each interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServingNodes {
    /// Nodes advertising `nvidia.com/gpu` as an extended resource.
    #[serde(default)]
    pub device_plugin: u32,
    /// Nodes publishing their GPUs in a ResourceSlice of DRA driver `gpu.nvidia.com`.
    #[serde(default)]
    pub dra: u32,
    /// Nodes publishing an IMEX channel (DRA driver `compute-domain.nvidia.com`).
    #[serde(default)]
    pub compute_domains: u32,
}

/// One node of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolNodeStatus {
    pub name: String,
    pub gpus: u32,
    pub allocated_gpus: u32,
    /// Served centrally because KWOK manages the node.
    #[serde(default)]
    pub kwok: bool,
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;
    use validator::Validate;

    use super::*;
    use fakegpu_model::names;

    #[test]
    fn derive_uses_the_published_group_and_version() {
        assert_eq!(GpuNodePool::group(&()), names::GROUP);
        assert_eq!(GpuNodePool::version(&()), names::VERSION);
    }

    fn spec(value: serde_json::Value) -> GpuNodePoolSpec {
        serde_json::from_value(value).expect("test spec deserialises")
    }

    #[test]
    fn defaults_match_the_reference() {
        let spec = spec(json!({"gpu": {"profile": "a100"}}));
        assert_eq!(spec.gpu.backend, Backend::Fake);
        assert_eq!(
            spec.interfaces,
            Interfaces {
                device_plugin: true,
                dra: false,
                compute_domains: false,
            }
        );
        assert!(spec.node_selector.is_none() && spec.mig.is_none() && spec.numa.is_none());
    }

    #[test]
    fn client_side_validation_repeats_the_schema_bounds() {
        let refused = [
            json!({"gpu": {"product": "X", "count": 0, "memoryMiB": 1}}),
            json!({"gpu": {"product": "X", "count": 65, "memoryMiB": 1}}),
            json!({"gpu": {"product": "X", "count": 1, "memoryMiB": 0}}),
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 9}}),
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "distances": {"self": 0, "remote": 1}}}),
            json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "mixed", "layout": []}}),
            json!({"gpu": {"profile": "a100"}, "utilization": {"default": "100-1000"}}),
        ];
        for value in refused {
            assert!(spec(value.clone()).validate().is_err(), "accepted {value}");
        }
        let accepted = json!({"gpu": {"product": "X", "count": 64, "memoryMiB": 1},
            "numa": {"zones": 8, "distances": {"self": 10, "remote": 21}}});
        assert!(spec(accepted).validate().is_ok());
    }
}
