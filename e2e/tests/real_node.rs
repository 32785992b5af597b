//! GPUs in real containers: hack/node.sh's node (a kubelet, containerd, runc) joins a pool next to
//! a KWOK node, with the install bundle running in-cluster (`hack/node.sh bundle`: the operator,
//! exporter and node agents from the images hack/images.sh builds). What the pods print comes
//! back through the kubelet (`kubectl logs`), as a user would read it.
//!
//! These tests are `#[ignore]`d in the KWOK phase of hack/test.sh, where the operator runs as a
//! host process and there is no real node; hack/test.sh runs them in a phase of their own, one
//! at a time (they share the one node), with `--ignored`.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, bail, ensure};
use fakegpu_api::{
    GpuNodePool,
    compute_domain::{ComputeDomain, DomainState},
    dra::attribute,
};
use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_node, create_namespace, create_pool, eventually,
    install_crds, kubectl, label_node, set_node_pool, topology_of, unique_name,
};
use fakegpu_model::{
    names::{annotation, container_env, label, resource},
    topology::NodeTopology,
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
/// hack/node.sh's image printing what go-nvml sees (hack/nvml-check/cmd/nvml-probe): a glibc
/// program, as GPU workloads are, loading libnvidia-ml.so.1 by name.
const NVML_PROBE_IMAGE: &str = "fakegpu.local/nvml-probe:v1";

fn real_node() -> String {
    std::env::var("FAKEGPU_REAL_NODE").unwrap_or_else(|_| "fakegpu-node-0".into())
}

/// The spec of a pool of two L4 GPUs per node serving `interfaces`.
fn l4_pool(interfaces: serde_json::Value) -> serde_json::Value {
    json!({"gpu": {"profile": "l4", "count": 2}, "interfaces": interfaces})
}

/// Runs `scenario` (client, pool, namespace) on a pool of the test's own with spec `spec`,
/// holding the real node and a KWOK node, in a namespace of its own; then cleans up (see
/// [`finish`]), whatever the scenario's outcome.
async fn on_real_pool(
    prefix: &str,
    spec: serde_json::Value,
    scenario: impl AsyncFnOnce(&Client, &str, &str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let client = admin_client().await?;
    let (pool, namespace, cleanup) = real_pool(&client, prefix, spec).await?;
    let result = scenario(&client, &pool, &namespace).await;
    finish(&client, &namespace, cleanup, result).await
}

/// A pool with `spec`, the real node and a KWOK node in it, and a namespace; the [`Cleanup`]
/// removes the pool, the KWOK node and the namespace.
async fn real_pool(
    client: &Client,
    prefix: &str,
    spec: serde_json::Value,
) -> anyhow::Result<(String, String, Cleanup)> {
    install_crds(client).await?;
    let pool = unique_name(prefix);
    let kwok = format!("{pool}-kwok");
    create_pool(client, &pool, spec).await?;
    create_kwok_node(client, &kwok, &[(label::NODE_POOL, &pool)]).await?;
    let namespace = create_namespace(client, prefix).await?;
    set_node_pool(client, &real_node(), Some(&pool)).await?;
    let cleanup = Cleanup::new(client)
        .pool(&pool)
        .node(&kwok)
        .namespace(&namespace);
    Ok((pool, namespace, cleanup))
}

/// Deletes the test's pods and waits until they are gone from the real node, then takes the
/// node out of every pool, waits for its node agents to go, and runs the cleanup: the next
/// test starts from a node without pods, agents or labels.
async fn finish<T>(
    client: &Client,
    namespace: &str,
    cleanup: Cleanup,
    result: anyhow::Result<T>,
) -> anyhow::Result<T> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let deleted = async {
        pods.delete_collection(&Default::default(), &ListParams::default())
            .await?;
        eventually(
            &format!("the pods of {namespace} gone"),
            CONVERGE,
            || async {
                Ok(pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            },
        )
        .await
    }
    .await;
    let node = real_node();
    let unlabelled = async {
        set_node_pool(client, &node, None).await?;
        // The next test starts from a node without agents: a plugin still going away leaves
        // the kubelet with devices it can no longer allocate.
        eventually(
            &format!("no node agent left on {node}"),
            CONVERGE,
            || async { Ok((fakegpu_on_node(client, &node).await?.0 == 0).then_some(())) },
        )
        .await
    }
    .await;
    let result = cleanup.after(result).await;
    deleted.and(unlabelled).and(result)
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

/// A pod on the real node running `script` in hack/node.sh's busybox image, on the node's pod
/// network (nvidia-smi there asks the exporter at its Service's ClusterIP).
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
            "restartPolicy": "Never",
            // busybox's sleep as PID 1 ignores SIGTERM: do not wait 30 s for it.
            "terminationGracePeriodSeconds": 1,
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

/// A script for GPU pods: what nvidia-smi lists, then the environment; first, that the
/// container has the CUDA driver library where the CUDA runtime looks for it.
const LIST_AND_ENV: &str = "for l in /usr/lib/x86_64-linux-gnu/libcuda.so.1 \
    /usr/lib64/libcuda.so.1; do test -f $l || { echo \"no $l\"; exit 1; }; done; \
    nvidia-smi -L && echo '--' && env";

/// The one device a container was given: `NVIDIA_VISIBLE_DEVICES`, one of `expected`, and
/// listed by the container's nvidia-smi.
fn visible_device(output: &str, expected: &[String]) -> anyhow::Result<String> {
    let visible = env_value(output, "NVIDIA_VISIBLE_DEVICES")
        .with_context(|| format!("no NVIDIA_VISIBLE_DEVICES in the container: {output}"))?;
    ensure!(
        expected.iter().any(|e| e == visible),
        "the container got {visible}, not one of {expected:?}"
    );
    let listed = output.split("--\n").next().unwrap_or_default();
    ensure!(
        listed.contains(&format!("(UUID: {visible})")),
        "nvidia-smi -L in the container does not list {visible}: {listed}"
    );
    Ok(visible.to_owned())
}

/// What the NVML probe printed: the driver version and each GPU it sees.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct NvmlView {
    driver: String,
    gpus: Vec<NvmlGpu>,
    /// What the command the probe was asked to run afterwards printed.
    #[serde(default)]
    ran: String,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct NvmlGpu {
    uuid: String,
    name: String,
    memory_total: u64,
    mig_devices: Vec<NvmlMig>,
    processes: Vec<NvmlProcess>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct NvmlMig {
    uuid: String,
    name: String,
    processes: Vec<NvmlProcess>,
}

/// A compute process NVML lists on a GPU, and the name it gives it.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct NvmlProcess {
    pid: u32,
    name: String,
}

/// That NVML lists the probe itself, the container's main process (PID 1 in its PID
/// namespace), as the one process on a GPU or MIG device the container was given: its pod's
/// use of the device as the node's document records it.
fn the_probe_is_the_process(what: &str, processes: &[NvmlProcess]) -> anyhow::Result<()> {
    ensure!(
        matches!(processes, [p] if p.pid == 1 && p.name == "/nvml-probe"),
        "NVML's processes on {what}: {processes:?}, not the probe as PID 1"
    );
    Ok(())
}

/// Runs the NVML probe in a pod on the real node with `resources` and `spec` (as
/// [`run_on_real_node`]) and returns what go-nvml showed it; with `then`, the probe runs that
/// command line afterwards ([`NvmlView::ran`]).
async fn nvml_in_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    resources: serde_json::Value,
    mut spec: serde_json::Value,
    then: Option<&str>,
) -> anyhow::Result<NvmlView> {
    let mut env = vec![json!({"name": "NVML_PROBE_AWAIT_PROCESS", "value": "60"})];
    if let Some(command) = then {
        env.push(json!({"name": "NVML_PROBE_RUN", "value": command}));
    }
    spec["containers"] = json!([{
        "name": "main", "image": NVML_PROBE_IMAGE, "imagePullPolicy": "Never",
        "command": ["/nvml-probe"], "resources": resources, "env": env,
    }]);
    let output = run_on_real_node(client, namespace, name, "", json!({}), spec).await?;
    serde_json::from_str(output.trim()).with_context(|| format!("the probe printed {output}"))
}

/// That NVML shows a container given one GPU exactly one whole GPU, one of `uuids`, as
/// `document` has it: its UUID, name, memory and the driver's version.
fn nvml_sees_one_gpu(
    view: &NvmlView,
    document: &NodeTopology,
    uuids: &[String],
) -> anyhow::Result<()> {
    ensure!(
        view.driver == document.driver_version,
        "NVML's driver {} in the container, the document's {}",
        view.driver,
        document.driver_version
    );
    let [gpu] = view.gpus.as_slice() else {
        bail!("NVML in a one-GPU container shows {:?}", view.gpus);
    };
    ensure!(
        uuids.contains(&gpu.uuid) && gpu.name == document.gpu_product,
        "NVML in the container shows {gpu:?}, not one of {uuids:?} ({})",
        document.gpu_product
    );
    ensure!(
        gpu.memory_total == document.gpu_memory * 1024 * 1024 && gpu.mig_devices.is_empty(),
        "NVML's memory of {gpu:?}, the document's {} MiB",
        document.gpu_memory
    );
    the_probe_is_the_process("its GPU", &gpu.processes)
}

/// Creates ResourceClaimTemplate `name` whose claims ask for `devices` (`spec.devices`).
async fn claim_template(
    client: &Client,
    namespace: &str,
    name: &str,
    devices: serde_json::Value,
) -> anyhow::Result<()> {
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &template)
        .await?;
    Ok(())
}

/// Requests of one GPU of NVIDIA's class, named `gpu`.
fn one_gpu() -> serde_json::Value {
    json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}])
}

/// Runs [`LIST_AND_ENV`] in a pod given one `resource` by the device plugin.
async fn list_with_one(
    client: &Client,
    namespace: &str,
    name: &str,
    resource: &str,
) -> anyhow::Result<String> {
    run_on_real_node(
        client,
        namespace,
        name,
        LIST_AND_ENV,
        json!({"limits": {resource: 1}}),
        json!({"runtimeClassName": "nvidia"}),
    )
    .await
}

/// The value of `NAME=value` in `env` output.
fn env_value<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
}

/// The operator's topology document of the node, once it is `pool`'s (a document of the
/// node's previous pool may still be there).
async fn pool_document(client: &Client, node: &str, pool: &str) -> anyhow::Result<NodeTopology> {
    eventually(
        &format!("the topology document of {node} in pool {pool}"),
        CONVERGE,
        || async {
            Ok(topology_of(client, node)
                .await?
                .map(|(_, document)| document)
                .filter(|document| document.pool == pool))
        },
    )
    .await
}

