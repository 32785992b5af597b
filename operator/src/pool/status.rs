//! A pool's status as the caches show it. Pure: the controller compares the result with the
//! stored status and writes only a difference.

use std::collections::BTreeMap;

use fakegpu_api::{
    GpuNodePool, GpuNodePoolStatus,
    pool::{Backend, PoolNodeStatus, ServingNodes, resolve::resolve_pool},
};
use fakegpu_model::names::nvml::DRIVER_ROOT;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::members::{Member, Members};
use crate::{
    kit::conditions::{STALLED, condition, stamp},
    membership,
    node::interfaces,
};

/// Condition types.
pub const READY: &str = "Ready";
pub const CONFLICT: &str = "Conflict";
/// True while nodes of the pool run pods their GPUs cannot serve as asked.
pub const OVERBOOKED: &str = "Overbooked";
/// Ready's reason while nodes are still being given the pool's GPUs.
const PROGRESSING: &str = "Progressing";
/// On pools that serve DRA: whether fakegpu manages the DeviceClasses their claims use.
pub const DEVICE_CLASS: &str = "DeviceClass";

/// At most this many nodes are listed in `status.nodes`.
pub const MAX_LISTED_NODES: usize = 100;

/// How many contested nodes a Conflict message names.
const NAMED_CONFLICTS: usize = 3;

/// What the node controller found wrong with nodes, by node name, for their pools' statuses.
#[derive(Clone, Debug, Default)]
pub struct NodeProblems {
    /// The last write error of each node whose reconcile fails.
    pub failures: BTreeMap<String, String>,
    /// Pods a node's GPUs cannot serve as asked (device-plugin pods and DRA claims drawing on
    /// the same GPUs): the first of them, and how many.
    pub overbooked: BTreeMap<String, String>,
}

/// `what: ` and the first [`NAMED_CONFLICTS`] of `names`, with how many more there are: a
/// condition message stays short on a pool of thousands of nodes.
fn naming(what: String, names: &[String]) -> String {
    let more = names.len().saturating_sub(NAMED_CONFLICTS);
    let mut message = format!(
        "{what}: {}",
        names[..names.len().min(NAMED_CONFLICTS)].join(", ")
    );
    if more > 0 {
        message.push_str(&format!(" and {more} more"));
    }
    message
}

/// Whether the status says Ready=True.
pub fn is_ready(status: &GpuNodePoolStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "True")
}

/// Whether the status says the pool is on its way to Ready (nodes still joining or leaving).
pub fn is_progressing(status: &GpuNodePoolStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "False" && c.reason == PROGRESSING)
}

/// Whether `desired` tells no more than new counts: how far a progressing pool has come, how
/// many GPUs pods hold. The same generation, every condition with the same status and reason,
/// only messages and counts moved. Such a write can wait; any other (Ready, a problem, a new
/// generation) cannot.
pub fn only_counts(current: Option<&GpuNodePoolStatus>, desired: &GpuNodePoolStatus) -> bool {
    let Some(current) = current else {
        return false;
    };
    let before = conditions_by_type(Some(current));
    current.observed_generation == desired.observed_generation
        && current.conditions.len() == desired.conditions.len()
        && desired.conditions.iter().all(|c| {
            before
                .get(&c.type_)
                .is_some_and(|old| old.status == c.status && old.reason == c.reason)
        })
}

/// Whether a condition reports a problem (worth a Warning Event when it appears).
pub fn is_problem(condition: &Condition) -> bool {
    match condition.type_.as_str() {
        READY => condition.status == "False" && condition.reason != PROGRESSING,
        CONFLICT | OVERBOOKED => condition.status == "True",
        DEVICE_CLASS => condition.status == "False",
        _ => false,
    }
}

