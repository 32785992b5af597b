//! KWOK GPU nodes with the real scheduler: the operator publishes capacity and ResourceSlices,
//! pods asking for `nvidia.com/gpu` or for DRA claims land on pool nodes and run, and the
//! operator records which pod holds which GPU.

use std::time::Duration;

use anyhow::{Context, ensure};
use fakegpu_api::GpuNodePool;
use fakegpu_e2e::{
    Cleanup, KWOK_RUN_FOR, admin_client, create_kwok_job, create_kwok_node, create_kwok_pod,
    create_kwok_pod_with, create_namespace, create_pool, eventually, install_crds, kwok_scenario,
    label_node, running_pod, set_node_pool, topology_of, unique_name,
};
use fakegpu_model::{
    names::{annotation, label, pod_group},
    topology::NodeTopology,
};
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    core::{ApiResource, DynamicObject, GroupVersionKind},
};
use serde_json::json;

/// Convergence bound for the operator and the scheduler; generous for a loaded CI machine.
const CONVERGE: Duration = Duration::from_secs(30);

fn gpu_capacity(node: &Node) -> (Option<String>, Option<String>) {
    let status = node.status.as_ref();
    let get = |map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >| {
        map.and_then(|m| m.get("nvidia.com/gpu"))
            .map(|q| q.0.clone())
    };
    (
        get(status.and_then(|s| s.capacity.as_ref())),
        get(status.and_then(|s| s.allocatable.as_ref())),
    )
}

fn has_fractioning(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "gpu-fractioning.nvidia.com/Ready" && c.status == "True")
        })
}

/// Waits until the node's topology document satisfies `check`.
async fn topology_where(
    client: &Client,
    node: &str,
    what: &str,
    check: impl Fn(&NodeTopology) -> bool,
) -> anyhow::Result<NodeTopology> {
    eventually(&format!("{node}: {what}"), CONVERGE, || async {
        Ok(topology_of(client, node)
            .await?
            .map(|(_, document)| document)
            .filter(|d| check(d)))
    })
    .await
}

fn holders(document: &NodeTopology) -> Vec<String> {
    document
        .gpus
        .iter()
        .map(|g| g.status.allocated_by.pod.clone())
        .collect()
}

async fn allocated_in_status(client: &Client, pool: &str, allocated: u32) -> anyhow::Result<()> {
    let pools: Api<GpuNodePool> = Api::all(client.clone());
    eventually(
        &format!("pool {pool} counts {allocated} allocated GPUs"),
        CONVERGE,
        || async {
            let status = pools.get(pool).await?.status.unwrap_or_default();
            Ok((status.allocated_gpus == allocated).then_some(()))
        },
    )
    .await
}

