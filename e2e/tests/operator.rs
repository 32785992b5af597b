//! The operator against the real control plane, running as the install bundle's ServiceAccount
//! (hack/test.sh starts it with hack/operator.sh): pools label KWOK nodes and write topology
//! ConfigMaps, follow edits, clean up, report conflicts and bad profiles.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, ensure};
use fakegpu_api::{GpuNodePool, nrt::NodeResourceTopology};
use fakegpu_e2e::{
    Cleanup, OPERATOR_NAMESPACE, admin_client, annotate_node, create_kwok_node, create_pool,
    eventually, http_get, install_crds, operator_address, set_node_pool, topology_of, unique_name,
    warning_event, warning_event_in,
};
use fakegpu_model::{
    names::{annotation, label, resource, topology as topology_names},
    topology::gpu_uuid,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// Convergence bound for the operator; generous for a loaded 2-core CI machine.
const CONVERGE: Duration = Duration::from_secs(30);

fn pools(client: &Client) -> Api<GpuNodePool> {
    Api::all(client.clone())
}

fn nodes(client: &Client) -> Api<Node> {
    Api::all(client.clone())
}

fn configmaps(client: &Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), OPERATOR_NAMESPACE)
}

fn nrts(client: &Client) -> Api<NodeResourceTopology> {
    Api::all(client.clone())
}

/// (zone, GPU capacity) of each zone.
fn zone_gpus(nrt: &NodeResourceTopology) -> Vec<(String, String)> {
    nrt.zones
        .iter()
        .map(|zone| {
            let gpus = zone.resources.iter().find(|r| r.name == "nvidia.com/gpu");
            (
                zone.name.clone(),
                gpus.map(|r| r.capacity.0.clone()).unwrap_or_default(),
            )
        })
        .collect()
}

fn condition<'a>(pool: &'a GpuNodePool, type_: &str) -> Option<(&'a str, &'a str)> {
    let condition = pool
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((condition.status.as_str(), condition.reason.as_str()))
}

/// Waits until the pool's status is current, Ready, and counts `nodes` nodes.
async fn ready_pool(client: &Client, name: &str, nodes: u32) -> anyhow::Result<GpuNodePool> {
    eventually(
        &format!("pool {name} Ready with {nodes} nodes (is the operator running?)"),
        CONVERGE,
        || async {
            let pool = pools(client).get(name).await?;
            let status = pool.status.as_ref();
            let current = status.and_then(|s| s.observed_generation) == pool.metadata.generation;
            let ready = condition(&pool, "Ready") == Some(("True", "Reconciled"));
            let counted = status.is_some_and(|s| s.node_count == nodes);
            Ok((current && ready && counted).then_some(pool))
        },
    )
    .await
}

