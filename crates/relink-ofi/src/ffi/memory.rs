//! The application's buffers, as the rest of the crate touches them:
//! [`UserIov`], a posted receive's buffer (written once its message
//! comes), and [`CallerMemory`], a registration's buffer (read and
//! written in place by the soft fabric's threads, as a NIC's DMA would).
//!
//! Both hold raw pointers libfabric's caller gave; their constructors are
//! `unsafe` and carry the caller's contract, every access is a raw copy
//! (or an atomic) inside the bounds checked here.
//!
//! `CallerMemory` has a twin in librelink (`relink-c`'s `host_memory`),
//! for C callers' buffers. Each FFI crate keeps its own: sharing one would
//! take a crate of its own with `unsafe` in it, where the project keeps
//! `unsafe` to the three FFI crates, each behind its own module.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use relink_fabric::HostMemory;

/// A receive buffer of up to 4 ranges, the application's until its
/// completion.
pub struct UserIov {
    parts: Vec<(NonNull<u8>, usize)>,
}

// SAFETY: the ranges are the application's, valid until the receive
// completes (libfabric's contract for a posted buffer, `UserIov::new`);
// the provider writes them from whichever thread makes progress, under
// its fabric's lock, as a NIC would.
unsafe impl Send for UserIov {}

impl UserIov {
    /// The ranges `parts` (pointer, length); empty ones are skipped.
    ///
    /// # Safety
    /// Each range is memory of this process valid for writes until the
    /// receive it is posted for completes or is cancelled, and Rust holds
    /// no reference into it.
    pub unsafe fn new(parts: impl IntoIterator<Item = (*mut u8, usize)>) -> UserIov {
        UserIov {
            parts: parts
                .into_iter()
                .filter(|(_, len)| *len > 0)
                .filter_map(|(p, len)| NonNull::new(p).map(|p| (p, len)))
                .collect(),
        }
    }

    /// Its total length.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|(_, l)| l).sum()
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copy `bytes` in at byte `offset` of the buffer (its ranges one
    /// after the other), as far as it holds them; the bytes written.
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> usize {
        let (mut skip, mut done) = (offset, 0);
        for &(p, len) in &self.parts {
            if done == bytes.len() {
                break;
            }
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = (len - skip).min(bytes.len() - done);
            // SAFETY: `n` bytes at `p + skip` are inside the application's
            // range (skip + n <= len), valid for writes until the receive
            // completes (`new`'s contract), which is after this call; the
            // source is a distinct Rust slice.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes[done..].as_ptr(), p.as_ptr().add(skip), n)
            };
            skip = 0;
            done += n;
        }
        done
    }
}

impl fmt::Debug for UserIov {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserIov").field("len", &self.len()).finish()
    }
}

/// A registered buffer of the application's: `len` bytes at `base`,
/// until released (`fi_close` of its MR).
pub struct CallerMemory {
    base: NonNull<u8>,
    len: usize,
    /// Set, under the write lock (so after every access under way), when
    /// the application has the buffer back: accesses then touch nothing.
    released: RwLock<bool>,
}

// SAFETY: the bytes are the application's, valid until `release` returned
// (the contract of `CallerMemory::new`), and every access is a raw copy or
// an atomic under the read lock, valid from any thread.
unsafe impl Send for CallerMemory {}
// SAFETY: as above; no method hands out a reference into the buffer.
unsafe impl Sync for CallerMemory {}

impl CallerMemory {
    /// The application's buffer of `len` bytes at `base`.
    ///
    /// # Safety
    /// `[base, base + len)` is memory of this process, valid for reads and
    /// writes, that stays mapped until [`release`](Self::release)
    /// returned (or this value is dropped); no Rust reference into it
    /// exists meanwhile.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> CallerMemory {
        CallerMemory {
            base,
            len,
            released: RwLock::new(false),
        }
    }

    /// Give the buffer back: once this returned, nothing touches it.
    pub fn release(&self) {
        *self.released.write().unwrap_or_else(|e| e.into_inner()) = true;
    }

    fn access<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let released = self.released.read().unwrap_or_else(|e| e.into_inner());
        (!*released).then(f)
    }

    /// The address of `len` bytes at `offset`; panics outside the buffer
    /// (`Memory` checked already: a bad range here is a bug, and must
    /// never reach the application's other memory).
    fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "CallerMemory: {len} bytes at {offset} are outside the {} bytes",
            self.len
        );
        self.base.as_ptr().wrapping_add(offset)
    }

    fn word(&self, offset: usize) -> *mut u64 {
        let p = self.at(offset, 8);
        assert!(
            p as usize % 8 == 0,
            "CallerMemory: misaligned word at {offset}"
        );
        p.cast()
    }
}

impl fmt::Debug for CallerMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallerMemory")
            .field("addr", &format_args!("{:#x}", self.base.as_ptr() as usize))
            .field("len", &self.len)
            .finish()
    }
}

impl HostMemory for CallerMemory {
    fn addr(&self) -> u64 {
        self.base.as_ptr() as u64
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, out: &mut [u8]) {
        let src = self.at(offset, out.len());
        let (dst, len) = (out.as_mut_ptr(), out.len());
        let copied = self.access(|| {
            // SAFETY: `len` bytes at `src` are inside the buffer (`at`),
            // valid while not given back (`access`); the destination is a
            // distinct Rust buffer of `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
        });
        if copied.is_none() {
            out.fill(0);
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let dst = self.at(offset, data.len());
        self.access(|| {
            // SAFETY: as in `read`, with the roles swapped.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
        });
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        let p = self.word(offset);
        self.access(|| {
            // SAFETY: 8 bytes inside the buffer, aligned (`word`), valid
            // while not given back (`access`), for this one operation.
            let a = unsafe { AtomicU64::from_ptr(p) };
            a.fetch_add(add, Ordering::SeqCst)
        })
        .unwrap_or(0)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        let p = self.word(offset);
        self.access(|| {
            // SAFETY: as in `fetch_add`.
            let a = unsafe { AtomicU64::from_ptr(p) };
            match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
        .unwrap_or(0)
    }
}
