//! Driver `gpu.nvidia.com`: the node's GPUs and MIG devices, by the topology document.

use fakegpu_api::dra::{device_uuid, gpu_slice};
use fakegpu_model::names::resource::GPU_DRIVER;
use k8s_openapi::api::{
    core::v1::Node,
    resource::v1::{ResourceClaim, ResourceSlice},
};
use kube::ResourceExt;
use serde_json::Value;

use super::{
    cdi,
    checkpoint::{PreparedClaim, PreparedDevice},
    devices::Devices,
    driver::{node_results, opaque_configs, prepared_claim},
    sharing,
    slice::labels,
};
use crate::{container::ContainerEdits, topology_source::Topology};

#[derive(Debug)]
pub struct GpuDevices {
    pub topology: Topology,
    /// What every GPU container also gets (the `common` CDI device).
    pub container: ContainerEdits,
}

impl Devices for GpuDevices {
    fn driver(&self) -> &'static str {
        GPU_DRIVER
    }

    fn cdi_kind(&self) -> &'static str {
        cdi::GPU_KIND
    }

    fn plan(&self, claim: &ResourceClaim, uid: &str, node: &str) -> Result<PreparedClaim, String> {
        let topology = self.topology.borrow().clone();
        let devices = node_results(claim, uid, GPU_DRIVER, node)?
            .into_iter()
            .map(|result| {
                let uuid = topology
                    .as_deref()
                    .and_then(|t| device_uuid(t, &result.device))
                    .ok_or_else(|| {
                        format!(
                            "requested GPU {} is not allocatable on {node}",
                            result.device
                        )
                    })?;
                let sharing =
                    sharing::for_request(opaque_configs(claim, GPU_DRIVER, &result.request))?;
                Ok(PreparedDevice {
                    request: result.request.clone(),
                    pool: result.pool.clone(),
                    device: result.device.clone(),
                    uuid: uuid.to_owned(),
                    channel: None,
                    sharing: Some(sharing),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(prepared_claim(claim, devices))
    }

    fn claim_spec(&self, uid: &str, claim: &PreparedClaim) -> Value {
        cdi::gpu_claim_spec(uid, &claim.devices)
    }

    fn common(&self) -> Option<(&'static str, Value)> {
        let edits = &self.container;
        Some((
            cdi::COMMON_DEVICE,
            cdi::common_spec(&edits.env(), &edits.mounts()),
        ))
    }

    fn slice(&self, node: &Node, current: Option<&ResourceSlice>) -> Option<ResourceSlice> {
        let document = self.topology.borrow().clone()?;
        if !document.serves_driver(GPU_DRIVER) {
            return None;
        }
        let name = self.slice_name(&node.name_any());
        Some(gpu_slice(
            &name,
            node,
            labels(&document.pool),
            &document,
            current,
        ))
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::topology::{GpuTopology, MigDevice, NodeTopology};
    use serde_json::json;
    use tokio::sync::watch;

    use super::*;
    use crate::dra::sharing::Sharing;

    fn devices(topology: NodeTopology) -> GpuDevices {
        let (_, receiver) = watch::channel(Some(std::sync::Arc::new(topology)));
        GpuDevices {
            topology: receiver,
            container: ContainerEdits {
                node: "n".into(),
                exporter_url: "http://e".into(),
                nvidia_smi: "/nonexistent".into(),
                nvml_dir: "/nonexistent".into(),
            },
        }
    }

    pub(crate) fn claim(results: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results}}},
        }))
        .expect("test claim")
    }

    fn topology() -> NodeTopology {
        NodeTopology {
            gpus: (0..2)
                .map(|index| GpuTopology {
                    id: format!("GPU-{index}"),
                    index,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn result(pool: &str, device: &str) -> serde_json::Value {
        json!({"driver": "gpu.nvidia.com", "pool": pool, "device": device, "request": "gpu"})
    }

    #[test]
    fn publishes_the_node_s_gpus_only_while_its_pool_serves_dra() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n", "uid": "u"}}))
            .expect("test node");
        // A document of a writer before `draDrivers`: published as before.
        let slice = devices(topology()).slice(&node, None).expect("published");
        assert_eq!(slice.metadata.name.as_deref(), Some("n-gpu.nvidia.com"));
        assert_eq!(slice.spec.devices.map_or(0, |d| d.len()), 2);
        let mut served = topology();
        served.dra_drivers = Some(vec!["gpu.nvidia.com".into()]);
        assert!(devices(served).slice(&node, None).is_some());
        // The pool stopped serving DRA (the plugin stays for the claims its pods hold).
        let mut stopped = topology();
        stopped.dra_drivers = Some(vec!["compute-domain.nvidia.com".into()]);
        assert!(devices(stopped).slice(&node, None).is_none());
    }

    #[test]
    fn plans_the_node_s_gpus_of_the_claim() {
        let other =
            json!({"driver": "other.example.com", "pool": "x", "device": "d", "request": "r"});
        let gpus = devices(topology());
        let plan = gpus
            .plan(&claim(json!([result("n", "gpu-1"), other])), "u1", "n")
            .expect("plans");
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].uuid, "GPU-1");
    }

    #[test]
    fn plans_mig_devices_by_their_instance_uuid() {
        let mut t = topology();
        t.gpus[0].mig_devices = vec![MigDevice {
            uuid: "MIG-x".into(),
            profile: "3g.40gb".into(),
            gi_profile_id: 9,
            placement_start: 4,
            ..Default::default()
        }];
        let gpus = devices(t);
        let plan = gpus
            .plan(
                &claim(json!([result("n", "gpu-0-mig-3g40gb-9-4")])),
                "u1",
                "n",
            )
            .expect("plans");
        assert_eq!(plan.devices[0].uuid, "MIG-x");
        // The partitioned GPU itself is no longer a device of the node.
        let whole = gpus
            .plan(&claim(json!([result("n", "gpu-0")])), "u1", "n")
            .expect_err("refused");
        assert!(whole.contains("not allocatable"), "{whole}");
    }

    #[test]
    fn shares_as_the_claim_s_opaque_configuration_says() {
        let gpus = devices(topology());
        let mut with_config = claim(json!([result("n", "gpu-0")]));
        with_config.spec = serde_json::from_value(json!({"devices": {"config": [{"opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}]}}))
        .expect("spec");
        let plan = gpus.plan(&with_config, "u1", "n").expect("plans");
        assert_eq!(
            plan.devices[0].sharing,
            Some(Sharing::TimeSlicing {
                interval: "Long".into()
            })
        );
        // Without configuration: the reference's default.
        let plan = gpus
            .plan(&claim(json!([result("n", "gpu-0")])), "u1", "n")
            .expect("plans");
        assert_eq!(plan.devices[0].sharing, Some(Sharing::default()));
        // A configuration neither driver takes fails the prepare, naming the field.
        let mut bad = with_config;
        bad.spec = serde_json::from_value(json!({"devices": {"config": [{"opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "Exclusive"}}}}]}}))
        .expect("spec");
        let error = gpus.plan(&bad, "u1", "n").expect_err("refused");
        assert!(error.contains("sharing.strategy"), "{error}");
    }

    #[test]
    fn refuses_what_it_cannot_prepare() {
        let gpus = devices(topology());
        let error =
            |claim: ResourceClaim, uid: &str| gpus.plan(&claim, uid, "n").expect_err("refused");
        assert!(
            error(claim(json!([result("n", "gpu-0")])), "other")
                .contains("deleted and created again")
        );
        assert!(error(claim(json!([result("m", "gpu-0")])), "u1").contains("not on node n"));
        assert!(error(claim(json!([result("n", "gpu-7")])), "u1").contains("not allocatable"));
        let unallocated: ResourceClaim = serde_json::from_value(
            json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"}, "spec": {}}),
        )
        .expect("claim");
        assert!(error(unallocated, "u1").contains("not yet allocated"));
    }
}
