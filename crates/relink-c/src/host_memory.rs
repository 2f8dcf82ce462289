//! The caller's own buffers as host memory: what `relink_register` hands
//! the node (the section "regions" of `relink.h` documents the calls).
//!
//! On the soft fabric a registration's memory is a [`CallerMemory`]: the
//! caller's pointer and length, read and written in place by raw copies
//! and atomics, never referenced — the peer's operations land in it from
//! the fabric's threads while the program runs, as a NIC's do. On verbs
//! it is the provider's own adoption of the buffer
//! (`VerbsProvider::adopt_foreign`), which its `reg_mr` accepts. Either
//! way, a [`Registered`] owns the registration's side of the contract:
//! releasing it (at `relink_deregister`, or when the node is freed) makes
//! sure nothing touches the buffer any more before the caller has it back
//! — relink may keep clones of the handle a while longer (a closed
//! session's transport waiting for its goodbye, a transport given up), and
//! the soft fabric's devices outlive the node; through a released handle
//! reads give zeros and writes do nothing.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use relink_fabric::{HostMemory, Memory};

use crate::status::*;

/// The caller's `len` bytes at `base`, until released.
pub(crate) struct CallerMemory {
    base: NonNull<u8>,
    len: usize,
    /// Set, under the write lock (so after every access under way), when
    /// the caller has the buffer back: accesses then touch nothing.
    released: RwLock<bool>,
}

// SAFETY: the bytes are the caller's, valid until `release` returned (the
// contract of `CallerMemory::new`), and every access is a raw copy or an
// atomic under the read lock, valid from any thread: the soft fabric's
// threads access it as a NIC would.
unsafe impl Send for CallerMemory {}
// SAFETY: as above; no method hands out a reference into the buffer.
unsafe impl Sync for CallerMemory {}

impl CallerMemory {
    /// The caller's buffer of `len` bytes at `base`.
    ///
    /// # Safety
    /// `[base, base + len)` is memory of this process, valid for reads and
    /// writes, that stays mapped and is neither freed nor reused until
    /// [`release`](Self::release) returned (or this value is dropped). No
    /// Rust reference into it exists meanwhile; the caller's own code may
    /// read and write it (accesses here are raw copies and atomics, as a
    /// device's DMA is).
    pub(crate) unsafe fn new(base: NonNull<u8>, len: usize) -> CallerMemory {
        CallerMemory {
            base,
            len,
            released: RwLock::new(false),
        }
    }

    /// Give the buffer back, for good: once this returned, no access is
    /// under way and none touches the buffer again.
    pub(crate) fn release(&self) {
        *self.released.write().unwrap_or_else(|e| e.into_inner()) = true;
    }

