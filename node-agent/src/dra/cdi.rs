//! CDI specs (Container Device Interface) for prepared claims: what the container runtime adds
//! to a container that was given a claim's devices. NVIDIA's DRA drivers write one transient
//! spec per claim under `/var/run/cdi`, devices `<claimUID>-<device>`: kind
//! `k8s.gpu.nvidia.com/claim` for GPUs (environment variables only here, there are no device
//! nodes to inject; plus one `common` device with what every GPU container gets), kind
//! `k8s.compute-domain.nvidia.com/claim` for IMEX channels (character devices).

use std::path::{Path, PathBuf};

use fakegpu_model::names::{compute_domain, container_env};
use serde_json::{Value, json};

use super::checkpoint::PreparedDevice;
use crate::container::HostMount;

/// CDI vendor/class of GPU claims, as NVIDIA's driver names it.
pub const GPU_KIND: &str = "k8s.gpu.nvidia.com/claim";
/// CDI vendor/class of IMEX channel claims (`k8s.` + the compute-domain driver's name).
pub const CHANNEL_KIND: &str = "k8s.compute-domain.nvidia.com/claim";
/// The CDI spec version written; 0.6.0 is understood by containerd 1.7+ and CRI-O 1.28+.
pub const CDI_VERSION: &str = "0.6.0";
/// The device every prepared GPU container also gets.
pub const COMMON_DEVICE: &str = "common";

/// File name prefix: the kind with `/` as `-`, as CDI's own tools name transient specs.
fn file_prefix(kind: &str) -> String {
    kind.replace('/', "-")
}

/// Where the `kind` spec of claim `uid` lives in `dir`.
pub fn claim_spec_path(dir: &Path, kind: &str, uid: &str) -> PathBuf {
    dir.join(format!("{}_{uid}.json", file_prefix(kind)))
}

/// Where the `kind` spec of device `name` shared by all claims lives in `dir`.
pub fn common_spec_path(dir: &Path, kind: &str, name: &str) -> PathBuf {
    dir.join(format!("{}_{name}.json", file_prefix(kind)))
}

/// The CDI device name of a claim's device.
pub fn claim_device_name(uid: &str, device: &str) -> String {
    format!("{uid}-{device}")
}

/// A fully qualified CDI device ID (`k8s.gpu.nvidia.com/claim=<name>`), as the kubelet
/// passes it to the runtime.
pub fn qualified(kind: &str, name: &str) -> String {
    format!("{kind}={name}")
}

/// `GPU_DEVICE_<device with - as _>`: the variable naming one device, as the reference sets it.
fn device_variable(device: &str) -> String {
    format!("GPU_DEVICE_{}", device.replace('-', "_"))
}

/// A GPU or MIG device's own variables: its name and UUID, and how the claim shares it.
fn gpu_device_env(device: &PreparedDevice) -> Vec<String> {
    let variable = device_variable(&device.device);
    let mut env = vec![
        format!("{variable}={}", device.device),
        format!("{variable}_UUID={}", device.uuid),
    ];
    env.extend(device.sharing.iter().flat_map(|s| s.env(&variable)));
    env
}

/// The spec of GPU claim `uid`. Every device names itself in the environment; the claim's GPUs
/// together are `NVIDIA_VISIBLE_DEVICES` (spec-wide edits apply whenever one of the spec's
/// devices is injected).
pub fn gpu_claim_spec(uid: &str, devices: &[PreparedDevice]) -> Value {
    let visible: Vec<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": GPU_KIND,
        "containerEdits": {"env": [
            format!("{}={}", container_env::VISIBLE_DEVICES, visible.join(",")),
        ]},
        "devices": devices.iter().map(|d| json!({
            "name": claim_device_name(uid, &d.device),
            "containerEdits": {"env": gpu_device_env(d)},
        })).collect::<Vec<_>>(),
    })
}

/// The common spec: `env` (what nvidia-smi and the NVML library read) and `mounts` (the fake
/// nvidia-smi, the library and its document, as far as the host has them).
pub fn common_spec(env: &[(&str, String)], mounts: &[HostMount]) -> Value {
    let mounts: Vec<Value> = mounts
        .iter()
        .map(|mount| {
            json!({"hostPath": mount.host, "containerPath": mount.container,
                "options": ["ro", "nosuid", "nodev", "bind"]})
        })
        .collect();
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": GPU_KIND,
        "devices": [{
            "name": COMMON_DEVICE,
            "containerEdits": {
                "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
                "mounts": mounts,
            },
        }],
    })
}

