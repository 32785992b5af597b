//! Scale benchmark driver; `hack/bench/scale.sh` runs it against a fresh local control plane
//! with the implementation under test started (fakegpu's operator, release build, as its
//! ServiceAccount; or another implementation through an adapter script, see `--impl`).
//!
//! One run: create N KWOK nodes spread over P pools, wait until KWOK has initialized them, have
//! the implementation set up the pools, and measure until every node has its GPUs (for fakegpu
//! also its labels, ResourceSlice (DRA pools) and topology ConfigMap); the implementation's CPU
//! time and peak RSS, the API server's CPU per node and its cores busy idle (before the pools,
//! and again at rest once they have converged) and converging; the
//! implementation's writes and request bytes per node (from the API server's audit log, the
//! same for any implementation) in the
//! first pass and in a resync (restart); then how fast the real scheduler binds M pods asking
//! for `nvidia.com/gpu`, then M more with the implementation stopped (what it costs the
//! scheduler's throughput) and M plain pods. Prints one Markdown
//! table row and one JSON line.
//!
//! An implementation is an executable called as `IMPL pools LAYOUT` (set up the pools that the
//! tab-separated LAYOUT file lists; nodes carry the reference's pool label already), `IMPL
//! restart`, `IMPL stop` and `IMPL pids` (its processes' pids, one a line), run by
//! hack/bench/scale.sh, which calls `IMPL start` before the nodes are created. Its writes are
//! those of service accounts outside `kube-system`. `hack/bench/impl/fakegpu.sh` is fakegpu's.

use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use fakegpu_e2e::{
    admin_client, audit::AuditTail, cluster_dir, create_namespace, install_crds, process_usage,
    repo_root,
};
use fakegpu_model::{names::label, profiles::profile, topology::NodeTopology};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Node, Pod},
        resource::v1::ResourceSlice,
    },
    apimachinery::pkg::api::resource::Quantity,
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::PostParams,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
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
    implementation: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        nodes: 100,
        pools: 4,
        pods: 200,
        concurrency: 48,
        timeout: Duration::from_secs(1800),
        implementation: repo_root().join("hack/bench/impl/fakegpu.sh"),
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
            "--impl" => args.implementation = value.into(),
            other => bail!("unknown flag {other}"),
        }
    }
    if args.pools == 0 || args.nodes == 0 {
        bail!("--nodes and --pools must be positive");
    }
    Ok(args)
}

/// The implementation under test, driven through its adapter script.
struct Implementation {
    script: PathBuf,
    /// The script's name without extension: `fakegpu`, or `fakegpu-<anything>` for another
    /// build of it (an older commit run side by side), gets the stricter convergence check.
    name: String,
}

impl Implementation {
    fn is_fakegpu(&self) -> bool {
        self.name == "fakegpu" || self.name.starts_with("fakegpu-")
    }