/// Nodes that join a pool as they are created race KWOK, which gives a node its default
/// allocatable (cpu, memory, pods) only while it has none: the GPUs must land beside those
/// defaults, not in their place, or the scheduler finds room for no pod.
#[tokio::test]
async fn nodes_created_into_a_pool_keep_room_for_pods() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("join");
    let names: Vec<String> = (0..6).map(|i| format!("{pool}-node-{i}")).collect();
    let cleanup = names
        .iter()
        .fold(Cleanup::new(&client).pool(&pool), |c, n| c.node(n));
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "t4", "count": 1}}),
        )
        .await?;
        let labels = [(label::NODE_POOL, pool.as_str())];
        futures::future::try_join_all(names.iter().map(|n| create_kwok_node(&client, n, &labels)))
            .await?;
        let nodes: Api<Node> = Api::all(client.clone());
        for name in &names {
            let node = eventually(&format!("{name} has its GPU"), CONVERGE, || async {
                let n = nodes.get(name).await?;
                Ok((gpu_capacity(&n).1.as_deref() == Some("1")).then_some(n))
            })
            .await?;
            let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
            ensure!(
                allocatable.contains_key("pods"),
                "{name}: allocatable without pods: {allocatable:?}"
            );
        }
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// A node whose name is longer than a label value may be (Karpenter's KWOK nodes, some clouds'
/// nodes: up to 253 characters) gets its GPUs, its topology document and pods holding its GPUs,
/// like any other: its topology ConfigMap goes without the `node-name` label, which the API
/// server would refuse, and is read by its name.
#[tokio::test]
async fn a_node_with_a_name_longer_than_a_label_value_gets_its_gpus() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("long");
    let node = format!("{pool}-{}", "n".repeat(70));
    let namespace = create_namespace(&client, "long").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&pool)
        .node(&node)
        .namespace(&namespace);
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "t4", "count": 2}}),
        )
        .await?;
        create_kwok_node(&client, &node, &[(label::NODE_POOL, pool.as_str())]).await?;
        let nodes: Api<Node> = Api::all(client.clone());
        eventually(&format!("{node} has its GPUs"), CONVERGE, || async {
            let n = nodes.get(&node).await?;
            Ok((gpu_capacity(&n).1.as_deref() == Some("2")).then_some(()))
        })
        .await?;
        create_kwok_pod(
            &client,
            &namespace,
            "holder",
            json!({"nodeName": node, "containers": [{"name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        )
        .await?;
        let held = eventually("the pod recorded on one GPU", CONVERGE, || async {
            let Some((cm, document)) = topology_of(&client, &node).await? else {
                return Ok(None);
            };
            let holders: Vec<_> = document
                .gpus
                .iter()
                .filter(|g| g.status.allocated_by.pod == "holder")
                .collect();
            Ok((holders.len() == 1).then_some(cm))
        })
        .await?;
        ensure!(
            !held.labels().contains_key("node-name"),
            "the ConfigMap carries a node-name label the API server should refuse: {:?}",
            held.labels()
        );
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// Under the local cluster's KWOK Stages a Job's pod annotated with how long it runs holds its
/// GPU that long, then succeeds and frees it; one without the annotation succeeds at once, as
/// under KWOK's fast Stages. Quota systems (Kueue) need work that holds its GPUs a while.
#[tokio::test]
async fn a_job_s_pod_runs_for_the_time_it_states_then_frees_its_gpu() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("runfor").await?;
    let result = async {
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4", "count": 1}})).await?;
        let nodes: Api<Node> = Api::all(client.clone());
        eventually("KWOK node has its GPU", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            Ok((gpu_capacity(&n).1.as_deref() == Some("1")).then_some(()))
        })
        .await?;
        let spec = json!({"nodeSelector": {"fakegpu.dev/pool": pool}, "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
        let jobs: Api<k8s_openapi::api::batch::v1::Job> =
            Api::namespaced(client.clone(), &namespace);
        let succeeded = |name: &'static str| {
            let jobs = jobs.clone();
            async move {
                let job = jobs.get(name).await?;
                anyhow::Ok(job.status.and_then(|s| s.succeeded) == Some(1))
            }
        };

        create_kwok_job(&client, &namespace, "quick", json!({}), json!({}), spec.clone()).await?;
        eventually("Job quick succeeded", CONVERGE, || async {
            Ok(succeeded("quick").await?.then_some(()))
        })
        .await?;

        let run_for = Duration::from_secs(15);
        let created = std::time::Instant::now();
        create_kwok_job(
            &client,
            &namespace,
            "steady",
            json!({}),
            json!({"annotations": {KWOK_RUN_FOR: "15s"}}),
            spec,
        )
        .await?;
        topology_where(&client, &node, "the GPU held by Job steady's pod", |d| {
            holders(d)[0].starts_with("steady-")
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(8).saturating_sub(created.elapsed())).await;
        ensure!(
            !succeeded("steady").await?,
            "Job steady succeeded within 8 s of its 15"
        );
        let document = topology_of(&client, &node).await?.context("topology")?.1;
        ensure!(
            holders(&document)[0].starts_with("steady-"),
            "the GPU was freed while Job steady ran: {:?}",
            holders(&document)
        );
        eventually("Job steady succeeded", CONVERGE, || async {
            Ok(succeeded("steady").await?.then_some(()))
        })
        .await?;
        ensure!(
            created.elapsed() >= run_for,
            "Job steady succeeded {:?} after it was created, before its 15 s",
            created.elapsed()
        );
        topology_where(&client, &node, "the GPU free again", |d| holders(d) == [""]).await?;
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn extended_resource_pods_schedule_run_and_are_tracked() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("ext").await?;
    let result = extended_resources(&client, &pool, &node, &namespace).await;
    cleanup.after(result).await
}

async fn extended_resources(
    client: &Client,
    pool: &str,
    node: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    create_pool(client, pool, json!({"gpu": {"profile": "t4", "count": 2}})).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("KWOK node has 2 allocatable GPUs", CONVERGE, || async {
        let n = nodes.get(node).await?;
        let published = gpu_capacity(&n) == (Some("2".into()), Some("2".into()));
        Ok((published && has_fractioning(&n)).then_some(()))
    })
    .await?;

    let on_pool = json!({"fakegpu.dev/pool": pool});
    let gpus = |count: u32| {
        json!([{"name": "main", "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": count.to_string()}}}])
    };
    create_kwok_pod(
        client,
        namespace,
        "one",
        json!({"nodeSelector": on_pool, "containers": gpus(1)}),
    )
    .await?;
    let pod = running_pod(client, namespace, "one", CONVERGE).await?;
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    ensure!(bound == Some(node), "pod bound to {bound:?}, not {node}");
    let document = topology_where(client, node, "GPU 0 held by pod one", |d| {
        holders(d) == ["one", ""]
    })
    .await?;
    let gpu0 = &document.gpus[0].status;
    ensure!(gpu0.allocated_by.namespace == namespace && gpu0.allocated_by.container == "main");
    let uid = pod.uid().context("pod uid")?;
    ensure!(
        gpu0.pod_gpu_usage_status.get(&uid).map(|u| u.fb_used) == Some(document.gpu_memory),
        "usage not recorded under the pod's UID: {gpu0:?}"
    );
    allocated_in_status(client, pool, 1).await?;

    // More than the node has left: the scheduler refuses with its own reason, nothing is
    // over-allocated.
    create_kwok_pod(
        client,
        namespace,
        "greedy",
        json!({"nodeSelector": on_pool, "containers": gpus(2)}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let reason = eventually("greedy pod unschedulable", CONVERGE, || async {
        let pod = pods.get("greedy").await?;
        let condition = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False");
        Ok(condition.and_then(|c| c.message))
    })
    .await?;
    ensure!(reason.contains("Insufficient nvidia.com/gpu"), "{reason}");
    let document = topology_of(client, node).await?.context("topology")?.1;
    ensure!(
        holders(&document) == ["one", ""],
        "{:?}",
        holders(&document)
    );

    // The first pod goes: its GPU is freed and the waiting pod fits.
    pods.delete("one", &DeleteParams::default().grace_period(0))
        .await?;
    running_pod(client, namespace, "greedy", CONVERGE).await?;
    topology_where(client, node, "both GPUs held by greedy", |d| {
        holders(d) == ["greedy", "greedy"]
    })
    .await?;
    allocated_in_status(client, pool, 2).await?;

    // Scale down: capacity follows; deleting the pool takes capacity and condition away.
    let pools: Api<GpuNodePool> = Api::all(client.clone());
    pools
        .patch(
            pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpu": {"count": 1}}})),
        )
        .await?;
    eventually("capacity down to 1", CONVERGE, || async {
        let n = nodes.get(node).await?;
        Ok((gpu_capacity(&n) == (Some("1".into()), Some("1".into()))).then_some(()))
    })
    .await?;
    ensure!(
        pods.get("greedy")
            .await?
            .annotations()
            .contains_key(annotation::ASSIGNED_GPUS),
        "the running pod's GPUs are not recorded on it"
    );
    pools.delete(pool, &DeleteParams::default()).await?;
    eventually("capacity and condition removed", CONVERGE, || async {
        let n = nodes.get(node).await?;
        Ok((gpu_capacity(&n) == (None, None) && !has_fractioning(&n)).then_some(()))
    })
    .await?;
    // The GPUs went with the pool: the pod no longer says it holds any.
    eventually("the pod's recorded GPUs removed", CONVERGE, || async {
        let pod = pods.get("greedy").await?;
        Ok((!pod.annotations().contains_key(annotation::ASSIGNED_GPUS)).then_some(()))
    })
    .await
}

fn slices(client: &Client) -> Api<ResourceSlice> {
    Api::all(client.clone())
}

/// The attribute values (string or version) of the slice's first device.
fn first_device_attribute(slice: &ResourceSlice, key: &str) -> Option<String> {
    let device = slice.spec.devices.as_ref()?.first()?;
    let attribute = device.attributes.as_ref()?.get(key)?;
    attribute.string.clone().or(attribute.version.clone())
}

async fn create_claim_template(
    client: &Client,
    namespace: &str,
    name: &str,
    exactly: serde_json::Value,
) -> anyhow::Result<()> {
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &template)
        .await?;
    Ok(())
}

/// A pod using one claim made from `template`.
async fn claim_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    template: &str,
    node_selector: serde_json::Value,
) -> anyhow::Result<Pod> {
    create_kwok_pod(
        client,
        namespace,
        name,
        json!({
            "nodeSelector": node_selector,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
        }),
    )
    .await?;
    running_pod(client, namespace, name, CONVERGE).await
}

/// The claim a pod's template made, with its allocation.
async fn allocated_claim(
    client: &Client,
    namespace: &str,
    pod: &Pod,
) -> anyhow::Result<(String, String)> {
    let name = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .and_then(|s| s.first())
        .and_then(|s| s.resource_claim_name.clone())
        .context("pod has no generated claim")?;
    let claim = Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .get(&name)
        .await?;
    let result = claim
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .and_then(|r| r.into_iter().next())
        .context("claim not allocated")?;
    ensure!(result.driver == "gpu.nvidia.com", "{result:?}");
    Ok((result.pool, result.device))
}

/// KAI scheduler's test clusters tell device-plugin nodes and DRA nodes of one pool apart by
/// the GPU Operator's deploy labels: each node offers its GPUs the one way its labels say,
/// never twice. A node labelled `false` for the device plugin turns to DRA while the pool
/// runs, and without labels the pool decides again.
#[tokio::test]
async fn deploy_labels_tell_device_plugin_nodes_from_dra_nodes() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("kai");
    let [plugin, dra, both] = ["plugin", "dra", "both"].map(|n| format!("{pool}-{n}"));
    let in_pool = (label::NODE_POOL, pool.as_str());
    create_kwok_node(
        &client,
        &plugin,
        &[in_pool, (label::DEPLOY_DEVICE_PLUGIN, "true")],
    )
    .await?;
    create_kwok_node(
        &client,
        &dra,
        &[in_pool, (label::DEPLOY_DRA_PLUGIN, "true")],
    )
    .await?;
    create_kwok_node(&client, &both, &[in_pool]).await?;
    let cleanup = Cleanup::new(&client)
        .pool(&pool)
        .node(&plugin)
        .node(&dra)
        .node(&both);
    let result = deploy_labels(&client, &pool, [&plugin, &dra, &both]).await;
    cleanup.after(result).await
}

async fn deploy_labels(
    client: &Client,
    pool: &str,
    [plugin, dra, both]: [&str; 3],
) -> anyhow::Result<()> {
    create_pool(
        client,
        pool,
        json!({"gpu": {"profile": "h100", "count": 2},
            "interfaces": {"devicePlugin": true, "dra": true}}),
    )
    .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let pools: Api<GpuNodePool> = Api::all(client.clone());
    // (allocatable nvidia.com/gpu, devices in the node's gpu.nvidia.com slice)
    let offers = |node: &str| {
        let nodes = nodes.clone();
        let node = node.to_owned();
        async move {
            let allocatable = gpu_capacity(&nodes.get(&node).await?).1;
            let slice = slices(client).get_opt(&format!("kwok-{node}-gpu")).await?;
            let devices = slice.and_then(|s| s.spec.devices).map(|d| d.len());
            anyhow::Ok((allocatable, devices))
        }
    };
    let serving = |expected: [u32; 3]| {
        let pools = pools.clone();
        async move {
            eventually(
                &format!("pool {pool} counts {expected:?} nodes serving each interface"),
                CONVERGE,
                || async {
                    let counts = pools.get(pool).await?.status.and_then(|s| s.serving_nodes);
                    let counts = counts.map(|c| [c.device_plugin, c.dra, c.compute_domains]);
                    Ok((counts == Some(expected)).then_some(()))
                },
            )
            .await
        }
    };
    let gpus = Some("2".to_owned());
    for (node, expected) in [
        (plugin, (gpus.clone(), None)),
        (dra, (None, Some(2))),
        (both, (gpus.clone(), Some(2))),
    ] {
        eventually(
            &format!("{node} offers (nvidia.com/gpu, slice devices) = {expected:?}"),
            CONVERGE,
            || async { Ok((offers(node).await? == expected).then_some(())) },
        )
        .await?;
    }
    serving([2, 2, 0]).await?;

    // `false` turns the device plugin off; with no DRA label the node serves DRA.
    let label_plugin = |value| label_node(client, plugin, label::DEPLOY_DEVICE_PLUGIN, value);
    label_plugin(Some("false")).await?;
    eventually(&format!("{plugin} turns to DRA"), CONVERGE, || async {
        Ok((offers(plugin).await? == (None, Some(2))).then_some(()))
    })
    .await?;
    serving([1, 3, 0]).await?;
    let labels = nodes.get(plugin).await?.labels().clone();
    ensure!(
        labels.get(label::DEPLOY_DEVICE_PLUGIN).map(String::as_str) == Some("false"),
        "the user's label was changed: {labels:?}"
    );

    // The label removed: the pool decides again.
    label_plugin(None).await?;
    eventually(&format!("{plugin} serves both again"), CONVERGE, || async {
        Ok((offers(plugin).await? == (gpus.clone(), Some(2))).then_some(()))
    })
    .await?;
    serving([2, 3, 0]).await
}

#[tokio::test]
async fn dra_claims_are_allocated_from_the_operators_slices() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let l4 = unique_name("dra-l4");
    let h100 = unique_name("dra-h100");
    let (l4_node, h100_node) = (format!("{l4}-node"), format!("{h100}-node"));
    create_kwok_node(&client, &l4_node, &[(label::NODE_POOL, &l4)]).await?;
    create_kwok_node(&client, &h100_node, &[(label::NODE_POOL, &h100)]).await?;
    let namespace = create_namespace(&client, "dra").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&l4)
        .pool(&h100)
        .node(&l4_node)
        .node(&h100_node)
        .namespace(&namespace);
    let result = dra(&client, [&l4, &h100], [&l4_node, &h100_node], &namespace).await;
    cleanup.after(result).await
}

async fn dra(
    client: &Client,
    [l4, h100]: [&str; 2],
    [l4_node, h100_node]: [&str; 2],
    namespace: &str,
) -> anyhow::Result<()> {
    let dra_only = json!({"devicePlugin": false, "dra": true});
    create_pool(
        client,
        l4,
        json!({"gpu": {"profile": "l4", "count": 2}, "interfaces": dra_only}),
    )
    .await?;
    create_pool(
        client,
        h100,
        json!({"gpu": {"profile": "h100", "count": 2}, "interfaces": dra_only}),
    )
    .await?;
    let slice_name = |node: &str| format!("kwok-{node}-gpu");
    let h100_slice = eventually("H100 node's slice", CONVERGE, || async {
        Ok(slices(client).get_opt(&slice_name(h100_node)).await?)
    })
    .await?;
    ensure!(h100_slice.spec.node_name.as_deref() == Some(h100_node));
    ensure!(h100_slice.spec.pool.name == h100_node);
    ensure!(h100_slice.spec.devices.as_ref().map(Vec::len) == Some(2));
    ensure!(
        first_device_attribute(&h100_slice, "productName").as_deref()
            == Some("NVIDIA H100 80GB HBM3")
    );
    ensure!(first_device_attribute(&h100_slice, "architecture").as_deref() == Some("Hopper"));
    ensure!(
        first_device_attribute(&h100_slice, "cudaComputeCapability").as_deref() == Some("9.0.0")
    );
    let nodes: Api<Node> = Api::all(client.clone());
    ensure!(
        gpu_capacity(&nodes.get(h100_node).await?) == (None, None),
        "a DRA-only pool must not publish the extended resource"
    );

    // The seed's template: just the DeviceClass, pinned to the L4 pool's nodes.
    create_claim_template(
        client,
        namespace,
        "any-gpu",
        json!({"deviceClassName": "gpu.nvidia.com"}),
    )
    .await?;
    let pod = claim_pod(
        client,
        namespace,
        "plain",
        "any-gpu",
        json!({"fakegpu.dev/pool": l4}),
    )
    .await?;
    let (pool, device) = allocated_claim(client, namespace, &pod).await?;
    ensure!(pool == l4_node, "allocated from pool {pool}");
    let index: usize = device.trim_start_matches("gpu-").parse()?;
    let document = topology_where(client, l4_node, "claimed GPU recorded", |d| {
        d.gpus
            .get(index)
            .is_some_and(|g| g.status.allocated_by.pod == "plain")
    })
    .await?;
    ensure!(document.gpus.iter().filter(|g| g.status.in_use()).count() == 1);
    allocated_in_status(client, l4, 1).await?;

    // A CEL selector written for real GPUs picks the H100 pool, with no node selector at all.
    create_claim_template(
        client,
        namespace,
        "big-hopper",
        json!({"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression":
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3' && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('79Gi')) >= 0 && device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))"}}]}),
    )
    .await?;
    let pod = claim_pod(client, namespace, "hopper", "big-hopper", json!({})).await?;
    let (pool, _) = allocated_claim(client, namespace, &pod).await?;
    ensure!(
        pool == h100_node,
        "CEL selector allocated from {pool}, not the H100 node"
    );
    ensure!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(h100_node),
        "pod not on the H100 node"
    );

    // Scale down: the slice loses a device and its generation rises; the pool's deletion
    // removes the slice.
    let pools: Api<GpuNodePool> = Api::all(client.clone());
    pools
        .patch(
            h100,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpu": {"count": 1}}})),
        )
        .await?;
    eventually("H100 slice shrinks", CONVERGE, || async {
        let slice = slices(client).get(&slice_name(h100_node)).await?;
        let devices = slice.spec.devices.as_ref().map(Vec::len);
        Ok(
            (devices == Some(1) && slice.spec.pool.generation > h100_slice.spec.pool.generation)
                .then_some(()),
        )
    })
    .await?;
    pools.delete(h100, &DeleteParams::default()).await?;
    eventually("H100 slice removed", CONVERGE, || async {
        Ok(slices(client)
            .get_opt(&slice_name(h100_node))
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_fractioning_condition_written_by_another_controller_is_left_alone() -> anyhow::Result<()>
{
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("frac");
    let node = format!("{pool}-node");
    create_kwok_node(&client, &node, &[]).await?;
    let cleanup = Cleanup::new(&client).pool(&pool).node(&node);
    let result = async {
        let nodes: Api<Node> = Api::all(client.clone());
        // Another controller (its own field manager) owns the condition type first.
        let theirs = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
            "status": {"conditions": [{"type": "gpu-fractioning.nvidia.com/Ready", "status": "False",
                "reason": "OwnedByRunai", "message": "set by another controller",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        nodes
            .patch_status(&node, &PatchParams::apply("someone-else"), &Patch::Apply(&theirs))
            .await?;
        set_node_pool(&client, &node, Some(pool.as_str())).await?;
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4", "count": 1}})).await?;
        eventually("capacity published", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            Ok((gpu_capacity(&n).1.as_deref() == Some("1")).then_some(n))
        })
        .await?;
        // Give the operator a moment more; the condition must still be the other one's.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = nodes.get(&node).await?;
        let condition = n
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "gpu-fractioning.nvidia.com/Ready")
            .context("condition gone")?;
        ensure!(
            condition.status == "False" && condition.reason.as_deref() == Some("OwnedByRunai"),
            "{condition:?}"
        );
        anyhow::Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// Run:ai's / KAI's PodGroup API, as far as the operator reads it (`spec.priorityClassName`);
/// installed by the test when the cluster lacks it.
async fn install_pod_group_crd(client: &Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::runtime::wait::{await_condition, conditions};
    let name = format!("{}.{}", pod_group::PLURAL, pod_group::GROUP);
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": pod_group::GROUP, "scope": "Namespaced",
            "names": {"kind": pod_group::KIND, "plural": pod_group::PLURAL, "singular": "podgroup", "listKind": "PodGroupList"},
            "versions": [{"name": pod_group::VERSION, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        other => {
            other?;
        }
    }
    tokio::time::timeout(
        CONVERGE,
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await??;
    Ok(())
}

/// Pods without a `workloadKind` label take their type from their PodGroup's priority class:
/// an `inference` group's pod takes its utilization from its request rate, a `train` group's
/// runs at 80-100 %.
#[tokio::test]
async fn pod_groups_tell_the_workload_type() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("pg").await?;
    install_pod_group_crd(&client).await?;
    let result = async {
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4", "count": 2}})).await?;
        let gvk = GroupVersionKind::gvk(pod_group::GROUP, pod_group::VERSION, pod_group::KIND);
        let resource = ApiResource::from_gvk_with_plural(&gvk, pod_group::PLURAL);
        let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let mut uids = Vec::new();
        for (group, class) in [("serve", "inference"), ("learn", "train")] {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{}/{}", pod_group::GROUP, pod_group::VERSION),
                "kind": pod_group::KIND,
                "metadata": {"name": group},
                "spec": {"minMember": 1, "priorityClassName": class},
            }))?;
            groups.create(&PostParams::default(), &object).await?;
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{group}-0"),
                    "annotations": {annotation::POD_GROUP_NAME: group}},
                "spec": {
                    "nodeSelector": {"fakegpu.dev/pool": pool},
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
            }))?;
            let pod = pods.create(&PostParams::default(), &pod).await?;
            uids.push(pod.uid().context("pod uid")?);
        }
        topology_where(
            &client,
            &node,
            "usage typed by the PodGroups",
            |document| {
                let usage = |uid: &String| {
                    document
                        .gpus
                        .iter()
                        .find_map(|g| g.status.pod_gpu_usage_status.get(uid))
                };
                let serve = usage(&uids[0]).is_some_and(|u| u.use_knative_utilization);
                let learn = usage(&uids[1]).is_some_and(|u| {
                    !u.use_knative_utilization && (u.utilization.min, u.utilization.max) == (80, 100)
                });
                serve && learn
            },
        )
        .await?;
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// GPU sharing as Run:ai and KAI do it: a reservation pod in `kai-resource-reservation` (with
/// `runtimeClassName: nvidia`, which the bundle's RuntimeClass makes admissible) holds a whole GPU, the operator tells it which (annotation `run.ai/reserve_for_gpu_index`, what the
/// scheduler waits for), and a pod of the same `runai-gpu-group` asking for no GPU has its half
/// share recorded on that GPU. A pod sharing two GPUs, as KAI labels it (one
/// `runai-gpu-group/<group>` per GPU), has its half recorded on each.
#[tokio::test]
async fn gpu_sharing_pods_are_tracked_on_their_reservation_pods_gpu() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("share").await?;
    let reservations = "kai-resource-reservation";
    let reservation = format!("{pool}-reservation");
    let second_group = format!("{pool}-b");
    let second_reservation = format!("{pool}-reservation-b");
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "h100", "count": 3}}),
        )
        .await?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        if namespaces.get_opt(reservations).await?.is_none() {
            let body = serde_json::from_value(json!({"metadata": {"name": reservations}}))?;
            // Another test run may have just created it.
            let _ = namespaces.create(&PostParams::default(), &body).await;
        }
        let on_node = json!({"kubernetes.io/hostname": node});
        let group = json!({"labels": {"runai-gpu-group": pool}});
        // Another pod takes GPU 0 first, so the reservation's GPU is not simply the first.
        create_kwok_pod(
            &client,
            &namespace,
            "whole",
            json!({"nodeSelector": on_node, "containers": [{"name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        )
        .await?;
        topology_where(&client, &node, "GPU 0 held", |d| {
            holders(d) == ["whole", "", ""]
        })
        .await?;
        // As KAI writes them, with the `nvidia` RuntimeClass the bundle provides.
        create_kwok_pod_with(
            &client,
            reservations,
            &reservation,
            group.clone(),
            json!({"nodeSelector": on_node, "runtimeClassName": "nvidia",
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), reservations);
        let announced = eventually("the reservation pod told its GPU", CONVERGE, || async {
            let pod = pods.get(&reservation).await?;
            Ok(pod
                .annotations()
                .get("run.ai/reserve_for_gpu_index")
                .cloned())
        })
        .await?;
        let mut sharer_metadata = group.clone();
        sharer_metadata["annotations"] =
            json!({"gpu-fraction": "0.5", "run.ai/simulated-gpu-utilization": "40"});
        create_kwok_pod_with(
            &client,
            &namespace,
            "half",
            sharer_metadata,
            json!({"nodeSelector": on_node}),
        )
        .await?;
        let uid = running_pod(&client, &namespace, "half", CONVERGE)
            .await?
            .uid()
            .context("uid")?;
        let document = topology_where(&client, &node, "the share on the reserved GPU", |d| {
            d.gpus[1].status.pod_gpu_usage_status.contains_key(&uid)
        })
        .await?;
        let gpu = &document.gpus[1];
        ensure!(
            gpu.id == announced,
            "announced {announced}, reserved GPU is {}",
            gpu.id
        );
        ensure!(
            gpu.status.allocated_by.pod == reservation,
            "holder {:?}",
            gpu.status.allocated_by
        );
        let usage: Vec<_> = gpu.status.pod_gpu_usage_status.iter().collect();
        ensure!(
            usage.len() == 1,
            "the reservation pod uses nothing itself: {usage:?}"
        );
        let share = &gpu.status.pod_gpu_usage_status[&uid];
        ensure!(
            share.fb_used == document.gpu_memory / 2 && share.utilization.max == 40,
            "share {share:?}"
        );
        // The sharer goes: its share goes, the reservation keeps the GPU.
        Api::<Pod>::namespaced(client.clone(), &namespace)
            .delete("half", &DeleteParams::default().grace_period(0))
            .await?;
        topology_where(&client, &node, "the share gone", |d| {
            d.gpus[1].status.pod_gpu_usage_status.is_empty()
                && d.gpus[1].status.allocated_by.pod == reservation
        })
        .await?;

        // KAI's multi-GPU fraction (`gpu-fraction-num-devices: 2`): a reservation pod per GPU
        // group, and the pod labelled once per group, without the plain label.
        create_kwok_pod_with(
            &client,
            reservations,
            &second_reservation,
            json!({"labels": {"runai-gpu-group": second_group}}),
            json!({"nodeSelector": on_node, "runtimeClassName": "nvidia",
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        )
        .await?;
        let mut groups = serde_json::Map::new();
        for group in [pool.as_str(), second_group.as_str()] {
            groups.insert(format!("runai-gpu-group/{group}"), json!(group));
        }
        create_kwok_pod_with(
            &client,
            &namespace,
            "two-halves",
            json!({"labels": groups,
                "annotations": {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}}),
            json!({"nodeSelector": on_node}),
        )
        .await?;
        let uid = running_pod(&client, &namespace, "two-halves", CONVERGE)
            .await?
            .uid()
            .context("uid")?;
        let document = topology_where(&client, &node, "the pod's half on both GPUs", |d| {
            d.gpus[1..]
                .iter()
                .all(|g| g.status.pod_gpu_usage_status.contains_key(&uid))
        })
        .await?;
        ensure!(
            holders(&document) == ["whole", reservation.as_str(), second_reservation.as_str()],
            "holders {:?}",
            holders(&document)
        );
        for gpu in &document.gpus[1..] {
            let share = &gpu.status.pod_gpu_usage_status[&uid];
            ensure!(
                share.fb_used == document.gpu_memory / 2,
                "GPU {}: share {share:?}",
                gpu.index
            );
        }
        Ok(())
    }
    .await;
    for pod in [&reservation, &second_reservation] {
        let _ = Api::<Pod>::namespaced(client.clone(), reservations)
            .delete(pod, &DeleteParams::default().grace_period(0))
            .await;
    }
    cleanup.after(result).await
}

/// A pool serving the device plugin and DRA on one node hands the same GPUs to both: the
/// scheduler counts `nvidia.com/gpu` and claims apart, so a node of 2 GPUs runs a claim's pod
/// and a pod asking for 2 `nvidia.com/gpu`. The node says so in a Warning Event, and the pool
/// in its `Overbooked` condition until the pod goes.
#[tokio::test]
async fn device_plugin_and_dra_demand_beyond_the_gpus_is_an_event_on_the_node() -> anyhow::Result<()>
{
    let (client, pool, node, namespace, cleanup) = kwok_scenario("overbook").await?;
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "l4", "count": 2},
                "interfaces": {"devicePlugin": true, "dra": true}}),
        )
        .await?;
        let here = json!({"kubernetes.io/hostname": node});
        create_claim_template(
            &client,
            &namespace,
            "one",
            json!({"deviceClassName": "gpu.nvidia.com"}),
        )
        .await?;
        claim_pod(&client, &namespace, "claimant", "one", here.clone()).await?;
        create_kwok_pod(
            &client,
            &namespace,
            "greedy",
            json!({"nodeSelector": here, "containers": [{"name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": 2}}}]}),
        )
        .await?;
        running_pod(&client, &namespace, "greedy", CONVERGE).await?;
        let problem = format!("{namespace}/greedy: asks for 2 nvidia.com/gpu, the node had 1 left");
        fakegpu_e2e::warning_event(&client, &node, "GpusOverbooked", &problem, CONVERGE).await?;
        // The pool says which node, for whoever reads its status rather than the node's Events.
        let pools: Api<GpuNodePool> = Api::all(client.clone());
        let overbooked_reads = |status: &'static str, mention: String| {
            let (pools, pool) = (pools.clone(), pool.clone());
            async move {
                eventually(&format!("Overbooked={status}"), CONVERGE, || async {
                    let conditions = pools
                        .get(&pool)
                        .await?
                        .status
                        .unwrap_or_default()
                        .conditions;
                    Ok(conditions
                        .iter()
                        .any(|c| {
                            c.type_ == "Overbooked"
                                && c.status == status
                                && c.message.contains(&mention)
                        })
                        .then_some(()))
                })
                .await
            }
        };
        overbooked_reads("True", format!("{node} ({problem})")).await?;
        // The greedy pod gone, the pool fits again.
        Api::<Pod>::namespaced(client.clone(), &namespace)
            .delete("greedy", &DeleteParams::default().grace_period(0))
            .await?;
        overbooked_reads("False", String::new()).await
    }
    .await;
    cleanup.after(result).await
}
