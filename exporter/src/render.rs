//! Documents and utilization draws into dcgm-exporter's series (pure), and those into the
//! Prometheus text format.

use std::{
    collections::{HashMap, HashSet},
    time::Instant,
};

use fakegpu_api::{
    names::{dcgm, metric},
    report::NodeReport,
    topology::{GpuStatus, GpuTopology, NodeTopology, long_bus_id},
};
use prometheus::{
    Encoder, TextEncoder,
    proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType},
};

use crate::{documents::Snapshot, draws::Draws};

/// One GPU's or MIG instance's values and labels (in [`dcgm::LABELS`] order).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSample {
    pub labels: [String; 10],
    /// A MIG instance's [`dcgm::MIG_LABELS`] values; `None` for a whole GPU.
    pub mig: Option<[String; 2]>,
    /// The GPU's or the instance's UUID.
    pub uuid: String,
    pub utilization: f64,
    pub fb_used: f64,
    pub fb_free: f64,
}

/// What one sample is of: a whole GPU (keyed by its UUID) or one of its MIG instances.
struct Target<'a> {
    key: &'a str,
    status: &'a GpuStatus,
    /// Framebuffer, MiB.
    memory: u64,
    mig: Option<[String; 2]>,
}

/// One sample: utilization the sum of the pods' values on the target (at most 100),
/// framebuffer used the sum of their allocations (at most its memory), the holder's pod
/// labels. A pod's value is its Knative request rate when it is an inference pod and `knative`
/// has its UID, else a draw from its range.
fn sample(
    node: &str,
    document: &NodeTopology,
    gpu: &GpuTopology,
    target: Target<'_>,
    rates: (&Draws, &HashMap<String, u8>, Instant),
) -> GpuSample {
    let Target {
        key,
        status,
        memory,
        mig,
    } = target;
    let (draws, knative, now) = rates;
    let usage = &status.pod_gpu_usage_status;
    let utilization: u32 = usage
        .iter()
        .map(|(pod, u)| {
            let rate = u
                .use_knative_utilization
                .then(|| knative.get(pod))
                .flatten();
            u32::from(
                rate.copied()
                    .unwrap_or_else(|| draws.value(pod, key, u.utilization, now)),
            )
        })
        .sum();
    let used = status.memory_used(memory);
    let holder = &status.allocated_by;
    GpuSample {
        labels: [
            gpu.index.to_string(),
            gpu.id.clone(),
            long_bus_id(&gpu.pci_bus_id),
            format!("nvidia{}", gpu.index),
            document.gpu_product.clone(),
            node.to_owned(),
            document.driver_version.clone(),
            holder.container.clone(),
            holder.namespace.clone(),
            holder.pod.clone(),
        ],
        mig,
        uuid: key.to_owned(),
        utilization: f64::from(utilization.min(100)),
        fb_used: used as f64,
        fb_free: memory.saturating_sub(used) as f64,
    }
}

/// The samples of one node: each whole GPU, and each MIG instance of a partitioned GPU (as
/// dcgm-exporter reports MIG-enabled GPUs: per instance, with its profile and instance id).
pub fn node_samples(
    node: &str,
    document: &NodeTopology,
    draws: &Draws,
    knative: &HashMap<String, u8>,
    now: Instant,
) -> Vec<GpuSample> {
    let rates = (draws, knative, now);
    document
        .gpus
        .iter()
        .flat_map(|gpu| {
            if gpu.mig_devices.is_empty() {
                let whole = Target {
                    key: &gpu.id,
                    status: &gpu.status,
                    memory: document.gpu_memory,
                    mig: None,
                };
                return vec![sample(node, document, gpu, whole, rates)];
            }
            gpu.mig_devices
                .iter()
                .map(|mig| {
                    let target = Target {
                        key: &mig.uuid,
                        status: &mig.status,
                        memory: mig.memory,
                        mig: Some([mig.profile.clone(), mig.gpu_instance_id().to_string()]),
                    };
                    sample(node, document, gpu, target, rates)
                })
                .collect()
        })
        .collect()
}

