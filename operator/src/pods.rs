//! The pods pod tracking reads: bound and unfinished ones only, slimmed to the fields tracking
//! uses (a cluster may run many), and indexed by node so that a node's reconcile does not walk
//! every pod.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use fakegpu_model::names::condition;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use kube::runtime::{
    reflector::{ObjectRef, Store},
    watcher,
};
use parking_lot::RwLock;

/// Bound pods that have not finished. A pod that finishes leaves the watch, which tracking
/// sees as its deletion and frees its GPUs.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default()
        .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
}

/// Drops what tracking never reads: managed fields, volumes, images, environments, container
/// statuses, conditions but one. Keeps names, resources and claims, annotations and labels,
/// phase, claim statuses and whether the sandbox is up (see [`crate::tracking::claims_prepared`]).
pub fn slim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    let slim_container = |c: &Container| Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        ..Default::default()
    };
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers = spec.containers.iter().map(slim_container).collect();
        spec.init_containers = spec
            .init_containers
            .as_ref()
            .map(|all| all.iter().map(slim_container).collect());
        spec.ephemeral_containers = None;
        spec.volumes = None;
        spec.affinity = None;
        spec.tolerations = None;
    }
    if let Some(status) = pod.status.as_mut() {
        let sandbox = status.conditions.take().map(|conditions| {
            conditions
                .into_iter()
                .filter(|c| c.type_ == condition::POD_READY_TO_START_CONTAINERS)
                .collect::<Vec<_>>()
        });
        *status = PodStatus {
            phase: status.phase.take(),
            resource_claim_statuses: status.resource_claim_statuses.take(),
            conditions: sandbox.filter(|c| !c.is_empty()),
            ..Default::default()
        };
    }
}

type ByNode = HashMap<String, HashSet<ObjectRef<Pod>>>;

#[derive(Debug, Default)]
struct Index {
    live: ByNode,
    /// Filled during a (re)list and swapped in when it is complete, as the reflector's store
    /// does, so that index and store agree.
    building: Option<ByNode>,
}

fn insert(index: &mut ByNode, pod: &Pod) {
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        index
            .entry(node)
            .or_default()
            .insert(ObjectRef::from_obj(pod));
    }
}

/// Node name -> pods bound to it, kept from the pod watch's events.
#[derive(Clone, Debug, Default)]
pub struct PodsByNode(Arc<RwLock<Index>>);

impl PodsByNode {
    /// Follows one event of the pod watch (the one that feeds the store).
    pub fn apply_watcher_event(&self, event: &watcher::Event<Pod>) {
        let mut index = self.0.write();
        match event {
            watcher::Event::Init => index.building = Some(ByNode::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(building) = index.building.as_mut() {
                    insert(building, pod);
                }
            }
            watcher::Event::InitDone => {
                if let Some(built) = index.building.take() {
                    index.live = built;
                }
            }
            watcher::Event::Apply(pod) => insert(&mut index.live, pod),
            watcher::Event::Delete(pod) => {
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                if let Some(node) = node {
                    let reference = ObjectRef::from_obj(pod);
                    if let Some(pods) = index.live.get_mut(node) {
                        pods.remove(&reference);
                        if pods.is_empty() {
                            index.live.remove(node);
                        }
                    }
                }
            }
        }
    }

    /// The pods on `node`, as the store holds them.
    pub fn pods_on(&self, node: &str, store: &Store<Pod>) -> Vec<Arc<Pod>> {
        self.0
            .read()
            .live
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|reference| store.get(reference))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::{reflector, watcher::Event};
    use serde_json::json;

    use super::*;

    fn pod(name: &str, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "managedFields": [{"manager": "x"}]},
            "spec": {"nodeName": node, "volumes": [{"name": "v"}], "containers": [
                {"name": "c", "image": "busybox", "env": [{"name": "A", "value": "b"}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "containerStatuses": []},
        }))
        .expect("test pod")
    }

    #[test]
    fn slimming_keeps_what_tracking_reads() {
        let mut p = pod("a", "n");
        slim(&mut p);
        assert!(p.metadata.managed_fields.is_none());
        let spec = p.spec.as_ref().expect("spec");
        assert!(spec.volumes.is_none());
        assert_eq!(spec.containers[0].image, None);
        assert_eq!(spec.node_name.as_deref(), Some("n"));
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref());
        assert_eq!(limits.expect("limits")["nvidia.com/gpu"].0, "1");
        let status = p.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.container_statuses.is_none());
        // Of the conditions, only whether the sandbox is up (the claims were prepared).
        let mut pending = pod("b", "n");
        pending.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "PodReadyToStartContainers", "status": "True"}]}))
        .expect("status");
        slim(&mut pending);
        let conditions = pending.status.and_then(|s| s.conditions).expect("kept");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "PodReadyToStartContainers");
    }

    #[test]
    fn index_follows_the_watch_like_the_store() {
        let (store, mut writer) = reflector::store::<Pod>();
        let index = PodsByNode::default();
        let mut both = |event: Event<Pod>| {
            writer.apply_watcher_event(&event);
            index.apply_watcher_event(&event);
        };
        let (a, b, c) = (pod("a", "n1"), pod("b", "n1"), pod("c", "n2"));
        // The initial list: nothing is visible until it is complete.
        both(Event::Init);
        both(Event::InitApply(a.clone()));
        both(Event::InitApply(b.clone()));
        assert!(index.pods_on("n1", &store).is_empty());
        both(Event::InitDone);
        assert_eq!(index.pods_on("n1", &store).len(), 2);
        both(Event::Apply(c.clone()));
        assert_eq!(index.pods_on("n2", &store).len(), 1);
        both(Event::Delete(a.clone()));
        assert_eq!(index.pods_on("n1", &store).len(), 1);
        // A relist without b (deleted while the watch was down): b is gone from both.
        both(Event::Init);
        both(Event::InitApply(c));
        both(Event::InitDone);
        assert!(index.pods_on("n1", &store).is_empty());
        assert_eq!(index.pods_on("n2", &store).len(), 1);
    }
}
