//! fakegpu-exporter against the test cluster, run as the bundle's `fakegpu-exporter`
//! ServiceAccount, scraped by a real Prometheus: GPUs show their pods' utilization ranges,
//! inference pods' request rates and framebuffer, with dcgm-exporter's names and labels, and
//! NVIDIA's Grafana dashboard filled from them.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::Context;
use fakegpu_e2e::{
    annotate_node, create_pool, eventually, http_get, kwok_scenario, repo_root, running_pod,
    unique_name, warning_event, xid_taints,
};
use fakegpu_model::names::{annotation, condition, container_env, dcgm, label, metric, resource};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(90);

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

fn start_exporter(prometheus: &str) -> anyhow::Result<Exporter> {
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
        .env("FAKEGPU_PROMETHEUS_URL", format!("http://{prometheus}"))
        .env("FAKEGPU_UTILIZATION_INTERVAL_SECONDS", "1")
        .stdout(Stdio::null())
        .spawn()
        .context("starting target/debug/fakegpu-exporter (cargo build -p fakegpu-exporter)")?;
    Ok(Exporter { child, address })
}

/// The fake nvidia-smi run as a container given `gpu` on `node` runs it, asking the exporter
/// at `exporter`; its standard output.
fn nvidia_smi(exporter: &str, node: &str, gpu: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(repo_root().join("target/debug/nvidia-smi"))
        .args(args)
        .env(container_env::NODE_NAME, node)
        .env(container_env::EXPORTER_URL, format!("http://{exporter}"))
        .env(container_env::VISIBLE_DEVICES, gpu)
        .output()
        .context("running target/debug/nvidia-smi (cargo build -p fakegpu-smi)")?;
    anyhow::ensure!(output.status.success(), "nvidia-smi {args:?}: {output:?}");
    Ok(String::from_utf8(output.stdout)?)
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

/// A real Prometheus (Debian's `prometheus`, or `FAKEGPU_PROMETHEUS_BIN`) scraping `targets`
/// every second; killed on drop.
struct Prometheus {
    child: Child,
    address: String,
    _dir: TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_address() -> anyhow::Result<String> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .to_string())
}

async fn start_prometheus(address: &str, targets: &[&str]) -> anyhow::Result<Prometheus> {
    let dir = std::env::temp_dir().join(unique_name("prometheus"));
    std::fs::create_dir_all(&dir)?;
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n- job_name: fakegpu\n  static_configs: [{{targets: {targets:?}}}]\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config)?;
    let binary = std::env::var("FAKEGPU_PROMETHEUS_BIN").unwrap_or_else(|_| "prometheus".into());
    let child = Command::new(&binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {binary} (Debian package prometheus)"))?;
    let prometheus = Prometheus {
        child,
        address: address.to_owned(),
        _dir: TempDir(dir),
    };
    eventually("Prometheus ready", CONVERGE, || async {
        Ok(http_get(&prometheus.address, "/-/ready").ok().map(drop))
    })
    .await?;
    Ok(prometheus)
}

/// The value of the first series an instant query returns.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    query_series(prometheus, promql).first().map(|(_, v)| *v)
}

/// `promql` with `%`-escapes for a query string.
fn encode_query(promql: &str) -> String {
    promql
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every series an instant query returns: (labels, value).
fn query_series(prometheus: &str, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let path = format!("/api/v1/query?query={}", encode_query(promql));
    let answer: serde_json::Value = http_get(prometheus, &path)
        .ok()
        .and_then(|body| serde_json::from_str(&body).ok())
        .unwrap_or_default();
    answer["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|series| {
            let value = series["value"][1].as_str()?.parse().ok()?;
            Some((series["metric"].clone(), value))
        })
        .collect()
}

