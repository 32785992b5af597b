//! fakegpu-node-agent: the kubelet plugins of one node (see the library docs).
//!
//! Configuration, all from the environment (the DaemonSet sets it):
//! `NODE_NAME` (required), `FAKEGPU_NAMESPACE` (where the topology ConfigMaps are),
//! `FAKEGPU_DEVICE_PLUGIN_DIR` (default `/var/lib/kubelet/device-plugins`),
//! `FAKEGPU_NVIDIA_SMI` (the fake nvidia-smi on the host, default
//! `/var/lib/fakegpu/bin/nvidia-smi`).

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use fakegpu_api::names::fakegpu::{DEFAULT_NAMESPACE, NAMESPACE_ENV};
use fakegpu_node_agent::{device_plugin, topology_source};
use tokio::sync::watch;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

const NODE_NAME_ENV: &str = "NODE_NAME";
const DEVICE_PLUGIN_DIR_ENV: &str = "FAKEGPU_DEVICE_PLUGIN_DIR";
const DEFAULT_DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
const NVIDIA_SMI_ENV: &str = "FAKEGPU_NVIDIA_SMI";
const DEFAULT_NVIDIA_SMI: &str = "/var/lib/fakegpu/bin/nvidia-smi";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

async fn shutdown_signal() {
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

async fn run() -> anyhow::Result<()> {
    let node = std::env::var(NODE_NAME_ENV)
        .with_context(|| format!("{NODE_NAME_ENV} must name the node this agent serves"))?;
    let namespace = env_or(NAMESPACE_ENV, DEFAULT_NAMESPACE);
    let settings = device_plugin::Settings {
        node: node.clone(),
        dir: PathBuf::from(env_or(DEVICE_PLUGIN_DIR_ENV, DEFAULT_DEVICE_PLUGIN_DIR)),
        nvidia_smi: PathBuf::from(env_or(NVIDIA_SMI_ENV, DEFAULT_NVIDIA_SMI)),
    };
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    info!(node = %node, namespace = %namespace, dir = %settings.dir.display(), "node agent starting");
    let (sender, topology) = watch::channel(None);
    let follow = topology_source::follow(client, &namespace, &node, sender);
    tokio::select! {
        result = device_plugin::run(settings, topology, shutdown_signal()) => result,
        () = follow => anyhow::bail!("the topology watch ended"),
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
            error!(error = format!("{err:#}"), "node agent failed");
            ExitCode::FAILURE
        }
    }
}
