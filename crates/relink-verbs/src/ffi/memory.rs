//! Page-aligned, mmap'd host memory for registration with real devices
//! (see the crate's `memory` module for how the provider uses it), and the
//! application's own memory that the provider adopts
//! ([`VerbsProvider::adopt_foreign`], the one `unsafe` function of the
//! crate's API: its caller vouches for the memory).
//!
//! A NIC reads and writes registered memory at any time, so no Rust
//! reference into it ever exists: every access is a raw copy through a
//! pointer ([`std::ptr::copy_nonoverlapping`] on the memory), and the
//! atomics go through [`AtomicU64::from_ptr`]. Every access checks its
//! range (and an atomic its alignment) itself, whatever its caller checked:
//! a bad one panics rather than touch memory outside the mapping.
//!
//! Adopted memory is the application's to free, once it has it back:
//! [`VerbsProvider::release_memory`] deregisters every MR over it and then
//! releases it ([`MappedMemory::release`]), after which no access through
//! any of its handles touches it (a release waits for an access under
//! way). Handles to it may outlive that (relink's transports not yet torn
//! down hold some): they read zeros and write nothing.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use relink_fabric::{HostMemory, Memory, MemoryError};

use crate::VerbsProvider;

/// Host memory the provider registers: anonymous, page-aligned memory from
/// `mmap` (its own), or the application's, adopted by
/// [`VerbsProvider::adopt_foreign`] (whose caller keeps it valid until it
/// is released).
pub struct MappedMemory {
    base: NonNull<u8>,
    len: usize,
    owner: Owner,
}

/// Whose memory a [`MappedMemory`] is.
enum Owner {
    /// The provider's mapping of `mapped` bytes (`len` rounded up to
    /// pages), unmapped when the value is dropped.
    Mapping { mapped: usize },
    /// The application's memory, never freed here. `released` is set
    /// (under the write lock, so after every access under way) when the
    /// application may free it: from then on accesses do nothing.
    Foreign { released: RwLock<bool> },
}

// SAFETY: the mapping is plain memory owned by this value, or foreign
// memory its adopter keeps valid until it is released (accesses stop at
// the release, under the lock); all access goes through raw-pointer copies
// and atomics that are valid from any thread.
unsafe impl Send for MappedMemory {}
// SAFETY: as above; no method hands out references into the memory.
unsafe impl Sync for MappedMemory {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

impl MappedMemory {
    /// Map `len` zeroed bytes (at least one page).
    pub(crate) fn new(len: usize) -> Result<MappedMemory, MemoryError> {
        let page = page_size();
        let mapped = len
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or(MemoryError::Exhausted(len))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemoryError::Exhausted(len));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or(MemoryError::Exhausted(len))?;
        Ok(MappedMemory {
            base,
            len,
            owner: Owner::Mapping { mapped },
        })
    }

    /// The application's `len` bytes at `base`: never unmapped or freed
    /// here.
    ///
    /// # Safety
    /// `[base, base + len)` is memory of this process, valid for reads and
    /// writes, that stays mapped and is neither freed nor reused until
    /// [`release`](Self::release) returned (or this value is dropped) and
    /// no device may access it any more (no MR covers it). No Rust
    /// reference into it exists meanwhile; other code may read and write
    /// it, as a device does (accesses here are raw copies and atomics).
    unsafe fn foreign(base: NonNull<u8>, len: usize) -> MappedMemory {
        MappedMemory {
            base,
            len,
            owner: Owner::Foreign {
                released: RwLock::new(false),
            },
        }
    }

    /// Whether this is the application's memory (adopted), not a mapping
    /// of the provider's.
    pub(crate) fn is_foreign(&self) -> bool {
        matches!(self.owner, Owner::Foreign { .. })
    }

    /// Stop every access to adopted memory, for good: once this returned,
    /// no access under way is left, and later ones read zeros and write
    /// nothing. Returns whether it did so (false for the provider's own
    /// mapping, which stays usable).
    pub(crate) fn release(&self) -> bool {
        match &self.owner {
            Owner::Mapping { .. } => false,
            Owner::Foreign { released } => {
                *released.write().unwrap_or_else(|e| e.into_inner()) = true;
                true
            }
        }
    }

