//! MIG on KWOK nodes with the real scheduler: a mixed-strategy pool advertises
//! `nvidia.com/mig-<profile>` and GPU feature discovery's MIG labels, a pod asking for a MIG
//! instance lands and runs, a DRA claim of class `mig.nvidia.com` gets a MIG device named as
//! NVIDIA's driver names it, and a layout that cannot be is a pool condition, not a crash.
//! Run:ai's dynamic MIG (node annotation `run.ai/mig.config`) partitions a node's GPUs and is
//! answered as the reference's mig-faker answers it.

use std::time::Duration;

use anyhow::{Context, ensure};
use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use fakegpu_api::GpuNodePool;
use fakegpu_e2e::{
    Cleanup, admin_client, annotate_node, create_kwok_pod, create_pool, eventually, install_crds,
    kwok_scenario, running_pod, topology_of, unique_name, warning_event,
};
use fakegpu_model::names::annotation::RUNAI_MIG_CONFIG;
use k8s_openapi::api::{
    core::v1::Node,
    resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice},
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(60);

/// Runs pod `pod` of `pool` with a claim for one `mig.nvidia.com` device matching CEL
/// `expression`, and returns the devices its claim was allocated.
async fn claimed_devices(
    client: &kube::Client,
    namespace: &str,
    pool: &str,
    pod: &str,
    expression: &str,
) -> anyhow::Result<Vec<String>> {
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": pod},
        "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": expression}}],
        }}]}}},
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &template)
        .await?;
    create_kwok_pod(
        client,
        namespace,
        pod,
        json!({"nodeSelector": {"fakegpu.dev/pool": pool},
            "resourceClaims": [{"name": "mig", "resourceClaimTemplateName": pod}],
            "containers": [{"name": "main", "image": "busybox",
                "resources": {"claims": [{"name": "mig"}]}}]}),
    )
    .await?;
    let running = running_pod(client, namespace, pod, CONVERGE).await?;
    let claim = running
        .status
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|claims| claims.into_iter().next())
        .and_then(|c| c.resource_claim_name)
        .context("the pod's claim")?;
    let claim = Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .get(&claim)
        .await?;
    Ok(claim
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.device)
        .collect())
}

#[tokio::test]
async fn mig_instances_are_scheduled_by_extended_resource_and_by_claim() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("mig").await?;
    let result = async {
        // GPU 0 cut into 3g + 2g + 1g + 1g, GPU 1 into seven 1g instances; GPU 2 stays whole.
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "a100-80gb", "count": 3},
                "interfaces": {"devicePlugin": true, "dra": true},
                "mig": {"strategy": "mixed", "layout": [
                    {"gpus": [0], "profiles": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
                    {"gpus": [1], "profiles": ["1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"]},
                ]}}),
        )
        .await?;
        let nodes: Api<Node> = Api::all(client.clone());
        let n = eventually("MIG capacity on the KWOK node", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            Ok((capacity(&n, "nvidia.com/mig-1g.10gb").as_deref() == Some("9")
                && capacity(&n, "nvidia.com/mig-3g.40gb").as_deref() == Some("1")
                && capacity(&n, "nvidia.com/gpu").as_deref() == Some("1"))
            .then_some(n))
        })
        .await?;
        ensure_labels(
            &n,
            &[
                ("nvidia.com/mig.strategy", "mixed"),
                ("nvidia.com/mig-1g.10gb.count", "9"),
                ("nvidia.com/mig-2g.20gb.count", "1"),
                ("nvidia.com/mig-3g.40gb.memory", "40192"),
                ("nvidia.com/mig-3g.40gb.engines.decoder", "2"),
                ("nvidia.com/mig-1g.10gb.engines.copy", "1"),
            ],
        )?;

        create_kwok_pod(
            &client,
            &namespace,
            "slice",
            json!({"nodeSelector": {"fakegpu.dev/pool": pool}, "containers": [{"name": "main",
                "image": "busybox", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}),
        )
        .await?;
        let pod = running_pod(&client, &namespace, "slice", CONVERGE).await?;
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        ensure!(bound == Some(node.as_str()), "MIG pod bound to {bound:?}");

        let devices = claimed_devices(
            &client,
            &namespace,
            &pool,
            "claimant",
            "device.attributes['gpu.nvidia.com'].profile == '3g.40gb' && \
             device.capacity['gpu.nvidia.com'].decoders.compareTo(quantity('2')) >= 0",
        )
        .await?;
        ensure!(
            devices == ["gpu-0-mig-3g40gb-9-4"],
            "claim allocated {devices:?}"
        );

        // The topology document records who holds which instance.
        eventually("MIG instances held in the topology document", CONVERGE, || async {
            let Some((_, document)) = topology_of(&client, &node).await? else {
                return Ok(None);
            };
            let holders: std::collections::BTreeSet<(String, String)> = document
                .gpus
                .iter()
                .flat_map(|g| &g.mig_devices)
                .filter(|m| !m.status.allocated_by.pod.is_empty())
                .map(|m| (m.profile.clone(), m.status.allocated_by.pod.clone()))
                .collect();
            let want = std::collections::BTreeSet::from([
                ("3g.40gb".to_owned(), "claimant".to_owned()),
                ("1g.10gb".to_owned(), "slice".to_owned()),
            ]);
            Ok((holders == want).then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn an_impossible_layout_is_a_pool_condition() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("migbad");
    let cleanup = Cleanup::new(&client).pool(&pool);
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "a100-80gb"}, "mig": {"strategy": "mixed",
                "layout": [{"profiles": ["7g.80gb", "1g.10gb"]}]}}),
        )
        .await?;
        let pools: Api<GpuNodePool> = Api::all(client.clone());
        let condition = |p: &GpuNodePool| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let (_, _, message) = eventually("Ready=False InvalidMigLayout", CONVERGE, || async {
            let p = pools.get(&pool).await?;
            Ok(condition(&p).filter(|(s, r, _)| s == "False" && r == "InvalidMigLayout"))
        })
        .await?;
        ensure!(message.contains("do not fit"), "message: {message}");
        // A profile of another product names the valid ones.
        pools
            .patch(
                &pool,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"mig": {"layout": [{"profiles": ["1g.5gb"]}]}}})),
            )
            .await?;
        eventually(
            "the condition names the valid profiles",
            CONVERGE,
            || async {
                let p = pools.get(&pool).await?;
                Ok(condition(&p)
                    .filter(|(_, r, m)| {
                        r == "InvalidMigLayout" && m.contains("1g.10gb, 1g.10gb+me")
                    })
                    .map(drop))
            },
        )
        .await
    }
    .await;
    cleanup.after(result).await
}

