//! A pool's MIG layout resolved against the product's MIG profiles: which instances each GPU
//! holds and where they sit on its eight memory slices. What the API server cannot check
//! (profiles of an explicit product, fit, placement) is checked here and becomes a pool
//! condition, never a crash.

use std::collections::BTreeMap;

use fakegpu_model::{
    mig_slices::{MemorySlices, placements},
    profiles::{GpuProfile, MIG_COMPUTE_SLICES as COMPUTE_SLICES, MigProfile},
};

use crate::pool::{GpuNodePoolSpec, MigStrategy};

/// One MIG instance on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigInstance {
    pub profile: &'static MigProfile,
    /// First memory slice it occupies (NVML's placement start).
    pub placement_start: u32,
}

/// The MIG instances of every partitioned GPU of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigPlan {
    pub strategy: MigStrategy,
    /// GPU index -> its instances, by placement; GPUs not here stay whole.
    pub gpus: BTreeMap<u32, Vec<MigInstance>>,
}

impl MigPlan {
    /// Instances of each profile on the node, by profile name.
    pub fn counts(&self) -> BTreeMap<&'static str, (u32, &'static MigProfile)> {
        let mut counts = BTreeMap::new();
        for instance in self.gpus.values().flatten() {
            counts
                .entry(instance.profile.name)
                .or_insert((0, instance.profile))
                .0 += 1;
        }
        counts
    }

    /// Instances on the node.
    pub fn instances(&self) -> u32 {
        self.gpus.values().map(|i| i.len() as u32).sum()
    }

    pub fn is_partitioned(&self, gpu: u32) -> bool {
        self.gpus.contains_key(&gpu)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MigError {
    #[error("{0} does not support MIG")]
    NotCapable(String),
    #[error("{profile:?} is not a MIG profile of {product} (it has {valid})")]
    UnknownProfile {
        profile: String,
        product: String,
        valid: String,
    },
    #[error("mig.layout names GPU {gpu}, but nodes have {count} GPUs")]
    NoSuchGpu { gpu: u32, count: u32 },
    #[error("mig.layout lists GPU {0} more than once")]
    Repeated(u32),
    #[error("profiles {profiles} do not fit on one GPU ({reason})")]
    DoesNotFit { profiles: String, reason: String },
    #[error("strategy single needs every GPU partitioned; GPU {0} is not")]
    SingleNeedsAll(u32),
}

/// Whether `profiles`, together on one GPU, stay within its compute slices and each profile's
/// instance limit.
pub(super) fn check_counts(profiles: &[&'static MigProfile]) -> Result<(), String> {
    let compute: u32 = profiles.iter().map(|p| p.compute_slices).sum();
    if compute > COMPUTE_SLICES {
        return Err(format!(
            "{compute} compute slices, a GPU has {COMPUTE_SLICES}"
        ));
    }
    for profile in profiles {
        let same = profiles.iter().filter(|p| p.name == profile.name).count() as u32;
        if same > profile.max_instances {
            return Err(format!(
                "{same} x {}, at most {}",
                profile.name, profile.max_instances
            ));
        }
    }
    Ok(())
}

/// `name` among the MIG profiles of `catalog` (product `product`).
pub(super) fn profile_named(
    catalog: &'static GpuProfile,
    product: &str,
    name: &str,
) -> Result<&'static MigProfile, MigError> {
    catalog
        .mig_profile(name)
        .ok_or_else(|| MigError::UnknownProfile {
            profile: name.to_owned(),
            product: product.to_owned(),
            valid: catalog
                .mig_profiles
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Places `profiles` on one GPU's memory slices: largest first, each at its lowest placement
/// that leaves room for the rest. Greedy is not enough: 3g + 2g + 1g + 1g fits only with the
/// 3g at slice 4, as on real GPUs.
fn place(profiles: &[&'static MigProfile]) -> Result<Vec<MigInstance>, String> {
    check_counts(profiles)?;
    let mut order: Vec<&'static MigProfile> = profiles.to_vec();
    order.sort_by(|a, b| {
        b.memory_slices
            .cmp(&a.memory_slices)
            .then(a.name.cmp(b.name))
    });
    let mut placed = Vec::with_capacity(order.len());
    if !place_from(&order, MemorySlices::default(), &mut placed) {
        return Err("no placement of them on the memory slices".to_owned());
    }
    placed.sort_by_key(|i| i.placement_start);
    Ok(placed)
}

/// Depth-first over the placements of `profiles` in order (at most seven instances on eight
/// slices, so the search is tiny).
fn place_from(
    profiles: &[&'static MigProfile],
    slices: MemorySlices,
    placed: &mut Vec<MigInstance>,
) -> bool {
    let Some((profile, rest)) = profiles.split_first() else {
        return true;
    };
    for start in placements(profile) {
        if !slices.is_free(profile, start) {
            continue;
        }
        let mut taken = slices;
        taken.take(profile, start);
        placed.push(MigInstance {
            profile,
            placement_start: start,
        });
        if place_from(rest, taken, placed) {
            return true;
        }
        placed.pop();
    }
    false
}

/// The pool's MIG plan for nodes of `count` GPUs of `product` (`catalog`: its catalog entry),
/// `None` when the pool sets no MIG.
pub fn plan(
    spec: &GpuNodePoolSpec,
    product: &str,
    count: u32,
    catalog: Option<&'static GpuProfile>,
) -> Result<Option<MigPlan>, MigError> {
    let Some(mig) = &spec.mig else {
        return Ok(None);
    };
    let catalog = catalog
        .filter(|p| p.mig_capable())
        .ok_or_else(|| MigError::NotCapable(product.to_owned()))?;
    let mut gpus = BTreeMap::new();
    for entry in &mig.layout {
        let profiles = entry
            .profiles
            .iter()
            .map(|name| profile_named(catalog, product, name))
            .collect::<Result<Vec<_>, _>>()?;
        let instances = place(&profiles).map_err(|reason| MigError::DoesNotFit {
            profiles: entry.profiles.join(", "),
            reason,
        })?;
        let indices: Vec<u32> = if entry.gpus.is_empty() {
            (0..count).collect()
        } else {
            entry.gpus.clone()
        };
        for gpu in indices {
            if gpu >= count {
                return Err(MigError::NoSuchGpu { gpu, count });
            }
            if gpus.insert(gpu, instances.clone()).is_some() {
                return Err(MigError::Repeated(gpu));
            }
        }
    }
    if mig.strategy == MigStrategy::Single
        && let Some(whole) = (0..count).find(|g| !gpus.contains_key(g))
    {
        return Err(MigError::SingleNeedsAll(whole));
    }
    Ok(Some(MigPlan {
        strategy: mig.strategy,
        gpus,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use fakegpu_model::profiles::profile;

    fn spec(mig: serde_json::Value) -> GpuNodePoolSpec {
        serde_json::from_value(json!({"gpu": {"profile": "a100-80gb"}, "mig": mig}))
            .expect("test spec")
    }

    fn a100() -> Option<&'static GpuProfile> {
        profile("a100-80gb")
    }

    #[test]
    fn instances_are_placed_where_nvml_allows() {
        let spec = spec(json!({"strategy": "mixed", "layout": [
            {"gpus": [0, 1], "profiles": ["1g.10gb", "3g.40gb", "2g.20gb", "1g.10gb"]}]}));
        let plan = plan(&spec, "A100", 8, a100()).expect("valid").expect("MIG");
        let starts: Vec<(&str, u32)> = plan.gpus[&0]
            .iter()
            .map(|i| (i.profile.name, i.placement_start))
            .collect();
        // The 3g cannot go first at 0: the two 1g would then need slice 7, where a 1g has no
        // placement. With the 3g at 4, the 2g and the 1g take 0-3.
        assert_eq!(
            starts,
            [
                ("2g.20gb", 0),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("3g.40gb", 4)
            ]
        );
        assert_eq!(plan.instances(), 8);
        assert_eq!(plan.counts()["1g.10gb"].0, 4);
        assert!(!plan.is_partitioned(2));
    }

    #[test]
    fn placements_are_nvmls() {
        let a100 = a100().expect("catalog");
        let starts = |name: &str| -> Vec<u32> {
            placements(a100.mig_profile(name).expect("profile")).collect()
        };
        assert_eq!(starts("1g.10gb"), [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(starts("1g.20gb"), [0, 2, 4, 6]);
        assert_eq!(starts("2g.20gb"), [0, 2, 4]);
        assert_eq!(starts("3g.40gb"), [0, 4]);
        assert_eq!(starts("4g.40gb"), [0]);
        assert_eq!(starts("7g.80gb"), [0]);
        // Every profile of every product reaches its instance limit on one GPU.
        for product in fakegpu_model::profiles::PROFILES {
            for mig in product.mig_profiles {
                let repeated = vec![mig; mig.max_instances as usize];
                let placed = place(&repeated)
                    .unwrap_or_else(|e| panic!("{} x{}: {e}", mig.name, mig.max_instances));
                assert_eq!(placed.len(), mig.max_instances as usize);
            }
        }
    }

    #[test]
    fn bad_layouts_are_named() {
        let cases = [
            (
                json!({"strategy": "mixed", "layout": [{"profiles": ["1g.5gb"]}]}),
                "is not a MIG profile",
            ),
            (
                json!({"strategy": "mixed", "layout": [{"profiles": ["7g.80gb", "1g.10gb"]}]}),
                "do not fit",
            ),
            (
                json!({"strategy": "mixed", "layout": [{"profiles": ["1g.10gb+me", "1g.10gb+me"]}]}),
                "at most 1",
            ),
            (
                json!({"strategy": "mixed", "layout": [{"gpus": [9], "profiles": ["1g.10gb"]}]}),
                "GPU 9",
            ),
            (
                json!({"strategy": "mixed", "layout": [{"gpus": [1], "profiles": ["1g.10gb"]}, {"gpus": [1], "profiles": ["2g.20gb"]}]}),
                "more than once",
            ),
            (
                json!({"strategy": "single", "layout": [{"gpus": [0], "profiles": ["1g.10gb"]}]}),
                "every GPU",
            ),
        ];
        for (mig, message) in cases {
            let error = plan(&spec(mig.clone()), "A100", 8, a100()).expect_err("invalid");
            assert!(error.to_string().contains(message), "{mig}: {error}");
        }
        let not_capable = plan(
            &spec(json!({"strategy": "mixed", "layout": [{"profiles": ["1g.10gb"]}]})),
            "NVIDIA L40S",
            4,
            profile("l40s"),
        );
        assert!(matches!(not_capable, Err(MigError::NotCapable(_))));
    }
}

/// [`place`] against an exhaustive search of its own: it places exactly the layouts that fit.
#[cfg(test)]
mod properties {
    use fakegpu_model::profiles::{MIG_MEMORY_SLICES, PROFILES};
    use proptest::prelude::*;

    use super::*;

    /// Whether `profiles`, in any order, have placements on one GPU that share no memory slice.
    fn fits_somehow(profiles: &[&'static MigProfile], taken: [bool; 8]) -> bool {
        let Some((profile, rest)) = profiles.split_first() else {
            return true;
        };
        placements(profile).any(|start| {
            let mut after = taken;
            (start..start + profile.memory_slices.max(1)).all(|s| {
                after
                    .get_mut(s as usize)
                    .is_some_and(|t| !std::mem::replace(t, true))
            }) && fits_somehow(rest, after)
        })
    }

    /// A product that has MIG and some of its profiles, repeats allowed.
    fn layouts() -> impl Strategy<Value = Vec<&'static MigProfile>> {
        let capable: Vec<&'static GpuProfile> =
            PROFILES.iter().filter(|p| p.mig_capable()).collect();
        proptest::sample::select(capable).prop_flat_map(|product| {
            let profiles: Vec<&'static MigProfile> = product.mig_profiles.iter().collect();
            proptest::collection::vec(proptest::sample::select(profiles), 0..9)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn what_fits_is_placed_and_placed_without_overlap(profiles in layouts()) {
            let fits = check_counts(&profiles).is_ok() && fits_somehow(&profiles, [false; 8]);
            match place(&profiles) {
                Ok(placed) => {
                    prop_assert!(fits, "placed what does not fit: {profiles:?}");
                    let mut asked: Vec<_> = profiles.iter().map(|p| p.name).collect();
                    let mut got: Vec<_> = placed.iter().map(|i| i.profile.name).collect();
                    asked.sort_unstable();
                    got.sort_unstable();
                    prop_assert_eq!(asked, got);
                    let mut slices = [false; MIG_MEMORY_SLICES as usize];
                    for instance in &placed {
                        prop_assert!(placements(instance.profile).any(|s| s == instance.placement_start));
                        let size = instance.profile.memory_slices.max(1);
                        for s in instance.placement_start..instance.placement_start + size {
                            let slice = slices.get_mut(s as usize);
                            prop_assert!(slice.as_ref().is_some_and(|t| !**t), "{placed:?}");
                            if let Some(t) = slice {
                                *t = true;
                            }
                        }
                    }
                }
                Err(_) => prop_assert!(!fits, "refused what fits: {profiles:?}"),
            }
        }
    }
}
