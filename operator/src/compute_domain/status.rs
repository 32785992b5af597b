//! A ComputeDomain's status: the nodes its channel claims were allocated on (a claim is
//! allocated when its pod is scheduled), and `Ready` once there are `numNodes` of them, as
//! NVIDIA's controller reports it for the simulated driver.

use std::{collections::BTreeSet, sync::Arc};

use fakegpu_api::{
    compute_domain::{ComputeDomain, ComputeDomainNode, ComputeDomainStatus, DomainState},
    meta::is_dns_subdomain,
};
use fakegpu_model::names::compute_domain as names;
use k8s_openapi::{api::resource::v1::ResourceClaim, apimachinery::pkg::apis::meta::v1::Time};
use kube::ResourceExt;

use crate::kit::conditions::{STALLED, condition, stamp};

/// The domain's condition, True once `numNodes` nodes host it.
pub const READY: &str = "Ready";

/// The nodes (allocation pools) of `domain`'s allocated channel claims among `claims`.
fn nodes(domain: &ComputeDomain, claims: &[Arc<ResourceClaim>]) -> BTreeSet<String> {
    let name = domain.name_any();
    let namespace = domain.namespace();
    claims
        .iter()
        .filter(|c| c.namespace() == namespace && c.labels().get(names::CLAIM_LABEL) == Some(&name))
        .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref())
        .flat_map(|devices| devices.results.iter().flatten())
        .filter(|result| result.driver == names::DRIVER)
        .map(|result| result.pool.clone())
        .collect()
}

/// Why a domain cannot have its ResourceClaimTemplate; only the user can change that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateProblem {
    /// The condition's reason and the Event's.
    pub reason: &'static str,
    pub message: String,
}

impl TemplateProblem {
    /// A name no object can have (not a DNS subdomain). NVIDIA's CRD does not check it.
    pub fn of_name(name: &str) -> Option<Self> {
        (!is_dns_subdomain(name)).then(|| Self {
            reason: "InvalidTemplateName",
            message: format!(
                "channel.resourceClaimTemplate.name {name:?} is not a DNS subdomain (lowercase \
                 letters, digits, '-' and '.', alphanumeric at both ends, at most 253 characters)"
            ),
        })
    }

    /// The name is held by a ResourceClaimTemplate that is not this domain's (the user's own).
    pub fn taken(namespace: &str, name: &str) -> Self {
        Self {
            reason: "TemplateConflict",
            message: format!(
                "ResourceClaimTemplate {namespace}/{name} exists and is not this domain's; it is \
                 left as it is: rename channel.resourceClaimTemplate.name or remove that template"
            ),
        }
    }

    /// The API server refused the template.
    pub fn refused(name: &str, answer: &str) -> Self {
        Self {
            reason: "InvalidTemplate",
            message: format!("the API server refused ResourceClaimTemplate {name}: {answer}"),
        }
    }
}

/// `now` stamps a condition that changed; an unchanged one keeps its time, so an unchanged
/// domain yields an unchanged status. A template problem makes the domain not ready and
/// stalled (kstatus, Flux and Argo CD read it as failed).
pub fn desired_status(
    domain: &ComputeDomain,
    claims: &[Arc<ResourceClaim>],
    problem: Option<&TemplateProblem>,
    now: &Time,
) -> ComputeDomainStatus {
    let nodes: Vec<ComputeDomainNode> = nodes(domain, claims)
        .into_iter()
        .zip(0..)
        .map(|(name, index)| ComputeDomainNode {
            name,
            index,
            status: DomainState::Ready,
            ..Default::default()
        })
        .collect();
    let wanted = usize::try_from(domain.spec.num_nodes).unwrap_or(0);
    let (ready, reason, message) = match problem {
        Some(problem) => (false, problem.reason, problem.message.clone()),
        None if nodes.len() >= wanted => (
            true,
            "NodesReady",
            format!("{} of {wanted} nodes host the domain's pods", nodes.len()),
        ),
        None => (
            false,
            "WaitingForNodes",
            format!("{} of {wanted} nodes host the domain's pods", nodes.len()),
        ),
    };
    let stalled = problem.map(|p| condition(STALLED, true, p.reason, p.message.clone()));
    let previous = domain
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = domain.metadata.generation;
    ComputeDomainStatus {
        status: if ready {
            DomainState::Ready
        } else {
            DomainState::NotReady
        },
        nodes,
        conditions: stamp(
            std::iter::once(condition(READY, ready, reason, message)).chain(stalled),
            previous,
            generation,
            now,
        ),
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::compute_domain::template::tests::domain;

    fn claim(name: &str, domain: &str, pool: Option<&str>) -> Arc<ResourceClaim> {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "team", "labels": {"nvidia.com/computeDomain": domain}},
            "spec": {},
        });
        if let Some(pool) = pool {
            value["status"] = json!({"allocation": {"devices": {"results": [
                {"request": "channel", "driver": "compute-domain.nvidia.com", "pool": pool, "device": "channel-0"},
            ]}}});
        }
        Arc::new(serde_json::from_value(value).expect("test claim"))
    }

    #[test]
    fn ready_once_num_nodes_host_its_claims() {
        let domain = domain("Single");
        let one = [claim("a", "imex", Some("node-b")), claim("p", "imex", None)];
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let status = desired_status(&domain, &one, None, &now);
        assert_eq!(status.status, DomainState::NotReady);
        assert_eq!(status.nodes.len(), 1);
        let condition = &status.conditions[0];
        assert_eq!(
            (
                condition.type_.as_str(),
                condition.status.as_str(),
                condition.reason.as_str()
            ),
            ("Ready", "False", "WaitingForNodes")
        );
        let two = [
            claim("a", "imex", Some("node-b")),
            claim("b", "imex", Some("node-a")),
            claim("c", "imex", Some("node-a")),
            claim("x", "other", Some("node-c")),
        ];
        let status = desired_status(&domain, &two, None, &now);
        assert_eq!(status.status, DomainState::Ready);
        assert_eq!(status.conditions[0].status, "True");
        let names: Vec<(&str, i32)> = status
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.index))
            .collect();
        assert_eq!(names, [("node-a", 0), ("node-b", 1)]);
    }

    #[test]
    fn a_template_problem_is_not_ready_and_stalled() {
        let domain = domain("Single");
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let problem = TemplateProblem::taken("team", "imex-channel");
        let status = desired_status(&domain, &[], Some(&problem), &now);
        let conditions: Vec<(&str, &str, &str)> = status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            conditions,
            [
                ("Ready", "False", "TemplateConflict"),
                ("Stalled", "True", "TemplateConflict")
            ]
        );
        assert!(status.conditions[0].message.contains("team/imex-channel"));
    }

    #[test]
    fn template_names_must_be_dns_subdomains() {
        for good in ["imex", "a.b-c", "0x"] {
            assert_eq!(TemplateProblem::of_name(good), None, "{good}");
        }
        let long = "a".repeat(254);
        for bad in ["", "Imex", "imex_channel", "-imex", "imex.", long.as_str()] {
            let problem = TemplateProblem::of_name(bad).map(|p| p.reason);
            assert_eq!(problem, Some("InvalidTemplateName"), "{bad}");
        }
    }
}
