//! The agent's metrics and HTTP endpoints: `/metrics` (Prometheus text format), `/healthz`
//! (the process serves), `/readyz` (the node's document is known and every plugin the agent
//! serves is registered with the kubelet).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::Router;
use fakegpu_model::{names::metric, topology::NodeTopology};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The plugins, as the `plugin` label names them.
pub const DEVICE_PLUGIN: &str = "device-plugin";
pub const DRA: &str = "dra";
/// The compute-domain DRA plugin (driver `compute-domain.nvidia.com`).
pub const COMPUTE_DOMAIN: &str = "compute-domain";
/// The driver root of a `backend: mock` node: "registered" once laid out for the document.
pub const DRIVER_ROOT: &str = "driver-root";

#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    gpus: IntGauge,
    unhealthy: IntGauge,
    topology_errors: IntCounter,
    registered: IntGaugeVec,
    calls: IntCounterVec,
    prepared: IntGauge,
    topology_known: Arc<AtomicBool>,
    /// Plugins the agent serves; ready needs each registered.
    serving: Vec<&'static str>,
}

impl Metrics {
    pub fn new(serving: Vec<&'static str>) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let gpus = IntGauge::new(metric::AGENT_GPUS, "GPUs in the node's topology document.")?;
        let unhealthy = IntGauge::new(metric::AGENT_UNHEALTHY_GPUS, "GPUs marked unhealthy.")?;
        let topology_errors = IntCounter::new(
            metric::AGENT_TOPOLOGY_ERRORS,
            "Topology documents ignored because they did not parse.",
        )?;
        let registered = IntGaugeVec::new(
            Opts::new(
                metric::AGENT_REGISTERED,
                "1 while the kubelet has the plugin registered.",
            ),
            &["plugin"],
        )?;
        let calls = IntCounterVec::new(
            Opts::new(
                metric::AGENT_CALLS,
                "Calls from the kubelet, by method and outcome.",
            ),
            &["method", "outcome"],
        )?;
        let prepared = IntGauge::new(
            metric::AGENT_PREPARED_CLAIMS,
            "Claims prepared on the node.",
        )?;
        registry.register(Box::new(gpus.clone()))?;
        registry.register(Box::new(unhealthy.clone()))?;
        registry.register(Box::new(topology_errors.clone()))?;
        registry.register(Box::new(registered.clone()))?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(prepared.clone()))?;
        for plugin in &serving {
            registered.with_label_values(&[*plugin]).set(0);
        }
        Ok(Self {
            registry,
            gpus,
            unhealthy,
            topology_errors,
            registered,
            calls,
            prepared,
            topology_known: Arc::default(),
            serving,
        })
    }

    pub fn topology(&self, topology: Option<&NodeTopology>) {
        let gpus = topology.map(|t| t.gpus.as_slice()).unwrap_or_default();
        self.gpus.set(i64::try_from(gpus.len()).unwrap_or(i64::MAX));
        let unhealthy = gpus.iter().filter(|g| !g.health.is_healthy()).count();
        self.unhealthy
            .set(i64::try_from(unhealthy).unwrap_or(i64::MAX));
        self.topology_known
            .store(topology.is_some(), Ordering::Release);
    }

    pub fn topology_error(&self) {
        self.topology_errors.inc();
    }

    pub fn registered(&self, plugin: &str, registered: bool) {
        self.registered
            .with_label_values(&[plugin])
            .set(i64::from(registered));
    }

    pub fn call(&self, method: &str, ok: bool) {
        self.calls
            .with_label_values(&[method, if ok { "ok" } else { "error" }])
            .inc();
    }

    pub fn prepared_claims(&self, count: usize) {
        self.prepared.set(i64::try_from(count).unwrap_or(i64::MAX));
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

    /// Ready once the node's document is known and every plugin served is registered.
    fn ready(&self) -> Result<(), String> {
        if !self.topology_known.load(Ordering::Acquire) {
            return Err("no topology document for this node yet".into());
        }
        for plugin in &self.serving {
            if self.registered.with_label_values(&[*plugin]).get() != 1 {
                return Err(format!(
                    "{plugin} not registered with the kubelet (or not laid out)"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_runtime::Probes;

    use super::*;

    #[test]
    fn ready_needs_the_document_and_every_registration() {
        let metrics = Metrics::new(vec![DEVICE_PLUGIN, DRA]).expect("registers");
        assert!(metrics.ready().is_err());
        metrics.topology(Some(&NodeTopology::default()));
        metrics.registered(DEVICE_PLUGIN, true);
        assert!(metrics.ready().unwrap_err().contains("dra"));
        metrics.registered(DRA, true);
        assert!(metrics.ready().is_ok());
        metrics.call("Allocate", false);
        let (_, text) = fakegpu_runtime::metrics_response(&metrics.registry);
        assert!(
            text.contains(r#"fakegpu_node_agent_calls_total{method="Allocate",outcome="error"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"fakegpu_node_agent_registered{plugin="dra"} 1"#),
            "{text}"
        );
    }
}
