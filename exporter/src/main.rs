//! fakegpu-exporter: serves dcgm-exporter's metrics for every GPU of every pool node.
//!
//! Configuration from the environment: `FAKEGPU_NAMESPACE` (where the topology ConfigMaps are),
//! `FAKEGPU_EXPORTER_ADDR` (default `0.0.0.0:9400`), `FAKEGPU_UTILIZATION_INTERVAL_SECONDS` (how
//! long a drawn utilization holds, default 10), `FAKEGPU_HOSTNAME_LABEL` (`Hostname`, as
//! released dcgm-exporter images spell it, or `hostname`), `FAKEGPU_PROMETHEUS_URL` (where
//! inference pods' request rates are read, default the reference's
//! `http://prometheus-operated.runai:9090`).
//!
//! Besides `/metrics` it serves `/topology/nodes/<node>`: a node's GPUs with the utilization
//! just published, which the fake nvidia-smi inside pods shows.

use std::{
    collections::HashMap,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use axum::{
    Router,
    body::Body,
    extract::{Path, State},
    http::{StatusCode, header::CONTENT_TYPE},
    response::{IntoResponse, Response},
    routing::get,
};
use fakegpu_exporter::{
    bodies::Buffers,
    documents::Documents,
    draws::Draws,
    exposition::Exposition,
    knative::{self, Knative},
    render,
};
use fakegpu_model::{
    names::{
        dcgm,
        exporter::{self, NODE_REPORT_PATH},
        fakegpu::{DEFAULT_NAMESPACE, NAMESPACE_ENV},
    },
    telemetry,
};
use fakegpu_runtime::{env_or, exit, init_tracing, shutdown_signal, version_requested};
use tracing::{info, warn};

#[derive(Debug)]
struct Exporter {
    documents: Documents,
    draws: Draws,
    buffers: Buffers,
    counters: render::Counters,
    hostname_label: String,
    knative: Knative,
    /// The last answer about request rates, when it was asked, whether Prometheus answered.
    rates: tokio::sync::Mutex<Option<Rates>>,
    interval: Duration,
}

#[derive(Debug)]
struct Rates {
    by_uid: HashMap<String, u8>,
    at: Instant,
    answered: bool,
}

impl Exporter {
    /// Request rates of inference pods, asked again once the interval has passed; `None` when
    /// no pod needs them.
    async fn rates(&self, wanted: bool) -> Option<(HashMap<String, u8>, bool)> {
        if !wanted {
            return None;
        }
        let mut rates = self.rates.lock().await;
        let stale = rates
            .as_ref()
            .is_none_or(|r| r.at.elapsed() >= self.interval);
        if stale {
            let (by_uid, answered) = match self.knative.utilization().await {
                Ok(by_uid) => (by_uid, true),
                Err(error) => {
                    warn!(%error, "no request rates for inference pods; using their ranges");
                    (HashMap::new(), false)
                }
            };
            *rates = Some(Rates {
                by_uid,
                at: Instant::now(),
                answered,
            });
        }
        rates.as_ref().map(|r| (r.by_uid.clone(), r.answered))
    }
}

async fn metrics(State(exporter): State<Arc<Exporter>>) -> Response {
    let snapshot = exporter.documents.snapshot();
    let rates = exporter.rates(render::wants_knative(&snapshot)).await;
    let (by_uid, up) = match rates {
        Some((by_uid, answered)) => (by_uid, Some(answered)),
        None => (HashMap::new(), None),
    };
    let samples = render::samples(
        &snapshot,
        &exporter.draws,
        &exporter.counters,
        &by_uid,
        Instant::now(),
    );
    let exposition = Exposition::new(&samples, &exporter.hostname_label, up);
    let body = Body::from_stream(exporter.buffers.body(exposition));
    ([(CONTENT_TYPE, dcgm::CONTENT_TYPE)], body).into_response()
}

/// One node's GPUs as nvidia-smi shows them; 404 for a node without a document.
async fn node_report(State(exporter): State<Arc<Exporter>>, Path(node): Path<String>) -> Response {
    let Some(document) = exporter.documents.get(&node) else {
        let message = format!("node {node} has no GPU topology");
        return (StatusCode::NOT_FOUND, message).into_response();
    };
    let rates = exporter.rates(document.wants_knative()).await;
    let by_uid = rates.map(|(by_uid, _)| by_uid).unwrap_or_default();
    let report = render::node_report(&node, &document, &exporter.draws, &by_uid, Instant::now());
    match serde_json::to_string(&report) {
        Ok(json) => ([(CONTENT_TYPE, "application/json")], json).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn run() -> anyhow::Result<()> {
    let namespace = env_or(NAMESPACE_ENV, DEFAULT_NAMESPACE);
    let addr = env_or("FAKEGPU_EXPORTER_ADDR", &format!("0.0.0.0:{}", dcgm::PORT));
    let interval: u64 = env_or(
        exporter::DRAW_INTERVAL_ENV,
        &telemetry::DEFAULT_DRAW_INTERVAL_SECONDS.to_string(),
    )
    .parse()
    .with_context(|| {
        format!(
            "{} must be a number of seconds",
            exporter::DRAW_INTERVAL_ENV
        )
    })?;
    let hostname_label = env_or("FAKEGPU_HOSTNAME_LABEL", dcgm::LABELS[dcgm::HOSTNAME_LABEL]);
    anyhow::ensure!(
        hostname_label == "Hostname" || hostname_label == "hostname",
        "FAKEGPU_HOSTNAME_LABEL must be Hostname or hostname, not {hostname_label:?}"
    );
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let prometheus = env_or("FAKEGPU_PROMETHEUS_URL", knative::DEFAULT_URL);
    let exporter = Arc::new(Exporter {
        documents: Documents::default(),
        buffers: Buffers::default(),
        draws: Draws::new(Duration::from_secs(interval)),
        counters: render::Counters::default(),
        hostname_label,
        knative: Knative::new(&prometheus),
        rates: tokio::sync::Mutex::default(),
        interval: Duration::from_secs(interval),
    });
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(%addr, %namespace, %prometheus, version = fakegpu_runtime::VERSION, "exporter serving /metrics");
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route(&format!("{NODE_REPORT_PATH}{{node}}"), get(node_report))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(exporter.clone());
    let follow = exporter.documents.follow(client, &namespace);
    tokio::select! {
        result = axum::serve(listener, router).into_future() => result.context("the HTTP server stopped"),
        () = follow => anyhow::bail!("the topology watch ended"),
        () = shutdown_signal() => {
            info!("exporter stopping");
            Ok(())
        }
    }
}

/// Ready once every topology document has been listed: before that, a scrape would miss nodes.
async fn readyz(State(exporter): State<Arc<Exporter>>) -> Response {
    if exporter.documents.listed() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "topology ConfigMaps not listed yet",
        )
            .into_response()
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    if version_requested("fakegpu-exporter") {
        return ExitCode::SUCCESS;
    }
    init_tracing("info");
    exit("exporter", run().await)
}
