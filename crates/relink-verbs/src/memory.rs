//! The provider's host memory: page-aligned, `mmap`'d mappings
//! ([`MappedMemory`], in the FFI module) for registration with real
//! devices, and the record of the live ones ([`Allocations`]).
//!
//! A NIC reads and writes registered memory at any time, so no Rust
//! reference into a mapping ever exists: every access is a raw copy, and
//! every access checks its range itself. The mapping lives as long as the
//! last [`Memory`](relink_fabric::Memory) handle to it — every MR the
//! provider registers keeps one — so it is never unmapped under a
//! registration; `reg_mr` accepts only the provider's own allocations,
//! recognised by identity (module `owned`). The application's own memory
//! joins them only through the unsafe `VerbsProvider::adopt_foreign`,
//! whose caller keeps it valid until `VerbsProvider::release_memory` gave
//! it back.

#![forbid(unsafe_code)]

use std::sync::Arc;

pub(crate) use crate::ffi::MappedMemory;
use crate::owned::OwnedMemory;

/// The provider's live allocations (for `reg_mr` to recognise its own
/// memory).
pub(crate) type Allocations = Arc<OwnedMemory<MappedMemory>>;

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::HostMemory;

    #[test]
    fn mapped_memory_is_page_aligned_and_bounds_checked() {
        let allocs = Allocations::default();
        let m = allocs.adopt(MappedMemory::new(10_000).unwrap());
        assert_eq!(m.addr() % 4096, 0);
        assert_eq!(m.len(), 10_000);
        assert!(allocs.recognise(&m).is_some_and(|own| own.same(&m)));
        m.write(9_990, b"0123456789").unwrap();
        assert_eq!(m.read_vec(9_990, 10).unwrap(), b"0123456789");
        assert!(m.write(9_991, b"0123456789").is_err());
        assert_eq!(m.fetch_add(16, 3).unwrap(), 0);
        assert_eq!(m.compare_swap(16, 3, 9).unwrap(), 3);
        assert_eq!(m.read_u64(16).unwrap(), 9);
        assert!(m.fetch_add(12, 1).is_err());
        let z = MappedMemory::new(0).unwrap();
        assert_eq!(HostMemory::len(&z), 0);
    }
}
