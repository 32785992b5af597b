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
    /// Pod label of Run:ai workloads: its kind sets the pod's simulated utilization (see
    /// [`crate::utilization::WorkloadType`]); inference kinds take it from their Knative
    /// revision's request rate.
    pub const WORKLOAD_KIND: &str = "workloadKind";
    /// Pod label of GPU sharing (Run:ai, KAI): the same value on a reservation pod and on the
    /// pods that share the GPU it holds. Pod tracking records the sharers' use on that GPU.
    pub const GPU_GROUP: &str = "runai-gpu-group";
    /// Prefix of the pod labels KAI (v0.6 and later) puts on a pod that shares several GPUs
    /// (annotation `gpu-fraction-num-devices` over 1): one `runai-gpu-group/<group>: <group>`
    /// per GPU, in place of [`GPU_GROUP`]. Pod tracking records the pod's use on the GPU of
    /// each group's reservation pod.
    pub const MULTI_GPU_GROUP_PREFIX: &str = "runai-gpu-group/";
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
    /// NVIDIA's mig-manager and the reference's mig-faker: outcome of the node's last MIG
    /// reconfiguration ([`MIG_CONFIG_STATE_SUCCESS`] or [`MIG_CONFIG_STATE_FAILED`]). Run:ai
    /// waits for it after writing [`super::annotation::RUNAI_MIG_CONFIG`]; the operator sets it
    /// on nodes that annotation reconfigures.
    pub const MIG_CONFIG_STATE: &str = "nvidia.com/mig.config.state";
    pub const MIG_CONFIG_STATE_SUCCESS: &str = "success";
    pub const MIG_CONFIG_STATE_FAILED: &str = "failed";
    /// Run:ai: node role (value `true`) of nodes whose GPUs Run:ai partitions on demand. The
    /// reference's mig-faker runs only there, and fakegpu reads
    /// [`super::annotation::RUNAI_MIG_CONFIG`] only there.
    pub const RUNAI_DYNAMIC_MIG: &str = "node-role.kubernetes.io/runai-dynamic-mig";
    /// GPU feature discovery: driver version, full (`550.163.01`).
    pub const CUDA_DRIVER_VERSION_FULL: &str = "nvidia.com/cuda.driver-version.full";
    /// GPU feature discovery: highest CUDA version the driver supports, full (`12.4`).
    pub const CUDA_RUNTIME_VERSION_FULL: &str = "nvidia.com/cuda.runtime-version.full";

    /// GFD: replicas per GPU (1: no sharing).
    pub const GPU_REPLICAS: &str = "nvidia.com/gpu.replicas";
    /// GFD: sharing strategy (`none`).
    pub const GPU_SHARING_STRATEGY: &str = "nvidia.com/gpu.sharing-strategy";
    /// GFD: GPU mode (`compute`).
    pub const GPU_MODE: &str = "nvidia.com/gpu.mode";
    /// GFD: MPS capable.
    pub const MPS_CAPABLE: &str = "nvidia.com/mps.capable";
    /// GFD: vGPU guest.
    pub const VGPU_PRESENT: &str = "nvidia.com/vgpu.present";
    /// GFD: driver version parts.
    pub const CUDA_DRIVER_VERSION_MAJOR: &str = "nvidia.com/cuda.driver-version.major";
    pub const CUDA_DRIVER_VERSION_MINOR: &str = "nvidia.com/cuda.driver-version.minor";
    pub const CUDA_DRIVER_VERSION_REVISION: &str = "nvidia.com/cuda.driver-version.revision";
    /// GFD: deprecated duplicates of the driver version parts, still emitted and still read.
    pub const CUDA_DRIVER_MAJOR: &str = "nvidia.com/cuda.driver.major";
    pub const CUDA_DRIVER_MINOR: &str = "nvidia.com/cuda.driver.minor";
    pub const CUDA_DRIVER_REV: &str = "nvidia.com/cuda.driver.rev";
    /// GFD: CUDA version parts.
    pub const CUDA_RUNTIME_VERSION_MAJOR: &str = "nvidia.com/cuda.runtime-version.major";
    pub const CUDA_RUNTIME_VERSION_MINOR: &str = "nvidia.com/cuda.runtime-version.minor";
    /// GFD: deprecated duplicates of the CUDA version parts.
    pub const CUDA_RUNTIME_MAJOR: &str = "nvidia.com/cuda.runtime.major";
    pub const CUDA_RUNTIME_MINOR: &str = "nvidia.com/cuda.runtime.minor";
    /// GPU Operator: schedules dcgm-exporter; the reference sets it on every pool node.
    pub const DEPLOY_DCGM_EXPORTER: &str = "nvidia.com/gpu.deploy.dcgm-exporter";
    /// GPU Operator: schedules the device plugin; nodes with a kubelet serving `nvidia.com/gpu`.
    pub const DEPLOY_DEVICE_PLUGIN: &str = "nvidia.com/gpu.deploy.device-plugin";
    /// Reference: schedules the DRA kubelet plugin; nodes with a kubelet serving DRA.
    pub const DEPLOY_DRA_PLUGIN: &str = "nvidia.com/gpu.deploy.dra-plugin-gpu";
    /// Set by the operator on nodes with a kubelet in `backend: mock` pools: the bundle's
    /// driver-root DaemonSet runs there (it lays out the NVML library NVIDIA's components load)
    /// and fakegpu's own kubelet plugins stay off (their affinity requires it absent).
    pub const DEPLOY_DRIVER_ROOT: &str = "fakegpu.dev/deploy.driver-root";
    /// The reference's deploy label of its compute-domain DRA plugin: set on nodes with a
    /// kubelet whose pool serves ComputeDomains; the compute-domain DaemonSet selects it.
    pub const DEPLOY_COMPUTE_DOMAIN_PLUGIN: &str =
        "nvidia.com/gpu.deploy.compute-domain-dra-plugin";

    /// GPU feature discovery, MIG strategy `single`: streaming multiprocessors of one instance.
    pub const GPU_MULTIPROCESSORS: &str = "nvidia.com/gpu.multiprocessors";
    /// GPU feature discovery, MIG strategy `single`: GPU-instance and compute-instance slices.
    pub const GPU_SLICES_GI: &str = "nvidia.com/gpu.slices.gi";
    pub const GPU_SLICES_CI: &str = "nvidia.com/gpu.slices.ci";
    /// GPU feature discovery, MIG strategy `single`: copy and media engines of one instance.
    pub const GPU_ENGINES_COPY: &str = "nvidia.com/gpu.engines.copy";
    pub const GPU_ENGINES_DECODER: &str = "nvidia.com/gpu.engines.decoder";
    pub const GPU_ENGINES_ENCODER: &str = "nvidia.com/gpu.engines.encoder";
    pub const GPU_ENGINES_JPEG: &str = "nvidia.com/gpu.engines.jpeg";
    pub const GPU_ENGINES_OFA: &str = "nvidia.com/gpu.engines.ofa";
    /// GPU feature discovery, MIG strategy `mixed`: prefix of the per-profile labels
    /// `nvidia.com/mig-<profile>.count`, `.memory`, `.multiprocessors`, `.slices.gi`,
    /// `.slices.ci`, `.engines.copy|decoder|encoder|jpeg|ofa`; every key with it belongs to the
    /// operator.
    pub const MIG_PROFILE_PREFIX: &str = "nvidia.com/mig-";

    /// Whether the operator owns node label `key` (it removes the ones a pool no longer wants).
    pub fn is_operator_label(key: &str) -> bool {
        OPERATOR_SET.contains(&key)
            || (key.starts_with(MIG_PROFILE_PREFIX) && key != MIG_CAPABLE && key != MIG_STRATEGY)
    }

    /// Every fixed node label key the operator may set (with the [`MIG_PROFILE_PREFIX`] keys).
    /// A key here that a node carries but the pool no longer wants marks the node for an update.
    pub const OPERATOR_SET: &[&str] = &[
        super::fakegpu::POOL_LABEL,
        FAKE_GPU,
        GPU_PRESENT,
        GPU_PRODUCT,
        GPU_COUNT,
        GPU_MEMORY,
        GPU_FAMILY,
        GPU_COMPUTE_MAJOR,
        GPU_COMPUTE_MINOR,
        GPU_REPLICAS,
        GPU_SHARING_STRATEGY,
        GPU_MODE,
        MIG_CAPABLE,
        MIG_STRATEGY,
        MIG_CONFIG_STATE,
        MPS_CAPABLE,
        VGPU_PRESENT,
        CUDA_DRIVER_VERSION_MAJOR,
        CUDA_DRIVER_VERSION_MINOR,
        CUDA_DRIVER_VERSION_REVISION,
        CUDA_DRIVER_VERSION_FULL,
        CUDA_DRIVER_MAJOR,
        CUDA_DRIVER_MINOR,
        CUDA_DRIVER_REV,
        CUDA_RUNTIME_VERSION_MAJOR,
        CUDA_RUNTIME_VERSION_MINOR,
        CUDA_RUNTIME_VERSION_FULL,
        CUDA_RUNTIME_MAJOR,
        CUDA_RUNTIME_MINOR,
        DEPLOY_DCGM_EXPORTER,
        DEPLOY_DEVICE_PLUGIN,
        DEPLOY_DRA_PLUGIN,
        DEPLOY_COMPUTE_DOMAIN_PLUGIN,
        DEPLOY_DRIVER_ROOT,
        GPU_MULTIPROCESSORS,
        GPU_SLICES_GI,
        GPU_SLICES_CI,
        GPU_ENGINES_COPY,
        GPU_ENGINES_DECODER,
        GPU_ENGINES_ENCODER,
        GPU_ENGINES_JPEG,
        GPU_ENGINES_OFA,
    ];
}

