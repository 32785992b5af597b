//! fakegpu-operator: reconciles GpuNodePools into what GPU-aware software reads.
//!
//! Three controllers share one set of watch caches (reflector stores, filled by [`watches`],
//! joined in [`controllers`]):
//! - [`node`]: per Node, the labels and the topology ConfigMap of the pool that owns it;
//!   the node's status (KWOK capacity, fractioning condition), its KWOK ResourceSlice, and
//!   which pod holds which GPU ([`tracking`]);
//! - [`pool`]: per GpuNodePool, its status, conditions and the cleanup finalizer;
//! - [`compute_domain`]: per ComputeDomain, its ResourceClaimTemplate and status.
//!
//! Each concern keeps its desired state in pure functions (unit tested without a cluster) and
//! writes through [`kit::owned`], which skips writes when the cache already shows the desired
//! state or the same write is on its way to it.

pub mod changes;
pub mod compute_domain;
pub mod context;
pub mod controllers;
pub mod deviceclass;
pub mod error;
pub mod kit;
pub mod membership;
pub mod node;
pub mod pod_groups;
pub mod pods;
pub mod pool;
#[cfg(test)]
mod testing;
pub mod tracking;
pub mod watches;
