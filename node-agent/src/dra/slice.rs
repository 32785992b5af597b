//! The node's ResourceSlice for driver `gpu.nvidia.com`, published by the agent for its node
//! (the operator does it for KWOK nodes; both build it with `fakegpu_api::dra`). The kubelet
//! deletes a driver's slices when it starts and when the driver is gone too long, so the
//! publisher watches its slice and puts it back, as well as following the topology.

use std::collections::BTreeMap;

use fakegpu_api::{
    dra::{gpu_slice, slice_current},
    names::fakegpu::{MANAGED_BY, MANAGED_BY_VALUE, POOL_LABEL},
};
use futures::StreamExt;
use k8s_openapi::api::{core::v1::Node, resource::v1::ResourceSlice};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use tracing::{info, warn};

use crate::topology_source::Topology;

/// Field manager of the agent's writes.
pub const FIELD_MANAGER: &str = "fakegpu-node-agent";

/// Name of the slice of a node with a kubelet.
pub fn slice_name(node: &str) -> String {
    format!("{node}-gpu.nvidia.com")
}

/// Keeps the node's slice equal to its topology until the watches end.
pub async fn publish(client: Client, node_name: String, mut topology: Topology) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client);
    let name = slice_name(&node_name);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(slices.clone(), config).default_backoff().boxed();
    let mut current: Option<ResourceSlice> = None;
    let mut node: Option<Node> = None;
    loop {
        if let Err(error) = reconcile(
            &slices,
            &nodes,
            &name,
            &node_name,
            &mut node,
            &topology,
            &mut current,
        )
        .await
        {
            warn!(node = %node_name, slice = %name, %error, "publishing the ResourceSlice; retrying");
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            continue;
        }
        tokio::select! {
            changed = topology.changed() => if changed.is_err() { return },
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(slice) | watcher::Event::InitApply(slice))) => current = Some(slice),
                Some(Ok(watcher::Event::Delete(_))) => {
                    info!(node = %node_name, slice = %name, "the ResourceSlice was deleted");
                    current = None;
                }
                Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                Some(Err(error)) => warn!(node = %node_name, %error, "watching the ResourceSlice"),
                None => return,
            },
        }
    }
}

async fn reconcile(
    slices: &Api<ResourceSlice>,
    nodes: &Api<Node>,
    name: &str,
    node_name: &str,
    node: &mut Option<Node>,
    topology: &Topology,
    current: &mut Option<ResourceSlice>,
) -> Result<(), kube::Error> {
    let document = topology.borrow().clone();
    let Some(document) = document else {
        if current.take().is_some() {
            info!(node = %node_name, slice = %name, "no GPUs: deleting the ResourceSlice");
            match slices.delete(name, &DeleteParams::default()).await {
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                other => drop(other?),
            }
        }
        return Ok(());
    };
    if node.is_none() {
        *node = Some(nodes.get(node_name).await?);
    }
    let Some(node) = node.as_ref() else {
        return Ok(());
    };
    let labels = BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (POOL_LABEL.to_owned(), document.pool.clone()),
    ]);
    let desired = gpu_slice(name, node, labels, &document, current.as_ref());
    if current.as_ref().is_some_and(|c| slice_current(c, &desired)) {
        return Ok(());
    }
    info!(node = %node_name, slice = %name, generation = desired.spec.pool.generation, devices = document.gpus.len(), "publishing the ResourceSlice");
    let params = PatchParams::apply(FIELD_MANAGER).force();
    *current = Some(slices.patch(name, &params, &Patch::Apply(&desired)).await?);
    Ok(())
}