/// The GPU UUIDs the topology document of `pool` gives the node.
async fn node_uuids(client: &Client, node: &str, pool: &str) -> anyhow::Result<Vec<String>> {
    let document = pool_document(client, node, pool).await?;
    Ok(document.gpus.iter().map(|g| g.id.clone()).collect())
}

/// The UUIDs of the node's MIG instances of `profile`.
fn instances_of(document: &NodeTopology, profile: &str) -> Vec<String> {
    document
        .gpus
        .iter()
        .flat_map(|g| &g.mig_devices)
        .filter(|m| m.profile == profile)
        .map(|m| m.uuid.clone())
        .collect()
}

/// Waits until `node` advertises `count` of `resource` (the real kubelet from the device
/// plugin, or the operator on a KWOK node). On the real node the device plugin's agent must be
/// Ready first (registered with the kubelet): the node's allocatable may still show the
/// devices of a previous test's plugin, which the kubelet then refuses to allocate.
async fn advertised(
    client: &Client,
    node: &str,
    resource: &str,
    count: &str,
) -> anyhow::Result<()> {
    if node == real_node() {
        agents_ready(client, node, &["fakegpu-device-plugin"]).await?;
    }
    eventually(
        &format!("{resource}: {count} allocatable on {node}"),
        CONVERGE,
        || async {
            Ok(
                (allocatable(client, node, resource).await?.as_deref() == Some(count))
                    .then_some(()),
            )
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn device_plugin_gpus_reach_real_containers() -> anyhow::Result<()> {
    on_real_pool(
        "real-dp",
        l4_pool(json!({"devicePlugin": true, "dra": false})),
        device_plugin,
    )
    .await
}

async fn device_plugin(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    // The real kubelet advertises what the node agent's device plugin registered; the KWOK
    // node next to it gets its capacity from the operator.
    for name in [node.clone(), format!("{pool}-kwok")] {
        advertised(client, &name, "nvidia.com/gpu", "2").await?;
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

    // A glibc program in a GPU container loads libnvidia-ml.so.1 by name, as NVML's users
    // do, and sees the GPU the kubelet gave the container, as the document describes it.
    let document = pool_document(client, &node, pool).await?;
    let view = nvml_in_pod(
        client,
        namespace,
        "nvml",
        json!({"limits": {"nvidia.com/gpu": 1}}),
        json!({"runtimeClassName": "nvidia"}),
        None,
    )
    .await?;
    nvml_sees_one_gpu(&view, &document, &uuids)?;

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
        Ok(unschedulable(&status).then_some(()))
    })
    .await?;

    // An uncorrectable ECC error injected on GPU 1: the node agent's device plugin reports it
    // unhealthy and the real kubelet takes it out of allocatable, until the fault is cleared.
    let fault = r#"[{"gpus": [1], "eccUncorrectable": 1}]"#;
    fakegpu_e2e::annotate_node(client, &node, annotation::GPU_FAULTS, Some(fault)).await?;
    let faulty = advertised(client, &node, "nvidia.com/gpu", "1").await;
    fakegpu_e2e::annotate_node(client, &node, annotation::GPU_FAULTS, None).await?;
    faulty?;
    advertised(client, &node, "nvidia.com/gpu", "2").await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn dra_claims_are_prepared_for_real_containers() -> anyhow::Result<()> {
    on_real_pool(
        "real-dra",
        l4_pool(json!({"devicePlugin": false, "dra": true})),
        dra,
    )
    .await
}

async fn dra(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let uuids = node_uuids(client, &node, pool).await?;
    slice_published(client, &node, &uuids).await?;
    claim_template(client, namespace, "one-gpu", json!({"requests": one_gpu()})).await?;

    // A claim from the template: the CDI spec the DRA plugin wrote reaches the container.
    let output = run_on_real_node(
        client,
        namespace,
        "templated",
        LIST_AND_ENV,
        json!({"claims": [{"name": "gpu"}]}),
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}),
    )
    .await?;
    claimed_gpu(&output, &uuids)?;
    ensure!(
        env_value(&output, "NODE_NAME") == Some(node.as_str()),
        "NODE_NAME: {output}"
    );
    // NVML through the claim's CDI spec: the container's programs see the claim's GPU.
    let view = nvml_in_pod(
        client,
        namespace,
        "nvml",
        json!({"claims": [{"name": "gpu"}]}),
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}),
        None,
    )
    .await?;
    nvml_sees_one_gpu(&view, &pool_document(client, &node, pool).await?, &uuids)?;

    // One claim, two pods: both see the same GPU.
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": namespace},
        "spec": {"devices": {"requests": one_gpu()}},
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
            LIST_AND_ENV,
            json!({"claims": [{"name": "gpu"}]}),
            json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]}),
        )
        .await?;
        seen.push(claimed_gpu(&output, &uuids)?);
    }
    ensure!(seen[0] == seen[1], "two pods of one claim saw {seen:?}");

    // XID 79 injected on GPU 0: the node agent's slice taints its device as NVIDIA's DRA
    // driver does, until the fault is cleared.
    let fault = r#"[{"gpus": [0], "xid": 79}]"#;
    fakegpu_e2e::annotate_node(client, &node, annotation::GPU_FAULTS, Some(fault)).await?;
    let tainted = eventually(
        "the node agent's slice tainting gpu-0",
        CONVERGE,
        || async {
            Ok((fakegpu_e2e::xid_taints(client, &node).await?
                == [("gpu-0".to_owned(), "79 NoSchedule".to_owned())])
            .then_some(()))
        },
    )
    .await;
    fakegpu_e2e::annotate_node(client, &node, annotation::GPU_FAULTS, None).await?;
    tainted?;
    eventually("the taint gone with the fault", CONVERGE, || async {
        Ok(fakegpu_e2e::xid_taints(client, &node)
            .await?
            .is_empty()
            .then_some(()))
    })
    .await
}

/// The one GPU a claim's container sees: `nvidia-smi -L` lists exactly the GPU named by
/// `NVIDIA_VISIBLE_DEVICES`, one of the node's.
fn claimed_gpu(output: &str, uuids: &[String]) -> anyhow::Result<String> {
    let visible = visible_device(output, uuids)?;
    // The device names itself, as the reference's plugin names it: GPU_DEVICE_<device>_UUID.
    ensure!(
        output
            .lines()
            .any(|l| l.starts_with("GPU_DEVICE_") && l.ends_with(&format!("_UUID={visible}"))),
        "no GPU_DEVICE_<device>_UUID={visible} in the container: {output}"
    );
    // And nvidia-smi lists that GPU alone.
    let listed = output.split("--\n").next().unwrap_or_default().trim();
    ensure!(
        listed == format!("GPU 0: {PRODUCT} (UUID: {visible})"),
        "nvidia-smi -L in a claim's container: {listed}"
    );
    Ok(visible)
}

/// Waits until the bundle's DaemonSet pods `apps` (`app.kubernetes.io/name`) run Ready on
/// `node`: a node agent is Ready once the kubelet registered its plugin. A claim prepared
/// before that fails, and the kubelet retries it only after a back-off.
async fn agents_ready(client: &Client, node: &str, apps: &[&str]) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    for app in apps {
        eventually(&format!("{app} Ready on {node}"), CONVERGE, || async {
            let list = pods
                .list(
                    &ListParams::default()
                        .labels(&format!("app.kubernetes.io/name={app}"))
                        .fields(&format!("spec.nodeName={node}")),
                )
                .await?;
            Ok(list
                .items
                .iter()
                .any(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
                .then_some(()))
        })
        .await?;
    }
    Ok(())
}

