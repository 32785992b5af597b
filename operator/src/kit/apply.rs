//! Writes. Objects fakegpu shares with others (pools' status, DeviceClasses) go through
//! server-side apply with one field manager ([`FIELD_MANAGER`]), so the API server tracks
//! exactly which fields fakegpu owns and drops them when fakegpu stops applying them. Nodes,
//! written once each as they join and so the bulk of a large cluster's writes, get a strategic
//! merge patch under the same manager instead ([`patch_status`]): the API server still records
//! what fakegpu set, and fakegpu names what it takes back ([`keys_only_ours`]).
//! Objects fakegpu alone writes whole and that only exist per node (topology ConfigMaps,
//! ResourceSlices) are created and replaced instead ([`replace`]): nothing of anyone else's to
//! keep, and the API server neither parses YAML nor merges fields for them. These are the
//! verbs; what decides whether to send one is [`crate::kit::owned`]: a call here is a write.

use std::{collections::BTreeSet, sync::LazyLock};

use fakegpu_model::names::{FIELD_MANAGER, metric};
use kube::{
    Api, Resource, Result,
    api::{DeleteParams, PartialObjectMeta, Patch, PatchParams, PostParams},
};
use prometheus::{IntCounterVec, Opts};
use serde::{Serialize, de::DeserializeOwned};

/// Whether the API server refused a write because its namespace is being deleted
/// (NamespaceLifecycle: no new objects there): the namespace's objects are going with it, so
/// there is nothing to retry.
pub fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403
    && status.details.as_ref().is_some_and(|details| {
        details.causes.iter().any(|cause| cause.reason == "NamespaceTerminating")
    }))
}

/// Every write the operator makes, by kind and verb: the number that idempotence and the scale
/// benchmark are about. Process-wide because every write path goes through here; registered in
/// the operator's registry by [`crate::kit::metrics::Metrics::new`].
#[allow(clippy::expect_used)] // Constant name and labels; the metrics unit test builds it.
pub static WRITES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            metric::WRITES,
            "Writes sent to the API server, by kind and verb.",
        ),
        &["kind", "verb"],
    )
    .expect("valid metric name and labels")
});

fn count<K: Resource<DynamicType = ()>>(verb: &str) {
    WRITES.with_label_values(&[&K::kind(&()), verb]).inc();
}

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// A patch that is not an apply, as [`FIELD_MANAGER`].
fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// Server-side applies `object` (a partial object: only the fields fakegpu owns).
pub async fn apply<K>(
    api: &Api<K>,
    name: &str,
    object: &(impl Serialize + std::fmt::Debug),
) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    count::<K>("apply");
    api.patch(name, &params(), &Patch::Apply(object)).await
}

/// Server-side applies the status subresource.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    object: &(impl Serialize + std::fmt::Debug),
) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    count::<K>("apply-status");
    api.patch_status(name, &params(), &Patch::Apply(object))
        .await
}

/// What fakegpu asks the API server to answer a write with: the object's metadata, which is
/// all it reads of the answer (the resourceVersion, see `once`). The whole object, encoded
/// by the API server and decoded here, is 2-8 KB for each node, topology ConfigMap and
/// ResourceSlice written.
pub const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Sends a write built for `api` and reads the metadata of the object it answers with.
async fn metadata_answer<K>(
    api: &Api<K>,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ONLY),
    );
    api.clone().into_client().request(request).await
}

/// Requests to `api`'s resource.
fn request_for<K: Resource>(api: &Api<K>) -> kube::core::Request {
    kube::core::Request::new(api.resource_url())
}

/// Strategic-merge-patches the status subresource as [`FIELD_MANAGER`]. The API server decodes
/// the JSON body directly and records the fields it changes as fakegpu's; an apply of the same
/// body (parsed as YAML, then merged field by field) cost it half as much again: 0.87-0.97
/// against 0.61-0.68 ms of CPU per fresh KWOK node above its idle floor
/// (`hack/bench/node-writes.sh`, README: Scale). Answered with the object's metadata.
pub async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
) -> Result<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    count::<K>("patch-status");
    let patch = Patch::Strategic(patch);
    let request = request_for(api).patch_subresource("status", name, &patch_params(), &patch);
    metadata_answer(api, request).await
}

