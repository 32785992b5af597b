//! A scrape's body: its chunks, written as hyper asks for them, into buffers kept for the
//! chunks after.
//!
//! Allocated afresh, each page of a buffer was mapped, zeroed and charged to the cgroup on
//! first write and unmapped once sent: at 8 000 GPUs, with the body written whole, the kernel's
//! page faults and unmapping were two fifths of the exporter's CPU (perf, the image's musl
//! build). Kept, a buffer is written again in place.

use std::{convert::Infallible, sync::Arc};

use bytes::Bytes;
use futures::Stream;
use parking_lot::Mutex;

use crate::exposition::Exposition;

/// How much of the body is written before it is handed to hyper. Measured at 8 000 GPUs: 1 MiB
/// scraped at p50 98-106 ms and 4.4-4.6 CPU-s over 50 scrapes, 256 KiB at 107-121 ms and
/// 4.9-5.0 (more, smaller writes to the socket); the exporter's peak was 22-24 MiB with either.
pub const CHUNK: usize = 1024 * 1024;

/// Buffers kept: hyper holds one or two chunks at once (it flushes past 400 KiB queued), and
/// a second scrape at the same moment as many.
const KEPT: usize = 4;

/// The buffers kept between chunks and scrapes.
#[derive(Clone, Debug, Default)]
pub struct Buffers(Arc<Mutex<Vec<String>>>);

impl Buffers {
    /// `exposition` as a body: each chunk is written when hyper polls for it, into a kept
    /// buffer that comes back once hyper has sent and dropped it.
    pub fn body(
        &self,
        exposition: Exposition,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        let buffers = self.clone();
        futures::stream::iter(
            Chunks {
                exposition,
                buffers,
            }
            .map(Ok),
        )
    }

    /// An empty buffer: a kept one, else a new one with room for a chunk and the line that
    /// ends it.
    fn take(&self) -> String {
        self.0
            .lock()
            .pop()
            .unwrap_or_else(|| String::with_capacity(CHUNK + CHUNK / 4))
    }

    /// `buffer` as a chunk; kept again once dropped.
    fn bytes(&self, buffer: String) -> Bytes {
        Bytes::from_owner(Kept {
            buffer,
            buffers: self.clone(),
        })
    }

    /// Keeps `buffer` unless enough are kept or a long line made it grow past twice a chunk.
    fn keep(&self, mut buffer: String) {
        if buffer.capacity() > 2 * CHUNK {
            return;
        }
        buffer.clear();
        let mut kept = self.0.lock();
        if kept.len() < KEPT {
            kept.push(buffer);
        }
    }

    /// How many buffers are kept now.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.0.lock().len()
    }
}

/// The chunks of one body.
struct Chunks {
    exposition: Exposition,
    buffers: Buffers,
}

impl Iterator for Chunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut buffer = self.buffers.take();
        if self.exposition.write_next(&mut buffer, CHUNK) {
            Some(self.buffers.bytes(buffer))
        } else {
            self.buffers.keep(buffer);
            None
        }
    }
}

/// A chunk on its way out, its buffer returned to `buffers` when dropped.
struct Kept {
    buffer: String,
    buffers: Buffers,
}

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_bytes()
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.buffers.keep(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use futures::{StreamExt, executor::block_on};

    use super::*;
    use crate::exposition::{encode, testing::samples};

    fn chunks(buffers: &Buffers, count: usize) -> Vec<Bytes> {
        let samples = samples(count);
        let body = buffers.body(Exposition::new(&samples, "Hostname", Some(true)));
        block_on(body.map(|chunk| chunk.unwrap_or_default()).collect())
    }

    #[test]
    fn the_chunks_make_the_whole_body() {
        let buffers = Buffers::default();
        let chunks = chunks(&buffers, 350);
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        let whole = encode(&samples(350), "Hostname", Some(true));
        assert_eq!(String::from_utf8_lossy(&joined), whole);
        for chunk in &chunks[..chunks.len() - 1] {
            assert!(
                (CHUNK..CHUNK + 1024).contains(&chunk.len()),
                "{}",
                chunk.len()
            );
        }
        assert_eq!(buffers.kept(), 1, "the buffer the end was looked for in");
    }

    #[test]
    fn sent_chunks_give_their_buffers_to_the_next_scrape() {
        let buffers = Buffers::default();
        let first = chunks(&buffers, 350);
        let sent: Vec<*const u8> = first.iter().map(|c| c.as_ptr()).collect();
        assert!(
            sent.len() < KEPT,
            "all of them kept, with the one the end was looked for in"
        );
        assert_eq!(buffers.kept(), 1, "kept while still being sent");
        drop(first);
        assert_eq!(buffers.kept(), (sent.len() + 1).min(KEPT));
        let second = chunks(&buffers, 350);
        assert!(
            second.iter().all(|c| sent.contains(&c.as_ptr())),
            "every chunk written into a buffer of the scrape before"
        );
    }

    #[test]
    fn no_samples_no_chunks() {
        let buffers = Buffers::default();
        let body = buffers.body(Exposition::new(&[], "Hostname", None));
        assert_eq!(block_on(body.count()), 0);
    }
}
