//! Documents and utilization draws into dcgm-exporter's series (pure); see
//! [`crate::exposition`] for those in the Prometheus text format.

use std::{borrow::Cow, collections::HashMap, time::Instant};

use fakegpu_model::{
    report::NodeReport,
    telemetry::{self, Load},
    topology::{GpuStatus, GpuTopology, NodeTopology, PodGpuUsage, long_bus_id},
};

use crate::{documents::Snapshot, draws::Draws, energy::Energy, xids::XidWindows};

/// What the exporter counts across scrapes: energy, and XIDs in their window.
#[derive(Debug, Default)]
pub struct Counters {
    pub energy: Energy,
    pub xids: XidWindows,
}

/// One GPU's or MIG instance's values and labels (in [`fakegpu_model::names::dcgm::LABELS`] order), borrowing
/// what it can of the document it was read from: a scrape makes one per GPU, and each string
/// copied was an allocation freed again within the scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSample<'a> {
    pub labels: [Cow<'a, str>; 10],
    /// A MIG instance's [`fakegpu_model::names::dcgm::MIG_LABELS`] values; `None` for a whole GPU.
    pub mig: Option<[Cow<'a, str>; 2]>,
    /// The UUID of the GPU (the instance's GPU for a MIG instance).
    pub gpu: &'a str,
    /// The sample's own utilization, percent.
    pub utilization: f64,
    pub fb_used: f64,
    pub fb_free: f64,
    /// How busy the whole GPU is (a MIG GPU: its instances together), for its sensors.
    pub device: Load,
    /// The last XID error of the GPU (see [`GpuTopology::reported_xid`]), else 0.
    pub last_xid: u32,
    /// How many times the GPU raised `last_xid` in the exporter's window (see [`XidWindows`]);
    /// 0 until a scrape reads it.
    pub xid_window: u64,
    /// How long until `last_xid` recurs; `None`: raised once.
    pub xid_period: Option<std::time::Duration>,
    /// ECC errors of the GPU since the driver loaded (injected).
    pub ecc_correctable: u64,
    pub ecc_uncorrectable: u64,
    /// The GPU's energy counter, mJ (see [`Energy`]); 0 until a scrape reads it.
    pub energy_mj: f64,
}

/// What one sample is of: a whole GPU (keyed by its UUID) or one of its MIG instances.
struct Target<'a> {
    key: &'a str,
    status: &'a GpuStatus,
    /// Framebuffer, MiB.
    memory: u64,
    mig: Option<[Cow<'a, str>; 2]>,
}

/// Pod `pod`'s utilization of `target`: its Knative request rate when it is an inference pod
/// and `knative` has its UID, else its draw.
fn pod_value((draws, knative, now): Rates<'_>, pod: &str, target: &str, usage: &PodGpuUsage) -> u8 {
    usage
        .use_knative_utilization
        .then(|| knative.get(pod).copied())
        .flatten()
        .unwrap_or_else(|| draws.value(pod, target, usage.utilization, now))
}

/// The draws, the Knative request rates by pod UID, and the moment to read them at.
type Rates<'a> = (&'a Draws, &'a HashMap<String, u8>, Instant);

/// One sample: utilization the sum of the pods' values on the target (at most 100),
/// framebuffer used the sum of their allocations (at most its memory), the holder's pod
/// labels. A pod's value is its Knative request rate when it is an inference pod and `knative`
/// has its UID, else a draw from its range.
fn sample<'a>(
    node: &'a str,
    document: &'a NodeTopology,
    gpu: &'a GpuTopology,
    target: Target<'a>,
    rates: Rates<'_>,
) -> GpuSample<'a> {
    let Target {
        key,
        status,
        memory,
        mig,
    } = target;
    let utilization = telemetry::total(status, |pod, usage| pod_value(rates, pod, key, usage));
    let used = status.memory_used(memory);
    let holder = &status.allocated_by;
    GpuSample {
        labels: [
            gpu.index.to_string().into(),
            gpu.id.as_str().into(),
            long_bus_id(&gpu.pci_bus_id).into(),
            format!("nvidia{}", gpu.index).into(),
            document.gpu_product.as_str().into(),
            node.into(),
            document.driver_version.as_str().into(),
            holder.container.as_str().into(),
            holder.namespace.as_str().into(),
            holder.pod.as_str().into(),
        ],
        mig,
        gpu: &gpu.id,
        utilization: f64::from(utilization),
        fb_used: used as f64,
        fb_free: memory.saturating_sub(used) as f64,
        device: Load {
            utilization,
            power_limit: (document.power_limit_watts > 0).then_some(document.power_limit_watts),
            thermal_throttling: gpu.faults.thermal_throttling,
        },
        last_xid: gpu.reported_xid().unwrap_or(0),
        xid_window: 0,
        xid_period: gpu.xid_period(),
        ecc_correctable: gpu.faults.ecc_correctable,
        ecc_uncorrectable: gpu.faults.ecc_uncorrectable,
        energy_mj: 0.0,
    }
}

