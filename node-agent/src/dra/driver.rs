//! The DRA kubelet plugin service (`DRAPlugin`, versions v1 and v1beta1) of one driver (see
//! [`super::devices`]): prepares a claim's devices for its pod's containers (a CDI spec,
//! recorded in the checkpoint) and unprepares them. Both calls are idempotent, as the kubelet
//! retries them.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::{
    cdi,
    checkpoint::{Checkpoint, PreparedClaim, PreparedDevice},
    devices::Devices,
};
use crate::{
    metrics::Metrics,
    proto::dra::{v1, v1beta1},
};

/// Where the driver keeps its files.
#[derive(Clone, Debug)]
pub struct Paths {
    pub cdi_dir: PathBuf,
    pub checkpoint: PathBuf,
}

pub struct Driver {
    pub node: String,
    pub client: Client,
    pub devices: Arc<dyn Devices>,
    pub paths: Paths,
    /// The prepared claims; the lock also serialises prepares, so the file and the specs
    /// always agree.
    pub prepared: Mutex<Checkpoint>,
    pub metrics: Metrics,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("node", &self.node)
            .field("driver", &self.devices.driver())
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// The opaque configuration parameters for `driver` that apply to the claim's `request`, in
/// order: the allocation's (what the scheduler fixed: the class's, then the claim's), then the
/// claim's spec's.
pub fn opaque_configs<'a>(
    claim: &'a ResourceClaim,
    driver: &'a str,
    request: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> + 'a {
    let applies = move |requests: Option<&Vec<String>>| {
        requests.is_none_or(|r| r.is_empty() || r.iter().any(|x| x == request))
    };
    let allocated = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.config.as_ref())
        .into_iter()
        .flatten()
        .filter(move |c| applies(c.requests.as_ref()))
        .filter_map(|c| c.opaque.as_ref());
    let requested = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.config.as_ref())
        .into_iter()
        .flatten()
        .filter(move |c| applies(c.requests.as_ref()))
        .filter_map(|c| c.opaque.as_ref());
    allocated
        .chain(requested)
        .filter(move |o| o.driver == driver)
        .map(|o| &o.parameters.0)
}

/// The allocation results of `claim` for `driver`, once the claim is the one the kubelet means
/// (UID `uid`) and allocated; each must be on `node`.
pub fn node_results<'a>(
    claim: &'a ResourceClaim,
    uid: &str,
    driver: &str,
    node: &str,
) -> Result<Vec<&'a DeviceRequestAllocationResult>, String> {
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
    let results: Vec<_> = allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.driver == driver)
        .collect();
    if let Some(elsewhere) = results.iter().find(|r| r.pool != node) {
        return Err(format!(
            "device {}/{} is in pool {}, not on node {node}",
            elsewhere.pool, elsewhere.device, elsewhere.pool
        ));
    }
    Ok(results)
}

/// `devices` as the prepared claim `claim`.
pub fn prepared_claim(claim: &ResourceClaim, devices: Vec<PreparedDevice>) -> PreparedClaim {
    PreparedClaim {
        namespace: claim.namespace().unwrap_or_default(),
        name: claim.name_any(),
        devices,
    }
}

impl Driver {
    /// What the kubelet is told about a prepared claim's devices: each device's CDI ID, after
    /// the common device's when the driver has one.
    pub fn response_devices(&self, uid: &str, claim: &PreparedClaim) -> Vec<v1::Device> {
        let kind = self.devices.cdi_kind();
        let common = self
            .devices
            .common()
            .map(|(name, _)| cdi::qualified(kind, name));
        claim
            .devices
            .iter()
            .map(|d| v1::Device {
                request_names: vec![d.request.clone()],
                pool_name: d.pool.clone(),
                device_name: d.device.clone(),
                cdi_device_ids: common
                    .iter()
                    .cloned()
                    .chain([cdi::qualified(
                        kind,
                        &cdi::claim_device_name(uid, &d.device),
                    )])
                    .collect(),
                share_id: None,
            })
            .collect()
    }

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
            return Ok(self.response_devices(&claim.uid, done));
        }
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let object = api
            .get_opt(&claim.name)
            .await
            .map_err(|error| format!("reading claim {}/{}: {error}", claim.namespace, claim.name))?
            .ok_or_else(|| format!("claim {}/{} not found", claim.namespace, claim.name))?;
        let plan = self.devices.plan(&object, &claim.uid, &self.node)?;
        let spec = self.devices.claim_spec(&claim.uid, &plan);
        let path = cdi::claim_spec_path(&self.paths.cdi_dir, self.devices.cdi_kind(), &claim.uid);
        let bytes = serde_json::to_vec_pretty(&spec).map_err(|e| e.to_string())?;
        crate::fs::write_atomic(&path, &bytes)
            .map_err(|error| format!("writing CDI spec {}: {error}", path.display()))?;
        prepared.claims.insert(claim.uid.clone(), plan.clone());
        if let Err(error) = prepared.save(&self.paths.checkpoint) {
            prepared.claims.remove(&claim.uid);
            let _ = crate::fs::remove_if_present(&path);
            return Err(format!("writing the checkpoint: {error}"));
        }
        info!(node = %self.node, claim = %format!("{}/{}", claim.namespace, claim.name), uid = %claim.uid, devices = plan.devices.len(), "prepared claim");
        Ok(self.response_devices(&claim.uid, &plan))
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
        let path = cdi::claim_spec_path(&self.paths.cdi_dir, self.devices.cdi_kind(), &claim.uid);
        crate::fs::remove_if_present(&path)
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
pub struct V1(pub Arc<Driver>);

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
pub struct V1beta1(pub Arc<Driver>);

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
