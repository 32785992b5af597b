//! fakegpu-node-agent: serves the kubelet's device-plugin and DRA kubelet plugin APIs on nodes
//! with a real kubelet, from the node's topology document.
//!
//! - [`container`]: what both plugins give every container besides its devices;
//! - [`topology_source`]: the node's topology ConfigMap, watched, last good document kept;
//! - [`device_plugin`]: the `nvidia.com/gpu` device plugin, its registration and re-registration,
//!   and the report of which GPUs the kubelet gave each container;
//! - [`dra`]: the DRA kubelet plugin for driver `gpu.nvidia.com`, and the node's ResourceSlice;
//! - [`driver_root`]: on nodes of `backend: mock` pools, the driver root NVIDIA's own components
//!   load fakegpu's NVML library from; [`document_socket`]: its socket serving the node's
//!   document to the containers NVIDIA's toolkit gives GPUs;
//! - [`metrics`]: `/metrics`, `/healthz`, `/readyz`; [`fs`]: whole-or-nothing file writes;
//! - [`uds`]: gRPC over Unix sockets; [`lenient_grpc`]: the registration socket's server;
//! - [`proto`]: the kubelet's API definitions, generated.
//!
//! The nvidia-smi it installs for containers is the `fakegpu-smi` crate's.

/// Field manager of the agent's writes (its ResourceSlices, its report of the kubelet's devices).
pub const FIELD_MANAGER: &str = "fakegpu-node-agent";

pub mod container;
pub mod device_plugin;
pub mod document_socket;
pub mod dra;
pub mod driver_root;
pub mod fs;
pub mod lenient_grpc;
pub mod metrics;
pub mod proto;
pub mod topology_source;
pub mod uds;
