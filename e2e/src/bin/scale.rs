//! Scale benchmark driver; `hack/bench/scale.sh` runs it against a fresh local control plane
//! with the operator (release build) running as its ServiceAccount.
//!
//! One run: create N KWOK nodes spread over P pools, wait until KWOK has initialized them, apply
//! the pools, and measure until every node has its labels, capacity, ResourceSlice (DRA pools)
//! and topology ConfigMap; the operator's CPU time and peak RSS; its writes per node in the
//! first pass and in a resync (operator restart); then how fast the real scheduler binds M pods
//! asking for `nvidia.com/gpu`, and M plain pods with the operator stopped (the same cluster
//! without fakegpu at work). Prints one Markdown table row and one JSON line.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use fakegpu_api::names::{label, metric, topology as topology_names};
use fakegpu_e2e::{
    admin_client, create_namespace, create_pool, hack, http_get, install_crds, operator_address,
    process_usage,
};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Node, Pod},
        resource::v1::ResourceSlice,
    },
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Api, Client, ResourceExt,
    api::PostParams,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::json;

struct Args {
    nodes: usize,
    pools: usize,
    pods: usize,
    concurrency: usize,
    timeout: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        nodes: 100,
        pools: 4,
        pods: 200,
        concurrency: 48,
        timeout: Duration::from_secs(1800),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--nodes" => args.nodes = value.parse()?,
            "--pools" => args.pools = value.parse()?,
            "--pods" => args.pods = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--timeout-secs" => args.timeout = Duration::from_secs(value.parse()?),
            other => bail!("unknown flag {other}"),
        }
    }
    if args.pools == 0 || args.nodes == 0 {
        bail!("--nodes and --pools must be positive");
    }
    Ok(args)
}

/// Pool `i`: even pools serve DRA and the device plugin (H100 x8), odd ones only the device
/// plugin (L40S x4), so both write paths are measured.
fn pool_spec(i: usize) -> (serde_json::Value, u32, bool) {
    if i.is_multiple_of(2) {
        (
            json!({"gpu": {"profile": "h100"}, "interfaces": {"devicePlugin": true, "dra": true}}),
            8,
            true,
        )
    } else {
        (json!({"gpu": {"profile": "l40s", "count": 4}}), 4, false)
    }
}

fn pool_name(i: usize) -> String {
    format!("scale-p{i}")
}

fn node_name(i: usize) -> String {
    format!("scale-{i:05}")
}

fn cluster_dir() -> PathBuf {
    std::env::var_os("FAKEGPU_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| fakegpu_e2e::repo_root().join(".cache/cluster"))
}

fn operator_pid() -> anyhow::Result<u32> {
    let text = std::fs::read_to_string(cluster_dir().join("run/operator.pid"))
        .context("operator pid file (is the operator running?)")?;
    Ok(text.trim().parse()?)
}

/// The processes whose CPU time the convergence is split into: where the time goes.
const PROFILED: [&str; 5] = [
    "kube-apiserver",
    "etcd",
    "kwok",
    "kube-controller-manager",
    "kube-scheduler",
];

/// CPU seconds so far of each profiled control-plane process, the operator and this driver.
fn cpu_by_process(operator: u32) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let mut cpu = BTreeMap::new();
    for name in PROFILED {
        let pid: u32 = std::fs::read_to_string(cluster_dir().join(format!("run/{name}.pid")))
            .with_context(|| format!("{name} pid file"))?
            .trim()
            .parse()?;
        cpu.insert(name, process_usage(pid)?.0);
    }
    cpu.insert("fakegpu-operator", process_usage(operator)?.0);
    cpu.insert("driver", process_usage(std::process::id())?.0);
    Ok(cpu)
}

/// CPU seconds each process used between two [`cpu_by_process`] samples.
fn cpu_used(
    before: &BTreeMap<&'static str, f64>,
    after: BTreeMap<&'static str, f64>,
) -> BTreeMap<&'static str, f64> {
    after
        .into_iter()
        .map(|(name, cpu)| (name, cpu - before.get(name).copied().unwrap_or(0.0)))
        .collect()
}

/// Cores each process kept busy between two [`cpu_by_process`] samples `over` apart.
fn cpu_share(
    before: &BTreeMap<&'static str, f64>,
    after: BTreeMap<&'static str, f64>,
    over: Duration,
) -> String {
    cpu_used(before, after)
        .iter()
        .map(|(name, used)| format!("{name} {:.2}", used / over.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The operator's write counters by kind and verb.
fn operator_writes_by_kind() -> anyhow::Result<Vec<(String, u64)>> {
    let text = http_get(&operator_address(), "/metrics")?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix(metric::WRITES))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse::<f64>().ok()? as u64))
        })
        .collect())
}

