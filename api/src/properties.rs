//! Properties of what the API crate parses from annotations users and schedulers write, and of
//! the Helm values converter: any input gives a value or an error, never a panic; what fakegpu
//! writes reads back the same.

use crate::{
    convert,
    faults::{GpuFault, parse_annotation},
    pool::{
        GpuNodePoolSpec,
        mig_config::{self, GpuLayouts, MigConfigError},
        resolve::{ResolvedGpu, resolve_pool},
    },
};
use fakegpu_model::{
    mig_slices::placements,
    profiles::{MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, MigProfile, PROFILES},
};
use proptest::prelude::*;
use serde_json::json;

/// A node of eight GPUs of each MIG-capable product of the catalog.
fn mig_gpus() -> Vec<ResolvedGpu> {
    let gpus: Vec<ResolvedGpu> = PROFILES
        .iter()
        .filter(|profile| profile.mig_capable())
        .map(|profile| {
            let spec: GpuNodePoolSpec =
                serde_json::from_value(json!({"gpu": {"profile": profile.name, "count": 8}}))
                    .expect("spec");
            resolve_pool(&spec).expect("a catalog profile resolves")
        })
        .collect();
    assert!(gpus.len() >= 3, "the catalog has MIG products");
    gpus
}

fn fault() -> impl Strategy<Value = GpuFault> {
    (
        proptest::collection::vec(0..16_u32, 0..4),
        proptest::option::of(1..=1000_u32),
        proptest::option::of(1..=600_u32),
        proptest::option::of(0..=1_000_000_000_u64),
        proptest::option::of(0..=1_000_000_000_u64),
        any::<bool>(),
    )
        .prop_map(
            |(gpus, xid, xid_per_minute, ecc_correctable, ecc_uncorrectable, hot)| GpuFault {
                gpus,
                xid,
                xid_per_minute,
                ecc_correctable,
                ecc_uncorrectable,
                thermal_throttling: hot,
            },
        )
}

/// One requested instance: a profile name (the product's, or one it lacks), a position and
/// maybe a size, as Run:ai writes them.
fn requested() -> impl Strategy<Value = serde_json::Value> {
    let names = prop_oneof![
        Just("1g.5gb"),
        Just("1g.10gb"),
        Just("1g.10gb+me"),
        Just("1g.12gb"),
        Just("1g.18gb"),
        Just("1g.20gb"),
        Just("2g.10gb"),
        Just("2g.20gb"),
        Just("2g.24gb"),
        Just("3g.20gb"),
        Just("3g.40gb"),
        Just("4g.20gb"),
        Just("4g.40gb"),
        Just("7g.40gb"),
        Just("7g.80gb"),
        Just("nope"),
    ];
    (names, 0..9_u32, proptest::option::of(0..9_u32)).prop_map(|(name, position, size)| {
        let mut entry = json!({"name": name, "position": position});
        if let Some(size) = size {
            entry["size"] = size.into();
        }
        entry
    })
}

/// A `run.ai/mig.config` document: entries selecting GPUs (some repeated, some missing, some
/// not indices), MIG on or off, the instances asked for.
fn mig_config_document() -> impl Strategy<Value = String> {
    let device = prop_oneof![
        (0..10_u32).prop_map(|i| json!(i.to_string())),
        (0..10_u32).prop_map(|i| json!(i)),
        Just(json!("x")),
    ];
    let entry = (
        proptest::collection::vec(device, 0..3),
        any::<bool>(),
        proptest::collection::vec(requested(), 0..8),
    )
        .prop_map(|(devices, enabled, instances)| {
            json!({"devices": devices, "mig-enabled": enabled, "mig-devices": instances})
        });
    proptest::collection::vec(entry, 0..4).prop_map(|selected| {
        json!({"version": "v1", "mig-configs": {"selected": selected}}).to_string()
    })
}

