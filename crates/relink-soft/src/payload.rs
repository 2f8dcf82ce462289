//! Request and response payloads, and the pool that recycles their buffers.
//!
//! A SEND or WRITE payload is gathered from registered memory once, into a
//! [`Payload`]: the packet that carries it and the requester's copy kept
//! for a retransmission share the same bytes (cloning a payload copies no
//! data). When the requester retires the request, its payload goes back to
//! the host's [`BufferPool`] and the next request reuses the buffer.
//!
//! Why it matters: a fresh 64 KiB buffer per request, and a second one for
//! the retransmission copy, freed as soon as the request was acknowledged,
//! made the allocator's behaviour the speed of the fabric. A window of
//! unsignaled WRITEs completes in one burst, so all its buffers were freed
//! together: glibc gave the top of its heap back to the kernel (the free
//! space exceeded its trim threshold) and the next batch faulted every page
//! in again, zeroed; and the copy into the adjacent, just allocated
//! retransmission buffer ran at a source–destination distance of 16 bytes
//! modulo 4 KiB, where `rep movsb` is an order of magnitude slower
//! (4 KiB aliasing). Recycled buffers stay mapped, are never zero-filled
//! again, and there is no second copy.
//!
//! The pool is bounded: at most [`BufferPool::MAX_IDLE_BYTES`] of idle
//! buffers and [`BufferPool::MAX_IDLE_PER_CLASS`] buffers per size class
//! (or the limits given to [`BufferPool::with_limits`]); what does not fit
//! is freed.
//!
//! The TCP fabric decodes received payloads into a small pool of each
//! stream's reader thread, which takes the buffer back once the host has
//! handled the packet.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Immutable payload bytes, shared by every clone.
///
/// The backing buffer may be longer than the payload (a pooled buffer of a
/// power-of-two size); only the bytes [`as_slice`](Payload::as_slice)
/// returns belong to it.
#[derive(Clone)]
pub struct Payload {
    buf: Arc<Vec<u8>>,
    len: usize,
}

impl Payload {
    /// An empty payload.
    pub fn empty() -> Payload {
        Payload::from(Vec::new())
    }

    /// The payload's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The bytes, mutable, if no clone shares them (a buffer fresh from
    /// [`BufferPool::take`] is not shared).
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        let len = self.len;
        Arc::get_mut(&mut self.buf).map(|b| &mut b[..len])
    }

    /// Whether another clone shares the bytes.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.buf) > 1 || Arc::weak_count(&self.buf) > 0
    }

    /// The bytes in a vector of their own (copies).
    pub fn to_vec(&self) -> Vec<u8> {
        self.as_slice().to_vec()
    }
}

impl Default for Payload {
    fn default() -> Payload {
        Payload::empty()
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        let len = v.len();
        Payload {
            buf: Arc::new(v),
            len,
        }
    }
}

impl From<&[u8]> for Payload {
    fn from(s: &[u8]) -> Payload {
        Payload::from(s.to_vec())
    }
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Payload {}

impl PartialEq<[u8]> for Payload {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u8>> for Payload {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

/// Smallest size class: buffers of `1 << MIN_CLASS` bytes.
const MIN_CLASS: u32 = 6;
/// Largest size class kept: `1 << MAX_CLASS` bytes (16 MiB, the largest
/// payload of the TCP wire).
const MAX_CLASS: u32 = 24;
const CLASSES: usize = (MAX_CLASS - MIN_CLASS + 1) as usize;

/// Counters of a [`BufferPool`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers handed out from the pool.
    pub hits: u64,
    /// Buffers allocated because the pool had none of the size.
    pub misses: u64,
    /// Buffers taken back.
    pub recycled: u64,
    /// Payloads given back while a clone still shared their bytes (the
    /// last clone frees them).
    pub shared: u64,
    /// Buffers freed instead of kept (outside the size classes, or the
    /// pool full).
    pub dropped: u64,
    /// Idle buffers now.
    pub idle_buffers: usize,
    /// Bytes of the idle buffers now.
    pub idle_bytes: usize,
}

/// A bounded free list of payload buffers in power-of-two size classes
/// (64 B to 16 MiB); see the module docs.
pub struct BufferPool {
    classes: [Vec<Arc<Vec<u8>>>; CLASSES],
    max_idle_bytes: usize,
    max_idle_per_class: usize,
    stats: PoolStats,
}

impl Default for BufferPool {
    fn default() -> BufferPool {
        BufferPool::new()
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("stats", &self.stats)
            .finish()
    }
}

/// The class that serves requests of `len` bytes: the smallest whose
/// buffers are at least `len` long.
fn class_for_request(len: usize) -> Option<usize> {
    let bits = len
        .max(1)
        .checked_next_power_of_two()?
        .trailing_zeros()
        .max(MIN_CLASS);
    (bits <= MAX_CLASS).then(|| (bits - MIN_CLASS) as usize)
}

/// The class a buffer of `len` bytes belongs to: the largest whose size it
/// reaches.
fn class_of_buffer(len: usize) -> Option<usize> {
    if len < 1 << MIN_CLASS {
        return None;
    }
    let bits = len.ilog2();
    (bits <= MAX_CLASS).then(|| (bits - MIN_CLASS) as usize)
}

impl BufferPool {
    /// Idle bytes kept at most by [`BufferPool::new`]'s pool; a buffer
    /// that would exceed it is freed.
    pub const MAX_IDLE_BYTES: usize = 8 << 20;
    /// Idle buffers kept at most per size class by [`BufferPool::new`]'s
    /// pool.
    pub const MAX_IDLE_PER_CLASS: usize = 128;

