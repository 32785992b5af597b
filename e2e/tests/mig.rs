//! MIG on KWOK nodes with the real scheduler: a mixed-strategy pool advertises
//! `nvidia.com/mig-<profile>` and GPU feature discovery's MIG labels, a pod asking for a MIG
//! instance lands and runs, a DRA claim of class `mig.nvidia.com` gets a MIG device named as
//! NVIDIA's driver names it, and a layout that cannot be is a pool condition, not a crash.

use std::time::Duration;

use anyhow::{Context, ensure};
use fakegpu_api::GpuNodePool;
use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_pod, create_pool, eventually, install_crds, kwok_scenario,
    running_pod, topology_of, unique_name,
};
use k8s_openapi::api::{
    core::v1::Node,
    resource::v1::{ResourceClaim, ResourceClaimTemplate},
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(60);

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
            let capacity = n.status.as_ref().and_then(|s| s.capacity.clone()).unwrap_or_default();
            let count = |name: &str| capacity.get(name).map(|q| q.0.clone());
            Ok((count("nvidia.com/mig-1g.10gb").as_deref() == Some("9")
                && count("nvidia.com/mig-3g.40gb").as_deref() == Some("1")
                && count("nvidia.com/gpu").as_deref() == Some("1"))
            .then_some(n))
        })
        .await?;
        let labels = n.labels();
        for (key, value) in [
            ("nvidia.com/mig.strategy", "mixed"),
            ("nvidia.com/mig-1g.10gb.count", "9"),
            ("nvidia.com/mig-2g.20gb.count", "1"),
            ("nvidia.com/mig-3g.40gb.memory", "40192"),
            ("nvidia.com/mig-3g.40gb.engines.decoder", "2"),
            ("nvidia.com/mig-1g.10gb.engines.copy", "1"),
        ] {
            ensure!(
                labels.get(key).map(String::as_str) == Some(value),
                "label {key}: {:?}",
                labels.get(key)
            );
        }

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

        let template: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": {"name": "mig-3g"},
            "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "selectors": [{"cel": {"expression":
                    "device.attributes['gpu.nvidia.com'].profile == '3g.40gb' && \
                     device.capacity['gpu.nvidia.com'].decoders.compareTo(quantity('2')) >= 0"}}],
            }}]}}},
        }))?;
        Api::<ResourceClaimTemplate>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &template)
            .await?;
        create_kwok_pod(
            &client,
            &namespace,
            "claimant",
            json!({"nodeSelector": {"fakegpu.dev/pool": pool},
                "resourceClaims": [{"name": "mig", "resourceClaimTemplateName": "mig-3g"}],
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"claims": [{"name": "mig"}]}}]}),
        )
        .await?;
        running_pod(&client, &namespace, "claimant", CONVERGE).await?;
        let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &namespace);
        let claim = claims
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .next()
            .context("the pod's claim")?;
        let devices: Vec<String> = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.device)
            .collect();
        ensure!(
            devices == ["gpu-0-mig-3g40gb-9-0"],
            "claim allocated {devices:?}"
        );

        // The topology document records who holds which instance.
        eventually("MIG instances held in the topology document", CONVERGE, || async {
            let Some((_, document)) = topology_of(&client, &node).await? else {
                return Ok(None);
            };
            let holders: Vec<(String, String)> = document
                .gpus
                .iter()
                .flat_map(|g| &g.mig_devices)
                .filter(|m| !m.status.allocated_by.pod.is_empty())
                .map(|m| (m.profile.clone(), m.status.allocated_by.pod.clone()))
                .collect();
            let want = [
                ("3g.40gb".to_owned(), "claimant".to_owned()),
                ("1g.10gb".to_owned(), "slice".to_owned()),
            ];
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
