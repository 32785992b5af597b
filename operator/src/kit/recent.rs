//! Writes that the caches have not shown yet.
//!
//! A write's own watch event reaches the cache a moment after the write returns; under load,
//! a second or more. A reconcile in between (a node has several objects, each of whose events
//! triggers it) compares with the old cached object and would send the same write again: with
//! thousands of nodes joining at once that doubled the writes per node. So each write is
//! remembered with a fingerprint of what was written and the resourceVersion the API server gave
//! it, until the watch delivers that version (or a later one). Until then the same write is not
//! sent again; a different one is.
//!
//! ResourceVersions are compared as numbers, as the API server's own comparison does
//! (KEP-5504). One that is not a number counts as caught up, so the write goes out.
//! A remembered write the watch never confirms (the object went away in between and the watch
//! restarted) is forgotten after [`PATIENCE`].

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
    time::{Duration, Instant},
};

use kube::{Resource, ResourceExt};

/// How long an unconfirmed write holds back the same write.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Which write: the object's kind, `namespace/name` (the name alone when cluster-scoped), and
/// the subresource written (status writes of a Node are confirmed by the same events as its
/// label writes, but each has its own version).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Target {
    kind: String,
    name: String,
    subresource: Option<&'static str>,
}

impl Target {
    pub fn new<K: Resource<DynamicType = ()>>(
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&'static str>,
    ) -> Self {
        Self {
            kind: K::kind(&()).into_owned(),
            name: scoped_name(namespace, name),
            subresource,
        }
    }
}

#[derive(Debug)]
struct Written {
    fingerprint: u64,
    resource_version: u64,
    at: Instant,
}

impl Written {
    /// Whether a write with `fingerprint` at `now` would repeat this one while it is awaited.
    fn repeated_by(&self, fingerprint: u64, now: Instant) -> bool {
        self.fingerprint == fingerprint && now.duration_since(self.at) < PATIENCE
    }
}

#[derive(Debug, Default)]
pub struct RecentWrites {
    pending: Mutex<HashMap<Target, Written>>,
    /// Objects of others' that fakegpu wrote last (a pod's annotation), by kind and
    /// `namespace/name`: what it wrote, the version its write gave each, and when.
    own: Mutex<HashMap<(String, String), Written>>,
}

/// How many remembered own writes make [`RecentWrites::record_own`] forget those older than
/// [`PATIENCE`] (whose echo never came: the object went first).
const OWN_PRUNE_AT: usize = 1024;

fn own_key<K: Resource<DynamicType = ()>>(object: &K) -> (String, String) {
    own_key_of::<K>(object.meta().namespace.as_deref(), &object.name_any())
}

fn own_key_of<K: Resource<DynamicType = ()>>(
    namespace: Option<&str>,
    name: &str,
) -> (String, String) {
    (K::kind(&()).into_owned(), scoped_name(namespace, name))
}