/// Patches `spec` into the pool and waits until it is Ready with its one node.
async fn fixed_with(client: &Client, pool: &str, spec: serde_json::Value) -> anyhow::Result<()> {
    pools(client)
        .patch(
            pool,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await?;
    ready_pool(client, pool, 1).await.map(drop)
}

fn operator_labels(node: &Node) -> BTreeMap<String, String> {
    node.labels()
        .iter()
        .filter(|(k, _)| label::OPERATOR_SET.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A client, a fresh pool name, one KWOK node labelled for that pool, and their cleanup.
async fn pool_with_one_node(prefix: &str) -> anyhow::Result<(Client, String, String, Cleanup)> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name(prefix);
    let node = format!("{pool}-node");
    create_kwok_node(&client, &node, &[(label::NODE_POOL, &pool)]).await?;
    let cleanup = Cleanup::new(&client).pool(&pool).node(&node);
    Ok((client, pool, node, cleanup))
}

#[tokio::test]
async fn pool_labels_its_nodes_follows_edits_and_cleans_up() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("life");
    let names = [format!("{pool}-a"), format!("{pool}-b")];
    let mut cleanup = Cleanup::new(&client).pool(&pool);
    for name in &names {
        cleanup = cleanup.node(name);
        create_kwok_node(&client, name, &[(label::NODE_POOL, &pool)]).await?;
    }
    cleanup.after(lifecycle(&client, &pool, &names).await).await
}

async fn lifecycle(client: &Client, pool: &str, names: &[String; 2]) -> anyhow::Result<()> {
    create_pool(
        client,
        pool,
        json!({"gpu": {"profile": "a100", "count": 2}, "numa": {"zones": 2}}),
    )
    .await?;
    let status = ready_pool(client, pool, 2)
        .await?
        .status
        .unwrap_or_default();
    ensure!(
        status.product.as_deref() == Some("NVIDIA A100-SXM4-40GB"),
        "{status:?}"
    );
    ensure!(
        status.gpu_count == 4 && status.allocated_gpus == 0,
        "{status:?}"
    );
    let listed: Vec<&str> = status.nodes.iter().map(|n| n.name.as_str()).collect();
    ensure!(
        listed == [names[0].as_str(), names[1].as_str()],
        "status.nodes: {listed:?}"
    );
    ensure!(status.nodes.iter().all(|n| n.kwok && n.gpus == 2));

    for name in names {
        let node = nodes(client).get(name).await?;
        let labels = operator_labels(&node);
        let expected = [
            ("fakegpu.dev/pool", pool),
            ("run.ai/fake.gpu", "true"),
            ("nvidia.com/gpu.present", "true"),
            ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB"),
            ("nvidia.com/gpu.count", "2"),
            ("nvidia.com/gpu.memory", "40960"),
            ("nvidia.com/gpu.replicas", "1"),
            ("nvidia.com/gpu.sharing-strategy", "none"),
            ("nvidia.com/gpu.mode", "compute"),
            ("nvidia.com/gpu.family", "ampere"),
            ("nvidia.com/gpu.compute.major", "8"),
            ("nvidia.com/gpu.compute.minor", "0"),
            ("nvidia.com/cuda.driver-version.full", "550.163.01"),
            ("nvidia.com/cuda.driver-version.major", "550"),
            ("nvidia.com/cuda.driver-version.minor", "163"),
            ("nvidia.com/cuda.driver-version.revision", "01"),
            ("nvidia.com/cuda.driver.major", "550"),
            ("nvidia.com/cuda.driver.minor", "163"),
            ("nvidia.com/cuda.driver.rev", "01"),
            ("nvidia.com/cuda.runtime-version.full", "12.4"),
            ("nvidia.com/cuda.runtime-version.major", "12"),
            ("nvidia.com/cuda.runtime-version.minor", "4"),
            ("nvidia.com/cuda.runtime.major", "12"),
            ("nvidia.com/cuda.runtime.minor", "4"),
            ("nvidia.com/mig.capable", "true"),
            // No nvidia.com/mig.strategy: GFD writes it for `single` and `mixed` only.
            ("nvidia.com/mps.capable", "false"),
            ("nvidia.com/vgpu.present", "false"),
            // KWOK nodes: no device-plugin / DRA deploy labels, the operator serves them.
            ("nvidia.com/gpu.deploy.dcgm-exporter", "true"),
        ];
        let expected: BTreeMap<String, String> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ensure!(labels == expected, "labels of {name}:\n{labels:#?}");
        ensure!(
            node.labels().get(label::NODE_POOL).map(String::as_str) == Some(pool),
            "user label lost"
        );

        let (cm, document) = topology_of(client, name)
            .await?
            .context("no topology ConfigMap")?;
        ensure!(
            cm.labels()
                .get(topology_names::NODE_TOPOLOGY_LABEL)
                .map(String::as_str)
                == Some("true")
        );
        ensure!(cm.labels().get(topology_names::NODE_NAME_LABEL) == Some(name));
        let owner = cm
            .owner_references()
            .first()
            .context("ConfigMap without owner")?;
        ensure!(owner.kind == "Node" && Some(&owner.uid) == node.metadata.uid.as_ref());
        ensure!(document.pool == pool && document.gpu_memory == 40960);
        ensure!(
            document.gpu_product == "NVIDIA A100-SXM4-40GB"
                && document.driver_version == "550.163.01"
        );
        let ids: Vec<&str> = document.gpus.iter().map(|g| g.id.as_str()).collect();
        ensure!(
            ids == [gpu_uuid(name, 0), gpu_uuid(name, 1)],
            "GPU ids {ids:?}"
        );
        let zones: Vec<Option<u32>> = document.gpus.iter().map(|g| g.numa_node).collect();
        ensure!(zones == [Some(0), Some(1)], "NUMA zones {zones:?}");

        let nrt = nrts(client)
            .get(name)
            .await
            .context("NodeResourceTopology")?;
        ensure!(nrt.owner_references().first().map(|o| &o.uid) == node.metadata.uid.as_ref());
        ensure!(nrt.topology_policies == ["SingleNUMANodeContainerLevel"]);
        ensure!(
            zone_gpus(&nrt) == [("node-0".into(), "1".into()), ("node-1".into(), "1".into())],
            "{nrt:?}"
        );
        let costs: Vec<i64> = nrt.zones[0].costs.iter().map(|c| c.value).collect();
        ensure!(costs == [10, 21], "costs {costs:?}");
        // KWOK's default allocatable (cpu 1k, memory 1Ti) split over two zones.
        let cpu = nrt.zones[1].resources.iter().find(|r| r.name == "cpu");
        ensure!(cpu.map(|r| r.capacity.0.as_str()) == Some("500"), "{cpu:?}");
    }

    // Live reconfiguration: a100 x2 -> h100 x4, nothing restarted.
    pools(client)
        .patch(
            pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpu": {"profile": "h100", "count": 4}}})),
        )
        .await?;
    let status = ready_pool(client, pool, 2)
        .await?
        .status
        .unwrap_or_default();
    ensure!(
        status.gpu_count == 8 && status.product.as_deref() == Some("NVIDIA H100 80GB HBM3"),
        "{status:?}"
    );
    for name in names {
        eventually(
            &format!("{name} relabelled for h100 x4"),
            CONVERGE,
            || async {
                let node = nodes(client).get(name).await?;
                let labels = node.labels();
                let product = labels.get(label::GPU_PRODUCT).map(String::as_str);
                let count = labels.get(label::GPU_COUNT).map(String::as_str);
                let family = labels.get(label::GPU_FAMILY).map(String::as_str);
                let document = topology_of(client, name).await?.map(|(_, d)| d);
                let gpus = document.as_ref().map(|d| d.gpus.len());
                let zones = zone_gpus(&nrts(client).get(name).await?);
                Ok((product == Some("NVIDIA-H100-80GB-HBM3")
                    && count == Some("4")
                    && family == Some("hopper")
                    && gpus == Some(4)
                    && zones == [("node-0".into(), "2".into()), ("node-1".into(), "2".into())])
                .then_some(()))
            },
        )
        .await?;
    }

    // A node that loses the pool label loses what the operator gave it, and only that: a
    // label another manager set too (here by its own server-side apply) stays theirs.
    let shared = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": names[1],
        "labels": {label::GPU_PRESENT: "true"}}});
    nodes(client)
        .patch(
            &names[1],
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&shared),
        )
        .await?;
    set_node_pool(client, &names[1], None).await?;
    ready_pool(client, pool, 1).await?;
    eventually("unlabelled node released", CONVERGE, || async {
        let node = nodes(client).get(&names[1]).await?;
        let theirs = BTreeMap::from([(label::GPU_PRESENT.to_owned(), "true".to_owned())]);
        let status = node.status.clone().unwrap_or_default();
        let no_gpus = status
            .capacity
            .iter()
            .chain(&status.allocatable)
            .all(|resources| !resources.contains_key("nvidia.com/gpu"));
        let no_condition = status
            .conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != "gpu-fractioning.nvidia.com/Ready");
        let released = operator_labels(&node) == theirs
            && no_gpus
            && no_condition
            && topology_of(client, &names[1]).await?.is_none()
            && nrts(client).get_opt(&names[1]).await?.is_none();
        Ok(
            (released && node.labels().get("type").map(String::as_str) == Some("kwok"))
                .then_some(()),
        )
    })
    .await?;

    // Deleting the pool removes its labels and ConfigMaps, then the pool itself (finalizer).
    pools(client).delete(pool, &DeleteParams::default()).await?;
    eventually("pool and everything it made gone", CONVERGE, || async {
        let pool_gone = pools(client).get_opt(pool).await?.is_none();
        let node = nodes(client).get(&names[0]).await?;
        let cm_gone = topology_of(client, &names[0]).await?.is_none();
        Ok((pool_gone && operator_labels(&node).is_empty() && cm_gone).then_some(()))
    })
    .await
}

