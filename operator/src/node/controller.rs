//! Which events reach the node controller, and how many nodes it reconciles at once. The
//! watches and caches are shared with the other controllers (`crate::watches`); each kind's
//! events arrive here on a stream of their own.

use std::sync::Arc;

use fakegpu_api::{GpuNodePool, meta::node_of_configmap, nrt::NodeResourceTopology};
use fakegpu_model::names::kubelet_devices;
use futures::{Stream, StreamExt, stream::BoxStream};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Pod},
    resource::v1::{ResourceClaim, ResourceSlice},
};
use kube::{
    ResourceExt,
    runtime::{
        Controller, controller,
        reflector::{ObjectRef, Store},
    },
};

use super::{cached::CachedNode, error_policy, reconcile};
use crate::{
    changes::{node_changes, spec_changes},
    context::{Context, measured},
    kit::{
        cache::Cached,
        recent::fingerprint,
        streams::{changes, log_outcome, others_changes, own_echoes_dropped},
    },
    membership, tracking,
};

/// Node reconciles running at once. Unbounded, thousands of nodes joining at once meant
/// thousands of requests in flight, each on a connection (and TLS session) of its own while the
/// API server was slow: most of the operator's CPU and memory at 5 000 nodes. A bounded number
/// keeps connections few and reused; the API server is the bottleneck either way.
const CONCURRENCY: u16 = 64;

/// The events of each watched kind that concern nodes.
pub struct Events {
    pub nodes: BoxStream<'static, Arc<CachedNode>>,
    pub pools: BoxStream<'static, Arc<GpuNodePool>>,
    pub configmaps: BoxStream<'static, Arc<Cached<ConfigMap>>>,
    pub kubelet_reports: BoxStream<'static, Arc<ConfigMap>>,
    pub slices: BoxStream<'static, Arc<Cached<ResourceSlice>>>,
    pub pods: BoxStream<'static, Arc<Pod>>,
    pub nrts: BoxStream<'static, Arc<NodeResourceTopology>>,
    pub claims: BoxStream<'static, Arc<ResourceClaim>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

/// Runs the node controller until a termination signal.
pub async fn run(ctx: Arc<Context>, events: Events) {
    let caches = &ctx.caches;
    let recent = ctx.writes.recent.clone();
    // A node's own status patch comes back as an event that would reconcile it only to find
    // the patch done (one reconcile in two while nodes join); the pools still count it.
    let nodes = own_echoes_dropped(
        node_changes(events.nodes, caches.nodes.clone()),
        recent.clone(),
    );
    let node_store = caches.nodes.clone();
    let controller = Controller::for_shared_stream(nodes, caches.nodes.clone())
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .watches_shared_stream(
            spec_changes(events.pools, caches.pools.clone()),
            move |pool| nodes_of_pool(&node_store.state(), &pool),
        )
        .watches_shared_stream(
            others_changes(events.configmaps, caches.configmaps.clone()),
            |cm| cm.kept().node().map(ObjectRef::new),
        )
        .watches_shared_stream(events.kubelet_reports, node_of_kubelet_report)
        .watches_shared_stream(
            others_changes(events.slices, caches.slices.clone()),
            |slice| {
                slice
                    .trimmed()
                    .spec
                    .node_name
                    .as_deref()
                    .map(ObjectRef::new)
            },
        )
        .watches_shared_stream(
            own_echoes_dropped(pod_changes(events.pods, caches.pods.clone()), recent),
            |pod| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .map(ObjectRef::new)
            },
        )
        .watches_shared_stream(events.nrts, |nrt| {
            Some(ObjectRef::<CachedNode>::new(&nrt.name_any()))
        })
        .watches_shared_stream(events.claims, |claim| {
            tracking::nodes_of_claim(&claim)
                .into_iter()
                .map(|node| ObjectRef::new(&node))
        })
        .shutdown_on_signal();
    controller
        .run(measured("node", reconcile), error_policy, ctx.clone())
        .for_each(|result| log_outcome("node", result))
        .await;
}

