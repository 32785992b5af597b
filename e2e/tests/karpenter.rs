//! Karpenter (hack/karpenter.sh: the pinned release's KWOK provider, built from the module
//! proxy, with its chart's RBAC) scales fakegpu pools: pending GPU pods make it launch KWOK
//! nodes of an instance type with `nvidia.com/gpu`, whose NodePool labels them into a fakegpu
//! pool; fakegpu gives them their GPUs, GFD labels and topology, Karpenter counts them
//! initialized, the pods bind and get GPUs of their node, and consolidation removes the nodes
//! once the pods are gone, which fakegpu forgets.
//!
//! `#[ignore]`d in the KWOK phase: hack/test.sh starts Karpenter and runs the first with
//! `--ignored`; hack/bench/karpenter.sh runs the benchmark.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use fakegpu_e2e::{
    Cleanup, admin_client, create_namespace, create_object, create_pool, dynamic_api, eventually,
    install_crds, topology_of, unique_name,
};
use fakegpu_model::names::{annotation, label};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
    core::DynamicObject,
};
use serde_json::json;

/// Launching, registering and equipping nodes, then binding: Karpenter batches pending pods
/// for up to 10 s (hack/karpenter.sh) before it launches.
const CONVERGE: Duration = Duration::from_secs(180);
/// Instance types of hack/karpenter/instance-types.json.
const GPU_INSTANCE: &str = "gpu-h100x8-amd64-linux";
const CPU_INSTANCE: &str = "c-8x-amd64-linux";
/// GPUs of [`GPU_INSTANCE`], which the pool's `gpu.count` matches.
const GPUS_PER_NODE: usize = 8;

fn node_pools(client: &Client) -> Api<DynamicObject> {
    dynamic_api(client, ("karpenter.sh", "v1", "NodePool"), None)
}

fn node_classes(client: &Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        ("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass"),
        None,
    )
}

/// The NodeClaims of NodePool `id`: the nodes Karpenter launched for it.
async fn node_claims_of(client: &Client, id: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let claims = dynamic_api(client, ("karpenter.sh", "v1", "NodeClaim"), None);
    let selector = format!("karpenter.sh/nodepool={id}");
    Ok(claims
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// A KWOKNodeClass and a NodePool `id` launching `instance` nodes with `labels`, removing all
/// that are empty as soon as they are.
async fn node_pool(
    client: &Client,
    id: &str,
    instance: &str,
    labels: serde_json::Value,
) -> anyhow::Result<()> {
    create_object(
        &node_classes(client),
        json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": id}}),
    )
    .await?;
    create_object(
        &node_pools(client),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": id},
            "spec": {
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": id},
                        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance]}],
                        "expireAfter": "Never",
                        // KWOK's taint, as on the cluster's other KWOK nodes: only pods meant
                        // for them land there (not the bundle's Deployments, which would keep
                        // a node from being empty).
                        "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}],
                    },
                },
                // Every empty node at once, a few seconds after its last pod went: the
                // default budget (10% of the nodes) takes one per consolidation round.
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
                    "budgets": [{"nodes": "100%"}]},
            }}),
    )
    .await
}

/// Deletes NodePool and KWOKNodeClass `id` and waits until Karpenter has removed the nodes
/// they launched (their NodeClaims' finalizers need Karpenter).
async fn remove_node_pool(client: &Client, id: &str) -> anyhow::Result<()> {
    let params = DeleteParams::default();
    let _ = node_pools(client).delete(id, &params).await;
    eventually(
        &format!("NodePool {id}'s NodeClaims gone"),
        CONVERGE,
        || async { Ok(node_claims_of(client, id).await?.is_empty().then_some(())) },
    )
    .await?;
    let _ = node_classes(client).delete(id, &params).await;
    Ok(())
}

/// `count` pods in `namespace` asking for `gpus` GPUs each (none: CPU only), selecting NodePool
/// `id`'s nodes; returns when all are bound, with the time from creation to the last binding.
async fn pods_until_bound(
    client: &Client,
    namespace: &str,
    id: &str,
    count: usize,
    gpus: usize,
) -> anyhow::Result<Duration> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let resources = if gpus > 0 {
        json!({"limits": {"nvidia.com/gpu": gpus.to_string()}})
    } else {
        json!({"requests": {"cpu": "1"}})
    };
    let started = Instant::now();
    for n in 0..count {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{id}-{n}"), "labels": {"app": id}},
            "spec": {
                "nodeSelector": {"karpenter.sh/nodepool": id},
                "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "busybox", "resources": resources}],
            },
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let selector = format!("app={id}");
    eventually(
        &format!("{count} pods of {id} bound"),
        CONVERGE + Duration::from_secs(count as u64),
        || async {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            let bound = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            Ok((bound == count).then_some(()))
        },
    )
    .await?;
    Ok(started.elapsed())
}

#[tokio::test]
#[ignore = "needs Karpenter (hack/karpenter.sh start): hack/test.sh runs it"]
async fn karpenter_launches_gpu_nodes_that_fakegpu_equips_and_consolidates_them_when_empty()
-> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let id = unique_name("karpenter");
    let namespace = create_namespace(&client, "karpenter").await?;
    let cleanup = Cleanup::new(&client).pool(&id).namespace(&namespace);
    let result = launch_equip_consolidate(&client, &id, &namespace).await;
    let removed = remove_node_pool(&client, &id).await;
    cleanup.after(result.and(removed)).await
}

