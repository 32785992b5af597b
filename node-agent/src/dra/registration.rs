//! The plugin registration service the kubelet's plugin watcher dials on the socket in its
//! `plugins_registry` directory: which DRA driver this is, where its service listens, which
//! service versions it speaks. Served by [`lenient_grpc`]: see there why not by tonic.

use std::sync::Arc;

use prost::Message;
use tonic::Status;
use tracing::{error, info};

use crate::{
    lenient_grpc,
    metrics::Metrics,
    proto::pluginregistration::{
        InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    },
};

/// The plugin type the kubelet routes to its DRA manager.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// gRPC service identifiers the kubelet may choose from, preferred first (the constants
/// `DRAPluginService` of k8s.io/kubelet's dra/v1 and dra/v1beta1 packages).
pub const SUPPORTED_SERVICES: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

#[derive(Debug)]
pub struct Registrar {
    pub driver: String,
    /// Absolute path of the DRA service socket.
    pub endpoint: String,
    /// The plugin's label in the agent's metrics.
    pub metric: &'static str,
    pub metrics: Metrics,
}

impl Registrar {
    pub fn info(&self) -> PluginInfo {
        PluginInfo {
            r#type: PLUGIN_TYPE.to_owned(),
            name: self.driver.clone(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_SERVICES.map(str::to_owned).to_vec(),
        }
    }

    pub fn notify(&self, status: &RegistrationStatus) {
        self.metrics
            .registered(self.metric, status.plugin_registered);
        if status.plugin_registered {
            info!(driver = %self.driver, "the kubelet registered the DRA plugin");
        } else {
            error!(driver = %self.driver, error = %status.error, "the kubelet refused the DRA plugin");
        }
    }
}

/// gRPC method paths of the registration service (`pluginregistration.Registration`).
const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
const NOTIFY: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";

/// The registration service as a [`lenient_grpc`] handler.
pub fn handler(registrar: Arc<Registrar>) -> lenient_grpc::Handler {
    Arc::new(move |path, message| {
        let registrar = registrar.clone();
        Box::pin(async move {
            match path.as_str() {
                GET_INFO => {
                    InfoRequest::decode(message.as_slice()).map_err(malformed)?;
                    Ok(registrar.info().encode_to_vec())
                }
                NOTIFY => {
                    let status =
                        RegistrationStatus::decode(message.as_slice()).map_err(malformed)?;
                    registrar.notify(&status);
                    Ok(RegistrationStatusResponse {}.encode_to_vec())
                }
                other => Err(Status::unimplemented(format!("no method {other}"))),
            }
        })
    })
}

fn malformed(error: prost::DecodeError) -> Status {
    Status::invalid_argument(format!("malformed request: {error}"))
}
