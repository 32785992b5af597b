//! A small gRPC server for unary calls over cleartext HTTP/2, for the plugin registration
//! socket only.
//!
//! Why not tonic: the kubelet's plugin watcher dials the registration socket with the socket's
//! path as the gRPC target and no authority override, so its requests carry
//! `:authority: /var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock`. The h2 crate under
//! tonic refuses such a request as malformed (RST_STREAM PROTOCOL_ERROR, hyperium/h2#487), and
//! the kubelet never learns of the plugin. (The kubelet dials the DRA and device plugin sockets
//! with authority `localhost`, so those stay on tonic.) This server reads `:path` and ignores
//! `:authority`; it speaks just enough HTTP/2 for unary calls with small messages: SETTINGS and
//! PING answered, HEADERS/CONTINUATION/DATA assembled per stream, one response per request.

use std::{collections::HashMap, sync::Arc};

use futures::future::BoxFuture;
use loona_hpack::Decoder;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::UnixListener,
};
use tracing::{debug, warn};

/// Answers one call: the method's `:path` and the request message; the response message or a
/// gRPC status.
pub type Handler = Arc<
    dyn Fn(String, Vec<u8>) -> BoxFuture<'static, Result<Vec<u8>, tonic::Status>> + Send + Sync,
>;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest frame the peer may send before it has our SETTINGS (RFC 9113 default).
const MAX_FRAME: usize = 16_384;
/// Requests larger than this are refused: registration messages are a few hundred bytes.
const MAX_MESSAGE: usize = 1 << 20;

mod frame {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const CONTINUATION: u8 = 0x9;
}

mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Why a connection was dropped.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(&'static str),
}

/// Serves `listener` until it fails; each connection on its own task.
pub async fn serve(listener: UnixListener, handler: Handler) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let handler = handler.clone();
        tokio::spawn(async move {
            let (read, write) = stream.into_split();
            if let Err(error) = connection(read, write, handler).await {
                debug!(%error, "registration connection closed");
            }
        });
    }
}

#[derive(Default)]
struct Stream {
    header_block: Vec<u8>,
    path: Option<String>,
    body: Vec<u8>,
}

/// One HTTP/2 connection: frames in, responses out, until the peer closes it.
pub async fn connection(
    mut read: impl AsyncRead + Unpin,
    mut write: impl AsyncWrite + Unpin,
    handler: Handler,
) -> Result<(), ConnectionError> {
    let mut preface = [0u8; PREFACE.len()];
    read.read_exact(&mut preface).await?;
    if preface != PREFACE {
        return Err(ConnectionError::Protocol(
            "not an HTTP/2 connection preface",
        ));
    }
    write_frame(&mut write, frame::SETTINGS, 0, 0, &[]).await?;
    let mut decoder = Decoder::new();
    let mut streams: HashMap<u32, Stream> = HashMap::new();
    loop {
        let mut head = [0u8; 9];
        match read.read_exact(&mut head).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error.into()),
        }
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if length > MAX_FRAME {
            return Err(ConnectionError::Protocol(
                "frame larger than the default maximum",
            ));
        }
        let mut payload = vec![0u8; length];
        read.read_exact(&mut payload).await?;
        let finished = match kind {
            frame::SETTINGS if flags & flag::ACK == 0 => {
                write_frame(&mut write, frame::SETTINGS, flag::ACK, 0, &[]).await?;
                None
            }
            frame::PING if flags & flag::ACK == 0 => {
                write_frame(&mut write, frame::PING, flag::ACK, 0, &payload).await?;
                None
            }
            frame::GOAWAY => return Ok(()),
            frame::RST_STREAM => {
                streams.remove(&id);
                None
            }
            frame::HEADERS | frame::CONTINUATION => {
                let fragment = if kind == frame::HEADERS {
                    header_fragment(&payload, flags)?
                } else {
                    &payload[..]
                };
                let stream = streams.entry(id).or_default();
                stream.header_block.extend_from_slice(fragment);
                if flags & flag::END_HEADERS != 0 {
                    let headers = decoder
                        .decode(&stream.header_block)
                        .map_err(|_| ConnectionError::Protocol("undecodable header block"))?;
                    stream.path = headers
                        .into_iter()
                        .find(|(name, _)| name == b":path")
                        .map(|(_, value)| String::from_utf8_lossy(&value).into_owned());
                    stream.header_block.clear();
                }
                (flags & flag::END_STREAM != 0).then_some(id)
            }
            frame::DATA => {
                let data = unpad(&payload, flags)?;
                let stream = streams.entry(id).or_default();
                if stream.body.len() + data.len() > MAX_MESSAGE {
                    return Err(ConnectionError::Protocol("request too large"));
                }
                stream.body.extend_from_slice(data);
                (flags & flag::END_STREAM != 0).then_some(id)
            }
            // PRIORITY, WINDOW_UPDATE, acknowledgements: nothing to do. Flow control never
            // bites: requests and responses stay far below the initial windows.
            _ => None,
        };
        if let Some(id) = finished
            && let Some(stream) = streams.remove(&id)
        {
            respond(&mut write, id, stream, &handler).await?;
        }
    }
}

