//! fakegpu-node-agent: serves the kubelet's device-plugin API (and, next, the DRA kubelet
//! plugin API) on nodes with a real kubelet, from the node's topology document.
//!
//! - [`topology_source`]: the node's topology ConfigMap, watched, last good document kept;
//! - [`device_plugin`]: the `nvidia.com/gpu` device plugin, its registration and re-registration;
//! - [`uds`]: gRPC over Unix sockets;
//! - [`proto`]: the kubelet's API definitions, generated.

pub mod device_plugin;
pub mod proto;
pub mod topology_source;
pub mod uds;
