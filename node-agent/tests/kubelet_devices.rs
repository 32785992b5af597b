//! The report of the kubelet's devices, read through a real Unix socket from a PodResources
//! server that answers as the kubelet does (pods with devices of several resources, containers
//! without devices, the same device listed twice).

use fakegpu_api::kubelet_devices::{ContainerDevices, KubeletDevices};
use fakegpu_node_agent::{
    device_plugin::kubelet_devices::{ReportError, list, report_configmap},
    proto::podresources::{
        ContainerDevices as Devices, ContainerResources, ListPodResourcesRequest,
        ListPodResourcesResponse, PodResources,
        pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer},
    },
    uds,
};
use k8s_openapi::api::core::v1::Node;
use tonic::{Request, Response, Status, transport::Server};

/// Serves one fixed answer, as the kubelet would for the pods it runs.
struct Kubelet(ListPodResourcesResponse);

#[tonic::async_trait]
impl PodResourcesLister for Kubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(self.0.clone()))
    }
}

fn devices(resource: &str, ids: &[&str]) -> Devices {
    Devices {
        resource_name: resource.into(),
        device_ids: ids.iter().map(|d| (*d).to_owned()).collect(),
    }
}

fn pod(namespace: &str, name: &str, containers: Vec<(&str, Vec<Devices>)>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: containers
            .into_iter()
            .map(|(name, devices)| ContainerResources {
                name: name.into(),
                devices,
            })
            .collect(),
    }
}

#[tokio::test]
async fn the_kubelet_s_gpu_devices_are_read_from_its_socket() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("fakegpu-podresources-{}", std::process::id()));
    let socket = dir.join("kubelet.sock");
    let answer = ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "team-b",
                "train",
                vec![
                    (
                        "main",
                        vec![
                            devices("nvidia.com/gpu", &["GPU-b", "GPU-a", "GPU-b"]),
                            devices("example.com/nic", &["nic-0"]),
                        ],
                    ),
                    ("sidecar", vec![]),
                ],
            ),
            pod(
                "team-a",
                "no-gpu",
                vec![("main", vec![devices("example.com/nic", &["nic-1"])])],
            ),
            pod(
                "team-a",
                "mig",
                vec![("main", vec![devices("nvidia.com/mig-1g.10gb", &["MIG-x"])])],
            ),
        ],
    };
    let listener = uds::bind(&socket)?;
    let server = tokio::spawn(
        Server::builder()
            .add_service(PodResourcesListerServer::new(Kubelet(answer)))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );

    let report = list(&socket).await?;
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
    let held = |namespace: &str, pod: &str, resource: &str, ids: &[&str]| ContainerDevices {
        namespace: namespace.into(),
        pod: pod.into(),
        container: "main".into(),
        resource: resource.into(),
        devices: ids.iter().map(|d| (*d).to_owned()).collect(),
    };
    // Only fakegpu's resources, sorted, each device once; containers without any left out.
    assert_eq!(
        report,
        KubeletDevices {
            containers: vec![
                held("team-a", "mig", "nvidia.com/mig-1g.10gb", &["MIG-x"]),
                held("team-b", "train", "nvidia.com/gpu", &["GPU-a", "GPU-b"]),
            ]
        }
    );

    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1", "uid": "0000-1"},
    }))?;
    let configmap = report_configmap(&node, "fakegpu-system", &report);
    assert_eq!(
        configmap.metadata.name.as_deref(),
        Some("kubelet-devices-n1")
    );
    let owner = &configmap.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Node", "0000-1")
    );
    assert_eq!(KubeletDevices::from_configmap(&configmap)?, report);
    Ok(())
}

#[tokio::test]
async fn a_kubelet_without_the_socket_is_an_error_naming_it() {
    let socket = std::env::temp_dir().join("fakegpu-no-such-dir/kubelet.sock");
    match list(&socket).await {
        Err(error @ ReportError::Connect { .. }) => {
            assert!(
                error
                    .to_string()
                    .contains("fakegpu-no-such-dir/kubelet.sock")
            )
        }
        other => panic!("expected a connection error, got {other:?}"),
    }
}
