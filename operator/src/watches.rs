//! Which watch feeds which cache, and which controller hears of which kind's events. Each
//! watch runs once for all controllers: its events go into its cache, then to each controller
//! that reads the kind (the plumbing is [`crate::kit::streams`]; which of those events a
//! controller acts on, and how, is next to its reconciler: [`node::controller`],
//! [`pool::controller`], [`compute_domain::Watches`]).

use std::sync::Arc;

use fakegpu_api::{GpuNodePool, nrt::NodeResourceTopology};
use fakegpu_model::names::{
    fakegpu::{MANAGED_BY, MANAGED_BY_VALUE},
    kubelet_devices,
    topology::NODE_TOPOLOGY_LABEL,
};
use futures::{
    FutureExt, StreamExt, TryStreamExt,
    future::{self, BoxFuture},
    stream::{self, BoxStream},
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceSlice},
};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector, watcher},
};

use crate::{
    compute_domain,
    context::Caches,
    kit::{
        apply,
        cache::Cached,
        recent::RecentWrites,
        streams::{
            LIST_PAGE_SIZE, cached, cached_noting_own_writes, confirm, fan_out, kept, log_errors,
            shared_touched,
        },
    },
    node::{self, CachedNode},
    pods::{self, PodsByNode},
    pool,
};

/// The watches the operator runs: the caches they fill, each controller's events, and what
/// drives them.
pub struct Watches {
    pub caches: Caches,
    pub nodes: node::controller::Events,
    pub pools: pool::controller::Events,
    /// The ComputeDomain controller's own watches, when the cluster serves ComputeDomains, and
    /// the claims it hears of.
    pub domains: Option<(
        compute_domain::Watches,
        BoxStream<'static, Arc<ResourceClaim>>,
    )>,
    /// Runs every shared watch; ends only when one of them does, naming it.
    pub drive: BoxFuture<'static, &'static str>,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches").finish_non_exhaustive()
    }
}

/// Which optional watches to run.
#[derive(Clone, Copy, Debug)]
pub struct Optional {
    pub node_resource_topology: bool,
    pub compute_domains: bool,
}

/// A watch's drive, ending with the watch's name.
fn named(
    drive: impl Future<Output = ()> + Send + 'static,
    name: &'static str,
) -> BoxFuture<'static, &'static str> {
    drive.map(move |()| name).boxed()
}