    fn new(script: &Path) -> anyhow::Result<Self> {
        let name = script
            .file_stem()
            .and_then(|s| s.to_str())
            .with_context(|| format!("implementation script {}", script.display()))?
            .to_owned();
        Ok(Self {
            script: script.to_owned(),
            name,
        })
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = Command::new(&self.script)
            .args(args)
            .stderr(std::process::Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", self.script.display()))?;
        if !output.status.success() {
            bail!(
                "{} {} failed: {}",
                self.script.display(),
                args.join(" "),
                output.status
            );
        }
        Ok(String::from_utf8(output.stdout)?)
    }

    fn pids(&self) -> anyhow::Result<Vec<u32>> {
        self.run(&["pids"])?
            .split_whitespace()
            .map(|pid| pid.parse().with_context(|| format!("pid {pid:?}")))
            .collect()
    }

    /// CPU seconds and peak RSS (MiB) of all its processes.
    fn usage(&self) -> anyhow::Result<(f64, f64)> {
        let mut total = (0.0, 0.0);
        for pid in self.pids()? {
            let (cpu, rss) = process_usage(pid)?;
            total = (total.0 + cpu, total.1 + rss);
        }
        Ok(total)
    }
}

/// Pool `i`: even pools serve DRA and the device plugin (H100 x8), odd ones only the device
/// plugin (L40S x4), so both write paths are measured. Profile name, GPUs per node, DRA.
fn pool_spec(i: usize) -> (&'static str, u32, bool) {
    if i.is_multiple_of(2) {
        ("h100", 8, true)
    } else {
        ("l40s", 4, false)
    }
}

fn pool_name(i: usize) -> String {
    format!("scale-p{i}")
}

fn node_name(i: usize) -> String {
    format!("scale-{i:05}")
}

/// The pools as the adapters read them, one a line: pool name (the value of the reference's
/// pool label on its nodes), GPUs per node, fakegpu profile, product (GFD's label form),
/// memory per GPU in MiB, whether DRA is served.
fn write_layout(args: &Args) -> anyhow::Result<PathBuf> {
    let mut text = String::from("# pool\tgpus\tprofile\tproduct\tmemory_mib\tdra\n");
    for i in 0..args.pools {
        let (name, gpus, dra) = pool_spec(i);
        let catalog = profile(name).with_context(|| format!("profile {name}"))?;
        text.push_str(&format!(
            "{}\t{gpus}\t{name}\t{}\t{}\t{dra}\n",
            pool_name(i),
            catalog.product.replace(' ', "-"),
            catalog.memory_mib
        ));
    }
    let path = cluster_dir().join("bench-pools.tsv");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// The processes whose CPU time the convergence is split into: where the time goes.
const PROFILED: [&str; 5] = [
    "kube-apiserver",
    "etcd",
    "kwok",
    "kube-controller-manager",
    "kube-scheduler",
];

/// CPU seconds so far of each profiled control-plane process, the implementation (while it
/// runs) and this driver.
fn cpu_by_process(
    implementation: Option<&Implementation>,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let mut cpu = BTreeMap::new();
    for name in PROFILED {
        let pid: u32 = std::fs::read_to_string(cluster_dir().join(format!("run/{name}.pid")))
            .with_context(|| format!("{name} pid file"))?
            .trim()
            .parse()?;
        cpu.insert(name, process_usage(pid)?.0);
    }
    if let Some(implementation) = implementation {
        cpu.insert("implementation", implementation.usage()?.0);
    }
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

/// Cores each process keeps busy over `period` while nothing is asked of the cluster.
async fn cores_at_rest(
    implementation: &Implementation,
    period: Duration,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let before = cpu_by_process(Some(implementation))?;
    tokio::time::sleep(period).await;
    Ok(cpu_used(&before, cpu_by_process(Some(implementation))?)
        .into_iter()
        .map(|(name, cpu)| (name, cpu / period.as_secs_f64()))
        .collect())
}

/// The implementation's writes, as the audit log tells them.
#[derive(Default)]
struct Writes {
    count: u64,
    bytes: u64,
    /// `verb resource[/subresource]` → count.
    by_kind: BTreeMap<String, u64>,
    /// When the API server answered the last write of a per-node object (node, ConfigMap,
    /// ResourceSlice): the implementation's work done, whenever the watchers see it.
    last_per_node: Option<Timestamp>,
}

impl Writes {
    fn take(&mut self, audit: &mut AuditTail) -> anyhow::Result<usize> {
        let new = audit.poll()?;
        for write in &new {
            self.count += 1;
            self.bytes += write.body_bytes as u64;
            *self.by_kind.entry(write.kind()).or_default() += 1;
            if ["nodes", "configmaps", "resourceslices"].contains(&write.resource.as_str()) {
                self.last_per_node = self.last_per_node.max(write.completed);
            }
        }
        Ok(new.len())
    }

    /// Takes writes until none came for `quiet`.
    async fn until_quiet(&mut self, audit: &mut AuditTail, quiet: Duration) -> anyhow::Result<()> {
        let mut last = Instant::now();
        while last.elapsed() < quiet {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if self.take(audit)? > 0 {
                last = Instant::now();
            }
        }
        Ok(())
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

/// How many benchmark nodes KWOK has given their status and are schedulable (Ready, the
/// not-ready taint every new node starts with taken off).
fn initialized(nodes: &Store<Node>) -> usize {
    count_bench_nodes(nodes, |node| {
        initialized_allocatable(node).is_some() && !counted_out(node)
    })
}

/// How many of the benchmark's own nodes (not a smoke node) `matches`.
fn count_bench_nodes(nodes: &Store<Node>, matches: impl Fn(&Node) -> bool) -> usize {
    nodes
        .state()
        .iter()
        .filter(|node| node.name_any().starts_with("scale-") && matches(node))
        .count()
}

/// Whether the node lifecycle controller counts a node out: Ready not True, or tainted
/// not-ready (every new node, until the controller sees it Ready) or unreachable. While the API
/// server is saturated KWOK renews few leases and nodes go NotReady (see hack/cluster.sh);
/// GPU pods then bind only to the rest, and the scheduler filters through all of them.
fn counted_out(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|all| all.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|all| {
            all.iter().any(|t| {
                t.key == "node.kubernetes.io/not-ready" || t.key == "node.kubernetes.io/unreachable"
            })
        });
    !ready || tainted
}

/// How many benchmark nodes are [`counted_out`].
fn not_ready(nodes: &Store<Node>) -> usize {
    count_bench_nodes(nodes, counted_out)
}

/// Waits (three minutes at most) until every benchmark node is Ready and untainted again, so
/// that both GPU pod phases schedule onto the same healthy cluster: the first came right after
/// convergence, with up to thousands of nodes still coming back, and the scheduler filtering
/// through them. How long that took and how many were out at first.
async fn until_nodes_ready(nodes: &Store<Node>) -> (Duration, usize) {
    let start = Instant::now();
    let first = not_ready(nodes);
    while not_ready(nodes) > 0 && start.elapsed() < Duration::from_secs(180) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (start.elapsed(), first)
}

/// What convergence is checked against: any implementation's GPUs, and fakegpu's own objects.
struct Watched {
    nodes: Store<Node>,
    configmaps: Store<ConfigMap>,
    slices: Store<ResourceSlice>,
    /// Whether the topology ConfigMaps, ResourceSlices and fakegpu's pool label count too.
    fakegpu: bool,
}

/// Which benchmark nodes carry everything their pool gives them: the GPUs beside KWOK's
/// allocatable for any implementation; for fakegpu also its pool label, topology ConfigMap
/// and (DRA pools) ResourceSlice. Nothing takes these back during a run, so a node counted once
/// stays counted and later calls look only at the rest: the driver shares the cores it
/// measures, and checking all 10 000 nodes four times a second was half of its CPU.
struct Convergence {
    /// Whether each node (by index) has converged.
    done: Vec<bool>,
    count: usize,
    pool_names: Vec<String>,
}

impl Convergence {
    fn new(args: &Args) -> Self {
        Self {
            done: vec![false; args.nodes],
            count: 0,
            pool_names: (0..args.pools).map(pool_name).collect(),
        }
    }

    /// How many nodes have converged, looking again at those that had not.
    fn update(&mut self, watched: &Watched) -> usize {
        let namespace = fakegpu_e2e::OPERATOR_NAMESPACE;
        // Nodes that have all but their slice; the slices' node names are gathered only if
        // one does.
        let mut need_slice = Vec::new();
        for index in 0..self.done.len() {
            if self.done[index] {
                continue;
            }
            let name = node_name(index);
            let Some(node) = watched.nodes.get(&ObjectRef::new(&name)) else {
                continue;
            };
            let pool = index % self.pool_names.len();
            let (_, gpus, dra) = pool_spec(pool);
            let capacity = initialized_allocatable(&node)
                .and_then(|a| a.get("nvidia.com/gpu"))
                .is_some_and(|q| q.0.parse() == Ok(gpus));
            if !capacity {
                continue;
            }
            if watched.fakegpu {
                let labelled =
                    node.labels().get("fakegpu.dev/pool") == Some(&self.pool_names[pool]);
                let configmap =
                    ObjectRef::new(&NodeTopology::configmap_name(&name)).within(namespace);
                if !labelled || watched.configmaps.get(&configmap).is_none() {
                    continue;
                }
                if dra {
                    need_slice.push(index);
                    continue;
                }
            }
            self.done[index] = true;
            self.count += 1;
        }
        if !need_slice.is_empty() {
            let slices = watched.slices.state();
            let have_slice: HashSet<&str> = slices
                .iter()
                .filter_map(|s| s.spec.node_name.as_deref())
                .collect();
            for index in need_slice {
                if have_slice.contains(node_name(index).as_str()) {
                    self.done[index] = true;
                    self.count += 1;
                }
            }
        }
        self.count
    }
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

/// Waits until the implementation uses under a twentieth of a core over a second (at most a
/// minute); how long that took, and the cores it used in its last 10 s (or since the start).
async fn settle(implementation: &Implementation) -> anyhow::Result<(Duration, f64)> {
    let started = Instant::now();
    let mut samples = vec![implementation.usage()?.0];
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(implementation.usage()?.0);
        if let [.., before, now] = samples[..]
            && now - before < 0.05
        {
            break;
        }
    }
    let window = &samples[samples.len().saturating_sub(11)..];
    let rate = match window {
        [first, .., last] => (last - first) / (window.len() - 1) as f64,
        _ => 0.0,
    };
    Ok((started.elapsed(), rate))
}

/// Runs `work` and says what each process of the cluster spent meanwhile (wall seconds first):
/// where the cores went when GPU pods bind more slowly with the implementation running.
async fn profiled<T>(
    implementation: Option<&Implementation>,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, String)> {
    let before = cpu_by_process(implementation)?;
    let start = Instant::now();
    let result = work.await?;
    let wall = start.elapsed();
    let used = cpu_used(&before, cpu_by_process(implementation)?);
    Ok((
        result,
        format!(
            "({:.1} s wall) {}",
            wall.as_secs_f64(),
            per_process(&used, 1.0)
        ),
    ))
}

fn per_process(cpu: &BTreeMap<&'static str, f64>, scale: f64) -> String {
    cpu.iter()
        .map(|(name, used)| format!("{name} {:.2}", used / scale))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let implementation = Implementation::new(&args.implementation)?;
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
    let watched = Watched {
        nodes,
        configmaps,
        slices,
        fakegpu: implementation.is_fakegpu(),
    };
    // The pools go onto a cluster whose nodes are up: KWOK gives each its status first (the
    // operator waits for that too), and its pace is not the implementation's.
    let started = Instant::now();
    while initialized(&watched.nodes) < args.nodes {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let node_init = started.elapsed();
    eprintln!("KWOK initialized the nodes and they were Ready {node_init:.1?} later");

    // What the cluster costs with no pool at all (KWOK's heartbeats and leases, the controllers'
    // resyncs). At 10 000 nodes KWOK is often still writing the last nodes' status here; the
    // sample at rest after convergence, below, is the truer floor.
    let idle = Duration::from_secs(10);
    let idle_cores = cores_at_rest(&implementation, idle).await?;
    eprintln!(
        "CPU cores busy before any pool ({idle:.0?} idle): {}",
        per_process(&idle_cores, 1.0)
    );

    let layout = write_layout(&args)?;
    let mut audit = AuditTail::from_now(&cluster_dir().join("logs/audit.log"))?;
    let mut first_pass = Writes::default();
    let (cpu_before, _) = implementation.usage()?;
    let profile_before = cpu_by_process(Some(&implementation))?;
    let t0 = Instant::now();
    let applied_at = Timestamp::now();
    implementation.run(&["pools", &layout.to_string_lossy()])?;
    // hack/bench/scale.sh starts its profile of the API server on this line.
    eprintln!("pools applied");
    let mut last_report = Instant::now();
    let mut convergence = Convergence::new(&args);
    loop {
        let done = convergence.update(&watched);
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
        first_pass.take(&mut audit)?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converge = t0.elapsed();
    let (cpu_after, _) = implementation.usage()?;
    let profile = cpu_used(&profile_before, cpu_by_process(Some(&implementation))?);
    let busy: f64 = profile.values().sum();
    eprintln!(
        "CPU seconds during convergence ({:.1} s wall, {:.1} CPU-s, {} cores): {}",
        converge.as_secs_f64(),
        busy,
        std::thread::available_parallelism().map_or(0, usize::from),
        per_process(&profile, 1.0)
    );
    let n = args.nodes as f64;
    // Its idle floor (KWOK's heartbeats) is in there too: it cannot be taken out, as the API
    // server, once saturated, serves the heartbeats more slowly rather than using more CPU.
    let apiserver = profile.get("kube-apiserver").copied().unwrap_or_default();
    // Its cores busy with no pool and while converging: when the two are alike and the floor
    // at rest (below) is as high, its CPU per node follows the time rather than the writes.
    let apiserver_idle_cores = idle_cores
        .get("kube-apiserver")
        .copied()
        .unwrap_or_default();
    let apiserver_cores = apiserver / converge.as_secs_f64();
    first_pass
        .until_quiet(&mut audit, Duration::from_secs(5))
        .await?;
    let (_, peak_rss) = implementation.usage()?;
    eprintln!(
        "converged in {converge:.1?}; first pass {} writes, {} request bytes (by kind: {:?})",
        first_pass.count, first_pass.bytes, first_pass.by_kind
    );
    // The driver shares the saturated cores too: what it watches reaches it late.
    let writes_done = first_pass
        .last_per_node
        .map(|last| last.duration_since(applied_at).as_secs_f64());
    if let Some(done) = writes_done {
        eprintln!(
            "per-node writes done {done:.1} s after the pools were applied (the API server's \
             answer to the last node, ConfigMap or ResourceSlice write); the driver saw them \
             all at {:.1} s",
            converge.as_secs_f64()
        );
    }

    implementation.run(&["restart"])?;
    let mut resync = Writes::default();
    resync
        .until_quiet(&mut audit, Duration::from_secs(10))
        .await?;
    let (_, resync_rss) = implementation.usage()?;
    eprintln!(
        "resync: {} writes (by kind: {:?})",
        resync.count, resync.by_kind
    );

    // A restarted implementation goes over every node again after its writes stop (fakegpu: a
    // reconcile each, finding nothing to write); the scheduler is measured beside it at rest.
    let (recovered, out_after_resync) = until_nodes_ready(&watched.nodes).await;
    eprintln!(
        "nodes Ready {recovered:.1?} after the resync ({out_after_resync} were not; {} still are)",
        not_ready(&watched.nodes)
    );
    let (settling, rest_cores) = settle(&implementation).await?;
    // The floor under the convergence's figures, measured once KWOK has stopped initializing
    // nodes (it still is during the idle period before the pools).
    let converged_idle_cores = cores_at_rest(&implementation, idle).await?;
    eprintln!(
        "CPU cores busy at rest with the pools converged ({idle:.0?}): {}",
        per_process(&converged_idle_cores, 1.0)
    );
    let (pods_cpu_before, _) = implementation.usage()?;
    let (gpu_rate, gpu_cpu) = profiled(
        Some(&implementation),
        schedule_pods(&client, args.pods, true, args.concurrency),
    )
    .await?;
    let pods_cpu = implementation.usage()?.0 - pods_cpu_before;
    eprintln!(
        "implementation settled {settling:.1?} after the resync's writes (then {rest_cores:.2} cores); {:.1} CPU-s while {} GPU pods were bound",
        pods_cpu, args.pods
    );
    eprintln!("CPU seconds while GPU pods were bound: {gpu_cpu}");
    // The same again without the implementation at work (the nodes keep their GPUs): the
    // difference is what it costs the scheduler.
    implementation.run(&["stop"])?;
    until_nodes_ready(&watched.nodes).await;
    let (gpu_rate_stopped, stopped_cpu) = profiled(
        None,
        schedule_pods(&client, args.pods, true, args.concurrency),
    )
    .await?;
    eprintln!("CPU seconds while GPU pods were bound, implementation stopped: {stopped_cpu}");
    let plain_rate = schedule_pods(&client, args.pods, false, args.concurrency).await?;
    for task in [node_task, cm_task, slice_task] {
        task.abort();
    }

    let row = BTreeMap::from([
        ("implementation", json!(implementation.name)),
        ("nodes", json!(args.nodes)),
        ("pools", json!(args.pools)),
        ("node_creation_s", json!(node_creation.as_secs_f64())),
        ("node_init_s", json!(node_init.as_secs_f64())),
        ("converge_s", json!(converge.as_secs_f64())),
        ("per_node_writes_done_s", json!(writes_done)),
        ("implementation_cpu_s", json!(cpu_after - cpu_before)),
        ("implementation_peak_rss_mib", json!(peak_rss)),
        ("resync_peak_rss_mib", json!(resync_rss)),
        ("apiserver_cpu_ms_per_node", json!(apiserver / n * 1000.0)),
        ("apiserver_idle_cores", json!(apiserver_idle_cores)),
        ("apiserver_converging_cores", json!(apiserver_cores)),
        (
            "apiserver_converged_idle_cores",
            json!(converged_idle_cores.get("kube-apiserver")),
        ),
        (
            "first_pass_writes_per_node",
            json!(first_pass.count as f64 / n),
        ),
        (
            "first_pass_write_bytes_per_node",
            json!(first_pass.bytes as f64 / n),
        ),
        ("first_pass_writes_by_kind", json!(first_pass.by_kind)),
        ("resync_writes", json!(resync.count)),
        ("nodes_not_ready_after_resync", json!(out_after_resync)),
        ("nodes_ready_after_resync_s", json!(recovered.as_secs_f64())),
        ("settled_after_resync_s", json!(settling.as_secs_f64())),
        ("implementation_cores_at_rest", json!(rest_cores)),
        ("implementation_cpu_s_during_gpu_pods", json!(pods_cpu)),
        ("gpu_pods_per_s", json!(gpu_rate)),
        ("gpu_pods_per_s_stopped", json!(gpu_rate_stopped)),
        ("plain_pods_per_s", json!(plain_rate)),
        ("convergence_cpu_s_by_process", json!(profile)),
    ]);
    println!(
        "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.2}, {:.2} | {:.2} | {:.0} | {} | {:.0} | {:.0} | {:.0} |",
        implementation.name,
        args.nodes,
        args.pools,
        (node_creation + node_init).as_secs_f64(),
        converge.as_secs_f64(),
        cpu_after - cpu_before,
        peak_rss,
        apiserver / n * 1000.0,
        apiserver_idle_cores,
        apiserver_cores,
        first_pass.count as f64 / n,
        first_pass.bytes as f64 / n,
        resync.count,
        gpu_rate,
        gpu_rate_stopped,
        plain_rate
    );
    println!("{}", serde_json::to_string(&row)?);
    Ok(())
}
