//! fakegpu-exporter: serves dcgm-exporter's metrics for every GPU of every pool node.
//!
//! Configuration from the environment: `FAKEGPU_NAMESPACE` (where the topology ConfigMaps are),
//! `FAKEGPU_EXPORTER_ADDR` (default `0.0.0.0:9400`), `FAKEGPU_UTILIZATION_INTERVAL_SECONDS` (how
//! long a drawn utilization holds, default 10), `FAKEGPU_HOSTNAME_LABEL` (`Hostname`, as
//! released dcgm-exporter images spell it, or `hostname`).

use std::{process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{Router, extract::State, http::StatusCode, routing::get};
use fakegpu_api::names::{
    dcgm,
    fakegpu::{DEFAULT_NAMESPACE, NAMESPACE_ENV},
};
use fakegpu_exporter::{documents::Documents, draws::Draws, render};
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

#[derive(Debug)]
struct Exporter {
    documents: Documents,
    draws: Draws,
    hostname_label: String,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

async fn metrics(State(exporter): State<Arc<Exporter>>) -> (StatusCode, String) {
    let snapshot = exporter.documents.snapshot();
    let samples = render::samples(&snapshot, &exporter.draws, std::time::Instant::now());
    match render::encode(&samples, &exporter.hostname_label) {
        Ok(text) => (StatusCode::OK, text),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

async fn run() -> anyhow::Result<()> {
    let namespace = env_or(NAMESPACE_ENV, DEFAULT_NAMESPACE);
    let addr = env_or("FAKEGPU_EXPORTER_ADDR", &format!("0.0.0.0:{}", dcgm::PORT));
    let interval: u64 = env_or("FAKEGPU_UTILIZATION_INTERVAL_SECONDS", "10")
        .parse()
        .context("FAKEGPU_UTILIZATION_INTERVAL_SECONDS must be a number of seconds")?;
    let hostname_label = env_or("FAKEGPU_HOSTNAME_LABEL", dcgm::LABELS[dcgm::HOSTNAME_LABEL]);
    anyhow::ensure!(
        hostname_label == "Hostname" || hostname_label == "hostname",
        "FAKEGPU_HOSTNAME_LABEL must be Hostname or hostname, not {hostname_label:?}"
    );
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let exporter = Arc::new(Exporter {
        documents: Documents::default(),
        draws: Draws::new(Duration::from_secs(interval)),
        hostname_label,
    });
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(%addr, %namespace, "exporter serving /metrics");
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(exporter.clone());
    let follow = exporter.documents.follow(client, &namespace);
    tokio::select! {
        result = axum::serve(listener, router).into_future() => result.context("the HTTP server stopped"),
        () = follow => anyhow::bail!("the topology watch ended"),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!(error = format!("{err:#}"), "exporter failed");
            ExitCode::FAILURE
        }
    }
}