/// A Run:ai configuration for GPU 0 of an A100 80GB: 4g at slice 0, 2g at 4, 1g at 6.
const DYNAMIC_CONFIG: &str = r#"version: v1
mig-configs:
  selected:
  - devices: ["0"]
    mig-enabled: true
    mig-devices:
    - {name: 4g.40gb, position: 0, size: 4}
    - {name: 2g.20gb, position: 4, size: 2}
    - {name: 1g.10gb, position: 6, size: 1}
"#;

/// Fails naming the first of `expected` (key, value) that the node's labels lack.
fn ensure_labels(node: &Node, expected: &[(&str, &str)]) -> anyhow::Result<()> {
    for (key, value) in expected {
        let actual = node.labels().get(*key);
        ensure!(
            actual.map(String::as_str) == Some(*value),
            "label {key}: {actual:?}"
        );
    }
    Ok(())
}

/// The node's capacity of `name`, if any.
fn capacity(node: &Node, name: &str) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get(name))
        .map(|q| q.0.clone())
}

#[tokio::test]
async fn runai_dynamic_mig_partitions_gpus_and_is_answered_with_a_mapping() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("dynmig").await?;
    let result = async {
        let nodes: Api<Node> = Api::all(client.clone());
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "a100-80gb", "count": 2},
                "interfaces": {"devicePlugin": true, "dra": true}}),
        )
        .await?;
        eventually("two whole GPUs", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            Ok((capacity(&n, "nvidia.com/gpu").as_deref() == Some("2")).then_some(()))
        })
        .await?;

        // Run:ai configures only nodes it marks for dynamic MIG; elsewhere the annotation is
        // reported and changes nothing.
        annotate_node(&client, &node, RUNAI_MIG_CONFIG, Some(DYNAMIC_CONFIG)).await?;
        warning_event(
            &client,
            &node,
            "MigConfigIgnored",
            "runai-dynamic-mig=true",
            CONVERGE,
        )
        .await?;
        let n = nodes.get(&node).await?;
        ensure!(
            capacity(&n, "nvidia.com/gpu").as_deref() == Some("2")
                && !n.labels().contains_key("nvidia.com/mig.config.state"),
            "an unmarked node was reconfigured"
        );
        let role =
            json!({"metadata": {"labels": {"node-role.kubernetes.io/runai-dynamic-mig": "true"}}});
        nodes
            .patch(&node, &PatchParams::default(), &Patch::Merge(role))
            .await?;
        let n = eventually("GPU 0 partitioned, state success", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            let done = n
                .labels()
                .get("nvidia.com/mig.config.state")
                .map(String::as_str)
                == Some("success")
                && capacity(&n, "nvidia.com/gpu").as_deref() == Some("1")
                && capacity(&n, "nvidia.com/mig-2g.20gb").as_deref() == Some("1");
            Ok(done.then_some(n))
        })
        .await?;
        ensure_labels(
            &n,
            &[
                ("nvidia.com/mig.strategy", "mixed"),
                ("nvidia.com/mig-4g.40gb.count", "1"),
                ("nvidia.com/mig-1g.10gb.count", "1"),
            ],
        )?;
        let encoded = n
            .annotations()
            .get("run.ai/mig-mapping")
            .context("mapping annotation")?;
        let mapping: serde_json::Value = serde_json::from_slice(&BASE64.decode(encoded)?)?;
        // The instances are those of the topology document, under the reference's profile IDs.
        let (_, document) = topology_of(&client, &node)
            .await?
            .context("topology document")?;
        let expected: Vec<serde_json::Value> = document.gpus[0]
            .mig_devices
            .iter()
            .map(|m| {
                json!({"position": m.placement_start, "device_uuid": m.uuid,
                "gpu_instance_id": m.gi_profile_id})
            })
            .collect();
        ensure!(expected.len() == 3, "document instances: {expected:?}");
        ensure!(mapping == json!({"0": expected}), "mapping {mapping}");
        ensure!(
            expected
                .iter()
                .map(|e| e["gpu_instance_id"].clone())
                .collect::<Vec<_>>()
                == [json!(5), json!(14), json!(19)],
            "profile IDs: {expected:?}"
        );
        // DRA sees the instances as NVIDIA's driver names them.
        let slices: Api<ResourceSlice> = Api::all(client.clone());
        eventually("the 4g instance in the node's slice", CONVERGE, || async {
            let slice = slices.get_opt(&format!("kwok-{node}-gpu")).await?;
            let names: Vec<String> = slice
                .and_then(|s| s.spec.devices)
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.name)
                .collect();
            Ok(names
                .iter()
                .any(|n| n == "gpu-0-mig-4g40gb-5-0")
                .then_some(()))
        })
        .await?;
        // A pod asking for one of the new instances runs there.
        create_kwok_pod(
            &client,
            &namespace,
            "dyn",
            json!({"nodeSelector": {"fakegpu.dev/pool": pool}, "containers": [{"name": "main",
                "image": "busybox", "resources": {"limits": {"nvidia.com/mig-2g.20gb": "1"}}}]}),
        )
        .await?;
        running_pod(&client, &namespace, "dyn", CONVERGE).await?;
        // And a DRA claim for another, through the MIG class the pool's MIG-capable GPUs get.
        let devices = claimed_devices(
            &client,
            &namespace,
            &pool,
            "dyn-claim",
            "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
        )
        .await?;
        ensure!(
            devices == ["gpu-0-mig-1g10gb-19-6"],
            "claim allocated {devices:?}"
        );

        // A configuration that cannot be: state failed, an Event, the node as it was.
        let overlapping = DYNAMIC_CONFIG.replace("position: 6", "position: 5");
        annotate_node(&client, &node, RUNAI_MIG_CONFIG, Some(&overlapping)).await?;
        eventually("state failed", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            Ok((n
                .labels()
                .get("nvidia.com/mig.config.state")
                .map(String::as_str)
                == Some("failed"))
            .then_some(()))
        })
        .await?;
        warning_event(&client, &node, "InvalidMigConfig", "overlaps", CONVERGE).await?;
        let n = nodes.get(&node).await?;
        ensure!(
            capacity(&n, "nvidia.com/mig-2g.20gb").as_deref() == Some("1")
                && n.annotations().get("run.ai/mig-mapping") == Some(encoded),
            "the failed configuration changed the node: {:?}",
            n.status.and_then(|s| s.capacity)
        );

        // Without a configuration the node has its pool's layout again, and no answer.
        annotate_node(&client, &node, RUNAI_MIG_CONFIG, None).await?;
        eventually("whole GPUs, no state, no mapping", CONVERGE, || async {
            let n = nodes.get(&node).await?;
            let done = capacity(&n, "nvidia.com/gpu").as_deref() == Some("2")
                && capacity(&n, "nvidia.com/mig-2g.20gb").is_none()
                && !n.labels().contains_key("nvidia.com/mig.config.state")
                && !n.labels().contains_key("nvidia.com/mig-4g.40gb.count")
                && !n.labels().contains_key("nvidia.com/mig.strategy")
                && !n.annotations().contains_key("run.ai/mig-mapping");
            Ok(done.then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}
