//! Which nodes a pool has: the part of its status that reads every node of the cluster, kept
//! as an index that each node change updates.
//!
//! A pool's status is computed at most once a second while nodes join, and also whenever a GPU
//! pod updates one of its nodes' topology ConfigMaps. Scanning 10 000 nodes for each (label
//! lookups, selector matching, sorting: 4 ms a pool) was most of the operator's CPU while pods
//! were bound; keeping the scan until any node changed left a quarter of it while 10 000 nodes
//! joined 20 pools, when every node changes. The index holds, per node, the pool whose label it
//! carries and the pools selecting it, and per pool what its status counts; a node change
//! updates one entry, a change of the pools (created, deleted, a new generation) builds it
//! again from the node cache.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use fakegpu_api::GpuNodePool;
use fakegpu_model::names::fakegpu::POOL_LABEL;
use kube::{
    Resource, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use crate::{
    kit::recent::fingerprint,
    membership::Selectors,
    node::{CachedNode, has_kubelet, interfaces::DeployChoices},
};

/// One node carrying the pool's label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// Managed by KWOK (no kubelet, no node agent).
    pub kwok: bool,
    /// The deploy labels someone else set on the node (see [`crate::node::interfaces`]).
    pub choices: DeployChoices,
}

/// A pool's nodes as the node cache shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// The nodes carrying the pool's label, by name.
    pub labelled: Vec<Member>,
    /// How many nodes the pool selects and owns (it is the oldest pool selecting them).
    pub wanted: usize,
    /// Nodes the pool selects that other pools select too, each described for the Conflict
    /// condition, by name.
    pub contested: Vec<String>,
    /// Nodes the pool wants that fakegpu could not write, with the last error, by name.
    pub failing: Vec<(String, String)>,
}

/// Where the index reads nodes: the node cache, or a test's list.
pub trait Nodes {
    fn all(&self) -> Vec<Arc<CachedNode>>;
    fn named(&self, name: &str) -> Option<Arc<CachedNode>>;
}

impl Nodes for Store<CachedNode> {
    fn all(&self) -> Vec<Arc<CachedNode>> {
        self.state()
    }

    fn named(&self, name: &str) -> Option<Arc<CachedNode>> {
        self.get(&ObjectRef::new(name))
    }
}

/// A test's nodes.
#[cfg(test)]
impl Nodes for [Arc<CachedNode>] {
    fn all(&self) -> Vec<Arc<CachedNode>> {
        self.to_vec()
    }

    fn named(&self, name: &str) -> Option<Arc<CachedNode>> {
        self.iter()
            .find(|node| node.meta().name.as_deref() == Some(name))
            .cloned()
    }
}

/// What one node means to the pools. Nodes that mean nothing (no pool label, no pool selecting
/// them) have none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Entry {
    /// The pool whose label the node carries.
    labelled: Option<String>,
    /// Managed by KWOK.
    kwok: bool,
    choices: DeployChoices,
    /// The pools selecting the node, oldest first: the first owns it.
    selecting: Vec<String>,
}

impl Entry {
    fn of(node: &CachedNode, selectors: &Selectors<'_>) -> Option<Self> {
        let entry = Self {
            labelled: node.labels().get(POOL_LABEL).cloned(),
            kwok: !has_kubelet(node),
            choices: DeployChoices::of(node.labels()),
            selecting: selectors
                .selecting(node.labels())
                .iter()
                .map(|pool| pool.name_any())
                .collect(),
        };
        (entry.labelled.is_some() || !entry.selecting.is_empty()).then_some(entry)
    }

    fn owner(&self) -> Option<&str> {
        self.selecting.first().map(String::as_str)
    }

    /// The pools whose [`Members`] this entry counts in.
    fn pools(&self) -> impl Iterator<Item = &str> {
        self.labelled
            .iter()
            .chain(&self.selecting)
            .map(String::as_str)
    }
}

/// What a pool's status counts, summed over the entries.
#[derive(Debug, Default)]
struct PoolNodes {
    /// Nodes carrying the pool's label: whether KWOK manages each, and its deploy labels.
    labelled: BTreeMap<String, (bool, DeployChoices)>,
    wanted: usize,
    /// Nodes the pool selects with others.
    contested: BTreeSet<String>,
    /// The last [`Members`] built, with the fingerprint of the failures it was built with;
    /// dropped when an entry of the pool changes.
    built: Option<(u64, Arc<Members>)>,
}

