//! A session's regions: [`RegionOptions`] (relink-allocated or the
//! application's own [`Memory`], shared among sessions if the application
//! likes), their checks, and the host memory a session is given when it
//! is made ([`SessionMemory`]).

use std::collections::{BTreeMap, BTreeSet};

use relink_core::resources::SessionSpec;
use relink_core::RegionId;
use relink_fabric::{Access, Memory};

use super::transport::SessionMemory;
use relink_fabric::MemoryError;

use super::{Node, OptionsError, SessionOptions};

/// A memory region a session registers on every device it uses, under a
/// stable id: a [`BufferToken`](crate::BufferToken) (region id and offset)
/// names the same bytes before and after every recovery.
///
/// Its host memory is either relink's ([`RegionOptions::new`]: allocated
/// for each session when the session is made, freed when it is reaped) or
/// the application's ([`RegionOptions::with_memory`]).
///
/// # Application memory and shared regions
///
/// A [`Memory`] is a shared handle: the application keeps its clone, reads
/// and writes the bytes directly, and may give the same memory to several
/// sessions of the node (or to a listener, whose accepted sessions all get
/// it). Each such session registers it on its own device(s) and
/// advertises it under its region id; whatever the peer writes through any
/// of those sessions' tokens lands in the one memory, and the tokens stay
/// valid across recoveries (each session's new keys are advertised
/// again). A session keeps a clone of the handle until it is reaped, its
/// registrations one each until they are destroyed, so the bytes outlive
/// every session that uses them even if the application drops its own
/// handle.
///
/// The usual RDMA rules apply to concurrent access: a peer's WRITE may
/// land while the application reads, and nothing orders the two but the
/// application's own protocol (a message after the WRITE, say, which RC
/// delivers after it). Take the memory from [`Node::alloc_memory`]: the
/// verbs provider registers only memory it allocated itself (it refuses
/// any other handle, and a session with such a region cannot connect: its
/// attempts fail until the policy gives up); the soft fabric takes any.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RegionOptions {
    /// Stable id, the same on both sides of the application's protocol;
    /// unique among a session's regions.
    pub id: RegionId,
    /// Length in bytes, registered on every device at the same address.
    /// For application memory, at most the memory's length (the first
    /// `len` bytes are registered).
    pub len: u64,
    /// Rights (exactly these, on every device). `REMOTE_WRITE` and
    /// `REMOTE_ATOMIC` need `LOCAL_WRITE` too, as `ibv_reg_mr` requires: a
    /// region without it is refused when the session or listener is made
    /// ([`OptionsError::BadRegion`](crate::OptionsError::BadRegion)).
    pub access: Access,
    /// Advertise it to the peer for one-sided access (its key is sent again
    /// after every reconnection). Off unless set ([`RegionOptions::advertise`]).
    pub advertise: bool,
    /// Expose it through a type 2 memory window instead of its MR
    /// ([`RegionOptions::window`]). Off unless set.
    pub window: bool,
    /// The application's memory, or `None` for memory relink allocates
    /// for each session.
    pub memory: Option<Memory>,
}

impl RegionOptions {
    /// A region of `len` bytes relink allocates for each session (zeroed,
    /// read and written with [`Node::region`]), not advertised.
    pub fn new(id: RegionId, len: u64, access: Access) -> RegionOptions {
        RegionOptions {
            id,
            len,
            access,
            advertise: false,
            window: false,
            memory: None,
        }
    }

    /// A region of the application's `memory` (all of it), not advertised.
    /// The same memory given to several sessions is one region shared by
    /// them (see the [type's docs](RegionOptions)).
    pub fn with_memory(id: RegionId, memory: Memory, access: Access) -> RegionOptions {
        RegionOptions {
            id,
            len: memory.len() as u64,
            access,
            advertise: false,
            window: false,
            memory: Some(memory),
        }
    }

    /// Whether to advertise the region to the peer for one-sided access.
    pub fn advertise(mut self, advertise: bool) -> RegionOptions {
        self.advertise = advertise;
        self
    }

    /// Whether to expose the (advertised) region through a type 2 memory
    /// window rather than its MR. relink registers the MR with the
    /// region's local write (if any) and `MW_BIND` only — its rkey grants
    /// the peer nothing — allocates a window with every transport, binds it
    /// on the session's QP (a BIND_MW request) once the connection is up
    /// and before the advertisement, and advertises the window's rkey with
    /// the region's remote rights: the peer reaches the region by the same
    /// tokens as through an MR, through that QP only. After every reset,
    /// replacement or failover the window is allocated and bound again on
    /// the new transport and advertised again; a close invalidates it
    /// (LOCAL_INV, after the goodbye) and every teardown frees it.
    ///
    /// A window needs the region advertised and at least one remote right
    /// ([`OptionsError::BadRegion`](crate::OptionsError::BadRegion)
    /// otherwise), and a provider with type 2 windows (the soft fabric;
    /// rxe and most RDMA NICs with rdma-core): on one without, the
    /// session's attempts fail with the provider's error until the policy
    /// gives up.
    pub fn window(mut self, window: bool) -> RegionOptions {
        self.window = window;
        self
    }

