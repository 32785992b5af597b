//! What NVML reports, computed from a node's topology document: pure, no FFI. The FFI layer
//! (`crate::ffi`) only copies these values into the caller's buffers.

use fakegpu_model::{
    profiles::profile_by_product,
    telemetry::{Load, drawn_total, drawn_utilization, gpu_utilization},
    topology::{Caller, GpuStatus, GpuTopology, MigDevice, NodeTopology},
};

use crate::mig::{ComputeInstance, GiProfile, GpuInstance, gi_profiles, instances};

/// `nvmlBrandType_t` values.
pub mod brand {
    pub const UNKNOWN: u32 = 0;
    pub const TESLA: u32 = 2;
    pub const NVIDIA: u32 = 14;
}

/// `nvmlDeviceArchitecture_t` values.
pub mod architecture {
    pub const VOLTA: u32 = 5;
    pub const TURING: u32 = 6;
    pub const AMPERE: u32 = 7;
    pub const ADA: u32 = 8;
    pub const HOPPER: u32 = 9;
    pub const BLACKWELL: u32 = 10;
    pub const UNKNOWN: u32 = 0xffff_ffff;
}

/// NVIDIA's PCI vendor ID, the low half of `pciDeviceId`.
const NVIDIA_VENDOR: u32 = 0x10de;

/// The GPUs of one machine as NVML lists them, and the system-wide values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `550.163.01`.
    pub driver_version: String,
    /// `12.550.163.01`: NVML's own version is the CUDA major and the driver version.
    pub nvml_version: String,
    /// `12040` for CUDA 12.4, as `nvmlSystemGetCudaDriverVersion` encodes it.
    pub cuda_driver_version: i32,
    pub devices: Vec<Device>,
}

/// A whole GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// NVML's index: the position among the listed GPUs.
    pub index: u32,
    /// `/dev/nvidia<minor>`: the GPU's index on the node.
    pub minor: u32,
    pub name: String,
    pub uuid: String,
    pub memory_bytes: u64,
    pub pci: Pci,
    pub compute_capability: (i32, i32),
    pub brand: u32,
    pub architecture: u32,
    /// MIG mode on (the document partitions the GPU) and its instances.
    pub mig_enabled: bool,
    pub mig_devices: Vec<MigInstance>,
    /// The GPU-instance profiles the product offers (its catalog entry's); none for a product
    /// outside the catalog or one without MIG.
    pub gi_profiles: Vec<GiProfile>,
    /// Where the GPU hangs off the host: its NUMA node and its PCIe root complex.
    pub numa_node: Option<u32>,
    pub pcie_root: String,
    /// False when the document marks the GPU unhealthy (`fakegpu.dev/unhealthy-gpus`): the
    /// library then reports a critical XID error for it to whoever registered for events.
    pub healthy: bool,
    /// The XID the GPU reports, if any: injected, or implied by its faults or health (see
    /// `GpuTopology::reported_xid`).
    pub xid: Option<u32>,
    /// How long until that XID recurs; `None`: raised once.
    pub xid_period: Option<std::time::Duration>,
    /// How busy the GPU is (its pods at the middle of their ranges) and what bounds its
    /// sensors: the model the exporter and fakegpu's nvidia-smi read (`fakegpu_model::telemetry`).
    pub load: Load,
    /// Framebuffer the pods hold, bytes.
    pub memory_used_bytes: u64,
    /// The processes on the GPU and its instances (those it sees) the caller is shown, see
    /// [`Process`].
    pub processes: Vec<Process>,
    /// Injected ECC errors: (corrected, uncorrected).
    pub ecc_errors: (u64, u64),
}

/// NVML's `nvmlGpuTopologyLevel_t`: the closest thing two GPUs' PCIe paths share.
pub mod topology_level {
    /// The same board (a GPU with itself).
    pub const INTERNAL: u32 = 0;
    /// A PCIe host bridge: both hang off the same root complex.
    pub const HOSTBRIDGE: u32 = 30;
    /// The same NUMA node, different host bridges.
    pub const NODE: u32 = 40;
    /// Across the CPUs' interconnect (SMP).
    pub const SYSTEM: u32 = 50;
}

