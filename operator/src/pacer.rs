//! Paces the work on one object. While nodes join a pool by the thousand, every node event
//! changes the pool's status a little (one more node, one more GPU); computing the status reads
//! every node, and writing each change would cost a write per node per pool. A paced object is
//! looked at (and written) at most once per interval; the reconcile that is held back asks to
//! run again when the interval ends, so the last state is always written.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    last: Mutex<HashMap<String, Instant>>,
}

impl Pacer {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::default(),
        }
    }

    /// `None` when `key` may be written now (and records the write); otherwise how long to wait.
    pub fn admit(&self, key: &str, now: Instant) -> Option<Duration> {
        // A poisoned lock only means another reconcile panicked mid-insert; the map is still
        // a valid map of instants.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wait) = last
            .get(key)
            .map(|at| {
                self.interval
                    .saturating_sub(now.saturating_duration_since(*at))
            })
            .filter(|wait| !wait.is_zero())
        {
            return Some(wait);
        }
        last.insert(key.to_owned(), now);
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
}
