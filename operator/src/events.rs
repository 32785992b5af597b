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

/// [`warn_about`], once per object, reason and `value` (the annotation value at fault) for the
/// operator's lifetime: reconciles repeat, the Event need not.
pub async fn warn_once(
    ctx: &Context,
    regarding: &ObjectReference,
    reason: &str,
    value: &str,
    message: &str,
) {
    let key = (
        regarding.uid.clone().unwrap_or_default(),
        format!("{reason}/{value}"),
    );
    if ctx.reported_annotations.lock().insert(key) {
        warn!(name = ?regarding.name, kind = ?regarding.kind, reason, note = message, "reporting by Event");
        warn_about(ctx, regarding, reason, message).await;
    }
}
