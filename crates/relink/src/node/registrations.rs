//! Node-wide registrations: host memory the application registers once
//! with the node, at any time, and names in every session's operations.
//!
//! A registration is a region every session of the node has — the ones
//! made before it and the ones made after — under one id the node hands
//! out ([`REGISTERED_BASE`] and up; a session's own regions take the ids
//! below). Each session registers it on every device it uses, as its own
//! regions: at once on the transports already built (the current one and
//! a standby), and from its spec on every transport built after, across
//! every reset, replacement and failover. A registration with remote
//! rights is advertised to every session's peer for the current epoch (at
//! once, or in the handshake of a connection being made), so the peer
//! reaches it through a [`BufferToken`](crate::BufferToken) naming the id
//! once the application told it the id — a message sent after
//! [`Node::register`] travels behind the advertisement.
//!
//! [`Node::deregister`] takes it out of every session, refused while an
//! operation not yet completed names it as its local range.

use relink_core::resources::RegionSpec;
use relink_core::session::LocalKeys;
use relink_core::RegionId;
use relink_fabric::{Access, CreateError, Memory};

use super::destroy::log_destroy;
use super::entry::SessionEntry;
use super::options::MIN_ADVERT_MESSAGE;
use super::{Node, SessionHandle};

/// The first id [`Node::register`] hands out; a session's own regions
/// ([`RegionOptions`](crate::RegionOptions)) take ids below it.
pub const REGISTERED_BASE: u32 = 1 << 31;

/// A node-wide registration: its memory and how each session registers it.
#[derive(Debug, Clone)]
pub(super) struct Registration {
    pub memory: Memory,
    pub spec: RegionSpec,
}

/// Why [`Node::register`] or [`Node::deregister`] did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The memory has no bytes.
    #[error("the memory is empty")]
    Empty,
    /// Rights no device grants: `REMOTE_WRITE` and `REMOTE_ATOMIC` need
    /// `LOCAL_WRITE`, as `ibv_reg_mr` requires.
    #[error("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE")]
    BadAccess,
    /// The device of a session's live transport refused to register the
    /// memory (on verbs: memory the provider did not allocate,
    /// [`Node::alloc_memory`]); nothing stays registered.
    #[error("session {} could not register the memory: {error}", .session.0)]
    Device {
        /// The session whose device refused.
        session: SessionHandle,
        /// What the provider said.
        error: CreateError,
    },
    /// A buffer posted to a shared receive queue's pool names the
    /// registration ([`Node::post_shared_receive`]): deregister after a
    /// message took it, or after [`Node::take_shared_receives`].
    #[error("registration {} has a buffer posted to shared receive queue {}", .id.0, .shared.0)]
    InSharedReceive {
        /// The registration.
        id: RegionId,
        /// The shared receive queue.
        shared: super::SharedReceiveHandle,
    },
    /// The node has no registration of this id.
    #[error("no registration {}", .0.0)]
    Unknown(RegionId),
    /// An operation of the session not yet completed names the
    /// registration as its local range, or a receive buffer the
    /// application posted in it has not ended ([`Node::post_receive`]):
    /// deregister after the completion, or once the receive ended.
    #[error(
        "registration {} is in use by session {}: an operation not yet completed names it, \
         or a receive buffer posted in it has not ended",
        .id.0,
        .session.0
    )]
    InUse {
        /// The registration.
        id: RegionId,
        /// A session with such an operation.
        session: SessionHandle,
    },
}

impl Node {
    /// Register `memory` with the node, for every session of the node,
    /// with the rights `access` (`LOCAL_WRITE` for a READ's or an atomic's
    /// local range; remote rights to let peers reach it). Returns its id,
    /// stable for the node's life: a [`LocalRange`](crate::LocalRange) of
    /// any session names it, and a peer's
    /// [`BufferToken`](crate::BufferToken) once the application sent it the
    /// id. Every session registers it on its devices, now and after every
    /// recovery, and advertises it to its peer if it has remote rights.
    ///
    /// Take the memory from [`Node::alloc_memory`]: the verbs provider
    /// registers only memory it allocated.
    ///
    /// # Errors
    /// [`RegisterError::Empty`], [`RegisterError::BadAccess`], or
    /// [`RegisterError::Device`] when a live session's device refuses it
    /// (then no session has it).
    pub fn register(&mut self, memory: Memory, access: Access) -> Result<RegionId, RegisterError> {
        if memory.is_empty() {
            return Err(RegisterError::Empty);
        }
        if !access.is_valid_for_mr() {
            return Err(RegisterError::BadAccess);
        }
        let id = RegionId(REGISTERED_BASE + self.next_registration);
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        let spec = RegionSpec {
            id,
            len: memory.len() as u64,
            access,
            advertise: access.intersects(remote),
            window: false,
        };
        let r = Registration { memory, spec };
        // Register on every built transport first: a refusal undoes it all.
        let p = &*self.provider;
        let mut done: Vec<u64> = Vec::new();
        for (&handle, entry) in &mut self.sessions {
            if let Err(error) = entry.register_on_transports(p, &r) {
                for h in done {
                    if let Some(e) = self.sessions.get_mut(&h) {
                        e.deregister_from_transports(p, id);
                    }
                }
                if let Some(e) = self.sessions.get_mut(&handle) {
                    e.deregister_from_transports(p, id);
                }
                return Err(RegisterError::Device {
                    session: SessionHandle(handle),
                    error,
                });
            }
            done.push(handle);
        }
        self.next_registration += 1;
        let handles: Vec<u64> = self.sessions.keys().copied().collect();
        for handle in handles {
            if let Some(entry) = self.sessions.get_mut(&handle) {
                entry.join(&r);
            }
            // The advertisement, if one is due now.
            self.run_actions(handle);
        }
        self.registrations.insert(id, r);
        Ok(id)
    }

