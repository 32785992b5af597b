//! Kueue (hack/kueue.sh: the pinned release, built from the module proxy, with its own RBAC and
//! webhooks) queues GPU Jobs on fakegpu's KWOK pools as on GPU nodes: ResourceFlavors keyed on
//! the GPU product label fakegpu publishes as NVIDIA's GPU feature discovery does, a
//! ClusterQueue with `nvidia.com/gpu` quota per flavor, Jobs admitted up to the quota and
//! placed on their flavor's nodes, the next one waiting until one ends, and a higher-priority
//! Job preempting a lower one.
//!
//! `#[ignore]`d in the KWOK phase: hack/test.sh starts Kueue and runs these with `--ignored`.

use std::time::Duration;

use anyhow::{Context, ensure};
use fakegpu_e2e::{
    Cleanup, KWOK_RUN_FOR, admin_client, create_kwok_job, create_kwok_node, create_namespace,
    create_object, create_pool, dynamic_api, eventually, install_crds, topology_of, unique_name,
};
use fakegpu_model::names::label;
use k8s_openapi::api::{
    batch::v1::Job,
    core::v1::{Node, Pod},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
    core::DynamicObject,
};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(90);
/// Kueue's label naming a Job's LocalQueue.
const QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's label naming a Job's WorkloadPriorityClass.
const PRIORITY_CLASS: &str = "kueue.x-k8s.io/priority-class";

fn kueue_api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    dynamic_api(client, ("kueue.x-k8s.io", "v1beta2", kind), namespace)
}

/// ClusterQueue `id` for namespace `namespace` with `nvidia.com/gpu` quota per flavor, in
/// order, and `spec`'s fields (preemption) besides; LocalQueue `gpus` of the namespace feeding
/// it. Waits until the ClusterQueue is active.
async fn queues(
    client: &Client,
    id: &str,
    namespace: &str,
    quota: &[(String, u32)],
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    let flavors: Vec<serde_json::Value> = quota
        .iter()
        .map(|(flavor, gpus)| {
            json!({"name": flavor, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]})
        })
        .collect();
    let mut queue_spec = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}],
    });
    if let (Some(target), Some(fields)) = (queue_spec.as_object_mut(), spec.as_object()) {
        target.extend(fields.clone());
    }
    let cluster_queues = kueue_api(client, "ClusterQueue", None);
    create_object(
        &cluster_queues,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": id}, "spec": queue_spec}),
    )
    .await?;
    create_object(
        &kueue_api(client, "LocalQueue", Some(namespace)),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "gpus", "namespace": namespace},
            "spec": {"clusterQueue": id}}),
    )
    .await?;
    eventually("the ClusterQueue active", CONVERGE, || async {
        let queue = cluster_queues.get(id).await?;
        let active = queue.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Active" && c["status"] == "True")
            });
        Ok(active.then_some(()))
    })
    .await
}

/// A pool of one KWOK node; the GPU product label its node carries (NVIDIA's GFD name).
async fn pool_of_one(
    client: &Client,
    pool: &str,
    spec: serde_json::Value,
) -> anyhow::Result<String> {
    let node = format!("{pool}-node");
    create_kwok_node(client, &node, &[(label::NODE_POOL, pool)]).await?;
    create_pool(client, pool, spec).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(
        &format!("{node} labelled with its GPU"),
        CONVERGE,
        || async {
            let node = nodes.get(&node).await?;
            Ok(node.labels().get(label::GPU_PRODUCT).cloned())
        },
    )
    .await
}

/// The Job's pods that run (or ran), by the node they are on.
async fn job_nodes(client: &Client, namespace: &str, job: &str) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.spec?.node_name)
        .collect())
}

fn suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

fn succeeded(job: &Job) -> bool {
    job.status.as_ref().and_then(|s| s.succeeded) == Some(1)
}

/// Holders of the GPUs of a node, as fakegpu's topology document records them.
async fn holders(client: &Client, node: &str) -> anyhow::Result<Vec<String>> {
    let document = topology_of(client, node).await?.context("no topology")?.1;
    Ok(document
        .gpus
        .iter()
        .map(|g| g.status.allocated_by.pod.clone())
        .collect())
}

