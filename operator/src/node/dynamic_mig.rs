//! Run:ai's dynamic MIG on a node (see [`fakegpu_api::pool::mig_config`]): the layout that
//! annotation [`RUNAI_MIG_CONFIG`] asks for, read on the nodes Run:ai marks for it, the label
//! and mapping that answer it, and a Warning Event on the node when it cannot be had.

use std::collections::BTreeMap;

use fakegpu_api::pool::{mig_config::node_mig, resolve::ResolvedGpu};
use fakegpu_model::names::{
    annotation::{RUNAI_MIG_CONFIG, RUNAI_MIG_MAPPING},
    label::{MIG_CONFIG_STATE, RUNAI_DYNAMIC_MIG},
};
use kube::{Resource, ResourceExt};

use super::cached::CachedNode;
use crate::context::Context;

/// The label and annotation the operator answers a node's configuration with.
#[derive(Debug, Default)]
pub struct Answer {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Whether Run:ai marked `node` for dynamic MIG (the reference's mig-faker runs only there).
fn enabled(node: &CachedNode) -> bool {
    node.labels().get(RUNAI_DYNAMIC_MIG).map(String::as_str) == Some("true")
}

/// Puts the layout `node`'s configuration asks for into `gpu` (its pool's GPUs) and returns the
/// answer to write. A node without the annotation, or not marked for dynamic MIG, keeps the
/// pool's layout and gets no answer.
pub async fn resolve(ctx: &Context, node: &CachedNode, gpu: &mut ResolvedGpu) -> Answer {
    let config = node.annotations().get(RUNAI_MIG_CONFIG);
    if let Some(value) = config.filter(|_| !enabled(node)) {
        let message = format!(
            "annotation {RUNAI_MIG_CONFIG} is read only on nodes labelled {RUNAI_DYNAMIC_MIG}=true; the node keeps its pool's MIG layout"
        );
        ctx.events
            .warn_once(&node.object_ref(&()), "MigConfigIgnored", value, &message)
            .await;
    }
    let config = config.filter(|_| enabled(node)).map(String::as_str);
    let mapping = node
        .annotations()
        .get(RUNAI_MIG_MAPPING)
        .map(String::as_str);
    let mig = node_mig(gpu, &node.name_any(), config, mapping);
    if let (Some(error), Some(value)) = (&mig.error, config) {
        let message = format!(
            "annotation {RUNAI_MIG_CONFIG} cannot be applied: {error}; the node keeps its MIG layout"
        );
        ctx.events
            .warn_once(&node.object_ref(&()), "InvalidMigConfig", value, &message)
            .await;
    }
    gpu.mig = mig.plan;
    Answer {
        labels: mig
            .state
            .map(|state| (MIG_CONFIG_STATE.to_owned(), state.to_owned()))
            .into_iter()
            .collect(),
        annotations: mig
            .mapping
            .map(|mapping| (RUNAI_MIG_MAPPING.to_owned(), mapping))
            .into_iter()
            .collect(),
    }
}
