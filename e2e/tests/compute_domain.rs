//! ComputeDomains on KWOK nodes with the real scheduler and controller manager: the operator
//! creates the domain's ResourceClaimTemplate, pools serving ComputeDomains publish an IMEX
//! channel per node, the domain turns Ready with the nodes its pods run on, its template goes
//! with it, and bad specs are refused by the API server.

use std::time::Duration;

use anyhow::{Context, ensure};
use fakegpu_api::compute_domain::{ComputeDomain, DomainState};
use fakegpu_e2e::{
    Cleanup, admin_client, api_error, create_kwok_node, create_namespace, create_pool, eventually,
    install_crds, repo_root, running_pod, unique_name,
};
use fakegpu_model::names::{compute_domain as names, label};
use k8s_openapi::api::{
    core::v1::Pod,
    resource::v1::{ResourceClaimTemplate, ResourceSlice},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde::Deserialize;
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(60);

/// The example's ComputeDomain and pod (examples/compute-domain.yaml), the pod pinned to `pool`.
fn example(pool: &str) -> anyhow::Result<(ComputeDomain, Pod)> {
    let text = std::fs::read_to_string(repo_root().join("examples/compute-domain.yaml"))?;
    let mut documents = serde_yaml::Deserializer::from_str(&text).map(Value::deserialize);
    let domain = documents.next().context("the example's ComputeDomain")??;
    let mut pod = documents.next().context("the example's pod")??;
    pod["spec"]["nodeSelector"] = json!({"fakegpu.dev/pool": pool});
    Ok((
        serde_json::from_value(domain)?,
        serde_json::from_value(pod)?,
    ))
}

/// A pool of `count` KWOK GB200 nodes serving ComputeDomains; its nodes once their channel
/// slices are published.
async fn domain_pool(client: &Client, pool: &str, count: usize) -> anyhow::Result<Vec<String>> {
    let nodes: Vec<String> = (0..count).map(|i| format!("{pool}-node-{i}")).collect();
    for node in &nodes {
        create_kwok_node(client, node, &[(label::NODE_POOL, pool)]).await?;
    }
    create_pool(
        client,
        pool,
        json!({"gpu": {"profile": "gb200", "count": 2},
            "interfaces": {"dra": true, "computeDomains": true}}),
    )
    .await?;
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    for node in &nodes {
        let name = format!("kwok-{node}-compute-domain-channel");
        let slice = eventually(&format!("channel slice {name}"), CONVERGE, || async {
            Ok(slices.get_opt(&name).await?)
        })
        .await?;
        let device = slice
            .spec
            .devices
            .as_ref()
            .and_then(|d| d.first())
            .context("channel device")?;
        ensure!(slice.spec.driver == names::DRIVER && device.name == "channel-0");
        let id = device
            .attributes
            .as_ref()
            .and_then(|a| a.get(names::ID_ATTRIBUTE))
            .and_then(|a| a.int);
        ensure!(id == Some(0), "channel id attribute: {device:?}");
    }
    Ok(nodes)
}

async fn status_where(
    domains: &Api<ComputeDomain>,
    name: &str,
    what: &str,
    check: impl Fn(DomainState, &[String]) -> bool,
) -> anyhow::Result<()> {
    eventually(
        &format!("ComputeDomain {name}: {what}"),
        CONVERGE,
        || async {
            let domain = domains.get(name).await?;
            let status = domain.status.unwrap_or_default();
            let nodes: Vec<String> = status.nodes.iter().map(|n| n.name.clone()).collect();
            Ok(check(status.status, &nodes).then_some(()))
        },
    )
    .await
}

#[tokio::test]
async fn the_example_domain_becomes_ready_with_its_node_and_takes_its_template_along()
-> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("cd");
    let namespace = create_namespace(&client, "cd").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&pool)
        .namespace(&namespace)
        .node(&format!("{pool}-node-0"));
    let result = async {
        let nodes = domain_pool(&client, &pool, 1).await?;
        let (domain, pod) = example(&pool)?;
        let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), &namespace);
        let domain = domains.create(&PostParams::default(), &domain).await?;
        let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), &namespace);
        let template = eventually("the domain's template", CONVERGE, || async {
            Ok(templates.get_opt("imex-channel").await?)
        })
        .await?;
        ensure!(
            template
                .owner_references()
                .iter()
                .any(|o| Some(&o.uid) == domain.uid().as_ref()),
            "template not owned by the domain: {:?}",
            template.metadata.owner_references
        );
        status_where(&domains, "imex-domain", "NotReady, no node", |s, n| {
            s == DomainState::NotReady && n.is_empty()
        })
        .await?;

        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        pods.create(&PostParams::default(), &pod).await?;
        let pod = running_pod(&client, &namespace, "imex-worker", CONVERGE).await?;
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        ensure!(bound.as_ref() == nodes.first(), "pod bound to {bound:?}");
        status_where(
            &domains,
            "imex-domain",
            "Ready on the pod's node",
            |s, n| s == DomainState::Ready && n == nodes.as_slice(),
        )
        .await?;

        domains
            .delete("imex-domain", &DeleteParams::foreground())
            .await?;
        eventually("the template goes with the domain", CONVERGE, || async {
            Ok(templates
                .get_opt("imex-channel")
                .await?
                .is_none()
                .then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn a_two_node_domain_is_ready_once_pods_run_on_both_nodes() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("cd2");
    let namespace = create_namespace(&client, "cd2").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&pool)
        .namespace(&namespace)
        .node(&format!("{pool}-node-0"))
        .node(&format!("{pool}-node-1"));
    let result = async {
        let nodes = domain_pool(&client, &pool, 2).await?;
        let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), &namespace);
        let domain: ComputeDomain = serde_json::from_value(json!({
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": "pair"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "pair-channel"},
                "allocationMode": "All"}},
        }))?;
        domains.create(&PostParams::default(), &domain).await?;
        let (_, example_pod) = example(&pool)?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let mut placed = Vec::new();
        for name in ["rank-0", "rank-1"] {
            let mut pod = example_pod.clone();
            pod.metadata.name = Some(name.into());
            if let Some(claims) = pod.spec.as_mut().and_then(|s| s.resource_claims.as_mut()) {
                claims[0].resource_claim_template_name = Some("pair-channel".into());
            }
            pods.create(&PostParams::default(), &pod).await?;
            let pod = running_pod(&client, &namespace, name, CONVERGE).await?;
            placed.push(
                pod.spec
                    .and_then(|s| s.node_name)
                    .context("pod bound to a node")?,
            );
            if placed.len() == 1 {
                status_where(&domains, "pair", "NotReady with one node", |s, n| {
                    s == DomainState::NotReady && n == placed.as_slice()
                })
                .await?;
            }
        }
        // One channel per node: the second pod had to go to the other node.
        placed.sort();
        ensure!(placed == nodes, "pods on {placed:?}, nodes {nodes:?}");
        status_where(&domains, "pair", "Ready with both nodes", |s, n| {
            s == DomainState::Ready && n == nodes.as_slice()
        })
        .await
    }
    .await;
    cleanup.after(result).await
}