impl Device {
    /// The level at which this GPU's and `other`'s paths to the CPU meet, from the document's
    /// PCIe roots and NUMA nodes (GPU feature discovery and NVIDIA's device plugin weigh GPU
    /// pairs by it).
    pub fn common_ancestor(&self, other: &Device) -> u32 {
        if self.uuid == other.uuid {
            topology_level::INTERNAL
        } else if !self.pcie_root.is_empty() && self.pcie_root == other.pcie_root {
            topology_level::HOSTBRIDGE
        } else if self.numa_node.is_some() && self.numa_node == other.numa_node {
            topology_level::NODE
        } else {
            topology_level::SYSTEM
        }
    }
}

/// A MIG instance (a "MIG device handle" in NVML).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstance {
    pub uuid: String,
    /// NVML names a MIG device after its GPU and profile: `NVIDIA A100-SXM4-80GB MIG 1g.10gb`.
    pub name: String,
    /// Its GPU instance; `nvmlGpuInstance_t` handles are this field's address.
    pub gpu_instance: GpuInstance,
    /// One compute instance per GPU instance, the whole of it; `nvmlComputeInstance_t`
    /// handles are this field's address.
    pub compute_instance: ComputeInstance,
    pub memory_bytes: u64,
    /// Framebuffer the pods on the instance hold, bytes.
    pub memory_used_bytes: u64,
    /// Its share of the GPU's BAR1 aperture, bytes.
    pub bar1_bytes: u64,
    /// The processes on the instance the caller is shown.
    pub processes: Vec<Process>,
}

/// A process with a compute context on a GPU, as NVML lists it: a pod's use of the GPU or MIG
/// instance. The caller's own pod's (see [`Caller`]) is its container's main process; a caller
/// that is no pod's (on the node's host, say) is shown every pod's, under the PIDs its own
/// `/proc` gives their processes (`crate::host`); a pod's container is shown no other pod's,
/// which live in other PID namespaces, as the real driver shows it none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// Known for the caller's own (its main process); found on the host for another pod's.
    pub pid: Option<u32>,
    /// The pod's UID.
    pub pod: String,
    pub used_memory_bytes: u64,
    /// The GPU- and compute-instance IDs of the MIG instance it runs on; `None` on a whole GPU.
    pub instance: Option<(u32, u32)>,
    /// How busy it keeps the SMs, percent: its pod's draw for the period, as the exporter draws.
    pub sm_utilization: u8,
}

/// Who asks, and when: the caller, whether it is none of the document's pods, and the draw
/// period its readings are of.
#[derive(Clone, Copy)]
struct Asking<'a> {
    caller: Caller<'a>,
    no_pod: bool,
    period: u64,
}

/// The processes `asking` is shown among the pods `status` (of the GPU or MIG instance `unit`)
/// lists, busy as their draws of the period make them.
fn processes(
    asking: Asking<'_>,
    (unit, status): (&str, &GpuStatus),
    instance: Option<(u32, u32)>,
) -> Vec<Process> {
    status
        .pod_gpu_usage_status
        .iter()
        .filter_map(|(uid, usage)| {
            let pid = if asking.caller.owns(unit, status, uid) {
                Some(Caller::PROCESS_ID)
            } else if asking.no_pod {
                None
            } else {
                return None;
            };
            Some(Process {
                pid,
                pod: uid.clone(),
                used_memory_bytes: usage.fb_used * MIB,
                instance,
                sm_utilization: drawn_utilization(uid, unit, usage.utilization, asking.period),
            })
        })
        .collect()
}

/// A GPU's PCI identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pci {
    /// `00000000:01:00.0` (NVML's 8-digit domain).
    pub bus_id: String,
    /// `0000:01:00.0`.
    pub bus_id_legacy: String,
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    /// Device ID (high 16 bits) and vendor ID (low 16 bits).
    pub pci_device_id: u32,
}

const MIB: u64 = 1024 * 1024;

