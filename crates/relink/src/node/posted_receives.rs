//! Receives into buffers the application posts ([`Node::post_receive`]):
//! ranges of a session's registered memory that the session's messages
//! fill, one message per buffer, in the order both were made, each ending
//! in one [`Received`] ([`Node::poll_received`], [`Output::Received`]).
//!
//! A message is copied once, from the receive slot it arrived in straight
//! into the next posted buffer, when the core delivers it
//! (`Session::handle_received_into`). One that arrives while no buffer is
//! posted waits in the session's delivery queue, as without posted
//! receives, and fills the next buffer posted (a second copy): order holds
//! across both, and [`Node::poll_delivery`] takes what no buffer took.
//! When the session ends, the buffers still posted end
//! [`ReceiveOutcome::Flushed`], as verbs flushes a dead QP's receives.
//! A message the node reads itself (`rendezvous.rs`) takes the next
//! buffer in the same order, with no copy.
//!
//! A shared receive queue has a pool of posted buffers too
//! ([`Node::post_shared_receive`]), ranges of the node's registrations
//! (which every session has): a session on it takes its own buffers first,
//! then the pool's, and the receive ends on that session, so the
//! application learns which session a message came on. The pool's
//! buffers outlive the sessions; [`Node::take_shared_receives`] hands back
//! the ones no message took.
//!
//! [`Output::Received`]: super::Output::Received

use std::collections::{BTreeMap, VecDeque};

use relink_core::journal::LocalRange;
use relink_core::session::Delivered;
use relink_core::wire::Written;
use relink_core::{Arrival, RegionId, Seq};
use relink_fabric::Memory;

use super::entry::SessionEntry;
use super::{Node, SessionHandle, SharedReceiveError, SharedReceiveHandle, SubmitError};

/// How a posted receive ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceiveOutcome {
    /// A message of the peer filled the buffer: delivered once, in order,
    /// as [`Node::poll_delivery`] delivers.
    Message {
        /// Its sequence number (from 1, in order, per session).
        seq: Seq,
        /// The bytes written at the start of the buffer.
        len: u32,
        /// The message was longer than the buffer: its first `len` bytes
        /// are there, the rest is gone.
        truncated: bool,
    },
    /// The peer's WRITE with immediate data landed
    /// ([`OpKind::WriteImm`](crate::OpKind::WriteImm)): the notice took the
    /// buffer, in order with the messages, and wrote nothing in it (as a
    /// verbs WRITE with immediate data consumes a receive).
    Written {
        /// Its sequence number (shared with the messages).
        seq: Seq,
        /// The immediate data, where the WRITE landed and how long it was.
        written: Written,
    },
    /// The session ended with the buffer still posted: nothing was
    /// written; the buffer is the application's again.
    Flushed,
}

/// A receive the application posted, ended ([`Node::poll_received`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Received {
    /// The context the buffer was posted with.
    pub context: u64,
    /// The buffer it was.
    pub local: LocalRange,
    /// What it holds.
    pub outcome: ReceiveOutcome,
}

/// The buffers posted to a shared receive queue's pool, in order, with
/// their contexts.
pub(super) type SharedBuffers = VecDeque<(LocalRange, u64)>;

/// A session's posted receives: buffers waiting for messages, and the
/// receives that ended, waiting for the application.
#[derive(Debug, Default)]
pub(super) struct PostedReceives {
    buffers: VecDeque<(LocalRange, u64)>,
    ended: VecDeque<Received>,
}

impl PostedReceives {
    /// Put message `seq` into the next posted buffer, the session's own or
    /// else its shared receive queue's `pool` (its region's memory in
    /// `regions`); `false` if none is posted.
    pub fn place(
        &mut self,
        seq: Seq,
        arrival: Arrival<'_>,
        regions: &BTreeMap<RegionId, Memory>,
        pool: Option<&mut SharedBuffers>,
    ) -> bool {
        let Some((local, context)) = self
            .buffers
            .pop_front()
            .or_else(|| pool.and_then(VecDeque::pop_front))
        else {
            return false;
        };
        let payload = match arrival {
            Arrival::Message(payload) => payload,
            Arrival::Written(written) => {
                self.ended.push_back(Received {
                    context,
                    local,
                    outcome: ReceiveOutcome::Written { seq, written },
                });
                return true;
            }
        };
        let fits = payload.len().min(local.len as usize);
        let written = regions
            .get(&local.region)
            .is_some_and(|m| m.write(local.offset as usize, &payload[..fits]).is_ok());
        // Posting checked the range against the region, and the region
        // stays while a receive names it (`uses_region`).
        debug_assert!(written, "a posted buffer outside its region's memory");
        self.ended.push_back(Received {
            context,
            local,
            outcome: ReceiveOutcome::Message {
                seq,
                len: fits as u32,
                truncated: fits < payload.len(),
            },
        });
        true
    }

