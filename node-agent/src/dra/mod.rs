//! The DRA kubelet plugin for driver `gpu.nvidia.com`, laid out as NVIDIA's plugin is: the
//! registration socket `<registry>/gpu.nvidia.com-reg.sock` ([`registration`]), the service
//! socket `<plugins>/gpu.nvidia.com/dra.sock` ([`driver`]), CDI specs in the CDI directory
//! ([`cdi`]), prepared claims in `<plugins>/gpu.nvidia.com/checkpoint.json` ([`checkpoint`]),
//! and the node's ResourceSlice ([`slice`]).

pub mod cdi;
pub mod checkpoint;
pub mod driver;
pub mod registration;
pub mod slice;

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use fakegpu_api::names::resource::GPU_DRIVER;
use kube::Client;
use tonic::transport::Server;
use tracing::{info, warn};

use crate::{
    container::ContainerEdits,
    lenient_grpc,
    metrics::Metrics,
    proto::dra::{v1, v1beta1},
    topology_source::Topology,
    uds,
};

/// Where the plugin's files go.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node: String,
    /// The kubelet's plugin registry (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// The kubelet's plugins directory (`/var/lib/kubelet/plugins`).
    pub plugins_dir: PathBuf,
    /// Where CDI specs go (`/var/run/cdi`).
    pub cdi_dir: PathBuf,
    pub container: ContainerEdits,
}

impl Settings {
    fn data_dir(&self) -> PathBuf {
        self.plugins_dir.join(GPU_DRIVER)
    }

    pub fn service_socket(&self) -> PathBuf {
        self.data_dir().join("dra.sock")
    }

    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join(format!("{GPU_DRIVER}-reg.sock"))
    }

    pub fn checkpoint(&self) -> PathBuf {
        self.data_dir().join("checkpoint.json")
    }
}

/// Serves the plugin and publishes the slice until `shutdown`; then removes the sockets (the
/// checkpoint and the specs of prepared claims stay: their pods still run).
pub async fn run(
    settings: Settings,
    client: Client,
    topology: Topology,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut ready = topology.clone();
    ready.wait_for(Option::is_some).await?;
    let checkpoint = match checkpoint::Checkpoint::load(&settings.checkpoint()) {
        Ok(checkpoint) => checkpoint,
        // Claims prepared before are prepared again from the API when the kubelet asks, and
        // unprepared by UID either way; a bad file must not keep the plugin down.
        Err(error) => {
            warn!(node = %settings.node, %error, "ignoring the checkpoint");
            checkpoint::Checkpoint::default()
        }
    };
    info!(node = %settings.node, prepared = checkpoint.claims.len(), "DRA plugin starting");
    metrics.prepared_claims(checkpoint.claims.len());
    let edits = &settings.container;
    let common = serde_json::to_vec_pretty(&cdi::common_spec(&edits.env(), edits.nvidia_smi()))?;
    cdi::write_atomic(&cdi::common_spec_path(&settings.cdi_dir), &common)
        .context("writing the common CDI spec")?;

    let driver = Arc::new(driver::GpuDriver {
        node: settings.node.clone(),
        client: client.clone(),
        topology: topology.clone(),
        paths: driver::Paths {
            cdi_dir: settings.cdi_dir.clone(),
            checkpoint: settings.checkpoint(),
        },
        prepared: tokio::sync::Mutex::new(checkpoint),
        metrics: metrics.clone(),
    });
    let service_socket = settings.service_socket();
    let registration_socket = settings.registration_socket();
    let service = Server::builder()
        .add_service(v1::dra_plugin_server::DraPluginServer::new(driver::V1(
            driver.clone(),
        )))
        .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(
            driver::V1beta1(driver),
        ))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(uds::bind(
            &service_socket,
        )?));
    // The service listens before the kubelet learns where it is.
    let registrar = registration::Registrar {
        driver: GPU_DRIVER.to_owned(),
        endpoint: service_socket.to_string_lossy().into_owned(),
        metrics,
    };
    let registration = lenient_grpc::serve(
        uds::bind(&registration_socket)?,
        registration::handler(Arc::new(registrar)),
    );
    let publish = slice::publish(client, settings.node.clone(), topology);
    let result = tokio::select! {
        result = service => result.context("the DRA service stopped"),
        result = registration => result.context("the registration service stopped"),
        () = publish => Err(anyhow::anyhow!("the ResourceSlice watch ended")),
        () = shutdown => Ok(()),
    };
    uds::remove_socket(&registration_socket);
    uds::remove_socket(&service_socket);
    info!(node = %settings.node, "DRA plugin stopped");
    result
}