impl Machine {
    /// The GPUs of `document` that `visible` lets this process see (see [`Visible`]), in
    /// index order, numbered from 0 as NVML numbers what it sees, busy as their pods' draws of
    /// draw period `period` make them (`fakegpu_model::telemetry::drawn_utilization`), with
    /// `caller`'s processes on them.
    pub fn of(document: &NodeTopology, visible: &Visible, caller: Caller<'_>, period: u64) -> Self {
        let mut gpus: Vec<&GpuTopology> = document
            .gpus
            .iter()
            .filter(|gpu| visible.shows(gpu))
            .collect();
        gpus.sort_by_key(|gpu| gpu.index);
        let no_pod = !document.gpus.iter().any(|gpu| {
            gpu.statuses().any(|(unit, status)| {
                status
                    .pod_gpu_usage_status
                    .keys()
                    .any(|uid| caller.owns(unit, status, uid))
            })
        });
        let asking = Asking {
            caller,
            no_pod,
            period,
        };
        let devices = gpus
            .into_iter()
            .zip(0..)
            .map(|(gpu, index)| device(document, gpu, index, visible, asking))
            .collect();
        let cuda_major = document
            .cuda_version
            .split('.')
            .next()
            .and_then(|major| major.parse::<i32>().ok())
            .unwrap_or(0);
        Self {
            driver_version: document.driver_version.clone(),
            nvml_version: format!("{cuda_major}.{}", document.driver_version),
            cuda_driver_version: document.cuda_driver_version(),
            devices,
        }
    }
}

fn device(
    document: &NodeTopology,
    gpu: &GpuTopology,
    index: u32,
    visible: &Visible,
    asking: Asking<'_>,
) -> Device {
    let period = asking.period;
    let mig_devices: Vec<MigInstance> = gpu
        .mig_devices
        .iter()
        .filter(|mig| visible.shows_instance(gpu, mig))
        .map(|mig| mig_instance(document, mig, asking))
        .collect();
    // On a partitioned GPU the processes run on its instances, and the GPU lists them all.
    let processes = processes(asking, (&gpu.id, &gpu.status), None)
        .into_iter()
        .chain(mig_devices.iter().flat_map(|m| m.processes.iter().cloned()))
        .collect();
    Device {
        index,
        minor: gpu.index,
        name: document.gpu_product.clone(),
        uuid: gpu.id.clone(),
        memory_bytes: document.gpu_memory * MIB,
        pci: pci(&gpu.pci_bus_id),
        compute_capability: compute_capability(&document.compute_capability),
        brand: brand_of(&document.brand),
        architecture: architecture_of(&document.architecture),
        mig_enabled: !gpu.mig_devices.is_empty(),
        mig_devices,
        gi_profiles: profile_by_product(&document.gpu_product)
            .map(|product| gi_profiles(product.mig_profiles))
            .unwrap_or_default(),
        numa_node: gpu.numa_node,
        pcie_root: gpu.pcie_root.clone(),
        healthy: gpu.health.is_healthy(),
        xid: gpu.reported_xid(),
        xid_period: gpu.xid_period(),
        load: Load {
            utilization: gpu_utilization(gpu, document.gpu_memory, |target, status| {
                drawn_total(status, target, period)
            }),
            power_limit: (document.power_limit_watts > 0).then_some(document.power_limit_watts),
            thermal_throttling: gpu.faults.thermal_throttling,
        },
        memory_used_bytes: gpu
            .statuses()
            .map(|(_, status)| status.memory_used(document.gpu_memory))
            .sum::<u64>()
            .min(document.gpu_memory)
            * MIB,
        processes,
        ecc_errors: (gpu.faults.ecc_correctable, gpu.faults.ecc_uncorrectable),
    }
}

/// Instance `mig` of a GPU of `document`, with the processes on it `asking` is shown.
fn mig_instance(document: &NodeTopology, mig: &MigDevice, asking: Asking<'_>) -> MigInstance {
    let (gpu_instance, compute_instance) = instances(mig);
    let ids = (gpu_instance.id, compute_instance.id);
    MigInstance {
        processes: processes(asking, (&mig.uuid, &mig.status), Some(ids)),
        uuid: mig.uuid.clone(),
        name: format!("{} MIG {}", document.gpu_product, mig.profile),
        gpu_instance,
        compute_instance,
        memory_bytes: mig.memory * MIB,
        memory_used_bytes: mig.status.memory_used(mig.memory) * MIB,
        bar1_bytes: mig.bar1_mib(document.gpu_memory) * MIB,
    }
}

