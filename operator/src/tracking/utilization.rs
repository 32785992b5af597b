//! How much of its GPUs a pod uses: its annotation, its workload type, the pool's default.

use fakegpu_model::{
    names::{annotation, label},
    topology::{PodGpuUsage, UtilizationBounds},
    utilization::{UtilizationRange, UtilizationRangeError, WorkloadType},
};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// The pod's utilization annotation and why it does not parse, when it does not (the pod then
/// runs at the pool's default; the user hears of it by an Event).
pub fn malformed_utilization(pod: &Pod) -> Option<(String, UtilizationRangeError)> {
    let text = pod.annotations().get(annotation::SIMULATED_UTILIZATION)?;
    text.parse::<UtilizationRange>()
        .err()
        .map(|error| (text.clone(), error))
}

/// The pod's GPU-sharing annotations that do not parse: each annotation, its value and why
/// (its framebuffer use is then the whole GPU, or what the other annotation says; the user
/// hears of it by an Event).
pub fn malformed_sharing(pod: &Pod) -> Vec<(&'static str, String, String)> {
    let annotations = pod.annotations();
    let fraction = annotations
        .get(annotation::GPU_FRACTION)
        .and_then(|text| Some((annotation::GPU_FRACTION, text, gpu_fraction(text).err()?)));
    let memory = annotations
        .get(annotation::GPU_MEMORY)
        .and_then(|text| Some((annotation::GPU_MEMORY, text, gpu_memory_mib(text).err()?)));
    fraction
        .into_iter()
        .chain(memory)
        .map(|(name, text, problem)| (name, text.clone(), problem))
        .collect()
}

/// A `gpu-fraction` value: the share of one GPU, above 0 and at most 1 (KAI asks for more than
/// one GPU with `gpu-fraction-num-devices`, not a fraction above 1).
fn gpu_fraction(text: &str) -> Result<f64, String> {
    let fraction: f64 = text.trim().parse().map_err(|_| "not a number".to_owned())?;
    if fraction > 0.0 && fraction <= 1.0 {
        Ok(fraction)
    } else {
        Err("a share of one GPU is above 0 and at most 1".into())
    }
}

/// A `gpu-memory` value: MiB of one GPU's memory, a positive whole number.
fn gpu_memory_mib(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("MiB of GPU memory: above 0".into()),
        Ok(mib) => Ok(mib),
        Err(_) => Err("not a whole number of MiB".into()),
    }
}

/// Where a pod's utilization comes from when its annotation does not say.
#[derive(Clone, Copy, Debug, Default)]
pub struct Defaults<'a> {
    /// The pool's `spec.utilization.default`.
    pub pool: Option<UtilizationRange>,
    /// The `spec.priorityClassName` of the pod's PodGroup, if it has one.
    pub priority_class: Option<&'a str>,
}

/// The pod's workload type: its `workloadKind` label, else its PodGroup's priority class.
fn workload_type(pod: &Pod, priority_class: Option<&str>) -> Option<WorkloadType> {
    match pod.labels().get(label::WORKLOAD_KIND) {
        Some(kind) => WorkloadType::from_workload_kind(kind),
        None => priority_class.and_then(WorkloadType::from_priority_class),
    }
}

/// A pod's simulated use of each of its GPUs: the utilization its annotation asks for, else its
/// workload type's range (inference: its request rate), else the pool's default, else the
/// reference's 100%; framebuffer by `gpu-fraction` (default all).
pub fn usage(pod: &Pod, defaults: Defaults<'_>, gpu_memory_mib: u64) -> PodGpuUsage {
    let kind = workload_type(pod, defaults.priority_class);
    let annotations = pod.annotations();
    // Run:ai's idle-GPU pods hold a GPU and do nothing with it (the reference's rule).
    let idle = pod.name_any().starts_with(IDLE_POD_PREFIX);
    let range = annotations
        .get(annotation::SIMULATED_UTILIZATION)
        .and_then(|text| text.parse::<UtilizationRange>().ok())
        .or(idle.then_some(UtilizationRange { min: 0, max: 0 }))
        .or(kind.map(WorkloadType::range))
        .or(defaults.pool)
        .unwrap_or(UtilizationRange { min: 100, max: 100 });
    let fraction = annotations
        .get(annotation::GPU_FRACTION)
        .and_then(|text| self::gpu_fraction(text).ok())
        .unwrap_or(1.0);
    // Bounded by the GPU's memory: the cast cannot overflow.
    let by_fraction = (gpu_memory_mib as f64 * fraction) as u64;
    let fb_used = annotations
        .get(annotation::GPU_MEMORY)
        .and_then(|text| self::gpu_memory_mib(text).ok())
        .map_or(by_fraction, |mib| mib.min(gpu_memory_mib));
    PodGpuUsage {
        utilization: UtilizationBounds {
            min: range.min,
            max: range.max,
        },
        fb_used,
        use_knative_utilization: kind.is_some_and(WorkloadType::uses_knative),
    }
}

