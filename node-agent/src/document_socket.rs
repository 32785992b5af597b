//! The driver root's document socket ([`fakegpu_model::document_source`]): the node's document as
//! it is now, for the containers NVIDIA's container toolkit gives GPUs (it mounts the socket,
//! not the document file, into them).

use std::{
    os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use fakegpu_model::names::nvml::DOCUMENT_REQUEST;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
    sync::Semaphore,
    task::JoinHandle,
};
use tracing::{debug, info};

use crate::topology_source::Topology;

/// How long a client may take to send its request: fakegpu's clients send it as they connect,
/// and wait for their answer a few times longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// A socket being served; serving stops when this is dropped.
#[derive(Debug)]
pub struct Served {
    path: PathBuf,
    inode: u64,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Served {
    /// Binds `path` (replacing a socket an earlier agent left there) and answers each client
    /// with the latest document of `topology`. Anyone may connect, as to the driver's own
    /// sockets: the containers run as any user.
    pub fn bind(path: &Path, topology: Topology) -> std::io::Result<Self> {
        match std::fs::symlink_metadata(path) {
            Ok(there) if there.file_type().is_socket() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} exists and is no socket", path.display()),
                ));
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        let inode = std::fs::symlink_metadata(path)?.ino();
        info!(socket = %path.display(), "serving the node's document");
        let task = tokio::spawn(accept(listener, topology));
        Ok(Self {
            path: path.to_owned(),
            inode,
            task,
        })
    }

    /// Whether the socket is still the one bound here (something may have removed it).
    pub fn is_current(&self) -> bool {
        !self.task.is_finished()
            && std::fs::symlink_metadata(&self.path)
                .is_ok_and(|m| m.file_type().is_socket() && m.ino() == self.inode)
    }
}

/// Clients answered at once: a client that connects and sends nothing holds its slot until
/// [`REQUEST_TIMEOUT`], so any container may slow the others, not exhaust the agent.
const CLIENTS_AT_ONCE: usize = 32;

async fn accept(listener: UnixListener, topology: Topology) {
    let slots = Arc::new(Semaphore::new(CLIENTS_AT_ONCE));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let topology = topology.clone();
                tokio::spawn(async move {
                    if let Err(error) = answer(stream, &topology).await {
                        debug!(%error, "a document socket client went without its document");
                    }
                    drop(slot);
                });
            }
            Err(error) => {
                debug!(%error, "accepting on the document socket");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads the request line and writes the document, or closes without one when there is none
/// (the node left its pool: the client reads that as no driver).
async fn answer(mut stream: UnixStream, topology: &Topology) -> std::io::Result<()> {
    let mut request = vec![0; DOCUMENT_REQUEST.len()];
    tokio::time::timeout(REQUEST_TIMEOUT, stream.read_exact(&mut request))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    if request != DOCUMENT_REQUEST {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a document request",
        ));
    }
    let document = topology.borrow().clone();
    if let Some(document) = document {
        let text = document.to_yaml().map_err(std::io::Error::other)?;
        stream.write_all(text.as_bytes()).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fakegpu_model::{document_source::fetch, topology::NodeTopology};
    use tokio::sync::watch;

    use super::*;
    use crate::driver_root::tests::document;

    /// The blocking client, as the library and nvidia-smi run it, off the runtime's threads.
    async fn fetched(socket: &Path) -> std::io::Result<String> {
        let socket = socket.to_owned();
        tokio::task::spawn_blocking(move || fetch(&socket))
            .await
            .map_err(std::io::Error::other)?
    }

    #[tokio::test]
    async fn clients_get_the_document_as_it_is_now() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("fakegpu-docsock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("socket");
        // A socket an earlier agent left behind is replaced.
        drop(std::os::unix::net::UnixListener::bind(&path)?);
        let (sender, receiver) = watch::channel(Some(Arc::new(document(2))));
        let served = Served::bind(&path, receiver)?;
        assert!(served.is_current());
        assert_eq!(
            std::fs::metadata(&path)?.permissions().mode() & 0o777,
            0o666
        );
        let first = NodeTopology::from_yaml(&fetched(&path).await?)?;
        assert_eq!(first.gpus.len(), 2);
        sender.send(Some(Arc::new(document(3))))?;
        let second = NodeTopology::from_yaml(&fetched(&path).await?)?;
        assert_eq!(second.gpus.len(), 3);
        // No document (the node left its pool): the client is told nothing.
        sender.send(None)?;
        let error = fetched(&path).await.expect_err("no document");
        assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);

        // Clients that connect and say nothing hold every slot until their time is up; a
        // client behind them is still answered.
        sender.send(Some(Arc::new(document(1))))?;
        let silent: Vec<_> = (0..CLIENTS_AT_ONCE + 8)
            .map(|_| std::os::unix::net::UnixStream::connect(&path))
            .collect::<Result<_, _>>()?;
        let behind = NodeTopology::from_yaml(&fetched(&path).await?)?;
        assert_eq!(behind.gpus.len(), 1);
        drop(silent);

        std::fs::remove_file(&path)?;
        assert!(!served.is_current(), "its socket was removed");
        drop(served);
        // A file that is no socket is not taken over.
        std::fs::write(&path, b"")?;
        let (_, receiver) = watch::channel(None);
        assert!(Served::bind(&path, receiver).is_err());
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
