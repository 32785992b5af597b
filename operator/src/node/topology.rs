//! The per-node topology ConfigMap: the document that the node agent, the metrics exporter and
//! nvidia-smi read, built from the pool and the node.

use std::collections::BTreeMap;

use fakegpu_api::{
    faults::{GpuFault, on_gpu},
    meta,
    pool::{GpuNodePool, Interfaces, NumaSpec, resolve::ResolvedGpu},
};
use fakegpu_model::{
    names::{annotation, compute_domain, fakegpu::POOL_LABEL, resource, topology as names},
    topology::{
        FORMAT_VERSION, GpuTopology, Health, MigDevice, NodeTopology, OtherDevice, gpu_uuid,
        mig_uuid, pci_address,
    },
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Resource, ResourceExt, api::ObjectMeta};
use serde::Serialize;

use crate::{
    kit::apply,
    kit::cache::{Cached, Digest, Trim, same_content},
};

/// NUMA zone of each GPU index: `gpusPerZone` when given, else an even spread with the first
/// zones taking one more (the reference's rule). Zones are filled in index order.
pub fn numa_zones(numa: &NumaSpec, gpus: u32) -> Vec<u32> {
    let zones = numa.zones.max(1);
    let per_zone: Vec<u32> = if numa.gpus_per_zone.is_empty() {
        (0..zones)
            .map(|zone| gpus / zones + u32::from(zone < gpus % zones))
            .collect()
    } else {
        numa.gpus_per_zone.clone()
    };
    let mut placement: Vec<u32> = per_zone
        .iter()
        .zip(0..)
        .flat_map(|(count, zone)| std::iter::repeat_n(zone, *count as usize))
        .collect();
    // A pool stored under an older CRD may not add up; the last zone takes what is left over.
    placement.resize(gpus as usize, zones - 1);
    placement
}

/// What the user says fails on a node: GPUs marked unhealthy, and injected faults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Failing<'a> {
    /// Indices from `fakegpu.dev/unhealthy-gpus`.
    pub unhealthy: &'a [u32],
    /// The pool's and the node's fault declarations, in order.
    pub faults: &'a [GpuFault],
}

/// The topology of `node` as `pool` wants it, for a node serving `served` of the pool's
/// interfaces (see [`super::interfaces`]). GPU usage already recorded in `previous` (by pod
/// tracking) is kept for GPUs that still exist. A GPU marked unhealthy, or with a fault that
/// takes it out of service, is `Unhealthy`.
pub fn desired_topology(
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
    served: &Interfaces,
    node: &str,
    previous: Option<&NodeTopology>,
    failing: &Failing<'_>,
) -> NodeTopology {
    let zones = pool
        .spec
        .numa
        .as_ref()
        .map(|numa| numa_zones(numa, gpu.count));
    let mut slots_taken = BTreeMap::<u32, u32>::new();
    let gpus = (0..gpu.count)
        .map(|index| {
            let id = gpu_uuid(node, index);
            let before = previous.and_then(|p| p.gpus.iter().find(|g| g.id == id));
            let status = before.map(|g| g.status.clone()).unwrap_or_default();
            let numa_node = zones.as_ref().and_then(|z| z.get(index as usize).copied());
            let slot = slots_taken.entry(numa_node.unwrap_or(0)).or_default();
            let (pci_bus_id, pcie_root) = pci_address(numa_node.unwrap_or(0), *slot);
            *slot += 1;
            let mig_devices = gpu
                .mig
                .as_ref()
                .and_then(|plan| plan.gpus.get(&index))
                .into_iter()
                .flatten()
                .map(|instance| {
                    let uuid = mig_uuid(node, index, instance.placement_start);
                    let status = before
                        .and_then(|g| g.mig_devices.iter().find(|m| m.uuid == uuid))
                        .map(|m| m.status.clone())
                        .unwrap_or_default();
                    (uuid, status, instance)
                })
                .map(|(uuid, status, instance)| MigDevice {
                    status,
                    ..MigDevice::new(uuid, instance.profile, instance.placement_start)
                })
                .collect();
            let faults = on_gpu(index, failing.faults);
            GpuTopology {
                numa_node,
                mig_devices,
                id,
                index,
                pci_bus_id,
                pcie_root,
                health: if failing.unhealthy.contains(&index) || faults.out_of_service() {
                    Health::Unhealthy
                } else {
                    Health::Healthy
                },
                faults,
                status,
            }
        })
        .collect();
    NodeTopology {
        version: FORMAT_VERSION,
        pool: pool.name_any(),
        gpu_memory: gpu.memory_mib,
        gpu_product: gpu.product.clone(),
        driver_version: gpu.driver_version.clone(),
        cuda_version: gpu.cuda_version.clone(),
        mig_strategy: gpu.mig_strategy_name().into(),
        architecture: gpu.architecture().into(),
        brand: gpu.brand().into(),
        compute_capability: gpu
            .compute_capability
            .map(|cc| cc.to_string())
            .unwrap_or_default(),
        power_limit_watts: gpu.catalog.map_or(0, |p| p.power_limit_watts),
        other_devices: pool
            .spec
            .other_resources
            .iter()
            .map(|r| OtherDevice {
                name: r.name.clone(),
                count: r.count,
            })
            .collect(),
        dra_drivers: Some(served_drivers(served)),
        device_plugin: (!served.device_plugin).then_some(false),
        gpus,
    }
}

