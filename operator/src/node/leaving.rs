//! A node with a kubelet that leaves its pool while its pods hold DRA claims keeps the deploy
//! labels of those claims' kubelet plugins, and only those, until the claims are released.
//! The kubelet must ask the plugin that prepared a claim to unprepare it before the pod can
//! finish terminating: had the plugin's DaemonSet pod left with the node's other labels, the
//! pods would stay Terminating for good.

use std::{collections::BTreeMap, sync::Arc};

use fakegpu_model::names::{compute_domain, label, resource};
use k8s_openapi::api::resource::v1::ResourceClaim;

/// The deploy label of each DRA driver whose kubelet plugin fakegpu runs on nodes.
const PLUGINS: [(&str, &str); 2] = [
    (resource::GPU_DRIVER, label::DEPLOY_DRA_PLUGIN),
    (compute_domain::DRIVER, label::DEPLOY_COMPUTE_DOMAIN_PLUGIN),
];

/// The DRA drivers whose kubelet plugin fakegpu runs on nodes.
pub const PLUGIN_DRIVERS: [&str; 2] = [PLUGINS[0].0, PLUGINS[1].0];

/// Whether `claim` is reserved for a pod and allocated devices of `driver` on `node`.
fn in_use_on(claim: &ResourceClaim, node: &str, driver: &str) -> bool {
    let Some(status) = claim.status.as_ref() else {
        return false;
    };
    let reserved = status.reserved_for.as_ref().is_some_and(|r| !r.is_empty());
    let results = status
        .allocation
        .as_ref()
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    reserved
        && results
            .into_iter()
            .flatten()
            .any(|r| r.pool == node && r.driver == driver)
}

/// The deploy labels `node` keeps after leaving its pool: those of the plugins that prepared
/// claims its pods still hold.
pub fn lingering_labels(claims: &[Arc<ResourceClaim>], node: &str) -> BTreeMap<String, String> {
    PLUGINS
        .iter()
        .filter(|(driver, _)| claims.iter().any(|c| in_use_on(c, node, driver)))
        .map(|(_, deploy)| ((*deploy).to_owned(), "true".to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim(driver: &str, pool: &str, reserved: bool) -> Arc<ResourceClaim> {
        let reserved_for = if reserved {
            json!([{"resource": "pods", "name": "p", "uid": "u"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": {},
                "status": {
                    "allocation": {"devices": {"results": [
                        {"request": "r", "driver": driver, "pool": pool, "device": "d"}]}},
                    "reservedFor": reserved_for,
                },
            }))
            .expect("test claim"),
        )
    }

    #[test]
    fn only_plugins_with_claims_held_on_the_node_stay() {
        let claims = [
            claim("gpu.nvidia.com", "n1", true),
            claim("compute-domain.nvidia.com", "n2", true),
            claim("compute-domain.nvidia.com", "n1", false),
            claim("example.com", "n1", true),
        ];
        assert_eq!(
            lingering_labels(&claims, "n1"),
            BTreeMap::from([(
                "nvidia.com/gpu.deploy.dra-plugin-gpu".to_owned(),
                "true".to_owned()
            )])
        );
        assert_eq!(
            lingering_labels(&claims, "n2").keys().collect::<Vec<_>>(),
            ["nvidia.com/gpu.deploy.compute-domain-dra-plugin"]
        );
        assert!(lingering_labels(&claims, "n3").is_empty());
        let unallocated: Arc<ResourceClaim> = Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {}}))
                .expect("test claim"),
        );
        assert!(lingering_labels(&[unallocated], "n1").is_empty());
    }
}
