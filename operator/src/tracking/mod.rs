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
//! that share a GPU (annotation `runai-gpu` or label `runai-gpu-group`, no GPU request) have
//! their use recorded on the GPU their reservation pod holds.
//!
//! One file per concern: [`requests`] (what pods ask for), [`sharing`] (reservation pods and
//! their sharers), [`utilization`] (what pods use) and [`assign`] (who holds which slot).

mod assign;
mod requests;
mod sharing;
mod utilization;

use std::collections::{BTreeMap, BTreeSet};

use fakegpu_api::{
    dra::{gpu_device_name, mig_device_name},
    names::{annotation, label, resource},
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
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn gpus(count: u32) -> Vec<GpuTopology> {
        (0..count)
            .map(|index| GpuTopology {
                id: format!("GPU-{index}"),
                index,
                ..Default::default()
            })
            .collect()
    }

    fn pod(name: &str, created: &str, value: serde_json::Value) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "creationTimestamp": created},
            "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"},
        }))
        .expect("test pod");
        let extra: Pod = serde_json::from_value(value).expect("test pod overlay");
        if let Some(spec) = extra.spec {
            pod.spec = Some(spec);
        }
        if extra.metadata.annotations.is_some() {
            pod.metadata.annotations = extra.metadata.annotations;
        }
        if extra.metadata.labels.is_some() {
            pod.metadata.labels = extra.metadata.labels;
        }
        if let Some(status) = extra.status {
            pod.status = Some(status);
        }
        pod
    }

    fn asking(name: &str, created: &str, gpus: u32) -> Pod {
        pod(
            name,
            created,
            json!({"spec": {"nodeName": "n", "containers": [
                {"name": "sidecar"},
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}},
            ]}}),
        )
    }

    fn claim(devices: &[(&str, &str)]) -> Arc<ResourceClaim> {
        let results: Vec<_> = devices
            .iter()
            .map(|(pool, device)| {
                json!({"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": device})
            })
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": {},
                "status": {"allocation": {"devices": {"results": results}}},
            }))
            .expect("test claim"),
        )
    }

    fn user(pod: &Pod, claims: &[Arc<ResourceClaim>]) -> GpuUser {
        gpu_user(
            pod,
            "n",
            |_| claims.first().cloned(),
            Defaults::default(),
            1000,
            &reservations(),
        )
        .expect("uses GPUs")
    }

    fn reservations() -> ReservationNamespaces {
        ReservationNamespaces::parse("runai-reservation, kai-resource-reservation,")
    }

    /// A reservation pod of GPU group `group` asking for one GPU.
    fn reservation(name: &str, created: &str, group: &str) -> Pod {
        let mut pod = asking(name, created, 1);
        pod.metadata.namespace = Some("kai-resource-reservation".into());
        pod.metadata.labels = Some(BTreeMap::from([(
            "runai-gpu-group".to_owned(),
            group.to_owned(),
        )]));
        pod
    }

    fn sharer(name: &str, metadata: serde_json::Value) -> GpuUser {
        user(
            &pod(name, "2026-01-05T00:00:00Z", json!({"metadata": metadata})),
            &[],
        )
    }

    #[test]
    fn sharing_pods_use_the_gpu_their_reservation_pod_holds() {
        let mut topology = gpus(4);
        let other = user(&asking("other", "2026-01-01T00:00:00Z", 1), &[]);
        let reserve = user(&reservation("reserve", "2026-01-02T00:00:00Z", "g1"), &[]);
        let half = sharer(
            "half",
            json!({"labels": {"runai-gpu-group": "g1"},
                "annotations": {"gpu-fraction": "0.5", "run.ai/simulated-gpu-utilization": "30"}}),
        );
        let stranger = sharer("stranger", json!({"labels": {"runai-gpu-group": "g2"}}));
        let users = [other, reserve.clone(), half, stranger];
        assign(&mut topology, &users, false);
        // The reservation pod holds GPU 1 and uses none of it; the sharer uses half its memory
        // there; a pod of a group no reservation pod holds uses nothing.
        assert_eq!(holders(&topology), ["other", "reserve", "", ""]);
        let shared = &topology[1].status.pod_gpu_usage_status;
        assert_eq!(shared.keys().collect::<Vec<_>>(), ["uid-half"]);
        assert_eq!(shared["uid-half"].fb_used, 500);
        assert_eq!(shared["uid-half"].utilization.max, 30);
        assert!(
            topology
                .iter()
                .all(|g| !g.status.pod_gpu_usage_status.contains_key("uid-stranger"))
        );
        // The reservation pod is told its GPU's UUID, until it carries it.
        assert_eq!(
            unannounced_reservations(&topology, &users),
            [(
                "kai-resource-reservation".to_owned(),
                "reserve".to_owned(),
                "GPU-1".to_owned()
            )]
        );
        let mut announced = reservation("reserve", "2026-01-02T00:00:00Z", "g1");
        announced.metadata.annotations = Some(BTreeMap::from([(
            "run.ai/reserve_for_gpu_index".to_owned(),
            "GPU-1".to_owned(),
        )]));
        let announced = user(&announced, &[]);
        assert!(unannounced_reservations(&topology, std::slice::from_ref(&announced)).is_empty());

        // `runai-gpu` names the GPU by the reservation's annotation, the UUID or the index.
        for named in ["GPU-1", "1"] {
            let mut topology = gpus(4);
            let by_name = sharer("named", json!({"annotations": {"runai-gpu": named}}));
            let unheld = sharer("unheld", json!({"annotations": {"runai-gpu": "GPU-3"}}));
            assign(
                &mut topology,
                &[
                    user(&asking("other", "2026-01-01T00:00:00Z", 1), &[]),
                    announced.clone(),
                    by_name,
                    unheld,
                ],
                false,
            );
            let shared = &topology[1].status.pod_gpu_usage_status;
            assert_eq!(shared.keys().collect::<Vec<_>>(), ["uid-named"], "{named}");
            assert!(topology[3].status.pod_gpu_usage_status.is_empty());
        }
    }

    #[test]
    fn a_pod_sharing_several_gpus_uses_each_its_group_holds() {
        let mut topology = gpus(3);
        let users = [
            user(&reservation("r0", "2026-01-01T00:00:00Z", "g"), &[]),
            user(&reservation("r1", "2026-01-02T00:00:00Z", "g"), &[]),
            sharer(
                "wide",
                json!({"labels": {"runai-gpu-group": "g"},
                "annotations": {"gpu-memory": "2000"}}),
            ),
        ];
        assign(&mut topology, &users, false);
        assert_eq!(holders(&topology), ["r0", "r1", ""]);
        for gpu in &topology[..2] {
            // gpu-memory is MiB, at most the GPU's.
            assert_eq!(gpu.status.pod_gpu_usage_status["uid-wide"].fb_used, 1000);
        }
        // A pod outside the reservation namespaces asking for a GPU is an ordinary holder.
        let plain = user(&asking("plain", "2026-01-01T00:00:00Z", 1), &[]);
        assert_eq!(plain.sharing, Sharing::None);
    }

    #[test]
    fn idle_gpu_pods_run_at_zero() {
        let idle = user(
            &asking("runai-idle-gpu-abc", "2026-01-01T00:00:00Z", 1),
            &[],
        );
        assert_eq!(
            (idle.usage.utilization.min, idle.usage.utilization.max),
            (0, 0)
        );
    }

    fn holders(gpus: &[GpuTopology]) -> Vec<&str> {
        gpus.iter()
            .map(|g| g.status.allocated_by.pod.as_str())
            .collect()
    }

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

    #[test]
    fn finished_or_unbound_pods_hold_nothing() {
        let mut done = asking("a", "2026-01-01T00:00:00Z", 1);
        done.status.as_mut().expect("status").phase = Some("Succeeded".into());
        assert!(!is_active(&done));
        let mut pending = asking("b", "2026-01-01T00:00:00Z", 1);
        pending.spec.as_mut().expect("spec").node_name = None;
        assert!(!is_active(&pending));
    }

    #[test]
    fn oldest_pods_get_the_lowest_free_gpus() {
        let mut topology = gpus(4);
        let young = user(&asking("young", "2026-01-02T00:00:00Z", 1), &[]);
        let old = user(&asking("old", "2026-01-01T00:00:00Z", 2), &[]);
        assign(&mut topology, &[young.clone(), old.clone()], false);
        assert_eq!(holders(&topology), ["old", "old", "young", ""]);
        assert_eq!(topology[0].status.allocated_by.container, "main");
        assert_eq!(
            topology[2].status.pod_gpu_usage_status["uid-young"].fb_used,
            1000
        );
        assert_eq!(allocated_count(&topology), 3);
    }

    #[test]
    fn assignments_survive_a_recomputation_and_others_leaving() {
        let mut topology = gpus(4);
        let a = user(&asking("a", "2026-01-01T00:00:00Z", 1), &[]);
        let b = user(&asking("b", "2026-01-02T00:00:00Z", 2), &[]);
        assign(&mut topology, &[a.clone(), b.clone()], false);
        assert_eq!(holders(&topology), ["a", "b", "b", ""]);
        // a finishes; a newer pod arrives: b keeps its GPUs, the newcomer takes the free ones.
        let c = user(&asking("c", "2026-01-03T00:00:00Z", 2), &[]);
        assign(&mut topology, &[c.clone(), b.clone()], false);
        assert_eq!(holders(&topology), ["c", "b", "b", "c"]);
        // Same inputs again (an operator restart reads the document back): nothing moves.
        let before = topology.clone();
        assign(&mut topology, &[b, c], false);
        assert_eq!(topology, before);
    }

    #[test]
    fn the_gpus_a_kubelet_gave_win_over_what_was_recorded() {
        let mut topology = gpus(4);
        let old = user(&asking("old", "2026-01-01T00:00:00Z", 1), &[]);
        let mut young = user(&asking("young", "2026-01-02T00:00:00Z", 2), &[]);
        // Before the node agent reports, the operator guesses.
        assign(&mut topology, &[old.clone(), young.clone()], false);
        assert_eq!(holders(&topology), ["old", "young", "young", ""]);
        // The kubelet gave the young pod GPUs 0 and 3 (NUMA-aware, say): the record follows,
        // and the older pod, given nothing reported yet, moves to a free GPU.
        young.given = BTreeSet::from(["GPU-0".to_owned(), "GPU-3".to_owned()]);
        assign(&mut topology, &[old.clone(), young.clone()], false);
        assert_eq!(holders(&topology), ["young", "old", "", "young"]);
        // More reported than asked for, or a device of another node: never more than asked.
        young.given = BTreeSet::from([
            "GPU-9".to_owned(),
            "GPU-2".to_owned(),
            "GPU-3".to_owned(),
            "GPU-0".to_owned(),
        ]);
        assign(&mut topology, &[old, young], false);
        assert_eq!(holders(&topology), ["young", "old", "young", ""]);
    }

    #[test]
    fn the_recorded_assignment_outlives_the_document() {
        let mut topology = gpus(4);
        let first = user(&asking("first", "2026-01-01T00:00:00Z", 1), &[]);
        let second = user(&asking("second", "2026-01-02T00:00:00Z", 1), &[]);
        assign(&mut topology, &[first.clone(), second.clone()], false);
        assert_eq!(holders(&topology), ["first", "second", "", ""]);
        // Both get their GPUs written on them.
        let written = unrecorded_assignments(&topology, &[first.clone(), second.clone()]);
        assert_eq!(
            written,
            [
                ("ns".to_owned(), "first".to_owned(), "GPU-0".to_owned()),
                ("ns".to_owned(), "second".to_owned(), "GPU-1".to_owned())
            ]
        );
        // The first pod finishes, the document is lost: a fresh document and a recomputation
        // would give the second pod GPU 0; its record keeps it on GPU 1.
        let mut second = second;
        second.recorded = recorded_gpus(&pod(
            "second",
            "2026-01-02T00:00:00Z",
            json!({"metadata": {"annotations": {"fakegpu.dev/gpus": "GPU-1"}}}),
        ));
        let mut fresh = gpus(4);
        assign(&mut fresh, std::slice::from_ref(&second), false);
        assert_eq!(holders(&fresh), ["", "second", "", ""]);
        assert!(unrecorded_assignments(&fresh, &[second]).is_empty());
    }

    #[test]
    fn claims_decide_their_devices_and_push_counted_pods_aside() {
        let mut topology = gpus(3);
        let counted = user(&asking("counted", "2026-01-01T00:00:00Z", 1), &[]);
        assign(&mut topology, std::slice::from_ref(&counted), false);
        assert_eq!(holders(&topology), ["counted", "", ""]);
        let claimed = pod(
            "claimed",
            "2026-01-02T00:00:00Z",
            json!({"spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}}),
        );
        let claimed = user(
            &claimed,
            &[claim(&[("n", "gpu-0"), ("other-node", "gpu-1")])],
        );
        assert_eq!(claimed.claimed, BTreeSet::from(["gpu-0".to_owned()]));
        assign(&mut topology, &[counted, claimed], false);
        assert_eq!(holders(&topology), ["claimed", "counted", ""]);
    }

    #[test]
    fn a_shared_claim_records_every_pod() {
        let mut topology = gpus(1);
        let shared = claim(&[("n", "gpu-0")]);
        let spec = json!({"spec": {"nodeName": "n", "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}});
        let a = user(
            &pod("a", "2026-01-01T00:00:00Z", spec.clone()),
            std::slice::from_ref(&shared),
        );
        let b = user(&pod("b", "2026-01-02T00:00:00Z", spec), &[shared]);
        assign(&mut topology, &[a, b], false);
        assert_eq!(topology[0].status.allocated_by.pod, "a");
        assert_eq!(topology[0].status.pod_gpu_usage_status.len(), 2);
    }

    #[test]
    fn usage_follows_annotations_and_the_pool_default() {
        let annotated = pod(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"annotations": {"run.ai/simulated-gpu-utilization": "10-30", "gpu-fraction": "0.5"}}}),
        );
        let usage_a = usage(&annotated, Defaults::default(), 1000);
        assert_eq!(
            (
                usage_a.utilization.min,
                usage_a.utilization.max,
                usage_a.fb_used
            ),
            (10, 30, 500)
        );
        let malformed = pod(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"annotations": {"run.ai/simulated-gpu-utilization": "30-10", "gpu-fraction": "7"}}}),
        );
        let default = Defaults {
            pool: Some(UtilizationRange { min: 5, max: 5 }),
            priority_class: None,
        };
        let usage_b = usage(&malformed, default, 1000);
        assert_eq!((usage_b.utilization.min, usage_b.fb_used), (5, 1000));
        assert_eq!(
            usage(&malformed, Defaults::default(), 1).utilization.max,
            100
        );
        assert!(!usage_b.use_knative_utilization);
        let inference = pod(
            "c",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"labels": {"workloadKind": "InferenceWorkload"}}}),
        );
        let inference_usage = usage(&inference, default, 1);
        assert!(inference_usage.use_knative_utilization);
        // Its type's range (idle until the request rate is known) wins over the pool's default.
        assert_eq!(inference_usage.utilization.max, 0);
        // Without a label, the PodGroup's priority class tells the type.
        let grouped = pod(
            "e",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"annotations": {"pod-group-name": "pg"}}}),
        );
        let train = Defaults {
            priority_class: Some("train"),
            ..default
        };
        let usage_e = usage(&grouped, train, 1);
        assert_eq!(
            (usage_e.utilization.min, usage_e.utilization.max),
            (80, 100)
        );
        assert!(!usage_e.use_knative_utilization);
        let inference_class = Defaults {
            priority_class: Some("inference"),
            ..default
        };
        assert!(usage(&grouped, inference_class, 1).use_knative_utilization);
        for bad in ["30-10", "abc", "-5", "10-200"] {
            let p = pod(
                "d",
                "2026-01-01T00:00:00Z",
                json!({"metadata": {"annotations": {"run.ai/simulated-gpu-utilization": bad}}}),
            );
            assert!(
                malformed_utilization(&p).is_some_and(|(value, _)| value == bad),
                "{bad}"
            );
        }
        assert!(malformed_utilization(&annotated).is_none());
    }

    fn partitioned() -> Vec<GpuTopology> {
        let mut topology = gpus(2);
        topology[0].mig_devices = [("3g.40gb", 9, 0), ("1g.10gb", 19, 4), ("1g.10gb", 19, 5)]
            .map(|(profile, id, start)| fakegpu_api::topology::MigDevice {
                uuid: format!("MIG-{start}"),
                profile: profile.into(),
                gi_profile_id: id,
                placement_start: start,
                memory: 100,
                ..Default::default()
            })
            .to_vec();
        topology
    }

    fn holder(status: &GpuStatus) -> &str {
        status.allocated_by.pod.as_str()
    }

    #[test]
    fn pods_the_gpus_cannot_serve_are_reported() {
        let claim: Arc<ResourceClaim> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns"}, "spec": {},
                "status": {"allocation": {"devices": {"results": [{"request": "gpu",
                    "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]}}},
            }))
            .expect("claim"),
        );
        let claimant = user(
            &pod(
                "claimant",
                "2026-01-01T00:00:00Z",
                json!({"spec": {"nodeName": "n", "containers": [{"name": "main"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}}),
            ),
            &[claim],
        );
        let limits = json!({"spec": {"nodeName": "n", "containers": [{"name": "main",
            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}});
        let mut greedy = user(&pod("greedy", "2026-01-01T00:00:01Z", limits), &[]);
        // The kubelet's device plugin gave it both GPUs, the claim's one included.
        greedy.given = ["GPU-0".to_owned(), "GPU-1".to_owned()].into();
        let mut topology = gpus(2);
        let overbooked = assign(&mut topology, &[claimant, greedy], false);
        let said: Vec<String> = overbooked.iter().map(ToString::to_string).collect();
        assert_eq!(
            said,
            [
                "ns/greedy: the kubelet gave it GPU-0, which ns/claimant holds by claim",
                "ns/greedy: asks for 2 nvidia.com/gpu, the node had 1 left",
            ]
        );
        assert_eq!(holder(&topology[0].status), "claimant");
        assert_eq!(holder(&topology[1].status), "greedy");
        // Room for everyone: nothing to say.
        let mut roomy = gpus(3);
        let two = user(
            &pod(
                "two",
                "2026-01-01T00:00:01Z",
                json!({"spec": {"nodeName": "n", "containers": [{"name": "main",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}),
            ),
            &[],
        );
        assert!(assign(&mut roomy, &[two], false).is_empty());
    }

    #[test]
    fn a_profile_with_a_plus_is_held_by_its_published_resource() {
        let limits = json!({"spec": {"nodeName": "n", "containers": [{"name": "main",
            "resources": {"limits": {"nvidia.com/mig-1g.10gb.me": "1"}}}]}});
        let media = user(&pod("media", "2026-01-01T00:00:00Z", limits), &[]);
        let mut topology = partitioned();
        topology[0].mig_devices[2].profile = "1g.10gb+me".into();
        assign(&mut topology, std::slice::from_ref(&media), false);
        let held: Vec<&str> = topology[0]
            .mig_devices
            .iter()
            .map(|m| holder(&m.status))
            .collect();
        assert_eq!(held, ["", "", "media"]);
    }

    #[test]
    fn mig_instances_are_held_by_resource_and_by_claim() {
        let limits = |resources: serde_json::Value| json!({"spec": {"nodeName": "n", "containers": [{"name": "main", "resources": {"limits": resources}}]}});
        let small = user(
            &pod(
                "small",
                "2026-01-01T00:00:00Z",
                limits(json!({"nvidia.com/mig-1g.10gb": "2"})),
            ),
            &[],
        );
        assert_eq!(small.mig["1g.10gb"], 2);
        let whole = user(
            &pod(
                "whole",
                "2026-01-01T00:00:01Z",
                limits(json!({"nvidia.com/gpu": "1"})),
            ),
            &[],
        );
        let claim: Arc<ResourceClaim> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns"}, "spec": {},
                "status": {"allocation": {"devices": {"results": [{"request": "mig",
                    "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0-mig-3g40gb-9-0"}]}}},
            }))
            .expect("claim"),
        );
        let claimant = user(
            &pod(
                "claimant",
                "2026-01-01T00:00:02Z",
                json!({"spec": {"nodeName": "n", "containers": [{"name": "main"}],
                "resourceClaims": [{"name": "mig", "resourceClaimName": "c"}]}}),
            ),
            &[claim],
        );
        let mut topology = partitioned();
        assign(
            &mut topology,
            &[small.clone(), whole.clone(), claimant.clone()],
            false,
        );
        let migs = &topology[0].mig_devices;
        let held: Vec<&str> = migs.iter().map(|m| holder(&m.status)).collect();
        assert_eq!(held, ["claimant", "small", "small"]);
        assert_eq!(holder(&topology[1].status), "whole");
        assert!(!topology[0].status.in_use());
        // A pod uses no more framebuffer than its instance has.
        assert_eq!(
            migs[1].status.pod_gpu_usage_status["uid-small"].fb_used,
            100
        );
        assert_eq!(allocated_count(&topology), 2);

        // Under the single strategy nvidia.com/gpu asks for instances, and keeps them.
        let mut single = partitioned();
        single.truncate(1);
        assign(&mut single, std::slice::from_ref(&whole), true);
        let held: Vec<&str> = single[0]
            .mig_devices
            .iter()
            .map(|m| holder(&m.status))
            .collect();
        assert_eq!(held, ["whole", "", ""]);
        let first = small.clone();
        assign(&mut single, &[first, whole], true);
        let held: Vec<&str> = single[0]
            .mig_devices
            .iter()
            .map(|m| holder(&m.status))
            .collect();
        assert_eq!(
            held,
            ["whole", "", ""],
            "single never serves mig-<profile> requests"
        );
    }
}
