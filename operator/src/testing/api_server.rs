//! A fake API server for unit tests of code that writes to the API: real HTTP on loopback,
//! scripted answers, every request recorded.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use axum::{
    body::Bytes,
    extract::State,
    http::{
        HeaderMap, Method, StatusCode, Uri,
        header::{ACCEPT, CONTENT_TYPE},
    },
    response::IntoResponse,
};
use serde_json::json;

/// A request the fake API server saw.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub accept: String,
    pub body: serde_json::Value,
}

/// A scripted answer: the status code, and the body where the request's own will not do.
type Answer = (u16, Option<serde_json::Value>);

/// The method and path of each request, in order.
pub fn calls(seen: &[Request]) -> Vec<(Method, String)> {
    seen.iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect()
}

/// An HTTP server on loopback that answers each request with the next scripted status
/// (the request's body, given a resourceVersion, for a success) and records it.
#[derive(Clone, Default)]
struct Server {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    seen: Arc<Mutex<Vec<Request>>>,
}

async fn answer(
    State(server): State<Server>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    server.seen.lock().unwrap().push(Request {
        method,
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        content_type: header(CONTENT_TYPE),
        accept: header(ACCEPT),
        body: body.clone(),
    });
    let (code, given) = server
        .answers
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or((500, None));
    let answer = if let Some(given) = given {
        given
    } else if code < 300 {
        let mut object = body;
        object["metadata"]["resourceVersion"] = json!("7");
        // The API server answers with the object, named even where a patch's body is not.
        if object["metadata"]["name"].is_null() {
            let mut segments = uri.path().rsplit('/');
            let last = segments.next().unwrap_or_default();
            let name = if last == "status" {
                segments.next().unwrap_or_default()
            } else {
                last
            };
            object["metadata"]["name"] = json!(name);
        }
        object
    } else if code == 403 {
        // What NamespaceLifecycle answers a create in a namespace being deleted.
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": "Forbidden", "message": "unable to create new content in namespace \
                fakegpu-system because it is being terminated",
            "details": {"causes": [{"reason": "NamespaceTerminating",
                "message": "namespace fakegpu-system is being terminated",
                "field": "metadata.namespace"}]}})
    } else {
        // The reasons the API server gives, which clients match on (`get_opt` on NotFound).
        let reason = match code {
            404 => "NotFound",
            409 => "Conflict",
            422 => "Invalid",
            _ => "Scripted",
        };
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": "scripted answer"})
    };
    (
        StatusCode::from_u16(code).unwrap(),
        [(CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
}

/// Runs `write` with a client of a [`Server`] answering `answers` in turn; returns its
/// result and what the server was asked.
pub async fn against<T, F>(
    answers: &[u16],
    write: impl FnOnce(kube::Client) -> F,
) -> (T, Vec<Request>)
where
    F: Future<Output = T>,
{
    let answers: Vec<_> = answers.iter().map(|code| (*code, None)).collect();
    against_answering(&answers, write).await
}

/// As [`against`], each answer with its body where one is given (the object a JSON patch
/// leaves, which the fake server cannot work out), else the request's own.
pub async fn against_answering<T, F>(
    answers: &[Answer],
    write: impl FnOnce(kube::Client) -> F,
) -> (T, Vec<Request>)
where
    F: Future<Output = T>,
{
    let server = Server::default();
    server
        .answers
        .lock()
        .unwrap()
        .extend(answers.iter().cloned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(server.clone());
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    let config = kube::Config::new(format!("http://{address}").parse().unwrap());
    let written = write(kube::Client::try_from(config).unwrap()).await;
    serving.abort();
    let seen = server.seen.lock().unwrap().clone();
    (written, seen)
}
