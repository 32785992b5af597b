//! The driver root of a node in a `backend: mock` pool: the files NVIDIA's device plugin, GPU
//! feature discovery and DRA driver look for under their driver root, answering from the
//! node's topology document. Laid out when the document arrives, kept in step with it, and
//! removed when the node leaves its pool.
//!
//! ```text
//! <root>/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<driver version>   fakegpu's NVML library
//! <root>/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 -> the above      the name components load
//! <root>/usr/lib/x86_64-linux-gnu/fakegpu-topology.yml                what the library answers from
//! <root>/usr/lib/x86_64-linux-gnu/libcuda.so.<driver version>        fakegpu's CUDA driver library
//! <root>/usr/lib/x86_64-linux-gnu/libcuda.so.1 -> the above, libcuda.so -> libcuda.so.1
//! <root>/usr/bin/nvidia-smi                                           fakegpu's nvidia-smi
//! <root>/sys/bus/pci/devices/<bus id>/{vendor,device,class,...}       the GPUs' PCI functions
//! <root>/dev/{nvidiactl,nvidia-uvm,...,nvidia<minor>}                 device nodes, as /dev/null
//! <root>/run/nvidia-persistenced/socket                               the document, served live
//! ```

use std::{
    collections::BTreeMap,
    os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
};

use fakegpu_model::{
    names::{
        label::DEPLOY_DRIVER_ROOT,
        nvml::{
            CONTROL_DEVICES, CUDA_SONAME, DEVICE_NODES, DOCUMENT_BESIDE_LIBRARY, DOCUMENT_SOCKET,
            LIBRARY_DIR, LIBRARY_SONAME, NVIDIA_SMI, PCI_DEVICES,
        },
    },
    topology::{NodeTopology, TopologyError},
};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use tracing::{info, warn};

use crate::{
    document_socket::Served,
    fs::{replace_file, staged},
    metrics::{self, Metrics},
    topology_source::Topology,
};

/// One path of the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    File {
        bytes: Arc<[u8]>,
        executable: bool,
    },
    Link(PathBuf),
    /// A character device that is `/dev/null` (1:3): NVIDIA's components find a GPU's device
    /// node by its path and hand it to containers.
    NullDevice,
    /// The socket the agent serves the document on ([`Served`]): bound by the agent, not
    /// written; the layout only keeps it.
    Socket,
}

/// `/dev/null`'s major and minor numbers.
const NULL_DEVICE: (u32, u32) = (1, 3);

/// The binaries the agent's image ships, read once at start.
#[derive(Clone, Debug)]
pub struct Shipped {
    pub library: Arc<[u8]>,
    pub cuda: Arc<[u8]>,
    pub nvidia_smi: Arc<[u8]>,
}

impl Shipped {
    pub fn read(library: &Path, cuda: &Path, nvidia_smi: &Path) -> std::io::Result<Self> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map(Arc::from)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        Ok(Self {
            library: read(library)?,
            cuda: read(cuda)?,
            nvidia_smi: read(nvidia_smi)?,
        })
    }
}

/// PCI class of a 3D controller, what data-centre GPUs report (GPU feature discovery labels
/// `nvidia.com/gpu.mode=compute` from it; a VGA controller would read `graphics`).
const CLASS_3D_CONTROLLER: u32 = 0x03_02_00;
const NVIDIA_VENDOR: u16 = 0x10de;
/// The device half of the library's `pciDeviceId`: fakegpu's catalog has no PCI device IDs.
const DEVICE_ID: u16 = 0;

/// Every path of the root for `document`, relative to the root.
pub fn desired(
    document: &NodeTopology,
    shipped: &Shipped,
) -> Result<BTreeMap<PathBuf, Entry>, TopologyError> {
    let file = |bytes: Arc<[u8]>, executable| Entry::File { bytes, executable };
    let text = |s: String| file(Arc::from(s.into_bytes()), false);
    let lib = Path::new(LIBRARY_DIR);
    let versioned = format!("libnvidia-ml.so.{}", document.driver_version);
    let cuda = format!("libcuda.so.{}", document.driver_version);
    let mut entries = BTreeMap::from([
        (lib.join(&versioned), file(shipped.library.clone(), false)),
        (lib.join(LIBRARY_SONAME), Entry::Link(versioned.into())),
        (lib.join(&cuda), file(shipped.cuda.clone(), false)),
        (lib.join(CUDA_SONAME), Entry::Link(cuda.into())),
        (lib.join("libcuda.so"), Entry::Link(CUDA_SONAME.into())),
        (lib.join(DOCUMENT_BESIDE_LIBRARY), text(document.to_yaml()?)),
        (
            PathBuf::from(NVIDIA_SMI),
            file(shipped.nvidia_smi.clone(), true),
        ),
        (PathBuf::from(DOCUMENT_SOCKET), Entry::Socket),
    ]);
    let devices = Path::new(DEVICE_NODES);
    for name in CONTROL_DEVICES {
        entries.insert(devices.join(name), Entry::NullDevice);
    }
    for gpu in &document.gpus {
        entries.insert(
            devices.join(format!("nvidia{}", gpu.index)),
            Entry::NullDevice,
        );
        let function = Path::new(PCI_DEVICES).join(gpu.pci_bus_id.to_ascii_lowercase());
        let numa = gpu.numa_node.map_or(-1, i64::from);
        for (name, entry) in [
            ("vendor", text(format!("{NVIDIA_VENDOR:#06x}\n"))),
            ("device", text(format!("{DEVICE_ID:#06x}\n"))),
            ("class", text(format!("{CLASS_3D_CONTROLLER:#08x}\n"))),
            ("numa_node", text(format!("{numa}\n"))),
            ("config", file(config_space(), false)),
            ("resource", text(no_resources())),
        ] {
            entries.insert(function.join(name), entry);
        }
    }
    Ok(entries)
}