/// `namespace/name`, or the name alone of a cluster-scoped object: one object among all of its
/// kind (pods of one name in two namespaces are two pods).
pub(crate) fn scoped_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// A fingerprint of a serialisable value: of a write's body here, of what the controllers read
/// of a watched object in the event filters.
pub fn fingerprint(body: &impl serde::Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    // Serialising API types cannot fail; if it did, the empty body's hash only means a change
    // is not seen as one.
    serde_json::to_vec(body)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

fn version(resource_version: Option<&str>) -> Option<u64> {
    resource_version?.parse().ok()
}

impl RecentWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Target, Written>> {
        // A poisoned lock only means a panic elsewhere mid-insert; the map is still valid.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether writing a body with `fingerprint` to `target` would repeat a write the cache
    /// has not shown yet.
    pub fn is_repeat(&self, target: &Target, fingerprint: u64, now: Instant) -> bool {
        self.lock()
            .get(target)
            .is_some_and(|written| written.repeated_by(fingerprint, now))
    }

    /// Remembers a write that the API server answered with `resource_version`.
    pub fn record(
        &self,
        target: Target,
        fingerprint: u64,
        resource_version: Option<&str>,
        now: Instant,
    ) {
        let mut pending = self.lock();
        match version(resource_version) {
            Some(resource_version) => {
                pending.insert(
                    target,
                    Written {
                        fingerprint,
                        resource_version,
                        at: now,
                    },
                );
            }
            None => {
                pending.remove(&target);
            }
        }
    }

    /// Whether `resource_version` is the version that fakegpu's write to the object `name` of
    /// kind `K` was given, a write the watch had not delivered yet: the object is as that
    /// write left it. Asked before [`Self::seen`] confirms the write.
    pub fn is_own_version<K: Resource<DynamicType = ()>>(
        &self,
        namespace: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
    ) -> bool {
        let Some(delivered) = version(resource_version) else {
            return false;
        };
        self.lock()
            .get(&Target::new::<K>(namespace, name, None))
            .is_some_and(|written| written.resource_version == delivered)
    }

    /// Forgets the write to `target` (the object is being deleted).
    pub fn forget(&self, target: &Target) {
        self.lock().remove(target);
    }

    fn own(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Written>> {
        self.own.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers that fakegpu's write of a body with `fingerprint` gave `written` its version:
    /// its watch event is then fakegpu's own echo (see [`Self::is_own_echo`]), and until it
    /// comes the same write is not sent again ([`Self::is_own_pending`]).
    pub fn record_own<K: Resource<DynamicType = ()>>(
        &self,
        written: &K,
        fingerprint: u64,
        now: Instant,
    ) {
        let Some(resource_version) = version(written.meta().resource_version.as_deref()) else {
            return;
        };
        let mut own = self.own();
        if own.len() >= OWN_PRUNE_AT {
            own.retain(|_, written| now.duration_since(written.at) < PATIENCE);
        }
        own.insert(
            own_key(written),
            Written {
                fingerprint,
                resource_version,
                at: now,
            },
        );
    }

    /// Whether a write with `fingerprint` to another's object `namespace/name` of kind `K`
    /// repeats fakegpu's last one there, whose echo the watch has not delivered yet: an event
    /// of the object from before that write (another writer's, under load) would otherwise
    /// have it sent twice. A skipped write loses nothing: its echo shows the object as the
    /// write would have left it.
    pub fn is_own_pending<K: Resource<DynamicType = ()>>(
        &self,
        namespace: Option<&str>,
        name: &str,
        fingerprint: u64,
        now: Instant,
    ) -> bool {
        self.own()
            .get(&own_key_of::<K>(namespace, name))
            .is_some_and(|written| written.repeated_by(fingerprint, now))
    }

    /// Whether the watch delivered `object` as fakegpu's own last write left it (nothing
    /// happened to it since): reacting to it would only find that write done. Forgets the
    /// write once its echo came.
    pub fn is_own_echo<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let mut own = self.own();
        if own.is_empty() {
            return false;
        }
        let key = own_key(object);
        let Some(written) = own.get(&key).map(|written| written.resource_version) else {
            return false;
        };
        match version(object.meta().resource_version.as_deref()) {
            Some(delivered) if delivered == written => {
                own.remove(&key);
                true
            }
            Some(delivered) if delivered > written => {
                own.remove(&key);
                false
            }
            _ => false,
        }
    }

    /// The watch delivered `object` (applied or deleted): the writes to it up to its version
    /// are confirmed.
    pub fn seen<K: Resource<DynamicType = ()>>(&self, object: &K) {
        let mut pending = self.lock();
        if pending.is_empty() {
            return;
        }
        let name = object.name_any();
        let namespace = object.meta().namespace.as_deref();
        let delivered = version(object.meta().resource_version.as_deref());
        for subresource in [None, Some("status")] {
            let target = Target::new::<K>(namespace, &name, subresource);
            let confirmed = pending
                .get(&target)
                .is_some_and(|w| delivered.is_none_or(|v| v >= w.resource_version));
            if confirmed {
                pending.remove(&target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use serde_json::json;

    use super::*;

    fn node(name: &str, resource_version: &str) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "resourceVersion": resource_version}}),
        )
        .expect("test node")
    }

    #[test]
    fn a_write_is_a_repeat_until_the_watch_delivers_its_version() {
        let recent = RecentWrites::default();
        let now = Instant::now();
        let labels = Target::new::<Node>(None, "n", None);
        let status = Target::new::<Node>(None, "n", Some("status"));
        let body = fingerprint(&json!({"labels": {"a": "b"}}));
        recent.record(labels.clone(), body, Some("100"), now);
        recent.record(status.clone(), 7, Some("105"), now);
        assert!(recent.is_repeat(&labels, body, now));
        // A different body is a different write.
        assert!(!recent.is_repeat(&labels, fingerprint(&json!({})), now));
        // An older event confirms nothing.
        recent.seen(&node("n", "99"));
        assert!(recent.is_repeat(&labels, body, now));
        // The labels' version confirms the label write, not the later status write.
        recent.seen(&node("n", "100"));
        assert!(!recent.is_repeat(&labels, body, now));
        assert!(recent.is_repeat(&status, 7, now));
        recent.seen(&node("n", "106"));
        assert!(!recent.is_repeat(&status, 7, now));
    }

    #[test]
    fn the_version_a_write_was_given_is_its_own_until_the_watch_delivers_it() {
        let recent = RecentWrites::default();
        let now = Instant::now();
        recent.record(
            Target::new::<ConfigMap>(None, "n", None),
            1,
            Some("10"),
            now,
        );
        assert!(recent.is_own_version::<ConfigMap>(None, "n", Some("10")));
        // Someone's later change, another object, another kind, no version: not the write's.
        assert!(!recent.is_own_version::<ConfigMap>(None, "n", Some("11")));
        assert!(!recent.is_own_version::<ConfigMap>(None, "m", Some("10")));
        assert!(!recent.is_own_version::<Node>(None, "n", Some("10")));
        assert!(!recent.is_own_version::<ConfigMap>(None, "n", None));
        let delivered: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "n", "resourceVersion": "10"}}))
                .expect("test ConfigMap");
        recent.seen(&delivered);
        assert!(!recent.is_own_version::<ConfigMap>(None, "n", Some("10")));
    }

    #[test]
    fn kinds_do_not_mix_and_patience_runs_out() {
        let recent = RecentWrites::default();
        let now = Instant::now();
        let configmap = Target::new::<ConfigMap>(None, "n", None);
        recent.record(configmap.clone(), 1, Some("10"), now);
        recent.seen(&node("n", "20"));
        assert!(recent.is_repeat(&configmap, 1, now));
        assert!(!recent.is_repeat(&configmap, 1, now + PATIENCE));
    }

    #[test]
    fn unparsable_versions_never_hold_a_write_back() {
        let recent = RecentWrites::default();
        let now = Instant::now();
        let target = Target::new::<Node>(None, "n", None);
        recent.record(target.clone(), 1, Some("opaque"), now);
        assert!(!recent.is_repeat(&target, 1, now));
        recent.record(target.clone(), 1, Some("5"), now);
        recent.seen(&node("n", "opaque"));
        assert!(!recent.is_repeat(&target, 1, now));
    }

    fn pod(namespace: &str, name: &str, resource_version: &str) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace,
            "resourceVersion": resource_version}}))
        .expect("test pod")
    }

    #[test]
    fn an_own_write_s_echo_is_told_once_and_nothing_after_it() {
        let recent = RecentWrites::default();
        let now = Instant::now();
        recent.record_own(&pod("a", "p", "7"), 1, now);
        // Another namespace's pod of that name, an earlier event of this one: not the echo.
        assert!(!recent.is_own_echo(&pod("b", "p", "7")));
        assert!(!recent.is_own_echo(&pod("a", "p", "6")));
        assert!(recent.is_own_echo(&pod("a", "p", "7")));
        // Told once: the same version again (a relist) is not held back.
        assert!(!recent.is_own_echo(&pod("a", "p", "7")));
        // A later version than the write means someone changed it since: it passes, and the
        // write is forgotten.
        recent.record_own(&pod("a", "q", "9"), 1, now);
        assert!(!recent.is_own_echo(&pod("a", "q", "10")));
        assert!(!recent.is_own_echo(&pod("a", "q", "9")));
    }

    #[test]
    fn the_same_own_write_waits_for_its_echo() {
        let recent = RecentWrites::default();
        let now = Instant::now();
        let gpus = fingerprint(&("fakegpu.dev/gpus", "GPU-1"));
        recent.record_own(&pod("a", "p", "7"), gpus, now);
        let pending = |namespace, name, body, at| {
            recent.is_own_pending::<k8s_openapi::api::core::v1::Pod>(
                Some(namespace),
                name,
                body,
                at,
            )
        };
        assert!(pending("a", "p", gpus, now));
        // Another value, another pod, a pod of another namespace: written.
        assert!(!pending(
            "a",
            "p",
            fingerprint(&("fakegpu.dev/gpus", "GPU-2")),
            now
        ));
        assert!(!pending("a", "q", gpus, now));
        assert!(!pending("b", "p", gpus, now));
        // An event from before the write (another writer's) leaves it pending...
        assert!(!recent.is_own_echo(&pod("a", "p", "6")));
        assert!(pending("a", "p", gpus, now));
        // ...until its echo comes, or patience runs out.
        assert!(!pending("a", "p", gpus, now + PATIENCE));
        assert!(recent.is_own_echo(&pod("a", "p", "7")));
        assert!(!pending("a", "p", gpus, now));
    }

    #[test]
    fn own_writes_whose_echo_never_came_are_forgotten() {
        let recent = RecentWrites::default();
        let long_ago = Instant::now();
        for i in 0..OWN_PRUNE_AT {
            recent.record_own(&pod("a", &format!("p{i}"), "1"), 1, long_ago);
        }
        let later = long_ago + PATIENCE + Duration::from_secs(1);
        recent.record_own(&pod("a", "fresh", "2"), 1, later);
        assert_eq!(recent.own.lock().expect("lock").len(), 1);
        assert!(recent.is_own_echo(&pod("a", "fresh", "2")));
    }
}