/// The document of a node of `pool` serving all of it, with nothing failing and no usage.
#[cfg(test)]
pub(crate) fn fresh_document(pool: &GpuNodePool, gpu: &ResolvedGpu, node: &str) -> NodeTopology {
    desired_topology(
        pool,
        gpu,
        &pool.spec.interfaces,
        node,
        None,
        &Failing::default(),
    )
}

/// The DRA drivers of the node's `interfaces`, whose kubelet plugins publish its devices.
fn served_drivers(interfaces: &Interfaces) -> Vec<String> {
    [
        (interfaces.dra, resource::GPU_DRIVER),
        (interfaces.compute_domains, compute_domain::DRIVER),
    ]
    .into_iter()
    .filter(|(served, _)| *served)
    .map(|(_, driver)| driver.to_owned())
    .collect()
}

/// The ConfigMap holding `document` for `node`. It is owned by the Node, so the garbage
/// collector removes it with the node; the operator deletes it when the node leaves its pool.
pub fn desired_configmap(
    namespace: &str,
    node: &impl Resource<DynamicType = ()>,
    pool: &str,
    document: String,
    allocated_gpus: u32,
) -> ConfigMap {
    let name = node.name_any();
    let labels = [
        (names::NODE_TOPOLOGY_LABEL.to_owned(), "true".to_owned()),
        (POOL_LABEL.to_owned(), pool.to_owned()),
    ]
    .into_iter()
    .chain(fakegpu_api::meta::node_name_label(&name))
    .collect::<BTreeMap<_, _>>();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(NodeTopology::configmap_name(&name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                annotation::ALLOCATED_GPUS.to_owned(),
                allocated_gpus.to_string(),
            )])),
            owner_references: node.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(names::DATA_KEY.to_owned(), document)])),
        ..Default::default()
    }
}

/// What a topology ConfigMap's cache keeps in place of what it drops, and of its metadata what
/// the controllers read: the node it is about, its pool and the GPUs pods hold on the node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeptOfTopology {
    /// The digest of a free document, dropped: [`desired_topology`] takes nothing but usage
    /// from a previous document, so a free one is as good as none, and the digest still tells
    /// whether the ConfigMap is current.
    document: Option<Digest>,
    /// The digest of the labels, annotations and owners, dropped when fakegpu alone wrote the
    /// ConfigMap: they are then exactly what it wrote, so equal digests say they are current.
    metadata: Option<Digest>,
    node: Option<String>,
    pool: Option<String>,
    allocated_gpus: u32,
}

impl KeptOfTopology {
    /// The node the document is about (the ConfigMap's node-name label).
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// The pool the node was in when the document was written (the ConfigMap's pool label).
    pub fn pool(&self) -> Option<&str> {
        self.pool.as_deref()
    }

    /// GPUs of the node that pods hold, as pod tracking last recorded it (the ConfigMap's
    /// allocated-GPUs annotation; 0 without one).
    pub fn allocated_gpus(&self) -> u32 {
        self.allocated_gpus
    }
}

/// What of a topology ConfigMap's metadata the operator sets, as one digest.
fn metadata_digest(cm: &ConfigMap) -> Digest {
    let meta = &cm.metadata;
    Digest::of(&(&meta.labels, &meta.annotations, &meta.owner_references))
}

