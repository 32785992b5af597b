//! fakegpu-operator: reconciles GpuNodePools into what GPU-aware software reads.
//!
//! Two controllers share one set of watch caches (reflector stores):
//! - [`node`]: per Node, the labels and the topology ConfigMap of the pool that owns it;
//!   the node's status (KWOK capacity, fractioning condition), its KWOK ResourceSlice, and
//!   which pod holds which GPU ([`tracking`]);
//! - [`pool`]: per GpuNodePool, its status, conditions and the cleanup finalizer;
//! - [`compute_domain`]: per ComputeDomain, its ResourceClaimTemplate and status.
//!
//! Each concern keeps its desired state in pure functions (unit tested without a cluster) and
//! writes through [`kit::apply`], which skips writes when the cache already shows the desired state.

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
