//! Page-aligned, mmap'd host memory for registration with real devices
//! (see the crate's `memory` module for how the provider uses it).
//!
//! A NIC reads and writes registered memory at any time, so no Rust
//! reference into it ever exists: every access is a raw copy through a
//! pointer ([`std::ptr::copy_nonoverlapping`] on the mapping), and the
//! atomics go through [`AtomicU64::from_ptr`]. Every access checks its
//! range (and an atomic its alignment) itself, whatever its caller checked:
//! a bad one panics rather than touch memory outside the mapping.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use relink_fabric::{HostMemory, MemoryError};

/// Anonymous, page-aligned memory from `mmap`.
pub struct MappedMemory {
    base: NonNull<u8>,
    len: usize,
    mapped: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access goes
// through raw-pointer copies and atomics that are valid from any thread.
unsafe impl Send for MappedMemory {}
// SAFETY: as above; no method hands out references into the mapping.
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
        Ok(MappedMemory { base, len, mapped })
    }

    /// A pointer to byte `offset` of `len` bytes inside the memory, or why
    /// not.
    fn range(&self, offset: usize, len: usize) -> Result<*mut u8, MemoryError> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(MemoryError::OutOfBounds {
                offset,
                len,
                size: self.len,
            });
        }
        // SAFETY: `offset <= self.len <= self.mapped` (checked above), so
        // the result stays inside (or one past the end of) the mapping.
        Ok(unsafe { self.base.as_ptr().add(offset) })
    }

    /// The u64 at `offset` as an atomic, or why not (out of bounds or not
    /// 8-byte aligned).
    fn atomic(&self, offset: usize) -> Result<&AtomicU64, MemoryError> {
        let p = self.range(offset, 8)?;
        if p as usize % 8 != 0 {
            return Err(MemoryError::Misaligned { offset });
        }
        // SAFETY: the 8 bytes are inside the mapping and 8-byte aligned
        // (checked above), valid for reads and writes; the mapping lives as
        // long as `self`, which the returned reference borrows, and the
        // callers use it for one atomic operation.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Panics with `e`: the trait's accessors cannot return errors, and a
    /// bad range must never reach the mapping.
    #[cold]
    fn refuse(e: MemoryError) -> ! {
        panic!("MappedMemory: {e}")
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `new` with this length and is
        // unmapped once; no registration uses it any more (each MR holds a
        // `Memory` clone, so the last one is gone).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.mapped);
        }
    }
}

impl fmt::Debug for MappedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedMemory")
            .field("addr", &format_args!("{:#x}", self.base.as_ptr() as u64))
            .field("len", &self.len)
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
        // SAFETY: `range` checked `offset + out.len() <= len`; the source is
        // the mapping (never referenced elsewhere), the destination a
        // distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let dst = self
            .range(offset, data.len())
            .unwrap_or_else(|e| Self::refuse(e));
        // SAFETY: as in `read`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        let a = self.atomic(offset).unwrap_or_else(|e| Self::refuse(e));
        a.fetch_add(add, Ordering::SeqCst)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        let a = self.atomic(offset).unwrap_or_else(|e| Self::refuse(e));
        match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        }
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
}
