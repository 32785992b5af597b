//! DeviceClasses that DRA claims name, defined as NVIDIA's DRA driver defines them, so a claim
//! written for real GPUs works unchanged: `gpu.nvidia.com` whenever a pool serves DRA,
//! `mig.nvidia.com` when such a pool may have MIG devices (it sets a layout, or its GPUs are
//! MIG-capable and Run:ai may partition them: see `pool::mig_config`), and
//! `compute-domain-default-channel.nvidia.com` when a pool serves ComputeDomains.
//!
//! One class serves every pool; its owner references name every pool that needs it, so the
//! garbage collector removes it with the last one. A class of the same name that fakegpu did not
//! create (mixed mode, next to NVIDIA's driver) is left alone and reported on the pools.
//!
//! fakegpu writes a class's spec when it creates the class and when what it wants of the spec
//! changes (an upgrade, the extended-resource setting); an edit of the spec by anyone else
//! stays until then, as an edit of the class NVIDIA's Helm chart installs does. (KAI
//! scheduler's suites set and clear `extendedResourceName`; fakegpu used to undo that at once.)

use std::{collections::BTreeMap, sync::Arc};

use fakegpu_api::{GpuNodePool, pool::resolve::resolve};
use fakegpu_model::names::{
    annotation::APPLIED_SPEC,
    compute_domain,
    fakegpu::{MANAGED_BY, MANAGED_BY_VALUE},
    resource::{GPU, GPU_DEVICE_CLASS, GPU_DRIVER, MIG_DEVICE_CLASS},
};
use k8s_openapi::{
    api::resource::v1::{CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{Resource, ResourceExt, api::ObjectMeta, runtime::reflector::ObjectRef};
use tracing::info;

use crate::{context::Context, error::Result, kit::owned::Policy};

/// The names of every class fakegpu may create.
const CLASSES: [&str; 3] = [
    GPU_DEVICE_CLASS,
    MIG_DEVICE_CLASS,
    compute_domain::DEFAULT_CHANNEL_CLASS,
];

/// NVIDIA's selector of devices of `driver` whose `type` is `device_type`.
fn of_type(driver: &str, device_type: &str) -> String {
    format!("device.driver == '{driver}' && device.attributes['{driver}'].type == '{device_type}'")
}

fn class(
    name: &str,
    expression: String,
    extended_resource: Option<&str>,
    owners: &[&GpuNodePool],
) -> DeviceClass {
    let mut owner_references: Vec<OwnerReference> = owners
        .iter()
        .filter_map(|pool| pool.controller_owner_ref(&()))
        .map(|owner| OwnerReference {
            controller: None,
            block_owner_deletion: None,
            ..owner
        })
        .collect();
    owner_references.sort_by(|a, b| a.name.cmp(&b.name));
    let spec = DeviceClassSpec {
        selectors: Some(vec![DeviceSelector {
            cel: Some(CELDeviceSelector { expression }),
        }]),
        extended_resource_name: extended_resource.map(str::to_owned),
        ..Default::default()
    };
    // Serialising a DeviceClassSpec cannot fail; if it did, the class is only written again.
    let applied = serde_json::to_string(&spec).unwrap_or_default();
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.to_owned(),
                MANAGED_BY_VALUE.to_owned(),
            )])),
            annotations: Some(BTreeMap::from([(APPLIED_SPEC.to_owned(), applied)])),
            owner_references: Some(owner_references),
            ..Default::default()
        },
        spec: Some(spec),
    }
}

/// Whether `pool`'s nodes may carry MIG devices: it sets a layout, or Run:ai's dynamic MIG may
/// partition its MIG-capable GPUs.
fn may_have_mig(pool: &GpuNodePool) -> bool {
    pool.spec.mig.is_some()
        || resolve(&pool.spec.gpu)
            .ok()
            .and_then(|gpu| gpu.catalog)
            .is_some_and(|catalog| catalog.mig_capable())
}

