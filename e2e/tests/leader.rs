//! Two operator replicas are safe: the second stands by (ready, not reconciling) while the first
//! holds the lease, and takes over when the first stops and gives the lease up. A leader that
//! dies without giving it up (SIGKILL) is replaced once the lease expires. Alone in its test
//! binary: it stops and restarts the shared operator.

use std::time::Duration;

use anyhow::ensure;
use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_node, create_pool, eventually, hack, http_get, install_crds,
    labelled_for, metric_value, operator_address, unique_name,
};
use fakegpu_model::names::label;
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(45);

/// The standby replica listens next to the main one.
fn standby_address() -> String {
    let main = operator_address();
    let (host, port) = main.rsplit_once(':').unwrap_or(("127.0.0.1", "18080"));
    let port: u16 = port.parse().unwrap_or(18080);
    format!("{host}:{}", port + 1)
}

fn standby(command: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new(fakegpu_e2e::repo_root().join("hack/operator.sh"))
        .arg(command)
        .env("FAKEGPU_OPERATOR_INSTANCE", "standby")
        .env("FAKEGPU_HTTP_ADDR", standby_address())
        .env("FAKEGPU_WAIT_FOR_LEADER", "false")
        .status()?;
    ensure!(
        status.success(),
        "hack/operator.sh {command} (standby) failed"
    );
    Ok(())
}

/// SIGKILL, to the replica and hack/operator.sh's supervisor that would start it again: no
/// shutdown, no lease release.
fn kill_standby() -> anyhow::Result<()> {
    fakegpu_e2e::signal_process("standby", "KILL")?;
    std::fs::remove_file(fakegpu_e2e::cluster_dir().join("run/standby.pid"))?;
    Ok(())
}

fn metrics(address: &str) -> anyhow::Result<String> {
    http_get(address, "/metrics")
}

#[tokio::test]
async fn a_standby_replica_takes_over_when_the_leader_stops() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("leader");
    let (first, second) = (format!("{pool}-a"), format!("{pool}-b"));
    create_kwok_node(&client, &first, &[(label::NODE_POOL, &pool)]).await?;
    let cleanup = Cleanup::new(&client).pool(&pool).node(&first).node(&second);
    let result = async {
        standby("restart")?;
        let standby_address = standby_address();
        let text = metrics(&standby_address)?;
        ensure!(
            http_get(&standby_address, "/readyz")? == "ok",
            "a standby replica is ready"
        );
        ensure!(
            metric_value(&text, "fakegpu_operator_leader") == Some(0.0),
            "{text}"
        );

        // The leader does the work; the standby reconciles nothing.
        create_pool(&client, &pool, json!({"gpu": {"profile": "t4"}})).await?;
        labelled_for(&client, &first, &pool, CONVERGE).await?;
        let text = metrics(&standby_address)?;
        ensure!(
            !text.contains("fakegpu_operator_reconciles_total{"),
            "the standby reconciled:\n{text}"
        );

        // The leader stops (and gives the lease up): the standby leads and serves new nodes.
        hack("operator.sh", &["stop"])?;
        eventually("standby became leader", CONVERGE, || async {
            let text = metrics(&standby_address)?;
            Ok((metric_value(&text, "fakegpu_operator_leader") == Some(1.0)).then_some(()))
        })
        .await?;
        create_kwok_node(&client, &second, &[(label::NODE_POOL, &pool)]).await?;
        labelled_for(&client, &second, &pool, CONVERGE).await?;
        anyhow::Ok(())
    }
    .await;
    // Back to one replica, the main one leading, whatever happened. The standby, now leading,
    // dies without a word: the main replica must take the lease over once it expires
    // (hack/operator.sh waits until it leads).
    let restored = kill_standby().and_then(|()| hack("operator.sh", &["restart"]));
    let result = cleanup.after(result).await;
    result.and(restored)
}
