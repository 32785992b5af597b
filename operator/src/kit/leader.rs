//! Leader election on a `coordination.k8s.io/v1` Lease, so that two replicas are safe: only the
//! holder runs the controllers; the others wait. The rules are client-go's:
//! - a lease is taken when it has no holder, or when its record has not changed for a whole
//!   lease duration *as this process observed it* (no trust in another machine's clock);
//! - every write carries the resourceVersion it read, so two candidates cannot both win;
//! - the holder renews well within the duration; if it cannot renew before the lease could
//!   expire, it stops leading (the caller exits, as controller-runtime's managers do);
//! - on shutdown the holder gives the lease up, so a successor starts at once.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tracing::{debug, info, warn};

/// How a candidate takes part.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// Unique per process.
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews and a candidate retries.
    pub retry_period: Duration,
}

/// What this candidate last saw of the lease, to judge expiry by its own clock.
#[derive(Debug)]
struct Observed {
    resource_version: Option<String>,
    since: Instant,
}

/// One candidate for the lease.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observed>,
}

/// The outcome of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Leading,
    Following(String),
}

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// An API server that takes requests and never answers (a network partition, an overloaded
    /// server) must not keep the holder believing it leads past the lease's expiry.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl LeaderElector {
    pub fn new(client: Client, settings: LeaseSettings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&mut self) {
        let mut last_holder = None;
        loop {
            match self.attempt(self.settings.retry_period).await {
                Ok(Attempt::Leading) => {
                    info!(identity = %self.settings.identity, lease = %self.settings.name, "became leader");
                    return;
                }
                Ok(Attempt::Following(holder)) => {
                    if last_holder.as_ref() != Some(&holder) {
                        info!(%holder, lease = %self.settings.name, "standing by: another replica leads");
                        last_holder = Some(holder);
                    }
                }
                Err(error) => warn!(%error, lease = %self.settings.name, "leader election"),
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews the lease until a renewal fails for longer than the lease lasts, or another
    /// candidate took it; returns then (leadership is lost).
    pub async fn hold(&mut self) {
        // Stop before the lease could have expired, leaving a retry period's margin; no attempt
        // may run past that point, however slowly the API server answers.
        let deadline = self
            .settings
            .lease_duration
            .saturating_sub(self.settings.retry_period);
        let mut last_renewal = Instant::now();
        let left = |last_renewal: Instant| deadline.saturating_sub(last_renewal.elapsed());
        loop {
            tokio::time::sleep(self.settings.retry_period.min(left(last_renewal))).await;
            let left = left(last_renewal);
            if left.is_zero() {
                warn!("could not renew the lease in time: no longer leading");
                return;
            }
            match self.attempt(left.min(self.settings.retry_period)).await {
                Ok(Attempt::Leading) => last_renewal = Instant::now(),
                Ok(Attempt::Following(holder)) => {
                    warn!(%holder, "lost the lease to another replica");
                    return;
                }
                Err(error) => warn!(%error, "could not renew the lease"),
            }
        }
    }

    /// Gives the lease up, if this candidate holds it, so a successor need not wait.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.settings.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.settings.name, "released the lease"),
            Err(error) => warn!(%error, "could not release the lease"),
        }
    }

    fn expired(&mut self, lease: &Lease) -> bool {
        let version = lease.metadata.resource_version.clone();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.resource_version != version);
        if changed {
            self.observed = Some(Observed {
                resource_version: version,
                since: Instant::now(),
            });
        }
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.lease_duration, Duration::from_secs);
        self.observed
            .as_ref()
            .is_some_and(|o| o.since.elapsed() >= duration)
    }

    /// One attempt, given `limit` at most: the holder must learn in time that it could not
    /// renew (see [`LeaderElector::hold`]).
    async fn attempt(&mut self, limit: Duration) -> Result<Attempt, AttemptError> {
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(AttemptError::TimedOut(limit)),
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let identity = self.settings.identity.clone();
        let duration = i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following(
                    "(just created by another replica)".into(),
                )),
                Err(error) => Err(error),
            };
        };
        let expired = self.expired(&lease);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(identity.as_str());
        if let Some(holder) = holder.as_ref().filter(|_| !ours && !expired) {
            return Ok(Attempt::Following(holder.clone()));
        }
        if !ours {
            debug!(previous = ?holder, "taking over the lease");
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(identity);
        }
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now());
        // The resourceVersion read above makes this a compare-and-swap.
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observed = Some(Observed {
                    resource_version: written.metadata.resource_version,
                    since: Instant::now(),
                });
                Ok(Attempt::Leading)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following(
                holder.unwrap_or_else(|| "(another replica)".into()),
            )),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server that accepts connections and never answers: a partition, or a server too
    /// busy to serve. Holds the connections until dropped.
    async fn silent_api_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| unreachable!("binding loopback: {e}"));
        let address = format!(
            "http://{}",
            listener
                .local_addr()
                .unwrap_or_else(|e| unreachable!("{e}"))
        );
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        (address, task)
    }

    #[tokio::test]
    async fn a_holder_whose_renewals_hang_stops_leading_before_the_lease_expires() {
        let (address, server) = silent_api_server().await;
        let config = kube::Config::new(address.parse().unwrap_or_else(|e| unreachable!("{e}")));
        let client = Client::try_from(config).unwrap_or_else(|e| unreachable!("{e}"));
        let lease_duration = Duration::from_secs(3);
        let mut elector = LeaderElector::new(
            client,
            LeaseSettings {
                namespace: "ns".into(),
                name: "lease".into(),
                identity: "me".into(),
                lease_duration,
                retry_period: Duration::from_secs(1),
            },
        );
        let started = tokio::time::Instant::now();
        let stopped = tokio::time::timeout(Duration::from_secs(60), elector.hold()).await;
        server.abort();
        assert!(
            stopped.is_ok(),
            "hold() still leading after 60 s without a renewal"
        );
        let held = started.elapsed();
        assert!(
            held < lease_duration,
            "led for {held:?} without renewing; another replica may take a lease after {lease_duration:?}"
        );
    }
}
