//! Run:ai's dynamic MIG annotation (`run.ai/mig.config`) on a node of each MIG-capable product,
//! and the mapping fakegpu answers with: any text is layouts or an error; accepted layouts sit
//! on NVML's placements without overlap, and the mapping reads back as the layouts.
#![no_main]

use std::sync::LazyLock;

use fakegpu_api::pool::{
    GpuNodePoolSpec, mig_config,
    resolve::{ResolvedGpu, resolve_pool},
};
use fakegpu_model::{mig_slices::placements, profiles::PROFILES};
use libfuzzer_sys::fuzz_target;

static GPUS: LazyLock<Vec<ResolvedGpu>> = LazyLock::new(|| {
    PROFILES
        .iter()
        .filter(|p| p.mig_capable())
        .map(|p| {
            let spec: GpuNodePoolSpec =
                serde_json::from_value(serde_json::json!({"gpu": {"profile": p.name, "count": 8}}))
                    .expect("spec");
            resolve_pool(&spec).expect("a catalog profile resolves")
        })
        .collect()
});

fuzz_target!(|text: &str| {
    for gpu in GPUS.iter() {
        let catalog = gpu.catalog.expect("a catalog product");
        let _ = mig_config::layouts_of_mapping(text, catalog);
        let Ok(layouts) = mig_config::parse(text, gpu) else {
            continue;
        };
        for (index, instances) in &layouts {
            assert!(*index < gpu.count);
            let mut taken = [false; 8];
            for instance in instances {
                assert!(placements(instance.profile).any(|s| s == instance.placement_start));
                let size = instance.profile.memory_slices.max(1);
                for slice in instance.placement_start..instance.placement_start + size {
                    let slot = &mut taken[slice as usize];
                    assert!(!*slot, "overlap on GPU {index}: {instances:?}");
                    *slot = true;
                }
            }
        }
        let mapping = mig_config::mapping("node-1", &layouts);
        assert_eq!(
            mig_config::layouts_of_mapping(&mapping, catalog),
            Some(layouts)
        );
    }
});
