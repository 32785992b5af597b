//! Helpers for fakegpu's end-to-end tests.
//!
//! The tests talk to the cluster `KUBECONFIG` points at: the local control plane of
//! `hack/cluster.sh` (real etcd, kube-apiserver with RBAC, scheduler, controller manager, KWOK).
//! `hack/test.sh` starts it and runs them; without a cluster they fail, they do not skip.

pub mod audit;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, bail};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Namespace, ServiceAccount},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    config::AuthInfo,
    runtime::wait::{await_condition, conditions},
};

/// Field manager of objects the tests set up.
pub const FIELD_MANAGER: &str = "fakegpu-e2e";

/// The repository root (tests read config/ from it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// An admin client for the cluster under test.
pub async fn admin_client() -> anyhow::Result<Client> {
    if std::env::var_os("KUBECONFIG").is_none() {
        bail!(
            "KUBECONFIG is not set: run the e2e tests through hack/test.sh, or `eval $(hack/cluster.sh env)` first"
        );
    }
    Client::try_default()
        .await
        .context("connecting to the cluster in KUBECONFIG")
}

/// Installs (server-side apply, idempotent) every CRD under config/crd/ and waits until the API
/// server serves them.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = repo_root().join("config/crd");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let crd: CustomResourceDefinition = serde_yaml::from_str(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("parsing {}", path.display()))?;
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying CRD {name}"))?;
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not established within 30s"))??;
    }
    Ok(())
}

/// A name no other test uses: tests of one binary run in parallel against one cluster.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// Runs the control plane's kubectl against `KUBECONFIG`; returns stdout, fails on a non-zero exit.
pub fn kubectl(args: &[&str]) -> anyhow::Result<String> {
    let bin = std::env::var_os("FAKEGPU_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/hack-bin"));
    // A cache of its own: kubectl keys its discovery cache by host:port, and every test run
    // starts a fresh cluster on the same port, so a shared cache would describe an old cluster.
    let cache = std::env::temp_dir().join(format!("fakegpu-e2e-kubectl-{}", std::process::id()));
    let output = Command::new(bin.join("kubectl"))
        .arg(format!("--cache-dir={}", cache.display()))
        .args(args)
        .output()
        .with_context(|| format!("running kubectl from {}", bin.display()))?;
    if !output.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// Objects a test made, deleted when it ends, whatever its outcome. Explicit and awaited:
/// a deletion spawned from `Drop` would be cancelled with the test's runtime.
#[allow(missing_debug_implementations)] // kube::Client is not Debug
pub struct Cleanup {
    client: Client,
    namespaces: Vec<String>,
    pools: Vec<String>,
    nodes: Vec<String>,
}

impl Cleanup {
    pub fn new(client: &Client) -> Self {
        Self {
            client: client.clone(),
            namespaces: Vec::new(),
            pools: Vec::new(),
            nodes: Vec::new(),
        }
    }

    pub fn namespace(mut self, name: &str) -> Self {
        self.namespaces.push(name.to_owned());
        self
    }

    pub fn pool(mut self, name: &str) -> Self {
        self.pools.push(name.to_owned());
        self
    }

    pub fn node(mut self, name: &str) -> Self {
        self.nodes.push(name.to_owned());
        self
    }

    /// Deletes pools first (their finalizer releases the nodes), then nodes and namespaces, and
    /// hands back the test's result.
    pub async fn after<T>(self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let params = DeleteParams::default();
        let pools: Api<fakegpu_api::GpuNodePool> = Api::all(self.client.clone());
        for name in &self.pools {
            let _ = pools.delete(name, &params).await;
        }
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        for name in &self.nodes {
            let _ = nodes.delete(name, &params).await;
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for name in &self.namespaces {
            let _ = namespaces.delete(name, &params).await;
        }
        result
    }
}

/// What most KWOK tests start from: the admin client with the CRDs installed, a pool name of
/// the test's own (starting with `prefix`), a KWOK node labelled for that pool, a namespace,
/// and the [`Cleanup`] that removes them.
pub async fn kwok_scenario(
    prefix: &str,
) -> anyhow::Result<(Client, String, String, String, Cleanup)> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name(prefix);
    let node = format!("{pool}-node");
    create_kwok_node(
        &client,
        &node,
        &[(fakegpu_model::names::label::NODE_POOL, &pool)],
    )
    .await?;
    let namespace = create_namespace(&client, prefix).await?;
    let cleanup = Cleanup::new(&client)
        .pool(&pool)
        .node(&node)
        .namespace(&namespace);
    Ok((client, pool, node, namespace, cleanup))
}