/// A topology ConfigMap's cache drops its document when no GPU in it is in use, its managed
/// fields, and its labels, annotations and owners when fakegpu alone wrote it (see
/// [`KeptOfTopology`]). At 10 000 idle nodes the documents were a third of what the operator
/// held; then the metadata, three small maps a ConfigMap, about a tenth. Only topology
/// ConfigMaps are cached this way.
impl Trim for ConfigMap {
    type Trimmed = Self;
    type Kept = KeptOfTopology;

    fn trim(mut cm: ConfigMap, written_by_fakegpu_alone: bool) -> (ConfigMap, KeptOfTopology) {
        let node =
            fakegpu_api::meta::node_of_configmap(&cm, names::CONFIGMAP_PREFIX).map(str::to_owned);
        let pool = cm.labels().get(POOL_LABEL).cloned();
        let allocated_gpus = cm
            .annotations()
            .get(annotation::ALLOCATED_GPUS)
            .and_then(|count| count.parse().ok())
            .unwrap_or(0);
        let metadata = written_by_fakegpu_alone.then(|| {
            let digest = metadata_digest(&cm);
            cm.metadata.labels = None;
            cm.metadata.annotations = None;
            cm.metadata.owner_references = None;
            digest
        });
        apply::drop_managed_fields(&mut cm);
        let free = NodeTopology::from_configmap_data(cm.data.as_ref())
            .is_ok_and(|doc| !doc.gpus.iter().any(GpuTopology::in_use));
        let kept = KeptOfTopology {
            document: free.then(|| Digest::of(&cm.data.take())),
            metadata,
            node,
            pool,
            allocated_gpus,
        };
        (cm, kept)
    }
}

/// Whether the cached ConfigMap (whole, or without a free document or its metadata) already is
/// the desired one (what this operator sets of it).
pub fn configmap_current(current: &Cached<ConfigMap>, desired: &ConfigMap) -> bool {
    let trimmed = current.trimmed();
    let kept = current.kept();
    let metadata = match kept.metadata {
        Some(digest) => digest == metadata_digest(desired),
        None => meta::metadata_current(trimmed, desired),
    };
    metadata && same_content(&trimmed.data, kept.document, &desired.data)
}

#[cfg(test)]
mod tests {
    use fakegpu_api::pool::resolve::resolve;
    use serde_json::json;

    use super::*;

    fn pool(spec: serde_json::Value) -> std::sync::Arc<GpuNodePool> {
        crate::testing::pool("p", 0, spec)
    }

    fn numa(value: serde_json::Value) -> NumaSpec {
        serde_json::from_value(value).expect("test numa")
    }

    #[test]
    fn gpus_spread_over_zones_like_the_reference() {
        assert_eq!(
            numa_zones(&numa(json!({"zones": 2})), 8),
            [0, 0, 0, 0, 1, 1, 1, 1]
        );
        assert_eq!(
            numa_zones(&numa(json!({"zones": 3})), 8),
            [0, 0, 0, 1, 1, 1, 2, 2]
        );
        assert_eq!(
            numa_zones(&numa(json!({"zones": 2, "gpusPerZone": [1, 3]})), 4),
            [0, 1, 1, 1]
        );
        assert_eq!(
            numa_zones(&numa(json!({"zones": 2, "gpusPerZone": [1, 1]})), 4),
            [0, 1, 1, 1]
        );
    }

    #[test]
    fn the_document_names_the_dra_drivers_the_pool_serves() {
        let drivers = |interfaces: serde_json::Value| {
            let pool = pool(json!({"gpu": {"profile": "gb200"}, "interfaces": interfaces}));
            let gpu = resolve(&pool.spec.gpu).expect("resolves");
            let document = fresh_document(&pool, &gpu, "n");
            [resource::GPU_DRIVER, compute_domain::DRIVER].map(|d| document.serves_driver(d))
        };
        assert_eq!(drivers(json!({"devicePlugin": true})), [false, false]);
        assert_eq!(drivers(json!({"dra": true})), [true, false]);
        assert_eq!(
            drivers(json!({"dra": true, "computeDomains": true})),
            [true, true]
        );
    }

