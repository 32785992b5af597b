//! What every container given GPUs gets besides its devices, from either plugin: the variables
//! the fake nvidia-smi reads, the nvidia-smi itself, and fakegpu's NVML library with the node's
//! document, so that NVML's users in the container (go-nvml, pynvml, frameworks that probe the
//! GPU) see the GPUs the container was given; and fakegpu's CUDA driver library, so that the
//! CUDA runtime finds a driver and says there is no device to run kernels on.

use std::path::{Path, PathBuf};

use fakegpu_model::{
    names::{
        container_env, exporter,
        nvml::{CUDA_SONAME, DOCUMENT_BESIDE_LIBRARY, LIBRARY_SONAME, TOPOLOGY_ENV},
    },
    topology::NodeTopology,
};
use tracing::{info, warn};

use crate::{fs::replace_file, topology_source::Topology};

#[derive(Clone, Debug)]
pub struct ContainerEdits {
    pub node: String,
    /// The exporter's base URL, which nvidia-smi asks for the node's GPUs.
    pub exporter_url: String,
    /// The fake nvidia-smi on the host.
    pub nvidia_smi: PathBuf,
    /// The host directory with the NVML and CUDA libraries and the node's document
    /// ([`fakegpu_model::names::nvml::CONTAINER_DIR`]).
    pub nvml_dir: PathBuf,
}

/// A host path bind-mounted read-only into the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMount {
    pub host: String,
    pub container: &'static str,
}

/// The exporter's base URL for GPU containers: the exporter Service's ClusterIP where the
/// kubelet gave it to the agent (service links, in the install namespace), which a container
/// reaches without cluster DNS (a `hostNetwork` pod resolves with the host's resolver; a
/// cluster may run no DNS at all); else the Service's DNS name in `namespace`. `env` reads
/// the agent's environment.
pub fn exporter_url(namespace: &str, env: impl Fn(&str) -> Option<String>) -> String {
    match (
        env(exporter::SERVICE_HOST_ENV),
        env(exporter::SERVICE_PORT_ENV),
    ) {
        (Some(host), Some(port)) if !host.is_empty() && !port.is_empty() => {
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            format!("http://{host}:{port}")
        }
        _ => exporter::default_url(namespace),
    }
}

