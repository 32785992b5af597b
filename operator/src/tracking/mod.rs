//! Pod -> GPU tracking: which pod holds which GPU of a node, recorded in the node's topology
//! document (`gpus[].status`), where metrics, nvidia-smi and the pool status read it.
//!
//! Pure. Two kinds of holders:
//! - DRA: the scheduler chose the devices; the claim's allocation result names them
//!   (`gpu-<index>` in the pool named after the node), so the record follows it exactly;
//! - extended resource (`nvidia.com/gpu: N`): the scheduler only counted. Each pod keeps the GPUs
//!   it was given before (read back from the document, so an operator restart changes nothing);
//!   pods without GPUs then take the lowest free indices, oldest pod first.
//!
//! GPU sharing (Run:ai, KAI) adds two roles: a reservation pod (in a reservation namespace)
//! holds whole GPUs as an extended-resource pod does but uses none of them itself, and pods
//! that share a GPU (annotation `runai-gpu`, label `runai-gpu-group` or, sharing several,
//! `runai-gpu-group/<group>`; no GPU request) have their use recorded on the GPU their
//! reservation pod holds.
//!
//! One file per concern: `requests` (what pods ask for), `sharing` (reservation pods and
//! their sharers), `utilization` (what pods use), `user` (a pod as a GPU user) and `assign`
//! (who holds which slot).

mod assign;
#[cfg(test)]
mod fixtures;
mod requests;
mod sharing;
mod user;
mod utilization;

pub use assign::*;
pub use requests::*;
pub use sharing::*;
pub use user::*;
pub use utilization::*;

#[cfg(test)]
mod tests {
    use super::{fixtures::*, *};

    #[test]
    fn finished_or_unbound_pods_hold_nothing() {
        let mut done = asking("a", "2026-01-01T00:00:00Z", 1);
        done.status.as_mut().expect("status").phase = Some("Succeeded".into());
        assert!(!is_active(&done));
        let mut pending = asking("b", "2026-01-01T00:00:00Z", 1);
        pending.spec.as_mut().expect("spec").node_name = None;
        assert!(!is_active(&pending));
    }
}
