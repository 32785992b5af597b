//! The DRA kubelet plugin service (`DRAPlugin`, versions v1 and v1beta1) for driver
//! `gpu.nvidia.com`: prepares a claim's GPUs for its pod's containers (a CDI spec, recorded in
//! the checkpoint) and unprepares them. Both calls are idempotent, as the kubelet retries them.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use fakegpu_api::{dra::device_uuid, names::resource::GPU_DRIVER, topology::NodeTopology};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::{Api, Client, ResourceExt};
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::{
    cdi,
    checkpoint::{Checkpoint, PreparedClaim, PreparedDevice},
};
use crate::{
    metrics::Metrics,
    proto::dra::{v1, v1beta1},
    topology_source::Topology,
};

/// Where the driver keeps its files.
#[derive(Clone, Debug)]
pub struct Paths {
    pub cdi_dir: PathBuf,
    pub checkpoint: PathBuf,
}

pub struct GpuDriver {
    pub node: String,
    pub client: Client,
    pub topology: Topology,
    pub paths: Paths,
    /// The prepared claims; the lock also serialises prepares, so the file and the specs
    /// always agree.
    pub prepared: Mutex<Checkpoint>,
    pub metrics: Metrics,
}

impl std::fmt::Debug for GpuDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDriver")
            .field("node", &self.node)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// The devices of `claim` this node prepares, or why it cannot.
