//! GPUs in real containers: hack/node.sh's node (a kubelet, containerd, runc) joins a pool next to
//! a KWOK node, with the install bundle running in-cluster (`hack/node.sh bundle`: the operator,
//! exporter and node agents from the images hack/images.sh builds). What the pods print comes
//! back through the kubelet (`kubectl logs`), as a user would read it.
//!
//! These tests are `#[ignore]`d in the KWOK phase of hack/test.sh, where the operator runs as a
//! host process and there is no real node; hack/test.sh runs them in a phase of their own, one
//! at a time (they share the one node), with `--ignored`.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use fakegpu_api::{dra::attribute, names::label};
use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_node, create_namespace, create_pool, eventually,
    install_crds, topology_of, unique_name,
};
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    resource::v1::{ResourceClaim, ResourceClaimTemplate},
};
use kube::{
    Api, Client,
    api::{ListParams, LogParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// Generous: a pod on a real node pulls nothing but starts a sandbox and a container.
const CONVERGE: Duration = Duration::from_secs(90);
/// Product of the pools below, as NVML (and so nvidia-smi) names it.
const PRODUCT: &str = "NVIDIA L4";
/// hack/node.sh's image with a shell (Debian's busybox-static); no registry is reachable.
const SHELL_IMAGE: &str = "fakegpu.local/busybox:v1";

fn real_node() -> String {
    std::env::var("FAKEGPU_REAL_NODE").unwrap_or_else(|_| "fakegpu-node-0".into())
}

/// Puts the real node into `pool` (or, with `None`, into none).
async fn set_pool(client: &Client, node: &str, pool: Option<&str>) -> anyhow::Result<()> {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label::NODE_POOL: pool}}})),
        )
        .await
        .with_context(|| format!("labelling node {node}"))?;
    Ok(())
}

/// A pool of two L4 GPUs per node with these interfaces, the real node and a KWOK node in it.
/// The [`Cleanup`] takes the real node out of the pool first, then removes the rest.
async fn real_pool(
    client: &Client,
    prefix: &str,
    interfaces: serde_json::Value,
) -> anyhow::Result<(String, String, Cleanup)> {
    install_crds(client).await?;
    let pool = unique_name(prefix);
    let kwok = format!("{pool}-kwok");
    create_pool(
        client,
        &pool,
        json!({"gpu": {"profile": "l4", "count": 2}, "interfaces": interfaces}),
    )
    .await?;
    create_kwok_node(client, &kwok, &[(label::NODE_POOL, &pool)]).await?;
    let namespace = create_namespace(client, prefix).await?;
    set_pool(client, &real_node(), Some(&pool)).await?;
    let cleanup = Cleanup::new(client)
        .pool(&pool)
        .node(&kwok)
        .namespace(&namespace);
    Ok((pool, namespace, cleanup))
}

/// Takes the real node out of every pool, then runs the cleanup.
async fn finish<T>(
    client: &Client,
    cleanup: Cleanup,
    result: anyhow::Result<T>,
) -> anyhow::Result<T> {
    let unlabelled = set_pool(client, &real_node(), None).await;
    let result = cleanup.after(result).await;
    unlabelled.and(result)
}

async fn allocatable(
    client: &Client,
    node: &str,
    resource: &str,
) -> anyhow::Result<Option<String>> {
    let node = Api::<Node>::all(client.clone()).get(node).await?;
    Ok(node
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get(resource).map(|q| q.0.clone())))
}

/// Runs `script` in a container on the real node with `spec` merged into the pod's spec, waits
/// for it to finish and returns what it printed, as the kubelet serves it.
async fn run_on_real_node(
    client: &Client,
    namespace: &str,
    name: &str,
    script: &str,
    resources: serde_json::Value,
    spec: serde_json::Value,
) -> anyhow::Result<String> {
    create_real_pod(client, namespace, name, script, resources, spec).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let phase = eventually(&format!("pod {name} finished"), CONVERGE, || async {
        let pod = pods.get(name).await?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        Ok(matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase))
    })
    .await?;
    let logs = pods.logs(name, &LogParams::default()).await?;
    ensure!(phase == "Succeeded", "pod {name} {phase}: {logs}");
    Ok(logs)
}

/// A pod on the real node running `script` in hack/node.sh's busybox image. Host network: the
/// local cluster has no Service routing, and nvidia-smi asks the exporter on loopback.
async fn create_real_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    script: &str,
    resources: serde_json::Value,
    spec: serde_json::Value,
) -> anyhow::Result<Pod> {
    let mut body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": real_node()},
            "hostNetwork": true,
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": SHELL_IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script], "resources": resources,
            }],
        },
    });
    if let (Some(target), Some(fields)) = (body["spec"].as_object_mut(), spec.as_object()) {
        target.extend(fields.clone());
    }
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &serde_json::from_value(body)?)
        .await
        .with_context(|| format!("creating pod {namespace}/{name}"))
}

