//! Wiring: the shared watches ([`crate::watches`]) fill the caches of one [`Context`], and the
//! node, pool and ComputeDomain controllers run on it until a termination signal.

use std::sync::Arc;

use futures::{FutureExt, future};
use kube::Client;
use tracing::info;

use crate::{
    context::{Context, Settings, State, Writes},
    kit::{events::Events, metrics::Metrics, pacer::Pacer, recent::RecentWrites},
    node,
    pod_groups::PodGroups,
    pool::{self, members::MembersIndex},
    watches::{Optional, Watches},
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
    let recent = Arc::new(RecentWrites::default());
    let optional = Optional {
        node_resource_topology: features.node_resource_topology,
        compute_domains: features.compute_domains,
    };
    let watches = Watches::new(&client, &namespace, optional, &recent);
    let ctx = Arc::new(Context {
        events: Events::new(client.clone()),
        state: State {
            pool_members: Arc::new(MembersIndex::default()),
            node_problems: Default::default(),
            pod_groups: PodGroups::new(client.clone()),
            retries: Default::default(),
        },
        client,
        settings: Settings {
            namespace,
            reservations: features.reservations,
            dra_extended_resource: features.dra_extended_resource,
        },
        caches: watches.caches,
        writes: Writes {
            recent,
            pool_status: Pacer::new(POOL_STATUS_INTERVAL),
            pool_counts: Pacer::shared(POOL_COUNTS_INTERVAL, POOL_COUNTS_OVERALL),
            device_classes: Default::default(),
        },
        metrics: metrics.clone(),
    });
    let node_controller = node::controller::run(ctx.clone(), watches.nodes);
    let pool_controller = pool::controller::run(ctx.clone(), watches.pools);
    let domain_controller = async {
        let Some((mut domains, claims)) = watches.domains else {
            return Ok(());
        };
        let drive = std::mem::replace(&mut domains.drive, future::pending().boxed());
        tokio::select! {
            result = domains.run(ctx.clone(), claims) => result,
            () = drive => anyhow::bail!("ComputeDomain watch ended"),
        }
    };
    let controllers = async {
        ctx.caches.wait_until_ready().await?;
        info!("caches ready, starting controllers");
        metrics.set_ready(true);
        let ((), (), domains) =
            future::join3(node_controller, pool_controller, domain_controller).await;
        domains
    };
    tokio::select! {
        result = controllers => result,
        ended = watches.drive => anyhow::bail!("{ended} watch ended"),
    }
}
