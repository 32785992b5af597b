//! The DRA view of a node's GPUs: devices named and attributed as NVIDIA's DRA driver
//! (`gpu.nvidia.com`) publishes them, so that a CEL selector or a `matchAttribute` constraint
//! written for real GPUs selects fakegpu's. The operator publishes this for KWOK nodes and the
//! node agent for nodes with a kubelet; both build it here.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::resource::v1::{
        Device, DeviceAttribute, DeviceCapacity, DeviceTaint, ResourcePool, ResourceSlice,
        ResourceSliceSpec,
    },
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{Resource, ResourceExt, api::ObjectMeta};

use fakegpu_model::{
    names::resource::{GPU_DRIVER, XID_TAINT},
    topology::{GpuTopology, MigDevice, NodeTopology},
};

/// Device attribute keys. Unqualified keys live in the driver's domain
/// (`device.attributes['gpu.nvidia.com'].productName` in CEL).
pub mod attribute {
    /// `gpu` for whole GPUs; the DeviceClasses select on it.
    pub const TYPE: &str = "type";
    pub const TYPE_GPU: &str = "gpu";
    pub const UUID: &str = "uuid";
    pub const PRODUCT_NAME: &str = "productName";
    /// The reference fake GPU operator's name for the product (it publishes the same value as
    /// `productName`), kept so that selectors written for it still match.
    pub const MODEL: &str = "model";
    pub const BRAND: &str = "brand";
    pub const ARCHITECTURE: &str = "architecture";
    pub const CUDA_COMPUTE_CAPABILITY: &str = "cudaComputeCapability";
    pub const DRIVER_VERSION: &str = "driverVersion";
    pub const CUDA_DRIVER_VERSION: &str = "cudaDriverVersion";
    /// Kubernetes' standard attribute (k8s.io/dynamic-resource-allocation/deviceattribute).
    pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
    /// Kubernetes' standard attribute; GPUs of one NUMA zone share a root.
    pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
    /// Kubernetes' standard attribute (an int), which NVIDIA's newer drivers publish, so that
    /// `matchAttribute` can keep a claim's GPUs, NICs and CPUs on one NUMA node.
    pub const NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
    /// Capacity: framebuffer in bytes.
    pub const MEMORY: &str = "memory";
    pub const TYPE_MIG: &str = "mig";
    pub const PARENT_UUID: &str = "parentUUID";
    pub const PROFILE: &str = "profile";
    pub const MULTIPROCESSORS: &str = "multiprocessors";
    /// Capacities of a MIG device: its copy and media engines.
    pub const COPY_ENGINES: &str = "copyEngines";
    pub const DECODERS: &str = "decoders";
    pub const ENCODERS: &str = "encoders";
    pub const JPEG_ENGINES: &str = "jpegEngines";
    pub const OFA_ENGINES: &str = "ofaEngines";
}

/// Device name of GPU `index`: `gpu-<minor>`, as NVIDIA's driver names whole GPUs.
pub fn gpu_device_name(index: u32) -> String {
    format!("gpu-{index}")
}