    /// Why the region cannot be registered, if it cannot.
    fn problem(&self) -> Option<&'static str> {
        if self.len == 0 {
            return Some("no bytes");
        }
        if self
            .memory
            .as_ref()
            .is_some_and(|m| self.len > m.len() as u64)
        {
            return Some("longer than its memory");
        }
        if !self.access.is_valid_for_mr() {
            return Some("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE");
        }
        if self.id.0 >= super::REGISTERED_BASE {
            return Some("ids from 2^31 up are the node's registrations (Node::register)");
        }
        if self.window && !self.advertise {
            return Some("a window exposes an advertised region: advertise it");
        }
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if self.window && !self.access.intersects(remote) {
            return Some(
                "a window grants remote rights: give REMOTE_READ, REMOTE_WRITE or REMOTE_ATOMIC",
            );
        }
        None
    }
}

impl SessionOptions {
    /// Check the regions: each registrable, no id twice.
    pub(super) fn check_regions(&self) -> Result<(), OptionsError> {
        let mut ids = BTreeSet::new();
        for r in &self.regions {
            if let Some(reason) = r.problem() {
                return Err(OptionsError::BadRegion { id: r.id, reason });
            }
            if !ids.insert(r.id) {
                return Err(OptionsError::BadRegion {
                    id: r.id,
                    reason: "two regions of this id",
                });
            }
        }
        Ok(())
    }
}

impl Node {
    /// `len` zeroed bytes of host memory from the node's provider, for the
    /// application to own and give to sessions as a region
    /// ([`RegionOptions::with_memory`]): memory every provider registers
    /// (on verbs, page-aligned and mapped until the last handle and
    /// registration are gone).
    ///
    /// # Errors
    /// The provider's [`MemoryError`] if it cannot allocate it.
    pub fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError> {
        self.provider.alloc_memory(len)
    }

    /// A new session's memory: its send and receive slots and each region
    /// relink allocates; the application's regions are its own handles.
    pub(super) fn session_memory(
        &self,
        opts: &SessionOptions,
        spec: &SessionSpec,
    ) -> Result<SessionMemory, MemoryError> {
        let send = self.alloc_memory(spec.send_slots as usize * spec.slot_size as usize)?;
        let recv = if spec.shared_receive {
            // Messages land in the shared receive queue's slots.
            Memory::new(std::sync::Arc::new(relink_fabric::HeapMemory::new(0, 0)))
        } else {
            self.alloc_memory(spec.recv_slots as usize * spec.slot_size as usize)?
        };
        let mut regions = BTreeMap::new();
        for r in &opts.regions {
            let memory = match &r.memory {
                Some(m) => m.clone(),
                None => self.alloc_memory(r.len as usize)?,
            };
            regions.insert(r.id, memory);
        }
        Ok(SessionMemory {
            send,
            recv,
            recv_alt: None,
            regions,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use relink_fabric::HeapMemory;

    use super::*;

    fn opts(regions: Vec<RegionOptions>) -> SessionOptions {
        SessionOptions {
            regions,
            ..SessionOptions::default()
        }
    }

    #[test]
    fn regions_that_cannot_be_registered_are_refused_by_name() {
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let memory = Memory::new(Arc::new(HeapMemory::new(0x1000, 64)));
        let ok = RegionOptions::with_memory(RegionId(1), memory.clone(), rw).advertise(true);
        assert_eq!((ok.len, ok.advertise), (64, true));
        assert!(
            opts(vec![ok.clone(), RegionOptions::new(RegionId(2), 8, rw)])
                .check_regions()
                .is_ok()
        );
        let bad = |r: RegionOptions| match opts(vec![r]).check_regions() {
            Err(OptionsError::BadRegion { id, reason }) => (id, reason),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bad(RegionOptions::new(RegionId(3), 0, rw)),
            (RegionId(3), "no bytes")
        );
        let mut long = ok.clone();
        long.len = 65;
        assert_eq!(bad(long), (RegionId(1), "longer than its memory"));
        assert_eq!(
            bad(RegionOptions::new(RegionId(4), 8, Access::REMOTE_WRITE)).1,
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE"
        );
        let twice = opts(vec![ok.clone(), RegionOptions::new(RegionId(1), 8, rw)]);
        assert!(matches!(
            twice.check_regions(),
            Err(OptionsError::BadRegion {
                id: RegionId(1),
                reason: "two regions of this id"
            })
        ));
    }
}