    /// Take registration `id` out of every session and deregister it from
    /// their devices — also from the transports still draining off a
    /// session (a closed one's, waiting for its goodbye; one given up,
    /// waiting to be destroyed), which drop what they still had to post
    /// from it. When this returns no device reaches the memory through
    /// the node any more, and a peer that still names it is refused by
    /// its device (its operation completes
    /// `Failed(Remote(REM_ACCESS_ERR))`).
    ///
    /// # Errors
    /// [`RegisterError::Unknown`]; [`RegisterError::InUse`] while an
    /// operation not yet completed names it as its local range (nothing
    /// changes).
    pub fn deregister(&mut self, id: RegionId) -> Result<(), RegisterError> {
        if !self.registrations.contains_key(&id) {
            return Err(RegisterError::Unknown(id));
        }
        if let Some((&handle, _)) = self
            .sessions
            .iter()
            .find(|(_, e)| e.core.uses_region(id) || e.posted.uses_region(id))
        {
            return Err(RegisterError::InUse {
                id,
                session: SessionHandle(handle),
            });
        }
        if let Some((&h, _)) = self
            .shared_posted
            .iter()
            .find(|(_, pool)| pool.iter().any(|(l, _)| l.region == id))
        {
            return Err(RegisterError::InSharedReceive {
                id,
                shared: super::SharedReceiveHandle(h),
            });
        }
        let p = &*self.provider;
        for entry in self.sessions.values_mut() {
            // Checked above: no operation uses it, so this cannot refuse.
            let _ = entry.core.remove_region(id);
            entry.spec.regions.retain(|r| r.id != id);
            entry.memory.regions.remove(&id);
            entry.deregister_from_transports(p, id);
        }
        self.transports.deregister(p, id);
        self.registrations.remove(&id);
        Ok(())
    }

    /// Give a new session every registration (before it builds anything).
    pub(super) fn join_registrations(&self, entry: &mut SessionEntry) {
        for r in self.registrations.values() {
            entry.join(r);
        }
    }
}

impl SessionEntry {
    /// Register `r` on the session's built transports (current and
    /// standby). A transport whose device is gone is skipped: it is being
    /// replaced, and the new one registers `r` from the spec.
    fn register_on_transports(
        &mut self,
        p: &dyn relink_fabric::Provider,
        r: &Registration,
    ) -> Result<(), CreateError> {
        let current = self.transport.as_mut();
        let standby = self.standby.as_deref_mut();
        for t in current.into_iter().chain(standby) {
            let Some(pd) = t.pd else { continue };
            match p.reg_mr(
                pd,
                &r.memory,
                r.memory.addr(),
                r.spec.len,
                r.spec.mr_access(),
            ) {
                Ok(mr) => {
                    t.region_mrs.insert(r.spec.id, mr);
                }
                Err(CreateError::DeviceLost) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Deregister region `id` from the built transports.
    fn deregister_from_transports(&mut self, p: &dyn relink_fabric::Provider, id: RegionId) {
        let current = self.transport.as_mut();
        let standby = self.standby.as_deref_mut();
        for t in current.into_iter().chain(standby) {
            if let Some(mr) = t.region_mrs.remove(&id) {
                log_destroy("MR", p.dereg_mr(mr.id));
            }
        }
    }

    /// Make `r` one of the session's regions: in its spec (every
    /// transport built from now on registers it), its memory, and its core
    /// (with the keys of the current transport, which advertises it if it
    /// advertised already, and of the standby, which advertises them when
    /// it is promoted).
    fn join(&mut self, r: &Registration) {
        let mut spec = r.spec;
        // A session whose slots cannot hold an advertisement (max_message
        // below 34 bytes: the peer's are as small) does not advertise it:
        // its peer cannot reach it, and no message of it is read there.
        spec.advertise &= self.opts.max_message >= MIN_ADVERT_MESSAGE;
        if self.core.add_region(spec).is_err() {
            return;
        }
        self.spec.regions.push(spec);
        self.memory.regions.insert(r.spec.id, r.memory.clone());
        let current = self.transport.as_ref();
        let standby = self.standby.as_deref();
        for t in current.into_iter().chain(standby) {
            if let Some(mr) = t.region_mrs.get(&r.spec.id) {
                self.core.add_local_key(
                    t.epoch,
                    LocalKeys {
                        region: r.spec.id,
                        addr: mr.addr,
                        rkey: mr.rkey,
                    },
                );
            }
        }
    }
}
