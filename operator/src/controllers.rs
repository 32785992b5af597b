//! Wiring: which watch feeds which cache, and which controllers hear of which kind's events
//! (the plumbing each kind goes through is [`crate::kit::streams`]).

use std::sync::Arc;

use fakegpu_api::{GpuNodePool, meta::node_of_configmap, nrt::NodeResourceTopology};
use fakegpu_model::names::{
    fakegpu::{MANAGED_BY, MANAGED_BY_VALUE},
    kubelet_devices,
    topology::NODE_TOPOLOGY_LABEL,
};
use futures::{FutureExt, Stream, StreamExt, TryStreamExt, future, stream};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceSlice},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        Controller, WatchStreamExt, controller,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tracing::info;

use crate::{
    compute_domain,
    context::Context,
    context::{Caches, Settings, State, Writes, measured},
    kit::{
        apply,
        cache::Cached,
        metrics::Metrics,
        pacer::Pacer,
        recent::{RecentWrites, fingerprint},
        streams::{
            LIST_PAGE_SIZE, cached, cached_noting_own_writes, changes, confirm, fan_out, kept,
            log_errors, log_outcome, others_changes, own_echoes_dropped, shared_touched,
        },
    },
    node::{self, CachedNode},
    pods::{self, PodsByNode},
    pool::{self, members::MembersIndex},
    tracking,
};

/// Node reconciles running at once. Unbounded, thousands of nodes joining at once meant
/// thousands of requests in flight, each on a connection (and TLS session) of its own while the
/// API server was slow: most of the operator's CPU and memory at 5 000 nodes. A bounded number
/// keeps connections few and reused; the API server is the bottleneck either way.
const NODE_CONCURRENCY: u16 = 64;

/// At most one status write per pool per interval (see [`crate::kit::pacer`]).
const POOL_STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// At most one write per pool per interval of a status that only counts joining nodes or
/// allocated GPUs (see [`crate::pool::status::only_counts`]): what `kubectl get gnp -w` shows
/// while a pool fills or pods come.
const POOL_COUNTS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Such writes of all pools together go about once per this interval: each costs the API
/// server as much as several nodes (a schema-checked apply of up to 100 node entries), and 20
/// pools filling at once wrote 350 of them in a 60-second convergence.
const POOL_COUNTS_OVERALL: std::time::Duration = std::time::Duration::from_secs(1);

/// What the operator does beyond the core: APIs it serves only where the cluster has them, and
/// whose GPU reservation pods it answers.
#[derive(Clone, Debug)]
pub struct Features {
    /// Publish NodeResourceTopologies.
    pub node_resource_topology: bool,
    /// Run the ComputeDomain controller.
    pub compute_domains: bool,
    /// Namespaces of GPU-sharing schedulers' reservation pods (see [`crate::tracking`]).
    pub reservations: crate::tracking::ReservationNamespaces,
    /// Whether the `gpu.nvidia.com` DeviceClass names `nvidia.com/gpu` as its extended resource,
    /// as NVIDIA's chart sets it: pods asking for `nvidia.com/gpu` may then be served by DRA on
    /// nodes that do not advertise it, at a cost to the scheduler of every such pod.
    pub dra_extended_resource: bool,
}

