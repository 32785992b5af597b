//! The ComputeDomain reconciler against a fake API server: a new domain's template is looked
//! up, written, and the domain's status with it; then nothing while the caches show both; a
//! template of the user's under that name is left alone and the domain says so.

use std::sync::Arc;

use axum::http::Method;
use fakegpu_api::compute_domain::ComputeDomain;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use serde_json::json;

use super::{reconcile, template::tests::domain};
use crate::testing::{
    api_server::{Request, against_answering, calls},
    context::{Cluster, context},
};

const TEMPLATE: &str =
    "/apis/resource.k8s.io/v1/namespaces/team/resourceclaimtemplates/imex-channel";
const STATUS: &str = "/apis/resource.nvidia.com/v1beta1/namespaces/team/computedomains/imex/status";

async fn reconcile_once(
    domain: &ComputeDomain,
    templates: Vec<ResourceClaimTemplate>,
    answers: &[(u16, Option<serde_json::Value>)],
) -> (crate::error::Result<()>, Vec<Request>) {
    let cluster = Cluster {
        claim_templates: Some(templates),
        ..Cluster::default()
    };
    let domain = Arc::new(domain.clone());
    against_answering(answers, |client| async move {
        reconcile(domain, context(client, cluster)).await.map(drop)
    })
    .await
}

fn as_json(domain: &ComputeDomain) -> Option<serde_json::Value> {
    Some(serde_json::to_value(domain).expect("domain"))
}

#[tokio::test]
async fn a_new_domain_gets_its_template_and_status_then_nothing() {
    let mut domain = domain("Single");
    let answers = [(404, None), (200, None), (200, as_json(&domain))];
    let (result, seen) = reconcile_once(&domain, vec![], &answers).await;
    result.expect("reconciled");
    assert_eq!(
        calls(&seen),
        [
            (Method::GET, TEMPLATE.to_owned()),
            (Method::PATCH, TEMPLATE.to_owned()),
            (Method::PATCH, STATUS.to_owned()),
        ]
    );
    let template: ResourceClaimTemplate =
        serde_json::from_value(seen[1].body.clone()).expect("template");
    assert!(super::template::owned_by(&template, &domain));

    domain.status = Some(serde_json::from_value(seen[2].body["status"].clone()).expect("status"));
    let (result, seen) = reconcile_once(&domain, vec![template], &[]).await;
    result.expect("reconciled");
    assert_eq!(calls(&seen), [], "a current domain written again");
}

#[tokio::test]
async fn a_template_of_the_user_s_is_left_alone_and_the_domain_says_so() {
    let domain = domain("Single");
    let users = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "imex-channel", "namespace": "team"},
        "spec": {"spec": {"devices": {"requests": []}}}});
    let answers = [(200, Some(users)), (201, None), (200, as_json(&domain))];
    let (result, seen) = reconcile_once(&domain, vec![], &answers).await;
    result.expect("reconciled");
    let calls = calls(&seen);
    assert_eq!(calls[0], (Method::GET, TEMPLATE.to_owned()));
    assert!(
        !calls.contains(&(Method::PATCH, TEMPLATE.to_owned())),
        "the user's template written: {calls:?}"
    );
    assert_eq!(calls.last(), Some(&(Method::PATCH, STATUS.to_owned())));
    let conditions = seen.last().expect("status write").body["status"]["conditions"].to_string();
    assert!(conditions.contains("TemplateConflict"), "{conditions}");
}

#[tokio::test]
async fn a_refused_template_lookup_is_the_reconcile_s_error() {
    let (result, seen) = reconcile_once(&domain("Single"), vec![], &[(500, None)]).await;
    assert!(result.is_err());
    assert_eq!(calls(&seen), [(Method::GET, TEMPLATE.to_owned())]);
}