/// The status `pool` should have, with `members` its nodes (see [`super::members`]).
/// `foreign_classes` are DeviceClasses of fakegpu's names that someone else owns; `problems`
/// what the node controller found wrong with nodes (overbooked GPUs; write errors are in
/// `members`); `allocated` tells how many GPUs of a node pods hold. `now` stamps conditions
/// whose status or reason changed; unchanged conditions keep their previous transition time,
/// so an unchanged pool yields an unchanged status.
pub fn desired_status(
    pool: &GpuNodePool,
    members: &Members,
    foreign_classes: &[String],
    problems: &NodeProblems,
    allocated: impl Fn(&str) -> u32,
    now: &Time,
) -> GpuNodePoolStatus {
    let generation = pool.metadata.generation;
    let resolved = resolve_pool(&pool.spec);
    let gpus_per_node = resolved.as_ref().map(|g| g.count).unwrap_or_default();
    let Members {
        labelled,
        wanted,
        contested,
        failing,
    } = members;
    let wanted = *wanted;
    let in_place = labelled.len() == wanted;

    let mock = pool.spec.gpu.backend == Backend::Mock;
    let without_kubelet = labelled.iter().filter(|n| n.kwok).count();
    let ready = match (&resolved, membership::selector(pool)) {
        (Err(error), _) => condition(READY, false, error.reason(), error.to_string()),
        (_, Err(error)) => condition(
            READY,
            false,
            "InvalidSelector",
            format!("spec.nodeSelector.{error}"),
        ),
        (Ok(_), Ok(_)) if !failing.is_empty() => condition(
            READY,
            false,
            "NodeUpdateFailed",
            format!(
                "{} of {wanted} nodes could not be updated; {}: {}",
                failing.len(),
                failing[0].0,
                failing[0].1
            ),
        ),
        (Ok(_), Ok(_)) if !in_place => condition(
            READY,
            false,
            PROGRESSING,
            format!("{} of {wanted} nodes carry the pool's GPUs", labelled.len()),
        ),
        // A mock pool's GPUs are advertised by NVIDIA's components, which run on a kubelet.
        (Ok(_), Ok(_)) if mock && !labelled.is_empty() && without_kubelet == labelled.len() => {
            condition(
                READY,
                false,
                "NoKubelet",
                format!(
                    "backend mock: none of the {} nodes runs a kubelet, so nothing advertises \
                     their GPUs (NVIDIA's device plugin, GPU feature discovery or DRA driver runs \
                     on the node); they carry labels only. KWOK nodes take backend fake",
                    labelled.len()
                ),
            )
        }
        (Ok(gpu), Ok(_)) => {
            let mut message = format!(
                "{} nodes with {} {} each",
                labelled.len(),
                gpu.count,
                gpu.product
            );
            if mock && without_kubelet > 0 {
                message.push_str(&format!(
                    "; {without_kubelet} of them run no kubelet and carry labels only (backend mock)"
                ));
            }
            if let Some(asking) = asking_for_more(pool, labelled) {
                message.push_str(&format!("; {asking}"));
            }
            condition(READY, true, "Reconciled", message)
        }
    };
    let conflict = if contested.is_empty() {
        condition(
            CONFLICT,
            false,
            "NoConflict",
            "no node is selected by another pool".into(),
        )
    } else {
        let message = naming(
            format!("{} nodes selected by several pools", contested.len()),
            contested,
        );
        condition(CONFLICT, true, "NodeSelectedByOtherPools", message)
    };

    let overbooked: Vec<String> = labelled
        .iter()
        .filter_map(|node| {
            let problem = problems.overbooked.get(&node.name)?;
            Some(format!("{} ({problem})", node.name))
        })
        .collect();
    let overbooked = if overbooked.is_empty() {
        condition(
            OVERBOOKED,
            false,
            "Fits",
            "every pod on the pool's nodes has the GPUs it asked for".into(),
        )
    } else {
        let message = naming(
            format!(
                "{} nodes run pods their GPUs cannot serve as asked",
                overbooked.len()
            ),
            &overbooked,
        );
        condition(OVERBOOKED, true, "GpusOverbooked", message)
    };

    let device_class = pool.spec.interfaces.dra.then(|| {
        if foreign_classes.is_empty() {
            condition(DEVICE_CLASS, true, "Managed", "fakegpu manages the DeviceClasses of its DRA devices".into())
        } else {
            condition(
                DEVICE_CLASS,
                false,
                "OwnedElsewhere",
                format!(
                    "DeviceClass {} exists and is not managed by fakegpu (NVIDIA's DRA driver?); it is left as it is",
                    foreign_classes.join(", ")
                ),
            )
        }
    });

    // Not ready and not getting there without the user: kstatus reads Failed, not InProgress.
    let stalled = if ready.status == "False" && ready.reason != PROGRESSING {
        condition(STALLED, true, &ready.reason, ready.message.clone())
    } else {
        condition(
            STALLED,
            false,
            &ready.reason,
            "the pool is reconciled or on its way".into(),
        )
    };

    let previous = pool
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = stamp(
        [
            Some(ready),
            Some(stalled),
            Some(conflict),
            Some(overbooked),
            device_class,
        ]
        .into_iter()
        .flatten(),
        previous,
        generation,
        now,
    );

    let node_count = u32::try_from(labelled.len()).unwrap_or(u32::MAX);
    let allocated: Vec<u32> = labelled.iter().map(|n| allocated(&n.name)).collect();
    GpuNodePoolStatus {
        observed_generation: generation,
        conditions,
        product: resolved.as_ref().ok().map(|g| g.product.clone()),
        node_count,
        gpu_count: node_count.saturating_mul(gpus_per_node),
        allocated_gpus: allocated.iter().sum(),
        driver_root: (pool.spec.gpu.backend == Backend::Mock).then(|| DRIVER_ROOT.to_owned()),
        serving_nodes: Some(serving_nodes(pool, labelled)),
        nodes: labelled
            .iter()
            .zip(&allocated)
            .take(MAX_LISTED_NODES)
            .map(|(n, allocated)| PoolNodeStatus {
                name: n.name.clone(),
                gpus: gpus_per_node,
                allocated_gpus: *allocated,
                kwok: n.kwok,
            })
            .collect(),
    }
}

