//! Scrape benchmark driver (run by hack/bench/scrape.sh against a fresh local control plane):
//! writes the topology ConfigMaps of N nodes x 8 GPUs (half of the GPUs held by a pod with a
//! utilization range, so every scrape draws), starts the release exporter as the bundle's
//! ServiceAccount, waits until it serves every GPU, then times sequential `/metrics` scrapes
//! over HTTP. Prints one Markdown table row. Not a test: nothing is asserted.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;
use fakegpu_e2e::{admin_client, process_usage, repo_root};
use fakegpu_model::{
    names::{dcgm, topology as names},
    topology::{
        AllocatedBy, FORMAT_VERSION, GpuStatus, GpuTopology, NodeTopology, PodGpuUsage,
        UtilizationBounds, gpu_uuid, pci_address,
    },
};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};

const GPUS: u32 = 8;
const NAMESPACE: &str = "fakegpu-system";

fn document(node: &str) -> NodeTopology {
    let gpus = (0..GPUS)
        .map(|index| {
            let (pci_bus_id, pcie_root) = pci_address(index / 4, index % 4);
            let status = if index % 2 == 0 {
                GpuStatus {
                    allocated_by: AllocatedBy {
                        namespace: "bench".into(),
                        pod: format!("{node}-pod-{index}"),
                        container: "main".into(),
                    },
                    pod_gpu_usage_status: BTreeMap::from([(
                        format!("{node}-uid-{index}"),
                        PodGpuUsage {
                            utilization: UtilizationBounds { min: 20, max: 60 },
                            fb_used: 40000,
                            use_knative_utilization: false,
                        },
                    )]),
                }
            } else {
                GpuStatus::default()
            };
            GpuTopology {
                id: gpu_uuid(node, index),
                index,
                numa_node: Some(index / 4),
                pci_bus_id,
                pcie_root,
                status,
                ..Default::default()
            }
        })
        .collect();
    NodeTopology {
        version: FORMAT_VERSION,
        pool: "bench".into(),
        gpu_memory: 81559,
        gpu_product: "NVIDIA H100 80GB HBM3".into(),
        driver_version: "550.163.01".into(),
        cuda_version: "12.4".into(),
        mig_strategy: "none".into(),
        gpus,
        ..Default::default()
    }
}

async fn write_documents(nodes: usize) -> anyhow::Result<()> {
    let client = admin_client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let results: Vec<anyhow::Result<()>> = stream::iter(0..nodes)
        .map(|i| {
            let api = api.clone();
            async move {
                let node = format!("scrape-node-{i:05}");
                let configmap = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(NodeTopology::configmap_name(&node)),
                        labels: Some(BTreeMap::from([
                            (names::NODE_TOPOLOGY_LABEL.to_owned(), "true".to_owned()),
                            (names::NODE_NAME_LABEL.to_owned(), node.clone()),
                        ])),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([(
                        names::DATA_KEY.to_owned(),
                        document(&node).to_yaml()?,
                    )])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &configmap).await?;
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// One `/metrics` GET over a fresh connection, as Prometheus' first scrape of a target does;
/// the body.
fn scrape(address: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    anyhow::ensure!(
        response.starts_with(b"HTTP/1.1 200"),
        "scrape failed: {}",
        String::from_utf8_lossy(&response[..response.len().min(200)])
    );
    Ok(response)
}

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().unwrap_or_else(|| "1000".into()).parse()?;
    let scrapes: usize = args.next().unwrap_or_else(|| "50".into()).parse()?;
    let root = repo_root();
    let started = Instant::now();
    write_documents(nodes).await?;
    eprintln!(
        "wrote {nodes} topology ConfigMaps in {:.1?}",
        started.elapsed()
    );

    let output = Command::new(root.join("hack/operator.sh"))
        .args(["kubeconfig", "fakegpu-exporter"])
        .output()?;
    anyhow::ensure!(output.status.success(), "kubeconfig: {output:?}");
    let kubeconfig = String::from_utf8(output.stdout)?.trim().to_owned();
    let address = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port()
    );
    // Another build of the exporter (the image's musl binary, an older commit) side by side.
    let binary = std::env::var_os("FAKEGPU_EXPORTER_BIN")
        .map_or_else(|| root.join("target/release/fakegpu-exporter"), Into::into);
    let exporter = Exporter(
        Command::new(&binary)
            .env("KUBECONFIG", kubeconfig)
            .env("FAKEGPU_NAMESPACE", NAMESPACE)
            .env("FAKEGPU_EXPORTER_ADDR", &address)
            .env("FAKEGPU_UTILIZATION_INTERVAL_SECONDS", "1")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| binary.display().to_string())?,
    );
    let want = nodes * GPUS as usize;
    let prefix = format!("{}{{", dcgm::GPU_UTIL);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let series = scrape(&address)
            .map(|body| {
                String::from_utf8_lossy(&body)
                    .lines()
                    .filter(|l| l.starts_with(&prefix))
                    .count()
            })
            .unwrap_or(0);
        if series == want {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "exporter serves {series} of {want} GPUs"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "exporter serves {want} GPUs after {:.1?}",
        started.elapsed()
    );
    let mut times = Vec::with_capacity(scrapes);
    let mut bytes = 0;
    for _ in 0..scrapes {
        let start = Instant::now();
        bytes = scrape(&address)?.len();
        times.push(start.elapsed());
        // Past the utilization interval now and then, so scrapes draw anew.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    times.sort();
    let (cpu, rss) = process_usage(exporter.0.id())?;
    println!(
        "| {nodes} | {want} | {scrapes} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {cpu:.1} |",
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99),
        percentile(&times, 1.0),
        bytes as f64 / 1024.0 / 1024.0,
        rss,
    );
    Ok(())
}
