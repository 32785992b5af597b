//! Paces the work on one object. While nodes join a pool by the thousand, every node event
//! changes the pool's status a little (one more node, one more GPU); computing the status reads
//! every node, and writing each change would cost a write per node per pool. A paced object is
//! looked at (and written) at most once per interval; the reconcile that is held back asks to
//! run again when the interval ends, so the last state is always written.
//!
//! A pacer may also share a rate among its objects: with `overall` set, the objects paced
//! lately together go about once per `overall`, each waiting longer the more of them there
//! are (20 pools filling at once write as often in total as 4).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// When a key was last admitted, and when it last asked.
#[derive(Debug, Clone, Copy)]
struct Seen {
    admitted: Instant,
    asked: Instant,
}

#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    overall: Duration,
    last: Mutex<HashMap<String, Seen>>,
}

impl Pacer {
    /// Each key at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self::shared(interval, Duration::ZERO)
    }

    /// Each key at most once per `interval`, and the keys that ask lately together about once
    /// per `overall`.
    pub fn shared(interval: Duration, overall: Duration) -> Self {
        Self {
            interval,
            overall,
            last: Mutex::default(),
        }
    }

    /// How long each key waits now: `interval`, or `overall` times the keys that asked within
    /// the longest wait there can be, when that is longer (a key that stopped asking, a pool
    /// that got ready, leaves the count after one round).
    fn interval_now(&self, last: &HashMap<String, Seen>, now: Instant) -> Duration {
        if self.overall.is_zero() {
            return self.interval;
        }
        let times = |count: usize| {
            self.overall
                .saturating_mul(u32::try_from(count).unwrap_or(u32::MAX))
        };
        let longest = self.interval.max(times(last.len()));
        let asking = last
            .values()
            .filter(|seen| now.saturating_duration_since(seen.asked) < longest)
            .count();
        self.interval.max(times(asking))
    }

    /// `None` when `key` may be written now (and records the write); otherwise how long to wait.
    pub fn admit(&self, key: &str, now: Instant) -> Option<Duration> {
        // A poisoned lock only means another reconcile panicked mid-insert; the map is still
        // a valid map of instants.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = last.get_mut(key) {
            seen.asked = now;
            let since = now.saturating_duration_since(seen.admitted);
            let wait = self.interval_now(&last, now).saturating_sub(since);
            if !wait.is_zero() {
                return Some(wait);
            }
        }
        last.insert(
            key.to_owned(),
            Seen {
                admitted: now,
                asked: now,
            },
        );
        None
    }

    /// Forgets `key` (its object is gone).
    pub fn forget(&self, key: &str) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_write_passes_then_waits_out_the_interval() {
        let pacer = Pacer::new(Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(pacer.admit("a", start), None);
        assert_eq!(
            pacer.admit("a", start + Duration::from_millis(300)),
            Some(Duration::from_millis(700))
        );
        // Other keys are paced on their own.
        assert_eq!(pacer.admit("b", start + Duration::from_millis(300)), None);
        assert_eq!(pacer.admit("a", start + Duration::from_secs(1)), None);
        pacer.forget("a");
        assert_eq!(pacer.admit("a", start + Duration::from_millis(1100)), None);
    }

    #[test]
    fn many_keys_share_the_overall_rate() {
        let pacer = Pacer::shared(Duration::from_secs(5), Duration::from_secs(1));
        let start = Instant::now();
        // Four keys asking: each on its own interval.
        for key in ["a", "b", "c", "d"] {
            assert_eq!(pacer.admit(key, start), None);
        }
        assert_eq!(pacer.admit("a", start + Duration::from_secs(5)), None);
        // Ten keys asking: each waits ten seconds.
        let pacer = Pacer::shared(Duration::from_secs(5), Duration::from_secs(1));
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        for key in &keys {
            assert_eq!(pacer.admit(key, start), None);
        }
        assert_eq!(
            pacer.admit("k0", start + Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
        for key in &keys {
            assert!(pacer.admit(key, start + Duration::from_secs(9)).is_some());
        }
        assert_eq!(pacer.admit("k0", start + Duration::from_secs(10)), None);
    }

    #[test]
    fn keys_that_stopped_asking_leave_the_count() {
        let pacer = Pacer::shared(Duration::from_secs(5), Duration::from_secs(1));
        let start = Instant::now();
        for key in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            assert_eq!(pacer.admit(key, start), None);
        }
        // A round later only "a" still asks: the plain interval again.
        let round = start + Duration::from_secs(8);
        assert_eq!(pacer.admit("a", round), None);
        assert_eq!(
            pacer.admit("a", round + Duration::from_secs(4)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(pacer.admit("a", round + Duration::from_secs(5)), None);
    }
}
