//! Which nodes a pool has: the part of its status that reads every node of the cluster, kept
//! between reconciles until a node changes.
//!
//! A pool's status also counts the GPUs pods hold, and every GPU pod updates its node's
//! topology ConfigMap, which reconciles the pool. Scanning 10 000 nodes for each of those (label
//! lookups, selector matching, sorting: 4 ms a pool) was most of the operator's CPU while pods
//! were bound, with no node changing at all. The scan is done again only when its inputs move:
//! a node change the pool controller hears of, a pool's spec, existence or deletion, a node's
//! write failure.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use fakegpu_api::{GpuNodePool, names::fakegpu::POOL_LABEL};
use kube::{Resource, ResourceExt, core::SelectorExt};

use crate::{membership, node::CachedNode, node::has_kubelet, recent::fingerprint};

/// One node carrying the pool's label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// Managed by KWOK (no kubelet, no node agent).
    pub kwok: bool,
}

/// A pool's nodes as the node cache shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// The nodes carrying the pool's label, by name.
    pub labelled: Vec<Member>,
    /// How many nodes the pool selects and owns (it is the oldest pool selecting them).
    pub wanted: usize,
    /// Nodes the pool selects that other pools select too, each described for the Conflict
    /// condition.
    pub contested: Vec<String>,
    /// Nodes the pool wants that fakegpu could not write, with the last error.
    pub failing: Vec<(String, String)>,
}

/// A cached node's name, borrowed.
fn node_name(node: &CachedNode) -> &str {
    node.meta().name.as_deref().unwrap_or_default()
}

/// The nodes of `pool` among `nodes`, with `pools` deciding who owns a node several pools
/// select and `failures` the nodes whose last write failed. Pure.
pub fn members(
    pool: &GpuNodePool,
    pools: &[Arc<GpuNodePool>],
    nodes: &[Arc<CachedNode>],
    failures: &BTreeMap<String, String>,
) -> Members {
    let name = pool.name_any();
    let mut labelled: Vec<Member> = nodes
        .iter()
        .filter(|n| n.labels().get(POOL_LABEL) == Some(&name))
        .map(|n| Member {
            name: node_name(n).to_owned(),
            kwok: !has_kubelet(n),
        })
        .collect();
    labelled.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let mut members = Members {
        labelled,
        ..Members::default()
    };
    let is_this_pool = |p: &GpuNodePool| p.meta().name.as_deref() == Some(name.as_str());
    let selectors = membership::Selectors::new(pools);
    let own = selectors.of(&name);
    for node in nodes {
        // Most nodes are other pools': the pool's own selector says so before all are asked.
        if !own.is_some_and(|selector| selector.matches(node.labels())) {
            continue;
        }
        let selecting = selectors.selecting(node.labels());
        if selecting.first().is_some_and(|p| is_this_pool(p)) {
            members.wanted += 1;
            // Looked up by reference: a scan asks for every wanted node, and few fail.
            if let Some(error) = failures.get(node_name(node)) {
                members
                    .failing
                    .push((node_name(node).to_owned(), error.clone()));
            }
        }
        if selecting.len() > 1 {
            let others: Vec<String> = selecting
                .iter()
                .filter(|p| !is_this_pool(p))
                .map(|p| p.name_any())
                .collect();
            members.contested.push(format!(
                "{} (also {}; {} owns it)",
                node_name(node),
                others.join(", "),
                selecting[0].name_any()
            ));
        }
    }
    members
}

/// Each pool's [`Members`], with what they were computed from.
#[derive(Debug, Default)]
pub struct MembersCache {
    /// Bumped on every node change the pool controller hears of: the changes that can move a
    /// node into or out of a pool (labels, annotations, deletion; see
    /// `controllers::node_fingerprint`).
    node_changes: AtomicU64,
    by_pool: parking_lot::Mutex<HashMap<String, (u64, Arc<Members>)>>,
}

impl MembersCache {
    /// A node changed (called after the node cache took the change).
    pub fn node_changed(&self) {
        self.node_changes.fetch_add(1, Ordering::SeqCst);
    }

    /// `pool`'s members, computed by `compute` unless nothing they depend on changed since the
    /// last time. The count of node changes is read before `compute` reads the node cache: a
    /// change that lands in between is in the result or moves the count on, never neither.
    pub fn get(
        &self,
        pool: &str,
        pools: &[Arc<GpuNodePool>],
        failures: &BTreeMap<String, String>,
        compute: impl FnOnce() -> Members,
    ) -> Arc<Members> {
        let node_changes = self.node_changes.load(Ordering::SeqCst);
        // Pool specs change only with a new generation; a pool's status writes are no change.
        let pools: Vec<_> = pools
            .iter()
            .map(|p| {
                (
                    p.meta().name.as_deref(),
                    p.meta().uid.as_deref(),
                    p.meta().generation,
                    p.meta().deletion_timestamp.is_some(),
                )
            })
            .collect();
        let key = fingerprint(&(node_changes, pools, failures));
        if let Some((cached_key, members)) = self.by_pool.lock().get(pool)
            && *cached_key == key
        {
            return members.clone();
        }
        let members = Arc::new(compute());
        self.by_pool
            .lock()
            .insert(pool.to_owned(), (key, members.clone()));
        members
    }

    /// Forgets `pool` (deleted).
    pub fn forget(&self, pool: &str) {
        self.by_pool.lock().remove(pool);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;
    use crate::testing::{kwok_node as node, pool};

    #[test]
    fn members_are_computed_again_only_when_their_inputs_change() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let pools = [Arc::clone(&a)];
        let labelled = json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"});
        let nodes = [node("n2", labelled.clone()), node("n1", labelled)];
        let no_failures = BTreeMap::new();
        let cache = MembersCache::default();
        let computed = Cell::new(0);
        let get = |failures: &BTreeMap<String, String>, pools: &[Arc<GpuNodePool>]| {
            cache.get("a", pools, failures, || {
                computed.set(computed.get() + 1);
                members(&a, pools, &nodes, failures)
            })
        };
        let first = get(&no_failures, &pools);
        assert_eq!(
            first
                .labelled
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>(),
            ["n1", "n2"]
        );
        assert!(first.labelled.iter().all(|m| m.kwok));
        assert_eq!((first.wanted, first.failing.len()), (2, 0));
        // Nothing changed (a ConfigMap's allocated GPUs do not count): the same members.
        assert!(Arc::ptr_eq(&first, &get(&no_failures, &pools)));
        assert_eq!(computed.get(), 1);
        // A node changed.
        cache.node_changed();
        get(&no_failures, &pools);
        assert_eq!(computed.get(), 2);
        // A node's write failed.
        let failing = BTreeMap::from([("n1".to_owned(), "forbidden".to_owned())]);
        assert_eq!(
            get(&failing, &pools).failing,
            [("n1".to_owned(), "forbidden".to_owned())]
        );
        assert_eq!(computed.get(), 3);
        // Another pool appeared.
        let b = pool("b", 2, json!({"gpu": {"profile": "t4"}}));
        let both = [Arc::clone(&a), b];
        get(&failing, &both);
        assert_eq!(computed.get(), 4);
        // Forgotten: computed again.
        cache.forget("a");
        get(&failing, &both);
        assert_eq!(computed.get(), 5);
    }
}
