//! The DRA kubelet plugins, one per driver ([`devices`]): `gpu.nvidia.com` ([`gpu`]) and
//! `compute-domain.nvidia.com` ([`channels`]), each laid out as NVIDIA's plugin is: the
//! registration socket `<registry>/<driver>-reg.sock` ([`registration`]), the service socket
//! `<plugins>/<driver>/dra.sock` ([`driver`]), CDI specs in the CDI directory ([`cdi`]),
//! prepared claims in `<plugins>/<driver>/checkpoint.json` ([`checkpoint`]), and the node's
//! ResourceSlice ([`slice`](mod@slice)).

pub mod cdi;
pub mod channels;
pub mod checkpoint;
pub mod devices;
pub mod driver;
pub mod gpu;
pub mod registration;
pub mod sharing;
pub mod slice;

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use kube::Client;
use tonic::transport::Server;
use tracing::{info, warn};

use crate::{
    lenient_grpc,
    metrics::Metrics,
    proto::dra::{v1, v1beta1},
    topology_source::Topology,
    uds,
};

/// Where the plugins' files go.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node: String,
    /// The kubelet's plugin registry (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// The kubelet's plugins directory (`/var/lib/kubelet/plugins`).
    pub plugins_dir: PathBuf,
    /// Where CDI specs go (`/var/run/cdi`).
    pub cdi_dir: PathBuf,
}

impl Settings {
    fn data_dir(&self, driver: &str) -> PathBuf {
        self.plugins_dir.join(driver)
    }

    pub fn service_socket(&self, driver: &str) -> PathBuf {
        self.data_dir(driver).join("dra.sock")
    }

    pub fn registration_socket(&self, driver: &str) -> PathBuf {
        self.registry_dir.join(format!("{driver}-reg.sock"))
    }

    pub fn checkpoint(&self, driver: &str) -> PathBuf {
        self.data_dir(driver).join("checkpoint.json")
    }
}

/// Serves the plugin of `devices` and publishes its slice until `shutdown`; then removes the
/// sockets (the checkpoint and the specs of prepared claims stay: their pods still run).
/// `metric` is the plugin's label in the agent's metrics.
pub async fn run(
    settings: Settings,
    devices: Arc<dyn devices::Devices>,
    metric: &'static str,
    client: Client,
    topology: Topology,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let driver_name = devices.driver();
    let mut ready = topology.clone();
    ready.wait_for(Option::is_some).await?;
    let checkpoint = match checkpoint::Checkpoint::load(&settings.checkpoint(driver_name)) {
        Ok(checkpoint) => checkpoint,
        // Claims prepared before are prepared again from the API when the kubelet asks, and
        // unprepared by UID either way; a bad file must not keep the plugin down.
        Err(error) => {
            warn!(node = %settings.node, %error, "ignoring the checkpoint");
            checkpoint::Checkpoint::default()
        }
    };
    info!(node = %settings.node, driver = driver_name, prepared = checkpoint.claims.len(), "DRA plugin starting");
    metrics.prepared_claims(checkpoint.claims.len());
    if let Some((name, spec)) = devices.common() {
        let path = cdi::common_spec_path(&settings.cdi_dir, devices.cdi_kind(), name);
        crate::fs::write_atomic(&path, &serde_json::to_vec_pretty(&spec)?)
            .context("writing the common CDI spec")?;
    }

    let driver = Arc::new(driver::Driver {
        node: settings.node.clone(),
        client: client.clone(),
        devices: devices.clone(),
        paths: driver::Paths {
            cdi_dir: settings.cdi_dir.clone(),
            checkpoint: settings.checkpoint(driver_name),
        },
        prepared: tokio::sync::Mutex::new(checkpoint),
        metrics: metrics.clone(),
    });
    let service_socket = settings.service_socket(driver_name);
    let registration_socket = settings.registration_socket(driver_name);
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
        driver: driver_name.to_owned(),
        endpoint: service_socket.to_string_lossy().into_owned(),
        metric,
        metrics,
    };
    let registration = lenient_grpc::serve(
        uds::bind(&registration_socket)?,
        registration::handler(Arc::new(registrar)),
    );
    let publish = slice::publish(client, settings.node.clone(), topology, devices);
    let result = tokio::select! {
        result = service => result.context("the DRA service stopped"),
        result = registration => result.context("the registration service stopped"),
        () = publish => Err(anyhow::anyhow!("the ResourceSlice watch ended")),
        () = shutdown => Ok(()),
    };
    uds::remove_socket(&registration_socket);
    uds::remove_socket(&service_socket);
    info!(node = %settings.node, driver = driver_name, "DRA plugin stopped");
    result
}
