//! GPU sharing (Run:ai, KAI): reservation pods and the pods that share their GPUs.

use super::*;

/// Namespaces whose pods are GPU reservation pods (see [`Sharing`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReservationNamespaces(Vec<String>);

impl ReservationNamespaces {
    /// From a comma-separated list.
    pub fn parse(list: &str) -> Self {
        Self(
            list.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    fn contains(&self, namespace: &str) -> bool {
        self.0.iter().any(|n| n == namespace)
    }
}

/// A pod's part in GPU sharing (Run:ai, KAI), where a reservation pod holds a whole GPU for the
/// pods that share it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    #[default]
    None,
    /// A reservation pod: holds its GPUs and uses none of them. `reserved` is its
    /// [`annotation::RESERVED_GPU`] once written, `group` its [`label::GPU_GROUP`].
    Reservation {
        reserved: Option<String>,
        group: Option<String>,
    },
    /// A pod using the GPU of the reservation pod that its [`annotation::RUNAI_GPU`] or its
    /// [`label::GPU_GROUP`] names.
    Shares {
        gpu: Option<String>,
        group: Option<String>,
    },
}

impl Sharing {
    pub(super) fn of(pod: &Pod, reservations: &ReservationNamespaces) -> Self {
        let group = pod.labels().get(label::GPU_GROUP).cloned();
        if reservations.contains(&pod.namespace().unwrap_or_default()) {
            let reserved = pod.annotations().get(annotation::RESERVED_GPU).cloned();
            return Self::Reservation { reserved, group };
        }
        match pod.annotations().get(annotation::RUNAI_GPU).cloned() {
            None if group.is_none() => Self::None,
            gpu => Self::Shares { gpu, group },
        }
    }

    pub(super) fn is_reservation(&self) -> bool {
        matches!(self, Self::Reservation { .. })
    }
}
