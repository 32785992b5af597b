//! Pod -> GPU tracking: which pod holds which GPU of a node, recorded in the node's topology
//! document (`gpus[].status`), where metrics, nvidia-smi and the pool status read it.
//!
//! Pure. Two kinds of holders:
//! - DRA: the scheduler chose the devices; the claim's allocation result names them
//!   (`gpu-<index>` in the pool named after the node), so the record follows it exactly;
//! - extended resource (`nvidia.com/gpu: N`): the scheduler only counted. Each pod keeps the GPUs
//!   it was given before (read back from the document, so an operator restart changes nothing);
//!   pods without GPUs then take the lowest free indices, oldest pod first.
//!
//! GPU sharing (Run:ai, KAI) adds two roles: a reservation pod (in a reservation namespace)
//! holds whole GPUs as an extended-resource pod does but uses none of them itself, and pods
//! that share a GPU (annotation `runai-gpu`, label `runai-gpu-group` or, sharing several,
//! `runai-gpu-group/<group>`; no GPU request) have their use recorded on the GPU their
//! reservation pod holds.
//!
//! One file per concern: `requests` (what pods ask for), `sharing` (reservation pods and
//! their sharers), `utilization` (what pods use) and `assign` (who holds which slot).

mod assign;
#[cfg(test)]
mod fixtures;
mod requests;
mod sharing;
mod utilization;

use std::collections::{BTreeMap, BTreeSet};

use fakegpu_api::{
    dra::{gpu_device_name, mig_device_name},
    names::{annotation, condition, label, resource},
    profiles::published_mig_name,
    topology::{AllocatedBy, GpuStatus, GpuTopology, PodGpuUsage, UtilizationBounds},
    utilization::{UtilizationRange, UtilizationRangeError, WorkloadType},
};
use k8s_openapi::{
    api::{
        core::v1::{Container, Pod},
        resource::v1::{DeviceRequestAllocationResult, ResourceClaim},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::ResourceExt;

pub use assign::*;
pub use requests::*;
pub use sharing::*;
pub use utilization::*;

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
    fn holder(&self) -> AllocatedBy {
        AllocatedBy {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            container: self.container.clone(),
        }
    }

    fn holds(&self, status: &GpuStatus) -> bool {
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

#[cfg(test)]
mod tests {
    use super::{fixtures::*, *};

    #[test]
    fn finished_or_unbound_pods_hold_nothing() {
        let mut done = asking("a", "2026-01-01T00:00:00Z", 1);
        done.status.as_mut().expect("status").phase = Some("Succeeded".into());
        assert!(!is_active(&done));
        let mut pending = asking("b", "2026-01-01T00:00:00Z", 1);
        pending.spec.as_mut().expect("spec").node_name = None;
        assert!(!is_active(&pending));
    }
}
