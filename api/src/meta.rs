//! Comparing what fakegpu writes with what an object has.

use kube::{Resource, ResourceExt};

/// Whether `current` carries the metadata fakegpu wants on it (`desired`): every desired label
/// and annotation with its value (others' entries may be there too) and the same owners.
pub fn metadata_current(current: &impl Resource, desired: &impl Resource) -> bool {
    let subset = |wanted: &std::collections::BTreeMap<String, String>,
                  have: &std::collections::BTreeMap<String, String>| {
        wanted.iter().all(|(k, v)| have.get(k) == Some(v))
    };
    subset(desired.labels(), current.labels())
        && subset(desired.annotations(), current.annotations())
        && current.owner_references() == desired.owner_references()
}

/// Whether `name` is a DNS subdomain, the name most API objects must have: at most 253
/// characters of lowercase letters, digits, `-` and `.`, alphanumeric at both ends.
pub fn is_dns_subdomain(name: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| alphanumeric(c) || c == '-' || c == '.')
        && name.starts_with(alphanumeric)
        && name.ends_with(alphanumeric)
}

/// Whether `name` is a label's name (a key without its prefix):
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
pub fn is_label_name(name: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_alphanumeric();
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| alphanumeric(c) || matches!(c, '-' | '_' | '.'))
        && name.starts_with(alphanumeric)
        && name.ends_with(alphanumeric)
}

/// Whether `value` can be a label's value: empty, or a label's name.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

/// The `node-name` label of a per-node ConfigMap (topology document, kubelet report) for
/// `node`, the reference's way to name the node; `None` where the name cannot be a label value
/// (a node name can, but for its length: longer than 63 characters, as Karpenter's KWOK nodes'
/// and some clouds' are), since the API server refuses such a ConfigMap. Readers take the node from the ConfigMap's name then
/// ([`node_of_configmap`]); the reference's readers see no node, as the reference itself
/// writes no such ConfigMap.
pub fn node_name_label(node: &str) -> Option<(String, String)> {
    is_label_value(node).then(|| {
        (
            fakegpu_model::names::topology::NODE_NAME_LABEL.to_owned(),
            node.to_owned(),
        )
    })
}

/// The node a per-node ConfigMap named `<prefix><node>` is about: its `node-name` label, or
/// its name after `prefix` where it has none ([`node_name_label`]).
pub fn node_of_configmap<'a>(configmap: &'a impl Resource, prefix: &str) -> Option<&'a str> {
    match configmap
        .meta()
        .labels
        .as_ref()
        .and_then(|labels| labels.get(fakegpu_model::names::topology::NODE_NAME_LABEL))
    {
        Some(node) => Some(node),
        None => configmap
            .meta()
            .name
            .as_deref()?
            .strip_prefix(prefix)
            .filter(|node| !node.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    fn cm(value: serde_json::Value) -> ConfigMap {
        serde_json::from_value(value).expect("test ConfigMap")
    }

    #[test]
    fn extra_entries_are_fine_missing_or_different_ones_are_not() {
        let desired = cm(json!({"metadata": {"labels": {"a": "1"}, "annotations": {"n": "2"}}}));
        let more =
            cm(json!({"metadata": {"labels": {"a": "1", "b": "x"}, "annotations": {"n": "2"}}}));
        assert!(metadata_current(&more, &desired));
        let other = cm(json!({"metadata": {"labels": {"a": "9"}, "annotations": {"n": "2"}}}));
        assert!(!metadata_current(&other, &desired));
        let unannotated = cm(json!({"metadata": {"labels": {"a": "1"}}}));
        assert!(!metadata_current(&unannotated, &desired));
        let owned = cm(
            json!({"metadata": {"labels": {"a": "1"}, "annotations": {"n": "2"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]}}),
        );
        assert!(!metadata_current(&owned, &desired));
    }

    #[test]
    fn a_node_name_too_long_for_a_label_is_read_from_the_configmap_name() {
        let short = "kwok-node-0";
        let long = "kwok-karpenter-2594-0-gnmsw-lifterevening-9-fhbu7n5zxj-772852652";
        assert_eq!(
            node_name_label(short),
            Some(("node-name".to_owned(), short.to_owned()))
        );
        assert_eq!(node_name_label(long), None);
        let configmap =
            |name: &str, label: Option<(String, String)>| k8s_openapi::api::core::v1::ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(format!("topology-{name}")),
                    labels: label.map(|l| [l].into()),
                    ..Default::default()
                },
                ..Default::default()
            };
        for node in [short, long] {
            let cm = configmap(node, node_name_label(node));
            assert_eq!(node_of_configmap(&cm, "topology-"), Some(node));
        }
        // The label wins over the name (the reference's readers and writers agree on it).
        let cm = configmap("a", node_name_label("b"));
        assert_eq!(node_of_configmap(&cm, "topology-"), Some("b"));
        assert_eq!(node_of_configmap(&configmap("", None), "topology-"), None);
        assert_eq!(node_of_configmap(&configmap("x", None), "other-"), None);
    }
}
