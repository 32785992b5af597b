//! fakegpu-node-agent: the kubelet plugins of one node (see the library docs).
//!
//! Configuration, all from the environment (the DaemonSets set it):
//! - `NODE_NAME` (required), `FAKEGPU_NAMESPACE` (where the topology ConfigMaps are);
//! - `FAKEGPU_DEVICE_PLUGIN` / `FAKEGPU_DRA`: `false` turns that plugin off, and
//!   `FAKEGPU_COMPUTE_DOMAINS=true` turns the compute-domain DRA plugin on (the bundle runs one
//!   DaemonSet per interface, on the nodes the operator labels for it);
//! - `FAKEGPU_DEVICE_PLUGIN_DIR` (default `/var/lib/kubelet/device-plugins`), and
//!   `FAKEGPU_POD_RESOURCES_SOCKET` (default `/var/lib/kubelet/pod-resources/kubelet.sock`),
//!   where the device plugin's agent reads which GPUs the kubelet gave each container;
//! - `FAKEGPU_PLUGINS_REGISTRY_DIR` (default `/var/lib/kubelet/plugins_registry`),
//!   `FAKEGPU_PLUGINS_DIR` (default `/var/lib/kubelet/plugins`), `FAKEGPU_CDI_DIR` (default
//!   `/var/run/cdi`);
//! - `FAKEGPU_NVIDIA_SMI`: the fake nvidia-smi on the host (default
//!   `/var/lib/fakegpu/bin/nvidia-smi`), and `FAKEGPU_EXPORTER_URL`, where that nvidia-smi
//!   asks for the node's GPUs (default: the exporter Service's ClusterIP from the kubelet's
//!   service links, else `http://fakegpu-exporter.<namespace>.svc:9400`);
//! - `FAKEGPU_NVML_DIR`: the host directory with the NVML library and the node's document that
//!   containers given GPUs mount (default `/var/lib/fakegpu/nvml`);
//! - `FAKEGPU_DRIVER_ROOT`: the host directory to lay out as an NVIDIA driver root for
//!   NVIDIA's own components (the driver-root DaemonSet sets it on `backend: mock` nodes);
//! - `FAKEGPU_HTTP_ADDR`: `/metrics`, `/healthz`, `/readyz` (default `0.0.0.0:8080`).

use std::{path::PathBuf, process::ExitCode, sync::Arc};

use anyhow::Context;
use fakegpu_model::names::{
    container_env::{EXPORTER_URL, NODE_NAME},
    fakegpu::{
        DEFAULT_NAMESPACE, DEFAULT_OPERATOR_HTTP_ADDR, NAMESPACE_ENV, OPERATOR_HTTP_ADDR_ENV,
    },
    kubelet_devices,
    nvml::{CONTAINER_DIR, DRIVER_ROOT_ENV, SHIPPED_CUDA_LIBRARY, SHIPPED_LIBRARY},
};
use fakegpu_node_agent::{
    container::{self, ContainerEdits},
    device_plugin, dra, driver_root, metrics, topology_source,
};
use fakegpu_runtime::{env_or, exit, init_tracing, shutdown_signal, version_requested};
use futures::{FutureExt, future::Shared};
use tokio::sync::{Notify, watch};
use tracing::info;

fn enabled(name: &str) -> bool {
    env_or(name, "true") != "false"
}

/// Runs `plugin` when `on`; otherwise waits for shutdown.
async fn maybe(
    on: bool,
    plugin: impl Future<Output = anyhow::Result<()>>,
    shutdown: Shared<impl Future<Output = ()>>,
) -> anyhow::Result<()> {
    if on {
        plugin.await
    } else {
        shutdown.await;
        Ok(())
    }
}