/// The value of `NAME=value` in `env` output.
fn env_value<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
}

/// The GPU UUIDs the operator's topology document gives the node, once it is `pool`'s (a
/// document of the node's previous pool may still be there).
async fn node_uuids(client: &Client, node: &str, pool: &str) -> anyhow::Result<Vec<String>> {
    eventually(
        &format!("the topology document of {node} in pool {pool}"),
        CONVERGE,
        || async {
            Ok(topology_of(client, node)
                .await?
                .filter(|(_, document)| document.pool == pool)
                .map(|(_, document)| document.gpus.iter().map(|g| g.id.clone()).collect()))
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn device_plugin_gpus_reach_real_containers() -> anyhow::Result<()> {
    let client = admin_client().await?;
    let (pool, namespace, cleanup) = real_pool(
        &client,
        "real-dp",
        json!({"devicePlugin": true, "dra": false}),
    )
    .await?;
    let result = device_plugin(&client, &pool, &namespace).await;
    finish(&client, cleanup, result).await
}

async fn device_plugin(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    // The real kubelet advertises what the node agent's device plugin registered; the KWOK
    // node next to it gets its capacity from the operator.
    for (which, name) in [("real", node.clone()), ("KWOK", format!("{pool}-kwok"))] {
        eventually(
            &format!("nvidia.com/gpu: 2 allocatable on the {which} node"),
            CONVERGE,
            || async {
                Ok((allocatable(client, &name, "nvidia.com/gpu")
                    .await?
                    .as_deref()
                    == Some("2"))
                .then_some(()))
            },
        )
        .await?;
    }
    let uuids = node_uuids(client, &node, pool).await?;

    let output = run_on_real_node(
        client,
        namespace,
        "smi",
        "nvidia-smi && echo '--' && nvidia-smi -L && echo '--' && \
         nvidia-smi --query-gpu=name,uuid,memory.total --format=csv,noheader && echo '--' && env",
        json!({"limits": {"nvidia.com/gpu": 1}}),
        json!({"runtimeClassName": "nvidia"}),
    )
    .await?;
    let visible = env_value(&output, "NVIDIA_VISIBLE_DEVICES")
        .with_context(|| format!("no NVIDIA_VISIBLE_DEVICES in the container: {output}"))?;
    ensure!(
        uuids.iter().any(|u| u == visible),
        "the container's GPU {visible} is not one of the node's {uuids:?}"
    );
    let sections: Vec<&str> = output.split("--\n").collect();
    ensure!(sections.len() == 4, "unexpected output: {output}");
    ensure!(
        sections[0].contains(PRODUCT) && sections[0].contains("NVIDIA-SMI"),
        "nvidia-smi's table does not show the pool's product: {}",
        sections[0]
    );
    ensure!(
        sections[1].trim() == format!("GPU 0: {PRODUCT} (UUID: {visible})"),
        "nvidia-smi -L: {}",
        sections[1]
    );
    let query = sections[2].trim();
    ensure!(
        query.starts_with(&format!("{PRODUCT}, {visible}, ")) && query.ends_with(" MiB"),
        "nvidia-smi --query-gpu: {query}"
    );
    ensure!(
        env_value(&output, "NODE_NAME") == Some(node.as_str()),
        "NODE_NAME: {output}"
    );

    // More GPUs than the node has: the real scheduler keeps the pod Pending.
    create_real_pod(
        client,
        namespace,
        "too-many",
        "true",
        json!({"limits": {"nvidia.com/gpu": 3}}),
        json!({}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    eventually("pod asking for 3 GPUs Unschedulable", CONVERGE, || async {
        let pod = pods.get("too-many").await?;
        let status = pod.status.unwrap_or_default();
        ensure!(
            status.phase.as_deref() == Some("Pending"),
            "{:?}",
            status.phase
        );
        Ok(status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
            .then_some(()))
    })
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn dra_claims_are_prepared_for_real_containers() -> anyhow::Result<()> {
    let client = admin_client().await?;
    let (pool, namespace, cleanup) = real_pool(
        &client,
        "real-dra",
        json!({"devicePlugin": false, "dra": true}),
    )
    .await?;
    let result = dra(&client, &pool, &namespace).await;
    finish(&client, cleanup, result).await
}

const CLAIM_SCRIPT: &str = "nvidia-smi -L && echo '--' && env";

async fn dra(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let uuids = node_uuids(client, &node, pool).await?;
    slice_published(client, &node, &uuids).await?;
    let request = json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]);
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": request}}},
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &template)
        .await?;

    // A claim from the template: the CDI spec the DRA plugin wrote reaches the container.
    let output = run_on_real_node(
        client,
        namespace,
        "templated",
        CLAIM_SCRIPT,
        json!({"claims": [{"name": "gpu"}]}),
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}),
    )
    .await?;
    let uuid = claimed_gpu(&output, &uuids)?;
    ensure!(
        env_value(&output, "GPU_DEVICE_gpu_0_UUID") == Some(uuid.as_str()),
        "GPU_DEVICE_gpu_0_UUID: {output}"
    );
    ensure!(
        env_value(&output, "NODE_NAME") == Some(node.as_str()),
        "NODE_NAME: {output}"
    );

    // One claim, two pods: both see the same GPU.
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": namespace},
        "spec": {"devices": {"requests": request}},
    }))?;
    Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &claim)
        .await?;
    let mut seen = Vec::new();
    for pod in ["shared-a", "shared-b"] {
        let output = run_on_real_node(
            client,
            namespace,
            pod,
            CLAIM_SCRIPT,
            json!({"claims": [{"name": "gpu"}]}),
            json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]}),
        )
        .await?;
        seen.push(claimed_gpu(&output, &uuids)?);
    }
    ensure!(seen[0] == seen[1], "two pods of one claim saw {seen:?}");
    Ok(())
}

