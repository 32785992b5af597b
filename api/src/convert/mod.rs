//! The reference fake GPU operator's Helm values, converted to the GpuNodePools that do the same
//! (`fakegpu-convert values.yaml | kubectl apply -f -`): its `topology` (or `cluster`) node pools
//! in either document format, its node-pool label key, and the chart switches that choose the
//! interfaces (`devicePlugin`, `kwokGpuDevicePlugin`, `draPlugin`, `kwokDraPlugin`,
//! `computeDomainDraPlugin`, `kwokComputeDomainDraPlugin`). What has no pool field is said in a
//! note rather than dropped silently.

pub mod chart_keys;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use validator::Validate;

use crate::{meta::is_dns_subdomain, pool::GpuNodePoolSpec};
use chart_keys::Fate;
use fakegpu_model::names::label::{DEPLOY_DEVICE_PLUGIN, DEPLOY_DRA_PLUGIN, NODE_POOL};

/// GpuNodePools (as API objects) and what the user should know about the conversion.
#[derive(Debug, Default, PartialEq)]
pub struct Converted {
    pub pools: Vec<Value>,
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("the values are not YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("{path} is not a map")]
    NotAMap { path: String },
    #[error(
        "no pool would serve its GPUs: devicePlugin, kwokGpuDevicePlugin, draPlugin and \
         kwokDraPlugin are all disabled"
    )]
    NoInterface,
    #[error("node pool {0:?} is not a valid object name (a DNS subdomain)")]
    InvalidName(String),
    #[error("node pool {pool}: {reason}")]
    InvalidPool { pool: String, reason: String },
}

/// The chart's default `topology` (values.yaml of the reference's 0.2.0 chart).
fn default_topology() -> Value {
    json!({
        "nodePoolLabelKey": NODE_POOL,
        "migStrategy": "mixed",
        "nodePools": {"default": {"gpuProduct": "Tesla-K80", "gpuCount": 2, "gpuMemory": 11441}},
    })
}