/// Runs the controllers until a termination signal; returns once they have stopped.
pub async fn run(
    client: Client,
    namespace: String,
    features: Features,
    metrics: Metrics,
) -> anyhow::Result<()> {
    let node_resource_topology = features.node_resource_topology;
    let (pools, pool_writer) = reflector::store::<GpuNodePool>();
    let (nodes, node_writer) = reflector::store::<CachedNode>();
    let (configmaps, configmap_writer) = reflector::store::<Cached<ConfigMap>>();
    let (device_classes, device_class_writer) = reflector::store::<DeviceClass>();
    let (slices, slice_writer) = reflector::store::<Cached<ResourceSlice>>();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (claims, claim_writer) = reflector::store::<ResourceClaim>();
    let (kubelet_reports, kubelet_report_writer) = reflector::store::<ConfigMap>();
    let pods_by_node = PodsByNode::default();
    let recent = Arc::new(RecentWrites::default());

    let all = watcher::Config::default();
    let pool_events = cached(
        Api::all(client.clone()),
        all.clone(),
        pool_writer,
        std::convert::identity,
    );
    let (
        pool_events,
        [
            pools_for_pool_controller,
            pools_for_other_pools,
            pools_for_node_controller,
        ],
    ) = fan_out(pool_events);
    // Nodes keep what the controllers read (fakegpu's managed-fields entries tell which status
    // entries are fakegpu's); other kinds drop managed fields: they are most of their size.
    let node_events = cached(
        Api::all(client.clone()),
        all.clone(),
        node_writer,
        Cached::new,
    )
    .inspect(confirm(&recent));
    let (node_events, [for_node_controller, for_pool_controller]) = fan_out(node_events);
    // A node's own status patch comes back as an event that would reconcile it only to find
    // the patch done (one reconcile in two while nodes join); the pools still count it.
    let for_node_controller = own_echoes_dropped(
        node_changes(for_node_controller, nodes.clone()),
        recent.clone(),
    );
    let pool_members = Arc::new(MembersIndex::default());
    let members_of_pools = pool_members.clone();
    let for_pool_controller = node_changes(for_pool_controller, nodes.clone())
        .inspect(move |node| members_of_pools.node_changed(&node.name_any()));
    let topology_configmaps = all.clone().labels(&format!("{NODE_TOPOLOGY_LABEL}=true"));
    let configmap_events = cached(
        Api::namespaced(client.clone(), &namespace),
        topology_configmaps,
        configmap_writer,
        cached_noting_own_writes(configmaps.clone(), recent.clone()),
    )
    .inspect(confirm(&recent));
    // Driven here, not by the node controller: the controllers start only once this cache is full.
    let (configmap_events, [configmaps_for_nodes, configmaps_for_pools]) =
        fan_out(configmap_events);
    // What the node agents report of their kubelets' choices (real nodes only).
    let kubelet_report_events = cached(
        Api::namespaced(client.clone(), &namespace),
        all.clone()
            .labels(&format!("{}=true", kubelet_devices::LABEL)),
        kubelet_report_writer,
        kept(apply::drop_managed_fields),
    );
    let (kubelet_report_events, [kubelet_reports_for_nodes]) = fan_out(kubelet_report_events);
    let device_class_events = cached(
        Api::all(client.clone()),
        all.clone(),
        device_class_writer,
        std::convert::identity,
    )
    .inspect(confirm(&recent));
    let (device_class_events, [device_classes_for_pools]) = fan_out(device_class_events);
    let own_slices = all
        .clone()
        .labels(&format!("{MANAGED_BY}={MANAGED_BY_VALUE}"));
    // Slices are cached without their devices (a digest stands in): the controllers only ask
    // whether a slice is current, and the devices were half the operator's memory.
    let slice_events = cached(
        Api::all(client.clone()),
        own_slices,
        slice_writer,
        cached_noting_own_writes(slices.clone(), recent.clone()),
    )
    .inspect(confirm(&recent));
    let (slice_events, [slices_for_nodes]) = fan_out(slice_events);
    // Pods also feed the node -> pods index, from the same events as their store.
    let index = pods_by_node.clone();
    let pod_store = pod_writer.as_reader();
    let pod_events = shared_touched(
        pod_store,
        log_errors(
            watcher(
                Api::all(client.clone()),
                pods::watch_config().page_size(LIST_PAGE_SIZE),
            )
            .default_backoff()
            .modify(pods::slim)
            .reflect(pod_writer)
            .inspect_ok(move |event| index.apply_watcher_event(event)),
        ),
    );
    let (pod_events, [pods_for_nodes]) = fan_out(pod_events);
    let claim_events = cached(
        Api::all(client.clone()),
        all,
        claim_writer,
        kept(apply::drop_managed_fields),
    );
    let (claim_events, [claims_for_nodes, claims_for_domains]) = fan_out(claim_events);
    let domain_watches = features
        .compute_domains
        .then(|| compute_domain::Watches::new(&client));
    let claim_templates = domain_watches.as_ref().map(|w| w.templates.clone());
    let (nrts, nrt_events, nrts_for_nodes) = if node_resource_topology {
        let (store, writer) = reflector::store::<NodeResourceTopology>();
        let own = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGED_BY_VALUE}"));
        let events = cached(
            Api::all(client.clone()),
            own,
            writer,
            kept(apply::drop_managed_fields),
        )
        .inspect(confirm(&recent));
        let (drive, [for_nodes]) = fan_out(events);
        (Some(store), drive.boxed(), for_nodes.boxed())
    } else {
        (None, future::pending().boxed(), stream::empty().boxed())
    };

    let ctx = Arc::new(Context {
        events: crate::kit::events::Events::new(client.clone()),
        state: State {
            pool_members,
            node_problems: Default::default(),
            pod_groups: crate::pod_groups::PodGroups::new(client.clone()),
            retries: Default::default(),
        },
        client,
        settings: Settings {
            namespace,
            reservations: features.reservations,
            dra_extended_resource: features.dra_extended_resource,
        },
        caches: Caches {
            pools: pools.clone(),
            nodes: nodes.clone(),
            configmaps: configmaps.clone(),
            device_classes: device_classes.clone(),
            slices: slices.clone(),
            pods: pods.clone(),
            pods_by_node,
            claims: claims.clone(),
            kubelet_reports: kubelet_reports.clone(),
            nrts: nrts.clone(),
            claim_templates,
        },
        writes: Writes {
            recent,
            pool_status: Pacer::new(POOL_STATUS_INTERVAL),
            pool_counts: Pacer::shared(POOL_COUNTS_INTERVAL, POOL_COUNTS_OVERALL),
            device_classes: Default::default(),
        },
        metrics: metrics.clone(),
    });
    let node_store = nodes.clone();
    let node_controller = Controller::for_shared_stream(for_node_controller, nodes.clone())
        .with_config(controller::Config::default().concurrency(NODE_CONCURRENCY))
        .watches_shared_stream(
            spec_changes(pools_for_node_controller, pools.clone()),
            move |pool| node::nodes_of_pool(&node_store.state(), &pool),
        )
        .watches_shared_stream(
            others_changes(configmaps_for_nodes, configmaps.clone()),
            |cm| cm.kept().node().map(ObjectRef::new),
        )
        .watches_shared_stream(kubelet_reports_for_nodes, node_of_kubelet_report)
        .watches_shared_stream(others_changes(slices_for_nodes, slices.clone()), |slice| {
            slice
                .trimmed()
                .spec
                .node_name
                .as_deref()
                .map(ObjectRef::new)
        })
        .watches_shared_stream(
            own_echoes_dropped(
                pod_changes(pods_for_nodes, pods.clone()),
                ctx.writes.recent.clone(),
            ),
            |pod| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .map(ObjectRef::new)
            },
        )
        .watches_shared_stream(nrts_for_nodes, |nrt| {
            Some(ObjectRef::<CachedNode>::new(&nrt.name_any()))
        })
        .watches_shared_stream(claims_for_nodes, |claim| {
            tracking::nodes_of_claim(&claim)
                .into_iter()
                .map(|node| ObjectRef::new(&node))
        })
        .shutdown_on_signal()
        .run(
            measured("node", node::reconcile),
            node::error_policy,
            ctx.clone(),
        )
        .for_each(|result| log_outcome("node", result));
    let pool_store = pools.clone();
    let pool_controller = Controller::for_shared_stream(pools_for_pool_controller, pools.clone())
        // One pool's change can start or end another's conflict without any node changing
        // (the older pool keeps its node). Statuses are pure to compute and written only when
        // they differ, so every pool is looked at again.
        .watches_shared_stream(
            spec_changes(pools_for_other_pools, pools.clone()),
            to_every_pool(pools.clone()),
        )
        // A DeviceClass written, deleted or taken over by someone else concerns DRA pools.
        .watches_shared_stream(device_classes_for_pools, to_every_pool(pools.clone()))
        .watches_shared_stream(for_pool_controller, move |node| {
            pool::pools_of_node(&pool_store.state(), &node)
        })
        // A node's allocated GPUs count in its pool's status.
        .watches_shared_stream(configmaps_for_pools, |cm| {
            cm.kept().pool().map(ObjectRef::new)
        })
        .shutdown_on_signal()
        .run(
            measured("pool", pool::reconcile),
            pool::error_policy,
            ctx.clone(),
        )
        .for_each(|result| log_outcome("pool", result));

    let controllers = async {
        // A node reconciled before the pools are known would look poolless and lose its labels;
        // one reconciled before its pods are known would free their GPUs.
        pools.wait_until_ready().await?;
        nodes.wait_until_ready().await?;
        configmaps.wait_until_ready().await?;
        device_classes.wait_until_ready().await?;
        slices.wait_until_ready().await?;
        pods.wait_until_ready().await?;
        claims.wait_until_ready().await?;
        // A pod on a real node keeps the GPUs its kubelet gave it, not the lowest free ones.
        kubelet_reports.wait_until_ready().await?;
        if let Some(nrts) = &nrts {
            nrts.wait_until_ready().await?;
        }
        info!("caches ready, starting controllers");
        metrics.set_ready(true);
        let (domain_drive, domain_controller) = match domain_watches {
            Some(mut watches) => {
                let drive = std::mem::replace(&mut watches.drive, future::pending().boxed());
                (drive, watches.run(ctx.clone(), claims_for_domains).boxed())
            }
            None => {
                // Nobody reads these: dropped, the fan-out stops queueing claims for them.
                drop(claims_for_domains);
                (
                    future::pending().boxed(),
                    future::ready(anyhow::Ok(())).boxed(),
                )
            }
        };
        let domains = async {
            tokio::select! {
                result = domain_controller => result,
                () = domain_drive => anyhow::bail!("ComputeDomain watch ended"),
            }
        };
        let ((), (), domains) = future::join3(node_controller, pool_controller, domains).await;
        domains
    };
    tokio::select! {
        result = controllers => result,
        () = pool_events => anyhow::bail!("pool watch ended"),
        () = node_events => anyhow::bail!("node watch ended"),
        () = configmap_events => anyhow::bail!("ConfigMap watch ended"),
        () = device_class_events => anyhow::bail!("DeviceClass watch ended"),
        () = slice_events => anyhow::bail!("ResourceSlice watch ended"),
        () = pod_events => anyhow::bail!("Pod watch ended"),
        () = claim_events => anyhow::bail!("ResourceClaim watch ended"),
        () = kubelet_report_events => anyhow::bail!("kubelet device report watch ended"),
        () = nrt_events => anyhow::bail!("NodeResourceTopology watch ended"),
    }
}

