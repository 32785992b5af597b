//! fakegpu's API: the `GpuNodePool` custom resource, the builtin GPU profile catalog and every
//! externally visible name. The operator, the node agent and the fake nvidia-smi all build on it.

pub mod compute_domain;
pub mod convert;
pub mod crds;
pub mod document_source;
pub mod dra;
pub mod faults;
pub mod kubelet_devices;
pub mod label_selector;
pub mod meta;
pub mod names;
pub mod nrt;
pub mod pool;
pub mod profiles;
pub mod quantity;
pub mod report;
pub mod telemetry;
pub mod topology;
pub mod utilization;

pub use pool::{GpuNodePool, GpuNodePoolSpec, GpuNodePoolStatus};