/// The one GPU a claim's container sees: `nvidia-smi -L` lists exactly the GPU named by
/// `NVIDIA_VISIBLE_DEVICES`, one of the node's.
fn claimed_gpu(output: &str, uuids: &[String]) -> anyhow::Result<String> {
    let visible = env_value(output, "NVIDIA_VISIBLE_DEVICES")
        .with_context(|| format!("no NVIDIA_VISIBLE_DEVICES in the container: {output}"))?;
    ensure!(
        uuids.iter().any(|u| u == visible),
        "{visible} is not one of {uuids:?}"
    );
    ensure!(
        env_value(output, "GPU_DEVICE_gpu_0").is_some(),
        "no GPU_DEVICE_* in the container: {output}"
    );
    let listed = output.split("--\n").next().unwrap_or_default().trim();
    ensure!(
        listed == format!("GPU 0: {PRODUCT} (UUID: {visible})"),
        "nvidia-smi -L in a claim's container: {listed}"
    );
    Ok(visible.to_owned())
}

/// Waits for the node agent's ResourceSlice of the real node listing these GPUs (the
/// scheduler allocates from it).
async fn slice_published(client: &Client, node: &str, uuids: &[String]) -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    eventually(
        &format!("a gpu.nvidia.com ResourceSlice for {node} with {uuids:?}"),
        CONVERGE,
        || async {
            let list = slices.list(&Default::default()).await?;
            Ok(list
                .items
                .iter()
                .any(|s| {
                    s.spec.driver == "gpu.nvidia.com"
                        && s.spec.node_name.as_deref() == Some(node)
                        && s.spec.devices.as_ref().is_some_and(|devices| {
                            let listed: Vec<_> = devices
                                .iter()
                                .filter_map(|d| {
                                    d.attributes.as_ref()?.get(attribute::UUID)?.string.clone()
                                })
                                .collect();
                            uuids.iter().all(|u| listed.contains(u))
                        })
                })
                .then_some(()))
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn a_node_that_leaves_its_pool_keeps_no_fakegpu_pod_and_no_label() -> anyhow::Result<()> {
    let client = admin_client().await?;
    let (_pool, _namespace, cleanup) = real_pool(
        &client,
        "real-leave",
        json!({"devicePlugin": true, "dra": true}),
    )
    .await?;
    let result = leave(&client).await;
    finish(&client, cleanup, result).await
}

/// The node agents fakegpu runs on `node` (its DaemonSets' pods) and fakegpu's labels there.
async fn fakegpu_on_node(client: &Client, node: &str) -> anyhow::Result<(usize, Vec<String>)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    let agents = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| o.iter().any(|o| o.kind == "DaemonSet"))
        })
        .count();
    let labels = Api::<Node>::all(client.clone())
        .get(node)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    let ours = labels
        .into_keys()
        .filter(|k| k.starts_with("nvidia.com/") || k.starts_with("fakegpu.dev/"))
        .collect();
    Ok((agents, ours))
}

async fn leave(client: &Client) -> anyhow::Result<()> {
    let node = real_node();
    eventually(&format!("both node agents on {node}"), CONVERGE, || async {
        Ok((fakegpu_on_node(client, &node).await?.0 == 2).then_some(()))
    })
    .await?;
    set_pool(client, &node, None).await?;
    eventually(
        &format!("no node agent and no fakegpu label on {node}"),
        CONVERGE,
        || async {
            let (agents, labels) = fakegpu_on_node(client, &node).await?;
            Ok((agents == 0 && labels.is_empty()).then_some(()))
        },
    )
    .await?;
    // The bundle's operator and exporter still run there: they serve the cluster, not the node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    let running = pods.list(&ListParams::default()).await?.items.len();
    if running < 2 {
        bail!("the bundle's operator and exporter are not running ({running} pods)");
    }
    Ok(())
}
