//! The plumbing every watched kind goes through, whichever controller reads it: watcher ->
//! reflector (the cache reconciles read) -> the touched objects as the cache's own `Arc`s
//! (`shared_touched`: applied *and* deleted objects: a deleted node changes its pool's
//! status, a deleted topology ConfigMap must be written again) -> a fan-out (`fan_out`) to
//! the controllers that need the events. kube's shared-store subscriptions were not used: they
//! pass on applied objects only, and under load a pool deletion was seen to go unnoticed
//! through them. Which kind feeds which controller is the operator's wiring.

use std::{collections::HashMap, sync::Arc};

use futures::{Stream, StreamExt, TryStreamExt, channel::mpsc, future, stream};
use kube::{
    Api, ResourceExt,
    runtime::{
        WatchStreamExt, controller,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tracing::warn;

use crate::kit::{
    cache::{Cached, Trim},
    recent::{RecentWrites, scoped_name},
};

/// Objects per page of a watcher's initial list. A page arrives and is decoded whole before the
/// caches trim its objects, and on a restart every watcher lists at once: at client-go's 500,
/// the pages in flight were a large part of a restart's peak memory at 10 000 nodes.
pub(crate) const LIST_PAGE_SIZE: u32 = 100;

/// One kind's watch feeding its cache: every object applied or deleted, as `keep` makes it for
/// the cache (trimmed to what the controllers read: [`kept`], or [`crate::kit::cache::Cached`]).
/// Watch errors are logged and retried with backoff.
pub(crate) fn cached<K, C>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<C>,
    mut keep: impl FnMut(K) -> C + Send + 'static,
) -> impl Stream<Item = Arc<C>> + Send
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    C: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let store = writer.as_reader();
    shared_touched(
        store,
        log_errors(
            watcher(api, config.page_size(LIST_PAGE_SIZE))
                .default_backoff()
                .map_ok(move |event| convert(event, &mut keep))
                .reflect(writer),
        ),
    )
}

/// A [`cached`] object of the watched kind, after `modify` (which drops what the cache need
/// not hold).
pub(crate) fn kept<K>(mut modify: impl FnMut(&mut K)) -> impl FnMut(K) -> K {
    move |mut object| {
        modify(&mut object);
        object
    }
}

