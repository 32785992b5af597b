//! What NVML events a simulated GPU raises: a GPU that reports an XID (injected, or implied by
//! its faults or health) raises a critical XID error, once or each period of a recurring one,
//! in each event set registered for it (NVIDIA's device plugin then marks it unhealthy and the
//! kubelet stops offering it), and injected ECC errors raise single- or double-bit ECC events
//! as their counts rise. A GPU healthy again may report again. Nothing else happens on a
//! simulated GPU.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::machine::Machine;

/// `nvmlEventTypeSingleBitEccError`.
pub const SINGLE_BIT_ECC_ERROR: u64 = 0x1;
/// `nvmlEventTypeDoubleBitEccError`.
pub const DOUBLE_BIT_ECC_ERROR: u64 = 0x2;
/// `nvmlEventTypeXidCriticalError`.
pub const XID_CRITICAL_ERROR: u64 = 0x8;
/// The event types a GPU supports here: those NVIDIA's device plugin registers for.
pub const SUPPORTED: u64 = SINGLE_BIT_ECC_ERROR | DOUBLE_BIT_ECC_ERROR | XID_CRITICAL_ERROR;

/// One event to deliver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub uuid: String,
    pub event_type: u64,
    pub xid: u64,
}

/// One event set: the GPUs registered with it (by UUID, with the event types asked for) and
/// the faults already delivered (the XID and when).
#[derive(Debug, Default)]
pub struct Registrations {
    registered: BTreeMap<String, u64>,
    reported: BTreeMap<String, (u64, Instant)>,
    /// The ECC error counts (corrected, uncorrected) already told, per GPU.
    ecc_told: BTreeMap<String, (u64, u64)>,
}

impl Registrations {
    /// Adds `types` to what `uuid` reports to this set.
    pub fn register(&mut self, uuid: &str, types: u64) {
        *self.registered.entry(uuid.to_owned()).or_default() |= types & SUPPORTED;
    }

    /// The next fault `machine` (the document as it reads `now`) shows that this set is due to
    /// be told of: XIDs first (`next_xid`), then rises of the ECC error counts
    /// (`next_ecc_error`).
    pub fn next_fault(&mut self, machine: &Machine, now: Instant) -> Option<Fault> {
        self.next_xid(machine, now)
            .or_else(|| self.next_ecc_error(machine))
    }

    /// The next rise of a GPU's ECC error counts this set asked to hear of: a double-bit event
    /// for uncorrected errors, a single-bit one for corrected errors (NVML's event data is 0
    /// for both). Counts that fell (the fault was cleared) are the new baseline, so injecting
    /// them again is told again.
    fn next_ecc_error(&mut self, machine: &Machine) -> Option<Fault> {
        for device in &machine.devices {
            let Some(types) = self.registered.get(&device.uuid) else {
                continue;
            };
            let (corrected, uncorrected) = device.ecc_errors;
            let told = self.ecc_told.entry(device.uuid.clone()).or_default();
            told.0 = told.0.min(corrected);
            told.1 = told.1.min(uncorrected);
            let event_type = if types & DOUBLE_BIT_ECC_ERROR != 0 && uncorrected > told.1 {
                told.1 = uncorrected;
                DOUBLE_BIT_ECC_ERROR
            } else if types & SINGLE_BIT_ECC_ERROR != 0 && corrected > told.0 {
                told.0 = corrected;
                SINGLE_BIT_ECC_ERROR
            } else {
                continue;
            };
            return Some(Fault {
                uuid: device.uuid.clone(),
                event_type,
                xid: 0,
            });
        }
        None
    }

