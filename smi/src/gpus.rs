//! From the exporter's report and the container's environment to the GPUs nvidia-smi shows
//! (pure, so every layout is tested without a cluster).

use std::path::PathBuf;

use fakegpu_model::{
    document_source,
    faults::GpuFaults,
    names::{container_env, nvml::TOPOLOGY_ENV},
    profiles::{MigEngines, profile_by_product},
    report::NodeReport,
    telemetry::{self, Load},
    topology::{Caller, CallerEnv, GpuStatus, GpuTopology, NodeTopology, PodGpuUsage, long_bus_id},
};

/// What nvidia-smi learns from its process and container.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// `NODE_NAME`.
    pub node: Option<String>,
    /// `FAKEGPU_EXPORTER_URL`.
    pub exporter_url: Option<String>,
    /// Which pod the container is, and the GPUs it was given (`NVIDIA_VISIBLE_DEVICES`: UUIDs
    /// or indices, `all`, `none`/`void`; unset shows all).
    pub identity: CallerEnv,
    /// `RUNAI_NUM_OF_GPUS`: a fractional share of each GPU.
    pub gpu_share: Option<String>,
    /// The container's main process, shown in the processes table.
    pub process_id: u32,
    pub process_name: String,
    /// `FAKEGPU_NVML_TOPOLOGY`: the node's document, as the node agent keeps it for the
    /// container's NVML library; read instead of asking the exporter when it is there.
    pub document: Option<String>,
    /// Without [`Self::document`]: the driver-root agent's socket serving it, which NVIDIA's
    /// container toolkit mounts into the containers it gives GPUs on `backend: mock` nodes
    /// (the toolkit mounts this nvidia-smi from the driver root too).
    pub document_socket: Option<PathBuf>,
    /// Where the container's device nodes are (`/dev`): with the document from the socket,
    /// the GPUs shown are those whose device node the container has, as NVML sees them.
    pub device_dir: PathBuf,
    /// The utilization draw period of now (`FAKEGPU_UTILIZATION_INTERVAL_SECONDS`, as the
    /// exporter's), for a report made from the document.
    pub draw_period: u64,
}

impl Environment {
    /// This process's environment and its container's main process (PID 1).
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        let process_name = std::fs::read("/proc/1/cmdline")
            .ok()
            .and_then(|bytes| {
                let first = bytes.split(|b| *b == 0).next()?.to_vec();
                String::from_utf8(first).ok().filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| "[Not Found]".to_owned());
        let document = var(TOPOLOGY_ENV).filter(|path| !path.is_empty());
        Self {
            node: var(container_env::NODE_NAME),
            exporter_url: var(container_env::EXPORTER_URL),
            identity: CallerEnv::from_process(),
            gpu_share: var(container_env::RUNAI_NUM_OF_GPUS),
            process_id: Caller::PROCESS_ID,
            process_name,
            document: document.clone(),
            document_socket: document.is_none().then(document_source::find).flatten(),
            device_dir: document_source::device_dir(),
            draw_period: telemetry::draw_period(
                std::time::SystemTime::now(),
                telemetry::draw_interval_from_env(),
            ),
        }
    }

    /// The driver-root agent's socket, when it is where this container has its document: one
    /// that NVIDIA's toolkit gave GPUs (fakegpu's own plugins give the document itself).
    pub fn toolkit_socket(&self) -> Option<&std::path::Path> {
        self.document
            .is_none()
            .then_some(self.document_socket.as_deref())
            .flatten()
    }

    /// This environment in a container NVIDIA's toolkit gave GPUs: it was given those of
    /// `document` whose device node it has (`NVIDIA_VISIBLE_DEVICES` is `void` under CDI).
    pub fn given_by_device_nodes(&self, document: &NodeTopology) -> Self {
        let mut env = self.clone();
        env.identity.visible_devices =
            Some(document_source::given_gpus(document, &self.device_dir));
        env
    }
}

/// A process on a GPU. `pid` is `None` for other pods' processes (another PID namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    /// GPU-instance ID of the MIG instance it runs on; `None` on a whole GPU.
    pub gpu_instance: Option<u32>,
    pub pid: Option<u32>,
    pub name: String,
    /// MiB.
    pub used_memory: u64,
}

/// One GPU as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// `00000000:07:00.0`, nvidia-smi's 8-digit domain.
    pub bus_id: String,
    /// MiB.
    pub memory_total: u64,
    /// MiB.
    pub memory_used: u64,
    /// Percent.
    pub utilization: u8,
    /// Watts; `None` when the product's limit is unknown.
    pub power_limit: Option<u32>,
    /// `Enabled`, `Disabled` or `N/A` (not MIG capable).
    pub mig_mode: &'static str,
    /// `9.0`; empty when unknown.
    pub compute_capability: String,
    /// The GPU's MIG instances the container sees (all of them unless it was given some).
    pub mig_devices: Vec<MigInstance>,
    pub processes: Vec<Process>,
    /// Faults injected into the GPU (ECC counts, thermal throttling, XID).
    pub faults: GpuFaults,
}

