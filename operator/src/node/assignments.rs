//! Which GPU each pod holds, as pods see it: the GPU the kubelet gave (reported by the node
//! agent), the reservation pods' `run.ai/reserve_for_gpu_index`, and `fakegpu.dev/gpus`.

use fakegpu_api::kubelet_devices::KubeletDevices;
use fakegpu_model::{names::annotation, topology::NodeTopology};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt, runtime::reflector::ObjectRef};
use tracing::{debug, info, warn};

use crate::{context::Context, error::Result, kit::apply, tracking};

/// The devices the node's kubelet gave each pod, from the report of its node agent (a real
/// node serving the device plugin; KWOK nodes have none). A report that cannot be read counts
/// as none: pods then keep what the document recorded.
pub(super) fn give_what_the_kubelet_gave(
    ctx: &Context,
    node: &str,
    users: &mut [tracking::GpuUser],
) {
    let name = KubeletDevices::configmap_name(node);
    let Some(configmap) = ctx
        .caches
        .kubelet_reports
        .get(&ObjectRef::new(&name).within(&ctx.settings.namespace))
    else {
        return;
    };
    let report = match KubeletDevices::from_configmap(&configmap) {
        Ok(report) => report,
        Err(error) => {
            warn!(node, configmap = %name, %error, "ignoring the node agent's report of the kubelet's devices");
            return;
        }
    };
    let given = report.by_pod();
    for user in users {
        if let Some(devices) = given.get(&(user.namespace.as_str(), user.pod.as_str())) {
            user.given = devices.iter().map(|d| (*d).to_owned()).collect();
        }
    }
}

/// Tells each reservation pod of the node which GPU it holds (annotation
/// [`annotation::RESERVED_GPU`]), as the reservation pod itself does through NVML on a real
/// GPU node: GPU-sharing schedulers bind the sharing pods once they read it. Written once, when
/// missing, after the document that records the holder.
pub(super) async fn announce_reservations(
    ctx: &Context,
    node: &str,
    document: &NodeTopology,
    users: &[tracking::GpuUser],
) -> Result<()> {
    for (namespace, pod, uuid) in tracking::unannounced_reservations(&document.gpus, users) {
        info!(node, %namespace, %pod, gpu = %uuid, "telling a reservation pod which GPU it holds");
        annotate_pod(
            ctx,
            node,
            &namespace,
            &pod,
            annotation::RESERVED_GPU,
            Some(&uuid),
        )
        .await?;
    }
    Ok(())
}

/// Writes on each pod holding GPUs by extended resource which ones it holds (annotation
/// [`annotation::ASSIGNED_GPUS`]), after the document that records it: pod tracking reads it
/// back, so the assignment outlives the document.
pub(super) async fn record_assignments(
    ctx: &Context,
    node: &str,
    document: &NodeTopology,
    users: &[tracking::GpuUser],
) -> Result<()> {
    for (namespace, pod, uuids) in tracking::unrecorded_assignments(&document.gpus, users) {
        debug!(node, %namespace, %pod, gpus = %uuids, "recording a pod's GPUs on the pod");
        annotate_pod(
            ctx,
            node,
            &namespace,
            &pod,
            annotation::ASSIGNED_GPUS,
            Some(&uuids),
        )
        .await?;
    }
    Ok(())
}

/// Takes the recorded GPUs (`fakegpu.dev/gpus`) off the pods of a node whose pool is gone: the
/// GPUs went with it. A node that only left its pool keeps them, so that joining again moves no
/// running pod.
pub(super) async fn forget_assignments(ctx: &Context, node: &str) -> Result<()> {
    for pod in ctx.caches.pods_by_node.pods_on(node, &ctx.caches.pods) {
        if pod.annotations().contains_key(annotation::ASSIGNED_GPUS) {
            let namespace = pod.namespace().unwrap_or_default();
            debug!(node, %namespace, pod = %pod.name_any(), "pool gone: removing the pod's recorded GPUs");
            annotate_pod(
                ctx,
                node,
                &namespace,
                &pod.name_any(),
                annotation::ASSIGNED_GPUS,
                None,
            )
            .await?;
        }
    }
    Ok(())
}

/// Writes one annotation of fakegpu's on a pod, or removes it (`None`). A pod deleted meanwhile
/// has nothing to write any more.
pub(super) async fn annotate_pod(
    ctx: &Context,
    node: &str,
    namespace: &str,
    pod: &str,
    key: &str,
    value: Option<&str>,
) -> Result<()> {
    // The pods this reconcile started from may be older than the cache is now: the write may
    // have gone out since (another reconcile of the node), and its echo arrived or not yet.
    let cached = ctx.caches.pods.get(&ObjectRef::new(pod).within(namespace));
    if cached.is_some_and(|cached| cached.annotations().get(key).map(String::as_str) == value) {
        return Ok(());
    }
    let now = std::time::Instant::now();
    let fingerprint = crate::kit::recent::fingerprint(&(key, value));
    if ctx
        .writes
        .recent
        .is_own_pending::<Pod>(Some(namespace), pod, fingerprint, now)
    {
        debug!(node, %namespace, %pod, "same annotation already sent; the cache has not shown it yet");
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match apply::annotate(&pods, pod, key, value).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            debug!(node, %namespace, %pod, "pod gone before its annotation was written");
            Ok(())
        }
        Ok(written) => {
            ctx.writes
                .recent
                .record_own(&written, fingerprint, std::time::Instant::now());
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}