    /// Run `f`, which touches the buffer, unless it was given back (then
    /// `None`); `release` waits for it.
    fn access<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let released = self.released.read().unwrap_or_else(|e| e.into_inner());
        (!*released).then(f)
    }

    /// The address of byte `offset` of `len` bytes inside the buffer;
    /// panics outside it (the trait's accessors return no errors, and
    /// [`Memory`] checked already: a bad range here is a bug, and it must
    /// never reach the caller's neighbouring memory).
    fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "CallerMemory: {len} bytes at {offset} are outside the {} bytes",
            self.len
        );
        // Inside the buffer (or one past its end). Not `add`: the buffer
        // may be given back (and freed) already; nothing reads through the
        // pointer then.
        self.base.as_ptr().wrapping_add(offset)
    }

    /// The 8-byte aligned address of the u64 at `offset`; panics outside
    /// the buffer or misaligned.
    fn word(&self, offset: usize) -> *mut u64 {
        let p = self.at(offset, 8);
        assert!(
            p as usize % 8 == 0,
            "CallerMemory: the word at {offset} is not 8-byte aligned"
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
            // SAFETY: `len` bytes at `src` are inside the caller's buffer
            // (`at`), which is valid while not given back (`access`); the
            // destination is a distinct Rust buffer of `len` bytes.
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
            // SAFETY: 8 bytes inside the buffer, 8-byte aligned (`word`),
            // valid for reads and writes while not given back (`access`);
            // the reference lives for this one atomic operation.
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

/// A registration's memory, held by the node (`relink_node`) from
/// `relink_register` until it is given back to the caller
/// ([`Registered::release`]: at `relink_deregister`, or when it is dropped
/// with the node).
pub(crate) struct Registered {
    /// The handle the node registered (and clones wherever relink keeps
    /// them).
    pub(crate) memory: Memory,
    backing: Backing,
    /// Given back already.
    released: bool,
}

enum Backing {
    /// On the soft fabric (and any provider that reads host memory through
    /// its handle).
    Caller(Arc<CallerMemory>),
    /// Adopted by the verbs provider.
    #[cfg(feature = "verbs")]
    Verbs(Arc<relink_verbs::VerbsProvider>),
}

impl Registered {
    /// The caller's `len` bytes at `addr` as host memory of the node's
    /// provider: adopted by `verbs` if the node is on rdma-core, else a
    /// [`CallerMemory`].
    ///
    /// # Safety
    /// `[addr, addr + len)` is memory of this process, valid for reads and
    /// writes, which stays mapped and is neither freed nor reused until
    /// [`release`](Self::release) returned `Ok` (or this value was dropped
    /// after the node's provider: `relink_node_free`), and which Rust
    /// holds no reference into; `len` is at most `isize::MAX` and the
    /// range does not wrap around.
    pub(crate) unsafe fn new(
        addr: NonNull<u8>,
        len: usize,
        verbs: Option<&Arc<relink_verbs::VerbsProvider>>,
    ) -> Result<Registered, Fail> {
        let (memory, backing) = match verbs {
            None => {
                // SAFETY: this function's contract is `CallerMemory::new`'s
                // (the value lives in `backing` until released).
                let m = Arc::new(unsafe { CallerMemory::new(addr, len) });
                (Memory::new(m.clone()), Backing::Caller(m))
            }
            #[cfg(feature = "verbs")]
            Some(p) => {
                // SAFETY: this function's contract is `adopt_foreign`'s:
                // the memory stays valid until `release_memory` of it
                // returned `Ok` (`release`), or the provider was dropped
                // with every handle (the node's, then this value's).
                let m = unsafe { p.adopt_foreign(addr, len) };
                (m, Backing::Verbs(p.clone()))
            }
            #[cfg(not(feature = "verbs"))]
            Some(_) => {
                return Err(Fail::new(
                    RELINK_ERR_UNSUPPORTED,
                    "this librelink was built without its `verbs` feature: it cannot \
                     register the caller's memory on rdma-core",
                ))
            }
        };
        Ok(Registered {
            memory,
            backing,
            released: false,
        })
    }

    /// Give the memory back to the caller: nothing touches it any more
    /// once this returned `Ok` (every MR over it deregistered, every
    /// handle's access stopped). Again after `Ok`: nothing to do.
    ///
    /// # Errors
    /// `RELINK_ERR_PROVIDER` when the verbs provider could not deregister
    /// an MR over it: the device may still access it (try again later; the
    /// provider's end deregisters everything).
    pub(crate) fn release(&mut self) -> Result<(), Fail> {
        if self.released {
            return Ok(());
        }
        match &self.backing {
            Backing::Caller(m) => m.release(),
            #[cfg(feature = "verbs")]
            Backing::Verbs(p) => {
                p.release_memory(&self.memory).map_err(|e| {
                    Fail::new(
                        RELINK_ERR_PROVIDER,
                        format!("the device did not let go of the memory: {e}"),
                    )
                })?;
            }
        }
        self.released = true;
        Ok(())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // On verbs a refusal leaves the MR to the provider's end, which
        // comes with the node's (this value holds the provider until then).
        let _ = self.release();
    }
}

impl fmt::Debug for Registered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registered")
            .field("memory", &self.memory)
            .field("released", &self.released)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::MemoryError;

    /// A buffer of the test's, and the memory over it.
    fn caller(words: &mut [u64]) -> (Arc<CallerMemory>, Memory) {
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>()).expect("a buffer");
        // SAFETY: the test's buffer outlives the memory's every use (each
        // test releases or drops the memory before it reads the buffer
        // itself, and frees the buffer after).
        let m = Arc::new(unsafe { CallerMemory::new(base, words.len() * 8) });
        (m.clone(), Memory::new(m))
    }

    #[test]
    fn the_callers_bytes_are_read_and_written_in_place() {
        let mut words = [0u64; 8];
        let addr = words.as_ptr() as u64;
        let (_own, m) = caller(&mut words);
        assert_eq!((m.addr(), m.len()), (addr, 64));
        m.write(60, b"tail").unwrap();
        m.write(0, &u64::to_ne_bytes(0x0102_0304_0506_0708))
            .unwrap();
        assert_eq!(m.read_vec(60, 4).unwrap(), b"tail");
        assert_eq!(m.read_u64(0).unwrap(), 0x0102_0304_0506_0708);
        // Bounds, as `Memory` checks them: nothing past the end.
        assert!(matches!(
            m.write(61, b"tail"),
            Err(MemoryError::OutOfBounds { .. })
        ));
        assert!(m.read_vec(64, 1).is_err());
        assert!(m.read_vec(usize::MAX, 2).is_err());
        assert_eq!(m.read_vec(64, 0).unwrap(), b"");
        let mut scratch = Vec::new();
        assert_eq!(
            m.read_with(60, 4, &mut scratch, <[u8]>::to_vec).unwrap(),
            b"tail",
            "not lent: copied"
        );
        drop(m);
        assert_eq!(words[0], 0x0102_0304_0506_0708);
        assert_eq!(&words[7].to_ne_bytes()[4..], b"tail");
    }

    #[test]
    fn atomics_work_on_aligned_words_of_the_buffer() {
        let mut words = [0u64; 4];
        words[1] = 40;
        let (_own, m) = caller(&mut words);
        assert_eq!(m.fetch_add(8, 2).unwrap(), 40);
        assert_eq!(m.fetch_add(8, u64::MAX).unwrap(), 42, "wraps");
        assert_eq!(m.compare_swap(8, 41, 7).unwrap(), 41);
        assert_eq!(m.compare_swap(8, 41, 9).unwrap(), 7, "no swap");
        assert!(matches!(
            m.fetch_add(4, 1),
            Err(MemoryError::Misaligned { offset: 4 })
        ));
        assert!(m.compare_swap(32, 0, 1).is_err(), "past the end");
        assert!(m.fetch_add(28, 1).is_err());
        // Threads adding at once lose nothing.
        std::thread::scope(|s| {
            for _ in 0..4 {
                let m = m.clone();
                s.spawn(move || {
                    for _ in 0..1000 {
                        m.fetch_add(16, 1).unwrap();
                    }
                });
            }
        });
        assert_eq!(m.read_u64(16).unwrap(), 4000);
        drop(m);
        assert_eq!((words[1], words[2]), (7, 4000));
    }

    /// Called directly (not through `Memory`), the accessors still refuse
    /// what is outside the buffer or misaligned: a panic, never a byte of
    /// the caller's other memory.
    #[test]
    fn direct_accessors_check_bounds_and_alignment_themselves() {
        let mut words = [0u64; 2];
        let (own, _m) = caller(&mut words);
        HostMemory::write(&*own, 8, &[1; 8]);
        let bad: [fn(&CallerMemory); 4] = [
            |m| HostMemory::read(m, 9, &mut [0u8; 8]),
            |m| HostMemory::write(m, usize::MAX, &[1]),
            |m| {
                HostMemory::fetch_add(m, 4, 1);
            },
            |m| {
                HostMemory::compare_swap(m, 16, 0, 1);
            },
        ];
        for f in bad {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&own)));
            assert!(r.is_err(), "a bad access must panic");
        }
        assert_eq!(HostMemory::fetch_add(&*own, 8, 1), 0x0101_0101_0101_0101);
    }

    /// Once given back, the buffer is the caller's alone: handles relink
    /// may still hold read zeros and write nothing.
    #[test]
    fn a_released_buffer_is_never_touched() {
        let mut words = [5u64; 2];
        let (own, m) = caller(&mut words);
        let mut r = Registered {
            memory: m.clone(),
            backing: Backing::Caller(own),
            released: false,
        };
        r.release().unwrap();
        r.release().unwrap();
        assert_eq!(m.read_u64(0).unwrap(), 0);
        m.write(0, &[9; 16]).unwrap();
        assert_eq!(m.fetch_add(8, 1).unwrap(), 0);
        assert_eq!(m.compare_swap(8, 0, 1).unwrap(), 0);
        assert!(m.write(9, &[0; 8]).is_err(), "still bounds-checked");
        drop((r, m));
        assert_eq!(words, [5, 5]);
    }
}
