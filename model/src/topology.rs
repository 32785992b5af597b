//! The per-node topology document: the one description of a node's GPUs that the operator
//! writes (ConfigMap `topology-<node>`, key `topology.yml`) and the node agent, the metrics
//! exporter and nvidia-smi read.
//!
//! Keys the reference's `topology.yml` has keep its names (`gpuMemory`, `gpuProduct`,
//! `driverVersion`, `cudaVersion`, `migStrategy`, `otherDevices`, `gpus[].id`,
//! `gpus[].status.allocatedBy`, `gpus[].status.podGpuUsageStatus`), so tools written for it
//! still parse it; fakegpu's additions are new keys only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{faults::GpuFaults, profiles::MIG_MEMORY_SLICES};

/// Format version written by this build. Readers accept documents of the same version and
/// refuse newer ones with a clear error instead of misreading them.
pub const FORMAT_VERSION: u32 = 1;

/// The GPUs of one node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopology {
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// The GpuNodePool the node belongs to.
    pub pool: String,
    /// Framebuffer per GPU, MiB.
    pub gpu_memory: u64,
    /// NVML product name, unsanitised.
    pub gpu_product: String,
    pub driver_version: String,
    pub cuda_version: String,
    /// `none`, `single` or `mixed`.
    pub mig_strategy: String,
    /// go-nvlib architecture string (`Hopper`, `Ada Lovelace`, `Unknown`).
    #[serde(default)]
    pub architecture: String,
    /// go-nvlib brand string (`Nvidia`, `Tesla`).
    #[serde(default)]
    pub brand: String,
    /// CUDA compute capability `major.minor`; empty when unknown.
    #[serde(default)]
    pub compute_capability: String,
    /// Board power limit per GPU, watts; 0 when unknown. nvidia-smi shows it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub power_limit_watts: u32,
    /// Extended resources advertised next to the GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_devices: Vec<OtherDevice>,
    /// The DRA drivers the node's pool serves (`gpu.nvidia.com` for `spec.interfaces.dra`,
    /// `compute-domain.nvidia.com` for `computeDomains`). The node agent's kubelet plugin of
    /// a driver publishes the node's ResourceSlice only while it is listed: a plugin that
    /// stays only to unprepare the claims the node's pods hold (the pool stopped serving it)
    /// offers nothing new. `None` in documents written before the field: every plugin
    /// publishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dra_drivers: Option<Vec<String>>,
    /// `false` where the node's device plugin advertises nothing: its pool does not serve the
    /// device plugin, or the node's deploy labels turn it off, yet a DaemonSet may still run
    /// the plugin there (a label set `true` by hand on a pool without it). Written only as
    /// `false`; `None`: the plugin advertises the GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_plugin: Option<bool>,
    pub gpus: Vec<GpuTopology>,
}

impl NodeTopology {
    /// Whether the node's kubelet plugin of DRA driver `driver` publishes its slice (see
    /// [`NodeTopology::dra_drivers`]).
    pub fn serves_driver(&self, driver: &str) -> bool {
        self.dra_drivers
            .as_ref()
            .is_none_or(|drivers| drivers.iter().any(|d| d == driver))
    }

    /// Whether the node's device plugin advertises its GPUs (see
    /// [`NodeTopology::device_plugin`]).
    pub fn serves_device_plugin(&self) -> bool {
        self.device_plugin != Some(false)
    }
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// An extra extended resource of the node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherDevice {
    pub name: String,
    pub count: u32,
}

/// One GPU.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GpuTopology {
    /// `GPU-<uuid>`, see [`gpu_uuid`].
    pub id: String,
    /// Index on the node (`nvidia0` is index 0).
    pub index: u32,
    /// NUMA zone, when the pool declares NUMA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// PCI address, `0000:01:00.0` (see [`pci_address`]).
    #[serde(default)]
    pub pci_bus_id: String,
    /// PCIe root complex, `pci0000:00`: GPUs of one NUMA zone share it.
    #[serde(default)]
    pub pcie_root: String,
    /// What the device plugin reports to the kubelet; unhealthy GPUs leave the node's
    /// allocatable count. Omitted when healthy, as documents before it were.
    #[serde(default, skip_serializing_if = "Health::is_healthy")]
    pub health: Health,
    /// Faults injected into the GPU; omitted when none.
    #[serde(default, skip_serializing_if = "GpuFaults::is_empty")]
    pub faults: GpuFaults,
    /// MIG instances, when the pool partitions this GPU; empty: the GPU is whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDevice>,
    #[serde(default)]
    pub status: GpuStatus,
}

