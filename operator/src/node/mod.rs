//! The node controller: gives each node the labels and the topology ConfigMap of the pool that
//! owns it, and takes them away when no pool does.

pub mod labels;
pub mod topology;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use fakegpu_api::{
    GpuNodePool,
    names::{annotation, fakegpu::POOL_LABEL, topology::DATA_KEY},
    pool::resolve::{ResolvedGpu, resolve},
    topology::NodeTopology,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::{
    Api, ResourceExt,
    api::ListParams,
    runtime::{controller::Action, reflector::ObjectRef},
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::{Context, Error, Result, apply, membership};

/// KWOK nodes have no kubelet: no node agent runs there, the operator serves them centrally.
pub fn has_kubelet(node: &Node) -> bool {
    node.annotations()
        .get(annotation::KWOK_NODE)
        .map(String::as_str)
        != Some(annotation::KWOK_NODE_VALUE)
}

pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action> {
    let pools = ctx.pools.state();
    let Some(pool) = membership::owner(&pools, node.labels()) else {
        release(&ctx, &node).await?;
        return Ok(Action::await_change());
    };
    match resolve(&pool.spec.gpu) {
        Ok(gpu) => {
            ensure_labels(&ctx, &node, &pool, &gpu).await?;
            ensure_topology(&ctx, &node, &pool, &gpu).await?;
        }
        // The pool reports this as a condition. The node keeps what it has: a typo in a pool
        // must not strip GPUs from nodes that run workloads.
        Err(error) => {
            debug!(node = %node.name_any(), pool = %pool.name_any(), %error, "pool does not resolve")
        }
    }
    Ok(Action::await_change())
}

async fn ensure_labels(
    ctx: &Context,
    node: &Node,
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
) -> Result<()> {
    let desired = labels::desired_labels(pool, gpu, has_kubelet(node));
    if labels::labels_current(node.labels(), &desired) {
        return Ok(());
    }
    let name = node.name_any();
    info!(node = %name, pool = %pool.name_any(), "labelling node");
    apply_labels(ctx, &name, &desired).await
}

async fn apply_labels(ctx: &Context, node: &str, labels: &BTreeMap<String, String>) -> Result<()> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let patch =
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}});
    match apply::apply(&nodes, node, &patch).await {
        Ok(_) => Ok(()),
        // Server-side apply creates what is missing: for a node deleted meanwhile it asks to
        // create one (the bundle's RBAC refuses). A deleted node has nothing left to label.
        // (Asked with `list`, which the operator's role has, rather than `get`.)
        Err(error) => {
            let by_name = ListParams::default().fields(&format!("metadata.name={node}"));
            if nodes.list_metadata(&by_name).await?.items.is_empty() {
                debug!(node, %error, "node is gone; nothing to label");
                Ok(())
            } else {
                Err(error)
            }
        }
    }
}

fn cached_configmap(ctx: &Context, node: &str) -> Option<Arc<ConfigMap>> {
    ctx.configmaps
        .get(&ObjectRef::new(&topology::configmap_name(node)).within(&ctx.namespace))
}

async fn ensure_topology(
    ctx: &Context,
    node: &Node,
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
) -> Result<()> {
    let name = node.name_any();
    let current = cached_configmap(ctx, &name);
    // A document edited by hand into garbage is simply rebuilt (it loses recorded usage).
    let previous = current
        .as_ref()
        .and_then(|cm| cm.data.as_ref()?.get(DATA_KEY).cloned())
        .and_then(|text| NodeTopology::from_yaml(&text).ok());
    let document = topology::desired_topology(pool, gpu, &name, previous.as_ref()).to_yaml()?;
    let desired = topology::desired_configmap(&ctx.namespace, node, &pool.name_any(), document);
    if current.is_some_and(|cm| topology::configmap_current(&cm, &desired)) {
        return Ok(());
    }
    info!(node = %name, pool = %pool.name_any(), "writing topology ConfigMap");
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    apply::apply(&configmaps, &topology::configmap_name(&name), &desired)
        .await
        .map(drop)
}

/// Takes away what the operator gave a node: its labels (an empty apply drops every label the
/// field manager owns, and only those) and its topology ConfigMap.
pub async fn release(ctx: &Context, node: &Node) -> Result<()> {
    let name = node.name_any();
    if node.labels().contains_key(POOL_LABEL) {
        info!(node = %name, "node left its pool: removing labels");
        apply_labels(ctx, &name, &BTreeMap::new()).await?;
    }
    if cached_configmap(ctx, &name).is_some() {
        info!(node = %name, "removing topology ConfigMap");
        let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        apply::delete(&configmaps, &topology::configmap_name(&name)).await?;
    }
    Ok(())
}

pub fn error_policy(node: Arc<Node>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed("node", error);
    warn!(node = %node.name_any(), %error, kind = error.metric_label(), "node reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Nodes a pool event concerns: those it selects and those it labelled before.
pub fn nodes_of_pool(nodes: &[Arc<Node>], pool: &GpuNodePool) -> Vec<ObjectRef<Node>> {
    nodes
        .iter()
        .filter(|node| membership::concerns(pool, node.labels()))
        .map(|node| ObjectRef::from_obj(node.as_ref()))
        .collect()
}
