//! The pods pod tracking reads: bound and unfinished ones only, slimmed to the fields tracking
//! uses (a cluster may run many), and indexed by node so that a node's reconcile does not walk
//! every pod.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use kube::runtime::{
    reflector::{ObjectRef, Store},
    watcher,
};
use parking_lot::RwLock;

/// Bound pods that have not finished. A pod that finishes leaves the watch, which tracking
/// sees as its deletion and frees its GPUs.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
}

/// Drops what tracking never reads: managed fields, volumes, images, environments, container
/// statuses. Keeps names, resources and claims, annotations and labels, phase and claim
/// statuses.
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
        *status = PodStatus {
            phase: status.phase.take(),
            resource_claim_statuses: status.resource_claim_statuses.take(),
            ..Default::default()
        };
    }
}

/// Node name -> pods bound to it.
#[derive(Clone, Debug, Default)]
pub struct PodsByNode(Arc<RwLock<HashMap<String, HashSet<ObjectRef<Pod>>>>>);

impl PodsByNode {
    /// Records a pod event that `store` has already applied: a pod still in the store is on
    /// its node, one that is gone is no longer.
    pub fn observe(&self, pod: &Pod, store: &Store<Pod>) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let reference = ObjectRef::from_obj(pod);
        let mut index = self.0.write();
        if store.get(&reference).is_some() {
            index.entry(node).or_default().insert(reference);
        } else if let Some(pods) = index.get_mut(&node) {
            pods.remove(&reference);
            if pods.is_empty() {
                index.remove(&node);
            }
        }
    }

    /// The pods on `node` that the store holds. Entries the store lost without an event (a
    /// relist after a broken watch) are dropped here.
    pub fn pods_on(&self, node: &str, store: &Store<Pod>) -> Vec<Arc<Pod>> {
        let references: Vec<ObjectRef<Pod>> = match self.0.read().get(node) {
            Some(pods) => pods.iter().cloned().collect(),
            None => return Vec::new(),
        };
        let (found, lost): (Vec<_>, Vec<_>) = references
            .into_iter()
            .map(|r| (store.get(&r), r))
            .partition(|(pod, _)| pod.is_some());
        if !lost.is_empty() {
            let mut index = self.0.write();
            if let Some(pods) = index.get_mut(node) {
                for (_, reference) in &lost {
                    pods.remove(reference);
                }
            }
        }
        found.into_iter().filter_map(|(pod, _)| pod).collect()
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
        let limits = spec.containers[0].resources.as_ref().and_then(|r| r.limits.as_ref());
        assert_eq!(limits.expect("limits")["nvidia.com/gpu"].0, "1");
        let status = p.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.container_statuses.is_none());
    }

    #[test]
    fn index_follows_the_store() {
        let (store, mut writer) = reflector::store::<Pod>();
        let index = PodsByNode::default();
        let (a, b) = (pod("a", "n1"), pod("b", "n1"));
        for p in [&a, &b] {
            writer.apply_watcher_event(&Event::Apply(p.clone()));
            index.observe(p, &store);
        }
        assert_eq!(index.pods_on("n1", &store).len(), 2);
        assert!(index.pods_on("n2", &store).is_empty());
        writer.apply_watcher_event(&Event::Delete(a.clone()));
        index.observe(&a, &store);
        let left = index.pods_on("n1", &store);
        assert_eq!(left.len(), 1);
        // A pod lost in a relist, without its own event.
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        assert!(index.pods_on("n1", &store).is_empty());
    }
}
