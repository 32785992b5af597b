//! The ResourceSlices of a KWOK node: its GPUs (pools serving DRA) and its IMEX channel (pools
//! serving ComputeDomains), which NVIDIA's kubelet plugins publish on nodes with a kubelet,
//! published centrally for nodes without one (the reference's kwok-dra-plugin and
//! kwok-compute-domain-dra-plugin). The devices come from the shared builders in
//! `fakegpu_api::dra`.

use std::collections::BTreeMap;

pub use fakegpu_api::dra::slice_current;
use fakegpu_api::dra::{KnownSlice, channel_slice_spec, device_identity, gpu_slice, node_slice};
use fakegpu_model::{
    names::fakegpu::{MANAGED_BY, MANAGED_BY_VALUE, POOL_LABEL},
    topology::NodeTopology,
};
use k8s_openapi::api::resource::v1::{ResourceSlice, ResourceSliceSpec};
use kube::{Resource, ResourceExt};

use crate::{
    kit::apply,
    kit::cache::{Cached, Digest, Trim},
};

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
    node: &impl Resource<DynamicType = ()>,
    pool: &str,
    topology: &NodeTopology,
    current: Option<&Cached<ResourceSlice>>,
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
    node: &impl Resource<DynamicType = ()>,
    pool: &str,
    current: Option<&Cached<ResourceSlice>>,
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

/// A slice's cache keeps the digest of its devices in their place, and drops its managed
/// fields: the operator only asks whether a slice is current, and in memory a GPU slice is
/// about ten times its JSON; the devices of 10 000 nodes were half the operator's memory.
impl Trim for ResourceSlice {
    type Trimmed = Self;
    /// The digest of the devices.
    type Kept = Digest;

    fn trim(mut slice: ResourceSlice, _: bool) -> (ResourceSlice, Digest) {
        apply::drop_managed_fields(&mut slice);
        let digest = Digest::of(&device_identity(&slice.spec));
        slice.spec.devices = None;
        (slice, digest)
    }
}

impl KnownSlice for Cached<ResourceSlice> {
    fn spec(&self) -> &ResourceSliceSpec {
        &self.trimmed().spec
    }

    fn same_devices(&self, desired: &ResourceSliceSpec) -> bool {
        *self.kept() == Digest::of(&device_identity(desired))
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::topology::GpuTopology;
    use serde_json::json;

    use k8s_openapi::api::core::v1::Node;

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
        let slice = desired_slice(&node(), "p", &topology(2), None::<&Cached<ResourceSlice>>);
        assert_eq!(slice.name_any(), "kwok-n-gpu");
        assert_eq!(slice.spec.pool.generation, 1);
        assert_eq!(slice.owner_references()[0].uid, "u-1");
        assert_eq!(slice.labels()["fakegpu.dev/pool"], "p");
        assert_eq!(slice.spec.devices.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn generation_rises_only_when_the_devices_change() {
        let none: Option<&Cached<ResourceSlice>> = None;
        let first = desired_slice(&node(), "p", &topology(2), none);
        // The cache holds the slice without its devices; the digest still tells them apart.
        let cached = Cached::new(first.clone());
        assert_eq!(cached.trimmed().spec.devices, None);
        let same = desired_slice(&node(), "p", &topology(2), Some(&cached));
        assert_eq!(same.spec.pool.generation, 1);
        assert!(slice_current(&cached, &same));
        assert!(
            slice_current(&first, &same),
            "whole, as the node agent reads it"
        );
        let fewer = desired_slice(&node(), "p", &topology(1), Some(&cached));
        assert_eq!(fewer.spec.pool.generation, 2);
        assert!(!slice_current(&cached, &fewer));
        assert!(!slice_current(&first, &fewer));
    }
}
