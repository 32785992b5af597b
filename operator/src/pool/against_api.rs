//! The pool reconciler against a fake API server: a new pool gets its finalizer, then its
//! status; a pool whose status is current is not written; a refused status write is the
//! reconcile's error.

use std::sync::Arc;

use axum::http::Method;
use fakegpu_api::GpuNodePool;
use fakegpu_model::names::fakegpu::POOL_FINALIZER;
use serde_json::json;

use super::reconcile;
use crate::testing::{
    api_server::{Request, against_answering, calls},
    context::{Cluster, context},
    pool,
};

const POOL: &str = "/apis/fakegpu.dev/v1alpha1/gpunodepools/p";

/// Pool `p` (one T4 a node), with the finalizer when `finalized`.
fn gpu_pool(finalized: bool) -> GpuNodePool {
    let mut pool = (*pool("p", 0, json!({"gpu": {"profile": "t4", "count": 1}}))).clone();
    pool.metadata.uid = Some("p-uid".into());
    if finalized {
        pool.metadata.finalizers = Some(vec![POOL_FINALIZER.to_owned()]);
    }
    pool
}

/// Reconciles `pool` once, the server answering `answers` in turn: a code, and the pool it
/// answers with (the fake server cannot apply a JSON patch, nor give a patched status its
/// spec).
async fn reconcile_once(
    pool: &GpuNodePool,
    answers: &[(u16, Option<&GpuNodePool>)],
) -> (crate::error::Result<()>, Vec<Request>) {
    let cluster = Cluster {
        pools: vec![pool.clone()],
        ..Cluster::default()
    };
    let answers: Vec<_> = answers
        .iter()
        .map(|(code, body)| (*code, body.map(|b| serde_json::to_value(b).expect("pool"))))
        .collect();
    let pool = Arc::new(pool.clone());
    against_answering(&answers, |client| async move {
        reconcile(pool, context(client, cluster)).await.map(drop)
    })
    .await
}

#[tokio::test]
async fn a_new_pool_gets_its_finalizer_then_its_status_then_nothing() {
    let (result, seen) = reconcile_once(&gpu_pool(false), &[(200, Some(&gpu_pool(true)))]).await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), [(Method::PATCH, POOL.to_owned())]);
    assert!(
        seen[0].body.to_string().contains(POOL_FINALIZER),
        "{}",
        seen[0].body
    );

    let mut pool = gpu_pool(true);
    let (result, seen) = reconcile_once(&pool, &[(200, Some(&pool))]).await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), [(Method::PATCH, format!("{POOL}/status"))]);
    let status = &seen[0].body["status"];
    assert_eq!(status["observedGeneration"], 3);
    let ready = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .expect("a Ready condition");
    assert_eq!(ready["status"], "True", "{ready}");

    // The cache shows the status written: nothing to write.
    pool.status = Some(serde_json::from_value(status.clone()).expect("status"));
    let (result, seen) = reconcile_once(&pool, &[]).await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), [], "a current status written again");
}

#[tokio::test]
async fn a_refused_status_write_is_the_reconcile_s_error() {
    let (result, seen) = reconcile_once(&gpu_pool(true), &[(500, None)]).await;
    assert!(result.is_err(), "a refused write is the reconcile's error");
    assert_eq!(calls(&seen), [(Method::PATCH, format!("{POOL}/status"))]);
}

#[tokio::test]
async fn a_pool_deleted_meanwhile_needs_no_finalizer() {
    // The finalizer's JSON patch answered 422 (the pool is being deleted): the deletion's own
    // event brings the next reconcile.
    let (result, seen) = reconcile_once(&gpu_pool(false), &[(422, None)]).await;
    result.expect("not an error");
    assert_eq!(calls(&seen), [(Method::PATCH, POOL.to_owned())]);
}