/// The API of another project's kind (Kueue's, Karpenter's), in `namespace` or cluster-wide.
pub fn dynamic_api(
    client: &Client,
    (group, version, kind): (&str, &str, &str),
    namespace: Option<&str>,
) -> Api<kube::core::DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let resource = kube::core::ApiResource::from_gvk(&gvk);
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Creates `object` (JSON of another project's kind: Kueue's, Karpenter's) through `api`.
pub async fn create_object(
    api: &Api<kube::core::DynamicObject>,
    object: serde_json::Value,
) -> anyhow::Result<()> {
    let object: kube::core::DynamicObject = serde_json::from_value(object)?;
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {}", object.name_any()))?;
    Ok(())
}

/// Creates a namespace for one test.
pub async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = unique_name(prefix);
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(name)
}

/// A client that authenticates as ServiceAccount `namespace/name` with a bound token, the way
/// an in-cluster workload does: what it may do is decided by RBAC alone.
pub async fn service_account_client(
    admin: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Client> {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    accounts
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&account),
        )
        .await
        .with_context(|| format!("creating ServiceAccount {namespace}/{name}"))?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for {namespace}/{name}"))?
        .status
        .and_then(|status| status.token)
        .context("TokenRequest answered without a token")?;

    let mut config = Config::infer().await?;
    config.auth_info = AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Ok(Client::try_from(config)?)
}

/// The API server's refusal of a request: HTTP status and message.
pub fn api_error(error: &kube::Error) -> Option<(u16, &str)> {
    match error {
        kube::Error::Api(status) => Some((status.code, status.message.as_str())),
        _ => None,
    }
}

/// Waits up to `timeout` for a Warning Event with `reason` about the cluster-scoped object
/// `name` (a pool, a node: their Events go to namespace `default`) whose note mentions
/// `mention`.
pub async fn warning_event(
    client: &Client,
    name: &str,
    reason: &str,
    mention: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    warning_event_in(client, "default", name, reason, mention, timeout).await
}

/// [`warning_event`] about an object of `namespace` (Events live in their object's namespace;
/// those about cluster-scoped objects in `default`).
pub async fn warning_event_in(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
    mention: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    eventually(
        &format!("Warning Event {reason} about {name}"),
        timeout,
        || async {
            let list = events.list(&Default::default()).await?;
            Ok(list
                .items
                .iter()
                .any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason)
                        && e.type_.as_deref() == Some("Warning")
                        && e.note.as_deref().is_some_and(|n| n.contains(mention))
                })
                .then_some(()))
        },
    )
    .await
}

/// Polls `check` every 200 ms until it returns `Some`, or fails after `timeout` with `what`
/// and the last reason `check` gave.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => "condition not met".to_owned(),
            Err(error) => format!("{error:#}"),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not within {timeout:?} ({last})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates a node that KWOK manages (annotation, `type=kwok`, the KWOK taint) with extra labels.
