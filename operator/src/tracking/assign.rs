//! Which pod holds which GPU or MIG instance of a node: claims first, then what the kubelet
//! gave, what was recorded, what the document said, then the lowest free slots.

use super::*;

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