/// The GPU-ish entries of a node's capacity and allocatable: `nvidia.com/*`.
fn nvidia_resources(node: &Node) -> [BTreeMap<String, String>; 2] {
    let status = node.status.clone().unwrap_or_default();
    [status.capacity, status.allocatable].map(|resources| {
        resources
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, _)| name.starts_with("nvidia.com/"))
            .map(|(name, quantity)| (name, quantity.0))
            .collect()
    })
}

#[tokio::test]
async fn a_node_an_applying_fakegpu_wrote_is_taken_over_and_released() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("upgrade");
    let node = format!("{pool}-node");
    create_kwok_node(&client, &node, &[]).await?;
    let cleanup = Cleanup::new(&client).pool(&pool).node(&node);
    let result = async {
        let nodes = nodes(&client);
        eventually("KWOK initialized the node", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            let pods = n
                .status
                .and_then(|s| s.allocatable)
                .is_some_and(|a| a.contains_key("pods"));
            Ok(pods.then_some(()))
        })
        .await?;
        // What fakegpu before node patches left on a node of an 8-GPU MIG pool: its server-side
        // apply of nodes/status, with a label and an extended resource the pool below does not
        // give.
        let applied = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
            "labels": {"fakegpu.dev/pool": pool, label::GPU_COUNT: "8", label::MIG_STRATEGY: "single"}},
            "status": {"capacity": {"nvidia.com/gpu": "8", "nvidia.com/hostdev": "2"},
                "allocatable": {"nvidia.com/gpu": "8", "nvidia.com/hostdev": "2"}}});
        nodes
            .patch_status(&node, &PatchParams::apply("fakegpu").force(), &Patch::Apply(&applied))
            .await?;
        set_node_pool(&client, &node, Some(pool.as_str())).await?;
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4", "count": 1}})).await?;
        let one_gpu = BTreeMap::from([("nvidia.com/gpu".to_owned(), "1".to_owned())]);
        eventually("the pool's labels and GPUs, and nothing of the old apply's", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            let labels = operator_labels(&n);
            let taken_over = labels.get(label::GPU_COUNT).map(String::as_str) == Some("1")
                && labels.get(label::GPU_PRODUCT).map(String::as_str) == Some("Tesla-T4")
                && !labels.contains_key(label::MIG_STRATEGY)
                && nvidia_resources(&n) == [one_gpu.clone(), one_gpu.clone()];
            Ok(taken_over.then_some(()))
        })
        .await?;
        set_node_pool(&client, &node, None).await?;
        eventually("released", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            let released = operator_labels(&n).is_empty()
                && nvidia_resources(&n) == [BTreeMap::new(), BTreeMap::new()];
            Ok(released.then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn contested_node_is_reported_by_both_pools_without_flapping() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let tag = unique_name("contest");
    let node = format!("{tag}-node");
    create_kwok_node(&client, &node, &[("e2e-contest", &tag)]).await?;
    let (old, young) = (format!("{tag}-old"), format!("{tag}-young"));
    let cleanup = Cleanup::new(&client).pool(&old).pool(&young).node(&node);
    let result = async {
        let spec = json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"e2e-contest": tag}}});
        create_pool(&client, &old, spec.clone()).await?;
        // Creation times have one-second resolution; the older pool must be unambiguous.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        create_pool(&client, &young, spec).await?;

        for pool in [&old, &young] {
            eventually(&format!("Conflict on {pool}"), CONVERGE, || async {
                let p = pools(&client).get(pool).await?;
                Ok((condition(&p, "Conflict") == Some(("True", "NodeSelectedByOtherPools"))).then_some(()))
            })
            .await?;
        }
        let owner = |n: &Node| n.labels().get("fakegpu.dev/pool").cloned();
        let before = eventually("node owned by the older pool", CONVERGE, || async {
            let n = nodes(&client).get(&node).await?;
            Ok((owner(&n).as_ref() == Some(&old)).then_some(n))
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = nodes(&client).get(&node).await?;
        ensure!(owner(&after).as_ref() == Some(&old), "ownership moved");
        ensure!(
            after.metadata.resource_version == before.metadata.resource_version,
            "the contested node kept being written"
        );

        // The older pool goes: the younger takes the node over, and the conflict clears.
        pools(&client).delete(&old, &DeleteParams::default()).await?;
        eventually("younger pool owns the node", CONVERGE, || async {
            let n = nodes(&client).get(&node).await?;
            let p = pools(&client).get(&young).await?;
            Ok((owner(&n).as_ref() == Some(&young) && condition(&p, "Conflict") == Some(("False", "NoConflict")))
                .then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn unknown_profile_becomes_a_condition_and_an_event() -> anyhow::Result<()> {
    let (client, pool, node, cleanup) = pool_with_one_node("unknown").await?;
    let result = async {
        create_pool(&client, &pool, json!({"gpu": {"profile": "h100-sxm5"}})).await?;
        eventually("Ready=False UnknownProfile", CONVERGE, || async {
            let p = pools(&client).get(&pool).await?;
            Ok((condition(&p, "Ready") == Some(("False", "UnknownProfile"))).then_some(()))
        })
        .await?;
        let n = nodes(&client).get(&node).await?;
        ensure!(
            operator_labels(&n).is_empty(),
            "a pool that does not resolve labelled a node"
        );

        // The Event names the profile, lists the builtin ones and says which one it most
        // likely meant.
        for mention in [
            "\"h100-sxm5\"",
            "(builtin: a100, ",
            "; did you mean \"h100\"?",
        ] {
            warning_event(&client, &pool, "UnknownProfile", mention, CONVERGE).await?;
        }

        // Fixing the profile brings the pool up.
        fixed_with(&client, &pool, json!({"gpu": {"profile": "l4"}})).await
    }
    .await;
    cleanup.after(result).await
}

/// Selectors the API server stores but that are no label selectors (the CRD's schema cannot
/// say so: an unknown operator, a key that is no label key, `In` without values) are the pool's
/// condition naming the field: nothing is selected, nothing labelled, and the user is told why.
#[tokio::test]
async fn a_selector_that_is_no_label_selector_becomes_a_condition() -> anyhow::Result<()> {
    let (client, pool, node, cleanup) = pool_with_one_node("selector").await?;
    let result = async {
        let expression = |operator: &str, values: serde_json::Value| {
            json!({"matchLabels": null, "matchExpressions": [
                {"key": label::NODE_POOL, "operator": operator, "values": values}]})
        };
        let cases = [
            (
                expression("Matches", json!([pool])),
                "spec.nodeSelector.matchExpressions[0].operator: \"Matches\" is no label selector operator",
            ),
            (
                json!({"matchLabels": {"bad key!": pool}, "matchExpressions": null}),
                "spec.nodeSelector.matchLabels[\"bad key!\"]: \"bad key!\" is no label key",
            ),
            (
                expression("In", json!([])),
                "spec.nodeSelector.matchExpressions[0].values: operator In needs at least one value",
            ),
            (
                expression("In", json!([pool, "not a value"])),
                "spec.nodeSelector.matchExpressions[0].values[1]: \"not a value\" is no label value",
            ),
        ];
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "l4"}, "nodeSelector": cases[0].0}),
        )
        .await?;
        for (i, (selector, message)) in cases.iter().enumerate() {
            if i > 0 {
                pools(&client)
                    .patch(
                        &pool,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"nodeSelector": selector}})),
                    )
                    .await?;
            }
            eventually(&format!("InvalidSelector: {message}"), CONVERGE, || async {
                let p = pools(&client).get(&pool).await?;
                let ready = p.status.as_ref().and_then(|s| {
                    s.conditions.iter().find(|c| c.type_ == "Ready").cloned()
                });
                Ok(ready
                    .filter(|c| {
                        c.status == "False"
                            && c.reason == "InvalidSelector"
                            && c.message.starts_with(message)
                    })
                    .filter(|_| condition(&p, "Stalled").is_some_and(|(status, _)| status == "True"))
                    .map(drop))
            })
            .await?;
            warning_event(&client, &pool, "InvalidSelector", message, CONVERGE).await?;
            let n = nodes(&client).get(&node).await?;
            ensure!(
                operator_labels(&n).is_empty(),
                "a pool without a usable selector labelled a node"
            );
        }
        // Fixed, the selector selects the node.
        fixed_with(&client, &pool, json!({"nodeSelector": expression("In", json!([pool]))})).await
    }
    .await;
    cleanup.after(result).await
}

