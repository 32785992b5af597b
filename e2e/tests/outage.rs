//! The API server goes away for a minute and comes back: the operator converges again without
//! anyone restarting it by hand. The API server's process is frozen (SIGSTOP), so that its
//! connections hang as in a network partition rather than being refused; the operator cannot
//! renew its lease, stops leading, exits, and is started again as a Deployment's pod would be
//! (hack/operator.sh supervises it). Alone in its test binary: the whole cluster stalls.

use std::time::Duration;

use fakegpu_e2e::{
    Cleanup, admin_client, create_kwok_node, create_pool, eventually, http_get, install_crds,
    labelled_for, operator_address, signal_process, unique_name,
};
use fakegpu_model::names::label;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

const OUTAGE: Duration = Duration::from_secs(60);
/// After the outage: a restart, caches relisted, the lease taken again (up to a lease
/// duration), the node reconciled.
const RECOVER: Duration = Duration::from_secs(120);

/// Thaws the API server when dropped, whatever happened meanwhile.
struct Frozen;

impl Frozen {
    fn api_server() -> anyhow::Result<Self> {
        signal_process("kube-apiserver", "STOP")?;
        Ok(Self)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(error) = signal_process("kube-apiserver", "CONT") {
            eprintln!("could not thaw the API server: {error:#}");
        }
    }
}

#[tokio::test]
async fn the_operator_converges_after_the_api_server_was_gone_for_a_minute() -> anyhow::Result<()> {
    let client = admin_client().await?;
    install_crds(&client).await?;
    let pool = unique_name("outage");
    let (before, after) = (format!("{pool}-before"), format!("{pool}-after"));
    create_pool(&client, &pool, json!({"gpu": {"profile": "t4"}})).await?;
    create_kwok_node(&client, &before, &[(label::NODE_POOL, &pool)]).await?;
    let cleanup = Cleanup::new(&client).pool(&pool).node(&before).node(&after);
    let result = async {
        labelled_for(&client, &before, &pool, RECOVER).await?;
        {
            let _frozen = Frozen::api_server()?;
            tokio::time::sleep(OUTAGE).await;
        }
        // A node joins after the outage: only a working operator labels it.
        let client = admin_client().await?;
        eventually("the API server answering again", RECOVER, || async {
            Ok(Api::<Node>::all(client.clone())
                .get_opt(&before)
                .await?
                .map(drop))
        })
        .await?;
        create_kwok_node(&client, &after, &[(label::NODE_POOL, &pool)]).await?;
        labelled_for(&client, &after, &pool, RECOVER).await?;
        let address = operator_address();
        eventually("the operator ready again", RECOVER, || async {
            Ok((http_get(&address, "/readyz").ok().as_deref() == Some("ok")).then_some(()))
        })
        .await
    }
    .await;
    cleanup.after(result).await
}
