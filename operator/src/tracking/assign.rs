//! Which pod holds which GPU or MIG instance of a node: claims first, then what the kubelet
//! gave, what was recorded, what the document said, then the lowest free slots.

use std::collections::BTreeSet;

use fakegpu_api::dra::{gpu_device_name, mig_device_name};
use fakegpu_model::{
    names::resource,
    profiles::published_mig_name,
    topology::{GpuStatus, GpuTopology},
};

use super::{sharing::Sharing, user::GpuUser};

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
    // (user, which slots serve the request, how many, the resource asked for)
    type Matcher = Box<dyn Fn(&Kind) -> bool>;
    let mut demands: Vec<(&GpuUser, Matcher, u32, String)> = Vec::new();
    for user in waiting {
        if user.extended > 0 {
            let matcher: Matcher = if mig_single {
                Box::new(|k: &Kind| matches!(k, Kind::Mig(_)))
            } else {
                Box::new(|k: &Kind| *k == Kind::Gpu)
            };
            demands.push((user, matcher, user.extended, resource::GPU.to_owned()));
        }
        // A single-strategy node advertises no nvidia.com/mig-<profile>.
        for (profile, count) in user.mig.iter().filter(|_| !mig_single) {
            let asked = format!("{}{profile}", resource::MIG_PREFIX);
            let profile = profile.clone();
            let matcher: Matcher = Box::new(move |k: &Kind| *k == Kind::Mig(profile.clone()));
            demands.push((user, matcher, *count, asked));
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
        for ((user, matches, count, _), held) in demands.iter().zip(held.iter_mut()) {
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
    for ((user, matches, count, resource), held) in demands.iter().zip(held) {
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
/// every slot a reservation pod of one of its groups holds (a pod may share several GPUs).
fn shared_slots(sharer: &GpuUser, slots: &[Slot<'_>], users: &[GpuUser]) -> Vec<usize> {
    let Sharing::Shares { gpu, groups } = &sharer.sharing else {
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
        .filter(|(_, _, held_for)| held_for.as_ref().is_some_and(|g| groups.contains(g)))
        .map(|(at, _, _)| *at)
        .collect()
}

/// Pods asking for GPUs as an extended resource whose [`fakegpu_model::names::annotation::ASSIGNED_GPUS`] does not
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
/// [`fakegpu_model::names::annotation::RESERVED_GPU`]), with the UUID to write: `(namespace, pod, uuid)`.
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
    use std::collections::BTreeSet;

    use serde_json::json;

    use crate::tracking::{fixtures::*, *};

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
    fn a_pod_whose_claim_was_never_prepared_holds_nothing() {
        // Bound with a claim its node's driver cannot prepare: Pending, no sandbox, for good.
        let mut stuck = claimant("stuck", "2026-01-01T00:00:00Z", "gpu");
        stuck.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "PodReadyToStartContainers", "status": "False"}]}))
        .expect("status");
        let stuck = gpu_user(
            &stuck,
            "n",
            |_| Some(claim(&[("n", "gpu-0")])),
            Defaults::default(),
            1000,
            &reservations(),
        );
        assert_eq!(stuck, None);
        // The kubelet gave the same GPU to a device-plugin pod: it is the holder.
        let mut given = user(&asking("given", "2026-01-02T00:00:00Z", 1), &[]);
        given.given = ["GPU-0".to_owned()].into();
        let mut topology = gpus(2);
        let overbooked = assign(&mut topology, &[given], false);
        assert!(overbooked.is_empty(), "{overbooked:?}");
        assert_eq!(holders(&topology), ["given", ""]);
        // Pending with its sandbox up: prepared (the images may still be pulling).
        let mut starting = claimant("starting", "2026-01-01T00:00:00Z", "gpu");
        starting.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True"}]}))
        .expect("status");
        let starting = user(&starting, &[claim(&[("n", "gpu-0")])]);
        assert_eq!(starting.claimed, BTreeSet::from(["gpu-0".to_owned()]));
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
    fn pods_the_gpus_cannot_serve_are_reported() {
        let claimant = user(
            &claimant("claimant", "2026-01-01T00:00:00Z", "gpu"),
            &[claim(&[("n", "gpu-0")])],
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
        let claimant = user(
            &claimant("claimant", "2026-01-01T00:00:02Z", "mig"),
            &[claim_for("mig", &[("n", "gpu-0-mig-3g40gb-9-0")])],
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

/// [`assign`] over generated pods asking for whole GPUs: no GPU goes to two pods, a pod gets
/// what it asks for while GPUs are left (oldest first) and is reported otherwise, and a pod
/// keeps its GPUs when the document is recomputed, others leave or newcomers arrive (one that
/// was short may then get what was freed).
#[cfg(test)]
mod properties {
    use std::collections::BTreeMap;

    use fakegpu_model::topology::GpuTopology;
    use proptest::prelude::*;

    use crate::tracking::{fixtures::*, *};

    /// Pods `p0`, `p1`, ... created a day apart, each asking for its number of GPUs.
    fn users(asks: &[u32]) -> Vec<GpuUser> {
        asks.iter()
            .enumerate()
            .map(|(i, gpus)| {
                let created = format!("2026-01-{:02}T00:00:00Z", i + 1);
                user(&asking(&format!("p{i}"), &created, *gpus), &[])
            })
            .collect()
    }

    /// Which GPUs each pod holds, by pod name; and whether any GPU is used by two pods.
    fn holdings(topology: &[GpuTopology]) -> (BTreeMap<String, Vec<u32>>, bool) {
        let mut held: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        let mut shared = false;
        for gpu in topology {
            let users = &gpu.status.pod_gpu_usage_status;
            shared |= users.len() > 1;
            let holder = &gpu.status.allocated_by.pod;
            if !holder.is_empty() {
                held.entry(holder.clone()).or_default().push(gpu.index);
                shared |= users.keys().any(|uid| *uid != format!("uid-{holder}"));
            }
        }
        (held, shared)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn gpus_go_to_one_pod_each_oldest_first(
            count in 0..9_u32,
            asks in proptest::collection::vec(1..4_u32, 0..6),
            order in any::<prop::sample::Index>(),
        ) {
            let mut topology = gpus(count);
            let mut pods = users(&asks);
            // The order pods are listed in does not matter; their age does.
            if !pods.is_empty() {
                let by = order.index(pods.len());
                pods.rotate_left(by);
            }
            let overbooked = assign(&mut topology, &pods, false);
            let (held, shared) = holdings(&topology);
            prop_assert!(!shared, "{topology:?}");
            let mut left = count;
            for (i, asked) in asks.iter().enumerate() {
                let got = held.get(&format!("p{i}")).map_or(0, Vec::len) as u32;
                prop_assert_eq!(got, (*asked).min(left), "p{} of {:?} on {}", i, asks, count);
                left -= got;
                let reported = overbooked.iter().any(|o| o.pod == format!("p{i}"));
                prop_assert_eq!(reported, got < *asked);
            }
            prop_assert_eq!(allocated_count(&topology), count - left);
        }

        #[test]
        fn pods_keep_their_gpus_when_others_come_and_go(
            count in 1..9_u32,
            asks in proptest::collection::vec(1..3_u32, 1..6),
            leaving in proptest::collection::vec(any::<bool>(), 6),
            newcomers in proptest::collection::vec(1..3_u32, 0..3),
        ) {
            let mut topology = gpus(count);
            let pods = users(&asks);
            assign(&mut topology, &pods, false);
            let (before, _) = holdings(&topology);
            // The same pods again: nothing moves.
            let first = topology.clone();
            assign(&mut topology, &pods, false);
            prop_assert_eq!(&topology, &first);
            // Some leave, newer pods come (created after every pod above).
            let staying: Vec<GpuUser> = pods.iter().zip(&leaving)
                .filter(|(_, leaves)| !**leaves)
                .map(|(pod, _)| pod.clone())
                .collect();
            let mut next = staying.clone();
            for (i, gpus) in newcomers.iter().enumerate() {
                let created = format!("2026-02-{:02}T00:00:00Z", i + 1);
                next.push(user(&asking(&format!("new{i}"), &created, *gpus), &[]));
            }
            assign(&mut topology, &next, false);
            let (after, shared) = holdings(&topology);
            prop_assert!(!shared);
            // A pod keeps every GPU it held; one that was short may get what others freed.
            for pod in &staying {
                let held = before.get(&pod.pod).cloned().unwrap_or_default();
                let now = after.get(&pod.pod).cloned().unwrap_or_default();
                prop_assert!(held.iter().all(|gpu| now.contains(gpu)), "{} moved: {held:?} -> {now:?}", pod.pod);
                prop_assert!(now.len() <= pod.extended as usize);
            }
            for (pod, _) in pods.iter().zip(&leaving).filter(|(_, leaves)| **leaves) {
                prop_assert!(!after.contains_key(&pod.pod), "{} left but holds GPUs", pod.pod);
            }
        }
    }
}
