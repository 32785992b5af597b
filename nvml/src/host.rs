//! Pods' processes as this process's `/proc` shows them. On a node's host (or in a container
//! sharing its PID namespace) a caller that is none of the document's pods is shown each pod's
//! work under the PID the pod's main process has there, as the real driver shows a host-side
//! tool every process on the GPU; the pods are told apart by their cgroups, which the kubelet
//! names after their UIDs. In a pod's own PID namespace no other pod's process is visible, so
//! nothing is found.

use std::{collections::BTreeMap, path::Path};

/// Per pod UID, the PID of its main process: the lowest-numbered process that starts one of the
/// pod's containers (its parent is in another cgroup), the sandbox's `pause` left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PodProcesses(BTreeMap<String, u32>);

impl PodProcesses {
    /// What this process's `/proc` shows.
    pub fn scan() -> Self {
        Self::scan_in(Path::new("/proc"))
    }

    /// What the `/proc` at `proc` shows.
    pub fn scan_in(proc: &Path) -> Self {
        let Ok(entries) = std::fs::read_dir(proc) else {
            return Self::default();
        };
        let mut pids: Vec<u32> = entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        let cgroup = |pid: u32| std::fs::read_to_string(proc.join(format!("{pid}/cgroup"))).ok();
        let mut found = BTreeMap::new();
        for pid in pids {
            let Some(own) = cgroup(pid) else { continue };
            let Some(pod) = pod_of(&own) else { continue };
            if found.contains_key(&pod) || is_pause(proc, pid) {
                continue;
            }
            let parent = parent_of(proc, pid).and_then(cgroup);
            if parent.as_deref() != Some(own.as_str()) {
                found.insert(pod, pid);
            }
        }
        Self(found)
    }

    pub fn main_process(&self, pod: &str) -> Option<u32> {
        self.0.get(pod).copied()
    }
}

impl From<BTreeMap<String, u32>> for PodProcesses {
    fn from(main_processes: BTreeMap<String, u32>) -> Self {
        Self(main_processes)
    }
}

/// The pod UID a `/proc/<pid>/cgroup` names: the kubelet's cgroupfs paths
/// (`/kubepods/besteffort/pod<uid>/<container>`) and its systemd slices
/// (`/kubepods.slice/.../kubepods-besteffort-pod<uid, '_' for '-'>.slice/...`).
fn pod_of(cgroup: &str) -> Option<String> {
    cgroup.match_indices("pod").find_map(|(at, _)| {
        let candidate = cgroup.get(at + 3..at + 3 + 36)?;
        let uid = candidate.replace('_', "-");
        let dashes: Vec<usize> = uid.match_indices('-').map(|(i, _)| i).collect();
        let hex = uid.chars().all(|c| c == '-' || c.is_ascii_hexdigit());
        (hex && dashes == [8, 13, 18, 23]).then_some(uid)
    })
}

/// The parent's PID, from `/proc/<pid>/stat` (after the command name, which may hold spaces and
/// parentheses: its last `)` ends it).
fn parent_of(proc: &Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc.join(format!("{pid}/stat"))).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is a pod sandbox's `pause`, which holds the pod's namespaces and no GPU.
fn is_pause(proc: &Path, pid: u32) -> bool {
    std::fs::read(proc.join(format!("{pid}/cmdline"))).is_ok_and(|cmdline| {
        let first = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        first.rsplit(|b| *b == b'/').next() == Some(b"pause".as_slice())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

    #[test]
    fn pods_are_named_by_the_kubelet_s_cgroups() {
        let cgroupfs = format!("4:memory:/kubepods/besteffort/pod{UID}/4c8a3f\n0::/\n");
        assert_eq!(pod_of(&cgroupfs).as_deref(), Some(UID));
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-ab12.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(pod_of(&systemd).as_deref(), Some(UID));
        assert_eq!(pod_of("0::/kubepods.slice\n"), None);
        assert_eq!(
            pod_of("0::/user.slice/user-0.slice/session-1.scope\n"),
            None
        );
        assert_eq!(
            pod_of("0::/kubepods/podnot-a-uid-at-all-just-forty-characters\n"),
            None
        );
    }

    /// A fake `/proc` under the temporary directory: each process's cgroup, parent and
    /// command.
    fn proc_tree(processes: &[(u32, &str, u32, &str)]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("fakegpu-nvml-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (pid, cgroup, parent, command) in processes {
            let dir = root.join(pid.to_string());
            std::fs::create_dir_all(&dir).expect("process directory");
            std::fs::write(dir.join("cgroup"), cgroup).expect("cgroup");
            std::fs::write(dir.join("stat"), format!("{pid} (a (b) c) S {parent} 1 1"))
                .expect("stat");
            std::fs::write(dir.join("cmdline"), format!("{command}\0--flag\0")).expect("cmdline");
        }
        std::fs::create_dir_all(root.join("self")).expect("self");
        root
    }

    #[test]
    fn a_pod_s_main_process_starts_its_container_and_is_not_its_pause() {
        let pod = format!("0::/kubepods/besteffort/pod{UID}");
        let other = "0::/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555";
        let shim = "0::/system.slice/containerd.service";
        let tree = proc_tree(&[
            (1, "0::/init.scope", 0, "/sbin/init"),
            (100, shim, 1, "/usr/bin/containerd-shim-runc-v2"),
            (101, &format!("{pod}/sandbox"), 100, "/pause"),
            (150, &format!("{pod}/main"), 100, "python3"),
            (151, &format!("{pod}/main"), 150, "python3"),
            (160, &format!("{other}/main"), 100, "/bin/sleep"),
        ]);
        let found = PodProcesses::scan_in(&tree);
        assert_eq!(found.main_process(UID), Some(150));
        assert_eq!(
            found.main_process("11111111-2222-3333-4444-555555555555"),
            Some(160)
        );
        assert_eq!(
            found.main_process("99999999-2222-3333-4444-555555555555"),
            None
        );
        assert_eq!(
            PodProcesses::scan_in(&tree.join("missing")),
            PodProcesses::default()
        );
        std::fs::remove_dir_all(&tree).expect("remove the fake /proc");
    }
}
