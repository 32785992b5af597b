//! Warning Events, for people reading `kubectl describe` or `kubectl get events`. Failing to
//! record one must not fail a reconcile: it is logged and dropped.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder},
};
use parking_lot::Mutex;
use tracing::warn;

/// The reporting controller named in the Events.
const REPORTER: &str = "fakegpu-operator";

/// Every Event the operator records goes through this one recorder: kube's recorder folds an
/// Event it already sent into a series (a count on the first Event) instead of a new object,
/// which a recorder per reconcile could not.
pub struct Events {
    recorder: Recorder,
    /// (object UID, reason and value) of problems already reported by [`Events::warn_once`].
    reported: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("reported", &self.reported.lock().len())
            .finish_non_exhaustive()
    }
}

impl Events {
    pub fn new(client: Client) -> Self {
        Self {
            recorder: Recorder::new(client, REPORTER.into()),
            reported: Mutex::default(),
        }
    }

    /// Records a Warning Event with `reason` and `message` about `regarding`.
    pub async fn warn(&self, regarding: &ObjectReference, reason: &str, message: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            note: Some(message.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
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
}