/// A mock pool's GPUs are advertised by NVIDIA's components on the node: on KWOK nodes,
/// which have no kubelet, nothing serves them, and the pool says so instead of Ready.
#[tokio::test]
async fn a_mock_pool_of_kwok_nodes_says_it_serves_nothing() -> anyhow::Result<()> {
    let (client, pool, node, cleanup) = pool_with_one_node("mockkwok").await?;
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "h100", "backend": "mock"}}),
        )
        .await?;
        eventually("Ready=False NoKubelet", CONVERGE, || async {
            let p = pools(&client).get(&pool).await?;
            Ok((condition(&p, "Ready") == Some(("False", "NoKubelet"))
                && condition(&p, "Stalled").is_some_and(|(status, _)| status == "True"))
            .then_some(()))
        })
        .await?;
        warning_event(
            &client,
            &pool,
            "NoKubelet",
            "none of the 1 nodes runs a kubelet",
            CONVERGE,
        )
        .await?;
        // Labelled all the same, and given no capacity.
        let n = nodes(&client).get(&node).await?;
        ensure!(
            !operator_labels(&n).is_empty(),
            "the mock pool's node was not labelled"
        );
        let capacity = n.status.and_then(|s| s.capacity).unwrap_or_default();
        ensure!(
            !capacity.contains_key(resource::GPU),
            "a mock pool's KWOK node got GPU capacity: {capacity:?}"
        );
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn topology_configmap_edited_or_deleted_by_hand_is_repaired() -> anyhow::Result<()> {
    let (client, pool, node, cleanup) = pool_with_one_node("repair").await?;
    let result = async {
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4"}})).await?;
        ready_pool(&client, &pool, 1).await?;
        let (cm, original) = eventually("topology ConfigMap", CONVERGE, || {
            topology_of(&client, &node)
        })
        .await?;
        let name = cm.name_any();
        let original = &original;
        let document_back = |what: &'static str| {
            let (client, node) = (client.clone(), node.clone());
            async move {
                eventually(what, CONVERGE, || async {
                    Ok(topology_of(&client, &node)
                        .await
                        .ok()
                        .flatten()
                        .filter(|(_, d)| d == original)
                        .map(drop))
                })
                .await
            }
        };

        configmaps(&client)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {topology_names::DATA_KEY: "gpus: [garbage"}})),
            )
            .await?;
        document_back("edited ConfigMap repaired").await?;

        // Removals alone leave no managed-fields entry of the remover's: the ConfigMap still
        // looks written by fakegpu alone.
        configmaps(&client)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {topology_names::DATA_KEY: null}})),
            )
            .await?;
        document_back("ConfigMap without its document repaired").await?;
        configmaps(&client)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {annotation::ALLOCATED_GPUS: null}}}),
                ),
            )
            .await?;
        eventually(
            "ConfigMap without its annotation repaired",
            CONVERGE,
            || async {
                let cm = configmaps(&client).get(&name).await?;
                Ok(cm
                    .annotations()
                    .get(annotation::ALLOCATED_GPUS)
                    .is_some_and(|count| count == "0")
                    .then_some(()))
            },
        )
        .await?;

        configmaps(&client)
            .delete(&name, &DeleteParams::default())
            .await?;
        document_back("deleted ConfigMap rewritten").await
    }
    .await;
    cleanup.after(result).await
}

