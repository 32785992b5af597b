//! Where the library's answers come from: the node's topology document, at the path
//! [`TOPOLOGY_ENV`] names (else [`DEFAULT_TOPOLOGY`]), seen through `NVIDIA_VISIBLE_DEVICES`.

use fakegpu_api::{
    names::nvml::{DEFAULT_TOPOLOGY, TOPOLOGY_ENV},
    topology::{NodeTopology, TopologyError},
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

/// The machine this process sees now.
pub fn load() -> Result<Machine, LoadError> {
    let path = std::env::var(TOPOLOGY_ENV).unwrap_or_else(|_| DEFAULT_TOPOLOGY.to_owned());
    let visible = Visible::parse(std::env::var("NVIDIA_VISIBLE_DEVICES").ok().as_deref());
    load_from(&path, &visible)
}

pub fn load_from(path: &str, visible: &Visible) -> Result<Machine, LoadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(LoadError::Missing(path.to_owned()));
        }
        Err(source) => {
            return Err(LoadError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let document = NodeTopology::from_yaml(&text).map_err(|source| LoadError::Invalid {
        path: path.to_owned(),
        source,
    })?;
    Ok(Machine::of(&document, visible))
}
