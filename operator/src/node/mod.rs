//! The node controller: gives each node what the pool that owns it means for it (labels, status
//! entries, a KWOK ResourceSlice, the topology ConfigMap with the pods holding its GPUs, the
//! answer to Run:ai's dynamic MIG, the GPU each reservation pod holds), and takes them away when
//! no pool does.

#[cfg(test)]
mod against_api;
pub mod cached;
pub mod dynamic_mig;
pub mod faults;
pub mod interfaces;
pub mod labels;
pub mod leaving;
pub mod nrt;
pub mod slice;
pub mod status;
pub mod topology;

use std::{collections::HashMap, sync::Arc, time::Duration};

use fakegpu_api::{
    GpuNodePool,
    dra::plugin_slice_name,
    faults::GpuFault,
    kubelet_devices::KubeletDevices,
    names::{annotation, fakegpu::POOL_LABEL},
    nrt::NodeResourceTopology,
    pool::{
        Interfaces,
        resolve::{ResolvedGpu, resolve_pool},
    },
    topology::{NodeTopology, parse_gpu_indices},
};
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Node, Pod},
        resource::v1::ResourceSlice,
    },
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use tracing::{debug, info, warn};

use crate::{
    apply,
    cache::Cached,
    context::Context,
    error::Error,
    error::Result,
    membership,
    pod_groups::{PodGroupKey, pod_group_of},
    tracking,
};
pub use cached::{CachedNode, KeptOfNode, TrimmedNode, has_kubelet};
use interfaces::DeployChoices;

pub async fn reconcile(node: Arc<CachedNode>, ctx: Arc<Context>) -> Result<Action> {
    let name = node.name_any();
    let action = reconcile_node(node, ctx.clone()).await?;
    ctx.node_problems.lock().failures.remove(&name);
    Ok(action)
}

async fn reconcile_node(node: Arc<CachedNode>, ctx: Arc<Context>) -> Result<Action> {
    let pools = ctx.caches.pools.state();
    let Some(pool) = membership::owner(&pools, node.labels()) else {
        note_overbooking(&ctx, &node.name_any(), &[]);
        let lingering = release(&ctx, &node).await?;
        return Ok(if lingering {
            Action::requeue(LINGER_RECHECK)
        } else {
            Action::await_change()
        });
    };
    match resolve_pool(&pool.spec) {
        Ok(mut gpu) => {
            // Run:ai may partition this node's GPUs its own way; everything below follows.
            let answer = dynamic_mig::resolve(&ctx, &node, &mut gpu).await;
            let pods = ctx
                .caches
                .pods_by_node
                .pods_on(&node.name_any(), &ctx.caches.pods);
            let classes = ctx.pod_groups.priority_classes(&pods).await;
            let (declared_faults, bad_faults) = faults::declared(&pool, &node);
            let choices = DeployChoices::of(node.labels());
            let served = interfaces::served(&pool, !has_kubelet(&node), &choices);
            let (topology, users, overbooked) = desired_topology(
                &ctx,
                &node,
                &pool,
                &gpu,
                &served,
                &pods,
                &classes,
                &declared_faults,
            );
            // Before the document is written: its change brings the pool's status here.
            note_overbooking(&ctx, &node.name_any(), &overbooked);
            let serving = Serving {
                pool: &pool,
                served: &served,
                choices: &choices,
            };
            ensure_node(&ctx, &node, &serving, &gpu, &topology, answer).await?;
            ensure_slices(&ctx, &node, &serving, &topology).await?;
            ensure_nrt(&ctx, &node, &pool, &topology).await?;
            ensure_topology(&ctx, &node, &pool, &topology).await?;
            remove_unserved_plugin_slices(&ctx, &node, Some(&topology)).await?;
            announce_reservations(&ctx, &node.name_any(), &topology, &users).await?;
            record_assignments(&ctx, &node.name_any(), &topology, &users).await?;
            report_malformed_annotations(&ctx, &node.name_any()).await;
            report_malformed_unhealthy(&ctx, &node, gpu.count).await;
            report_overbooking(&ctx, &node, &overbooked).await;
            faults::report(&ctx, &node, &topology, bad_faults.as_deref()).await;
        }
        // The pool reports this as a condition. The node keeps what it has: a typo in a pool
        // must not strip GPUs from nodes that run workloads.
        Err(error) => {
            debug!(node = %node.name_any(), pool = %pool.name_any(), %error, "pool does not resolve")
        }
    }
    Ok(Action::await_change())
}

