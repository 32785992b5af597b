//! Which optional APIs the cluster serves: the operator runs what needs them only where they
//! are.

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
