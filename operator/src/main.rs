//! fakegpu-operator: see the library documentation. Configuration comes from the environment:
//! `FAKEGPU_NAMESPACE` (where topology ConfigMaps live), `RUST_LOG` (tracing filter), and the
//! usual in-cluster or `KUBECONFIG` credentials.

use fakegpu_api::names::fakegpu::{DEFAULT_NAMESPACE, NAMESPACE_ENV};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn")),
        )
        .init();
    let namespace = std::env::var(NAMESPACE_ENV).unwrap_or_else(|_| DEFAULT_NAMESPACE.to_owned());
    let client = kube::Client::try_default().await?;
    tracing::info!(%namespace, version = env!("CARGO_PKG_VERSION"), "fakegpu-operator starting");
    fakegpu_operator::controllers::run(client, namespace).await
}
