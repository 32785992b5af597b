//! The generic controller machinery, with nothing of GPUs or of the controllers that use it (it
//! could be a crate of its own; `e2e/tests/layers.rs` keeps it from importing the rest of the
//! operator):
//! - [`streams`]: watch streams feeding trimmed caches, filtered by what changed;
//! - [`cache`]: what a cache keeps of an object it is given whole;
//! - [`recent`]: writes sent whose watch events have not arrived yet, and their echoes;
//! - [`owned`]: the one writer: desired against cached, by each kind's write policy;
//! - [`apply`]: the write verbs it and the pods' annotations use (server-side apply, whole
//!   writes, patches, deletes), counted;
//! - [`pacer`], [`retry`]: how often one object is worked on, and backoff after failures;
//! - [`leader`]: leader election over a Lease;
//! - [`served`]: which optional APIs the cluster serves;
//! - [`events`], [`conditions`]: Events folded into series, status conditions;
//! - [`metrics`]: reconcile counts and durations, `/metrics`, `/healthz`, `/readyz`.

pub mod apply;
pub mod cache;
pub mod conditions;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod owned;
pub mod pacer;
pub mod recent;
pub mod retry;
pub mod served;
pub mod streams;