impl ContainerEdits {
    /// `NODE_NAME` and `FAKEGPU_EXPORTER_URL`, and where the library finds the document when
    /// containers get the library.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            (container_env::NODE_NAME, self.node.clone()),
            (container_env::EXPORTER_URL, self.exporter_url.clone()),
        ];
        if self.library().is_file() {
            env.push((
                TOPOLOGY_ENV,
                format!("{}/{DOCUMENT_BESIDE_LIBRARY}", container_env::NVML_DIR_PATH),
            ));
        }
        env
    }

    /// What containers mount: each host file only when it is there (bind-mounting a missing
    /// file would fail the container, so until the agent has put them in place containers go
    /// without them). The library comes with its directory, which holds the document.
    pub fn mounts(&self) -> Vec<HostMount> {
        let mount = |host: &Path, container| {
            Some(HostMount {
                host: host.to_str()?.to_owned(),
                container,
            })
        };
        let mut mounts = Vec::new();
        if self.nvidia_smi.is_file() {
            mounts.extend(mount(&self.nvidia_smi, container_env::NVIDIA_SMI_PATH));
        }
        if self.library().is_file() {
            for path in container_env::NVML_LIBRARY_PATHS {
                mounts.extend(mount(&self.library(), path));
            }
            mounts.extend(mount(&self.nvml_dir, container_env::NVML_DIR_PATH));
        }
        if self.cuda().is_file() {
            for path in container_env::CUDA_LIBRARY_PATHS {
                mounts.extend(mount(&self.cuda(), path));
            }
        }
        mounts
    }

    fn library(&self) -> PathBuf {
        self.nvml_dir.join(LIBRARY_SONAME)
    }

    fn cuda(&self) -> PathBuf {
        self.nvml_dir.join(CUDA_SONAME)
    }

    /// Puts `source` at the host path containers mount, executable, unless an identical file is
    /// there already. Both DaemonSets may do it on one node: the copy is written beside the
    /// target and renamed over it, so a container never mounts half a binary.
    pub fn install_nvidia_smi(&self, source: &Path) -> std::io::Result<bool> {
        replace_file(&self.nvidia_smi, &std::fs::read(source)?, 0o755)
    }

    /// Puts the NVML library `source` where containers mount it, as
    /// [`install_nvidia_smi`](Self::install_nvidia_smi) does nvidia-smi.
    pub fn install_nvml(&self, source: &Path) -> std::io::Result<bool> {
        replace_file(&self.library(), &std::fs::read(source)?, 0o644)
    }

    /// Puts the CUDA driver library `source` where containers mount it, as
    /// [`install_nvml`](Self::install_nvml) does NVML.
    pub fn install_cuda(&self, source: &Path) -> std::io::Result<bool> {
        replace_file(&self.cuda(), &std::fs::read(source)?, 0o644)
    }

    /// Writes `document` where containers' libraries read it; false when it was there already.
    pub fn write_document(&self, document: &NodeTopology) -> std::io::Result<bool> {
        let text = document.to_yaml().map_err(std::io::Error::other)?;
        replace_file(
            &self.nvml_dir.join(DOCUMENT_BESIDE_LIBRARY),
            text.as_bytes(),
            0o644,
        )
    }

    /// Keeps the containers' document in step with the node's until the sender goes. When the
    /// node leaves its pool the last document stays: its pods keep their GPUs until they end.
    pub async fn follow_document(self, mut topology: Topology) {
        loop {
            let document = topology.borrow_and_update().clone();
            if let Some(document) = document {
                match self.write_document(&document) {
                    Ok(true) => {
                        tracing::debug!(node = %self.node, dir = %self.nvml_dir.display(), "containers' NVML document updated")
                    }
                    Ok(false) => {}
                    Err(error) => {
                        warn!(node = %self.node, dir = %self.nvml_dir.display(), %error, "cannot write the containers' NVML document")
                    }
                }
            }
            if topology.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The nvidia-smi shipped next to the agent's binary, when there is one.
pub fn shipped_nvidia_smi() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.parent()?.join("nvidia-smi");
    path.is_file().then_some(path)
}

/// Installs what the image ships for containers (nvidia-smi beside the agent, the NVML library
/// at `library`, the CUDA driver library at `cuda`), logging each; a file the image lacks or
/// the host refuses leaves containers without it, not the agent down.
pub fn install_shipped(edits: &ContainerEdits, library: &Path, cuda: &Path) {
    if let Some(shipped) = shipped_nvidia_smi() {
        match edits.install_nvidia_smi(&shipped) {
            Ok(installed) => {
                info!(path = %edits.nvidia_smi.display(), installed, "nvidia-smi in place")
            }
            Err(error) => {
                warn!(path = %edits.nvidia_smi.display(), %error, "cannot install nvidia-smi; containers go without it")
            }
        }
    }
    if library.is_file() {
        match edits.install_nvml(library) {
            Ok(installed) => {
                info!(dir = %edits.nvml_dir.display(), installed, "NVML library in place for containers")
            }
            Err(error) => {
                warn!(dir = %edits.nvml_dir.display(), %error, "cannot install the NVML library; containers go without it")
            }
        }
    }
    if cuda.is_file() {
        match edits.install_cuda(cuda) {
            Ok(installed) => {
                info!(dir = %edits.nvml_dir.display(), installed, "CUDA driver library in place for containers")
            }
            Err(error) => {
                warn!(dir = %edits.nvml_dir.display(), %error, "cannot install the CUDA driver library; containers go without it")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn containers_ask_the_exporter_at_its_cluster_ip_where_the_kubelet_gave_it() {
        let given = |host: &'static str| {
            move |name: &str| match name {
                "FAKEGPU_EXPORTER_SERVICE_HOST" => Some(host.to_owned()),
                "FAKEGPU_EXPORTER_SERVICE_PORT" => Some("9400".to_owned()),
                _ => None,
            }
        };
        assert_eq!(
            exporter_url("gpu", given("10.0.0.7")),
            "http://10.0.0.7:9400"
        );
        assert_eq!(
            exporter_url("gpu", given("fd00::7")),
            "http://[fd00::7]:9400"
        );
        // A pod started before the Service existed has no service links: the DNS name.
        assert_eq!(
            exporter_url("gpu", |_| None),
            "http://fakegpu-exporter.gpu.svc:9400"
        );
        assert_eq!(
            exporter_url("gpu", given("")),
            "http://fakegpu-exporter.gpu.svc:9400"
        );
    }

    fn edits(dir: &Path) -> ContainerEdits {
        ContainerEdits {
            node: "n".into(),
            exporter_url: "http://e".into(),
            nvidia_smi: dir.join("bin/nvidia-smi"),
            nvml_dir: dir.join("nvml"),
        }
    }

    fn temp_dir(name: &str) -> std::io::Result<PathBuf> {
        let dir = std::env::temp_dir().join(format!("fakegpu-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    #[test]
    fn nvidia_smi_is_installed_executable_once() -> std::io::Result<()> {
        let dir = temp_dir("smi")?;
        let source = dir.join("built");
        std::fs::write(&source, b"#!/bin/true\n")?;
        let edits = edits(&dir);
        assert_eq!(edits.mounts(), []);
        assert!(edits.install_nvidia_smi(&source)?);
        assert!(!edits.install_nvidia_smi(&source)?);
        let mode = std::fs::metadata(&edits.nvidia_smi)?.permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            edits.mounts(),
            [HostMount {
                host: edits.nvidia_smi.display().to_string(),
                container: container_env::NVIDIA_SMI_PATH,
            }]
        );
        std::fs::remove_dir_all(&dir)
    }

    #[test]
    fn the_library_comes_with_its_document_and_the_variable_naming_it() -> anyhow::Result<()> {
        let dir = temp_dir("nvml")?;
        let edits = edits(&dir);
        assert!(!edits.env().iter().any(|(name, _)| *name == TOPOLOGY_ENV));
        let source = dir.join("libnvidia_ml.so");
        std::fs::write(&source, b"\x7fELF")?;
        assert!(edits.install_nvml(&source)?);
        assert_eq!(
            edits.mounts(),
            [
                HostMount {
                    host: dir.join("nvml/libnvidia-ml.so.1").display().to_string(),
                    container: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                },
                HostMount {
                    host: dir.join("nvml/libnvidia-ml.so.1").display().to_string(),
                    container: "/usr/lib64/libnvidia-ml.so.1",
                },
                HostMount {
                    host: dir.join("nvml").display().to_string(),
                    container: container_env::NVML_DIR_PATH,
                },
            ]
        );
        // The CUDA driver library beside it, in the same directories.
        let cuda = dir.join("libcuda.so");
        std::fs::write(&cuda, b"\x7fELF cuda")?;
        assert!(edits.install_cuda(&cuda)?);
        let mounted: Vec<_> = edits.mounts().into_iter().skip(3).collect();
        assert_eq!(
            mounted,
            container_env::CUDA_LIBRARY_PATHS.map(|container| HostMount {
                host: dir.join("nvml/libcuda.so.1").display().to_string(),
                container,
            })
        );
        let env = edits.env();
        let document = env.iter().find(|(name, _)| *name == TOPOLOGY_ENV);
        assert_eq!(
            document.map(|(_, path)| path.as_str()),
            Some("/run/fakegpu/nvml/fakegpu-topology.yml")
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[tokio::test]
    async fn the_document_follows_the_node_s_and_outlasts_it() -> anyhow::Result<()> {
        let dir = temp_dir("nvml-doc")?;
        let edits = edits(&dir);
        let path = dir.join("nvml").join(DOCUMENT_BESIDE_LIBRARY);
        let document = |product: &str| NodeTopology {
            gpu_product: product.into(),
            ..Default::default()
        };
        let (sender, topology) = tokio::sync::watch::channel(None);
        let follower = tokio::spawn(edits.follow_document(topology));
        let read = || -> anyhow::Result<Option<String>> {
            Ok(match std::fs::read_to_string(&path) {
                Ok(text) => Some(NodeTopology::from_yaml(&text)?.gpu_product),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(error) => return Err(error.into()),
            })
        };
        let until = async |product: &str| -> anyhow::Result<()> {
            for _ in 0..200 {
                if read()?.as_deref() == Some(product) {
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            anyhow::bail!("the document never read {product}")
        };
        sender.send(Some(std::sync::Arc::new(document("NVIDIA L4"))))?;
        until("NVIDIA L4").await?;
        sender.send(Some(std::sync::Arc::new(document("NVIDIA H100"))))?;
        until("NVIDIA H100").await?;
        sender.send(None)?;
        drop(sender);
        follower.await?;
        assert_eq!(read()?.as_deref(), Some("NVIDIA H100"));
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