    /// An empty pool with the default bounds ([`BufferPool::MAX_IDLE_BYTES`],
    /// [`BufferPool::MAX_IDLE_PER_CLASS`]).
    pub fn new() -> BufferPool {
        BufferPool::with_limits(Self::MAX_IDLE_BYTES, Self::MAX_IDLE_PER_CLASS)
    }

    /// An empty pool that keeps at most `max_idle_bytes` of idle buffers,
    /// at most `max_idle_per_class` of each size class.
    pub fn with_limits(max_idle_bytes: usize, max_idle_per_class: usize) -> BufferPool {
        BufferPool {
            classes: Default::default(),
            max_idle_bytes,
            max_idle_per_class,
            stats: PoolStats::default(),
        }
    }

    /// An unshared payload of `len` bytes whose contents are unspecified
    /// (whatever the buffer held before): fill all of it through
    /// [`Payload::get_mut`]. A recycled buffer if one of the size is idle,
    /// else a new one, zeroed once, of the class's size (so that it comes
    /// back to the same class).
    pub fn take(&mut self, len: usize) -> Payload {
        let Some(class) = class_for_request(len) else {
            // Larger than any class: an exact buffer, freed after use.
            self.stats.misses += 1;
            return Payload::from(vec![0; len]);
        };
        if let Some(buf) = self.classes[class].pop() {
            self.stats.hits += 1;
            self.stats.idle_buffers -= 1;
            self.stats.idle_bytes -= buf.len();
            return Payload { buf, len };
        }
        self.stats.misses += 1;
        Payload {
            buf: Arc::new(vec![0; 1 << (class as u32 + MIN_CLASS)]),
            len,
        }
    }

    /// Take a payload back: its buffer is kept for reuse if nothing else
    /// shares it and the pool has room, else it is just dropped (a clone
    /// still in flight keeps the bytes alive and frees them last).
    pub fn recycle(&mut self, p: Payload) {
        if p.is_shared() {
            self.stats.shared += 1;
            return;
        }
        let Payload { buf, .. } = p;
        match class_of_buffer(buf.len()) {
            Some(class)
                if self.classes[class].len() < self.max_idle_per_class
                    && self.stats.idle_bytes + buf.len() <= self.max_idle_bytes =>
            {
                self.stats.recycled += 1;
                self.stats.idle_buffers += 1;
                self.stats.idle_bytes += buf.len();
                self.classes[class].push(buf);
            }
            _ => self.stats.dropped += 1,
        }
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class_for_request(0), Some(0));
        assert_eq!(class_for_request(64), Some(0));
        assert_eq!(class_for_request(65), Some(1));
        assert_eq!(class_for_request(64 << 10), Some(10));
        assert_eq!(class_for_request(16 << 20), Some(CLASSES - 1));
        assert_eq!(class_for_request((16 << 20) + 1), None);
        assert_eq!(class_for_request(usize::MAX), None);
        assert_eq!(class_of_buffer(63), None);
        assert_eq!(class_of_buffer(64), Some(0));
        assert_eq!(class_of_buffer(127), Some(0));
        assert_eq!(class_of_buffer(128), Some(1));
        assert_eq!(class_of_buffer(32 << 20), None);
        // Every buffer of a class serves every request of that class.
        for len in [1usize, 63, 64, 65, 1000, 4096, 65535, 65536, 65537] {
            let c = class_for_request(len).unwrap();
            assert!(1usize << (c as u32 + MIN_CLASS) >= len);
            assert_eq!(class_of_buffer(1 << (c as u32 + MIN_CLASS)), Some(c));
        }
    }

