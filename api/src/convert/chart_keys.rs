//! Every key of the reference chart's values (`deploy/fake-gpu-operator/values.yaml`, chart
//! 0.2.0) and what a conversion makes of it: read into the pools, or left out with the reason
//! a user is told. A key of the user's values that is in neither list is no value of that
//! chart, and is named too: nothing the user wrote goes unmentioned.

/// What becomes of a key (and of every key under it without an entry of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Read into pool fields (or explained by a note of its own).
    Carried,
    /// Left out; the text says why, and what in fakegpu does the same where something does.
    LeftOut(&'static str),
}

const IMAGES: &str = "fakegpu's bundle sets its own images, resources and ports";
const OPENSHIFT: &str = "fakegpu's bundle has no OpenShift variant: bind its node agents' \
     ServiceAccount to the privileged SecurityContextConstraints yourself";

const GPU_OPERATOR: &str = "install NVIDIA's GPU Operator yourself beside backend: mock pools \
     (deploy/with-nvidia-gpu-operator)";
const DRA_DRIVER: &str = "install NVIDIA's DRA driver yourself beside backend: mock pools \
     (deploy/with-nvidia-dra-driver)";

/// The chart's keys, by dotted path. The longest path that a key of the values starts with
/// decides its fate.
pub const KEYS: &[(&str, Fate)] = &[
    ("topology", Fate::Carried),
    ("cluster", Fate::Carried),
    ("devicePlugin", Fate::LeftOut(IMAGES)),
    ("devicePlugin.enabled", Fate::Carried),
    ("kwokGpuDevicePlugin", Fate::LeftOut(IMAGES)),
    ("kwokGpuDevicePlugin.enabled", Fate::Carried),
    ("draPlugin", Fate::LeftOut(IMAGES)),
    ("draPlugin.enabled", Fate::Carried),
    (
        "draPlugin.kubeletPlugin.nodeSelector",
        Fate::LeftOut(
            "fakegpu's DRA DaemonSet selects nvidia.com/gpu.deploy.dra-plugin-gpu=true, which \
             the operator writes on the nodes that serve DRA; label nodes to choose them (see \
             the note on draPlugin)",
        ),
    ),
    ("kwokDraPlugin", Fate::LeftOut(IMAGES)),
    ("kwokDraPlugin.enabled", Fate::Carried),
    ("computeDomainController", Fate::LeftOut(IMAGES)),
    ("computeDomainDraPlugin", Fate::LeftOut(IMAGES)),
    ("computeDomainDraPlugin.enabled", Fate::Carried),
    ("kwokComputeDomainDraPlugin", Fate::LeftOut(IMAGES)),
    ("kwokComputeDomainDraPlugin.enabled", Fate::Carried),
    ("statusExporter", Fate::LeftOut(IMAGES)),
    (
        "statusExporter.enabled",
        Fate::LeftOut(
            "the bundle always runs the exporter (config/exporter); leave it out of your \
             kustomization to go without",
        ),
    ),
    ("statusExporter.nodeResourceTopology.enabled", Fate::Carried),
    (
        "statusExporter.nodeResourceTopology.installCRD",
        Fate::LeftOut(
            "the bundle installs the NodeResourceTopology CRD; apply deploy/external-nrt-crd \
             where another component owns it",
        ),
    ),
    (
        "statusExporter.podResources",
        Fate::LeftOut(
            "fakegpu writes no Run:ai pod-resources files or sysfs entries on nodes; the \
             kubelet's PodResources API answers from its device plugin",
        ),
    ),
    (
        "statusExporter.topologyMaxExportInterval",
        Fate::LeftOut(
            "the exporter follows each topology change as it happens; how long a drawn \
             utilization holds is its FAKEGPU_UTILIZATION_INTERVAL_SECONDS",
        ),
    ),
    (
        "statusExporter.kwok",
        Fate::LeftOut("fakegpu ships no PrometheusRule; its exporter serves KWOK nodes itself"),
    ),
    ("statusUpdater", Fate::LeftOut(IMAGES)),
    (
        "statusUpdater.enabled",
        Fate::LeftOut("fakegpu's operator does the status updater's work; it is always on"),
    ),
    (
        "statusUpdater.disableNodeLabeling",
        Fate::LeftOut(
            "a pool's nodes always carry GPU feature discovery's labels (schedulers find the \
             GPUs by them); keep a node out of every pool to leave it unlabelled",
        ),
    ),
    (
        "statusUpdater.podPatchRbac",
        Fate::LeftOut(
            "the bundle's operator may always patch pods: it records their GPUs in the \
             fakegpu.dev/gpus annotation",
        ),
    ),
    (
        "statusUpdater.runaiIntegration",
        Fate::LeftOut("fakegpu has no Run:ai control-plane integration"),
    ),
    (
        "topologyServer",
        Fate::LeftOut(
            "fakegpu has no topology server: the exporter serves nvidia-smi's reports and node \
             agents read their node's topology ConfigMap",
        ),
    ),
    (
        "topologyConfigMap",
        Fate::LeftOut("the operator always writes each pool node's topology ConfigMap"),
    ),
    (
        "migFaker",
        Fate::LeftOut("the operator answers Run:ai's dynamic MIG requests itself, always"),
    ),
    (
        "nvmlMock",
        Fate::LeftOut(
            "fakegpu ships its own NVML library; spec.gpu.backend: mock lays it out for \
             NVIDIA's components",
        ),
    ),
    ("gpuOperator", Fate::LeftOut(GPU_OPERATOR)),
    ("gpu-operator", Fate::LeftOut(GPU_OPERATOR)),
    ("nvidiaDraDriver", Fate::LeftOut(DRA_DRIVER)),
    ("nvidia-dra-driver-gpu", Fate::LeftOut(DRA_DRIVER)),
    (
        "runtimeClass",
        Fate::LeftOut("the bundle always ships RuntimeClass nvidia"),
    ),
    ("ubuntu", Fate::LeftOut(IMAGES)),
    (
        "builtinProfiles",
        Fate::LeftOut("fakegpu's builtin profiles are always there (spec.gpu.profile)"),
    ),
    (
        "customProfiles",
        Fate::LeftOut(
            "a pool describes a GPU of its own in spec.gpu (product, count, memoryMiB, \
             driverVersion, cudaVersion); profiles are not read from values",
        ),
    ),
    ("environment.openshift", Fate::LeftOut(OPENSHIFT)),
    ("environment.fakeCSVVersion", Fate::LeftOut(OPENSHIFT)),
    (
        "environment.resourceReservationNamespace",
        Fate::LeftOut(
            "set the operator's FAKEGPU_RESERVATION_NAMESPACES (default \
             runai-reservation,kai-resource-reservation)",
        ),
    ),
    (
        "prometheus.url",
        Fate::LeftOut(
            "set the exporter's FAKEGPU_PROMETHEUS_URL (Knative inference pods' utilization)",
        ),
    ),
];