/// The spec of channel claim `uid`: each device's IMEX channels as character devices under
/// `/dev/nvidia-caps-imex-channels` (simulated by the host's `/dev/null`, 1:3), and the claim
/// named in the environment, as the reference's plugin does.
pub fn channel_claim_spec(uid: &str, devices: &[PreparedDevice]) -> Value {
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": CHANNEL_KIND,
        "devices": devices.iter().map(|d| json!({
            "name": claim_device_name(uid, &d.device),
            "containerEdits": {
                "env": [format!(
                    "COMPUTE_DOMAIN_DEVICE_{}_RESOURCE_CLAIM={uid}",
                    d.device.replace('-', "_")
                )],
                "deviceNodes": d.channels().map(|id| json!({
                    "path": format!("{}/channel{id}", compute_domain::IMEX_CHANNEL_DIR),
                    "hostPath": "/dev/null",
                    "type": "c",
                    "major": 1,
                    "minor": 3,
                    "permissions": "rw",
                })).collect::<Vec<_>>(),
            },
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::sharing::Sharing;

    #[test]
    fn claim_spec_names_devices_and_visible_gpus() {
        let devices = [0, 3].map(|i| PreparedDevice {
            request: "gpus".into(),
            pool: "n".into(),
            device: format!("gpu-{i}"),
            uuid: format!("GPU-{i}"),
            channel: None,
            sharing: (i == 3).then_some(Sharing::SpacePartitioning { partition_count: 2 }),
        });
        let spec = gpu_claim_spec("u1", &devices);
        assert_eq!(spec["kind"], GPU_KIND);
        assert_eq!(
            spec["containerEdits"]["env"][0],
            "NVIDIA_VISIBLE_DEVICES=GPU-0,GPU-3"
        );
        assert_eq!(spec["devices"][1]["name"], "u1-gpu-3");
        assert_eq!(
            spec["devices"][1]["containerEdits"]["env"],
            json!([
                "GPU_DEVICE_gpu_3=gpu-3",
                "GPU_DEVICE_gpu_3_UUID=GPU-3",
                "GPU_DEVICE_gpu_3_SHARING_STRATEGY=SpacePartitioning",
                "GPU_DEVICE_gpu_3_PARTITION_COUNT=2"
            ])
        );
        assert_eq!(
            spec["devices"][0]["containerEdits"]["env"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
        assert_eq!(
            qualified(GPU_KIND, "u1-gpu-3"),
            "k8s.gpu.nvidia.com/claim=u1-gpu-3"
        );
        assert_eq!(
            claim_spec_path(Path::new("/var/run/cdi"), GPU_KIND, "u1"),
            Path::new("/var/run/cdi/k8s.gpu.nvidia.com-claim_u1.json")
        );
    }

    #[test]
    fn common_spec_mounts_what_the_host_has() {
        let env = [
            (container_env::NODE_NAME, "n".to_owned()),
            (container_env::EXPORTER_URL, "http://e:9400".to_owned()),
        ];
        assert_eq!(
            common_spec(&env, &[])["devices"][0]["containerEdits"]["mounts"],
            json!([])
        );
        let mounts = [
            HostMount {
                host: "/opt/nvidia-smi".into(),
                container: container_env::NVIDIA_SMI_PATH,
            },
            HostMount {
                host: "/opt/nvml".into(),
                container: container_env::NVML_DIR_PATH,
            },
        ];
        let with = common_spec(&env, &mounts);
        assert_eq!(
            with["devices"][0]["containerEdits"]["mounts"],
            json!([
                {"hostPath": "/opt/nvidia-smi", "containerPath": "/bin/nvidia-smi",
                    "options": ["ro", "nosuid", "nodev", "bind"]},
                {"hostPath": "/opt/nvml", "containerPath": "/run/fakegpu/nvml",
                    "options": ["ro", "nosuid", "nodev", "bind"]},
            ])
        );
        assert_eq!(
            with["devices"][0]["containerEdits"]["env"],
            json!(["NODE_NAME=n", "FAKEGPU_EXPORTER_URL=http://e:9400"])
        );
    }
}
