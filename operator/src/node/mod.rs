//! The node controller: gives each node what the pool that owns it means for it (labels, status
//! entries, a KWOK ResourceSlice, the topology ConfigMap with the pods holding its GPUs, the
//! answer to Run:ai's dynamic MIG, the GPU each reservation pod holds), and takes them away when
//! no pool does.

#[cfg(test)]
mod against_api;
mod assignments;
pub mod cached;
pub mod controller;
mod document;
pub mod dynamic_mig;
pub mod faults;
pub mod interfaces;
pub mod labels;
pub mod leaving;
mod lookups;
pub mod nrt;
mod release;
mod reports;
pub mod slice;
pub mod status;
pub mod topology;
mod writes;

use std::{sync::Arc, time::Duration};

use fakegpu_api::pool::resolve::resolve_pool;
use kube::{ResourceExt, runtime::controller::Action};
use tracing::{debug, warn};

use crate::{context::Context, error::Error, error::Result, membership};
use assignments::{announce_reservations, record_assignments};
pub use cached::{CachedNode, KeptOfNode, TrimmedNode, has_kubelet};
use document::desired_topology;
use interfaces::DeployChoices;
pub use lookups::allocated_gpus;
pub use release::release;
use reports::{
    note_overbooking, report_malformed_annotations, report_malformed_unhealthy, report_overbooking,
};
use writes::{
    Serving, ensure_node, ensure_nrt, ensure_slices, ensure_topology, remove_unserved_plugin_slices,
};

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
            ensure_topology(&ctx, &node, Some((&pool, &topology))).await?;
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