/// `/readyz` answers once the caches are filled, `/metrics` counts the reconciles the other
/// tests caused.
#[tokio::test]
async fn operator_serves_health_and_metrics() -> anyhow::Result<()> {
    let address = operator_address();
    let get = |path: &str| http_get(&address, path);
    ensure!(get("/healthz")? == "ok" && get("/readyz")? == "ok");
    let (client, pool, _node, cleanup) = pool_with_one_node("metrics").await?;
    let result = async {
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4"}})).await?;
        ready_pool(&client, &pool, 1).await?;
        let text = get("/metrics")?;
        for controller in ["node", "pool"] {
            let series =
                format!("fakegpu_operator_reconciles_total{{controller=\"{controller}\"}} ");
            let count: u64 = text
                .lines()
                .find_map(|line| line.strip_prefix(&series))
                .context(format!("no {series}in /metrics"))?
                .trim()
                .parse()?;
            ensure!(count > 0, "{series}is 0");
        }
        ensure!(text.contains("fakegpu_operator_reconcile_duration_seconds_bucket"));
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// DeviceClasses are cluster-wide, so both cases run in one test: a `gpu.nvidia.com` class that
/// someone else installed (NVIDIA's DRA driver, say) is left alone and reported; once it is
/// gone, fakegpu installs its own, as NVIDIA defines it, and removes it with the last DRA pool.
#[tokio::test]
async fn dra_pools_get_nvidia_device_classes_and_respect_foreign_ones() -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::DeviceClass;
    let client = admin_client().await?;
    install_crds(&client).await?;
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let pool = unique_name("dra");
    let cleanup = Cleanup::new(&client).pool(&pool);
    let result = async {
        eventually("no gpu.nvidia.com class left by earlier tests", CONVERGE, || async {
            Ok(classes.get_opt("gpu.nvidia.com").await?.is_none().then_some(()))
        })
        .await?;
        let foreign: DeviceClass = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com", "labels": {"app.kubernetes.io/managed-by": "Helm"}},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }))?;
        let foreign = classes.create(&PostParams::default(), &foreign).await?;

        create_pool(&client, &pool, json!({"gpu": {"profile": "a100"}, "interfaces": {"dra": true},
            "mig": {"strategy": "mixed", "layout": [{"profiles": ["3g.20gb"]}]}}))
        .await?;
        eventually("DeviceClass=False OwnedElsewhere", CONVERGE, || async {
            let p = pools(&client).get(&pool).await?;
            Ok((condition(&p, "DeviceClass") == Some(("False", "OwnedElsewhere"))).then_some(()))
        })
        .await?;
        let untouched = classes.get("gpu.nvidia.com").await?;
        ensure!(untouched.metadata.resource_version == foreign.metadata.resource_version, "foreign class changed");
        let mig = classes.get("mig.nvidia.com").await?;
        ensure!(mig.labels().get("app.kubernetes.io/managed-by").map(String::as_str) == Some("fakegpu"));

        classes.delete("gpu.nvidia.com", &DeleteParams::default()).await?;
        let ours = eventually("fakegpu's gpu.nvidia.com", CONVERGE, || async {
            let p = pools(&client).get(&pool).await?;
            let class = classes.get_opt("gpu.nvidia.com").await?;
            let managed = condition(&p, "DeviceClass") == Some(("True", "Managed"));
            Ok(class.filter(|c| managed && c.labels().get("app.kubernetes.io/managed-by").map(String::as_str) == Some("fakegpu")))
        })
        .await?;
        let spec = ours.spec.as_ref().context("class without spec")?;
        let expression = spec
            .selectors
            .as_ref()
            .and_then(|s| s.first())
            .and_then(|s| s.cel.as_ref())
            .map(|cel| cel.expression.as_str());
        ensure!(
            expression == Some("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"),
            "selector {expression:?}"
        );
        ensure!(spec.extended_resource_name.as_deref() == Some("nvidia.com/gpu"));
        let uid = pools(&client).get(&pool).await?.metadata.uid;
        ensure!(ours.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()), "not owned by the pool");

        // An edit of the class stays, as KAI scheduler's suites expect of NVIDIA's Helm-installed
        // class: extendedResourceName cleared, then another DRA pool makes fakegpu write the
        // class's owners, not its spec.
        classes
            .patch(
                "gpu.nvidia.com",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"extendedResourceName": null}})),
            )
            .await?;
        let second = format!("{pool}-b");
        create_pool(&client, &second, json!({"gpu": {"profile": "t4"}, "interfaces": {"dra": true}})).await?;
        let second_uid = pools(&client).get(&second).await?.metadata.uid;
        let resynced = eventually("the class owned by both pools", CONVERGE, || async {
            let class = classes.get("gpu.nvidia.com").await?;
            let owned = class.owner_references().iter().any(|o| Some(&o.uid) == second_uid.as_ref());
            Ok(owned.then_some(class))
        })
        .await;
        let _ = pools(&client).delete(&second, &DeleteParams::default()).await;
        let resynced = resynced?;
        ensure!(
            resynced.spec.as_ref().and_then(|s| s.extended_resource_name.as_deref()).is_none(),
            "fakegpu undid the class's edit: {:?}",
            resynced.spec
        );

        pools(&client).delete(&pool, &DeleteParams::default()).await?;
        eventually("classes removed with the last DRA pool", CONVERGE, || async {
            let gone = classes.get_opt("gpu.nvidia.com").await?.is_none()
                && classes.get_opt("mig.nvidia.com").await?.is_none();
            Ok(gone.then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}

/// `fakegpu.dev/unhealthy-gpus` on a node marks those GPUs unhealthy in its topology document
/// (what the node agent's device plugin reports to the kubelet); removing it heals them, and a
/// malformed entry is ignored without losing the valid ones.
#[tokio::test]
async fn unhealthy_gpu_annotation_reaches_the_topology_document() -> anyhow::Result<()> {
    let (client, pool, node, cleanup) = pool_with_one_node("health").await?;
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "l4", "count": 4}}),
        )
        .await?;
        ready_pool(&client, &pool, 1).await?;
        let health_of = |document: &fakegpu_model::topology::NodeTopology| {
            document
                .gpus
                .iter()
                .map(|g| g.health.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        let annotate = |value: Option<&'static str>| {
            annotate_node(&client, &node, annotation::UNHEALTHY_GPUS, value)
        };
        let health_becomes = |want: &'static str| {
            let client = client.clone();
            let node = node.clone();
            async move {
                eventually(&format!("GPU health {want}"), CONVERGE, || async {
                    Ok(topology_of(&client, &node)
                        .await?
                        .filter(|(_, d)| health_of(d) == want)
                        .map(drop))
                })
                .await
            }
        };
        health_becomes("Healthy,Healthy,Healthy,Healthy").await?;
        annotate(Some("1, 3,nine,7")).await?;
        health_becomes("Healthy,Unhealthy,Healthy,Unhealthy").await?;
        // What names no GPU of the node is said, on the node.
        warning_event(&client, &node, "InvalidUnhealthyGpus", "nine, 7", CONVERGE).await?;
        // On a KWOK node the operator plays the kubelet's part: failed GPUs leave allocatable.
        eventually("allocatable without the failed GPUs", CONVERGE, || async {
            let status = nodes(&client).get(&node).await?.status.unwrap_or_default();
            let gpus =
                |list: Option<
                    BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
                >| { list.and_then(|l| l.get(resource::GPU).map(|q| q.0.clone())) };
            Ok((gpus(status.capacity).as_deref() == Some("4")
                && gpus(status.allocatable).as_deref() == Some("2"))
            .then_some(()))
        })
        .await?;
        // Another bad value is another Event, not a repeat of the first with its old message.
        annotate(Some("abc")).await?;
        health_becomes("Healthy,Healthy,Healthy,Healthy").await?;
        warning_event(&client, &node, "InvalidUnhealthyGpus", "\"abc\"", CONVERGE).await?;
        annotate(None).await?;
        health_becomes("Healthy,Healthy,Healthy,Healthy").await
    }
    .await;
    cleanup.after(result).await
}