/// Waits for the node agent's ResourceSlice of the real node listing these GPUs (the
/// scheduler allocates from it).
async fn slice_published(client: &Client, node: &str, uuids: &[String]) -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    agents_ready(client, node, &["fakegpu-dra-plugin"]).await?;
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
async fn a_node_that_leaves_its_pool_keeps_only_what_its_pods_still_need() -> anyhow::Result<()> {
    on_real_pool(
        "real-leave",
        l4_pool(json!({"devicePlugin": true, "dra": true})),
        leave,
    )
    .await
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

async fn leave(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    // Both registered with the kubelet, and the slice published: a claim's pod started before
    // the DRA plugin registers waits out the kubelet's backoff.
    agents_ready(
        client,
        &node,
        &["fakegpu-device-plugin", "fakegpu-dra-plugin"],
    )
    .await?;
    let uuids = node_uuids(client, &node, pool).await?;
    slice_published(client, &node, &uuids).await?;
    claim_template(client, namespace, "one-gpu", json!({"requests": one_gpu()})).await?;
    holding_claim_pod(client, namespace, "holder", "gpu", "one-gpu").await?;
    set_node_pool(client, &node, None).await?;
    // The pod's claim was prepared by the DRA plugin: it stays until the kubelet has had it
    // unprepare the claim; everything else goes at once.
    eventually(
        &format!("only the DRA plugin and its deploy label left on {node}"),
        CONVERGE,
        || async {
            let (agents, labels) = fakegpu_on_node(client, &node).await?;
            ensure!(
                agents == 1 && labels == [label::DEPLOY_DRA_PLUGIN],
                "{agents} agents, labels {labels:?}"
            );
            Ok(Some(()))
        },
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.delete("holder", &Default::default()).await?;
    eventually(
        "the claim's pod gone, not stuck Terminating",
        CONVERGE,
        || async { Ok(pods.get_opt("holder").await?.is_none().then_some(())) },
    )
    .await?;
    eventually(
        &format!("no node agent and no fakegpu label on {node}"),
        CONVERGE,
        || async {
            let (agents, labels) = fakegpu_on_node(client, &node).await?;
            ensure!(
                agents == 0 && labels.is_empty(),
                "{agents} agents, labels {labels:?}"
            );
            Ok(Some(()))
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

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn a_node_that_stops_serving_dra_offers_no_gpu_and_a_stuck_claim_holds_none()
-> anyhow::Result<()> {
    on_real_pool(
        "real-undra",
        l4_pool(json!({"devicePlugin": true, "dra": true})),
        stop_serving_dra,
    )
    .await
}

/// The GPU Operator's deploy labels set by hand choose what the real node serves: `false` takes
/// the device plugin off (fakegpu leaves the label as it is) and DRA stays; on a pool without
/// the device plugin, a `true` runs the plugin's DaemonSet there, and it offers nothing.
#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn deploy_labels_set_by_hand_choose_what_the_real_node_serves() -> anyhow::Result<()> {
    on_real_pool(
        "real-deploy",
        l4_pool(json!({"devicePlugin": true, "dra": true})),
        async |client, pool, _namespace| {
            let node = real_node();
            let result = deploy_choices(client, pool, &node).await;
            // The next test starts from a node without labels of the user's.
            let mut unlabelled = Ok(());
            for key in [label::DEPLOY_DEVICE_PLUGIN, label::DEPLOY_DRA_PLUGIN] {
                unlabelled = unlabelled.and(label_node(client, &node, key, None).await);
            }
            result.and(unlabelled)
        },
    )
    .await
}

async fn deploy_choices(client: &Client, pool: &str, node: &str) -> anyhow::Result<()> {
    agents_ready(
        client,
        node,
        &["fakegpu-device-plugin", "fakegpu-dra-plugin"],
    )
    .await?;
    let uuids = node_uuids(client, node, pool).await?;
    slice_published(client, node, &uuids).await?;
    advertised(client, node, resource::GPU, "2").await?;
    let plugin_pods = || async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
        let selector = ListParams::default()
            .labels("app.kubernetes.io/name=fakegpu-device-plugin")
            .fields(&format!("spec.nodeName={node}"));
        anyhow::Ok(pods.list(&selector).await?.items.len())
    };

    label_node(client, node, label::DEPLOY_DEVICE_PLUGIN, Some("false")).await?;
    eventually(
        &format!("{node}: no device plugin, no allocatable GPU, its DRA slice kept"),
        CONVERGE,
        || async {
            let gpus = allocatable(client, node, resource::GPU).await?;
            let off = plugin_pods().await? == 0 && gpus.as_deref().is_none_or(|n| n == "0");
            Ok((off && gpu_slice_of(client, node).await?).then_some(()))
        },
    )
    .await?;
    let labels = Api::<Node>::all(client.clone())
        .get(node)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    ensure!(
        labels.get(label::DEPLOY_DEVICE_PLUGIN).map(String::as_str) == Some("false"),
        "fakegpu changed the user's label: {labels:?}"
    );

    // A pool without the device plugin, and its label turned `true` by hand: the label picks
    // the device plugin (DRA's label is fakegpu's, not the user's), which the pool does not
    // serve. The DaemonSet runs the plugin on the node all the same, and it offers no GPU (the
    // kubelet counts none at all, where a plugin gone leaves its GPUs in capacity); the DRA
    // slice goes, and the pool's Ready message names the node.
    Api::<GpuNodePool>::all(client.clone())
        .patch(
            pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"interfaces": {"devicePlugin": false}}})),
        )
        .await?;
    label_node(client, node, label::DEPLOY_DEVICE_PLUGIN, Some("true")).await?;
    agents_ready(client, node, &["fakegpu-device-plugin"]).await?;
    eventually(
        &format!("{node}: the device plugin runs and advertises no GPU"),
        CONVERGE,
        || async {
            let capacity = Api::<Node>::all(client.clone())
                .get(node)
                .await?
                .status
                .and_then(|s| s.capacity)
                .and_then(|c| c.get(resource::GPU).map(|q| q.0.clone()));
            Ok((capacity.as_deref() == Some("0")).then_some(()))
        },
    )
    .await?;
    ensure!(
        allocatable(client, node, resource::GPU).await?.as_deref() == Some("0"),
        "the device plugin a label runs offered GPUs of a pool without it"
    );
    eventually(
        &format!("{node}'s slice gone and the pool naming the node's label"),
        CONVERGE,
        || async {
            let pool = Api::<GpuNodePool>::all(client.clone()).get(pool).await?;
            let named = pool.status.iter().flat_map(|s| &s.conditions).any(|c| {
                c.type_ == "Ready"
                    && c.message.contains(node)
                    && c.message.contains(label::DEPLOY_DEVICE_PLUGIN)
            });
            Ok((named && !gpu_slice_of(client, node).await?).then_some(()))
        },
    )
    .await
}

/// Whether the scheduler found no node for the pod of `status`.
fn unschedulable(status: &k8s_openapi::api::core::v1::PodStatus) -> bool {
    status.conditions.iter().flatten().any(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })
}

/// Whether the node has a `gpu.nvidia.com` ResourceSlice.
async fn gpu_slice_of(client: &Client, node: &str) -> anyhow::Result<bool> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    Ok(slices
        .items
        .iter()
        .any(|s| s.spec.driver == resource::GPU_DRIVER))
}

/// The real node moves from a pool serving DRA to one serving the device plugin only.
async fn stop_serving_dra(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let plain = format!("{pool}-plain");
    let result = async {
        let node = real_node();
        agents_ready(
            client,
            &node,
            &["fakegpu-device-plugin", "fakegpu-dra-plugin"],
        )
        .await?;
        let uuids = node_uuids(client, &node, pool).await?;
        slice_published(client, &node, &uuids).await?;
        claim_template(client, namespace, "one-gpu", json!({"requests": one_gpu()})).await?;
        holding_claim_pod(client, namespace, "holder", "gpu", "one-gpu").await?;
        create_pool(
            client,
            &plain,
            l4_pool(json!({"devicePlugin": true, "dra": false})),
        )
        .await?;
        set_node_pool(client, &node, Some(&plain)).await?;
        // The DRA plugin stays for the claim the node's pod holds (the kubelet needs it to
        // unprepare), but the node's slice goes with the pool's DRA, not ~30 s later when the
        // kubelet would wipe an unregistered driver's: the plugin stays registered here.
        eventually(
            &format!("no GPU slice of {node}, its DRA plugin kept for the held claim"),
            CONVERGE,
            || async {
                let (_, labels) = fakegpu_on_node(client, &node).await?;
                ensure!(
                    labels.iter().any(|l| l == label::DEPLOY_DRA_PLUGIN),
                    "the DRA plugin's deploy label went: {labels:?}"
                );
                Ok((!gpu_slice_of(client, &node).await?).then_some(()))
            },
        )
        .await?;
        // So a new claim's pod for the node finds no device there.
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        create_real_pod(
            client,
            namespace,
            "late",
            "sleep 3600",
            json!({"claims": [{"name": "gpu"}]}),
            json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}),
        )
        .await?;
        eventually("late unschedulable", CONVERGE, || async {
            let pod = pods.get("late").await?;
            let status = pod.status.unwrap_or_default();
            ensure!(
                pod.spec.and_then(|s| s.node_name).is_none(),
                "late was bound: {status:?}"
            );
            Ok(unschedulable(&status).then_some(()))
        })
        .await?;
        for name in ["late", "holder"] {
            pods.delete(name, &Default::default()).await?;
        }
        eventually(
            &format!("the claims' pods gone and no DRA plugin on {node}"),
            CONVERGE,
            || async {
                let (agents, labels) = fakegpu_on_node(client, &node).await?;
                let gone = pods.list(&ListParams::default()).await?.items.is_empty();
                Ok(
                    (gone && agents == 1 && !labels.iter().any(|l| l == label::DEPLOY_DRA_PLUGIN))
                        .then_some(()),
                )
            },
        )
        .await?;

        // A pod bound to the node with a claim of one of its GPUs that no registered driver
        // can prepare (as the scheduler left one in the old window): Pending for good. The
        // device plugin's pod the kubelet gave that GPU is its holder, not the stuck pod.
        let given = holding_pod(
            client,
            namespace,
            "given",
            json!({"limits": {"nvidia.com/gpu": 1}}),
            json!({"runtimeClassName": "nvidia"}),
        )
        .await?;
        let document = pool_document(client, &node, &plain).await?;
        let index = document
            .gpus
            .iter()
            .find(|g| g.id == given)
            .map(|g| g.index)
            .with_context(|| format!("{given} is not a GPU of {node}"))?;
        stuck_claim_pod(client, namespace, &node, &format!("gpu-{index}")).await?;
        // The operator has seen the stuck claim once it records a later change of the node.
        pods.patch(
            "given",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations":
                {annotation::SIMULATED_UTILIZATION: "40-40"}}})),
        )
        .await?;
        eventually(
            "the document records given's utilization",
            CONVERGE,
            || async {
                let document = pool_document(client, &node, &plain).await?;
                Ok(document
                    .gpus
                    .iter()
                    .find(|g| g.id == given)
                    .and_then(|g| g.status.pod_gpu_usage_status.values().next().cloned())
                    .is_some_and(|usage| usage.utilization.min == 40)
                    .then_some(()))
            },
        )
        .await?;
        let held = holders(client, &node).await?;
        ensure!(
            held == [(given.clone(), "given".to_owned())],
            "holders: {held:?}"
        );
        named_everywhere(client, namespace, "given", &given).await
    }
    .await;
    Cleanup::new(client).pool(&plain).after(result).await
}