/// The GPU index a whole-GPU device name stands for (`gpu-3` -> 3); `None` for other devices.
pub fn gpu_index(device: &str) -> Option<u32> {
    let digits = device.strip_prefix("gpu-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A version as NVIDIA's driver publishes it: each part read as an integer (leading zeros
/// dropped) and padded to three parts, as Masterminds semver does (`550.163.01` ->
/// `550.163.1`, `12.4` -> `12.4.0`). `None` when a part is not a number.
pub fn semver(version: &str) -> Option<String> {
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u64>().ok())
        .collect::<Option<Vec<_>>>()?;
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    parts.resize(3, 0);
    Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

/// `mib` MiB as a binary-SI quantity in its canonical form (`40960` -> `40Gi`, `11441` ->
/// `11441Mi`), as the API server would print it.
pub fn memory_quantity(mib: u64) -> Quantity {
    Quantity(if mib != 0 && mib.is_multiple_of(1024 * 1024) {
        format!("{}Ti", mib / (1024 * 1024))
    } else if mib != 0 && mib.is_multiple_of(1024) {
        format!("{}Gi", mib / 1024)
    } else {
        format!("{mib}Mi")
    })
}

fn string(value: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(value.to_owned()),
        ..Default::default()
    }
}

fn version(value: &str) -> Option<DeviceAttribute> {
    Some(DeviceAttribute {
        version: Some(semver(value)?),
        ..Default::default()
    })
}

/// The devices of a node, in index order: each whole GPU as `gpu-<index>`, and each GPU the
/// pool partitions as its MIG devices instead (NVIDIA's driver publishes a MIG-enabled GPU's
/// instances, not the GPU).
pub fn gpu_devices(topology: &NodeTopology) -> Vec<Device> {
    topology
        .gpus
        .iter()
        .flat_map(|gpu| {
            if gpu.mig_devices.is_empty() {
                vec![whole_gpu(topology, gpu)]
            } else {
                gpu.mig_devices
                    .iter()
                    .map(|mig| mig_device(topology, gpu, mig))
                    .collect()
            }
        })
        .collect()
}

/// The attributes a GPU and its MIG devices share: product, brand, architecture, versions, PCI.
fn common_attributes(
    topology: &NodeTopology,
    gpu: &GpuTopology,
) -> BTreeMap<String, DeviceAttribute> {
    use attribute::*;
    let mut attributes = BTreeMap::from([
        (PRODUCT_NAME.to_owned(), string(&topology.gpu_product)),
        (MODEL.to_owned(), string(&topology.gpu_product)),
        (BRAND.to_owned(), string(&topology.brand)),
        (ARCHITECTURE.to_owned(), string(&topology.architecture)),
    ]);
    let versions = [
        (CUDA_COMPUTE_CAPABILITY, &topology.compute_capability),
        (DRIVER_VERSION, &topology.driver_version),
        (CUDA_DRIVER_VERSION, &topology.cuda_version),
    ];
    for (key, value) in versions {
        if let Some(attribute) = version(value) {
            attributes.insert(key.to_owned(), attribute);
        }
    }
    if !gpu.pci_bus_id.is_empty() {
        attributes.insert(PCI_BUS_ID.to_owned(), string(&gpu.pci_bus_id));
        attributes.insert(PCIE_ROOT.to_owned(), string(&gpu.pcie_root));
    }
    if let Some(zone) = gpu.numa_node {
        let int = DeviceAttribute {
            int: Some(i64::from(zone)),
            ..Default::default()
        };
        attributes.insert(NUMA_NODE.to_owned(), int);
    }
    attributes
}

/// The taint NVIDIA's DRA driver puts on the devices of a GPU that reports an XID (see
/// [`GpuTopology::reported_xid`]); none otherwise.
fn taints(gpu: &GpuTopology) -> Option<Vec<DeviceTaint>> {
    let xid = gpu.reported_xid()?;
    let effect = if gpu.health.is_healthy() {
        "None"
    } else {
        "NoSchedule"
    };
    Some(vec![DeviceTaint {
        key: XID_TAINT.to_owned(),
        value: Some(xid.to_string()),
        effect: effect.to_owned(),
        time_added: None,
    }])
}

fn capacity(value: Quantity) -> DeviceCapacity {
    DeviceCapacity {
        value,
        request_policy: None,
    }
}

fn whole_gpu(topology: &NodeTopology, gpu: &GpuTopology) -> Device {
    use attribute::*;
    let mut attributes = common_attributes(topology, gpu);
    attributes.insert(TYPE.to_owned(), string(TYPE_GPU));
    attributes.insert(UUID.to_owned(), string(&gpu.id));
    Device {
        name: gpu_device_name(gpu.index),
        attributes: Some(attributes),
        capacity: Some(BTreeMap::from([(
            MEMORY.to_owned(),
            capacity(memory_quantity(topology.gpu_memory)),
        )])),
        taints: taints(gpu),
        ..Default::default()
    }
}

/// The UUID behind device `name` of a node's slice: a whole GPU's (`gpu-<index>`, when the GPU
/// is not partitioned) or a MIG instance's; `None` for a device the node does not publish.
pub fn device_uuid<'a>(topology: &'a NodeTopology, name: &str) -> Option<&'a str> {
    topology.gpus.iter().find_map(|gpu| {
        if gpu.mig_devices.is_empty() {
            (gpu_index(name) == Some(gpu.index)).then_some(gpu.id.as_str())
        } else {
            gpu.mig_devices
                .iter()
                .find(|mig| mig_device_name(gpu.index, mig) == name)
                .map(|mig| mig.uuid.as_str())
        }
    })
}