/// Converts the text of a Helm values file.
pub fn convert(values: &str) -> Result<Converted, ConvertError> {
    let values: Value = serde_yaml::from_str::<Option<Value>>(values)?.unwrap_or(Value::Null);
    let switch = |name: &str, default: bool| {
        values
            .get(name)
            .and_then(|v| v.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(default)
    };
    let interfaces = json!({
        "devicePlugin": switch("devicePlugin", true) || switch("kwokGpuDevicePlugin", true),
        "dra": switch("draPlugin", false) || switch("kwokDraPlugin", false),
        "computeDomains": switch("computeDomainDraPlugin", false)
            || switch("kwokComputeDomainDraPlugin", false),
    });
    if interfaces["devicePlugin"] == false && interfaces["dra"] == false {
        return Err(ConvertError::NoInterface);
    }
    let topology = values
        .get("cluster")
        .or_else(|| values.get("topology"))
        .cloned()
        .unwrap_or_else(default_topology);
    let key = topology
        .get("nodePoolLabelKey")
        .and_then(Value::as_str)
        .unwrap_or(NODE_POOL)
        .to_owned();
    let mut converted = Converted {
        notes: left_out(&values),
        ..Converted::default()
    };
    if interfaces["dra"] == true {
        converted.notes.extend(dra_notes(
            switch("draPlugin", false),
            interfaces["devicePlugin"] == true,
        ));
    }
    let unknown = unknown_keys(&topology, &["nodePoolLabelKey", "migStrategy", "nodePools"]);
    if !unknown.is_empty() {
        converted.notes.push(format!(
            "topology (or cluster) {} are no keys of the reference's chart and are left out",
            unknown.join(", ")
        ));
    }
    if let Some(strategy) = topology.get("migStrategy").and_then(Value::as_str) {
        converted.notes.push(format!(
            "migStrategy {strategy}: the reference only labels nodes with it; a pool gets MIG \
             (and GFD's MIG labels) from spec.mig with a layout"
        ));
    }
    if values
        .pointer("/statusExporter/nodeResourceTopology/enabled")
        .and_then(Value::as_bool)
        == Some(true)
    {
        converted.notes.push(
            "statusExporter.nodeResourceTopology: fakegpu publishes NodeResourceTopology for \
             pools with spec.numa whenever the cluster serves the API (operator environment \
             FAKEGPU_NODE_RESOURCE_TOPOLOGY=false turns it off)"
                .into(),
        );
    }
    let pools = topology
        .get("nodePools")
        .cloned()
        .unwrap_or_else(|| default_topology()["nodePools"].clone());
    let Value::Object(pools) = pools else {
        return Err(ConvertError::NotAMap {
            path: "topology.nodePools".into(),
        });
    };
    for (name, pool) in &pools {
        let spec = pool_spec(name, pool, &key, &interfaces, &mut converted.notes)?;
        converted.pools.push(json!({
            "apiVersion": "fakegpu.dev/v1alpha1",
            "kind": "GpuNodePool",
            "metadata": {"name": name},
            "spec": spec,
        }));
    }
    Ok(converted)
}

/// The keys of `values` that the conversion leaves out, one note per reason (see
/// [`chart_keys`]), and one for the keys the reference's chart does not have.
fn left_out(values: &Value) -> Vec<String> {
    let mut by_reason: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for path in chart_keys::leaves(values) {
        match chart_keys::fate(&path) {
            Some(Fate::Carried) => {}
            Some(Fate::LeftOut(why)) => by_reason.entry(why).or_default().push(path),
            None => unknown.push(path),
        }
    }
    let mut notes: Vec<String> = by_reason
        .into_iter()
        .map(|(why, paths)| format!("{} not carried over: {why}", paths.join(", ")))
        .collect();
    if !unknown.is_empty() {
        notes.push(format!(
            "{} are no values of the reference's chart (0.2.0) and are left out",
            unknown.join(", ")
        ));
    }
    notes
}

/// What DRA means after the conversion where the reference meant something else: its
/// `draPlugin` served real nodes labelled for it, a pool with `interfaces.dra` serves every
/// node it has; and with the device plugin on too, every GPU is offered twice.
fn dra_notes(real_node_plugin: bool, device_plugin: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if real_node_plugin {
        notes.push(format!(
            "draPlugin.enabled: the reference runs its DRA plugin on the nodes labelled \
             {DEPLOY_DRA_PLUGIN}=true; the pools below serve DRA on every node they have, KWOK \
             and real alike. To serve it on some nodes only, label the others \
             {DEPLOY_DRA_PLUGIN}=false, or label each node {DEPLOY_DRA_PLUGIN}=true or \
             {DEPLOY_DEVICE_PLUGIN}=true for the one interface it serves (the book's \
             \"Interfaces per node\")"
        ));
    }
    if device_plugin {
        notes.push(format!(
            "the device plugin and DRA are both on: every node of the pools below offers each \
             GPU twice, as nvidia.com/gpu and in a ResourceSlice, and a scheduler that counts \
             both sees twice the GPUs (KAI scheduler warns that a node \"has both device-plugin \
             GPUs and DRA GPUs\"). Label each node {DEPLOY_DRA_PLUGIN}=true or \
             {DEPLOY_DEVICE_PLUGIN}=true for the one it serves"
        ));
    }
    notes
}

/// The keys of map `value` not in `known`.
fn unknown_keys(value: &Value, known: &[&str]) -> Vec<String> {
    value
        .as_object()
        .into_iter()
        .flat_map(|map| map.keys())
        .filter(|key| !known.contains(&key.as_str()))
        .cloned()
        .collect()
}

/// One pool's spec, in either of the reference's formats; checked against fakegpu's types.
fn pool_spec(
    name: &str,
    pool: &Value,
    key: &str,
    interfaces: &Value,
    notes: &mut Vec<String>,
) -> Result<Value, ConvertError> {
    if !is_dns_subdomain(name) {
        return Err(ConvertError::InvalidName(name.to_owned()));
    }
    let invalid = |reason: String| ConvertError::InvalidPool {
        pool: name.to_owned(),
        reason,
    };
    let known = [
        "gpu",
        "gpuProduct",
        "gpuCount",
        "gpuMemory",
        "otherDevices",
        "numa",
        "resources",
    ];
    let unknown = unknown_keys(pool, &known);
    if !unknown.is_empty() {
        notes.push(format!(
            "node pool {name}: {} have no GpuNodePool field and are left out",
            unknown.join(", ")
        ));
    }
    let mut spec = Map::new();
    if key != NODE_POOL {
        spec.insert("nodeSelector".into(), json!({"matchLabels": {key: name}}));
    }
    let mut other_resources = Vec::new();
    if let Some(gpu) = pool.get("gpu") {
        spec.insert("gpu".into(), gpu_of(name, gpu, notes));
    } else {
        // The legacy format: product, count and memory, other devices beside.
        let gpu = renamed(
            pool,
            &[
                ("gpuProduct", "product"),
                ("gpuCount", "count"),
                ("gpuMemory", "memoryMiB"),
            ],
        );
        spec.insert("gpu".into(), Value::Object(gpu));
        for device in pool
            .get("otherDevices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            other_resources.push(json!({"name": device.get("name"), "count": device.get("count")}));
        }
    }
    if let Some(numa) = pool.get("numa") {
        // `memPerZone` is `memoryPerZone` here.
        let numa = renamed(
            numa,
            &[
                ("zones", "zones"),
                ("gpusPerZone", "gpusPerZone"),
                ("topologyManagerPolicy", "topologyManagerPolicy"),
                ("topologyManagerScope", "topologyManagerScope"),
                ("cpuPerZone", "cpuPerZone"),
                ("memPerZone", "memoryPerZone"),
                ("distances", "distances"),
            ],
        );
        spec.insert("numa".into(), Value::Object(numa));
    }
    // `resources: [{nvidia.com/hostdev: 4}]`.
    for entry in pool
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (resource, count) in entry.as_object().into_iter().flatten() {
            other_resources.push(json!({"name": resource, "count": count}));
        }
    }
    if !other_resources.is_empty() {
        spec.insert("otherResources".into(), Value::Array(other_resources));
    }
    spec.insert("interfaces".into(), interfaces.clone());
    let spec = Value::Object(spec);
    let typed: GpuNodePoolSpec =
        serde_json::from_value(spec.clone()).map_err(|e| invalid(e.to_string()))?;
    typed.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(spec)
}

