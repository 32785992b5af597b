//! fakegpu-operator: see the library documentation. Configuration comes from the environment:
//! `FAKEGPU_NAMESPACE` (where topology ConfigMaps live), `FAKEGPU_HTTP_ADDR` (`/metrics`,
//! `/healthz`, `/readyz`), `FAKEGPU_NODE_RESOURCE_TOPOLOGY` (`auto` or `false`), `RUST_LOG`
//! (tracing filter), and the usual in-cluster or `KUBECONFIG` credentials.

use anyhow::Context as _;
use fakegpu_api::names::fakegpu::{
    DEFAULT_NAMESPACE, DEFAULT_OPERATOR_HTTP_ADDR, NAMESPACE_ENV, NODE_RESOURCE_TOPOLOGY_ENV,
    OPERATOR_HTTP_ADDR_ENV,
};
use fakegpu_operator::{controllers, metrics::Metrics};
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
    let address = std::env::var(OPERATOR_HTTP_ADDR_ENV)
        .unwrap_or_else(|_| DEFAULT_OPERATOR_HTTP_ADDR.to_owned());

    let metrics = Metrics::new()?;
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("listening on {address} ({OPERATOR_HTTP_ADDR_ENV})"))?;
    let client = kube::Client::try_default().await?;
    tracing::info!(%namespace, %address, version = env!("CARGO_PKG_VERSION"), "fakegpu-operator starting");
    let node_resource_topology = match std::env::var(NODE_RESOURCE_TOPOLOGY_ENV).as_deref() {
        Ok("false") => false,
        Ok("auto") | Err(_) => {
            let served = controllers::serves_node_resource_topology(&client).await?;
            if !served {
                tracing::warn!(
                    "topology.node.k8s.io/v1alpha2 is not served: no NodeResourceTopology will be published (install its CRD and restart the operator)"
                );
            }
            served
        }
        Ok(other) => {
            anyhow::bail!("{NODE_RESOURCE_TOPOLOGY_ENV}={other:?}: expected auto or false")
        }
    };

    let http = axum::serve(listener, metrics.clone().router());
    tokio::select! {
        result = controllers::run(client, namespace, node_resource_topology, metrics) => result,
        result = http => result.context("HTTP server stopped"),
    }
}
