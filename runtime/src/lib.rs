//! What every fakegpu binary (operator, node agent, exporter) does the same way: logging,
//! configuration from the environment, waiting for a termination signal, the `/metrics` text,
//! and the process's exit.

use std::process::ExitCode;

use axum::{Router, extract::State, http::StatusCode, routing::get};
use prometheus::{Encoder, Registry, TextEncoder};
use tracing::error;
use tracing_subscriber::EnvFilter;

/// The workspace's version and the commit the binary was built from (see `build.rs`):
/// `0.1.0 (commit 1c692ee5a0b1)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FAKEGPU_GIT_COMMIT"),
    ")"
);

/// Whether the command line asks for the version (`--version` or `-V`), which is then printed
/// as `<program> <VERSION>`: the binary should exit at once.
pub fn version_requested(program: &str) -> bool {
    let asked = std::env::args()
        .skip(1)
        .any(|arg| arg == "--version" || arg == "-V");
    if asked {
        println!("{program} {VERSION}");
    }
    asked
}

/// Logs as `RUST_LOG` says, `default_filter` without it; colours only on a terminal.
pub fn init_tracing(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter)),
        )
        .init();
}

/// Environment variable `name`, `default` when unset.
pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// Resolves on SIGTERM (what the kubelet sends) or Ctrl-C.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}

/// `registry` in the Prometheus text format, as a `/metrics` answer.
pub fn metrics_response(registry: &Registry) -> (StatusCode, String) {
    let mut buffer = Vec::new();
    let text = TextEncoder::new()
        .encode(&registry.gather(), &mut buffer)
        .map_err(|e| e.to_string())
        .and_then(|()| String::from_utf8(buffer).map_err(|e| e.to_string()));
    match text {
        Ok(text) => (StatusCode::OK, text),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error),
    }
}

/// What a binary's HTTP endpoints report.
pub trait Probes: Clone + Send + Sync + 'static {
    /// The metrics `/metrics` serves.
    fn registry(&self) -> &Registry;
    /// `Ok` when `/readyz` should say ready; else why not.
    fn ready(&self) -> Result<(), String>;
}

/// `/metrics`, `/healthz` (alive while the process serves) and `/readyz` for `probes`.
pub fn router<P: Probes>(probes: P) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(p): State<P>| async move { metrics_response(p.registry()) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(p): State<P>| async move {
                match p.ready() {
                    Ok(()) => (StatusCode::OK, "ok".to_owned()),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                }
            }),
        )
        .with_state(probes)
}

/// Runs `attempt` until it succeeds, waiting after each failure (1 s, doubling up to 30 s) and
/// logging it with `what` was tried. For the API calls a binary makes before its watches
/// start (which retry on their own): an API server that cannot be reached yet, restarting or
/// in an outage, is waited out rather than a reason to exit; in-cluster, an exit becomes
/// CrashLoopBackOff, whose back-off outlasts the outage.
pub async fn until_ok<T, E, F, Fut>(what: &str, mut attempt: F) -> T
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut wait = std::time::Duration::from_secs(1);
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) => {
                tracing::warn!(%error, retry_in = ?wait, "{what}: the API server did not answer; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}

/// The exit of `program` after `result`: success, or failure with the error's whole chain
/// logged.
pub fn exit(program: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!(error = format!("{err:#}"), "{program} failed");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn until_ok_retries_with_growing_waits() {
        let start = tokio::time::Instant::now();
        let mut failures = 3;
        let answer = until_ok("asking", || {
            let fail = failures > 0;
            failures -= 1;
            async move { if fail { Err("refused") } else { Ok(42) } }
        })
        .await;
        assert_eq!(answer, 42);
        // 1 + 2 + 4 seconds of waiting, on tokio's paused clock.
        assert_eq!(start.elapsed(), std::time::Duration::from_secs(7));
    }

    #[test]
    fn version_names_the_commit() {
        assert!(VERSION.starts_with(concat!(env!("CARGO_PKG_VERSION"), " (commit ")));
        let commit = &VERSION[VERSION.find("commit ").map_or(0, |i| i + 7)..VERSION.len() - 1];
        assert!(
            commit == "unknown"
                || commit.bytes().all(|b| b.is_ascii_hexdigit()) && commit.len() >= 7,
            "{VERSION}"
        );
    }

    #[test]
    fn metrics_are_rendered_as_text() {
        let registry = Registry::new();
        let counter = prometheus::IntCounter::new("fakegpu_test_total", "A test counter.")
            .expect("valid metric");
        registry
            .register(Box::new(counter.clone()))
            .expect("registers");
        counter.inc();
        let (status, text) = metrics_response(&registry);
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("fakegpu_test_total 1"), "{text}");
    }

    #[test]
    fn unset_variables_take_the_default() {
        assert_eq!(env_or("FAKEGPU_SURELY_UNSET_VARIABLE", "d"), "d");
    }
}