/// The classes the live pools need. `extended_resource`: whether the GPU class names
/// `nvidia.com/gpu` as its extended resource, as NVIDIA's chart sets it (see
/// [`crate::controllers::Features`]).
pub fn desired_classes(pools: &[Arc<GpuNodePool>], extended_resource: bool) -> Vec<DeviceClass> {
    let dra: Vec<&GpuNodePool> = pools
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.spec.interfaces.dra)
        .collect();
    let mut classes = Vec::new();
    if !dra.is_empty() {
        // NVIDIA's chart sets extendedResourceName on this class only: pods asking for
        // `nvidia.com/gpu` can then be served by DRA on nodes that do not advertise it.
        classes.push(class(
            GPU_DEVICE_CLASS,
            of_type(GPU_DRIVER, "gpu"),
            extended_resource.then_some(GPU),
            &dra,
        ));
    }
    let mig: Vec<&GpuNodePool> = dra.iter().copied().filter(|p| may_have_mig(p)).collect();
    if !mig.is_empty() {
        classes.push(class(
            MIG_DEVICE_CLASS,
            of_type(GPU_DRIVER, "mig"),
            None,
            &mig,
        ));
    }
    let domains: Vec<&GpuNodePool> = pools
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.spec.interfaces.compute_domains)
        .collect();
    if !domains.is_empty() {
        let driver = compute_domain::DRIVER;
        let expression = format!(
            "{} && device.attributes['{driver}'].{} == 0",
            of_type(driver, compute_domain::TYPE_CHANNEL),
            compute_domain::ID_ATTRIBUTE
        );
        classes.push(class(
            compute_domain::DEFAULT_CHANNEL_CLASS,
            expression,
            None,
            &domains,
        ));
    }
    classes
}

/// Whether a class was created by fakegpu.
pub fn is_ours(class: &DeviceClass) -> bool {
    class.labels().get(MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
}

/// What of a class fakegpu manages it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing: the class is as fakegpu wants it, or its spec as someone edited it.
    Nothing,
    /// The labels and owners (the pools that need the class changed).
    Metadata,
    /// The whole class: what fakegpu wants of its spec changed since it last wrote it.
    Whole,
}

/// What to write of `desired` over `current`, a class fakegpu manages. The spec is compared
/// with the spec fakegpu last wrote ([`APPLIED_SPEC`]), not with the class's: someone's edit of
/// the spec is no reason to write it again.
pub fn write_needed(current: &DeviceClass, desired: &DeviceClass) -> Write {
    let applied = |class: &DeviceClass| class.annotations().get(APPLIED_SPEC).cloned();
    if applied(current) != applied(desired) {
        return Write::Whole;
    }
    let mut owners = current.owner_references().to_vec();
    owners.sort_by(|a, b| a.name.cmp(&b.name));
    let labelled = desired
        .labels()
        .iter()
        .all(|(k, v)| current.labels().get(k) == Some(v));
    if labelled && owners == desired.owner_references() {
        Write::Nothing
    } else {
        Write::Metadata
    }
}

/// Classes of fakegpu's names that belong to someone else.
pub fn foreign_classes(ctx: &Context) -> Vec<String> {
    CLASSES
        .into_iter()
        .filter(|name| {
            ctx.caches
                .device_classes
                .get(&ObjectRef::new(name))
                .is_some_and(|c| !is_ours(&c))
        })
        .map(str::to_owned)
        .collect()
}

/// Writes the classes the pools need and deletes fakegpu's classes no pool needs; classes that
/// belong to someone else are never touched.
pub async fn ensure(ctx: &Context) -> Result<()> {
    // Every pool's reconcile asks. While pools appear by the dozen, reconciles running side by
    // side each wrote the classes for the pools they had seen, older sets after newer ones;
    // one at a time, each compares the newest set with what was last written.
    let _one_at_a_time = ctx.writes.device_classes.lock().await;
    let desired = desired_classes(
        &ctx.caches.pools.state(),
        ctx.settings.dra_extended_resource,
    );
    // A class someone else edited keeps their spec: fakegpu then sets only its owners.
    let whole = ctx.owned::<DeviceClass>(Policy::Apply);
    let owners = ctx.owned::<DeviceClass>(Policy::MergePatch);
    for class in &desired {
        let name = class.name_any();
        let current = ctx.caches.device_classes.get(&ObjectRef::new(&name));
        let write = match &current {
            Some(current) if !is_ours(current) => Write::Nothing,
            Some(current) => write_needed(current, class),
            None => Write::Whole,
        };
        let exists = current.is_some();
        match write {
            Write::Nothing => {}
            Write::Metadata => {
                let patch = serde_json::json!({"metadata": {
                    "labels": class.metadata.labels,
                    "ownerReferences": class.metadata.owner_references,
                }});
                if owners.write(&name, &patch, exists).await?.sent() {
                    info!(class = %name, "wrote DeviceClass owners");
                }
            }
            Write::Whole => {
                let mut object = class.clone();
                object.meta_mut().managed_fields = None;
                let patch = serde_json::json!({
                    "apiVersion": DeviceClass::api_version(&()), "kind": DeviceClass::kind(&()),
                    "metadata": object.metadata, "spec": object.spec,
                });
                if whole.write(&name, &patch, exists).await?.sent() {
                    info!(class = %name, "wrote DeviceClass");
                }
            }
        }
    }
    for name in CLASSES {
        let unwanted = !desired.iter().any(|c| c.name_any() == name);
        if unwanted
            && ctx
                .caches
                .device_classes
                .get(&ObjectRef::new(name))
                .is_some_and(|c| is_ours(&c))
        {
            info!(class = %name, "no pool needs it: deleting DeviceClass");
            whole.remove(name).await?;
        }
    }
    Ok(())
}