/// How many of `labelled` serve each interface of `pool`.
fn serving_nodes(pool: &GpuNodePool, labelled: &[Member]) -> ServingNodes {
    let mut counts = ServingNodes::default();
    for member in labelled {
        let served = interfaces::served(pool, member.kwok, &member.choices);
        counts.device_plugin += u32::from(served.device_plugin);
        counts.dra += u32::from(served.dra);
        counts.compute_domains += u32::from(served.compute_domains);
    }
    counts
}

/// The nodes whose deploy labels ask for an interface `pool` does not serve, for the Ready
/// message: a label alone never turns one on, and a user who set it should hear so.
fn asking_for_more(pool: &GpuNodePool, labelled: &[Member]) -> Option<String> {
    let asking: Vec<String> = labelled
        .iter()
        .filter_map(|member| {
            let keys = interfaces::unserved_requests(pool, &member.choices);
            (!keys.is_empty()).then(|| format!("{} ({}=true)", member.name, keys.join("=true, ")))
        })
        .collect();
    (!asking.is_empty()).then(|| {
        naming(
            format!(
                "{} nodes are labelled for an interface the pool does not serve (spec.interfaces \
                 decides what a label may turn on)",
                asking.len()
            ),
            &asking,
        )
    })
}

/// Conditions by type, for comparing an old status with a new one.
pub fn conditions_by_type(status: Option<&GpuNodePoolStatus>) -> BTreeMap<String, Condition> {
    status
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| (c.type_.clone(), c.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::sync::Arc;

    use kube::ResourceExt;

    use super::*;
    use crate::{
        node::CachedNode,
        pool::members::MembersIndex,
        testing::{kwok_node as node, pool, time},
    };

    /// The status from scratch: members computed from the nodes, then the status.
    fn status_of(
        pool: &GpuNodePool,
        pools: &[Arc<GpuNodePool>],
        nodes: &[Arc<CachedNode>],
        foreign_classes: &[String],
        problems: &NodeProblems,
        allocated: impl Fn(&str) -> u32,
        now: &Time,
    ) -> GpuNodePoolStatus {
        let members =
            MembersIndex::default().get(&pool.name_any(), pools, &problems.failures, nodes);
        desired_status(pool, &members, foreign_classes, problems, allocated, now)
    }

    fn none(_: &str) -> u32 {
        0
    }

    /// The status of `pool`, the only pool, over `nodes`, with no problems and no GPU held.
    fn status_alone(pool: &Arc<GpuNodePool>, nodes: &[Arc<CachedNode>]) -> GpuNodePoolStatus {
        status_of(
            pool,
            std::slice::from_ref(pool),
            nodes,
            &[],
            &NodeProblems::default(),
            none,
            &time(100),
        )
    }

    fn find<'a>(status: &'a GpuNodePoolStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .expect("condition present")
    }

    #[test]
    fn ready_when_every_selected_node_carries_the_labels() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let nodes = [
            node(
                "n1",
                json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"}),
            ),
            node(
                "n2",
                json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"}),
            ),
            node("other", json!({})),
        ];
        let two_on_n2 = |node: &str| if node == "n2" { 2 } else { 0 };
        let status = status_of(
            &a,
            std::slice::from_ref(&a),
            &nodes,
            &[],
            &NodeProblems::default(),
            two_on_n2,
            &time(100),
        );
        assert_eq!((status.node_count, status.gpu_count), (2, 8));
        assert_eq!(status.allocated_gpus, 2);
        assert_eq!(status.nodes[1].allocated_gpus, 2);
        assert_eq!(status.product.as_deref(), Some("Tesla T4"));
        assert_eq!(status.observed_generation, Some(3));
        let ready = find(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Reconciled")
        );
        assert_eq!(
            status
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
            ["n1", "n2"]
        );
        assert!(status.nodes.iter().all(|n| n.kwok && n.gpus == 4));
        assert_eq!(find(&status, CONFLICT).status, "False");
    }

    #[test]
    fn the_status_counts_the_nodes_serving_each_interface() {
        let both = pool(
            "a",
            1,
            json!({"gpu": {"profile": "t4"}, "interfaces": {"devicePlugin": true, "dra": true}}),
        );
        let member = |name: &str, deploy: serde_json::Value| {
            let mut labels =
                json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"});
            labels
                .as_object_mut()
                .expect("labels")
                .extend(deploy.as_object().expect("deploy labels").clone());
            node(name, labels)
        };
        let nodes = [
            member("plain", json!({})),
            member(
                "dra",
                json!({"nvidia.com/gpu.deploy.dra-plugin-gpu": "true"}),
            ),
            member(
                "plugin",
                json!({"nvidia.com/gpu.deploy.device-plugin": "true"}),
            ),
            member(
                "off",
                json!({"nvidia.com/gpu.deploy.device-plugin": "false",
                    "nvidia.com/gpu.deploy.compute-domain-dra-plugin": "true"}),
            ),
        ];
        let status = status_alone(&both, &nodes);
        assert_eq!(
            status.serving_nodes,
            Some(ServingNodes {
                device_plugin: 2,
                dra: 3,
                compute_domains: 0
            })
        );
        let ready = find(&status, READY);
        assert_eq!(ready.status, "True");
        assert!(
            ready.message.ends_with(
                "; 1 nodes are labelled for an interface the pool does not serve \
                 (spec.interfaces decides what a label may turn on): off \
                 (nvidia.com/gpu.deploy.compute-domain-dra-plugin=true)"
            ),
            "{}",
            ready.message
        );
    }

    #[test]
    fn progressing_until_nodes_are_labelled() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let nodes = [node("n1", json!({"run.ai/simulated-gpu-node-pool": "a"}))];
        let status = status_alone(&a, &nodes);
        let ready = find(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Progressing")
        );
        assert_eq!(ready.message, "0 of 1 nodes carry the pool's GPUs");
    }

    #[test]
    fn only_counts_moving_can_wait() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let member = |name: &str, labelled: bool| {
            let mut labels = json!({"run.ai/simulated-gpu-node-pool": "a"});
            if labelled {
                labels["fakegpu.dev/pool"] = json!("a");
            }
            node(name, labels)
        };
        let alone = [Arc::clone(&a)];
        let status = |pools: &[Arc<GpuNodePool>], nodes: &[Arc<CachedNode>]| {
            status_of(
                &a,
                pools,
                nodes,
                &[],
                &NodeProblems::default(),
                none,
                &time(100),
            )
        };
        let one = status(
            &alone,
            &[member("n1", true), member("n2", false), member("n3", false)],
        );
        assert!(is_progressing(&one));
        assert!(
            !only_counts(None, &one),
            "a first status is written at once"
        );
        let two = status(
            &alone,
            &[member("n1", true), member("n2", true), member("n3", false)],
        );
        assert_ne!(one, two);
        assert!(only_counts(Some(&one), &two));
        let all = status(
            &alone,
            &[member("n1", true), member("n2", true), member("n3", true)],
        );
        assert!(!is_progressing(&all));
        assert!(!only_counts(Some(&two), &all), "Ready is written at once");
        // A younger pool selecting the same nodes: a conflict appears while the pool still
        // progresses.
        let other = pool(
            "b",
            200,
            json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"run.ai/simulated-gpu-node-pool": "a"}}}),
        );
        let contested = status(
            &[Arc::clone(&a), other],
            &[member("n1", true), member("n2", true), member("n3", false)],
        );
        assert!(is_progressing(&contested));
        assert!(
            !only_counts(Some(&one), &contested),
            "a new conflict is written at once"
        );
        // Pods taking GPUs on a ready pool: counts again.
        let busy = status_of(
            &a,
            &alone,
            &[member("n1", true), member("n2", true), member("n3", true)],
            &[],
            &NodeProblems::default(),
            |_: &str| 1,
            &time(100),
        );
        assert_eq!(busy.allocated_gpus, 3);
        assert!(is_ready(&busy));
        assert!(only_counts(Some(&all), &busy));
    }

    #[test]
    fn mock_pools_name_their_driver_root() {
        let status_of = |spec| {
            let p = pool("a", 1, spec);
            status_of(
                &p,
                std::slice::from_ref(&p),
                &[],
                &[],
                &NodeProblems::default(),
                none,
                &time(100),
            )
        };
        let mock = status_of(json!({"gpu": {"profile": "h100", "backend": "mock"}}));
        assert_eq!(mock.driver_root.as_deref(), Some("/var/lib/fakegpu/driver"));
        let fake = status_of(json!({"gpu": {"profile": "h100"}}));
        assert_eq!(fake.driver_root, None);
    }

    #[test]
    fn a_mock_pool_says_which_nodes_serve_nothing() {
        let a = pool(
            "a",
            1,
            json!({"gpu": {"profile": "h100", "backend": "mock"}}),
        );
        let member = |name: &str| {
            node(
                name,
                json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"}),
            )
        };
        // No KWOK annotation: a node with a kubelet.
        let kubelet_node: CachedNode = crate::kit::cache::Cached::new(
            serde_json::from_value(json!({"metadata": {"name": "real", "labels":
                {"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"}}}))
            .expect("test node"),
        );
        let ready_of = |nodes: &[Arc<CachedNode>]| {
            let status = status_of(
                &a,
                std::slice::from_ref(&a),
                nodes,
                &[],
                &NodeProblems::default(),
                none,
                &time(100),
            );
            let ready = find(&status, READY).clone();
            let stalled = find(&status, STALLED).status.clone();
            (ready.status, ready.reason, ready.message, stalled)
        };
        let (status, reason, message, stalled) = ready_of(&[member("k1"), member("k2")]);
        assert_eq!(
            (status.as_str(), reason.as_str(), stalled.as_str()),
            ("False", "NoKubelet", "True")
        );
        assert!(
            message.contains("none of the 2 nodes runs a kubelet"),
            "{message}"
        );
        let (status, _, message, _) = ready_of(&[member("k1"), Arc::new(kubelet_node)]);
        assert_eq!(status, "True");
        assert!(
            message.ends_with("; 1 of them run no kubelet and carry labels only (backend mock)"),
            "{message}"
        );
    }

    #[test]
    fn unknown_profile_is_a_condition() {
        let a = pool("a", 1, json!({"gpu": {"profile": "future-gpu"}}));
        let status = status_of(
            &a,
            std::slice::from_ref(&a),
            &[],
            &[],
            &NodeProblems::default(),
            none,
            &time(100),
        );
        let ready = find(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "UnknownProfile")
        );
        assert!(ready.message.contains("future-gpu"));
        assert_eq!(status.product, None);
    }

    #[test]
    fn a_selector_the_api_server_would_refuse_is_a_condition_naming_the_field() {
        // The node carries the selector's label, malformed key and all: it is still not
        // selected, as no API server selects with such a selector.
        let selector = json!({"matchLabels": {"bad key!": "x"}});
        let a = pool(
            "a",
            1,
            json!({"gpu": {"profile": "t4"}, "nodeSelector": selector}),
        );
        let nodes = [node("n1", json!({"bad key!": "x"}))];
        let status = status_alone(&a, &nodes);
        let ready = find(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSelector")
        );
        assert!(
            ready.message.starts_with(
                r#"spec.nodeSelector.matchLabels["bad key!"]: "bad key!" is no label key"#
            ),
            "{}",
            ready.message
        );
        assert!(status.nodes.is_empty());
    }

    #[test]
    fn both_pools_of_a_contested_node_report_the_conflict() {
        let spec =
            json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"gpu": "yes"}}});
        let (old, young) = (pool("old", 1, spec.clone()), pool("young", 2, spec));
        let pools = [old.clone(), young.clone()];
        let nodes = [node("n1", json!({"gpu": "yes", "fakegpu.dev/pool": "old"}))];
        for pool in [&old, &young] {
            let status = status_of(
                pool,
                &pools,
                &nodes,
                &[],
                &NodeProblems::default(),
                none,
                &time(100),
            );
            let conflict = find(&status, CONFLICT);
            assert_eq!(conflict.status, "True", "{}", pool.name_any());
            assert!(
                conflict.message.contains("n1 (also"),
                "{}",
                conflict.message
            );
            assert!(
                conflict.message.contains("old owns it"),
                "{}",
                conflict.message
            );
        }
        // The young pool owns nothing and wants nothing: it is in place, not progressing.
        let status = status_of(
            &young,
            &pools,
            &nodes,
            &[],
            &NodeProblems::default(),
            none,
            &time(100),
        );
        assert_eq!(
            (status.node_count, find(&status, READY).status.as_str()),
            (0, "True")
        );
    }

    #[test]
    fn dra_pools_report_a_foreign_device_class() {
        let dra = pool(
            "d",
            1,
            json!({"gpu": {"profile": "l40s"}, "interfaces": {"dra": true}}),
        );
        let pools = std::slice::from_ref(&dra);
        let managed = status_of(
            &dra,
            pools,
            &[],
            &[],
            &NodeProblems::default(),
            none,
            &time(1),
        );
        assert_eq!(find(&managed, DEVICE_CLASS).status, "True");
        let foreign = status_of(
            &dra,
            pools,
            &[],
            &["gpu.nvidia.com".into()],
            &NodeProblems::default(),
            none,
            &time(1),
        );
        let condition = find(&foreign, DEVICE_CLASS);
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "OwnedElsewhere")
        );
        assert!(is_problem(condition));
        let plain = pool("p", 1, json!({"gpu": {"profile": "t4"}}));
        let status = status_of(
            &plain,
            std::slice::from_ref(&plain),
            &[],
            &["gpu.nvidia.com".into()],
            &NodeProblems::default(),
            none,
            &time(1),
        );
        assert!(status.conditions.iter().all(|c| c.type_ != DEVICE_CLASS));
    }

    #[test]
    fn overbooked_nodes_of_the_pool_are_named() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let labelled = json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"});
        let nodes = [node("n1", labelled.clone()), node("n2", labelled)];
        let problems = NodeProblems {
            overbooked: BTreeMap::from([
                (
                    "n1".to_owned(),
                    "ns/p: asks for 2 nvidia.com/gpu, the node had 1 left".to_owned(),
                ),
                ("elsewhere".to_owned(), "not this pool's".to_owned()),
            ]),
            ..Default::default()
        };
        let status_with = |problems: &NodeProblems| {
            status_of(
                &a,
                std::slice::from_ref(&a),
                &nodes,
                &[],
                problems,
                none,
                &time(1),
            )
        };
        let overbooked = find(&status_with(&problems), OVERBOOKED).clone();
        assert_eq!(
            (overbooked.status.as_str(), overbooked.reason.as_str()),
            ("True", "GpusOverbooked")
        );
        assert_eq!(
            overbooked.message,
            "1 nodes run pods their GPUs cannot serve as asked: \
             n1 (ns/p: asks for 2 nvidia.com/gpu, the node had 1 left)"
        );
        assert!(is_problem(&overbooked));
        // Overbooking does not keep the pool from being ready.
        assert_eq!(find(&status_with(&problems), READY).status, "True");
        let fits = find(&status_with(&NodeProblems::default()), OVERBOOKED).clone();
        assert_eq!(
            (fits.status.as_str(), fits.reason.as_str()),
            ("False", "Fits")
        );
    }

    #[test]
    fn a_node_that_cannot_be_written_is_the_reason_the_pool_is_not_ready() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let nodes = [
            node("n1", json!({"run.ai/simulated-gpu-node-pool": "a"})),
            node("elsewhere", json!({})),
        ];
        let failures = BTreeMap::from([
            (
                "n1".to_owned(),
                "admission webhook denied the request".to_owned(),
            ),
            // Not a node of this pool: not its problem.
            ("elsewhere".to_owned(), "denied".to_owned()),
        ]);
        let status = status_of(
            &a,
            std::slice::from_ref(&a),
            &nodes,
            &[],
            &NodeProblems {
                failures,
                ..Default::default()
            },
            none,
            &time(1),
        );
        let ready = find(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NodeUpdateFailed")
        );
        assert_eq!(
            ready.message,
            "1 of 1 nodes could not be updated; n1: admission webhook denied the request"
        );
        assert!(is_problem(ready));
        assert!(!is_ready(&status));
    }

    #[test]
    fn unchanged_pool_gives_an_identical_status() {
        let mut a = (*pool("a", 1, json!({"gpu": {"profile": "t4"}}))).clone();
        let nodes = [node(
            "n1",
            json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"}),
        )];
        let first = status_of(
            &a,
            &[Arc::new(a.clone())],
            &nodes,
            &[],
            &NodeProblems::default(),
            none,
            &time(100),
        );
        a.status = Some(first.clone());
        let second = status_of(
            &a,
            &[Arc::new(a.clone())],
            &nodes,
            &[],
            &NodeProblems::default(),
            none,
            &time(200),
        );
        assert_eq!(first, second);
    }
}