    /// Run `f`, which touches the memory, unless the memory is released
    /// (`None` then); a release waits for it.
    fn access<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        match &self.owner {
            Owner::Mapping { .. } => Some(f()),
            Owner::Foreign { released } => {
                let released = released.read().unwrap_or_else(|e| e.into_inner());
                (!*released).then(f)
            }
        }
    }

    /// Whether `len` bytes at `offset` lie inside the memory.
    fn check(&self, offset: usize, len: usize) -> Result<(), MemoryError> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(MemoryError::OutOfBounds {
                offset,
                len,
                size: self.len,
            });
        }
        Ok(())
    }

    /// A pointer to byte `offset` of `len` bytes inside the memory, or why
    /// not.
    fn range(&self, offset: usize, len: usize) -> Result<*mut u8, MemoryError> {
        self.check(offset, len)?;
        // `offset <= self.len` (checked above): the result stays inside (or
        // one past the end of) the memory. No `add`: the memory may be
        // released (and freed) already; nothing reads through the pointer
        // then.
        Ok(self.base.as_ptr().wrapping_add(offset))
    }

    /// The u64 at `offset` as an atomic, or why not (out of bounds or not
    /// 8-byte aligned). Call it inside [`access`](Self::access) only.
    fn atomic(&self, offset: usize) -> Result<&AtomicU64, MemoryError> {
        let p = self.range(offset, 8)?;
        if p as usize % 8 != 0 {
            return Err(MemoryError::Misaligned { offset });
        }
        // SAFETY: the 8 bytes are inside the memory and 8-byte aligned
        // (checked above), valid for reads and writes: a mapping lives as
        // long as `self`, which the returned reference borrows, and foreign
        // memory is not released while an access holds the read lock (the
        // callers use the reference for one atomic operation inside
        // `access`).
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Panics with `e`: the trait's accessors cannot return errors, and a
    /// bad range must never reach the memory.
    #[cold]
    fn refuse(e: MemoryError) -> ! {
        panic!("MappedMemory: {e}")
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        let Owner::Mapping { mapped } = self.owner else {
            // The application's: it frees it.
            return;
        };
        // SAFETY: the mapping was created by `new` with this length and is
        // unmapped once; no registration uses it any more (each MR holds a
        // `Memory` clone, so the last one is gone).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), mapped);
        }
    }
}

impl fmt::Debug for MappedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedMemory")
            .field("addr", &format_args!("{:#x}", self.base.as_ptr() as u64))
            .field("len", &self.len)
            .field("foreign", &self.is_foreign())
            .finish()
    }
}

