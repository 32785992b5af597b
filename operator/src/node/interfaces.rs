//! Which of its pool's interfaces a node serves. The pool's `spec.interfaces` say what its
//! nodes may serve; the GPU Operator's deploy labels, where someone other than fakegpu set
//! them on a node, narrow that per node, as they do for NVIDIA's own DaemonSets:
//!
//! - a deploy label whose value is not `true` turns its interface off on the node;
//! - a node labelled `true` for one of the two GPU interfaces (device plugin, DRA) and not
//!   labelled for the other serves the one it names: KAI scheduler's test clusters tell
//!   device-plugin nodes and DRA nodes apart this way, and a node serving both offers each
//!   GPU twice;
//! - a label never turns on an interface the pool does not serve.
//!
//! Where no one else set them, fakegpu decides and writes the deploy labels of nodes with a
//! kubelet itself. The node cache shows only labels someone else set (it drops those fakegpu
//! alone owns, see [`super::cached::drop_own_labels`]), so the labels it shows are the
//! user's choices.

use std::collections::BTreeMap;

use fakegpu_api::pool::{Backend, GpuNodePool, Interfaces};
use fakegpu_model::names::label;

/// The deploy labels someone other than fakegpu set on a node: `Some(true)` for `true`,
/// `Some(false)` for any other value, `None` where the node carries none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeployChoices {
    pub device_plugin: Option<bool>,
    pub dra: Option<bool>,
    pub compute_domains: Option<bool>,
}

impl DeployChoices {
    /// The choices among `labels`, the labels a cached node shows.
    pub fn of(labels: &BTreeMap<String, String>) -> Self {
        let choice = |key: &str| labels.get(key).map(|value| value == "true");
        Self {
            device_plugin: choice(label::DEPLOY_DEVICE_PLUGIN),
            dra: choice(label::DEPLOY_DRA_PLUGIN),
            compute_domains: choice(label::DEPLOY_COMPUTE_DOMAIN_PLUGIN),
        }
    }

    /// The choice of deploy label `key`; `None` for a key that is no deploy label.
    fn choice(&self, key: &str) -> Option<bool> {
        match key {
            label::DEPLOY_DEVICE_PLUGIN => self.device_plugin,
            label::DEPLOY_DRA_PLUGIN => self.dra,
            label::DEPLOY_COMPUTE_DOMAIN_PLUGIN => self.compute_domains,
            _ => None,
        }
    }

    /// Whether the node's label `key` is someone else's choice, which fakegpu leaves as it is.
    pub fn chose(&self, key: &str) -> bool {
        self.choice(key).is_some()
    }
}

/// The interfaces a node of `pool` serves: the pool's, narrowed by the node's `choices`. KWOK
/// nodes (`kwok`) of a `backend: mock` pool advertise no `nvidia.com/gpu`: NVIDIA's device
/// plugin, which would, needs a kubelet.
pub fn served(pool: &GpuNodePool, kwok: bool, choices: &DeployChoices) -> Interfaces {
    let offered = &pool.spec.interfaces;
    // One GPU interface labelled `true`, the other not labelled: the node picked that one.
    let picked = |own: Option<bool>, other: Option<bool>| match own {
        Some(chosen) => chosen,
        None => other != Some(true),
    };
    Interfaces {
        device_plugin: offered.device_plugin
            && !(kwok && pool.spec.gpu.backend == Backend::Mock)
            && picked(choices.device_plugin, choices.dra),
        dra: offered.dra && picked(choices.dra, choices.device_plugin),
        compute_domains: offered.compute_domains && choices.compute_domains != Some(false),
    }
}

