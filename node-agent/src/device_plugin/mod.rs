//! The kubelet device plugins: `nvidia.com/gpu`, and under the MIG mixed strategy one per MIG
//! profile (`nvidia.com/mig-<profile>`), as NVIDIA's plugin serves them. Each
//! [`service::GpuDevicePlugin`] has its socket in the kubelet's device-plugins directory and
//! registers with the kubelet; the set follows the node's document (a profile that appears
//! gets a plugin, one that goes loses its plugin and socket).
//!
//! The kubelet empties that directory when it restarts, and then knows no plugin: each plugin
//! watches the kubelet's socket and its own, and serves and registers anew when either is
//! replaced or gone.

pub mod kubelet_devices;
pub mod preferred;
pub mod service;

pub use service::Offer;

use std::{
    collections::BTreeMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tokio::sync::{Notify, oneshot};
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
/// How often the sockets are looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Where the plugin lives and what it mounts.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node: String,
    /// The kubelet's device-plugins directory (`/var/lib/kubelet/device-plugins`).
    pub dir: PathBuf,
    pub container: ContainerEdits,
    /// Told after each Allocate (see [`kubelet_devices::Reporter`]).
    pub allocated: Arc<Notify>,
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

/// Registers `offer`'s plugin socket with the kubelet listening at `kubelet`.
pub async fn register(kubelet: &Path, offer: &Offer) -> Result<(), RegisterError> {
    let channel = uds::connect(kubelet)
        .await
        .map_err(|source| RegisterError::Connect {
            path: kubelet.to_owned(),
            source,
        })?;
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: API_VERSION.to_owned(),
            endpoint: offer.socket(),
            resource_name: offer.resource(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        })
        .await?;
    Ok(())
}

/// The metrics label of `offer`'s plugin: `device-plugin` for `nvidia.com/gpu` (the one
/// readiness waits for), `device-plugin/<resource>` for MIG profiles.
fn metric_label(offer: &Offer) -> String {
    match offer {
        Offer::Gpus => crate::metrics::DEVICE_PLUGIN.to_owned(),
        other => format!("{}/{}", crate::metrics::DEVICE_PLUGIN, other.resource()),
    }
}

/// A running plugin: stop it by dropping or sending on `stop`.
struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Serves and registers the plugins the node's document calls for until `shutdown` resolves;
/// then stops them, which removes their sockets.
pub async fn run(
    settings: Settings,
    topology: Topology,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut running: BTreeMap<Offer, Running> = BTreeMap::new();
    let mut changes = topology.clone();
    let supervise = async {
        // Nothing to offer before the operator has written the node's document.
        changes.wait_for(Option::is_some).await?;
        loop {
            let wanted = service::offers(changes.borrow_and_update().as_deref());
            for offer in running
                .keys()
                .filter(|o| !wanted.contains(o))
                .cloned()
                .collect::<Vec<_>>()
            {
                if let Some(plugin) = running.remove(&offer) {
                    info!(node = %settings.node, resource = %offer.resource(), "no such devices any more: stopping its plugin");
                    stop(plugin).await?;
                }
            }
            for offer in wanted {
                if let std::collections::btree_map::Entry::Vacant(slot) = running.entry(offer) {
                    let (stop, stopped) = oneshot::channel();
                    let task = tokio::spawn(plugin(
                        settings.clone(),
                        slot.key().clone(),
                        topology.clone(),
                        metrics.clone(),
                        stopped,
                    ));
                    slot.insert(Running { stop, task });
                }
            }
            tokio::select! {
                changed = changes.changed() => changed?,
                () = tokio::time::sleep(CHECK_INTERVAL) => {
                    if let Some((offer, _)) = running.iter().find(|(_, p)| p.task.is_finished()) {
                        let offer = offer.clone();
                        if let Some(plugin) = running.remove(&offer) {
                            plugin.task.await??;
                        }
                        anyhow::bail!("the {} plugin stopped", offer.resource());
                    }
                }
            }
        }
    };
    let result = tokio::select! {
        result = supervise => result,
        () = shutdown => Ok(()),
    };
    for (_, plugin) in std::mem::take(&mut running) {
        stop(plugin).await?;
    }
    info!(node = %settings.node, "device plugins stopped");
    result
}

async fn stop(plugin: Running) -> anyhow::Result<()> {
    let _ = plugin.stop.send(());
    plugin.task.await?
}

/// One plugin, until `stopped`: serves and registers for every kubelet, then removes its socket.
async fn plugin(
    settings: Settings,
    offer: Offer,
    topology: Topology,
    metrics: Metrics,
    stopped: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let kubelet = settings.dir.join(KUBELET_SOCKET);
    let socket = settings.dir.join(offer.socket());
    let label = metric_label(&offer);
    let lifetime = async {
        loop {
            serve_one_kubelet(&settings, &offer, &topology, &metrics, &kubelet, &socket).await?;
            metrics.registered(&label, false);
        }
    };
    let result = tokio::select! {
        result = lifetime => result,
        _ = stopped => Ok(()),
    };
    metrics.registered(&label, false);
    uds::remove_socket(&socket);
    result
}

/// One kubelet's lifetime: serve, register, and return when the kubelet's socket or the
/// plugin's is replaced or gone (the server stops when this returns).
async fn serve_one_kubelet(
    settings: &Settings,
    offer: &Offer,
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
        offer: offer.clone(),
        topology: topology.clone(),
        container: settings.container.clone(),
        metrics: metrics.clone(),
        allocated: settings.allocated.clone(),
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
            match register(kubelet, offer).await {
                Ok(()) => {
                    registered = true;
                    metrics.registered(&metric_label(offer), true);
                    info!(node = %settings.node, resource = %offer.resource(), socket = %socket.display(), "registered with the kubelet");
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
