//! Every name that leaves a fakegpu process: labels, annotations, resource names, API groups.
//!
//! Other tools match on these strings (schedulers, GPU feature discovery consumers, Run:ai,
//! dashboards), so each one says who reads it. Change one only together with its readers.

/// API group of fakegpu's own custom resources (`GpuNodePool`).
pub const GROUP: &str = "fakegpu.dev";

/// API version of fakegpu's custom resources.
pub const VERSION: &str = "v1alpha1";

/// Field manager used for every server-side apply fakegpu makes; one manager means a resync
/// with nothing changed is a no-op for the API server.
pub const FIELD_MANAGER: &str = "fakegpu";

/// Node labels.
pub mod label {
    /// Node label that puts a node into the pool of the same name when the pool sets no explicit
    /// selector. The reference fake GPU operator's convention (`topology.nodePoolLabelKey`); KWOK
    /// node templates, Run:ai and users' scripts set it.
    pub const NODE_POOL: &str = "run.ai/simulated-gpu-node-pool";

    /// Marks a node whose GPUs are simulated. Set by the reference's status exporter; Run:ai and
    /// test scripts select on it.
    pub const FAKE_GPU: &str = "run.ai/fake.gpu";

    /// KWOK's conventional node label (`type=kwok`); users select KWOK nodes with it.
    pub const KWOK_TYPE: &str = "type";
    /// Value of [`KWOK_TYPE`] on KWOK nodes.
    pub const KWOK_TYPE_VALUE: &str = "kwok";

    /// GPU feature discovery: sanitised product name; node selectors and dashboards read it.
    pub const GPU_PRODUCT: &str = "nvidia.com/gpu.product";
    /// GPU feature discovery: number of `nvidia.com/gpu` devices on the node.
    pub const GPU_COUNT: &str = "nvidia.com/gpu.count";
    /// GPU feature discovery: framebuffer per GPU in MiB.
    pub const GPU_MEMORY: &str = "nvidia.com/gpu.memory";
    /// GPU feature discovery: architecture family derived from the compute capability.
    pub const GPU_FAMILY: &str = "nvidia.com/gpu.family";
    /// GPU feature discovery: compute capability, major part.
    pub const GPU_COMPUTE_MAJOR: &str = "nvidia.com/gpu.compute.major";
    /// GPU feature discovery: compute capability, minor part.
    pub const GPU_COMPUTE_MINOR: &str = "nvidia.com/gpu.compute.minor";
    /// GPU Operator / reference status exporter: the node has GPUs.
    pub const GPU_PRESENT: &str = "nvidia.com/gpu.present";
    /// GPU feature discovery: MIG strategy of the node (`none`, `single`, `mixed`).
    pub const MIG_STRATEGY: &str = "nvidia.com/mig.strategy";
    /// GPU feature discovery: true when any GPU on the node is MIG capable.
    pub const MIG_CAPABLE: &str = "nvidia.com/mig.capable";
    /// GPU feature discovery: driver version, full (`550.163.01`).
    pub const CUDA_DRIVER_VERSION_FULL: &str = "nvidia.com/cuda.driver-version.full";
    /// GPU feature discovery: highest CUDA version the driver supports, full (`12.4`).
    pub const CUDA_RUNTIME_VERSION_FULL: &str = "nvidia.com/cuda.runtime-version.full";
}

/// Annotations.
pub mod annotation {
    /// Node annotation by which KWOK recognises the nodes it manages (value `fake`); fakegpu
    /// serves such nodes centrally because no kubelet runs for them.
    pub const KWOK_NODE: &str = "kwok.x-k8s.io/node";
    /// Value of [`KWOK_NODE`] on KWOK-managed nodes.
    pub const KWOK_NODE_VALUE: &str = "fake";

    /// Pod annotation with the simulated utilization of the pod's GPUs, `"N"` or `"MIN-MAX"`
    /// percent. Written by users and load generators; read by the metrics exporter.
    pub const SIMULATED_UTILIZATION: &str = "run.ai/simulated-gpu-utilization";
}

/// Extended resources and DRA names.
pub mod resource {
    /// Extended resource of a whole GPU; pods request it, the scheduler and quota systems count it.
    pub const GPU: &str = "nvidia.com/gpu";
    /// Prefix of the extended resources of MIG instances under the mixed strategy
    /// (`nvidia.com/mig-1g.10gb`).
    pub const MIG_PREFIX: &str = "nvidia.com/mig-";
    /// DRA driver name of GPUs and MIG devices, as NVIDIA's DRA driver names it; DeviceClass CEL
    /// selectors and users' ResourceClaims match on it.
    pub const GPU_DRIVER: &str = "gpu.nvidia.com";
}
