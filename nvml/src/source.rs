//! Where the library's answers come from: the node's topology document, at the path
//! [`TOPOLOGY_ENV`] names, else [`DOCUMENT_BESIDE_LIBRARY`] in the library's own directory,
//! seen through `NVIDIA_VISIBLE_DEVICES`.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use fakegpu_api::{
    names::{
        container_env::VISIBLE_DEVICES,
        nvml::{DOCUMENT_BESIDE_LIBRARY, TOPOLOGY_ENV},
    },
    telemetry::{draw_interval_from_env, draw_period},
    topology::{Caller, CallerEnv, NodeTopology, TopologyError},
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

/// Where this process's answers come from: the document's path, what the container sees, who
/// it is, and how long a drawn utilization holds (the exporter's setting, so that both draw
/// alike).
#[derive(Clone, Debug)]
pub struct Source {
    pub path: String,
    pub visible: Visible,
    pub identity: CallerEnv,
    pub draw_interval: Duration,
}

impl Source {
    /// The source of this process; `code` is an address inside this library.
    pub fn locate(code: usize) -> Result<Self, LoadError> {
        let path = match std::env::var(TOPOLOGY_ENV) {
            Ok(path) => path,
            Err(_) => beside(code)
                .ok_or_else(|| {
                    LoadError::Missing(format!("(beside this library) {DOCUMENT_BESIDE_LIBRARY}"))
                })?
                .to_string_lossy()
                .into_owned(),
        };
        let visible = Visible::parse(std::env::var(VISIBLE_DEVICES).ok().as_deref());
        Ok(Self {
            path,
            visible,
            identity: CallerEnv::from_process(),
            draw_interval: draw_interval_from_env(),
        })
    }

    /// The machine the document describes now, busy as the draws of this moment make it.
    pub fn load(&self) -> Result<Machine, LoadError> {
        let period = draw_period(SystemTime::now(), self.draw_interval);
        load_from(&self.path, &self.visible, self.identity.caller(), period)
    }
}

/// The document's path beside the file mapped at `code` (this library, wherever it was loaded
/// from: a driver root may be mounted anywhere in a container).
fn beside(code: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let file = mapped_file(&maps, code)?;
    Some(file.parent()?.join(DOCUMENT_BESIDE_LIBRARY))
}

/// The file of the mapping in `maps` (the format of `/proc/<pid>/maps`) that holds `address`.
fn mapped_file(maps: &str, address: usize) -> Option<&Path> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (
            usize::from_str_radix(start, 16).ok()?,
            usize::from_str_radix(end, 16).ok()?,
        );
        // perms, offset, device, inode, then the path (which may hold spaces).
        let path = line.splitn(6, char::is_whitespace).nth(5)?.trim_start();
        (start <= address && address < end && path.starts_with('/')).then(|| Path::new(path))
    })
}

pub fn load_from(
    path: &str,
    visible: &Visible,
    caller: Caller<'_>,
    period: u64,
) -> Result<Machine, LoadError> {
    Ok(Machine::of(&*read_document(path)?, visible, caller, period))
}

/// What tells one version of a document's file from another: the node agent replaces the
/// file by rename (a new inode), and an edit in place changes its length or time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    path: String,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

/// The last document read and its file's stamp: readings are taken from the document anew at
/// each call (see `ffi::current`), and nvidia-smi asks for a dozen per GPU.
static LAST: Mutex<Option<(Stamp, Arc<NodeTopology>)>> = Mutex::new(None);

fn read_document(path: &str) -> Result<Arc<NodeTopology>, LoadError> {
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

fn parse(path: &str) -> Result<NodeTopology, LoadError> {
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
    NodeTopology::from_yaml(&text).map_err(|source| LoadError::Invalid {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_holding_an_address_names_its_file() {
        let maps = "\
55d0c0a00000-55d0c0a20000 r--p 00000000 08:01 123  /usr/bin/prog
7f1e40000000-7f1e40100000 r-xp 00010000 08:01 456  /var/lib/fakegpu/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03
7f1e40100000-7f1e40200000 rw-p 00000000 00:00 0 
7f1e40200000-7f1e40300000 r-xp 00000000 08:01 789  /opt/with space/lib.so
";
        assert_eq!(
            mapped_file(maps, 0x7f1e_4000_0100),
            Some(Path::new(
                "/var/lib/fakegpu/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03"
            ))
        );
        assert_eq!(
            mapped_file(maps, 0x7f1e_4010_0000),
            None,
            "anonymous mapping"
        );
        assert_eq!(
            mapped_file(maps, 0x7f1e_4020_0000),
            Some(Path::new("/opt/with space/lib.so"))
        );
        assert_eq!(mapped_file(maps, 0x10), None);
    }

    #[test]
    fn this_code_is_found_in_the_running_executable() {
        // Linked into the test binary, the library's code lies in the test executable.
        let code = the_mapping_holding_an_address_names_its_file as *const () as usize;
        let exe = std::env::current_exe().ok();
        let dir = exe.as_deref().and_then(Path::parent);
        assert_eq!(
            beside(code).as_deref(),
            dir.map(|d| d.join(DOCUMENT_BESIDE_LIBRARY)).as_deref()
        );
    }
}