/// Whether `instances` could sit on one GPU as requested: each at one of NVML's placements of
/// its profile, none sharing a memory slice, within the GPU's compute slices and each profile's
/// instance limit.
fn fits(instances: &[(&MigProfile, u32)]) -> bool {
    let mut taken = [false; MIG_MEMORY_SLICES as usize];
    for (profile, start) in instances {
        if !placements(profile).any(|p| p == *start) {
            return false;
        }
        let size = profile.memory_slices.max(1);
        for slice in *start..start + size {
            match taken.get_mut(slice as usize) {
                Some(t) if !*t => *t = true,
                _ => return false,
            }
        }
    }
    let within_limit = instances.iter().all(|(profile, _)| {
        let same = instances
            .iter()
            .filter(|(p, _)| p.name == profile.name)
            .count();
        same <= profile.max_instances as usize
    });
    within_limit
        && instances.iter().map(|(p, _)| p.compute_slices).sum::<u32>() <= MIG_COMPUTE_SLICES
}

fn check_layouts(layouts: &GpuLayouts, gpu: &ResolvedGpu) -> Result<(), TestCaseError> {
    for (index, instances) in layouts {
        prop_assert!(*index < gpu.count);
        let placed: Vec<_> = instances
            .iter()
            .map(|i| (i.profile, i.placement_start))
            .collect();
        prop_assert!(fits(&placed), "{} GPU {index}: {placed:?}", gpu.product);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_faults_annotation_is_faults_or_an_error(text in any::<String>()) {
        let _ = parse_annotation(&text);
    }

    #[test]
    fn near_miss_faults_annotations_are_faults_or_an_error(
        text in r#"\[\{("(gpus|xid|xidPerMinute|eccCorrectable|eccUncorrectable|thermalThrottling|gpu)": ?(-?[0-9]{1,12}|true|null|\[[0-9,]{0,6}\]|"[a-z]{0,3}"),? ?){0,4}\}\]"#
    ) {
        if let Ok(faults) = parse_annotation(&text) {
            for fault in faults {
                prop_assert!(fault.xid.is_none_or(|x| (1..=1000).contains(&x)), "{text}");
            }
        }
    }

    #[test]
    fn faults_within_bounds_read_back(faults in proptest::collection::vec(fault(), 0..4)) {
        let text = serde_json::to_string(&faults).expect("json");
        prop_assert_eq!(parse_annotation(&text), Ok(faults));
    }

    #[test]
    fn a_fault_with_an_unknown_field_is_refused(fault in fault(), key in "[a-zA-Z]{1,12}") {
        let mut entry = serde_json::to_value(&fault).expect("json");
        prop_assume!(entry.get(&key).is_none() && !["gpus", "xid", "xidPerMinute",
            "eccCorrectable", "eccUncorrectable", "thermalThrottling"].contains(&key.as_str()));
        entry[&key] = json!(1);
        let refused = parse_annotation(&json!([entry]).to_string());
        prop_assert!(refused.is_err_and(|e| e.contains(&key)));
    }

    #[test]
    fn any_mig_config_text_is_layouts_or_an_error(text in any::<String>()) {
        for gpu in mig_gpus() {
            let _ = mig_config::parse(&text, &gpu);
        }
    }

    /// Every layout accepted fits its GPUs as NVML would place it, and is refused exactly when
    /// some GPU's instances would not fit; what the mapping annotation records reads back.
    #[test]
    fn accepted_mig_configs_fit_and_map_back(document in mig_config_document()) {
        for gpu in mig_gpus() {
            match mig_config::parse(&document, &gpu) {
                Ok(layouts) => {
                    check_layouts(&layouts, &gpu)?;
                    let catalog = gpu.catalog.expect("a catalog product");
                    let mapping = mig_config::mapping("node-1", &layouts);
                    prop_assert_eq!(mig_config::layouts_of_mapping(&mapping, catalog), Some(layouts));
                }
                Err(MigConfigError::Overlap { .. } | MigConfigError::BadPosition { .. }
                    | MigConfigError::DoesNotFit { .. }) => {
                    // The same request, checked here independently, does not fit either.
                    let request: serde_json::Value = serde_json::from_str(&document).expect("json");
                    let catalog = gpu.catalog.expect("a catalog product");
                    let any_misfit = request["mig-configs"]["selected"].as_array().expect("list")
                        .iter()
                        .filter(|entry| entry["mig-enabled"] == json!(true))
                        .any(|entry| {
                            // Instances are placed in order: the refusal comes at or before
                            // the first profile the product lacks.
                            let asked: Vec<_> = entry["mig-devices"].as_array().expect("list")
                                .iter()
                                .map_while(|i| Some((catalog.mig_profile(i["name"].as_str()?)?,
                                    u32::try_from(i["position"].as_u64()?).ok()?)))
                                .collect();
                            !fits(&asked)
                        });
                    prop_assert!(any_misfit, "{}: refused {document}", gpu.product);
                }
                Err(_) => {}
            }
        }
    }

    /// Requests of the product's own profiles, at positions 0-7: most are refused as overlaps or
    /// bad positions, a good share fit; each is accepted exactly when it fits.
    #[test]
    fn requests_of_a_product_s_profiles_are_accepted_exactly_when_they_fit(
        product in any::<prop::sample::Index>(),
        picks in proptest::collection::vec((any::<prop::sample::Index>(), 0..8_u32), 1..5),
        gpu_index in 0..8_u32,
    ) {
        let gpus = mig_gpus();
        let gpu = product.get(&gpus);
        let catalog = gpu.catalog.expect("a catalog product");
        let asked: Vec<(&MigProfile, u32)> = picks.iter()
            .map(|(pick, position)| (pick.get(catalog.mig_profiles), *position))
            .collect();
        let instances: Vec<_> = asked.iter()
            .map(|(profile, position)| json!({"name": profile.name, "position": position}))
            .collect();
        let document = json!({"mig-configs": {"selected": [
            {"devices": [gpu_index.to_string()], "mig-enabled": true, "mig-devices": instances}
        ]}}).to_string();
        match mig_config::parse(&document, gpu) {
            Ok(layouts) => {
                prop_assert!(fits(&asked), "accepted what does not fit: {asked:?}");
                check_layouts(&layouts, gpu)?;
                prop_assert_eq!(layouts[&gpu_index].len(), asked.len());
                let mapping = mig_config::mapping("node-1", &layouts);
                prop_assert_eq!(mig_config::layouts_of_mapping(&mapping, catalog), Some(layouts));
            }
            Err(error) => prop_assert!(!fits(&asked), "refused what fits ({error}): {asked:?}"),
        }
    }

    #[test]
    fn any_mapping_text_is_layouts_or_none(text in any::<String>()) {
        for gpu in mig_gpus() {
            let _ = mig_config::layouts_of_mapping(&text, gpu.catalog.expect("catalog"));
        }
    }

    #[test]
    fn any_helm_values_convert_or_fail(text in any::<String>()) {
        let _ = convert::convert(&text);
    }

    /// Values shaped like the reference chart's, with keys and values it may not know.
    #[test]
    fn near_miss_helm_values_convert_or_fail(
        pools in proptest::collection::btree_map("[a-z]{1,6}", (
            proptest::option::of(0..12_i64),
            proptest::option::of(prop_oneof![Just("NVIDIA-A100-SXM4-40GB"), Just("Tesla-T4"),
                Just("H100"), Just(""), Just("x")]),
            proptest::option::of(-5..200_i64),
            proptest::option::of("[a-z]{0,5}"),
            any::<bool>(),
        ), 0..3),
        switches in proptest::collection::btree_map(prop_oneof![Just("devicePlugin"),
            Just("kwokGpuDevicePlugin"), Just("draPlugin"), Just("kwokDraPlugin"),
            Just("computeDomainDraPlugin")], any::<bool>(), 0..5),
        section in prop_oneof![Just("topology"), Just("cluster")],
    ) {
        let pools: serde_json::Map<String, serde_json::Value> = pools.into_iter()
            .map(|(name, (count, product, memory, extra, nested))| {
                let mut gpu = json!({});
                if let Some(count) = count { gpu["gpuCount"] = count.into(); }
                if let Some(product) = product { gpu["gpuProduct"] = product.into(); }
                if let Some(memory) = memory { gpu["gpuMemory"] = memory.into(); }
                if let Some(extra) = extra { gpu[extra.as_str()] = json!(true); }
                // Both document formats: the GPU's keys on the pool, or in a list of GPUs.
                (name, if nested { json!({"gpus": [gpu]}) } else { gpu })
            })
            .collect();
        let mut values = json!({section: {"nodePools": pools}});
        for (switch, enabled) in switches {
            values[switch] = json!({"enabled": enabled});
        }
        let values = values.to_string();
        let _ = convert::convert(&values);
    }
}
