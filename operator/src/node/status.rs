//! What the operator writes into a node: its labels (see [`super::labels`]), the extended
//! resources of KWOK nodes (no kubelet and no device plugin runs for them, as the reference's
//! kwok-gpu-device-plugin does it) and the `gpu-fractioning.nvidia.com/Ready` condition of
//! fake-backend pool nodes.
//!
//! All go in one strategic merge patch of the status subresource (whose writes keep metadata
//! changes: the API server resets only a node's `spec` there) under fakegpu's field manager, so
//! the API server records which entries fakegpu set. A patch takes back, by setting them to
//! null, exactly the entries fakegpu set and no one else did that its intent no longer has
//! ([`Leftovers`]); entries and labels that KWOK, the kubelet or a user set are never touched.
//! Nodes written by an apply (fakegpu before 2026-12) are read the same way: ownership is
//! fakegpu's managed fields entries, whatever their operation.

use std::collections::BTreeMap;

use fakegpu_api::{
    GpuNodePool,
    pool::{Backend, Interfaces, MigStrategy, resolve::ResolvedGpu},
};
use fakegpu_model::names::{
    condition::{GPU_FAULT, GPU_FRACTIONING_READY},
    resource::{self, mig_resource},
};
use k8s_openapi::{
    api::core::v1::NodeCondition,
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::Time},
};
use kube::ResourceExt;

use super::{
    cached::{CachedNode, OwnedStatus},
    labels::labels_current,
};

/// What fakegpu wants on a node: its labels, annotations and status entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeIntent {
    /// Every label of the operator's (see [`super::labels::desired_labels`]).
    pub labels: BTreeMap<String, String>,
    /// Every annotation of the operator's (Run:ai's MIG mapping, see [`super::dynamic_mig`]).
    pub annotations: BTreeMap<String, String>,
    /// Capacity; allocatable is the same less the unhealthy GPUs.
    pub resources: BTreeMap<String, Quantity>,
    /// GPUs left out of allocatable, as the kubelet leaves out a device plugin's unhealthy
    /// devices.
    pub unhealthy_gpus: u32,
    pub fractioning: Option<NodeCondition>,
    /// The `fakegpu.dev/GpuFault` condition while faults are injected (see [`super::faults`]).
    pub fault: Option<NodeCondition>,
}

impl NodeIntent {
    /// Allocatable: the capacity less the unhealthy GPUs.
    pub fn allocatable(&self) -> BTreeMap<String, Quantity> {
        allocatable(&self.resources, self.unhealthy_gpus)
    }

    /// The intent without its timestamps: what two computations of the same intent share.
    pub fn timeless(&self) -> Self {
        let mut intent = self.clone();
        for condition in [&mut intent.fractioning, &mut intent.fault]
            .into_iter()
            .flatten()
        {
            condition.last_transition_time = None;
        }
        intent
    }

    fn conditions(&self) -> Vec<&NodeCondition> {
        self.fractioning.iter().chain(&self.fault).collect()
    }
}

/// Extended resources of a KWOK node of `pool`: when the node serves the device plugin
/// interface (`served`, see [`super::interfaces`]), `nvidia.com/gpu` (whole GPUs; under MIG
/// `single`, the instances) and, under MIG `mixed`, `nvidia.com/mig-<profile>` per profile; and
/// the pool's other resources. Nodes with a kubelet get theirs from the node agent's device
/// plugin; mock pools from NVIDIA's.
pub fn desired_resources(
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
    kwok: bool,
    served: &Interfaces,
) -> BTreeMap<String, Quantity> {
    if !kwok || pool.spec.gpu.backend != Backend::Fake {
        return BTreeMap::new();
    }
    let gpus = served
        .device_plugin
        .then(|| gpu_resources(gpu))
        .into_iter()
        .flatten();
    let others = pool
        .spec
        .other_resources
        .iter()
        .map(|r| (r.name.clone(), Quantity(r.count.to_string())));
    gpus.into_iter().chain(others).collect()
}

