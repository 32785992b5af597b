//! The node's document as its pool and its pods make it now: the pool's GPUs with their faults
//! and health, and which pod holds which of them.

use std::{collections::HashMap, sync::Arc};

use fakegpu_api::{
    GpuNodePool,
    faults::GpuFault,
    pool::{Interfaces, resolve::ResolvedGpu},
};
use fakegpu_model::topology::NodeTopology;
use k8s_openapi::api::core::v1::Pod;
use kube::{ResourceExt, runtime::reflector::ObjectRef};

use super::{
    assignments::give_what_the_kubelet_gave, cached::CachedNode, lookups::cached_configmap,
    reports::unhealthy_gpus, topology,
};
use crate::{
    context::Context,
    pod_groups::{PodGroupKey, pod_group_of},
    tracking,
};

/// The node's document: the pool's GPUs with the faults `faults` declares, with the pods that
/// hold them now (returned too), and the pods the GPUs could not serve as asked.
#[allow(clippy::too_many_arguments)]
pub(super) fn desired_topology(
    ctx: &Context,
    node: &CachedNode,
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
    served: &Interfaces,
    pods: &[Arc<Pod>],
    priority_classes: &HashMap<PodGroupKey, String>,
    faults: &[GpuFault],
) -> (
    NodeTopology,
    Vec<tracking::GpuUser>,
    Vec<tracking::Overbooking>,
) {
    let name = node.name_any();
    // A document edited by hand into garbage is simply rebuilt.
    let previous = cached_configmap(ctx, &name)
        .and_then(|cm| NodeTopology::from_configmap_data(cm.trimmed().data.as_ref()).ok());
    let (unhealthy, _) = unhealthy_gpus(node, gpu.count);
    let mut document = topology::desired_topology(
        pool,
        gpu,
        served,
        &name,
        previous.as_ref(),
        &topology::Failing {
            unhealthy: &unhealthy,
            faults,
        },
    );
    let default = pool
        .spec
        .utilization
        .as_ref()
        .and_then(|u| u.default.as_deref())
        .and_then(|text| text.parse().ok());
    let mut users: Vec<_> = pods
        .iter()
        .filter_map(|pod| {
            let namespace = pod.namespace().unwrap_or_default();
            let claim = |claim: &str| {
                ctx.caches
                    .claims
                    .get(&ObjectRef::new(claim).within(&namespace))
            };
            let class = pod_group_of(pod).and_then(|key| priority_classes.get(&key));
            let defaults = tracking::Defaults {
                pool: default,
                priority_class: class.map(String::as_str),
            };
            tracking::gpu_user(
                pod,
                &name,
                claim,
                defaults,
                gpu.memory_mib,
                &ctx.settings.reservations,
            )
        })
        .collect();
    give_what_the_kubelet_gave(ctx, &name, &mut users);
    let mig_single = document.mig_strategy == "single";
    let overbooked = tracking::assign(&mut document.gpus, &users, mig_single);
    (document, users, overbooked)
}
