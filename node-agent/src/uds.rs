//! gRPC over Unix sockets, both ways: the kubelet dials the plugin's socket, and the plugin
//! dials the kubelet's.

use std::{io, path::Path};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint};

/// Binds `path`, replacing a socket file left behind by an earlier run (a socket nobody
/// listens on any more cannot be bound again otherwise).
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    crate::fs::remove_if_present(path)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    UnixListener::bind(path)
}

/// Removes a served socket at shutdown, so the kubelet does not dial a dead plugin; a failure
/// is logged, shutdown goes on.
pub fn remove_socket(path: &Path) {
    if let Err(error) = crate::fs::remove_if_present(path) {
        tracing::warn!(socket = %path.display(), %error, "could not remove a socket");
    }
}

/// A channel to the gRPC server on the socket at `path`, connected now.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    // The URI is required by the API and ignored: the connector decides where to go.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}
