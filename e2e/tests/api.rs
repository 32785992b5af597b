//! The GpuNodePool API against a real API server: the CRD is served and documented, samples
//! round-trip, bad objects are refused with the field named, RBAC applies to pools.

use anyhow::{Context, ensure};
use fakegpu_api::GpuNodePool;
use fakegpu_e2e::{
    Cleanup, FIELD_MANAGER, admin_client, api_error, create_namespace, create_pool, eventually,
    install_crds, kubectl, repo_root, service_account_client, unique_name,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const CONVERGE: std::time::Duration = std::time::Duration::from_secs(60);

fn pools_untyped(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<GpuNodePool>(&()))
}

fn pool_object(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "fakegpu.dev/v1alpha1",
        "kind": "GpuNodePool",
        "metadata": {"name": name},
        "spec": spec,
    }))?)
}

#[tokio::test]
async fn crd_is_established_and_documented() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;

    // The API server publishes a new CRD's OpenAPI asynchronously after it is Established.
    let mut explained = kubectl(&["explain", "gpunodepool.spec.gpu"]);
    for _ in 0..100 {
        if explained.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        explained = kubectl(&["explain", "gpunodepool.spec.gpu"]);
    }
    let explained = explained?;
    // Descriptions are prose, wrapped by kubectl alone: a doc comment's line breaks would cut
    // its sentences ("XID errors, ECC" / "errors," / "thermal throttling").
    let spec = kubectl(&["explain", "gpunodepool.spec"])?;
    let flowing = spec.split_whitespace().collect::<Vec<_>>().join(" ");
    ensure!(
        flowing.contains("(XID errors, ECC errors, thermal throttling)"),
        "`kubectl explain gpunodepool.spec` lacks the faults' description:\n{spec}"
    );
    let ragged: Vec<&str> = spec
        .lines()
        .zip(spec.lines().skip(1))
        .filter(|(line, next)| {
            let text = line.trim();
            // A line of prose cut short: a next line of the same paragraph follows it.
            !text.is_empty() && text.len() < 30 && text.ends_with(',') && !next.trim().is_empty()
        })
        .map(|(line, _)| line)
        .collect();
    ensure!(
        ragged.is_empty(),
        "`kubectl explain gpunodepool.spec` has ragged lines {ragged:?}:\n{spec}"
    );
    for expected in [
        "GROUP:      fakegpu.dev",
        "Builtin profile:",
        "memoryMiB\t<integer>",
        "Framebuffer per GPU, MiB.",
        "backend\t<string>",
        "enum: fake, mock",
    ] {
        ensure!(
            explained.contains(expected),
            "`kubectl explain gpunodepool.spec.gpu` lacks {expected:?}:\n{explained}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn printer_columns_show_pool_health() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let name = unique_name("columns");
    let pools: Api<GpuNodePool> = Api::all(client.clone());
    create_pool(&client, &name, json!({"gpu": {"profile": "future-gpu"}})).await?;
    // A pool that cannot get ready says why in the listing itself.
    let listed = eventually("the Ready reason listed", CONVERGE, || async {
        let table = kubectl(&["get", "gnp", &name])?;
        Ok(table.contains("UnknownProfile").then_some(table))
    })
    .await;
    pools.delete(&name, &DeleteParams::default()).await?;
    let listed = listed?;
    let mut lines = listed.lines();
    let columns: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        columns
            == [
                "NAME",
                "PRODUCT",
                "NODES",
                "GPUS",
                "ALLOCATED",
                "READY",
                "REASON",
                "AGE"
            ],
        "columns: {listed}"
    );
    // Empty cells (no product yet) print as nothing, so find the two by their neighbours.
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        row.windows(2).any(|w| w == ["False", "UnknownProfile"]),
        "row: {listed}"
    );
    Ok(())
}

/// Every sample under config/samples/ is accepted, and what the API server stores (with its
/// defaults applied) reads back as exactly what the Rust types make of the file: the CRD's
/// defaults and serde's defaults agree.
#[tokio::test]
async fn samples_apply_and_round_trip() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pools: Api<GpuNodePool> = Api::all(client.clone());

    let dir = repo_root().join("config/samples");
    let mut applied = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let mut sample: GpuNodePool =
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        // Test under a name of its own so a demo cluster's pools are left alone.
        let name = unique_name(&sample.name_any());
        sample.metadata.name = Some(name.clone());

        let untyped: Value = serde_yaml::from_str(&text)?;
        let mut raw = pool_object(&name, untyped["spec"].clone())?;
        raw.metadata.name = Some(name.clone());
        pools_untyped(&client)
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&raw),
            )
            .await
            .with_context(|| format!("applying {}", path.display()))?;

        let stored = pools.get(&name).await?;
        pools.delete(&name, &DeleteParams::default()).await?;
        ensure!(
            stored.spec == sample.spec,
            "{} does not round-trip:\nstored: {:#?}\nlocal:  {:#?}",
            path.display(),
            stored.spec,
            sample.spec
        );
        applied += 1;
    }
    ensure!(applied >= 4, "expected at least 4 samples, found {applied}");
    Ok(())
}

