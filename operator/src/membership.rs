//! Which pool a node belongs to. Pure: reads only the objects it is given.
//!
//! A pool selects nodes by its `spec.nodeSelector`, or by default the nodes labelled
//! `run.ai/simulated-gpu-node-pool=<pool name>`. When several pools select one node, the oldest
//! pool (creation time, then name) owns it and the others report a conflict: a deterministic
//! choice, so two pools never take turns on a node.

use std::{collections::BTreeMap, sync::Arc};

use fakegpu_api::{
    GpuNodePool,
    label_selector::{self, SelectorError},
};
use fakegpu_model::names::{fakegpu::POOL_LABEL, label};
use kube::{
    ResourceExt,
    core::{ParseExpressionError, Selector, SelectorExt},
};

/// The node selector of a pool, defaulted; or what the API server's label-selector rules find
/// wrong with it (the CRD's schema cannot carry them).
pub fn selector(pool: &GpuNodePool) -> Result<Selector, SelectorError> {
    match &pool.spec.node_selector {
        Some(selector) => {
            label_selector::validate(selector)?;
            selector
                .clone()
                .try_into()
                .map_err(|ParseExpressionError(problem)| SelectorError {
                    field: "matchExpressions".into(),
                    problem,
                })
        }
        None => Ok(Selector::from_iter([kube::core::Expression::Equal(
            label::NODE_POOL.to_owned(),
            pool.name_any(),
        )])),
    }
}

/// Whether a live pool selects a node with these labels. A pool being deleted, or one whose
/// selector does not parse, selects nothing.
pub fn selects(pool: &GpuNodePool, labels: &BTreeMap<String, String>) -> bool {
    live_selector(pool).is_some_and(|selector| selector.matches(labels))
}

/// The selector of a pool that selects anything: not being deleted, selector parsed.
fn live_selector(pool: &GpuNodePool) -> Option<Selector> {
    pool.metadata
        .deletion_timestamp
        .is_none()
        .then(|| selector(pool).ok())
        .flatten()
}

/// Whether an event of `pool` concerns a node with these labels, or the other way round: the
/// pool selects the node, or the node still carries the pool's labels from before.
pub fn concerns(pool: &GpuNodePool, labels: &BTreeMap<String, String>) -> bool {
    selects(pool, labels)
        || labels
            .get(POOL_LABEL)
            .is_some_and(|p| *p == pool.name_any())
}

/// The pools that select anything, oldest first (creation time, then name), each with its
/// selector parsed once: for deciding many nodes' membership in one pass. Parsing the
/// selectors again for every node made a pool's status cost nodes × pools² selector parses,
/// which at 20 pools and 10 000 nodes was most of the operator's CPU.
#[derive(Debug)]
pub struct Selectors<'a> {
    pools: Vec<(&'a Arc<GpuNodePool>, Selector)>,
}

impl<'a> Selectors<'a> {
    pub fn new(pools: &'a [Arc<GpuNodePool>]) -> Self {
        let mut pools: Vec<_> = pools
            .iter()
            .filter_map(|pool| Some((pool, live_selector(pool)?)))
            .collect();
        pools.sort_by_cached_key(|(pool, _)| {
            (
                pool.metadata.creation_timestamp.clone().map(|t| t.0),
                pool.name_any(),
            )
        });
        Self { pools }
    }

    /// The pools that select a node with these labels, oldest first; the first one owns it.
    pub fn selecting(&self, labels: &BTreeMap<String, String>) -> Vec<&'a Arc<GpuNodePool>> {
        self.pools
            .iter()
            .filter(|(_, selector)| selector.matches(labels))
            .map(|(pool, _)| *pool)
            .collect()
    }

    /// Pool `name`'s selector, if that pool selects anything.
    pub fn of(&self, name: &str) -> Option<&Selector> {
        self.pools
            .iter()
            .find(|(pool, _)| pool.metadata.name.as_deref() == Some(name))
            .map(|(_, selector)| selector)
    }
}