    /// Each GPU that reports an XID (injected, or implied by its faults or health: 79 for a GPU
    /// marked unhealthy), once, or again each period of a recurring XID. A GPU whose XID
    /// changed or went is forgotten, so a new fault is told again.
    fn next_xid(&mut self, machine: &Machine, now: Instant) -> Option<Fault> {
        let faulty: BTreeMap<&str, (u64, Option<Duration>)> = machine
            .devices
            .iter()
            .filter_map(|d| Some((d.uuid.as_str(), (u64::from(d.xid?), d.xid_period))))
            .collect();
        self.reported.retain(|uuid, (xid, _)| {
            faulty
                .get(uuid.as_str())
                .is_some_and(|(current, _)| current == xid)
        });
        let (uuid, xid) = self
            .registered
            .iter()
            .filter(|(_, types)| *types & XID_CRITICAL_ERROR != 0)
            .find_map(|(uuid, _)| {
                let (xid, period) = faulty.get(uuid.as_str())?;
                let due = match (self.reported.get(uuid), period) {
                    (None, _) => true,
                    (Some((_, told)), Some(period)) => {
                        now.saturating_duration_since(*told) >= *period
                    }
                    (Some(_), None) => false,
                };
                due.then(|| (uuid.clone(), *xid))
            })?;
        self.reported.insert(uuid.clone(), (xid, now));
        Some(Fault {
            uuid,
            event_type: XID_CRITICAL_ERROR,
            xid,
        })
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::topology::{Caller, GpuTopology, Health, NodeTopology};

    use super::*;
    use crate::machine::Visible;

    fn machine(unhealthy: &[u32]) -> Machine {
        let document = NodeTopology {
            gpus: (0..3)
                .map(|index| GpuTopology {
                    id: format!("GPU-{index}"),
                    index,
                    health: if unhealthy.contains(&index) {
                        Health::Unhealthy
                    } else {
                        Health::Healthy
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        Machine::of(&document, &Visible::All, Caller::default(), 0)
    }

    #[test]
    fn an_unhealthy_gpu_is_reported_once_to_a_set_registered_for_xids() {
        let mut set = Registrations::default();
        set.register("GPU-0", XID_CRITICAL_ERROR);
        set.register("GPU-1", XID_CRITICAL_ERROR | DOUBLE_BIT_ECC_ERROR);
        set.register("GPU-2", SINGLE_BIT_ECC_ERROR);
        assert_eq!(set.next_fault(&machine(&[]), Instant::now()), None);
        let fault = set.next_fault(&machine(&[1, 2]), Instant::now());
        assert_eq!(
            fault,
            Some(Fault {
                uuid: "GPU-1".into(),
                event_type: XID_CRITICAL_ERROR,
                xid: u64::from(fakegpu_model::faults::XID_FALLEN_OFF_THE_BUS)
            })
        );
        // Told once; GPU 2's set did not ask for XIDs.
        assert_eq!(set.next_fault(&machine(&[1, 2]), Instant::now()), None);
        // Healthy again, then faulty again: told again.
        assert_eq!(set.next_fault(&machine(&[]), Instant::now()), None);
        assert_eq!(
            set.next_fault(&machine(&[1]), Instant::now())
                .map(|f| f.uuid)
                .as_deref(),
            Some("GPU-1")
        );
    }

    #[test]
    fn an_injected_xid_is_reported_as_it_is_even_on_a_healthy_gpu() {
        let mut set = Registrations::default();
        set.register("GPU-0", XID_CRITICAL_ERROR);
        let mut machine = machine(&[]);
        machine.devices[0].xid = Some(13);
        assert_eq!(
            set.next_fault(&machine, Instant::now()).map(|f| f.xid),
            Some(13)
        );
    }

    #[test]
    fn injected_ecc_errors_are_told_as_their_counts_rise() {
        let mut set = Registrations::default();
        set.register("GPU-0", SINGLE_BIT_ECC_ERROR | DOUBLE_BIT_ECC_ERROR);
        set.register("GPU-1", XID_CRITICAL_ERROR);
        let mut machine = machine(&[]);
        let now = Instant::now();
        assert_eq!(set.next_fault(&machine, now), None);
        machine.devices[0].ecc_errors = (3, 1);
        // GPU 1's set asked for XIDs only.
        machine.devices[1].ecc_errors = (5, 0);
        let told: Vec<_> = std::iter::from_fn(|| set.next_fault(&machine, now))
            .map(|f| (f.uuid, f.event_type, f.xid))
            .collect();
        assert_eq!(
            told,
            [
                ("GPU-0".to_owned(), DOUBLE_BIT_ECC_ERROR, 0),
                ("GPU-0".to_owned(), SINGLE_BIT_ECC_ERROR, 0)
            ]
        );
        machine.devices[0].ecc_errors = (4, 1);
        assert_eq!(
            set.next_fault(&machine, now).map(|f| f.event_type),
            Some(SINGLE_BIT_ECC_ERROR)
        );
        // Cleared, then injected again: told again.
        machine.devices[0].ecc_errors = (0, 0);
        assert_eq!(set.next_fault(&machine, now), None);
        machine.devices[0].ecc_errors = (0, 1);
        assert_eq!(
            set.next_fault(&machine, now).map(|f| f.event_type),
            Some(DOUBLE_BIT_ECC_ERROR)
        );
    }

    #[test]
    fn a_recurring_xid_is_told_again_each_period() {
        let mut set = Registrations::default();
        set.register("GPU-0", XID_CRITICAL_ERROR);
        let mut machine = machine(&[]);
        machine.devices[0].xid = Some(79);
        machine.devices[0].xid_period = Some(Duration::from_secs(10));
        let start = Instant::now();
        assert!(set.next_fault(&machine, start).is_some());
        assert!(
            set.next_fault(&machine, start + Duration::from_secs(9))
                .is_none()
        );
        assert!(
            set.next_fault(&machine, start + Duration::from_secs(10))
                .is_some()
        );
        // Raised once: told once.
        machine.devices[0].xid_period = None;
        assert!(
            set.next_fault(&machine, start + Duration::from_secs(60))
                .is_none()
        );
        // Another XID is another fault.
        machine.devices[0].xid = Some(48);
        assert_eq!(
            set.next_fault(&machine, start + Duration::from_secs(61))
                .map(|f| f.xid),
            Some(48)
        );
    }
}
