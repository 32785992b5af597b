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

/// Namespaces whose pods are GPU reservation pods (see [`Sharing`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReservationNamespaces(Vec<String>);

impl ReservationNamespaces {
    /// From a comma-separated list.
    pub fn parse(list: &str) -> Self {
        Self(
            list.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    fn contains(&self, namespace: &str) -> bool {
        self.0.iter().any(|n| n == namespace)
    }
}

/// A pod's part in GPU sharing (Run:ai, KAI), where a reservation pod holds a whole GPU for the
/// pods that share it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    #[default]
    None,
    /// A reservation pod: holds its GPUs and uses none of them. `reserved` is its
    /// [`annotation::RESERVED_GPU`] once written, `group` its [`label::GPU_GROUP`].
    Reservation {
        reserved: Option<String>,
        group: Option<String>,
    },
    /// A pod using the GPU of the reservation pod that its [`annotation::RUNAI_GPU`] or its
    /// [`label::GPU_GROUP`] names.
    Shares {
        gpu: Option<String>,
        group: Option<String>,
    },
}

impl Sharing {
    fn of(pod: &Pod, reservations: &ReservationNamespaces) -> Self {
        let group = pod.labels().get(label::GPU_GROUP).cloned();
        if reservations.contains(&pod.namespace().unwrap_or_default()) {
            let reserved = pod.annotations().get(annotation::RESERVED_GPU).cloned();
            return Self::Reservation { reserved, group };
        }
        match pod.annotations().get(annotation::RUNAI_GPU).cloned() {
            None if group.is_none() => Self::None,
            gpu => Self::Shares { gpu, group },
        }
    }

    fn is_reservation(&self) -> bool {
        matches!(self, Self::Reservation { .. })
    }
}

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

/// A container's limits (else requests) of extended resources.
fn limits(
    container: &Container,
) -> Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>> {
    let resources = container.resources.as_ref();
    resources
        .and_then(|r| r.limits.as_ref())
        .or_else(|| resources.and_then(|r| r.requests.as_ref()))
}

fn limit(container: &Container, name: &str) -> u32 {
    limits(container)
        .and_then(|quantities| quantities.get(name))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

/// Whether a container asks for GPUs or MIG instances as extended resources.
fn wants_gpus(container: &Container) -> bool {
    limits(container).is_some_and(|l| {
        l.iter().any(|(name, q)| {
            (name == resource::GPU || name.starts_with(resource::MIG_PREFIX)) && q.0 != "0"
        })
    })
}

/// How much of extended resource `name` a pod asks for: what its containers add up to, or an
/// init container's need if larger (init containers run before the others, as the scheduler
/// counts them).
fn requested(pod: &Pod, name: &str) -> u32 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let running: u32 = spec.containers.iter().map(|c| limit(c, name)).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| limit(c, name))
        .max()
        .unwrap_or(0);
    running.max(init)
}

/// Whole GPUs a pod asks for (`nvidia.com/gpu`).
pub fn extended_gpus(pod: &Pod) -> u32 {
    requested(pod, resource::GPU)
}

/// MIG instances a pod asks for, by profile (`nvidia.com/mig-<profile>`).
pub fn mig_requests(pod: &Pod) -> BTreeMap<String, u32> {
    let spec = pod.spec.as_ref();
    let names: BTreeSet<&String> = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .filter_map(limits)
        .flat_map(|l| l.keys())
        .filter(|name| name.starts_with(resource::MIG_PREFIX))
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let count = requested(pod, name);
            let profile = name.strip_prefix(resource::MIG_PREFIX)?;
            (count > 0).then(|| (profile.to_owned(), count))
        })
        .collect()
}

/// Names of the ResourceClaims a pod uses: generated ones (from its status) and named ones.
pub fn claim_names(pod: &Pod) -> BTreeSet<String> {
    let generated = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| s.resource_claim_name.clone());
    let named = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.resource_claim_name.clone());
    generated.chain(named).collect()
}

/// Device names of `node` that a claim's allocation names.
pub fn claimed_devices(claim: &ResourceClaim, node: &str) -> BTreeSet<String> {
    gpu_results(claim)
        .filter(|r| r.pool == node)
        .map(|r| r.device.clone())
        .collect()
}

/// Nodes whose GPUs a claim's allocation names (a claim event concerns them).
pub fn nodes_of_claim(claim: &ResourceClaim) -> BTreeSet<String> {
    gpu_results(claim).map(|r| r.pool.clone()).collect()
}

/// The allocation results of a claim that are devices of fakegpu's GPU driver.
fn gpu_results(claim: &ResourceClaim) -> impl Iterator<Item = &DeviceRequestAllocationResult> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|devices| devices.results.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.driver == resource::GPU_DRIVER)
}