/// Every GPU of every node; draws of pods gone from the documents are forgotten.
pub fn samples(
    snapshot: &Snapshot,
    draws: &Draws,
    knative: &HashMap<String, u8>,
    now: Instant,
) -> Vec<GpuSample> {
    let samples: Vec<GpuSample> = snapshot
        .iter()
        .flat_map(|(node, document)| node_samples(node, document, draws, knative, now))
        .collect();
    // One pass over the documents, not one per remembered draw: scrapes of thousands of GPUs.
    let live: HashSet<(&str, &str)> = snapshot
        .values()
        .flat_map(|d| &d.gpus)
        .flat_map(GpuTopology::statuses)
        .flat_map(|(key, status)| {
            status
                .pod_gpu_usage_status
                .keys()
                .map(move |pod| (pod.as_str(), key))
        })
        .collect();
    draws.retain(|pod, gpu| live.contains(&(pod, gpu)));
    samples
}

/// Whether any pod of `snapshot` takes its utilization from Knative.
pub fn wants_knative(snapshot: &Snapshot) -> bool {
    snapshot.values().any(|d| document_wants_knative(d))
}

/// Whether any pod of `document` takes its utilization from Knative.
pub fn document_wants_knative(document: &NodeTopology) -> bool {
    document
        .gpus
        .iter()
        .flat_map(GpuTopology::statuses)
        .any(|(_, s)| {
            s.pod_gpu_usage_status
                .values()
                .any(|u| u.use_knative_utilization)
        })
}

/// What nvidia-smi is told about `node`: its document and the utilization its GPUs' series
/// carry now (the same draws, so the two agree).
pub fn node_report(
    node: &str,
    document: &NodeTopology,
    draws: &Draws,
    knative: &HashMap<String, u8>,
    now: Instant,
) -> NodeReport {
    // By the GPU's UUID, or the MIG instance's.
    let utilization = node_samples(node, document, draws, knative, now)
        .into_iter()
        .map(|sample| (sample.uuid, sample.utilization as u8))
        .collect();
    NodeReport {
        node: node.to_owned(),
        topology: document.clone(),
        utilization,
    }
}

fn pair(name: &str, value: &str) -> LabelPair {
    let mut pair = LabelPair::default();
    pair.set_name(name.to_owned());
    pair.set_value(value.to_owned());
    pair
}

/// A gauge family with one metric per sample that `include` keeps, labelled in
/// dcgm-exporter's order (a MIG instance's labels after `modelName`).
fn gauge_family(
    name: &str,
    help: &str,
    labels: &[&str; 10],
    samples: &[GpuSample],
    include: impl Fn(&GpuSample) -> bool,
    value: impl Fn(&GpuSample) -> f64,
) -> MetricFamily {
    let metrics = samples
        .iter()
        .filter(|s| include(s))
        .map(|sample| {
            let mut pairs: Vec<LabelPair> = labels
                .iter()
                .zip(&sample.labels)
                .map(|(name, value)| pair(name, value))
                .collect();
            if let Some(mig) = &sample.mig {
                for (offset, (name, value)) in dcgm::MIG_LABELS.iter().zip(mig).enumerate() {
                    pairs.insert(dcgm::HOSTNAME_LABEL + offset, pair(name, value));
                }
            }
            let mut gauge = Gauge::default();
            gauge.set_value(value(sample));
            let mut metric = Metric::default();
            metric.set_label(pairs);
            metric.set_gauge(gauge);
            metric
        })
        .collect();
    let mut family = MetricFamily::default();
    family.set_name(name.to_owned());
    family.set_help(help.to_owned());
    family.set_field_type(MetricType::GAUGE);
    family.set_metric(metrics);
    family
}

