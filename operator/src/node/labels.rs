//! The labels a pool's node carries: GPU feature discovery's set, the GPU Operator's deploy
//! labels and the reference fake GPU operator's own, so selectors written for any of them match.

use std::collections::BTreeMap;

use fakegpu_api::pool::{
    Backend, GpuNodePool, Interfaces, MigStrategy, mig::MigPlan, resolve::ResolvedGpu,
};
use fakegpu_model::{
    names::{fakegpu::POOL_LABEL, label},
    profiles::{MigEngines, product_label_value, published_mig_name},
};
use kube::ResourceExt;

use super::{cached::CachedNode, interfaces::DeployChoices};
use crate::kit::cache::same_content;

/// Desired labels of a node owned by `pool` that serves `served` of its interfaces (see
/// [`super::interfaces`]). `has_kubelet` is false for KWOK nodes, which get no deploy labels
/// for node-local plugins (the operator serves them centrally). A deploy label someone else
/// set (`choices`) is theirs: fakegpu neither writes nor removes it.
pub fn desired_labels(
    pool: &GpuNodePool,
    gpu: &ResolvedGpu,
    has_kubelet: bool,
    served: &Interfaces,
    choices: &DeployChoices,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut set = |key: &str, value: String| {
        labels.insert(key.to_owned(), value);
    };
    let yes = || "true".to_owned();

    set(POOL_LABEL, pool.name_any());
    set(label::FAKE_GPU, yes());
    set(label::GPU_PRESENT, yes());
    set(label::GPU_PRODUCT, product_label_value(&gpu.product));
    set(label::GPU_COUNT, gpu.count.to_string());
    set(label::GPU_MEMORY, gpu.memory_mib.to_string());
    set(label::GPU_REPLICAS, "1".into());
    set(label::GPU_SHARING_STRATEGY, "none".into());
    set(label::GPU_MODE, "compute".into());
    if let Some(capability) = gpu.compute_capability {
        set(label::GPU_FAMILY, capability.family().into());
        set(label::GPU_COMPUTE_MAJOR, capability.major.to_string());
        set(label::GPU_COMPUTE_MINOR, capability.minor.to_string());
    }

    let mut driver = gpu.driver_version.splitn(3, '.');
    let (major, minor, revision) = (driver.next(), driver.next(), driver.next());
    set(label::CUDA_DRIVER_VERSION_FULL, gpu.driver_version.clone());
    for (keys, part) in [
        (
            [label::CUDA_DRIVER_VERSION_MAJOR, label::CUDA_DRIVER_MAJOR],
            major,
        ),
        (
            [label::CUDA_DRIVER_VERSION_MINOR, label::CUDA_DRIVER_MINOR],
            minor,
        ),
        (
            [label::CUDA_DRIVER_VERSION_REVISION, label::CUDA_DRIVER_REV],
            revision,
        ),
    ] {
        // GFD writes an empty revision for a two-part version such as `555.42`.
        keys.into_iter()
            .for_each(|key| set(key, part.unwrap_or_default().to_owned()));
    }
    let mut cuda = gpu.cuda_version.splitn(2, '.');
    set(label::CUDA_RUNTIME_VERSION_FULL, gpu.cuda_version.clone());
    let (cuda_major, cuda_minor) = (
        cuda.next().unwrap_or_default(),
        cuda.next().unwrap_or_default(),
    );
    set(label::CUDA_RUNTIME_VERSION_MAJOR, cuda_major.to_owned());
    set(label::CUDA_RUNTIME_MAJOR, cuda_major.to_owned());
    set(label::CUDA_RUNTIME_VERSION_MINOR, cuda_minor.to_owned());
    set(label::CUDA_RUNTIME_MINOR, cuda_minor.to_owned());

    let mig_capable = gpu.catalog.is_some_and(|p| p.mig_capable());
    set(label::MIG_CAPABLE, mig_capable.to_string());
    // GFD writes the strategy only for `single` and `mixed`.
    if gpu.mig.is_some() {
        set(label::MIG_STRATEGY, gpu.mig_strategy_name().into());
    }
    if let Some(plan) = &gpu.mig {
        mig_labels(plan, &gpu.product, &mut set);
    }
    set(label::MPS_CAPABLE, "false".into());
    set(label::VGPU_PRESENT, "false".into());

    set(label::DEPLOY_DCGM_EXPORTER, yes());
    if has_kubelet {
        for (on, key) in [
            (served.device_plugin, label::DEPLOY_DEVICE_PLUGIN),
            (served.dra, label::DEPLOY_DRA_PLUGIN),
            (served.compute_domains, label::DEPLOY_COMPUTE_DOMAIN_PLUGIN),
        ] {
            if on && !choices.chose(key) {
                set(key, yes());
            }
        }
        if pool.spec.gpu.backend == Backend::Mock {
            set(label::DEPLOY_DRIVER_ROOT, yes());
        }
    }
    labels
}

