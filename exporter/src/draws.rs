//! Utilization values: each pod's use of each GPU is drawn from its range for each period of
//! the interval (`fakegpu_model::telemetry::drawn_utilization`), so that a dashboard sees values
//! that move, but not on every scrape, and the NVML library and nvidia-smi, drawing the same
//! way from the same document, show the same values.

use std::time::{Duration, Instant, SystemTime};

use fakegpu_model::{telemetry, topology::UtilizationBounds};

#[derive(Debug)]
pub struct Draws {
    interval: Duration,
}

impl Draws {
    pub fn new(interval: Duration) -> Self {
        Self { interval }
    }

    /// Pod `pod`'s utilization of GPU `gpu` at `now`: the draw of the period `now` falls in.
    pub fn value(&self, pod: &str, gpu: &str, bounds: UtilizationBounds, now: Instant) -> u8 {
        telemetry::drawn_utilization(pod, gpu, bounds, self.period(now))
    }

    /// The draw period of `now`. The periods are of wall-clock time, which every process shares
    /// (monotonic time is each machine's own); the offset between the two clocks is read anew
    /// each time, so a clock that is set is followed.
    fn period(&self, now: Instant) -> u64 {
        let (wall, monotonic) = (SystemTime::now(), Instant::now());
        let at = match now.checked_duration_since(monotonic) {
            Some(ahead) => wall + ahead,
            None => wall - monotonic.duration_since(now),
        };
        telemetry::draw_period(at, self.interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(min: u8, max: u8) -> UtilizationBounds {
        UtilizationBounds { min, max }
    }

    #[test]
    fn draws_are_the_shared_model_s_for_the_period_of_now() {
        let draws = Draws::new(Duration::from_secs(10));
        let now = Instant::now();
        let period = telemetry::draw_period(SystemTime::now(), Duration::from_secs(10));
        let value = draws.value("x", "g", bounds(0, 100), now);
        // The period may have turned between the two readings of the clock.
        assert!(
            [period, period + 1]
                .iter()
                .any(|&p| telemetry::drawn_utilization("x", "g", bounds(0, 100), p) == value)
        );
        assert_eq!(draws.value("c", "g", bounds(40, 40), now), 40);
        // An instant 100 s on is ten periods on.
        let later = now + Duration::from_secs(100);
        let value = draws.value("x", "g", bounds(0, 100), later);
        assert!(
            [period + 10, period + 11]
                .iter()
                .any(|&p| telemetry::drawn_utilization("x", "g", bounds(0, 100), p) == value)
        );
    }
}
