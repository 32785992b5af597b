//! The ResourceClaimTemplate of a ComputeDomain, as NVIDIA's controller writes it: one request
//! `channel` of the default-channel class, and the domain's id and allocation mode in an opaque
//! config for the kubelet plugin. Owned by the domain (the garbage collector deletes it with
//! the domain); its claims carry the domain's name, by which the domain finds its nodes.

use std::collections::BTreeMap;

use fakegpu_api::compute_domain::{ComputeDomain, GROUP, VERSION};
use fakegpu_model::names::compute_domain as names;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::{Resource, ResourceExt};
use serde_json::json;

/// The template `domain` wants, or `None` while the domain has no UID (not stored yet).
pub fn desired_template(domain: &ComputeDomain) -> Option<ResourceClaimTemplate> {
    let name = domain.name_any();
    let owner = domain.controller_owner_ref(&())?;
    let uid = domain.uid()?;
    let template = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": domain.spec.channel.resource_claim_template.name,
            "namespace": domain.namespace(),
            "labels": BTreeMap::from([
                (names::TEMPLATE_LABEL, name.as_str()),
                (names::TARGET_LABEL, names::TARGET_WORKLOAD),
            ]),
            "ownerReferences": [owner],
        },
        "spec": {
            "metadata": {"labels": {names::CLAIM_LABEL: name}},
            "spec": {"devices": {
                "requests": [{
                    "name": names::CHANNEL_REQUEST,
                    "exactly": {
                        "deviceClassName": names::DEFAULT_CHANNEL_CLASS,
                        "allocationMode": "ExactCount",
                        "count": 1,
                    },
                }],
                "config": [{"opaque": {
                    "driver": names::DRIVER,
                    "parameters": {
                        "apiVersion": format!("{GROUP}/{VERSION}"),
                        "kind": names::CHANNEL_CONFIG_KIND,
                        "domainID": uid,
                        "allocationMode": domain.spec.channel.allocation_mode.as_str(),
                    },
                }}],
            }},
        },
    });
    serde_json::from_value(template).ok()
}

/// Whether `template` was made for `domain` (its controller owner is the domain).
pub fn owned_by(template: &ResourceClaimTemplate, domain: &ComputeDomain) -> bool {
    let uid = domain.uid();
    template
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

/// Whether the cached template already is the desired one.
pub fn template_current(current: &ResourceClaimTemplate, desired: &ResourceClaimTemplate) -> bool {
    fakegpu_api::meta::metadata_current(current, desired) && current.spec == desired.spec
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn domain(mode: &str) -> ComputeDomain {
        serde_json::from_value(json!({
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": "imex", "namespace": "team", "uid": "cd-uid"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "imex-channel"},
                "allocationMode": mode}},
        }))
        .expect("test domain")
    }

    #[test]
    fn the_template_is_nvidias() {
        let domain = domain("All");
        let template = desired_template(&domain).expect("template");
        assert_eq!(template.name_any(), "imex-channel");
        assert_eq!(template.namespace().as_deref(), Some("team"));
        assert_eq!(
            template.labels().get("resource.nvidia.com/computeDomain"),
            Some(&"imex".to_owned())
        );
        assert!(owned_by(&template, &domain));
        let value = serde_json::to_value(&template.spec).expect("json");
        assert_eq!(
            value["metadata"]["labels"]["nvidia.com/computeDomain"],
            "imex"
        );
        let request = &value["spec"]["devices"]["requests"][0];
        assert_eq!(request["name"], "channel");
        assert_eq!(
            request["exactly"]["deviceClassName"],
            "compute-domain-default-channel.nvidia.com"
        );
        let config = &value["spec"]["devices"]["config"][0]["opaque"];
        assert_eq!(config["driver"], "compute-domain.nvidia.com");
        assert_eq!(config["parameters"]["domainID"], "cd-uid");
        assert_eq!(config["parameters"]["allocationMode"], "All");
        assert_eq!(config["parameters"]["kind"], "ComputeDomainChannelConfig");
        assert!(template_current(&template, &template));
    }
}
