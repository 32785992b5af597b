//! Warning Events, for people reading `kubectl describe` or `kubectl get events`. Failing to
//! record one must not fail a reconcile: it is logged and dropped.
//!
//! An Event repeated within [`SERIES_WINDOW`] becomes a series (a count and a last-seen time on
//! the first Event), as kube's and client-go's recorders do. Unlike kube's recorder, an Event
//! repeats another only if its note is the same too: kube's folds every Event of one reason
//! into the first, so after `fakegpu.dev/unhealthy-gpus` went from `abc` to `nine,7`,
//! `kubectl describe node` still said `abc` (x6), a problem that was gone.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use parking_lot::Mutex;
use serde_json::json;
use tracing::warn;

/// The reporting controller named in the Events.
const REPORTER: &str = "fakegpu-operator";

/// How long after its last occurrence an Event is continued as a series rather than recorded
/// anew: kube's and client-go's six minutes.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What makes two Events the same occurrence again: the object (`kind/namespace/name/uid`),
/// the reason and the note.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regarding: String,
    reason: String,
    note: String,
}

/// An Event recorded: its name and namespace, how often it occurred, when last.
#[derive(Clone, Debug)]
struct Recorded {
    name: String,
    namespace: String,
    count: i32,
    last: Instant,
}

/// Every Event the operator records goes through this one value: it continues an Event it
/// already sent as a series instead of creating another object, which a recorder per reconcile
/// could not.
pub struct Events {
    client: Client,
    recorded: Mutex<HashMap<Key, Recorded>>,
    /// (object UID, reason and value) of problems already reported by [`Events::warn_once`].
    reported: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("recorded", &self.recorded.lock().len())
            .field("reported", &self.reported.lock().len())
            .finish_non_exhaustive()
    }
}

impl Events {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            recorded: Mutex::default(),
            reported: Mutex::default(),
        }
    }

    /// Records a Warning Event with `reason` and `message` about `regarding`.
    pub async fn warn(&self, regarding: &ObjectReference, reason: &str, message: &str) {
        let note: String = message.chars().take(1000).collect();
        if let Err(error) = self.publish(regarding, reason, note).await {
            warn!(name = ?regarding.name, %error, "could not record Event");
        }
    }

    /// [`Events::warn`], once per object, reason and `value` (the value at fault, e.g. an
    /// annotation's) for the operator's lifetime: reconciles repeat, the Event need not.
    pub async fn warn_once(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        value: &str,
        message: &str,
    ) {
        let key = (
            regarding.uid.clone().unwrap_or_default(),
            format!("{reason}/{value}"),
        );
        if self.reported.lock().insert(key) {
            warn!(name = ?regarding.name, kind = ?regarding.kind, reason, note = message, "reporting by Event");
            self.warn(regarding, reason, message).await;
        }
    }

    /// Creates the Event, or counts one more occurrence of the same Event recorded within
    /// [`SERIES_WINDOW`] (created anew if that one is gone: Events expire).
    async fn publish(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        note: String,
    ) -> kube::Result<()> {
        let part = |field: &Option<String>| field.clone().unwrap_or_default();
        let key = Key {
            regarding: [
                &regarding.kind,
                &regarding.namespace,
                &regarding.name,
                &regarding.uid,
            ]
            .map(part)
            .join("/"),
            reason: reason.to_owned(),
            note,
        };
        let now = Instant::now();
        let earlier = {
            let mut recorded = self.recorded.lock();
            recorded.retain(|_, event| now.duration_since(event.last) < SERIES_WINDOW);
            recorded.get(&key).cloned()
        };
        let recorded = match earlier {
            Some(earlier) => match self.count_again(&earlier).await {
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.create(regarding, &key).await?
                }
                counted => Recorded {
                    count: counted?,
                    last: now,
                    ..earlier
                },
            },
            None => self.create(regarding, &key).await?,
        };
        self.recorded.lock().insert(key, recorded);
        Ok(())
    }

    async fn create(&self, regarding: &ObjectReference, key: &Key) -> kube::Result<Recorded> {
        let time = Timestamp::now();
        // Events of cluster-scoped objects go to `default`, as kubectl describe looks for them.
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(REPORTER),
            time.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(time)),
            type_: Some("Warning".into()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            action: Some("Reconcile".into()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(REPORTER.into()),
            reporting_instance: Some(REPORTER.into()),
            ..Default::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await?;
        Ok(Recorded {
            name,
            namespace,
            count: 1,
            last: Instant::now(),
        })
    }

    /// Counts one more occurrence on the recorded Event; the new count.
    async fn count_again(&self, earlier: &Recorded) -> kube::Result<i32> {
        let count = earlier.count + 1;
        let series = json!({"series": {
            "count": count,
            "lastObservedTime": MicroTime(Timestamp::now()),
        }});
        Api::<Event>::namespaced(self.client.clone(), &earlier.namespace)
            .patch(
                &earlier.name,
                &PatchParams::default(),
                &Patch::Merge(series),
            )
            .await?;
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;
    use crate::testing::api_server::against;

    fn node(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some("n1".into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_event_repeats_as_a_series_and_a_new_note_is_a_new_event() {
        let ((), sent) = against(&[201, 200, 201, 200, 201, 404, 201], |client| async move {
            let events = Events::new(client);
            let (u1, u2) = (node("u1"), node("u2"));
            let reason = "InvalidUnhealthyGpus";
            events.warn(&u1, reason, "abc").await;
            events.warn(&u1, reason, "abc").await;
            events.warn(&u1, reason, "nine, 7").await;
            events.warn(&u1, reason, "abc").await;
            // The node deleted and created again under its name: another object.
            events.warn(&u2, reason, "abc").await;
            // The Event went (someone deleted it): recorded anew.
            events.warn(&u2, reason, "abc").await;
        })
        .await;
        let collection = "/apis/events.k8s.io/v1/namespaces/default/events";
        let first = sent[0].body["metadata"]["name"].as_str().expect("name");
        assert!(first.starts_with("n1."), "{first}");
        let fifth = sent[4].body["metadata"]["name"].as_str().expect("name");
        let summary: Vec<(Method, String)> = sent
            .iter()
            .map(|request| (request.method.clone(), request.path.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                (Method::POST, collection.to_owned()),
                (Method::PATCH, format!("{collection}/{first}")),
                (Method::POST, collection.to_owned()),
                (Method::PATCH, format!("{collection}/{first}")),
                (Method::POST, collection.to_owned()),
                (Method::PATCH, format!("{collection}/{fifth}")),
                (Method::POST, collection.to_owned()),
            ]
        );
        let created = &sent[0].body;
        assert_eq!(created["type"], "Warning");
        assert_eq!(created["reason"], "InvalidUnhealthyGpus");
        assert_eq!(created["note"], "abc");
        assert_eq!(created["regarding"]["kind"], "Node");
        assert_eq!(created["reportingController"], REPORTER);
        assert!(created["eventTime"].is_string());
        assert_eq!(sent[1].body["series"]["count"], 2);
        assert_eq!(sent[2].body["note"], "nine, 7");
        assert_eq!(sent[3].body["series"]["count"], 3);
        assert_eq!(sent[4].body["regarding"]["uid"], "u2");
        assert_eq!(sent[6].body["note"], "abc");
    }
}