/// What the device plugin advertises for the pool's GPUs.
fn gpu_resources(gpu: &ResolvedGpu) -> Vec<(String, Quantity)> {
    let count = |n: u32| Quantity(n.to_string());
    match &gpu.mig {
        None => vec![(resource::GPU.to_owned(), count(gpu.count))],
        Some(plan) if plan.strategy == MigStrategy::Single => {
            vec![(resource::GPU.to_owned(), count(plan.instances()))]
        }
        Some(plan) => {
            let whole = (0..gpu.count).filter(|g| !plan.is_partitioned(*g)).count() as u32;
            let mut resources = vec![(resource::GPU.to_owned(), count(whole))];
            resources.extend(
                plan.counts()
                    .into_iter()
                    .map(|(name, (n, _))| (mig_resource(name), count(n))),
            );
            resources
        }
    }
}

/// `capacity` less `unhealthy` GPUs.
pub fn allocatable(
    capacity: &BTreeMap<String, Quantity>,
    unhealthy: u32,
) -> BTreeMap<String, Quantity> {
    let mut allocatable = capacity.clone();
    if let Some(gpus) = allocatable.get_mut(resource::GPU)
        && let Ok(count) = gpus.0.parse::<u32>()
    {
        *gpus = Quantity(count.saturating_sub(unhealthy).to_string());
    }
    allocatable
}

fn allocatable_gpus(resources: Option<&BTreeMap<String, Quantity>>) -> bool {
    resources
        .and_then(|r| r.get(resource::GPU))
        .and_then(|q| q.0.parse::<u64>().ok())
        .is_some_and(|count| count > 0)
}

pub(super) fn current_condition<'a>(
    node: &'a CachedNode,
    type_: &str,
) -> Option<&'a NodeCondition> {
    node.trimmed()
        .conditions
        .as_ref()
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == type_))
}

/// What fakegpu set in a node (and no one else did) that its intent no longer has: the patch
/// writes each as null (a condition: `$patch: delete`), which removes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Leftovers {
    labels: Vec<String>,
    annotations: Vec<String>,
    capacity: Vec<String>,
    allocatable: Vec<String>,
    conditions: Vec<String>,
}

impl Leftovers {
    /// `owned` and `labels` (fakegpu's only) less what `intent` has.
    pub fn new(owned: Option<&OwnedStatus>, labels: &[String], intent: &NodeIntent) -> Self {
        // Asked by every currency check: only the leftovers are copied, not the summary.
        let none = OwnedStatus::default();
        let owned = owned.unwrap_or(&none);
        let not_in = |keys: &[String], wanted: &dyn Fn(&str) -> bool| {
            keys.iter().filter(|key| !wanted(key)).cloned().collect()
        };
        let wanted_conditions: Vec<&str> = intent
            .conditions()
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        Self {
            labels: not_in(labels, &|key| intent.labels.contains_key(key)),
            annotations: not_in(&owned.annotations, &|key| {
                intent.annotations.contains_key(key)
            }),
            capacity: not_in(&owned.capacity, &|key| intent.resources.contains_key(key)),
            allocatable: not_in(&owned.allocatable, &|key| {
                intent.resources.contains_key(key)
            }),
            conditions: not_in(&owned.conditions, &|key| wanted_conditions.contains(&key)),
        }
    }
}

/// Whether fakegpu set the condition of `type_` (and no one else did).
fn owns_condition(node: &CachedNode, type_: &str) -> bool {
    OwnedStatus::of(node).is_some_and(|owned| owned.conditions.iter().any(|c| c == type_))
}

/// The fractioning condition a node of `pool` should carry: on fake-backend pools once
/// `nvidia.com/gpu` is allocatable (from `resources` on KWOK nodes, from the kubelet elsewhere),
/// unless another controller already owns a condition of that type. The transition time is
/// kept while the condition holds, so a resync writes nothing.
pub fn desired_fractioning(
    node: &CachedNode,
    pool: &GpuNodePool,
    resources: &BTreeMap<String, Quantity>,
    now: &Time,
) -> Option<NodeCondition> {
    if pool.spec.gpu.backend != Backend::Fake {
        return None;
    }
    let current = current_condition(node, GPU_FRACTIONING_READY);
    if current.is_some() && !owns_condition(node, GPU_FRACTIONING_READY) {
        return None;
    }
    let observed = node.trimmed().allocatable.as_ref();
    if !allocatable_gpus(Some(resources)) && !allocatable_gpus(observed) {
        return None;
    }
    let since = current
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Some(NodeCondition {
        type_: GPU_FRACTIONING_READY.to_owned(),
        status: "True".to_owned(),
        reason: Some("GpusAllocatable".to_owned()),
        message: Some(
            "nvidia.com/gpu is allocatable; fakegpu simulates the node's GPUs".to_owned(),
        ),
        last_transition_time: Some(since),
        last_heartbeat_time: None,
    })
}