/// [`ensure`] against a fake API server: a DRA pool's class is written whole once, then not
/// again while the cache shows it; a class no pool needs goes; someone else's stays.
#[cfg(test)]
mod against_api {
    use axum::http::Method;
    use serde_json::json;

    use super::*;
    use crate::testing::{
        api_server::{Request, against, calls},
        context::{Cluster, context},
        pool,
    };

    const CLASS: &str = "/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com";

    async fn ensure_once(
        dra: bool,
        classes: Vec<DeviceClass>,
        answers: &[u16],
    ) -> (Result<()>, Vec<Request>) {
        let spec = json!({"gpu": {"profile": "l4"}, "interfaces": {"dra": dra}});
        let mut pool = (*pool("p", 0, spec)).clone();
        pool.metadata.uid = Some("p-uid".into());
        let cluster = Cluster {
            pools: vec![pool],
            device_classes: classes,
            ..Cluster::default()
        };
        against(answers, |client| async move {
            ensure(&context(client, cluster)).await
        })
        .await
    }

    #[tokio::test]
    async fn a_dra_pool_s_class_is_written_once() {
        let (result, seen) = ensure_once(true, vec![], &[200]).await;
        result.expect("ensured");
        assert_eq!(calls(&seen), [(Method::PATCH, CLASS.to_owned())]);
        assert_eq!(seen[0].content_type, "application/apply-patch+yaml");
        let written: DeviceClass = serde_json::from_value(seen[0].body.clone()).expect("class");
        assert!(is_ours(&written));

        let (result, seen) = ensure_once(true, vec![written], &[]).await;
        result.expect("ensured");
        assert_eq!(calls(&seen), [], "a current class written again");
    }

    #[tokio::test]
    async fn a_class_no_pool_needs_goes_and_someone_else_s_stays() {
        let (_, seen) = ensure_once(true, vec![], &[200]).await;
        let ours: DeviceClass = serde_json::from_value(seen[0].body.clone()).expect("class");
        let (result, seen) = ensure_once(false, vec![ours.clone()], &[200]).await;
        result.expect("ensured");
        assert_eq!(calls(&seen), [(Method::DELETE, CLASS.to_owned())]);

        let mut foreign = ours;
        foreign.metadata.labels = None;
        let (result, seen) = ensure_once(true, vec![foreign.clone()], &[]).await;
        result.expect("ensured");
        assert_eq!(calls(&seen), [], "someone else's class written");
        let (result, seen) = ensure_once(false, vec![foreign], &[]).await;
        result.expect("ensured");
        assert_eq!(calls(&seen), [], "someone else's class deleted");
    }