/// `event` with its object as the cache holds it.
fn convert<K, C>(event: watcher::Event<K>, keep: &mut impl FnMut(K) -> C) -> watcher::Event<C> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(keep(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(keep(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(keep(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The objects a watch touched (applied or deleted), each as the cache's own `Arc` rather than
/// a second copy: until the controllers start, their streams hold every object of the initial
/// lists. A list's objects are passed on when the list is complete, since only then does the
/// cache hold them (it swaps a whole list in at once); passed on as they arrived, each was a
/// copy next to the cache's, and a restart's peak memory held both. Deleted objects, gone from
/// the cache, keep theirs.
///
/// A list after the first (the watch was away: its resource version expired, the connection
/// broke) has no deletion events: the objects deleted meanwhile simply are not in it. Those the
/// cache held before the list and does not hold after it are passed on as deletions are, or a
/// node deleted while the watch was away would stay counted in its pool's status, and a
/// topology ConfigMap deleted meanwhile would not be written again.
pub(crate) fn shared_touched<K>(
    store: Store<K>,
    events: impl Stream<Item = watcher::Event<K>>,
) -> impl Stream<Item = Arc<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut listed: Vec<ObjectRef<K>> = Vec::new();
    // What the cache held when the list began (it keeps that until the list is complete).
    let mut before: Vec<Arc<K>> = Vec::new();
    events.flat_map(move |event| {
        let objects: Vec<Arc<K>> = match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => vec![
                store
                    .get(&ObjectRef::from_obj(&object))
                    .unwrap_or_else(|| Arc::new(object)),
            ],
            watcher::Event::Init => {
                listed.clear();
                before = store.state();
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                listed.push(ObjectRef::from_obj(&object));
                Vec::new()
            }
            watcher::Event::InitDone => {
                let gone = std::mem::take(&mut before)
                    .into_iter()
                    .filter(|old| store.get(&ObjectRef::from_obj(old.as_ref())).is_none());
                listed
                    .drain(..)
                    .filter_map(|r| store.get(&r))
                    .chain(gone)
                    .collect()
            }
        };
        stream::iter(objects)
    })
}

/// Tells `recent` of every object a watch delivers, so that writes the cache now shows are no
/// longer held back (see [`crate::kit::recent`]). Runs after the cache took the object and before
/// the controllers hear of it.
pub(crate) fn confirm<K: kube::Resource<DynamicType = ()>>(
    recent: &Arc<RecentWrites>,
) -> impl Fn(&Arc<K>) + use<K> {
    let recent = recent.clone();
    move |object| recent.seen(object.as_ref())
}

/// Passes an object on only when `fingerprint` of it changed, it is seen for the first time,
/// or it is gone from the cache (deleted). The cache already holds the event's version when
/// the filter runs (the reflector comes first).
pub(crate) fn changes<K>(
    objects: impl Stream<Item = Arc<K>>,
    cache: Store<K>,
    fingerprint: impl Fn(&K) -> u64,
) -> impl Stream<Item = Arc<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    let key = |object: &K| scoped_name(object.meta().namespace.as_deref(), &object.name_any());
    objects.filter(move |object| {
        let gone = cache.get(&ObjectRef::from_obj(object.as_ref())).is_none();
        if gone {
            seen.remove(&key(object));
            return future::ready(true);
        }
        let print = fingerprint(object);
        future::ready(seen.insert(key(object), print) != Some(print))
    })
}

/// [`Cached::new`] for the cache of a kind fakegpu writes, noting whether the object is as
/// fakegpu's own last write left it ([`Cached::left_by_own_write`]): its version is the one
/// that write was given, or the cache holds it at this very version already so noted (the list
/// after a watch was away delivers unchanged objects again).
pub(crate) fn cached_noting_own_writes<K>(
    cache: Store<Cached<K>>,
    recent: Arc<RecentWrites>,
) -> impl FnMut(K) -> Cached<K>
where
    K: Trim + kube::Resource<DynamicType = ()>,
    Cached<K>: kube::Resource<DynamicType = ()> + Clone,
{
    move |object| {
        let name = object.name_any();
        let version = object.meta().resource_version.clone();
        let cached_as_own = || {
            let mut at = ObjectRef::<Cached<K>>::new(&name);
            at.namespace = object.meta().namespace.clone();
            cache.get(&at).is_some_and(|cached| {
                cached.left_by_own_write() && cached.resource_version() == version
            })
        };
        let own_write = recent.is_own_version::<K>(
            object.meta().namespace.as_deref(),
            &name,
            version.as_deref(),
        ) || cached_as_own();
        Cached::new(object).noted_as_own_write(own_write)
    }
}

/// Drops the echoes of fakegpu's own writes: objects as its last write left them
/// ([`cached_noting_own_writes`]) and as the cache holds them now. Reacting to one would only
/// run the reconcile that wrote it again, to find nothing to do. Someone else's change
/// (removing a field included), a deletion (gone from the cache) and an object that changed
/// again since pass. While 10 000 nodes join their pools, each node's ConfigMap and
/// ResourceSlice echoes had reconciled it twice more.
pub(crate) fn others_changes<K: Trim>(
    objects: impl Stream<Item = Arc<Cached<K>>>,
    cache: Store<Cached<K>>,
) -> impl Stream<Item = Arc<Cached<K>>>
where
    Cached<K>: kube::Resource<DynamicType = ()> + Clone,
{
    objects.filter(move |object| {
        let echo = object.left_by_own_write()
            && cache
                .get(&ObjectRef::from_obj(object.as_ref()))
                .is_some_and(|cached| Arc::ptr_eq(&cached, object));
        future::ready(!echo)
    })
}

/// Drops the objects that fakegpu's own last write left as they are
/// ([`RecentWrites::is_own_echo`]): a pod's GPUs annotation, written once for every pod given a
/// GPU, came back as a pod event that reconciled the pod's node again only to find it written;
/// so did a node's own status patch.
pub(crate) fn own_echoes_dropped<K: kube::Resource<DynamicType = ()>>(
    objects: impl Stream<Item = Arc<K>>,
    recent: Arc<RecentWrites>,
) -> impl Stream<Item = Arc<K>> {
    objects.filter(move |object| future::ready(!recent.is_own_echo(object.as_ref())))
}

/// Logs what a controller reports, except what needs no word: an event of a deleted object (the
/// streams carry deletions on purpose) finds nothing left to reconcile, and a failed reconcile
/// was logged by its error policy.
pub(crate) async fn log_outcome<T, E: std::error::Error, Q: std::error::Error>(
    controller: &str,
    result: Result<T, controller::Error<E, Q>>,
) {
    match result {
        Ok(_)
        | Err(controller::Error::ObjectNotFound(_))
        | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(error) => warn!(%error, controller, "controller"),
    }
}

/// Logs watch errors (the backoff retries them) and passes the objects on.
pub(crate) fn log_errors<K>(
    stream: impl Stream<Item = Result<K, watcher::Error>>,
) -> impl Stream<Item = K> {
    stream.filter_map(|event| {
        future::ready(match event {
            Ok(object) => Some(object),
            Err(error) => {
                warn!(%error, "watch");
                None
            }
        })
    })
}

/// Passes every item of `source` on to `N` streams, shared: until the controllers start (after
/// every cache is full) the streams hold every object of the initial lists (the caches' own,
/// see [`shared_touched`]). The returned future drives `source` and ends with it; the controllers
/// drain their streams promptly (they deduplicate queued work).
pub(crate) fn fan_out<T, const N: usize>(
    source: impl Stream<Item = Arc<T>>,
) -> (impl Future<Output = ()>, [impl Stream<Item = Arc<T>>; N]) {
    let mut senders = Vec::with_capacity(N);
    let receivers = std::array::from_fn(|_| {
        let (sender, receiver) = mpsc::unbounded();
        senders.push(sender);
        receiver
    });
    let drive = source.for_each(move |item| {
        for sender in &senders {
            // A closed receiver means its controller stopped; shutdown is under way.
            let _ = sender.unbounded_send(item.clone());
        }
        future::ready(())
    });
    (drive, receivers)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// `events` through a cache as `reflect` feeds one (the cache takes each event before it
    /// is passed on), then through [`shared_touched`].
    async fn touched<K>(events: Vec<Event<K>>) -> (Store<K>, Vec<Arc<K>>)
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        let (store, mut writer) = reflector::store::<K>();
        let reflected = stream::iter(events).map(move |event| {
            writer.apply_watcher_event(&event);
            event
        });
        let touched = shared_touched(store.clone(), reflected).collect().await;
        (store, touched)
    }

    #[tokio::test]
    async fn touched_objects_are_the_caches_own_and_a_list_comes_whole() {
        let (store, touched) = touched(vec![
            Event::Init,
            Event::InitApply(cm("a")),
            Event::InitApply(cm("b")),
            Event::InitDone,
            Event::Apply(cm("c")),
            Event::Delete(cm("a")),
        ])
        .await;
        let names: Vec<String> = touched.iter().map(|o| o.name_any()).collect();
        assert_eq!(names, ["a", "b", "c", "a"]);
        // "b" and "c" are the cache's own Arcs, not copies; the deleted "a" is its own.
        for object in &touched[1..3] {
            let cached = store
                .get(&ObjectRef::from_obj(object.as_ref()))
                .expect("cached");
            assert!(Arc::ptr_eq(object, &cached), "{}", object.name_any());
        }
        assert!(
            store
                .get(&ObjectRef::from_obj(touched[3].as_ref()))
                .is_none()
        );
    }

    #[tokio::test]
    async fn objects_deleted_while_the_watch_was_away_are_passed_on_after_the_next_list() {
        let (store, touched) = touched(vec![
            Event::Init,
            Event::InitApply(cm("a")),
            Event::InitApply(cm("b")),
            Event::InitDone,
            // The watch comes back with a new list: "a" was deleted meanwhile, "c" created.
            Event::Init,
            Event::InitApply(cm("b")),
            Event::InitApply(cm("c")),
            Event::InitDone,
        ])
        .await;
        let names: Vec<String> = touched.iter().map(|o| o.name_any()).collect();
        assert_eq!(names, ["a", "b", "b", "c", "a"]);
        // The deleted "a" is passed on as a deletion is: gone from the cache.
        assert!(
            store
                .get(&ObjectRef::from_obj(touched[4].as_ref()))
                .is_none()
        );
    }

    #[tokio::test]
    async fn echoes_of_fakegpu_s_own_writes_are_dropped() {
        use crate::kit::recent::Target;
        let at = |name: &str, version: &str| {
            let mut object = cm(name);
            object.metadata.resource_version = Some(version.to_owned());
            object
        };
        let (store, mut writer) = reflector::store::<Cached<ConfigMap>>();
        let recent = Arc::new(RecentWrites::default());
        let now = std::time::Instant::now();
        for (name, version) in [
            ("ours", "5"),
            ("emptied", "7"),
            ("relisted", "9"),
            ("deleted", "4"),
        ] {
            recent.record(
                Target::new::<ConfigMap>(Some("ns"), name, None),
                1,
                Some(version),
                now,
            );
        }
        let mut keep = cached_noting_own_writes(store.clone(), recent.clone());
        let confirmed = recent.clone();
        let events = vec![
            // As fakegpu's write left it.
            Event::Apply(at("ours", "5")),
            // Then someone removed a field: a version fakegpu did not write.
            Event::Apply(at("emptied", "7")),
            Event::Apply(at("emptied", "8")),
            // Delivered again, unchanged, by the list after the watch was away.
            Event::Apply(at("relisted", "9")),
            Event::Init,
            Event::InitApply(at("relisted", "9")),
            Event::InitApply(at("ours", "5")),
            Event::InitApply(at("emptied", "8")),
            Event::InitDone,
            // Deleted by someone: gone from the cache, it must be written again.
            Event::Apply(at("deleted", "4")),
            Event::Delete(at("deleted", "12")),
            // Never written by fakegpu.
            Event::Apply(at("foreign", "3")),
        ];
        let reflected = stream::iter(events).map(move |event| {
            let event = convert(event, &mut keep);
            writer.apply_watcher_event(&event);
            if let Event::Apply(object) | Event::InitApply(object) = &event {
                confirmed.seen(object);
            }
            event
        });
        // Each object is looked at as soon as the cache took it, as in the operator.
        let passed: Vec<String> = others_changes(shared_touched(store.clone(), reflected), store)
            .map(|o| o.name_any())
            .collect()
            .await;
        assert_eq!(passed, ["emptied", "emptied", "deleted", "foreign"]);
    }
}