/// Annotations.
pub mod annotation {
    /// Node annotation kube-controller-manager's TTL controller keeps on every node (how long
    /// kubelets may cache objects), rewritten as the cluster grows past its size steps: on a
    /// 10 000-node cluster about 17 nodes a second for minutes. fakegpu does not read it, so
    /// its changes do not reconcile the node or its pool.
    pub const NODE_TTL: &str = "node.alpha.kubernetes.io/ttl";
    /// Node annotation by which KWOK recognises the nodes it manages (value `fake`); fakegpu
    /// serves such nodes centrally because no kubelet runs for them.
    pub const KWOK_NODE: &str = "kwok.x-k8s.io/node";
    /// Value of [`KWOK_NODE`] on KWOK-managed nodes.
    pub const KWOK_NODE_VALUE: &str = "fake";

    /// Pod annotation with the simulated utilization of the pod's GPUs, `"N"` or `"MIN-MAX"`
    /// percent. Written by users and load generators; read by the metrics exporter.
    pub const SIMULATED_UTILIZATION: &str = "run.ai/simulated-gpu-utilization";
    /// Pod annotation (Run:ai) with the share of a GPU's memory the pod uses, `0.5`; read by
    /// pod tracking for the framebuffer a pod occupies (default: all of it).
    pub const GPU_FRACTION: &str = "gpu-fraction";
    /// Pod annotation (KAI) with the GPU memory a sharing pod asks for, MiB; read like
    /// [`GPU_FRACTION`] for the framebuffer it occupies.
    pub const GPU_MEMORY: &str = "gpu-memory";
    /// Pod annotation (Run:ai) naming the GPU a sharing pod was given, matched against its
    /// reservation pod's [`RESERVED_GPU`] (older releases used the GPU index).
    pub const RUNAI_GPU: &str = "runai-gpu";
    /// Reservation pod annotation (Run:ai, KAI): the UUID of the GPU the pod holds. On real
    /// nodes the reservation pod finds it through NVML and writes it; here the operator does,
    /// once pod tracking has given the pod its GPU, and the scheduler binds the sharing pods
    /// after reading it.
    pub const RESERVED_GPU: &str = "run.ai/reserve_for_gpu_index";

