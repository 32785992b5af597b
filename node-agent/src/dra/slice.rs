//! The node's ResourceSlice of a driver (see [`super::devices`]), published by the agent for its
//! node (the operator does it for KWOK nodes; both build it with `fakegpu_api::dra`). The
//! kubelet deletes a driver's slices when it starts and when the driver is gone too long, so
//! the publisher watches its slice and puts it back, as well as following the topology.

use std::{collections::BTreeMap, sync::Arc};

use fakegpu_api::dra::slice_current;
use fakegpu_model::names::fakegpu::{MANAGED_BY, MANAGED_BY_VALUE, POOL_LABEL};
use futures::StreamExt;
use k8s_openapi::api::{core::v1::Node, resource::v1::ResourceSlice};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use tracing::{info, warn};

use super::devices::Devices;
use crate::topology_source::Topology;

use crate::FIELD_MANAGER;

/// Labels of the agent's slices: fakegpu's, and the node's pool.
pub fn labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (POOL_LABEL.to_owned(), pool.to_owned()),
    ])
}

/// Keeps the node's slice of `devices` as they want it, following the topology, until the
/// watches end.
pub async fn publish(
    client: Client,
    node_name: String,
    mut topology: Topology,
    devices: Arc<dyn Devices>,
) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client);
    let name = devices.slice_name(&node_name);
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
            devices.as_ref(),
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
    devices: &dyn Devices,
    current: &mut Option<ResourceSlice>,
) -> Result<(), kube::Error> {
    if node.is_none() {
        *node = Some(nodes.get(node_name).await?);
    }
    let Some(node) = node.as_ref() else {
        return Ok(());
    };
    let Some(desired) = devices.slice(node, current.as_ref()) else {
        if current.take().is_some() {
            info!(node = %node_name, slice = %name, "nothing to publish: deleting the ResourceSlice");
            match slices.delete(name, &DeleteParams::default()).await {
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                other => drop(other?),
            }
        }
        return Ok(());
    };
    if current.as_ref().is_some_and(|c| slice_current(c, &desired)) {
        return Ok(());
    }
    let count = desired.spec.devices.as_ref().map_or(0, Vec::len);
    info!(node = %node_name, slice = %name, generation = desired.spec.pool.generation, devices = count, "publishing the ResourceSlice");
    let params = PatchParams::apply(FIELD_MANAGER).force();
    *current = Some(slices.patch(name, &params, &Patch::Apply(&desired)).await?);
    Ok(())
}
