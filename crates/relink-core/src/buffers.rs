//! Small free lists of message buffers, so that steady message traffic
//! reuses allocations instead of making new ones for every message.

/// A bounded free list of byte buffers. Buffers go back with
/// [`put`](SpareBuffers::put) once their bytes are no longer needed and come
/// out of [`take`](SpareBuffers::take) empty, with their capacity.
///
/// The session keeps one for encoded messages (handed back by the driver
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

    /// An empty buffer, recycled if there is one.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.0.pop().unwrap_or_default()
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
        let mut b = spare.take();
        b.extend_from_slice(&[1; 86]);
        let (ptr, cap) = (b.as_ptr(), b.capacity());
        spare.put(b);
        let again = spare.take();
        assert!(again.is_empty(), "handed out cleared");
        assert_eq!(
            (again.as_ptr(), again.capacity()),
            (ptr, cap),
            "the same allocation"
        );
        // Too large to keep.
        spare.put(Vec::with_capacity(SpareBuffers::MAX_CAPACITY + 1));
        assert_eq!(spare.take().capacity(), 0);
        // At most MAX_COUNT kept.
        for _ in 0..SpareBuffers::MAX_COUNT + 10 {
            spare.put(Vec::with_capacity(16));
        }
        assert_eq!(spare.0.len(), SpareBuffers::MAX_COUNT);
    }
}