/// GPU feature discovery's MIG labels. `single`: the product gains `-MIG-<profile>`, the count
/// and memory are the instances', plus multiprocessors and slices. `mixed`: per profile,
/// `nvidia.com/mig-<profile>.count`, `.product`, `.replicas`, `.sharing-strategy`, `.memory`,
/// `.multiprocessors`, `.slices.gi`, `.slices.ci` and `.engines.*`.
fn mig_labels(plan: &MigPlan, product: &str, set: &mut impl FnMut(&str, String)) {
    let counts = plan.counts();
    // `NVIDIA-A100-SXM4-40GB-MIG-1g.5gb`: GFD's product for an instance, under either
    // strategy; sanitised again so that a long custom product still makes a label value.
    let mig_product = |profile: &str| {
        product_label_value(&format!(
            "{}-MIG-{}",
            product_label_value(product),
            published_mig_name(profile)
        ))
    };
    match plan.strategy {
        MigStrategy::Single => {
            if let Some((_, profile)) = counts.values().next() {
                set(label::GPU_PRODUCT, mig_product(profile.name));
                set(label::GPU_COUNT, plan.instances().to_string());
                set(label::GPU_MEMORY, profile.memory_mib.to_string());
                set(
                    label::GPU_MULTIPROCESSORS,
                    profile.multiprocessors.to_string(),
                );
                set(label::GPU_SLICES_GI, profile.compute_slices.to_string());
                set(label::GPU_SLICES_CI, profile.compute_slices.to_string());
                for (key, count) in engine_labels(&profile.engines) {
                    set(key, count.to_string());
                }
            }
        }
        MigStrategy::Mixed => {
            for (name, (count, profile)) in counts {
                let published = published_mig_name(name);
                let key =
                    |suffix: &str| format!("{}{published}.{suffix}", label::MIG_PROFILE_PREFIX);
                set(&key("count"), count.to_string());
                set(&key("product"), mig_product(name));
                // No sharing of MIG instances: what GFD writes without a sharing config.
                set(&key("replicas"), "1".into());
                set(&key("sharing-strategy"), "none".into());
                set(&key("memory"), profile.memory_mib.to_string());
                set(&key("multiprocessors"), profile.multiprocessors.to_string());
                set(&key("slices.gi"), profile.compute_slices.to_string());
                set(&key("slices.ci"), profile.compute_slices.to_string());
                for (single_key, count) in engine_labels(&profile.engines) {
                    // Mixed keys carry the same `engines.*` suffix after the profile.
                    let suffix = single_key.trim_start_matches("nvidia.com/gpu.");
                    set(&key(suffix), count.to_string());
                }
            }
        }
    }
}

/// GFD's engine labels under `single`, with one instance's counts.
fn engine_labels(engines: &MigEngines) -> [(&'static str, u32); 5] {
    [
        (label::GPU_ENGINES_COPY, engines.copy),
        (label::GPU_ENGINES_DECODER, engines.decoder),
        (label::GPU_ENGINES_ENCODER, engines.encoder),
        (label::GPU_ENGINES_JPEG, engines.jpeg),
        (label::GPU_ENGINES_OFA, engines.ofa),
    ]
}

/// Whether a node's labels already are what the operator wants: every desired label has its
/// value (those the cache dropped, by their digest: see [`super::cached::drop_own_labels`]), and no other
/// label of the operator's is left over.
pub fn labels_current(node: &CachedNode, desired: &BTreeMap<String, String>) -> bool {
    let current = node.labels();
    let choices = DeployChoices::of(current);
    let missing: BTreeMap<&String, &String> = desired
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(v))
        .collect();
    // The labels the cache dropped are what is missing, or nothing is.
    same_content(&BTreeMap::new(), node.kept().own_labels, &missing)
        && current.keys().all(|key| {
            desired.contains_key(key) || !label::is_operator_label(key) || choices.chose(key)
        })
}

