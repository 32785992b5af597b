//! Where a process on a GPU node finds the node's topology document: fakegpu's NVML library,
//! its CUDA driver stub and nvidia-smi ask [`locate`].
//!
//! The document is the file [`TOPOLOGY_ENV`] names (fakegpu's own GPU containers), else
//! [`DOCUMENT_BESIDE_LIBRARY`] beside the library asking (a driver root, wherever it is
//! mounted), else what the driver-root agent serves on its socket: for containers that NVIDIA's
//! container toolkit gives GPUs on nodes of `backend: mock` pools.
//!
//! The toolkit mounts a driver root's library into the container but no file beside it, so the
//! library cannot find the document the way it does in fakegpu's own containers. It does mount
//! the driver's IPC sockets it finds in the root; the driver-root agent serves the document on
//! one of them ([`DOCUMENT_SOCKET`]): a client sends [`DOCUMENT_REQUEST`], the agent writes the
//! document as it is now and closes. A socket, not a file, because a file mounted into a
//! container is the one it was at the container's start, and the document changes as pods
//! come and go.
//!
//! Such a container was given the device nodes of its GPUs and nothing tells which else
//! (`NVIDIA_VISIBLE_DEVICES` is `void` under CDI): [`given_gpus`] reads them as NVML does.
//!
//! [`DOCUMENT_SOCKET`]: crate::names::nvml::DOCUMENT_SOCKET
//! [`DOCUMENT_REQUEST`]: crate::names::nvml::DOCUMENT_REQUEST

use std::{
    io::{Read, Write},
    os::unix::{fs::FileTypeExt, net::UnixStream},
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    names::nvml::{
        CONTAINER_DEVICE_DIR, DEVICE_DIR_ENV, DOCUMENT_BESIDE_LIBRARY, DOCUMENT_REQUEST,
        DOCUMENT_SOCKET_ENV, DOCUMENT_SOCKET_PATHS, TOPOLOGY_ENV,
    },
    topology::NodeTopology,
};

/// Where the document is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// A file: fakegpu's containers, a driver root, the node's host.
    File(PathBuf),
    /// The driver-root agent's socket: a container given GPUs by NVIDIA's toolkit.
    Socket(PathBuf),
}

/// Where the library mapped at `code` (an address inside it) reads the document from; `None`
/// when the library's own file cannot be told.
pub fn locate(code: usize) -> Option<Located> {
    if let Some(path) = std::env::var_os(TOPOLOGY_ENV) {
        return Some(Located::File(path.into()));
    }
    let beside = beside_library(code)?;
    Some(match find() {
        Some(socket) if !beside.exists() => Located::Socket(socket),
        // Without a socket either, the document beside is what is missing.
        _ => Located::File(beside),
    })
}

/// The text of the document at `located` as it is now.
pub fn read(located: &Located) -> std::io::Result<String> {
    match located {
        Located::File(path) => std::fs::read_to_string(path),
        Located::Socket(socket) => fetch(socket),
    }
}

/// [`DOCUMENT_BESIDE_LIBRARY`] beside the file mapped at `code` (a library, wherever it was
/// loaded from: a driver root may be mounted anywhere in a container).
pub fn beside_library(code: usize) -> Option<PathBuf> {
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

/// How long a client waits on each read or write: the agent answers from memory at once; a
/// server that is not fakegpu's (a real nvidia-persistenced) never answers.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A document larger than this is refused (a 64-GPU node's is tens of KiB).
const MAX_DOCUMENT_BYTES: u64 = 16 * 1024 * 1024;

/// The document socket this process can reach: [`DOCUMENT_SOCKET_ENV`]'s, else the first of
/// [`DOCUMENT_SOCKET_PATHS`] that is a socket.
pub fn find() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(DOCUMENT_SOCKET_ENV).filter(|p| !p.is_empty()) {
        return Some(path.into());
    }
    DOCUMENT_SOCKET_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|path| std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket()))
}