/// Pod `stuck` bound to `node` (no scheduler) with claim `stuck` allocated `node`'s `device`
/// and reserved for it, as the scheduler leaves a claim it allocated from a slice whose
/// driver is gone; waits until the kubelet fails to prepare it.
async fn stuck_claim_pod(
    client: &Client,
    namespace: &str,
    node: &str,
    device: &str,
) -> anyhow::Result<()> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "stuck", "namespace": namespace},
        "spec": {"devices": {"requests": one_gpu()}},
    }))?;
    claims.create(&PostParams::default(), &claim).await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stuck", "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": SHELL_IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "3600"], "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "stuck"}],
        },
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await?
        .metadata
        .uid
        .context("pod stuck has no UID")?;
    claims
        .patch_status(
            "stuck",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": [{"request": "gpu",
                    "driver": resource::GPU_DRIVER, "pool": node, "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": "stuck", "uid": uid}],
            }})),
        )
        .await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    eventually(
        "the kubelet failing to prepare stuck's claim",
        CONVERGE,
        || async {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=stuck"))
                .await?;
            let phase = pods.get("stuck").await?.status.and_then(|s| s.phase);
            ensure!(phase.as_deref() == Some("Pending"), "stuck is {phase:?}");
            Ok(list
                .items
                .iter()
                .any(|e| e.type_.as_deref() == Some("Warning"))
                .then_some(()))
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn mig_instances_reach_real_containers() -> anyhow::Result<()> {
    on_real_pool(
        "real-mig",
        json!({"gpu": {"profile": "a100", "count": 2},
            "interfaces": {"devicePlugin": true, "dra": true},
            "mig": {"strategy": "mixed", "layout": [
                {"gpus": [0], "profiles": ["3g.20gb", "2g.10gb", "1g.5gb"]}]}}),
        mig_mixed,
    )
    .await
}

async fn mig_mixed(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let document = pool_document(client, &node, pool).await?;
    // Through the device plugin: NVIDIA's mixed-strategy resource name.
    advertised(client, &node, "nvidia.com/mig-1g.5gb", "1").await?;
    let output = list_with_one(client, namespace, "mig-plugin", "nvidia.com/mig-1g.5gb").await?;
    visible_device(&output, &instances_of(&document, "1g.5gb"))?;
    agents_ready(client, &node, &["fakegpu-dra-plugin"]).await?;

    // Through DRA: a claim of NVIDIA's MIG class, with a CEL selector on the profile.
    claim_template(
        client,
        namespace,
        "mig-2g",
        json!({"requests": [{"name": "mig", "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression":
                "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'"}}]}}]}),
    )
    .await?;
    let output = run_on_real_node(
        client,
        namespace,
        "mig-claim",
        LIST_AND_ENV,
        json!({"claims": [{"name": "mig"}]}),
        json!({"resourceClaims": [{"name": "mig", "resourceClaimTemplateName": "mig-2g"}]}),
    )
    .await?;
    visible_device(&output, &instances_of(&document, "2g.10gb"))?;

    // NVML in a container given one instance: its parent GPU, with that instance alone.
    let view = nvml_in_pod(
        client,
        namespace,
        "mig-nvml",
        json!({"limits": {"nvidia.com/mig-1g.5gb": 1}}),
        json!({"runtimeClassName": "nvidia"}),
        None,
    )
    .await?;
    let parent = &document.gpus[0];
    let [gpu] = view.gpus.as_slice() else {
        bail!("NVML in a one-instance container shows {:?}", view.gpus);
    };
    let seen: Vec<(&str, &str)> = gpu
        .mig_devices
        .iter()
        .map(|m| (m.uuid.as_str(), m.name.as_str()))
        .collect();
    let instance = instances_of(&document, "1g.5gb");
    let expected = format!("{} MIG 1g.5gb", document.gpu_product);
    ensure!(
        gpu.uuid == parent.id && seen == [(instance[0].as_str(), expected.as_str())],
        "NVML in a container given {instance:?} shows {gpu:?}"
    );
    the_probe_is_the_process("its MIG device", &gpu.mig_devices[0].processes)?;
    the_probe_is_the_process("its MIG device's GPU", &gpu.processes)
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn mig_single_instances_are_the_gpus_of_real_containers() -> anyhow::Result<()> {
    on_real_pool(
        "real-mig-single",
        json!({"gpu": {"profile": "a100", "count": 1},
            "interfaces": {"devicePlugin": true, "dra": false},
            "mig": {"strategy": "single", "layout": [
                {"gpus": [0], "profiles": ["3g.20gb", "3g.20gb"]}]}}),
        mig_single,
    )
    .await
}

async fn mig_single(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let document = pool_document(client, &node, pool).await?;
    // Under `single` the instances are the node's nvidia.com/gpu.
    advertised(client, &node, "nvidia.com/gpu", "2").await?;
    let output = list_with_one(client, namespace, "mig-single", "nvidia.com/gpu").await?;
    visible_device(&output, &instances_of(&document, "3g.20gb")).map(drop)
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn a_compute_domain_pod_gets_its_imex_channel() -> anyhow::Result<()> {
    on_real_pool(
        "real-imex",
        json!({"gpu": {"profile": "gb200", "count": 4},
            "interfaces": {"devicePlugin": false, "dra": true, "computeDomains": true}}),
        compute_domain,
    )
    .await
}

/// Waits until a slice of `driver` for `node` is published (the scheduler allocates from it).
async fn driver_slice(client: &Client, node: &str, driver: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    eventually(
        &format!("a {driver} ResourceSlice for {node}"),
        CONVERGE,
        || async {
            Ok(slices
                .list(&Default::default())
                .await?
                .items
                .iter()
                .any(|s| s.spec.driver == driver && s.spec.node_name.as_deref() == Some(node))
                .then_some(()))
        },
    )
    .await
}

async fn compute_domain(client: &Client, _pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), namespace);
    let domain: ComputeDomain = serde_json::from_value(json!({
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
        "metadata": {"name": "imex-domain", "namespace": namespace},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel"}}},
    }))?;
    domains.create(&PostParams::default(), &domain).await?;
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), namespace);
    eventually("the domain's ResourceClaimTemplate", CONVERGE, || async {
        Ok(templates.get_opt("imex-channel").await?.map(drop))
    })
    .await?;
    driver_slice(client, &node, "compute-domain.nvidia.com").await?;
    agents_ready(client, &node, &["fakegpu-compute-domain-plugin"]).await?;
    holding_claim_pod(client, namespace, "imex-worker", "imex", "imex-channel").await?;
    let channels = kubectl(&[
        "exec",
        "-n",
        namespace,
        "imex-worker",
        "--",
        "ls",
        "/dev/nvidia-caps-imex-channels",
    ])?;
    ensure!(
        channels.split_whitespace().collect::<Vec<_>>() == ["channel0"],
        "the container's IMEX channels: {channels:?}"
    );
    eventually(
        "the ComputeDomain Ready on the real node",
        CONVERGE,
        || async {
            let status = domains.get("imex-domain").await?.status;
            Ok(status
                .filter(|s| {
                    s.status == DomainState::Ready
                        && s.nodes
                            .iter()
                            .any(|n| n.name == node && n.status == DomainState::Ready)
                })
                .map(drop))
        },
    )
    .await
}

/// What a running container was given, read with `kubectl exec`.
fn container_env(namespace: &str, pod: &str) -> anyhow::Result<String> {
    kubectl(&["exec", "-n", namespace, pod, "--", "env"])
}

/// Starts a pod on the real node that keeps running with `resources` and waits until it runs;
/// returns its `NVIDIA_VISIBLE_DEVICES` (empty when it has none).
async fn holding_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    resources: serde_json::Value,
    spec: serde_json::Value,
) -> anyhow::Result<String> {
    create_real_pod(client, namespace, name, "sleep 3600", resources, spec).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("{name} Running"), CONVERGE, || async {
        let phase = pods.get(name).await?.status.and_then(|s| s.phase);
        ensure!(phase.as_deref() != Some("Failed"), "{name} failed");
        Ok((phase.as_deref() == Some("Running")).then_some(()))
    })
    .await?;
    let env = container_env(namespace, name)?;
    Ok(env_value(&env, "NVIDIA_VISIBLE_DEVICES")
        .unwrap_or_default()
        .to_owned())
}

/// [`holding_pod`] with one claim named `claim` from ResourceClaimTemplate `template`, for its
/// one container.
async fn holding_claim_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    claim: &str,
    template: &str,
) -> anyhow::Result<String> {
    holding_pod(
        client,
        namespace,
        name,
        json!({"claims": [{"name": claim}]}),
        json!({"resourceClaims": [{"name": claim, "resourceClaimTemplateName": template}]}),
    )
    .await
}

/// Deletes the bundle's pods labelled `app.kubernetes.io/name=<app>` and waits for a
/// replacement that is Ready.
async fn replace_bundle_pod(client: &Client, app: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    let selector = format!("app.kubernetes.io/name={app}");
    let old: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    ensure!(!old.is_empty(), "no {app} pod to delete");
    for name in &old {
        pods.delete(name, &Default::default()).await?;
    }
    eventually(&format!("a new {app} pod Ready"), CONVERGE, || async {
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        Ok(list
            .items
            .iter()
            .any(|p| {
                let new = p.metadata.name.as_ref().is_some_and(|n| !old.contains(n));
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                new && ready
            })
            .then_some(()))
    })
    .await
}

/// Which pod holds which GPU, as the operator's topology document records it.
async fn holders(client: &Client, node: &str) -> anyhow::Result<Vec<(String, String)>> {
    fakegpu_e2e::gpu_holders(client, node)
        .await?
        .context("no topology document")
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn restarts_move_no_gpu() -> anyhow::Result<()> {
    on_real_pool(
        "real-restart",
        l4_pool(json!({"devicePlugin": true, "dra": true})),
        restarts,
    )
    .await
}

async fn restarts(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let uuids = node_uuids(client, &node, pool).await?;
    advertised(client, &node, "nvidia.com/gpu", "2").await?;
    slice_published(client, &node, &uuids).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let by_plugin = holding_pod(
        client,
        namespace,
        "by-plugin",
        json!({"limits": {"nvidia.com/gpu": 1}}),
        json!({}),
    )
    .await?;
    claim_template(client, namespace, "one-gpu", json!({"requests": one_gpu()})).await?;
    let by_claim = holding_claim_pod(client, namespace, "by-claim", "gpu", "one-gpu").await?;
    ensure!(uuids.contains(&by_plugin) && uuids.contains(&by_claim));

    // The kubelet restarts: the plugins register again, the running pods keep their GPUs.
    let restart = std::process::Command::new(fakegpu_e2e::repo_root().join("hack/node.sh"))
        .arg("restart-kubelet")
        .status()?;
    ensure!(restart.success(), "hack/node.sh restart-kubelet: {restart}");
    advertised(client, &node, "nvidia.com/gpu", "2").await?;
    // The restarted kubelet serves exec once it knows its pods again.
    let env = eventually("by-plugin reachable by exec again", CONVERGE, || async {
        Ok(container_env(namespace, "by-plugin").ok())
    })
    .await?;
    ensure!(env.contains(&by_plugin), "by-plugin's GPU changed: {env}");
    ensure!(container_env(namespace, "by-claim")?.contains(&by_claim));
    // A pod admitted after the restart gets the GPU left (the plugin answers Allocate again).
    let after = holding_pod(
        client,
        namespace,
        "after-restart",
        json!({"limits": {"nvidia.com/gpu": 1}}),
        json!({}),
    )
    .await?;
    ensure!(
        uuids.contains(&after) && after != by_plugin,
        "after the restart: {after}"
    );
    pods.delete("after-restart", &Default::default()).await?;

    // The DRA plugin's pod goes while the claim is prepared: its successor answers the
    // unprepare from the checkpoint, and the claim's CDI spec leaves the host.
    let claim = pods
        .get("by-claim")
        .await?
        .status
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|s| s.into_iter().next())
        .and_then(|s| s.resource_claim_name)
        .context("by-claim has no claim")?;
    let claim_uid = Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .get(&claim)
        .await?
        .metadata
        .uid
        .context("claim without uid")?;
    let cdi_spec = std::path::PathBuf::from(format!(
        "/var/run/cdi/k8s.gpu.nvidia.com-claim_{claim_uid}.json"
    ));
    ensure!(
        cdi_spec.is_file(),
        "{} missing while the claim is prepared",
        cdi_spec.display()
    );
    replace_bundle_pod(client, "fakegpu-dra-plugin").await?;
    ensure!(container_env(namespace, "by-claim")?.contains(&by_claim));
    pods.delete("by-claim", &Default::default()).await?;
    eventually(
        "the claim's CDI spec removed by the new plugin pod",
        CONVERGE,
        || async { Ok((!cdi_spec.exists()).then_some(())) },
    )
    .await?;

    // The operator's pod goes: the new leader moves no GPU. The pods deleted above must be
    // gone from the document first, or their leaving would read as a move.
    let before = eventually("by-plugin the only holder recorded", CONVERGE, || async {
        let held = holders(client, &node).await?;
        Ok(held
            .iter()
            .all(|(_, pod)| pod == "by-plugin")
            .then_some(held)
            .filter(|held| !held.is_empty()))
    })
    .await?;
    replace_bundle_pod(client, "fakegpu-operator").await?;
    // The new leader resyncs everything within moments; nothing may move meanwhile.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = holders(client, &node).await?;
        ensure!(now == before, "holders moved: {before:?} -> {now:?}");
    }
    ensure!(container_env(namespace, "by-plugin")?.contains(&by_plugin));
    Ok(())
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn metrics_and_nvidia_smi_name_the_gpu_the_kubelet_gave() -> anyhow::Result<()> {
    // Three GPUs in NUMA zone 0, one in zone 1: the device plugin's preference for a
    // one-GPU request is the zone it fills best, zone 1's GPU 3, where fakegpu's own choice
    // for a pod would be the lowest free index, GPU 0.
    on_real_pool(
        "real-given",
        json!({
            "gpu": {"profile": "l4", "count": 4},
            "numa": {"zones": 2, "gpusPerZone": [3, 1]},
            "interfaces": {"devicePlugin": true, "dra": false},
        }),
        kubelet_choice,
    )
    .await
}