/// Whether the node's status and annotations already are what fakegpu wants of it: the
/// desired entries with the desired values, and none of fakegpu's left that it no longer wants.
/// An entry someone else wrote with the very value fakegpu wants counts: a patch that changes
/// nothing would not make it fakegpu's either.
pub fn status_current(node: &CachedNode, intent: &NodeIntent) -> bool {
    if Leftovers::new(OwnedStatus::of(node), &[], intent) != Leftovers::default() {
        return false;
    }
    let annotations_match = intent
        .annotations
        .iter()
        .all(|(key, value)| node.annotations().get(key) == Some(value));
    let trimmed = node.trimmed();
    let wanted_allocatable = intent.allocatable();
    let values_match = intent.resources.iter().all(|(name, value)| {
        let capacity = trimmed.capacity.as_ref().and_then(|c| c.get(name));
        let allocatable = trimmed.allocatable.as_ref().and_then(|a| a.get(name));
        capacity == Some(value) && allocatable == wanted_allocatable.get(name)
    });
    let condition_matches = |type_: &str, wanted: &Option<NodeCondition>| match wanted {
        Some(wanted) => current_condition(node, type_).is_some_and(|c| {
            (&c.status, &c.reason, &c.message) == (&wanted.status, &wanted.reason, &wanted.message)
        }),
        None => true,
    };
    annotations_match
        && values_match
        && condition_matches(GPU_FRACTIONING_READY, &intent.fractioning)
        && condition_matches(GPU_FAULT, &intent.fault)
}

/// Whether the node already is what fakegpu wants of it: labels and status entries.
pub fn node_current(node: &CachedNode, intent: &NodeIntent) -> bool {
    labels_current(node, &intent.labels) && status_current(node, intent)
}

/// Whether KWOK has given the node its status yet: an allocatable entry that is not fakegpu's.
/// KWOK's node-initialize Stage keeps the allocatable a node has and writes its defaults (cpu,
/// memory, pods) only when there is none, and replaces the conditions; applied before it, our
/// capacity would become the node's whole allocatable, without `pods`, and the scheduler would
/// find room for no pod at all ("Too many pods").
pub fn kwok_initialized(node: &CachedNode) -> bool {
    let ours = OwnedStatus::of(node)
        .map(|owned| owned.allocatable.as_slice())
        .unwrap_or_default();
    node.trimmed()
        .allocatable
        .as_ref()
        .is_some_and(|allocatable| allocatable.keys().any(|name| !ours.contains(name)))
}

/// The body of the status patch for `intent`, labels and annotations included: what it wants,
/// and `leftovers` removed. With `resource_version` the API server refuses the patch (409) if
/// the node changed since it was read, so that what is taken back is what fakegpu saw.
pub fn node_patch(
    intent: &NodeIntent,
    leftovers: &Leftovers,
    resource_version: Option<&str>,
) -> serde_json::Value {
    fn map<V: serde::Serialize>(
        wanted: &BTreeMap<String, V>,
        gone: &[String],
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut map: serde_json::Map<_, _> = gone
            .iter()
            .map(|key| (key.clone(), serde_json::Value::Null))
            .collect();
        for (key, value) in wanted {
            map.insert(key.clone(), serde_json::json!(value));
        }
        map
    }
    let mut metadata = serde_json::Map::new();
    let mut status = serde_json::Map::new();
    // Empty maps and lists are left out: they would change nothing.
    let put = |into: &mut serde_json::Map<_, _>, key: &str, value: serde_json::Value| {
        let empty = match &value {
            serde_json::Value::Object(map) => map.is_empty(),
            serde_json::Value::Array(list) => list.is_empty(),
            _ => false,
        };
        if !empty {
            into.insert(key.to_owned(), value);
        }
    };
    put(
        &mut metadata,
        "labels",
        map(&intent.labels, &leftovers.labels).into(),
    );
    put(
        &mut metadata,
        "annotations",
        map(&intent.annotations, &leftovers.annotations).into(),
    );
    if let Some(version) = resource_version {
        put(&mut metadata, "resourceVersion", version.into());
    }
    put(
        &mut status,
        "capacity",
        map(&intent.resources, &leftovers.capacity).into(),
    );
    put(
        &mut status,
        "allocatable",
        map(&intent.allocatable(), &leftovers.allocatable).into(),
    );
    let conditions = intent
        .conditions()
        .into_iter()
        .map(|c| serde_json::json!(c))
        .chain(
            leftovers
                .conditions
                .iter()
                .map(|type_| serde_json::json!({"type": type_, "$patch": "delete"})),
        )
        .collect();
    put(
        &mut status,
        "conditions",
        serde_json::Value::Array(conditions),
    );
    serde_json::json!({"metadata": metadata, "status": status})
}

