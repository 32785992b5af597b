//! PodGroups (`scheduling.run.ai/v2alpha2`, Run:ai and the KAI scheduler) read for their
//! `spec.priorityClassName`, which tells the workload type of pods without a `workloadKind`
//! label. Fetched when a node's pods name one, not watched: clusters without the API must not
//! need it, and a PodGroup exists before its pods are bound (the gang scheduler binds them
//! only then), so the first look finds it.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use fakegpu_model::names::{annotation, label, pod_group};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject, GroupVersionKind},
};
use parking_lot::Mutex;
use tracing::warn;

/// How long an answer holds: the class of a PodGroup does not change; a missing one may
/// appear.
const FOUND_FOR: Duration = Duration::from_secs(600);
const MISSING_FOR: Duration = Duration::from_secs(30);
/// Answers kept before expired ones are dropped.
const KEEP: usize = 4096;

/// (namespace, PodGroup name).
pub type PodGroupKey = (String, String);

#[derive(Debug)]
struct Answer {
    priority_class: Option<String>,
    at: Instant,
}

impl Answer {
    fn fresh(&self) -> bool {
        let ttl = if self.priority_class.is_some() {
            FOUND_FOR
        } else {
            MISSING_FOR
        };
        self.at.elapsed() < ttl
    }
}

pub struct PodGroups {
    client: Client,
    answers: Mutex<HashMap<PodGroupKey, Answer>>,
}

impl std::fmt::Debug for PodGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodGroups")
            .field("answers", &self.answers.lock().len())
            .finish_non_exhaustive()
    }
}

/// The PodGroup a pod names, when its type is not told by its own label.
pub fn pod_group_of(pod: &Pod) -> Option<PodGroupKey> {
    if pod.labels().contains_key(label::WORKLOAD_KIND) {
        return None;
    }
    let name = pod.annotations().get(annotation::POD_GROUP_NAME)?;
    Some((pod.namespace()?, name.clone()))
}

impl PodGroups {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            answers: Mutex::default(),
        }
    }

    /// The priority classes of the PodGroups `pods` name.
    pub async fn priority_classes(&self, pods: &[Arc<Pod>]) -> HashMap<PodGroupKey, String> {
        let wanted: BTreeSet<PodGroupKey> = pods.iter().filter_map(|p| pod_group_of(p)).collect();
        let mut classes = HashMap::new();
        for key in wanted {
            if let Some(class) = self.priority_class(&key).await {
                classes.insert(key, class);
            }
        }
        classes
    }

    async fn priority_class(&self, key: &PodGroupKey) -> Option<String> {
        if let Some(answer) = self.answers.lock().get(key).filter(|a| a.fresh()) {
            return answer.priority_class.clone();
        }
        let gvk = GroupVersionKind::gvk(pod_group::GROUP, pod_group::VERSION, pod_group::KIND);
        let resource = ApiResource::from_gvk_with_plural(&gvk, pod_group::PLURAL);
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &key.0, &resource);
        let priority_class = match api.get_opt(&key.1).await {
            Ok(found) => found.and_then(|group| {
                group
                    .data
                    .pointer("/spec/priorityClassName")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            }),
            // Not allowed to read them: as if there were none (the pod's range still applies).
            Err(kube::Error::Api(status)) if status.code == 403 => None,
            Err(error) => {
                warn!(namespace = %key.0, pod_group = %key.1, %error, "reading PodGroup");
                return None;
            }
        };
        let mut answers = self.answers.lock();
        if answers.len() >= KEEP {
            answers.retain(|_, a| a.fresh());
        }
        answers.insert(
            key.clone(),
            Answer {
                priority_class: priority_class.clone(),
                at: Instant::now(),
            },
        );
        priority_class
    }
}