async fn launch_equip_consolidate(
    client: &Client,
    id: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    // The pool owns the nodes its label names; Karpenter's nodes carry it from the NodePool.
    create_pool(
        client,
        id,
        json!({"gpu": {"profile": "h100", "count": GPUS_PER_NODE}}),
    )
    .await?;
    node_pool(client, id, GPU_INSTANCE, json!({label::NODE_POOL: id})).await?;

    // Two pods of four GPUs: one node of eight.
    let took = pods_until_bound(client, namespace, id, 2, 4).await?;
    println!("2 pods of 4 GPUs: pending to bound in {took:?}");

    // One node of eight GPUs for eight, counted initialized: registered, Ready, and every
    // resource of its instance type (`nvidia.com/gpu`) in its allocatable.
    eventually(
        &format!("NodePool {id}'s NodeClaim Initialized"),
        CONVERGE,
        || async {
            let launched = node_claims_of(client, id).await?;
            ensure!(
                launched.len() <= 1,
                "Karpenter launched {} nodes for 8 GPUs of 8-GPU instances, not 1",
                launched.len()
            );
            let initialized = launched
                .iter()
                .filter(|claim| {
                    claim.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Initialized" && c["status"] == "True")
                })
                .count();
            Ok((initialized == 1).then_some(()))
        },
    )
    .await?;

    // fakegpu equipped every launched node, and each pod holds GPUs of its own node.
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let running = pods
        .list(&ListParams::default().labels(&format!("app={id}")))
        .await?
        .items;
    for pod in &running {
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .context("bound")?;
        let node = nodes.get(&node_name).await?;
        ensure!(
            node.labels().get(label::GPU_PRODUCT).is_some(),
            "node {node_name} has no {} label: {:?}",
            label::GPU_PRODUCT,
            node.labels()
        );
        let uuids = eventually(
            &format!("pod {} given GPUs", pod.name_any()),
            CONVERGE,
            || async {
                let pod = pods.get(&pod.name_any()).await?;
                Ok(pod.annotations().get(annotation::ASSIGNED_GPUS).cloned())
            },
        )
        .await?;
        let document = topology_of(client, &node_name)
            .await?
            .context("no topology")?
            .1;
        ensure!(
            document.gpus.len() == GPUS_PER_NODE,
            "{node_name}: {} GPUs",
            document.gpus.len()
        );
        let held: Vec<&str> = uuids.split(',').collect();
        ensure!(
            held.len() == 4
                && held
                    .iter()
                    .all(|uuid| document.gpus.iter().any(|g| g.id == *uuid)),
            "pod {} holds {uuids}, not four GPUs of {node_name}",
            pod.name_any()
        );
    }

    // The pods go: consolidation removes the empty nodes, and fakegpu forgets them.
    let node_names: Vec<String> = running
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&format!("app={id}")),
    )
    .await?;
    for name in &node_names {
        eventually(
            &format!("node {name} consolidated away and forgotten"),
            CONVERGE,
            || async {
                let gone = nodes.get_opt(name).await?.is_none();
                let forgotten = topology_of(client, name).await?.is_none();
                Ok((gone && forgotten).then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}

/// Pending-to-bound time of `FAKEGPU_BENCH_PODS` (default 100) pods of one GPU each on nodes
/// Karpenter launches into a fakegpu pool, against as many CPU-only pods on CPU nodes of as many
/// pods each, in one run. Prints the table row; asserts nothing (hack/bench/karpenter.sh).
#[tokio::test]
#[ignore = "a benchmark: hack/bench/karpenter.sh runs it"]
async fn karpenter_bench_pending_to_bound() -> anyhow::Result<()> {
    let count: usize = std::env::var("FAKEGPU_BENCH_PODS")
        .ok()
        .map(|n| n.parse())
        .transpose()
        .context("FAKEGPU_BENCH_PODS")?
        .unwrap_or(100);
    let client = admin_client().await?;
    install_crds(&client).await?;
    let namespace = create_namespace(&client, "karpenter-bench").await?;
    let gpu_id = unique_name("bench-gpu");
    let cpu_id = unique_name("bench-cpu");
    let cleanup = Cleanup::new(&client).pool(&gpu_id).namespace(&namespace);
    let result = async {
        create_pool(
            &client,
            &gpu_id,
            json!({"gpu": {"profile": "h100", "count": GPUS_PER_NODE}}),
        )
        .await?;
        node_pool(
            &client,
            &gpu_id,
            GPU_INSTANCE,
            json!({label::NODE_POOL: gpu_id}),
        )
        .await?;
        let gpu = pods_until_bound(&client, &namespace, &gpu_id, count, 1).await?;
        // Pods of one CPU on 8-CPU nodes: about seven a node after the kubelet's reserve, as
        // pods of one GPU are eight a GPU node.
        node_pool(&client, &cpu_id, CPU_INSTANCE, json!({})).await?;
        let cpu = pods_until_bound(&client, &namespace, &cpu_id, count, 0).await?;
        println!("| pods | GPU pods s | CPU-only pods s | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| {count} | {:.1} | {:.1} | {:.2} |",
            gpu.as_secs_f64(),
            cpu.as_secs_f64(),
            gpu.as_secs_f64() / cpu.as_secs_f64()
        );
        anyhow::Ok(())
    }
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let _ = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let removed = remove_node_pool(&client, &gpu_id)
        .await
        .and(remove_node_pool(&client, &cpu_id).await);
    cleanup.after(result.and(removed)).await
}