#[cfg(test)]
mod tests {
    use fakegpu_api::pool::resolve::resolve;
    use serde_json::json;

    use k8s_openapi::api::core::v1::Node;

    use super::*;
    use crate::{
        kit::cache::Cached,
        testing::{pool, time},
    };

    fn node(value: serde_json::Value) -> CachedNode {
        Cached::new(serde_json::from_value(value).expect("test node"))
    }

    /// A node whose status fakegpu applied with `intent`, as its cache holds it.
    fn applied(intent: &NodeIntent) -> CachedNode {
        Cached::new(applied_node(intent))
    }

    /// A node whose status fakegpu applied with `intent`, as the API server would record it.
    fn applied_node(intent: &NodeIntent) -> Node {
        let mut fields = json!({"f:status": {"f:capacity": {}, "f:allocatable": {}}});
        for name in intent.resources.keys() {
            fields["f:status"]["f:capacity"][format!("f:{name}")] = json!({});
            fields["f:status"]["f:allocatable"][format!("f:{name}")] = json!({});
        }
        if intent.fractioning.is_some() {
            fields["f:status"]["f:conditions"] =
                json!({format!("k:{}", json!({"type": GPU_FRACTIONING_READY})): {}});
        }
        for key in intent.annotations.keys() {
            fields["f:metadata"]["f:annotations"][format!("f:{key}")] = json!({});
        }
        let mut resources = json!({"cpu": "1k"});
        let mut allocatable = resources.clone();
        for (name, value) in &intent.resources {
            resources[name] = json!(value.0);
        }
        for (name, value) in &intent.allocatable() {
            allocatable[name] = json!(value.0);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "n", "annotations": intent.annotations, "managedFields": [
                {"manager": "fakegpu", "operation": "Apply", "subresource": "status", "fieldsV1": fields}]},
            "status": {"capacity": resources, "allocatable": allocatable,
                "conditions": intent.fractioning.iter().collect::<Vec<_>>()},
        }))
        .expect("test node")
    }

    #[test]
    fn mig_pools_advertise_their_instances() {
        let mixed = pool(
            "m",
            1,
            json!({"gpu": {"profile": "a100-80gb"}, "mig": {"strategy": "mixed", "layout": [
                {"gpus": [0, 1], "profiles": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]}}),
        );
        let gpu = fakegpu_api::pool::resolve::resolve_pool(&mixed.spec).expect("resolves");
        let resources = desired_resources(&mixed, &gpu, true, &mixed.spec.interfaces);
        let counts: Vec<(&str, &str)> = resources
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect();
        assert_eq!(
            counts,
            [
                ("nvidia.com/gpu", "6"),
                ("nvidia.com/mig-1g.10gb", "4"),
                ("nvidia.com/mig-2g.20gb", "2"),
                ("nvidia.com/mig-3g.40gb", "2"),
            ]
        );
        let single = pool(
            "s",
            1,
            json!({"gpu": {"profile": "a100-80gb", "count": 2}, "mig": {"strategy": "single",
                "layout": [{"profiles": ["3g.40gb", "3g.40gb"]}]}}),
        );
        let gpu = fakegpu_api::pool::resolve::resolve_pool(&single.spec).expect("resolves");
        assert_eq!(
            desired_resources(&single, &gpu, true, &single.spec.interfaces)["nvidia.com/gpu"].0,
            "4"
        );
        // `+` is not valid in a resource name: NVIDIA's device plugin writes `.`.
        let media = pool(
            "me",
            1,
            json!({"gpu": {"profile": "h100", "count": 1}, "mig": {"strategy": "mixed",
                "layout": [{"profiles": ["1g.10gb+me"]}]}}),
        );
        let gpu = fakegpu_api::pool::resolve::resolve_pool(&media.spec).expect("resolves");
        let names: Vec<String> = desired_resources(&media, &gpu, true, &media.spec.interfaces)
            .into_keys()
            .collect();
        assert_eq!(names, ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb.me"]);
    }

    #[test]
    fn kwok_nodes_get_gpus_and_other_resources() {
        let p = pool(
            "p",
            0,
            json!({"gpu": {"profile": "t4"}, "otherResources": [{"name": "nvidia.com/hostdev", "count": 2}]}),
        );
        let gpu = resolve(&p.spec.gpu).expect("resolves");
        let resources = desired_resources(&p, &gpu, true, &p.spec.interfaces);
        assert_eq!(resources["nvidia.com/gpu"].0, "4");
        assert_eq!(resources["nvidia.com/hostdev"].0, "2");
        assert!(desired_resources(&p, &gpu, false, &p.spec.interfaces).is_empty());
        let dra_only = pool(
            "d",
            0,
            json!({"gpu": {"profile": "t4"}, "interfaces": {"devicePlugin": false, "dra": true}}),
        );
        assert!(desired_resources(&dra_only, &gpu, true, &dra_only.spec.interfaces).is_empty());
    }

    #[test]
    fn fractioning_follows_allocatable_gpus_on_fake_pools_only() {
        let fake = pool("p", 0, json!({"gpu": {"profile": "t4"}}));
        let mock = pool("m", 0, json!({"gpu": {"profile": "t4", "backend": "mock"}}));
        let gpus = BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity("4".into()))]);
        let bare = node(json!({"metadata": {"name": "n"}}));
        let condition = desired_fractioning(&bare, &fake, &gpus, &time(5)).expect("set");
        assert_eq!(condition.status, "True");
        assert_eq!(condition.last_transition_time, Some(time(5)));
        assert_eq!(desired_fractioning(&bare, &mock, &gpus, &time(5)), None);
        assert_eq!(
            desired_fractioning(&bare, &fake, &BTreeMap::new(), &time(5)),
            None
        );
        // A kubelet node: the device plugin made the GPUs allocatable.
        let real = node(
            json!({"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}),
        );
        assert!(desired_fractioning(&real, &fake, &BTreeMap::new(), &time(5)).is_some());
    }

    #[test]
    fn a_condition_owned_elsewhere_is_left_alone() {
        let fake = pool("p", 0, json!({"gpu": {"profile": "t4"}}));
        let gpus = BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity("4".into()))]);
        let theirs = node(json!({"metadata": {"name": "n"}, "status": {"conditions": [
            {"type": GPU_FRACTIONING_READY, "status": "False", "reason": "Theirs"}]}}));
        assert_eq!(desired_fractioning(&theirs, &fake, &gpus, &time(5)), None);
    }

    #[test]
    fn an_applied_status_is_current_and_keeps_its_transition_time() {
        let fake = pool("p", 0, json!({"gpu": {"profile": "t4"}}));
        let gpu = resolve(&fake.spec.gpu).expect("resolves");
        let resources = desired_resources(&fake, &gpu, true, &fake.spec.interfaces);
        let bare = node(json!({"metadata": {"name": "n"}}));
        let intent = NodeIntent {
            fractioning: desired_fractioning(&bare, &fake, &resources, &time(1)),
            resources,
            ..Default::default()
        };
        let node = applied(&intent);
        assert!(OwnedStatus::of(&node).is_some());
        assert!(status_current(&node, &intent));
        let again = desired_fractioning(&node, &fake, &intent.resources, &time(9));
        assert_eq!(again, intent.fractioning);
        // The pool shrinks: the owned capacity no longer matches.
        let smaller = NodeIntent {
            resources: BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity("2".into()))]),
            ..intent.clone()
        };
        assert!(!status_current(&node, &smaller));
        // A GPU fails: allocatable no longer matches.
        let failed = NodeIntent {
            unhealthy_gpus: 1,
            ..intent.clone()
        };
        assert!(!status_current(&node, &failed));
        assert!(status_current(&applied(&failed), &failed));
        // Labels are part of the intent: a missing or leftover one makes the node stale.
        let labelled = NodeIntent {
            labels: BTreeMap::from([("nvidia.com/gpu.count".to_owned(), "4".to_owned())]),
            ..intent.clone()
        };
        assert!(node_current(&node, &intent));
        assert!(!node_current(&node, &labelled));
        // The node leaves: an empty intent is not current while fakegpu still owns entries.
        assert!(!status_current(&node, &NodeIntent::default()));
        assert!(status_current(&bare, &NodeIntent::default()));
        // Annotations too: missing, different or left over, the node is stale.
        let annotated = NodeIntent {
            annotations: BTreeMap::from([("run.ai/mig-mapping".to_owned(), "e30=".to_owned())]),
            ..intent.clone()
        };
        assert!(!status_current(&node, &annotated));
        assert!(status_current(&applied(&annotated), &annotated));
        let remapped = NodeIntent {
            annotations: BTreeMap::from([("run.ai/mig-mapping".to_owned(), "other".to_owned())]),
            ..intent.clone()
        };
        assert!(!status_current(&applied(&annotated), &remapped));
        assert!(!status_current(&applied(&annotated), &intent));
        // The cache keeps a summary in place of the managed fields, which it drops.
        assert!(node.trimmed().metadata.managed_fields.is_none());
        assert_eq!(
            OwnedStatus::of(&node),
            OwnedStatus::from_managed_fields(&applied_node(&intent)).as_ref()
        );
        assert!(owns_condition(&node, GPU_FRACTIONING_READY));
        assert!(OwnedStatus::of(&bare).is_none());
    }

    #[test]
    fn the_patch_sets_labels_annotations_capacity_allocatable_and_condition() {
        let intent = NodeIntent {
            labels: BTreeMap::from([("nvidia.com/gpu.count".to_owned(), "8".to_owned())]),
            resources: BTreeMap::from([
                ("nvidia.com/gpu".to_owned(), Quantity("8".into())),
                ("nvidia.com/hostdev".to_owned(), Quantity("2".into())),
            ]),
            unhealthy_gpus: 3,
            fractioning: None,
            fault: None,
            annotations: BTreeMap::new(),
        };
        let patch = node_patch(&intent, &Leftovers::default(), None);
        // No annotation, condition or version: the patch names none, so it sets none.
        assert!(patch["metadata"].get("annotations").is_none());
        assert!(patch["metadata"].get("resourceVersion").is_none());
        assert!(patch["status"].get("conditions").is_none());
        let mapped = NodeIntent {
            annotations: BTreeMap::from([("run.ai/mig-mapping".to_owned(), "e30=".to_owned())]),
            ..intent.clone()
        };
        assert_eq!(
            node_patch(&mapped, &Leftovers::default(), None)["metadata"]["annotations"]["run.ai/mig-mapping"],
            "e30="
        );
        assert_eq!(patch["metadata"]["labels"]["nvidia.com/gpu.count"], "8");
        assert_eq!(patch["status"]["capacity"]["nvidia.com/gpu"], "8");
        assert_eq!(patch["status"]["allocatable"]["nvidia.com/gpu"], "5");
        assert_eq!(patch["status"]["allocatable"]["nvidia.com/hostdev"], "2");
    }

    #[test]
    fn the_patch_takes_back_what_fakegpu_alone_set_and_no_longer_wants() {
        let fake = pool("p", 0, json!({"gpu": {"profile": "t4"}}));
        let gpu = resolve(&fake.spec.gpu).expect("resolves");
        let resources = desired_resources(&fake, &gpu, true, &fake.spec.interfaces);
        let bare = node(json!({"metadata": {"name": "n"}}));
        let before = NodeIntent {
            labels: BTreeMap::from([("nvidia.com/gpu.count".to_owned(), "4".to_owned())]),
            annotations: BTreeMap::from([("run.ai/mig-mapping".to_owned(), "e30=".to_owned())]),
            fractioning: desired_fractioning(&bare, &fake, &resources, &time(1)),
            resources: BTreeMap::from([
                ("nvidia.com/gpu".to_owned(), Quantity("4".into())),
                ("nvidia.com/hostdev".to_owned(), Quantity("2".into())),
            ]),
            ..Default::default()
        };
        // Written by a patch (an Update entry), as fakegpu writes nodes now.
        let mut written = applied_node(&before);
        written.metadata.managed_fields.as_mut().expect("fields")[0].operation =
            Some("Update".to_owned());
        let after = NodeIntent {
            resources: BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity("4".into()))]),
            ..Default::default()
        };
        let owned = OwnedStatus::from_managed_fields(&written);
        let leftovers = Leftovers::new(owned.as_ref(), &["nvidia.com/gpu.count".into()], &after);
        assert!(!status_current(&Cached::new(written.clone()), &after));
        let patch = node_patch(&after, &leftovers, Some("42"));
        assert_eq!(
            patch["metadata"]["labels"],
            json!({"nvidia.com/gpu.count": null})
        );
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({"run.ai/mig-mapping": null})
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(
            patch["status"]["capacity"],
            json!({"nvidia.com/gpu": "4", "nvidia.com/hostdev": null})
        );
        assert_eq!(
            patch["status"]["allocatable"],
            json!({"nvidia.com/gpu": "4", "nvidia.com/hostdev": null})
        );
        assert_eq!(
            patch["status"]["conditions"],
            json!([{"type": GPU_FRACTIONING_READY, "$patch": "delete"}])
        );
        // What another manager set too is theirs as well: fakegpu leaves it.
        let mut shared = written.clone();
        shared
            .metadata
            .managed_fields
            .as_mut()
            .expect("fields")
            .push(serde_json::from_value(json!({"manager": "someone-else", "operation": "Apply",
                "subresource": "status", "fieldsV1": {"f:status": {"f:capacity": {"f:nvidia.com/hostdev": {}}}}}))
                .expect("entry"));
        let owned = OwnedStatus::from_managed_fields(&shared);
        let leftovers = Leftovers::new(owned.as_ref(), &[], &after);
        let patch = node_patch(&after, &leftovers, None);
        assert_eq!(patch["status"]["capacity"], json!({"nvidia.com/gpu": "4"}));
        assert_eq!(
            patch["status"]["allocatable"],
            json!({"nvidia.com/gpu": "4", "nvidia.com/hostdev": null})
        );
    }

    #[test]
    fn kwok_nodes_are_initialized_once_they_have_allocatable_of_their_own() {
        let intent = NodeIntent {
            resources: BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity("8".into()))]),
            ..NodeIntent::default()
        };
        // Just created: no status, KWOK has not seen it.
        assert!(!kwok_initialized(&node(json!({"metadata": {"name": "n"}}))));
        // KWOK's defaults (or the node's own), then fakegpu's on top.
        assert!(kwok_initialized(&applied(&NodeIntent::default())));
        assert!(kwok_initialized(&applied(&intent)));
        // Only fakegpu's entries: what KWOK would keep as the whole allocatable.
        let mut ours_only = applied_node(&intent);
        let status = ours_only.status.as_mut().expect("status");
        for list in [&mut status.capacity, &mut status.allocatable] {
            list.as_mut().expect("entries").remove("cpu");
        }
        assert!(!kwok_initialized(&Cached::new(ours_only)));
        // Entries a user wrote at creation count, even under names fakegpu also writes.
        assert!(kwok_initialized(&node(json!({"metadata": {"name": "n"},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}))));
    }

    #[test]
    fn a_node_with_only_a_label_of_fakegpu_s_left_is_not_current() {
        // A node that left its pool keeping one deploy label while a claim was held: the label
        // is all fakegpu has there, and the cache holds it as a digest.
        let node = node(json!({"metadata": {"name": "n",
            "labels": {"nvidia.com/gpu.deploy.dra-plugin-gpu": "true"},
            "managedFields": [{"manager": "fakegpu", "operation": "Update", "subresource": "status",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.deploy.dra-plugin-gpu": {}}}}}]}}));
        assert!(OwnedStatus::of(&node).is_none());
        assert!(!node_current(&node, &NodeIntent::default()));
        let keeping = NodeIntent {
            labels: BTreeMap::from([(
                "nvidia.com/gpu.deploy.dra-plugin-gpu".to_owned(),
                "true".to_owned(),
            )]),
            ..Default::default()
        };
        assert!(node_current(&node, &keeping));
    }
}
