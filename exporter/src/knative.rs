//! Utilization of inference pods from their Knative revision's request rate, read from
//! Prometheus as the reference does: requests per second over the last minute, one percent per
//! request per second (at most 100). Pods are matched by UID through kube-state-metrics'
//! `kube_pod_info`. The reference adds that series' value (1) to the rate; fakegpu multiplies by
//! it, so an idle revision reads 0.
//!
//! When Prometheus cannot be asked, inference pods fall back to their utilization range (the
//! annotation or the pool's default) and `fakegpu_exporter_knative_up` says 0.

use std::{collections::HashMap, time::Duration};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use tracing::warn;

/// The query: request rate per pod, labelled with the pod's UID.
pub const QUERY: &str =
    "rate(revision_app_request_count[1m]) * on(pod) group_left(uid) kube_pod_info";
/// The reference's default Prometheus address.
pub const DEFAULT_URL: &str = "http://prometheus-operated.runai:9090";

#[derive(Debug)]
pub struct Knative {
    url: String,
    client: Client<HttpConnector, Empty<Bytes>>,
}

/// Why Prometheus gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum KnativeError {
    #[error("bad Prometheus URL {0:?}")]
    Url(String),
    #[error("asking Prometheus: {0}")]
    Request(String),
    #[error("Prometheus answered {0}")]
    Status(u16),
    #[error("Prometheus' answer does not parse: {0}")]
    Answer(String),
}

impl Knative {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Utilization percent by pod UID, from one instant query.
    pub async fn utilization(&self) -> Result<HashMap<String, u8>, KnativeError> {
        let encoded: String = QUERY
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let uri: hyper::Uri = format!("{}/api/v1/query?query={encoded}", self.url)
            .parse()
            .map_err(|_| KnativeError::Url(self.url.clone()))?;
        let response = tokio::time::timeout(Duration::from_secs(2), self.client.get(uri))
            .await
            .map_err(|_| KnativeError::Request("timed out after 2 s".into()))?
            .map_err(|e| KnativeError::Request(e.to_string()))?;
        if !response.status().is_success() {
            return Err(KnativeError::Status(response.status().as_u16()));
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| KnativeError::Request(e.to_string()))?
            .to_bytes();
        parse(&body)
    }
}

/// Reads an instant-vector answer: `data.result[].metric.uid` and `.value[1]`.
pub fn parse(body: &[u8]) -> Result<HashMap<String, u8>, KnativeError> {
    let answer: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| KnativeError::Answer(e.to_string()))?;
    let results = answer["data"]["result"]
        .as_array()
        .ok_or_else(|| KnativeError::Answer("no data.result".into()))?;
    Ok(results
        .iter()
        .filter_map(|r| {
            let uid = r["metric"]["uid"].as_str()?;
            let rate: f64 = r["value"][1].as_str()?.parse().ok()?;
            if !rate.is_finite() {
                warn!(uid, rate, "ignoring a request rate that is not a number");
                return None;
            }
            Some((uid.to_owned(), rate.clamp(0.0, 100.0) as u8))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rates_by_uid_and_caps_them() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a","uid":"u-a"},"value":[1700000000.1,"29.9"]},
            {"metric":{"pod":"b","uid":"u-b"},"value":[1700000000.1,"250"]},
            {"metric":{"pod":"c"},"value":[1700000000.1,"3"]},
            {"metric":{"pod":"d","uid":"u-d"},"value":[1700000000.1,"NaN"]}]}}"#;
        let rates = parse(body).expect("parses");
        assert_eq!(rates.get("u-a"), Some(&29));
        assert_eq!(rates.get("u-b"), Some(&100));
        assert_eq!(rates.len(), 2);
        assert!(parse(b"<html>").is_err());
        assert!(parse(br#"{"status":"error"}"#).is_err());
    }
}
