//! A resync with nothing changed issues no write, and pods keep the GPUs they hold. Counted from
//! the API server's audit log (every mutating request the operator's ServiceAccount makes)
//! across an operator restart, which resyncs every object. Alone in its test binary: it restarts the shared operator, and cargo
//! runs test binaries one after another.

use std::time::Duration;

use anyhow::ensure;
use fakegpu_api::GpuNodePool;
use fakegpu_e2e::{
    admin_client, create_kwok_node, create_kwok_pod, create_namespace, create_pool, eventually,
    hack, install_crds, operator_writes, running_pod, topology_of, unique_name,
};
use fakegpu_model::names::label;
use k8s_openapi::api::{
    core::v1::{Namespace, Node},
    resource::v1::ResourceClaimTemplate,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

const NODES: usize = 4;

/// Waits until the operator has written nothing for `quiet`.
/// Also until no namespace is terminating: an earlier test binary's namespace on its way out
/// (a ComputeDomain whose template the namespace controller deleted first) is a change a resync
/// acts on, not a resync with nothing changed.
async fn wait_until_quiet(client: &kube::Client, quiet: Duration) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(
        "no namespace terminating",
        Duration::from_secs(120),
        || async {
            let terminating = namespaces
                .list(&Default::default())
                .await?
                .items
                .iter()
                .any(|ns| ns.metadata.deletion_timestamp.is_some());
            Ok((!terminating).then_some(()))
        },
    )
    .await?;
    let seen = AtomicUsize::new(operator_writes()?.len());
    let seen = &seen;
    eventually("operator quiet", Duration::from_secs(60), || async move {
        tokio::time::sleep(quiet).await;
        let now = operator_writes()?.len();
        Ok((seen.swap(now, Ordering::Relaxed) == now).then_some(()))
    })
    .await
}

#[tokio::test]
async fn a_resync_with_nothing_changed_writes_nothing() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("idem");
    let names: Vec<String> = (0..NODES).map(|i| format!("{pool}-{i}")).collect();
    let writes_before = operator_writes()?.len();
    for name in &names {
        create_kwok_node(&client, name, &[(label::NODE_POOL, &pool)]).await?;
    }
    let pools: Api<GpuNodePool> = Api::all(client.clone());
    create_pool(
        &client,
        &pool,
        json!({"gpu": {"profile": "h100"}, "numa": {"zones": 2},
            "interfaces": {"devicePlugin": true, "dra": true}}),
    )
    .await?;
    let namespace = create_namespace(&client, "idem").await?;

    let result = async {
        eventually("pool converged (is the operator running?)", Duration::from_secs(30), || async {
            let p = pools.get(&pool).await?;
            let ready = p.status.as_ref().is_some_and(|s| {
                s.node_count as usize == NODES
                    && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
            });
            Ok(ready.then_some(()))
        })
        .await?;
        // Pods hold GPUs across the restart: one by the extended resource, one by a claim.
        let on_pool = json!({"fakegpu.dev/pool": pool});
        create_kwok_pod(&client, &namespace, "counted", json!({"nodeSelector": on_pool,
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}))
            .await?;
        let template: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": {"name": "gpu", "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
        }))?;
        Api::<ResourceClaimTemplate>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &template)
            .await?;
        create_kwok_pod(&client, &namespace, "claimed", json!({"nodeSelector": on_pool,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]}))
            .await?;
        let mut bound = Vec::new();
        for pod in ["counted", "claimed"] {
            let pod = running_pod(&client, &namespace, pod, Duration::from_secs(30)).await?;
            bound.push(pod.spec.and_then(|s| s.node_name).unwrap_or_default());
        }
        bound.sort();
        bound.dedup();
        let held_by = |pod: &'static str| {
            let bound = bound.clone();
            let client = client.clone();
            async move {
                let mut held = Vec::new();
                for node in &bound {
                    let document = topology_of(&client, node).await?.map(|(_, d)| d).unwrap_or_default();
                    for gpu in document.gpus.iter().filter(|g| g.status.allocated_by.pod == pod) {
                        held.push(gpu.id.clone());
                    }
                }
                anyhow::Ok(held)
            }
        };
        eventually("both pods tracked", Duration::from_secs(30), || async {
            let counted = held_by("counted").await?;
            let claimed = held_by("claimed").await?;
            Ok((counted.len() == 3 && claimed.len() == 1).then_some(()))
        })
        .await?;
        let held_before = (held_by("counted").await?, held_by("claimed").await?);

        // The first pass is measured, not asserted: how often a node is written twice depends on
        // how far the watch cache lags behind the operator's own writes. A resync must write
        // nothing, and that is asserted below.
        // Count from quiet: the operator may still be finishing work of earlier test binaries
        // (pools they deleted), and echoes of the first pass may be in flight.
        wait_until_quiet(&client, Duration::from_secs(2)).await?;
        let first_pass: Vec<String> = operator_writes()?[writes_before..]
            .iter()
            .filter(|w| w.contains(&pool))
            .cloned()
            .collect();
        let per_node = |kind: &str| first_pass.iter().filter(|w| w.contains(kind)).count();
        println!(
            "first reconcile of {NODES} nodes: {} writes ({} node, {} ConfigMap, {} pool) = {:.2} per node",
            first_pass.len(),
            per_node("nodes/"),
            per_node("configmaps/"),
            per_node("gpunodepools/"),
            first_pass.len() as f64 / NODES as f64
        );

        let before_restart = operator_writes()?.len();
        hack("operator.sh", &["restart"])?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let resync = operator_writes()?[before_restart..].to_vec();
        println!("resync after restart: {} writes", resync.len());
        ensure!(resync.is_empty(), "the operator wrote on a resync with nothing changed: {resync:#?}");
        let held_after = (held_by("counted").await?, held_by("claimed").await?);
        ensure!(held_after == held_before, "GPUs moved across the restart: {held_before:?} -> {held_after:?}");
        anyhow::Ok(())
    }
    .await;

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&namespace, &DeleteParams::default())
        .await;
    let _ = pools.delete(&pool, &DeleteParams::default()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("pool cleaned up", Duration::from_secs(30), || async {
        Ok(pools.get_opt(&pool).await?.is_none().then_some(()))
    })
    .await?;
    for name in &names {
        let node = nodes.get(name).await?;
        ensure!(
            !node.labels().contains_key("fakegpu.dev/pool"),
            "{name} kept its pool label"
        );
        nodes.delete(name, &DeleteParams::default()).await?;
    }
    result
}