/// The node a kubelet report is about. (A topology ConfigMap's cache keeps its node aside, see
/// `KeptOfTopology`.)
fn node_of_kubelet_report(cm: Arc<ConfigMap>) -> Option<ObjectRef<CachedNode>> {
    node_of_configmap(cm.as_ref(), kubelet_devices::CONFIGMAP_PREFIX).map(ObjectRef::new)
}

/// Pools whose spec or existence changed (a new generation: spec edits, deletion requested).
/// Status writes, about one a second per pool while nodes join, concern no node and no other
/// pool; passing them on made every status write reconcile every node of the pool.
fn spec_changes(
    pools: impl Stream<Item = Arc<GpuNodePool>>,
    cache: Store<GpuNodePool>,
) -> impl Stream<Item = Arc<GpuNodePool>> {
    changes(pools, cache, |pool| {
        fingerprint(&(
            pool.metadata.generation,
            pool.metadata.deletion_timestamp.is_some(),
        ))
    })
}

/// Nodes whose cached content changed. The cache keeps only what the controllers read (see
/// [`node::TrimmedNode`]), so KWOK's and the kubelet's heartbeats, which change nothing of it, no
/// longer reconcile the node: at 5 000 nodes they were most of the operator's work.
fn node_changes(
    nodes: impl Stream<Item = Arc<CachedNode>>,
    cache: Store<CachedNode>,
) -> impl Stream<Item = Arc<CachedNode>> {
    changes(nodes, cache, node_fingerprint)
}

