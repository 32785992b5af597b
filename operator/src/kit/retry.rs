//! How soon a reconcile that failed runs again: [`FIRST_DELAY`] after its first failure, twice
//! as long after each further one, at most [`MAX_DELAY`]; a success starts over. A fixed short
//! delay had every failing object retried every 5 s, which keeps an API server in trouble
//! busy while it recovers.

use std::{collections::HashMap, time::Duration};

use kube::ResourceExt;
use parking_lot::Mutex;

pub const FIRST_DELAY: Duration = Duration::from_secs(5);
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// The delay after `failures` failures in a row (the first is 1).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY)
}

/// Failures in a row, per controller and object.
#[derive(Debug, Default)]
pub struct Retries {
    failures: Mutex<HashMap<(&'static str, String), u32>>,
}

impl Retries {
    /// Counts a failure of `object` in `controller`; the delay before its next attempt.
    pub fn failed(&self, controller: &'static str, object: String) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry((controller, object)).or_default();
        *count = count.saturating_add(1);
        delay(*count)
    }

    /// `object` reconciled: its next failure waits [`FIRST_DELAY`] again.
    pub fn succeeded(&self, controller: &'static str, object: &str) {
        let mut failures = self.failures.lock();
        if !failures.is_empty() {
            failures.remove(&(controller, object.to_owned()));
        }
    }
}

/// How [`crate::kit::retry::Retries`] knows an object: `namespace/name`, or `name`.
pub fn key<K: kube::Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// What an error policy answers: the next attempt after the object's backoff delay.
pub fn after_failure<K: kube::Resource>(
    retries: &Retries,
    controller: &'static str,
    object: &K,
) -> kube::runtime::controller::Action {
    kube::runtime::controller::Action::requeue(retries.failed(controller, key(object)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_a_success_starts_over() {
        let retries = Retries::default();
        let delays: Vec<u64> = (0..9)
            .map(|_| retries.failed("node", "n1".into()).as_secs())
            .collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        // Another object and another controller count on their own.
        assert_eq!(retries.failed("pool", "n1".into()), FIRST_DELAY);
        retries.succeeded("node", "n1");
        assert_eq!(retries.failed("node", "n1".into()), FIRST_DELAY);
        assert_eq!(delay(u32::MAX), MAX_DELAY);
    }
}
