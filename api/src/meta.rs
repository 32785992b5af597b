//! Comparing what fakegpu writes with what an object has.

use kube::{Resource, ResourceExt};

/// Whether `current` carries the metadata fakegpu wants on it (`desired`): every desired label
/// and annotation with its value (others' entries may be there too) and the same owners.
pub fn metadata_current<K: Resource>(current: &K, desired: &K) -> bool {
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

/// Where a cache that dropped content it only compares records the content's [`digest`]. Only
/// ever in memory: no object on the API server carries it.
pub const CACHED_DIGEST: &str = "fakegpu.dev/cached-digest";

/// Where the node cache records the [`digest`] of the labels it dropped: those fakegpu alone
/// owns, which the operator only compares. In memory only, like [`CACHED_DIGEST`].
pub const CACHED_LABELS: &str = "fakegpu.dev/cached-labels-digest";

/// Where the node cache records which status entries fakegpu's apply owns, in place of the
/// managed fields it drops. In memory only, like [`CACHED_DIGEST`].
pub const CACHED_OWNED_STATUS: &str = "fakegpu.dev/cached-owned-status";

/// A digest of `value`, for caches that hold a digest in place of content they only compare:
/// equal for equal values within one process (not stable across builds, never written out).
pub fn digest(value: &impl serde::Serialize) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    // Serialized, as the Kubernetes types do not implement Hash; their maps serialize in key
    // order, so equal values give equal bytes.
    serde_json::to_vec(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Records under `key` the `digest` of content the caller dropped from `object`, for
/// [`same_content`]; with none (nothing dropped), removes any annotation of that name the
/// object came with, which would otherwise be taken for a digest.
pub fn record_digest<K: Resource>(object: &mut K, key: &str, digest: Option<String>) {
    let annotations = object.annotations_mut();
    match digest {
        Some(digest) => annotations.insert(key.to_owned(), digest),
        None => annotations.remove(key),
    };
}

/// Whether `current`, whose content is `current_content` unless a cache dropped it (its digest
/// recorded under `key`, see [`record_digest`]), has the content `desired`.
pub fn same_content<K: Resource, T: serde::Serialize + PartialEq>(
    current: &K,
    key: &str,
    current_content: &T,
    desired: &T,
) -> bool {
    match current.annotations().get(key) {
        Some(recorded) => *recorded == digest(desired),
        None => current_content == desired,
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
}