    #[test]
    fn recycled_buffers_are_reused_and_sharing_is_respected() {
        let mut pool = BufferPool::new();
        let mut p = pool.take(100);
        assert_eq!(p.len(), 100);
        p.get_mut().unwrap().fill(7);
        let shared = p.clone();
        assert!(p.is_shared());
        assert!(p.clone().get_mut().is_none(), "shared bytes are immutable");
        // Recycling one clone while another lives frees nothing and keeps
        // nothing.
        pool.recycle(p);
        assert_eq!(pool.stats().idle_buffers, 0);
        assert_eq!(shared.as_slice(), &[7; 100][..]);
        pool.recycle(shared);
        assert_eq!(pool.stats().idle_buffers, 1);
        assert_eq!(pool.stats().idle_bytes, 128);
        let mut q = pool.take(128);
        assert_eq!(pool.stats().hits, 1);
        assert_eq!(q.get_mut().unwrap().len(), 128);
        assert_eq!(pool.stats().idle_buffers, 0);
        // A buffer from elsewhere (a decoded frame) joins the class it fills.
        pool.recycle(Payload::from(vec![1; 200]));
        assert_eq!(pool.stats().idle_bytes, 200);
        assert_eq!(pool.take(100).len(), 100);
        assert_eq!(pool.stats().hits, 2);
        // Too small for any class, or too large: dropped.
        pool.recycle(Payload::from(vec![1; 10]));
        pool.recycle(Payload::from(vec![0; 32 << 20]));
        assert_eq!(pool.stats().idle_buffers, 0);
        assert_eq!((pool.stats().shared, pool.stats().dropped), (1, 2));
    }

    #[test]
    fn the_pool_is_bounded() {
        let mut pool = BufferPool::new();
        // Many small buffers: at most MAX_IDLE_PER_CLASS stay.
        let small: Vec<Payload> = (0..1000).map(|_| pool.take(64)).collect();
        for p in small {
            pool.recycle(p);
        }
        assert_eq!(pool.stats().idle_buffers, BufferPool::MAX_IDLE_PER_CLASS);
        // Many large ones: at most MAX_IDLE_BYTES in all.
        let big: Vec<Payload> = (0..40).map(|_| pool.take(1 << 20)).collect();
        for p in big {
            pool.recycle(p);
        }
        let s = pool.stats();
        assert!(s.idle_bytes <= BufferPool::MAX_IDLE_BYTES, "{s:?}");
        assert_eq!(s.idle_buffers, BufferPool::MAX_IDLE_PER_CLASS + 7);
        assert_eq!(s.dropped, 1000 - 128 + 40 - 7);

        let mut pool = BufferPool::with_limits(1000, 2);
        let ps: Vec<Payload> = (0..4).map(|_| pool.take(100)).collect();
        ps.into_iter().for_each(|p| pool.recycle(p));
        let p = pool.take(1000);
        pool.recycle(p);
        assert_eq!(
            (pool.stats().idle_buffers, pool.stats().idle_bytes),
            (2, 256),
            "2 per class; the 1 KiB buffer exceeds 1000 bytes"
        );
    }

    #[test]
    fn payload_compares_and_prints_as_bytes() {
        let mut pool = BufferPool::new();
        let mut p = pool.take(3);
        p.get_mut().unwrap().copy_from_slice(b"abc");
        assert_eq!(p, Payload::from(b"abc".to_vec()));
        assert_eq!(p, b"abc".to_vec());
        assert_eq!(format!("{p:?}"), format!("{:?}", b"abc".to_vec()));
        assert_ne!(p, Payload::empty());
        assert!(Payload::empty().is_empty());
    }
}
