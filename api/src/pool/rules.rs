//! CEL rules (`x-kubernetes-validations`) of the `GpuNodePool` CRD.
//!
//! Rules that need product facts (GPUs per node, compute capability, MIG support) are generated
//! from the builtin catalog in [`fakegpu_model::profiles`], so the CRD and the catalog cannot disagree.
//! A profile the catalog does not know passes these rules; the operator reports it as a
//! condition instead (custom profiles may exist one day).

use kube::core::{Message, Rule};

use fakegpu_model::profiles::PROFILES;

/// CEL map literal from builtin profile name to a value.
fn profile_map(value: impl Fn(&fakegpu_model::profiles::GpuProfile) -> String) -> String {
    let entries: Vec<String> = PROFILES
        .iter()
        .map(|p| format!("'{}': {}", p.name, value(p)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// CEL expression, evaluated on the spec: is the pool's GPU count per node known here?
fn gpu_count_known() -> String {
    format!(
        "(has(self.gpu.count) || (has(self.gpu.profile) && self.gpu.profile in {}))",
        profile_map(|p| p.gpus_per_node.to_string())
    )
}

/// CEL expression, evaluated on the spec: GPUs per node (only meaningful when known).
fn gpu_count() -> String {
    format!(
        "(has(self.gpu.count) ? self.gpu.count : {}[self.gpu.profile])",
        profile_map(|p| p.gpus_per_node.to_string())
    )
}

/// A spec-level rule that holds trivially when `applies` is false or the GPU count is unknown,
/// and otherwise requires `check(<CEL expression of the GPUs per node>)`.
fn when_gpu_count_known(applies: &str, check: impl FnOnce(&str) -> String) -> String {
    format!(
        "!({applies}) || !{known} || {check}",
        known = gpu_count_known(),
        check = check(&gpu_count())
    )
}

pub fn numa_zones_within_gpu_count() -> Rule {
    Rule::new(when_gpu_count_known("has(self.numa)", |count| {
        format!("self.numa.zones <= {count}")
    }))
    // A static message: CEL's cost estimate of `string(int)` is unbounded, which a message
    // expression naming the numbers would blow the CRD's cost budget with.
    .message("numa.zones must not exceed the GPUs per node")
    .field_path(".numa.zones")
}

pub fn gpus_per_zone_sum_to_gpu_count() -> Rule {
    Rule::new(when_gpu_count_known(
        "has(self.numa) && has(self.numa.gpusPerZone)",
        |count| format!("self.numa.gpusPerZone.sum() == {count}"),
    ))
    .message("numa.gpusPerZone must add up to the GPUs per node")
    .field_path(".numa.gpusPerZone")
}

pub fn mig_needs_capable_profile() -> Rule {
    let not_capable: Vec<String> = PROFILES
        .iter()
        .filter(|p| !p.mig_capable())
        .map(|p| format!("'{}'", p.name))
        .collect();
    Rule::new(format!(
        "!has(self.mig) || !has(self.gpu.profile) || !(self.gpu.profile in [{}])",
        not_capable.join(", ")
    ))
    .message(Message::Expression(
        "'profile ' + self.gpu.profile + ' does not support MIG'".into(),
    ))
    .field_path(".mig")
}

pub fn mig_gpu_indices_within_count() -> Rule {
    Rule::new(when_gpu_count_known("has(self.mig)", |count| {
        format!("self.mig.layout.all(l, !has(l.gpus) || l.gpus.all(i, i < {count}))")
    }))
    .message("mig.layout names a GPU index beyond the GPUs per node")
    .field_path(".mig.layout")
}

pub fn explicit_gpu_is_complete() -> Rule {
    Rule::new("has(self.profile) || (has(self.product) && has(self.count) && has(self.memoryMiB))")
        .message("without a profile, product, count and memoryMiB are all required")
}

pub fn mock_needs_profile() -> Rule {
    Rule::new("self.backend != 'mock' || has(self.profile)")
        .message(
            "the mock backend needs a profile: NVIDIA's components read the GPUs' architecture, \
             brand and compute capability from fakegpu's NVML library, which takes them from it",
        )
        .field_path(".profile")
}

pub fn compute_capability_matches_profile() -> Rule {
    let capabilities = profile_map(|p| format!("'{}'", p.compute_capability));
    Rule::new(format!(
        "!has(self.profile) || !has(self.computeCapability) || !(self.profile in {m}) || {m}[self.profile] == self.computeCapability",
        m = capabilities
    ))
    .message(Message::Expression(format!(
        "'computeCapability ' + self.computeCapability + ' contradicts profile ' + self.profile + ', whose compute capability is ' + {m}[self.profile]",
        m = capabilities
    )))
    .field_path(".computeCapability")
}

pub fn some_interface_served() -> Rule {
    Rule::new("self.devicePlugin || self.dra")
        .message("at least one of devicePlugin and dra must be true")
}

pub fn single_strategy_is_homogeneous() -> Rule {
    Rule::new(
        "self.strategy != 'single' || self.layout.all(l, l.profiles.all(p, p == self.layout[0].profiles[0]))",
    )
    .message("strategy single needs one MIG profile for every instance on every GPU")
    .field_path(".layout")
}

pub fn gpus_per_zone_has_one_entry_per_zone() -> Rule {
    Rule::new("!has(self.gpusPerZone) || size(self.gpusPerZone) == self.zones")
        .message("gpusPerZone needs exactly one entry per zone")
        .field_path(".gpusPerZone")
}

/// `numa.<field>` (`cpuPerZone`, `memoryPerZone`): a positive Kubernetes quantity. The schema
/// of a quantity accepts any string or integer; the API server's CEL quantity library tells.
pub fn positive_quantity(field: &str) -> Rule {
    Rule::new(format!(
        "!has(self.{field}) || (type(self.{field}) == int ? self.{field} > 0 : \
         isQuantity(self.{field}) && quantity(self.{field}).isGreaterThan(quantity('0')))"
    ))
    .message(Message::Message(format!(
        "numa.{field} must be a positive quantity, such as 16, 500m or 64Gi"
    )))
    .field_path(format!(".{field}"))
}

/// `nodeSelector {}` selects every node, including nodes without GPUs and control-plane
/// nodes: the pool would label them all. Refused; an empty `matchLabels` or `matchExpressions`
/// is the same selector.
pub fn node_selector_selects_some_nodes() -> Rule {
    Rule::new(
        "!has(self.nodeSelector) \
         || (has(self.nodeSelector.matchLabels) && size(self.nodeSelector.matchLabels) > 0) \
         || (has(self.nodeSelector.matchExpressions) && size(self.nodeSelector.matchExpressions) > 0)",
    )
    .message(
        "nodeSelector {} selects every node, GPU node or not: name the pool's nodes with \
         matchLabels or matchExpressions, or leave nodeSelector out to select the nodes \
         labelled run.ai/simulated-gpu-node-pool=<pool>",
    )
    .field_path(".nodeSelector")
}

pub fn remote_distance_exceeds_local() -> Rule {
    Rule::new("self.remote > self.self")
        .message("the remote distance must be greater than the distance of a zone to itself")
        .field_path(".remote")
}

/// Guards the rules below: the schema's pattern reports malformed strings on its own.
fn utilization_guard() -> String {
    format!("!self.matches('{}')", fakegpu_model::utilization::PATTERN)
}

pub fn utilization_at_most_hundred() -> Rule {
    Rule::new(format!(
        "{} || self.split('-').all(p, int(p) <= 100)",
        utilization_guard()
    ))
    .message("utilization is a percentage: at most 100")
}

pub fn utilization_min_not_above_max() -> Rule {
    Rule::new(format!(
        "{} || !self.contains('-') || int(self.split('-')[0]) <= int(self.split('-')[1])",
        utilization_guard()
    ))
    .message("utilization range MIN-MAX has MIN above MAX")
}

pub fn other_resource_is_not_gpu() -> Rule {
    Rule::new("self != 'nvidia.com/gpu' && !self.startsWith('nvidia.com/mig-')")
        .message("GPUs and MIG devices come from spec.gpu and spec.mig, not otherResources")
}
