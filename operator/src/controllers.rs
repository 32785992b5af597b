//! Wiring: which watch feeds which cache, and which controller hears of which kind's events
//! (the plumbing each kind goes through is [`crate::kit::streams`]; which of those events a
//! controller acts on, and how, is next to its reconciler: [`node::controller`],
//! [`pool::controller`], [`compute_domain::Watches`]).

use std::sync::Arc;

use fakegpu_api::{GpuNodePool, nrt::NodeResourceTopology};
use fakegpu_model::names::{
    fakegpu::{MANAGED_BY, MANAGED_BY_VALUE},
    kubelet_devices,
    topology::NODE_TOPOLOGY_LABEL,
};
use futures::{FutureExt, StreamExt, TryStreamExt, future, stream};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceSlice},
};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector, watcher},
};
use tracing::info;

use crate::{
    compute_domain,
    context::{Caches, Context, Settings, State, Writes},
    kit::{
        apply,
        cache::Cached,
        metrics::Metrics,
        pacer::Pacer,
        recent::RecentWrites,
        streams::{
            LIST_PAGE_SIZE, cached, cached_noting_own_writes, confirm, fan_out, kept, log_errors,
            shared_touched,
        },
    },
    node::{self, CachedNode},
    pods::{self, PodsByNode},
    pool::{self, members::MembersIndex},
};

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
    let (node_events, [nodes_for_nodes, nodes_for_pools]) = fan_out(node_events);
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
        .then(|| compute_domain::Watches::new(&client, &recent));
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
    let node_controller_events = node::controller::Events {
        nodes: nodes_for_nodes.boxed(),
        pools: pools_for_node_controller.boxed(),
        configmaps: configmaps_for_nodes.boxed(),
        kubelet_reports: kubelet_reports_for_nodes.boxed(),
        slices: slices_for_nodes.boxed(),
        pods: pods_for_nodes.boxed(),
        nrts: nrts_for_nodes,
        claims: claims_for_nodes.boxed(),
    };
    let pool_controller_events = pool::controller::Events {
        pools: pools_for_pool_controller.boxed(),
        other_pools: pools_for_other_pools.boxed(),
        device_classes: device_classes_for_pools.boxed(),
        nodes: nodes_for_pools.boxed(),
        configmaps: configmaps_for_pools.boxed(),
    };

    let ctx = Arc::new(Context {
        events: crate::kit::events::Events::new(client.clone()),
        state: State {
            pool_members: Arc::new(MembersIndex::default()),
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
    let node_controller = node::controller::run(ctx.clone(), node_controller_events);
    let pool_controller = pool::controller::run(ctx.clone(), pool_controller_events);

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
