//! How much of its GPUs a pod uses: its annotation, its workload type, the pool's default.

use super::*;

/// The pod's utilization annotation and why it does not parse, when it does not (the pod then
/// runs at the pool's default; the user hears of it by an Event).
pub fn malformed_utilization(pod: &Pod) -> Option<(String, UtilizationRangeError)> {
    let text = pod.annotations().get(annotation::SIMULATED_UTILIZATION)?;
    text.parse::<UtilizationRange>()
        .err()
        .map(|error| (text.clone(), error))
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
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|f| *f > 0.0 && *f <= 1.0)
        .unwrap_or(1.0);
    // Bounded by the GPU's memory: the cast cannot overflow.
    let by_fraction = (gpu_memory_mib as f64 * fraction) as u64;
    let fb_used = annotations
        .get(annotation::GPU_MEMORY)
        .and_then(|text| text.trim().parse::<u64>().ok())
        .filter(|mib| *mib > 0)
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