/// What the controllers read of a node, hashed. Annotations fakegpu does not read are not in
/// its cache (see `TrimmedNode`), so others' rewrites of them are no change: among them
/// kube-controller-manager's TTL annotation, rewritten on ~17 nodes a second while a 10 000-node
/// cluster grows, which reconciled each node and its pool (0.14 cores of the operator's with
/// nothing to write, taken from the scheduler on a busy machine).
fn node_fingerprint(node: &CachedNode) -> u64 {
    let meta = node.meta();
    fingerprint(&(
        &meta.labels,
        &meta.annotations,
        meta.deletion_timestamp.is_some(),
        &meta.uid,
        (
            &node.trimmed().capacity,
            &node.trimmed().allocatable,
            &node.trimmed().conditions,
        ),
        node.kept(),
    ))
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

/// What the controllers read of a (slimmed, see [`pods::slim`]) pod, hashed: of its phase
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

#[cfg(test)]
mod tests {
    use fakegpu_model::names::annotation;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;

    fn node(annotations: serde_json::Value) -> CachedNode {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": "u", "labels": {"a": "b"}, "annotations": annotations},
        }))
        .expect("test node");
        Cached::new(node)
    }

    #[test]
    fn the_ttl_controller_s_rewrites_are_no_node_change() {
        let at = |ttl: &str| {
            node_fingerprint(&node(
                json!({annotation::NODE_TTL: ttl, annotation::GPU_FAULTS: "0:xid=48"}),
            ))
        };
        assert_eq!(at("0"), at("15"));
        // Annotations fakegpu reads still count.
        let faults = |value: &str| node_fingerprint(&node(json!({annotation::GPU_FAULTS: value})));
        assert_ne!(faults("0:xid=48"), faults("1:xid=48"));
        // A node with the TTL annotation and one without are the same to fakegpu.
        assert_eq!(at("0"), faults("0:xid=48"));
    }

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