/// What a node of `pool` asks for by its deploy labels that the pool does not serve: the
/// label keys set to `true` for an interface the pool's `spec.interfaces` leave off.
pub fn unserved_requests(pool: &GpuNodePool, choices: &DeployChoices) -> Vec<&'static str> {
    let offered = &pool.spec.interfaces;
    [
        (label::DEPLOY_DEVICE_PLUGIN, offered.device_plugin),
        (label::DEPLOY_DRA_PLUGIN, offered.dra),
        (label::DEPLOY_COMPUTE_DOMAIN_PLUGIN, offered.compute_domains),
    ]
    .into_iter()
    .filter(|(key, offered)| !offered && choices.choice(key) == Some(true))
    .map(|(key, _)| key)
    .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn choices(labels: &[(&str, &str)]) -> DeployChoices {
        DeployChoices::of(
            &labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn both() -> std::sync::Arc<GpuNodePool> {
        crate::testing::pool(
            "p",
            0,
            json!({"gpu": {"profile": "h100"},
                "interfaces": {"devicePlugin": true, "dra": true, "computeDomains": true}}),
        )
    }

    fn names(served: &Interfaces) -> Vec<&'static str> {
        [
            (served.device_plugin, "devicePlugin"),
            (served.dra, "dra"),
            (served.compute_domains, "computeDomains"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name)
        .collect()
    }

    #[test]
    fn without_labels_the_pool_decides() {
        let none = DeployChoices::default();
        assert_eq!(
            names(&served(&both(), true, &none)),
            ["devicePlugin", "dra", "computeDomains"]
        );
        let plain = crate::testing::pool("p", 0, json!({"gpu": {"profile": "h100"}}));
        assert_eq!(names(&served(&plain, false, &none)), ["devicePlugin"]);
    }

    #[test]
    fn false_turns_one_interface_off() {
        let pool = both();
        let off = choices(&[(label::DEPLOY_DEVICE_PLUGIN, "false")]);
        assert_eq!(names(&served(&pool, true, &off)), ["dra", "computeDomains"]);
        // Any value but `true` is off, as a DaemonSet's `=true` selector reads it.
        let typo = choices(&[(label::DEPLOY_DRA_PLUGIN, "yes")]);
        assert_eq!(
            names(&served(&pool, true, &typo)),
            ["devicePlugin", "computeDomains"]
        );
        let channels = choices(&[(label::DEPLOY_COMPUTE_DOMAIN_PLUGIN, "false")]);
        assert_eq!(
            names(&served(&pool, false, &channels)),
            ["devicePlugin", "dra"]
        );
    }

    #[test]
    fn one_gpu_interface_labelled_true_is_picked() {
        let pool = both();
        let dra = choices(&[(label::DEPLOY_DRA_PLUGIN, "true")]);
        assert_eq!(names(&served(&pool, true, &dra)), ["dra", "computeDomains"]);
        let plugin = choices(&[(label::DEPLOY_DEVICE_PLUGIN, "true")]);
        assert_eq!(
            names(&served(&pool, true, &plugin)),
            ["devicePlugin", "computeDomains"]
        );
        let twice = choices(&[
            (label::DEPLOY_DEVICE_PLUGIN, "true"),
            (label::DEPLOY_DRA_PLUGIN, "true"),
        ]);
        assert_eq!(
            names(&served(&pool, true, &twice)),
            ["devicePlugin", "dra", "computeDomains"]
        );
    }

    #[test]
    fn a_label_never_adds_what_the_pool_leaves_off() {
        let plain = crate::testing::pool("p", 0, json!({"gpu": {"profile": "h100"}}));
        let dra = choices(&[(label::DEPLOY_DRA_PLUGIN, "true")]);
        // The device plugin is picked away and DRA is not the pool's: nothing is served.
        assert!(names(&served(&plain, true, &dra)).is_empty());
        assert_eq!(unserved_requests(&plain, &dra), [label::DEPLOY_DRA_PLUGIN]);
        assert!(unserved_requests(&both(), &dra).is_empty());
        let off = choices(&[(label::DEPLOY_DRA_PLUGIN, "false")]);
        assert!(unserved_requests(&plain, &off).is_empty());
    }

    #[test]
    fn kwok_nodes_of_mock_pools_advertise_no_gpus() {
        let mock = crate::testing::pool("p", 0, json!({"gpu": {"backend": "mock"}}));
        let none = DeployChoices::default();
        assert!(names(&served(&mock, true, &none)).is_empty());
        assert_eq!(names(&served(&mock, false, &none)), ["devicePlugin"]);
    }

    #[test]
    fn only_deploy_labels_are_choices() {
        let chosen = choices(&[
            (label::DEPLOY_DRA_PLUGIN, "true"),
            (label::GPU_PRODUCT, "x"),
        ]);
        assert!(chosen.chose(label::DEPLOY_DRA_PLUGIN));
        assert!(!chosen.chose(label::DEPLOY_DEVICE_PLUGIN));
        assert!(!chosen.chose(label::GPU_PRODUCT));
    }
}