    /// Pod annotation written by the operator: the UUIDs (comma-separated) of the GPUs or MIG
    /// instances pod tracking gave the pod's `nvidia.com/gpu` / `nvidia.com/mig-*` request.
    /// Read back as the pod's assignment, so that a lost or garbled topology ConfigMap, an
    /// operator restart, or the node leaving and rejoining its pool moves no running pod to
    /// another GPU. Users and tools may read it (`kubectl get pod -o yaml`).
    pub const ASSIGNED_GPUS: &str = "fakegpu.dev/gpus";

    /// Pod annotation naming the pod's PodGroup (Run:ai, KAI scheduler); without a
    /// `workloadKind` label, the PodGroup's `spec.priorityClassName` tells the workload type.
    pub const POD_GROUP_NAME: &str = "pod-group-name";
    /// Topology ConfigMap annotation: how many of the node's GPUs pods hold. Written by pod
    /// tracking, read by the pool status (so it need not parse every node's document).
    pub const ALLOCATED_GPUS: &str = "fakegpu.dev/allocated-gpus";
    /// DeviceClass annotation: the spec fakegpu last wrote to a class it manages (JSON). Written
    /// and read by the operator, which writes the spec again only when what it wants differs
    /// from this, so that an edit of the class by anyone else stays (as an edit of NVIDIA's
    /// Helm-installed class does).
    pub const APPLIED_SPEC: &str = "fakegpu.dev/applied-spec";
    /// Node annotation set by users to simulate failed GPUs: comma-separated indices
    /// (`"0,3"`). The operator marks them `Unhealthy` in the topology document; the node
    /// agent's device plugin reports them so to the kubelet.
    pub const UNHEALTHY_GPUS: &str = "fakegpu.dev/unhealthy-gpus";
    /// Node annotation set by users to inject GPU faults: a JSON list of
    /// `fakegpu_api::faults::GpuFault`s (`[{"gpus": [1], "xid": 48}]`), after the pool's
    /// `spec.faults`. The operator records them in the topology document.
    pub const GPU_FAULTS: &str = "fakegpu.dev/gpu-faults";

    /// Node annotation Run:ai writes to partition GPUs on demand (dynamic MIG): a YAML document
    /// in mig-parted's shape, `mig-configs.selected[]` with `devices` (GPU indices),
    /// `mig-enabled` and `mig-devices` (`name`, `position`, `size`). Read by the operator on
    /// nodes labelled [`super::label::RUNAI_DYNAMIC_MIG`]; see `pool::mig_config`.
    pub const RUNAI_MIG_CONFIG: &str = "run.ai/mig.config";
    /// Node annotation the operator answers [`RUNAI_MIG_CONFIG`] with, as the reference's
    /// mig-faker does: base64 of a JSON object from GPU index to its instances'
    /// `position`, `device_uuid` (`MIG-...`) and `gpu_instance_id`. Run:ai reads it to find the
    /// instances it asked for.
    pub const RUNAI_MIG_MAPPING: &str = "run.ai/mig-mapping";
}

/// Extended resources and DRA names.
pub mod resource {
    /// Extended resource of a whole GPU; pods request it, the scheduler and quota systems count it.
    pub const GPU: &str = "nvidia.com/gpu";
    /// Prefix of the extended resources of MIG instances under the mixed strategy
    /// (`nvidia.com/mig-1g.10gb`).
    pub const MIG_PREFIX: &str = "nvidia.com/mig-";

    /// The extended resource of MIG `profile`'s instances (`nvidia.com/mig-1g.10gb.me` for
    /// `1g.10gb+me`), as NVIDIA's device plugin names it.
    pub fn mig_resource(profile: &str) -> String {
        format!(
            "{MIG_PREFIX}{}",
            crate::profiles::published_mig_name(profile)
        )
    }
    /// DRA driver name of GPUs and MIG devices, as NVIDIA's DRA driver names it; DeviceClass CEL
    /// selectors and users' ResourceClaims match on it.
    pub const GPU_DRIVER: &str = "gpu.nvidia.com";
    /// DeviceClass of whole GPUs (NVIDIA's DRA driver installs one of this name); claims name it.
    pub const GPU_DEVICE_CLASS: &str = "gpu.nvidia.com";
    /// DeviceClass of MIG devices (NVIDIA's DRA driver installs one of this name).
    pub const MIG_DEVICE_CLASS: &str = "mig.nvidia.com";
    /// Device taint NVIDIA's DRA driver puts on the devices of a GPU that raised an XID, value
    /// the XID: `NoSchedule` when the XID takes the GPU out of service, `None` (informational)
    /// otherwise. Claims tolerate it by this key.
    pub const XID_TAINT: &str = "gpu.nvidia.com/xid";
}