/// Writes an object fakegpu alone owns, whole: creates it, or (`exists`, or a create that
/// finds it there) replaces it unconditionally. The API server decodes a create's or update's
/// JSON body directly, where an apply's is parsed as YAML and merged field by field with the
/// stored object: at 3 000 nodes handling applies took 41 % of its samples while the pools
/// converged, 21 % once these two kinds were created instead (README, Scale). The object must
/// carry no resourceVersion. Answered with its metadata.
pub async fn replace<K>(
    api: &Api<K>,
    name: &str,
    object: &impl Serialize,
    exists: bool,
) -> Result<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let create = || request_for(api).create(&params, body.clone());
    if !exists {
        count::<K>("create");
        match metadata_answer(api, create()).await {
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            written => return written,
        }
    }
    count::<K>("replace");
    let replace = request_for(api).replace(name, &params, body.clone());
    match metadata_answer(api, replace).await {
        // Deleted since the cache saw it.
        Err(kube::Error::Api(status)) if status.code == 404 => {
            count::<K>("create");
            metadata_answer(api, create()).await
        }
        written => written,
    }
}

/// Sets one annotation of an object fakegpu does not own (a pod's GPUs), or removes it (`None`),
/// with a JSON merge patch. These are set once and taken back only with the pool, so an apply's
/// field tracking buys nothing, and one is sent for every pod scheduled onto a GPU. Unlike an
/// apply of one annotation, it also leaves fakegpu's other annotations on the object alone. An
/// object that is gone answers 404.
pub async fn annotate<K>(api: &Api<K>, name: &str, key: &str, value: Option<&str>) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    count::<K>("merge-patch");
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    api.patch(name, &patch_params(), &Patch::Merge(&patch))
        .await
}

/// A JSON merge patch of `patch` as [`FIELD_MANAGER`]: for fields of an object fakegpu writes
/// without claiming the rest of it (a DeviceClass's owners, leaving its spec to whoever edited
/// it).
pub async fn merge_patch<K>(
    api: &Api<K>,
    name: &str,
    patch: &(impl Serialize + std::fmt::Debug),
) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    count::<K>("merge-patch");
    api.patch(name, &patch_params(), &Patch::Merge(patch)).await
}

/// Deletes an object; one that is already gone counts as deleted.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    count::<K>("delete");
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

/// Drops a cached object's managed fields, for kinds whose ownership nothing reads.
pub fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// The keys of the map at `path` in `object`'s managed fields (`["f:status", "f:capacity"]`
/// gives `f:nvidia.com/gpu`, ...; list entries by key are `k:{...}`) that fakegpu owns, by any
/// of its applies or patches, and no other manager does: what fakegpu may take back. A field
/// someone else set too stays theirs, as it would after an apply that no longer names it.
pub fn keys_only_ours<K: Resource>(object: &K, path: &[&str]) -> BTreeSet<String> {
    let mut ours = BTreeSet::new();
    let mut theirs = BTreeSet::new();
    for entry in object.meta().managed_fields.iter().flatten() {
        let mut at = entry.fields_v1.as_ref().map(|fields| &fields.0);
        for step in path {
            at = at.and_then(|value| value.get(step));
        }
        let keys = at
            .and_then(|value| value.as_object())
            .into_iter()
            .flat_map(|map| map.keys().cloned());
        if entry.manager.as_deref() == Some(FIELD_MANAGER) {
            ours.extend(keys);
        } else {
            theirs.extend(keys);
        }
    }
    ours.retain(|key| !theirs.contains(key));
    ours
}

