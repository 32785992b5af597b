//! What the operator's watch caches hold of the kinds it has the most of (nodes, topology
//! ConfigMaps, ResourceSlices): [`Cached`] objects, trimmed to what the controllers read. At
//! 10 000 nodes the whole objects were most of the operator's memory, and the content it only
//! compares (fakegpu's own node labels, a free topology document, the metadata of a topology
//! ConfigMap fakegpu alone wrote, a slice's devices) is kept as a [`Digest`] instead.
//!
//! A cached object is not the API object, and its type says so: a reader holding a
//! `Cached<Node>` cannot take its labels for the node's labels without seeing that they are
//! the cache's (fakegpu's own labels are not among them).

use std::{borrow::Cow, fmt::Debug};

use fakegpu_model::names::FIELD_MANAGER;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer, Serialize};

/// How a kind is trimmed for its cache, and what the cache keeps in place of what it dropped.
pub trait Trim: Resource + Sized {
    /// What the cache keeps of the object itself: the object less what the controllers do not
    /// read (the object's own type where dropping fields is enough).
    type Trimmed: HasMeta + Clone + Debug + Send + Sync + 'static;
    /// What stands in for the dropped content: digests to compare, summaries to read.
    type Kept: Clone + Debug + PartialEq + Serialize + Send + Sync + 'static;

    /// Drops from `object` what the controllers do not read; returns what is left and what
    /// stands in for the rest. `written_by_fakegpu_alone` is what [`Cached`] read of the
    /// object's managed fields, before any trim drops them.
    fn trim(object: Self, written_by_fakegpu_alone: bool) -> (Self::Trimmed, Self::Kept);
}

/// What a cache keeps of an object has the object's metadata: an API object's own, or that of a
/// type a [`Trim`] keeps in its place.
pub trait HasMeta {
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
}

impl<K: Resource> HasMeta for K {
    fn meta(&self) -> &ObjectMeta {
        Resource::meta(self)
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        Resource::meta_mut(self)
    }
}

/// An object as a watch cache holds it: the API object trimmed by its kind's [`Trim`], and
/// what the cache kept of the rest. Read what is left with [`Cached::trimmed`]; what was
/// dropped can only be compared, through [`Cached::kept`].
#[derive(Clone, Debug)]
pub struct Cached<K: Trim> {
    trimmed: K::Trimmed,
    kept: K::Kept,
    own_write: bool,
}

impl<K: Trim> Cached<K> {
    /// Trims `object` for a cache.
    pub fn new(object: K) -> Self {
        let fakegpu_alone = written_by_fakegpu_alone(object.meta());
        let (trimmed, kept) = K::trim(object, fakegpu_alone);
        Self {
            trimmed,
            kept,
            own_write: false,
        }
    }

    /// This cached object, noted as fakegpu's own last write left it (see
    /// [`Self::left_by_own_write`]).
    pub fn noted_as_own_write(mut self, own_write: bool) -> Self {
        self.own_write = own_write;
        self
    }

    /// Whether the object is as fakegpu's own last write left it, nothing changed since: its
    /// watch event is that write's echo. Managed fields cannot tell: someone who only removes a
    /// field fakegpu set (a topology ConfigMap's document) leaves no entry of their own, so the
    /// object still looks written by fakegpu alone.
    pub fn left_by_own_write(&self) -> bool {
        self.own_write
    }

    /// The object less what its cache dropped.
    pub fn trimmed(&self) -> &K::Trimmed {
        &self.trimmed
    }

    /// What the cache keeps in place of the content it dropped.
    pub fn kept(&self) -> &K::Kept {
        &self.kept
    }
}

/// Caches and controllers know objects by kind, name and namespace: those of the API object.
impl<K: Trim> Resource for Cached<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        HasMeta::meta(&self.trimmed)
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        HasMeta::meta_mut(&mut self.trimmed)
    }
}

fn written_by_fakegpu_alone(meta: &ObjectMeta) -> bool {
    meta.managed_fields.as_ref().is_some_and(|entries| {
        !entries.is_empty()
            && entries
                .iter()
                .all(|entry| entry.manager.as_deref() == Some(FIELD_MANAGER))
    })
}

/// kube's controllers ask that their objects can be read from the API; one read is trimmed as
/// a cache would.
impl<'de, K: Trim + Deserialize<'de>> Deserialize<'de> for Cached<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(deserializer).map(Self::new)
    }
}

/// A digest of content a cache dropped and only compares: equal for equal values within one
/// process (not stable across builds, never written out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Digest(u64);

impl Digest {
    pub fn of(value: &impl Serialize) -> Self {
        // Serialized, as the Kubernetes types do not implement Hash; their maps serialize in
        // key order, so equal values give equal bytes.
        Self(crate::kit::recent::fingerprint(value))
    }
}

/// Whether `current`, the content of a cached object unless its cache dropped it (`dropped`
/// is then its digest), equals `desired`.
pub fn same_content<T: Serialize + PartialEq>(
    current: &T,
    dropped: Option<Digest>,
    desired: &T,
) -> bool {
    match dropped {
        Some(digest) => digest == Digest::of(desired),
        None => current == desired,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;

    use super::*;

    /// A kind whose cache keeps the digest of its data.
    #[derive(Clone, Debug, Default, serde::Deserialize)]
    struct Doc(ConfigMap);

    impl Resource for Doc {
        type DynamicType = ();
        type Scope = k8s_openapi::NamespaceResourceScope;
        fn kind(_: &()) -> Cow<'_, str> {
            "ConfigMap".into()
        }
        fn group(_: &()) -> Cow<'_, str> {
            "".into()
        }
        fn version(_: &()) -> Cow<'_, str> {
            "v1".into()
        }
        fn plural(_: &()) -> Cow<'_, str> {
            "configmaps".into()
        }
        fn meta(&self) -> &ObjectMeta {
            &self.0.metadata
        }
        fn meta_mut(&mut self) -> &mut ObjectMeta {
            &mut self.0.metadata
        }
    }

    impl Trim for Doc {
        type Trimmed = Self;
        type Kept = Digest;
        fn trim(mut doc: Self, _: bool) -> (Self, Digest) {
            let digest = Digest::of(&doc.0.data.take());
            (doc, digest)
        }
    }

    #[test]
    fn a_cached_object_is_known_by_the_api_object_s_identity_and_keeps_a_digest() {
        let doc: Cached<Doc> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"},
        }))
        .expect("doc");
        assert_eq!(doc.name_any(), "a");
        assert_eq!(Cached::<Doc>::kind(&()), "ConfigMap");
        assert!(doc.trimmed().0.data.is_none());
        let data = Some(std::collections::BTreeMap::from([(
            "k".to_owned(),
            "v".to_owned(),
        )]));
        assert!(same_content(&None, Some(*doc.kept()), &data));
        assert!(!same_content(&data, Some(*doc.kept()), &None));
        assert!(same_content(&data, None, &data));
        assert!(!same_content(&None, None, &data));
    }
}