/// The operator's write counter, summed over kinds and verbs.
fn operator_writes() -> anyhow::Result<u64> {
    Ok(operator_writes_by_kind()?.iter().map(|(_, v)| v).sum())
}

/// Waits until the operator's write counter stays put for `quiet`; returns it.
async fn quiet_writes(quiet: Duration) -> anyhow::Result<u64> {
    let mut last = operator_writes()?;
    loop {
        tokio::time::sleep(quiet).await;
        let now = operator_writes()?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}

fn cache<K>(api: Api<K>, config: watcher::Config) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let task = tokio::spawn(
        watcher(api, config)
            .default_backoff()
            .reflect(writer)
            .for_each(|_| async {}),
    );
    (store, task)
}

async fn create_nodes(client: &Client, args: &Args) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            let pool = pool_name(i % args.pools);
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": node_name(i),
                        "labels": {"type": "kwok", label::NODE_POOL: pool},
                        "annotations": {"kwok.x-k8s.io/node": "fake"}},
                    "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
                }))?;
                nodes.create(&PostParams::default(), &node).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<()>()
        .await
}

/// A node's allocatable once KWOK has given it its own (`pods` among it): GPUs without `pods`
/// schedule nothing.
fn initialized_allocatable(node: &Node) -> Option<&BTreeMap<String, Quantity>> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .filter(|a| a.contains_key("pods"))
}

/// How many benchmark nodes KWOK has given their status.
fn initialized(nodes: &Store<Node>) -> usize {
    nodes
        .state()
        .iter()
        .filter(|node| node.name_any().starts_with("scale-"))
        .filter(|node| initialized_allocatable(node).is_some())
        .count()
}

/// How many benchmark nodes carry everything their pool gives them.
fn converged(
    args: &Args,
    nodes: &Store<Node>,
    configmaps: &Store<ConfigMap>,
    slices: &Store<ResourceSlice>,
) -> usize {
    let have_cm: std::collections::HashSet<String> =
        configmaps.state().iter().map(|c| c.name_any()).collect();
    let have_slice: std::collections::HashSet<String> = slices
        .state()
        .iter()
        .filter_map(|s| s.spec.node_name.clone())
        .collect();
    nodes
        .state()
        .iter()
        .filter(|node| {
            let name = node.name_any();
            let Some(index) = name
                .strip_prefix("scale-")
                .and_then(|i| i.parse::<usize>().ok())
            else {
                return false;
            };
            let (_, gpus, dra) = pool_spec(index % args.pools);
            let pool = pool_name(index % args.pools);
            let labelled = node.labels().get("fakegpu.dev/pool") == Some(&pool);
            let capacity = initialized_allocatable(node)
                .and_then(|a| a.get("nvidia.com/gpu"))
                .is_some_and(|q| q.0 == gpus.to_string());
            let cm = have_cm.contains(&format!("{}{name}", topology_names::CONFIGMAP_PREFIX));
            labelled && capacity && cm && (!dra || have_slice.contains(&name))
        })
        .count()
}