/// Name prefix of Run:ai's idle-GPU pods, which run at 0%.
const IDLE_POD_PREFIX: &str = "runai-idle-gpu-";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use fakegpu_model::utilization::UtilizationRange;

    use crate::tracking::{fixtures::*, *};

    #[test]
    fn idle_gpu_pods_run_at_zero() {
        let idle = user(
            &asking("runai-idle-gpu-abc", "2026-01-01T00:00:00Z", 1),
            &[],
        );
        assert_eq!(
            (idle.usage.utilization.min, idle.usage.utilization.max),
            (0, 0)
        );
    }

    #[test]
    fn usage_follows_annotations_and_the_pool_default() {
        let annotated = pod(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"annotations": {"run.ai/simulated-gpu-utilization": "10-30", "gpu-fraction": "0.5"}}}),
        );
        let usage_a = usage(&annotated, Defaults::default(), 1000);
        assert_eq!(
            (
                usage_a.utilization.min,
                usage_a.utilization.max,
                usage_a.fb_used
            ),
            (10, 30, 500)
        );
        let malformed = pod(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"annotations": {"run.ai/simulated-gpu-utilization": "30-10", "gpu-fraction": "7"}}}),
        );
        let default = Defaults {
            pool: Some(UtilizationRange { min: 5, max: 5 }),
            priority_class: None,
        };
        let usage_b = usage(&malformed, default, 1000);
        assert_eq!((usage_b.utilization.min, usage_b.fb_used), (5, 1000));
        assert_eq!(
            usage(&malformed, Defaults::default(), 1).utilization.max,
            100
        );
        assert!(!usage_b.use_knative_utilization);
        let inference = pod(
            "c",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"labels": {"workloadKind": "InferenceWorkload"}}}),
        );
        let inference_usage = usage(&inference, default, 1);
        assert!(inference_usage.use_knative_utilization);
        // Its type's range (idle until the request rate is known) wins over the pool's default.
        assert_eq!(inference_usage.utilization.max, 0);
        // Without a label, the PodGroup's priority class tells the type.
        let grouped = pod(
            "e",
            "2026-01-01T00:00:00Z",
            json!({"metadata": {"annotations": {"pod-group-name": "pg"}}}),
        );
        let train = Defaults {
            priority_class: Some("train"),
            ..default
        };
        let usage_e = usage(&grouped, train, 1);
        assert_eq!(
            (usage_e.utilization.min, usage_e.utilization.max),
            (80, 100)
        );
        assert!(!usage_e.use_knative_utilization);
        let inference_class = Defaults {
            priority_class: Some("inference"),
            ..default
        };
        assert!(usage(&grouped, inference_class, 1).use_knative_utilization);
        for bad in ["30-10", "abc", "-5", "10-200"] {
            let p = pod(
                "d",
                "2026-01-01T00:00:00Z",
                json!({"metadata": {"annotations": {"run.ai/simulated-gpu-utilization": bad}}}),
            );
            assert!(
                malformed_utilization(&p).is_some_and(|(value, _)| value == bad),
                "{bad}"
            );
        }
        assert!(malformed_utilization(&annotated).is_none());
    }

    #[test]
    fn sharing_annotations_that_do_not_parse_are_named() {
        let sharing = |annotations: serde_json::Value| {
            let p = pod(
                "s",
                "2026-01-01T00:00:00Z",
                json!({"metadata": {"annotations": annotations}}),
            );
            let malformed: Vec<String> = malformed_sharing(&p)
                .into_iter()
                .map(|(name, value, _)| format!("{name}={value}"))
                .collect();
            (malformed, usage(&p, Defaults::default(), 1000).fb_used)
        };
        assert_eq!(
            sharing(json!({"gpu-fraction": "0.25", "gpu-memory": "300"})),
            (vec![], 300)
        );
        assert_eq!(sharing(json!({"gpu-fraction": " 1 "})), (vec![], 1000));
        for bad in ["2.5", "abc", "0", "-0.5", ""] {
            assert_eq!(
                sharing(json!({"gpu-fraction": bad})),
                (vec![format!("gpu-fraction={bad}")], 1000),
                "{bad}"
            );
        }
        // A good annotation beside a bad one still counts.
        assert_eq!(
            sharing(json!({"gpu-fraction": "0.5", "gpu-memory": "abc"})),
            (vec!["gpu-memory=abc".to_owned()], 500)
        );
        assert_eq!(
            sharing(json!({"gpu-fraction": "many", "gpu-memory": "0"})).0,
            ["gpu-fraction=many", "gpu-memory=0"]
        );
    }
}