/// The header block fragment of a HEADERS frame, without padding and priority fields.
fn header_fragment(payload: &[u8], flags: u8) -> Result<&[u8], ConnectionError> {
    let unpadded = unpad(payload, flags)?;
    if flags & flag::PRIORITY != 0 {
        unpadded.get(5..).ok_or(ConnectionError::Protocol(
            "HEADERS too short for its priority",
        ))
    } else {
        Ok(unpadded)
    }
}

fn unpad(payload: &[u8], flags: u8) -> Result<&[u8], ConnectionError> {
    if flags & flag::PADDED == 0 {
        return Ok(payload);
    }
    let padding = usize::from(
        *payload
            .first()
            .ok_or(ConnectionError::Protocol("empty padded frame"))?,
    );
    payload
        .get(1..payload.len().saturating_sub(padding))
        .filter(|_| padding < payload.len())
        .ok_or(ConnectionError::Protocol("padding longer than the frame"))
}

/// Calls the handler for a complete request and writes its response.
async fn respond(
    write: &mut (impl AsyncWrite + Unpin),
    id: u32,
    stream: Stream,
    handler: &Handler,
) -> Result<(), ConnectionError> {
    let path = stream.path.unwrap_or_default();
    let result = match grpc_message(&stream.body) {
        Some(message) => handler(path.clone(), message.to_vec()).await,
        None => Err(tonic::Status::invalid_argument(
            "malformed gRPC request message",
        )),
    };
    let mut headers = Vec::new();
    literal(&mut headers, b":status", b"200");
    literal(&mut headers, b"content-type", b"application/grpc");
    match result {
        Ok(message) => {
            write_frame(write, frame::HEADERS, flag::END_HEADERS, id, &headers).await?;
            let mut data = Vec::with_capacity(message.len() + 5);
            data.push(0);
            data.extend_from_slice(
                &u32::try_from(message.len())
                    .unwrap_or(u32::MAX)
                    .to_be_bytes(),
            );
            data.extend_from_slice(&message);
            for chunk in data.chunks(MAX_FRAME) {
                write_frame(write, frame::DATA, 0, id, chunk).await?;
            }
            let mut trailers = Vec::new();
            literal(&mut trailers, b"grpc-status", b"0");
            write_frame(
                write,
                frame::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                id,
                &trailers,
            )
            .await?;
        }
        Err(status) => {
            warn!(path, code = ?status.code(), message = status.message(), "registration call failed");
            literal(
                &mut headers,
                b"grpc-status",
                (status.code() as i32).to_string().as_bytes(),
            );
            literal(
                &mut headers,
                b"grpc-message",
                percent_encode(status.message()).as_bytes(),
            );
            write_frame(
                write,
                frame::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                id,
                &headers,
            )
            .await?;
        }
    }
    write.flush().await?;
    Ok(())
}

/// The message of a gRPC request body: one uncompressed length-prefixed message.
fn grpc_message(body: &[u8]) -> Option<&[u8]> {
    let (&compressed, rest) = body.split_first()?;
    let length = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let message = rest.get(4..)?;
    (compressed == 0 && usize::try_from(length).ok()? == message.len()).then_some(message)
}

/// An HPACK "literal header field without indexing, new name", with raw (not Huffman) strings:
/// the encoding that needs no table shared with the peer.
fn literal(block: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    block.push(0);
    for string in [name, value] {
        block.extend(loona_hpack::encoder::encode_integer(string.len(), 7));
        block.extend_from_slice(string);
    }
}

/// `grpc-message` is percent-encoded outside printable ASCII.
fn percent_encode(message: &str) -> String {
    message
        .bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn write_frame(
    write: &mut (impl AsyncWrite + Unpin),
    kind: u8,
    flags: u8,
    id: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let length = u32::try_from(payload.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    let mut head = [0u8; 9];
    head[..3].copy_from_slice(&length[1..]);
    head[3] = kind;
    head[4] = flags;
    head[5..].copy_from_slice(&id.to_be_bytes());
    write.write_all(&head).await?;
    write.write_all(payload).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_messages_and_padding_are_checked() {
        assert_eq!(grpc_message(&[0, 0, 0, 0, 2, 7, 8]), Some(&[7u8, 8][..]));
        assert_eq!(grpc_message(&[0, 0, 0, 0, 3, 7, 8]), None);
        assert_eq!(grpc_message(&[1, 0, 0, 0, 0]), None);
        assert_eq!(grpc_message(&[]), None);
        assert!(unpad(&[2, 9, 0, 0], flag::PADDED).is_ok_and(|d| d == [9]));
        assert!(unpad(&[5, 9], flag::PADDED).is_err());
        assert!(unpad(&[], flag::PADDED).is_err());
    }

    #[test]
    fn literals_decode_with_a_standard_decoder() {
        let mut block = Vec::new();
        literal(&mut block, b":status", b"200");
        literal(
            &mut block,
            b"grpc-message",
            percent_encode("bad %\n").as_bytes(),
        );
        let decoded = Decoder::new().decode(&block).expect("decodes");
        assert_eq!(decoded[0], (b":status".to_vec(), b"200".to_vec()));
        assert_eq!(decoded[1].1, b"bad %25%0A".to_vec());
    }
}