/// The document's text as the agent serving `socket` has it now.
pub fn fetch(socket: &Path) -> std::io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    stream.write_all(DOCUMENT_REQUEST)?;
    let mut text = String::new();
    stream
        .take(MAX_DOCUMENT_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(std::io::Error::other(format!(
            "{} sent more than {MAX_DOCUMENT_BYTES} bytes",
            socket.display()
        )));
    }
    if text.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{} closed without a document", socket.display()),
        ));
    }
    Ok(text)
}

/// The directory holding this process's device nodes: [`DEVICE_DIR_ENV`]'s, else
/// [`CONTAINER_DEVICE_DIR`].
pub fn device_dir() -> PathBuf {
    std::env::var_os(DEVICE_DIR_ENV)
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(CONTAINER_DEVICE_DIR), PathBuf::from)
}

/// The GPUs of `document` whose device node (`nvidia<minor>`, the minor number being the GPU's
/// index) is in `dev`, as an `NVIDIA_VISIBLE_DEVICES` value: their UUIDs, comma-separated, or
/// `void` for none. A MIG-partitioned GPU's node gives the container the whole GPU.
pub fn given_gpus(document: &NodeTopology, dev: &Path) -> String {
    let given: Vec<&str> = document
        .gpus
        .iter()
        .filter(|gpu| std::fs::symlink_metadata(dev.join(format!("nvidia{}", gpu.index))).is_ok())
        .map(|gpu| gpu.id.as_str())
        .collect();
    if given.is_empty() {
        "void".to_owned()
    } else {
        given.join(",")
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;
    use crate::topology::GpuTopology;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fakegpu-socket-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// Serves `answer` to one client that sent the request line.
    fn serve_once(
        listener: UnixListener,
        answer: &'static str,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut request = vec![0; DOCUMENT_REQUEST.len()];
            stream.read_exact(&mut request).expect("request");
            stream.write_all(answer.as_bytes()).expect("answer");
            request
        })
    }

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
        // Linked into the test binary, this code lies in the test executable.
        let code = the_mapping_holding_an_address_names_its_file as *const () as usize;
        let exe = std::env::current_exe().ok();
        let dir = exe.as_deref().and_then(Path::parent);
        assert_eq!(
            beside_library(code).as_deref(),
            dir.map(|d| d.join(DOCUMENT_BESIDE_LIBRARY)).as_deref()
        );
    }

    #[test]
    fn a_client_sends_the_request_and_reads_the_document_to_the_end() {
        let dir = temp_dir("fetch");
        let socket = dir.join("socket");
        let listener = UnixListener::bind(&socket).expect("bind");
        let server = serve_once(listener, "driverVersion: 550.163.01\n");
        let text = fetch(&socket).expect("fetch");
        assert_eq!(text, "driverVersion: 550.163.01\n");
        assert_eq!(server.join().expect("server"), DOCUMENT_REQUEST);

        let empty = UnixListener::bind(dir.join("empty")).expect("bind");
        let server = serve_once(empty, "");
        let error = fetch(&dir.join("empty")).expect_err("an empty answer is no document");
        assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);
        server.join().expect("server");

        assert!(fetch(&dir.join("absent")).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_given_gpus_are_those_whose_device_node_the_container_has() {
        let dev = temp_dir("dev");
        let gpu = |index: u32| GpuTopology {
            id: format!("GPU-{index}"),
            index,
            ..GpuTopology::default()
        };
        let document = NodeTopology {
            gpus: vec![gpu(0), gpu(1), gpu(2)],
            ..NodeTopology::default()
        };
        assert_eq!(given_gpus(&document, &dev), "void");
        for name in ["nvidia2", "nvidiactl", "nvidia0"] {
            std::fs::write(dev.join(name), b"").expect("node");
        }
        assert_eq!(given_gpus(&document, &dev), "GPU-0,GPU-2");
        let _ = std::fs::remove_dir_all(dev);
    }
}