/// The pod's utilization annotation and why it does not parse, when it does not (the pod then
/// runs at the pool's default; the user hears of it by an Event).
pub fn malformed_utilization(pod: &Pod) -> Option<(String, UtilizationRangeError)> {
    let text = pod.annotations().get(annotation::SIMULATED_UTILIZATION)?;
    text.parse::<UtilizationRange>()
        .err()
        .map(|error| (text.clone(), error))
}

/// Where a pod's utilization comes from when its annotation does not say.
#[derive(Clone, Copy, Debug, Default)]
pub struct Defaults<'a> {
    /// The pool's `spec.utilization.default`.
    pub pool: Option<UtilizationRange>,
    /// The `spec.priorityClassName` of the pod's PodGroup, if it has one.
    pub priority_class: Option<&'a str>,
}

/// The pod's workload type: its `workloadKind` label, else its PodGroup's priority class.
fn workload_type(pod: &Pod, priority_class: Option<&str>) -> Option<WorkloadType> {
    match pod.labels().get(label::WORKLOAD_KIND) {
        Some(kind) => WorkloadType::from_workload_kind(kind),
        None => priority_class.and_then(WorkloadType::from_priority_class),
    }
}

/// A pod's simulated use of each of its GPUs: the utilization its annotation asks for, else its
/// workload type's range (inference: its request rate), else the pool's default, else the
/// reference's 100%; framebuffer by `gpu-fraction` (default all).
pub fn usage(pod: &Pod, defaults: Defaults<'_>, gpu_memory_mib: u64) -> PodGpuUsage {
    let kind = workload_type(pod, defaults.priority_class);
    let annotations = pod.annotations();
    // Run:ai's idle-GPU pods hold a GPU and do nothing with it (the reference's rule).
    let idle = pod.name_any().starts_with(IDLE_POD_PREFIX);
    let range = annotations
        .get(annotation::SIMULATED_UTILIZATION)
        .and_then(|text| text.parse::<UtilizationRange>().ok())
        .or(idle.then_some(UtilizationRange { min: 0, max: 0 }))
        .or(kind.map(WorkloadType::range))
        .or(defaults.pool)
        .unwrap_or(UtilizationRange { min: 100, max: 100 });
    let fraction = annotations
        .get(annotation::GPU_FRACTION)
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|f| *f > 0.0 && *f <= 1.0)
        .unwrap_or(1.0);
    // Bounded by the GPU's memory: the cast cannot overflow.
    let by_fraction = (gpu_memory_mib as f64 * fraction) as u64;
    let fb_used = annotations
        .get(annotation::GPU_MEMORY)
        .and_then(|text| text.trim().parse::<u64>().ok())
        .filter(|mib| *mib > 0)
        .map_or(by_fraction, |mib| mib.min(gpu_memory_mib));
    PodGpuUsage {
        utilization: UtilizationBounds {
            min: range.min,
            max: range.max,
        },
        fb_used,
        use_knative_utilization: kind.is_some_and(WorkloadType::uses_knative),
    }
}

/// Name prefix of Run:ai's idle-GPU pods, which run at 0%.
const IDLE_POD_PREFIX: &str = "runai-idle-gpu-";

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

/// What a slot is: a whole GPU or a MIG instance of a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Gpu,
    Mig(String),
}

/// One thing a pod can hold: a whole GPU, or a MIG instance of a partitioned GPU.
struct Slot<'a> {
    kind: Kind,
    /// The GPU's or the instance's UUID, and the GPU's index.
    uuid: String,
    index: u32,
    /// Its device name in the node's ResourceSlice (what claims name).
    name: String,
    /// Framebuffer of a MIG instance, MiB (a pod cannot use more).
    memory: Option<u64>,
    previous: GpuStatus,
    status: &'a mut GpuStatus,
}

impl Slot<'_> {
    fn take(&mut self, user: &GpuUser) {
        if self.status.allocated_by.pod.is_empty() {
            self.status.allocated_by = user.holder();
        }
        // A reservation pod holds the GPU for the pods sharing it and uses none of it.
        if user.sharing.is_reservation() {
            return;
        }
        let mut usage = user.usage.clone();
        if let Some(memory) = self.memory {
            usage.fb_used = usage.fb_used.min(memory);
        }
        self.status
            .pod_gpu_usage_status
            .insert(user.uid.clone(), usage);
    }
}