impl GpuTopology {
    /// The XID the GPU reports, if any (see [`GpuFaults::reported_xid`]).
    pub fn reported_xid(&self) -> Option<u32> {
        self.faults.reported_xid(self.health.is_healthy())
    }

    /// How long until the reported XID recurs; `None` when it is raised once (see
    /// [`GpuFaults::xid_period`]).
    pub fn xid_period(&self) -> Option<std::time::Duration> {
        self.faults.xid_period()
    }
}

/// A MIG instance of a GPU.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MigDevice {
    /// `MIG-<uuid>`, see [`mig_uuid`].
    pub uuid: String,
    /// `1g.10gb`.
    pub profile: String,
    /// NVML GPU-instance profile id.
    pub gi_profile_id: u32,
    /// First of the memory slices it occupies.
    pub placement_start: u32,
    pub memory_slices: u32,
    pub compute_slices: u32,
    /// Framebuffer, MiB.
    pub memory: u64,
    pub multiprocessors: u32,
    /// Copy and media engines; documents written before they were recorded read as none.
    #[serde(default)]
    pub engines: crate::profiles::MigEngines,
    /// Who uses the instance, as for a whole GPU; omitted while free.
    #[serde(default, skip_serializing_if = "GpuStatus::is_free")]
    pub status: GpuStatus,
}

impl MigDevice {
    /// A free instance of catalog profile `profile` at memory slice `placement_start`.
    pub fn new(uuid: String, profile: &crate::profiles::MigProfile, placement_start: u32) -> Self {
        Self {
            uuid,
            profile: profile.name.to_owned(),
            gi_profile_id: profile.gi_profile_id,
            placement_start,
            memory_slices: profile.memory_slices,
            compute_slices: profile.compute_slices,
            memory: profile.memory_mib,
            multiprocessors: profile.multiprocessors,
            engines: profile.engines,
            status: GpuStatus::default(),
        }
    }

    /// The instance's BAR1 memory, MiB, as the driver reports it: its share of the GPU's
    /// aperture (taken as the framebuffer, `gpu_memory` MiB, rounded up to a power of two) less
    /// one MiB, which gives what real captures show (8191 MiB per memory slice on an A100 40GB,
    /// 16383 on 80 GB; NVIDIA's nvidia-smi prints the driver's value as it is).
    pub fn bar1_mib(&self, gpu_memory: u64) -> u64 {
        let per_slice = gpu_memory.next_power_of_two() / u64::from(MIG_MEMORY_SLICES);
        (per_slice * u64::from(self.memory_slices.max(1))).saturating_sub(1)
    }

    /// The GPU-instance ID the driver gives this instance (nvidia-smi's `GI ID`, dcgm-exporter's
    /// `GPU_I_ID`). Real drivers number the aligned runs of memory slices as a binary tree over
    /// the GPU's eight: the whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14; captures of
    /// A100 and H100 show exactly these IDs (3g.40gb at slice 0 is GI 1, 1g.10gb at 6 is 13).
    pub fn gpu_instance_id(&self) -> u32 {
        let size = self.memory_slices.clamp(1, MIG_MEMORY_SLICES);
        (MIG_MEMORY_SLICES / size).saturating_sub(1) + self.placement_start / size
    }
}

/// A GPU's health, as the device plugin API spells it (`Healthy` / `Unhealthy`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Health {
    #[default]
    Healthy,
    Unhealthy,
}

impl Health {
    pub fn is_healthy(&self) -> bool {
        *self == Self::Healthy
    }

    /// The device plugin API's string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Healthy => "Healthy",
            Self::Unhealthy => "Unhealthy",
        }
    }
}

/// GPU indices listed in the value of [`crate::names::annotation::UNHEALTHY_GPUS`]
/// (`"0,3"`); entries that are not indices are returned apart, for the caller to report.
pub fn parse_gpu_indices(value: &str) -> (Vec<u32>, Vec<String>) {
    let mut indices = Vec::new();
    let mut bad = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.parse() {
            Ok(index) => indices.push(index),
            Err(_) => bad.push(entry.to_owned()),
        }
    }
    (indices, bad)
}

