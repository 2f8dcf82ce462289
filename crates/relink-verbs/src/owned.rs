//! The memory a provider allocated itself, recognised by identity.
//!
//! `reg_mr` hands the device a range of host memory, which the device then
//! reads and writes until the MR is deregistered. That is sound only for
//! memory the provider mapped itself and keeps mapped while registered. A
//! [`Memory`] is any [`HostMemory`](relink_fabric::HostMemory) behind an
//! `Arc`, and any implementation may claim any address and length, so
//! address and length prove nothing: a forged implementation that claims
//! the address of one of our mappings would get that mapping registered
//! while nothing keeps it mapped. So the provider remembers the
//! allocations it made (a [`Weak`] each, which does not keep them alive)
//! and recognises a `Memory` only when it is a handle to one of those very
//! allocations ([`Memory::same`]: the same `Arc`). The handle it then uses
//! and keeps is its own, rebuilt from that `Arc`: no code of the caller's
//! runs after the recognition.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use relink_fabric::{HostMemory, Memory};

/// The live allocations of one provider, by address (the address only
/// finds the candidates; identity decides). One address may have several:
/// the application's own memory, adopted (`adopt_foreign`), may be adopted
/// twice, or overlap.
pub(crate) struct OwnedMemory<T> {
    live: Mutex<BTreeMap<u64, Vec<Weak<T>>>>,
}

impl<T> Default for OwnedMemory<T> {
    fn default() -> Self {
        OwnedMemory {
            live: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<T: HostMemory + 'static> OwnedMemory<T> {
    /// Wrap a fresh allocation of this provider in a [`Memory`] and
    /// remember it. Allocations dropped since are forgotten here.
    pub(crate) fn adopt(&self, memory: T) -> Memory {
        let addr = memory.addr();
        let memory = Arc::new(memory);
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, ws| {
            ws.retain(|w| w.strong_count() > 0);
            !ws.is_empty()
        });
        live.entry(addr).or_default().push(Arc::downgrade(&memory));
        drop(live);
        Memory::new(memory)
    }

    /// This provider's own handle to `memory` if `memory` is one of its
    /// live allocations (the same allocation, not merely the same address),
    /// else `None`.
    #[cfg(test)]
    pub(crate) fn recognise(&self, memory: &Memory) -> Option<Memory> {
        self.recognise_own(memory).map(|(ours, _)| ours)
    }

    /// As [`recognise`](Self::recognise), with the allocation itself too
    /// (what `reg_mr` hands the FFI module, which registers only memory of
    /// the provider's own mappings).
    pub(crate) fn recognise_own(&self, memory: &Memory) -> Option<(Memory, Arc<T>)> {
        // A forged implementation runs here; no lock of ours is held.
        let addr = memory.addr();
        let candidates: Vec<Arc<T>> = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&addr)?
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        // Our own handles, built from our own `Arc`s: no code of the
        // caller's runs in `same`.
        candidates.into_iter().find_map(|own| {
            let ours = Memory::new(own.clone());
            ours.same(memory).then_some((ours, own))
        })
    }

    /// How many allocations are remembered (live or not yet forgotten).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.live.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::HeapMemory;

    #[test]
    fn own_memory_is_recognised_and_forged_memory_is_not() {
        let owned = OwnedMemory::<HeapMemory>::default();
        let m = owned.adopt(HeapMemory::new(0x10_000, 4096));
        let clone = m.clone();
        let ours = owned.recognise(&clone).expect("a clone of our handle");
        assert!(ours.same(&m));

        // Same address and length, another allocation: refused.
        let forged = Memory::new(Arc::new(HeapMemory::new(0x10_000, 4096)));
        assert!(owned.recognise(&forged).is_none());
        // An address we never allocated: refused.
        let stray = Memory::new(Arc::new(HeapMemory::new(0x20_000, 4096)));
        assert!(owned.recognise(&stray).is_none());
    }

