//! Running pods never change GPUs. The operator records each pod's GPUs on the pod (annotation
//! `fakegpu.dev/gpus`) and reads them back, so that losing the node's topology ConfigMap,
//! finding it garbled, or the node leaving its pool and joining again moves no running pod,
//! even where a recomputation from scratch would give it another GPU.

use std::time::Duration;

use anyhow::ensure;
use fakegpu_e2e::{
    OPERATOR_NAMESPACE, create_kwok_pod, create_pool, eventually, gpu_holders, kwok_scenario,
    running_pod, set_node_pool,
};
use fakegpu_model::names::annotation;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(60);

/// Waits until the document records exactly `expected`.
async fn recorded(
    client: &Client,
    node: &str,
    what: &str,
    expected: &[(String, String)],
) -> anyhow::Result<()> {
    eventually(what, CONVERGE, || async {
        let held = gpu_holders(client, node).await?;
        ensure!(held.as_deref() == Some(expected), "holders now: {held:?}");
        Ok(Some(()))
    })
    .await
}

#[tokio::test]
async fn running_pods_keep_their_gpus_whatever_happens_to_the_document() -> anyhow::Result<()> {
    let (client, pool, node, namespace, cleanup) = kwok_scenario("keep").await?;
    let result = async {
        create_pool(
            &client,
            &pool,
            json!({"gpu": {"profile": "h100", "count": 4}}),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        // One after another, so that each takes the lowest free GPU: p0 on GPU 0 ... p3 on 3.
        for i in 0..4 {
            let name = format!("p{i}");
            create_kwok_pod(
                &client,
                &namespace,
                &name,
                json!({"nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
            )
            .await?;
            running_pod(&client, &namespace, &name, CONVERGE).await?;
            eventually(&format!("{name} recorded"), CONVERGE, || async {
                let held = gpu_holders(&client, &node).await?.unwrap_or_default();
                Ok(held.iter().any(|(_, pod)| *pod == name).then_some(()))
            })
            .await?;
        }
        // p0 and p1 finish: a recomputation from scratch would now give p2 and p3 GPUs 0 and 1.
        for name in ["p0", "p1"] {
            pods.delete(name, &Default::default()).await?;
        }
        let all = gpu_holders(&client, &node).await?.unwrap_or_default();
        let kept: Vec<(String, String)> = all
            .into_iter()
            .filter(|(_, pod)| pod == "p2" || pod == "p3")
            .collect();
        ensure!(kept.len() == 2, "p2 and p3 hold no GPU: {kept:?}");
        recorded(&client, &node, "only p2 and p3 hold GPUs", &kept).await?;
        // Each pod carries its GPU.
        for (uuid, pod) in &kept {
            eventually(&format!("{pod} annotated"), CONVERGE, || async {
                let annotations = pods
                    .get(pod)
                    .await?
                    .metadata
                    .annotations
                    .unwrap_or_default();
                Ok((annotations.get(annotation::ASSIGNED_GPUS) == Some(uuid)).then_some(()))
            })
            .await?;
        }

        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
        let name = format!("topology-{node}");
        configmaps.delete(&name, &Default::default()).await?;
        recorded(
            &client,
            &node,
            "the same GPUs after the ConfigMap was deleted",
            &kept,
        )
        .await?;

        configmaps
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"topology.yml": "gpus: [garbage"}})),
            )
            .await?;
        recorded(
            &client,
            &node,
            "the same GPUs after the ConfigMap was garbled",
            &kept,
        )
        .await?;

        set_node_pool(&client, &node, None).await?;
        eventually("the node out of its pool", CONVERGE, || async {
            Ok(configmaps.get_opt(&name).await?.is_none().then_some(()))
        })
        .await?;
        set_node_pool(&client, &node, Some(&pool)).await?;
        recorded(
            &client,
            &node,
            "the same GPUs after the node rejoined",
            &kept,
        )
        .await
    }
    .await;
    cleanup.after(result).await
}