/// A node the operator cannot write (an admission policy refuses its labels) keeps the pool
/// from getting ready, named in the Ready condition and a Warning Event; once the policy goes,
/// the pool recovers without anyone touching it.
#[tokio::test]
async fn a_node_that_cannot_be_labelled_becomes_a_condition() -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let (client, pool, node, cleanup) = pool_with_one_node("refused").await?;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policy_name = format!("{pool}-no-gpu-labels");
    let result = async {
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": policy_name},
            "spec": {
                "failurePolicy": "Fail",
                // The operator labels through the status subresource, which a rule must name.
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["nodes", "nodes/status"]}]},
                "validations": [{
                    "expression": format!("!(object.metadata.name == '{node}' && has(object.metadata.labels) && '{}' in object.metadata.labels)", label::GPU_PRESENT),
                    "message": "this node may not carry GPU labels",
                }],
            },
        }))?;
        policies.create(&PostParams::default(), &policy).await?;
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": policy_name},
            "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
        }))?;
        bindings.create(&PostParams::default(), &binding).await?;
        // Policies take effect a moment after they are created: wait until one bites.
        eventually("admission policy in force", CONVERGE, || async {
            let denied = nodes(&client)
                .patch(
                    &node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {label::GPU_PRESENT: "probe"}}})),
                )
                .await
                .is_err();
            Ok(denied.then_some(()))
        })
        .await?;

        create_pool(&client, &pool, json!({"gpu": {"profile": "t4"}})).await?;
        eventually("Ready=False NodeUpdateFailed naming the node", CONVERGE, || async {
            let p = pools(&client).get(&pool).await?;
            let ready = p
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .find(|c| c.type_ == "Ready");
            Ok(ready
                .filter(|c| {
                    c.status == "False"
                        && c.reason == "NodeUpdateFailed"
                        && c.message.contains(&node)
                        && c.message.contains("may not carry GPU labels")
                })
                .map(drop))
        })
        .await?;
        warning_event(&client, &pool, "NodeUpdateFailed", &node, CONVERGE).await?;

        bindings
            .delete(&policy_name, &DeleteParams::default())
            .await?;
        ready_pool(&client, &pool, 1).await.map(drop)
    }
    .await;
    let _ = bindings
        .delete(&policy_name, &DeleteParams::default())
        .await;
    let _ = policies
        .delete(&policy_name, &DeleteParams::default())
        .await;
    cleanup.after(result).await
}