/// Who uses a GPU. Written by the operator's pod tracking.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GpuStatus {
    /// The pod holding the whole GPU; empty strings when free (as the reference writes it).
    #[serde(default)]
    pub allocated_by: AllocatedBy,
    /// Usage per pod UID.
    #[serde(default)]
    pub pod_gpu_usage_status: BTreeMap<String, PodGpuUsage>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatedBy {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub pod: String,
    #[serde(default)]
    pub container: String,
}

/// A pod's use of one GPU.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodGpuUsage {
    pub utilization: UtilizationBounds,
    /// Framebuffer used, MiB.
    pub fb_used: u64,
    #[serde(default)]
    pub use_knative_utilization: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UtilizationBounds {
    pub min: u8,
    pub max: u8,
}

/// Why a topology document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("malformed topology document: {0}")]
    Malformed(#[from] serde_yaml::Error),
    #[error("topology format version {0} is newer than this build understands ({FORMAT_VERSION})")]
    TooNew(u32),
    #[error("topology ConfigMap has no {} key", crate::names::topology::DATA_KEY)]
    MissingKey,
}

impl NodeTopology {
    /// The name of `node`'s topology ConfigMap (`topology-<node>`, the reference's).
    pub fn configmap_name(node: &str) -> String {
        format!("{}{node}", crate::names::topology::CONFIGMAP_PREFIX)
    }

    /// The CUDA version as NVML and the CUDA driver API give it: `12.4` -> 12040 (major * 1000 +
    /// minor * 10); 0 for one that does not parse.
    pub fn cuda_driver_version(&self) -> i32 {
        let mut parts = self
            .cuda_version
            .split('.')
            .map(|p| p.parse::<i32>().unwrap_or(0));
        let major = parts.next().unwrap_or(0);
        let minor = parts.next().unwrap_or(0);
        major * 1000 + minor * 10
    }

    /// Reads the document of a topology ConfigMap from its data (key
    /// [`crate::names::topology::DATA_KEY`]).
    pub fn from_configmap_data(
        data: Option<&BTreeMap<String, String>>,
    ) -> Result<Self, TopologyError> {
        let text = data
            .and_then(|data| data.get(crate::names::topology::DATA_KEY))
            .ok_or(TopologyError::MissingKey)?;
        Self::from_yaml(text)
    }

    /// Parses a document, refusing versions newer than this build.
    pub fn from_yaml(text: &str) -> Result<Self, TopologyError> {
        let topology: Self = serde_yaml::from_str(text)?;
        if topology.version > FORMAT_VERSION {
            return Err(TopologyError::TooNew(topology.version));
        }
        Ok(topology)
    }

    pub fn to_yaml(&self) -> Result<String, TopologyError> {
        Ok(serde_yaml::to_string(self)?)
    }

    /// Whether any pod of the node takes its utilization from Knative: only the exporter,
    /// which asks Prometheus, knows that rate.
    pub fn wants_knative(&self) -> bool {
        self.gpus
            .iter()
            .flat_map(GpuTopology::statuses)
            .any(|(_, status)| {
                status
                    .pod_gpu_usage_status
                    .values()
                    .any(|usage| usage.use_knative_utilization)
            })
    }
}

/// The UUID of the MIG instance at memory slice `start` of GPU `index` on `node`: `MIG-` +
/// UUIDv5 (nil namespace) of `<node>-<index>-mig-<start>`, stable like [`gpu_uuid`].
pub fn mig_uuid(node: &str, index: u32, start: u32) -> String {
    let uuid = Uuid::new_v5(
        &Uuid::nil(),
        format!("{node}-{index}-mig-{start}").as_bytes(),
    );
    format!("MIG-{uuid}")
}

/// The GPU UUID of GPU `index` on `node`: `GPU-` + UUIDv5 (SHA-1, nil namespace) of
/// `<node>-<index>`, as the reference derives it. The same node and index always give the same
/// UUID, so labels, slices, device-plugin IDs, metrics and nvidia-smi agree across restarts.
pub fn gpu_uuid(node: &str, index: u32) -> String {
    let uuid = Uuid::new_v5(&Uuid::nil(), format!("{node}-{index}").as_bytes());
    format!("GPU-{uuid}")
}

/// A PCI bus id with the 8-digit domain nvidia-smi and dcgm-exporter print
/// (`0000:07:00.0` -> `00000000:07:00.0`).
pub fn long_bus_id(bus_id: &str) -> String {
    match bus_id.split_once(':') {
        Some((domain, rest)) => format!("{domain:0>8}:{rest}"),
        None => bus_id.to_owned(),
    }
}

