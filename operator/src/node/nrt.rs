//! The NodeResourceTopology of a node whose pool declares NUMA zones: zones `node-<i>` with
//! their distances, GPUs (as the topology document places them), CPU and memory, and the
//! topology manager policy, as the reference's status exporter publishes them. GPUs that pods
//! hold are subtracted from `available`, so topology-aware schedulers see what is free.

use super::cached::CachedNode;
use std::collections::BTreeMap;

use fakegpu_api::{
    GpuNodePool,
    nrt::{AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone},
    pool::{NumaSpec, TopologyManagerPolicy, TopologyManagerScope},
};
use fakegpu_model::{
    names::{
        fakegpu::{MANAGED_BY, MANAGED_BY_VALUE, POOL_LABEL},
        resource,
    },
    quantity::{format_bytes, format_cpu, parse_milli},
    topology::NodeTopology,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Resource, ResourceExt, api::ObjectMeta};

/// Distances when the pool gives none: the ACPI SLIT values of a two-socket machine.
const DEFAULT_SELF: i64 = 10;
const DEFAULT_REMOTE: i64 = 21;

fn policy_name(policy: TopologyManagerPolicy) -> &'static str {
    match policy {
        TopologyManagerPolicy::None => "none",
        TopologyManagerPolicy::BestEffort => "best-effort",
        TopologyManagerPolicy::Restricted => "restricted",
        TopologyManagerPolicy::SingleNumaNode => "single-numa-node",
    }
}

fn scope_name(scope: TopologyManagerScope) -> &'static str {
    match scope {
        TopologyManagerScope::Container => "container",
        TopologyManagerScope::Pod => "pod",
    }
}

/// The deprecated `topologyPolicies` value older schedulers read (`SingleNUMANodeContainerLevel`).
fn legacy_policy(numa: &NumaSpec) -> String {
    let level = match numa.topology_manager_scope {
        TopologyManagerScope::Pod => "PodLevel",
        TopologyManagerScope::Container => "ContainerLevel",
    };
    match numa.topology_manager_policy {
        TopologyManagerPolicy::SingleNumaNode => format!("SingleNUMANode{level}"),
        TopologyManagerPolicy::Restricted => format!("Restricted{level}"),
        TopologyManagerPolicy::BestEffort => format!("BestEffort{level}"),
        TopologyManagerPolicy::None => "None".to_owned(),
    }
}

/// A per-zone share of a node resource: the pool's value, else the node's allocatable divided by
/// the zones; `None` when neither is known (the resource is then left out).
fn per_zone(
    explicit: Option<&Quantity>,
    node: &CachedNode,
    name: &str,
    zones: u32,
    format: fn(i128) -> String,
) -> Option<Quantity> {
    if let Some(quantity) = explicit {
        return Some(quantity.clone());
    }
    let allocatable = node.trimmed().allocatable.as_ref()?.get(name)?;
    let milli = parse_milli(&allocatable.0)? / i128::from(zones.max(1));
    let share = if name == "cpu" { milli } else { milli / 1000 };
    (share > 0).then(|| Quantity(format(share)))
}

fn info(name: &str, total: Quantity, available: Quantity) -> ResourceInfo {
    ResourceInfo {
        name: name.to_owned(),
        capacity: total.clone(),
        allocatable: total,
        available,
    }
}

/// The NodeResourceTopology `node` should have, or `None` when its pool declares no NUMA.
pub fn desired_nrt(
    node: &CachedNode,
    pool: &GpuNodePool,
    topology: &NodeTopology,
) -> Option<NodeResourceTopology> {
    let numa = pool.spec.numa.as_ref()?;
    let zones = numa.zones.max(1);
    let (local, remote) = numa.distances.map_or((DEFAULT_SELF, DEFAULT_REMOTE), |d| {
        (i64::from(d.local), i64::from(d.remote))
    });
    let cpu = per_zone(numa.cpu_per_zone.as_ref(), node, "cpu", zones, format_cpu);
    let memory = per_zone(
        numa.memory_per_zone.as_ref(),
        node,
        "memory",
        zones,
        format_bytes,
    );
    let zones = (0..zones)
        .map(|zone| {
            let gpus = topology
                .gpus
                .iter()
                .filter(|g| g.numa_node.unwrap_or(0) == zone);
            let (total, used) = gpus.fold((0u32, 0u32), |(t, u), g| {
                (t + 1, u + u32::from(g.status.in_use()))
            });
            let mut resources = vec![info(
                resource::GPU,
                Quantity(total.to_string()),
                Quantity(total.saturating_sub(used).to_string()),
            )];
            resources.extend(cpu.clone().map(|q| info("cpu", q.clone(), q)));
            resources.extend(memory.clone().map(|q| info("memory", q.clone(), q)));
            Zone {
                name: format!("node-{zone}"),
                type_: "Node".to_owned(),
                costs: (0..numa.zones.max(1))
                    .map(|other| CostInfo {
                        name: format!("node-{other}"),
                        value: if other == zone { local } else { remote },
                    })
                    .collect(),
                resources,
                ..Default::default()
            }
        })
        .collect();
    Some(NodeResourceTopology {
        metadata: ObjectMeta {
            name: Some(node.name_any()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (POOL_LABEL.to_owned(), pool.name_any()),
            ])),
            owner_references: node.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..Default::default()
        },
        topology_policies: vec![legacy_policy(numa)],
        attributes: vec![
            AttributeInfo {
                name: "topologyManagerPolicy".into(),
                value: policy_name(numa.topology_manager_policy).into(),
            },
            AttributeInfo {
                name: "topologyManagerScope".into(),
                value: scope_name(numa.topology_manager_scope).into(),
            },
        ],
        zones,
    })
}