/// Node and pod conditions.
pub mod condition {
    /// Node condition (type) that fake-backend pool nodes carry once `nvidia.com/gpu` is
    /// allocatable: schedulers doing GPU fractions (Run:ai, KAI) wait for it. Written by the
    /// operator, only when no other controller owns a condition of this type.
    pub const GPU_FRACTIONING_READY: &str = "gpu-fractioning.nvidia.com/Ready";
    /// Node condition (type), `True` while faults are injected into the node's GPUs (pool
    /// `spec.faults` or the node's `fakegpu.dev/gpu-faults`), naming them; absent otherwise, as
    /// node-problem-detector's problem conditions. Also the reason of the node's Warning Event.
    pub const GPU_FAULT: &str = "fakegpu.dev/GpuFault";
    /// Pod condition (type) the kubelet sets `True` once the pod's sandbox is up, which it
    /// makes only after its DRA drivers prepared the pod's claims. Pod tracking counts a
    /// claim's devices as a pod's only then (or once the pod runs).
    pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
}

/// Names fakegpu itself puts on objects.
pub mod fakegpu {
    /// Node label naming the pool whose GPUs a node carries. Set by the operator on every node
    /// it manages (so it finds them again for cleanup); users and dashboards may select on it.
    pub const POOL_LABEL: &str = "fakegpu.dev/pool";

    /// Standard label on cluster-wide objects fakegpu creates (DeviceClasses), value
    /// [`MANAGED_BY_VALUE`]; an object without it belongs to someone else (e.g. NVIDIA's real
    /// DRA driver) and is never changed.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    pub const MANAGED_BY_VALUE: &str = "fakegpu";

    /// Finalizer on GpuNodePools: the operator removes its node labels before a pool goes.
    pub const POOL_FINALIZER: &str = "fakegpu.dev/cleanup";

    /// Environment variable with the namespace the operator keeps its per-node topology
    /// ConfigMaps in (the downward API sets it in the Deployment).
    pub const NAMESPACE_ENV: &str = "FAKEGPU_NAMESPACE";

    /// Namespace of the install bundle.
    pub const DEFAULT_NAMESPACE: &str = "fakegpu-system";

    /// Environment variable with the operator's HTTP listen address (`/metrics`, `/healthz`,
    /// `/readyz`); the Deployment's probes and Prometheus use it.
    pub const OPERATOR_HTTP_ADDR_ENV: &str = "FAKEGPU_HTTP_ADDR";

    /// Default of [`OPERATOR_HTTP_ADDR_ENV`].
    pub const DEFAULT_OPERATOR_HTTP_ADDR: &str = "0.0.0.0:8080";

    /// Environment variable switching NodeResourceTopology publishing: `auto` (default: when the
    /// cluster serves `topology.node.k8s.io/v1alpha2`) or `false` (never).
    pub const NODE_RESOURCE_TOPOLOGY_ENV: &str = "FAKEGPU_NODE_RESOURCE_TOPOLOGY";

    /// Environment variable switching leader election: `true` (default) or `false` (a single
    /// replica that never waits, e.g. under a debugger).
    pub const LEADER_ELECTION_ENV: &str = "FAKEGPU_LEADER_ELECTION";

    /// Environment variable switching the `gpu.nvidia.com` DeviceClass's
    /// `extendedResourceName: nvidia.com/gpu` (NVIDIA's chart sets it): `true` (default) or
    /// `false`. Read by the operator.
    pub const DRA_EXTENDED_RESOURCE_ENV: &str = "FAKEGPU_DRA_EXTENDED_RESOURCE";

    /// Environment variable with this replica's identity in the lease (the Deployment sets the
    /// pod name); the host name and process id otherwise.
    pub const IDENTITY_ENV: &str = "FAKEGPU_IDENTITY";

    /// Environment variable with the namespaces whose pods are GPU reservation pods
    /// (comma-separated); default [`DEFAULT_RESERVATION_NAMESPACES`].
    pub const RESERVATION_NAMESPACES_ENV: &str = "FAKEGPU_RESERVATION_NAMESPACES";

    /// Where Run:ai (`runai-reservation`) and KAI (`kai-resource-reservation`, from v0.6) put
    /// the pods that hold whole GPUs for the pods sharing them.
    pub const DEFAULT_RESERVATION_NAMESPACES: &str = "runai-reservation,kai-resource-reservation";

    /// The Lease (coordination.k8s.io/v1) in the operator's namespace that replicas elect a
    /// leader with.
    pub const LEADER_LEASE: &str = "fakegpu-operator";
}

/// Metrics the operator exports on `/metrics`; dashboards and alerts read them.
pub mod metric {
    /// Counter, label `controller` (`node`, `pool`): reconciles run.
    pub const RECONCILES: &str = "fakegpu_operator_reconciles_total";
    /// Counter, labels `controller` and `error` (kind): reconciles that failed.
    pub const RECONCILE_ERRORS: &str = "fakegpu_operator_reconcile_errors_total";
    /// Histogram, label `controller`: reconcile duration in seconds.
    pub const RECONCILE_DURATION: &str = "fakegpu_operator_reconcile_duration_seconds";
    /// Counter, labels `kind` and `verb` (`apply`, `apply-status`, `patch-status`, `create`,
    /// `replace`, `merge-patch`, `delete`): writes the
    /// operator sent to the API server.
    pub const WRITES: &str = "fakegpu_operator_writes_total";
    /// Gauge: 1 while the replica holds the leader lease.
    pub const LEADER: &str = "fakegpu_operator_leader";
    /// Exporter gauge: 1 when the last Prometheus query for inference pods' request rates was
    /// answered, 0 when those pods fell back to their utilization range.
    pub const EXPORTER_KNATIVE_UP: &str = "fakegpu_exporter_knative_up";
    /// Node agent gauge: GPUs in the node's topology document.
    pub const AGENT_GPUS: &str = "fakegpu_node_agent_gpus";
    /// Node agent gauge: of those, GPUs marked unhealthy.
    pub const AGENT_UNHEALTHY_GPUS: &str = "fakegpu_node_agent_unhealthy_gpus";
    /// Node agent counter: topology documents ignored because they did not parse.
    pub const AGENT_TOPOLOGY_ERRORS: &str = "fakegpu_node_agent_topology_errors_total";
    /// Node agent gauge, label `plugin` (`device-plugin`, `dra`): 1 while the kubelet has
    /// the plugin registered (as far as the agent knows).
    pub const AGENT_REGISTERED: &str = "fakegpu_node_agent_registered";
    /// Node agent counter, labels `method` (gRPC method) and `outcome` (`ok`, `error`):
    /// calls the kubelet made.
    pub const AGENT_CALLS: &str = "fakegpu_node_agent_calls_total";
    /// Node agent gauge: claims prepared on the node (in the checkpoint).
    pub const AGENT_PREPARED_CLAIMS: &str = "fakegpu_node_agent_prepared_claims";
}

