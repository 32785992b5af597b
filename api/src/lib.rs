//! fakegpu's API: the `GpuNodePool` custom resource and the other Kubernetes objects fakegpu
//! reads and writes (DRA devices, NodeResourceTopology, ComputeDomains, the node agents'
//! reports), built on [`fakegpu_model`] (the topology document, profiles, names). The operator,
//! the node agent and the exporter build on it; what GPU containers load needs only the model.

pub mod compute_domain;
pub mod convert;
pub mod crds;
pub mod dra;
pub mod faults;
pub mod kubelet_devices;
pub mod label_selector;
pub mod meta;
pub mod nrt;
pub mod pool;
#[cfg(test)]
mod properties;

pub use pool::{GpuNodePool, GpuNodePoolSpec, GpuNodePoolStatus};