/// A MIG instance as nvidia-smi lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstance {
    pub profile: String,
    pub uuid: String,
    /// The driver's GPU-instance ID (`GI ID`); one compute instance each, CI ID 0.
    pub gpu_instance: u32,
    /// MiB.
    pub memory_total: u64,
    /// MiB, the pods' allocations on it.
    pub memory_used: u64,
    /// BAR1 aperture, MiB.
    pub bar1_total: u64,
    pub multiprocessors: u32,
    pub engines: MigEngines,
}

impl Gpu {
    /// What the GPU's sensors read: the model the exporter's series follow too.
    pub fn load(&self) -> Load {
        Load {
            utilization: self.utilization,
            power_limit: self.power_limit,
            thermal_throttling: self.faults.thermal_throttling,
        }
    }

    /// Board power as the driver reports it, mW (what NVIDIA's nvidia-smi prints from).
    pub fn power_draw_milliwatts(&self) -> Option<u32> {
        self.load().power_draw_milliwatts()
    }

    /// Temperature, C.
    pub fn temperature(&self) -> u32 {
        self.load().gpu_temperature()
    }

    /// SM clock, MHz.
    pub fn sm_clock(&self) -> u32 {
        self.load().sm_clock()
    }

    pub fn memory_free(&self) -> u64 {
        self.memory_total.saturating_sub(self.memory_used)
    }
}

/// The node's GPUs as shown to this container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub driver_version: String,
    pub cuda_version: String,
    pub gpus: Vec<Gpu>,
}

impl Machine {
    /// The GPUs `-i` names (indices or UUIDs), in that order; the first unknown one is the error.
    pub fn select(&self, ids: &[String]) -> Result<Self, String> {
        let gpus = ids
            .iter()
            .map(|id| {
                self.gpus
                    .iter()
                    .find(|g| g.uuid == *id || g.index.to_string() == *id)
                    .cloned()
                    .ok_or_else(|| id.clone())
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            gpus,
            ..self.clone()
        })
    }
}

/// The IDs `NVIDIA_VISIBLE_DEVICES` lists; `None` for all devices.
fn listed(spec: Option<&str>) -> Option<Vec<&str>> {
    match spec.map(str::trim) {
        None | Some("" | "all") => None,
        Some("none" | "void") => Some(Vec::new()),
        Some(list) => Some(list.split(',').map(str::trim).collect()),
    }
}

/// Whether `NVIDIA_VISIBLE_DEVICES` gives the container `gpu` or one of its MIG instances.
fn visible(spec: Option<&str>, gpu: &GpuTopology) -> bool {
    listed(spec).is_none_or(|ids| {
        ids.iter().any(|id| {
            *id == gpu.id
                || *id == gpu.index.to_string()
                || gpu.mig_devices.iter().any(|m| m.uuid == *id)
        })
    })
}

/// The MIG instances of `gpu` the container sees: those it was given, or all of them when it
/// was given the whole GPU (or everything).
fn visible_mig(spec: Option<&str>, gpu_memory: u64, gpu: &GpuTopology) -> Vec<MigInstance> {
    let ids = listed(spec);
    let given: Vec<_> = gpu
        .mig_devices
        .iter()
        .filter(|m| {
            ids.as_ref()
                .is_some_and(|ids| ids.contains(&m.uuid.as_str()))
        })
        .collect();
    let shown = if given.is_empty() {
        gpu.mig_devices.iter().collect()
    } else {
        given
    };
    shown
        .into_iter()
        .map(|m| MigInstance {
            profile: m.profile.clone(),
            uuid: m.uuid.clone(),
            gpu_instance: m.gpu_instance_id(),
            memory_total: m.memory,
            memory_used: m.status.memory_used(m.memory),
            bar1_total: m.bar1_mib(gpu_memory),
            multiprocessors: m.multiprocessors,
            engines: m.engines,
        })
        .collect()
}

/// What pods use: a whole GPU, or one MIG instance of it, by its UUID.
struct Used<'a> {
    id: &'a str,
    status: &'a GpuStatus,
    /// The instance's GPU-instance ID; `None` for a whole GPU.
    gpu_instance: Option<u32>,
}

/// Whether the usage entry of pod `uid` on `used` is this container's pod.
fn ours(env: &Environment, used: &Used<'_>, uid: &str) -> bool {
    env.identity.caller().owns(used.id, used.status, uid)
}

/// A fractional share from `RUNAI_NUM_OF_GPUS`, when it is one.
fn share(env: &Environment) -> Option<f64> {
    env.gpu_share
        .as_deref()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|f| *f > 0.0 && *f < 1.0)
}

