//! The `v1beta1.DevicePlugin` service for one resource ([`Offer`]): `nvidia.com/gpu`, or a MIG
//! profile's `nvidia.com/mig-<profile>` under the mixed strategy. Devices by their topology
//! UUIDs (the same IDs as labels, ResourceSlices, metrics and nvidia-smi), health and NUMA zone
//! from the topology document, and what a container gets when it is given devices.

use std::{collections::BTreeSet, pin::Pin, sync::Arc};

use fakegpu_model::{
    names::{container_env, resource},
    profiles::published_mig_name,
    topology::NodeTopology,
};
use futures::{Stream, StreamExt};
use tokio::sync::Notify;
use tonic::{Request, Response, Status};
use tracing::{debug, info};

use super::preferred::{Candidate, preferred};
use crate::{
    container::{ContainerEdits, HostMount},
    metrics::Metrics,
    proto::deviceplugin::{
        AllocateRequest, AllocateResponse, ContainerAllocateResponse,
        ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty,
        ListAndWatchResponse, Mount, NumaNode, PreStartContainerRequest, PreStartContainerResponse,
        PreferredAllocationRequest, PreferredAllocationResponse, TopologyInfo,
        device_plugin_server::DevicePlugin,
    },
    topology_source::Topology,
};

/// What one device-plugin server offers the kubelet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Offer {
    /// `nvidia.com/gpu`: whole GPUs, and MIG instances under the single strategy.
    Gpus,
    /// `nvidia.com/mig-<profile>`: the instances of one MIG profile, under the mixed strategy.
    Mig(String),
}

impl Offer {
    /// The extended resource name.
    pub fn resource(&self) -> String {
        match self {
            Self::Gpus => resource::GPU.to_owned(),
            Self::Mig(profile) => resource::mig_resource(profile),
        }
    }

    /// The plugin's socket in the device-plugins directory, as NVIDIA's plugin names it.
    pub fn socket(&self) -> String {
        match self {
            Self::Gpus => "nvidia-gpu.sock".to_owned(),
            Self::Mig(profile) => format!("nvidia-mig-{}.sock", published_mig_name(profile)),
        }
    }
}

/// The offers a document calls for: `nvidia.com/gpu` always (it may offer nothing), and one per
/// MIG profile the node has under the mixed strategy where the node serves the device plugin.
pub fn offers(topology: Option<&NodeTopology>) -> BTreeSet<Offer> {
    let mut offers = BTreeSet::from([Offer::Gpus]);
    if topology.is_some_and(|t| !t.serves_device_plugin()) {
        return offers;
    }
    if let Some(topology) = topology.filter(|t| t.mig_strategy == "mixed") {
        offers.extend(
            topology
                .gpus
                .iter()
                .flat_map(|g| &g.mig_devices)
                .map(|m| Offer::Mig(m.profile.clone())),
        );
    }
    offers
}

#[derive(Debug)]
pub struct GpuDevicePlugin {
    pub node: String,
    pub offer: Offer,
    pub topology: Topology,
    /// Environment and nvidia-smi for every container.
    pub container: ContainerEdits,
    pub metrics: Metrics,
    /// Told after each Allocate: the kubelet now records which pod got which devices.
    pub allocated: Arc<Notify>,
}

/// The devices of `offer` in a document, by UUID with health and NUMA zone. `nvidia.com/gpu`:
/// the whole GPUs, and under MIG strategy `single` the MIG instances (as NVIDIA's plugin
/// advertises them); `nvidia.com/mig-<profile>`: that profile's instances.
pub fn devices(topology: Option<&NodeTopology>, offer: &Offer) -> Vec<Device> {
    // A node whose deploy labels or pool turn the device plugin off offers nothing (a label
    // set `true` by hand may run the plugin's DaemonSet on it all the same): the kubelet
    // then counts no `nvidia.com/gpu` at once, where a plugin gone would leave the GPUs
    // unhealthy for its grace period.
    let Some(topology) = topology.filter(|t| t.serves_device_plugin()) else {
        return Vec::new();
    };
    let single = topology.mig_strategy == "single";
    topology
        .gpus
        .iter()
        .flat_map(|gpu| {
            let ids: Vec<&str> = match offer {
                Offer::Gpus if gpu.mig_devices.is_empty() => vec![gpu.id.as_str()],
                Offer::Gpus if single => gpu.mig_devices.iter().map(|m| m.uuid.as_str()).collect(),
                Offer::Gpus => Vec::new(),
                Offer::Mig(profile) => gpu
                    .mig_devices
                    .iter()
                    .filter(|m| &m.profile == profile)
                    .map(|m| m.uuid.as_str())
                    .collect(),
            };
            ids.into_iter().map(|id| Device {
                id: id.to_owned(),
                health: gpu.health.as_str().to_owned(),
                topology: gpu.numa_node.map(|zone| TopologyInfo {
                    nodes: vec![NumaNode {
                        id: i64::from(zone),
                    }],
                }),
            })
        })
        .collect()
}

