//! The floor under the scale benchmark's convergence: fakegpu's own per-node writes of a first
//! pass (topology ConfigMap and ResourceSlice creates, node status patches), sent again by a
//! client that does nothing else: no watch, no reconcile, every body ready before the clock
//! starts. What the cluster takes to absorb them is what any implementation publishing the same
//! objects takes at least; what fakegpu takes beyond it is fakegpu's own.
//!
//! ```text
//! replay capture OUT AUDIT_LOG...     the per-node writes an implementation's first pass sent,
//!                                     from the API server's audit log (hack/cluster.sh's policy
//!                                     logs the bodies of service accounts outside kube-system),
//!                                     one JSON request a line
//! replay run FILE [--concurrency C]   sends them (C at a time, 64 by default: the operator's
//!                                     node reconciles), as KUBECONFIG's account, then waits for
//!                                     SIGTERM so that its CPU and memory can still be read
//! ```
//!
//! `hack/bench/scale.sh` captures every fakegpu run; `hack/bench/impl/fakegpu-replay.sh` is the
//! adapter that replays it on the same nodes (`scale.sh --compare`). Ownership differs on the
//! second cluster: a ConfigMap's or slice's owner reference names its node's uid there, looked
//! up by name (one metadata list of the nodes, before the first write).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs::File,
    io::{BufRead, BufReader, BufWriter, Write as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use fakegpu_e2e::audit::{self, Request, Write};
use fakegpu_operator::kit::apply::METADATA_ONLY;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client, api::ListParams};

/// Concurrent requests, as many as the operator's node reconciles.
const CONCURRENCY: usize = 64;
/// Attempts per write when the API server is overloaded (429, 5xx) or the connection fails.
const ATTEMPTS: u32 = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["capture", out, logs @ ..] if !logs.is_empty() => {
            let logs: Vec<PathBuf> = logs.iter().map(PathBuf::from).collect();
            capture(Path::new(out), &logs)
        }
        ["run", file] => run(Path::new(file), CONCURRENCY).await,
        ["run", file, "--concurrency", concurrency] => {
            run(Path::new(file), concurrency.parse()?).await
        }
        _ => bail!("usage: replay capture OUT AUDIT_LOG... | replay run FILE [--concurrency C]"),
    }
}

/// The writes that publish one node's objects: fakegpu sends each once per node in a first
/// pass. Pool status and DeviceClass writes (a few hundred per run) are left out.
fn is_per_node(write: &Write) -> bool {
    matches!(
        (
            write.verb.as_str(),
            write.resource.as_str(),
            write.subresource.as_deref()
        ),
        ("create", "configmaps" | "resourceslices", None) | ("patch", "nodes", Some("status"))
    )
}

/// Keeps the first per-node write to each object, in the order the API server logged them
/// (logs oldest first: a rotated one before `audit.log`).
fn capture(out: &Path, logs: &[PathBuf]) -> anyhow::Result<()> {
    let mut seen = HashSet::new();
    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    let mut writer =
        BufWriter::new(File::create(out).with_context(|| format!("creating {}", out.display()))?);
    for log in logs {
        let reader =
            BufReader::new(File::open(log).with_context(|| format!("opening {}", log.display()))?);
        for line in reader.lines() {
            let Some((write, request)) = audit::implementation_request(&line?) else {
                continue;
            };
            if !is_per_node(&write) || !seen.insert(write.target()) {
                continue;
            }
            serde_json::to_writer(&mut writer, &request)?;
            writer.write_all(b"\n")?;
            *kept.entry(write.kind()).or_default() += 1;
        }
    }
    writer.flush()?;
    ensure!(
        !kept.is_empty(),
        "no per-node write with its body in {logs:?}"
    );
    eprintln!("captured {kept:?} in {}", out.display());
    Ok(())
}