impl Watches {
    /// Sets up the watches: cluster-wide, but topology ConfigMaps and the node agents' reports
    /// only in `namespace`, and slices and NRTs only fakegpu's own. Their events confirm
    /// fakegpu's writes to `recent`.
    pub fn new(
        client: &Client,
        namespace: &str,
        optional: Optional,
        recent: &Arc<RecentWrites>,
    ) -> Self {
        let (pools, pool_writer) = reflector::store::<GpuNodePool>();
        let (nodes, node_writer) = reflector::store::<CachedNode>();
        let (configmaps, configmap_writer) = reflector::store::<Cached<ConfigMap>>();
        let (device_classes, device_class_writer) = reflector::store::<DeviceClass>();
        let (slices, slice_writer) = reflector::store::<Cached<ResourceSlice>>();
        let (pods, pod_writer) = reflector::store::<Pod>();
        let (claims, claim_writer) = reflector::store::<ResourceClaim>();
        let (kubelet_reports, kubelet_report_writer) = reflector::store::<ConfigMap>();
        let pods_by_node = PodsByNode::default();

        let all = watcher::Config::default();
        let pool_events = cached(
            Api::all(client.clone()),
            all.clone(),
            pool_writer,
            std::convert::identity,
        );
        let (pool_events, [for_pool_controller, for_other_pools, pools_for_nodes]) =
            fan_out(pool_events);
        // Nodes keep what the controllers read (fakegpu's managed-fields entries tell which
        // status entries are fakegpu's); other kinds drop managed fields: they are most of
        // their size.
        let node_events = cached(
            Api::all(client.clone()),
            all.clone(),
            node_writer,
            Cached::new,
        )
        .inspect(confirm(recent));
        let (node_events, [nodes_for_nodes, nodes_for_pools]) = fan_out(node_events);
        let topology_configmaps = all.clone().labels(&format!("{NODE_TOPOLOGY_LABEL}=true"));
        let configmap_events = cached(
            Api::namespaced(client.clone(), namespace),
            topology_configmaps,
            configmap_writer,
            cached_noting_own_writes(configmaps.clone(), recent.clone()),
        )
        .inspect(confirm(recent));
        let (configmap_events, [configmaps_for_nodes, configmaps_for_pools]) =
            fan_out(configmap_events);
        // What the node agents report of their kubelets' choices (real nodes only).
        let kubelet_report_events = cached(
            Api::namespaced(client.clone(), namespace),
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
        .inspect(confirm(recent));
        let (device_class_events, [device_classes_for_pools]) = fan_out(device_class_events);
        let own = all
            .clone()
            .labels(&format!("{MANAGED_BY}={MANAGED_BY_VALUE}"));
        // Slices are cached without their devices (a digest stands in): the controllers only
        // ask whether a slice is current, and the devices were half the operator's memory.
        let slice_events = cached(
            Api::all(client.clone()),
            own.clone(),
            slice_writer,
            cached_noting_own_writes(slices.clone(), recent.clone()),
        )
        .inspect(confirm(recent));
        let (slice_events, [slices_for_nodes]) = fan_out(slice_events);
        // Pods also feed the node -> pods index, from the same events as their store.
        let index = pods_by_node.clone();
        let pod_events = shared_touched(
            pod_writer.as_reader(),
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
        let (nrts, nrt_events, nrts_for_nodes) = if optional.node_resource_topology {
            let (store, writer) = reflector::store::<NodeResourceTopology>();
            let events = cached(
                Api::all(client.clone()),
                own,
                writer,
                kept(apply::drop_managed_fields),
            )
            .inspect(confirm(recent));
            let (drive, [for_nodes]) = fan_out(events);
            (Some(store), drive.boxed(), for_nodes.boxed())
        } else {
            (None, future::pending().boxed(), stream::empty().boxed())
        };
        let domains = optional
            .compute_domains
            .then(|| compute_domain::Watches::new(client, recent));
        let claim_templates = domains.as_ref().map(|w| w.templates.clone());
        // Nobody reads the domains' claims without the controller: dropped, the fan-out stops
        // queueing claims for it.
        let domains = domains.map(|watches| (watches, claims_for_domains.boxed()));
        let drives = vec![
            named(pool_events, "pool"),
            named(node_events, "node"),
            named(configmap_events, "ConfigMap"),
            named(device_class_events, "DeviceClass"),
            named(slice_events, "ResourceSlice"),
            named(pod_events, "Pod"),
            named(claim_events, "ResourceClaim"),
            named(kubelet_report_events, "kubelet device report"),
            named(nrt_events, "NodeResourceTopology"),
        ];
        Self {
            caches: Caches {
                pools,
                nodes,
                configmaps,
                device_classes,
                slices,
                pods,
                pods_by_node,
                claims,
                kubelet_reports,
                nrts,
                claim_templates,
            },
            nodes: node::controller::Events {
                nodes: nodes_for_nodes.boxed(),
                pools: pools_for_nodes.boxed(),
                configmaps: configmaps_for_nodes.boxed(),
                kubelet_reports: kubelet_reports_for_nodes.boxed(),
                slices: slices_for_nodes.boxed(),
                pods: pods_for_nodes.boxed(),
                nrts: nrts_for_nodes,
                claims: claims_for_nodes.boxed(),
            },
            pools: pool::controller::Events {
                pools: for_pool_controller.boxed(),
                other_pools: for_other_pools.boxed(),
                device_classes: device_classes_for_pools.boxed(),
                nodes: nodes_for_pools.boxed(),
                configmaps: configmaps_for_pools.boxed(),
            },
            domains,
            drive: future::select_all(drives)
                .map(|(ended, _, _)| ended)
                .boxed(),
        }
    }
}

impl Caches {
    /// Waits until every cache holds its first list. A node reconciled before the pools are
    /// known would look poolless and lose its labels; one reconciled before its pods are known
    /// would free their GPUs; a pod on a real node keeps the GPUs its kubelet gave it (its
    /// report), not the lowest free ones.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pools.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        self.device_classes.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.claims.wait_until_ready().await?;
        self.kubelet_reports.wait_until_ready().await?;
        if let Some(nrts) = &self.nrts {
            nrts.wait_until_ready().await?;
        }
        Ok(())
    }
}