async fn kubelet_choice(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let document = pool_document(client, &node, pool).await?;
    let lone = document
        .gpus
        .iter()
        .find(|g| g.numa_node == Some(1))
        .map(|g| g.id.clone())
        .context("no GPU in NUMA zone 1")?;
    advertised(client, &node, "nvidia.com/gpu", "4").await?;
    let given = holding_pod(
        client,
        namespace,
        "given",
        json!({"limits": {"nvidia.com/gpu": 1}}),
        json!({"runtimeClassName": "nvidia"}),
    )
    .await?;
    ensure!(
        given == lone,
        "the kubelet gave {given}, not zone 1's {lone}: the scenario does not tell the \
         kubelet's choice from the operator's"
    );
    // The node agent reports the kubelet's choice; the operator's document follows it.
    eventually(
        "the document records the pod on the GPU its container sees",
        CONVERGE,
        || async {
            let held = holders(client, &node).await?;
            ensure!(
                held == [(given.clone(), "given".to_owned())],
                "holders: {held:?}"
            );
            Ok(Some(()))
        },
    )
    .await?;
    named_everywhere(client, namespace, "given", &given).await?;
    // On the node's host, NVIDIA's own nvidia-smi through the library and document the node
    // agent keeps there lists the pod's work on that GPU under its host PID: the process that
    // started the pod's container (its cgroup names the pod, its command is the pod's).
    let uid = Api::<Pod>::namespaced(client.clone(), namespace)
        .get("given")
        .await?
        .metadata
        .uid
        .context("pod given has no UID")?;
    eventually(
        "NVIDIA's nvidia-smi on the host lists the pod's process",
        CONVERGE,
        || async {
            let apps =
                host_nvidia_smi(&["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"])?;
            let pids: Vec<u32> = apps
                .lines()
                .filter_map(|line| line.strip_suffix(&format!(", {given}")))
                .filter_map(|pid| pid.trim().parse().ok())
                .collect();
            let [pid] = pids.as_slice() else {
                bail!("the host's nvidia-smi lists {pids:?} on {given}: {apps:?}");
            };
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
            let command = std::fs::read(format!("/proc/{pid}/cmdline"))?;
            ensure!(
                cgroup.contains(&format!("pod{uid}")) && command.windows(5).any(|w| w == b"sleep"),
                "PID {pid} is not the pod's: cgroup {cgroup:?}, command {:?}",
                String::from_utf8_lossy(&command)
            );
            Ok(Some(()))
        },
    )
    .await
}

/// Waits until the container of pod `pod` lists its process on GPU `uuid` in its nvidia-smi,
/// and the exporter's series of the pod carry that GPU (a dashboard's view; both read the
/// node's document through the exporter).
async fn named_everywhere(
    client: &Client,
    namespace: &str,
    pod: &str,
    uuid: &str,
) -> anyhow::Result<()> {
    let process = format!("{uuid}, ");
    let series = format!("UUID=\"{uuid}\"");
    let of_pod = format!("pod=\"{pod}\"");
    let exporter = exporter_service(client).await?;
    eventually(
        &format!("nvidia-smi and the exporter name {pod}'s GPU {uuid}"),
        CONVERGE,
        || async {
            let apps = kubectl(&[
                "exec",
                "-n",
                namespace,
                pod,
                "--",
                "nvidia-smi",
                "--query-compute-apps=gpu_uuid,process_name",
                "--format=csv,noheader",
            ])?;
            let metrics = fakegpu_e2e::http_get(&exporter, "/metrics")?;
            let series_of_pod: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.contains(&of_pod))
                .collect();
            let smi_ok = apps.lines().any(|line| line.starts_with(&process));
            let metrics_ok =
                !series_of_pod.is_empty() && series_of_pod.iter().all(|l| l.contains(&series));
            ensure!(
                smi_ok && metrics_ok,
                "nvidia-smi: {apps:?}; the exporter's series of the pod: {series_of_pod:?}"
            );
            Ok(Some(()))
        },
    )
    .await
}

/// NVIDIA's nvidia-smi (hack/nvidia-smi.sh's 550, FAKEGPU_REAL_NVIDIA_SMI naming its folder)
/// run on the node's host with `args`, loading the library the node agent keeps in
/// `/var/lib/fakegpu/nvml` and its document there, as a host-side tool with a driver root
/// would; as no pod (no HOSTNAME, POD_UUID or NVIDIA_VISIBLE_DEVICES).
fn host_nvidia_smi(args: &[&str]) -> anyhow::Result<String> {
    let folder = std::env::var_os("FAKEGPU_REAL_NVIDIA_SMI")
        .context("FAKEGPU_REAL_NVIDIA_SMI must name hack/nvidia-smi.sh's folder")?;
    let binary = std::path::Path::new(&folder).join("550.163.01/nvidia-smi");
    let output = std::process::Command::new(&binary)
        .args(args)
        .env("LD_LIBRARY_PATH", fakegpu_model::names::nvml::CONTAINER_DIR)
        .env_remove(container_env::HOSTNAME)
        .env_remove(container_env::POD_UUID)
        .env_remove(container_env::VISIBLE_DEVICES)
        .env_remove(fakegpu_model::names::nvml::TOPOLOGY_ENV)
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    ensure!(
        output.status.success(),
        "{} {args:?}: {}{}",
        binary.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

/// A ResourceClaimTemplate for one GPU whose claims carry `parameters` as opaque
/// configuration for gpu.nvidia.com.
async fn configured_template(
    client: &Client,
    namespace: &str,
    name: &str,
    parameters: serde_json::Value,
) -> anyhow::Result<()> {
    claim_template(
        client,
        namespace,
        name,
        json!({
            "requests": one_gpu(),
            "config": [{"requests": ["gpu"],
                "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}],
        }),
    )
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn claim_configurations_reach_the_container() -> anyhow::Result<()> {
    on_real_pool(
        "real-config",
        l4_pool(json!({"devicePlugin": false, "dra": true})),
        claim_configurations,
    )
    .await
}

async fn claim_configurations(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    let uuids = node_uuids(client, &node, pool).await?;
    slice_published(client, &node, &uuids).await?;
    let nvidia = |sharing: serde_json::Value| json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing});
    // As NVIDIA's driver takes them, and the reference's SpacePartitioning.
    let cases = [
        (
            "time-slicing",
            nvidia(json!({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})),
            vec!["_SHARING_STRATEGY=TimeSlicing", "_TIMESLICE_INTERVAL=Long"],
        ),
        (
            "mps",
            nvidia(json!({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40}})),
            vec![
                "_SHARING_STRATEGY=MPS",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40",
            ],
        ),
        (
            "space-partitioning",
            json!({"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig",
                "sharing": {"strategy": "SpacePartitioning",
                    "spacePartitioningConfig": {"partitionCount": 3}}}),
            vec!["_SHARING_STRATEGY=SpacePartitioning", "_PARTITION_COUNT=3"],
        ),
    ];
    for (name, parameters, expected) in cases {
        configured_template(client, namespace, name, parameters).await?;
        let output = run_on_real_node(
            client,
            namespace,
            name,
            "env",
            json!({"claims": [{"name": "gpu"}]}),
            json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}]}),
        )
        .await?;
        for variable in expected {
            ensure!(
                output.lines().any(|l| l.contains(variable)
                    && (l.starts_with("GPU_DEVICE_") || l.starts_with("CUDA_"))),
                "{name}: no {variable} in the container: {output}"
            );
        }
    }

    // One that neither driver takes: the prepare fails, and the pod's events say why.
    configured_template(
        client,
        namespace,
        "exclusive",
        nvidia(json!({"strategy": "Exclusive"})),
    )
    .await?;
    create_real_pod(
        client,
        namespace,
        "exclusive",
        "true",
        json!({"claims": [{"name": "gpu"}]}),
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "exclusive"}]}),
    )
    .await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    eventually(
        "a Warning Event naming sharing.strategy",
        CONVERGE,
        || async {
            Ok(events
                .list(&ListParams::default().fields("involvedObject.name=exclusive"))
                .await?
                .items
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("sharing.strategy"))
                })
                .then_some(()))
        },
    )
    .await?;
    let phase = Api::<Pod>::namespaced(client.clone(), namespace)
        .get("exclusive")
        .await?
        .status
        .and_then(|s| s.phase);
    ensure!(
        phase.as_deref() == Some("Pending"),
        "the refused pod is {phase:?}"
    );
    Ok(())
}