/// `9.0` -> (9, 0); unknown -> (0, 0).
fn compute_capability(text: &str) -> (i32, i32) {
    let mut parts = text.split('.').map(|p| p.parse::<i32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => (0, 0),
    }
}

/// go-nvlib's brand names back to NVML's values.
fn brand_of(name: &str) -> u32 {
    match name {
        "Tesla" => brand::TESLA,
        "Nvidia" | "NVIDIA" => brand::NVIDIA,
        _ => brand::UNKNOWN,
    }
}

/// go-nvlib's architecture names back to NVML's values.
fn architecture_of(name: &str) -> u32 {
    match name {
        "Volta" => architecture::VOLTA,
        "Turing" => architecture::TURING,
        "Ampere" => architecture::AMPERE,
        "Ada Lovelace" => architecture::ADA,
        "Hopper" => architecture::HOPPER,
        "Blackwell" => architecture::BLACKWELL,
        _ => architecture::UNKNOWN,
    }
}

/// A document's `0000:01:00.0` as NVML reports it.
fn pci(bus_id: &str) -> Pci {
    let hex = |text: &str| u32::from_str_radix(text, 16).unwrap_or(0);
    let (domain, rest) = bus_id.split_once(':').unwrap_or(("0", bus_id));
    let (bus, rest) = rest.split_once(':').unwrap_or(("0", rest));
    let device = rest.split('.').next().unwrap_or("0");
    let (domain, bus, device) = (hex(domain), hex(bus), hex(device));
    Pci {
        bus_id: format!("{domain:08X}:{bus:02X}:{device:02X}.0"),
        bus_id_legacy: format!("{domain:04X}:{bus:02X}:{device:02X}.0"),
        domain,
        bus,
        device,
        pci_device_id: NVIDIA_VENDOR,
    }
}

/// Which GPUs a process sees: `NVIDIA_VISIBLE_DEVICES` as the container runtime applies it
/// (a container is given the device nodes of these GPUs only). Unset, empty or `all`: every
/// GPU; `none` or `void`: none; otherwise a comma-separated list of UUIDs (of GPUs or of MIG
/// instances, which show their parent GPU) or indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Visible {
    All,
    Only(Vec<String>),
}

impl Visible {
    pub fn parse(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            None | Some("" | "all") => Self::All,
            Some("none" | "void") => Self::Only(Vec::new()),
            Some(list) => Self::Only(
                list.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
        }
    }

    /// Whether MIG instance `mig` of `gpu` is seen: a container given the whole GPU sees all
    /// its instances, one given instances sees those alone (it has their capability device
    /// nodes only, so the driver enumerates no other).
    fn shows_instance(&self, gpu: &GpuTopology, mig: &MigDevice) -> bool {
        match self {
            Self::All => true,
            Self::Only(names) => names
                .iter()
                .any(|name| *name == gpu.id || *name == gpu.index.to_string() || *name == mig.uuid),
        }
    }