/// dcgm-exporter's metric and label names, which fakegpu-exporter publishes so that NVIDIA's
/// Grafana dashboard and queries written for real GPUs work unchanged.
pub mod dcgm {
    // The series of dcgm-exporter's default counters (its `etc/default-counters.csv`), in that
    // file's order, as dashboards and alerts written for real GPUs query them.

    /// Gauge, MHz: SM clock.
    pub const SM_CLOCK: &str = "DCGM_FI_DEV_SM_CLOCK";
    /// Gauge, MHz: memory clock.
    pub const MEM_CLOCK: &str = "DCGM_FI_DEV_MEM_CLOCK";
    /// Gauge, C: memory temperature.
    pub const MEMORY_TEMP: &str = "DCGM_FI_DEV_MEMORY_TEMP";
    /// Gauge, C: GPU temperature; NVIDIA's dashboard fills its GPU and instance dropdowns from it.
    pub const GPU_TEMP: &str = "DCGM_FI_DEV_GPU_TEMP";
    /// Gauge, W: power draw.
    pub const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";
    /// Counter, mJ: energy since boot.
    pub const TOTAL_ENERGY_CONSUMPTION: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
    /// Counter: PCIe retries.
    pub const PCIE_REPLAY_COUNTER: &str = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER";
    /// Gauge, percent: GPU utilization (whole GPUs only).
    pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
    /// Gauge, percent: memory-controller utilization (whole GPUs only).
    pub const MEM_COPY_UTIL: &str = "DCGM_FI_DEV_MEM_COPY_UTIL";
    /// Gauge, percent: encoder utilization (whole GPUs only).
    pub const ENC_UTIL: &str = "DCGM_FI_DEV_ENC_UTIL";
    /// Gauge, percent: decoder utilization (whole GPUs only).
    pub const DEC_UTIL: &str = "DCGM_FI_DEV_DEC_UTIL";
    /// Gauge: the last XID error (0: none).
    pub const XID_ERRORS: &str = "DCGM_FI_DEV_XID_ERRORS";
    /// Gauge, MiB: framebuffer free.
    pub const FB_FREE: &str = "DCGM_FI_DEV_FB_FREE";
    /// Gauge, MiB: framebuffer used.
    pub const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
    /// Gauge, MiB: framebuffer reserved by the driver.
    pub const FB_RESERVED: &str = "DCGM_FI_DEV_FB_RESERVED";
    /// Gauge: NVLink bandwidth counters of all lanes.
    pub const NVLINK_BANDWIDTH_TOTAL: &str = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL";
    /// Gauge: vGPU license status.
    pub const VGPU_LICENSE_STATUS: &str = "DCGM_FI_DEV_VGPU_LICENSE_STATUS";
    /// Counter: rows remapped for uncorrectable errors.
    pub const UNCORRECTABLE_REMAPPED_ROWS: &str = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS";
    /// Counter: rows remapped for correctable errors.
    pub const CORRECTABLE_REMAPPED_ROWS: &str = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS";
    /// Gauge, 0 or 1: whether row remapping failed.
    pub const ROW_REMAP_FAILURE: &str = "DCGM_FI_DEV_ROW_REMAP_FAILURE";
    /// Gauge, ratio 0..1: graphics engine activity (the profiling dashboards' utilization).
    pub const GR_ENGINE_ACTIVE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
    /// Gauge, ratio 0..1: tensor pipe activity (NVIDIA's dashboard's Tensor Core panel).
    pub const PIPE_TENSOR_ACTIVE: &str = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE";
    /// Gauge, ratio 0..1: memory interface activity.
    pub const DRAM_ACTIVE: &str = "DCGM_FI_PROF_DRAM_ACTIVE";
    /// Gauge, bytes per second: PCIe transmitted.
    pub const PCIE_TX_BYTES: &str = "DCGM_FI_PROF_PCIE_TX_BYTES";
    /// Gauge, bytes per second: PCIe received.
    pub const PCIE_RX_BYTES: &str = "DCGM_FI_PROF_PCIE_RX_BYTES";
    // ECC counters: commented out in dcgm-exporter's default file, enabled where GPU memory
    // errors are alerted on.
    /// Counter: single-bit (correctable) ECC errors since the driver loaded.
    pub const ECC_SBE_VOL_TOTAL: &str = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL";
    /// Counter: double-bit (uncorrectable) ECC errors since the driver loaded.
    pub const ECC_DBE_VOL_TOTAL: &str = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL";
    /// Counter: single-bit ECC errors over the GPU's life.
    pub const ECC_SBE_AGG_TOTAL: &str = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL";
    /// Counter: double-bit ECC errors over the GPU's life.
    pub const ECC_DBE_AGG_TOTAL: &str = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL";
    /// Gauge: XIDs a GPU raised in the exporter's trailing window (5 minutes), per XID (label
    /// `xid`); commented out in dcgm-exporter's default file, enabled where XIDs are alerted on.
    pub const EXP_XID_ERRORS_COUNT: &str = "DCGM_EXP_XID_ERRORS_COUNT";
    /// Label names, in dcgm-exporter's order. The hostname label is `Hostname` in released
    /// dcgm-exporter images (`hostname` at its repository head); see the exporter's settings.
    pub const LABELS: [&str; 10] = [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "namespace",
        "pod",
    ];
    /// Index of the hostname label in [`LABELS`].
    pub const HOSTNAME_LABEL: usize = 5;
    /// Labels of a MIG instance's series, after `modelName`: its profile (`1g.10gb`) and its
    /// GPU instance id.
    pub const MIG_LABELS: [&str; 2] = ["GPU_I_PROFILE", "GPU_I_ID"];
    /// The port dcgm-exporter listens on.
    pub const PORT: u16 = 9400;
    /// The media type of the exporter's `/metrics`: Prometheus's text format, version 0.0.4,
    /// the header by which Prometheus 3 picks its parser.
    pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
}