/// The bundle's exporter as its Service publishes it (ClusterIP:port): the test on the host
/// and pods on the node reach it there through the node's kube-proxy, as in any cluster.
async fn exporter_service(client: &Client) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::Service;
    let service = Api::<Service>::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE)
        .get(fakegpu_model::names::exporter::SERVICE)
        .await?;
    let spec = service.spec.context("the exporter's Service has no spec")?;
    let ip = spec
        .cluster_ip
        .context("the exporter's Service has no ClusterIP")?;
    let port = spec
        .ports
        .and_then(|ports| ports.first().map(|p| p.port))
        .context("the exporter's Service has no port")?;
    Ok(format!("{ip}:{port}"))
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn an_in_cluster_prometheus_scrapes_the_bundle_s_exporter() -> anyhow::Result<()> {
    on_real_pool(
        "real-prom",
        l4_pool(json!({"devicePlugin": true, "dra": false})),
        prometheus_scrape,
    )
    .await
}

async fn prometheus_scrape(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let node = real_node();
    node_uuids(client, &node, pool).await?;
    advertised(client, &node, "nvidia.com/gpu", "2").await?;
    let exporter = exporter_service(client).await?;
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "prometheus", "namespace": namespace},
        "data": {"prometheus.yml": format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n- job_name: fakegpu\n  static_configs:\n  - targets: ['{exporter}']\n")},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &config)
        .await?;
    let prometheus: Pod = serde_json::from_value(json!({
        "metadata": {"name": "prometheus", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "prometheus", "image": "fakegpu.local/prometheus:v1",
                "imagePullPolicy": "Never",
                "args": ["--config.file=/etc/prometheus/prometheus.yml",
                    "--storage.tsdb.path=/prometheus",
                    "--web.listen-address=0.0.0.0:9090"],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/prometheus"}]}],
            "volumes": [{"name": "config", "configMap": {"name": "prometheus"}}],
        },
    }))?;
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &prometheus)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let busy: Pod = serde_json::from_value(json!({
        "metadata": {"name": "busy", "namespace": namespace,
            "annotations": {"run.ai/simulated-gpu-utilization": "40-40"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": SHELL_IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }))?;
    pods.create(&PostParams::default(), &busy).await?;
    // What a Grafana panel written for dcgm-exporter asks.
    let promql = format!(
        "DCGM_FI_DEV_GPU_UTIL{{Hostname=\"{node}\",pod=\"busy\",namespace=\"{namespace}\"}}"
    );
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    // On the pod network: the test reaches it at its pod address, through the node's bridge.
    let prometheus = eventually("Prometheus's pod address", CONVERGE, || async {
        let pod = pods.get("prometheus").await?;
        Ok(pod.status.and_then(|s| s.pod_ip))
    })
    .await?;
    let prometheus = format!("{prometheus}:9090");
    eventually(
        "Prometheus in the cluster has the busy pod's GPU at 40 %",
        CONVERGE,
        || async {
            let body =
                fakegpu_e2e::http_get(&prometheus, &format!("/api/v1/query?query={encoded}"))?;
            let answer: serde_json::Value = serde_json::from_str(&body)?;
            let value = answer["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok());
            Ok((value == Some(40.0)).then_some(()))
        },
    )
    .await
}

/// `fakegpu_operator_leader` of the operator serving HTTP on `address`, if it answers.
fn leads(address: &str) -> Option<bool> {
    let metrics = fakegpu_e2e::http_get(address, "/metrics").ok()?;
    fakegpu_e2e::metric_value(&metrics, "fakegpu_operator_leader").map(|v| v == 1.0)
}

/// The bundle's operator pods that run, by name, with their `fakegpu_operator_leader`
/// (`None`: not answering yet), read at their pod addresses on port 8080.
async fn operator_replicas(client: &Client) -> anyhow::Result<Vec<(String, Option<bool>)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=fakegpu-operator"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let ip = p.status?.pod_ip?;
            Some((p.metadata.name?, leads(&format!("{ip}:8080"))))
        })
        .collect())
}

/// Waits until the operator runs `replicas` pods, exactly one of them leading and every other
/// answering as standing by; returns the leader's name.
async fn one_leader(client: &Client, replicas: usize) -> anyhow::Result<String> {
    eventually(
        &format!("{replicas} operator replicas, one leading"),
        Duration::from_secs(120),
        || async {
            let seen = operator_replicas(client).await?;
            let leaders: Vec<&String> = seen
                .iter()
                .filter(|(_, leads)| *leads == Some(true))
                .map(|(name, _)| name)
                .collect();
            let standing_by = seen.iter().filter(|(_, l)| *l == Some(false)).count();
            ensure!(
                seen.len() == replicas && leaders.len() == 1 && standing_by == replicas - 1,
                "replicas and leadership: {seen:?}"
            );
            Ok(Some(leaders[0].clone()))
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn two_operator_replicas_elect_one_leader_and_fail_over() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let client = admin_client().await?;
    let deployments: Api<Deployment> =
        Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    let scale = |replicas: i32| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch(
                    "fakegpu-operator",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await
        }
    };
    let result = async {
        scale(2).await?;
        // Both Ready (the probes pass for a replica standing by), one lease holder.
        let leader = one_leader(&client, 2).await?;
        eventually("both replicas Ready", CONVERGE, || async {
            let ready = deployments
                .get("fakegpu-operator")
                .await?
                .status
                .and_then(|s| s.ready_replicas);
            Ok((ready == Some(2)).then_some(()))
        })
        .await?;
        // The leader's pod goes: the one standing by takes the lease over, and the
        // Deployment's new pod stands by.
        let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
        pods.delete(&leader, &Default::default()).await?;
        let successor = one_leader(&client, 2).await?;
        ensure!(
            successor != leader,
            "{leader} still leads after its pod was deleted"
        );
        anyhow::Ok(())
    }
    .await;
    let restored = scale(1).await;
    let alone = one_leader(&client, 1).await;
    result
        .and(restored.map(drop).map_err(Into::into))
        .and(alone.map(drop))
}

/// Stops (`stop`) or starts (`start`) the relay by which pods reach the API server: while it is
/// stopped their connections are refused, as in an API server outage, and the kubelet (on
/// loopback) carries on.
fn api_relay(action: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new(fakegpu_e2e::repo_root().join("hack/node.sh"))
        .args(["api-relay", action])
        .status()?;
    ensure!(
        status.success(),
        "hack/node.sh api-relay {action}: {status}"
    );
    Ok(())
}

/// The host PID of the process of pod `uid` whose command line names `program` (its cgroup
/// names the pod).
fn pod_process(uid: &str, program: &str) -> anyhow::Result<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes that end meanwhile are no candidates.
        let (Ok(cgroup), Ok(command)) = (
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")),
            std::fs::read(format!("/proc/{pid}/cmdline")),
        ) else {
            continue;
        };
        if cgroup.contains(&format!("pod{uid}"))
            && String::from_utf8_lossy(&command).contains(program)
        {
            found.push(pid);
        }
    }
    let [pid] = found.as_slice() else {
        bail!("processes of pod {uid} running {program}: {found:?}");
    };
    Ok(*pid)
}

/// The operator container's restart count and whether its pod is Ready.
fn operator_state(pod: &Pod) -> (i32, bool) {
    let status = pod.status.clone().unwrap_or_default();
    let restarts = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .find(|c| c.name == "operator")
        .map_or(-1, |c| c.restart_count);
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (restarts, ready)
}

/// The bundle's operator, restarted while its API server refuses its pod's connections, waits
/// instead of exiting: its container is not restarted again (an exit per try was
/// CrashLoopBackOff, whose back-off outlasted the outage), its pod is not Ready meanwhile, its
/// log says why, and it is Ready and leading again once the API server answers.
#[tokio::test]
#[ignore = "needs hack/node.sh's real node and the bundle in-cluster: hack/test.sh runs it"]
async fn the_operator_restarted_during_an_api_server_outage_waits_for_it() -> anyhow::Result<()> {
    let client = admin_client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), fakegpu_e2e::OPERATOR_NAMESPACE);
    let name = one_leader(&client, 1).await?;
    let pod = pods.get(&name).await?;
    let uid = pod
        .metadata
        .uid
        .clone()
        .context("the operator's pod has no UID")?;
    let (before, _) = operator_state(&pod);
    api_relay("stop")?;
    let outage = async {
        let pid = pod_process(&uid, "fakegpu-operator")?;
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()?;
        ensure!(killed.success(), "kill -KILL {pid}: {killed}");
        eventually(
            "the operator's container started again",
            CONVERGE,
            || async {
                let pod = pods.get(&name).await?;
                let running = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.iter().find(|c| c.name == "operator"))
                    .and_then(|c| c.state.as_ref())
                    .is_some_and(|state| state.running.is_some());
                Ok((operator_state(&pod).0 == before + 1 && running).then_some(()))
            },
        )
        .await?;
        // Several tries (1 s, 2 s, 4 s, 8 s), each of which used to be an exit.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let (restarts, ready) = operator_state(&pods.get(&name).await?);
        ensure!(
            restarts == before + 1,
            "the operator exited during the outage: {restarts} restarts, {before} before"
        );
        ensure!(
            !ready,
            "the operator's pod is Ready while its API server refuses it"
        );
        let said = kubectl(&[
            "logs",
            "-n",
            fakegpu_e2e::OPERATOR_NAMESPACE,
            &name,
            "-c",
            "operator",
        ])?;
        let retries = said
            .matches("the API server did not answer; retrying")
            .count();
        ensure!(retries >= 2, "{retries} retries logged: {said}");
        Ok(())
    }
    .await;
    let restored = api_relay("start");
    outage?;
    restored?;
    eventually(
        "the operator Ready again, not restarted",
        CONVERGE,
        || async {
            let (restarts, ready) = operator_state(&pods.get(&name).await?);
            ensure!(
                restarts == before + 1,
                "{restarts} restarts, {before} before"
            );
            Ok(ready.then_some(()))
        },
    )
    .await?;
    one_leader(&client, 1).await.map(drop)
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node, the bundle in-cluster and hack/nvidia-components.sh: hack/test.sh runs it"]
async fn nvidia_s_own_components_run_against_a_mock_pool_s_driver_root() -> anyhow::Result<()> {
    on_real_pool(
        "real-mock",
        json!({"gpu": {"profile": "h100", "count": 2, "backend": "mock"},
            "interfaces": {"devicePlugin": true}}),
        mock_driver_root,
    )
    .await?;
    // The node left the pool (and its agent is gone): nothing of the root is left.
    let root = fakegpu_model::names::nvml::DRIVER_ROOT;
    let left: Vec<_> = std::fs::read_dir(root)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    ensure!(left.is_empty(), "{root} still holds {left:?}");
    Ok(())
}

