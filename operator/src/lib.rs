//! fakegpu-operator: reconciles GpuNodePools into what GPU-aware software reads.
//!
//! Two controllers share one set of watch caches (reflector stores):
//! - [`node`]: per Node, the labels and the topology ConfigMap of the pool that owns it;
//!   the node's status (KWOK capacity, fractioning condition), its KWOK ResourceSlice, and
//!   which pod holds which GPU ([`tracking`]);
//! - [`pool`]: per GpuNodePool, its status, conditions and the cleanup finalizer;
//! - [`compute_domain`]: per ComputeDomain, its ResourceClaimTemplate and status.
//!
//! Each concern keeps its desired state in pure functions (unit tested without a cluster) and
//! writes through [`apply`], which skips writes when the cache already shows the desired state.

pub mod apply;
pub mod cache;
pub mod compute_domain;
pub mod conditions;
pub mod controllers;
pub mod deviceclass;
pub mod events;
pub mod leader;
pub mod membership;
pub mod metrics;
pub mod node;
pub mod pacer;
pub mod pod_groups;
pub mod pods;
pub mod pool;
pub mod recent;
pub mod retry;
pub mod served;
pub mod streams;
#[cfg(test)]
mod testing;
pub mod tracking;

use fakegpu_api::GpuNodePool;
use k8s_openapi::api::{
    core::v1::{ConfigMap, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice},
};
use std::sync::Arc;

use kube::{Client, runtime::reflector::Store};

/// Everything that can fail in a reconcile. Operator-side problems with a pool's content are not
/// errors: they become status conditions (see [`pool`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("topology document: {0}")]
    Topology(#[from] fakegpu_api::topology::TopologyError),
    #[error("pool finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// Short label for counting failures by kind.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kube",
            Self::Topology(_) => "topology",
            Self::Finalizer(_) => "finalizer",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What every reconcile may use: the client, the shared caches, and what the operator
/// remembers between reconciles.
pub struct Context {
    pub client: Client,
    /// Namespace of the per-node topology ConfigMaps.
    pub namespace: String,
    pub caches: Caches,
    pub events: events::Events,
    pub metrics: metrics::Metrics,
    /// Paces pool status writes (see [`pacer`]).
    pub pool_status_pacer: pacer::Pacer,
    /// Paces the writes of pool statuses that only count joining nodes or allocated GPUs.
    pub pool_counts_pacer: pacer::Pacer,
    /// Each pool's nodes, updated node by node (see [`pool::members`]).
    pub pool_members: Arc<pool::members::MembersIndex>,
    /// What is wrong with nodes, for their pools' statuses: the last error of each node whose
    /// reconcile fails (cleared when one succeeds: it keeps the pool from getting ready), and
    /// the nodes whose GPUs pods overbook.
    pub node_problems: parking_lot::Mutex<pool::status::NodeProblems>,
    /// Writes sent whose watch events have not arrived yet (see [`recent`]).
    pub recent: Arc<recent::RecentWrites>,
    /// PodGroups' priority classes, asked for as pods name them.
    pub pod_groups: pod_groups::PodGroups,
    /// Failures in a row per object, for the error policies' backoff (see [`retry`]).
    pub retries: retry::Retries,
    /// Held while the DeviceClasses are compared and written (see [`deviceclass::ensure`]).
    pub device_class_writes: tokio::sync::Mutex<()>,
    /// Where GPU-sharing schedulers (Run:ai, KAI) put their reservation pods.
    pub reservations: tracking::ReservationNamespaces,
    /// Whether the `gpu.nvidia.com` DeviceClass names `nvidia.com/gpu` as its extended resource
    /// (see [`controllers::Features`]).
    pub dra_extended_resource: bool,
}

/// The watch caches (reflector stores) reconciles read instead of asking the API server. Some
/// hold objects trimmed to what the controllers read: see [`controllers`] for which.
#[derive(Debug)]
pub struct Caches {
    pub pools: Store<GpuNodePool>,
    pub nodes: Store<node::CachedNode>,
    /// The per-node topology ConfigMaps.
    pub configmaps: Store<cache::Cached<ConfigMap>>,
    pub device_classes: Store<DeviceClass>,
    /// fakegpu's own ResourceSlices (those of KWOK nodes).
    pub slices: Store<cache::Cached<ResourceSlice>>,
    /// Bound, unfinished pods, slimmed (see [`pods`]).
    pub pods: Store<Pod>,
    pub pods_by_node: pods::PodsByNode,
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

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}
