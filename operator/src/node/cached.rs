//! What the node cache keeps of a node ([`TrimmedNode`]) and, in place of its managed fields,
//! what fakegpu owns in it ([`KeptOfNode`]: the digest of the labels only fakegpu set, the
//! status entries and annotations it set). The node controller's files read nodes through it.

use std::collections::BTreeMap;

use fakegpu_model::names::{annotation, condition, fakegpu::POOL_LABEL};
use k8s_openapi::{
    api::core::v1::{Node, NodeCondition},
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use kube::ResourceExt;

use crate::{
    kit::apply::{keys_only_ours, names_only_ours},
    kit::cache::{Cached, Digest, HasMeta, Trim},
};

/// A node as the node cache holds it (see [`Trim for Node`](#impl-Trim-for-Node)).
pub type CachedNode = Cached<Node>;

/// The node annotations the operator reads; a cached node keeps these alone (see
/// [`TrimmedNode`]). Reading another annotation of a cached node means adding it here.
const READ_ANNOTATIONS: [&str; 4] = [
    annotation::RUNAI_MIG_CONFIG,
    annotation::RUNAI_MIG_MAPPING,
    annotation::UNHEALTHY_GPUS,
    annotation::GPU_FAULTS,
];

/// What the node cache keeps in place of what it drops.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct KeptOfNode {
    /// Whether KWOK's annotation marks the node as KWOK's (see [`has_kubelet`]).
    pub kwok: bool,
    /// Digest of the labels only fakegpu owns (see [`drop_own_labels`]).
    pub own_labels: Option<Digest>,
    /// What fakegpu set in its status and annotations (and no one else did), told by the managed
    /// fields.
    pub owned_status: Option<OwnedStatus>,
}

/// What a node cache keeps of a node: the metadata (less the labels only fakegpu owns, the
/// managed fields, see [`KeptOfNode`], and the annotations fakegpu does not read), capacity,
/// allocatable and fakegpu's own conditions. Not a `Node`: one with its spec and most of its
/// status empty still took 1.7 KB a node, and KWOK's one annotation another 0.6 KB (a map
/// holds room for eleven entries).
#[derive(Clone, Debug)]
pub struct TrimmedNode {
    pub metadata: ObjectMeta,
    pub capacity: Option<BTreeMap<String, Quantity>>,
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// The conditions fakegpu sets (GPU fractioning ready, GPU fault), of the node's.
    pub conditions: Option<Vec<NodeCondition>>,
}

/// A cached node keeps what the controllers read (see [`TrimmedNode`]). At 10 000 nodes the
/// rest (images, addresses, node info, the kubelet's conditions, spec) was most of the
/// operator's memory.
impl Trim for Node {
    type Trimmed = TrimmedNode;
    type Kept = KeptOfNode;

    fn trim(mut node: Node, _: bool) -> (TrimmedNode, KeptOfNode) {
        let own_labels = drop_own_labels(&mut node);
        let owned_status = OwnedStatus::from_managed_fields(&node);
        node.metadata.managed_fields = None;
        let kwok = node
            .annotations()
            .get(annotation::KWOK_NODE)
            .map(String::as_str)
            == Some(annotation::KWOK_NODE_VALUE);
        node.metadata.annotations = node
            .metadata
            .annotations
            .take()
            .map(|all| {
                all.into_iter()
                    .filter(|(key, _)| READ_ANNOTATIONS.contains(&key.as_str()))
                    .collect::<BTreeMap<_, _>>()
            })
            .filter(|read| !read.is_empty());
        let status = node.status.unwrap_or_default();
        let trimmed = TrimmedNode {
            metadata: node.metadata,
            capacity: status.capacity,
            allocatable: status.allocatable,
            conditions: status.conditions.map(|conditions| {
                conditions
                    .into_iter()
                    .filter(|c| {
                        [condition::GPU_FRACTIONING_READY, condition::GPU_FAULT]
                            .contains(&c.type_.as_str())
                    })
                    .collect()
            }),
        };
        let kept = KeptOfNode {
            kwok,
            own_labels,
            owned_status,
        };
        (trimmed, kept)
    }
}

