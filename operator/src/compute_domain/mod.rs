//! The ComputeDomain controller: per domain, its ResourceClaimTemplate ([`template`]) and its
//! status ([`status`]). Runs when the cluster serves `resource.nvidia.com/v1beta1`
//! ComputeDomains (fakegpu's CRD, or NVIDIA's next to its real driver).

#[cfg(test)]
mod against_api;
pub mod status;
pub mod template;

use std::sync::Arc;

use fakegpu_api::compute_domain::{ComputeDomain, GROUP, PLURAL, VERSION};
use fakegpu_model::names::compute_domain as names;
use futures::{StreamExt, future::BoxFuture, stream::BoxStream};
use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        resource::v1::{ResourceClaim, ResourceClaimTemplate},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        Controller,
        controller::Action,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde_json::json;
use tracing::{info, warn};

use crate::{
    context::Context,
    error::Result,
    kit::{
        apply,
        owned::Policy,
        recent::RecentWrites,
        streams::{cached, confirm, fan_out, kept, log_outcome},
    },
};

pub async fn reconcile(domain: Arc<ComputeDomain>, ctx: Arc<Context>) -> Result<Action> {
    if domain.metadata.deletion_timestamp.is_some() {
        // Its template goes with it (owner reference); nothing to write.
        return Ok(Action::await_change());
    }
    let problem = ensure_template(&domain, &ctx).await?;
    if let Some(problem) = &problem {
        ctx.events
            .warn_once(
                &reference(&domain),
                problem.reason,
                &domain.spec.channel.resource_claim_template.name,
                &problem.message,
            )
            .await;
    }
    ensure_status(&domain, &ctx, problem.as_ref()).await?;
    // The user's template is not watched (the cache holds domains' templates only): look again
    // now and then whether the name is free.
    Ok(match problem {
        Some(_) => Action::requeue(TEMPLATE_RECHECK),
        None => Action::await_change(),
    })
}

/// How often a domain whose template name is taken looks again.
const TEMPLATE_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes the domain's template; a template the domain cannot have is the domain's condition
/// (and an Event), not an error to retry: only the user can change it.
async fn ensure_template(
    domain: &ComputeDomain,
    ctx: &Context,
) -> Result<Option<status::TemplateProblem>> {
    let (Some(desired), Some(namespace)) = (template::desired_template(domain), domain.namespace())
    else {
        return Ok(None);
    };
    let name = desired.name_any();
    if let Some(problem) = status::TemplateProblem::of_name(&name) {
        return Ok(Some(problem));
    }
    let templates = ctx.owned_in::<ResourceClaimTemplate>(&namespace, Policy::Apply);
    let cached = ctx
        .caches
        .claim_templates
        .as_ref()
        .and_then(|t| t.get(&ObjectRef::new(&name).within(&namespace)));
    // The cache holds domains' templates only; one the user made under that name is looked
    // up before writing, so that it is never taken over.
    let current = match cached {
        Some(cached) => Some(cached),
        None => templates.api().get_opt(&name).await?.map(Arc::new),
    };
    match current {
        Some(current) if !template::owned_by(&current, domain) => {
            warn!(domain = %domain.name_any(), %namespace, template = %name, "template taken");
            Ok(Some(status::TemplateProblem::taken(&namespace, &name)))
        }
        Some(current) if template::template_current(&current, &desired) => Ok(None),
        current => {
            match templates.write(&name, &desired, current.is_some()).await {
                Ok(outcome) => {
                    if outcome.sent() {
                        info!(domain = %domain.name_any(), %namespace, template = %name, "wrote ResourceClaimTemplate");
                    }
                    Ok(None)
                }
                // The API server refuses the template itself (422): retrying cannot help.
                Err(kube::Error::Api(refusal)) if refusal.code == 422 => Ok(Some(
                    status::TemplateProblem::refused(&name, &refusal.message),
                )),
                // The namespace is being deleted, and the domain with it.
                Err(error) if apply::namespace_terminating(&error) => {
                    info!(domain = %domain.name_any(), %namespace, template = %name, "namespace terminating; no template written");
                    Ok(None)
                }
                Err(error) => Err(error.into()),
            }
        }
    }
}

