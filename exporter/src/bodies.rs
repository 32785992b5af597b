//! The buffer a scrape's body is written into, kept for the next scrape.
//!
//! A body is 8 KiB per GPU (65 MiB at 8 000 GPUs). Allocated afresh for every scrape, each of its
//! pages was mapped, zeroed and charged to the cgroup on first write and unmapped once sent: at
//! 8 000 GPUs the kernel's page faults and unmapping were two fifths of the exporter's CPU
//! (perf, the image's musl build). Kept, it is written again in place. The price is that the
//! exporter holds one body's worth of memory between scrapes, which its peak held anyway.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

/// At most one buffer is kept: scrapes are sequential from one Prometheus, and a second one
/// scraping at the same moment gets a buffer of its own, freed when sent.
#[derive(Clone, Debug, Default)]
pub struct Bodies(Arc<Mutex<Option<String>>>);

impl Bodies {
    /// An empty buffer: the kept one, else a new one.
    pub fn take(&self) -> String {
        let mut buffer = self.0.lock().take().unwrap_or_default();
        buffer.clear();
        buffer
    }

    /// `buffer` as a response body; once the body is sent and dropped, the buffer is kept
    /// again.
    pub fn body(&self, buffer: String) -> Bytes {
        Bytes::from_owner(Kept {
            buffer,
            bodies: self.clone(),
        })
    }

    /// Keeps `buffer` unless it is more than twice the size it was last filled to: after
    /// pools shrink, the memory of the large scrapes before is given back.
    fn keep(&self, buffer: String) {
        if buffer.capacity() <= buffer.len().saturating_mul(2) {
            *self.0.lock() = Some(buffer);
        }
    }

    /// The capacity of the buffer kept now, if one is.
    pub fn kept(&self) -> Option<usize> {
        self.0.lock().as_ref().map(String::capacity)
    }
}

/// A body on its way out, its buffer returned to `bodies` when dropped.
struct Kept {
    buffer: String,
    bodies: Bodies,
}

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_bytes()
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.bodies.keep(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_body_gives_its_buffer_to_the_next_scrape() {
        let bodies = Bodies::default();
        let mut buffer = bodies.take();
        buffer.push_str(&"x".repeat(1000));
        let pointer = buffer.as_ptr();
        let body = bodies.body(buffer);
        assert_eq!(body.len(), 1000);
        assert_eq!(bodies.kept(), None, "kept while still being sent");
        drop(body);
        let again = bodies.take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), pointer, "the same allocation");
        assert!(again.capacity() >= 1000);
    }

    #[test]
    fn clones_of_a_body_keep_the_buffer_until_the_last_is_dropped() {
        let bodies = Bodies::default();
        let mut buffer = bodies.take();
        buffer.push_str("# HELP");
        let body = bodies.body(buffer);
        let part = body.slice(2..);
        drop(body);
        assert_eq!(bodies.kept(), None);
        assert_eq!(&part[..], b"HELP");
        drop(part);
        assert!(bodies.kept().is_some());
    }

    #[test]
    fn a_buffer_much_larger_than_its_body_is_freed() {
        let bodies = Bodies::default();
        let mut buffer = String::with_capacity(1 << 20);
        buffer.push_str("small");
        drop(bodies.body(buffer));
        assert_eq!(bodies.kept(), None);
        let mut buffer = String::with_capacity(64);
        buffer.push_str(&"y".repeat(40));
        drop(bodies.body(buffer));
        assert!(bodies.kept().is_some());
    }
}