/// Creates `count` pods (asking for a GPU or not) and returns pods bound per second.
async fn schedule_pods(
    client: &Client,
    count: usize,
    gpu: bool,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let namespace = create_namespace(client, if gpu { "scale-gpu" } else { "scale-plain" }).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let (store, task) = cache(pods.clone(), watcher::Config::default());
    store.wait_until_ready().await?;
    let start = Instant::now();
    let resources = if gpu {
        json!({"limits": {"nvidia.com/gpu": "1"}})
    } else {
        json!({})
    };
    stream::iter(0..count)
        .map(|i| {
            let pods = pods.clone();
            let resources = resources.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p-{i:05}")},
                    "spec": {"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                        "nodeSelector": {"type": "kwok"},
                        "containers": [{"name": "main", "image": "busybox", "resources": resources}]},
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await?;
    loop {
        let bound = store
            .state()
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        if bound >= count {
            break;
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("only {bound} of {count} pods bound after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    task.abort();
    Ok(count as f64 / start.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let client = admin_client().await?;
    install_crds(&client).await?;

    let started = Instant::now();
    create_nodes(&client, &args).await?;
    let node_creation = started.elapsed();
    eprintln!("created {} nodes in {node_creation:.1?}", args.nodes);

    let (nodes, node_task) = cache(Api::<Node>::all(client.clone()), watcher::Config::default());
    let (configmaps, cm_task) = cache(
        Api::<ConfigMap>::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE),
        watcher::Config::default().labels("node-topology=true"),
    );
    let (slices, slice_task) = cache(
        Api::<ResourceSlice>::all(client.clone()),
        watcher::Config::default(),
    );
    nodes.wait_until_ready().await?;
    configmaps.wait_until_ready().await?;
    slices.wait_until_ready().await?;
    // The pools go onto a cluster whose nodes are up: KWOK gives each its status first (the
    // operator waits for that too), and its pace is not the operator's.
    let started = Instant::now();
    while initialized(&nodes) < args.nodes {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let node_init = started.elapsed();
    eprintln!("KWOK initialized the nodes {node_init:.1?} later");

    let pid = operator_pid()?;
    // What the cluster costs with no pool at all (KWOK's heartbeats and leases, the controllers'
    // resyncs): the floor under every number below.
    let idle_before = cpu_by_process(pid)?;
    let idle = Duration::from_secs(10);
    tokio::time::sleep(idle).await;
    eprintln!(
        "CPU cores busy before any pool ({:.0?} idle): {}",
        idle,
        cpu_share(&idle_before, cpu_by_process(pid)?, idle)
    );

    let writes_before = operator_writes()?;
    let (cpu_before, _) = process_usage(pid)?;
    let profile_before = cpu_by_process(pid)?;
    let t0 = Instant::now();
    for i in 0..args.pools {
        create_pool(&client, &pool_name(i), pool_spec(i).0).await?;
    }
    // hack/bench/scale.sh starts its profile of the API server on this line.
    eprintln!("pools applied");
    let mut last_report = Instant::now();
    loop {
        let done = converged(&args, &nodes, &configmaps, &slices);
        if done >= args.nodes {
            break;
        }
        if t0.elapsed() > args.timeout {
            bail!(
                "{done} of {} nodes converged within {:?}",
                args.nodes,
                args.timeout
            );
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "{done}/{} nodes converged after {:.0?}",
                args.nodes,
                t0.elapsed()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converge = t0.elapsed();
    let (cpu_after, _) = process_usage(pid)?;
    let profile = cpu_used(&profile_before, cpu_by_process(pid)?);
    let busy: f64 = profile.values().sum();
    eprintln!(
        "CPU seconds during convergence ({:.1} s wall, {:.1} CPU-s, {} cores): {}",
        converge.as_secs_f64(),
        busy,
        std::thread::available_parallelism().map_or(0, usize::from),
        profile
            .iter()
            .map(|(name, cpu)| format!("{name} {cpu:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let first_pass = quiet_writes(Duration::from_secs(5)).await? - writes_before;
    let (_, peak_rss) = process_usage(pid)?;
    eprintln!(
        "converged in {converge:.1?}; first pass {first_pass} writes (cumulative by kind: {:?})",
        operator_writes_by_kind()?
    );

    hack("operator.sh", &["restart"])?;
    let resync = quiet_writes(Duration::from_secs(10)).await?;
    let (_, resync_rss) = process_usage(operator_pid()?)?;
    eprintln!("resync: {resync} writes");

    let gpu_rate = schedule_pods(&client, args.pods, true, args.concurrency).await?;
    hack("operator.sh", &["stop"])?;
    let plain_rate = schedule_pods(&client, args.pods, false, args.concurrency).await?;
    for task in [node_task, cm_task, slice_task] {
        task.abort();
    }

    let n = args.nodes as f64;
    let first_pass = first_pass as f64;
    let row = BTreeMap::from([
        ("nodes", json!(args.nodes)),
        ("pools", json!(args.pools)),
        ("node_creation_s", json!(node_creation.as_secs_f64())),
        ("node_init_s", json!(node_init.as_secs_f64())),
        ("converge_s", json!(converge.as_secs_f64())),
        ("operator_cpu_s", json!(cpu_after - cpu_before)),
        ("operator_peak_rss_mib", json!(peak_rss)),
        ("resync_peak_rss_mib", json!(resync_rss)),
        ("first_pass_writes_per_node", json!(first_pass / n)),
        ("resync_writes", json!(resync)),
        ("gpu_pods_per_s", json!(gpu_rate)),
        ("plain_pods_per_s", json!(plain_rate)),
        ("convergence_cpu_s_by_process", json!(profile)),
    ]);
    println!(
        "| {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.2} | {} | {:.0} | {:.0} |",
        args.nodes,
        args.pools,
        (node_creation + node_init).as_secs_f64(),
        converge.as_secs_f64(),
        cpu_after - cpu_before,
        peak_rss,
        first_pass / n,
        resync,
        gpu_rate,
        plain_rate
    );
    println!("{}", serde_json::to_string(&row)?);
    Ok(())
}
