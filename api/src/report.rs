//! What the exporter tells about one node's GPUs right now: the topology document plus the
//! utilization the exporter publishes for each GPU, so nvidia-smi inside a pod shows the same
//! numbers as `DCGM_FI_DEV_GPU_UTIL` on the dashboard.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::topology::NodeTopology;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: String,
    pub topology: NodeTopology,
    /// Utilization in percent per GPU UUID, as last published.
    #[serde(default)]
    pub utilization: BTreeMap<String, u8>,
}
