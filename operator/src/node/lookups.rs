//! What the caches hold of one node: its topology ConfigMap, its slices, its NodeResourceTopology.

use std::sync::Arc;

use fakegpu_api::nrt::NodeResourceTopology;
use fakegpu_model::topology::NodeTopology;
use k8s_openapi::api::{core::v1::ConfigMap, resource::v1::ResourceSlice};
use kube::runtime::reflector::ObjectRef;

use crate::{context::Context, kit::cache::Cached};

pub(super) fn cached_configmap(ctx: &Context, node: &str) -> Option<Arc<Cached<ConfigMap>>> {
    ctx.caches
        .configmaps
        .get(&ObjectRef::new(&NodeTopology::configmap_name(node)).within(&ctx.settings.namespace))
}

/// GPUs of `node` that pods hold, as pod tracking last recorded it.
pub fn allocated_gpus(ctx: &Context, node: &str) -> u32 {
    cached_configmap(ctx, node).map_or(0, |cm| cm.kept().allocated_gpus())
}

pub(super) fn cached_slice(ctx: &Context, name: &str) -> Option<Arc<Cached<ResourceSlice>>> {
    ctx.caches.slices.get(&ObjectRef::new(name))
}

pub(super) fn cached_nrt(ctx: &Context, node: &str) -> Option<Arc<NodeResourceTopology>> {
    ctx.caches.nrts.as_ref()?.get(&ObjectRef::new(node))
}
