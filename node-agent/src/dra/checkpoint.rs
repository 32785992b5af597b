//! Which claims this node has prepared, kept on disk so that an agent restart neither forgets
//! a prepared claim (the kubelet does not ask again) nor fails to unprepare it.

use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::sharing::Sharing;
use crate::fs::write_atomic;

/// Format of the file; a newer one is refused rather than misread.
const VERSION: u32 = 1;

/// One device of a prepared claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    /// The claim's request the device was allocated for.
    pub request: String,
    pub pool: String,
    /// Device name in the slice (`gpu-<index>`, or a MIG device's name).
    pub device: String,
    /// The GPU's or MIG instance's UUID; empty for a channel.
    #[serde(default)]
    pub uuid: String,
    /// For an IMEX channel: its domain and allocation mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<ChannelGrant>,
    /// For a GPU or MIG device: how the claim shares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<Sharing>,
}

/// What a compute-domain claim's channel device grants.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChannelGrant {
    /// The ComputeDomain's UID, from the claim's opaque configuration.
    pub domain_id: String,
    /// `allocationMode: All`: every channel of the node, not just the device's.
    pub all: bool,
}

impl PreparedDevice {
    /// The IMEX channel ids the device injects: its own (`channel-<id>`), or all of them.
    pub fn channels(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match &self.channel {
            Some(grant) if grant.all => {
                Box::new(0..fakegpu_model::names::compute_domain::IMEX_CHANNELS)
            }
            Some(_) => Box::new(
                self.device
                    .strip_prefix("channel-")
                    .and_then(|id| id.parse().ok())
                    .into_iter(),
            ),
            None => Box::new(std::iter::empty()),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    pub namespace: String,
    pub name: String,
    pub devices: Vec<PreparedDevice>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub version: u32,
    /// By claim UID.
    pub claims: BTreeMap<String, PreparedClaim>,
}

/// Why the checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is not a checkpoint: {source}")]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} has format version {version}; this agent reads up to {VERSION}")]
    TooNew { path: PathBuf, version: u32 },
}

impl Checkpoint {
    /// The checkpoint at `path`; an empty one when there is none yet.
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(CheckpointError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let checkpoint: Self =
            serde_json::from_slice(&text).map_err(|source| CheckpointError::Malformed {
                path: path.to_owned(),
                source,
            })?;
        if checkpoint.version > VERSION {
            return Err(CheckpointError::TooNew {
                path: path.to_owned(),
                version: checkpoint.version,
            });
        }
        Ok(checkpoint)
    }

    /// Writes the checkpoint to `path`, whole or not at all.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let mut copy = self.clone();
        copy.version = VERSION;
        write_atomic(path, &serde_json::to_vec_pretty(&copy)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let dir = std::env::temp_dir().join(format!("fakegpu-checkpoint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("checkpoint.json");
        assert_eq!(
            Checkpoint::load(&path).expect("missing is empty"),
            Checkpoint::default()
        );
        let mut checkpoint = Checkpoint::default();
        checkpoint.claims.insert(
            "uid-1".into(),
            PreparedClaim {
                namespace: "ns".into(),
                name: "c".into(),
                devices: vec![PreparedDevice {
                    request: "gpu".into(),
                    pool: "n".into(),
                    device: "gpu-0".into(),
                    uuid: "GPU-0".into(),
                    channel: None,
                    sharing: Some(Sharing::default()),
                }],
            },
        );
        checkpoint.save(&path).expect("save");
        let loaded = Checkpoint::load(&path).expect("load");
        assert_eq!(loaded.claims, checkpoint.claims);
        std::fs::write(&path, b"{not json").expect("write");
        assert!(matches!(
            Checkpoint::load(&path),
            Err(CheckpointError::Malformed { .. })
        ));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