/// Device name of a MIG instance, as NVIDIA's driver names it:
/// `gpu-<parent>-mig-<profile, lower case, without dots>-<GI profile id>-<placement start>`
/// (`gpu-0-mig-1g10gb-19-0`). A `+` (media extensions) becomes `-`, which device names allow.
pub fn mig_device_name(gpu: u32, mig: &MigDevice) -> String {
    let profile: String = mig
        .profile
        .to_lowercase()
        .chars()
        .filter(|c| *c != '.')
        .map(|c| if c == '+' { '-' } else { c })
        .collect();
    format!(
        "gpu-{gpu}-mig-{profile}-{}-{}",
        mig.gi_profile_id, mig.placement_start
    )
}

fn mig_device(topology: &NodeTopology, gpu: &GpuTopology, mig: &MigDevice) -> Device {
    use attribute::*;
    let mut attributes = common_attributes(topology, gpu);
    attributes.insert(TYPE.to_owned(), string(TYPE_MIG));
    attributes.insert(UUID.to_owned(), string(&mig.uuid));
    attributes.insert(PARENT_UUID.to_owned(), string(&gpu.id));
    attributes.insert(PROFILE.to_owned(), string(&mig.profile));
    let count = |n: u32| capacity(Quantity(n.to_string()));
    let engines = &mig.engines;
    let mut capacities = BTreeMap::from([
        (MEMORY.to_owned(), capacity(memory_quantity(mig.memory))),
        (MULTIPROCESSORS.to_owned(), count(mig.multiprocessors)),
        (COPY_ENGINES.to_owned(), count(engines.copy)),
        (DECODERS.to_owned(), count(engines.decoder)),
        (ENCODERS.to_owned(), count(engines.encoder)),
        (JPEG_ENGINES.to_owned(), count(engines.jpeg)),
        (OFA_ENGINES.to_owned(), count(engines.ofa)),
    ]);
    for slice in mig.placement_start..mig.placement_start + mig.memory_slices {
        capacities.insert(format!("memorySlice{slice}"), count(1));
    }
    Device {
        name: mig_device_name(gpu.index, mig),
        attributes: Some(attributes),
        capacity: Some(capacities),
        taints: taints(gpu),
        ..Default::default()
    }
}

/// The spec of `node`'s one ResourceSlice for driver `gpu.nvidia.com`: a pool named after the
/// node (NVIDIA's driver and the reference do the same), `generation` raised by the caller
/// whenever the devices change.
pub fn gpu_slice_spec(node: &str, topology: &NodeTopology, generation: i64) -> ResourceSliceSpec {
    ResourceSliceSpec {
        driver: GPU_DRIVER.to_owned(),
        node_name: Some(node.to_owned()),
        pool: ResourcePool {
            name: node.to_owned(),
            generation,
            resource_slice_count: 1,
        },
        devices: Some(gpu_devices(topology)),
        ..Default::default()
    }
}

/// The GPU slice `name` of `node` for `topology`, labelled `labels` (see [`node_slice`]).
pub fn gpu_slice(
    name: &str,
    node: &impl Resource<DynamicType = ()>,
    labels: BTreeMap<String, String>,
    topology: &NodeTopology,
    current: Option<&impl KnownSlice>,
) -> ResourceSlice {
    node_slice(
        name,
        node,
        labels,
        gpu_slice_spec(&node.name_any(), topology, 0),
        current,
    )
}