/// The 256-byte configuration space sysfs shows an unprivileged reader: IDs and class, and no
/// capability list (so no vendor-specific capability: not a vGPU).
fn config_space() -> Arc<[u8]> {
    let mut config = [0u8; 256];
    config[0..2].copy_from_slice(&NVIDIA_VENDOR.to_le_bytes());
    config[2..4].copy_from_slice(&DEVICE_ID.to_le_bytes());
    config[9..12].copy_from_slice(&CLASS_3D_CONTROLLER.to_le_bytes()[..3]);
    Arc::from(config)
}

/// sysfs' `resource` file: one `start end flags` line per BAR, all unassigned.
fn no_resources() -> String {
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n".repeat(13)
}

/// Makes `root` hold exactly `entries`: changed files are written beside their path and renamed
/// over it (a process that loaded the old library keeps its mapping), paths no longer wanted
/// are removed. Returns how many paths changed.
pub fn apply(root: &Path, entries: &BTreeMap<PathBuf, Entry>) -> std::io::Result<usize> {
    let mut changed = 0;
    let mut refused = 0;
    for (relative, entry) in entries {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match write(&path, entry) {
            Ok(true) => changed += 1,
            Ok(false) => {}
            // Without CAP_MKNOD (an older bundle's DaemonSet, a node that forbids it) the root
            // has no device nodes: NVIDIA's components still run, their containers get none.
            Err(error)
                if *entry == Entry::NullDevice
                    && error.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                refused += 1
            }
            Err(error) => return Err(error),
        }
    }
    if refused > 0 {
        warn!(root = %root.display(), refused, "cannot make device nodes (the agent lacks CAP_MKNOD); the driver root goes without them");
    }
    changed += prune(root, Path::new(""), entries)?;
    Ok(changed)
}

/// Writes one entry unless it is there already; true when it wrote.
fn write(path: &Path, entry: &Entry) -> std::io::Result<bool> {
    match entry {
        Entry::File { bytes, executable } => {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir_all(path)?;
            }
            return replace_file(path, bytes, if *executable { 0o755 } else { 0o644 });
        }
        Entry::Link(target) => {
            if std::fs::read_link(path).is_ok_and(|there| there == *target) {
                return Ok(false);
            }
            let staged = staged(path);
            std::os::unix::fs::symlink(target, &staged)?;
            std::fs::rename(&staged, path)?;
        }
        Entry::Socket => return Ok(false),
        Entry::NullDevice => {
            let (major, minor) = NULL_DEVICE;
            let device = rustix::fs::makedev(major, minor);
            let there = std::fs::symlink_metadata(path);
            if there.is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == device) {
                return Ok(false);
            }
            let staged = staged(path);
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &staged,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o666),
                device,
            )?;
            // As the driver makes them: anyone may open them (mknod applied the umask).
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o666))?;
            std::fs::rename(&staged, path)?;
        }
    }
    Ok(true)
}