    /// The application's memory (relink's `Node::alloc_memory`, then
    /// `RegionOptions::with_memory`): one allocation whose clones several
    /// sessions register, each on its own PD, for as long as they live.
    #[test]
    fn memory_the_application_shares_is_recognised_for_every_session() {
        let owned = OwnedMemory::<HeapMemory>::default();
        let app = owned.adopt(HeapMemory::new(0x10_000, 4096));
        let sessions: Vec<Memory> = (0..3).map(|_| app.clone()).collect();
        // Other allocations come and go (each adopt forgets dead ones).
        for i in 1..5u64 {
            drop(owned.adopt(HeapMemory::new(0x10_000 + i * 0x2000, 64)));
        }
        for m in &sessions {
            assert!(owned.recognise(m).is_some_and(|own| own.same(&app)));
        }
        // The application drops its handle: the sessions' clones keep the
        // allocation alive and recognised.
        drop(app);
        drop(owned.adopt(HeapMemory::new(0x40_000, 64)));
        let own = owned.recognise(&sessions[2]).expect("still live");
        assert!(own.same(&sessions[0]));
        // Another allocation of the same address and length is not it.
        let copy = Memory::new(Arc::new(HeapMemory::new(0x10_000, 4096)));
        assert!(owned.recognise(&copy).is_none());
    }

    /// A forged implementation that reports the address of a real
    /// allocation, even delegating every call to it.
    #[derive(Debug)]
    struct Impostor(Memory);

    impl HostMemory for Impostor {
        fn addr(&self) -> u64 {
            self.0.addr()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn read(&self, offset: usize, out: &mut [u8]) {
            self.0.read(offset, out).unwrap();
        }
        fn write(&self, offset: usize, data: &[u8]) {
            self.0.write(offset, data).unwrap();
        }
        fn fetch_add(&self, offset: usize, add: u64) -> u64 {
            self.0.fetch_add(offset, add).unwrap()
        }
        fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
            self.0.compare_swap(offset, compare, swap).unwrap()
        }
    }

    #[test]
    fn a_wrapper_around_own_memory_is_not_own_memory() {
        let owned = OwnedMemory::<HeapMemory>::default();
        let m = owned.adopt(HeapMemory::new(0x10_000, 4096));
        let impostor = Memory::new(Arc::new(Impostor(m.clone())));
        assert_eq!((impostor.addr(), impostor.len()), (m.addr(), m.len()));
        assert!(owned.recognise(&impostor).is_none());
    }

    /// The application's memory may be adopted twice (registered twice,
    /// as `ibv_reg_mr` allows): each adoption is recognised, as itself,
    /// and outlives the other.
    #[test]
    fn two_adoptions_of_one_address_are_both_recognised() {
        let owned = OwnedMemory::<HeapMemory>::default();
        let first = owned.adopt(HeapMemory::new(0x10_000, 4096));
        let second = owned.adopt(HeapMemory::new(0x10_000, 64));
        assert_eq!(owned.remembered(), 2);
        let ours = owned.recognise(&first.clone()).expect("the first");
        assert!(ours.same(&first) && !ours.same(&second));
        drop(ours);
        let ours = owned.recognise(&second).expect("the second");
        assert!(ours.same(&second) && !ours.same(&first));
        drop(first);
        // The next adoption forgets the dropped one, not the other.
        let other = owned.adopt(HeapMemory::new(0x20_000, 64));
        assert!(owned.recognise(&second).is_some());
        assert!(owned.recognise(&other).is_some());
        assert_eq!(owned.remembered(), 2);
        let forged = Memory::new(Arc::new(HeapMemory::new(0x10_000, 64)));
        assert!(owned.recognise(&forged).is_none());
    }

    #[test]
    fn dropped_allocations_are_forgotten() {
        let owned = OwnedMemory::<HeapMemory>::default();
        let m = owned.adopt(HeapMemory::new(0x10_000, 64));
        let probe = Memory::new(Arc::new(HeapMemory::new(0x10_000, 64)));
        drop(m);
        // Nothing keeps the allocation alive, and it is not recognised.
        assert!(owned.recognise(&probe).is_none());
        // The next allocation (here at the same address) forgets it.
        let again = owned.adopt(HeapMemory::new(0x10_000, 64));
        assert_eq!(owned.remembered(), 1);
        assert!(owned.recognise(&again).is_some());
        assert!(owned.recognise(&probe).is_none());
    }
}