pub fn plan(
    claim: &ResourceClaim,
    uid: &str,
    node: &str,
    topology: Option<&NodeTopology>,
) -> Result<PreparedClaim, String> {
    if claim.uid().as_deref() != Some(uid) {
        return Err(format!(
            "claim {}/{} has UID {:?}, not {uid}: it was deleted and created again",
            claim.namespace().unwrap_or_default(),
            claim.name_any(),
            claim.uid().unwrap_or_default()
        ));
    }
    let allocation = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .ok_or("claim not yet allocated")?;
    let results = allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    let devices = results
        .iter()
        .filter(|r| r.driver == GPU_DRIVER)
        .map(|result| {
            if result.pool != node {
                return Err(format!(
                    "device {}/{} is in pool {}, not on node {node}",
                    result.pool, result.device, result.pool
                ));
            }
            let uuid = topology
                .and_then(|t| device_uuid(t, &result.device))
                .ok_or_else(|| {
                    format!(
                        "requested GPU {} is not allocatable on {node}",
                        result.device
                    )
                })?;
            Ok(PreparedDevice {
                request: result.request.clone(),
                pool: result.pool.clone(),
                device: result.device.clone(),
                uuid: uuid.to_owned(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(PreparedClaim {
        namespace: claim.namespace().unwrap_or_default(),
        name: claim.name_any(),
        devices,
    })
}

/// What the kubelet is told about a prepared claim's devices.
pub fn response_devices(uid: &str, claim: &PreparedClaim) -> Vec<v1::Device> {
    claim
        .devices
        .iter()
        .map(|d| v1::Device {
            request_names: vec![d.request.clone()],
            pool_name: d.pool.clone(),
            device_name: d.device.clone(),
            cdi_device_ids: vec![
                cdi::qualified(cdi::COMMON_DEVICE),
                cdi::qualified(&cdi::claim_device_name(uid, &d.device)),
            ],
            share_id: None,
        })
        .collect()
}

impl GpuDriver {
    /// Prepares every claim; one claim's failure is its own error, not the others'.
    pub async fn prepare(
        &self,
        claims: Vec<v1::Claim>,
    ) -> HashMap<String, v1::NodePrepareResourceResponse> {
        let mut prepared = self.prepared.lock().await;
        let mut responses = HashMap::new();
        for claim in claims {
            let response = match self.prepare_one(&mut prepared, &claim).await {
                Ok(devices) => v1::NodePrepareResourceResponse {
                    devices,
                    error: String::new(),
                },
                Err(error) => {
                    warn!(node = %self.node, claim = %format!("{}/{}", claim.namespace, claim.name), uid = %claim.uid, %error, "NodePrepareResources");
                    v1::NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error,
                    }
                }
            };
            self.metrics
                .call("NodePrepareResources", response.error.is_empty());
            responses.insert(claim.uid, response);
        }
        self.metrics.prepared_claims(prepared.claims.len());
        responses
    }

    async fn prepare_one(
        &self,
        prepared: &mut Checkpoint,
        claim: &v1::Claim,
    ) -> Result<Vec<v1::Device>, String> {
        if claim.uid.is_empty() || claim.name.is_empty() || claim.namespace.is_empty() {
            return Err("claim without namespace, name or UID".into());
        }
        if let Some(done) = prepared.claims.get(&claim.uid) {
            return Ok(response_devices(&claim.uid, done));
        }
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let object = api
            .get_opt(&claim.name)
            .await
            .map_err(|error| format!("reading claim {}/{}: {error}", claim.namespace, claim.name))?
            .ok_or_else(|| format!("claim {}/{} not found", claim.namespace, claim.name))?;
        let topology = self.topology.borrow().clone();
        let plan = plan(&object, &claim.uid, &self.node, topology.as_deref())?;
        let spec = cdi::claim_spec(&claim.uid, &plan.devices);
        let path = cdi::claim_spec_path(&self.paths.cdi_dir, &claim.uid);
        let bytes = serde_json::to_vec_pretty(&spec).map_err(|e| e.to_string())?;
        cdi::write_atomic(&path, &bytes)
            .map_err(|error| format!("writing CDI spec {}: {error}", path.display()))?;
        prepared.claims.insert(claim.uid.clone(), plan.clone());
        if let Err(error) = prepared.save(&self.paths.checkpoint) {
            prepared.claims.remove(&claim.uid);
            let _ = crate::remove_if_present(&path);
            return Err(format!("writing the checkpoint: {error}"));
        }
        info!(node = %self.node, claim = %format!("{}/{}", claim.namespace, claim.name), uid = %claim.uid, devices = plan.devices.len(), "prepared claim");
        Ok(response_devices(&claim.uid, &plan))
    }

    /// Unprepares every claim; a claim this node never prepared is already unprepared.
    pub async fn unprepare(
        &self,
        claims: Vec<v1::Claim>,
    ) -> HashMap<String, v1::NodeUnprepareResourceResponse> {
        let mut prepared = self.prepared.lock().await;
        let mut responses = HashMap::new();
        for claim in claims {
            let error = self
                .unprepare_one(&mut prepared, &claim)
                .err()
                .unwrap_or_default();
            responses.insert(claim.uid, v1::NodeUnprepareResourceResponse { error });
        }
        responses
    }

    fn unprepare_one(&self, prepared: &mut Checkpoint, claim: &v1::Claim) -> Result<(), String> {
        let path = cdi::claim_spec_path(&self.paths.cdi_dir, &claim.uid);
        crate::remove_if_present(&path)
            .map_err(|error| format!("removing {}: {error}", path.display()))?;
        if prepared.claims.remove(&claim.uid).is_some() {
            prepared
                .save(&self.paths.checkpoint)
                .map_err(|error| format!("writing the checkpoint: {error}"))?;
            info!(node = %self.node, claim = %format!("{}/{}", claim.namespace, claim.name), uid = %claim.uid, "unprepared claim");
        }
        Ok(())
    }
}

/// The service, as the kubelet's v1 client sees it.
#[derive(Debug, Clone)]
pub struct V1(pub Arc<GpuDriver>);

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for V1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        let claims = self.0.prepare(request.into_inner().claims).await;
        Ok(Response::new(v1::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        let claims = self.0.unprepare(request.into_inner().claims).await;
        Ok(Response::new(v1::NodeUnprepareResourcesResponse { claims }))
    }
}

/// The same service for kubelets that speak v1beta1 (the messages differ only in `share_id`).
#[derive(Debug, Clone)]
pub struct V1beta1(pub Arc<GpuDriver>);

fn to_v1(claims: Vec<v1beta1::Claim>) -> Vec<v1::Claim> {
    claims
        .into_iter()
        .map(|c| v1::Claim {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        })
        .collect()
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for V1beta1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let claims = self
            .0
            .prepare(to_v1(request.into_inner().claims))
            .await
            .into_iter()
            .map(|(uid, r)| {
                let devices = r
                    .devices
                    .into_iter()
                    .map(|d| v1beta1::Device {
                        request_names: d.request_names,
                        pool_name: d.pool_name,
                        device_name: d.device_name,
                        cdi_device_ids: d.cdi_device_ids,
                    })
                    .collect();
                (
                    uid,
                    v1beta1::NodePrepareResourceResponse {
                        devices,
                        error: r.error,
                    },
                )
            })
            .collect();
        Ok(Response::new(v1beta1::NodePrepareResourcesResponse {
            claims,
        }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let claims = self
            .0
            .unprepare(to_v1(request.into_inner().claims))
            .await
            .into_iter()
            .map(|(uid, r)| {
                (
                    uid,
                    v1beta1::NodeUnprepareResourceResponse { error: r.error },
                )
            })
            .collect();
        Ok(Response::new(v1beta1::NodeUnprepareResourcesResponse {
            claims,
        }))
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_api::topology::GpuTopology;
    use serde_json::json;

    use super::*;

    fn claim(results: serde_json::Value) -> ResourceClaim {
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
    fn plans_the_node_s_gpus_of_the_claim() {
        let other =
            json!({"driver": "other.example.com", "pool": "x", "device": "d", "request": "r"});
        let plan = plan(
            &claim(json!([result("n", "gpu-1"), other])),
            "u1",
            "n",
            Some(&topology()),
        )
        .expect("plans");
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].uuid, "GPU-1");
        let devices = response_devices("u1", &plan);
        assert_eq!(
            devices[0].cdi_device_ids,
            [
                "k8s.gpu.nvidia.com/claim=common",
                "k8s.gpu.nvidia.com/claim=u1-gpu-1"
            ]
        );
    }

    #[test]
    fn plans_mig_devices_by_their_instance_uuid() {
        let mut t = topology();
        t.gpus[0].mig_devices = vec![fakegpu_api::topology::MigDevice {
            uuid: "MIG-x".into(),
            profile: "3g.40gb".into(),
            gi_profile_id: 9,
            placement_start: 4,
            ..Default::default()
        }];
        let plan = plan(
            &claim(json!([result("n", "gpu-0-mig-3g40gb-9-4")])),
            "u1",
            "n",
            Some(&t),
        )
        .expect("plans");
        assert_eq!(plan.devices[0].uuid, "MIG-x");
        // The partitioned GPU itself is no longer a device of the node.
        let whole = plan_error(&claim(json!([result("n", "gpu-0")])), &t);
        assert!(whole.contains("not allocatable"), "{whole}");
    }

    fn plan_error(claim: &ResourceClaim, t: &NodeTopology) -> String {
        plan(claim, "u1", "n", Some(t)).expect_err("refused")
    }

    #[test]
    fn refuses_what_it_cannot_prepare() {
        let t = topology();
        let error = |claim: ResourceClaim, uid: &str| {
            plan(&claim, uid, "n", Some(&t)).expect_err("refused")
        };
        assert!(error(claim(json!([result("n", "gpu-0")])), "u2").contains("created again"));
        assert!(error(claim(json!([result("m", "gpu-0")])), "u1").contains("not on node n"));
        assert!(error(claim(json!([result("n", "gpu-7")])), "u1").contains("not allocatable"));
        let mut unallocated = claim(json!([]));
        unallocated.status = None;
        assert_eq!(error(unallocated, "u1"), "claim not yet allocated");
    }
}
