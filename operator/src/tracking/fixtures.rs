//! Pods, claims and GPUs for the tests of [`super`]'s files.

use std::{collections::BTreeMap, sync::Arc};

use fakegpu_model::topology::{GpuStatus, GpuTopology};
use k8s_openapi::api::{core::v1::Pod, resource::v1::ResourceClaim};
use serde_json::json;

use super::*;

pub fn gpus(count: u32) -> Vec<GpuTopology> {
    (0..count)
        .map(|index| GpuTopology {
            id: format!("GPU-{index}"),
            index,
            ..Default::default()
        })
        .collect()
}

pub fn pod(name: &str, created: &str, value: serde_json::Value) -> Pod {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "creationTimestamp": created},
        "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }))
    .expect("test pod");
    let extra: Pod = serde_json::from_value(value).expect("test pod overlay");
    if let Some(spec) = extra.spec {
        pod.spec = Some(spec);
    }
    if extra.metadata.annotations.is_some() {
        pod.metadata.annotations = extra.metadata.annotations;
    }
    if extra.metadata.labels.is_some() {
        pod.metadata.labels = extra.metadata.labels;
    }
    if let Some(status) = extra.status {
        pod.status = Some(status);
    }
    pod
}

pub fn asking(name: &str, created: &str, gpus: u32) -> Pod {
    pod(
        name,
        created,
        json!({"spec": {"nodeName": "n", "containers": [
            {"name": "sidecar"},
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}},
        ]}}),
    )
}

/// Claim `c` of namespace `ns`, allocated `devices` (pool, device) for its request `gpu`.
pub fn claim(devices: &[(&str, &str)]) -> Arc<ResourceClaim> {
    claim_for("gpu", devices)
}

/// Claim `c` of namespace `ns`, allocated `devices` (pool, device) for its request `request`.
pub fn claim_for(request: &str, devices: &[(&str, &str)]) -> Arc<ResourceClaim> {
    let results: Vec<_> = devices
        .iter()
        .map(|(pool, device)| {
            json!({"request": request, "driver": "gpu.nvidia.com", "pool": pool, "device": device})
        })
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results}}},
        }))
        .expect("test claim"),
    )
}

/// Pod `name` on node `n` whose container uses claim `c` under the name `request`.
pub fn claimant(name: &str, created: &str, request: &str) -> Pod {
    pod(
        name,
        created,
        json!({"spec": {"nodeName": "n", "containers": [{"name": "main"}],
            "resourceClaims": [{"name": request, "resourceClaimName": "c"}]}}),
    )
}

pub fn user(pod: &Pod, claims: &[Arc<ResourceClaim>]) -> GpuUser {
    gpu_user(
        pod,
        "n",
        |_| claims.first().cloned(),
        Defaults::default(),
        1000,
        &reservations(),
    )
    .expect("uses GPUs")
}

pub fn reservations() -> ReservationNamespaces {
    ReservationNamespaces::parse("runai-reservation, kai-resource-reservation,")
}

/// A reservation pod of GPU group `group` asking for one GPU.
pub fn reservation(name: &str, created: &str, group: &str) -> Pod {
    let mut pod = asking(name, created, 1);
    pod.metadata.namespace = Some("kai-resource-reservation".into());
    pod.metadata.labels = Some(BTreeMap::from([(
        "runai-gpu-group".to_owned(),
        group.to_owned(),
    )]));
    pod
}

pub fn sharer(name: &str, metadata: serde_json::Value) -> GpuUser {
    user(
        &pod(name, "2026-01-05T00:00:00Z", json!({"metadata": metadata})),
        &[],
    )
}

pub fn holders(gpus: &[GpuTopology]) -> Vec<&str> {
    gpus.iter()
        .map(|g| g.status.allocated_by.pod.as_str())
        .collect()
}

pub fn partitioned() -> Vec<GpuTopology> {
    let mut topology = gpus(2);
    topology[0].mig_devices = [("3g.40gb", 9, 0), ("1g.10gb", 19, 4), ("1g.10gb", 19, 5)]
        .map(|(profile, id, start)| fakegpu_model::topology::MigDevice {
            uuid: format!("MIG-{start}"),
            profile: profile.into(),
            gi_profile_id: id,
            placement_start: start,
            memory: 100,
            ..Default::default()
        })
        .to_vec();
    topology
}

pub fn holder(status: &GpuStatus) -> &str {
    status.allocated_by.pod.as_str()
}