impl HostMemory for MappedMemory {
    fn addr(&self) -> u64 {
        self.base.as_ptr() as u64
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, out: &mut [u8]) {
        let src = self
            .range(offset, out.len())
            .unwrap_or_else(|e| Self::refuse(e));
        let (dst, len) = (out.as_mut_ptr(), out.len());
        let copied = self.access(|| {
            // SAFETY: `range` checked `offset + len <= self.len`, and the
            // memory is live (a mapping of `self`'s, or foreign memory not
            // released: `access`); the source is never referenced
            // elsewhere in Rust, the destination a distinct Rust buffer.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
        });
        if copied.is_none() {
            out.fill(0);
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let dst = self
            .range(offset, data.len())
            .unwrap_or_else(|e| Self::refuse(e));
        self.access(|| {
            // SAFETY: as in `read`, with the roles swapped.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
        });
    }
    fn read_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<usize> {
        self.file_io(offset, len, pos, |p, pos| {
            // SAFETY: `file_io` gives `len` bytes at `p` inside the live
            // memory; the kernel writes at most `len` bytes there, which no
            // Rust reference covers (as a NIC's DMA); `file` is an open
            // descriptor for the call.
            unsafe { libc::pread(file.as_raw_fd(), p.cast(), len, pos) }
        })
    }
    fn write_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<usize> {
        self.file_io(offset, len, pos, |p, pos| {
            // SAFETY: as in `read_file_at`; the kernel reads the `len`
            // bytes at `p`.
            unsafe { libc::pwrite(file.as_raw_fd(), p.cast(), len, pos) }
        })
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        // Checked first: a bad one panics whether or not it is released.
        if let Err(e) = self.atomic_checked(offset) {
            Self::refuse(e)
        }
        self.access(|| {
            let a = self.atomic(offset).unwrap_or_else(|e| Self::refuse(e));
            a.fetch_add(add, Ordering::SeqCst)
        })
        .unwrap_or(0)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        if let Err(e) = self.atomic_checked(offset) {
            Self::refuse(e)
        }
        self.access(|| {
            let a = self.atomic(offset).unwrap_or_else(|e| Self::refuse(e));
            match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
        .unwrap_or(0)
    }
}

impl MappedMemory {
    /// A `pread`/`pwrite` (`call`) of the `len` bytes at `offset` at file
    /// position `pos`: `call` gets their address (checked to lie inside
    /// the memory: a bad range panics) and `pos`, and runs under
    /// [`access`](Self::access). Its count, or its error (`errno`); an
    /// error if the memory was given back (nothing moved then).
    fn file_io(
        &self,
        offset: usize,
        len: usize,
        pos: u64,
        call: impl FnOnce(*mut u8, libc::off_t) -> isize,
    ) -> io::Result<usize> {
        let p = self.range(offset, len).unwrap_or_else(|e| Self::refuse(e));
        let pos =
            libc::off_t::try_from(pos).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // errno is read at once, before the access's lock is let go.
        let done = self.access(|| {
            let n = call(p, pos);
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
        done.unwrap_or_else(|| Err(io::Error::other("the memory was given back to its owner")))
    }

    /// Whether the u64 at `offset` is inside the memory and 8-byte aligned
    /// (touching nothing).
    fn atomic_checked(&self, offset: usize) -> Result<(), MemoryError> {
        let p = self.range(offset, 8)?;
        if p as usize % 8 != 0 {
            return Err(MemoryError::Misaligned { offset });
        }
        Ok(())
    }
}

impl VerbsProvider {
    /// Adopt `len` bytes of the application's own memory at `addr` — not
    /// allocated by [`alloc_memory`](relink_fabric::Provider::alloc_memory),
    /// as `ibv_reg_mr` takes any memory of the process — so that this
    /// provider's `reg_mr` accepts it. The [`Memory`] returned is
    /// recognised by identity, as the provider's own allocations are (its
    /// clones too; another `Memory` claiming the same address is not).
    /// Accesses through it are raw copies; atomics need their word 8-byte
    /// aligned. Dropping its last handle frees nothing.
    ///
    /// Give it back with [`release_memory`](VerbsProvider::release_memory)
    /// before freeing it: that deregisters every MR of the provider over it
    /// (whoever holds the MR's handle — with relink, a transport not yet
    /// torn down after relink's own deregistration) and stops every access
    /// through any handle to it.
    ///
    /// # Safety
    /// `[addr, addr + len)` is memory of this process (within one
    /// allocation or mapping), valid for reads and writes, which stays
    /// mapped and is neither freed nor reused for anything else until
    /// [`release_memory`](VerbsProvider::release_memory) of the returned
    /// handle returned `Ok`, or until this provider was dropped (which
    /// deregisters every MR) and every handle to the memory with it (the
    /// caller's, and the clones relink keeps in every session that has
    /// the registration). Until then the device reads and writes it at any
    /// time, for this process's operations and the peer's, and so may
    /// this provider's users through the handle, from any thread: no Rust
    /// reference into it may exist, and code reading it while the device
    /// writes sees what the hardware gives, as with `ibv_reg_mr`.
    ///
    /// # Panics
    /// If `addr + len` wraps around or `len` is over `isize::MAX` (no
    /// allocation is).
    pub unsafe fn adopt_foreign(&self, addr: NonNull<u8>, len: usize) -> Memory {
        assert!(
            isize::try_from(len).is_ok() && (addr.as_ptr() as usize).checked_add(len).is_some(),
            "adopt_foreign: {len} bytes at {addr:p} are no allocation"
        );
        // SAFETY: this function's contract is `foreign`'s: the memory stays
        // valid until the value is released by `release_memory` (after
        // every MR over it is deregistered) or dropped with the provider's
        // MRs and every handle.
        let memory = unsafe { MappedMemory::foreign(addr, len) };
        self.adopt_mapping(memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_checks_every_range_itself() {
        let m = MappedMemory::new(100).unwrap();
        assert!(m.range(0, 100).is_ok());
        assert!(m.range(100, 0).is_ok());
        assert_eq!(
            m.range(91, 10).unwrap_err(),
            MemoryError::OutOfBounds {
                offset: 91,
                len: 10,
                size: 100
            }
        );
        assert!(m.range(usize::MAX, 2).is_err(), "no overflow");
        assert!(m.range(101, 0).is_err());
        assert!(m.atomic(8).is_ok());
        assert_eq!(
            m.atomic(4).unwrap_err(),
            MemoryError::Misaligned { offset: 4 }
        );
        assert!(m.atomic(96).is_err(), "8 bytes past the end");
    }

    /// The trait's accessors, called directly (not through `Memory`), refuse
    /// a bad range rather than touch memory outside the mapping.
    #[test]
    fn direct_accessors_refuse_bad_ranges() {
        let m = MappedMemory::new(100).unwrap();
        let mut buf = [0u8; 8];
        HostMemory::write(&m, 92, &buf);
        HostMemory::read(&m, 92, &mut buf);
        for bad in [
            Box::new(|m: &MappedMemory| HostMemory::read(m, 93, &mut [0u8; 8]))
                as Box<dyn Fn(&MappedMemory)>,
            Box::new(|m: &MappedMemory| HostMemory::write(m, usize::MAX, &[1])),
            Box::new(|m: &MappedMemory| {
                HostMemory::fetch_add(m, 96, 1);
            }),
            Box::new(|m: &MappedMemory| {
                HostMemory::compare_swap(m, 4, 0, 1);
            }),
        ] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bad(&m)));
            assert!(r.is_err(), "a bad access must panic");
        }
        assert_eq!(HostMemory::fetch_add(&m, 8, 2), 0);
    }

    /// The application's memory, adopted: read and written in place,
    /// bounds and alignment checked, never freed here; once released, no
    /// access touches it (reads give zeros) and the application has it
    /// back.
    #[test]
    fn foreign_memory_is_accessed_in_place_until_released() {
        let mut backing = vec![0u64; 16];
        let base = NonNull::new(backing.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `backing` is 128 bytes, valid for reads and writes, not
        // referenced while `m` accesses it (the test reads it only after
        // `m` is released and dropped) and freed after `m`.
        let m = unsafe { MappedMemory::foreign(base, 128) };
        assert!(m.is_foreign());
        assert_eq!(HostMemory::addr(&m), backing.as_ptr() as u64);
        HostMemory::write(&m, 8, &7u64.to_ne_bytes());
        assert_eq!(HostMemory::fetch_add(&m, 8, 3), 7);
        assert_eq!(HostMemory::compare_swap(&m, 8, 10, 11), 10);
        let mut out = [0u8; 8];
        HostMemory::read(&m, 8, &mut out);
        assert_eq!(u64::from_ne_bytes(out), 11);
        assert!(m.range(121, 8).is_err());
        assert!(m.atomic(4).is_err());
        let bad = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            HostMemory::write(&m, 125, &[0u8; 4]);
        }));
        assert!(bad.is_err(), "out of bounds panics");
        assert!(m.release());
        HostMemory::write(&m, 16, &[0xff; 8]);
        assert_eq!(HostMemory::fetch_add(&m, 16, 1), 0);
        let mut out = [0xaau8; 8];
        HostMemory::read(&m, 8, &mut out);
        assert_eq!(out, [0; 8], "released: reads give zeros");
        let bad = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            HostMemory::read(&m, 125, &mut [0u8; 4]);
        }));
        assert!(bad.is_err(), "released, out of bounds still panics");
        drop(m);
        assert_eq!(backing[1], 11);
        assert_eq!(backing[2], 0, "nothing written after the release");
        // A mapping of the provider's is not released.
        assert!(!MappedMemory::new(64).unwrap().release());
    }

    /// A file's bytes move straight between it and the mapping (one
    /// `pread`/`pwrite`, no copy in between); past the file's end the
    /// range reads zeros.
    #[test]
    fn file_io_in_place() {
        use std::io::Write;
        use std::os::unix::fs::FileExt;
        let m = Memory::new(std::sync::Arc::new(MappedMemory::new(4096).unwrap()));
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"relink verbs").unwrap();
        m.write(0, &[0xAA; 32]).unwrap();
        m.read_file_at(4, 16, &file, 7).unwrap();
        assert_eq!(
            m.read_vec(0, 24).unwrap(),
            b"\xAA\xAA\xAA\xAAverbs\0\0\0\0\0\0\0\0\0\0\0\xAA\xAA\xAA\xAA"
        );
        m.write_file_at(4, 5, &file, 100).unwrap();
        let mut back = [0u8; 5];
        file.read_exact_at(&mut back, 100).unwrap();
        assert_eq!(&back, b"verbs");
        assert!(m.read_file_at(4090, 16, &file, 0).is_err());
    }
}
