//! GPU sharing (Run:ai, KAI): reservation pods and the pods that share their GPUs.

use std::collections::BTreeSet;

use fakegpu_model::names::{annotation, label};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

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
    /// A pod using the GPU of the reservation pod that its [`annotation::RUNAI_GPU`] names, or
    /// the GPUs of the reservation pods of its groups: its [`label::GPU_GROUP`] and, for a pod
    /// sharing several GPUs, each value of its [`label::MULTI_GPU_GROUP_PREFIX`] labels.
    Shares {
        gpu: Option<String>,
        groups: BTreeSet<String>,
    },
}

impl Sharing {
    pub(super) fn of(pod: &Pod, reservations: &ReservationNamespaces) -> Self {
        let labels = pod.labels();
        if reservations.contains(&pod.namespace().unwrap_or_default()) {
            let reserved = pod.annotations().get(annotation::RESERVED_GPU).cloned();
            let group = labels.get(label::GPU_GROUP).cloned();
            return Self::Reservation { reserved, group };
        }
        let groups: BTreeSet<String> = labels
            .iter()
            .filter(|(key, _)| {
                *key == label::GPU_GROUP || key.starts_with(label::MULTI_GPU_GROUP_PREFIX)
            })
            .map(|(_, group)| group.clone())
            .collect();
        match pod.annotations().get(annotation::RUNAI_GPU).cloned() {
            None if groups.is_empty() => Self::None,
            gpu => Self::Shares { gpu, groups },
        }
    }

    pub(super) fn is_reservation(&self) -> bool {
        matches!(self, Self::Reservation { .. })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::collections::BTreeMap;

    use crate::tracking::{fixtures::*, *};

    #[test]
    fn sharing_pods_use_the_gpu_their_reservation_pod_holds() {
        let mut topology = gpus(4);
        let other = user(&asking("other", "2026-01-01T00:00:00Z", 1), &[]);
        let reserve = user(&reservation("reserve", "2026-01-02T00:00:00Z", "g1"), &[]);
        let half = sharer(
            "half",
            json!({"labels": {"runai-gpu-group": "g1"},
                "annotations": {"gpu-fraction": "0.5", "run.ai/simulated-gpu-utilization": "30"}}),
        );
        let stranger = sharer("stranger", json!({"labels": {"runai-gpu-group": "g2"}}));
        let users = [other, reserve.clone(), half, stranger];
        assign(&mut topology, &users, false);
        // The reservation pod holds GPU 1 and uses none of it; the sharer uses half its memory
        // there; a pod of a group no reservation pod holds uses nothing.
        assert_eq!(holders(&topology), ["other", "reserve", "", ""]);
        let shared = &topology[1].status.pod_gpu_usage_status;
        assert_eq!(shared.keys().collect::<Vec<_>>(), ["uid-half"]);
        assert_eq!(shared["uid-half"].fb_used, 500);
        assert_eq!(shared["uid-half"].utilization.max, 30);
        assert!(
            topology
                .iter()
                .all(|g| !g.status.pod_gpu_usage_status.contains_key("uid-stranger"))
        );
        // The reservation pod is told its GPU's UUID, until it carries it.
        assert_eq!(
            unannounced_reservations(&topology, &users),
            [(
                "kai-resource-reservation".to_owned(),
                "reserve".to_owned(),
                "GPU-1".to_owned()
            )]
        );
        let mut announced = reservation("reserve", "2026-01-02T00:00:00Z", "g1");
        announced.metadata.annotations = Some(BTreeMap::from([(
            "run.ai/reserve_for_gpu_index".to_owned(),
            "GPU-1".to_owned(),
        )]));
        let announced = user(&announced, &[]);
        assert!(unannounced_reservations(&topology, std::slice::from_ref(&announced)).is_empty());

        // `runai-gpu` names the GPU by the reservation's annotation, the UUID or the index.
        for named in ["GPU-1", "1"] {
            let mut topology = gpus(4);
            let by_name = sharer("named", json!({"annotations": {"runai-gpu": named}}));
            let unheld = sharer("unheld", json!({"annotations": {"runai-gpu": "GPU-3"}}));
            assign(
                &mut topology,
                &[
                    user(&asking("other", "2026-01-01T00:00:00Z", 1), &[]),
                    announced.clone(),
                    by_name,
                    unheld,
                ],
                false,
            );
            let shared = &topology[1].status.pod_gpu_usage_status;
            assert_eq!(shared.keys().collect::<Vec<_>>(), ["uid-named"], "{named}");
            assert!(topology[3].status.pod_gpu_usage_status.is_empty());
        }
    }

    #[test]
    fn a_pod_sharing_several_gpus_uses_each_its_group_holds() {
        let mut topology = gpus(3);
        let users = [
            user(&reservation("r0", "2026-01-01T00:00:00Z", "g"), &[]),
            user(&reservation("r1", "2026-01-02T00:00:00Z", "g"), &[]),
            sharer(
                "wide",
                json!({"labels": {"runai-gpu-group": "g"},
                "annotations": {"gpu-memory": "2000"}}),
            ),
        ];
        assign(&mut topology, &users, false);
        assert_eq!(holders(&topology), ["r0", "r1", ""]);
        for gpu in &topology[..2] {
            // gpu-memory is MiB, at most the GPU's.
            assert_eq!(gpu.status.pod_gpu_usage_status["uid-wide"].fb_used, 1000);
        }
        // KAI labels a pod sharing several GPUs once per GPU group, `runai-gpu-group/<group>`,
        // each group's reservation pod holding one GPU: half of each is the pod's.
        let mut topology = gpus(3);
        let users = [
            user(&reservation("r-a", "2026-01-01T00:00:00Z", "a"), &[]),
            user(
                &reservation("r-other", "2026-01-02T00:00:00Z", "other"),
                &[],
            ),
            user(&reservation("r-b", "2026-01-03T00:00:00Z", "b"), &[]),
            sharer(
                "multi",
                json!({"labels": {"runai-gpu-group/a": "a", "runai-gpu-group/b": "b"},
                "annotations": {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}}),
            ),
        ];
        assign(&mut topology, &users, false);
        assert_eq!(holders(&topology), ["r-a", "r-other", "r-b"]);
        for at in [0, 2] {
            assert_eq!(
                topology[at].status.pod_gpu_usage_status["uid-multi"].fb_used,
                500
            );
        }
        assert!(topology[1].status.pod_gpu_usage_status.is_empty());

        // A pod outside the reservation namespaces asking for a GPU is an ordinary holder.
        let plain = user(&asking("plain", "2026-01-01T00:00:00Z", 1), &[]);
        assert_eq!(plain.sharing, Sharing::None);
    }
}
