//! Fixtures for the unit tests of the pure modules.

use std::sync::Arc;

use fakegpu_api::GpuNodePool;
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use serde_json::{Value, json};

use crate::{kit::cache::Cached, node::CachedNode};

pub mod api_server;
pub mod context;

pub fn time(second: i64) -> Time {
    Time(Timestamp::from_second(second).expect("valid test time"))
}

/// A pool at generation 3, created at `created` seconds after the epoch.
pub fn pool(name: &str, created: i64, spec: Value) -> Arc<GpuNodePool> {
    let mut pool: GpuNodePool = serde_json::from_value(json!({
        "apiVersion": "fakegpu.dev/v1alpha1", "kind": "GpuNodePool",
        "metadata": {"name": name, "generation": 3}, "spec": spec,
    }))
    .expect("valid test pool");
    pool.metadata.creation_timestamp = Some(time(created));
    Arc::new(pool)
}

/// A KWOK-managed node with these labels.
pub fn kwok_node(name: &str, labels: Value) -> Arc<CachedNode> {
    Arc::new(Cached::new(
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"}}}))
        .expect("valid test node"),
    ))
}
