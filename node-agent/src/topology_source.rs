//! The node's topology document, followed by a watch on its ConfigMap (`topology-<node>` in
//! the operator's namespace). Everything the agent serves reads the latest good document from
//! the channel this fills; a malformed document is logged and the last good one kept.

use std::sync::Arc;

use fakegpu_api::{names::topology::CONFIGMAP_PREFIX, topology::NodeTopology};
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
    let name = format!("{CONFIGMAP_PREFIX}{node}");
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(api, config).default_backoff();
    futures::pin_mut!(events);
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm))) => {
                if !apply(&sender, node, &cm) {
                    metrics.topology_error();
                }
                metrics.topology(sender.borrow().as_deref());
            }
            Ok(Some(watcher::Event::Delete(_))) => {
                info!(node, "topology ConfigMap deleted: no GPUs to serve");
                sender.send_replace(None);
                metrics.topology(None);
            }
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => {}
            Ok(None) => return,
            Err(error) => warn!(node, %error, "watching the topology ConfigMap"),
        }
    }
}

/// Takes one version of the ConfigMap; false when it was malformed (and ignored).
fn apply(sender: &watch::Sender<Option<Arc<NodeTopology>>>, node: &str, cm: &ConfigMap) -> bool {
    match NodeTopology::from_configmap(cm) {
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
    use fakegpu_api::names::topology::DATA_KEY;

    use super::*;

    fn configmap(text: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(DATA_KEY.to_owned(), text.to_owned())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn malformed_documents_are_kept_out() {
        assert!(NodeTopology::from_configmap(&configmap("gpus: [")).is_err());
        assert!(NodeTopology::from_configmap(&ConfigMap::default()).is_err());
        let (sender, receiver) = watch::channel(None);
        let good = NodeTopology {
            version: fakegpu_api::topology::FORMAT_VERSION,
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
}
