//! A pod as a user of a node's GPUs: what it asks for, shares and uses, gathered from the
//! other concerns.

use std::collections::{BTreeMap, BTreeSet};

use fakegpu_model::{
    names::{annotation, condition},
    topology::{AllocatedBy, GpuStatus, PodGpuUsage},
};
use k8s_openapi::{
    api::{core::v1::Pod, resource::v1::ResourceClaim},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::ResourceExt;

use super::{
    requests::{claim_names, claimed_devices, extended_gpus, mig_requests, wants_gpus},
    sharing::{ReservationNamespaces, Sharing},
    utilization::{Defaults, usage},
};

/// What one pod uses of one node's GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuUser {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// The container the GPUs are for (the first that asks).
    pub container: String,
    pub created: Option<Time>,
    /// Whole GPUs asked for as the extended resource (MIG instances under the single strategy).
    pub extended: u32,
    /// MIG instances asked for as `nvidia.com/mig-<profile>`, by profile.
    pub mig: BTreeMap<String, u32>,
    /// Device names (`gpu-<index>`, MIG device names) of this node its allocated claims name.
    pub claimed: BTreeSet<String>,
    /// Device IDs (GPU and MIG instance UUIDs) the node's kubelet gave the pod's extended
    /// resources, as its node agent reports them; empty on KWOK nodes and until reported.
    pub given: BTreeSet<String>,
    /// What the operator recorded on the pod ([`annotation::ASSIGNED_GPUS`]) for its
    /// extended resources: the assignment that survives the topology document.
    pub recorded: BTreeSet<String>,
    pub sharing: Sharing,
    pub usage: PodGpuUsage,
}

impl GpuUser {
    pub(super) fn holder(&self) -> AllocatedBy {
        AllocatedBy {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            container: self.container.clone(),
        }
    }

    pub(super) fn holds(&self, status: &GpuStatus) -> bool {
        status.allocated_by.namespace == self.namespace && status.allocated_by.pod == self.pod
    }
}

/// The UUIDs of the pod's [`annotation::ASSIGNED_GPUS`].
pub fn recorded_gpus(pod: &Pod) -> BTreeSet<String> {
    pod.annotations()
        .get(annotation::ASSIGNED_GPUS)
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|uuid| !uuid.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a pod still holds what it was given: bound and not finished.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
        && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether the kubelet prepared `pod`'s claims, as far as the pod says: it runs, or its
/// sandbox is up ([`condition::POD_READY_TO_START_CONTAINERS`]), which the kubelet makes only
/// after the claims' drivers prepared them. A pod bound with a claim its node's driver cannot
/// prepare (the driver is not registered there) stays Pending without a sandbox for good:
/// the claim's devices are not its, and the pod the kubelet gives such a GPU holds it.
pub fn claims_prepared(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        || status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == condition::POD_READY_TO_START_CONTAINERS && c.status == "True")
}

/// The GPU user a pod is on `node`, or `None` when it uses none of the node's GPUs.
pub fn gpu_user(
    pod: &Pod,
    node: &str,
    claim: impl Fn(&str) -> Option<std::sync::Arc<ResourceClaim>>,
    defaults: Defaults<'_>,
    gpu_memory_mib: u64,
    reservations: &ReservationNamespaces,
) -> Option<GpuUser> {
    if !is_active(pod) {
        return None;
    }
    let extended = extended_gpus(pod);
    let mig = mig_requests(pod);
    let claimed: BTreeSet<String> = claim_names(pod)
        .iter()
        .filter(|_| claims_prepared(pod))
        .filter_map(|name| claim(name))
        .flat_map(|c| claimed_devices(&c, node))
        .collect();
    let sharing = Sharing::of(pod, reservations);
    let shares = matches!(sharing, Sharing::Shares { .. });
    if extended == 0 && mig.is_empty() && claimed.is_empty() && !shares {
        return None;
    }
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice());
    let containers = containers.unwrap_or_default();
    let container = containers
        .iter()
        .find(|c| wants_gpus(c) || c.resources.as_ref().is_some_and(|r| r.claims.is_some()))
        .or(containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default();
    Some(GpuUser {
        namespace: pod.namespace().unwrap_or_default(),
        pod: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        container,
        created: pod.creation_timestamp(),
        extended,
        mig,
        claimed,
        given: BTreeSet::new(),
        recorded: recorded_gpus(pod),
        sharing,
        usage: usage(pod, defaults, gpu_memory_mib),
    })
}
