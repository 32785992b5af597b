//! GitOps tools judge health by kstatus (sigs.k8s.io/cli-utils: Flux, Argo CD, kpt). Pools and
//! ComputeDomains must read right by it: a healthy pool Current, a pool that cannot become
//! ready Failed (not InProgress forever), a pool whose edit is not yet reconciled InProgress,
//! a ComputeDomain waiting for its nodes InProgress (not Current), one whose template name is
//! taken Failed. hack/kstatus computes it with cli-utils itself. Alone in its test binary: it stops and restarts the shared operator.

use std::{process::Stdio, time::Duration};

use anyhow::{Context, ensure};
use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_node, create_namespace, create_pool, eventually, hack,
    install_crds, kubectl, repo_root, unique_name,
};
use fakegpu_model::names::label;
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(60);

/// kstatus of the object `kubectl get <kind> <name> -o json` prints: (status, message).
fn kstatus(kind: &str, name: &str, namespace: Option<&str>) -> anyhow::Result<(String, String)> {
    let mut args = vec!["get", kind, name, "-o", "json"];
    if let Some(namespace) = namespace {
        args.extend(["-n", namespace]);
    }
    let object = kubectl(&args)?;
    let binary = std::env::var_os("FAKEGPU_KSTATUS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/hack-bin/kstatus"));
    let mut child = std::process::Command::new(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {} (hack/test.sh builds it)", binary.display()))?;
    use std::io::Write;
    child
        .stdin
        .take()
        .context("kstatus's stdin")?
        .write_all(object.as_bytes())?;
    let output = child.wait_with_output()?;
    ensure!(output.status.success(), "kstatus: {output:?}");
    let line = String::from_utf8(output.stdout)?;
    let mut fields = line.trim_end().splitn(3, '\t').skip(1);
    let status = fields.next().unwrap_or_default().to_owned();
    let message = fields.next().unwrap_or_default().to_owned();
    Ok((status, message))
}

/// `value` as a Lua expression: objects as tables keyed by string, lists as sequences, null as
/// nil, as Argo CD hands an object to its health checks.
fn lua_literal(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(text) => format!("{text:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(lua_literal).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Object(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|(key, value)| format!("[{key:?}] = {}", lua_literal(value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// Argo CD's health of pool `name` by fakegpu's check (deploy/argo-cd), run with Lua 5.1:
/// (status, message).
fn argo_cd_health(name: &str) -> anyhow::Result<(String, String)> {
    let object: serde_json::Value =
        serde_json::from_str(&kubectl(&["get", "gpunodepool", name, "-o", "json"])?)?;
    let check = std::fs::read_to_string(repo_root().join("deploy/argo-cd/gpunodepool-health.lua"))?;
    let program = format!(
        "obj = {}\nlocal function check()\n{check}\nend\nlocal hs = check()\n\
         io.write(hs.status, \"\\t\", hs.message or \"\")\n",
        lua_literal(&object)
    );
    let output = std::process::Command::new("lua5.1")
        .args(["-e", &program])
        .output()
        .context("running lua5.1 (hack/lib/prerequisites.sh installs it)")?;
    ensure!(
        output.status.success(),
        "Argo CD's health check: {output:?}"
    );
    let text = String::from_utf8(output.stdout)?;
    let (status, message) = text.split_once('\t').unwrap_or((&text, ""));
    Ok((status.to_owned(), message.to_owned()))
}

/// Waits until kstatus reads `expected` for the object; for a pool, Argo CD's health by
/// fakegpu's check must say the same (Current is Healthy, InProgress Progressing, Failed
/// Degraded).
async fn reads(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    expected: &str,
) -> anyhow::Result<()> {
    eventually(
        &format!("kstatus of {kind}/{name}: {expected}"),
        CONVERGE,
        || async {
            let (status, message) = kstatus(kind, name, namespace)?;
            ensure!(status == expected, "{status}: {message}");
            Ok(Some(()))
        },
    )
    .await?;
    if kind == "gpunodepool" {
        let argo = match expected {
            "Current" => "Healthy",
            "InProgress" => "Progressing",
            _ => "Degraded",
        };
        let (health, message) = argo_cd_health(name)?;
        ensure!(
            health == argo,
            "Argo CD's health of pool {name} is {health} ({message}), kstatus reads {expected}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn pools_and_domains_read_right_by_kstatus() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let healthy = unique_name("kstatus-ok");
    let broken = unique_name("kstatus-broken");
    let node = format!("{healthy}-node");
    let namespace = create_namespace(&client, "kstatus").await?;
    let cleanup = Cleanup::new(&client)
        .pool(&healthy)
        .pool(&broken)
        .node(&node)
        .namespace(&namespace);
    let result = async {
        create_kwok_node(&client, &node, &[(label::NODE_POOL, &healthy)]).await?;
        create_pool(&client, &healthy, json!({"gpu": {"profile": "t4"}})).await?;
        create_pool(&client, &broken, json!({"gpu": {"profile": "no-such-gpu"}})).await?;
        reads("gpunodepool", &healthy, None, "Current").await?;
        reads("gpunodepool", &broken, None, "Failed").await?;

        // The operator is away: an edit is not reconciled yet, and a new domain has no status.
        hack("operator.sh", &["stop"])?;
        let restarted = async {
            kubectl(&[
                "patch",
                "gpunodepool",
                &healthy,
                "--type=merge",
                "-p",
                r#"{"spec":{"gpu":{"profile":"t4","count":2}}}"#,
            ])?;
            reads("gpunodepool", &healthy, None, "InProgress").await?;
            let domain = json!({
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
                "metadata": {"name": "waiting", "namespace": namespace},
                "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "waiting-channel"}}},
            });
            let file = std::env::temp_dir().join(format!("{namespace}-domain.json"));
            std::fs::write(&file, domain.to_string())?;
            let created = kubectl(&["create", "-f", &file.to_string_lossy()]);
            let _ = std::fs::remove_file(&file);
            created?;
            anyhow::Ok(())
        }
        .await;
        hack("operator.sh", &["restart"])?;
        restarted?;
        reads("gpunodepool", &healthy, None, "Current").await?;
        // No pod holds its channel yet: NotReady, and kstatus must not call that done.
        reads("computedomain", "waiting", Some(&namespace), "InProgress").await?;
        // A domain whose template name the user's own template holds cannot get ready without
        // the user: Failed.
        let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "users", "namespace": namespace},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}},
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
             "metadata": {"name": "taken", "namespace": namespace},
             "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "users"}}}},
        ]});
        let file = std::env::temp_dir().join(format!("{namespace}-taken.json"));
        std::fs::write(&file, objects.to_string())?;
        let created = kubectl(&["create", "-f", &file.to_string_lossy()]);
        let _ = std::fs::remove_file(&file);
        created?;
        reads("computedomain", "taken", Some(&namespace), "Failed").await
    }
    .await;
    cleanup.after(result).await
}
