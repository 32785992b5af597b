//! What NVML events a simulated GPU raises: a GPU the node's document marks unhealthy reports a
//! critical XID error, once, to each event set registered for it (NVIDIA's device plugin then
//! marks it unhealthy and the kubelet stops offering it). A GPU healthy again may report again.
//! Nothing else happens on a simulated GPU.

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
}

impl Registrations {
    /// Adds `types` to what `uuid` reports to this set.
    pub fn register(&mut self, uuid: &str, types: u64) {
        *self.registered.entry(uuid.to_owned()).or_default() |= types & SUPPORTED;
    }

    /// The next fault `machine` (the document as it reads `now`) shows that this set is due to
    /// be told of: each GPU that reports an XID (injected, or implied by its faults or health:
    /// 79 for a GPU marked unhealthy), once, or again each period of a recurring XID. A GPU
    /// whose XID changed or went is forgotten, so a new fault is told again.
    pub fn next_fault(&mut self, machine: &Machine, now: Instant) -> Option<Fault> {
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
    use fakegpu_api::topology::{GpuTopology, Health, NodeTopology};

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
        Machine::of(&document, &Visible::All)
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
                xid: u64::from(fakegpu_api::faults::XID_FALLEN_OFF_THE_BUS)
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