async fn ensure_status(
    domain: &ComputeDomain,
    ctx: &Context,
    problem: Option<&status::TemplateProblem>,
) -> Result<()> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let desired = status::desired_status(domain, &ctx.caches.claims.state(), problem, &now);
    if domain.status.as_ref() == Some(&desired) {
        return Ok(());
    }
    let Some(namespace) = domain.namespace() else {
        return Ok(());
    };
    info!(domain = %domain.name_any(), %namespace, status = ?desired.status, nodes = desired.nodes.len(), "writing ComputeDomain status");
    let patch = json!({
        "apiVersion": ComputeDomain::api_version(&()),
        "kind": ComputeDomain::kind(&()),
        "status": desired,
    });
    ctx.owned_in::<ComputeDomain>(&namespace, Policy::Apply)
        .apply_status(&domain.name_any(), &patch)
        .await?;
    Ok(())
}

fn reference(domain: &ComputeDomain) -> ObjectReference {
    domain.object_ref(&())
}

pub fn error_policy(
    domain: Arc<ComputeDomain>,
    error: &crate::error::Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.failed("compute-domain", error.metric_label());
    warn!(domain = %domain.name_any(), %error, kind = error.metric_label(), "ComputeDomain reconcile failed");
    crate::kit::retry::after_failure(&ctx.state.retries, "compute-domain", domain.as_ref())
}

/// The domain a claim made from a domain's template belongs to.
pub fn domain_of_claim(claim: &ResourceClaim) -> Option<ObjectRef<ComputeDomain>> {
    let domain = claim.labels().get(names::CLAIM_LABEL)?;
    Some(ObjectRef::new(domain).within(&claim.namespace()?))
}

/// The domain a template was made for.
pub fn domain_of_template(template: &ResourceClaimTemplate) -> Option<ObjectRef<ComputeDomain>> {
    let domain = template.labels().get(names::TEMPLATE_LABEL)?;
    Some(ObjectRef::new(domain).within(&template.namespace()?))
}

/// Whether the cluster serves ComputeDomains.
pub async fn served(client: &Client) -> anyhow::Result<bool> {
    crate::kit::served::serves(client, GROUP, VERSION, PLURAL).await
}

/// The domain and template caches and their watches, made before the shared [`Context`] (which
/// holds the template cache).
pub struct Watches {
    domains: Store<ComputeDomain>,
    pub templates: Store<ResourceClaimTemplate>,
    domain_events: BoxStream<'static, Arc<ComputeDomain>>,
    template_events: BoxStream<'static, Arc<ResourceClaimTemplate>>,
    /// Drives both watches; ends when they end.
    pub drive: BoxFuture<'static, ()>,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches").finish_non_exhaustive()
    }
}

impl Watches {
    /// Watches of the domains and their templates; the templates' events confirm fakegpu's
    /// writes of them to `recent`.
    pub fn new(client: &Client, recent: &Arc<RecentWrites>) -> Self {
        let (domains, domain_writer) = reflector::store::<ComputeDomain>();
        let (templates, template_writer) = reflector::store::<ResourceClaimTemplate>();
        let domain_events = cached(
            Api::all(client.clone()),
            watcher::Config::default(),
            domain_writer,
            kept(apply::drop_managed_fields),
        );
        let (drive_domains, [domain_events]) = fan_out(domain_events);
        let template_events = cached(
            Api::all(client.clone()),
            watcher::Config::default().labels(names::TEMPLATE_LABEL),
            template_writer,
            kept(apply::drop_managed_fields),
        )
        .inspect(confirm(recent));
        let (drive_templates, [template_events]) = fan_out(template_events);
        Self {
            domains,
            templates,
            domain_events: domain_events.boxed(),
            template_events: template_events.boxed(),
            drive: Box::pin(async move {
                futures::future::join(drive_domains, drive_templates).await;
            }),
        }
    }

    /// Runs the controller once both caches are full, until shutdown.
    pub async fn run(
        self,
        ctx: Arc<Context>,
        claims: impl futures::Stream<Item = Arc<ResourceClaim>> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.domains.wait_until_ready().await?;
        self.templates.wait_until_ready().await?;
        Controller::for_shared_stream(self.domain_events, self.domains)
            .watches_shared_stream(self.template_events, |t| domain_of_template(&t))
            .watches_shared_stream(claims, |c| domain_of_claim(&c))
            .shutdown_on_signal()
            .run(
                crate::context::measured("compute-domain", reconcile),
                error_policy,
                ctx,
            )
            .for_each(|result| log_outcome("compute-domain", result))
            .await;
        Ok(())
    }
}
