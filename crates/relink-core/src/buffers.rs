//! Small free lists of message buffers, so that steady message traffic
//! reuses allocations instead of making new ones for every message.

/// A bounded free list of byte buffers. Buffers go back with
/// [`put`](SpareBuffers::put) once their bytes are no longer needed and come
/// out of [`take`](SpareBuffers::take) empty, with their capacity — only
/// for contents they fit without much waste, so a message never holds more
/// than about twice its size.
///
/// The session keeps one for encoded control messages (handed back by the driver
/// with [`Session::recycle`](crate::session::Session::recycle)) and one for
/// delivered messages (handed back by the application with
/// [`Session::poll_delivery_into`](crate::session::Session::poll_delivery_into)),
/// the journal one for the payloads of confirmed messages.
#[derive(Debug, Default, Clone)]
pub(crate) struct SpareBuffers(Vec<Vec<u8>>);

impl SpareBuffers {
    /// Buffers kept at most: about a window of messages in flight.
    pub(crate) const MAX_COUNT: usize = 64;
    /// Larger buffers are dropped: for such messages the copy costs far
    /// more than the allocation, and an idle list holds at most
    /// `MAX_COUNT * MAX_CAPACITY` bytes (16 KiB).
    pub(crate) const MAX_CAPACITY: usize = 256;
    /// A recycled buffer serves `len` bytes if its capacity is at least
    /// `len` and at most `2 * len + SLACK`.
    pub(crate) const SLACK: usize = 64;

    /// An empty buffer for `len` bytes: the last one kept if it fits them
    /// (see [`SLACK`](Self::SLACK)), else a new one of exactly `len`.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        match self.0.last() {
            Some(b) if (len..=2 * len + Self::SLACK).contains(&b.capacity()) => {
                self.0.pop().unwrap_or_default()
            }
            _ => Vec::with_capacity(len),
        }
    }

    /// Keep `buf` for reuse, within the limits.
    pub(crate) fn put(&mut self, mut buf: Vec<u8>) {
        if self.0.len() < Self::MAX_COUNT && buf.capacity() <= Self::MAX_CAPACITY {
            buf.clear();
            self.0.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SpareBuffers;

    #[test]
    fn spare_buffers_are_reused_and_bounded() {
        let mut spare = SpareBuffers::default();
        let mut b = spare.take(86);
        assert_eq!(b.capacity(), 86, "a new one, of the size asked for");
        b.extend_from_slice(&[1; 86]);
        let (ptr, cap) = (b.as_ptr(), b.capacity());
        spare.put(b);
        let again = spare.take(80);
        assert!(again.is_empty(), "handed out cleared");
        assert_eq!(
            (again.as_ptr(), again.capacity()),
            (ptr, cap),
            "the same allocation"
        );
        spare.put(again);
        // Too small, or too large for the contents: a new one.
        assert_eq!(spare.take(100).capacity(), 100);
        assert_eq!(spare.take(8).capacity(), 8);
        assert_eq!(spare.0.len(), 1, "the recycled one is still there");
        // Too large to keep.
        spare.0.clear();
        spare.put(Vec::with_capacity(SpareBuffers::MAX_CAPACITY + 1));
        assert!(spare.0.is_empty());
        // At most MAX_COUNT kept.
        for _ in 0..SpareBuffers::MAX_COUNT + 10 {
            spare.put(Vec::with_capacity(16));
        }
        assert_eq!(spare.0.len(), SpareBuffers::MAX_COUNT);
    }
}
