//! One HTTP GET of the node's report from the exporter. Plain std sockets: nvidia-smi is a
//! short-lived process inside someone else's container and needs no runtime or TLS (the
//! exporter serves cluster-internal HTTP).

use std::{
    io::{Read, Write},
    net::{TcpStream, ToSocketAddrs},
    time::Duration,
};

use fakegpu_model::{names::exporter::NODE_REPORT_PATH, report::NodeReport};

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the exporter has no GPUs for this node")]
    NoNode,
    #[error("the exporter answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("{0}")]
    Malformed(String),
}

/// `http://host[:port][/prefix]` split into the address to dial, the Host header and the path
/// prefix.
fn split_url(url: &str) -> Result<(String, String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return Err(format!("{url:?} names no host"));
    }
    let address = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((
        address,
        authority.to_owned(),
        format!("/{}", prefix.trim_end_matches('/'))
            .trim_end_matches('/')
            .to_owned(),
    ))
}

fn connect(address: &str) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other(format!("{address} resolves to no address"));
    for candidate in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&candidate, TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Decodes a `Transfer-Encoding: chunked` body.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunked body")?;
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = body.get(..size).ok_or("truncated chunk")?;
        out.extend_from_slice(chunk);
        body = body.get(size + 2..).ok_or("truncated chunk")?;
    }
}

/// Status and body of a raw HTTP/1.1 response.
fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers in the answer")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|e| e.to_string())?;
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("no status line in the answer")?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok((status, body))
}

/// Asks the exporter at `base_url` for `node`'s report.
pub fn node_report(base_url: &str, node: &str) -> Result<NodeReport, FetchError> {
    let unreachable = |reason: String| FetchError::Unreachable {
        url: base_url.to_owned(),
        reason,
    };
    if !node
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err(FetchError::Malformed(format!(
            "{node:?} is not a node name"
        )));
    }
    let (address, host, prefix) = split_url(base_url).map_err(unreachable)?;
    let mut stream = connect(&address).map_err(|e| unreachable(e.to_string()))?;
    stream
        .set_read_timeout(Some(TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| unreachable(e.to_string()))?;
    let request = format!(
        "GET {prefix}{NODE_REPORT_PATH}{node} HTTP/1.1\r\nHost: {host}\r\n\
         Accept: application/json\r\nConnection: close\r\n\r\n"
    );
    let mut raw = Vec::new();
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.read_to_end(&mut raw))
        .map_err(|e| unreachable(e.to_string()))?;
    let (status, body) = parse_response(&raw).map_err(FetchError::Malformed)?;
    match status {
        200 => serde_json::from_slice(&body).map_err(|e| FetchError::Malformed(e.to_string())),
        404 => Err(FetchError::NoNode),
        status => Err(FetchError::Status {
            status,
            body: String::from_utf8_lossy(&body).trim().to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_address_host_and_prefix() {
        assert_eq!(
            split_url("http://fakegpu-exporter.gpu.svc:9400").unwrap(),
            (
                "fakegpu-exporter.gpu.svc:9400".into(),
                "fakegpu-exporter.gpu.svc:9400".into(),
                String::new()
            )
        );
        assert_eq!(
            split_url("http://exporter/base/").unwrap(),
            ("exporter:80".into(), "exporter".into(), "/base".into())
        );
        assert!(split_url("https://x").is_err());
        assert!(split_url("http://").is_err());
    }

    #[test]
    fn chunked_and_plain_bodies_are_read() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(plain).unwrap(), (200, b"{}".to_vec()));
        let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), (404, b"abcde".to_vec()));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