/// The IMEX channel devices of a node, as NVIDIA's compute-domain plugin publishes them: only
/// `channel-0` (the plugin knows 2048 but leaves the others out of its slice), attributes
/// `type` = `channel` and `id` = 0.
pub fn channel_slice_spec(node: &str) -> ResourceSliceSpec {
    use fakegpu_model::names::compute_domain::{DRIVER, ID_ATTRIBUTE, TYPE_CHANNEL};
    let attributes = BTreeMap::from([
        (attribute::TYPE.to_owned(), string(TYPE_CHANNEL)),
        (
            ID_ATTRIBUTE.to_owned(),
            DeviceAttribute {
                int: Some(0),
                ..Default::default()
            },
        ),
    ]);
    ResourceSliceSpec {
        driver: DRIVER.to_owned(),
        node_name: Some(node.to_owned()),
        pool: ResourcePool {
            name: node.to_owned(),
            generation: 0,
            resource_slice_count: 1,
        },
        devices: Some(vec![Device {
            name: "channel-0".to_owned(),
            attributes: Some(attributes),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Name of the ResourceSlice the node agent's kubelet plugin of DRA driver `driver` publishes
/// for `node`, `<node>-<driver>`. The operator removes it when the node's pool stops serving
/// the driver.
pub fn plugin_slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{driver}")
}

/// Slice `name` of `node` with `spec`'s devices, labelled `labels` and owned by the node (the
/// garbage collector removes it with the node). Its pool generation is `current`'s, raised by
/// one when the devices change (the scheduler trusts the newest generation of a pool).
pub fn node_slice(
    name: &str,
    node: &impl Resource<DynamicType = ()>,
    labels: BTreeMap<String, String>,
    mut spec: ResourceSliceSpec,
    current: Option<&impl KnownSlice>,
) -> ResourceSlice {
    spec.pool.generation = match current {
        Some(current) if current.same_devices(&spec) => current.spec().pool.generation,
        Some(current) => current.spec().pool.generation + 1,
        None => 1,
    };
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            owner_references: node.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..Default::default()
        },
        spec,
    }
}

/// What identifies a slice's devices (its pool generation aside). The time the API server
/// stamps on a taint it stores is not part of it: fakegpu never sets one.
pub fn device_identity(
    spec: &ResourceSliceSpec,
) -> (&String, &Option<String>, &String, Option<Vec<Device>>) {
    let devices = spec.devices.as_ref().map(|devices| {
        devices
            .iter()
            .map(|device| {
                let mut device = device.clone();
                for taint in device.taints.iter_mut().flatten() {
                    taint.time_added = None;
                }
                device
            })
            .collect()
    });
    (&spec.driver, &spec.node_name, &spec.pool.name, devices)
}

/// A slice as its writer knows it: whole (the node agent reads it from the API server), or as
/// a cache holds it with its devices dropped (the operator's, which keeps their digest).
pub trait KnownSlice: Resource {
    fn spec(&self) -> &ResourceSliceSpec;

    /// Whether its devices are those of `desired`.
    fn same_devices(&self, desired: &ResourceSliceSpec) -> bool;
}

impl KnownSlice for ResourceSlice {
    fn spec(&self) -> &ResourceSliceSpec {
        &self.spec
    }

    fn same_devices(&self, desired: &ResourceSliceSpec) -> bool {
        device_identity(&self.spec) == device_identity(desired)
    }
}

/// Whether `current` already is `desired` (as [`gpu_slice`] builds it).
pub fn slice_current<K: KnownSlice>(current: &K, desired: &ResourceSlice) -> bool {
    crate::meta::metadata_current(current, desired)
        && current.same_devices(&desired.spec)
        && current.spec().pool == desired.spec.pool
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakegpu_model::topology::{GpuTopology, NodeTopology};

    fn topology() -> NodeTopology {
        NodeTopology {
            gpu_memory: 81559,
            gpu_product: "NVIDIA H100 80GB HBM3".into(),
            driver_version: "550.163.01".into(),
            cuda_version: "12.4".into(),
            architecture: "Hopper".into(),
            brand: "Nvidia".into(),
            compute_capability: "9.0".into(),
            gpus: (0..2)
                .map(|index| GpuTopology {
                    id: format!("GPU-{index}"),
                    index,
                    pci_bus_id: format!("0000:0{}:00.0", index + 1),
                    pcie_root: "pci0000:00".into(),
                    numa_node: Some(0),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_gpu_reporting_an_xid_is_tainted_as_nvidia_s_driver_taints_it() {
        let mut topology = topology();
        topology.gpus[0].faults.xid = Some(13);
        topology.gpus[1].health = fakegpu_model::topology::Health::Unhealthy;
        let devices = gpu_devices(&topology);
        let taint = |device: &Device| {
            let taints = device.taints.as_ref().expect("tainted");
            assert_eq!(taints.len(), 1);
            let taint = &taints[0];
            assert_eq!(taint.key, "gpu.nvidia.com/xid");
            (
                taint.value.clone().unwrap_or_default(),
                taint.effect.clone(),
            )
        };
        // An application's XID is informational; a GPU out of service is not schedulable.
        assert_eq!(taint(&devices[0]), ("13".into(), "None".into()));
        assert_eq!(taint(&devices[1]), ("79".into(), "NoSchedule".into()));
        assert!(gpu_devices(&self::topology())[0].taints.is_none());
        // The time the API server stamps on a stored taint does not make the slice differ.
        let spec = gpu_slice_spec("n", &topology, 1);
        let mut stored = spec.clone();
        for device in stored.devices.iter_mut().flatten() {
            for taint in device.taints.iter_mut().flatten() {
                taint.time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            }
        }
        assert!(device_identity(&stored) == device_identity(&spec));
    }

    #[test]
    fn versions_are_published_as_nvidia_normalises_them() {
        assert_eq!(semver("550.163.01").as_deref(), Some("550.163.1"));
        assert_eq!(semver("580.65.06").as_deref(), Some("580.65.6"));
        assert_eq!(semver("555.42").as_deref(), Some("555.42.0"));
        assert_eq!(semver("12.4").as_deref(), Some("12.4.0"));
        assert_eq!(semver("9.0").as_deref(), Some("9.0.0"));
        assert_eq!(semver(""), None);
        assert_eq!(semver("1.2.3.4"), None);
        assert_eq!(semver("12.x"), None);
    }

    #[test]
    fn memory_is_a_canonical_binary_quantity() {
        assert_eq!(memory_quantity(40960).0, "40Gi");
        assert_eq!(memory_quantity(11441).0, "11441Mi");
        assert_eq!(memory_quantity(1024 * 1024).0, "1Ti");
    }

    #[test]
    fn device_names_map_back_to_indices() {
        assert_eq!(gpu_device_name(7), "gpu-7");
        assert_eq!(gpu_index("gpu-7"), Some(7));
        assert_eq!(gpu_index("gpu-0-mig-1g10gb-19-0"), None);
        assert_eq!(gpu_index("gpu-"), None);
        assert_eq!(gpu_index("channel-0"), None);
    }

    #[test]
    fn devices_carry_nvidias_attributes() {
        let devices = gpu_devices(&topology());
        assert_eq!(devices.len(), 2);
        let device = &devices[1];
        assert_eq!(device.name, "gpu-1");
        let attributes = device.attributes.as_ref().expect("attributes");
        let text = |key: &str| {
            let a = &attributes[key];
            a.string.clone().or(a.version.clone()).expect("set")
        };
        assert_eq!(text("type"), "gpu");
        assert_eq!(text("uuid"), "GPU-1");
        assert_eq!(text("productName"), "NVIDIA H100 80GB HBM3");
        assert_eq!(text("architecture"), "Hopper");
        assert_eq!(text("brand"), "Nvidia");
        assert_eq!(text("cudaComputeCapability"), "9.0.0");
        assert_eq!(text("driverVersion"), "550.163.1");
        assert_eq!(text("cudaDriverVersion"), "12.4.0");
        assert_eq!(text("resource.kubernetes.io/pciBusID"), "0000:02:00.0");
        assert_eq!(text("resource.kubernetes.io/pcieRoot"), "pci0000:00");
        assert_eq!(text("model"), text("productName"));
        assert_eq!(attributes["resource.kubernetes.io/numaNode"].int, Some(0));
        // Versions are typed as versions, so CEL's semver comparisons work on them.
        assert!(attributes["driverVersion"].string.is_none());
        let memory = &device.capacity.as_ref().expect("capacity")["memory"];
        assert_eq!(memory.value.0, "81559Mi");
    }

    #[test]
    fn unknown_capability_is_left_out_rather_than_invented() {
        let mut topology = topology();
        topology.compute_capability.clear();
        topology.gpus[0].numa_node = None;
        let devices = gpu_devices(&topology);
        let attributes = devices[0].attributes.as_ref().expect("attributes");
        assert!(!attributes.contains_key("cudaComputeCapability"));
        assert!(!attributes.contains_key("resource.kubernetes.io/numaNode"));
    }

    #[test]
    fn slice_is_one_pool_named_after_the_node() {
        let spec = gpu_slice_spec("node-1", &topology(), 4);
        assert_eq!(spec.driver, "gpu.nvidia.com");
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert_eq!(
            (
                spec.pool.name.as_str(),
                spec.pool.generation,
                spec.pool.resource_slice_count
            ),
            ("node-1", 4, 1)
        );
    }

    #[test]
    fn partitioned_gpus_publish_their_mig_devices() {
        let mut topology = topology();
        topology.gpus[0].mig_devices = vec![MigDevice {
            uuid: "MIG-a".into(),
            profile: "1g.10gb+me".into(),
            gi_profile_id: 20,
            placement_start: 6,
            memory_slices: 1,
            compute_slices: 1,
            memory: 9856,
            multiprocessors: 14,
            engines: fakegpu_model::profiles::MigEngines {
                copy: 1,
                decoder: 1,
                encoder: 0,
                jpeg: 1,
                ofa: 1,
            },
            ..Default::default()
        }];
        let devices = gpu_devices(&topology);
        let mig = &devices[0];
        assert_eq!(mig.name, "gpu-0-mig-1g10gb-me-20-6");
        let attributes = mig.attributes.as_ref().expect("attributes");
        assert_eq!(attributes["type"].string.as_deref(), Some("mig"));
        assert_eq!(attributes["uuid"].string.as_deref(), Some("MIG-a"));
        assert_eq!(
            attributes["parentUUID"].string.as_deref(),
            Some(topology.gpus[0].id.as_str())
        );
        assert_eq!(attributes["profile"].string.as_deref(), Some("1g.10gb+me"));
        // A MIG device sits on its parent's NUMA node.
        assert_eq!(attributes["resource.kubernetes.io/numaNode"].int, Some(0));
        let capacity = mig.capacity.as_ref().expect("capacity");
        assert_eq!(capacity["memory"].value.0, "9856Mi");
        assert_eq!(capacity["multiprocessors"].value.0, "14");
        for (name, value) in [
            ("copyEngines", "1"),
            ("decoders", "1"),
            ("encoders", "0"),
            ("jpegEngines", "1"),
            ("ofaEngines", "1"),
        ] {
            assert_eq!(capacity[name].value.0, value, "{name}");
        }
        assert!(capacity.contains_key("memorySlice6") && !capacity.contains_key("memorySlice7"));
        // The other GPU stays whole.
        assert_eq!(devices[1].name, "gpu-1");
        assert_eq!(
            device_uuid(&topology, "gpu-0-mig-1g10gb-me-20-6"),
            Some("MIG-a")
        );
        assert_eq!(device_uuid(&topology, "gpu-0"), None);
        assert_eq!(
            device_uuid(&topology, "gpu-1"),
            Some(topology.gpus[1].id.as_str())
        );
    }
}