/// The per-node topology ConfigMap, kept readable by tools written for the reference's
/// `topology-<node>` ConfigMaps.
pub mod topology {
    /// ConfigMap name prefix; the full name is `topology-<node name>`.
    pub const CONFIGMAP_PREFIX: &str = "topology-";
    /// Data key holding the YAML document ([`crate::topology::NodeTopology`]).
    pub const DATA_KEY: &str = "topology.yml";
    /// Label (value `true`) on every per-node topology ConfigMap; the reference's selector.
    pub const NODE_TOPOLOGY_LABEL: &str = "node-topology";
    /// Label with the node's name; the reference's KWOK plugins read the node from it.
    pub const NODE_NAME_LABEL: &str = "node-name";
}

/// The per-node ConfigMap in which a node agent reports the devices the kubelet gave each
/// container (`fakegpu_api::kubelet_devices::KubeletDevices`). The kubelet, not fakegpu, picks the
/// devices of an extended-resource request on a real node; the operator records pods on the
/// GPUs this report names, so metrics and nvidia-smi agree with what the container sees.
pub mod kubelet_devices {
    /// ConfigMap name prefix; the full name is `kubelet-devices-<node name>`.
    pub const CONFIGMAP_PREFIX: &str = "kubelet-devices-";
    /// Data key holding the JSON report.
    pub const DATA_KEY: &str = "devices.json";
    /// Label (value `true`) on every report; the operator watches by it.
    pub const LABEL: &str = "fakegpu.dev/kubelet-devices";
    /// Environment variable with the kubelet's PodResources socket the node agent reads
    /// (default [`DEFAULT_SOCKET`]).
    pub const SOCKET_ENV: &str = "FAKEGPU_POD_RESOURCES_SOCKET";
    /// Where the kubelet serves its PodResources API.
    pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
}

/// fakegpu's NVML library (`libnvidia-ml.so.1`, crate `nvml`), which NVIDIA's own components
/// load in place of the driver's.
pub mod nvml {
    /// Environment variable with the path of the topology document the library answers from.
    pub const TOPOLOGY_ENV: &str = "FAKEGPU_NVML_TOPOLOGY";
    /// Where the library looks without [`TOPOLOGY_ENV`]: this file in the directory that holds
    /// the library itself, so that it answers wherever a driver root is mounted (NVIDIA's
    /// device plugin resolves the library's symlink and loads the versioned file by its path).
    pub const DOCUMENT_BESIDE_LIBRARY: &str = "fakegpu-topology.yml";

    /// The node agent's environment variable naming the driver root it lays out on a node of a
    /// `backend: mock` pool; unset, it lays out none.
    pub const DRIVER_ROOT_ENV: &str = "FAKEGPU_DRIVER_ROOT";
    /// The bundle's driver root on the host (the DaemonSet's hostPath). NVIDIA's device plugin
    /// and DRA driver take it as `--driver-root` / `nvidiaDriverRoot`; the pool status names it.
    pub const DRIVER_ROOT: &str = "/var/lib/fakegpu/driver";
    /// Directory of the NVML library inside a driver root: one of the directories NVIDIA's
    /// device plugin searches (`usr/lib64`, `usr/lib/x86_64-linux-gnu`, ...).
    pub const LIBRARY_DIR: &str = "usr/lib/x86_64-linux-gnu";
    /// The name NVIDIA's components dlopen, a symlink to the versioned file as the real driver
    /// installs it (`libnvidia-ml.so.<driver version>`, whose name NVIDIA's container toolkit
    /// reads the driver version from).
    pub const LIBRARY_SONAME: &str = "libnvidia-ml.so.1";
    /// nvidia-smi inside a driver root; NVIDIA's DRA driver refuses a root without it.
    pub const NVIDIA_SMI: &str = "usr/bin/nvidia-smi";
    /// The GPUs' PCI functions inside a driver root, as sysfs shows them (`vendor`, `class`,
    /// `config`, `numa_node`): GPU feature discovery reads `/sys/bus/pci/devices/<bus id>`, so
    /// its pod mounts this directory there.
    pub const PCI_DEVICES: &str = "sys/bus/pci/devices";
    /// The GPUs' device nodes inside a driver root, where NVIDIA's device plugin (`--dev-root`,
    /// default its driver root) and container toolkit (`nvidia-ctk cdi generate --dev-root`)
    /// look for them: `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`, and
    /// `nvidia<minor>` per GPU (the minor number the library reports). Each reads as
    /// `/dev/null` (1:3): a container handed one can open it, and nothing drives a GPU.
    pub const DEVICE_NODES: &str = "dev";
    /// The device nodes every NVIDIA driver installation has besides one per GPU.
    pub const CONTROL_DEVICES: [&str; 4] = [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ];
    /// Where the node agent's image carries the library (glibc build) it copies into the root.
    pub const SHIPPED_LIBRARY: &str = "/usr/local/lib/fakegpu/libnvidia-ml.so.1";
    /// Where the node agent's image carries fakegpu's CUDA driver library (crate `cuda`), which
    /// it lays out in driver roots as `libcuda.so.<driver version>` with [`CUDA_SONAME`]
    /// linking to it: NVIDIA's container toolkit finds a root's driver libraries by that file
    /// (NVIDIA's device plugin cannot write its CDI spec without it) and mounts it into the
    /// containers it gives GPUs, where the CUDA runtime loads it.
    pub const SHIPPED_CUDA_LIBRARY: &str = "/usr/local/lib/fakegpu/libcuda.so.1";
    /// The name the CUDA runtime dlopens.
    pub const CUDA_SONAME: &str = "libcuda.so.1";