/// [`usage`] over any annotations a pod's author may write: a use within the GPU, whatever
/// they say; what is malformed is reported, what is not is taken.
#[cfg(test)]
mod properties {
    use fakegpu_model::names::annotation;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::tracking::fixtures::pod;

    /// A value as written by hand: numbers, near misses, anything.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            "-?[0-9]{0,4}(\\.[0-9]{0,4})?(e-?[0-9])?",
            "[0-9]{1,3}-[0-9]{1,3}",
            Just("NaN".to_owned()),
            Just("inf".to_owned()),
            Just("-0".to_owned()),
            Just(" 0.5 ".to_owned()),
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_annotations_give_a_use_within_the_gpu(
            fraction in proptest::option::of(value()),
            memory in proptest::option::of(value()),
            utilization in proptest::option::of(value()),
            gpu_memory in 0..200_000_u64,
        ) {
            let mut annotations = serde_json::Map::new();
            for (key, value) in [
                (annotation::GPU_FRACTION, &fraction),
                (annotation::GPU_MEMORY, &memory),
                (annotation::SIMULATED_UTILIZATION, &utilization),
            ] {
                if let Some(value) = value {
                    annotations.insert(key.to_owned(), json!(value));
                }
            }
            let pod = pod("p", "2026-01-01T00:00:00Z", json!({"metadata": {"annotations": annotations}}));
            let used = usage(&pod, Defaults::default(), gpu_memory);
            prop_assert!(used.fb_used <= gpu_memory, "{used:?}");
            let bounds = used.utilization;
            prop_assert!(bounds.min <= bounds.max && bounds.max <= 100, "{used:?}");
            // A malformed value is reported and ignored; a valid one is taken.
            let reported: Vec<_> = malformed_sharing(&pod).into_iter().map(|(key, _, _)| key).collect();
            let fraction_ok = fraction.as_deref().map(gpu_fraction);
            prop_assert_eq!(
                reported.contains(&annotation::GPU_FRACTION),
                fraction_ok.as_ref().is_some_and(Result::is_err)
            );
            let memory_ok = memory.as_deref().map(gpu_memory_mib);
            prop_assert_eq!(
                reported.contains(&annotation::GPU_MEMORY),
                memory_ok.as_ref().is_some_and(Result::is_err)
            );
            if let Some(Ok(mib)) = memory_ok {
                prop_assert_eq!(used.fb_used, mib.min(gpu_memory));
            }
            let range = utilization.as_deref().map(str::parse::<UtilizationRange>);
            prop_assert_eq!(malformed_utilization(&pod).is_some(), range.as_ref().is_some_and(Result::is_err));
            if let Some(Ok(range)) = range {
                prop_assert_eq!((bounds.min, bounds.max), (range.min, range.max));
            }
        }
    }
}