async fn run(file: &Path, concurrency: usize) -> anyhow::Result<()> {
    let requests = read_requests(file)?;
    let client = Client::try_default().await?;
    let started = Instant::now();
    let uids = node_uids(&client).await?;
    let listed = started.elapsed();
    let outcomes: Vec<Result<(), String>> = stream::iter(requests)
        .map(|request| {
            let client = client.clone();
            let uids = &uids;
            async move {
                let request = with_node_uids(request, uids).map_err(|e| format!("{e:#}"))?;
                send(&client, &request).await
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for error in outcomes.iter().filter_map(|outcome| outcome.as_ref().err()) {
        *failed.entry(error.clone()).or_default() += 1;
    }
    eprintln!(
        "replayed {} writes in {:.1?} ({listed:.1?} of it listing {} nodes), {concurrency} at a \
         time; failed: {failed:?}",
        outcomes.len(),
        started.elapsed(),
        uids.len()
    );
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?
        .recv()
        .await;
    Ok(())
}

fn read_requests(file: &Path) -> anyhow::Result<Vec<Request>> {
    let reader =
        BufReader::new(File::open(file).with_context(|| format!("opening {}", file.display()))?);
    let mut requests = Vec::new();
    for (number, line) in reader.lines().enumerate() {
        let request = serde_json::from_str(&line?)
            .with_context(|| format!("{} line {}", file.display(), number + 1))?;
        requests.push(request);
    }
    ensure!(!requests.is_empty(), "{} holds no write", file.display());
    Ok(requests)
}

/// Every node's uid by name, from metadata pages as the operator lists them.
async fn node_uids(client: &Client) -> anyhow::Result<HashMap<String, String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut uids = HashMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = nodes.list_metadata(&params).await?;
        for node in &page.items {
            if let (Some(name), Some(uid)) = (&node.metadata.name, &node.metadata.uid) {
                uids.insert(name.clone(), uid.clone());
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(uids),
        }
    }
}

/// `request` with each owner reference to a node naming that node's uid on this cluster.
fn with_node_uids(request: Request, uids: &HashMap<String, String>) -> anyhow::Result<Request> {
    // Node patches, half the writes, carry no owner: they are sent as captured.
    if !request.body.get().contains("\"ownerReferences\"") {
        return Ok(request);
    }
    let mut body: serde_json::Value = serde_json::from_str(request.body.get())?;
    let owners = body
        .pointer_mut("/metadata/ownerReferences")
        .and_then(serde_json::Value::as_array_mut);
    for owner in owners.into_iter().flatten() {
        if owner["kind"] != "Node" {
            continue;
        }
        let name = owner["name"].as_str().unwrap_or_default();
        let uid = uids
            .get(name)
            .with_context(|| format!("no node {name:?} on this cluster for {}", request.uri))?;
        owner["uid"] = uid.as_str().into();
    }
    Ok(Request {
        body: serde_json::value::to_raw_value(&body)?,
        ..request
    })
}

/// Sends one write the way the operator does (metadata-only answer, strategic merge for a
/// patch), again while the API server answers that it is too busy.
async fn send(client: &Client, request: &Request) -> Result<(), String> {
    let (method, content_type) = match request.verb.as_str() {
        "create" => (http::Method::POST, "application/json"),
        "patch" => (
            http::Method::PATCH,
            "application/strategic-merge-patch+json",
        ),
        other => return Err(format!("cannot replay a {other}")),
    };
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(50 << attempt.min(5))).await;
        }
        let http_request = http::Request::builder()
            .method(method.clone())
            .uri(&request.uri)
            .header(http::header::ACCEPT, METADATA_ONLY)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(request.body.get().as_bytes().to_vec())
            .map_err(|e| e.to_string())?;
        match client.request_text(http_request).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code != 429 && status.code < 500 => {
                return Err(format!("{} {}", status.code, status.reason));
            }
            Err(error) => last = error.to_string(),
        }
    }
    Err(format!("gave up after {ATTEMPTS} attempts: {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> Request {
        Request {
            verb: "create".into(),
            uri: "/api/v1/namespaces/fakegpu-system/configmaps".into(),
            body: serde_json::value::RawValue::from_string(body.into()).unwrap(),
        }
    }

    #[test]
    fn owner_references_to_nodes_take_this_cluster_s_uids() {
        let uids = HashMap::from([("n1".to_owned(), "new".to_owned())]);
        let body = r#"{"metadata":{"name":"topology-n1","ownerReferences":[
            {"apiVersion":"v1","kind":"Node","name":"n1","uid":"old"},
            {"apiVersion":"x/v1","kind":"Other","name":"n1","uid":"kept"}]},"data":{}}"#;
        let rewritten = with_node_uids(request(body), &uids).unwrap();
        let value: serde_json::Value = serde_json::from_str(rewritten.body.get()).unwrap();
        assert_eq!(value["metadata"]["ownerReferences"][0]["uid"], "new");
        assert_eq!(value["metadata"]["ownerReferences"][1]["uid"], "kept");

        let patch = r#"{"metadata":{"labels":{"a":"b"}}}"#;
        assert_eq!(
            with_node_uids(request(patch), &uids).unwrap().body.get(),
            patch
        );

        let missing = body.replace("\"n1\",\"uid\":\"old\"", "\"n2\",\"uid\":\"old\"");
        let error = with_node_uids(request(&missing), &uids).unwrap_err();
        assert!(format!("{error:#}").contains("no node \"n2\""), "{error:#}");
    }

    #[test]
    fn only_the_per_node_writes_are_replayed() {
        let write = |verb: &str, resource: &str, subresource: Option<&str>| Write {
            user: "u".into(),
            verb: verb.into(),
            resource: resource.into(),
            name: "n".into(),
            subresource: subresource.map(Into::into),
            body_bytes: 0,
            completed: None,
        };
        assert!(is_per_node(&write("create", "configmaps", None)));
        assert!(is_per_node(&write("create", "resourceslices", None)));
        assert!(is_per_node(&write("patch", "nodes", Some("status"))));
        assert!(!is_per_node(&write("update", "configmaps", None)));
        assert!(!is_per_node(&write(
            "patch",
            "gpunodepools",
            Some("status")
        )));
        assert!(!is_per_node(&write("patch", "nodes", None)));
        assert!(!is_per_node(&write("patch", "pods", None)));
    }
}