/// The container response for `ids` (plus `env` and `mounts`: nvidia-smi and the NVML library,
/// as far as the host has them), or why they cannot be given.
pub fn container_response(
    topology: Option<&NodeTopology>,
    offer: &Offer,
    node: &str,
    ids: &[String],
    env: &[(&'static str, String)],
    mounts: &[HostMount],
) -> Result<ContainerAllocateResponse, Status> {
    if ids.is_empty() {
        return Err(Status::invalid_argument(
            "no device IDs in the container request",
        ));
    }
    let offered = devices(topology, offer);
    let known = |id: &String| offered.iter().any(|d| &d.id == id);
    if let Some(unknown) = ids.iter().find(|id| !known(id)) {
        return Err(Status::invalid_argument(format!(
            "device {unknown:?} is not a {} device of node {node}",
            offer.resource()
        )));
    }
    let visible = ids.join(",");
    // NVIDIA's device plugin sets the first; the reference's the second.
    let envs = [
        (container_env::VISIBLE_DEVICES, visible.clone()),
        (container_env::MOCK_VISIBLE_DEVICES, visible),
    ]
    .iter()
    .chain(env)
    .map(|(k, v)| ((*k).to_owned(), v.clone()))
    .collect();
    let mounts = mounts
        .iter()
        .map(|mount| Mount {
            container_path: mount.container.to_owned(),
            host_path: mount.host.clone(),
            read_only: true,
        })
        .collect();
    Ok(ContainerAllocateResponse {
        envs,
        mounts,
        ..Default::default()
    })
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for GpuDevicePlugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = DeviceStream;

    /// The devices now, then again each time they change (a GPU's health, the pool's GPU count).
    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let node = self.node.clone();
        let offer = self.offer.clone();
        let resource = offer.resource();
        let stream = tokio_stream::wrappers::WatchStream::new(self.topology.clone())
            .map(move |topology| devices(topology.as_deref(), &offer))
            .scan(None, |last: &mut Option<Vec<Device>>, devices| {
                let changed = last.as_ref() != Some(&devices);
                *last = Some(devices.clone());
                futures::future::ready(Some(changed.then_some(devices)))
            })
            .filter_map(futures::future::ready)
            .map(move |devices| {
                info!(node = %node, resource = %resource, devices = devices.len(), unhealthy = devices.iter().filter(|d| d.health != "Healthy").count(), "ListAndWatch: sending devices");
                Ok(ListAndWatchResponse { devices })
            });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let topology = self.topology.borrow().clone();
        let gpus = topology
            .as_ref()
            .map(|t| t.gpus.as_slice())
            .unwrap_or_default();
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|container| {
                let available: Vec<Candidate<'_>> = container
                    .available_device_i_ds
                    .iter()
                    .filter_map(|id| {
                        // A MIG instance goes where its GPU is.
                        gpus.iter().find_map(|g| {
                            let own = (&g.id == id).then_some(g.id.as_str());
                            let mig = || g.mig_devices.iter().find(|m| &m.uuid == id);
                            own.or_else(|| mig().map(|m| m.uuid.as_str()))
                                .map(|id| Candidate {
                                    id,
                                    index: g.index,
                                    zone: g.numa_node,
                                })
                        })
                    })
                    .collect();
                let must: Vec<&str> = container
                    .must_include_device_i_ds
                    .iter()
                    .map(String::as_str)
                    .collect();
                let size = usize::try_from(container.allocation_size).unwrap_or(0);
                ContainerPreferredAllocationResponse {
                    device_i_ds: preferred(&available, &must, size)
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                }
            })
            .collect();
        self.metrics.call("GetPreferredAllocation", true);
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let topology = self.topology.borrow().clone();
        let env = self.container.env();
        let mounts = self.container.mounts();
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|container| {
                debug!(node = %self.node, devices = ?container.devices_ids, "Allocate");
                container_response(
                    topology.as_deref(),
                    &self.offer,
                    &self.node,
                    &container.devices_ids,
                    &env,
                    &mounts,
                )
            })
            .collect::<Result<_, _>>()
            .inspect_err(|_| self.metrics.call("Allocate", false))?;
        self.metrics.call("Allocate", true);
        self.allocated.notify_one();
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use fakegpu_model::topology::{GpuTopology, Health};

    use super::*;

    fn topology() -> NodeTopology {
        NodeTopology {
            gpus: (0..2)
                .map(|index| GpuTopology {
                    id: format!("GPU-{index}"),
                    index,
                    numa_node: Some(index),
                    health: if index == 1 {
                        Health::Unhealthy
                    } else {
                        Health::Healthy
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn mig_instances_are_gpus_under_the_single_strategy_only() {
        let mut t = topology();
        t.gpus[0].mig_devices = ["MIG-a", "MIG-b"]
            .map(|uuid| fakegpu_model::topology::MigDevice {
                uuid: uuid.into(),
                profile: "1g.10gb".into(),
                ..Default::default()
            })
            .to_vec();
        t.mig_strategy = "mixed".into();
        let ids = |t: &NodeTopology| -> Vec<String> {
            devices(Some(t), &Offer::Gpus)
                .into_iter()
                .map(|d| d.id)
                .collect()
        };
        assert_eq!(ids(&t), ["GPU-1"]);
        assert_eq!(
            offers(Some(&t)),
            BTreeSet::from([Offer::Gpus, Offer::Mig("1g.10gb".into())])
        );
        let mig = Offer::Mig("1g.10gb".into());
        let of_profile: Vec<String> = devices(Some(&t), &mig).into_iter().map(|d| d.id).collect();
        assert_eq!(of_profile, ["MIG-a", "MIG-b"]);
        assert_eq!(mig.socket(), "nvidia-mig-1g.10gb.sock");
        assert_eq!(mig.resource(), "nvidia.com/mig-1g.10gb");
        t.mig_strategy = "single".into();
        assert_eq!(offers(Some(&t)), BTreeSet::from([Offer::Gpus]));
        assert_eq!(ids(&t), ["MIG-a", "MIG-b", "GPU-1"]);
        let env = [(container_env::NODE_NAME, "n".to_owned())];
        let ok = container_response(Some(&t), &Offer::Gpus, "n", &["MIG-b".into()], &env, &[])
            .expect("a MIG instance is allocatable");
        assert_eq!(ok.envs[container_env::VISIBLE_DEVICES], "MIG-b");
    }

    #[test]
    fn devices_carry_health_and_zone() {
        let devices = devices(Some(&topology()), &Offer::Gpus);
        assert_eq!(devices[1].id, "GPU-1");
        assert_eq!(devices[1].health, "Unhealthy");
        assert_eq!(devices[1].topology.as_ref().expect("zone").nodes[0].id, 1);
        assert!(super::devices(None, &Offer::Gpus).is_empty());
    }

    #[test]
    fn a_node_whose_device_plugin_is_off_offers_nothing() {
        let mut t = topology();
        t.device_plugin = Some(false);
        assert!(devices(Some(&t), &Offer::Gpus).is_empty());
        t.mig_strategy = "mixed".into();
        t.gpus[0].mig_devices = vec![fakegpu_model::topology::MigDevice {
            uuid: "MIG-a".into(),
            profile: "1g.10gb".into(),
            ..Default::default()
        }];
        assert_eq!(offers(Some(&t)), BTreeSet::from([Offer::Gpus]));
        t.device_plugin = None;
        assert_eq!(offers(Some(&t)).len(), 2);
    }

    #[test]
    fn allocate_refuses_unknown_devices_and_sets_the_environment() {
        let t = topology();
        let env = [(container_env::NODE_NAME, "n".to_owned())];
        let error = container_response(Some(&t), &Offer::Gpus, "n", &["GPU-9".into()], &env, &[])
            .expect_err("unknown device");
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        let ids = ["GPU-0".into(), "GPU-1".into()];
        let mounts = [HostMount {
            host: "/x".into(),
            container: container_env::NVIDIA_SMI_PATH,
        }];
        let ok = container_response(Some(&t), &Offer::Gpus, "n", &ids, &env, &mounts)
            .expect("known devices");
        assert_eq!(ok.envs[container_env::VISIBLE_DEVICES], "GPU-0,GPU-1");
        assert_eq!(ok.envs[container_env::MOCK_VISIBLE_DEVICES], "GPU-0,GPU-1");
        assert_eq!(ok.envs[container_env::NODE_NAME], "n");
        assert_eq!(ok.mounts[0].container_path, container_env::NVIDIA_SMI_PATH);
        assert!(ok.mounts[0].read_only);
    }

    #[test]
    fn a_profile_with_a_plus_is_offered_under_its_published_name() {
        let offer = Offer::Mig("1g.10gb+me".into());
        assert_eq!(offer.resource(), "nvidia.com/mig-1g.10gb.me");
        assert_eq!(offer.socket(), "nvidia-mig-1g.10gb.me.sock");
    }
}
