//! Page-aligned, mmap'd host memory for registration with real devices.
//!
//! A NIC reads and writes registered memory at any time, so no Rust
//! reference into it ever exists: every access is a raw copy through a
//! pointer ([`std::ptr::copy_nonoverlapping`] on the mapping), and the
//! atomics go through [`AtomicU64::from_ptr`]. The mapping lives as long as
//! the last [`Memory`](relink_fabric::Memory) handle to it — every MR the
//! provider registers keeps one — so it is never unmapped under a
//! registration.

use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use relink_fabric::{HostMemory, MemoryError};

/// Live allocations by address (for `reg_mr` to recognise its own memory).
pub(crate) type Allocations = Arc<Mutex<BTreeMap<u64, usize>>>;

/// Anonymous, page-aligned memory from `mmap`.
pub struct MappedMemory {
    base: NonNull<u8>,
    len: usize,
    mapped: usize,
    allocs: Allocations,
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
    pub(crate) fn new(len: usize, allocs: Allocations) -> Result<MappedMemory, MemoryError> {
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
        allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(base.as_ptr() as u64, len);
        Ok(MappedMemory {
            base,
            len,
            mapped,
            allocs,
        })
    }

    fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.len);
        // SAFETY: `offset` is within the mapping (callers are bounds-checked
        // by `Memory`), so the result stays inside the same allocation.
        unsafe { self.base.as_ptr().add(offset) }
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        self.allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.base.as_ptr() as u64));
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
        // SAFETY: `Memory` checked `offset + out.len() <= len`; the source is
        // the mapping (never referenced elsewhere), the destination a
        // distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.at(offset), out.as_mut_ptr(), out.len()) }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        // SAFETY: as in `read`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.at(offset), data.len()) }
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        // SAFETY: `Memory` checked the 8 bytes are in bounds and 8-byte
        // aligned; the mapping outlives the atomic, which is only used here.
        let a = unsafe { AtomicU64::from_ptr(self.at(offset).cast::<u64>()) };
        a.fetch_add(add, Ordering::SeqCst)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        // SAFETY: as in `fetch_add`.
        let a = unsafe { AtomicU64::from_ptr(self.at(offset).cast::<u64>()) };
        match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::Memory;

    #[test]
    fn mapped_memory_is_page_aligned_and_bounds_checked() {
        let allocs = Allocations::default();
        let m = Memory::new(Arc::new(MappedMemory::new(10_000, allocs.clone()).unwrap()));
        assert_eq!(m.addr() % page_size() as u64, 0);
        assert_eq!(m.len(), 10_000);
        assert_eq!(allocs.lock().unwrap().get(&m.addr()), Some(&10_000));
        m.write(9_990, b"0123456789").unwrap();
        assert_eq!(m.read_vec(9_990, 10).unwrap(), b"0123456789");
        assert!(m.write(9_991, b"0123456789").is_err());
        assert_eq!(m.fetch_add(16, 3).unwrap(), 0);
        assert_eq!(m.compare_swap(16, 3, 9).unwrap(), 3);
        assert_eq!(m.read_u64(16).unwrap(), 9);
        assert!(m.fetch_add(12, 1).is_err());
        drop(m);
        assert!(allocs.lock().unwrap().is_empty(), "unmapped and forgotten");
        let z = MappedMemory::new(0, allocs).unwrap();
        assert_eq!(z.len(), 0);
    }
}