#[tokio::test]
async fn bad_domains_are_refused_with_the_field_named() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let namespace = create_namespace(&client, "cdbad").await?;
    let cleanup = Cleanup::new(&client).namespace(&namespace);
    let result = async {
        let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), &namespace);
        let untyped: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            &namespace,
            &kube::api::ApiResource::erase::<ComputeDomain>(&()),
        );
        let object = |name: &str, spec: Value| -> anyhow::Result<kube::api::DynamicObject> {
            Ok(serde_json::from_value(json!({
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
                "metadata": {"name": name}, "spec": spec,
            }))?)
        };
        for (what, spec, field, message) in [
            (
                "no nodes",
                json!({"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}}),
                "spec.numNodes",
                "greater than or equal to 1",
            ),
            (
                "unknown allocation mode",
                json!({"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Some"}}),
                "spec.channel.allocationMode",
                "Unsupported value: \"Some\"",
            ),
            (
                "no template",
                json!({"numNodes": 1, "channel": {}}),
                "spec.channel.resourceClaimTemplate",
                "Required value",
            ),
            (
                "a template name no object can have",
                json!({"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "IMEX_channel"}}}),
                "spec.channel.resourceClaimTemplate.name",
                "should match",
            ),
        ] {
            let error = untyped
                .create(&PostParams::default(), &object("bad", spec)?)
                .await
                .err()
                .with_context(|| format!("{what}: accepted"))?;
            let (code, text) = api_error(&error).with_context(|| format!("{what}: {error}"))?;
            ensure!(
                code == 422 && text.contains(field) && text.contains(message),
                "{what}: {code} {text}"
            );
        }
        let good = object(
            "good",
            json!({"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "t"}}}),
        )?;
        untyped.create(&PostParams::default(), &good).await?;
        let stored = domains.get("good").await?;
        ensure!(
            stored.spec.channel.allocation_mode.as_str() == "Single",
            "allocationMode defaults to Single"
        );
        let change = json!({"spec": {"numNodes": 3}});
        let error = domains
            .patch("good", &PatchParams::default(), &Patch::Merge(&change))
            .await
            .err()
            .context("a spec change was accepted")?;
        let (code, text) = api_error(&error).context("spec change refusal")?;
        ensure!(
            code == 422 && text.contains("A computeDomain.spec is immutable"),
            "{code} {text}"
        );
        Ok(())
    }
    .await;
    cleanup.after(result).await
}

/// A template name the namespace already uses for a template of its own: the user's template
/// is left alone, and the domain says why it cannot get ready (condition, Stalled, Event)
/// until the name is free; then it takes it.
#[tokio::test]
async fn a_template_name_held_by_the_user_is_the_domain_s_condition() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let namespace = create_namespace(&client, "cdtaken").await?;
    let cleanup = Cleanup::new(&client).namespace(&namespace);
    let result = async {
        let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), &namespace);
        let theirs: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": {"name": "taken", "labels": {"owner": "user"}},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
        }))?;
        templates.create(&PostParams::default(), &theirs).await?;
        let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), &namespace);
        let domain: ComputeDomain = serde_json::from_value(json!({
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": "imex"},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "taken"}}},
        }))?;
        domains.create(&PostParams::default(), &domain).await?;
        let conditions = |d: &ComputeDomain| -> Vec<(String, String, String)> {
            d.status
                .iter()
                .flat_map(|s| &s.conditions)
                .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
                .collect()
        };
        eventually(
            "Ready=False and Stalled, TemplateConflict",
            CONVERGE,
            || async {
                let found = conditions(&domains.get("imex").await?);
                let want = [
                    ("Ready", "False", "TemplateConflict"),
                    ("Stalled", "True", "TemplateConflict"),
                ]
                .map(|(t, s, r)| (t.to_owned(), s.to_owned(), r.to_owned()));
                Ok((found == want).then_some(()))
            },
        )
        .await?;
        fakegpu_e2e::warning_event_in(
            &client,
            &namespace,
            "imex",
            "TemplateConflict",
            "is not this domain's",
            CONVERGE,
        )
        .await?;
        let kept = templates.get("taken").await?;
        ensure!(
            kept.labels().get("owner").map(String::as_str) == Some("user"),
            "the user's template was changed"
        );
        // The name freed, the domain takes it and waits for its nodes like any other.
        templates.delete("taken", &DeleteParams::default()).await?;
        eventually(
            "the domain's own template, and WaitingForNodes",
            CONVERGE,
            || async {
                let template = templates.get_opt("taken").await?;
                let own = template.is_some_and(|t| t.labels().contains_key(names::TEMPLATE_LABEL));
                let found = conditions(&domains.get("imex").await?);
                let waiting = found == [("Ready".into(), "False".into(), "WaitingForNodes".into())];
                Ok((own && waiting).then_some(()))
            },
        )
        .await
    }
    .await;
    cleanup.after(result).await
}
