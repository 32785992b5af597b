//! Status conditions, shared by the pool and ComputeDomain controllers, written so that
//! kstatus (what Flux, Argo CD and `kubectl wait` judge health by) reads them right: `Ready`
//! False while work goes on (InProgress), `Stalled` True when nothing will change without the
//! user (Failed), `observedGeneration` on each.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The condition kstatus reads as "failed": the object cannot become ready by itself.
pub const STALLED: &str = "Stalled";

/// A condition of `type_`, stamped later by [`stamp`].
pub fn condition(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: None,
        // Replaced by `stamp` with the previous or the current time.
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    }
}

/// `conditions` for `generation`: each keeps the transition time of the same condition
/// (type, status, reason) in `previous`, else takes `now`, so that an unchanged object gets
/// an unchanged status.
pub fn stamp(
    conditions: impl IntoIterator<Item = Condition>,
    previous: &[Condition],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    conditions
        .into_iter()
        .map(|mut c| {
            c.observed_generation = generation;
            c.last_transition_time = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == c.status && p.reason == c.reason)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or_default())
    }

    #[test]
    fn unchanged_conditions_keep_their_time() {
        let first = stamp(
            [condition("Ready", false, "Waiting", "0 of 1".into())],
            &[],
            Some(1),
            &at(10),
        );
        assert_eq!(first[0].last_transition_time, at(10));
        assert_eq!(first[0].observed_generation, Some(1));
        let same = stamp(
            [condition("Ready", false, "Waiting", "still 0 of 1".into())],
            &first,
            Some(2),
            &at(20),
        );
        assert_eq!(same[0].last_transition_time, at(10));
        let changed = stamp(
            [condition("Ready", true, "Done", "1 of 1".into())],
            &same,
            Some(2),
            &at(30),
        );
        assert_eq!(changed[0].last_transition_time, at(30));
    }
}