/// The entries and the pools' sums, for one set of pools.
#[derive(Debug, Default)]
struct Index {
    /// [`pools_key`] of the pools the entries were computed with.
    pools: u64,
    nodes: HashMap<String, Entry>,
    by_pool: HashMap<String, PoolNodes>,
}

impl Index {
    fn build(pools: u64, nodes: &[Arc<CachedNode>], selectors: &Selectors<'_>) -> Self {
        let mut index = Self {
            pools,
            ..Self::default()
        };
        for node in nodes {
            let entry = Entry::of(node, selectors);
            index.set(node.meta().name.as_deref().unwrap_or_default(), entry);
        }
        index
    }

    /// Makes `entry` the node's, taking its old entry out of the sums.
    fn set(&mut self, node: &str, entry: Option<Entry>) {
        let old = match &entry {
            Some(entry) => self.nodes.insert(node.to_owned(), entry.clone()),
            None => self.nodes.remove(node),
        };
        if old == entry {
            return;
        }
        for (entry, adding) in [(old, false), (entry, true)] {
            let Some(entry) = entry else { continue };
            for pool in entry.pools() {
                self.by_pool.entry(pool.to_owned()).or_default().built = None;
            }
            if let Some(pool) = &entry.labelled {
                let sums = self.by_pool.entry(pool.clone()).or_default();
                if adding {
                    sums.labelled
                        .insert(node.to_owned(), (entry.kwok, entry.choices));
                } else {
                    sums.labelled.remove(node);
                }
            }
            if let Some(owner) = entry.owner() {
                let sums = self.by_pool.entry(owner.to_owned()).or_default();
                sums.wanted = if adding {
                    sums.wanted + 1
                } else {
                    sums.wanted.saturating_sub(1)
                };
            }
            if entry.selecting.len() > 1 {
                for pool in &entry.selecting {
                    let sums = self.by_pool.entry(pool.clone()).or_default();
                    if adding {
                        sums.contested.insert(node.to_owned());
                    } else {
                        sums.contested.remove(node);
                    }
                }
            }
        }
    }

    fn members(&mut self, pool: &str, failures: &BTreeMap<String, String>) -> Arc<Members> {
        let failures_key = fingerprint(failures);
        if let Some((key, built)) = self.by_pool.get(pool).and_then(|sums| sums.built.as_ref())
            && *key == failures_key
        {
            return built.clone();
        }
        let nodes = &self.nodes;
        let members = self
            .by_pool
            .get(pool)
            .map_or_else(Members::default, |sums| Members {
                labelled: sums
                    .labelled
                    .iter()
                    .map(|(name, (kwok, choices))| Member {
                        name: name.clone(),
                        kwok: *kwok,
                        choices: *choices,
                    })
                    .collect(),
                wanted: sums.wanted,
                contested: sums
                    .contested
                    .iter()
                    .filter_map(|node| {
                        Some(describe_contested(node, &nodes.get(node)?.selecting, pool))
                    })
                    .collect(),
                failing: failures
                    .iter()
                    .filter(|(node, _)| nodes.get(*node).and_then(Entry::owner) == Some(pool))
                    .map(|(node, error)| (node.clone(), error.clone()))
                    .collect(),
            });
        let members = Arc::new(members);
        self.by_pool.entry(pool.to_owned()).or_default().built =
            Some((failures_key, members.clone()));
        members
    }
}

/// A node several pools select, as `pool`'s Conflict condition names it.
fn describe_contested(node: &str, selecting: &[String], pool: &str) -> String {
    let others: Vec<&str> = selecting
        .iter()
        .map(String::as_str)
        .filter(|other| *other != pool)
        .collect();
    format!(
        "{node} (also {}; {} owns it)",
        others.join(", "),
        selecting.first().map_or("", String::as_str)
    )
}

