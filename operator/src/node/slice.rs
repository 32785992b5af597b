//! The ResourceSlices of a KWOK node: its GPUs (pools serving DRA) and its IMEX channel (pools
//! serving ComputeDomains), which NVIDIA's kubelet plugins publish on nodes with a kubelet,
//! published centrally for nodes without one (the reference's kwok-dra-plugin and
//! kwok-compute-domain-dra-plugin). The devices come from the shared builders in
//! `fakegpu_api::dra`.

use std::collections::BTreeMap;

pub use fakegpu_api::dra::slice_current;
use fakegpu_api::{
    dra::{channel_slice_spec, gpu_slice, node_slice},
    names::fakegpu::{MANAGED_BY, MANAGED_BY_VALUE, POOL_LABEL},
    topology::NodeTopology,
};
use k8s_openapi::api::{core::v1::Node, resource::v1::ResourceSlice};
use kube::ResourceExt;

/// Name of a KWOK node's GPU slice, as the reference names it.
pub fn slice_name(node: &str) -> String {
    format!("kwok-{node}-gpu")
}

/// Name of a KWOK node's IMEX channel slice, as the reference names it.
pub fn channel_slice_name(node: &str) -> String {
    format!("kwok-{node}-compute-domain-channel")
}

fn labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (POOL_LABEL.to_owned(), pool.to_owned()),
    ])
}

/// The GPU slice `node` of `pool` should have for `topology` (see [`gpu_slice`]).
pub fn desired_slice(
    node: &Node,
    pool: &str,
    topology: &NodeTopology,
    current: Option<&ResourceSlice>,
) -> ResourceSlice {
    gpu_slice(
        &slice_name(&node.name_any()),
        node,
        labels(pool),
        topology,
        current,
    )
}

/// The IMEX channel slice of `node` of `pool` (see [`channel_slice_spec`]).
pub fn desired_channel_slice(
    node: &Node,
    pool: &str,
    current: Option<&ResourceSlice>,
) -> ResourceSlice {
    let name = node.name_any();
    node_slice(
        &channel_slice_name(&name),
        node,
        labels(pool),
        channel_slice_spec(&name),
        current,
    )
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