    /// Whether a posted buffer names region `id`.
    pub fn uses_region(&self, id: RegionId) -> bool {
        self.buffers.iter().any(|(l, _)| l.region == id)
    }

    /// Whether an ended receive waits for the application.
    pub fn has_output(&self) -> bool {
        !self.ended.is_empty()
    }

    /// Whether nothing is posted and nothing waits.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty() && self.ended.is_empty()
    }

    /// Buffers posted and not filled yet.
    pub fn posted(&self) -> usize {
        self.buffers.len()
    }

    /// The next ended receive.
    pub fn poll(&mut self) -> Option<Received> {
        self.ended.pop_front()
    }

    /// Take the next posted buffer of the session (for a message it reads
    /// itself, `rendezvous.rs`).
    pub fn pop_front(&mut self) -> Option<(LocalRange, u64)> {
        self.buffers.pop_front()
    }

    /// Put a buffer back first in line (its message's READ was given up).
    pub fn push_front(&mut self, local: LocalRange, context: u64) {
        self.buffers.push_front((local, context));
    }

    /// A receive ended (a message read into its buffer).
    pub fn end(&mut self, r: Received) {
        self.ended.push_back(r);
    }

    /// The session ended: every buffer still posted ends `Flushed`.
    pub fn flush(&mut self) {
        for (local, context) in self.buffers.drain(..) {
            self.ended.push_back(Received {
                context,
                local,
                outcome: ReceiveOutcome::Flushed,
            });
        }
    }
}

impl SessionEntry {
    /// Put the deliveries waiting in the core (they came while no buffer
    /// was posted) into the session's posted buffers, then `pool`'s, while
    /// there are some. Returns whether a receive ended.
    pub(super) fn place_waiting(&mut self, mut pool: Option<&mut SharedBuffers>) -> bool {
        let mut placed = false;
        loop {
            let room = self.posted.posted() > 0 || pool.as_ref().is_some_and(|p| !p.is_empty());
            if !room {
                break;
            }
            let Some((seq, delivered)) = self.core.poll_delivered() else {
                break;
            };
            let arrival = match &delivered {
                Delivered::Message(payload) => {
                    self.core.count_received_copy(payload.len());
                    Arrival::Message(payload)
                }
                Delivered::Written(w) => Arrival::Written(*w),
                // `poll_delivered` stops before a message to read: the
                // driver reads it (`rendezvous.rs`).
                Delivered::Fetch { .. } => break,
            };
            placed |= self
                .posted
                .place(seq, arrival, &self.memory.regions, pool.as_deref_mut());
        }
        placed
    }
}

impl Node {
    /// Post `local`, a range of the session's registered memory (one of
    /// its regions, or a registration of the node), for the session's next
    /// message: the message is copied into it (once, from the receive slot
    /// it arrived in) and the receive ends in a [`Received`] with `context`,
    /// the message's sequence number and length
    /// ([`Node::poll_received`]). Buffers are filled in the order they
    /// were posted, messages in order; a message longer than its buffer is
    /// truncated (and says so). Leave the range alone until its receive
    /// ended; it is in use until then ([`Node::deregister`] waits).
    /// Messages that arrived with no buffer posted fill the next ones
    /// posted; [`Node::poll_delivery`] takes them instead when the
    /// application prefers. With
    /// [`SessionOptions::rendezvous`](crate::SessionOptions::rendezvous)
    /// the peer's long messages from its registered memory are read
    /// straight into the buffers (no copy), and wait for one.
    ///
    /// # Errors
    /// [`SubmitError::NoSession`], [`SubmitError::Ended`] as for a submit;
    /// [`SubmitError::BadLocal`] for a range outside the session's
    /// regions; [`SubmitError::WouldBlock`] with
    /// [`SessionOptions::max_outstanding`](crate::SessionOptions::max_outstanding)
    /// buffers posted and not filled.
    pub fn post_receive(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        context: u64,
    ) -> Result<(), SubmitError> {
        let entry = self
            .sessions
            .get_mut(&s.0)
            .ok_or(SubmitError::NoSession(s))?;
        let state = entry.core.state();
        if state.is_terminal() {
            return Err(SubmitError::Ended(state));
        }
        if !entry.core.local_in_bounds(&local) {
            return Err(SubmitError::BadLocal(local));
        }
        let max = entry.opts.max_outstanding;
        if entry.posted.posted() >= max as usize {
            return Err(SubmitError::WouldBlock {
                outstanding: entry.posted.posted() as u64,
                max,
            });
        }
        entry.posted.buffers.push_back((local, context));
        // A message that came while no buffer was posted takes this one,
        // or one left to read is read into it.
        if entry.fetch_pending() {
            // Places what waits ahead of the read too.
            let now = self.provider.now();
            entry.pump_fetch(now);
        } else {
            entry.place_waiting(None);
        }
        if !entry.backlog.is_empty() {
            self.index.work_queued(s.0);
        }
        if entry.posted.has_output() {
            self.index.has_output(s.0);
        }
        Ok(())
    }