/// What decides the entries besides the nodes: the pools' names, identities, specs (by
/// generation), ages (the oldest owns a node) and deletions. A pool's status write changes none.
fn pools_key(pools: &[Arc<GpuNodePool>]) -> u64 {
    let pools: Vec<_> = pools
        .iter()
        .map(|p| {
            let meta = p.meta();
            (
                meta.name.as_deref(),
                meta.uid.as_deref(),
                meta.generation,
                meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
                meta.deletion_timestamp.is_some(),
            )
        })
        .collect();
    fingerprint(&pools)
}

/// Each pool's [`Members`], kept up to date by the node changes it is told of.
#[derive(Debug, Default)]
pub struct MembersIndex {
    /// Nodes changed since the index last looked, by name.
    changed: parking_lot::Mutex<HashSet<String>>,
    /// `None` until first asked.
    index: parking_lot::Mutex<Option<Index>>,
}

impl MembersIndex {
    /// A node changed, or was deleted (called after the node cache took the change).
    pub fn node_changed(&self, node: &str) {
        self.changed.lock().insert(node.to_owned());
    }

    /// `pool`'s members among `nodes`, with `pools` deciding who owns a node several pools
    /// select and `failures` the nodes whose last write failed.
    pub fn get(
        &self,
        pool: &str,
        pools: &[Arc<GpuNodePool>],
        failures: &BTreeMap<String, String>,
        nodes: &(impl Nodes + ?Sized),
    ) -> Arc<Members> {
        let key = pools_key(pools);
        let mut index = self.index.lock();
        // Taken under the index's lock, and before the cache is read: a change the cache shows
        // after this is named again, one it showed before is read below. A concurrent caller
        // waits for the lock and then finds the index with these changes in.
        let changed = std::mem::take(&mut *self.changed.lock());
        // Selectors are parsed only when a node is to be read: most lookups (a GPU pod's
        // ConfigMap update, a pool's paced retry) find nothing changed.
        match index.as_mut() {
            Some(current) if current.pools == key => {
                if !changed.is_empty() {
                    let selectors = Selectors::new(pools);
                    for node in changed {
                        let entry = nodes
                            .named(&node)
                            .and_then(|node| Entry::of(&node, &selectors));
                        current.set(&node, entry);
                    }
                }
            }
            _ => *index = Some(Index::build(key, &nodes.all(), &Selectors::new(pools))),
        }
        index
            .as_mut()
            .map(|index| index.members(pool, failures))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::{kwok_node as node, pool};

    fn names(members: &Members) -> Vec<&str> {
        members.labelled.iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn each_pool_counts_its_labelled_wanted_contested_and_failing_nodes() {
        // b selects every KWOK-typed node; a, older, its own by the reference's label.
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let b = pool(
            "b",
            2,
            json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"type": "kwok"}}}),
        );
        let pools = [a, b];
        let nodes = [
            node(
                "n2",
                json!({"run.ai/simulated-gpu-node-pool": "a", "type": "kwok"}),
            ),
            node(
                "n1",
                json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"}),
            ),
            node("n3", json!({"fakegpu.dev/pool": "b"})),
            node("n4", json!({"other": "x"})),
        ];
        let failures = BTreeMap::from([
            ("n2".to_owned(), "forbidden".to_owned()),
            ("n3".to_owned(), "gone".to_owned()),
        ]);
        let index = MembersIndex::default();
        let a = index.get("a", &pools, &failures, &nodes[..]);
        assert_eq!(names(&a), ["n1"]);
        assert!(a.labelled[0].kwok);
        assert_eq!(a.wanted, 2);
        assert_eq!(a.contested, ["n2 (also b; a owns it)"]);
        assert_eq!(a.failing, [("n2".to_owned(), "forbidden".to_owned())]);
        let b = index.get("b", &pools, &failures, &nodes[..]);
        assert_eq!(names(&b), ["n3"]);
        assert_eq!(
            b.wanted, 0,
            "n3 carries b's label, but b does not select it"
        );
        assert_eq!(b.contested, ["n2 (also a; a owns it)"]);
        assert!(
            b.failing.is_empty(),
            "failures count for the pool owning the node"
        );
        assert_eq!(
            *index.get("c", &pools, &failures, &nodes[..]),
            Members::default()
        );
    }

    #[test]
    fn a_node_change_is_read_when_told_and_a_pool_change_reads_every_node() {
        let a = pool("a", 1, json!({"gpu": {"profile": "t4"}}));
        let pools = [Arc::clone(&a)];
        let labelled = json!({"run.ai/simulated-gpu-node-pool": "a", "fakegpu.dev/pool": "a"});
        let mut nodes = vec![node("n2", labelled.clone()), node("n1", labelled.clone())];
        let none = BTreeMap::new();
        let index = MembersIndex::default();
        let first = index.get("a", &pools, &none, nodes.as_slice());
        assert_eq!(names(&first), ["n1", "n2"]);
        assert_eq!(first.wanted, 2);
        // Nothing told: the same members, not computed again.
        assert!(Arc::ptr_eq(
            &first,
            &index.get("a", &pools, &none, nodes.as_slice())
        ));
        // A node the index is not told of is not read (the node cache's events tell it).
        nodes.push(node("n3", labelled.clone()));
        assert_eq!(index.get("a", &pools, &none, nodes.as_slice()).wanted, 2);
        index.node_changed("n3");
        let grown = index.get("a", &pools, &none, nodes.as_slice());
        assert_eq!(names(&grown), ["n1", "n2", "n3"]);
        // Deleted, and another one unlabelled.
        nodes.retain(|n| n.name_any() != "n2");
        nodes[0] = node("n1", json!({}));
        index.node_changed("n2");
        index.node_changed("n1");
        let shrunk = index.get("a", &pools, &none, nodes.as_slice());
        assert_eq!((names(&shrunk), shrunk.wanted), (vec!["n3"], 1));
        // A failure of a wanted node.
        let failing = BTreeMap::from([("n3".to_owned(), "forbidden".to_owned())]);
        assert_eq!(
            index.get("a", &pools, &failing, nodes.as_slice()).failing,
            [("n3".to_owned(), "forbidden".to_owned())]
        );
        // A new pool, older than a, selecting everything: read from every node again,
        // including one changed untold.
        nodes.push(node("n4", labelled));
        let all = pool(
            "all",
            0,
            json!({"gpu": {"profile": "t4"}, "nodeSelector": {}}),
        );
        let both = [a, all];
        let taken = index.get("a", &both, &none, nodes.as_slice());
        assert_eq!((names(&taken), taken.wanted), (vec!["n3", "n4"], 0));
        assert_eq!(index.get("all", &both, &none, nodes.as_slice()).wanted, 3);
    }

    /// Label sets a node moves through, over pools whose selectors overlap.
    fn labels_of(step: u64) -> serde_json::Value {
        let pool = ["a", "b", "c"][(step % 3) as usize];
        match step % 5 {
            0 => json!({}),
            1 => json!({"run.ai/simulated-gpu-node-pool": pool}),
            2 => json!({"run.ai/simulated-gpu-node-pool": pool, "fakegpu.dev/pool": pool}),
            3 => json!({"type": "kwok", "fakegpu.dev/pool": pool}),
            _ => json!({"type": "kwok", "run.ai/simulated-gpu-node-pool": pool}),
        }
    }

    #[test]
    fn node_by_node_updates_agree_with_an_index_built_afresh() {
        let pools = [
            pool("a", 1, json!({"gpu": {"profile": "t4"}})),
            pool("b", 2, json!({"gpu": {"profile": "t4"}})),
            pool(
                "c",
                3,
                json!({"gpu": {"profile": "t4"}, "nodeSelector": {"matchLabels": {"type": "kwok"}}}),
            ),
        ];
        let failures = BTreeMap::from([("n3".to_owned(), "forbidden".to_owned())]);
        let mut nodes: Vec<Arc<CachedNode>> = Vec::new();
        let index = MembersIndex::default();
        // A fixed pseudo-random walk: nodes appear, change labels and go.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..400 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let name = format!("n{}", (state >> 33) % 8);
            nodes.retain(|n| n.name_any() != name);
            if !(state >> 40).is_multiple_of(6) {
                nodes.push(node(&name, labels_of(state >> 45)));
            }
            index.node_changed(&name);
            for pool in ["a", "b", "c"] {
                let updated = index.get(pool, &pools, &failures, nodes.as_slice());
                let afresh = MembersIndex::default().get(pool, &pools, &failures, nodes.as_slice());
                assert_eq!(updated, afresh, "{pool} after {name} changed");
            }
        }
    }
}