pub async fn create_kwok_node(
    client: &Client,
    name: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<k8s_openapi::api::core::v1::Node> {
    use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
    let mut all_labels = std::collections::BTreeMap::from([("type".to_owned(), "kwok".to_owned())]);
    // A hostname is at most 63 characters; a longer node name (Karpenter's) has no such label.
    if fakegpu_api::meta::is_label_value(name) {
        all_labels.insert("kubernetes.io/hostname".to_owned(), name.to_owned());
    }
    all_labels.extend(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(all_labels),
            annotations: Some(std::collections::BTreeMap::from([(
                "kwok.x-k8s.io/node".to_owned(),
                "fake".to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "kwok.x-k8s.io/node".into(),
                value: Some("fake".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating node {name}"))
}

/// Creates a GpuNodePool with this spec (a typed object: the spec must be valid Rust-side too).
pub async fn create_pool(
    client: &Client,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<fakegpu_api::GpuNodePool> {
    let pool: fakegpu_api::GpuNodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "fakegpu.dev/v1alpha1", "kind": "GpuNodePool",
        "metadata": {"name": name}, "spec": spec,
    }))?;
    Api::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .with_context(|| format!("creating GpuNodePool {name}"))
}

/// The state directory of the cluster under test (hack/cluster.sh): logs, pid files.
pub fn cluster_dir() -> PathBuf {
    std::env::var_os("FAKEGPU_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/cluster"))
}

/// Sends `signal` (`TERM`, `KILL`, `STOP`, `CONT`) to the process hack/cluster.sh or
/// hack/operator.sh started as `name` (its pid file under [`cluster_dir`]), and to its process
/// group (the scripts start each in a session of its own, so children go too).
pub fn signal_process(name: &str, signal: &str) -> anyhow::Result<()> {
    let pidfile = cluster_dir().join("run").join(format!("{name}.pid"));
    let pid = std::fs::read_to_string(&pidfile)
        .with_context(|| format!("reading {}", pidfile.display()))?;
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", pid.trim())])
        .status()?;
    anyhow::ensure!(status.success(), "kill -{signal} -{}", pid.trim());
    Ok(())
}

/// The namespace of the running operator's topology ConfigMaps (hack/operator.sh).
pub const OPERATOR_NAMESPACE: &str = "fakegpu-system";

/// The user the operator runs as: the install bundle's ServiceAccount.
pub const OPERATOR_USER: &str = "system:serviceaccount:fakegpu-system:fakegpu-operator";

/// Mutating requests the operator made, from the API server's audit log (hack/cluster.sh
/// records writes only), as `verb resource/name[/subresource]`, in order; leader-election
/// lease renewals left out.
pub fn operator_writes() -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(cluster_dir().join("logs/audit.log"))
        .context("reading the API server's audit log")?;
    Ok(text
        .lines()
        .filter_map(audit::implementation_write)
        .filter(|write| write.user == OPERATOR_USER)
        .map(|write| write.target())
        .collect())
}

/// Runs a hack/ script with the test's environment; fails on a non-zero exit.
pub fn hack(script: &str, args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new(repo_root().join("hack").join(script))
        .args(args)
        .status()
        .with_context(|| format!("running hack/{script}"))?;
    if !status.success() {
        bail!("hack/{script} {} failed: {status}", args.join(" "));
    }
    Ok(())
}

/// The devices of `node`'s `gpu.nvidia.com` ResourceSlices (the operator's for a KWOK node,
/// the node agent's for a node with a kubelet) that carry NVIDIA's XID taint: (device, "value
/// effect").
pub async fn xid_taints(client: &Client, node: &str) -> anyhow::Result<Vec<(String, String)>> {
    use fakegpu_model::names::resource::{GPU_DRIVER, XID_TAINT};
    let slices: Api<k8s_openapi::api::resource::v1::ResourceSlice> = Api::all(client.clone());
    Ok(slices
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.spec.driver == GPU_DRIVER && s.spec.node_name.as_deref() == Some(node))
        .flat_map(|s| s.spec.devices.unwrap_or_default())
        .flat_map(|device| {
            let name = device.name;
            device
                .taints
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.key == XID_TAINT)
                .map(move |t| {
                    let value = t.value.unwrap_or_default();
                    (name.clone(), format!("{value} {}", t.effect))
                })
        })
        .collect())
}

/// A node's topology ConfigMap and its parsed document, if the operator wrote one.
pub async fn topology_of(
    client: &Client,
    node: &str,
) -> anyhow::Result<
    Option<(
        k8s_openapi::api::core::v1::ConfigMap,
        fakegpu_model::topology::NodeTopology,
    )>,
> {
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let Some(cm) = configmaps
        .get_opt(&fakegpu_model::topology::NodeTopology::configmap_name(node))
        .await?
    else {
        return Ok(None);
    };
    let document = fakegpu_model::topology::NodeTopology::from_configmap_data(cm.data.as_ref())?;
    Ok(Some((cm, document)))
}

/// (GPU UUID, pod) for every GPU the node's topology document records as held, sorted; `None`
/// while the node has no (readable) document.
pub async fn gpu_holders(
    client: &Client,
    node: &str,
) -> anyhow::Result<Option<Vec<(String, String)>>> {
    let Some((_, document)) = topology_of(client, node).await.ok().flatten() else {
        return Ok(None);
    };
    let mut held: Vec<(String, String)> = document
        .gpus
        .iter()
        .filter(|g| !g.status.allocated_by.pod.is_empty())
        .map(|g| (g.id.clone(), g.status.allocated_by.pod.clone()))
        .collect();
    held.sort();
    Ok(Some(held))
}

/// Puts `node` into `pool` by the pool label (or, with `None`, into none).
pub async fn set_node_pool(client: &Client, node: &str, pool: Option<&str>) -> anyhow::Result<()> {
    label_node(client, node, fakegpu_model::names::label::NODE_POOL, pool).await
}

/// Sets label `key` of `node` to `value`, or removes it with `None`, as a user's `kubectl
/// label` does (a field manager other than fakegpu's).
pub async fn label_node(
    client: &Client,
    node: &str,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .with_context(|| format!("labelling node {node} {key}={value:?}"))?;
    Ok(())
}

/// Sets annotation `key` of `node` to `value`, or removes it with `None`.
pub async fn annotate_node(
    client: &Client,
    node: &str,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {key: value}}
            })),
        )
        .await
        .with_context(|| format!("annotating node {node}"))?;
    Ok(())
}