/// [`keys_only_ours`] of a map of names (labels, annotations, resources): the names.
pub fn names_only_ours<K: Resource>(object: &K, path: &[&str]) -> Vec<String> {
    keys_only_ours(object, path)
        .into_iter()
        .filter_map(|key| key.strip_prefix("f:").map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::testing::api_server::{Request, against};

    async fn replace_against(
        answers: &[u16],
        exists: bool,
    ) -> (Result<PartialObjectMeta<ConfigMap>>, Vec<Request>) {
        against(answers, |client| async move {
            let api: Api<ConfigMap> = Api::namespaced(client, "fakegpu-system");
            let object: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": "topology-n1", "namespace": "fakegpu-system"},
                "data": {"topology.yml": "gpus: []"},
            }))
            .unwrap();
            replace(&api, "topology-n1", &object, exists).await
        })
        .await
    }

    const COLLECTION: &str = "/api/v1/namespaces/fakegpu-system/configmaps";
    const OBJECT: &str = "/api/v1/namespaces/fakegpu-system/configmaps/topology-n1";

    #[tokio::test]
    async fn a_namespace_being_deleted_is_told_from_other_refusals() {
        for (answer, terminating) in [(403, true), (422, false), (500, false)] {
            let (written, _) = replace_against(&[answer], false).await;
            match written {
                Err(error) => {
                    assert_eq!(namespace_terminating(&error), terminating, "{answer}")
                }
                other => panic!("{answer}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn replace_creates_what_the_cache_lacks_and_replaces_what_it_has() {
        /// Case, whether the cache has the object, the server's answers, the requests expected.
        type Case<'a> = (&'a str, bool, &'a [u16], &'a [(Method, &'a str)]);
        let cases: [Case; 4] = [
            ("new", false, &[201], &[(Method::POST, COLLECTION)]),
            (
                "created meanwhile",
                false,
                &[409, 200],
                &[(Method::POST, COLLECTION), (Method::PUT, OBJECT)],
            ),
            ("cached", true, &[200], &[(Method::PUT, OBJECT)]),
            (
                "deleted meanwhile",
                true,
                &[404, 201],
                &[(Method::PUT, OBJECT), (Method::POST, COLLECTION)],
            ),
        ];
        for (case, exists, answers, expected) in cases {
            let (written, seen) = replace_against(answers, exists).await;
            let written = written.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(
                written.metadata.resource_version.as_deref(),
                Some("7"),
                "{case}"
            );
            let asked: Vec<(Method, &str)> = seen
                .iter()
                .map(|request| (request.method.clone(), request.path.as_str()))
                .collect();
            assert_eq!(asked, expected, "{case}");
            for request in &seen {
                assert!(
                    request.query.contains("fieldManager=fakegpu"),
                    "{case}: {request:?}"
                );
                assert_eq!(request.content_type, "application/json", "{case}");
                assert_eq!(request.accept, METADATA_ONLY, "{case}");
                assert!(
                    request.body["metadata"]["resourceVersion"].is_null(),
                    "{case}: an unconditional write"
                );
            }
        }
    }

    #[tokio::test]
    async fn replace_passes_other_failures_on() {
        let (written, seen) = replace_against(&[403], true).await;
        assert!(matches!(written, Err(kube::Error::Api(s)) if s.code == 403));
        assert_eq!(seen.len(), 1, "a refused write is not retried as a create");
    }

    #[tokio::test]
    async fn a_node_status_patch_is_strategic_and_answered_with_metadata() {
        let patch = json!({"status": {"capacity": {"nvidia.com/gpu": "8"}}});
        let (written, seen) = against(&[200], |client| {
            let patch = patch.clone();
            async move {
                let nodes: Api<Node> = Api::all(client);
                patch_status(&nodes, "n1", &patch).await
            }
        })
        .await;
        assert_eq!(
            written.unwrap().metadata.resource_version.as_deref(),
            Some("7")
        );
        let [request] = seen.as_slice() else {
            panic!("one request expected: {seen:?}");
        };
        assert_eq!(
            (request.method.clone(), request.path.as_str()),
            (Method::PATCH, "/api/v1/nodes/n1/status")
        );
        assert!(
            request.query.contains("fieldManager=fakegpu"),
            "{request:?}"
        );
        assert_eq!(
            request.content_type,
            "application/strategic-merge-patch+json"
        );
        assert_eq!(request.accept, METADATA_ONLY);
        assert_eq!(request.body, patch);
    }

    #[tokio::test]
    async fn annotate_merges_one_annotation_into_the_object() {
        let (written, seen) = against(&[200], |client| async move {
            let pods: Api<Pod> = Api::namespaced(client, "team");
            annotate(&pods, "trainer", "fakegpu.dev/gpus", Some("GPU-1,GPU-2")).await
        })
        .await;
        written.unwrap();
        let [request] = seen.as_slice() else {
            panic!("one request expected: {seen:?}");
        };
        assert_eq!(request.method, Method::PATCH);
        assert_eq!(request.path, "/api/v1/namespaces/team/pods/trainer");
        assert!(
            request.query.contains("fieldManager=fakegpu"),
            "{request:?}"
        );
        assert_eq!(request.content_type, "application/merge-patch+json");
        assert_eq!(
            request.body,
            json!({"metadata": {"annotations": {"fakegpu.dev/gpus": "GPU-1,GPU-2"}}})
        );
    }

    #[tokio::test]
    async fn annotate_with_no_value_removes_the_annotation() {
        // The fake server answers with the patch itself, null and all, which is no pod: only
        // the request is looked at.
        let (_, seen) = against(&[200], |client| async move {
            let pods: Api<Pod> = Api::namespaced(client, "team");
            annotate(&pods, "trainer", "fakegpu.dev/gpus", None).await
        })
        .await;
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].body,
            json!({"metadata": {"annotations": {"fakegpu.dev/gpus": null}}})
        );
    }
}