/// PCI bus id and PCIe root of the `slot`-th GPU of NUMA zone `zone`: one PCI domain per zone,
/// so that GPUs of a zone share a root (DRA `matchAttribute: resource.kubernetes.io/pcieRoot`
/// then means "same NUMA zone", as on real multi-socket machines) and buses count up from 1.
pub fn pci_address(zone: u32, slot: u32) -> (String, String) {
    (
        format!("{zone:04x}:{:02x}:00.0", slot + 1),
        format!("pci{zone:04x}:00"),
    )
}

impl GpuStatus {
    /// Whether a pod holds or uses this GPU.
    pub fn in_use(&self) -> bool {
        !self.allocated_by.pod.is_empty() || !self.pod_gpu_usage_status.is_empty()
    }

    pub fn is_free(&self) -> bool {
        !self.in_use()
    }

    /// Framebuffer the pods use, MiB, at most `capacity` (the device's memory).
    pub fn memory_used(&self, capacity: u64) -> u64 {
        self.pod_gpu_usage_status
            .values()
            .map(|u| u.fb_used)
            .sum::<u64>()
            .min(capacity)
    }
}

/// Who is asking, as a GPU container's environment tells: what picks the container's own pod
/// among the pods a GPU's status lists. fakegpu's nvidia-smi and its NVML library show that
/// pod's use of a GPU as the container's own process (its main process, PID 1 in the
/// container, as the reference's nvidia-smi shows it); other pods' processes live in other PID
/// namespaces, which the real driver does not show a container either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller<'a> {
    /// `POD_UUID`, when the pod passes its UID in (the reference's nvidia-smi reads it).
    pub pod_uid: Option<&'a str>,
    /// `HOSTNAME`: the pod's name, unless the pod sets another host name.
    pub hostname: Option<&'a str>,
    /// `NVIDIA_VISIBLE_DEVICES`: the GPUs or MIG instances the container was given.
    pub visible_devices: Option<&'a str>,
}

impl Caller<'_> {
    /// The PID a container's own process has in its PID namespace: its main process.
    pub const PROCESS_ID: u32 = 1;

    /// Whether pod `uid`'s use, as `status` (of the GPU or MIG instance `unit`, by UUID) records
    /// it, is the caller's pod's: the pod passed its UID in; or the unit serves that pod alone
    /// and it is the pod holding it by name, or the container was given the unit.
    pub fn owns(&self, unit: &str, status: &GpuStatus, uid: &str) -> bool {
        self.pod_uid == Some(uid)
            || (status.pod_gpu_usage_status.len() == 1
                && status.pod_gpu_usage_status.contains_key(uid)
                && (self.hostname == Some(status.allocated_by.pod.as_str())
                    || self
                        .visible_devices
                        .is_some_and(|list| list.split(',').map(str::trim).any(|id| id == unit))))
    }
}

/// [`Caller`] as a process's environment holds it: its owned form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallerEnv {
    pub pod_uid: Option<String>,
    pub hostname: Option<String>,
    pub visible_devices: Option<String>,
}

impl CallerEnv {
    /// This process's (see [`crate::names::container_env`]); an empty variable reads as unset.
    pub fn from_process() -> Self {
        use crate::names::container_env::{HOSTNAME, POD_UUID, VISIBLE_DEVICES};
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        Self {
            pod_uid: var(POD_UUID),
            hostname: var(HOSTNAME),
            visible_devices: var(VISIBLE_DEVICES),
        }
    }

    pub fn caller(&self) -> Caller<'_> {
        Caller {
            pod_uid: self.pod_uid.as_deref(),
            hostname: self.hostname.as_deref(),
            visible_devices: self.visible_devices.as_deref(),
        }
    }
}

impl GpuTopology {
    /// The GPU's status and each of its MIG instances', with the UUID pods use them by.
    pub fn statuses(&self) -> impl Iterator<Item = (&str, &GpuStatus)> {
        let instances = self
            .mig_devices
            .iter()
            .map(|m| (m.uuid.as_str(), &m.status));
        std::iter::once((self.id.as_str(), &self.status)).chain(instances)
    }