/// The samples of one node, appended to `out`: each whole GPU, and each MIG instance of a
/// partitioned GPU (as dcgm-exporter reports MIG-enabled GPUs: per instance, with its profile
/// and instance id).
fn node_samples<'a>(
    out: &mut Vec<GpuSample<'a>>,
    node: &'a str,
    document: &'a NodeTopology,
    rates: Rates<'_>,
) {
    for gpu in &document.gpus {
        if gpu.mig_devices.is_empty() {
            let whole = Target {
                key: &gpu.id,
                status: &gpu.status,
                memory: document.gpu_memory,
                mig: None,
            };
            out.push(sample(node, document, gpu, whole, rates));
            continue;
        }
        let first = out.len();
        out.extend(gpu.mig_devices.iter().map(|mig| {
            let target = Target {
                key: &mig.uuid,
                status: &mig.status,
                memory: mig.memory,
                mig: Some([
                    mig.profile.as_str().into(),
                    mig.gpu_instance_id().to_string().into(),
                ]),
            };
            sample(node, document, gpu, target, rates)
        }));
        let instances = &mut out[first..];
        // The GPU's sensors read the instances' load together.
        let busy = telemetry::partitioned_utilization(
            instances
                .iter()
                .zip(&gpu.mig_devices)
                .map(|(s, mig)| (s.utilization as u8, mig.memory)),
            document.gpu_memory,
        );
        for instance in instances {
            instance.device.utilization = busy;
        }
    }
}

/// Every GPU of every node.
pub fn samples<'a>(
    snapshot: &'a Snapshot,
    draws: &Draws,
    counters: &Counters,
    knative: &HashMap<String, u8>,
    now: Instant,
) -> Vec<GpuSample<'a>> {
    let rates = (draws, knative, now);
    let mut samples = Vec::with_capacity(snapshot.values().map(|d| d.gpus.len()).sum());
    for (node, document) in snapshot {
        node_samples(&mut samples, node, document, rates);
    }
    // Once per GPU: a MIG GPU's instances carry its counters.
    let mut read: HashMap<&str, (f64, u64)> = HashMap::with_capacity(samples.len());
    for sample in &mut samples {
        let power = sample.device.power_draw().unwrap_or(0.0);
        let (energy, xids) = *read.entry(sample.gpu).or_insert_with(|| {
            let xids = match sample.last_xid {
                0 => 0,
                xid => counters.xids.count(sample.gpu, xid, sample.xid_period, now),
            };
            (counters.energy.read(sample.gpu, power, now), xids)
        });
        sample.energy_mj = energy;
        sample.xid_window = xids;
    }
    counters.energy.retain(&read.keys().copied().collect());
    counters.xids.retain(
        &samples
            .iter()
            .filter(|s| s.last_xid != 0)
            .map(|s| (s.gpu, s.last_xid))
            .collect(),
    );
    samples
}

