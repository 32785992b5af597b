//! Driver `compute-domain.nvidia.com`: the node's IMEX channels for ComputeDomains. As NVIDIA's
//! compute-domain plugin, the slice publishes `channel-0` only; a claim's opaque configuration
//! names its domain and whether the pod gets that channel (`Single`) or every channel (`All`).

use fakegpu_api::{
    compute_domain::AllocationMode,
    dra::{channel_slice_spec, node_slice},
};
use fakegpu_model::names::compute_domain::DRIVER;
use k8s_openapi::api::{
    core::v1::Node,
    resource::v1::{ResourceClaim, ResourceSlice},
};
use kube::ResourceExt;
use serde::Deserialize;
use serde_json::Value;

use super::{
    cdi,
    checkpoint::{ChannelGrant, PreparedClaim, PreparedDevice},
    devices::Devices,
    driver::{node_results, opaque_configs, prepared_claim},
    slice::labels,
};
use crate::topology_source::Topology;

#[derive(Debug)]
pub struct ChannelDevices {
    /// The node's document: the slice is published while the node belongs to a pool that
    /// serves ComputeDomains.
    pub topology: Topology,
}

/// The opaque `ComputeDomainChannelConfig` the domain's ResourceClaimTemplate carries.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChannelConfig {
    #[serde(rename = "domainID")]
    domain_id: String,
    #[serde(default)]
    allocation_mode: AllocationMode,
}

/// The channel configuration of `claim` for `request`: from the allocation (what the scheduler
/// fixed), else the claim's spec.
fn config(claim: &ResourceClaim, request: &str) -> Result<ChannelConfig, String> {
    let parameters = opaque_configs(claim, DRIVER, request)
        .next()
        .ok_or("no ComputeDomainChannelConfig for the channel in the claim")?;
    let config: ChannelConfig = serde_json::from_value(parameters.clone())
        .map_err(|e| format!("bad ComputeDomainChannelConfig: {e}"))?;
    if config.domain_id.is_empty() {
        return Err("ComputeDomainChannelConfig without domainID".into());
    }
    Ok(config)
}

impl Devices for ChannelDevices {
    fn driver(&self) -> &'static str {
        DRIVER
    }

    fn cdi_kind(&self) -> &'static str {
        cdi::CHANNEL_KIND
    }

    fn plan(&self, claim: &ResourceClaim, uid: &str, node: &str) -> Result<PreparedClaim, String> {
        let devices = node_results(claim, uid, DRIVER, node)?
            .into_iter()
            .map(|result| {
                if !result.device.starts_with("channel-") {
                    return Err(format!("{} is not an IMEX channel", result.device));
                }
                let config = config(claim, &result.request)?;
                Ok(PreparedDevice {
                    request: result.request.clone(),
                    pool: result.pool.clone(),
                    device: result.device.clone(),
                    uuid: String::new(),
                    channel: Some(ChannelGrant {
                        domain_id: config.domain_id,
                        all: config.allocation_mode == AllocationMode::All,
                    }),
                    sharing: None,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(prepared_claim(claim, devices))
    }

    fn claim_spec(&self, uid: &str, claim: &PreparedClaim) -> Value {
        cdi::channel_claim_spec(uid, &claim.devices)
    }

    fn common(&self) -> Option<(&'static str, Value)> {
        None
    }

    fn slice(&self, node: &Node, current: Option<&ResourceSlice>) -> Option<ResourceSlice> {
        let document = self.topology.borrow().clone()?;
        if !document.serves_driver(DRIVER) {
            return None;
        }
        let name = node.name_any();
        Some(node_slice(
            &self.slice_name(&name),
            node,
            labels(&document.pool),
            channel_slice_spec(&name),
            current,
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::sync::watch;

    use super::*;

    fn channels() -> ChannelDevices {
        let (_, receiver) = watch::channel(None);
        ChannelDevices { topology: receiver }
    }

    fn claim(mode: Option<&str>, device: &str) -> ResourceClaim {
        let mut parameters = json!({"apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainChannelConfig", "domainID": "cd-uid"});
        if let Some(mode) = mode {
            parameters["allocationMode"] = json!(mode);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"devices": {"config": [{"opaque": {"driver": "compute-domain.nvidia.com",
                "parameters": parameters}}]}},
            "status": {"allocation": {"devices": {"results": [{"request": "channel",
                "driver": "compute-domain.nvidia.com", "pool": "n", "device": device}]}}},
        }))
        .expect("test claim")
    }

    #[test]
    fn single_gives_the_channel_all_gives_every_channel() {
        let plan = channels()
            .plan(&claim(None, "channel-0"), "u1", "n")
            .expect("plans");
        let grant = plan.devices[0].channel.as_ref().expect("a channel");
        assert_eq!((grant.domain_id.as_str(), grant.all), ("cd-uid", false));
        assert_eq!(plan.devices[0].channels().collect::<Vec<_>>(), [0]);
        let spec = channels().claim_spec("u1", &plan);
        assert_eq!(spec["kind"], "k8s.compute-domain.nvidia.com/claim");
        let nodes = &spec["devices"][0]["containerEdits"]["deviceNodes"];
        assert_eq!(nodes[0]["path"], "/dev/nvidia-caps-imex-channels/channel0");
        assert_eq!(
            (nodes[0]["major"].clone(), nodes[0]["minor"].clone()),
            (json!(1), json!(3))
        );

        let all = channels()
            .plan(&claim(Some("All"), "channel-0"), "u1", "n")
            .expect("plans");
        let spec = channels().claim_spec("u1", &all);
        let nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
            .as_array()
            .expect("device nodes")
            .len();
        assert_eq!(nodes, 2048);
    }

    #[test]
    fn a_claim_without_its_domain_is_refused() {
        let mut claim = claim(None, "channel-0");
        claim.spec = None;
        let error = channels().plan(&claim, "u1", "n").expect_err("refused");
        assert!(error.contains("ComputeDomainChannelConfig"), "{error}");
        let bad = channels().plan(&self::claim(Some("Some"), "channel-0"), "u1", "n");
        assert!(bad.is_err_and(|e| e.contains("bad ComputeDomainChannelConfig")));
        let other = channels().plan(&self::claim(None, "gpu-0"), "u1", "n");
        assert!(other.is_err_and(|e| e.contains("not an IMEX channel")));
    }
}