/// The slots of a document, statuses emptied (their previous content kept aside).
fn slots(gpus: &mut [GpuTopology]) -> Vec<Slot<'_>> {
    let mut slots = Vec::new();
    for GpuTopology {
        id,
        index,
        status,
        mig_devices,
        ..
    } in gpus.iter_mut()
    {
        let previous = std::mem::take(status);
        if mig_devices.is_empty() {
            slots.push(Slot {
                kind: Kind::Gpu,
                uuid: id.clone(),
                index: *index,
                name: gpu_device_name(*index),
                memory: None,
                previous,
                status,
            });
            continue;
        }
        for mig in mig_devices.iter_mut() {
            slots.push(Slot {
                // As pods request it: the profile's published name.
                kind: Kind::Mig(published_mig_name(&mig.profile)),
                uuid: mig.uuid.clone(),
                index: *index,
                name: mig_device_name(*index, mig),
                memory: Some(mig.memory),
                previous: std::mem::take(&mut mig.status),
                status: &mut mig.status,
            });
        }
    }
    slots
}

/// Records `users` in `gpus` and their MIG instances, replacing what was recorded (holders
/// that are gone are freed). Claims hold what the scheduler allocated; extended-resource pods
/// hold what their kubelet gave them (where a node agent reported it), then, oldest first, keep
/// what they held and then get the lowest free slots of their kind:
/// `nvidia.com/gpu` whole GPUs (MIG instances under the `single` strategy),
/// `nvidia.com/mig-<profile>` instances of that profile.
/// A pod the node's GPUs could not serve as asked: more GPUs than were left (device-plugin
/// pods and DRA claims on one node draw on the same GPUs), or a GPU the kubelet gave it that
/// a claim holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overbooking {
    pub namespace: String,
    pub pod: String,
    pub what: String,
}

impl std::fmt::Display for Overbooking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}: {}", self.namespace, self.pod, self.what)
    }
}

