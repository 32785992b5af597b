//! Which GPUs the kubelet gave each container, read from the kubelet's PodResources API and
//! reported in the node's `kubelet-devices-<node>` ConfigMap (see
//! [`fakegpu_api::kubelet_devices`]).
//!
//! The device plugin cannot tell: Allocate names devices, not pods. The kubelet records both
//! and serves them on its PodResources socket, from its checkpoint across its own restarts.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use fakegpu_api::{
    kubelet_devices::{ContainerDevices, KubeletDevices},
    meta::node_name_label,
};
use fakegpu_model::names::{
    kubelet_devices::{DATA_KEY, LABEL},
    resource,
};
use k8s_openapi::{
    api::core::v1::{ConfigMap, Node},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client, Resource,
    api::{ObjectMeta, Patch, PatchParams},
};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::{
    FIELD_MANAGER,
    proto::podresources::{
        ListPodResourcesRequest, pod_resources_lister_client::PodResourcesListerClient,
    },
    uds,
};

/// Looked at this often even when nothing was allocated (a pod gone, the kubelet restarted).
const POLL_INTERVAL: Duration = Duration::from_secs(10);
/// The kubelet records a container's devices just after Allocate returns.
const AFTER_ALLOCATE: Duration = Duration::from_millis(300);
/// An unchanged report is written again this often.
const REWRITE_INTERVAL: Duration = Duration::from_secs(60);

/// Why the kubelet's devices could not be read or reported.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("connecting to the kubelet's PodResources socket {path}: {source}")]
    Connect {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("the kubelet's PodResources List failed: {0}")]
    List(#[from] tonic::Status),
    #[error("writing the report: {0}")]
    Write(#[from] kube::Error),
}

/// Whether fakegpu's device plugins serve `name`.
fn is_ours(name: &str) -> bool {
    name == resource::GPU || name.starts_with(resource::MIG_PREFIX)
}

/// The containers holding fakegpu devices, as the kubelet listening on `socket` records them.
pub async fn list(socket: &std::path::Path) -> Result<KubeletDevices, ReportError> {
    let channel = uds::connect(socket)
        .await
        .map_err(|source| ReportError::Connect {
            path: socket.to_owned(),
            source,
        })?;
    let response = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await?
        .into_inner();
    let mut held = Vec::new();
    for pod in response.pod_resources {
        for container in pod.containers {
            for devices in container
                .devices
                .into_iter()
                .filter(|d| is_ours(&d.resource_name))
            {
                if devices.device_ids.is_empty() {
                    continue;
                }
                held.push(ContainerDevices {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: container.name.clone(),
                    resource: devices.resource_name,
                    devices: devices.device_ids,
                });
            }
        }
    }
    Ok(KubeletDevices::new(held))
}

/// `node`'s report: owned by the node, so it goes when the node does.
pub fn report_configmap(node: &Node, namespace: &str, report: &KubeletDevices) -> ConfigMap {
    let name = node.meta().name.clone().unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(KubeletDevices::configmap_name(&name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(LABEL.to_owned(), "true".to_owned())]
                    .into_iter()
                    .chain(node_name_label(&name))
                    .collect(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name,
                uid: node.meta().uid.clone().unwrap_or_default(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        data: Some([(DATA_KEY.to_owned(), report.to_json())].into()),
        ..Default::default()
    }
}

/// Where and how the report is written.
#[derive(Clone)]
pub struct Reporter {
    pub client: Client,
    pub namespace: String,
    pub node: String,
    /// The kubelet's PodResources socket.
    pub socket: PathBuf,
    /// Told after each Allocate.
    pub allocated: Arc<Notify>,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("namespace", &self.namespace)
            .field("node", &self.node)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Reporter {
    /// Reports after every Allocate and every `POLL_INTERVAL`, writing what changed, and
    /// everything again every `REWRITE_INTERVAL` (a report deleted by hand, or with a node
    /// that was replaced, comes back); runs until dropped. A kubelet without the socket is
    /// waited for, quietly after the first warning.
    pub async fn run(self) {
        let mut written: Option<(KubeletDevices, Instant)> = None;
        let mut failures = 0u32;
        loop {
            match self.report_once(&mut written).await {
                Ok(()) => failures = 0,
                Err(error) if failures == 0 => {
                    failures += 1;
                    warn!(node = %self.node, %error, "cannot report the kubelet's devices; retrying");
                }
                Err(error) => {
                    failures += 1;
                    debug!(node = %self.node, %error, failures, "cannot report the kubelet's devices");
                }
            }
            tokio::select! {
                () = self.allocated.notified() => tokio::time::sleep(AFTER_ALLOCATE).await,
                () = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
    }

    async fn report_once(
        &self,
        written: &mut Option<(KubeletDevices, Instant)>,
    ) -> Result<(), ReportError> {
        let report = list(&self.socket).await?;
        if let Some((last, at)) = written.as_ref()
            && *last == report
            && at.elapsed() < REWRITE_INTERVAL
        {
            return Ok(());
        }
        // Read each time: the owner reference needs the node's current UID.
        let node = Api::<Node>::all(self.client.clone())
            .get(&self.node)
            .await?;
        let configmap = report_configmap(&node, &self.namespace, &report);
        let name = KubeletDevices::configmap_name(&self.node);
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&configmap),
            )
            .await?;
        if written.as_ref().is_none_or(|(last, _)| *last != report) {
            info!(node = %self.node, configmap = %name, containers = report.containers.len(), "reported the kubelet's devices");
        }
        *written = Some((report, Instant::now()));
        Ok(())
    }
}