/// The pools that select a node, oldest first; the first one owns the node.
pub fn selecting<'a>(
    pools: &'a [Arc<GpuNodePool>],
    labels: &BTreeMap<String, String>,
) -> Vec<&'a Arc<GpuNodePool>> {
    Selectors::new(pools).selecting(labels)
}

/// The pool that owns a node, if any.
pub fn owner(
    pools: &[Arc<GpuNodePool>],
    labels: &BTreeMap<String, String>,
) -> Option<Arc<GpuNodePool>> {
    selecting(pools, labels).first().map(|p| Arc::clone(p))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::pool;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn default_selector_is_the_reference_pool_label() {
        let pools = [pool("a100", 1, json!({"gpu": {"profile": "a100"}}))];
        let member = labels(&[(label::NODE_POOL, "a100")]);
        assert_eq!(
            owner(&pools, &member).map(|p| p.name_any()),
            Some("a100".into())
        );
        assert!(owner(&pools, &labels(&[(label::NODE_POOL, "other")])).is_none());
        assert!(owner(&pools, &labels(&[])).is_none());
    }

    #[test]
    fn explicit_selector_with_expressions() {
        let pools = [pool(
            "kwok",
            1,
            json!({"gpu": {"profile": "h100"}, "nodeSelector": {
            "matchLabels": {"type": "kwok"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}}),
        )];
        assert!(owner(&pools, &labels(&[("type", "kwok"), ("zone", "b")])).is_some());
        assert!(owner(&pools, &labels(&[("type", "kwok"), ("zone", "c")])).is_none());
        assert!(owner(&pools, &labels(&[("zone", "a")])).is_none());
    }

    #[test]
    fn a_pool_concerns_the_nodes_it_selects_and_those_it_labelled() {
        let p = pool("p", 1, json!({"gpu": {"profile": "t4"}}));
        assert!(concerns(&p, &labels(&[(label::NODE_POOL, "p")])));
        assert!(
            concerns(&p, &labels(&[(POOL_LABEL, "p")])),
            "left the pool, still labelled"
        );
        assert!(!concerns(&p, &labels(&[(POOL_LABEL, "q")])));
        assert!(!concerns(&p, &labels(&[])));
    }

    #[test]
    fn oldest_pool_owns_a_contested_node() {
        let everything =
            json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"gpu": "yes"}}});
        let pools = [
            pool("young", 20, everything.clone()),
            pool("old", 10, everything.clone()),
            pool("also-old", 10, everything),
        ];
        let node = labels(&[("gpu", "yes")]);
        let order: Vec<_> = selecting(&pools, &node)
            .iter()
            .map(|p| p.name_any())
            .collect();
        assert_eq!(order, ["also-old", "old", "young"]);
    }

    #[test]
    fn deleting_pools_and_bad_selectors_select_nothing() {
        let mut deleting = (*pool("gone", 1, json!({"gpu": {"profile": "t4"}}))).clone();
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let bad = pool(
            "bad",
            1,
            json!({"gpu": {"profile": "t4"}, "nodeSelector": {
            "matchExpressions": [{"key": "x", "operator": "Sometimes"}]}}),
        );
        let pools = [Arc::new(deleting), bad];
        assert!(owner(&pools, &labels(&[(label::NODE_POOL, "gone"), ("x", "1")])).is_none());
        let selectors = Selectors::new(&pools);
        assert!(selectors.of("gone").is_none());
        assert!(selectors.of("bad").is_none());
    }

    #[test]
    fn a_pool_s_own_selector_is_the_one_it_selects_by() {
        let pools = [
            pool("a", 1, json!({"gpu": {"profile": "t4"}})),
            pool(
                "b",
                2,
                json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"zone": "b"}}}),
            ),
        ];
        let selectors = Selectors::new(&pools);
        let in_a = labels(&[(label::NODE_POOL, "a")]);
        let in_b = labels(&[("zone", "b")]);
        assert!(selectors.of("a").is_some_and(|s| s.matches(&in_a)));
        assert!(!selectors.of("a").is_some_and(|s| s.matches(&in_b)));
        assert!(selectors.of("b").is_some_and(|s| s.matches(&in_b)));
        assert!(selectors.of("c").is_none());
    }
}