impl HasMeta for TrimmedNode {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// KWOK nodes have no kubelet: no node agent runs there, the operator serves them centrally.
pub fn has_kubelet(node: &CachedNode) -> bool {
    !node.kept().kwok
}

/// What fakegpu set in a node's status and annotations and no one else did: capacity and
/// allocatable entries by resource name, conditions by type. The node cache keeps this in
/// place of the managed fields, whose nested maps cost some 4 KiB a node.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OwnedStatus {
    pub(super) capacity: Vec<String>,
    pub(super) allocatable: Vec<String>,
    pub(super) conditions: Vec<String>,
    #[serde(default)]
    pub(super) annotations: Vec<String>,
}

impl OwnedStatus {
    /// None when fakegpu owns nothing in the node's status and annotations, as its cache
    /// recorded from the managed fields.
    pub fn of(node: &CachedNode) -> Option<&Self> {
        node.kept().owned_status.as_ref()
    }

    pub fn from_managed_fields(node: &Node) -> Option<Self> {
        let keys = |list| names_only_ours(node, &["f:status", list]);
        let conditions = keys_only_ours(node, &["f:status", "f:conditions"])
            .into_iter()
            .filter_map(|key| {
                let key: serde_json::Value = serde_json::from_str(key.strip_prefix("k:")?).ok()?;
                Some(key.get("type")?.as_str()?.to_owned())
            })
            .collect();
        let owned = Self {
            capacity: keys("f:capacity"),
            allocatable: keys("f:allocatable"),
            conditions,
            annotations: names_only_ours(node, &["f:metadata", "f:annotations"]),
        };
        (owned != Self::default()).then_some(owned)
    }
}

/// The labels fakegpu set on `node` that no one else set too (read from its managed fields).
pub fn only_ours(node: &Node) -> Vec<String> {
    names_only_ours(node, &["f:metadata", "f:labels"])
}

/// Drops, from a node on its way into the cache, the labels only fakegpu owns; returns their
/// digest: the operator compares them and reads none, and at 10 000 nodes GFD's thirty-odd
/// labels were a fifth of its memory. Labels someone else owns too stay (a pool's node
/// selector may read them), and so does the pool label, which membership reads. Needs the
/// managed fields, so it runs before they are dropped.
pub fn drop_own_labels(node: &mut Node) -> Option<Digest> {
    let ours = only_ours(node);
    let labels = node.labels_mut();
    let dropped: BTreeMap<String, String> = ours
        .iter()
        .filter(|key| key.as_str() != POOL_LABEL)
        .filter_map(|key| labels.remove_entry(key))
        .collect();
    (!dropped.is_empty()).then(|| Digest::of(&dropped))
}

#[cfg(test)]
mod tests {
    use fakegpu_model::names::{annotation, condition};
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::{kit::cache::Cached, node::labels};

    #[test]
    fn slimming_keeps_what_the_controllers_read() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"a": "b"}, "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "fakegpu.dev/gpu-faults": "0:xid=48"},
                "managedFields": [
                {"manager": "kwok", "operation": "Update", "fieldsV1": {}},
                {"manager": "fakegpu", "operation": "Apply", "subresource": "status", "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:a": {}}},
                    "f:status": {"f:capacity": {"f:nvidia.com/gpu": {}}}}}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "32"},
                "capacity": {"nvidia.com/gpu": "8"},
                "images": [{"names": ["busybox"]}],
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "gpu-fractioning.nvidia.com/Ready", "status": "True"}],
            },
        }))
        .expect("test node");
        let owned = OwnedStatus::from_managed_fields(&node).expect("own entry");
        let node = Cached::new(node);
        // `a` is fakegpu's alone: compared by digest, not kept.
        assert!(!node.labels().contains_key("a"));
        assert!(labels::labels_current(
            &node,
            &std::collections::BTreeMap::from([("a".to_owned(), "b".to_owned())])
        ));
        assert!(node.trimmed().metadata.managed_fields.is_none());
        // Of the annotations, those fakegpu reads; KWOK's as a flag.
        assert_eq!(
            node.annotations().keys().collect::<Vec<_>>(),
            [annotation::GPU_FAULTS]
        );
        assert!(!has_kubelet(&node));
        assert_eq!(OwnedStatus::of(&node), Some(&owned));
        assert!(OwnedStatus::of(&node).is_some());
        let trimmed = node.trimmed().clone();
        assert_eq!(trimmed.allocatable.expect("allocatable").len(), 2);
        assert_eq!(trimmed.capacity.expect("capacity").len(), 1);
        let conditions = trimmed.conditions.expect("conditions");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, condition::GPU_FRACTIONING_READY);
    }
}