/// What Grafana's `label_values(metric, label)` lists.
fn label_values(prometheus: &str, metric: &str, label: &str) -> Vec<String> {
    let path = format!(
        "/api/v1/label/{label}/values?match[]={}",
        encode_query(metric)
    );
    let answer: serde_json::Value = http_get(prometheus, &path)
        .ok()
        .and_then(|body| serde_json::from_str(&body).ok())
        .unwrap_or_default();
    answer["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some(v.as_str()?.to_owned()))
        .collect()
}

/// NVIDIA's Grafana dashboard for dcgm-exporter (`grafana/dcgm-exporter-dashboard.json` in
/// NVIDIA/dcgm-exporter, grafana.com 12239): its variables, each `label_values` of a metric,
/// and its eight panels' expressions, as facts.
const DASHBOARD_VARIABLES: [(&str, &str); 2] = [
    ("instance", "DCGM_FI_DEV_GPU_TEMP"),
    ("gpu", "DCGM_FI_DEV_GPU_TEMP"),
];
const DASHBOARD_PANELS: [(&str, &str); 8] = [
    (
        "GPU Temperature",
        r#"DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}"#,
    ),
    (
        "GPU Avg. Temp",
        r#"avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})"#,
    ),
    (
        "GPU Power Usage",
        r#"DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}"#,
    ),
    (
        "GPU Power Total",
        r#"sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})"#,
    ),
    (
        "GPU SM Clocks",
        r#"DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000"#,
    ),
    (
        "GPU Utilization",
        r#"DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}"#,
    ),
    (
        "GPU Framebuffer Mem Used",
        r#"DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}"#,
    ),
    (
        "Tensor Core Utilization",
        r#"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}"#,
    ),
];

/// A multi-value variable as Grafana writes it into a regex matcher: `(a|b)`, each value's
/// regex characters escaped, the escape doubled inside the PromQL string (`127\\.0`).
fn regex_of(values: &[String]) -> String {
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars()
                .map(|c| {
                    if "\\.+*?()|[]{}^$".contains(c) {
                        format!("\\\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    format!("({})", escaped.join("|"))
}

/// Every variable of NVIDIA's dashboard resolves (to `busy_gpu`'s index among others), and
/// with each set to All, every panel shows the busy pod's GPU busy. The panel values are what
/// the exporter serves for that GPU now.
fn nvidia_dashboard_is_filled(prometheus: &str, busy_index: &str) -> anyhow::Result<()> {
    let mut all = Vec::new();
    for (variable, metric) in DASHBOARD_VARIABLES {
        let values = label_values(prometheus, metric, variable);
        anyhow::ensure!(!values.is_empty(), "variable ${variable} lists nothing");
        if variable == "gpu" {
            anyhow::ensure!(
                values.iter().any(|v| v == busy_index),
                "variable $gpu lacks GPU {busy_index}: {values:?}"
            );
        }
        all.push((format!("${variable}"), regex_of(&values)));
    }
    for (panel, expression) in DASHBOARD_PANELS {
        let promql = all.iter().fold(expression.to_owned(), |e, (var, value)| {
            e.replace(var, value)
        });
        let series = query_series(prometheus, &promql);
        let busy = if promql.starts_with("avg(") || promql.starts_with("sum(") {
            series.first().map(|(_, v)| *v)
        } else {
            series
                .iter()
                .find(|(labels, _)| labels["pod"] == "busy")
                .map(|(_, v)| *v)
        };
        anyhow::ensure!(
            busy.is_some_and(|v| v > 0.0),
            "panel {panel:?} ({promql}) shows nothing for the busy GPU: {series:?}"
        );
    }
    Ok(())
}

/// A scrape target like a Knative revision's queue-proxy plus kube-state-metrics: the request
/// counter of pod `pod` growing by `per_second`, and `kube_pod_info` tying the pod to its UID.
async fn serve_request_counter(
    pod: String,
    uid: String,
    per_second: f64,
) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let started = std::time::Instant::now();
    let task = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let count = started.elapsed().as_secs_f64() * per_second;
            let body = format!(
                "# TYPE revision_app_request_count counter\nrevision_app_request_count{{pod=\"{pod}\"}} {count}\n# TYPE kube_pod_info gauge\nkube_pod_info{{pod=\"{pod}\",uid=\"{uid}\"}} 1\n"
            );
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    Ok((address, task))
}

fn gpu_pod(name: &str, pool: &str, metadata: serde_json::Value) -> anyhow::Result<Pod> {
    let mut metadata = metadata;
    metadata["name"] = json!(name);
    Ok(serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {
            "nodeSelector": {"fakegpu.dev/pool": pool},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }))?)
}

/// Through a real Prometheus scraping the exporter: a pod at "40-40" shows 40 on its GPU, its
/// framebuffer fully used; an inference pod's GPU follows its revision's request rate (30/s ->
/// 30 %); with Prometheus gone, the inference pod falls back to its range and the exporter
/// says so.
/// Ready only once the topology ConfigMaps are listed (a scrape before would miss nodes), and
/// gone soon after SIGTERM, as the kubelet stops it (not after the grace period's SIGKILL).
#[tokio::test]
async fn the_exporter_is_ready_once_listed_and_stops_on_sigterm() -> anyhow::Result<()> {
    let mut exporter = start_exporter("127.0.0.1:1")?;
    let address = exporter.address.clone();
    eventually(
        "the exporter's /readyz ok",
        Duration::from_secs(30),
        || async {
            Ok((http_get(&address, "/readyz").ok().as_deref() == Some("ok")).then_some(()))
        },
    )
    .await?;
    let pid = exporter.child.id().to_string();
    let signalled = Command::new("kill").args(["-TERM", &pid]).status()?;
    anyhow::ensure!(signalled.success(), "kill -TERM {pid}");
    let status = eventually(
        "the exporter gone after SIGTERM",
        Duration::from_secs(10),
        || {
            let exited = exporter.child.try_wait();
            async move { Ok(exited?) }
        },
    )
    .await?;
    anyhow::ensure!(
        status.success(),
        "the exporter exited with {status} on SIGTERM"
    );
    Ok(())
}

#[tokio::test]
async fn utilization_and_memory_through_prometheus() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("dcgm").await?;
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "h100", "count": 2}}),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let busy = gpu_pod(
            "busy",
            &pool,
            json!({"annotations": {annotation::SIMULATED_UTILIZATION: "40-40"}}),
        )?;
        pods.create(&PostParams::default(), &busy).await?;
        let infer = gpu_pod(
            "infer",
            &pool,
            json!({"labels": {label::WORKLOAD_KIND: "InferenceWorkload"}}),
        )?;
        let infer = pods.create(&PostParams::default(), &infer).await?;
        let uid = infer.metadata.uid.clone().context("pod UID")?;
        running_pod(&client, &namespace, "busy", CONVERGE).await?;
        running_pod(&client, &namespace, "infer", CONVERGE).await?;

        let (counter, counter_task) = serve_request_counter("infer".into(), uid, 30.0).await?;
        let prometheus_address = free_address()?;
        let exporter = start_exporter(&prometheus_address)?;
        let prometheus =
            start_prometheus(&prometheus_address, &[&exporter.address, &counter]).await?;

        for (promql, want) in [
            (
                format!(
                    "{}{{pod=\"busy\",namespace=\"{namespace}\"}}",
                    dcgm::GPU_UTIL
                ),
                40.0,
            ),
            (
                format!("{}{{pod=\"busy\",Hostname=\"{node}\"}}", dcgm::FB_USED),
                81559.0,
            ),
            (format!("{}{{pod=\"busy\"}}", dcgm::FB_FREE), 0.0),
        ] {
            eventually(
                &format!("Prometheus: {promql} = {want}"),
                CONVERGE,
                || async { Ok((query(&prometheus.address, &promql) == Some(want)).then_some(())) },
            )
            .await?;
        }
        // nvidia-smi in the busy pod's container shows the same GPU, utilization and memory.
        let text = http_get(&exporter.address, "/metrics")?;
        let busy_gpu = text
            .lines()
            .find(|l| l.starts_with(dcgm::GPU_UTIL) && l.contains("pod=\"busy\""))
            .and_then(|l| l.split("UUID=\"").nth(1)?.split('"').next())
            .context("the busy pod's GPU UUID")?
            .to_owned();
        let smi = nvidia_smi(
            &exporter.address,
            &node,
            &busy_gpu,
            &[
                "--query-gpu=uuid,utilization.gpu,memory.used",
                "--format=csv,noheader,nounits",
            ],
        )?;
        anyhow::ensure!(
            smi == format!("{busy_gpu}, 40, 81559\n"),
            "nvidia-smi in the busy pod printed {smi:?}"
        );
        let table = nvidia_smi(&exporter.address, &node, &busy_gpu, &[])?;
        anyhow::ensure!(
            table.contains("NVIDIA H100 80GB HBM3") && table.contains("|     40%      Default |"),
            "nvidia-smi's table:\n{table}"
        );
        let inference = format!("{}{{pod=\"infer\"}}", dcgm::GPU_UTIL);
        eventually(
            "Prometheus: the inference pod's GPU at its request rate",
            CONVERGE,
            || async {
                let value = query(&prometheus.address, &inference);
                Ok(value.filter(|v| (28.0..=31.0).contains(v)).map(drop))
            },
        )
        .await?;

        // NVIDIA's dashboard: every variable resolves and every panel shows the busy GPU.
        let busy_index = text
            .lines()
            .find(|l| l.starts_with(dcgm::GPU_UTIL) && l.contains("pod=\"busy\""))
            .and_then(|l| l.split("gpu=\"").nth(1)?.split('"').next())
            .context("the busy pod's GPU index")?
            .to_owned();
        eventually("NVIDIA's dashboard filled", CONVERGE, || async {
            Ok(nvidia_dashboard_is_filled(&prometheus.address, &busy_index).ok())
        })
        .await
        .map_err(|error| {
            let why = nvidia_dashboard_is_filled(&prometheus.address, &busy_index);
            error.context(format!("{why:?}"))
        })?;
        // nvidia-smi in the pod reads the sensors the dashboard shows: one model.
        let smi = nvidia_smi(
            &exporter.address,
            &node,
            &busy_gpu,
            &[
                "--query-gpu=temperature.gpu,power.draw,clocks.sm,utilization.memory",
                "--format=csv,noheader,nounits",
            ],
        )?;
        let text = http_get(&exporter.address, "/metrics")?;
        let busy_pod = [("pod", "busy")];
        let series = |name| series_value(&text, name, &busy_pod).unwrap_or(f64::NAN);
        let served = format!(
            "{}, {:.2}, {}, {}\n",
            series(dcgm::GPU_TEMP),
            series(dcgm::POWER_USAGE),
            series(dcgm::SM_CLOCK),
            series(dcgm::MEM_COPY_UTIL),
        );
        anyhow::ensure!(
            smi == served,
            "nvidia-smi read {smi:?}, the exporter serves {served:?}"
        );

        drop(prometheus);
        counter_task.abort();
        eventually(
            "Prometheus gone: fallback to the range, said so",
            CONVERGE,
            || async {
                let text = http_get(&exporter.address, "/metrics").unwrap_or_default();
                let up = text
                    .lines()
                    .any(|l| l == format!("{} 0", metric::EXPORTER_KNATIVE_UP));
                // No range on the inference pod: its type's, idle (as the reference).
                let fallback =
                    series_value(&text, dcgm::GPU_UTIL, &[("pod", "infer")]) == Some(0.0);
                Ok((up && fallback).then_some(()))
            },
        )
        .await?;
        let text = http_get(&exporter.address, "/metrics")?;
        let idle = [
            (dcgm::LABELS[dcgm::HOSTNAME_LABEL], node.as_str()),
            ("pod", ""),
        ];
        anyhow::ensure!(
            series_value(&text, dcgm::GPU_UTIL, &idle).is_none(),
            "both GPUs are held; no GPU of the node should be free:\n{text}"
        );
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// The node's allocatable `nvidia.com/gpu` and its `fakegpu.dev/GpuFault` condition (status,
/// message), as the API server has them.
async fn gpus_and_fault(
    client: &kube::Client,
    node: &str,
) -> anyhow::Result<(Option<String>, Option<(String, String)>)> {
    let status = Api::<Node>::all(client.clone())
        .get(node)
        .await?
        .status
        .unwrap_or_default();
    let allocatable = status
        .allocatable
        .and_then(|a| a.get(resource::GPU).map(|q| q.0.clone()));
    let fault = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == condition::GPU_FAULT)
        .map(|c| (c.status, c.message.unwrap_or_default()));
    Ok((allocatable, fault))
}

