//! An operator started while its API server refuses connections (restarting, an outage) waits
//! and retries instead of exiting: alive (`/healthz`) and not ready (`/readyz`) meanwhile, and
//! standing by for the lease (the suite's operator leads) once the API server answers. In a
//! cluster an exit would be CrashLoopBackOff, whose back-off outlasts the outage.
//!
//! The replica reaches the API server through a relay on loopback that the test starts only
//! after a while: before it, its connections are refused. The cluster itself is not touched.

use std::{
    process::{Child, Command},
    time::Duration,
};

use anyhow::{Context, ensure};
use fakegpu_e2e::{eventually, http_get, repo_root};
use kube::config::Kubeconfig;
use tokio::net::{TcpListener, TcpStream};

/// Long enough for several retries (1 s, 2 s, 4 s, ...), each of which used to be an exit.
const REFUSED: Duration = Duration::from_secs(12);
const RECOVER: Duration = Duration::from_secs(90);

/// The operator binary, killed on drop.
struct Replica(Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Relays every connection to `port` on loopback to `target` until the test ends.
async fn relay(port: u16, target: String) -> anyhow::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    Ok(())
}

#[tokio::test]
async fn an_operator_started_while_the_api_server_refuses_waits_for_it() -> anyhow::Result<()> {
    let root = repo_root();
    // The bundle's ServiceAccount, as the suite's operator runs.
    let output = Command::new(root.join("hack/operator.sh"))
        .args(["kubeconfig", "fakegpu-operator"])
        .output()
        .context("hack/operator.sh kubeconfig")?;
    ensure!(output.status.success(), "kubeconfig: {output:?}");
    let path = String::from_utf8(output.stdout)?.trim().to_owned();
    let mut kubeconfig = Kubeconfig::read_from(&path)?;
    let cluster = kubeconfig
        .clusters
        .first_mut()
        .and_then(|c| c.cluster.as_mut())
        .context("no cluster in the kubeconfig")?;
    let server = cluster.server.clone().context("no server")?;
    let target = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned();
    // Nobody listens there yet: connection refused. The API server's certificate names
    // 127.0.0.1, so the relay's address verifies as the API server's own.
    let port = free_port()?;
    cluster.server = Some(format!("https://127.0.0.1:{port}"));
    let refused = std::env::temp_dir().join(format!("fakegpu-refused-{port}.kubeconfig"));
    std::fs::write(&refused, serde_yaml::to_string(&kubeconfig)?)?;

    let address = format!("127.0.0.1:{}", free_port()?);
    let log_path = std::env::temp_dir().join(format!("fakegpu-refused-{port}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut replica = Replica(
        Command::new(root.join("target/debug/fakegpu-operator"))
            .env("KUBECONFIG", &refused)
            .env("FAKEGPU_NAMESPACE", "fakegpu-system")
            .env("FAKEGPU_HTTP_ADDR", &address)
            .env("POD_NAME", format!("refused-{port}"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting target/debug/fakegpu-operator (cargo build -p fakegpu-operator)")?,
    );
    eventually("the replica serving /healthz", RECOVER, || async {
        Ok(http_get(&address, "/healthz").ok().map(drop))
    })
    .await?;
    let refused_until = tokio::time::Instant::now() + REFUSED;
    while tokio::time::Instant::now() < refused_until {
        ensure!(
            replica.0.try_wait()?.is_none(),
            "the operator exited while the API server refused it: {:?}",
            replica.0.try_wait()?
        );
        ensure!(
            http_get(&address, "/healthz").is_ok(),
            "/healthz stopped answering"
        );
        ensure!(
            http_get(&address, "/readyz").is_err(),
            "ready without an API server"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    relay(port, target).await?;
    eventually(
        "the replica ready (standing by) once the API server answers",
        RECOVER,
        || async {
            Ok((http_get(&address, "/readyz").ok().as_deref() == Some("ok")).then_some(()))
        },
    )
    .await?;
    ensure!(replica.0.try_wait()?.is_none(), "the operator exited");
    // It said why it waited, each time.
    let said = std::fs::read_to_string(&log_path)?;
    let retries = said
        .matches("the API server did not answer; retrying")
        .count();
    ensure!(retries >= 2, "{retries} retries logged: {said}");
    let _ = std::fs::remove_file(&refused);
    let _ = std::fs::remove_file(&log_path);
    Ok(())
}
