//! What the exporter tells about one node's GPUs right now: the topology document plus the
//! utilization the exporter publishes for each GPU, so nvidia-smi inside a pod shows the same
//! numbers as `DCGM_FI_DEV_GPU_UTIL` on the dashboard.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    telemetry::{drawn_utilization, gpu_utilization, total},
    topology::{NodeTopology, PodGpuUsage},
};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: String,
    pub topology: NodeTopology,
    /// Utilization in percent per GPU UUID, as last published.
    #[serde(default)]
    pub utilization: BTreeMap<String, u8>,
}

impl NodeReport {
    /// The report of `node`'s `document` with each pod's utilization of each GPU or MIG
    /// instance from `value(pod, target, usage)` (`target`: the GPU's or instance's UUID): a
    /// whole GPU's under its UUID; a partitioned GPU's instances' under theirs, and the GPU's
    /// own (its instances' together, each weighing its share of the memory, which its sensors
    /// follow) under its UUID.
    pub fn of(
        node: &str,
        document: &NodeTopology,
        value: impl Fn(&str, &str, &PodGpuUsage) -> u8,
    ) -> Self {
        let mut utilization = BTreeMap::new();
        for gpu in &document.gpus {
            let busy = gpu_utilization(gpu, document.gpu_memory, |target, status| {
                let busy = total(status, |pod, usage| value(pod, target, usage));
                utilization.insert(target.to_owned(), busy);
                busy
            });
            // A partitioned GPU's own is its instances' together.
            utilization.insert(gpu.id.clone(), busy);
        }
        Self {
            node: node.to_owned(),
            topology: document.clone(),
            utilization,
        }
    }

    /// [`of`](Self::of) with each pod's draw of period `period`: the report a reader of the
    /// document makes for itself, as the exporter would publish it (Knative rates aside).
    pub fn drawn(node: &str, document: &NodeTopology, period: u64) -> Self {
        Self::of(node, document, |pod, target, usage| {
            drawn_utilization(pod, target, usage.utilization, period)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{GpuStatus, GpuTopology, MigDevice, UtilizationBounds};

    fn busy(min: u8, max: u8) -> GpuStatus {
        GpuStatus {
            pod_gpu_usage_status: [(
                "uid-1".to_owned(),
                PodGpuUsage {
                    utilization: UtilizationBounds { min, max },
                    fb_used: 0,
                    use_knative_utilization: false,
                },
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn whole_gpus_and_instances_are_reported_by_uuid_a_partitioned_gpu_by_its_instances() {
        let instance = |uuid: &str, status| MigDevice {
            uuid: uuid.into(),
            memory: 40,
            status,
            ..Default::default()
        };
        let document = NodeTopology {
            gpu_memory: 80,
            gpus: vec![
                GpuTopology {
                    id: "GPU-0".into(),
                    status: busy(30, 30),
                    ..Default::default()
                },
                GpuTopology {
                    id: "GPU-1".into(),
                    index: 1,
                    mig_devices: vec![
                        instance("MIG-a", busy(80, 80)),
                        instance("MIG-b", GpuStatus::default()),
                    ],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let report = NodeReport::drawn("n", &document, 7);
        assert_eq!(
            report.utilization,
            BTreeMap::from([
                ("GPU-0".into(), 30),
                ("GPU-1".into(), 40),
                ("MIG-a".into(), 80),
                ("MIG-b".into(), 0),
            ])
        );
        // Each pod's value is asked with its target.
        let by_target = NodeReport::of(
            "n",
            &document,
            |_, target, _| {
                if target == "MIG-a" { 10 } else { 60 }
            },
        );
        assert_eq!(by_target.utilization["MIG-a"], 10);
        assert_eq!(by_target.utilization["GPU-1"], 5);
        assert_eq!(by_target.utilization["GPU-0"], 60);
    }
}