    /// Whether a pod holds or uses the GPU or one of its MIG instances.
    pub fn in_use(&self) -> bool {
        self.statuses().any(|(_, status)| status.in_use())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_owns_its_pods_use_and_no_other() {
        let usage = |uids: &[&str]| GpuStatus {
            allocated_by: AllocatedBy {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "main".into(),
            },
            pod_gpu_usage_status: uids
                .iter()
                .map(|uid| ((*uid).to_owned(), PodGpuUsage::default()))
                .collect(),
        };
        let alone = usage(&["uid-a"]);
        let shared = usage(&["uid-a", "uid-b"]);
        let by_uid = Caller {
            pod_uid: Some("uid-b"),
            ..Default::default()
        };
        assert!(by_uid.owns("GPU-1", &shared, "uid-b"));
        assert!(!by_uid.owns("GPU-1", &shared, "uid-a"));
        let by_name = Caller {
            hostname: Some("train-0"),
            ..Default::default()
        };
        assert!(by_name.owns("GPU-1", &alone, "uid-a"));
        // A shared GPU's holder by name cannot tell which pod is its own.
        assert!(!by_name.owns("GPU-1", &shared, "uid-a"));
        let given = Caller {
            visible_devices: Some("GPU-0, GPU-1"),
            ..Default::default()
        };
        assert!(given.owns("GPU-1", &alone, "uid-a"));
        assert!(!given.owns("GPU-2", &alone, "uid-a"));
        assert!(
            !given.owns("GPU-1", &alone, "uid-other"),
            "not a pod of the unit"
        );
        assert!(!Caller::default().owns("GPU-1", &alone, "uid-a"));
    }

    #[test]
    fn gpu_uuids_are_deterministic_and_distinct() {
        assert_eq!(gpu_uuid("node-a", 0), gpu_uuid("node-a", 0));
        assert_ne!(gpu_uuid("node-a", 0), gpu_uuid("node-a", 1));
        assert_ne!(gpu_uuid("node-a", 0), gpu_uuid("node-b", 0));
        // UUIDv5 of "node-a-0" in the nil namespace, computed independently.
        let expected = Uuid::new_v5(&Uuid::nil(), b"node-a-0");
        assert_eq!(expected.get_version_num(), 5);
        assert_eq!(gpu_uuid("node-a", 0), format!("GPU-{expected}"));
    }

    #[test]
    fn reads_a_reference_style_document() {
        let text = r#"
version: 1
pool: default
gpuMemory: 11441
gpuProduct: Tesla-K80
driverVersion: "470.129.06"
cudaVersion: "11.4"
migStrategy: none
gpus:
- id: GPU-8f3b4c1e-0000-5000-8000-000000000000
  index: 0
  status:
    allocatedBy: {namespace: team-a, pod: train-0, container: main}
    podGpuUsageStatus:
      uid-1: {utilization: {min: 10, max: 30}, fbUsed: 1024, useKnativeUtilization: false}
"#;
        let topology = NodeTopology::from_yaml(text).expect("parses");
        assert_eq!(topology.gpus[0].status.allocated_by.pod, "train-0");
        assert_eq!(
            topology.gpus[0].status.pod_gpu_usage_status["uid-1"].fb_used,
            1024
        );
        let round_trip = NodeTopology::from_yaml(&topology.to_yaml().expect("writes"));
        assert_eq!(round_trip.expect("parses again"), topology);
    }

    #[test]
    fn refuses_newer_formats_and_garbage() {
        let newer = format!(
            "version: {}\npool: p\ngpuMemory: 1\ngpuProduct: x\ndriverVersion: a\ncudaVersion: b\nmigStrategy: none\ngpus: []\n",
            FORMAT_VERSION + 1
        );
        assert!(matches!(
            NodeTopology::from_yaml(&newer),
            Err(TopologyError::TooNew(_))
        ));
        assert!(matches!(
            NodeTopology::from_yaml("gpus: 7"),
            Err(TopologyError::Malformed(_))
        ));
    }

    #[test]
    fn gpu_instance_ids_number_slice_runs_as_the_driver_does() {
        let id = |memory_slices, placement_start| {
            MigDevice {
                memory_slices,
                placement_start,
                ..Default::default()
            }
            .gpu_instance_id()
        };
        // From real A100 80GB captures: 3g.40gb at 0, 2g.20gb at 4, 1g.10gb at 6 and 7.
        assert_eq!([id(4, 0), id(2, 4), id(1, 6), id(1, 7)], [1, 5, 13, 14]);
        assert_eq!([id(8, 0), id(4, 4), id(2, 0), id(1, 0)], [0, 2, 3, 7]);
    }
}
