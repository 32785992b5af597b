//! The node reconciler against a fake API server: what it writes for a node joining a pool,
//! that it writes nothing once the caches show its writes, and that a refused write leaves
//! the rest unwritten for the retry.

use std::sync::Arc;

use axum::http::Method;
use fakegpu_model::names::{fakegpu::POOL_LABEL, label};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use serde_json::{Value, json};

use super::{CachedNode, reconcile};
use crate::testing::{
    api_server::{Request, against, calls},
    context::{Cluster, NAMESPACE, context},
    pool,
};

const NODE_STATUS: &str = "/api/v1/nodes/n1/status";

fn configmaps() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/configmaps")
}

/// A KWOK node labelled for pool `p`, with the allocatable KWOK gives it.
fn joining() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "uid": "n1-uid",
            "labels": {label::NODE_POOL: "p", "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"allocatable": {"cpu": "32", "pods": "110"},
            "capacity": {"cpu": "32", "pods": "110"}},
    }))
    .expect("test node")
}

/// Reconciles `node` once with caches showing `cluster`, the server answering `answers`.
async fn reconcile_once(
    node: &Node,
    cluster: Cluster,
    answers: &[u16],
) -> (crate::error::Result<()>, Vec<Request>) {
    let node = Arc::new(CachedNode::new(node.clone()));
    against(answers, |client| async move {
        reconcile(node, context(client, cluster)).await.map(drop)
    })
    .await
}

fn cluster(nodes: Vec<Node>, configmaps: Vec<ConfigMap>) -> Cluster {
    let pool = pool("p", 0, json!({"gpu": {"profile": "t4", "count": 1}}));
    Cluster {
        pools: vec![(*pool).clone()],
        nodes,
        configmaps,
        ..Cluster::default()
    }
}

/// `node` with the status patch `patch` applied as the API server applies it here: its labels
/// and status entries merged, its conditions those of the patch.
fn patched(node: &Node, patch: &Value) -> Node {
    let mut merged = serde_json::to_value(node).expect("node as JSON");
    for (path, key) in [
        ("metadata", "labels"),
        ("status", "capacity"),
        ("status", "allocatable"),
    ] {
        if let Some(entries) = patch[path][key].as_object() {
            let target = merged[path][key].as_object_mut().map(std::mem::take);
            let mut target = target.unwrap_or_default();
            target.extend(entries.clone());
            merged[path][key] = Value::Object(target);
        }
    }
    merged["status"]["conditions"] = patch["status"]["conditions"].clone();
    serde_json::from_value(merged).expect("patched node")
}

#[tokio::test]
async fn a_node_joining_a_pool_is_written_once_and_then_left_alone() {
    let node = joining();
    let (result, seen) =
        reconcile_once(&node, cluster(vec![node.clone()], vec![]), &[200, 201]).await;
    result.expect("reconciled");
    assert_eq!(
        calls(&seen),
        [
            (Method::PATCH, NODE_STATUS.to_owned()),
            (Method::POST, configmaps()),
        ]
    );
    let patch = &seen[0].body;
    assert_eq!(patch["metadata"]["labels"][POOL_LABEL], "p");
    assert_eq!(patch["metadata"]["labels"][label::GPU_PRODUCT], "Tesla-T4");
    assert_eq!(patch["status"]["capacity"]["nvidia.com/gpu"], "1");
    assert_eq!(seen[1].body["metadata"]["name"], "topology-n1");

    // The caches now show both writes: nothing more to write.
    let written = patched(&node, patch);
    let mut document: ConfigMap = serde_json::from_value(seen[1].body.clone()).expect("ConfigMap");
    document.metadata.resource_version = Some("7".into());
    let (result, seen) = reconcile_once(
        &written,
        cluster(vec![written.clone()], vec![document.clone()]),
        &[],
    )
    .await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), [], "a current node written again");

    // A node that lost what fakegpu wrote (its document still current) gets it back, alone.
    let (result, seen) =
        reconcile_once(&node, cluster(vec![node.clone()], vec![document]), &[200]).await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), [(Method::PATCH, NODE_STATUS.to_owned())]);
}

#[tokio::test]
async fn a_refused_node_write_fails_the_reconcile_before_the_document() {
    let node = joining();
    let (result, seen) = reconcile_once(&node, cluster(vec![node.clone()], vec![]), &[500]).await;
    assert!(result.is_err(), "a refused write is the reconcile's error");
    assert_eq!(calls(&seen), [(Method::PATCH, NODE_STATUS.to_owned())]);
}

#[tokio::test]
async fn a_node_of_no_pool_is_not_written() {
    let mut node = joining();
    node.metadata.labels = Some([("type".to_owned(), "kwok".to_owned())].into());
    let (result, seen) = reconcile_once(&node, cluster(vec![node.clone()], vec![]), &[]).await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), []);
}