#[tokio::test]
#[ignore = "needs Kueue (hack/kueue.sh start): hack/test.sh runs it"]
async fn kueue_admits_gpu_jobs_by_quota_per_flavor_and_preempts_by_priority() -> anyhow::Result<()>
{
    let client = admin_client().await?;
    install_crds(&client).await?;
    let id = unique_name("kueue");
    let (t4_pool, l4_pool) = (format!("{id}-t4"), format!("{id}-l4"));
    let namespace = create_namespace(&client, "kueue").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&t4_pool)
        .pool(&l4_pool)
        .node(&format!("{t4_pool}-node"))
        .node(&format!("{l4_pool}-node"))
        .namespace(&namespace);
    let flavors = kueue_api(&client, "ResourceFlavor", None);
    let cluster_queues = kueue_api(&client, "ClusterQueue", None);
    let priorities = kueue_api(&client, "WorkloadPriorityClass", None);
    let result = queue_gpu_jobs(&client, &id, &namespace, &t4_pool, &l4_pool).await;
    let params = DeleteParams::default();
    let _ = cluster_queues.delete(&id, &params).await;
    for name in [format!("{id}-t4"), format!("{id}-l4")] {
        let _ = flavors.delete(&name, &params).await;
    }
    let _ = priorities.delete(&format!("{id}-high"), &params).await;
    cleanup.after(result).await
}

