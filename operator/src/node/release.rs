//! What a node that leaves its pool gives back: fakegpu's labels and status entries, its
//! slices, its NodeResourceTopology and topology ConfigMap, and (its pool gone) the GPUs recorded
//! on its pods. The DRA plugins of claims its pods still hold linger until they are released.

use fakegpu_model::names::fakegpu::POOL_LABEL;
use kube::{ResourceExt, runtime::reflector::ObjectRef};
use tracing::info;

use super::{
    assignments::forget_assignments,
    cached::{CachedNode, has_kubelet},
    leaving,
    lookups::cached_slice,
    slice, status,
    writes::{apply_node, ensure_topology, remove_nrt, remove_unserved_plugin_slices, sync_slice},
};
use crate::{context::Context, error::Result};

/// Takes away what the operator gave a node: its labels and status entries (the patch of an
/// empty intent names as null every one fakegpu alone set, and only those), its slices and its
/// topology ConfigMap; and when its pool is gone, the GPUs recorded on its pods.
pub async fn release(ctx: &Context, node: &CachedNode) -> Result<bool> {
    let name = node.name_any();
    // Before the pool's label goes: a failed removal is tried again while it still names the
    // pool.
    let pool_gone = node.labels().get(POOL_LABEL).is_some_and(|pool| {
        ctx.caches
            .pools
            .get(&ObjectRef::new(pool))
            .is_none_or(|pool| pool.metadata.deletion_timestamp.is_some())
    });
    if pool_gone {
        forget_assignments(ctx, &name).await?;
    }
    let lingering = if has_kubelet(node) {
        leaving::lingering_labels(&ctx.caches.claims.state(), &name)
    } else {
        Default::default()
    };
    let intent = status::NodeIntent {
        labels: lingering.clone(),
        ..Default::default()
    };
    // Whatever of fakegpu's is left, labels the cache holds as a digest only included: a node
    // whose last lingering deploy label is all fakegpu has there still needs its patch.
    if !status::node_current(node, &intent) {
        if lingering.is_empty() {
            info!(node = %name, "node left its pool: removing labels and status entries");
        } else {
            info!(node = %name, keeping = ?lingering.keys().collect::<Vec<_>>(), "node left its pool: removing labels and status entries but the DRA plugins of claims its pods hold");
        }
        apply_node(ctx, node, &intent).await?;
    }
    for slice in [slice::slice_name(&name), slice::channel_slice_name(&name)] {
        sync_slice(ctx, &name, &slice, cached_slice(ctx, &slice), None).await?;
    }
    remove_unserved_plugin_slices(ctx, node, None).await?;
    remove_nrt(ctx, &name).await?;
    ensure_topology(ctx, node, None).await?;
    Ok(!lingering.is_empty())
}
