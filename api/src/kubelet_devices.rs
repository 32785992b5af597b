//! The devices the kubelet of a real node gave each container, as the node agent reads them
//! from the kubelet's PodResources API and reports them (ConfigMap
//! [`fakegpu_model::names::kubelet_devices`]).
//!
//! On a real node the scheduler only counts `nvidia.com/gpu`; the kubelet picks which GPUs a
//! container gets (from the device plugin's preference) and the container sees those. The
//! operator records pods on the GPUs this report names, so that metrics, nvidia-smi's
//! processes and the pool's status name the same GPUs as the container's environment.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

use fakegpu_model::names::kubelet_devices::{CONFIGMAP_PREFIX, DATA_KEY};

/// Every container of a node holding fakegpu devices, sorted (an unchanged report is an
/// unchanged ConfigMap).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletDevices {
    pub containers: Vec<ContainerDevices>,
}

/// The devices of one extended resource the kubelet gave one container.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContainerDevices {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// `nvidia.com/gpu` or `nvidia.com/mig-<profile>`.
    pub resource: String,
    /// Device IDs as the device plugin advertised them: GPU and MIG instance UUIDs.
    pub devices: Vec<String>,
}

/// Why a report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no {DATA_KEY} key")]
    MissingKey,
    #[error("{DATA_KEY} is not a device report: {0}")]
    Malformed(#[from] serde_json::Error),
}

impl KubeletDevices {
    /// A report of `containers`, in canonical order.
    pub fn new(mut containers: Vec<ContainerDevices>) -> Self {
        for container in &mut containers {
            container.devices.sort();
            container.devices.dedup();
        }
        containers.sort();
        Self { containers }
    }

    /// The name of `node`'s report.
    pub fn configmap_name(node: &str) -> String {
        format!("{CONFIGMAP_PREFIX}{node}")
    }

    pub fn from_configmap(configmap: &ConfigMap) -> Result<Self, ReportError> {
        let text = configmap
            .data
            .as_ref()
            .and_then(|data| data.get(DATA_KEY))
            .ok_or(ReportError::MissingKey)?;
        Ok(serde_json::from_str(text)?)
    }

    pub fn to_json(&self) -> String {
        // Plain structs of strings: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The devices each pod (namespace, name) was given, all containers and resources together.
    pub fn by_pod(&self) -> BTreeMap<(&str, &str), BTreeSet<&str>> {
        let mut pods: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
        for container in &self.containers {
            pods.entry((&container.namespace, &container.pod))
                .or_default()
                .extend(container.devices.iter().map(String::as_str));
        }
        pods
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(namespace: &str, pod: &str, container: &str, devices: &[&str]) -> ContainerDevices {
        ContainerDevices {
            namespace: namespace.into(),
            pod: pod.into(),
            container: container.into(),
            resource: "nvidia.com/gpu".into(),
            devices: devices.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    #[test]
    fn a_report_is_canonical_and_round_trips_through_its_configmap() {
        let report = KubeletDevices::new(vec![
            held("b", "p", "c", &["GPU-2", "GPU-1", "GPU-2"]),
            held("a", "p", "c", &["GPU-0"]),
        ]);
        assert_eq!(report.containers[0].namespace, "a");
        assert_eq!(report.containers[1].devices, ["GPU-1", "GPU-2"]);
        let configmap = ConfigMap {
            data: Some([(DATA_KEY.to_owned(), report.to_json())].into()),
            ..Default::default()
        };
        assert_eq!(KubeletDevices::from_configmap(&configmap).unwrap(), report);
        assert_eq!(
            KubeletDevices::configmap_name("n1"),
            "kubelet-devices-n1".to_owned()
        );
    }

    #[test]
    fn devices_are_gathered_by_pod() {
        let report = KubeletDevices::new(vec![
            held("a", "p", "one", &["GPU-0"]),
            held("a", "p", "two", &["GPU-3"]),
            held("a", "q", "one", &["GPU-1"]),
        ]);
        let pods = report.by_pod();
        assert_eq!(pods[&("a", "p")], BTreeSet::from(["GPU-0", "GPU-3"]));
        assert_eq!(pods[&("a", "q")], BTreeSet::from(["GPU-1"]));
    }

    #[test]
    fn garbage_is_an_error_not_an_empty_report() {
        let mut configmap = ConfigMap::default();
        assert!(matches!(
            KubeletDevices::from_configmap(&configmap),
            Err(ReportError::MissingKey)
        ));
        configmap.data = Some([(DATA_KEY.to_owned(), "[1,".to_owned())].into());
        assert!(matches!(
            KubeletDevices::from_configmap(&configmap),
            Err(ReportError::Malformed(_))
        ));
    }
}