/// Whether writing `desired` may have to take labels of fakegpu's off the node: its labels
/// are not current and fakegpu set some that the cache shows only as a digest (see
/// [`super::cached::drop_own_labels`]) or an operator label it shows is not desired. Their names are then
/// read from the node itself ([`super::cached::only_ours`]); a node that never had fakegpu's labels (every
/// node joining a pool) needs no such read.
pub fn may_take_back(node: &CachedNode, desired: &BTreeMap<String, String>) -> bool {
    let choices = DeployChoices::of(node.labels());
    !labels_current(node, desired)
        && (node.kept().own_labels.is_some()
            || node.labels().keys().any(|key| {
                label::is_operator_label(key) && !desired.contains_key(key) && !choices.chose(key)
            }))
}

#[cfg(test)]
mod tests {
    use fakegpu_api::pool::resolve::resolve_pool;
    use serde_json::json;

    use k8s_openapi::api::core::v1::Node;

    use super::*;
    use crate::kit::cache::Cached;
    use crate::node::cached::only_ours;

    fn pool(spec: serde_json::Value) -> std::sync::Arc<GpuNodePool> {
        crate::testing::pool("p", 0, spec)
    }

    fn labelled(labels: &BTreeMap<String, String>) -> CachedNode {
        Cached::new(
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}}))
                .expect("test node"),
        )
    }

    fn labels_of(spec: serde_json::Value, has_kubelet: bool) -> BTreeMap<String, String> {
        let pool = pool(spec);
        let gpu = resolve_pool(&pool.spec).expect("resolves");
        let none = DeployChoices::default();
        let served = super::super::interfaces::served(&pool, !has_kubelet, &none);
        desired_labels(&pool, &gpu, has_kubelet, &served, &none)
    }

    #[test]
    fn mig_labels_follow_the_strategy() {
        let mixed = labels_of(
            json!({"gpu": {"profile": "a100-80gb"}, "mig": {"strategy": "mixed", "layout": [
                {"gpus": [0, 1], "profiles": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]}}),
            false,
        );
        for (key, value) in [
            ("nvidia.com/mig.strategy", "mixed"),
            ("nvidia.com/gpu.count", "8"),
            ("nvidia.com/mig-1g.10gb.count", "4"),
            ("nvidia.com/mig-1g.10gb.memory", "9856"),
            ("nvidia.com/mig-3g.40gb.count", "2"),
            ("nvidia.com/mig-3g.40gb.slices.gi", "3"),
            ("nvidia.com/mig-2g.20gb.multiprocessors", "28"),
            ("nvidia.com/mig-3g.40gb.engines.copy", "3"),
            ("nvidia.com/mig-3g.40gb.engines.decoder", "2"),
            ("nvidia.com/mig-3g.40gb.engines.encoder", "0"),
            ("nvidia.com/mig-3g.40gb.engines.jpeg", "0"),
            ("nvidia.com/mig-1g.10gb.engines.ofa", "0"),
            (
                "nvidia.com/mig-1g.10gb.product",
                "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            ),
            ("nvidia.com/mig-1g.10gb.replicas", "1"),
            ("nvidia.com/mig-1g.10gb.sharing-strategy", "none"),
        ] {
            assert_eq!(mixed.get(key).map(String::as_str), Some(value), "{key}");
        }
        let single = labels_of(
            json!({"gpu": {"profile": "h100"}, "mig": {"strategy": "single", "layout": [
                {"profiles": ["1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"]}]}}),
            false,
        );
        assert_eq!(
            single["nvidia.com/gpu.product"],
            "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
        );
        assert_eq!(single["nvidia.com/gpu.count"], "56");
        assert_eq!(single["nvidia.com/gpu.memory"], "9856");
        assert_eq!(single["nvidia.com/gpu.slices.gi"], "1");
        assert_eq!(single["nvidia.com/gpu.engines.copy"], "1");
        assert_eq!(single["nvidia.com/gpu.engines.jpeg"], "1");
        assert_eq!(single["nvidia.com/gpu.engines.ofa"], "0");
        // Labels of a layout the pool no longer has are the operator's to remove.
        let plain = labels_of(json!({"gpu": {"profile": "a100-80gb"}}), false);
        assert!(!labels_current(&labelled(&mixed), &plain));
        assert!(labels_current(&labelled(&plain), &plain));
    }

    #[test]
    fn h100_node_carries_the_gpu_feature_discovery_set() {
        let labels = labels_of(json!({"gpu": {"profile": "h100"}}), false);
        let expected = [
            ("fakegpu.dev/pool", "p"),
            ("run.ai/fake.gpu", "true"),
            ("nvidia.com/gpu.present", "true"),
            ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
            ("nvidia.com/gpu.count", "8"),
            ("nvidia.com/gpu.memory", "81559"),
            ("nvidia.com/gpu.replicas", "1"),
            ("nvidia.com/gpu.sharing-strategy", "none"),
            ("nvidia.com/gpu.mode", "compute"),
            ("nvidia.com/gpu.family", "hopper"),
            ("nvidia.com/gpu.compute.major", "9"),
            ("nvidia.com/gpu.compute.minor", "0"),
            ("nvidia.com/cuda.driver-version.full", "550.163.01"),
            ("nvidia.com/cuda.driver-version.major", "550"),
            ("nvidia.com/cuda.driver-version.minor", "163"),
            ("nvidia.com/cuda.driver-version.revision", "01"),
            ("nvidia.com/cuda.driver.major", "550"),
            ("nvidia.com/cuda.driver.minor", "163"),
            ("nvidia.com/cuda.driver.rev", "01"),
            ("nvidia.com/cuda.runtime-version.full", "12.4"),
            ("nvidia.com/cuda.runtime-version.major", "12"),
            ("nvidia.com/cuda.runtime-version.minor", "4"),
            ("nvidia.com/cuda.runtime.major", "12"),
            ("nvidia.com/cuda.runtime.minor", "4"),
            ("nvidia.com/mig.capable", "true"),
            ("nvidia.com/mps.capable", "false"),
            ("nvidia.com/vgpu.present", "false"),
            ("nvidia.com/gpu.deploy.dcgm-exporter", "true"),
        ];
        let expected: BTreeMap<String, String> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(labels, expected);
    }

    #[test]
    fn kubelet_nodes_get_deploy_labels_for_the_interfaces_served() {
        let both = labels_of(
            json!({"gpu": {"profile": "t4"}, "interfaces": {"devicePlugin": true, "dra": true}}),
            true,
        );
        assert_eq!(
            both.get(label::DEPLOY_DEVICE_PLUGIN).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            both.get(label::DEPLOY_DRA_PLUGIN).map(String::as_str),
            Some("true")
        );
        let dra_only = labels_of(
            json!({"gpu": {"profile": "t4"}, "interfaces": {"devicePlugin": false, "dra": true}}),
            true,
        );
        assert!(!dra_only.contains_key(label::DEPLOY_DEVICE_PLUGIN));
        let kwok = labels_of(
            json!({"gpu": {"profile": "t4"}, "interfaces": {"dra": true}}),
            false,
        );
        assert!(
            !kwok.contains_key(label::DEPLOY_DEVICE_PLUGIN)
                && !kwok.contains_key(label::DEPLOY_DRA_PLUGIN)
        );
    }

    #[test]
    fn mig_names_with_a_plus_are_published_with_a_dot() {
        let layout = |strategy| {
            json!({"gpu": {"profile": "h100", "count": 1},
                "mig": {"strategy": strategy, "layout": [{"profiles": ["1g.10gb+me"]}]}})
        };
        let mixed = labels_of(layout("mixed"), true);
        assert_eq!(mixed["nvidia.com/mig-1g.10gb.me.count"], "1");
        assert_eq!(
            mixed["nvidia.com/mig-1g.10gb.me.product"],
            "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
        );
        assert!(mixed.keys().all(|k| !k.contains('+')), "{mixed:#?}");
        let single = labels_of(layout("single"), true);
        assert_eq!(
            single[label::GPU_PRODUCT],
            "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
        );
    }

    #[test]
    fn mock_pools_get_a_driver_root_on_nodes_with_a_kubelet_only() {
        let mock = json!({"gpu": {"profile": "h100", "backend": "mock"}});
        let kubelet = labels_of(mock.clone(), true);
        assert_eq!(
            kubelet.get(label::DEPLOY_DRIVER_ROOT).map(String::as_str),
            Some("true")
        );
        // NVIDIA's device plugin, deployed by its GPU Operator, selects the same label.
        assert_eq!(
            kubelet.get(label::DEPLOY_DEVICE_PLUGIN).map(String::as_str),
            Some("true")
        );
        assert!(!labels_of(mock, false).contains_key(label::DEPLOY_DRIVER_ROOT));
        let fake = labels_of(json!({"gpu": {"profile": "h100"}}), true);
        assert!(!fake.contains_key(label::DEPLOY_DRIVER_ROOT));
    }

    #[test]
    fn unknown_products_have_no_family_and_two_part_drivers_no_revision() {
        let spec = json!({"gpu": {"product": "Imaginary GPU", "count": 1, "memoryMiB": 1024,
            "driverVersion": "555.42", "cudaVersion": "12.5"}});
        let labels = labels_of(spec.clone(), false);
        assert!(!labels.contains_key(label::GPU_FAMILY));
        assert_eq!(labels[label::CUDA_DRIVER_VERSION_REVISION], "");
        assert_eq!(labels[label::GPU_PRODUCT], "Imaginary-GPU");
        assert!(!labels.contains_key(label::MIG_STRATEGY), "GFD writes none");
        assert_eq!(labels[label::MIG_CAPABLE], "false");
        // MIG on a product the catalog does not know is the pool's condition, not labels.
        let mut with_mig = spec;
        with_mig["mig"] = json!({"strategy": "mixed", "layout": [{"profiles": ["1g.5gb"]}]});
        let error = resolve_pool(&pool(with_mig).spec).expect_err("not MIG capable");
        assert_eq!(error.reason(), "InvalidMigLayout");
    }

    #[test]
    fn every_label_written_is_in_the_operator_set() {
        let labels = labels_of(
            json!({"gpu": {"profile": "a100"}, "interfaces": {"dra": true, "computeDomains": true}}),
            true,
        );
        for key in labels.keys() {
            assert!(
                label::OPERATOR_SET.contains(&key.as_str()),
                "{key} missing from OPERATOR_SET"
            );
        }
        assert_eq!(labels[label::DEPLOY_COMPUTE_DOMAIN_PLUGIN], "true");
    }

    #[test]
    fn deploy_labels_someone_else_set_are_left_to_them() {
        let pool = pool(json!({"gpu": {"profile": "a100"}, "interfaces": {"dra": true}}));
        let gpu = resolve_pool(&pool.spec).expect("resolves");
        let labels_with = |user: &[(&str, &str)]| {
            let user: BTreeMap<String, String> = user
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let choices = DeployChoices::of(&user);
            let served = super::super::interfaces::served(&pool, false, &choices);
            (user, desired_labels(&pool, &gpu, true, &served, &choices))
        };
        let (_, decided) = labels_with(&[]);
        assert_eq!(decided[label::DEPLOY_DEVICE_PLUGIN], "true");
        assert_eq!(decided[label::DEPLOY_DRA_PLUGIN], "true");
        // `false` on the device plugin: fakegpu writes neither that label nor over it.
        let (user, off) = labels_with(&[(label::DEPLOY_DEVICE_PLUGIN, "false")]);
        assert!(!off.contains_key(label::DEPLOY_DEVICE_PLUGIN));
        assert_eq!(off[label::DEPLOY_DRA_PLUGIN], "true");
        let mut node = off.clone();
        node.extend(user);
        assert!(labels_current(&labelled(&node), &off));
        // DRA picked: the device plugin's label is not written (its DaemonSet stays away).
        let (_, dra) = labels_with(&[(label::DEPLOY_DRA_PLUGIN, "true")]);
        assert!(!dra.contains_key(label::DEPLOY_DEVICE_PLUGIN));
        assert!(!dra.contains_key(label::DEPLOY_DRA_PLUGIN));
    }

    #[test]
    fn current_means_equal_values_and_no_leftovers() {
        let desired = labels_of(json!({"gpu": {"profile": "a100"}}), false);
        let mut current = desired.clone();
        current.insert("kubernetes.io/hostname".into(), "n".into());
        assert!(labels_current(&labelled(&current), &desired));
        let mut chosen = current.clone();
        current.insert(label::MIG_STRATEGY.into(), "single".into());
        assert!(
            !labels_current(&labelled(&current), &desired),
            "leftover operator label"
        );
        // A deploy label someone else set is their choice, not fakegpu's leftover.
        chosen.insert(label::DEPLOY_DEVICE_PLUGIN.into(), "false".into());
        assert!(labels_current(&labelled(&chosen), &desired));
        assert!(!may_take_back(&labelled(&chosen), &desired));
        let mut changed = desired.clone();
        changed.insert(label::GPU_COUNT.into(), "4".into());
        assert!(!labels_current(&labelled(&changed), &desired));
    }

    /// A node carrying `desired` as fakegpu's status apply wrote it, with `extra` labels a
    /// user set (and `nvidia.com/gpu.product` set by the user too), then cached.
    fn cached(desired: &BTreeMap<String, String>) -> CachedNode {
        let owned: serde_json::Map<String, serde_json::Value> = desired
            .keys()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect();
        let mut labels = desired.clone();
        labels.insert("kubernetes.io/hostname".into(), "n".into());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": labels, "managedFields": [
                {"manager": "kubectl-label", "operation": "Update", "fieldsV1": {"f:metadata":
                    {"f:labels": {"f:kubernetes.io/hostname": {}, "f:nvidia.com/gpu.product": {}}}}},
                {"manager": "fakegpu", "operation": "Apply", "subresource": "status",
                    "fieldsV1": {"f:metadata": {"f:labels": owned}}}]},
        }))
        .expect("test node");
        Cached::new(node)
    }

    #[test]
    fn the_cache_keeps_a_digest_of_the_labels_only_fakegpu_owns() {
        let mut desired = labels_of(json!({"gpu": {"profile": "a100"}}), false);
        desired.insert(POOL_LABEL.into(), "p".into());
        let node = cached(&desired);
        // Kept: others' labels, one fakegpu shares with a user, the pool label.
        let kept: Vec<&str> = node.labels().keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            [POOL_LABEL, "kubernetes.io/hostname", label::GPU_PRODUCT]
        );
        assert!(node.kept().own_labels.is_some());
        assert!(labels_current(&node, &desired));

        let mut changed = desired.clone();
        changed.insert(label::GPU_COUNT.into(), "4".into());
        assert!(!labels_current(&node, &changed), "a dropped label changed");
        let mut more = desired.clone();
        more.insert(label::DEPLOY_DEVICE_PLUGIN.into(), "true".into());
        assert!(!labels_current(&node, &more), "a label added");
        let mut fewer = desired.clone();
        fewer.remove(label::GPU_COUNT);
        assert!(!labels_current(&node, &fewer), "a dropped label unwanted");
        let mut product = desired.clone();
        product.insert(label::GPU_PRODUCT.into(), "other".into());
        assert!(!labels_current(&node, &product), "a kept label changed");
    }

    #[test]
    fn only_a_node_with_labels_of_fakegpu_s_to_take_back_is_read_first() {
        let desired = labels_of(json!({"gpu": {"profile": "a100"}}), false);
        // Joining a pool: nothing of fakegpu's on it yet.
        let fresh = labelled(&BTreeMap::from([("type".to_owned(), "kwok".to_owned())]));
        assert!(!may_take_back(&fresh, &desired));
        // Written before: current, or changed without knowing what to take back.
        let node = cached(&desired);
        assert!(!may_take_back(&node, &desired));
        let mut changed = desired.clone();
        changed.insert(label::GPU_COUNT.into(), "4".into());
        assert!(may_take_back(&node, &changed));
        assert!(may_take_back(&node, &BTreeMap::new()));
        // Names read from the node: fakegpu's alone, not the one a user set too.
        let mut full: Node = serde_json::from_value(json!({"metadata": {"name": "n",
            "managedFields": [
                {"manager": "kubectl-label", "operation": "Update", "fieldsV1": {"f:metadata":
                    {"f:labels": {"f:nvidia.com/gpu.product": {}}}}},
                {"manager": "fakegpu", "operation": "Update", "subresource": "status",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.product": {},
                        "f:nvidia.com/gpu.count": {}}}}}]}}))
        .expect("test node");
        assert_eq!(only_ours(&full), [label::GPU_COUNT]);
        full.metadata.managed_fields = None;
        assert!(only_ours(&full).is_empty());
    }
}
