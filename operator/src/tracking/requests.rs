//! What a pod asks for: extended resources (`nvidia.com/gpu`, MIG profiles) and DRA claims.

use std::collections::{BTreeMap, BTreeSet};

use fakegpu_model::names::resource;
use k8s_openapi::api::{
    core::v1::{Container, Pod},
    resource::v1::{DeviceRequestAllocationResult, ResourceClaim},
};

/// A container's limits (else requests) of extended resources.
fn limits(
    container: &Container,
) -> Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>> {
    let resources = container.resources.as_ref();
    resources
        .and_then(|r| r.limits.as_ref())
        .or_else(|| resources.and_then(|r| r.requests.as_ref()))
}

fn limit(container: &Container, name: &str) -> u32 {
    limits(container)
        .and_then(|quantities| quantities.get(name))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

/// Whether a container asks for GPUs or MIG instances as extended resources.
pub(super) fn wants_gpus(container: &Container) -> bool {
    limits(container).is_some_and(|l| {
        l.iter().any(|(name, q)| {
            (name == resource::GPU || name.starts_with(resource::MIG_PREFIX)) && q.0 != "0"
        })
    })
}

/// How much of extended resource `name` a pod asks for: what its containers add up to, or an
/// init container's need if larger (init containers run before the others, as the scheduler
/// counts them).
fn requested(pod: &Pod, name: &str) -> u32 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let running: u32 = spec.containers.iter().map(|c| limit(c, name)).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| limit(c, name))
        .max()
        .unwrap_or(0);
    running.max(init)
}

/// Whole GPUs a pod asks for (`nvidia.com/gpu`).
pub fn extended_gpus(pod: &Pod) -> u32 {
    requested(pod, resource::GPU)
}

/// MIG instances a pod asks for, by profile (`nvidia.com/mig-<profile>`).
pub fn mig_requests(pod: &Pod) -> BTreeMap<String, u32> {
    let spec = pod.spec.as_ref();
    let names: BTreeSet<&String> = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .filter_map(limits)
        .flat_map(|l| l.keys())
        .filter(|name| name.starts_with(resource::MIG_PREFIX))
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let count = requested(pod, name);
            let profile = name.strip_prefix(resource::MIG_PREFIX)?;
            (count > 0).then(|| (profile.to_owned(), count))
        })
        .collect()
}

/// Names of the ResourceClaims a pod uses: generated ones (from its status) and named ones.
pub fn claim_names(pod: &Pod) -> BTreeSet<String> {
    let generated = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| s.resource_claim_name.clone());
    let named = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.resource_claim_name.clone());
    generated.chain(named).collect()
}

/// Device names of `node` that a claim's allocation names.
pub fn claimed_devices(claim: &ResourceClaim, node: &str) -> BTreeSet<String> {
    gpu_results(claim)
        .filter(|r| r.pool == node)
        .map(|r| r.device.clone())
        .collect()
}

/// Nodes whose GPUs a claim's allocation names (a claim event concerns them).
pub fn nodes_of_claim(claim: &ResourceClaim) -> BTreeSet<String> {
    gpu_results(claim).map(|r| r.pool.clone()).collect()
}

/// The allocation results of a claim that are devices of fakegpu's GPU driver.
fn gpu_results(claim: &ResourceClaim) -> impl Iterator<Item = &DeviceRequestAllocationResult> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|devices| devices.results.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.driver == resource::GPU_DRIVER)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tracking::{fixtures::*, *};

    #[test]
    fn counts_whole_gpus_like_the_scheduler() {
        assert_eq!(extended_gpus(&asking("a", "2026-01-01T00:00:00Z", 3)), 3);
        let with_init = pod(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
                "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}),
        );
        assert_eq!(extended_gpus(&with_init), 2);
        let none = pod("c", "2026-01-01T00:00:00Z", json!({}));
        assert_eq!(
            gpu_user(
                &none,
                "n",
                |_| None,
                Defaults::default(),
                1,
                &reservations()
            ),
            None
        );
    }
}
