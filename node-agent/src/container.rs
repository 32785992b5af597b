//! What every container given GPUs gets besides its devices, from either plugin: the variables
//! the fake nvidia-smi reads and the nvidia-smi itself.

use std::path::{Path, PathBuf};

use fakegpu_api::names::container_env;

#[derive(Clone, Debug)]
pub struct ContainerEdits {
    pub node: String,
    /// The exporter's base URL, which nvidia-smi asks for the node's GPUs.
    pub exporter_url: String,
    /// The fake nvidia-smi on the host.
    pub nvidia_smi: PathBuf,
}

impl ContainerEdits {
    /// `NODE_NAME` and `FAKEGPU_EXPORTER_URL`.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [
            (container_env::NODE_NAME, self.node.clone()),
            (container_env::EXPORTER_URL, self.exporter_url.clone()),
        ]
    }

    /// The fake nvidia-smi's host path, when the file is there: bind-mounting a missing file
    /// would fail the container, so until the agent's init container has put nvidia-smi in
    /// place, containers go without it.
    pub fn nvidia_smi(&self) -> Option<&str> {
        self.nvidia_smi
            .is_file()
            .then(|| self.nvidia_smi.to_str())
            .flatten()
    }
}

/// The nvidia-smi shipped next to the agent's binary, when there is one.
pub fn shipped_nvidia_smi() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.parent()?.join("nvidia-smi");
    path.is_file().then_some(path)
}

impl ContainerEdits {
    /// Puts `source` at the host path containers mount, executable, unless an identical file is
    /// there already. Both DaemonSets may do it on one node: the copy is written beside the
    /// target and renamed over it, so a container never mounts half a binary.
    pub fn install_nvidia_smi(&self, source: &Path) -> std::io::Result<bool> {
        crate::replace_file(&self.nvidia_smi, &std::fs::read(source)?, 0o755)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn nvidia_smi_is_installed_executable_once() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("fakegpu-smi-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let source = dir.join("built");
        std::fs::write(&source, b"#!/bin/true\n")?;
        let edits = ContainerEdits {
            node: "n".into(),
            exporter_url: "http://e".into(),
            nvidia_smi: dir.join("bin/nvidia-smi"),
        };
        assert_eq!(edits.nvidia_smi(), None);
        assert!(edits.install_nvidia_smi(&source)?);
        assert!(!edits.install_nvidia_smi(&source)?);
        let mode = std::fs::metadata(&edits.nvidia_smi)?.permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(edits.nvidia_smi().is_some());
        std::fs::remove_dir_all(&dir)
    }
}
