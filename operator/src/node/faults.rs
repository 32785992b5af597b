//! Injected GPU faults on a node: the pool's `spec.faults` and then the node's
//! `fakegpu.dev/gpu-faults` annotation, folded per GPU into its topology document (see
//! [`fakegpu_api::faults`]), and told on the node itself: a `fakegpu.dev/GpuFault` condition
//! naming the faulty GPUs while there are any, and a Warning Event when a fault appears.

use fakegpu_api::{
    GpuNodePool,
    faults::{GpuFault, parse_annotation},
};
use fakegpu_model::{
    names::{annotation, condition::GPU_FAULT},
    topology::NodeTopology,
};
use k8s_openapi::{api::core::v1::NodeCondition, apimachinery::pkg::apis::meta::v1::Time};
use kube::{Resource, ResourceExt};

use super::{cached::CachedNode, status::current_condition};
use crate::context::Context;

/// The faults declared for `node`: the pool's, then the annotation's; and why the annotation
/// was ignored, when it does not parse.
pub fn declared(pool: &GpuNodePool, node: &CachedNode) -> (Vec<GpuFault>, Option<String>) {
    let mut faults = pool.spec.faults.clone();
    let Some(value) = node.annotations().get(annotation::GPU_FAULTS) else {
        return (faults, None);
    };
    match parse_annotation(value) {
        Ok(own) => {
            faults.extend(own);
            (faults, None)
        }
        Err(error) => (faults, Some(error)),
    }
}

/// What the condition and the Event say: a reason for the first faulty GPU's first fault, and
/// every faulty GPU with its faults. `None` when no GPU has any.
pub fn summary(topology: &NodeTopology) -> Option<(&'static str, String)> {
    let faulty: Vec<_> = topology
        .gpus
        .iter()
        .filter(|g| !g.faults.is_empty())
        .collect();
    let first = &faulty.first()?.faults;
    let reason = if first.xid.is_some() {
        "XidError"
    } else if first.ecc_uncorrectable > 0 || first.ecc_correctable > 0 {
        "EccError"
    } else {
        "ThermalThrottling"
    };
    let gpus: Vec<String> = faulty
        .iter()
        .map(|g| {
            let service = if g.faults.out_of_service() {
                " (out of service)"
            } else {
                ""
            };
            format!("GPU {}: {}{service}", g.index, g.faults.describe())
        })
        .collect();
    Some((reason, gpus.join("; ")))
}

/// The node's `fakegpu.dev/GpuFault` condition for `topology`: `True` while any GPU has a
/// fault, since the first time it was; none without faults (fakegpu's patch then removes it).
pub fn desired_condition(
    node: &CachedNode,
    topology: &NodeTopology,
    now: &Time,
) -> Option<NodeCondition> {
    let (reason, message) = summary(topology)?;
    let since = current_condition(node, GPU_FAULT)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Some(NodeCondition {
        type_: GPU_FAULT.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: Some(since),
        last_heartbeat_time: None,
    })
}

/// Warning Events on the node, once per value: the faults its GPUs have now, and an annotation
/// that was ignored.
pub async fn report(ctx: &Context, node: &CachedNode, topology: &NodeTopology, bad: Option<&str>) {
    let node_ref = node.object_ref(&());
    if let Some((_, message)) = summary(topology) {
        ctx.events
            .warn_once(&node_ref, "GpuFault", &message, &message)
            .await;
    }
    if let (Some(error), Some(value)) = (bad, node.annotations().get(annotation::GPU_FAULTS)) {
        let message = format!(
            "annotation {} {value:?} is ignored: {error}; it takes a JSON list like \
             [{{\"gpus\": [1], \"xid\": 48}}]",
            annotation::GPU_FAULTS
        );
        ctx.events
            .warn_once(&node_ref, "InvalidGpuFaults", value, &message)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::{faults::GpuFaults, topology::GpuTopology};
    use serde_json::json;

    use super::*;
    use crate::{
        kit::cache::Cached,
        testing::{pool, time},
    };

    fn node(annotations: serde_json::Value) -> CachedNode {
        Cached::new(
            serde_json::from_value(json!({"metadata": {"name": "n", "annotations": annotations}}))
                .expect("test node"),
        )
    }

    #[test]
    fn the_annotation_adds_to_the_pool_s_faults_or_is_reported() {
        let pool = pool(
            "p",
            0,
            json!({"gpu": {"profile": "t4"}, "faults": [{"xid": 13}]}),
        );
        let (faults, bad) = declared(
            &pool,
            &node(json!({annotation::GPU_FAULTS: r#"[{"gpus": [1], "eccUncorrectable": 1}]"#})),
        );
        assert_eq!(faults.len(), 2);
        assert!(bad.is_none());
        let (faults, bad) = declared(&pool, &node(json!({annotation::GPU_FAULTS: "xid 79"})));
        assert_eq!(faults, pool.spec.faults, "the pool's stay");
        assert!(bad.is_some());
    }

    #[test]
    fn the_condition_names_the_faulty_gpus_and_keeps_its_time() {
        let mut topology = NodeTopology {
            gpus: (0..3)
                .map(|index| GpuTopology {
                    index,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        assert_eq!(
            desired_condition(&node(json!({})), &topology, &time(1)),
            None
        );
        topology.gpus[1].faults = GpuFaults {
            xid: Some(48),
            ..Default::default()
        };
        topology.gpus[2].faults = GpuFaults {
            thermal_throttling: true,
            ..Default::default()
        };
        let condition =
            desired_condition(&node(json!({})), &topology, &time(1)).expect("faulty GPUs");
        assert_eq!(condition.reason.as_deref(), Some("XidError"));
        assert_eq!(
            condition.message.as_deref(),
            Some("GPU 1: XID 48 (out of service); GPU 2: thermal throttling")
        );
        assert_eq!(condition.last_transition_time, Some(time(1)));
    }
}
