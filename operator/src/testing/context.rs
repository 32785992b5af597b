//! A [`Context`] for unit tests of reconcilers: its caches hold the objects a test gives, its
//! client talks to the fake API server ([`super::api_server`]).

use std::sync::Arc;

use fakegpu_api::GpuNodePool;
use k8s_openapi::api::{
    core::v1::{ConfigMap, Node},
    resource::v1::{DeviceClass, ResourceClaimTemplate},
};
use kube::{
    Client, Resource,
    runtime::{reflector, watcher},
};

use crate::{
    context::{Caches, Context, Settings, State, Writes},
    kit::cache::Cached,
    kit::events::Events,
    kit::metrics::Metrics,
    kit::pacer::Pacer,
    pod_groups::PodGroups,
    tracking::ReservationNamespaces,
};

/// The install namespace of the tests' topology ConfigMaps.
pub const NAMESPACE: &str = "fakegpu-system";

/// What the caches hold.
#[derive(Default)]
pub struct Cluster {
    pub pools: Vec<GpuNodePool>,
    pub nodes: Vec<Node>,
    pub configmaps: Vec<ConfigMap>,
    pub device_classes: Vec<DeviceClass>,
    /// ComputeDomains' templates; the cache is there only when the cluster serves domains.
    pub claim_templates: Option<Vec<ResourceClaimTemplate>>,
}

/// A store holding `objects`, as a watch that listed them leaves it.
fn store<K>(objects: impl IntoIterator<Item = K>) -> reflector::Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

/// A context whose caches show `cluster` and whose client is `client`.
pub fn context(client: Client, cluster: Cluster) -> Arc<Context> {
    let interval = std::time::Duration::from_millis(1);
    Arc::new(Context {
        events: Events::new(client.clone()),
        state: State {
            pool_members: Default::default(),
            node_problems: Default::default(),
            pod_groups: PodGroups::new(client.clone()),
            retries: Default::default(),
        },
        client,
        settings: Settings {
            namespace: NAMESPACE.to_owned(),
            reservations: ReservationNamespaces::parse("runai-reservation"),
            dra_extended_resource: true,
        },
        caches: Caches {
            pools: store(cluster.pools),
            nodes: store(cluster.nodes.into_iter().map(Cached::new)),
            configmaps: store(cluster.configmaps.into_iter().map(Cached::new)),
            device_classes: store(cluster.device_classes),
            slices: store([]),
            pods: store([]),
            pods_by_node: Default::default(),
            claims: store([]),
            kubelet_reports: store([]),
            nrts: None,
            claim_templates: cluster.claim_templates.map(store),
        },
        writes: Writes {
            recent: Default::default(),
            pool_status: Pacer::new(interval),
            pool_counts: Pacer::new(interval),
            device_classes: Default::default(),
        },
        metrics: Metrics::new().expect("metrics"),
    })
}