    /// Post `local`, a range of a registration of the node
    /// ([`Node::register`]), to shared receive queue `h`'s pool: the next
    /// message of any session on the queue that finds none of its own
    /// buffers posted ([`Node::post_receive`]) is copied into it, and the
    /// receive ends on that session ([`Node::poll_received`]). A message
    /// that waits for a buffer on such a session takes this one at once.
    /// The buffer is in use until a message took it or
    /// [`Node::take_shared_receives`] handed it back.
    ///
    /// # Errors
    /// [`SharedReceiveError::Unknown`] for a handle the node does not know;
    /// [`SharedReceiveError::NotRegistered`] for a range that is not inside
    /// one registration of the node.
    pub fn post_shared_receive(
        &mut self,
        h: SharedReceiveHandle,
        local: LocalRange,
        context: u64,
    ) -> Result<(), SharedReceiveError> {
        if !self.shared.contains_key(&h.0) {
            return Err(SharedReceiveError::Unknown(h));
        }
        let inside = self.registrations.get(&local.region).is_some_and(|r| {
            local
                .offset
                .checked_add(u64::from(local.len))
                .is_some_and(|end| end <= r.spec.len)
        });
        if !inside {
            return Err(SharedReceiveError::NotRegistered(local));
        }
        let pool = self.shared_posted.entry(h.0).or_default();
        pool.push_back((local, context));
        // Sessions on the queue with messages waiting for a buffer.
        for (&handle, entry) in self.sessions.iter_mut() {
            if pool.is_empty() {
                break;
            }
            if entry.opts.shared_receive == Some(h) && entry.place_waiting(Some(pool)) {
                self.index.has_output(handle);
            }
        }
        Ok(())
    }

    /// Take back every buffer posted to shared receive queue `h`'s pool
    /// that no message took, in the order they were posted, with their
    /// contexts (before [`Node::remove_shared_receive`], say, or to reuse
    /// the memory).
    pub fn take_shared_receives(&mut self, h: SharedReceiveHandle) -> Vec<(LocalRange, u64)> {
        self.shared_posted
            .remove(&h.0)
            .map(Vec::from)
            .unwrap_or_default()
    }

    /// The session's next notice of a WRITE with immediate data the peer
    /// made ([`OpKind::WriteImm`](crate::OpKind::WriteImm)), for an
    /// application without posted receives: in order with the messages
    /// (the sequence numbers are shared), so while one is next
    /// [`Node::poll_delivery`] says `None` until this takes it.
    pub fn poll_written(&mut self, s: SessionHandle) -> Option<(Seq, Written)> {
        let entry = self.sessions.get_mut(&s.0)?;
        let w = entry.core.poll_written()?;
        let more = entry.has_output();
        self.index.output_taken(s.0, more);
        Some(w)
    }

    /// The session's next ended receive ([`Node::post_receive`]): a buffer
    /// a message filled, or one the session's end flushed.
    pub fn poll_received(&mut self, s: SessionHandle) -> Option<Received> {
        let entry = self.sessions.get_mut(&s.0)?;
        let r = entry.posted.poll()?;
        let more = entry.has_output();
        self.index.output_taken(s.0, more);
        Some(r)
    }
}