    fn shows(&self, gpu: &GpuTopology) -> bool {
        match self {
            Self::All => true,
            Self::Only(names) => names.iter().any(|name| {
                *name == gpu.id
                    || *name == gpu.index.to_string()
                    || gpu.mig_devices.iter().any(|m| m.uuid == *name)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::topology::{MigDevice, PodGpuUsage};

    use super::*;

    fn document() -> NodeTopology {
        let gpu = |index: u32, bus: &str| GpuTopology {
            id: format!("GPU-{index}"),
            index,
            pci_bus_id: format!("0000:{bus}:00.0"),
            ..Default::default()
        };
        let mut partitioned = gpu(1, "0a");
        partitioned.mig_devices = vec![MigDevice {
            uuid: "MIG-a".into(),
            profile: "3g.40gb".into(),
            gi_profile_id: 2,
            placement_start: 4,
            memory_slices: 4,
            compute_slices: 3,
            memory: 40192,
            ..Default::default()
        }];
        partitioned.mig_devices.push(MigDevice {
            uuid: "MIG-b".into(),
            placement_start: 0,
            ..partitioned.mig_devices[0].clone()
        });
        NodeTopology {
            gpu_memory: 81920,
            gpu_product: "NVIDIA A100-SXM4-80GB".into(),
            driver_version: "550.163.01".into(),
            cuda_version: "12.4".into(),
            architecture: "Ampere".into(),
            brand: "Nvidia".into(),
            compute_capability: "8.0".into(),
            gpus: vec![partitioned, gpu(0, "01")],
            ..Default::default()
        }
    }

    #[test]
    fn gpu_pairs_meet_where_their_roots_and_numa_nodes_say() {
        let placed = |index: u32, zone: Option<u32>, root: &str| GpuTopology {
            id: format!("GPU-{index}"),
            index,
            numa_node: zone,
            pcie_root: root.into(),
            ..Default::default()
        };
        let document = NodeTopology {
            gpus: vec![
                placed(0, Some(0), "pci0000:00"),
                placed(1, Some(0), "pci0000:00"),
                placed(2, Some(0), "pci0001:00"),
                placed(3, Some(1), "pci0002:00"),
                placed(4, None, ""),
            ],
            ..Default::default()
        };
        let machine = Machine::of(&document, &Visible::All, Caller::default(), 0);
        let level = |a: usize, b: usize| machine.devices[a].common_ancestor(&machine.devices[b]);
        assert_eq!(level(0, 0), topology_level::INTERNAL);
        assert_eq!(level(0, 1), topology_level::HOSTBRIDGE);
        assert_eq!(level(0, 2), topology_level::NODE);
        assert_eq!(level(2, 3), topology_level::SYSTEM);
        assert_eq!(level(4, 0), topology_level::SYSTEM);
    }

    #[test]
    fn a_document_reads_as_nvml_reports_a_machine() {
        let machine = Machine::of(&document(), &Visible::All, Caller::default(), 0);
        assert_eq!(machine.nvml_version, "12.550.163.01");
        assert_eq!(machine.cuda_driver_version, 12040);
        let [first, second] = machine.devices.as_slice() else {
            unreachable!("two GPUs")
        };
        assert_eq!((first.index, first.uuid.as_str()), (0, "GPU-0"));
        assert_eq!(first.memory_bytes, 81920 * MIB);
        assert_eq!(first.pci.bus_id, "00000000:01:00.0");
        assert_eq!(second.pci.bus_id_legacy, "0000:0A:00.0");
        assert_eq!(second.pci.bus, 10);
        assert_eq!(first.compute_capability, (8, 0));
        assert_eq!((first.brand, first.architecture), (14, 7));
        assert!(!first.mig_enabled && second.mig_enabled);
        let mig = &second.mig_devices[0];
        assert_eq!(mig.name, "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
        // A half-GPU instance at slice 4 is the driver's GI 2.
        assert_eq!(mig.gpu_instance.id, 2);
    }

    #[test]
    fn visible_devices_filter_and_renumber() {
        let only = Visible::parse(Some("GPU-1"));
        let machine = Machine::of(&document(), &only, Caller::default(), 0);
        assert_eq!(machine.devices.len(), 1);
        assert_eq!((machine.devices[0].index, machine.devices[0].minor), (0, 1));
        let by_mig = Machine::of(
            &document(),
            &Visible::parse(Some("MIG-a")),
            Caller::default(),
            0,
        );
        assert_eq!(by_mig.devices[0].uuid, "GPU-1");
        let instances = |machine: &Machine| -> Vec<String> {
            machine.devices[0]
                .mig_devices
                .iter()
                .map(|m| m.uuid.clone())
                .collect()
        };
        assert_eq!(instances(&by_mig), ["MIG-a"]);
        let whole = Machine::of(
            &document(),
            &Visible::parse(Some("GPU-1")),
            Caller::default(),
            0,
        );
        assert_eq!(instances(&whole), ["MIG-a", "MIG-b"]);
        assert!(
            Machine::of(
                &document(),
                &Visible::parse(Some("none")),
                Caller::default(),
                0
            )
            .devices
            .is_empty()
        );
        assert_eq!(Visible::parse(Some("all")), Visible::All);
        assert_eq!(Visible::parse(None), Visible::All);
        assert_eq!(
            Machine::of(
                &document(),
                &Visible::parse(Some("0,1")),
                Caller::default(),
                0
            )
            .devices
            .len(),
            2
        );
    }

    #[test]
    fn a_pod_s_container_sees_its_own_process_and_the_host_every_pod_s() {
        let mut document = document();
        let usage = |fb_used: u64| PodGpuUsage {
            fb_used,
            ..Default::default()
        };
        // GPU 0 whole, one pod; GPU 1's instance MIG-a one pod, MIG-b another.
        let whole = &mut document.gpus[1].status;
        whole.allocated_by.pod = "train-0".into();
        whole
            .pod_gpu_usage_status
            .insert("uid-train".into(), usage(1024));
        let partitioned = &mut document.gpus[0];
        partitioned.mig_devices[0]
            .status
            .pod_gpu_usage_status
            .insert("uid-mig-a".into(), usage(2048));
        partitioned.mig_devices[1]
            .status
            .pod_gpu_usage_status
            .insert("uid-mig-b".into(), usage(512));
        // Per GPU: (PID, MiB, GI and CI IDs) of each process.
        type Listed = (Option<u32>, u64, Option<(u32, u32)>);
        let pids = |machine: &Machine| -> Vec<Vec<Listed>> {
            machine
                .devices
                .iter()
                .map(|d| {
                    d.processes
                        .iter()
                        .map(|p| (p.pid, p.used_memory_bytes / MIB, p.instance))
                        .collect()
                })
                .collect()
        };
        // None of the pods (on the host, say): every pod's, their PIDs to be found on the host.
        let host = Machine::of(&document, &Visible::All, Caller::default(), 0);
        assert_eq!(
            pids(&host),
            [
                vec![(None, 1024, None)],
                vec![(None, 2048, Some((2, 0))), (None, 512, Some((1, 0)))]
            ]
        );
        assert_eq!(host.devices[0].processes[0].pod, "uid-train");
        // The pod holding GPU 0 by name, seeing every GPU: its process on GPU 0 alone.
        let by_name = Caller {
            hostname: Some("train-0"),
            ..Default::default()
        };
        let machine = Machine::of(&document, &Visible::All, by_name, 0);
        assert_eq!(pids(&machine), [vec![(Some(1), 1024, None)], vec![]]);
        // A container given MIG-a: its process on the instance (GI 2, CI 0), listed on the
        // instance and on its GPU.
        let given = Caller {
            visible_devices: Some("MIG-a"),
            ..Default::default()
        };
        let machine = Machine::of(&document, &Visible::parse(Some("MIG-a")), given, 0);
        assert_eq!(pids(&machine), [vec![(Some(1), 2048, Some((2, 0)))]]);
        assert_eq!(
            machine.devices[0].mig_devices[0].processes,
            machine.devices[0].processes
        );
        // By UID, on MIG-b (placement 0: GI 1), seeing the whole partitioned GPU: its process
        // only.
        let by_uid = Caller {
            pod_uid: Some("uid-mig-b"),
            ..Default::default()
        };
        let machine = Machine::of(&document, &Visible::parse(Some("GPU-1")), by_uid, 0);
        assert_eq!(pids(&machine), [vec![(Some(1), 512, Some((1, 0)))]]);
        assert!(machine.devices[0].mig_devices[0].processes.is_empty());
    }

    #[test]
    fn unknown_values_read_as_nvml_s_unknowns() {
        let garbage = NodeTopology {
            cuda_version: "garbage".into(),
            ..NodeTopology::default()
        };
        assert_eq!(garbage.cuda_driver_version(), 0);
        assert_eq!(compute_capability(""), (0, 0));
        assert_eq!(architecture_of("Rubin?"), architecture::UNKNOWN);
        assert_eq!(brand_of(""), brand::UNKNOWN);
        assert_eq!(pci("").bus_id, "00000000:00:00.0");
    }
}
