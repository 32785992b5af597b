//! The node controller: gives each node what the pool that owns it means for it (labels, status
//! entries, a KWOK ResourceSlice, the topology ConfigMap with the pods holding its GPUs, the
//! answer to Run:ai's dynamic MIG, the GPU each reservation pod holds), and takes them away when
//! no pool does.

#[cfg(test)]
mod against_api;
mod assignments;
pub mod cached;
pub mod dynamic_mig;
pub mod faults;
pub mod interfaces;
pub mod labels;
pub mod leaving;
mod lookups;
pub mod nrt;
mod reports;
pub mod slice;
pub mod status;
pub mod topology;
mod writes;

use std::{collections::HashMap, sync::Arc, time::Duration};

use fakegpu_api::{
    GpuNodePool,
    faults::GpuFault,
    pool::{
        Interfaces,
        resolve::{ResolvedGpu, resolve_pool},
    },
};
use fakegpu_model::{names::fakegpu::POOL_LABEL, topology::NodeTopology};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use tracing::{debug, info, warn};

use crate::{
    context::Context,
    error::Error,
    error::Result,
    kit::apply,
    membership,
    pod_groups::{PodGroupKey, pod_group_of},
    tracking,
};
use assignments::*;
pub use cached::{CachedNode, KeptOfNode, TrimmedNode, has_kubelet};
use interfaces::DeployChoices;
pub use lookups::allocated_gpus;
use lookups::*;
use reports::*;
use writes::*;

pub async fn reconcile(node: Arc<CachedNode>, ctx: Arc<Context>) -> Result<Action> {
    let name = node.name_any();
    let action = reconcile_node(node, ctx.clone()).await?;
    ctx.state.node_problems.lock().failures.remove(&name);
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
            let classes = ctx.state.pod_groups.priority_classes(&pods).await;
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
            let lingers = ensure_node(&ctx, &node, &serving, &gpu, &topology, answer).await?;
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
            // A released claim names no node any more: its event does not reach the node, whose
            // plugin's deploy label would stay until something else changed.
            if lingers {
                return Ok(Action::requeue(LINGER_RECHECK));
            }
        }
        // The pool reports this as a condition. The node keeps what it has: a typo in a pool
        // must not strip GPUs from nodes that run workloads.
        Err(error) => {
            debug!(node = %node.name_any(), pool = %pool.name_any(), %error, "pool does not resolve")
        }
    }
    Ok(Action::await_change())
}

/// How often a node that keeps a plugin for its pods' claims (it left its pool, or its pool
/// stopped serving the plugin's driver) looks again whether they still hold them (a released
/// claim names no node any more, so its event does not reach the node).
const LINGER_RECHECK: Duration = Duration::from_secs(5);

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
    let previous = cached_configmap(ctx, &name)
        .and_then(|cm| NodeTopology::from_configmap_data(cm.trimmed().data.as_ref()).ok());
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
                &ctx.settings.reservations,
            )
        })
        .collect();
    give_what_the_kubelet_gave(ctx, &name, &mut users);
    let mig_single = document.mig_strategy == "single";
    let overbooked = tracking::assign(&mut document.gpus, &users, mig_single);
    (document, users, overbooked)
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
        let configmaps: Api<ConfigMap> =
            Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
        apply::delete_once(
            &ctx.writes.recent,
            &configmaps,
            &NodeTopology::configmap_name(&name),
        )
        .await?;
    }
    Ok(!lingering.is_empty())
}

pub fn error_policy(node: Arc<CachedNode>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed("node", error.metric_label());
    ctx.state
        .node_problems
        .lock()
        .failures
        .insert(node.name_any(), error.to_string());
    warn!(node = %node.name_any(), %error, kind = error.metric_label(), "node reconcile failed");
    crate::kit::retry::after_failure(&ctx.state.retries, "node", node.as_ref())
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

    use fakegpu_model::names::{annotation, condition};
    use k8s_openapi::api::core::v1::Node;

    use super::*;
    use crate::kit::cache::Cached;

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
