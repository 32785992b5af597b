//! Warning Events about a node and its pods: annotations that do not parse, GPUs overbooked.

use fakegpu_model::{names::annotation, topology::parse_gpu_indices};
use kube::{Resource, ResourceExt};

use super::cached::CachedNode;
use crate::{context::Context, tracking};

/// GPU indices the user marked failed (annotation [`annotation::UNHEALTHY_GPUS`]) among the
/// node's `count` GPUs, and the entries that name none of them.
pub(super) fn unhealthy_gpus(node: &CachedNode, count: u32) -> (Vec<u32>, Vec<String>) {
    let Some(value) = node.annotations().get(annotation::UNHEALTHY_GPUS) else {
        return (Vec::new(), Vec::new());
    };
    let (indices, mut bad) = parse_gpu_indices(value);
    let (known, beyond): (Vec<u32>, Vec<u32>) = indices.into_iter().partition(|i| *i < count);
    bad.extend(beyond.iter().map(u32::to_string));
    (known, bad)
}

/// A Warning Event, once per value, on a node whose unhealthy-GPUs annotation names entries
/// that are not GPUs of the node (the GPUs it does name are marked).
pub(super) async fn report_malformed_unhealthy(ctx: &Context, node: &CachedNode, count: u32) {
    let (_, bad) = unhealthy_gpus(node, count);
    let Some(value) = node.annotations().get(annotation::UNHEALTHY_GPUS) else {
        return;
    };
    if bad.is_empty() {
        return;
    }
    let message = format!(
        "annotation {} {value:?}: not GPU indices of this node (it has {count} GPUs, 0-{}): {}; \
         the GPUs it does name are marked unhealthy",
        annotation::UNHEALTHY_GPUS,
        count.saturating_sub(1),
        bad.join(", ")
    );
    let node_ref = node.object_ref(&());
    ctx.events
        .warn_once(&node_ref, "InvalidUnhealthyGpus", value, &message)
        .await;
}

/// Keeps the node's overbooking (the first problem, and how many) for its pool's status.
pub(super) fn note_overbooking(ctx: &Context, node: &str, overbooked: &[tracking::Overbooking]) {
    let mut problems = ctx.state.node_problems.lock();
    match overbooked {
        [] => {
            problems.overbooked.remove(node);
        }
        [only] => {
            problems
                .overbooked
                .insert(node.to_owned(), only.to_string());
        }
        [first, rest @ ..] => {
            problems
                .overbooked
                .insert(node.to_owned(), format!("{first}, and {} more", rest.len()));
        }
    }
}

/// A Warning Event on the node, once per problem, for pods its GPUs could not serve as asked:
/// a pool serving both the device plugin and DRA hands the same GPUs to both, and the scheduler
/// counts the two apart.
pub(super) async fn report_overbooking(
    ctx: &Context,
    node: &CachedNode,
    overbooked: &[tracking::Overbooking],
) {
    let node_ref = node.object_ref(&());
    for problem in overbooked {
        let message = format!(
            "{problem}: the pool's device-plugin pods and DRA claims draw on the same GPUs of \
             this node; the pod's GPUs are shared with another pod"
        );
        ctx.events
            .warn_once(&node_ref, "GpusOverbooked", &problem.to_string(), &message)
            .await;
    }
}

/// A Warning Event, once per value, on each pod of `node` whose utilization or GPU-sharing
/// annotation does not parse.
pub(super) async fn report_malformed_annotations(ctx: &Context, node: &str) {
    for pod in ctx.caches.pods_by_node.pods_on(node, &ctx.caches.pods) {
        let pod_ref = pod.object_ref(&());
        if let Some((value, error)) = tracking::malformed_utilization(&pod) {
            let message = format!(
                "annotation {} {value:?} is not usable: {error}; the pod runs at its pool's default utilization",
                annotation::SIMULATED_UTILIZATION
            );
            ctx.events
                .warn_once(&pod_ref, "InvalidUtilization", &value, &message)
                .await;
        }
        for (name, value, problem) in tracking::malformed_sharing(&pod) {
            let message = format!(
                "annotation {name} {value:?} is not usable: {problem}; the pod's GPU memory is \
                 counted as if it were not there"
            );
            ctx.events
                .warn_once(
                    &pod_ref,
                    "InvalidGpuSharing",
                    &format!("{name}={value}"),
                    &message,
                )
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unhealthy_gpus_beyond_the_node_or_not_indices_are_set_apart() {
        let node: CachedNode = serde_json::from_value(json!({"metadata": {"name": "n",
            "annotations": {annotation::UNHEALTHY_GPUS: "1, 3,nine,7"}}}))
        .expect("node");
        assert_eq!(
            unhealthy_gpus(&node, 4),
            (vec![1, 3], vec!["nine".to_owned(), "7".to_owned()])
        );
        let plain: CachedNode =
            serde_json::from_value(json!({"metadata": {"name": "n"}})).expect("node");
        assert_eq!(unhealthy_gpus(&plain, 4), (vec![], vec![]));
    }
}
