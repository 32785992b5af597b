//! What the nvidia-smi tests share: a node report of a builtin profile, served over a real
//! HTTP socket as the exporter serves it, and fakegpu's nvidia-smi run in-process against it.
#![allow(dead_code)] // each test binary uses its own part of it

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    net::TcpListener,
};

use fakegpu_model::{
    profiles::GpuProfile,
    report::NodeReport,
    topology::{
        AllocatedBy, FORMAT_VERSION, GpuStatus, GpuTopology, NodeTopology, PodGpuUsage,
        UtilizationBounds, gpu_uuid, pci_address,
    },
};
use fakegpu_smi::{self as smi, Environment};

pub const NODE: &str = "gpu-node-1";
pub const DATE: &str = "Thu Dec  3 09:23:57 2026";

/// A node of `profile` whose GPU 0 runs pod `team-a/train-0` at 40 % with 12 GiB, and whose
/// GPU 1 is shared by two pods.
pub fn report(profile: &GpuProfile) -> NodeReport {
    let gpus = (0..profile.gpus_per_node)
        .map(|index| {
            let (pci_bus_id, pcie_root) = pci_address(0, index);
            let usage = |fb_used| PodGpuUsage {
                utilization: UtilizationBounds { min: 40, max: 40 },
                fb_used,
                use_knative_utilization: false,
            };
            let status = match index {
                0 => GpuStatus {
                    allocated_by: AllocatedBy {
                        namespace: "team-a".into(),
                        pod: "train-0".into(),
                        container: "main".into(),
                    },
                    pod_gpu_usage_status: BTreeMap::from([("uid-train-0".into(), usage(12288))]),
                },
                1 => GpuStatus {
                    pod_gpu_usage_status: BTreeMap::from([
                        ("uid-half-a".into(), usage(2048)),
                        ("uid-half-b".into(), usage(1024)),
                    ]),
                    ..Default::default()
                },
                _ => GpuStatus::default(),
            };
            GpuTopology {
                id: gpu_uuid(NODE, index),
                index,
                pci_bus_id,
                pcie_root,
                status,
                ..Default::default()
            }
        })
        .collect::<Vec<_>>();
    let utilization = gpus
        .iter()
        .map(|g| (g.id.clone(), if g.index < 2 { 40 } else { 0 }))
        .collect();
    NodeReport {
        node: NODE.into(),
        topology: NodeTopology {
            version: FORMAT_VERSION,
            pool: "pool".into(),
            gpu_memory: profile.memory_mib,
            gpu_product: profile.product.into(),
            driver_version: profile.driver_version.into(),
            cuda_version: profile.cuda_version.into(),
            mig_strategy: "none".into(),
            architecture: profile.architecture.as_str().into(),
            brand: profile.brand.into(),
            compute_capability: profile.compute_capability.to_string(),
            power_limit_watts: profile.power_limit_watts,
            other_devices: Vec::new(),
            dra_drivers: None,
            device_plugin: None,
            gpus,
        },
        utilization,
    }
}

/// Serves `report` for [`NODE`] (404 for other nodes) on a fresh local port, one connection
/// at a time, until the test process ends. Returns the base URL.
pub fn serve(report: &NodeReport) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let body = serde_json::to_string(report)?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let (status, body) = if request_line.contains(&format!("/topology/nodes/{NODE} ")) {
                ("200 OK", body.as_str())
            } else {
                ("404 Not Found", "no such node")
            };
            let _ = write!(
                &stream,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(url)
}

pub fn environment(url: &str) -> Environment {
    Environment {
        node: Some(NODE.into()),
        exporter_url: Some(url.into()),
        process_id: 1,
        process_name: "python3".into(),
        ..Default::default()
    }
}

/// Runs nvidia-smi in-process; exit code, stdout, stderr.
pub fn smi(args: &str, env: &Environment) -> (i32, String, String) {
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = smi::run(&args, env, DATE, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

pub const QUERY: &str = "--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw,power.limit,compute_cap,mig.mode.current --format=csv";