async fn run() -> anyhow::Result<()> {
    let node = std::env::var(NODE_NAME)
        .with_context(|| format!("{NODE_NAME} must name the node this agent serves"))?;
    let namespace = env_or(NAMESPACE_ENV, DEFAULT_NAMESPACE);
    let container = ContainerEdits {
        node: node.clone(),
        exporter_url: env_or(
            EXPORTER_URL,
            &container::exporter_url(&namespace, |name| std::env::var(name).ok()),
        ),
        nvidia_smi: PathBuf::from(env_or(
            "FAKEGPU_NVIDIA_SMI",
            "/var/lib/fakegpu/bin/nvidia-smi",
        )),
        nvml_dir: PathBuf::from(env_or("FAKEGPU_NVML_DIR", CONTAINER_DIR)),
    };
    // The image carries nvidia-smi next to the agent and the NVML library; containers given
    // GPUs mount them from the host (the compute-domain plugin gives none).
    let gives_gpus = enabled("FAKEGPU_DEVICE_PLUGIN") || enabled("FAKEGPU_DRA");
    if gives_gpus {
        container::install_shipped(
            &container,
            SHIPPED_LIBRARY.as_ref(),
            SHIPPED_CUDA_LIBRARY.as_ref(),
        );
    }
    let device_plugin = device_plugin::Settings {
        node: node.clone(),
        dir: env_or(
            "FAKEGPU_DEVICE_PLUGIN_DIR",
            "/var/lib/kubelet/device-plugins",
        )
        .into(),
        container: container.clone(),
        allocated: Arc::new(Notify::new()),
    };
    let dra = dra::Settings {
        node: node.clone(),
        registry_dir: env_or(
            "FAKEGPU_PLUGINS_REGISTRY_DIR",
            "/var/lib/kubelet/plugins_registry",
        )
        .into(),
        plugins_dir: env_or("FAKEGPU_PLUGINS_DIR", "/var/lib/kubelet/plugins").into(),
        cdi_dir: env_or("FAKEGPU_CDI_DIR", "/var/run/cdi").into(),
    };
    let (serve_device_plugin, serve_dra) =
        (enabled("FAKEGPU_DEVICE_PLUGIN"), enabled("FAKEGPU_DRA"));
    let driver_root = std::env::var(DRIVER_ROOT_ENV)
        .ok()
        .filter(|root| !root.is_empty())
        .map(PathBuf::from);
    let shipped = match &driver_root {
        Some(_) => Some(driver_root::Shipped::read(
            SHIPPED_LIBRARY.as_ref(),
            SHIPPED_CUDA_LIBRARY.as_ref(),
            &container::shipped_nvidia_smi()
                .context("the image has no nvidia-smi beside the agent")?,
        )?),
        None => None,
    };
    // Off unless asked: IMEX channels exist on NVLink systems only.
    let serve_channels = env_or("FAKEGPU_COMPUTE_DOMAINS", "false") == "true";
    let serving = [
        (serve_device_plugin, metrics::DEVICE_PLUGIN),
        (serve_dra, metrics::DRA),
        (serve_channels, metrics::COMPUTE_DOMAIN),
        (driver_root.is_some(), metrics::DRIVER_ROOT),
    ];
    let metrics = metrics::Metrics::new(serving.iter().filter(|s| s.0).map(|s| s.1).collect())?;
    let http_addr = env_or(OPERATOR_HTTP_ADDR_ENV, DEFAULT_OPERATOR_HTTP_ADDR);
    let listener = tokio::net::TcpListener::bind(&http_addr)
        .await
        .with_context(|| format!("binding {http_addr}"))?;
    let http = axum::serve(listener, metrics.clone().router()).into_future();
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    info!(node = %node, namespace = %namespace, device_plugin = serve_device_plugin, dra = serve_dra, compute_domains = serve_channels, driver_root = ?driver_root, http = %http_addr, version = fakegpu_runtime::VERSION, "node agent starting");
    let (sender, topology) = watch::channel(None);
    let follow =
        topology_source::follow(client.clone(), &namespace, &node, sender, metrics.clone());
    let shutdown = shutdown_signal().boxed().shared();
    let containers_document = {
        let (container, topology, shutdown) =
            (container.clone(), topology.clone(), shutdown.clone());
        async move {
            if gives_gpus {
                tokio::select! {
                    () = container.follow_document(topology) => {}
                    () = shutdown => {}
                }
            } else {
                shutdown.await;
            }
        }
    };
    let gpus = Arc::new(dra::gpu::GpuDevices {
        topology: topology.clone(),
        container,
    });
    let channels = Arc::new(dra::channels::ChannelDevices {
        topology: topology.clone(),
    });
    let reporter = device_plugin::kubelet_devices::Reporter {
        client: client.clone(),
        namespace: namespace.clone(),
        node: node.clone(),
        socket: env_or(kubelet_devices::SOCKET_ENV, kubelet_devices::DEFAULT_SOCKET).into(),
        allocated: device_plugin.allocated.clone(),
    };
    // Which GPUs the kubelet gave each container, from fakegpu's device plugin or, on a mock
    // node, NVIDIA's (its device IDs are the UUIDs the library reports).
    // The plugins end on shutdown themselves, after removing their sockets: only without them
    // does shutdown end the reporter.
    let report_only = !serve_device_plugin && driver_root.is_some();
    let device_plugins = {
        let plugins = device_plugin::run(
            device_plugin,
            topology.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        let shutdown = shutdown.clone();
        async move {
            if serve_device_plugin {
                tokio::select! {
                    result = plugins => result,
                    () = reporter.run() => Ok(()),
                }
            } else {
                tokio::select! {
                    () = reporter.run(), if report_only => Ok(()),
                    () = shutdown => Ok(()),
                }
            }
        }
    };
    let lay_out = {
        let (client, node, topology, shutdown, metrics) = (
            client.clone(),
            node.clone(),
            topology.clone(),
            shutdown.clone(),
            metrics.clone(),
        );
        async move {
            let (Some(root), Some(shipped)) = (driver_root, shipped) else {
                shutdown.await;
                return Ok(());
            };
            tokio::select! {
                () = driver_root::follow(root.clone(), shipped, node.clone(), topology, metrics) => {}
                () = shutdown => {
                    if !driver_root::still_wanted(client, &node).await {
                        driver_root::remove(&root, &node);
                    }
                }
            }
            Ok(())
        }
    };
    let plugins = futures::future::try_join4(
        lay_out,
        device_plugins,
        maybe(
            serve_dra,
            dra::run(
                dra.clone(),
                gpus,
                metrics::DRA,
                client.clone(),
                topology.clone(),
                metrics.clone(),
                shutdown.clone(),
            ),
            shutdown.clone(),
        ),
        maybe(
            serve_channels,
            dra::run(
                dra,
                channels,
                metrics::COMPUTE_DOMAIN,
                client,
                topology,
                metrics,
                shutdown.clone(),
            ),
            shutdown.clone(),
        ),
    );
    // A plugin's error ends the agent at once (its pod restarts); the document's follower ends
    // with shutdown, after which the plugins still remove their sockets.
    let plugins =
        futures::future::try_join(plugins, containers_document.map(Ok::<(), anyhow::Error>));
    tokio::select! {
        result = plugins => result.map(drop),
        () = follow => anyhow::bail!("the topology watch ended"),
        result = http => result.context("the HTTP server stopped"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    if version_requested("fakegpu-node-agent") {
        return ExitCode::SUCCESS;
    }
    init_tracing("info");
    exit("node agent", run().await)
}
