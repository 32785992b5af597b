//! What every reconcile may use ([`Context`]): the client, the watch caches ([`Caches`]) and
//! what the operator remembers between reconciles; and `measured`, which runs a reconcile
//! with them counted, timed and its retries reset.

use std::sync::Arc;

use fakegpu_api::GpuNodePool;
use futures::future::BoxFuture;
use k8s_openapi::api::{
    core::v1::{ConfigMap, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice},
};
use kube::{
    Client,
    core::{ClusterResourceScope, NamespaceResourceScope},
    runtime::{controller::Action, reflector::Store},
};

use crate::{
    error::Result,
    kit::{
        cache::Cached,
        events::Events,
        metrics::Metrics,
        owned::{Owned, Policy, Writable},
        pacer::Pacer,
        recent::RecentWrites,
        retry::Retries,
    },
    node::cached::CachedNode,
    pod_groups::PodGroups,
    pods::PodsByNode,
    pool::{members::MembersIndex, status::NodeProblems},
    tracking::ReservationNamespaces,
};

/// What every reconcile may use, grouped by role: the client, the operator's settings, the
/// shared caches, what it remembers between reconciles, what paces and confirms its writes, its
/// Events and its metrics.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub caches: Caches,
    pub state: State,
    pub writes: Writes,
    pub events: Events,
    pub metrics: Metrics,
}

/// How the operator was started: fixed for its lifetime.
#[derive(Debug)]
pub struct Settings {
    /// Namespace of the per-node topology ConfigMaps.
    pub namespace: String,
    /// Where GPU-sharing schedulers (Run:ai, KAI) put their reservation pods.
    pub reservations: ReservationNamespaces,
    /// Whether the `gpu.nvidia.com` DeviceClass names `nvidia.com/gpu` as its extended resource
    /// (see [`crate::controllers::Features`]).
    pub dra_extended_resource: bool,
}

/// What the operator remembers between reconciles, beside the caches.
#[derive(Debug)]
pub struct State {
    /// Each pool's nodes, updated node by node (see [`crate::pool::members`]).
    pub pool_members: Arc<MembersIndex>,
    /// What is wrong with nodes, for their pools' statuses: the last error of each node whose
    /// reconcile fails (cleared when one succeeds: it keeps the pool from getting ready), and
    /// the nodes whose GPUs pods overbook.
    pub node_problems: parking_lot::Mutex<NodeProblems>,
    /// PodGroups' priority classes, asked for as pods name them.
    pub pod_groups: PodGroups,
    /// Failures in a row per object, for the error policies' backoff (see [`crate::kit::retry`]).
    pub retries: Retries,
}

/// What paces, orders and confirms the operator's writes.
#[derive(Debug)]
pub struct Writes {
    /// Writes sent whose watch events have not arrived yet (see [`crate::kit::recent`]).
    pub recent: Arc<RecentWrites>,
    /// Paces pool status writes (see [`crate::kit::pacer`]).
    pub pool_status: Pacer,
    /// Paces the writes of pool statuses that only count joining nodes or allocated GPUs.
    pub pool_counts: Pacer,
    /// Held while the DeviceClasses are compared and written (see [`crate::deviceclass::ensure`]).
    pub device_classes: tokio::sync::Mutex<()>,
}

/// The watch caches (reflector stores) reconciles read instead of asking the API server. Some
/// hold objects trimmed to what the controllers read: see [`crate::watches`] for which.
#[derive(Debug)]
pub struct Caches {
    pub pools: Store<GpuNodePool>,
    pub nodes: Store<CachedNode>,
    /// The per-node topology ConfigMaps.
    pub configmaps: Store<Cached<ConfigMap>>,
    pub device_classes: Store<DeviceClass>,
    /// fakegpu's own ResourceSlices (those of KWOK nodes).
    pub slices: Store<Cached<ResourceSlice>>,
    /// Bound, unfinished pods, slimmed (see [`crate::pods`]).
    pub pods: Store<Pod>,
    pub pods_by_node: PodsByNode,
    pub claims: Store<ResourceClaim>,
    /// The node agents' reports of the devices their kubelets gave each container
    /// ([`fakegpu_api::kubelet_devices`]), by ConfigMap name.
    pub kubelet_reports: Store<ConfigMap>,
    /// fakegpu's NodeResourceTopologies; `None` when the cluster does not serve the API or
    /// publishing is switched off.
    pub nrts: Option<Store<fakegpu_api::nrt::NodeResourceTopology>>,
    /// ComputeDomains' ResourceClaimTemplates; `None` when the cluster serves no ComputeDomains.
    pub claim_templates: Option<Store<ResourceClaimTemplate>>,
}

impl Context {
    /// The writer of cluster-scoped objects of kind `K` (see [`crate::kit::owned`]).
    pub fn owned<K>(&self, policy: Policy) -> Owned<'_, K>
    where
        K: Writable + kube::Resource<Scope = ClusterResourceScope>,
    {
        Owned::all(self.client.clone(), &self.writes.recent, policy)
    }

    /// The writer of objects of kind `K` in `namespace`.
    pub fn owned_in<K>(&self, namespace: &str, policy: Policy) -> Owned<'_, K>
    where
        K: Writable + kube::Resource<Scope = NamespaceResourceScope>,
    {
        Owned::namespaced(self.client.clone(), namespace, &self.writes.recent, policy)
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Wraps a reconcile function so that every run is counted and timed under `controller`.
pub(crate) fn measured<K, F, Fut>(
    controller: &'static str,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context>) -> BoxFuture<'static, Result<Action>>
where
    K: kube::Resource + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    move |object, ctx| {
        let metrics = ctx.metrics.clone();
        let key = crate::kit::retry::key(object.as_ref());
        Box::pin(async move {
            let result = metrics
                .measure(controller, reconcile(object, ctx.clone()))
                .await;
            if result.is_ok() {
                ctx.state.retries.succeeded(controller, &key);
            }
            result
        })
    }
}
