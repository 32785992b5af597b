//! The node controller's writes: the node's labels and status in one patch, its KWOK
//! ResourceSlices, its NodeResourceTopology and its topology ConfigMap, each compared with what
//! the caches show first.

use std::sync::Arc;

use fakegpu_api::{
    GpuNodePool,
    dra::plugin_slice_name,
    nrt::NodeResourceTopology,
    pool::{Interfaces, resolve::ResolvedGpu},
};
use fakegpu_model::{names::fakegpu::POOL_LABEL, topology::NodeTopology};
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Node},
        resource::v1::ResourceSlice,
    },
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{ResourceExt, runtime::reflector::ObjectRef};
use tracing::{debug, info};

use super::{
    cached::{self, CachedNode, has_kubelet},
    dynamic_mig, faults,
    interfaces::DeployChoices,
    labels, leaving,
    lookups::*,
    nrt, slice, status, topology,
};
use crate::{
    context::Context,
    error::Result,
    kit::{
        cache::Cached,
        owned::{Outcome, Policy},
    },
    tracking,
};

/// The pool a node serves and what of it the node serves (see [`super::interfaces`]).
#[derive(Clone, Copy)]
pub(super) struct Serving<'a> {
    pub(super) pool: &'a GpuNodePool,
    pub(super) served: &'a Interfaces,
    pub(super) choices: &'a DeployChoices,
}

/// Labels, annotations, KWOK capacity and the fractioning condition, in one patch of the node's
/// status subresource. The API server keeps the metadata of a status write (it resets only
/// `spec`), so a node costs one write where labels and status used to cost two; the GPUs the
/// document marks unhealthy leave allocatable. True when the node keeps the deploy label of a
/// plugin its pool no longer serves, for claims its pods hold.
pub(super) async fn ensure_node(
    ctx: &Context,
    node: &CachedNode,
    serving: &Serving<'_>,
    gpu: &ResolvedGpu,
    topology: &NodeTopology,
    mig_answer: dynamic_mig::Answer,
) -> Result<bool> {
    // KWOK writes its status when it sees the node; the node's next event brings it back here.
    if !has_kubelet(node) && !status::kwok_initialized(node) {
        debug!(node = %node.name_any(), "waiting for KWOK to initialize the node's status");
        return Ok(false);
    }
    let Serving {
        pool,
        served,
        choices,
    } = *serving;
    let mut labels = labels::desired_labels(pool, gpu, has_kubelet(node), served, choices);
    labels.extend(mig_answer.labels);
    let mut lingers = false;
    if has_kubelet(node) {
        // A pool that stopped serving a DRA driver keeps its plugin on the node while the
        // node's pods hold claims it prepared, as a node leaving its pool does; a deploy label
        // someone else set stays theirs.
        let lingering = leaving::lingering_labels(&ctx.caches.claims.state(), &node.name_any());
        for (key, value) in lingering {
            if !choices.chose(&key) && !labels.contains_key(&key) {
                lingers = true;
                labels.insert(key, value);
            }
        }
    }
    let resources = status::desired_resources(pool, gpu, !has_kubelet(node), served);
    let unhealthy = topology.gpus.iter().filter(|g| !g.health.is_healthy());
    let unhealthy_gpus = u32::try_from(unhealthy.count()).unwrap_or(u32::MAX);
    let now = Time(Timestamp::now());
    let allocatable = status::allocatable(&resources, unhealthy_gpus);
    let intent = status::NodeIntent {
        labels,
        annotations: mig_answer.annotations,
        fractioning: status::desired_fractioning(node, pool, &allocatable, &now),
        fault: faults::desired_condition(node, topology, &now),
        resources,
        unhealthy_gpus,
    };
    apply_node(ctx, node, &intent).await?;
    Ok(lingers)
}