/// The pool a node serves and what of it the node serves (see [`interfaces`]).
#[derive(Clone, Copy)]
struct Serving<'a> {
    pool: &'a GpuNodePool,
    served: &'a Interfaces,
    choices: &'a DeployChoices,
}

/// How often a node that left its pool looks again whether its pods still hold claims (a
/// released claim names no node any more, so its event does not reach the node).
const LINGER_RECHECK: Duration = Duration::from_secs(5);

/// Labels, annotations, KWOK capacity and the fractioning condition, in one patch of the node's
/// status subresource. The API server keeps the metadata of a status write (it resets only
/// `spec`), so a node costs one write where labels and status used to cost two; the GPUs the
/// document marks unhealthy leave allocatable.
async fn ensure_node(
    ctx: &Context,
    node: &CachedNode,
    serving: &Serving<'_>,
    gpu: &ResolvedGpu,
    topology: &NodeTopology,
    mig_answer: dynamic_mig::Answer,
) -> Result<()> {
    // KWOK writes its status when it sees the node; the node's next event brings it back here.
    if !has_kubelet(node) && !status::kwok_initialized(node) {
        debug!(node = %node.name_any(), "waiting for KWOK to initialize the node's status");
        return Ok(());
    }
    let Serving {
        pool,
        served,
        choices,
    } = *serving;
    let mut labels = labels::desired_labels(pool, gpu, has_kubelet(node), served, choices);
    labels.extend(mig_answer.labels);
    if has_kubelet(node) {
        // A pool that stopped serving a DRA driver keeps its plugin on the node while the
        // node's pods hold claims it prepared, as a node leaving its pool does; a deploy label
        // someone else set stays theirs.
        let lingering = leaving::lingering_labels(&ctx.caches.claims.state(), &node.name_any());
        for (key, value) in lingering {
            if !choices.chose(&key) {
                labels.entry(key).or_insert(value);
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
    apply_node(ctx, node, &intent).await
}

async fn apply_node(ctx: &Context, node: &CachedNode, intent: &status::NodeIntent) -> Result<()> {
    if status::node_current(node, intent) {
        return Ok(());
    }
    let name = node.name_any();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let same = status::node_patch(&intent.timeless(), &status::Leftovers::default(), None);
    // Other events of the node come before the cache shows this write: neither read nor log.
    if apply::status_write_pending::<Node>(&ctx.recent, &name, &same) {
        debug!(node = %name, "same node write already sent");
        return Ok(());
    }
    // A node read for its labels may change again before the patch lands: read it again.
    let mut attempts = 1;
    loop {
        let patch = if labels::may_take_back(node, &intent.labels) {
            let Some(fresh) = nodes.get_opt(&name).await? else {
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
        match apply::patch_status_once(&ctx.recent, &nodes, &name, &patch, &same).await {
            Ok(written) => {
                if written {
                    info!(node = %name, pool = intent.labels.get(POOL_LABEL).map(String::as_str), resources = ?intent.resources, fractioning = intent.fractioning.is_some(), "wrote node labels and status");
                }
                return Ok(());
            }
            // A patch never creates: a node deleted meanwhile answers 404.
            Err(Error::Kube(kube::Error::Api(status))) if status.code == 404 => {
                debug!(node = %name, "node is gone; nothing to write");
                return Ok(());
            }
            Err(Error::Kube(kube::Error::Api(status)))
                if status.code == 409 && attempts < NODE_PATCH_ATTEMPTS =>
            {
                debug!(node = %name, "node changed since it was read; reading it again");
                attempts += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// How many times a node whose labels fakegpu takes back is read and patched before the
/// reconcile fails (and is retried later).
const NODE_PATCH_ATTEMPTS: usize = 3;

fn cached_configmap(ctx: &Context, node: &str) -> Option<Arc<Cached<ConfigMap>>> {
    ctx.caches
        .configmaps
        .get(&ObjectRef::new(&NodeTopology::configmap_name(node)).within(&ctx.namespace))
}

/// GPUs of `node` that pods hold, as pod tracking last recorded it.
pub fn allocated_gpus(ctx: &Context, node: &str) -> u32 {
    cached_configmap(ctx, node).map_or(0, |cm| cm.kept().allocated_gpus())
}

fn cached_slice(ctx: &Context, name: &str) -> Option<Arc<Cached<ResourceSlice>>> {
    ctx.caches.slices.get(&ObjectRef::new(name))
}

/// GPU indices the user marked failed (annotation [`annotation::UNHEALTHY_GPUS`]) among the
/// node's `count` GPUs, and the entries that name none of them.
fn unhealthy_gpus(node: &CachedNode, count: u32) -> (Vec<u32>, Vec<String>) {
    let Some(value) = node.annotations().get(annotation::UNHEALTHY_GPUS) else {
        return (Vec::new(), Vec::new());
    };
    let (indices, mut bad) = parse_gpu_indices(value);
    let (known, beyond): (Vec<u32>, Vec<u32>) = indices.into_iter().partition(|i| *i < count);
    bad.extend(beyond.iter().map(u32::to_string));
    (known, bad)
}

/// A Warning Event, once per value, on a node whose unhealthy-GPUs annotation names entries
/// that are not GPUs of the node (the GPUs it does name are marked).
async fn report_malformed_unhealthy(ctx: &Context, node: &CachedNode, count: u32) {
    let (_, bad) = unhealthy_gpus(node, count);
    let Some(value) = node.annotations().get(annotation::UNHEALTHY_GPUS) else {
        return;
    };
    if bad.is_empty() {
        return;
    }
    let message = format!(
        "annotation {} {value:?}: not GPU indices of this node (it has {count} GPUs, 0-{}): {}; \
         the GPUs it does name are marked unhealthy",
        annotation::UNHEALTHY_GPUS,
        count.saturating_sub(1),
        bad.join(", ")
    );
    let node_ref = node.object_ref(&());
    ctx.events
        .warn_once(&node_ref, "InvalidUnhealthyGpus", value, &message)
        .await;
}

/// The node's document: the pool's GPUs with the faults `faults` declares, with the pods that
/// hold them now (returned too), and the pods the GPUs could not serve as asked.
#[allow(clippy::too_many_arguments)]
fn desired_topology(
    ctx: &Context,
    node: &CachedNode,
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
    served: &Interfaces,
    pods: &[Arc<Pod>],
    priority_classes: &HashMap<PodGroupKey, String>,
    faults: &[GpuFault],
) -> (
    NodeTopology,
    Vec<tracking::GpuUser>,
    Vec<tracking::Overbooking>,
) {
    let name = node.name_any();
    // A document edited by hand into garbage is simply rebuilt.
    let previous =
        cached_configmap(ctx, &name).and_then(|cm| NodeTopology::from_configmap(cm.trimmed()).ok());
    let (unhealthy, _) = unhealthy_gpus(node, gpu.count);
    let mut document = topology::desired_topology(
        pool,
        gpu,
        served,
        &name,
        previous.as_ref(),
        &topology::Failing {
            unhealthy: &unhealthy,
            faults,
        },
    );
    let default = pool
        .spec
        .utilization
        .as_ref()
        .and_then(|u| u.default.as_deref())
        .and_then(|text| text.parse().ok());
    let mut users: Vec<_> = pods
        .iter()
        .filter_map(|pod| {
            let namespace = pod.namespace().unwrap_or_default();
            let claim = |claim: &str| {
                ctx.caches
                    .claims
                    .get(&ObjectRef::new(claim).within(&namespace))
            };
            let class = pod_group_of(pod).and_then(|key| priority_classes.get(&key));
            let defaults = tracking::Defaults {
                pool: default,
                priority_class: class.map(String::as_str),
            };
            tracking::gpu_user(
                pod,
                &name,
                claim,
                defaults,
                gpu.memory_mib,
                &ctx.reservations,
            )
        })
        .collect();
    give_what_the_kubelet_gave(ctx, &name, &mut users);
    let mig_single = document.mig_strategy == "single";
    let overbooked = tracking::assign(&mut document.gpus, &users, mig_single);
    (document, users, overbooked)
}

/// Keeps the node's overbooking (the first problem, and how many) for its pool's status.
fn note_overbooking(ctx: &Context, node: &str, overbooked: &[tracking::Overbooking]) {
    let mut problems = ctx.node_problems.lock();
    match overbooked {
        [] => {
            problems.overbooked.remove(node);
        }
        [only] => {
            problems
                .overbooked
                .insert(node.to_owned(), only.to_string());
        }
        [first, rest @ ..] => {
            problems
                .overbooked
                .insert(node.to_owned(), format!("{first}, and {} more", rest.len()));
        }
    }
}

/// A Warning Event on the node, once per problem, for pods its GPUs could not serve as asked:
/// a pool serving both the device plugin and DRA hands the same GPUs to both, and the scheduler
/// counts the two apart.
async fn report_overbooking(
    ctx: &Context,
    node: &CachedNode,
    overbooked: &[tracking::Overbooking],
) {
    let node_ref = node.object_ref(&());
    for problem in overbooked {
        let message = format!(
            "{problem}: the pool's device-plugin pods and DRA claims draw on the same GPUs of \
             this node; the pod's GPUs are shared with another pod"
        );
        ctx.events
            .warn_once(&node_ref, "GpusOverbooked", &problem.to_string(), &message)
            .await;
    }
}

/// The devices the node's kubelet gave each pod, from the report of its node agent (a real
/// node serving the device plugin; KWOK nodes have none). A report that cannot be read counts
/// as none: pods then keep what the document recorded.
fn give_what_the_kubelet_gave(ctx: &Context, node: &str, users: &mut [tracking::GpuUser]) {
    let name = KubeletDevices::configmap_name(node);
    let Some(configmap) = ctx
        .caches
        .kubelet_reports
        .get(&ObjectRef::new(&name).within(&ctx.namespace))
    else {
        return;
    };
    let report = match KubeletDevices::from_configmap(&configmap) {
        Ok(report) => report,
        Err(error) => {
            warn!(node, configmap = %name, %error, "ignoring the node agent's report of the kubelet's devices");
            return;
        }
    };
    let given = report.by_pod();
    for user in users {
        if let Some(devices) = given.get(&(user.namespace.as_str(), user.pod.as_str())) {
            user.given = devices.iter().map(|d| (*d).to_owned()).collect();
        }
    }
}

/// Tells each reservation pod of the node which GPU it holds (annotation
/// [`annotation::RESERVED_GPU`]), as the reservation pod itself does through NVML on a real
/// GPU node: GPU-sharing schedulers bind the sharing pods once they read it. Written once, when
/// missing, after the document that records the holder.
async fn announce_reservations(
    ctx: &Context,
    node: &str,
    document: &NodeTopology,
    users: &[tracking::GpuUser],
) -> Result<()> {
    for (namespace, pod, uuid) in tracking::unannounced_reservations(&document.gpus, users) {
        info!(node, %namespace, %pod, gpu = %uuid, "telling a reservation pod which GPU it holds");
        annotate_pod(
            ctx,
            node,
            &namespace,
            &pod,
            annotation::RESERVED_GPU,
            Some(&uuid),
        )
        .await?;
    }
    Ok(())
}

/// Writes on each pod holding GPUs by extended resource which ones it holds (annotation
/// [`annotation::ASSIGNED_GPUS`]), after the document that records it: pod tracking reads it
/// back, so the assignment outlives the document.
async fn record_assignments(
    ctx: &Context,
    node: &str,
    document: &NodeTopology,
    users: &[tracking::GpuUser],
) -> Result<()> {
    for (namespace, pod, uuids) in tracking::unrecorded_assignments(&document.gpus, users) {
        debug!(node, %namespace, %pod, gpus = %uuids, "recording a pod's GPUs on the pod");
        annotate_pod(
            ctx,
            node,
            &namespace,
            &pod,
            annotation::ASSIGNED_GPUS,
            Some(&uuids),
        )
        .await?;
    }
    Ok(())
}

/// Takes the recorded GPUs (`fakegpu.dev/gpus`) off the pods of a node whose pool is gone: the
/// GPUs went with it. A node that only left its pool keeps them, so that joining again moves no
/// running pod.
async fn forget_assignments(ctx: &Context, node: &str) -> Result<()> {
    for pod in ctx.caches.pods_by_node.pods_on(node, &ctx.caches.pods) {
        if pod.annotations().contains_key(annotation::ASSIGNED_GPUS) {
            let namespace = pod.namespace().unwrap_or_default();
            debug!(node, %namespace, pod = %pod.name_any(), "pool gone: removing the pod's recorded GPUs");
            annotate_pod(
                ctx,
                node,
                &namespace,
                &pod.name_any(),
                annotation::ASSIGNED_GPUS,
                None,
            )
            .await?;
        }
    }
    Ok(())
}

/// Writes one annotation of fakegpu's on a pod, or removes it (`None`). A pod deleted meanwhile
/// has nothing to write any more.
async fn annotate_pod(
    ctx: &Context,
    node: &str,
    namespace: &str,
    pod: &str,
    key: &str,
    value: Option<&str>,
) -> Result<()> {
    // The pods this reconcile started from may be older than the cache is now: the write may
    // have gone out since (another reconcile of the node), and its echo arrived or not yet.
    let cached = ctx.caches.pods.get(&ObjectRef::new(pod).within(namespace));
    if cached.is_some_and(|cached| cached.annotations().get(key).map(String::as_str) == value) {
        return Ok(());
    }
    let now = std::time::Instant::now();
    let fingerprint = crate::recent::fingerprint(&(key, value));
    if ctx
        .recent
        .is_own_pending::<Pod>(Some(namespace), pod, fingerprint, now)
    {
        debug!(node, %namespace, %pod, "same annotation already sent; the cache has not shown it yet");
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match apply::annotate(&pods, pod, key, value).await {
        Err(Error::Kube(kube::Error::Api(status))) if status.code == 404 => {
            debug!(node, %namespace, %pod, "pod gone before its annotation was written");
            Ok(())
        }
        Ok(written) => {
            ctx.recent
                .record_own(&written, fingerprint, std::time::Instant::now());
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// A Warning Event, once per value, on each pod of `node` whose utilization or GPU-sharing
/// annotation does not parse.
async fn report_malformed_annotations(ctx: &Context, node: &str) {
    for pod in ctx.caches.pods_by_node.pods_on(node, &ctx.caches.pods) {
        let pod_ref = pod.object_ref(&());
        if let Some((value, error)) = tracking::malformed_utilization(&pod) {
            let message = format!(
                "annotation {} {value:?} is not usable: {error}; the pod runs at its pool's default utilization",
                annotation::SIMULATED_UTILIZATION
            );
            ctx.events
                .warn_once(&pod_ref, "InvalidUtilization", &value, &message)
                .await;
        }
        for (name, value, problem) in tracking::malformed_sharing(&pod) {
            let message = format!(
                "annotation {name} {value:?} is not usable: {problem}; the pod's GPU memory is \
                 counted as if it were not there"
            );
            ctx.events
                .warn_once(
                    &pod_ref,
                    "InvalidGpuSharing",
                    &format!("{name}={value}"),
                    &message,
                )
                .await;
        }
    }
}

/// The slices of a KWOK node: GPUs when it serves DRA, the IMEX channel when it serves
/// ComputeDomains. Nodes with a kubelet get theirs from the node agent.
async fn ensure_slices(
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
async fn remove_unserved_plugin_slices(
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
async fn sync_slice(
    ctx: &Context,
    node: &str,
    name: &str,
    current: Option<Arc<Cached<ResourceSlice>>>,
    desired: Option<ResourceSlice>,
) -> Result<()> {
    let slices: Api<ResourceSlice> = Api::all(ctx.client.clone());
    let exists = current.is_some();
    match desired {
        None if current.is_some() => {
            info!(node, slice = name, "removing ResourceSlice");
            apply::delete_once(&ctx.recent, &slices, name).await
        }
        None => Ok(()),
        Some(desired) if current.is_some_and(|c| slice::slice_current(c.as_ref(), &desired)) => {
            Ok(())
        }
        Some(desired) => {
            if apply::replace_once(&ctx.recent, &slices, name, &desired, exists).await? {
                info!(
                    node,
                    slice = name,
                    generation = desired.spec.pool.generation,
                    "wrote ResourceSlice"
                );
            }
            Ok(())
        }
    }
}

fn cached_nrt(ctx: &Context, node: &str) -> Option<Arc<NodeResourceTopology>> {
    ctx.caches.nrts.as_ref()?.get(&ObjectRef::new(node))
}

/// The NodeResourceTopology of a node of a NUMA pool (when the cluster serves the API).
async fn ensure_nrt(
    ctx: &Context,
    node: &CachedNode,
    pool: &GpuNodePool,
    topology: &NodeTopology,
) -> Result<()> {
    if ctx.caches.nrts.is_none() {
        return Ok(());
    }
    let name = node.name_any();
    let current = cached_nrt(ctx, &name);
    let Some(desired) = nrt::desired_nrt(node, pool, topology) else {
        return remove_nrt(ctx, &name, current.is_some()).await;
    };
    if current.is_some_and(|c| nrt::nrt_current(&c, &desired)) {
        return Ok(());
    }
    let api: Api<NodeResourceTopology> = Api::all(ctx.client.clone());
    if apply::apply_once(&ctx.recent, &api, &name, &nrt::nrt_patch(&desired)).await? {
        info!(node = %name, pool = %pool.name_any(), "wrote NodeResourceTopology");
    }
    Ok(())
}

async fn remove_nrt(ctx: &Context, node: &str, exists: bool) -> Result<()> {
    if !exists {
        return Ok(());
    }
    info!(node, "removing NodeResourceTopology");
    let api: Api<NodeResourceTopology> = Api::all(ctx.client.clone());
    apply::delete_once(&ctx.recent, &api, node).await
}

async fn ensure_topology(
    ctx: &Context,
    node: &CachedNode,
    pool: &GpuNodePool,
    document: &NodeTopology,
) -> Result<()> {
    let name = node.name_any();
    let current = cached_configmap(ctx, &name);
    let allocated = tracking::allocated_count(&document.gpus);
    let desired = topology::desired_configmap(
        &ctx.namespace,
        node,
        &pool.name_any(),
        document.to_yaml()?,
        allocated,
    );
    let exists = current.is_some();
    if current.is_some_and(|cm| topology::configmap_current(&cm, &desired)) {
        return Ok(());
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let cm_name = NodeTopology::configmap_name(&name);
    if apply::replace_once(&ctx.recent, &configmaps, &cm_name, &desired, exists).await? {
        info!(node = %name, pool = %pool.name_any(), allocated, "wrote topology ConfigMap");
    }
    Ok(())
}

/// Takes away what the operator gave a node: its labels and status entries (the patch of an
/// empty intent names as null every one fakegpu alone set, and only those), its slices and its
/// topology ConfigMap; and when its pool is gone, the GPUs recorded on its pods.
pub async fn release(ctx: &Context, node: &CachedNode) -> Result<bool> {
    let name = node.name_any();
    // Before the pool's label goes: a failed removal is tried again while it still names the
    // pool.
    let pool_gone = node.labels().get(POOL_LABEL).is_some_and(|pool| {
        ctx.caches
            .pools
            .get(&ObjectRef::new(pool))
            .is_none_or(|pool| pool.metadata.deletion_timestamp.is_some())
    });
    if pool_gone {
        forget_assignments(ctx, &name).await?;
    }
    let lingering = if has_kubelet(node) {
        leaving::lingering_labels(&ctx.caches.claims.state(), &name)
    } else {
        Default::default()
    };
    let intent = status::NodeIntent {
        labels: lingering.clone(),
        ..Default::default()
    };
    // Whatever of fakegpu's is left, labels the cache holds as a digest only included: a node
    // whose last lingering deploy label is all fakegpu has there still needs its patch.
    if !status::node_current(node, &intent) {
        if lingering.is_empty() {
            info!(node = %name, "node left its pool: removing labels and status entries");
        } else {
            info!(node = %name, keeping = ?lingering.keys().collect::<Vec<_>>(), "node left its pool: removing labels and status entries but the DRA plugins of claims its pods hold");
        }
        apply_node(ctx, node, &intent).await?;
    }
    for slice in [slice::slice_name(&name), slice::channel_slice_name(&name)] {
        sync_slice(ctx, &name, &slice, cached_slice(ctx, &slice), None).await?;
    }
    remove_unserved_plugin_slices(ctx, node, None).await?;
    remove_nrt(ctx, &name, cached_nrt(ctx, &name).is_some()).await?;
    if cached_configmap(ctx, &name).is_some() {
        info!(node = %name, "removing topology ConfigMap");
        let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        apply::delete_once(
            &ctx.recent,
            &configmaps,
            &NodeTopology::configmap_name(&name),
        )
        .await?;
    }
    Ok(!lingering.is_empty())
}

pub fn error_policy(node: Arc<CachedNode>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed("node", error);
    ctx.node_problems
        .lock()
        .failures
        .insert(node.name_any(), error.to_string());
    warn!(node = %node.name_any(), %error, kind = error.metric_label(), "node reconcile failed");
    crate::retry::after_failure(&ctx.retries, "node", node.as_ref())
}

/// Nodes a pool event concerns: those it selects and those it labelled before.
pub fn nodes_of_pool(nodes: &[Arc<CachedNode>], pool: &GpuNodePool) -> Vec<ObjectRef<CachedNode>> {
    nodes
        .iter()
        .filter(|node| membership::concerns(pool, node.labels()))
        .map(|node| ObjectRef::from_obj(node.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use fakegpu_api::names::condition;

    use super::*;

    #[test]
    fn unhealthy_gpus_beyond_the_node_or_not_indices_are_set_apart() {
        let node: CachedNode = serde_json::from_value(json!({"metadata": {"name": "n",
            "annotations": {annotation::UNHEALTHY_GPUS: "1, 3,nine,7"}}}))
        .expect("node");
        assert_eq!(
            unhealthy_gpus(&node, 4),
            (vec![1, 3], vec!["nine".to_owned(), "7".to_owned()])
        );
        let plain: CachedNode =
            serde_json::from_value(json!({"metadata": {"name": "n"}})).expect("node");
        assert_eq!(unhealthy_gpus(&plain, 4), (vec![], vec![]));
    }

    #[test]
    fn slimming_keeps_what_the_controllers_read() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"a": "b"}, "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "fakegpu.dev/gpu-faults": "0:xid=48"},
                "managedFields": [
                {"manager": "kwok", "operation": "Update", "fieldsV1": {}},
                {"manager": "fakegpu", "operation": "Apply", "subresource": "status", "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:a": {}}},
                    "f:status": {"f:capacity": {"f:nvidia.com/gpu": {}}}}}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "32"},
                "capacity": {"nvidia.com/gpu": "8"},
                "images": [{"names": ["busybox"]}],
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "gpu-fractioning.nvidia.com/Ready", "status": "True"}],
            },
        }))
        .expect("test node");
        let owned = cached::OwnedStatus::from_managed_fields(&node).expect("own entry");
        let node = Cached::new(node);
        // `a` is fakegpu's alone: compared by digest, not kept.
        assert!(!node.labels().contains_key("a"));
        assert!(labels::labels_current(
            &node,
            &std::collections::BTreeMap::from([("a".to_owned(), "b".to_owned())])
        ));
        assert!(node.trimmed().metadata.managed_fields.is_none());
        // Of the annotations, those fakegpu reads; KWOK's as a flag.
        assert_eq!(
            node.annotations().keys().collect::<Vec<_>>(),
            [annotation::GPU_FAULTS]
        );
        assert!(!has_kubelet(&node));
        assert_eq!(cached::OwnedStatus::of(&node), Some(&owned));
        assert!(cached::OwnedStatus::of(&node).is_some());
        let trimmed = node.trimmed().clone();
        assert_eq!(trimmed.allocatable.expect("allocatable").len(), 2);
        assert_eq!(trimmed.capacity.expect("capacity").len(), 1);
        let conditions = trimmed.conditions.expect("conditions");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, condition::GPU_FRACTIONING_READY);
    }
}
