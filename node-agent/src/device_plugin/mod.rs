//! The kubelet device plugin for `nvidia.com/gpu`: serves [`service::GpuDevicePlugin`] on a
//! socket in the kubelet's device-plugins directory and registers it with the kubelet.
//!
//! The kubelet empties that directory when it restarts, and then knows no plugin: the runner
//! watches the kubelet's socket and its own, and serves and registers anew when either is
//! replaced or gone.

pub mod preferred;
pub mod service;

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::Duration,
};

use fakegpu_api::names::resource;
use tokio::sync::oneshot;
use tonic::transport::Server;
use tracing::{debug, info, warn};

use crate::{
    container::ContainerEdits,
    metrics::Metrics,
    proto::deviceplugin::{
        DevicePluginOptions, RegisterRequest, device_plugin_server::DevicePluginServer,
        registration_client::RegistrationClient,
    },
    topology_source::Topology,
    uds,
};

/// The API version the plugin speaks (`Version` of the Go package).
pub const API_VERSION: &str = "v1beta1";
/// The kubelet's registration socket, in the device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The plugin's socket, as NVIDIA's device plugin names it.
pub const PLUGIN_SOCKET: &str = "nvidia-gpu.sock";
/// How often the sockets are looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Where the plugin lives and what it mounts.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node: String,
    /// The kubelet's device-plugins directory (`/var/lib/kubelet/device-plugins`).
    pub dir: PathBuf,
    pub container: ContainerEdits,
}

/// A file's identity: a socket re-created at the same path is another file.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Why the plugin could not register.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("connecting to the kubelet at {path}: {source}")]
    Connect {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("the kubelet refused the registration: {0}")]
    Refused(#[from] tonic::Status),
}

/// Registers the plugin's socket with the kubelet listening at `kubelet`.
pub async fn register(kubelet: &Path) -> Result<(), RegisterError> {
    let channel = uds::connect(kubelet)
        .await
        .map_err(|source| RegisterError::Connect {
            path: kubelet.to_owned(),
            source,
        })?;
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: API_VERSION.to_owned(),
            endpoint: PLUGIN_SOCKET.to_owned(),
            resource_name: resource::GPU.to_owned(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        })
        .await?;
    Ok(())
}

/// Serves and registers until `shutdown` resolves; then stops serving and removes the socket.
pub async fn run(
    settings: Settings,
    topology: Topology,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut topology_ready = topology.clone();
    let kubelet = settings.dir.join(KUBELET_SOCKET);
    let socket = settings.dir.join(PLUGIN_SOCKET);
    let lifetime = async {
        // Nothing to offer before the operator has written the node's document.
        topology_ready.wait_for(Option::is_some).await?;
        loop {
            serve_one_kubelet(&settings, &topology, &metrics, &kubelet, &socket).await?;
            metrics.registered(crate::metrics::DEVICE_PLUGIN, false);
        }
    };
    let result = tokio::select! {
        result = lifetime => result,
        () = shutdown => Ok(()),
    };
    uds::remove_socket(&socket);
    info!(node = %settings.node, "device plugin stopped");
    result
}

/// One kubelet's lifetime: serve, register, and return when the kubelet's socket or the
/// plugin's is replaced or gone (the server stops when this returns).
async fn serve_one_kubelet(
    settings: &Settings,
    topology: &Topology,
    metrics: &Metrics,
    kubelet: &Path,
    socket: &Path,
) -> anyhow::Result<()> {
    let kubelet_id = loop {
        if let Some(id) = identity(kubelet) {
            break id;
        }
        tokio::time::sleep(CHECK_INTERVAL).await;
    };
    let listener = uds::bind(socket)?;
    let socket_id = identity(socket);
    let service = service::GpuDevicePlugin {
        node: settings.node.clone(),
        topology: topology.clone(),
        container: settings.container.clone(),
        metrics: metrics.clone(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(DevicePluginServer::new(service))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            ),
    );
    let _stop_on_return = StopOnDrop(Some(stop));
    let mut registered = false;
    let mut attempts = 0u32;
    loop {
        if !registered {
            attempts += 1;
            match register(kubelet).await {
                Ok(()) => {
                    registered = true;
                    metrics.registered(crate::metrics::DEVICE_PLUGIN, true);
                    info!(node = %settings.node, socket = %socket.display(), "registered with the kubelet");
                }
                // The kubelet may still be starting; try again while its socket stays.
                Err(error) if attempts == 1 => {
                    warn!(node = %settings.node, %error, "registration failed; retrying")
                }
                Err(error) => {
                    debug!(node = %settings.node, %error, attempts, "registration failed")
                }
            }
        }
        tokio::time::sleep(CHECK_INTERVAL).await;
        if server.is_finished() {
            anyhow::bail!("the device plugin's gRPC server stopped");
        }
        if identity(kubelet) != Some(kubelet_id) {
            info!(node = %settings.node, "the kubelet's socket changed: registering again");
            return Ok(());
        }
        if identity(socket) != socket_id {
            info!(node = %settings.node, "the plugin's socket is gone: serving again");
            return Ok(());
        }
    }
}

/// Stops a server when the lifetime that started it ends, however it ends.
struct StopOnDrop(Option<oneshot::Sender<()>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

impl std::fmt::Debug for StopOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopOnDrop")
    }
}
