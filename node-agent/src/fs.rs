//! Writes and removals of the files the agent hands to others (CDI specs, its checkpoint, the
//! driver root, sockets): whole or not at all, so a runtime, the kubelet or a container reading
//! one never sees half of it.

use std::{
    io::{self, Write},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

/// Writes `bytes` to `path` whole or not at all: a temporary file in the same directory,
/// synced, then renamed over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let staged = staged(path);
    let mut file = std::fs::File::create(&staged)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&staged, path)
}

/// Puts `bytes` at `path` with permission bits `mode` unless an identical file is there
/// already; true when it wrote. The copy is written beside the target and renamed over it, so
/// a reader never sees half a file, and a process that mapped the old one keeps it.
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<bool> {
    let same = std::fs::symlink_metadata(path).is_ok_and(|m| {
        m.is_file() && m.permissions().mode() & 0o777 == mode && m.len() == bytes.len() as u64
    }) && std::fs::read(path).is_ok_and(|there| there == bytes);
    if same {
        return Ok(false);
    }
    write_atomic(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(true)
}

/// A fresh name beside `path` (hidden, named after it and this process) to make an entry under
/// before renaming it over `path`; whatever an earlier try left there is removed.
pub fn staged(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staged = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    staged
}

/// Removes a file; one already gone counts as removed.
pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_files_and_leave_nothing_staged() -> io::Result<()> {
        let dir = std::env::temp_dir().join(format!("fakegpu-fs-{}", std::process::id()));
        let path = dir.join("sub/spec.json");
        write_atomic(&path, b"one")?;
        assert_eq!(std::fs::read(&path)?, b"one");
        assert!(replace_file(&path, b"two", 0o640)?);
        assert!(
            !replace_file(&path, b"two", 0o640)?,
            "an identical file is kept"
        );
        assert!(
            replace_file(&path, b"two", 0o644)?,
            "a mode change is a write"
        );
        let left: Vec<_> = std::fs::read_dir(dir.join("sub"))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        assert_eq!(left, ["spec.json"]);
        remove_if_present(&path)?;
        remove_if_present(&path)?;
        std::fs::remove_dir_all(&dir)
    }
}
