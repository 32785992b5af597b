//! Which events reach the pool controller. The watches and caches are shared with the other
//! controllers (`crate::watches`); each kind's events arrive here on a stream of their own.

use std::sync::Arc;

use fakegpu_api::GpuNodePool;
use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::api::{core::v1::ConfigMap, resource::v1::DeviceClass};
use kube::{
    ResourceExt,
    runtime::{
        Controller,
        reflector::{ObjectRef, Store},
    },
};

use super::{error_policy, reconcile};
use crate::{
    changes::{node_changes, spec_changes},
    context::{Context, measured},
    kit::{cache::Cached, streams::log_outcome},
    membership,
    node::CachedNode,
};

/// The events of each watched kind that concern pools.
pub struct Events {
    /// The pools themselves.
    pub pools: BoxStream<'static, Arc<GpuNodePool>>,
    /// The pools again, for the other pools they concern.
    pub other_pools: BoxStream<'static, Arc<GpuNodePool>>,
    pub device_classes: BoxStream<'static, Arc<DeviceClass>>,
    pub nodes: BoxStream<'static, Arc<CachedNode>>,
    pub configmaps: BoxStream<'static, Arc<Cached<ConfigMap>>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

/// Runs the pool controller until a termination signal.
pub async fn run(ctx: Arc<Context>, events: Events) {
    let caches = &ctx.caches;
    let members = ctx.state.pool_members.clone();
    let nodes = node_changes(events.nodes, caches.nodes.clone())
        .inspect(move |node| members.node_changed(&node.name_any()));
    let pool_store = caches.pools.clone();
    let controller = Controller::for_shared_stream(events.pools, caches.pools.clone())
        // One pool's change can start or end another's conflict without any node changing
        // (the older pool keeps its node). Statuses are pure to compute and written only when
        // they differ, so every pool is looked at again.
        .watches_shared_stream(
            spec_changes(events.other_pools, caches.pools.clone()),
            to_every_pool(caches.pools.clone()),
        )
        // A DeviceClass written, deleted or taken over by someone else concerns DRA pools.
        .watches_shared_stream(events.device_classes, to_every_pool(caches.pools.clone()))
        .watches_shared_stream(nodes, move |node| pools_of_node(&pool_store.state(), &node))
        // A node's allocated GPUs count in its pool's status.
        .watches_shared_stream(events.configmaps, |cm| cm.kept().pool().map(ObjectRef::new))
        .shutdown_on_signal();
    controller
        .run(measured("pool", reconcile), error_policy, ctx.clone())
        .for_each(|result| log_outcome("pool", result))
        .await;
}

/// Pools a node event concerns: those that select it and the one it is labelled for.
pub fn pools_of_node(pools: &[Arc<GpuNodePool>], node: &CachedNode) -> Vec<ObjectRef<GpuNodePool>> {
    pools
        .iter()
        .filter(|pool| membership::concerns(pool, node.labels()))
        .map(|pool| ObjectRef::from_obj(pool.as_ref()))
        .collect()
}

/// A mapper that sends any event to every pool. Pool statuses are pure to compute and written
/// only when they differ, so looking at all of them again is cheap.
fn to_every_pool<T>(pools: Store<GpuNodePool>) -> impl Fn(T) -> Vec<ObjectRef<GpuNodePool>> {
    move |_| {
        pools
            .state()
            .iter()
            .map(|pool| ObjectRef::from_obj(pool.as_ref()))
            .collect()
    }
}