/// Bad pools and the field + message the API server must name. Each is a complete spec, so the
/// listed rule is the only thing wrong with it.
fn invalid_specs() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    vec![
        (
            "negative count",
            json!({"gpu": {"profile": "a100", "count": -1}}),
            "spec.gpu.count",
            "greater than or equal to 1",
        ),
        (
            "zero count",
            json!({"gpu": {"product": "X", "count": 0, "memoryMiB": 1024}}),
            "spec.gpu.count",
            "greater than or equal to 1",
        ),
        (
            "zero memory",
            json!({"gpu": {"product": "X", "count": 2, "memoryMiB": 0}}),
            "spec.gpu.memoryMiB",
            "greater than or equal to 1",
        ),
        (
            "unknown backend",
            json!({"gpu": {"backend": "magic", "profile": "a100"}}),
            "spec.gpu.backend",
            "Unsupported value: \"magic\"",
        ),
        (
            "profile with contradictory compute capability",
            json!({"gpu": {"profile": "h100", "computeCapability": "8.0"}}),
            "spec.gpu.computeCapability",
            "contradicts profile h100, whose compute capability is 9.0",
        ),
        (
            "explicit GPU without memory",
            json!({"gpu": {"product": "X", "count": 2}}),
            "spec.gpu",
            "without a profile, product, count and memoryMiB are all required",
        ),
        (
            "mock backend without profile",
            json!({"gpu": {"backend": "mock", "product": "X", "count": 1, "memoryMiB": 5}}),
            "spec.gpu.profile",
            "the mock backend needs a profile",
        ),
        (
            "malformed profile name",
            json!({"gpu": {"profile": "H100!"}}),
            "spec.gpu.profile",
            "should match",
        ),
        (
            "malformed driver version",
            json!({"gpu": {"profile": "h100", "driverVersion": "latest"}}),
            "spec.gpu.driverVersion",
            "should match",
        ),
        (
            "no interface served",
            json!({"gpu": {"profile": "a100"}, "interfaces": {"devicePlugin": false, "dra": false}}),
            "spec.interfaces",
            "at least one of devicePlugin and dra must be true",
        ),
        (
            "more NUMA zones than profile GPUs",
            json!({"gpu": {"profile": "t4"}, "numa": {"zones": 5}}),
            "spec.numa.zones",
            "must not exceed the GPUs per node",
        ),
        (
            "more NUMA zones than explicit GPUs",
            json!({"gpu": {"profile": "a100", "count": 2}, "numa": {"zones": 3}}),
            "spec.numa.zones",
            "must not exceed the GPUs per node",
        ),
        (
            "zero NUMA zones",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 0}}),
            "spec.numa.zones",
            "greater than or equal to 1",
        ),
        (
            "remote distance below local",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "distances": {"self": 30, "remote": 21}}}),
            "spec.numa.distances.remote",
            "must be greater than the distance of a zone to itself",
        ),
        (
            "zero distance",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "distances": {"self": 0, "remote": 21}}}),
            "spec.numa.distances.self",
            "greater than or equal to 1",
        ),
        (
            "gpusPerZone of the wrong length",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 3, "gpusPerZone": [4, 4]}}),
            "spec.numa.gpusPerZone",
            "exactly one entry per zone",
        ),
        (
            "gpusPerZone not adding up",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "gpusPerZone": [4, 3]}}),
            "spec.numa.gpusPerZone",
            "must add up to the GPUs per node",
        ),
        (
            "inverted utilization range",
            json!({"gpu": {"profile": "a100"}, "utilization": {"default": "30-10"}}),
            "spec.utilization.default",
            "MIN above MAX",
        ),
        (
            "utilization above 100",
            json!({"gpu": {"profile": "a100"}, "utilization": {"default": "10-200"}}),
            "spec.utilization.default",
            "at most 100",
        ),
        (
            "utilization not a number",
            json!({"gpu": {"profile": "a100"}, "utilization": {"default": "abc"}}),
            "spec.utilization.default",
            "should match",
        ),
        (
            "MIG strategy without layout",
            json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "mixed"}}),
            "spec.mig.layout",
            "Required value",
        ),
        (
            "MIG with an empty layout",
            json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "mixed", "layout": []}}),
            "spec.mig.layout",
            "should have at least 1 items",
        ),
        (
            "MIG on a product without MIG",
            json!({"gpu": {"profile": "t4"}, "mig": {"strategy": "mixed", "layout": [{"profiles": ["1g.5gb"]}]}}),
            "spec.mig",
            "profile t4 does not support MIG",
        ),
        (
            "single MIG strategy with two profiles",
            json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "single", "layout": [{"profiles": ["1g.5gb", "2g.10gb"]}]}}),
            "spec.mig.layout",
            "strategy single needs one MIG profile",
        ),
        (
            "MIG layout beyond the GPUs",
            json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "mixed", "layout": [{"gpus": [8], "profiles": ["1g.5gb"]}]}}),
            "spec.mig.layout",
            "GPU index beyond the GPUs per node",
        ),
        (
            "malformed MIG profile",
            json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "mixed", "layout": [{"profiles": ["big"]}]}}),
            "spec.mig.layout[0].profiles[0]",
            "should match",
        ),
        (
            "GPU as another resource",
            json!({"gpu": {"profile": "a100"}, "otherResources": [{"name": "nvidia.com/gpu", "count": 1}]}),
            "spec.otherResources[0].name",
            "not otherResources",
        ),
        (
            "duplicate other resource",
            json!({"gpu": {"profile": "a100"}, "otherResources": [{"name": "example.com/nic", "count": 1}, {"name": "example.com/nic", "count": 2}]}),
            "spec.otherResources[1]",
            "Duplicate value",
        ),
        (
            "no GPU at all",
            json!({"interfaces": {"dra": true}}),
            "spec.gpu",
            "Required value",
        ),
        (
            "CPU per zone that is no quantity",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "cpuPerZone": "lots"}}),
            "spec.numa.cpuPerZone",
            "positive quantity",
        ),
        (
            "negative memory per zone",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "memoryPerZone": "-5Gi"}}),
            "spec.numa.memoryPerZone",
            "positive quantity",
        ),
        (
            "no CPU per zone",
            json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "cpuPerZone": 0}}),
            "spec.numa.cpuPerZone",
            "positive quantity",
        ),
        (
            "a selector of every node",
            json!({"gpu": {"profile": "a100"}, "nodeSelector": {}}),
            "spec.nodeSelector",
            "selects every node",
        ),
        (
            "a selector of every node, spelled out",
            json!({"gpu": {"profile": "a100"}, "nodeSelector": {"matchLabels": {}, "matchExpressions": []}}),
            "spec.nodeSelector",
            "selects every node",
        ),
    ]
}

