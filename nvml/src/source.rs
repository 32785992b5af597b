//! Where the library's answers come from: the node's topology document, at the path
//! [`TOPOLOGY_ENV`](fakegpu_model::names::nvml::TOPOLOGY_ENV) names, else
//! [`DOCUMENT_BESIDE_LIBRARY`] in the library's own directory,
//! seen through `NVIDIA_VISIBLE_DEVICES`; else, in a container given GPUs by NVIDIA's
//! container toolkit (which mounts the library without the document), from the driver-root
//! agent's socket ([`fakegpu_model::document_source`]), seen through the container's device
//! nodes.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use fakegpu_model::{
    document_source::{self, Located},
    names::{container_env::VISIBLE_DEVICES, nvml::DOCUMENT_BESIDE_LIBRARY},
    telemetry::{draw_interval_from_env, draw_period},
    topology::{CallerEnv, NodeTopology, TopologyError},
};

use crate::machine::{Machine, Visible};

/// Why no machine could be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No document: as if no driver were loaded.
    #[error("no topology document at {0}")]
    Missing(String),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a topology document: {source}")]
    Invalid { path: String, source: TopologyError },
}

/// Where this process's answers come from: the document's origin, what the container sees, who
/// it is, and how long a drawn utilization holds (the exporter's setting, so that both draw
/// alike).
#[derive(Clone, Debug)]
pub struct Source {
    pub origin: Located,
    pub visible: Visible,
    pub identity: CallerEnv,
    pub draw_interval: Duration,
}

impl Source {
    /// The source of this process; `code` is an address inside this library.
    pub fn locate(code: usize) -> Result<Self, LoadError> {
        let mut identity = CallerEnv::from_process();
        let origin = document_source::locate(code).ok_or_else(|| {
            LoadError::Missing(format!("(beside this library) {DOCUMENT_BESIDE_LIBRARY}"))
        })?;
        let visible = match &origin {
            // NVIDIA's toolkit gave the container its GPUs' device nodes and no list of them
            // (`void` under CDI): the GPUs are those whose node is there, as NVML sees them.
            Located::Socket(socket) => {
                let document = socket_document(socket)?;
                let given = document_source::given_gpus(&document, &document_source::device_dir());
                identity.visible_devices = Some(given);
                Visible::parse(identity.visible_devices.as_deref())
            }
            Located::File(_) => Visible::parse(std::env::var(VISIBLE_DEVICES).ok().as_deref()),
        };
        Ok(Self {
            origin,
            visible,
            identity,
            draw_interval: draw_interval_from_env(),
        })
    }

    /// The machine the document describes now, busy as the draws of this moment make it.
    pub fn load(&self) -> Result<Machine, LoadError> {
        let period = draw_period(SystemTime::now(), self.draw_interval);
        let document = match &self.origin {
            Located::File(path) => read_document(path)?,
            Located::Socket(socket) => socket_document(socket)?,
        };
        Ok(Machine::of(
            &document,
            &self.visible,
            self.identity.caller(),
            period,
        ))
    }
}

/// What tells one version of a document's file from another: the node agent replaces the
/// file by rename (a new inode), and an edit in place changes its length or time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    path: PathBuf,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

/// The last document read and its file's stamp: readings are taken from the document anew at
/// each call (see `ffi::current`), and nvidia-smi asks for a dozen per GPU.
static LAST: Mutex<Option<(Stamp, Arc<NodeTopology>)>> = Mutex::new(None);

fn read_document(path: &Path) -> Result<Arc<NodeTopology>, LoadError> {
    let stamp = std::fs::metadata(path).ok().map(|m| Stamp {
        path: path.to_owned(),
        inode: m.ino(),
        len: m.len(),
        modified: m.modified().ok(),
    });
    let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let (Some(stamp), Some((seen, document))) = (&stamp, last.as_ref())
        && stamp == seen
    {
        return Ok(document.clone());
    }
    let document = Arc::new(parse(path)?);
    *last = stamp.map(|stamp| (stamp, document.clone()));
    Ok(document)
}

/// How long a document fetched from the socket answers before it is asked again: nvidia-smi
/// makes a dozen calls per GPU, each reading the document as it is now.
const SOCKET_REFRESH: Duration = Duration::from_millis(200);

/// The last document fetched from the socket: when, its text, and the document.
static LAST_FETCHED: Mutex<Option<(Instant, String, Arc<NodeTopology>)>> = Mutex::new(None);

/// The document the agent serves on `socket` now. While the agent cannot be reached (it
/// restarts; a container keeps the socket it was started with) the last one fetched stands.
fn socket_document(socket: &Path) -> Result<Arc<NodeTopology>, LoadError> {
    let mut last = LAST_FETCHED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((fetched, _, document)) = last.as_ref()
        && fetched.elapsed() < SOCKET_REFRESH
    {
        return Ok(document.clone());
    }
    let path = socket.display().to_string();
    let text = match (document_source::fetch(socket), last.as_ref()) {
        (Ok(text), _) => text,
        (Err(_), Some((_, _, document))) => return Ok(document.clone()),
        (Err(_), None) => return Err(LoadError::Missing(path)),
    };
    let document = match last.as_ref() {
        Some((_, seen, document)) if *seen == text => document.clone(),
        _ => Arc::new(
            NodeTopology::from_yaml(&text).map_err(|source| LoadError::Invalid { path, source })?,
        ),
    };
    *last = Some((Instant::now(), text, document.clone()));
    Ok(document)
}

fn parse(path: &Path) -> Result<NodeTopology, LoadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(LoadError::Missing(path.display().to_string()));
        }
        Err(source) => {
            return Err(LoadError::Read {
                path: path.display().to_string(),
                source,
            });
        }
    };
    NodeTopology::from_yaml(&text).map_err(|source| LoadError::Invalid {
        path: path.display().to_string(),
        source,
    })
}
