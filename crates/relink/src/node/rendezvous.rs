//! Messages this node reads itself ([`SessionOptions::rendezvous`]): the
//! peer sends where a message from its registered memory is
//! ([`MsgKind::Fetch`]), and the node RDMA-READs it into the next buffer
//! the application posted ([`Node::post_receive`]). No byte of it is
//! copied on either side.
//!
//! The core takes the message's number when the descriptor arrives, so the
//! messages behind it queue behind it, but counts it delivered (and
//! acknowledges it) only once its data landed
//! ([`Session::fetch_landed`]): until then the sender keeps it for a
//! replay. Messages ahead of it fill their buffers first; then the READ is
//! posted on the transport it came on, into the next posted buffer (the
//! first `len` bytes of a longer message if the buffer is shorter: the
//! receive says truncated). One READ at a time per session, in order.
//!
//! A transport lost with the READ in flight gives the numbers back in the
//! core (`Inbox::rewind`); the buffer goes back to the front of the posted
//! ones ([`SessionEntry::pump_fetch`] finds the core no longer reading
//! it), and the replay reads the message again on the new transport. The
//! old transport is destroyed before anything of the new one runs, so its
//! READ never lands in the buffer's next use.
//!
//! [`SessionOptions::rendezvous`]: super::SessionOptions::rendezvous
//! [`MsgKind::Fetch`]: relink_core::wire::MsgKind::Fetch
//! [`Session::fetch_landed`]: relink_core::Session::fetch_landed

use relink_core::journal::LocalRange;
use relink_core::keys::KeyError;
use relink_core::{Epoch, Seq};
use relink_fabric::{SendOp, Sge, SgeList, Timestamp};

use super::entry::SessionEntry;
use super::posted_receives::{ReceiveOutcome, Received};
use super::wr::{Pending, TAG_LOCAL};
#[cfg(doc)]
use super::Node;

/// The bit that marks the `wr_id` of a message's READ among the
/// `TAG_LOCAL` requests (below it: the low 32 bits of its sequence
/// number).
pub(super) const FETCH_MARK: u64 = 1 << 61;

/// The `wr_id` of the READ of message `seq`.
fn fetch_wr_id(seq: Seq) -> u64 {
    TAG_LOCAL | FETCH_MARK | (seq.0 & 0xffff_ffff)
}

/// Whether `wr_id` is a message's READ.
pub(super) fn is_fetch(wr_id: u64) -> bool {
    wr_id & (super::wr::TAG_MASK | FETCH_MARK) == TAG_LOCAL | FETCH_MARK
}

/// The READ of a message under way: which message, on which transport,
/// into which posted buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fetching {
    seq: Seq,
    epoch: Epoch,
    /// The posted buffer, whole, and its context.
    local: LocalRange,
    context: u64,
    /// Bytes read into it, and whether the message was longer.
    len: u32,
    truncated: bool,
}

impl SessionEntry {
    /// Whether a read is under way or a message waits to be read: then
    /// [`pump_fetch`](Self::pump_fetch) has something to move on.
    pub(super) fn fetch_pending(&self) -> bool {
        self.fetching.is_some() || self.core.next_fetch().is_some()
    }

    /// Move the session's reads on: give a buffer back whose READ the
    /// core no longer waits for (its transport is gone, or the session
    /// ended), fill posted buffers with the deliveries ahead of the next
    /// message to read, and post that message's READ into the next posted
    /// buffer once there is one (and the peer's keys of the epoch are in).
    /// Whether it queued a READ or ended a receive.
    pub(super) fn pump_fetch(&mut self, now: Timestamp) -> bool {
        if let Some(f) = self.fetching {
            let current = self
                .core
                .next_fetch()
                .is_some_and(|(seq, _, epoch)| seq == f.seq && epoch == f.epoch);
            if current {
                return false;
            }
            // Given back: the replay reads the message again, into the
            // same buffer, first in line again.
            self.fetching = None;
            self.posted.push_front(f.local, f.context);
        }
        let mut progress = self.place_waiting(None);
        let Some((seq, source, epoch)) = self.core.next_fetch() else {
            return progress;
        };
        let Some(t) = self
            .transport
            .as_ref()
            .filter(|t| t.epoch == epoch && t.connected)
        else {
            // Read on the transport it came on, or never: a later one
            // brings it again.
            return progress;
        };
        let remote = match self.core.fetch_address(&source) {
            Ok(r) => Some(r),
            // The peer's keys of the epoch are not all in yet: they come
            // in order on this transport, and this runs again then.
            Err(KeyError::NotReady(_)) => return progress,
            Err(e) => {
                tracing::warn!(session = %self.core.id(), %seq, "the peer's message to read names memory it does not expose ({e}): delivered empty");
                None
            }
        };
        let Some((local, context)) = self.posted.pop_front() else {
            return progress;
        };
        let len = source.len.min(local.len);
        let f = Fetching {
            seq,
            epoch,
            local,
            context,
            len: if remote.is_some() { len } else { 0 },
            truncated: remote.is_none() || len < source.len,
        };
        let mr = t.region_mrs.get(&local.region).copied();
        match (remote, mr) {
            (Some(remote), Some(mr)) if f.len > 0 => {
                let sge = Sge {
                    addr: mr.addr + local.offset,
                    length: f.len,
                    lkey: mr.lkey,
                };
                self.backlog.push_back(Pending::OneSided {
                    wr_id: fetch_wr_id(seq),
                    op: SendOp::Read { remote },
                    sgl: SgeList::one(sge),
                });
                self.fetching = Some(f);
            }
            (_, mr) => {
                // Nothing to read: an empty buffer, a message the peer
                // cannot be read from, or (a bug: posting checked the
                // range) a buffer without an MR.
                debug_assert!(mr.is_some(), "a posted buffer with no MR");
                self.fetching = Some(f);
                self.fetch_done(epoch, seq, now);
            }
        }
        progress = true;
        progress
    }

    /// The READ of message `seq` on the transport of `epoch` completed
    /// successfully: its receive ends, and the core counts it delivered.
    /// A READ of a transport given up since is ignored (the replay reads
    /// the message again).
    pub(super) fn fetch_done(&mut self, epoch: Epoch, seq: Seq, now: Timestamp) {
        let Some(f) = self.fetching.filter(|f| f.epoch == epoch && f.seq == seq) else {
            return;
        };
        if !self.core.fetch_landed(epoch, seq, now) {
            return;
        }
        self.fetching = None;
        self.posted.end(Received {
            context: f.context,
            local: f.local,
            outcome: ReceiveOutcome::Message {
                seq,
                len: f.len,
                truncated: f.truncated,
            },
        });
        // The deliveries that waited behind it, and the next to read.
        self.pump_fetch(now);
    }

    /// The message whose READ completed with `wr_id` on the transport of
    /// `epoch` (matched against the READ under way: the `wr_id` keeps 32
    /// bits of its number).
    pub(super) fn fetch_of(&self, epoch: Epoch, wr_id: u64) -> Option<Seq> {
        self.fetching
            .filter(|f| f.epoch == epoch && fetch_wr_id(f.seq) == wr_id)
            .map(|f| f.seq)
    }
}