/// `gpu` with the index the container sees it by.
fn process(
    env: &Environment,
    (index, gpu): (u32, &GpuTopology),
    used: &Used<'_>,
    uid: &str,
    usage: &PodGpuUsage,
) -> Process {
    let status = used.status;
    let (pid, name) = if ours(env, used, uid) {
        (Some(env.process_id), env.process_name.clone())
    } else if status.pod_gpu_usage_status.len() == 1 && !status.allocated_by.pod.is_empty() {
        let holder = &status.allocated_by;
        (None, format!("{}/{}", holder.namespace, holder.pod))
    } else {
        (None, format!("pod {uid}"))
    };
    Process {
        gpu_index: index,
        gpu_uuid: gpu.id.clone(),
        gpu_instance: used.gpu_instance,
        pid,
        name,
        used_memory: usage.fb_used,
    }
}

/// The GPUs of `report` this container sees. Memory used is its own pod's use when the pod is
/// known, every pod's otherwise; a fractional `RUNAI_NUM_OF_GPUS` shrinks the total to the share.
pub fn machine(report: &NodeReport, env: &Environment) -> Machine {
    let topology = &report.topology;
    // Per GPU, as the driver (and fakegpu's NVML library) reports it: a GPU the layout leaves
    // whole under `mixed` is served whole, so its MIG mode is off.
    let mig_capable =
        profile_by_product(&topology.gpu_product).is_some_and(|profile| profile.mig_capable());
    let mig_mode = |gpu: &GpuTopology| match (mig_capable, gpu.mig_devices.is_empty()) {
        (false, true) => "N/A",
        (_, false) => "Enabled",
        (true, true) => "Disabled",
    };
    let total = share(env).map_or(topology.gpu_memory, |f| {
        (topology.gpu_memory as f64 * f).floor() as u64
    });
    // Numbered from 0 among the GPUs the container sees, as NVML numbers them: a container
    // given a node's GPU 3 alone calls it GPU 0 (and CUDA_VISIBLE_DEVICES counts the same way).
    let mut shown: Vec<&GpuTopology> = topology
        .gpus
        .iter()
        .filter(|gpu| visible(env.identity.visible_devices.as_deref(), gpu))
        .collect();
    shown.sort_by_key(|gpu| gpu.index);
    let gpus = shown
        .into_iter()
        .zip(0..)
        .map(|(gpu, index)| {
            let mig_devices = visible_mig(
                env.identity.visible_devices.as_deref(),
                topology.gpu_memory,
                gpu,
            );
            // A partitioned GPU's pods use its instances (those the container sees).
            let parts: Vec<Used<'_>> = if gpu.mig_devices.is_empty() {
                vec![Used {
                    id: &gpu.id,
                    status: &gpu.status,
                    gpu_instance: None,
                }]
            } else {
                gpu.mig_devices
                    .iter()
                    .filter(|m| mig_devices.iter().any(|v| v.uuid == m.uuid))
                    .map(|m| Used {
                        id: &m.uuid,
                        status: &m.status,
                        gpu_instance: Some(m.gpu_instance_id()),
                    })
                    .collect()
            };
            let entries: Vec<(&Used<'_>, &String, &PodGpuUsage)> = parts
                .iter()
                .flat_map(|part| {
                    part.status
                        .pod_gpu_usage_status
                        .iter()
                        .map(move |(uid, usage)| (part, uid, usage))
                })
                .collect();
            let mine: Vec<_> = entries
                .iter()
                .filter(|(part, uid, _)| ours(env, part, uid))
                .collect();
            let used: u64 = if mine.is_empty() {
                entries.iter().map(|(_, _, u)| u.fb_used).sum()
            } else {
                mine.iter().map(|(_, _, u)| u.fb_used).sum()
            };
            Gpu {
                index,
                name: topology.gpu_product.clone(),
                uuid: gpu.id.clone(),
                bus_id: long_bus_id(&gpu.pci_bus_id),
                memory_total: total,
                memory_used: used.min(total),
                utilization: report
                    .utilization
                    .get(&gpu.id)
                    .copied()
                    .unwrap_or(0)
                    .min(100),
                power_limit: (topology.power_limit_watts > 0).then_some(topology.power_limit_watts),
                mig_mode: mig_mode(gpu),
                compute_capability: topology.compute_capability.clone(),
                mig_devices,
                processes: entries
                    .iter()
                    .map(|(part, uid, u)| process(env, (index, gpu), part, uid, u))
                    .collect(),
                faults: gpu.faults.clone(),
            }
        })
        .collect();
    Machine {
        driver_version: topology.driver_version.clone(),
        cuda_version: topology.cuda_version.clone(),
        gpus,
    }
}
