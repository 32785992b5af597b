//! The one writer of objects fakegpu keeps as it wants them. A reconciler says what it wants
//! of an object (or that it wants none) beside what the cache shows; [`Owned::ensure`] writes
//! nothing when they agree, nothing when the same write is still on its way to the cache (see
//! [`crate::kit::recent`]), and otherwise the write its [`Policy`] names for the kind, or a
//! delete. Every reconciler's compare-then-write goes through here, so that a resync with
//! nothing changed makes no write and a burst of events for one object makes one.

use std::{fmt::Debug, time::Instant};

use kube::{
    Api, Client, Resource, Result,
    core::{ClusterResourceScope, NamespaceResourceScope},
};
use serde::{Serialize, de::DeserializeOwned};
use tracing::debug;

use crate::kit::{
    apply,
    recent::{RecentWrites, Target, fingerprint},
};

/// How a kind is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Server-side apply of the fields fakegpu owns, for objects others may write too: the API
    /// server tracks which fields are fakegpu's and drops those it stops applying.
    Apply,
    /// Create, or replace whole, for objects fakegpu alone writes, one or two per node: nothing
    /// of anyone else's to keep, and the cheapest write for the API server ([`apply::replace`]).
    Replace,
    /// A JSON merge patch of some fields, leaving the rest of the object to whoever set it.
    MergePatch,
}

/// What [`Owned`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The cache shows the object as wanted (or shows none, and none is wanted).
    Current,
    /// The same write was sent already and the cache has not shown it yet.
    Pending,
    Written,
    Removed,
}

impl Outcome {
    /// Whether a request went to the API server.
    pub fn sent(self) -> bool {
        matches!(self, Self::Written | Self::Removed)
    }
}

/// What a kind needs to be written and read back through [`Owned`].
pub trait Writable:
    Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug
{
}

impl<K> Writable for K where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug
{
}

/// Objects of kind `K` in one namespace (or cluster-wide), written by one [`Policy`].
pub struct Owned<'a, K> {
    api: Api<K>,
    namespace: Option<String>,
    recent: &'a RecentWrites,
    policy: Policy,
}