/// Whether the cached object already is the desired one.
pub fn nrt_current(current: &NodeResourceTopology, desired: &NodeResourceTopology) -> bool {
    fakegpu_api::meta::metadata_current(current, desired)
        && (
            &current.zones,
            &current.attributes,
            &current.topology_policies,
        ) == (
            &desired.zones,
            &desired.attributes,
            &desired.topology_policies,
        )
}

/// The apply body: the typed object with its apiVersion and kind.
pub fn nrt_patch(desired: &NodeResourceTopology) -> serde_json::Value {
    let mut body = serde_json::to_value(desired).unwrap_or_default();
    body["apiVersion"] = NodeResourceTopology::api_version(&()).into();
    body["kind"] = NodeResourceTopology::kind(&()).into();
    body
}

#[cfg(test)]
mod tests {
    use fakegpu_api::pool::resolve::resolve;
    use serde_json::json;

    use super::*;
    use crate::{node::topology::fresh_document, testing::pool};

    fn node() -> CachedNode {
        crate::kit::cache::Cached::new(
            serde_json::from_value(json!({"metadata": {"name": "n", "uid": "u"},
                "status": {"allocatable": {"cpu": "1k", "memory": "1Ti"}}}))
            .expect("test node"),
        )
    }

    fn nrt(spec: serde_json::Value, busy: &[usize]) -> Option<NodeResourceTopology> {
        let pool = pool("p", 0, spec);
        let gpu = resolve(&pool.spec.gpu).expect("resolves");
        let mut topology = fresh_document(&pool, &gpu, "n");
        for index in busy {
            topology.gpus[*index].status.allocated_by.pod = "busy".into();
        }
        desired_nrt(&node(), &pool, &topology)
    }

    fn resource<'a>(zone: &'a Zone, name: &str) -> Option<&'a ResourceInfo> {
        zone.resources.iter().find(|r| r.name == name)
    }

    #[test]
    fn zones_split_gpus_cpu_and_memory_with_default_distances() {
        let nrt = nrt(
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2}}),
            &[1, 5],
        )
        .expect("numa pool");
        assert_eq!(nrt.name_any(), "n");
        assert_eq!(nrt.owner_references()[0].uid, "u");
        assert_eq!(nrt.zones.len(), 2);
        let zone1 = &nrt.zones[1];
        assert_eq!(
            (zone1.name.as_str(), zone1.type_.as_str()),
            ("node-1", "Node")
        );
        assert_eq!(
            zone1.costs,
            [
                CostInfo {
                    name: "node-0".into(),
                    value: 21
                },
                CostInfo {
                    name: "node-1".into(),
                    value: 10
                }
            ]
        );
        let gpus = resource(zone1, "nvidia.com/gpu").expect("gpus");
        assert_eq!(
            (gpus.capacity.0.as_str(), gpus.available.0.as_str()),
            ("4", "3")
        );
        assert_eq!(resource(zone1, "cpu").expect("cpu").capacity.0, "500");
        assert_eq!(
            resource(zone1, "memory").expect("memory").capacity.0,
            "512Gi"
        );
        assert_eq!(nrt.topology_policies, ["SingleNUMANodeContainerLevel"]);
        assert_eq!(nrt.attributes[0].value, "single-numa-node");
        assert_eq!(nrt.attributes[1].value, "container");
        let body = nrt_patch(&nrt);
        assert_eq!(body["apiVersion"], "topology.node.k8s.io/v1alpha2");
        assert_eq!(body["kind"], "NodeResourceTopology");
    }

    #[test]
    fn pool_values_win_and_policies_map_like_the_reference() {
        let nrt = nrt(
            json!({"gpu": {"profile": "h100", "count": 3}, "numa": {"zones": 2, "gpusPerZone": [1, 2],
                "distances": {"self": 11, "remote": 32}, "topologyManagerPolicy": "best-effort",
                "topologyManagerScope": "pod", "cpuPerZone": "24", "memoryPerZone": "256Gi"}}),
            &[],
        )
        .expect("numa pool");
        assert_eq!(nrt.zones[0].costs[0].value, 11);
        assert_eq!(nrt.zones[0].costs[1].value, 32);
        let gpus: Vec<_> = nrt
            .zones
            .iter()
            .map(|z| {
                resource(z, "nvidia.com/gpu")
                    .expect("gpus")
                    .capacity
                    .0
                    .clone()
            })
            .collect();
        assert_eq!(gpus, ["1", "2"]);
        assert_eq!(
            resource(&nrt.zones[0], "cpu").expect("cpu").capacity.0,
            "24"
        );
        assert_eq!(nrt.topology_policies, ["BestEffortPodLevel"]);
        assert!(nrt_current(&nrt, &nrt));
    }

    #[test]
    fn no_numa_no_object() {
        assert!(nrt(json!({"gpu": {"profile": "t4"}}), &[]).is_none());
    }
}