/// Whether any pod of `snapshot` takes its utilization from Knative.
pub fn wants_knative(snapshot: &Snapshot) -> bool {
    snapshot.values().any(|d| d.wants_knative())
}

/// What nvidia-smi is told about `node`: its document and the utilization its GPUs' series
/// carry now (the same values, so the two agree).
pub fn node_report(
    node: &str,
    document: &NodeTopology,
    draws: &Draws,
    knative: &HashMap<String, u8>,
    now: Instant,
) -> NodeReport {
    NodeReport::of(node, document, |pod, target, usage| {
        pod_value((draws, knative, now), pod, target, usage)
    })
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc, time::Duration};

    use fakegpu_model::topology::{
        AllocatedBy, GpuStatus, GpuTopology, PodGpuUsage, UtilizationBounds,
    };

    use super::*;
    use fakegpu_model::names::dcgm;

    use crate::{exposition::encode, fields::FIELDS};

    /// The samples of `snapshot` now, with a fresh energy meter.
    fn sampled<'a>(
        snapshot: &'a Snapshot,
        draws: &Draws,
        knative: &HashMap<String, u8>,
    ) -> Vec<GpuSample<'a>> {
        samples(
            snapshot,
            draws,
            &Counters::default(),
            knative,
            Instant::now(),
        )
    }

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
        let samples = sampled(&snapshot, &draws, &HashMap::new());
        assert_eq!(samples[0].utilization, 40.0);
        assert_eq!((samples[0].fb_used, samples[0].fb_free), (30000.0, 51559.0));
        assert_eq!(samples[1].utilization, 0.0);
        assert_eq!(samples[1].fb_free, 81559.0);
        let text = encode(&samples, "Hostname", None);
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
        assert!(encode(&samples, "hostname", Some(false)).contains(r#"hostname="node-1""#));
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
        let with_rate = sampled(&snapshot, &draws, &rates);
        assert_eq!(with_rate[0].utilization, 27.0);
        // Prometheus did not answer: the pod's range (40-40) again.
        let without = sampled(&snapshot, &draws, &HashMap::new());
        assert_eq!(without[0].utilization, 40.0);
        let text = encode(&without, "Hostname", Some(false));
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
                |(profile, start, slices)| fakegpu_model::topology::MigDevice {
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
        let samples = sampled(&snapshot, &draws, &HashMap::new());
        assert_eq!(samples.len(), 3, "two instances and the whole GPU");
        assert_eq!(samples[0].mig, Some(["3g.40gb".into(), "1".into()]));
        // GPU-instance IDs as the driver numbers slice runs: the eighth at slice 4 is GI 11.
        assert_eq!(samples[1].mig, Some(["1g.10gb".into(), "11".into()]));
        assert_eq!(
            (
                samples[0].utilization,
                samples[0].fb_used,
                samples[0].fb_free
            ),
            (40.0, 30000.0, 10192.0)
        );
        let text = encode(&samples, "Hostname", None);
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
        // The GPU's sensors read its instances' load together (the busy instance holds half
        // its memory), on every instance's series and in nvidia-smi's report.
        assert_eq!(report.utilization["GPU-a"], 19);
        let temperatures =
            ["1", "11"].map(|id| value(&text, dcgm::GPU_TEMP, &format!("GPU_I_ID=\"{id}\"")));
        assert_eq!(temperatures, [38.0, 38.0]);
    }

    /// The value of the series of `name` whose labels include `pair`.
    fn value(text: &str, name: &str, pair: &str) -> f64 {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(pair))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} series with {pair} in {text}"))
    }

    #[test]
    fn every_default_counter_is_served_and_the_sensors_follow_the_load() {
        let mut document = document();
        document.power_limit_watts = 700;
        document.gpus[1].health = fakegpu_model::topology::Health::Unhealthy;
        let snapshot = BTreeMap::from([("node-1".to_owned(), Arc::new(document))]);
        let draws = Draws::new(Duration::from_secs(10));
        let counters = Counters::default();
        let start = Instant::now();
        let text = encode(
            &samples(&snapshot, &draws, &counters, &HashMap::new(), start),
            "Hostname",
            None,
        );
        for field in &FIELDS {
            let declared = format!("# TYPE {} {}\n", field.name, field.kind.as_str());
            assert!(text.contains(&declared), "{declared} missing");
            assert!(text.contains(&format!("# HELP {} {}\n", field.name, field.help)));
            assert_eq!(
                text.lines()
                    .filter(|l| l.starts_with(&format!("{}{{", field.name)))
                    .count(),
                2,
                "{}",
                field.name
            );
        }
        // GPU-a runs at 40 %, GPU-b idles: the same model as nvidia-smi's.
        let (busy, idle) = (r#"UUID="GPU-a""#, r#"UUID="GPU-b""#);
        let load = Load {
            utilization: 40,
            power_limit: Some(700),
            thermal_throttling: false,
        };
        assert_eq!(
            value(&text, dcgm::POWER_USAGE, busy),
            load.power_draw().expect("limit")
        );
        assert_eq!(value(&text, dcgm::POWER_USAGE, idle), 70.0);
        assert_eq!(value(&text, dcgm::GPU_TEMP, busy), 48.0);
        assert_eq!(value(&text, dcgm::GPU_TEMP, idle), 30.0);
        assert_eq!(value(&text, dcgm::SM_CLOCK, busy), 1980.0);
        assert_eq!(value(&text, dcgm::SM_CLOCK, idle), 345.0);
        assert_eq!(value(&text, dcgm::MEM_COPY_UTIL, busy), 16.0);
        assert_eq!(value(&text, dcgm::PIPE_TENSOR_ACTIVE, busy), 0.2);
        assert_eq!(value(&text, dcgm::XID_ERRORS, busy), 0.0);
        assert_eq!(
            value(&text, dcgm::XID_ERRORS, idle),
            79.0,
            "an unhealthy GPU"
        );
        // Once in the window, labelled with the XID; the healthy GPU's series is 0, unlabelled.
        assert_eq!(value(&text, dcgm::EXP_XID_ERRORS_COUNT, r#"xid="79""#), 1.0);
        assert_eq!(value(&text, dcgm::EXP_XID_ERRORS_COUNT, busy), 0.0);
        assert!(
            !text.lines().any(|l| l.contains(busy) && l.contains("xid=")),
            "{text}"
        );
        assert_eq!(value(&text, dcgm::TOTAL_ENERGY_CONSUMPTION, busy), 0.0);
        // Two seconds later the counter holds two seconds of the power drawn.
        let later = encode(
            &samples(
                &snapshot,
                &draws,
                &counters,
                &HashMap::new(),
                start + Duration::from_secs(2),
            ),
            "Hostname",
            None,
        );
        assert_eq!(
            value(&later, dcgm::TOTAL_ENERGY_CONSUMPTION, busy),
            (load.power_draw().expect("limit") * 2000.0).round()
        );
    }

    #[test]
    fn no_gpus_no_families() {
        assert_eq!(encode(&[], "Hostname", None), "");
    }

    #[test]
    fn label_values_are_escaped() {
        let snapshot = BTreeMap::from([("node-1".to_owned(), Arc::new(document()))]);
        let mut sample = samples(
            &snapshot,
            &Draws::new(Duration::from_secs(10)),
            &Counters::default(),
            &HashMap::new(),
            Instant::now(),
        )
        .remove(0);
        sample.labels[4] = "a \"quoted\" \\ name\n".into();
        let text = encode(&[sample], "Hostname", None);
        assert!(
            text.contains(r#"modelName="a \"quoted\" \\ name\n""#),
            "{text}"
        );
    }
}