/// The text format of `samples`; `hostname_label` names the hostname label (`Hostname` or
/// `hostname`); `knative_up`, once Prometheus was asked, whether it answered.
///
/// The families are built directly, not through a registry of gauge vectors: at 8 000 GPUs
/// the registry's hashing of every label set on every scrape took most of a scrape's time.
pub fn encode(
    samples: &[GpuSample],
    hostname_label: &str,
    knative_up: Option<bool>,
) -> Result<String, prometheus::Error> {
    let mut labels = dcgm::LABELS;
    labels[dcgm::HOSTNAME_LABEL] = hostname_label;
    let mut families = vec![
        // dcgm-exporter reports no GPU utilization for MIG instances, only profiling metrics.
        gauge_family(
            dcgm::GPU_UTIL,
            "GPU utilization (in %).",
            &labels,
            samples,
            |s| s.mig.is_none(),
            |s| s.utilization,
        ),
        gauge_family(
            dcgm::FB_USED,
            "Framebuffer memory used (in MiB).",
            &labels,
            samples,
            |_| true,
            |s| s.fb_used,
        ),
        gauge_family(
            dcgm::FB_FREE,
            "Framebuffer memory free (in MiB).",
            &labels,
            samples,
            |_| true,
            |s| s.fb_free,
        ),
        gauge_family(
            dcgm::GR_ENGINE_ACTIVE,
            "Ratio of time the graphics engine is active.",
            &labels,
            samples,
            |_| true,
            |s| s.utilization / 100.0,
        ),
    ];
    if let Some(up) = knative_up {
        let gauge = prometheus::IntGauge::new(
            metric::EXPORTER_KNATIVE_UP,
            "1 when Prometheus answered the last request-rate query for inference pods.",
        )?;
        gauge.set(i64::from(up));
        families.extend(prometheus::core::Collector::collect(&gauge));
    }
    let mut buffer = Vec::with_capacity(samples.len() * 4 * 320);
    TextEncoder::new().encode(&families, &mut buffer)?;
    String::from_utf8(buffer).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc, time::Duration};

    use fakegpu_api::topology::{
        AllocatedBy, GpuStatus, GpuTopology, PodGpuUsage, UtilizationBounds,
    };

    use super::*;

    fn document() -> NodeTopology {
        let busy = GpuStatus {
            allocated_by: AllocatedBy {
                namespace: "team-a".into(),
                pod: "job-0".into(),
                container: "train".into(),
            },
            pod_gpu_usage_status: BTreeMap::from([(
                "uid-1".to_owned(),
                PodGpuUsage {
                    utilization: UtilizationBounds { min: 40, max: 40 },
                    fb_used: 30000,
                    use_knative_utilization: false,
                },
            )]),
        };
        NodeTopology {
            gpu_memory: 81559,
            gpu_product: "NVIDIA H100 80GB HBM3".into(),
            driver_version: "550.163.01".into(),
            gpus: vec![
                GpuTopology {
                    id: "GPU-a".into(),
                    index: 0,
                    pci_bus_id: "0000:01:00.0".into(),
                    status: busy,
                    ..Default::default()
                },
                GpuTopology {
                    id: "GPU-b".into(),
                    index: 1,
                    pci_bus_id: "0000:02:00.0".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn series_follow_the_pods_on_each_gpu() {
        let draws = Draws::new(Duration::from_secs(10));
        let snapshot = BTreeMap::from([("node-1".to_owned(), Arc::new(document()))]);
        let samples = samples(&snapshot, &draws, &HashMap::new(), Instant::now());
        assert_eq!(samples[0].utilization, 40.0);
        assert_eq!((samples[0].fb_used, samples[0].fb_free), (30000.0, 51559.0));
        assert_eq!(samples[1].utilization, 0.0);
        assert_eq!(samples[1].fb_free, 81559.0);
        let text = encode(&samples, "Hostname", None).expect("encodes");
        assert!(!text.contains("knative"));
        // Labels in dcgm-exporter's order; Prometheus reads them by name either way.
        let line = text
            .lines()
            .find(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.contains(r#"UUID="GPU-a""#))
            .expect("GPU-a utilization series");
        for pair in [
            r#"gpu="0""#,
            r#"pci_bus_id="00000000:01:00.0""#,
            r#"device="nvidia0""#,
            r#"modelName="NVIDIA H100 80GB HBM3""#,
            r#"Hostname="node-1""#,
            r#"DCGM_FI_DRIVER_VERSION="550.163.01""#,
            r#"container="train""#,
            r#"namespace="team-a""#,
            r#"pod="job-0""#,
        ] {
            assert!(line.contains(pair), "{pair} missing in {line}");
        }
        assert!(line.ends_with(" 40"), "{line}");
        assert!(text.contains("DCGM_FI_DEV_FB_USED{"), "{text}");
        assert!(
            encode(&samples, "hostname", Some(false))
                .expect("encodes")
                .contains(r#"hostname="node-1""#)
        );
    }

    #[test]
    fn inference_pods_take_their_request_rate_and_fall_back_to_their_range() {
        let mut document = document();
        if let Some(usage) = document.gpus[0]
            .status
            .pod_gpu_usage_status
            .get_mut("uid-1")
        {
            usage.use_knative_utilization = true;
        }
        let snapshot = BTreeMap::from([("node-1".to_owned(), Arc::new(document))]);
        assert!(wants_knative(&snapshot));
        let draws = Draws::new(Duration::from_secs(10));
        let rates = HashMap::from([("uid-1".to_owned(), 27u8)]);
        let with_rate = samples(&snapshot, &draws, &rates, Instant::now());
        assert_eq!(with_rate[0].utilization, 27.0);
        // Prometheus did not answer: the pod's range (40-40) again.
        let without = samples(&snapshot, &draws, &HashMap::new(), Instant::now());
        assert_eq!(without[0].utilization, 40.0);
        let text = encode(&without, "Hostname", Some(false)).expect("encodes");
        assert!(text.contains("fakegpu_exporter_knative_up 0"), "{text}");
        let report = node_report(
            "node-1",
            &snapshot["node-1"],
            &draws,
            &rates,
            Instant::now(),
        );
        assert_eq!(report.utilization["GPU-a"], 27);
        assert_eq!(report.utilization["GPU-b"], 0);
    }

    #[test]
    fn mig_instances_are_series_of_their_own() {
        let mut document = document();
        let busy = document.gpus[0].status.clone();
        document.gpus[0].status = GpuStatus::default();
        document.gpus[0].mig_devices = [("3g.40gb", 0u32, 4), ("1g.10gb", 4, 1)]
            .map(
                |(profile, start, slices)| fakegpu_api::topology::MigDevice {
                    uuid: format!("MIG-{start}"),
                    profile: profile.into(),
                    placement_start: start,
                    memory_slices: slices,
                    memory: 40192,
                    ..Default::default()
                },
            )
            .to_vec();
        document.gpus[0].mig_devices[0].status = busy;
        let snapshot = BTreeMap::from([("node-1".to_owned(), Arc::new(document))]);
        let draws = Draws::new(Duration::from_secs(10));
        let samples = samples(&snapshot, &draws, &HashMap::new(), Instant::now());
        assert_eq!(samples.len(), 3, "two instances and the whole GPU");
        assert_eq!(samples[0].mig, Some(["3g.40gb".to_owned(), "1".to_owned()]));
        // GPU-instance IDs as the driver numbers slice runs: the eighth at slice 4 is GI 11.
        assert_eq!(
            samples[1].mig,
            Some(["1g.10gb".to_owned(), "11".to_owned()])
        );
        assert_eq!(
            (
                samples[0].utilization,
                samples[0].fb_used,
                samples[0].fb_free
            ),
            (40.0, 30000.0, 10192.0)
        );
        let text = encode(&samples, "Hostname", None).expect("encodes");
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("DCGM_FI_DEV_FB_USED{") && l.contains(r#"GPU_I_PROFILE="3g.40gb""#)
            })
            .expect("the instance's framebuffer series");
        assert!(
            line.contains(r#"GPU_I_ID="1""#) && line.contains(r#"pod="job-0""#),
            "{line}"
        );
        // No utilization series for MIG instances, as dcgm-exporter.
        let util = text
            .lines()
            .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{"))
            .count();
        assert_eq!(util, 1, "{text}");
        let report = node_report(
            "node-1",
            &snapshot["node-1"],
            &draws,
            &HashMap::new(),
            Instant::now(),
        );
        assert_eq!(report.utilization["MIG-0"], 40);
    }
}