pub fn assign(gpus: &mut [GpuTopology], users: &[GpuUser], mig_single: bool) -> Vec<Overbooking> {
    let mut slots = slots(gpus);
    for user in users {
        for slot in slots.iter_mut().filter(|s| user.claimed.contains(&s.name)) {
            slot.take(user);
        }
    }

    let mut waiting: Vec<&GpuUser> = users
        .iter()
        .filter(|u| u.extended > 0 || !u.mig.is_empty())
        .collect();
    waiting.sort_by(|a, b| {
        let created = |u: &GpuUser| u.created.as_ref().map(|t| t.0);
        (created(a), &a.namespace, &a.pod).cmp(&(created(b), &b.namespace, &b.pod))
    });
    // (user, which slots serve the request, how many)
    type Matcher = Box<dyn Fn(&Kind) -> bool>;
    let mut demands: Vec<(&GpuUser, Matcher, u32)> = Vec::new();
    // The resource each demand asks for, for what cannot be served.
    let mut resources: Vec<String> = Vec::new();
    for user in waiting {
        if user.extended > 0 {
            let matcher: Matcher = if mig_single {
                Box::new(|k: &Kind| matches!(k, Kind::Mig(_)))
            } else {
                Box::new(|k: &Kind| *k == Kind::Gpu)
            };
            demands.push((user, matcher, user.extended));
            resources.push(resource::GPU.to_owned());
        }
        // A single-strategy node advertises no nvidia.com/mig-<profile>.
        for (profile, count) in user.mig.iter().filter(|_| !mig_single) {
            resources.push(format!("{}{profile}", resource::MIG_PREFIX));
            let profile = profile.clone();
            let matcher: Matcher = Box::new(move |k: &Kind| *k == Kind::Mig(profile.clone()));
            demands.push((user, matcher, *count));
        }
    }
    let mut overbooked = Vec::new();
    let overbooking = |user: &GpuUser, what: String| Overbooking {
        namespace: user.namespace.clone(),
        pod: user.pod.clone(),
        what,
    };
    // A GPU the kubelet gave a device-plugin pod that a claim holds: both containers see it.
    for user in users.iter().filter(|u| !u.given.is_empty()) {
        for slot in slots.iter().filter(|s| user.given.contains(&s.uuid)) {
            let holder = &slot.status.allocated_by;
            if slot.status.in_use()
                && (holder.namespace != user.namespace || holder.pod != user.pod)
            {
                overbooked.push(overbooking(
                    user,
                    format!(
                        "the kubelet gave it {}, which {}/{} holds by claim",
                        slot.uuid, holder.namespace, holder.pod
                    ),
                ));
            }
        }
    }
    // What the kubelet gave a pod is what its container sees: first. Then each pod keeps
    // what it was recorded on (its annotation outlives the document), then what the document
    // says it held, as far as it is still free.
    let mut held: Vec<u32> = vec![0; demands.len()];
    let given = |user: &GpuUser, slot: &Slot<'_>| user.given.contains(&slot.uuid);
    let recorded = |user: &GpuUser, slot: &Slot<'_>| user.recorded.contains(&slot.uuid);
    let previous = |user: &GpuUser, slot: &Slot<'_>| user.holds(&slot.previous);
    for rule in [
        &given as &dyn Fn(&GpuUser, &Slot<'_>) -> bool,
        &recorded,
        &previous,
    ] {
        for ((user, matches, count), held) in demands.iter().zip(held.iter_mut()) {
            for slot in slots.iter_mut() {
                if *held < *count
                    && matches(&slot.kind)
                    && rule(user, slot)
                    && !slot.status.in_use()
                {
                    slot.take(user);
                    *held += 1;
                }
            }
        }
    }
    // Then the lowest free slots, oldest pod first.
    for (((user, matches, count), held), resource) in demands.iter().zip(held).zip(&resources) {
        let free = slots
            .iter_mut()
            .filter(|s| matches(&s.kind) && !s.status.in_use());
        let mut got = held;
        for slot in free.take((count - held) as usize) {
            slot.take(user);
            got += 1;
        }
        if got < *count {
            overbooked.push(overbooking(
                user,
                format!("asks for {count} {resource}, the node had {got} left"),
            ));
        }
    }
    // Pods sharing a GPU use what their reservation pods now hold.
    for sharer in users
        .iter()
        .filter(|u| matches!(u.sharing, Sharing::Shares { .. }))
    {
        for at in shared_slots(sharer, &slots, users) {
            slots[at].take(sharer);
        }
    }
    overbooked
}

/// The slots a sharing pod uses: the one its `runai-gpu` names (as the reservation pod's
/// annotation has it, or the GPU's UUID, or its index as older Run:ai releases wrote it), else
/// every slot a reservation pod of its group holds (a pod may share several GPUs).
fn shared_slots(sharer: &GpuUser, slots: &[Slot<'_>], users: &[GpuUser]) -> Vec<usize> {
    let Sharing::Shares { gpu, group } = &sharer.sharing else {
        return Vec::new();
    };
    let reserved: Vec<(usize, &Option<String>, &Option<String>)> = slots
        .iter()
        .enumerate()
        .filter_map(|(at, slot)| {
            users.iter().find_map(|user| match &user.sharing {
                Sharing::Reservation { reserved, group } if user.holds(slot.status) => {
                    Some((at, reserved, group))
                }
                _ => None,
            })
        })
        .collect();
    let named = gpu.as_ref().and_then(|gpu| {
        reserved.iter().find(|(at, reserved, _)| {
            let slot = &slots[*at];
            reserved.as_ref() == Some(gpu) || slot.uuid == *gpu || slot.index.to_string() == *gpu
        })
    });
    if let Some((at, _, _)) = named {
        return vec![*at];
    }
    reserved
        .iter()
        .filter(|(_, _, held_for)| group.is_some() && *held_for == group)
        .map(|(at, _, _)| *at)
        .collect()
}

/// Pods asking for GPUs as an extended resource whose [`annotation::ASSIGNED_GPUS`] does not
/// name what they hold now, with the list to write: `(namespace, pod, uuids)`. Pods that hold
/// nothing yet (more asked for than is free) are left alone.
pub fn unrecorded_assignments(
    gpus: &[GpuTopology],
    users: &[GpuUser],
) -> Vec<(String, String, String)> {
    users
        .iter()
        .filter(|u| u.extended > 0 || !u.mig.is_empty())
        .filter_map(|user| {
            // What it holds by its claims is the claims' to say.
            let mut held = BTreeSet::new();
            for gpu in gpus {
                if user.holds(&gpu.status) && !user.claimed.contains(&gpu_device_name(gpu.index)) {
                    held.insert(gpu.id.clone());
                }
                for mig in &gpu.mig_devices {
                    let name = mig_device_name(gpu.index, mig);
                    if user.holds(&mig.status) && !user.claimed.contains(&name) {
                        held.insert(mig.uuid.clone());
                    }
                }
            }
            (!held.is_empty() && held != user.recorded).then(|| {
                let list = held.into_iter().collect::<Vec<_>>().join(",");
                (user.namespace.clone(), user.pod.clone(), list)
            })
        })
        .collect()
}

/// Reservation pods that hold a GPU but do not say which yet (annotation
/// [`annotation::RESERVED_GPU`]), with the UUID to write: `(namespace, pod, uuid)`.
pub fn unannounced_reservations(
    gpus: &[GpuTopology],
    users: &[GpuUser],
) -> Vec<(String, String, String)> {
    users
        .iter()
        .filter(|u| matches!(u.sharing, Sharing::Reservation { reserved: None, .. }))
        .filter_map(|user| {
            let (uuid, _) = gpus
                .iter()
                .flat_map(GpuTopology::statuses)
                .find(|(_, status)| user.holds(status))?;
            Some((user.namespace.clone(), user.pod.clone(), uuid.to_owned()))
        })
        .collect()
}

/// GPUs of a document that some pod holds or uses (itself or one of its MIG instances).
pub fn allocated_count(gpus: &[GpuTopology]) -> u32 {
    u32::try_from(gpus.iter().filter(|g| g.in_use()).count()).unwrap_or(u32::MAX)
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