#[tokio::test]
async fn injected_faults_show_everywhere_and_clear() -> anyhow::Result<()> {
    let (client, pool, node, _namespace, cleanup) = kwok_scenario("faults").await?;
    let result = async {
        // The pool injects XID 48 (double-bit ECC: out of service) into GPU 1 of its nodes.
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "h100", "count": 4},
                "interfaces": {"devicePlugin": true, "dra": true},
                "faults": [{"gpus": [1], "xid": 48, "xidPerMinute": 120}]}),
        )
        .await?;
        eventually("GPU 1 out of allocatable, the node's condition says why", CONVERGE, || async {
            let (gpus, fault) = gpus_and_fault(&client, &node).await?;
            Ok((gpus.as_deref() == Some("3")
                && fault.is_some_and(|(status, message)| {
                    status == "True" && message == "GPU 1: XID 48 (120 a minute) (out of service)"
                }))
            .then_some(()))
        })
        .await?;
        warning_event(&client, &node, "GpuFault", "GPU 1: XID 48 (120 a minute)", CONVERGE).await?;
        // The node adds uncorrectable ECC errors on GPU 2 and throttles GPU 3.
        let faults = r#"[{"gpus": [2], "eccUncorrectable": 2, "eccCorrectable": 5},
            {"gpus": [3], "thermalThrottling": true}]"#;
        annotate_node(&client, &node, annotation::GPU_FAULTS, Some(faults)).await?;
        eventually("GPU 2 out too", CONVERGE, || async {
            let (gpus, _) = gpus_and_fault(&client, &node).await?;
            Ok((gpus.as_deref() == Some("2")).then_some(()))
        })
        .await?;
        // The exporter and nvidia-smi show each GPU's fault where real hardware shows it.
        let exporter = start_exporter("127.0.0.1:1")?;
        let host = [(dcgm::LABELS[dcgm::HOSTNAME_LABEL], node.as_str())];
        let on = |gpu: &'static str| [host[0], ("gpu", gpu)];
        eventually("the faults in the exporter's series", CONVERGE, || async {
            let text = http_get(&exporter.address, "/metrics").unwrap_or_default();
            let value = |metric, gpu| series_value(&text, metric, &on(gpu));
            // Recurring twice a second: more than once in the window by now.
            let recurring = text.lines().any(|l| {
                l.starts_with(dcgm::EXP_XID_ERRORS_COUNT)
                    && l.contains(&format!("Hostname=\"{node}\""))
                    && l.contains("gpu=\"1\"")
                    && l.contains("xid=\"48\"")
                    && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) >= Some(2.0)
            });
            Ok((value(dcgm::XID_ERRORS, "1") == Some(48.0)
                && recurring
                && value(dcgm::XID_ERRORS, "0") == Some(0.0)
                && value(dcgm::ECC_DBE_VOL_TOTAL, "2") == Some(2.0)
                && value(dcgm::ECC_SBE_VOL_TOTAL, "2") == Some(5.0)
                && value(dcgm::GPU_TEMP, "3") == Some(90.0))
            .then_some(()))
        })
        .await?;
        // NVIDIA's DRA driver's taint on the KWOK node's slice: XID 48 on GPU 1 and, for its
        // uncorrectable ECC errors, on GPU 2; none on the throttled GPU 3.
        eventually("the slice's devices tainted", CONVERGE, || async {
            Ok((xid_taints(&client, &node).await?
                == [
                    ("gpu-1".to_owned(), "48 NoSchedule".to_owned()),
                    ("gpu-2".to_owned(), "48 NoSchedule".to_owned()),
                ])
            .then_some(()))
        })
        .await?;
        let text = http_get(&exporter.address, "/metrics")?;
        let gpu_two = text
            .lines()
            .find(|l| l.starts_with(dcgm::XID_ERRORS) && l.contains(&format!("Hostname=\"{node}\"")) && l.contains("gpu=\"2\""))
            .and_then(|l| l.split("UUID=\"").nth(1)?.split('"').next())
            .context("GPU 2's UUID")?
            .to_owned();
        let smi = nvidia_smi(
            &exporter.address,
            &node,
            &gpu_two,
            &[
                "--query-gpu=ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total",
                "--format=csv,noheader",
            ],
        )?;
        anyhow::ensure!(smi == "2, 5\n", "nvidia-smi read {smi:?}");
        // A malformed annotation is said, and the pool's fault stays.
        annotate_node(&client, &node, annotation::GPU_FAULTS, Some(r#"[{"gpu": [0], "xid": 79}]"#))
            .await?;
        warning_event(&client, &node, "InvalidGpuFaults", "unknown field \"gpu\"", CONVERGE)
            .await?;
        eventually("only the pool's fault left", CONVERGE, || async {
            let (gpus, fault) = gpus_and_fault(&client, &node).await?;
            Ok((gpus.as_deref() == Some("3")
                && fault.is_some_and(|(_, m)| m == "GPU 1: XID 48 (120 a minute) (out of service)"))
            .then_some(()))
        })
        .await?;
        // Cleared: every GPU back, no condition, XID 0.
        annotate_node(&client, &node, annotation::GPU_FAULTS, None).await?;
        Api::<fakegpu_api::GpuNodePool>::all(client.clone())
            .patch(
                &pool,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"faults": null}})),
            )
            .await?;
        eventually("all GPUs back, no fault condition", CONVERGE, || async {
            let (gpus, fault) = gpus_and_fault(&client, &node).await?;
            let text = http_get(&exporter.address, "/metrics").unwrap_or_default();
            let xid = series_value(&text, dcgm::XID_ERRORS, &on("1"));
            let untainted = xid_taints(&client, &node).await?.is_empty();
            Ok((gpus.as_deref() == Some("4") && fault.is_none() && xid == Some(0.0) && untainted)
                .then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}