/// Waits until the operator has labelled `node` for `pool` (`fakegpu.dev/pool`).
pub async fn labelled_for(
    client: &Client,
    node: &str,
    pool: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    eventually(&format!("{node} labelled for {pool}"), timeout, || async {
        let labels = nodes.get(node).await?.metadata.labels.unwrap_or_default();
        Ok((labels
            .get(fakegpu_model::names::fakegpu::POOL_LABEL)
            .map(String::as_str)
            == Some(pool))
        .then_some(()))
    })
    .await
}

/// Creates a pod that tolerates the KWOK taint, from the given spec fields (merged over one
/// container named `main`).
pub async fn create_kwok_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    create_kwok_pod_with(client, namespace, name, serde_json::json!({}), spec).await
}

/// [`create_kwok_pod`] with labels and annotations (`metadata` fields besides name and
/// namespace).
pub async fn create_kwok_pod_with(
    client: &Client,
    namespace: &str,
    name: &str,
    metadata: serde_json::Value,
    spec: serde_json::Value,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    let mut meta = metadata;
    meta["name"] = name.into();
    meta["namespace"] = namespace.into();
    let mut body = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta,
        "spec": {
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    });
    if let (Some(target), Some(fields)) = (body["spec"].as_object_mut(), spec.as_object()) {
        for (key, value) in fields {
            target.insert(key.clone(), value.clone());
        }
    }
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(body)?;
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {namespace}/{name}"))
}

/// Pod annotation read by the local cluster's KWOK Stages (hack/kwok, after KWOK's general
/// Stages): how long a Job's pod runs before it succeeds, a Go duration (`15s`). Without it a
/// Job's pod succeeds as soon as it runs.
pub const KWOK_RUN_FOR: &str = "pod-complete.stage.kwok.x-k8s.io/delay";

/// Creates a batch/v1 Job of one pod for KWOK nodes, with `labels` (a queue's, say): its pod
/// template has `metadata` (labels, annotations), KWOK's toleration and one container, with
/// `spec`'s fields over those.
pub async fn create_kwok_job(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: serde_json::Value,
    metadata: serde_json::Value,
    spec: serde_json::Value,
) -> anyhow::Result<k8s_openapi::api::batch::v1::Job> {
    let mut pod_spec = serde_json::json!({
        "restartPolicy": "Never",
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "main", "image": "busybox"}],
    });
    if let (Some(target), Some(fields)) = (pod_spec.as_object_mut(), spec.as_object()) {
        for (key, value) in fields {
            target.insert(key.clone(), value.clone());
        }
    }
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"backoffLimit": 0, "template": {"metadata": metadata, "spec": pod_spec}},
    }))?;
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &job)
        .await
        .with_context(|| format!("creating Job {namespace}/{name}"))
}

/// Waits until a pod runs and returns it (with the node it was bound to).
pub async fn running_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    eventually(
        &format!("pod {namespace}/{name} Running"),
        timeout,
        || async {
            let pod = pods.get(name).await?;
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            Ok((phase == Some("Running")).then_some(pod))
        },
    )
    .await
}

/// Where the operator that hack/operator.sh started serves HTTP.
pub fn operator_address() -> String {
    std::env::var("FAKEGPU_HTTP_ADDR").unwrap_or_else(|_| "127.0.0.1:18080".into())
}

/// GET `http://<address><path>` (with curl, which every test machine has); fails on an error
/// status.
pub fn http_get(address: &str, path: &str) -> anyhow::Result<String> {
    let output = Command::new("curl")
        // An address nobody answers must not hang a poll.
        .args([
            "-sf",
            "--max-time",
            "10",
            &format!("http://{address}{path}"),
        ])
        .output()?;
    if !output.status.success() {
        bail!("GET {address}{path} failed: {:?}", output.status);
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The value of an unlabelled series in a Prometheus text exposition.
pub fn metric_value(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

/// (CPU seconds so far, peak RSS in MiB) of a process.
pub fn process_usage(pid: u32) -> anyhow::Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11).context("utime")?.parse::<f64>()?
        + fields.get(12).context("stime")?.parse::<f64>()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let peak_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .context("VmHWM")?
        .parse()?;
    // The kernel's USER_HZ is 100 on every Linux this runs on.
    Ok((ticks / 100.0, peak_kib / 1024.0))
}
