//! Warning Events, for people reading `kubectl describe` or `kubectl get events`. Failing to
//! record one must not fail a reconcile: it is logged and dropped.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::warn;

use crate::Context;

/// The reporting controller named in the Events.
const REPORTER: &str = "fakegpu-operator";

/// Records a Warning Event with `reason` and `message` about `regarding`.
pub async fn warn_about(ctx: &Context, regarding: &ObjectReference, reason: &str, message: &str) {
    let recorder = Recorder::new(ctx.client.clone(), REPORTER.into());
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_owned(),
        note: Some(message.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, regarding).await {
        warn!(name = ?regarding.name, %error, "could not record Event");
    }
}
