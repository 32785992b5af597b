//! fakegpu-operator: see the library documentation. Configuration comes from the environment:
//! `FAKEGPU_NAMESPACE` (where topology ConfigMaps live), `FAKEGPU_HTTP_ADDR` (`/metrics`,
//! `/healthz`, `/readyz`), `FAKEGPU_NODE_RESOURCE_TOPOLOGY` (`auto` or `false`),
//! `FAKEGPU_LEADER_ELECTION` (`true` or `false`), `FAKEGPU_IDENTITY` (name in the lease),
//! `FAKEGPU_DRA_EXTENDED_RESOURCE` (`true` or `false`: the GPU DeviceClass's extended resource),
//! `FAKEGPU_RESERVATION_NAMESPACES` (GPU reservation pods' namespaces, comma-separated),
//! `RUST_LOG` (tracing filter), and the usual in-cluster or `KUBECONFIG` credentials.

use anyhow::Context as _;
use std::{process::ExitCode, time::Duration};

use fakegpu_api::nrt;
use fakegpu_model::names::fakegpu::{
    DEFAULT_NAMESPACE, DEFAULT_OPERATOR_HTTP_ADDR, DEFAULT_RESERVATION_NAMESPACES,
    DRA_EXTENDED_RESOURCE_ENV, IDENTITY_ENV, LEADER_ELECTION_ENV, LEADER_LEASE, NAMESPACE_ENV,
    NODE_RESOURCE_TOPOLOGY_ENV, OPERATOR_HTTP_ADDR_ENV, RESERVATION_NAMESPACES_ENV,
};
use fakegpu_operator::{
    controllers,
    kit::{
        leader::{LeaderElector, LeaseSettings},
        metrics::Metrics,
    },
    tracking::ReservationNamespaces,
};
use fakegpu_runtime::{env_or, exit, init_tracing, until_ok, version_requested};

/// The image's binary is static musl, whose own malloc made the operator spend 1.8 times the CPU of
/// the same code built for glibc. At 10 000 KWOK nodes in 20 pools (hack/bench/scale.sh,
/// 2026-12-06) the musl operator used 48.4 CPU-s while the nodes converged, 21 % of all the CPU on
/// the machine, and the scheduler bound GPU pods at 23 a second against 29 with the operator
/// stopped. With mimalloc: 26.5 CPU-s (12 %, as the glibc build's), 29 pods a second, and a peak of
/// 134 MiB against 128. Glibc builds (the benchmarks', the tests') keep glibc's allocator: there
/// mimalloc saved no CPU and raised the peak from 126 to 133 MiB.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    if version_requested("fakegpu-operator") {
        return ExitCode::SUCCESS;
    }
    init_tracing("info,kube=warn");
    exit("operator", run().await)
}

async fn run() -> anyhow::Result<()> {
    let namespace = env_or(NAMESPACE_ENV, DEFAULT_NAMESPACE);
    let address = env_or(OPERATOR_HTTP_ADDR_ENV, DEFAULT_OPERATOR_HTTP_ADDR);

    let metrics = Metrics::new()?;
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("listening on {address} ({OPERATOR_HTTP_ADDR_ENV})"))?;
    let client = kube::Client::try_default().await?;
    tracing::info!(%namespace, %address, version = fakegpu_runtime::VERSION, "fakegpu-operator starting");
    // Served from the start: while the API server cannot be reached the process is alive
    // (/healthz) and not ready (/readyz).
    let http = axum::serve(listener, metrics.clone().router());
    tokio::select! {
        result = operate(client, namespace, &metrics) => result,
        result = http => result.context("HTTP server stopped"),
    }
}

/// An environment variable that switches something on (`true`, the default) or off (`false`).
fn env_switch(name: &str) -> anyhow::Result<bool> {
    match std::env::var(name).as_deref() {
        Ok("true") | Err(_) => Ok(true),
        Ok("false") => Ok(false),
        Ok(other) => anyhow::bail!("{name}={other:?}: expected true or false"),
    }
}

async fn operate(client: kube::Client, namespace: String, metrics: &Metrics) -> anyhow::Result<()> {
    let node_resource_topology = match std::env::var(NODE_RESOURCE_TOPOLOGY_ENV).as_deref() {
        Ok("false") => false,
        Ok("auto") | Err(_) => {
            let served = until_ok("asking whether NodeResourceTopology is served", || {
                // Its CRD is in the bundle, or a topology exporter installed it.
                fakegpu_operator::kit::served::serves(
                    &client,
                    nrt::GROUP,
                    nrt::VERSION,
                    nrt::PLURAL,
                )
            })
            .await;
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

    let compute_domains = until_ok("asking whether ComputeDomains are served", || {
        fakegpu_operator::compute_domain::served(&client)
    })
    .await;
    if !compute_domains {
        tracing::warn!(
            "resource.nvidia.com/v1beta1 ComputeDomains are not served: no ComputeDomain controller (install the CRD and restart the operator)"
        );
    }
    let features = controllers::Features {
        node_resource_topology,
        compute_domains,
        reservations: ReservationNamespaces::parse(&env_or(
            RESERVATION_NAMESPACES_ENV,
            DEFAULT_RESERVATION_NAMESPACES,
        )),
        dra_extended_resource: env_switch(DRA_EXTENDED_RESOURCE_ENV)?,
    };

    let leader_election = env_switch(LEADER_ELECTION_ENV)?;

    if !leader_election {
        metrics.set_leader(true);
        return controllers::run(client, namespace, features, metrics.clone()).await;
    }
    let mut elector = LeaderElector::new(
        client.clone(),
        LeaseSettings {
            namespace: namespace.clone(),
            name: LEADER_LEASE.to_owned(),
            identity: identity(),
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        },
    );
    // Standing by is healthy and ready: a rolling update waits for readiness.
    metrics.set_ready(true);
    tokio::select! {
        () = elector.acquire() => {}
        _ = tokio::signal::ctrl_c() => return Ok(()),
    }
    metrics.set_ready(false);
    metrics.set_leader(true);
    let result = tokio::select! {
        result = controllers::run(client, namespace, features, metrics.clone()) => result,
        () = elector.hold() => Err(anyhow::anyhow!("lost the leader lease; exiting so that a restart stands by again")),
    };
    metrics.set_leader(false);
    elector.release().await;
    result
}

/// This replica's identity in the lease: the pod name where the Deployment sets it; else the
/// host and process, unique on one machine.
fn identity() -> String {
    std::env::var(IDENTITY_ENV).unwrap_or_else(|_| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "fakegpu-operator".into());
        format!("{host}-{}", std::process::id())
    })
}
