//! The topology documents of all pool nodes, kept current by a watch on the topology
//! ConfigMaps and parsed once per version, not once per scrape. A malformed document is logged
//! and the node's last good one kept.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use fakegpu_api::meta::node_of_configmap;
use fakegpu_model::{
    names::topology::{CONFIGMAP_PREFIX, NODE_TOPOLOGY_LABEL},
    topology::NodeTopology,
};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::RwLock;
use tracing::warn;

/// Node name -> its document.
pub type Snapshot = BTreeMap<String, Arc<NodeTopology>>;

#[derive(Debug, Default, Clone)]
pub struct Documents {
    nodes: Arc<RwLock<Snapshot>>,
    /// Whether a whole list has arrived: before it, metrics would miss nodes (`/readyz`).
    listed: Arc<AtomicBool>,
}

impl Documents {
    /// The documents now.
    pub fn snapshot(&self) -> Snapshot {
        self.nodes.read().clone()
    }

    /// The document of `node`, if it has one.
    pub fn get(&self, node: &str) -> Option<Arc<NodeTopology>> {
        self.nodes.read().get(node).cloned()
    }

    /// Takes one version of a ConfigMap.
    pub fn apply(&self, configmap: &ConfigMap) {
        insert(&mut self.nodes.write(), configmap);
    }

    pub fn delete(&self, configmap: &ConfigMap) {
        if let Some(node) = node_of_configmap(configmap, CONFIGMAP_PREFIX) {
            self.nodes.write().remove(node);
        }
    }

    /// Whether every document has been listed once.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Relaxed)
    }

    /// Follows the topology ConfigMaps of `namespace` until the watch ends.
    pub async fn follow(&self, client: Client, namespace: &str) {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(&format!("{NODE_TOPOLOGY_LABEL}=true"));
        let events = watcher(api, config).default_backoff();
        futures::pin_mut!(events);
        let mut fresh: Option<Snapshot> = None;
        loop {
            match events.try_next().await {
                Ok(Some(event)) => self.take(event, &mut fresh),
                Ok(None) => return,
                Err(error) => warn!(%error, "watching topology ConfigMaps"),
            }
        }
    }

    /// One watch event; `fresh` collects a relist until it is complete.
    fn take(&self, event: watcher::Event<ConfigMap>, fresh: &mut Option<Snapshot>) {
        match event {
            watcher::Event::Apply(cm) => self.apply(&cm),
            watcher::Event::Delete(cm) => self.delete(&cm),
            // A relist replaces everything: nodes gone meanwhile must go.
            watcher::Event::Init => *fresh = Some(Snapshot::new()),
            watcher::Event::InitApply(cm) => {
                if let Some(fresh) = fresh.as_mut() {
                    insert(fresh, &cm);
                }
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = fresh.take() {
                    *self.nodes.write() = fresh;
                }
                self.listed.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Puts a ConfigMap's document into `snapshot` under its node; a malformed one is logged and
/// leaves the node's entry as it was.
fn insert(snapshot: &mut Snapshot, configmap: &ConfigMap) {
    let Some(node) = node_of_configmap(configmap, CONFIGMAP_PREFIX) else {
        return;
    };
    match NodeTopology::from_configmap_data(configmap.data.as_ref()) {
        Ok(document) => {
            snapshot.insert(node.to_owned(), Arc::new(document));
        }
        Err(error) => warn!(node = %node, %error, "ignoring malformed topology document"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakegpu_model::names::topology::NODE_NAME_LABEL;

    fn document(node: &str) -> ConfigMap {
        let text = "version: 1\npool: p\ngpuMemory: 1\ngpuProduct: x\ndriverVersion: d\ncudaVersion: c\nmigStrategy: none\ngpus: []\n";
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("topology-{node}"), "labels": {NODE_NAME_LABEL: node}},
            "data": {"topology.yml": text},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn ready_once_listed_and_a_relist_forgets_nodes_gone_meanwhile() {
        let documents = Documents::default();
        let mut fresh = None;
        documents.take(watcher::Event::Init, &mut fresh);
        documents.take(watcher::Event::InitApply(document("a")), &mut fresh);
        assert!(!documents.listed(), "not ready before the list is complete");
        documents.take(watcher::Event::InitDone, &mut fresh);
        assert!(documents.listed());
        assert!(documents.get("a").is_some());
        // The watch restarts; node a's ConfigMap went while it was down.
        documents.take(watcher::Event::Init, &mut fresh);
        documents.take(watcher::Event::InitApply(document("b")), &mut fresh);
        assert!(
            documents.get("a").is_some(),
            "kept until the relist is complete"
        );
        documents.take(watcher::Event::InitDone, &mut fresh);
        assert!(documents.get("a").is_none() && documents.get("b").is_some());
    }
}
