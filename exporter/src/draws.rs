//! Utilization values: each pod's use of each GPU is drawn from its range (inclusive of both
//! ends; the reference never reaches the maximum) and kept for an interval, so that a
//! dashboard sees values that move, but not on every scrape.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use fakegpu_api::topology::UtilizationBounds;
use parking_lot::Mutex;

#[derive(Debug)]
struct Drawn {
    bounds: UtilizationBounds,
    value: u8,
    at: Instant,
}

#[derive(Debug)]
pub struct Draws {
    interval: Duration,
    drawn: Mutex<HashMap<(String, String), Drawn>>,
    seed: AtomicU64,
}

impl Draws {
    pub fn new(interval: Duration) -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Self {
            interval,
            drawn: Mutex::default(),
            seed: AtomicU64::new(seed),
        }
    }

    /// SplitMix64: enough randomness for simulated utilization, no dependency.
    fn next(&self) -> u64 {
        let mut z = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `[bounds.min, bounds.max]`, both inclusive.
    fn draw(&self, bounds: UtilizationBounds) -> u8 {
        let (min, max) = (bounds.min.min(bounds.max), bounds.max.max(bounds.min));
        let span = u64::from(max - min) + 1;
        min + u8::try_from(self.next() % span).unwrap_or(0)
    }

    /// Pod `pod`'s utilization of GPU `gpu` now: the value drawn last, unless the interval has
    /// passed or the range changed.
    pub fn value(&self, pod: &str, gpu: &str, bounds: UtilizationBounds, now: Instant) -> u8 {
        let mut drawn = self.drawn.lock();
        let key = (pod.to_owned(), gpu.to_owned());
        match drawn.get(&key) {
            Some(d) if d.bounds == bounds && now.duration_since(d.at) < self.interval => d.value,
            _ => {
                let value = self.draw(bounds);
                drawn.insert(
                    key,
                    Drawn {
                        bounds,
                        value,
                        at: now,
                    },
                );
                value
            }
        }
    }

    /// Forgets draws of pods that no longer use the GPU.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.drawn.lock().retain(|(pod, gpu), _| keep(pod, gpu));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(min: u8, max: u8) -> UtilizationBounds {
        UtilizationBounds { min, max }
    }

    #[test]
    fn draws_cover_both_ends_and_hold_for_the_interval() {
        let draws = Draws::new(Duration::from_secs(10));
        let start = Instant::now();
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..2000u32 {
            // A new pod each time: a fresh draw.
            seen.insert(draws.value(&format!("p{i}"), "g", bounds(10, 12), start));
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [10, 11, 12]);
        let first = draws.value("x", "g", bounds(0, 100), start);
        assert_eq!(
            draws.value("x", "g", bounds(0, 100), start + Duration::from_secs(9)),
            first
        );
        assert_eq!(draws.value("x", "g", bounds(40, 40), start), 40);
        assert_eq!(
            draws.value("c", "g", bounds(40, 40), start + Duration::from_secs(99)),
            40
        );
    }
}
