//! What differs between the agent's DRA drivers: [`super::gpu`] (`gpu.nvidia.com`, GPUs and MIG
//! devices) and [`super::channels`] (`compute-domain.nvidia.com`, IMEX channels). Serving,
//! registration, the checkpoint and the slice publisher are shared.

use k8s_openapi::api::{core::v1::Node, resource::v1::ResourceClaim, resource::v1::ResourceSlice};
use serde_json::Value;

use super::checkpoint::PreparedClaim;

pub trait Devices: Send + Sync + std::fmt::Debug {
    /// The DRA driver name; it also names the plugin's sockets, directory and slice.
    fn driver(&self) -> &'static str;

    /// CDI vendor/class of the claim specs (`k8s.gpu.nvidia.com/claim`).
    fn cdi_kind(&self) -> &'static str;

    /// The devices of `claim` (UID `uid`) this node prepares, or why it cannot.
    fn plan(&self, claim: &ResourceClaim, uid: &str, node: &str) -> Result<PreparedClaim, String>;

    /// The CDI spec of prepared claim `uid`.
    fn claim_spec(&self, uid: &str, claim: &PreparedClaim) -> Value;

    /// The CDI device every prepared device also gets, and its spec (written at start).
    fn common(&self) -> Option<(&'static str, Value)>;

    /// The node's slice as it should be (`current`: as it is), `None` while the node has
    /// nothing to publish.
    fn slice(&self, node: &Node, current: Option<&ResourceSlice>) -> Option<ResourceSlice>;

    /// Name of the node's slice, `<node>-<driver>`.
    fn slice_name(&self, node: &str) -> String {
        fakegpu_api::dra::plugin_slice_name(node, self.driver())
    }
}