/// The node's document as the pool's driver root holds it, once it is the operator's: what
/// the library NVIDIA's components load answers from.
async fn driver_root_document(
    client: &Client,
    node: &str,
    pool: &str,
) -> anyhow::Result<NodeTopology> {
    use fakegpu_model::names::nvml::{DOCUMENT_BESIDE_LIBRARY, DRIVER_ROOT, LIBRARY_DIR};
    let document = pool_document(client, node, pool).await?;
    let beside = std::path::Path::new(DRIVER_ROOT)
        .join(LIBRARY_DIR)
        .join(DOCUMENT_BESIDE_LIBRARY);
    eventually(
        "the node's document in the driver root",
        CONVERGE,
        || async {
            let text = std::fs::read_to_string(&beside).unwrap_or_default();
            Ok(NodeTopology::from_yaml(&text)
                .is_ok_and(|laid_out| laid_out.gpus == document.gpus)
                .then_some(()))
        },
    )
    .await?;
    Ok(document)
}

/// The root's device nodes: the driver's control devices and one per GPU of `document`, by
/// its minor number, each a character device reading as `/dev/null`.
fn device_nodes_in_root(root: &std::path::Path, document: &NodeTopology) -> anyhow::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    use fakegpu_model::names::nvml::{CONTROL_DEVICES, DEVICE_NODES};
    let null = std::fs::metadata("/dev/null")?.rdev();
    let names = CONTROL_DEVICES
        .map(str::to_owned)
        .into_iter()
        .chain(document.gpus.iter().map(|g| format!("nvidia{}", g.index)));
    for name in names {
        let path = root.join(DEVICE_NODES).join(&name);
        let node = std::fs::symlink_metadata(&path)
            .with_context(|| format!("{} in the driver root", path.display()))?;
        ensure!(
            node.file_type().is_char_device() && node.rdev() == null,
            "{} is not a character device like /dev/null",
            path.display()
        );
    }
    Ok(())
}

