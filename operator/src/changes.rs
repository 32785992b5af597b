//! Which pool and node events are changes the controllers act on: watch events that change
//! nothing the controllers read are dropped before they reconcile anything.

use std::sync::Arc;

use fakegpu_api::GpuNodePool;
use futures::Stream;
use kube::{Resource, runtime::reflector::Store};

use crate::{
    kit::{recent::fingerprint, streams::changes},
    node::CachedNode,
};

/// Pools whose spec or existence changed (a new generation: spec edits, deletion requested).
/// Status writes, about one a second per pool while nodes join, concern no node and no other
/// pool; passing them on made every status write reconcile every node of the pool.
pub fn spec_changes(
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
/// [`crate::node::TrimmedNode`]), so KWOK's and the kubelet's heartbeats, which change nothing
/// of it, no longer reconcile the node: at 5 000 nodes they were most of the operator's work.
pub fn node_changes(
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

#[cfg(test)]
mod tests {
    use fakegpu_model::names::annotation;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::kit::cache::Cached;

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
}