/// Nodes a pool event concerns: those it selects and those it labelled before.
pub fn nodes_of_pool(nodes: &[Arc<CachedNode>], pool: &GpuNodePool) -> Vec<ObjectRef<CachedNode>> {
    nodes
        .iter()
        .filter(|node| membership::concerns(pool, node.labels()))
        .map(|node| ObjectRef::from_obj(node.as_ref()))
        .collect()
}

/// The node a kubelet report is about. (A topology ConfigMap's cache keeps its node aside, see
/// `KeptOfTopology`.)
fn node_of_kubelet_report(cm: Arc<ConfigMap>) -> Option<ObjectRef<CachedNode>> {
    node_of_configmap(cm.as_ref(), kubelet_devices::CONFIGMAP_PREFIX).map(ObjectRef::new)
}

/// Pods whose cached content changed in what tracking reads. KWOK and the kubelet update a
/// pod's status as it starts (phase, conditions, IPs, container states), each update
/// reconciled its node again to find nothing to write: two of the three node reconciles of
/// every GPU pod. Runs before [`own_echoes_dropped`], so that fakegpu's own write to a pod is
/// what the next update is compared with.
fn pod_changes(
    pods: impl Stream<Item = Arc<Pod>>,
    cache: Store<Pod>,
) -> impl Stream<Item = Arc<Pod>> {
    changes(pods, cache, pod_fingerprint)
}

/// What the controllers read of a (slimmed, see [`crate::pods::slim`]) pod, hashed: of its phase
/// and conditions only whether it finished (see [`tracking::is_active`]) and, for a pod with
/// claims, whether they were prepared ([`tracking::claims_prepared`]).
fn pod_fingerprint(pod: &Pod) -> u64 {
    let meta = &pod.metadata;
    fingerprint(&(
        &meta.labels,
        &meta.annotations,
        meta.deletion_timestamp.is_some(),
        &meta.uid,
        &meta.owner_references,
        &pod.spec,
        pod.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref()),
        tracking::is_active(pod),
        // Only for pods with claims: starting is no change for the others.
        has_claims(pod) && tracking::claims_prepared(pod),
    ))
}

fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|claims| !claims.is_empty())
}

#[cfg(test)]
mod tests {
    use fakegpu_model::names::annotation;
    use serde_json::json;

    use super::*;
    use crate::pods;

    #[test]
    fn a_pod_starting_is_no_pod_change_but_its_annotations_and_its_end_are() {
        let pod =
            |resource_version: &str, annotations: serde_json::Value, status: serde_json::Value| {
                let mut pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                        "resourceVersion": resource_version, "annotations": annotations},
                    "spec": {"nodeName": "n", "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                    "status": status,
                }))
                .expect("test pod");
                pods::slim(&mut pod);
                pod_fingerprint(&pod)
            };
        let bound = pod("1", json!({}), json!({"phase": "Pending"}));
        let running = pod(
            "2",
            json!({}),
            json!({"phase": "Running", "podIP": "10.0.0.5",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "",
                    "ready": true, "restartCount": 0, "state": {"running": {}}}]}),
        );
        assert_eq!(bound, running);
        let annotated = pod(
            "3",
            json!({annotation::ASSIGNED_GPUS: "GPU-1"}),
            json!({"phase": "Running"}),
        );
        assert_ne!(running, annotated);
        let finished = pod(
            "4",
            json!({annotation::ASSIGNED_GPUS: "GPU-1"}),
            json!({"phase": "Succeeded"}),
        );
        assert_ne!(annotated, finished);
        // A pod with a claim starting is a change: its claim's devices become its own.
        let claiming = |status: serde_json::Value| {
            let mut pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns", "uid": "u2"},
                "spec": {"nodeName": "n", "containers": [{"name": "main"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "claim"}]},
                "status": status,
            }))
            .expect("test pod");
            pods::slim(&mut pod);
            pod_fingerprint(&pod)
        };
        assert_ne!(
            claiming(json!({"phase": "Pending"})),
            claiming(json!({"phase": "Running"}))
        );
    }
}