    /// The host directory (the node agents' hostPath) holding what containers given GPUs load
    /// NVML from: the library as [`LIBRARY_SONAME`] and the node's document as
    /// [`DOCUMENT_BESIDE_LIBRARY`], both replaced by rename so that a container sees each
    /// document whole. Containers mount the library file and this directory
    /// ([`crate::names::container_env::NVML_DIR_PATH`]), with [`TOPOLOGY_ENV`] naming the
    /// document there.
    pub const CONTAINER_DIR: &str = "/var/lib/fakegpu/nvml";

    /// The socket inside a driver root on which the driver-root agent serves the node's
    /// document ([`crate::document_source`]). NVIDIA's container toolkit mounts the driver's
    /// IPC sockets it finds in a root into every container it gives GPUs (CDI specs of
    /// `nvidia-ctk cdi generate`, NVIDIA's device plugin and DRA driver), at the same path
    /// under `/`: this is nvidia-persistenced's, so a container given GPUs by NVIDIA's toolkit
    /// reaches the live document through it, though the toolkit mounts no file beside the
    /// library. Only fakegpu's library and nvidia-smi talk to it.
    pub const DOCUMENT_SOCKET: &str = "run/nvidia-persistenced/socket";
    /// Where a container finds [`DOCUMENT_SOCKET`]: the toolkit mounts it at `/run/...` or, on
    /// hosts where `/var/run` is no link to `/run`, at `/var/run/...`.
    pub const DOCUMENT_SOCKET_PATHS: [&str; 2] = [
        "/run/nvidia-persistenced/socket",
        "/var/run/nvidia-persistenced/socket",
    ];
    /// Environment variable naming the document socket instead of [`DOCUMENT_SOCKET_PATHS`]
    /// (tests serve one elsewhere).
    pub const DOCUMENT_SOCKET_ENV: &str = "FAKEGPU_NVML_SOCKET";
    /// The line a client sends on [`DOCUMENT_SOCKET`]; the agent answers with the document
    /// and closes. A server that is not fakegpu's (a real nvidia-persistenced) does not answer
    /// it, and the client gives up after a timeout.
    pub const DOCUMENT_REQUEST: &[u8] = b"fakegpu-topology-document\n";
    /// The directory holding a GPU container's device nodes. A container given GPUs by
    /// NVIDIA's toolkit has the device nodes of its GPUs alone (`nvidia<minor>`), and NVML
    /// sees the GPUs it can open: with the document from [`DOCUMENT_SOCKET`], fakegpu's
    /// library and nvidia-smi show the GPUs whose node is there.
    pub const CONTAINER_DEVICE_DIR: &str = "/dev";
    /// Environment variable naming another [`CONTAINER_DEVICE_DIR`] (tests).
    pub const DEVICE_DIR_ENV: &str = "FAKEGPU_NVML_DEVICE_DIR";
}

