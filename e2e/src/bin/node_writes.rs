//! Node write benchmark; `hack/bench/node-writes.sh` runs it against a fresh local control
//! plane. What one node write of fakegpu's costs the API server, sent as the server-side apply
//! fakegpu sent before 2026-12-05 and as the strategic merge patch it sends now, with the same
//! content: the operator's own body for a KWOK node of an 8 × H100 pool (GFD's labels, the
//! GPUs in capacity and allocatable, the fractioning condition).
//!
//! Creates N KWOK nodes, waits until KWOK has initialized them and for the cluster to settle,
//! measures the API server's idle CPU, then writes every node once, in blocks that alternate
//! between the two ways (apply, patch, patch, apply by default), each block on nodes nothing
//! has written yet, as nodes joining a pool are. Per block it prints the wall time, the API
//! server's CPU seconds per write, and the same less its idle floor over the block's time.
//! Not a test: nothing is asserted.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fakegpu_api::{GpuNodePool, pool::resolve::resolve_pool};
use fakegpu_e2e::{admin_client, cluster_dir, create_kwok_node, process_usage};
use fakegpu_model::names::FIELD_MANAGER;
use fakegpu_operator::{
    kit::cache::Cached,
    node::{
        labels::desired_labels,
        status::{Leftovers, NodeIntent, desired_fractioning, desired_resources, node_patch},
    },
};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::Time, jiff};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

/// How a node write is sent.
#[derive(Clone, Copy, Debug)]
enum Way {
    Apply,
    Patch,
}

struct Args {
    nodes: usize,
    blocks: Vec<Way>,
    concurrency: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        nodes: 8000,
        blocks: vec![Way::Apply, Way::Patch, Way::Patch, Way::Apply],
        concurrency: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--nodes" => args.nodes = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--blocks" => {
                args.blocks = value
                    .split(',')
                    .map(|way| match way {
                        "apply" => Ok(Way::Apply),
                        "patch" => Ok(Way::Patch),
                        other => bail!("--blocks: {other:?} is neither apply nor patch"),
                    })
                    .collect::<anyhow::Result<_>>()?
            }
            other => bail!("unknown flag {other} (--nodes, --blocks, --concurrency)"),
        }
    }
    if args.blocks.is_empty() || args.nodes < args.blocks.len() {
        bail!("need at least one node per block");
    }
    Ok(args)
}

fn node_name(i: usize) -> String {
    format!("nw-{i:05}")
}

/// The operator's intent for a KWOK node of an 8 × H100 pool serving both interfaces.
fn intent() -> anyhow::Result<NodeIntent> {
    let pool: GpuNodePool = serde_json::from_value(json!({
        "apiVersion": "fakegpu.dev/v1alpha1", "kind": "GpuNodePool",
        "metadata": {"name": "bench"},
        "spec": {"gpu": {"profile": "h100", "count": 8},
            "interfaces": {"devicePlugin": true, "dra": true}},
    }))?;
    let gpu = resolve_pool(&pool.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let served = &pool.spec.interfaces;
    let resources = desired_resources(&pool, &gpu, true, served);
    let bare = Cached::new(Node::default());
    Ok(NodeIntent {
        labels: desired_labels(&pool, &gpu, false, served, &Default::default()),
        fractioning: desired_fractioning(&bare, &pool, &resources, &Time(jiff::Timestamp::now())),
        resources,
        ..Default::default()
    })
}

/// Sends `way`'s write of `intent` to each of `names`.
async fn write(
    nodes: &Api<Node>,
    names: &[String],
    way: Way,
    intent: &NodeIntent,
    concurrency: usize,
) -> anyhow::Result<()> {
    let patch = node_patch(intent, &Leftovers::default(), None);
    stream::iter(names)
        .map(|name| {
            let mut body = patch.clone();
            async move {
                match way {
                    Way::Apply => {
                        body["apiVersion"] = json!("v1");
                        body["kind"] = json!("Node");
                        body["metadata"]["name"] = json!(name);
                        let params = PatchParams::apply(FIELD_MANAGER).force();
                        nodes
                            .patch_status(name, &params, &Patch::Apply(&body))
                            .await?
                    }
                    Way::Patch => {
                        let params = PatchParams {
                            field_manager: Some(FIELD_MANAGER.to_owned()),
                            ..Default::default()
                        };
                        nodes
                            .patch_status(name, &params, &Patch::Strategic(&body))
                            .await?
                    }
                };
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await
}

fn apiserver_cpu() -> anyhow::Result<f64> {
    let pid = std::fs::read_to_string(cluster_dir().join("run/kube-apiserver.pid"))
        .context("kube-apiserver pid file")?;
    Ok(process_usage(pid.trim().parse()?)?.0)
}

/// How many of the benchmark's nodes KWOK has given their status (`pods` in allocatable).
async fn initialized(nodes: &Api<Node>) -> anyhow::Result<usize> {
    let list = nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|n| n.name_any().starts_with("nw-"))
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .is_some_and(|a| a.contains_key("pods"))
        })
        .count())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let client: Client = admin_client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = (0..args.nodes).map(node_name).collect();
    stream::iter(&names)
        .map(|name| create_kwok_node(&client, name, &[]))
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    while initialized(&nodes).await? < args.nodes {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // KWOK's first heartbeats and the controllers' reaction to the new nodes pass first.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle = Duration::from_secs(15);
    let before = apiserver_cpu()?;
    tokio::time::sleep(idle).await;
    let floor = (apiserver_cpu()? - before) / idle.as_secs_f64();
    eprintln!(
        "{} KWOK nodes; kube-apiserver idle: {floor:.2} cores",
        args.nodes
    );

    let intent = intent()?;
    let per_block = args.nodes / args.blocks.len();
    println!("| way | writes | wall s | API server CPU ms/write | less idle floor |");
    println!("|---|---|---|---|---|");
    for (block, way) in args.blocks.iter().enumerate() {
        let chunk = &names[block * per_block..(block + 1) * per_block];
        let before = apiserver_cpu()?;
        let started = Instant::now();
        write(&nodes, chunk, *way, &intent, args.concurrency).await?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = apiserver_cpu()? - before;
        let n = chunk.len() as f64;
        println!(
            "| {way:?} | {} | {wall:.1} | {:.2} | {:.2} |",
            chunk.len(),
            cpu / n * 1000.0,
            (cpu - floor * wall) / n * 1000.0
        );
    }
    Ok(())
}
