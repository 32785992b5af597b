//! The operator's own metrics and its HTTP endpoints: `/metrics` (Prometheus text format),
//! `/healthz` (the process serves), `/readyz` (standing by for the lease, or leading with the
//! watch caches filled and the controllers running).

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use axum::Router;
use fakegpu_model::names::metric;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// Reconcile metrics, one series per controller.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: IntCounterVec,
    errors: IntCounterVec,
    duration: HistogramVec,
    leader: IntGauge,
    ready: Arc<AtomicBool>,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(metric::RECONCILES, "Reconciles run, by controller."),
            &["controller"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                metric::RECONCILE_ERRORS,
                "Reconciles that failed, by controller and error kind.",
            ),
            &["controller", "error"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                metric::RECONCILE_DURATION,
                "Reconcile duration, by controller.",
            )
            .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]),
            &["controller"],
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        let leader = IntGauge::new(
            metric::LEADER,
            "1 while this replica holds the leader lease and runs the controllers.",
        )?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(crate::kit::apply::WRITES.clone()))?;
        Ok(Self {
            registry,
            reconciles,
            errors,
            duration,
            leader,
            ready: Arc::default(),
        })
    }

    /// Runs one reconcile of `controller`, counting it and its duration.
    pub async fn measure<T, E>(
        &self,
        controller: &str,
        reconcile: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let start = Instant::now();
        let result = reconcile.await;
        self.reconciles.with_label_values(&[controller]).inc();
        self.duration
            .with_label_values(&[controller])
            .observe(start.elapsed().as_secs_f64());
        result
    }

    /// Counts a failed reconcile of `controller` by the `kind` of its error (called from the
    /// error policies).
    pub fn failed(&self, controller: &str, kind: &str) {
        self.errors.with_label_values(&[controller, kind]).inc();
    }

    /// Marks the operator ready (standing by, or caches filled and controllers started) or not
    /// (a new leader filling its caches).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The HTTP routes.
    pub fn router(self) -> Router {
        fakegpu_runtime::router(self)
    }
}

impl fakegpu_runtime::Probes for Metrics {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn ready(&self) -> Result<(), String> {
        if self.ready.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("starting: caches not filled yet".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_reconciles_and_errors_by_controller() {
        let metrics = Metrics::new().expect("registers");
        let ok: Result<(), ()> = metrics.measure("node", async { Ok(()) }).await;
        assert!(ok.is_ok());
        metrics.failed("pool", "topology");
        let (_, text) = fakegpu_runtime::metrics_response(&metrics.registry);
        assert!(
            text.contains(r#"fakegpu_operator_reconciles_total{controller="node"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"fakegpu_operator_reconcile_errors_total{controller="pool",error="topology"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"fakegpu_operator_reconcile_duration_seconds_count{controller="node"} 1"#
            ),
            "{text}"
        );
        crate::kit::apply::WRITES
            .with_label_values(&["Node", "apply"])
            .inc();
        let (_, text) = fakegpu_runtime::metrics_response(&metrics.registry);
        assert!(
            text.contains(r#"fakegpu_operator_writes_total{kind="Node",verb="apply"}"#),
            "{text}"
        );
    }
}
