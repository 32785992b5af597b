//! `DCGM_EXP_XID_ERRORS_COUNT`: how many XIDs each GPU raised in dcgm-exporter's trailing
//! window (its `--xid-count-window-size`, 5 minutes by default), from when the exporter first
//! saw the fault: one for an XID raised once, until the window passes it; one per period for a
//! recurring one.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use parking_lot::Mutex;

/// dcgm-exporter's default window.
pub const WINDOW: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub struct XidWindows {
    first_seen: Mutex<HashMap<(String, u32), Instant>>,
}

impl XidWindows {
    /// How many times GPU `gpu` raised `xid` (again every `period`, or once) in the window
    /// ending `now`.
    pub fn count(&self, gpu: &str, xid: u32, period: Option<Duration>, now: Instant) -> u64 {
        let first = *self
            .first_seen
            .lock()
            .entry((gpu.to_owned(), xid))
            .or_insert(now);
        in_window(now.saturating_duration_since(first), period)
    }

    /// Forgets the faults not in `live` (cleared, or their nodes left): raised again, they
    /// count from then.
    pub fn retain(&self, live: &HashSet<(&str, u32)>) {
        self.first_seen
            .lock()
            .retain(|(gpu, xid), _| live.contains(&(gpu.as_str(), *xid)));
    }
}

/// XIDs raised at 0, `period`, 2 `period`, … after the first (or only at 0), in the window
/// ending `since` after the first.
fn in_window(since: Duration, period: Option<Duration>) -> u64 {
    let Some(period) = period.filter(|p| !p.is_zero()) else {
        return u64::from(since < WINDOW);
    };
    let steps = |d: Duration| u64::try_from(d.as_nanos() / period.as_nanos()).unwrap_or(u64::MAX);
    let last = steps(since);
    // Raised after the window's start only: the first step past it.
    let first = since
        .checked_sub(WINDOW)
        .map_or(0, |start| steps(start).saturating_add(1));
    last.saturating_add(1).saturating_sub(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_counts_for_a_window_and_a_rate_fills_it() {
        let minute = Duration::from_secs(60);
        assert_eq!(in_window(Duration::ZERO, None), 1);
        assert_eq!(in_window(4 * minute, None), 1);
        assert_eq!(in_window(5 * minute, None), 0);
        let every_ten_seconds = Some(Duration::from_secs(10));
        assert_eq!(in_window(Duration::ZERO, every_ten_seconds), 1);
        assert_eq!(in_window(Duration::from_secs(25), every_ten_seconds), 3);
        // A full window holds 30 of them, however long the fault has lasted.
        assert_eq!(in_window(10 * minute, every_ten_seconds), 30);
        assert_eq!(
            in_window(10 * minute + Duration::from_secs(5), every_ten_seconds),
            30
        );
    }

    #[test]
    fn a_cleared_fault_counts_afresh() {
        let windows = XidWindows::default();
        let start = Instant::now();
        assert_eq!(windows.count("GPU-a", 79, None, start), 1);
        assert_eq!(windows.count("GPU-a", 79, None, start + WINDOW), 0);
        windows.retain(&HashSet::new());
        assert_eq!(windows.count("GPU-a", 79, None, start + WINDOW), 1);
    }
}