/// A pod whose utilization or GPU-sharing annotations do not parse still runs and is tracked
/// (at the pool's default utilization, using the whole GPU's memory), and gets one Warning
/// Event per value naming it and why; a new bad value gets an Event of its own.
#[tokio::test]
async fn malformed_utilization_and_sharing_annotations_become_events_on_the_pod()
-> anyhow::Result<()> {
    let (client, pool, node, cleanup) = pool_with_one_node("badutil").await?;
    let namespace = fakegpu_e2e::create_namespace(&client, "badutil").await?;
    let cleanup = cleanup.namespace(&namespace);
    let result = async {
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4"}})).await?;
        ready_pool(&client, &pool, 1).await?;
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "bad", "annotations": {
                annotation::SIMULATED_UTILIZATION: "30-10",
                annotation::GPU_FRACTION: "2.5",
                annotation::GPU_MEMORY: "abc",
            }},
            "spec": {
                "nodeName": node,
                "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }))?;
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &namespace);
        pods.create(&PostParams::default(), &pod).await?;
        let warned = |reason: &'static str, mention: &'static str| {
            warning_event_in(&client, &namespace, "bad", reason, mention, CONVERGE)
        };
        warned("InvalidUtilization", "30-10").await?;
        warned("InvalidGpuSharing", "gpu-fraction \"2.5\"").await?;
        warned("InvalidGpuSharing", "gpu-memory \"abc\"").await?;
        // Tracked all the same, at the reference's default (no pool default here), holding
        // the whole GPU's memory.
        eventually("the pod's GPU recorded at 100-100, all its memory", CONVERGE, || async {
            Ok(topology_of(&client, &node).await?.and_then(|(_, d)| {
                d.gpus
                    .iter()
                    .flat_map(|g| g.status.pod_gpu_usage_status.values())
                    .any(|u| {
                        (u.utilization.min, u.utilization.max, u.fb_used)
                            == (100, 100, d.gpu_memory)
                    })
                    .then_some(())
            }))
        })
        .await?;
        // Another bad value is another Event: the user reads the value that is there now.
        pods.patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {annotation::GPU_FRACTION: "half"}}})),
        )
        .await?;
        warned("InvalidGpuSharing", "gpu-fraction \"half\"").await
    }
    .await;
    cleanup.after(result).await
}