    #[tokio::test]
    async fn a_refused_class_write_is_the_error() {
        let (result, seen) = ensure_once(true, vec![], &[500]).await;
        assert!(result.is_err());
        assert_eq!(calls(&seen), [(Method::PATCH, CLASS.to_owned())]);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::pool;

    fn expression(class: &DeviceClass) -> &str {
        class
            .spec
            .as_ref()
            .and_then(|s| s.selectors.as_ref())
            .and_then(|s| s.first())
            .and_then(|s| s.cel.as_ref())
            .map_or("", |cel| cel.expression.as_str())
    }

    #[test]
    fn classes_follow_the_pools_that_serve_dra() {
        let plugin_only = pool("plain", 1, json!({"gpu": {"profile": "t4"}}));
        assert!(desired_classes(std::slice::from_ref(&plugin_only), true).is_empty());

        let mut dra = (*pool(
            "dra",
            1,
            json!({"gpu": {"profile": "l40s"}, "interfaces": {"dra": true}}),
        ))
        .clone();
        dra.metadata.uid = Some("uid-dra".into());
        let mut mig = (*pool(
            "mig",
            2,
            json!({"gpu": {"profile": "a100"}, "interfaces": {"dra": true},
            "mig": {"strategy": "mixed", "layout": [{"profiles": ["1g.5gb"]}]}}),
        ))
        .clone();
        mig.metadata.uid = Some("uid-mig".into());
        // MIG-capable GPUs without a layout: Run:ai may partition them.
        let mut dynamic = (*pool(
            "dynamic",
            3,
            json!({"gpu": {"profile": "h100"}, "interfaces": {"dra": true}}),
        ))
        .clone();
        dynamic.metadata.uid = Some("uid-dynamic".into());
        let classes = desired_classes(
            &[plugin_only, Arc::new(dra), Arc::new(mig), Arc::new(dynamic)],
            true,
        );

        let gpu = &classes[0];
        let gpu_spec = gpu.spec.as_ref().expect("spec");
        assert_eq!(gpu.name_any(), "gpu.nvidia.com");
        assert_eq!(
            expression(gpu),
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
        );
        assert_eq!(
            gpu_spec.extended_resource_name.as_deref(),
            Some("nvidia.com/gpu")
        );
        let owners: Vec<&str> = gpu
            .owner_references()
            .iter()
            .map(|o| o.name.as_str())
            .collect();
        assert_eq!(owners, ["dra", "dynamic", "mig"]);
        assert!(
            gpu.owner_references()
                .iter()
                .all(|o| o.controller.is_none() && o.kind == "GpuNodePool")
        );
        assert!(is_ours(gpu) && write_needed(gpu, gpu) == Write::Nothing);

        let mig_class = &classes[1];
        assert_eq!(mig_class.name_any(), "mig.nvidia.com");
        assert_eq!(
            mig_class
                .spec
                .as_ref()
                .and_then(|s| s.extended_resource_name.clone()),
            None
        );
        let mig_owners: Vec<&str> = mig_class
            .owner_references()
            .iter()
            .map(|o| o.name.as_str())
            .collect();
        assert_eq!(mig_owners, ["dynamic", "mig"]);
        assert_eq!(classes.len(), 2);
    }

    #[test]
    fn pools_serving_compute_domains_get_the_default_channel_class() {
        let domains = pool(
            "nvl",
            1,
            json!({"gpu": {"profile": "gb200"}, "interfaces": {"dra": true, "computeDomains": true}}),
        );
        let classes = desired_classes(&[domains], true);
        let names: Vec<String> = classes.iter().map(|c| c.name_any()).collect();
        assert_eq!(
            names,
            [
                "gpu.nvidia.com",
                "mig.nvidia.com",
                "compute-domain-default-channel.nvidia.com"
            ]
        );
        assert_eq!(
            expression(&classes[2]),
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel' && device.attributes['compute-domain.nvidia.com'].id == 0"
        );
    }

    #[test]
    fn an_edit_of_the_spec_stays_until_what_fakegpu_wants_changes() {
        let pool = |name: &str, created: i64, spec: serde_json::Value| {
            let mut pool = (*pool(name, created, spec)).clone();
            pool.metadata.uid = Some(format!("uid-{name}"));
            Arc::new(pool)
        };
        let dra = pool(
            "dra",
            1,
            json!({"gpu": {"profile": "l40s"}, "interfaces": {"dra": true}}),
        );
        let wanted = desired_classes(std::slice::from_ref(&dra), true).remove(0);
        // KAI's suite clears extendedResourceName: the class is as fakegpu wants it all the same.
        let mut edited = wanted.clone();
        if let Some(spec) = edited.spec.as_mut() {
            spec.extended_resource_name = None;
        }
        assert_eq!(write_needed(&edited, &wanted), Write::Nothing);
        // Another pool needs the class too: its owners are written, not its spec.
        let other = pool(
            "other",
            2,
            json!({"gpu": {"profile": "t4"}, "interfaces": {"dra": true}}),
        );
        let both = desired_classes(&[dra.clone(), other], true).remove(0);
        assert_eq!(write_needed(&edited, &both), Write::Metadata);
        // What fakegpu wants of the spec changed (the setting turned off): the whole class.
        let without = desired_classes(std::slice::from_ref(&dra), false).remove(0);
        assert_eq!(
            without
                .spec
                .as_ref()
                .and_then(|s| s.extended_resource_name.clone()),
            None
        );
        assert_eq!(write_needed(&edited, &without), Write::Whole);
        // A class fakegpu wrote before it recorded its spec: written once more.
        let mut unrecorded = wanted.clone();
        unrecorded.metadata.annotations = None;
        assert_eq!(write_needed(&unrecorded, &wanted), Write::Whole);
    }

    #[test]
    fn a_foreign_class_is_not_ours() {
        let foreign: DeviceClass =
            serde_json::from_value(json!({"metadata": {"name": "gpu.nvidia.com",
            "labels": {"app.kubernetes.io/managed-by": "Helm"}}, "spec": {}}))
            .expect("class");
        assert!(!is_ours(&foreign));
    }
}