/// The fate of `path` (dotted): that of the longest entry it starts with, `None` for a key
/// the chart does not have.
pub fn fate(path: &str) -> Option<Fate> {
    KEYS.iter()
        .filter(|(key, _)| {
            path == *key
                || path
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
        .max_by_key(|(key, _)| key.len())
        .map(|(_, fate)| *fate)
}

/// Every leaf of `values` (a scalar, a list or an empty map) by its dotted path. Lists are
/// leaves: no chart key lies inside one.
pub fn leaves(values: &serde_json::Value) -> Vec<String> {
    fn walk(value: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (key, value) in map {
                    let child = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(value, &child, out);
                }
            }
            _ if !path.is_empty() => out.push(path.to_owned()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(values, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_longest_entry_decides() {
        assert_eq!(fate("devicePlugin.enabled"), Some(Fate::Carried));
        assert_eq!(fate("devicePlugin.image.tag"), Some(Fate::LeftOut(IMAGES)));
        assert_eq!(fate("topology.nodePools.a.gpuCount"), Some(Fate::Carried));
        assert!(matches!(
            fate("statusUpdater.disableNodeLabeling"),
            Some(Fate::LeftOut(why)) if why.contains("feature discovery")
        ));
        assert!(matches!(
            fate("statusExporter.podResources.enabled"),
            Some(Fate::LeftOut(why)) if why.contains("pod-resources")
        ));
        // A prefix of a name is not its parent.
        assert_eq!(fate("devicePluginX"), None);
        assert_eq!(fate("environment.other"), None);
    }

    #[test]
    fn leaves_are_scalars_lists_and_empty_maps() {
        let values = json!({"a": {"b": 1, "c": [1, 2], "d": {}}, "e": null});
        assert_eq!(leaves(&values), ["a.b", "a.c", "a.d", "e"]);
        assert!(leaves(&json!(null)).is_empty());
    }
}