#[tokio::test]
async fn invalid_pools_are_refused_with_the_field_named() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pools = pools_untyped(&client);

    let cases = invalid_specs();
    ensure!(cases.len() >= 15);
    let mut failures = Vec::new();
    for (what, spec, field, fragment) in cases {
        let name = unique_name("invalid");
        match pools
            .create(&PostParams::default(), &pool_object(&name, spec)?)
            .await
        {
            Ok(_) => {
                pools.delete(&name, &DeleteParams::default()).await?;
                failures.push(format!("{what}: accepted"));
            }
            Err(error) => match api_error(&error) {
                Some((422, message))
                    if message.contains(&format!("{field}:")) && message.contains(fragment) => {}
                _ => failures.push(format!(
                    "{what}: expected 422 naming {field} with {fragment:?}, got {error}"
                )),
            },
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// What hack/demo.sh (the README's first command) applies of examples/ is accepted as it is:
/// every file there is a manifest the API server takes.
#[tokio::test]
async fn the_examples_apply_as_the_demo_applies_them() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let namespace = create_namespace(&client, "examples").await?;
    let cleanup = Cleanup::new(&client).namespace(&namespace);
    let examples = repo_root().join("examples");
    let applied = kubectl(&[
        "apply",
        "--dry-run=server",
        "-n",
        &namespace,
        "-f",
        &examples.to_string_lossy(),
    ]);
    cleanup.after(applied.map(drop)).await
}

/// The reference's Helm values, converted (`fakegpu-convert`), are pools the API server takes.
#[tokio::test]
async fn the_reference_s_helm_values_convert_to_pools_the_api_server_accepts() -> anyhow::Result<()>
{
    let client = admin_client().await?;
    install_crds(&client).await?;
    let values = std::fs::read_to_string(repo_root().join("examples/reference-helm/values.yaml"))?;
    let converted = fakegpu_api::convert::convert(&values)?;
    ensure!(converted.pools.len() == 3, "{converted:?}");
    let pools = pools_untyped(&client);
    let suffix = unique_name("helm");
    for mut pool in converted.pools {
        // Names of the test's own: other tests' pools may be called default.
        let name = format!(
            "{}-{suffix}",
            pool["metadata"]["name"].as_str().unwrap_or_default()
        );
        pool["metadata"]["name"] = name.clone().into();
        let object: DynamicObject = serde_json::from_value(pool)?;
        let created = pools.create(&PostParams::default(), &object).await;
        if created.is_ok() {
            pools.delete(&name, &DeleteParams::default()).await?;
        }
        created.with_context(|| format!("converted pool {name} refused"))?;
    }
    Ok(())
}

/// The rules' boundaries: each of these sits right at a limit the refused cases cross.
#[tokio::test]
async fn pools_at_the_limits_are_accepted() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pools = pools_untyped(&client);
    let cases = [
        json!({"gpu": {"product": "X", "count": 1, "memoryMiB": 1}}),
        json!({"gpu": {"profile": "h100", "computeCapability": "9.0", "count": 64}}),
        json!({"gpu": {"profile": "t4"}, "numa": {"zones": 4}}),
        json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "gpusPerZone": [5, 3], "distances": {"self": 10, "remote": 11}}}),
        json!({"gpu": {"profile": "a100"}, "utilization": {"default": "0-100"}}),
        json!({"gpu": {"profile": "a100"}, "utilization": {"default": "100"}}),
        json!({"gpu": {"profile": "a100"}, "interfaces": {"devicePlugin": false, "dra": true}}),
        json!({"gpu": {"profile": "a100"}, "mig": {"strategy": "single", "layout": [{"profiles": ["1g.5gb", "1g.5gb"]}, {"gpus": [7], "profiles": ["1g.5gb"]}]}}),
        json!({"gpu": {"profile": "b200"}, "mig": {"strategy": "mixed", "layout": [{"gpus": [0, 1], "profiles": ["3g.90gb", "1g.23gb+me"]}]}}),
        // Unknown profiles are the operator's to judge (a status condition), not the API server's.
        json!({"gpu": {"profile": "future-gpu"}, "numa": {"zones": 8}}),
        json!({"gpu": {"backend": "mock", "profile": "h100"}}),
        json!({"gpu": {"profile": "a100"}, "otherResources": [{"name": "nvidia.com/hostdev", "count": 0}]}),
        json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "cpuPerZone": "500m", "memoryPerZone": "64Gi"}}),
        json!({"gpu": {"profile": "a100"}, "numa": {"zones": 2, "cpuPerZone": 1, "memoryPerZone": 1}}),
        json!({"gpu": {"profile": "a100"}, "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}),
    ];
    for spec in cases {
        let name = unique_name("valid");
        pools
            .create(&PostParams::default(), &pool_object(&name, spec.clone())?)
            .await
            .with_context(|| format!("refused {spec}"))?;
        pools.delete(&name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// RBAC is really on: a ServiceAccount without a role cannot create pools; granting exactly
/// `create` on gpunodepools lets it.
#[tokio::test]
async fn creating_pools_needs_rbac() -> anyhow::Result<()> {
    let admin = admin_client().await?;
    install_crds(&admin).await?;
    let namespace = create_namespace(&admin, "rbac").await?;
    let cleanup = Cleanup::new(&admin).namespace(&namespace);
    let result = rbac_applies_to_pools(&admin, &namespace).await;
    cleanup.after(result).await
}

async fn rbac_applies_to_pools(admin: &Client, namespace: &str) -> anyhow::Result<()> {
    let account = "pool-writer";
    let as_account = service_account_client(admin, namespace, account).await?;

    let name = unique_name("rbac");
    let pool = pool_object(&name, json!({"gpu": {"profile": "a100"}}))?;
    let refused = pools_untyped(&as_account)
        .create(&PostParams::default(), &pool)
        .await
        .err()
        .context("a ServiceAccount without any role created a GpuNodePool")?;
    let (code, message) = api_error(&refused).context("expected an API error")?;
    ensure!(
        code == 403 && message.contains("gpunodepools"),
        "expected 403 on gpunodepools, got {refused}"
    );

    let role_name = unique_name("pool-creator");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(role_name.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["fakegpu.dev".into()]),
            resources: Some(vec!["gpunodepools".into()]),
            verbs: vec!["create".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(role_name.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role_name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account.into(),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        }]),
    };
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    roles.create(&PostParams::default(), &role).await?;
    bindings.create(&PostParams::default(), &binding).await?;

    // RBAC changes reach the authorizer through its informer: retry briefly.
    let mut created = Err(anyhow::anyhow!("not tried"));
    for _ in 0..50 {
        created = pools_untyped(&as_account)
            .create(&PostParams::default(), &pool)
            .await
            .map_err(anyhow::Error::from);
        if created.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    pools_untyped(admin)
        .delete(&name, &DeleteParams::default())
        .await
        .ok();
    bindings
        .delete(&role_name, &DeleteParams::default())
        .await?;
    roles.delete(&role_name, &DeleteParams::default()).await?;
    created.context("granted create on gpunodepools, still refused")?;
    Ok(())
}
