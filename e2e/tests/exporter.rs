//! fakegpu-exporter against the test cluster, run as the bundle's `fakegpu-exporter`
//! ServiceAccount: a pod's GPU shows the pod's utilization range and framebuffer, with
//! dcgm-exporter's names and labels; a free GPU shows nothing used.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::Context;
use fakegpu_api::names::{annotation, dcgm, label};
use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_node, create_namespace, create_pool, eventually, http_get,
    install_crds, repo_root, running_pod, unique_name,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::PostParams};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(60);

/// The exporter binary, run with a token of the bundle's ServiceAccount; killed on drop.
struct Exporter {
    child: Child,
    address: String,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_exporter() -> anyhow::Result<Exporter> {
    let root = repo_root();
    let output = Command::new(root.join("hack/operator.sh"))
        .args(["kubeconfig", "fakegpu-exporter"])
        .output()
        .context("hack/operator.sh kubeconfig")?;
    anyhow::ensure!(output.status.success(), "kubeconfig: {output:?}");
    let kubeconfig = String::from_utf8(output.stdout)?.trim().to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let address = format!("127.0.0.1:{port}");
    let child = Command::new(root.join("target/debug/fakegpu-exporter"))
        .env("KUBECONFIG", kubeconfig)
        .env("FAKEGPU_NAMESPACE", "fakegpu-system")
        .env("FAKEGPU_EXPORTER_ADDR", &address)
        .stdout(Stdio::null())
        .spawn()
        .context("starting target/debug/fakegpu-exporter (cargo build -p fakegpu-exporter)")?;
    Ok(Exporter { child, address })
}

/// The value of the series of `metric` whose labels include every pair of `labels`.
fn series_value(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")))
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit_once(' ')?.1.parse().ok())
}

#[tokio::test]
async fn a_pods_gpu_shows_its_utilization_and_memory() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("dcgm");
    let node = format!("{pool}-node");
    create_kwok_node(&client, &node, &[(label::NODE_POOL, &pool)]).await?;
    let namespace = create_namespace(&client, "dcgm").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&pool)
        .node(&node)
        .namespace(&namespace);
    let result = async {
        let exporter = start_exporter()?;
        create_pool(&client, &pool, json!({"gpu": {"profile": "h100", "count": 2}})).await?;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "busy", "annotations": {annotation::SIMULATED_UTILIZATION: "40-40"}},
            "spec": {
                "nodeSelector": {"fakegpu.dev/pool": pool},
                "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "train", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }))?;
        Api::<Pod>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &pod)
            .await?;
        running_pod(&client, &namespace, "busy", CONVERGE).await?;
        let held = [
            (dcgm::LABELS[dcgm::HOSTNAME_LABEL], node.as_str()),
            ("pod", "busy"),
            ("namespace", namespace.as_str()),
            ("container", "train"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
        ];
        eventually("the pod's GPU at 40 % with its memory used", CONVERGE, || async {
            let text = http_get(&exporter.address, "/metrics").unwrap_or_default();
            let util = series_value(&text, dcgm::GPU_UTIL, &held);
            let used = series_value(&text, dcgm::FB_USED, &held);
            let free = series_value(&text, dcgm::FB_FREE, &held);
            Ok((util == Some(40.0) && used == Some(81559.0) && free == Some(0.0)).then_some(()))
        })
        .await?;
        let text = http_get(&exporter.address, "/metrics")?;
        let idle = [
            (dcgm::LABELS[dcgm::HOSTNAME_LABEL], node.as_str()),
            ("pod", ""),
        ];
        anyhow::ensure!(
            series_value(&text, dcgm::GPU_UTIL, &idle) == Some(0.0)
                && series_value(&text, dcgm::FB_USED, &idle) == Some(0.0),
            "the free GPU shows use:\n{text}"
        );
        Ok(())
    }
    .await;
    cleanup.after(result).await
}