/// Removes what lies under `root/dir` and is neither an entry nor above one.
fn prune(root: &Path, dir: &Path, entries: &BTreeMap<PathBuf, Entry>) -> std::io::Result<usize> {
    let mut removed = 0;
    for item in std::fs::read_dir(root.join(dir))? {
        let item = item?;
        let relative = dir.join(item.file_name());
        if entries.contains_key(&relative) {
            continue;
        }
        let kind = item.file_type()?;
        if kind.is_dir() && entries.keys().any(|k| k.starts_with(&relative)) {
            removed += prune(root, &relative, entries)?;
        } else if kind.is_dir() {
            std::fs::remove_dir_all(item.path())?;
            removed += 1;
        } else {
            std::fs::remove_file(item.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Keeps `root` in step with the node's document until the sender goes; a node whose document
/// disappears (it left its pool) loses its root.
pub async fn follow(
    root: PathBuf,
    shipped: Shipped,
    node: String,
    mut topology: Topology,
    metrics: Metrics,
) {
    let mut laid_out = false;
    let mut served: Option<Served> = None;
    let socket = root.join(DOCUMENT_SOCKET);
    loop {
        let document = topology.borrow_and_update().clone();
        match document {
            Some(document) => match desired(&document, &shipped)
                .map_err(std::io::Error::other)
                .and_then(|entries| apply(&root, &entries))
            {
                Ok(changed) => {
                    laid_out = true;
                    if !served.as_ref().is_some_and(Served::is_current) {
                        served = None;
                        match Served::bind(&socket, topology.clone()) {
                            Ok(bound) => served = Some(bound),
                            Err(error) => {
                                warn!(node, socket = %socket.display(), %error, "cannot serve the document to containers given GPUs by NVIDIA's toolkit")
                            }
                        }
                    }
                    metrics.registered(metrics::DRIVER_ROOT, true);
                    if changed > 0 {
                        info!(node, root = %root.display(), changed, gpus = document.gpus.len(), "driver root in step with the topology document");
                    }
                }
                Err(error) => {
                    warn!(node, root = %root.display(), %error, "cannot lay out the driver root")
                }
            },
            None if laid_out => {
                served = None;
                remove(&root, &node);
                laid_out = false;
                metrics.registered(metrics::DRIVER_ROOT, false);
            }
            None => {}
        }
        if topology.changed().await.is_err() {
            return;
        }
    }
}

/// At shutdown: whether the node still carries the driver-root deploy label, i.e. the agent
/// stops for a restart or an upgrade rather than because the node left its pool (then the root
/// stays, and NVIDIA's components keep working meanwhile). When the API server cannot say, the
/// root stays too.
pub async fn still_wanted(client: kube::Client, node: &str) -> bool {
    let nodes: kube::Api<Node> = kube::Api::all(client);
    match nodes.get_opt(node).await {
        Ok(Some(found)) => found
            .labels()
            .get(DEPLOY_DRIVER_ROOT)
            .is_some_and(|v| v == "true"),
        Ok(None) => false,
        Err(error) => {
            warn!(node, %error, "cannot read the node; keeping the driver root");
            true
        }
    }
}

/// Empties the root (the node no longer serves NVML). The directory itself stays: it is the
/// agent's mount of the host path.
pub fn remove(root: &Path, node: &str) {
    match prune(root, Path::new(""), &BTreeMap::new()) {
        Ok(removed) => info!(node, root = %root.display(), removed, "driver root emptied"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => warn!(node, root = %root.display(), %error, "cannot empty the driver root"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::PermissionsExt;

    use fakegpu_model::topology::GpuTopology;
    use tokio::sync::watch;

    use super::*;

    /// A document of `gpus` GPUs (two per NUMA node) of driver 550.163.01.
    pub(crate) fn document(gpus: u32) -> NodeTopology {
        NodeTopology {
            driver_version: "550.163.01".into(),
            gpus: (0..gpus)
                .map(|i| GpuTopology {
                    id: format!("GPU-{i}"),
                    index: i,
                    numa_node: Some(i / 2),
                    pci_bus_id: format!("0000:{:02X}:00.0", 0x1a + i),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn shipped() -> Shipped {
        Shipped {
            library: Arc::from(&b"\x7fELF library"[..]),
            cuda: Arc::from(&b"\x7fELF cuda"[..]),
            nvidia_smi: Arc::from(&b"\x7fELF smi"[..]),
        }
    }

    fn temp_root(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fakegpu-root-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_library_is_found_by_its_soname_with_the_document_beside_it() -> anyhow::Result<()> {
        let root = temp_root("layout");
        let entries = desired(&document(2), &shipped())?;
        // Device nodes need CAP_MKNOD: without it (not root) the rest is laid out all the same.
        let may_mknod = rustix::process::geteuid().is_root();
        let devices = 4 + 2;
        // The document socket is the agent's to bind (see `follow`), not written.
        let expected = entries.len() - 1 - if may_mknod { 0 } else { devices };
        assert_eq!(apply(&root, &entries)?, expected);
        for name in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"] {
            let node = std::fs::symlink_metadata(root.join(DEVICE_NODES).join(name));
            if may_mknod {
                let node = node?;
                assert!(node.file_type().is_char_device(), "{name}");
                assert_eq!(node.rdev(), rustix::fs::makedev(1, 3), "{name}");
                assert_eq!(node.permissions().mode() & 0o777, 0o666, "{name}");
            } else {
                assert!(node.is_err(), "{name}");
            }
        }
        let lib = root.join(LIBRARY_DIR);
        assert_eq!(
            std::fs::canonicalize(lib.join("libnvidia-ml.so.1"))?,
            std::fs::canonicalize(lib.join("libnvidia-ml.so.550.163.01"))?
        );
        // The CUDA driver library by the names a driver installs it under.
        for name in ["libcuda.so", "libcuda.so.1"] {
            assert_eq!(
                std::fs::canonicalize(lib.join(name))?,
                std::fs::canonicalize(lib.join("libcuda.so.550.163.01"))?,
                "{name}"
            );
        }
        assert_eq!(std::fs::read(lib.join("libcuda.so.1"))?, b"\x7fELF cuda");
        let answered = std::fs::read_to_string(lib.join(DOCUMENT_BESIDE_LIBRARY))?;
        assert_eq!(NodeTopology::from_yaml(&answered)?.gpus.len(), 2);
        let smi = std::fs::metadata(root.join(NVIDIA_SMI))?;
        assert_eq!(smi.permissions().mode() & 0o777, 0o755);
        let function = root.join(PCI_DEVICES).join("0000:1b:00.0");
        assert_eq!(
            std::fs::read_to_string(function.join("vendor"))?,
            "0x10de\n"
        );
        assert_eq!(
            std::fs::read_to_string(function.join("class"))?,
            "0x030200\n"
        );
        assert_eq!(std::fs::read_to_string(function.join("numa_node"))?, "0\n");
        let config = std::fs::read(function.join("config"))?;
        assert_eq!(
            (config.len(), &config[..2], config[11]),
            (256, &[0xde, 0x10][..], 0x03)
        );
        // A second pass over the same document writes nothing.
        assert_eq!(apply(&root, &entries)?, 0);
        std::fs::remove_dir_all(&root)?;
        Ok(())
    }

    #[test]
    fn a_changed_document_drops_what_it_no_longer_has() -> anyhow::Result<()> {
        let root = temp_root("shrink");
        apply(&root, &desired(&document(4), &shipped())?)?;
        let mut upgraded = document(1);
        upgraded.driver_version = "535.261.03".into();
        let changed = apply(&root, &desired(&upgraded, &shipped())?)?;
        assert!(changed > 0);
        let functions: Vec<_> = std::fs::read_dir(root.join(PCI_DEVICES))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        assert_eq!(functions, ["0000:1a:00.0"]);
        assert!(!root.join(DEVICE_NODES).join("nvidia3").exists());
        let lib = root.join(LIBRARY_DIR);
        assert!(!lib.join("libnvidia-ml.so.550.163.01").exists());
        assert_eq!(
            std::fs::read_link(lib.join("libnvidia-ml.so.1"))?,
            Path::new("libnvidia-ml.so.535.261.03")
        );
        std::fs::remove_dir_all(&root)?;
        Ok(())
    }

    #[tokio::test]
    async fn the_root_follows_the_document_and_goes_with_it() -> anyhow::Result<()> {
        let root = temp_root("follow");
        let (sender, receiver) = watch::channel(None);
        let metrics = Metrics::new(vec![metrics::DRIVER_ROOT])?;
        let task = tokio::spawn(follow(
            root.clone(),
            shipped(),
            "n".into(),
            receiver,
            metrics.clone(),
        ));
        let soname = root.join(LIBRARY_DIR).join(LIBRARY_SONAME);
        let socket = root.join(DOCUMENT_SOCKET);
        sender.send(Some(Arc::new(document(2))))?;
        wait_for(|| soname.exists()).await?;
        // The containers NVIDIA's toolkit gives GPUs reach the document through the socket,
        // which the layout's later passes keep.
        wait_for(|| std::fs::metadata(&socket).is_ok_and(|m| m.file_type().is_socket())).await?;
        let fetched = |socket: PathBuf| {
            tokio::task::spawn_blocking(move || fakegpu_model::document_source::fetch(&socket))
        };
        let text = fetched(socket.clone()).await??;
        assert_eq!(NodeTopology::from_yaml(&text)?.gpus.len(), 2);
        // The socket answers with the document of the moment.
        sender.send(Some(Arc::new(document(3))))?;
        let text = fetched(socket.clone()).await??;
        assert_eq!(NodeTopology::from_yaml(&text)?.gpus.len(), 3);
        sender.send(None)?;
        wait_for(|| std::fs::read_dir(&root).is_ok_and(|mut d| d.next().is_none())).await?;
        drop(sender);
        task.await?;
        std::fs::remove_dir_all(&root)?;
        Ok(())
    }

    async fn wait_for(done: impl Fn() -> bool) -> anyhow::Result<()> {
        for _ in 0..200 {
            if done() {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        anyhow::bail!("timed out")
    }
}