    #[test]
    fn the_document_says_when_the_node_s_device_plugin_is_off() {
        let pool = pool(json!({"gpu": {"profile": "t4"}, "interfaces": {"dra": true}}));
        let gpu = resolve(&pool.spec.gpu).expect("resolves");
        let of = |served: &Interfaces| {
            desired_topology(&pool, &gpu, served, "n", None, &Failing::default())
        };
        let both = of(&pool.spec.interfaces);
        assert!(both.serves_device_plugin() && both.serves_driver(resource::GPU_DRIVER));
        // Old readers see no new key on a node serving the device plugin.
        assert!(!both.to_yaml().expect("yaml").contains("devicePlugin"));
        let dra_only = Interfaces {
            device_plugin: false,
            ..pool.spec.interfaces
        };
        let document = of(&dra_only);
        assert!(!document.serves_device_plugin());
        assert!(
            document
                .to_yaml()
                .expect("yaml")
                .contains("devicePlugin: false")
        );
    }

    #[test]
    fn document_lists_every_gpu_with_deterministic_ids() {
        let pool = pool(json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2},
            "otherResources": [{"name": "nvidia.com/hostdev", "count": 2}]}));
        let gpu = resolve(&pool.spec.gpu).expect("resolves");
        let document = fresh_document(&pool, &gpu, "node-1");
        assert_eq!(document.gpus.len(), 8);
        assert_eq!(document.gpus[5].id, gpu_uuid("node-1", 5));
        assert_eq!(document.gpus[5].numa_node, Some(1));
        // Zone 1's second GPU: its own PCI domain, second bus.
        assert_eq!(
            (
                document.gpus[5].pci_bus_id.as_str(),
                document.gpus[5].pcie_root.as_str()
            ),
            ("0001:02:00.0", "pci0001:00")
        );
        assert_eq!(document.gpus[0].pci_bus_id, "0000:01:00.0");
        assert_eq!(
            (
                document.architecture.as_str(),
                document.compute_capability.as_str()
            ),
            ("Ampere", "8.0")
        );
        assert_eq!(
            (document.gpu_memory, document.gpu_product.as_str()),
            (40960, "NVIDIA A100-SXM4-40GB")
        );
        assert_eq!(document.other_devices[0].name, "nvidia.com/hostdev");
        assert_eq!(document.mig_strategy, "none");
        assert_eq!(document, fresh_document(&pool, &gpu, "node-1"));
        let failing = Failing {
            unhealthy: &[1],
            ..Failing::default()
        };
        let failed = desired_topology(&pool, &gpu, &pool.spec.interfaces, "node-1", None, &failing);
        let health: Vec<_> = failed.gpus.iter().map(|g| g.health).collect();
        assert_eq!(health[1], Health::Unhealthy);
        assert_eq!(
            health.iter().filter(|h| h.is_healthy()).count(),
            health.len() - 1
        );
        assert!(!failed.to_yaml().expect("yaml").contains("health: Healthy"));
        // An application's XID leaves its GPU in service; an ECC error does not.
        let faults = fakegpu_api::faults::parse_annotation(
            r#"[{"gpus": [0], "xid": 13}, {"gpus": [2], "eccUncorrectable": 1}]"#,
        )
        .expect("valid");
        let faulty = desired_topology(
            &pool,
            &gpu,
            &pool.spec.interfaces,
            "node-1",
            None,
            &Failing {
                faults: &faults,
                ..Failing::default()
            },
        );
        let health: Vec<_> = faulty.gpus.iter().map(|g| g.health.is_healthy()).collect();
        assert_eq!(health[..3], [true, true, false]);
        assert_eq!(faulty.gpus[0].faults.xid, Some(13));
        assert!(faulty.gpus[1].faults.is_empty());
    }

    #[test]
    fn usage_recorded_by_pod_tracking_survives_a_rebuild() {
        let pool = pool(json!({"gpu": {"profile": "t4"}}));
        let gpu = resolve(&pool.spec.gpu).expect("resolves");
        let mut previous = fresh_document(&pool, &gpu, "n");
        previous.gpus[1].status.allocated_by.pod = "train-0".into();
        let rebuilt = desired_topology(
            &pool,
            &gpu,
            &pool.spec.interfaces,
            "n",
            Some(&previous),
            &Failing::default(),
        );
        assert_eq!(rebuilt.gpus[1].status.allocated_by.pod, "train-0");
        assert_eq!(rebuilt.gpus[0].status, Default::default());
    }

    #[test]
    fn configmap_is_labelled_and_owned_by_the_node() {
        let node = node_with_uid("u-1");
        let cm = desired_configmap("fakegpu-system", &node, "p", "doc".into(), 2);
        assert_eq!(cm.name_any(), "topology-n");
        assert_eq!(cm.labels()["node-topology"], "true");
        assert_eq!(cm.labels()["node-name"], "n");
        assert_eq!(cm.owner_references()[0].uid, "u-1");
        assert_eq!(cm.annotations()["fakegpu.dev/allocated-gpus"], "2");
        let cached = |cm: &ConfigMap| Cached::new(cm.clone());
        assert!(configmap_current(&cached(&cm), &cm));
        let mut edited = cm.clone();
        edited.data = Some(BTreeMap::from([("topology.yml".into(), "garbage".into())]));
        assert!(!configmap_current(&cached(&edited), &cm));
    }

    /// Node `n` with `uid`.
    fn node_with_uid(uid: &str) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "uid": uid}})).expect("test node")
    }

    /// `cm` as the API server returns it after `manager` wrote it.
    fn written_by(cm: &ConfigMap, manager: &str) -> ConfigMap {
        let mut written = cm.clone();
        written.metadata.managed_fields = Some(vec![
            serde_json::from_value(json!({"manager": manager, "operation": "Update"}))
                .expect("entry"),
        ]);
        written
    }

    #[test]
    fn a_cache_keeps_the_metadata_fakegpu_alone_wrote_as_a_digest() {
        let node = node_with_uid("u-1");
        let cm = desired_configmap("ns", &node, "p", "doc".into(), 3);
        let ours = Cached::new(written_by(&cm, fakegpu_model::names::FIELD_MANAGER));
        let meta = &ours.trimmed().metadata;
        assert_eq!((&meta.labels, &meta.annotations), (&None, &None));
        assert_eq!(meta.owner_references, None);
        assert_eq!(meta.name.as_deref(), Some("topology-n"));
        assert_eq!(ours.kept().node(), Some("n"));
        assert_eq!(ours.kept().pool(), Some("p"));
        assert_eq!(ours.kept().allocated_gpus(), 3);
        assert!(configmap_current(&ours, &cm));
        // Each of what the operator sets, changed, makes it out of date.
        let other_node = node_with_uid("u-2");
        for changed in [
            desired_configmap("ns", &node, "p", "doc".into(), 2),
            desired_configmap("ns", &node, "q", "doc".into(), 3),
            desired_configmap("ns", &other_node, "p", "doc".into(), 3),
        ] {
            assert!(!configmap_current(&ours, &changed), "{changed:?}");
        }
        // Someone else's label: the cache keeps the metadata whole and theirs does not count.
        let mut labelled = written_by(&cm, "kubectl");
        labelled.labels_mut().insert("team".into(), "a".into());
        let theirs = Cached::new(labelled);
        assert_eq!(theirs.trimmed().labels()["team"], "a");
        assert_eq!(theirs.kept().node(), Some("n"));
        assert_eq!(theirs.kept().allocated_gpus(), 3);
        assert!(configmap_current(&theirs, &cm));
        assert!(!configmap_current(
            &theirs,
            &desired_configmap("ns", &node, "p", "doc".into(), 2)
        ));
    }

    #[test]
    fn a_cache_keeps_documents_in_use_and_digests_free_ones() {
        let node = node_with_uid("u-1");
        let pool = pool(json!({"gpu": {"profile": "t4"}}));
        let gpu = resolve(&pool.spec.gpu).expect("resolves");
        let free = fresh_document(&pool, &gpu, "n");
        let cm = |doc: &NodeTopology| {
            desired_configmap("ns", &node, "p", doc.to_yaml().expect("yaml"), 0)
        };
        let cached = Cached::new(cm(&free));
        assert_eq!(cached.trimmed().data, None);
        assert!(configmap_current(&cached, &cm(&free)));
        let mut used = free.clone();
        used.gpus[1].status.allocated_by.pod = "train-0".into();
        assert!(!configmap_current(&cached, &cm(&used)));
        // A document in use is what a rebuild keeps usage from: it stays whole.
        let cached = Cached::new(cm(&used));
        assert_eq!(cached.trimmed().data, cm(&used).data);
        assert!(configmap_current(&cached, &cm(&used)));
        assert!(NodeTopology::from_configmap_data(cached.trimmed().data.as_ref()).is_ok());
    }
}