/// Environment a container given GPUs sees, set by the device plugin's Allocate and by the DRA
/// plugin's CDI specs, and read by the fake nvidia-smi inside the container.
pub mod container_env {
    /// The GPUs of the container, comma-separated UUIDs; NVIDIA's device plugin and container
    /// toolkit use it, and nvidia-smi shows exactly these GPUs.
    pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
    /// The container's pod's name, unless the pod sets another host name: nvidia-smi and the
    /// NVML library tell the pod holding a GPU by it ([`crate::topology::Caller`]).
    pub const HOSTNAME: &str = "HOSTNAME";
    /// The container's pod's UID, when the pod passes it in (the reference's nvidia-smi reads
    /// it): nvidia-smi and the NVML library tell the pod's use of a GPU by it.
    pub const POD_UUID: &str = "POD_UUID";
    /// The same list under the reference's name; scripts written for it read it.
    pub const MOCK_VISIBLE_DEVICES: &str = "MOCK_NVIDIA_VISIBLE_DEVICES";
    /// The node the container runs on; nvidia-smi asks for that node's GPUs.
    pub const NODE_NAME: &str = "NODE_NAME";
    /// Where nvidia-smi asks for its node's GPUs: the exporter's base URL, the Service's
    /// ClusterIP as the kubelet gives it to the agent ([`super::exporter::SERVICE_HOST_ENV`]),
    /// else `http://fakegpu-exporter.<namespace>.svc:9400` from the agent's own namespace, so
    /// no namespace is hard-coded (the reference's is).
    pub const EXPORTER_URL: &str = "FAKEGPU_EXPORTER_URL";
    /// Run:ai's fractional GPU share of the container (`0.5`); nvidia-smi shows that share of
    /// each GPU's memory, as the reference does.
    pub const RUNAI_NUM_OF_GPUS: &str = "RUNAI_NUM_OF_GPUS";
    /// Where the fake nvidia-smi appears in a container, as with the reference.
    pub const NVIDIA_SMI_PATH: &str = "/bin/nvidia-smi";
    /// Where fakegpu's NVML library appears in a container: the name NVML's users dlopen
    /// (go-nvml, pynvml, NVIDIA's tools) in the dynamic linker's default search directories of
    /// Debian and Ubuntu, and of RHEL, UBI and Fedora (a container image has no cache entry for
    /// it), as NVIDIA's container toolkit puts the real one.
    pub const NVML_LIBRARY_PATHS: [&str; 2] = [
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib64/libnvidia-ml.so.1",
    ];
    /// Where containers given GPUs get fakegpu's CUDA driver library (crate `cuda`): the
    /// driver's CUDA version and no device to run kernels on, as on `backend: mock` nodes,
    /// where NVIDIA's toolkit mounts the driver root's; in the same directories as
    /// [`NVML_LIBRARY_PATHS`].
    pub const CUDA_LIBRARY_PATHS: [&str; 2] = [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
    ];
    /// Where the host's [`crate::names::nvml::CONTAINER_DIR`] appears in a container (read-only): the
    /// node's document the library answers from, kept current by the node agent.
    pub const NVML_DIR_PATH: &str = "/run/fakegpu/nvml";
}

/// NVIDIA's ComputeDomains (`fakegpu_api::compute_domain`): the names its DRA driver and
/// controller use, which workloads and tools written for them match on.
pub mod compute_domain {
    /// DRA driver of IMEX channels; DeviceClass selectors and claims' opaque configs name it.
    pub const DRIVER: &str = "compute-domain.nvidia.com";
    /// DeviceClass of a domain's default channel (channel 0); the domain's ResourceClaimTemplate
    /// requests it, as NVIDIA's controller writes it.
    pub const DEFAULT_CHANNEL_CLASS: &str = "compute-domain-default-channel.nvidia.com";
    /// Label on a domain's ResourceClaimTemplate naming the domain.
    pub const TEMPLATE_LABEL: &str = "resource.nvidia.com/computeDomain";
    /// Label on a domain's ResourceClaimTemplate: who the claims are for (`Workload`).
    pub const TARGET_LABEL: &str = "resource.nvidia.com/computeDomainTarget";
    pub const TARGET_WORKLOAD: &str = "Workload";
    /// Label on the claims made from a domain's template, naming the domain; the domain's
    /// status is computed from the claims that carry it.
    pub const CLAIM_LABEL: &str = "nvidia.com/computeDomain";
    /// Request name of the channel in the template's claims.
    pub const CHANNEL_REQUEST: &str = "channel";
    /// Kind of the opaque configuration in the template, read by the kubelet plugin.
    pub const CHANNEL_CONFIG_KIND: &str = "ComputeDomainChannelConfig";
    /// Device attribute values of channels (`type`), and the attribute with the channel id.
    pub const TYPE_CHANNEL: &str = "channel";
    pub const ID_ATTRIBUTE: &str = "id";
    /// Where a container finds its IMEX channels (`channel<id>` character devices).
    pub const IMEX_CHANNEL_DIR: &str = "/dev/nvidia-caps-imex-channels";
    /// Channels of a node; `allocationMode: All` gives a pod every one, as NVIDIA's plugin does.
    pub const IMEX_CHANNELS: u32 = 2048;
}

/// Run:ai's / KAI scheduler's PodGroup (`scheduling.run.ai/v2alpha2`), read for its
/// `spec.priorityClassName` (the workload type of pods without a `workloadKind` label).
pub mod pod_group {
    pub const GROUP: &str = "scheduling.run.ai";
    pub const VERSION: &str = "v2alpha2";
    pub const KIND: &str = "PodGroup";
    pub const PLURAL: &str = "podgroups";
}

/// The exporter's HTTP API besides `/metrics`.
pub mod exporter {
    /// Name of the exporter's Service in the install namespace.
    pub const SERVICE: &str = "fakegpu-exporter";
    /// Path prefix of a node's GPU report ([`crate::report::NodeReport`]), followed by the
    /// node's name; nvidia-smi reads it (the reference's topology server path).
    pub const NODE_REPORT_PATH: &str = "/topology/nodes/";

    /// How long a drawn utilization holds, seconds (default
    /// [`crate::telemetry::DEFAULT_DRAW_INTERVAL_SECONDS`]): set on the exporter, and read by
    /// the NVML library, whose draws agree with the exporter's when both have the same.
    pub const DRAW_INTERVAL_ENV: &str = "FAKEGPU_UTILIZATION_INTERVAL_SECONDS";

    /// What the kubelet sets in each container of the install namespace for the exporter's
    /// Service (service links): its ClusterIP and its first port. The node agents read them
    /// for the URL they give GPU containers ([`super::container_env::EXPORTER_URL`]).
    pub const SERVICE_HOST_ENV: &str = "FAKEGPU_EXPORTER_SERVICE_HOST";
    pub const SERVICE_PORT_ENV: &str = "FAKEGPU_EXPORTER_SERVICE_PORT";

    /// The exporter's base URL inside the cluster when installed in `namespace`.
    pub fn default_url(namespace: &str) -> String {
        format!("http://{SERVICE}.{namespace}.svc:{}", super::dcgm::PORT)
    }
}