/// NVIDIA's container toolkit (`nvidia-ctk cdi generate`, the discovery NVIDIA's device plugin
/// and DRA driver use for CDI) makes a spec of the root: each GPU of `document` by UUID with its
/// device node, the driver's control devices, the NVML and CUDA libraries by their versioned
/// names, and the socket serving the document.
fn toolkit_cdi_spec(root: &std::path::Path, document: &NodeTopology) -> anyhow::Result<()> {
    let run = std::process::Command::new(nvidia_binary("nvidia-ctk")?)
        .args(["cdi", "generate"])
        .arg(format!("--driver-root={}", root.display()))
        .arg(format!("--dev-root={}", root.display()))
        .output()?;
    ensure!(
        run.status.success(),
        "nvidia-ctk cdi generate: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let spec: serde_json::Value = serde_yaml::from_slice(&run.stdout)?;
    let nodes_of = |edits: &serde_json::Value| -> Vec<(String, String)> {
        edits["deviceNodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let field = |f: &str| n[f].as_str().unwrap_or_default().to_owned();
                (field("path"), field("hostPath"))
            })
            .collect()
    };
    for gpu in &document.gpus {
        let device = spec["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["name"] == gpu.id.as_str())
            .with_context(|| format!("no device {} in NVIDIA's spec: {spec:#}", gpu.id))?;
        let path = format!("/dev/nvidia{}", gpu.index);
        ensure!(
            nodes_of(&device["containerEdits"])
                == [(path.clone(), format!("{}{path}", root.display()))],
            "{}'s device nodes in NVIDIA's spec: {device:#}",
            gpu.id
        );
    }
    let common = &spec["containerEdits"];
    ensure!(
        nodes_of(common)
            .iter()
            .any(|(path, _)| path == "/dev/nvidiactl"),
        "no /dev/nvidiactl in NVIDIA's spec: {common:#}"
    );
    // The driver's libraries by their versioned names, and the document's socket.
    for mounted in [
        format!("libnvidia-ml.so.{}", document.driver_version),
        format!("libcuda.so.{}", document.driver_version),
        fakegpu_model::names::nvml::DOCUMENT_SOCKET.to_owned(),
    ] {
        ensure!(
            common["mounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["hostPath"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(&mounted))),
            "NVIDIA's spec mounts no {mounted}: {common:#}"
        );
    }
    Ok(())
}

/// GPU feature discovery's labels are the ones fakegpu wrote on the node, key for key (fakegpu
/// does not write the DMI machine name, and writes what GFD leaves to NFD and the GPU
/// Operator).
async fn gfd_labels_as_fakegpu(
    client: &Client,
    node: &str,
    gfd: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let node_labels = Api::<Node>::all(client.clone())
        .get(node)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    let differing: Vec<_> = gfd
        .iter()
        .filter(|(k, _)| k.as_str() != "nvidia.com/gpu.machine")
        .filter(|(k, v)| node_labels.get(*k) != Some(*v))
        .collect();
    ensure!(
        differing.is_empty(),
        "GFD labels fakegpu's differ from: {differing:?}"
    );
    let only_fakegpu: Vec<_> = node_labels
        .keys()
        .filter(|k| k.starts_with("nvidia.com/") && !gfd.contains_key(*k))
        .filter(|k| *k != label::GPU_PRESENT && !k.starts_with("nvidia.com/gpu.deploy."))
        .collect();
    ensure!(
        only_fakegpu.is_empty(),
        "labels GFD does not write: {only_fakegpu:?}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs hack/node.sh's real node, the bundle in-cluster and hack/nvidia-components.sh: hack/test.sh runs it"]
async fn nvidia_s_feature_discovery_sees_a_mock_pool_s_mig_layout() -> anyhow::Result<()> {
    on_real_pool(
        "real-mock-mig",
        json!({"gpu": {"profile": "a100", "count": 2, "backend": "mock"},
            "interfaces": {"devicePlugin": true},
            "mig": {"strategy": "mixed", "layout": [
                {"gpus": [0], "profiles": ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb+me"]}]}}),
        mock_mig,
    )
    .await
}

/// Under `mixed`, GFD names each MIG profile from the library's GPU- and compute-instance
/// answers (through go-nvlib) and counts its instances: its labels must be fakegpu's, the
/// `+me` profile published with a dot and the per-profile product, replicas and sharing
/// strategy included.
async fn mock_mig(client: &Client, pool: &str, _namespace: &str) -> anyhow::Result<()> {
    let node = real_node();
    agents_ready(client, &node, &["fakegpu-driver-root"]).await?;
    let document = driver_root_document(client, &node, pool).await?;
    ensure!(
        document.gpus[0].mig_devices.len() == 4,
        "the document's layout: {:?}",
        document.gpus[0].mig_devices
    );
    let root = std::path::Path::new(fakegpu_model::names::nvml::DRIVER_ROOT);
    let gfd = gpu_feature_discovery(root, &["--mig-strategy=mixed"])?;
    for (key, value) in [
        ("nvidia.com/mig.strategy", "mixed"),
        ("nvidia.com/mig-1g.5gb.count", "1"),
        ("nvidia.com/mig-1g.5gb.me.count", "1"),
        (
            "nvidia.com/mig-3g.20gb.product",
            "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
        ),
    ] {
        ensure!(
            gfd.get(key).map(String::as_str) == Some(value),
            "GFD {key}: {:?}, want {value} (all: {gfd:#?})",
            gfd.get(key)
        );
    }
    gfd_labels_as_fakegpu(client, &node, &gfd).await
}

/// NVIDIA's binaries, built by hack/nvidia-components.sh.
fn nvidia_binary(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = fakegpu_e2e::repo_root()
        .join("target/hack-bin/nvidia")
        .join(name);
    ensure!(
        path.is_file(),
        "{} is not built: run hack/nvidia-components.sh",
        path.display()
    );
    Ok(path)
}

/// GPU feature discovery, once, against the driver root: its library path and, in a mount
/// namespace of its own (the host's sysfs stays as it is), the root's PCI functions where it
/// reads them. Returns the labels it writes.
fn gpu_feature_discovery(
    root: &std::path::Path,
    args: &[&str],
) -> anyhow::Result<BTreeMap<String, String>> {
    use fakegpu_model::names::nvml::{LIBRARY_DIR, PCI_DEVICES};
    let scratch = std::env::temp_dir().join(unique_name("gfd"));
    std::fs::create_dir_all(&scratch)?;
    let (output, machine) = (scratch.join("labels"), scratch.join("product_name"));
    std::fs::write(&machine, "fakegpu\n")?;
    let run = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" /sys/bus/pci/devices && shift && exec "$@""#)
        .arg("sh")
        .arg(root.join(PCI_DEVICES))
        .arg(nvidia_binary("gpu-feature-discovery")?)
        .args(["--oneshot", "--no-timestamp", "--fail-on-init-error"])
        .args(args)
        .arg(format!("--output-file={}", output.display()))
        .arg(format!("--machine-type-file={}", machine.display()))
        .env("LD_LIBRARY_PATH", root.join(LIBRARY_DIR))
        .output()?;
    let labels = std::fs::read_to_string(&output);
    std::fs::remove_dir_all(&scratch)?;
    ensure!(
        run.status.success(),
        "gpu-feature-discovery failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(labels?
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

async fn mock_driver_root(client: &Client, pool: &str, namespace: &str) -> anyhow::Result<()> {
    use fakegpu_model::names::{
        annotation::GPU_FAULTS,
        nvml::{DRIVER_ROOT, LIBRARY_DIR, LIBRARY_SONAME},
    };
    let node = real_node();
    let root = std::path::Path::new(DRIVER_ROOT);
    agents_ready(client, &node, &["fakegpu-driver-root"]).await?;
    // fakegpu's own plugins stay off the node: NVIDIA's serve it.
    let (agents, labels) = fakegpu_on_node(client, &node).await?;
    ensure!(agents == 1, "{agents} node agents on a mock node");
    ensure!(labels.iter().any(|l| l == label::DEPLOY_DRIVER_ROOT));
    let status = Api::<GpuNodePool>::all(client.clone())
        .get(pool)
        .await?
        .status;
    ensure!(
        status.and_then(|s| s.driver_root).as_deref() == Some(DRIVER_ROOT),
        "the pool's status names no driver root"
    );

    let document = driver_root_document(client, &node, pool).await?;
    ensure!(root.join(LIBRARY_DIR).join(LIBRARY_SONAME).is_file());
    device_nodes_in_root(root, &document)?;
    toolkit_cdi_spec(root, &document)?;
    let gfd = gpu_feature_discovery(root, &[])?;
    ensure!(
        gfd.get(label::GPU_COUNT).map(String::as_str) == Some("2"),
        "GFD: {gfd:#?}"
    );
    gfd_labels_as_fakegpu(client, &node, &gfd).await?;

    // NVIDIA's device plugin serves the node's GPUs to the kubelet from the same root, and a
    // pod gets one of the document's GPUs through it.
    let plugin = nvidia_device_plugin(
        "nvidia-device-plugin",
        &[
            // The GPU's device nodes (the root's, under its driver root) go to the container.
            "--pass-device-specs=true",
        ],
    )?;
    let log = plugin.log.clone();
    let served = async {
        plugin.registered(client, 2).await?;
        let visible = holding_pod(
            client,
            namespace,
            "nvidia-plugin-pod",
            json!({"limits": {"nvidia.com/gpu": 1}}),
            json!({}),
        )
        .await?;
        // NVIDIA's plugin names the GPU by the UUID the library reports (device-list strategy
        // envvar: the container toolkit would read the variable), and the driver-root agent
        // reports the kubelet's choice, so fakegpu's document (metrics, nvidia-smi) names the
        // same GPU.
        let given = document
            .gpus
            .iter()
            .find(|g| g.id == visible)
            .with_context(|| {
                format!("the container got {visible:?}, not one of the document's GPUs")
            })?;
        // As on a GPU node: the container has its GPU's device node (the root's), and no
        // other GPU's. NVIDIA's plugin passes the control devices (`nvidiactl`, ...) only when
        // its own /dev has them, which a plugin on the host of a GPU-less node has not.
        let dev = kubectl(&[
            "exec",
            "-n",
            namespace,
            "nvidia-plugin-pod",
            "--",
            "ls",
            "/dev",
        ])?;
        let nodes: Vec<&str> = dev
            .split_whitespace()
            .filter(|n| n.starts_with("nvidia"))
            .collect();
        let expected = [format!("nvidia{}", given.index)];
        ensure!(
            nodes == expected,
            "the container's /dev/nvidia*: {nodes:?}, want {expected:?}"
        );
        eventually(
            "the document records the GPU NVIDIA's plugin gave",
            CONVERGE,
            || async {
                Ok((holders(client, &node).await?
                    == [(visible.clone(), "nvidia-plugin-pod".into())])
                .then_some(()))
            },
        )
        .await?;
        // A fault injected on the other GPU (XID 48, a double-bit ECC error) reaches NVIDIA's
        // plugin as that XID through the library's events: the plugin marks the GPU unhealthy
        // and the kubelet stops offering it.
        let other = document
            .gpus
            .iter()
            .find(|g| g.id != visible)
            .context("a second GPU")?;
        let fault = format!(r#"[{{"gpus": [{}], "xid": 48}}]"#, other.index);
        fakegpu_e2e::annotate_node(client, &node, GPU_FAULTS, Some(&fault)).await?;
        eventually(
            "NVIDIA's plugin reporting the faulty GPU unhealthy",
            CONVERGE,
            || async {
                let said = std::fs::read_to_string(&log)?;
                let marked = said.contains(&format!("Xid=48 on Device={}", other.id));
                let count = allocatable(client, &node, "nvidia.com/gpu").await?;
                Ok((marked && count.as_deref() == Some("1")).then_some(()))
            },
        )
        .await
    }
    .await;
    // The fault goes with the test (NVIDIA's plugin never marks a GPU healthy again, so the
    // next test starts from a fresh plugin anyway).
    let cleared = fakegpu_e2e::annotate_node(client, &node, GPU_FAULTS, None).await;
    let stopped = plugin.stop();
    served?;
    stopped?;
    cleared?;
    // The library tells a new event set of every XID the document still shows, so the next
    // plugin would mark the GPU unhealthy again if it started before the agent served the
    // cleared document.
    no_fault_served().await?;
    toolkit_container(client, namespace, &document).await
}

/// Waits until the document the driver root's socket serves (what NVIDIA's components read
/// through fakegpu's library) shows no fault on any GPU.
async fn no_fault_served() -> anyhow::Result<()> {
    use fakegpu_model::names::nvml::{DOCUMENT_SOCKET, DRIVER_ROOT};
    let socket = std::path::Path::new(DRIVER_ROOT).join(DOCUMENT_SOCKET);
    eventually(
        "the driver root's document showing no GPU fault",
        CONVERGE,
        || async {
            let text = fakegpu_model::document_source::fetch(&socket)?;
            let served = NodeTopology::from_yaml(&text)?;
            Ok(served
                .gpus
                .iter()
                .all(|gpu| gpu.faults.is_empty())
                .then_some(()))
        },
    )
    .await
}

/// NVIDIA's device plugin, built by hack/nvidia-components.sh, run on the real node's host
/// against the bundle's driver root with `args` besides, logging to `logs/<name>.log` of the
/// cluster directory.
struct NvidiaDevicePlugin {
    child: std::process::Child,
    log: std::path::PathBuf,
}

fn nvidia_device_plugin(name: &str, args: &[&str]) -> anyhow::Result<NvidiaDevicePlugin> {
    use fakegpu_model::names::nvml::{DRIVER_ROOT, LIBRARY_DIR};
    let log = fakegpu_e2e::cluster_dir().join(format!("logs/{name}.log"));
    let child = std::process::Command::new(nvidia_binary("nvidia-device-plugin")?)
        // Before it looks in its driver root, the plugin checks for CDI strategies that NVML
        // loads by name alone (go-nvlib's `HasNvml`), as in the container NVIDIA's toolkit
        // would have given the driver's libraries: here, the root's.
        .env(
            "LD_LIBRARY_PATH",
            std::path::Path::new(DRIVER_ROOT).join(LIBRARY_DIR),
        )
        .arg(format!("--driver-root={DRIVER_ROOT}"))
        .arg(format!("--driver-root-ctr-path={DRIVER_ROOT}"))
        // "auto" looks for the library on the host's own paths, where a GPU Operator's
        // container toolkit would have put it; with a driver root the strategy is named.
        .arg("--device-discovery-strategy=nvml")
        .arg("--fail-on-init-error=true")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    Ok(NvidiaDevicePlugin { child, log })
}

impl NvidiaDevicePlugin {
    /// Waits until the kubelet took the plugin's registration and offers `gpus` GPUs.
    async fn registered(&self, client: &Client, gpus: usize) -> anyhow::Result<()> {
        let node = real_node();
        // The node's allocatable may still list the devices of the previous plugin: wait for
        // NVIDIA's plugin's own word that the kubelet took its registration.
        eventually(
            &format!("NVIDIA's device plugin registered with the kubelet, advertising {gpus} GPUs"),
            CONVERGE,
            || async {
                let said = std::fs::read_to_string(&self.log)?;
                ensure!(
                    !said.contains("error starting plugins"),
                    "NVIDIA's device plugin failed: {said}"
                );
                let registered =
                    said.contains("Registered device plugin for 'nvidia.com/gpu' with Kubelet");
                let count = allocatable(client, &node, "nvidia.com/gpu").await?;
                if registered && count == Some(gpus.to_string()) {
                    return Ok(Some(()));
                }
                // What a timeout reports: the node's count and the plugin's last words.
                let lines: Vec<&str> = said.lines().collect();
                let last = lines[lines.len().saturating_sub(5)..].join("\n");
                bail!("registered: {registered}, allocatable: {count:?}; the plugin's log ends:\n{last}")
            },
        )
        .await
    }

    /// SIGTERM: the plugin removes its socket, and the kubelet drops its devices.
    fn stop(mut self) -> anyhow::Result<()> {
        std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        self.child.wait()?;
        Ok(())
    }
}

/// NVIDIA's device plugin in CDI mode gives a pod a GPU through NVIDIA's container toolkit: its
/// CDI spec (made from the driver root by NVIDIA's own discovery, with NVIDIA's hooks, which
/// containerd runs) mounts the root's library, nvidia-smi and document socket, and no document.
/// go-nvml in the container sees that GPU alone, with the pod's process, through the socket,
/// and the root's nvidia-smi (fakegpu's) lists the same GPU.
async fn toolkit_container(
    client: &Client,
    namespace: &str,
    document: &NodeTopology,
) -> anyhow::Result<()> {
    let hook = nvidia_binary("nvidia-cdi-hook")?;
    let hook_arg = format!("--nvidia-cdi-hook-path={}", hook.display());
    let plugin = nvidia_device_plugin(
        "nvidia-device-plugin-cdi",
        &["--device-list-strategy=cdi-cri", &hook_arg],
    )?;
    // The plugin's spec, which it leaves behind: the host is left as it was.
    let spec = std::path::Path::new("/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json");
    let given = async {
        // The earlier plugin's pod still holds one GPU; the kubelet offers both anew.
        plugin.registered(client, 2).await?;
        let view = nvml_in_pod(
            client,
            namespace,
            "toolkit-nvml",
            json!({"limits": {"nvidia.com/gpu": 1}}),
            json!({}),
            Some("/usr/bin/nvidia-smi -L"),
        )
        .await?;
        let uuids: Vec<String> = document.gpus.iter().map(|g| g.id.clone()).collect();
        nvml_sees_one_gpu(&view, document, &uuids)?;
        let uuid = &view.gpus[0].uuid;
        ensure!(
            view.ran == format!("GPU 0: {} (UUID: {uuid})\n", document.gpu_product),
            "nvidia-smi -L in the container: {:?}",
            view.ran
        );
        let written = std::fs::read_to_string(spec)
            .with_context(|| format!("NVIDIA's plugin wrote no {}", spec.display()))?;
        ensure!(
            written.contains(fakegpu_model::names::nvml::DOCUMENT_SOCKET),
            "NVIDIA's CDI spec mounts no document socket: {written}"
        );
        Ok(())
    }
    .await;
    let stopped = plugin.stop();
    let _ = std::fs::remove_file(spec);
    given?;
    stopped
}