impl<K> Debug for Owned<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owned")
            .field("namespace", &self.namespace)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<'a, K: Writable> Owned<'a, K> {
    /// Cluster-scoped objects.
    pub fn all(client: Client, recent: &'a RecentWrites, policy: Policy) -> Self
    where
        K: Resource<Scope = ClusterResourceScope>,
    {
        Self {
            api: Api::all(client),
            namespace: None,
            recent,
            policy,
        }
    }

    /// Objects in `namespace`.
    pub fn namespaced(
        client: Client,
        namespace: &str,
        recent: &'a RecentWrites,
        policy: Policy,
    ) -> Self
    where
        K: Resource<Scope = NamespaceResourceScope>,
    {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: Some(namespace.to_owned()),
            recent,
            policy,
        }
    }

    /// The API these objects are written through, for reads the cache cannot answer.
    pub fn api(&self) -> &Api<K> {
        &self.api
    }

    fn target(&self, name: &str, subresource: Option<&'static str>) -> Target {
        Target::new::<K>(self.namespace.as_deref(), name, subresource)
    }

    /// Brings object `name` from `current` (the cache's; `None`: absent) to `desired`
    /// (`None`: not wanted): nothing when `is_current` says the cache shows it so, otherwise
    /// [`Self::write`] or [`Self::remove`].
    pub async fn ensure<C, D>(
        &self,
        name: &str,
        current: Option<&C>,
        desired: Option<&D>,
        is_current: impl FnOnce(&C, &D) -> bool,
    ) -> Result<Outcome>
    where
        D: Serialize + Debug,
    {
        match (current, desired) {
            (None, None) => Ok(Outcome::Current),
            (Some(_), None) => self.remove(name).await,
            (Some(current), Some(desired)) if is_current(current, desired) => Ok(Outcome::Current),
            (current, Some(desired)) => self.write(name, desired, current.is_some()).await,
        }
    }

    /// Writes `body` to object `name` (the whole object for [`Policy::Replace`], the fields
    /// fakegpu sets otherwise), unless the same write is on its way to the cache. `exists`:
    /// whether the cache shows the object (a replace then skips the create).
    pub async fn write(
        &self,
        name: &str,
        body: &(impl Serialize + Debug),
        exists: bool,
    ) -> Result<Outcome> {
        let target = self.target(name, None);
        let fingerprint = fingerprint(body);
        if self.is_pending(&target, fingerprint) {
            return Ok(Outcome::Pending);
        }
        let version = match self.policy {
            Policy::Apply => {
                let written = apply::apply(&self.api, name, body).await?;
                written.meta().resource_version.clone()
            }
            Policy::Replace => {
                let written = apply::replace(&self.api, name, body, exists).await?;
                written.metadata.resource_version
            }
            Policy::MergePatch => {
                let written = apply::merge_patch(&self.api, name, body).await?;
                written.meta().resource_version.clone()
            }
        };
        self.recent
            .record(target, fingerprint, version.as_deref(), Instant::now());
        Ok(Outcome::Written)
    }

    /// Deletes object `name` (one already gone counts as deleted) and forgets the writes to it
    /// still awaited: the same body written later creates it again.
    pub async fn remove(&self, name: &str) -> Result<Outcome> {
        self.recent.forget(&self.target(name, None));
        apply::delete(&self.api, name).await?;
        Ok(Outcome::Removed)
    }

    /// Server-side applies `body` to object `name`'s status: the status of the object a
    /// reconcile is about, which it compared with the object it was given. Not held back while
    /// on its way: the callers pace these writes themselves (pools) or hear of their objects
    /// only by their own events (ComputeDomains).
    pub async fn apply_status(
        &self,
        name: &str,
        body: &(impl Serialize + Debug),
    ) -> Result<Outcome> {
        apply::apply_status(&self.api, name, body).await?;
        Ok(Outcome::Written)
    }

    /// Whether a status patch that `same` stands for is on its way to the cache: asked first
    /// where preparing the patch costs a read.
    pub fn status_pending(&self, name: &str, same: &impl Serialize) -> bool {
        self.is_pending(&self.target(name, Some("status")), fingerprint(same))
    }

    /// Strategic-merge-patches object `name`'s status ([`apply::patch_status`]), unless a patch
    /// that `same` also stands for is on its way to the cache (a status carries timestamps that
    /// differ between two computations of one intent). A patch sent is remembered as fakegpu's
    /// own last write of the object ([`RecentWrites::record_own`]): the watch event of the
    /// version it answered with is its echo, which only shows the patch done.
    pub async fn patch_status(
        &self,
        name: &str,
        patch: &serde_json::Value,
        same: &impl Serialize,
    ) -> Result<Outcome> {
        let target = self.target(name, Some("status"));
        let fingerprint = fingerprint(same);
        if self.is_pending(&target, fingerprint) {
            return Ok(Outcome::Pending);
        }
        let written = apply::patch_status(&self.api, name, patch).await?;
        let now = Instant::now();
        let version = written.metadata.resource_version.as_deref();
        self.recent.record(target, fingerprint, version, now);
        self.recent.record_own(&written, fingerprint, now);
        Ok(Outcome::Written)
    }

    fn is_pending(&self, target: &Target, fingerprint: u64) -> bool {
        let pending = self.recent.is_repeat(target, fingerprint, Instant::now());
        if pending {
            debug!(
                ?target,
                "same write already sent; the cache has not shown it yet"
            );
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use kube::api::ObjectMeta;
    use serde_json::json;

    use super::*;
    use crate::testing::api_server::{against, calls};

    const NAMESPACE: &str = "fakegpu-system";
    const COLLECTION: &str = "/api/v1/namespaces/fakegpu-system/configmaps";
    const OBJECT: &str = "/api/v1/namespaces/fakegpu-system/configmaps/topology-n1";

    fn configmap(value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("topology-n1".to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                ..Default::default()
            },
            data: Some([("topology.yml".to_owned(), value.to_owned())].into()),
            ..Default::default()
        }
    }

    fn same(current: &ConfigMap, desired: &ConfigMap) -> bool {
        current.data == desired.data
    }

    /// `ensure` of each (current, desired) in turn, against a server answering `answers`.
    async fn ensure_each(
        policy: Policy,
        recent: &RecentWrites,
        steps: &[(Option<ConfigMap>, Option<ConfigMap>)],
        answers: &[u16],
    ) -> (Vec<Outcome>, Vec<(Method, String)>) {
        let (outcomes, seen) = against(answers, |client| async move {
            let owned = Owned::<ConfigMap>::namespaced(client, NAMESPACE, recent, policy);
            let mut outcomes = vec![];
            for (current, desired) in steps {
                let outcome = owned
                    .ensure("topology-n1", current.as_ref(), desired.as_ref(), same)
                    .await;
                outcomes.push(outcome.expect("ensure"));
            }
            outcomes
        })
        .await;
        (outcomes, calls(&seen))
    }

    #[tokio::test]
    async fn an_object_the_cache_shows_as_wanted_is_not_written() {
        let recent = RecentWrites::default();
        let wanted = Some(configmap("gpus: []"));
        let steps = [(wanted.clone(), wanted), (None, None)];
        let (outcomes, seen) = ensure_each(Policy::Replace, &recent, &steps, &[]).await;
        assert_eq!(outcomes, [Outcome::Current, Outcome::Current]);
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[tokio::test]
    async fn a_write_is_sent_once_until_the_cache_shows_it() {
        let recent = RecentWrites::default();
        let (old, new) = (Some(configmap("old")), Some(configmap("new")));
        // The cache still shows the old object on the second and third pass.
        let steps = [
            (old.clone(), new.clone()),
            (old.clone(), new.clone()),
            (old.clone(), Some(configmap("newer"))),
        ];
        let (outcomes, seen) = ensure_each(Policy::Replace, &recent, &steps, &[200, 200]).await;
        assert_eq!(
            outcomes,
            [Outcome::Written, Outcome::Pending, Outcome::Written]
        );
        assert_eq!(
            seen,
            [(Method::PUT, OBJECT.into()), (Method::PUT, OBJECT.into())]
        );
        // The watch delivers the version the last write was given ("7"): the same body goes
        // out again only if the object changes after that.
        let mut delivered = configmap("newer");
        delivered.metadata.resource_version = Some("7".into());
        recent.seen(&delivered);
        let steps = [(old, new)];
        let (outcomes, seen) = ensure_each(Policy::Replace, &recent, &steps, &[200]).await;
        assert_eq!(outcomes, [Outcome::Written]);
        assert_eq!(seen.len(), 1);
    }

    #[tokio::test]
    async fn each_policy_sends_its_write_and_absence_deletes() {
        let recent = RecentWrites::default();
        let steps = [(None, Some(configmap("a")))];
        let (_, created) = ensure_each(Policy::Replace, &recent, &steps, &[201]).await;
        assert_eq!(created, [(Method::POST, COLLECTION.into())]);
        for policy in [Policy::Apply, Policy::MergePatch] {
            let recent = RecentWrites::default();
            let (outcomes, seen) = ensure_each(policy, &recent, &steps, &[200]).await;
            assert_eq!(outcomes, [Outcome::Written], "{policy:?}");
            assert_eq!(seen, [(Method::PATCH, OBJECT.into())], "{policy:?}");
        }
        let recent = RecentWrites::default();
        // Written, then no longer wanted; deleting forgets the write, so wanting the same
        // object again writes it again; a delete that finds it gone is done.
        let steps = [
            (None, Some(configmap("a"))),
            (Some(configmap("a")), None),
            (None, Some(configmap("a"))),
            (Some(configmap("a")), None),
        ];
        let answers = [201, 200, 201, 404];
        let (outcomes, seen) = ensure_each(Policy::Replace, &recent, &steps, &answers).await;
        use Outcome::{Removed, Written};
        assert_eq!(outcomes, [Written, Removed, Written, Removed]);
        assert_eq!(
            seen.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(),
            [Method::POST, Method::DELETE, Method::POST, Method::DELETE]
        );
    }

    #[tokio::test]
    async fn a_refused_write_is_an_error_and_not_remembered() {
        let recent = RecentWrites::default();
        let steps = [(None, Some(configmap("a")))];
        let (result, seen) = against(&[409, 500, 201], |client| {
            let recent = &recent;
            async move {
                let owned =
                    Owned::<ConfigMap>::namespaced(client, NAMESPACE, recent, Policy::Replace);
                let (current, desired) = &steps[0];
                let first = owned
                    .ensure("topology-n1", current.as_ref(), desired.as_ref(), same)
                    .await;
                let again = owned
                    .ensure("topology-n1", current.as_ref(), desired.as_ref(), same)
                    .await;
                (first.is_err(), again.expect("written on the retry"))
            }
        })
        .await;
        assert_eq!(result, (true, Outcome::Written), "retried, not held back");
        // Created meanwhile (409), replaced: refused (500); the retry creates.
        assert_eq!(
            calls(&seen),
            [
                (Method::POST, COLLECTION.into()),
                (Method::PUT, OBJECT.into()),
                (Method::POST, COLLECTION.into())
            ]
        );
    }

    #[tokio::test]
    async fn a_status_patch_sent_once_is_known_by_its_echo() {
        let patch = json!({"status": {"capacity": {"nvidia.com/gpu": "8"}}});
        let recent = RecentWrites::default();
        let (sent, seen) = against(&[200, 200], |client| {
            let (patch, recent) = (patch.clone(), &recent);
            async move {
                let nodes = Owned::<Node>::all(client, recent, Policy::Apply);
                let first = nodes.patch_status("n1", &patch, &patch).await;
                let pending = nodes.status_pending("n1", &patch);
                let again = nodes.patch_status("n1", &patch, &patch).await;
                (first.unwrap(), pending, again.unwrap())
            }
        })
        .await;
        assert_eq!(
            sent,
            (Outcome::Written, true, Outcome::Pending),
            "the same patch waits for its echo"
        );
        assert_eq!(seen.len(), 1);
        let node = |version: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n1", "resourceVersion": version}}))
                .unwrap()
        };
        assert!(
            !recent.is_own_echo(&node("6")),
            "an event from before the patch"
        );
        assert!(
            recent.is_own_echo(&node("7")),
            "the version the patch answered"
        );
        assert!(!recent.is_own_echo(&node("7")), "told once");
    }
}
