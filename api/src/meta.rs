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
}