async fn queue_gpu_jobs(
    client: &Client,
    id: &str,
    namespace: &str,
    t4_pool: &str,
    l4_pool: &str,
) -> anyhow::Result<()> {
    let t4 = pool_of_one(
        client,
        t4_pool,
        json!({"gpu": {"profile": "t4", "count": 2}}),
    )
    .await?;
    let l4 = pool_of_one(
        client,
        l4_pool,
        json!({"gpu": {"profile": "l4", "count": 1}}),
    )
    .await?;
    ensure!(t4 != l4, "both pools' nodes say {t4}");
    let (t4_node, l4_node) = (format!("{t4_pool}-node"), format!("{l4_pool}-node"));

    // The flavors select nodes by the product label, as on GPU nodes with NVIDIA's GFD (and by
    // the pool's, which keeps other tests' L4 nodes out: a DRA node serves `nvidia.com/gpu`
    // too, through the DeviceClass's extended resource); the queue has two T4s and one L4, T4s
    // first.
    let flavors = kueue_api(client, "ResourceFlavor", None);
    for (flavor, product, pool) in [("t4", &t4, t4_pool), ("l4", &l4, l4_pool)] {
        create_object(
            &flavors,
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": format!("{id}-{flavor}")},
                "spec": {"nodeLabels": {label::GPU_PRODUCT: product, label::NODE_POOL: pool}}}),
        )
        .await?;
    }
    queues(
        client,
        id,
        namespace,
        &[(format!("{id}-t4"), 2), (format!("{id}-l4"), 1)],
        json!({"preemption": {"withinClusterQueue": "LowerPriority"}}),
    )
    .await?;
    create_object(
        &kueue_api(client, "WorkloadPriorityClass", None),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": format!("{id}-high")}, "value": 1000}),
    )
    .await?;

    // One GPU each, in the queue; no node selector: the flavor Kueue assigns places the pod.
    let gpu_job = |name: &'static str, run_for: &'static str, labels: serde_json::Value| {
        let mut labels = labels;
        labels[QUEUE_NAME] = json!("gpus");
        create_kwok_job(
            client,
            namespace,
            name,
            labels,
            json!({"annotations": {KWOK_RUN_FOR: run_for}}),
            json!({"containers": [{"name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        )
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);

    // Quota: three Jobs fill the two T4s and the L4; the fourth waits, suspended, with no pod.
    for name in ["first", "second", "third"] {
        gpu_job(name, "25s", json!({})).await?;
    }
    let mut placed = Vec::new();
    for name in ["first", "second", "third"] {
        let nodes = eventually(
            &format!("Job {name} admitted and running"),
            CONVERGE,
            || async {
                let job = jobs.get(name).await?;
                let nodes = job_nodes(client, namespace, name).await?;
                Ok((!suspended(&job) && nodes.len() == 1).then_some(nodes))
            },
        )
        .await?;
        placed.push(nodes[0].clone());
    }
    placed.sort();
    let mut expected = vec![t4_node.clone(), t4_node.clone(), l4_node.clone()];
    expected.sort();
    ensure!(placed == expected, "placed on {placed:?}, not {expected:?}");
    gpu_job("fourth", "5s", json!({})).await?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let fourth = jobs.get("fourth").await?;
    ensure!(
        suspended(&fourth) && job_nodes(client, namespace, "fourth").await?.is_empty(),
        "Job fourth runs beyond the queue's quota"
    );
    // fakegpu records each running Job's pod on its GPU; nothing is over-allocated.
    let t4_holders = holders(client, &t4_node).await?;
    ensure!(
        t4_holders.iter().all(|h| !h.is_empty()),
        "T4 holders: {t4_holders:?}"
    );
    ensure!(
        holders(client, &l4_node)
            .await?
            .iter()
            .all(|h| !h.is_empty()),
        "the L4 is not held"
    );
    // As the first three end, the fourth is admitted, runs and ends.
    eventually("Job fourth admitted and done", CONVERGE, || async {
        let job = jobs.get("fourth").await?;
        Ok(succeeded(&job).then_some(()))
    })
    .await?;

    // Priority: low-priority Jobs fill the queue for good; a high-priority Job preempts one of
    // them (Kueue suspends it again, its pod goes) and runs in its place.
    for name in ["low-a", "low-b", "low-c"] {
        gpu_job(name, "1h", json!({})).await?;
    }
    eventually("the low-priority Jobs running", CONVERGE, || async {
        let mut running = 0;
        for name in ["low-a", "low-b", "low-c"] {
            running += job_nodes(client, namespace, name).await?.len();
        }
        Ok((running == 3).then_some(()))
    })
    .await?;
    gpu_job(
        "urgent",
        "1h",
        json!({PRIORITY_CLASS: format!("{id}-high")}),
    )
    .await?;
    eventually("Job urgent running", CONVERGE, || async {
        let job = jobs.get("urgent").await?;
        Ok(
            (!suspended(&job) && job_nodes(client, namespace, "urgent").await?.len() == 1)
                .then_some(()),
        )
    })
    .await?;
    let mut preempted = Vec::new();
    for name in ["low-a", "low-b", "low-c"] {
        if suspended(&jobs.get(name).await?) {
            preempted.push(name);
        }
    }
    ensure!(
        preempted.len() == 1,
        "preempted for the high-priority Job: {preempted:?}"
    );
    eventually("the preempted Job's pod gone", CONVERGE, || async {
        Ok(job_nodes(client, namespace, preempted[0])
            .await?
            .is_empty()
            .then_some(()))
    })
    .await
}

/// A Job asking for a GPU through a ResourceClaimTemplate of NVIDIA's DeviceClass is counted
/// against the queue's `nvidia.com/gpu` quota (Kueue's DRA accounting, which hack/kueue.sh
/// maps `gpu.nvidia.com` to that resource for): with one GPU of quota on a DRA pool of two,
/// one Job runs with its claim allocated from fakegpu's slice and the other waits until it
/// ends.
#[tokio::test]
#[ignore = "needs Kueue (hack/kueue.sh start): hack/test.sh runs it"]
async fn kueue_counts_gpus_claimed_through_dra_against_quota() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let id = unique_name("kueuedra");
    let namespace = create_namespace(&client, "kueuedra").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&id)
        .node(&format!("{id}-node"))
        .namespace(&namespace);
    let result = claimed_gpu_jobs(&client, &id, &namespace).await;
    let params = DeleteParams::default();
    let _ = kueue_api(&client, "ClusterQueue", None)
        .delete(&id, &params)
        .await;
    let _ = kueue_api(&client, "ResourceFlavor", None)
        .delete(&id, &params)
        .await;
    cleanup.after(result).await
}

async fn claimed_gpu_jobs(client: &Client, id: &str, namespace: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
    let product = pool_of_one(
        client,
        id,
        json!({"gpu": {"profile": "l4", "count": 2},
            "interfaces": {"devicePlugin": false, "dra": true}}),
    )
    .await?;
    create_object(
        &kueue_api(client, "ResourceFlavor", None),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": id},
            "spec": {"nodeLabels": {label::GPU_PRODUCT: product, label::NODE_POOL: id}}}),
    )
    .await?;
    queues(client, id, namespace, &[(id.to_owned(), 1)], json!({})).await?;
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly":
            {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}}},
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &template)
        .await?;
    let claimed_job = |name: &'static str| {
        create_kwok_job(
            client,
            namespace,
            name,
            json!({QUEUE_NAME: "gpus"}),
            json!({"annotations": {KWOK_RUN_FOR: "20s"}}),
            json!({
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"claims": [{"name": "gpu"}]}}],
            }),
        )
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    claimed_job("first").await?;
    eventually("Job first admitted and running", CONVERGE, || async {
        let job = jobs.get("first").await?;
        Ok(
            (!suspended(&job) && job_nodes(client, namespace, "first").await?.len() == 1)
                .then_some(()),
        )
    })
    .await?;
    claimed_job("second").await?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    ensure!(
        suspended(&jobs.get("second").await?)
            && job_nodes(client, namespace, "second").await?.is_empty(),
        "Job second runs beyond the queue's one GPU: its claim was not counted"
    );
    // The running Job's claim is allocated from fakegpu's slice of the node.
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let allocated: Vec<String> = claims
        .items
        .iter()
        .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref())
        .flat_map(|d| d.results.iter().flatten().map(|r| r.pool.clone()))
        .collect();
    ensure!(
        allocated == [format!("{id}-node")],
        "claims allocated from {allocated:?}"
    );
    eventually("Job second admitted and done", CONVERGE, || async {
        Ok(succeeded(&jobs.get("second").await?).then_some(()))
    })
    .await
}