pub(super) async fn apply_node(
    ctx: &Context,
    node: &CachedNode,
    intent: &status::NodeIntent,
) -> Result<()> {
    if status::node_current(node, intent) {
        return Ok(());
    }
    let name = node.name_any();
    // Labels and status go in one patch of the status subresource; the policy is for other
    // writes of nodes, which fakegpu does not make.
    let nodes = ctx.owned::<Node>(Policy::MergePatch);
    let same = status::node_patch(&intent.timeless(), &status::Leftovers::default(), None);
    // Other events of the node come before the cache shows this write: neither read nor log.
    if nodes.status_pending(&name, &same) {
        return Ok(());
    }
    // A node read for its labels may change again before the patch lands: read it again.
    let mut attempts = 1;
    loop {
        let patch = if labels::may_take_back(node, &intent.labels) {
            let Some(fresh) = nodes.api().get_opt(&name).await? else {
                debug!(node = %name, "node is gone; nothing to write");
                return Ok(());
            };
            let owned = cached::OwnedStatus::from_managed_fields(&fresh);
            let leftovers =
                status::Leftovers::new(owned.as_ref(), &cached::only_ours(&fresh), intent);
            status::node_patch(intent, &leftovers, fresh.resource_version().as_deref())
        } else {
            let leftovers = status::Leftovers::new(cached::OwnedStatus::of(node), &[], intent);
            status::node_patch(intent, &leftovers, None)
        };
        match nodes.patch_status(&name, &patch, &same).await {
            Ok(outcome) => {
                if outcome.sent() {
                    info!(node = %name, pool = intent.labels.get(POOL_LABEL).map(String::as_str), resources = ?intent.resources, fractioning = intent.fractioning.is_some(), "wrote node labels and status");
                }
                return Ok(());
            }
            // A patch never creates: a node deleted meanwhile answers 404.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                debug!(node = %name, "node is gone; nothing to write");
                return Ok(());
            }
            Err(kube::Error::Api(status))
                if status.code == 409 && attempts < NODE_PATCH_ATTEMPTS =>
            {
                debug!(node = %name, "node changed since it was read; reading it again");
                attempts += 1;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// How many times a node whose labels fakegpu takes back is read and patched before the
/// reconcile fails (and is retried later).
pub(super) const NODE_PATCH_ATTEMPTS: usize = 3;

/// The slices of a KWOK node: GPUs when it serves DRA, the IMEX channel when it serves
/// ComputeDomains. Nodes with a kubelet get theirs from the node agent.
pub(super) async fn ensure_slices(
    ctx: &Context,
    node: &CachedNode,
    serving: &Serving<'_>,
    topology: &NodeTopology,
) -> Result<()> {
    let name = node.name_any();
    let pool_name = serving.pool.name_any();
    let kwok = !has_kubelet(node);
    let gpus = slice::slice_name(&name);
    let current = cached_slice(ctx, &gpus);
    let desired = (kwok && serving.served.dra)
        .then(|| slice::desired_slice(node, &pool_name, topology, current.as_deref()));
    sync_slice(ctx, &name, &gpus, current, desired).await?;
    let channels = slice::channel_slice_name(&name);
    let current = cached_slice(ctx, &channels);
    let desired = (kwok && serving.served.compute_domains)
        .then(|| slice::desired_channel_slice(node, &pool_name, current.as_deref()));
    sync_slice(ctx, &name, &channels, current, desired).await
}

/// Removes the node agent's slices of the drivers the node's document (`None`: the node left
/// its pool) does not list. Its plugin publishes none of them once it reads the document, but
/// the plugin's pod may already be on its way out and would leave the slice to the kubelet,
/// which wipes a driver's slices only about 30 s after it unregisters: claims allocated from
/// it meanwhile bind their pods to a node that cannot prepare them.
pub(super) async fn remove_unserved_plugin_slices(
    ctx: &Context,
    node: &CachedNode,
    document: Option<&NodeTopology>,
) -> Result<()> {
    let name = node.name_any();
    // Of a node in no pool, only slices published from a pool's document: an agent given its
    // document otherwise (the kubelet harness) publishes for a node no pool holds.
    let from_a_pool = |slice: &Cached<ResourceSlice>| {
        slice
            .trimmed()
            .labels()
            .get(POOL_LABEL)
            .is_some_and(|pool| ctx.caches.pools.get(&ObjectRef::new(pool)).is_some())
    };
    for driver in leaving::PLUGIN_DRIVERS {
        if document.is_some_and(|d| d.serves_driver(driver)) {
            continue;
        }
        let slice = plugin_slice_name(&name, driver);
        let current = cached_slice(ctx, &slice);
        if current
            .as_deref()
            .is_some_and(|s| document.is_some() || from_a_pool(s))
        {
            sync_slice(ctx, &name, &slice, current, None).await?;
        }
    }
    Ok(())
}

/// Writes slice `name` as `desired`, or removes it when nothing is desired.
pub(super) async fn sync_slice(
    ctx: &Context,
    node: &str,
    name: &str,
    current: Option<Arc<Cached<ResourceSlice>>>,
    desired: Option<ResourceSlice>,
) -> Result<()> {
    let slices = ctx.owned::<ResourceSlice>(Policy::Replace);
    let is_current = |current: &Arc<Cached<ResourceSlice>>, desired: &ResourceSlice| {
        slice::slice_current(current.as_ref(), desired)
    };
    let outcome = slices
        .ensure(name, current.as_ref(), desired.as_ref(), is_current)
        .await?;
    let generation = desired.as_ref().map(|d| d.spec.pool.generation);
    match outcome {
        Outcome::Written => info!(node, slice = name, generation, "wrote ResourceSlice"),
        Outcome::Removed => info!(node, slice = name, "removed ResourceSlice"),
        Outcome::Current | Outcome::Pending => {}
    }
    Ok(())
}

/// The NodeResourceTopology of a node of a NUMA pool (when the cluster serves the API).
pub(super) async fn ensure_nrt(
    ctx: &Context,
    node: &CachedNode,
    pool: &GpuNodePool,
    topology: &NodeTopology,
) -> Result<()> {
    if ctx.caches.nrts.is_none() {
        return Ok(());
    }
    let name = node.name_any();
    let desired = nrt::desired_nrt(node, pool, topology);
    // Applied with its kind: the cached NRT is compared with the object, the patch sent.
    let patch = desired.as_ref().map(nrt::nrt_patch);
    let nrts = ctx.owned::<NodeResourceTopology>(Policy::Apply);
    let is_current = |current: &Arc<NodeResourceTopology>, _: &serde_json::Value| {
        desired
            .as_ref()
            .is_some_and(|desired| nrt::nrt_current(current, desired))
    };
    let current = cached_nrt(ctx, &name);
    match nrts
        .ensure(&name, current.as_ref(), patch.as_ref(), is_current)
        .await?
    {
        Outcome::Written => {
            info!(node = %name, pool = %pool.name_any(), "wrote NodeResourceTopology")
        }
        Outcome::Removed => info!(node = %name, "removed NodeResourceTopology"),
        Outcome::Current | Outcome::Pending => {}
    }
    Ok(())
}

/// Removes the node's NodeResourceTopology, if the cache shows one.
pub(super) async fn remove_nrt(ctx: &Context, node: &str) -> Result<()> {
    if cached_nrt(ctx, node).is_none() {
        return Ok(());
    }
    ctx.owned::<NodeResourceTopology>(Policy::Apply)
        .remove(node)
        .await?;
    info!(node, "removed NodeResourceTopology");
    Ok(())
}

/// The node's topology ConfigMap as `document` has it; `None`: the node has none.
pub(super) async fn ensure_topology(
    ctx: &Context,
    node: &CachedNode,
    pool_and_document: Option<(&GpuNodePool, &NodeTopology)>,
) -> Result<()> {
    let name = node.name_any();
    let namespace = &ctx.settings.namespace;
    let allocated =
        pool_and_document.map(|(_, document)| tracking::allocated_count(&document.gpus));
    let desired = match pool_and_document.zip(allocated) {
        Some(((pool, document), allocated)) => Some(topology::desired_configmap(
            namespace,
            node,
            &pool.name_any(),
            document.to_yaml()?,
            allocated,
        )),
        None => None,
    };
    let configmaps = ctx.owned_in::<ConfigMap>(namespace, Policy::Replace);
    let current = cached_configmap(ctx, &name);
    let is_current = |current: &Arc<Cached<ConfigMap>>, desired: &ConfigMap| {
        topology::configmap_current(current, desired)
    };
    let cm_name = NodeTopology::configmap_name(&name);
    let outcome = configmaps
        .ensure(&cm_name, current.as_ref(), desired.as_ref(), is_current)
        .await?;
    let pool = pool_and_document.map(|(pool, _)| pool.name_any());
    match outcome {
        Outcome::Written => info!(node = %name, pool, allocated, "wrote topology ConfigMap"),
        Outcome::Removed => info!(node = %name, "removed topology ConfigMap"),
        Outcome::Current | Outcome::Pending => {}
    }
    Ok(())
}
