//! Which optional APIs the cluster serves: the operator runs what needs them only where they
//! are.

use fakegpu_api::nrt;
use kube::Client;

/// Whether the cluster serves `plural` of `group`/`version` (a CRD installed by the bundle or by
/// someone else).
pub async fn serves(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
) -> anyhow::Result<bool> {
    match client
        .list_api_group_resources(&format!("{group}/{version}"))
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Whether NodeResourceTopologies can be published: the cluster serves the API (its CRD is in
/// the bundle, or a topology exporter installed it).
pub async fn serves_node_resource_topology(client: &Client) -> anyhow::Result<bool> {
    serves(client, nrt::GROUP, nrt::VERSION, nrt::PLURAL).await
}