/// The new format's `gpu`: backend and profile, and of nvml-mock's `overrides` what a pool has
/// fields for (product, memory, count, driver and CUDA versions).
fn gpu_of(pool: &str, gpu: &Value, notes: &mut Vec<String>) -> Value {
    let unknown = unknown_keys(gpu, &["backend", "profile", "overrides"]);
    if !unknown.is_empty() {
        notes.push(format!(
            "node pool {pool}: gpu {} have no GpuNodePool field and are left out",
            unknown.join(", ")
        ));
    }
    let mut out = renamed(gpu, &[("backend", "backend"), ("profile", "profile")]);
    let Some(overrides) = gpu.get("overrides").filter(|o| o.is_object()) else {
        return Value::Object(out);
    };
    let at = |pointer: &str| overrides.pointer(pointer).cloned();
    if let Some(product) = at("/device_defaults/name") {
        out.insert("product".into(), product);
    }
    if let Some(bytes) = at("/device_defaults/memory/total_bytes").and_then(|b| b.as_u64()) {
        out.insert("memoryMiB".into(), json!(bytes / (1024 * 1024)));
    }
    let count = at("/device_count")
        .and_then(|c| c.as_u64())
        .filter(|c| *c > 0)
        .or_else(|| at("/devices").and_then(|d| d.as_array().map(|d| d.len() as u64)));
    if let Some(count) = count {
        out.insert("count".into(), json!(count));
    }
    for (from, to) in [
        ("/system/driver_version", "driverVersion"),
        ("/system/cuda_version", "cudaVersion"),
    ] {
        if let Some(version) = at(from) {
            out.insert(to.into(), version);
        }
    }
    let known = ["device_defaults", "device_count", "devices", "system"];
    let ignored: Vec<&str> = overrides
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if !ignored.is_empty() {
        notes.push(format!(
            "node pool {pool}: overrides {} have no GpuNodePool field and are left out",
            ignored.join(", ")
        ));
    }
    Value::Object(out)
}

