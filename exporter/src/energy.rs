//! Energy counters: each GPU's power integrated over time, as `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`
//! counts it (mJ). The power between two readings is taken as the one read first, so the
//! counter only grows, whatever the utilization does; it starts at zero with the exporter, which
//! Prometheus reads as a counter reset, as after a reboot.

use std::{
    collections::{HashMap, HashSet},
    time::Instant,
};

use parking_lot::Mutex;

#[derive(Debug)]
struct Meter {
    at: Instant,
    /// W, as last read.
    power: f64,
    /// mJ so far.
    total: f64,
}

#[derive(Debug, Default)]
pub struct Energy {
    meters: Mutex<HashMap<String, Meter>>,
}

impl Energy {
    /// GPU `gpu`'s energy in mJ up to `now`, from here on drawing `power` W.
    pub fn read(&self, gpu: &str, power: f64, now: Instant) -> f64 {
        let mut meters = self.meters.lock();
        // Looked up by `&str` first: `entry` would copy the UUID on every scrape of every GPU.
        if let Some(meter) = meters.get_mut(gpu) {
            let seconds = now.saturating_duration_since(meter.at).as_secs_f64();
            meter.total += meter.power * seconds * 1000.0;
            meter.at = now;
            meter.power = power;
            return meter.total;
        }
        let meter = Meter {
            at: now,
            power,
            total: 0.0,
        };
        meters.insert(gpu.to_owned(), meter);
        0.0
    }

    /// Forgets the GPUs not in `live` (their nodes left).
    pub fn retain(&self, live: &HashSet<&str>) {
        self.meters
            .lock()
            .retain(|gpu, _| live.contains(gpu.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn energy_adds_up_the_power_drawn_and_never_falls() {
        let energy = Energy::default();
        let start = Instant::now();
        assert_eq!(energy.read("GPU-a", 100.0, start), 0.0);
        // 100 W for 2 s, then 50 W for 1 s.
        assert_eq!(
            energy.read("GPU-a", 50.0, start + Duration::from_secs(2)),
            200_000.0
        );
        assert_eq!(
            energy.read("GPU-a", 0.0, start + Duration::from_secs(3)),
            250_000.0
        );
        assert_eq!(
            energy.read("GPU-a", 0.0, start + Duration::from_secs(9)),
            250_000.0
        );
        // An earlier instant (two scrapes racing) adds nothing.
        assert_eq!(energy.read("GPU-a", 0.0, start), 250_000.0);
        energy.retain(&HashSet::new());
        assert_eq!(energy.read("GPU-a", 10.0, start), 0.0);
    }
}
