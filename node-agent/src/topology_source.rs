//! The node's topology document, followed by a watch on its ConfigMap (`topology-<node>` in
//! the operator's namespace). Everything the agent serves reads the latest good document from
//! the channel this fills; a malformed document is logged and the last good one kept.

use std::sync::Arc;

use fakegpu_model::topology::NodeTopology;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::metrics::Metrics;

/// The latest good document; `None` before the first one and after the ConfigMap is deleted
/// (the node left its pool).
pub type Topology = watch::Receiver<Option<Arc<NodeTopology>>>;

/// Follows the ConfigMap of `node` into `sender` until the watch ends (it retries on errors
/// with backoff, so that is at shutdown).
pub async fn follow(
    client: Client,
    namespace: &str,
    node: &str,
    sender: watch::Sender<Option<Arc<NodeTopology>>>,
    metrics: Metrics,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let name = NodeTopology::configmap_name(node);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(api, config).default_backoff();
    futures::pin_mut!(events);
    let mut listing = None;
    loop {
        match events.try_next().await {
            Ok(Some(event)) => take(&sender, node, event, &mut listing, &metrics),
            Ok(None) => return,
            Err(error) => warn!(node, %error, "watching the topology ConfigMap"),
        }
    }
}

/// One watch event. `listing` is `Some(found)` while a (re)list runs: a list without the
/// ConfigMap means it was deleted while the watch was down (no Delete event comes then), and
/// the node has no GPUs to serve any more.
fn take(
    sender: &watch::Sender<Option<Arc<NodeTopology>>>,
    node: &str,
    event: watcher::Event<ConfigMap>,
    listing: &mut Option<bool>,
    metrics: &Metrics,
) {
    match event {
        watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) => {
            if let Some(found) = listing.as_mut() {
                *found = true;
            }
            if !apply(sender, node, &cm) {
                metrics.topology_error();
            }
            metrics.topology(sender.borrow().as_deref());
        }
        watcher::Event::Delete(_) => forget(sender, node, metrics, "topology ConfigMap deleted"),
        watcher::Event::Init => *listing = Some(false),
        watcher::Event::InitDone => {
            if listing.take() == Some(false) && sender.borrow().is_some() {
                forget(
                    sender,
                    node,
                    metrics,
                    "topology ConfigMap gone while the watch was down",
                );
            }
        }
    }
}

fn forget(
    sender: &watch::Sender<Option<Arc<NodeTopology>>>,
    node: &str,
    metrics: &Metrics,
    why: &str,
) {
    info!(node, "{why}: no GPUs to serve");
    sender.send_replace(None);
    metrics.topology(None);
}

/// Takes one version of the ConfigMap; false when it was malformed (and ignored).
fn apply(sender: &watch::Sender<Option<Arc<NodeTopology>>>, node: &str, cm: &ConfigMap) -> bool {
    match NodeTopology::from_configmap_data(cm.data.as_ref()) {
        Ok(topology) => {
            sender.send_if_modified(|current| {
                if current.as_deref() == Some(&topology) {
                    return false;
                }
                info!(node, gpus = topology.gpus.len(), pool = %topology.pool, "topology updated");
                *current = Some(Arc::new(topology));
                true
            });
            true
        }
        Err(reason) => {
            warn!(node, %reason, "ignoring malformed topology ConfigMap; keeping the last good one");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::names::topology::DATA_KEY;

    use super::*;

    fn configmap(text: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(DATA_KEY.to_owned(), text.to_owned())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn malformed_documents_are_kept_out() {
        assert!(NodeTopology::from_configmap_data(configmap("gpus: [").data.as_ref()).is_err());
        assert!(NodeTopology::from_configmap_data(None).is_err());
        let (sender, receiver) = watch::channel(None);
        let good = NodeTopology {
            version: fakegpu_model::topology::FORMAT_VERSION,
            pool: "p".into(),
            ..Default::default()
        };
        assert!(apply(
            &sender,
            "n",
            &configmap(&good.to_yaml().expect("yaml"))
        ));
        assert_eq!(receiver.borrow().as_deref(), Some(&good));
        assert!(!apply(&sender, "n", &configmap("not: [valid")));
        assert_eq!(receiver.borrow().as_deref(), Some(&good));
    }

    #[test]
    fn a_relist_without_the_configmap_forgets_the_document() {
        let metrics = Metrics::new(Vec::new()).expect("metrics");
        let (sender, receiver) = watch::channel(None);
        let good = NodeTopology {
            version: fakegpu_model::topology::FORMAT_VERSION,
            pool: "p".into(),
            ..Default::default()
        };
        let document = configmap(&good.to_yaml().expect("yaml"));
        let mut listing = None;
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(document.clone()),
            watcher::Event::InitDone,
        ] {
            take(&sender, "n", event, &mut listing, &metrics);
        }
        assert_eq!(receiver.borrow().as_deref(), Some(&good));
        // The watch was down while the ConfigMap was deleted: the relist finds nothing.
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            take(&sender, "n", event, &mut listing, &metrics);
        }
        assert_eq!(*receiver.borrow(), None);
        // A relist that finds it again serves it again.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(document),
            watcher::Event::InitDone,
        ] {
            take(&sender, "n", event, &mut listing, &metrics);
        }
        assert_eq!(receiver.borrow().as_deref(), Some(&good));
    }
}