/// The `fields` of `from` that it has, each under its new name.
fn renamed(from: &Value, fields: &[(&str, &str)]) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|(name, new)| Some(((*new).to_owned(), from.get(name)?.clone())))
        .collect()
}

/// The pools as one YAML stream, the notes as comments ahead of them.
pub fn to_yaml(converted: &Converted) -> Result<String, serde_yaml::Error> {
    let mut out = String::from(
        "# GpuNodePools converted from the reference fake GPU operator's Helm values.\n",
    );
    for note in &converted.notes {
        out.push_str(&format!("# Note: {note}\n"));
    }
    for pool in &converted.pools {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(pool)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_of(converted: &Converted, index: usize) -> &Value {
        &converted.pools[index]["spec"]
    }

    #[test]
    fn the_chart_defaults_are_the_default_pool() -> Result<(), ConvertError> {
        let converted = convert("")?;
        assert_eq!(converted.pools.len(), 1);
        assert_eq!(converted.pools[0]["metadata"]["name"], "default");
        assert_eq!(
            spec_of(&converted, 0),
            &json!({
                "gpu": {"product": "Tesla-K80", "count": 2, "memoryMiB": 11441},
                "interfaces": {"devicePlugin": true, "dra": false, "computeDomains": false},
            })
        );
        Ok(())
    }

    #[test]
    fn legacy_pools_with_their_own_label_key_and_other_devices() -> Result<(), ConvertError> {
        let converted = convert(
            "topology:\n  nodePoolLabelKey: example.com/pool\n  nodePools:\n    h100:\n      \
             gpuProduct: NVIDIA-H100\n      gpuCount: 8\n      gpuMemory: 81559\n      \
             otherDevices: [{name: nvidia.com/hostdev, count: 4}]\n",
        )?;
        assert_eq!(
            spec_of(&converted, 0),
            &json!({
                "nodeSelector": {"matchLabels": {"example.com/pool": "h100"}},
                "gpu": {"product": "NVIDIA-H100", "count": 8, "memoryMiB": 81559},
                "otherResources": [{"name": "nvidia.com/hostdev", "count": 4}],
                "interfaces": {"devicePlugin": true, "dra": false, "computeDomains": false},
            })
        );
        Ok(())
    }

    #[test]
    fn new_format_pools_and_the_chart_switches() -> Result<(), ConvertError> {
        let values = r#"
devicePlugin: {enabled: false}
kwokGpuDevicePlugin: {enabled: false}
kwokDraPlugin: {enabled: true}
kwokComputeDomainDraPlugin: {enabled: true}
statusExporter: {nodeResourceTopology: {enabled: true}}
cluster:
  migStrategy: none
  nodePools:
    gb200:
      gpu:
        backend: fake
        profile: gb200
        overrides:
          device_count: 2
          system: {driver_version: 570.86.15}
          nvlink: {}
      numa: {zones: 2, memPerZone: 64Gi, cpuPerZone: "16"}
      resources: [{nvidia.com/hostdev: 2}]
"#;
        let converted = convert(values)?;
        assert_eq!(
            spec_of(&converted, 0),
            &json!({
                "gpu": {"backend": "fake", "profile": "gb200", "count": 2, "driverVersion": "570.86.15"},
                "numa": {"zones": 2, "memoryPerZone": "64Gi", "cpuPerZone": "16"},
                "otherResources": [{"name": "nvidia.com/hostdev", "count": 2}],
                "interfaces": {"devicePlugin": false, "dra": true, "computeDomains": true},
            })
        );
        let notes = converted.notes.join("\n");
        assert!(notes.contains("migStrategy none"), "{notes}");
        assert!(notes.contains("NodeResourceTopology"), "{notes}");
        assert!(notes.contains("overrides nvlink"), "{notes}");
        let yaml = to_yaml(&converted).map_err(ConvertError::Yaml)?;
        assert!(yaml.contains("---\napiVersion: fakegpu.dev/v1alpha1\nkind: GpuNodePool\n"));
        Ok(())
    }

    /// The values KAI scheduler's test clusters give the reference: DRA on real nodes beside
    /// the device plugin, node labelling off, npe pod-resources on, and a typo.
    #[test]
    fn every_key_left_out_is_named_with_why() -> Result<(), ConvertError> {
        let values = r#"
draPlugin:
  enabled: true
  kubeletPlugin: {nodeSelector: {nvidia.com/gpu.deploy.dra-plugin-gpu: "true"}}
statusUpdater:
  disableNodeLabeling: true
  image: {tag: 0.2.0}
statusExporter:
  podResources: {enabled: true}
  image: {tag: 0.2.0}
devicePlugn: {enabled: false}
topology:
  nodePools:
    default: {gpuProduct: NVIDIA-A100, gpuCount: 8, gpuMemory: 40960, gpuColor: green}
    h100: {gpu: {profile: h100, vendor: nvidia}}
  extra: 1
"#;
        let converted = convert(values)?;
        assert_eq!(
            spec_of(&converted, 0)["interfaces"],
            json!({"devicePlugin": true, "dra": true, "computeDomains": false})
        );
        let notes = &converted.notes;
        let note = |needle: &str| {
            notes
                .iter()
                .find(|n| n.contains(needle))
                .unwrap_or_else(|| panic!("no note with {needle:?}: {notes:#?}"))
        };
        assert!(note("statusUpdater.disableNodeLabeling not carried over").contains("labels"));
        assert!(note("statusExporter.podResources.enabled not carried over").contains("kubelet"));
        assert!(
            note("statusExporter.image.tag, statusUpdater.image.tag not carried over")
                .contains("images")
        );
        assert!(note("draPlugin.kubeletPlugin.nodeSelector").contains("label nodes"));
        assert!(note("devicePlugn.enabled are no values").contains("left out"));
        assert!(note("draPlugin.enabled: the reference runs").contains("=false"));
        assert!(note("offers each GPU twice").contains("device-plugin=true"));
        assert!(note("topology (or cluster) extra").contains("left out"));
        assert!(note("node pool default: gpuColor").contains("no GpuNodePool field"));
        assert!(note("node pool h100: gpu vendor").contains("no GpuNodePool field"));
        // Keys the conversion reads are not mentioned as left out.
        assert!(
            !notes.iter().any(|n| n.contains("draPlugin.enabled not")),
            "{notes:#?}"
        );
        Ok(())
    }

    #[test]
    fn what_fakegpu_cannot_take_is_an_error() {
        let no_interface =
            "devicePlugin: {enabled: false}\nkwokGpuDevicePlugin: {enabled: false}\n";
        assert!(matches!(
            convert(no_interface),
            Err(ConvertError::NoInterface)
        ));
        let bad_name =
            "topology:\n  nodePools:\n    Big_Pool: {gpuProduct: X, gpuCount: 1, gpuMemory: 1}\n";
        assert!(matches!(
            convert(bad_name),
            Err(ConvertError::InvalidName(_))
        ));
        let zero = "topology:\n  nodePools:\n    p: {gpuProduct: X, gpuCount: 0, gpuMemory: 1}\n";
        let error = convert(zero).map(drop).unwrap_err().to_string();
        assert!(
            error.starts_with("node pool p:") && error.contains("count"),
            "{error}"
        );
    }
}
