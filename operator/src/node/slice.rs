//! The ResourceSlice of a KWOK node of a DRA pool: what the node agent's DRA plugin publishes on
//! nodes with a kubelet, published centrally for nodes without one (the reference's
//! kwok-dra-plugin). The devices come from the shared builder in `fakegpu_api::dra`.

use std::collections::BTreeMap;

use fakegpu_api::{
    dra::gpu_slice_spec,
    names::fakegpu::{MANAGED_BY, MANAGED_BY_VALUE, POOL_LABEL},
    topology::NodeTopology,
};
use k8s_openapi::api::{core::v1::Node, resource::v1::ResourceSlice};
use kube::{Resource, ResourceExt, api::ObjectMeta};

/// Name of a KWOK node's GPU slice, as the reference names it.
pub fn slice_name(node: &str) -> String {
    format!("kwok-{node}-gpu")
}

/// The slice `node` should have for `topology`. Its pool generation is the current one, raised
/// by one when the devices change (the scheduler trusts the newest generation of a pool).
pub fn desired_slice(
    node: &Node,
    pool: &str,
    topology: &NodeTopology,
    current: Option<&ResourceSlice>,
) -> ResourceSlice {
    let name = node.name_any();
    let mut spec = gpu_slice_spec(&name, topology, 0);
    spec.pool.generation = match current {
        Some(current) if same_devices(&current.spec, &spec) => current.spec.pool.generation,
        Some(current) => current.spec.pool.generation + 1,
        None => 1,
    };
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(&name)),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (POOL_LABEL.to_owned(), pool.to_owned()),
            ])),
            // The garbage collector removes the slice with its node.
            owner_references: node.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..Default::default()
        },
        spec,
    }
}

fn same_devices(
    a: &k8s_openapi::api::resource::v1::ResourceSliceSpec,
    b: &k8s_openapi::api::resource::v1::ResourceSliceSpec,
) -> bool {
    (&a.driver, &a.node_name, &a.pool.name, &a.devices)
        == (&b.driver, &b.node_name, &b.pool.name, &b.devices)
}

/// Whether the cached slice already is the desired one.
pub fn slice_current(current: &ResourceSlice, desired: &ResourceSlice) -> bool {
    let labels_match = desired
        .labels()
        .iter()
        .all(|(k, v)| current.labels().get(k) == Some(v));
    labels_match
        && current.owner_references() == desired.owner_references()
        && same_devices(&current.spec, &desired.spec)
        && current.spec.pool == desired.spec.pool
}

#[cfg(test)]
mod tests {
    use fakegpu_api::topology::GpuTopology;
    use serde_json::json;

    use super::*;

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "uid": "u-1"}})).expect("test node")
    }

    fn topology(gpus: u32) -> NodeTopology {
        NodeTopology {
            gpu_product: "NVIDIA L40S".into(),
            gpu_memory: 46068,
            driver_version: "550.163.01".into(),
            cuda_version: "12.4".into(),
            gpus: (0..gpus)
                .map(|index| GpuTopology {
                    id: format!("GPU-{index}"),
                    index,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_new_slice_starts_at_generation_one_and_is_owned_by_the_node() {
        let slice = desired_slice(&node(), "p", &topology(2), None);
        assert_eq!(slice.name_any(), "kwok-n-gpu");
        assert_eq!(slice.spec.pool.generation, 1);
        assert_eq!(slice.owner_references()[0].uid, "u-1");
        assert_eq!(slice.labels()["fakegpu.dev/pool"], "p");
        assert_eq!(slice.spec.devices.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn generation_rises_only_when_the_devices_change() {
        let first = desired_slice(&node(), "p", &topology(2), None);
        let same = desired_slice(&node(), "p", &topology(2), Some(&first));
        assert_eq!(same.spec.pool.generation, 1);
        assert!(slice_current(&first, &same));
        let fewer = desired_slice(&node(), "p", &topology(1), Some(&first));
        assert_eq!(fewer.spec.pool.generation, 2);
        assert!(!slice_current(&first, &fewer));
    }
}
