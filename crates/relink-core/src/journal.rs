//! The journal: the sender side of a session. It holds every operation
//! from [`Journal::submit`] to its one [`Completion`], with what is needed
//! to replay it, across any number of transport losses: every [`OpId`] it
//! hands out completes **exactly once, ever**, and messages reach the peer
//! exactly once, in order.
//!
//! Completions are *returned* by the journal's methods (never performed);
//! the journal forgets the operation at that moment (a message is dropped as
//! soon as the peer confirms it). What each [`Outcome`] means per kind is in
//! [`crate::op`]; the receiver's half is [`crate::inbox`]. `docs/DESIGN.md`
//! ("The replay contract") states the same contract for the whole stack.
//!
//! # How the journal reasons
//!
//! - Messages carry per-direction sequence numbers (the first is `Seq(1)`);
//!   the peer's [`Inbox`] delivers each once, in order. A message completes
//!   when the peer reports a delivered sequence number at or above its own
//!   ([`Journal::on_peer_delivered`], or the resume handshake).
//! - RC ordering: when the peer delivered message `M`, every operation posted
//!   before `M` was executed. Operations are posted in submission order (see
//!   [`Journal::mark_posted`]), so that is every operation submitted before
//!   `M` that is still in the journal. After the transport that carried such
//!   an operation is lost, a write completes `Success` without replay, an
//!   atomic completes `Indeterminate { executed: Some(true) }` (its result
//!   is gone), a read is still replayed (its data may not have landed).
//! - While the operation is still posted on the *live* transport the proof
//!   is only recorded: it completes from its own work completion. Completing
//!   it early would hand its buffer back while RC may still retransmit from
//!   it (the responder re-executes a duplicate write), or drop an atomic's
//!   result that is about to arrive.
//! - After a loss every posted, unfinished operation is unknown. On resume
//!   writes, reads and unconfirmed messages are replayed in the original
//!   order; unknown atomics complete `Indeterminate { executed: None }` unless
//!   the application opted in to replaying them.
//!
//! # Driving it
//!
//! 1. [`Journal::submit`] each operation.
//! 2. While the transport is up: post [`Journal::next_unposted`], then call
//!    [`Journal::mark_posted`] with its id; repeat (this is also how the
//!    replay after a resume is sent). An operation that cannot be posted at
//!    all (its remote token does not translate): [`Journal::fail_unpostable`].
//! 3. For each send completion: [`Journal::on_success`] or, when the
//!    operation itself was refused ([`is_refusal`]),
//!    [`Journal::on_remote_error`]. Any other error is a transport loss.
//! 4. Whenever the peer reports its delivered sequence number:
//!    [`Journal::on_peer_delivered`].
//! 5. On any loss: [`Journal::transport_down`]; after reconnecting:
//!    [`Journal::resume`] with the sequence number from the peer's handshake,
//!    then step 2.
//! 6. Give-up, admin disconnect, stranger peer: [`Journal::fail_all`];
//!    `fast_io_fail_tmo` during an outage: [`Journal::fail_queued`].
//!
//! The receiver runs one [`Inbox`] per session and direction and reports
//! [`Inbox::last_delivered`] back to the sender.
//!
//! ```
//! use relink_core::inbox::{Accept, Inbox};
//! use relink_core::journal::Journal;
//! use relink_core::op::{OpKind, Outcome};
//! use relink_core::Seq;
//!
//! let mut journal = Journal::new();
//! let mut inbox = Inbox::new();
//! let (op, seq) = journal.submit(OpKind::Message { payload: b"hello".to_vec() });
//! assert_eq!(seq, Some(Seq(1)));
//!
//! // Posted, then the device is reset before anything is acknowledged.
//! journal.mark_posted(op);
//! journal.transport_down();
//!
//! // The peer had not delivered it: it is replayed on the new transport.
//! assert!(journal.resume(inbox.last_delivered(), false).is_empty());
//! let (replay, _, seq) = journal.next_unposted().unwrap();
//! journal.mark_posted(replay);
//! assert_eq!(inbox.accept(seq.unwrap()), Accept::Deliver);
//! assert_eq!(journal.on_success(op), None); // an RC ack is not a delivery
//! let done = journal.on_peer_delivered(inbox.last_delivered());
//! assert_eq!(done[0].outcome, Outcome::Success { replayed: true });
//! assert!(journal.is_empty());
//! ```

use std::collections::VecDeque;

use relink_fabric::WcStatus;

use crate::buffers::SpareBuffers;
use crate::ids::{OpId, RegionId, Seq};
// Re-exported so that `journal::{OpKind, Outcome, Inbox, ...}` name them
// too: a journal user needs them at hand.
#[doc(no_inline)]
pub use crate::inbox::{Accept, Inbox};
#[doc(no_inline)]
pub use crate::op::{Completion, LocalRange, LocalSgl, MessageBody, OpError, OpKind, Outcome};

/// Counters of a [`Journal`], since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalStats {
    /// Posts of an operation that an earlier, lost transport had carried.
    pub replayed: u64,
    /// Completions with [`Outcome::Indeterminate`].
    pub indeterminate: u64,
    /// Completions returned, of any outcome.
    pub completed: u64,
}

/// Whether a failed work completion means the operation itself was refused
/// (report it with [`Journal::on_remote_error`]) rather than that the
/// transport was lost (every other status: [`Journal::transport_down`], and
/// the operation is replayed).
///
/// Refusals: local length and protection errors, memory-window bind errors,
/// remote invalid-request, access and operation errors. `GENERAL_ERR` is
/// treated as a loss: a dying device reports it too.
pub fn is_refusal(status: WcStatus) -> bool {
    matches!(
        status,
        WcStatus::LocLenErr
            | WcStatus::LocProtErr
            | WcStatus::MwBindErr
            | WcStatus::RemInvReqErr
            | WcStatus::RemAccessErr
            | WcStatus::RemOpErr
    )
}

/// Where an entry is with respect to the current transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not posted on the current transport. With `posts > 0` it was posted
    /// on a lost transport: unknown, to be replayed.
    Queued,
    /// Posted on the current transport; no work completion yet.
    Posted,
    /// A message whose RC ack arrived on the current transport; waits for
    /// the peer's delivery confirmation.
    Acked,
}

/// One operation the journal holds.
#[derive(Debug, Clone)]
struct Entry {
    /// The operation's id (ascending in submission order).
    id: OpId,
    /// The message's sequence number; `Seq(0)` for the other kinds.
    seq: Seq,
    /// What it does, with the payload of a message.
    kind: OpKind,
    /// On how many transports it was posted (saturating).
    posts: u16,
    /// Where it is with respect to the current transport.
    stage: Stage,
    /// The application's context, returned in the completion.
    context: u64,
    /// Already completed (by [`Journal::fail_queued`]) but kept so that its
    /// sequence number still reaches the peer: a message that may have been
    /// delivered cannot be un-sent, and the peer accepts no gap.
    orphan: bool,
    /// An orphan whose payload went with its completion (a message from
    /// registered memory, a WRITE with immediate data, one that failed
    /// alone): posted as a skip of its sequence number.
    void: bool,
}

impl Entry {
    /// Make it an orphan without a payload (it holds none the journal
    /// owns: the caller accounts for a message of bytes'), to be posted as
    /// a skip of its sequence number.
    fn make_void(&mut self) {
        self.orphan = true;
        self.void = true;
        self.kind = OpKind::Message {
            payload: Vec::new(),
        };
    }

    fn message_seq(&self) -> Option<Seq> {
        self.kind.is_message().then_some(self.seq)
    }

    fn replayed(&self) -> bool {
        self.posts >= 2
    }
}

/// The sender side of a session: every operation from submission to its one
/// completion, with what is needed to replay it. See the module docs.
#[derive(Debug, Clone)]
pub struct Journal {
    /// Unfinished operations (and orphans), in submission order, ids
    /// ascending. Entries posted on the current transport are a prefix of
    /// length `posted`.
    entries: VecDeque<Entry>,
    /// Live messages (and orphans) in sequence order: (seq, id).
    messages: VecDeque<(Seq, OpId)>,
    /// How many entries, from the front, are posted on the current
    /// transport (stage `Posted` or `Acked`); 0 while it is down.
    posted: usize,
    /// The id the next submitted operation gets (ids start at 1).
    next_op: u64,
    /// The sequence number the next submitted message gets (starts at
    /// `Seq(1)`; [`Journal::fail_queued`] may lower it to give numbers back).
    next_seq: Seq,
    /// The highest sequence number ever posted, on any transport: a peer
    /// report above it is clamped.
    highest_sent: Seq,
    /// The highest sequence number the peer confirmed delivering; never
    /// decreases.
    confirmed: Seq,
    /// Every entry with a smaller id was executed by the peer (RC ordering
    /// before a confirmed message).
    proven_below: OpId,
    /// Bytes of message payload held by `entries`.
    payload_bytes: usize,
    /// The sequence number of the first message the peer refused: no later
    /// message can be delivered in order.
    broken: Option<Seq>,
    /// Counters since creation.
    stats: JournalStats,
    /// Payload buffers of confirmed messages, for the next ones
    /// ([`Journal::message_buffer`]).
    spare: SpareBuffers,
}

impl Default for Journal {
    fn default() -> Self {
        Journal::new()
    }
}

impl Journal {
    /// An empty journal: the first operation is `OpId(1)`, the first message
    /// `Seq(1)`.
    pub fn new() -> Journal {
        Journal {
            entries: VecDeque::new(),
            messages: VecDeque::new(),
            posted: 0,
            next_op: 1,
            next_seq: Seq(1),
            highest_sent: Seq(0),
            confirmed: Seq(0),
            proven_below: OpId(0),
            payload_bytes: 0,
            broken: None,
            stats: JournalStats::default(),
            spare: SpareBuffers::default(),
        }
    }

    /// Records a new operation; messages get the next sequence number.
    pub fn submit(&mut self, kind: OpKind) -> (OpId, Option<Seq>) {
        self.submit_with(kind, 0)
    }

    /// [`Journal::submit`] with the application's `context`, returned in
    /// the operation's [`Completion`].
    pub fn submit_with(&mut self, kind: OpKind, context: u64) -> (OpId, Option<Seq>) {
        let id = OpId(self.next_op);
        self.next_op += 1;
        let seq = if kind.is_message() {
            let seq = self.next_seq;
            self.next_seq = seq.next();
            self.messages.push_back((seq, id));
            self.payload_bytes += kind.payload_len();
            Some(seq)
        } else {
            None
        };
        self.entries.push_back(Entry {
            id,
            seq: seq.unwrap_or_default(),
            kind,
            posts: 0,
            stage: Stage::Queued,
            context,
            orphan: false,
            void: false,
        });
        (id, seq)
    }

    /// Whether an operation not yet completed names region `id` as its
    /// local range.
    pub fn uses_region(&self, id: RegionId) -> bool {
        self.entries
            .iter()
            .any(|e| !e.orphan && e.kind.local_ranges().iter().any(|l| l.region == id))
    }

    /// Operations submitted so far.
    pub fn submitted(&self) -> u64 {
        self.next_op - 1
    }

    /// An empty buffer for a payload of `len` bytes of a message to
    /// submit: the allocation of a message the peer confirmed, if a spare
    /// one fits (never more than about twice `len`).
    pub fn message_buffer(&mut self, len: usize) -> Vec<u8> {
        self.spare.take(len)
    }

    /// The payload of message `op`; `None` if `op` is not a message in
    /// the journal.
    pub fn message_payload(&self, op: OpId) -> Option<&[u8]> {
        match self.message_body(op)? {
            MessageBody::Bytes(payload) => Some(payload),
            MessageBody::Gather(_) => None,
        }
    }

    /// The payload of message `op`, bytes or registered memory; `None` if
    /// `op` is not a message in the journal.
    pub fn message_body(&self, op: OpId) -> Option<MessageBody<'_>> {
        self.entries[self.find(op)?].kind.message_body()
    }

    /// The first operation not yet posted on the current transport, in
    /// submission order: a new one or a replay. Post it, then call
    /// [`Journal::mark_posted`].
    pub fn next_unposted(&self) -> Option<(OpId, &OpKind, Option<Seq>)> {
        let e = self.entries.get(self.posted)?;
        debug_assert_eq!(e.stage, Stage::Queued);
        Some((e.id, &e.kind, e.message_seq()))
    }

    /// The next operation not yet posted is a flush ([`OpKind::Flush`])
    /// and every operation before it completed (what stays ahead of it is
    /// orphans, which completed already): it leaves the journal and
    /// completes `Success`. `None`, changing nothing, otherwise: a flush
    /// with operations ahead of it waits for them, and holds back what was
    /// submitted after it.
    pub fn complete_flush(&mut self) -> Option<Completion> {
        let i = self.posted;
        let e = self.entries.get(i)?;
        if !matches!(e.kind, OpKind::Flush) || self.entries.range(..i).any(|e| !e.orphan) {
            return None;
        }
        let e = self.remove_at(i);
        Some(self.complete(&e, Outcome::Success { replayed: false }))
    }

    /// Records that `op` was posted on the current transport.
    ///
    /// # Panics
    ///
    /// If `op` is not the operation [`Journal::next_unposted`] returns.
    /// Posting in submission order is what makes replay and the RC-ordering
    /// proofs sound; a driver that breaks it has a bug.
    pub fn mark_posted(&mut self, op: OpId) {
        let e = match self.entries.get_mut(self.posted) {
            Some(e) if e.id == op => e,
            _ => panic!("mark_posted({op}): not the operation next_unposted returns"),
        };
        debug_assert!(
            !matches!(e.kind, OpKind::Flush),
            "{op}: a flush is never posted (Journal::complete_flush)"
        );
        if e.posts > 0 {
            self.stats.replayed += 1;
        }
        e.posts = e.posts.saturating_add(1);
        e.stage = Stage::Posted;
        if let Some(seq) = e.message_seq() {
            self.highest_sent = self.highest_sent.max(seq);
        }
        self.posted += 1;
    }

    /// A successful send completion for `op`.
    ///
    /// Writes, reads and atomics complete now. A message does not: it is
    /// recorded as acknowledged and completes when the peer confirms
    /// delivery. Returns `None` for an operation already completed (e.g. a
    /// message confirmed before its own completion was polled).
    pub fn on_success(&mut self, op: OpId) -> Option<Completion> {
        let i = self.find(op)?;
        let e = &mut self.entries[i];
        match (e.stage, e.kind.is_message()) {
            (Stage::Posted, true) => {
                e.stage = Stage::Acked;
                None
            }
            (Stage::Acked, _) | (Stage::Queued, true) => None,
            (Stage::Queued, false) if e.posts == 0 => {
                tracing::warn!(%op, "send completion for an operation never posted; ignored");
                None
            }
            // Posted here, or a late success of a post on a lost transport.
            (Stage::Posted | Stage::Queued, false) => {
                let e = self.remove_at(i);
                let outcome = Outcome::Success {
                    replayed: e.replayed(),
                };
                Some(self.complete(&e, outcome))
            }
        }
    }

    /// The operation itself was refused (`REM_ACCESS_ERR`,
    /// `REM_INV_REQ_ERR`, `LOC_PROT_ERR`, ...; see [`is_refusal`]): it
    /// completes `Failed(Remote(status))` and is never replayed.
    ///
    /// A refused *message* was not delivered, so no later message can be
    /// delivered in order: the journal records it in
    /// [`Journal::sequence_broken`] and the driver should end the session.
    pub fn on_remote_error(&mut self, op: OpId, status: WcStatus) -> Option<Completion> {
        debug_assert!(!status.is_ok(), "on_remote_error with a success");
        let i = self.find(op)?;
        let e = &self.entries[i];
        if e.stage == Stage::Queued && e.posts == 0 {
            tracing::warn!(%op, "error completion for an operation never posted; ignored");
            return None;
        }
        if matches!(e.kind, OpKind::WriteImm { .. }) && !e.orphan {
            // Its WRITE was refused, its notice never left: it fails, and
            // its number goes as a skip once the transport is rebuilt.
            let done = self.complete(&e.clone(), Outcome::Failed(OpError::Remote(status)));
            self.orphan_at(i);
            return Some(done);
        }
        let e = self.remove_at(i);
        if let Some(seq) = e.message_seq() {
            if let Ok(at) = self.messages.binary_search_by_key(&e.id, |m| m.1) {
                self.messages.remove(at);
            }
            tracing::warn!(%op, %seq, status = status.name(), "peer refused a message: sequence broken");
            self.broken.get_or_insert(seq);
        }
        if e.orphan {
            return None;
        }
        Some(self.complete(&e, Outcome::Failed(OpError::Remote(status))))
    }

    /// The peer reports it delivered every message up to `delivered`.
    ///
    /// Those messages complete `Success`. Every operation submitted before
    /// the last of them is proven executed (RC ordering): one that is no
    /// longer posted on a live transport completes now (write: `Success`,
    /// atomic: `Indeterminate { executed: Some(true) }`; a read stays, to be
    /// replayed); one still posted completes from its own work completion.
    ///
    /// A report below [`Journal::peer_delivered`] changes nothing; one above
    /// [`Journal::highest_sent`] is impossible for the genuine peer and is
    /// clamped (the driver should check the handshake with those two).
    pub fn on_peer_delivered(&mut self, delivered: Seq) -> Vec<Completion> {
        let mut out = Vec::new();
        self.on_peer_delivered_with(delivered, |c| out.push(c));
        out
    }

    /// [`Journal::on_peer_delivered`], handing each completion to `done`
    /// (say, a push onto the driver's completion queue) instead of
    /// collecting them in a new vector.
    pub fn on_peer_delivered_with(&mut self, delivered: Seq, mut done: impl FnMut(Completion)) {
        self.confirm(delivered);
        self.sweep(&mut done);
    }

    /// The transport was lost: every operation posted on it and not finished
    /// becomes unknown and unposted. Idempotent.
    pub fn transport_down(&mut self) {
        for e in self.entries.range_mut(..self.posted) {
            e.stage = Stage::Queued;
        }
        self.posted = 0;
    }

    /// After reconnection, with the highest sequence number the peer
    /// delivered (from its handshake): applies
    /// [`Journal::on_peer_delivered`], then completes every unknown atomic
    /// (posted before a loss, no result) `Indeterminate { executed: None }`
    /// unless `replay_atomics`. Everything left is replayed, in the original
    /// order, through [`Journal::next_unposted`]. Implies
    /// [`Journal::transport_down`] if it was not called. Completions are in
    /// submission order.
    pub fn resume(&mut self, peer_delivered: Seq, replay_atomics: bool) -> Vec<Completion> {
        self.transport_down();
        let mut out = self.on_peer_delivered(peer_delivered);
        if !replay_atomics {
            // Nothing is posted now: every atomic that was posted is unknown.
            let unknown = |e: &Entry| e.kind.is_atomic() && e.posts > 0;
            let (lost, kept): (VecDeque<Entry>, VecDeque<Entry>) =
                std::mem::take(&mut self.entries)
                    .into_iter()
                    .partition(unknown);
            self.entries = kept;
            for e in lost {
                let outcome = Outcome::Indeterminate { executed: None };
                out.push(self.complete(&e, outcome));
            }
            out.sort_by_key(|c| c.op);
        }
        out
    }

    /// Operations an earlier transport carried that are waiting to be
    /// posted again: what a resume replays.
    pub fn pending_replays(&self) -> usize {
        self.entries
            .iter()
            .skip(self.posted)
            .filter(|e| e.posts > 0)
            .count()
    }

    /// Messages submitted and not yet delivered according to
    /// `peer_delivered` (sequence numbers above it): for credit flow
    /// control.
    pub fn in_flight_messages(&self, peer_delivered: Seq) -> u64 {
        self.last_seq().0.saturating_sub(peer_delivered.0)
    }

    /// Entries held: operations not yet completed, plus orphan messages of
    /// [`Journal::fail_queued`] awaiting confirmation.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `op` is an orphan ([`Journal::fail_queued`]): a message
    /// that completed and still holds its sequence number.
    pub fn is_orphan(&self, op: OpId) -> bool {
        self.find(op).is_some_and(|i| self.entries[i].orphan)
    }

    /// Whether `op` is an orphan without its payload, to be posted as a
    /// skip of its sequence number (`wire::MsgKind::Skip`).
    pub fn is_void(&self, op: OpId) -> bool {
        self.find(op).is_some_and(|i| self.entries[i].void)
    }

    /// Whether `op` is held (not yet completed, or an orphan).
    pub fn contains(&self, op: OpId) -> bool {
        self.find(op).is_some()
    }

    /// Bytes of message payload held, for memory accounting.
    pub fn payload_bytes(&self) -> usize {
        self.payload_bytes
    }

    /// Counters since creation.
    pub fn stats(&self) -> JournalStats {
        self.stats
    }

    /// The highest sequence number the peer confirmed delivering.
    pub fn peer_delivered(&self) -> Seq {
        self.confirmed
    }

    /// The last sequence number handed out (`Seq(0)`: none).
    pub fn last_seq(&self) -> Seq {
        Seq(self.next_seq.0 - 1)
    }

    /// The highest sequence number ever posted. A peer that reports having
    /// delivered more, or less than [`Journal::peer_delivered`], is not the
    /// peer this journal talked to.
    pub fn highest_sent(&self) -> Seq {
        self.highest_sent
    }

    /// The sequence number of a message the peer refused, if any: later
    /// messages can never be delivered in order, the session should end.
    pub fn sequence_broken(&self) -> Option<Seq> {
        self.broken
    }

    fn find(&self, op: OpId) -> Option<usize> {
        // Ids ascend; with no gap below `op` (the common case: operations
        // complete roughly in order) it sits at its distance from the first.
        let first = self.entries.front()?.id;
        let guess = usize::try_from(op.0.checked_sub(first.0)?).ok()?;
        match self.entries.get(guess) {
            Some(e) if e.id == op => Some(guess),
            _ => self.entries.binary_search_by_key(&op, |e| e.id).ok(),
        }
    }

    fn remove_at(&mut self, i: usize) -> Entry {
        let e = self.entries.remove(i).expect("index in range");
        if e.stage != Stage::Queued {
            self.posted -= 1;
        }
        self.payload_bytes -= e.kind.payload_len();
        e
    }

    fn complete(&mut self, e: &Entry, outcome: Outcome) -> Completion {
        self.stats.completed += 1;
        if matches!(outcome, Outcome::Indeterminate { .. }) {
            self.stats.indeterminate += 1;
        }
        Completion {
            op: e.id,
            outcome,
            context: e.context,
            class: e.kind.class(),
            len: e.kind.bytes(),
        }
    }

    /// Raises the confirmed sequence number and the RC-ordering proof.
    fn confirm(&mut self, delivered: Seq) {
        let delivered = if delivered > self.highest_sent {
            tracing::warn!(%delivered, highest_sent = %self.highest_sent,
                "peer reports delivering messages never sent; clamped");
            self.highest_sent
        } else {
            delivered
        };
        if delivered <= self.confirmed {
            return;
        }
        self.confirmed = delivered;
        let mut last = None;
        while let Some(&(seq, id)) = self.messages.front() {
            if seq > delivered {
                break;
            }
            last = Some(id);
            self.messages.pop_front();
        }
        if let Some(last) = last {
            self.proven_below = self.proven_below.max(OpId(last.0 + 1));
        }
    }

    /// Completes what the confirmation and the proof settle. Only entries
    /// below `proven_below` can be settled: confirmed messages and proven
    /// operations no longer on a live transport.
    fn sweep(&mut self, done: &mut impl FnMut(Completion)) {
        let mut end = self.entries.partition_point(|e| e.id < self.proven_below);
        let mut i = 0;
        while i < end {
            let Some(outcome) = self.proven_outcome(&self.entries[i]) else {
                i += 1;
                continue;
            };
            let e = self.remove_at(i);
            end -= 1;
            if !e.orphan {
                done(self.complete(&e, outcome));
            }
            if let OpKind::Message { payload } = e.kind {
                self.spare.put(payload);
            }
        }
    }

    /// The outcome of an entry below `proven_below`, if settled now.
    fn proven_outcome(&self, e: &Entry) -> Option<Outcome> {
        let replayed = e.replayed();
        match e.kind {
            OpKind::Message { .. } | OpKind::MessageFrom { .. } | OpKind::WriteImm { .. } => {
                (e.seq <= self.confirmed).then_some(Outcome::Success { replayed })
            }
            // Still on the live transport: its own completion settles it.
            _ if e.stage != Stage::Queued || e.posts == 0 => None,
            OpKind::Write { .. } => Some(Outcome::Success { replayed }),
            OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => Some(Outcome::Indeterminate {
                executed: Some(true),
            }),
            OpKind::Read { .. } | OpKind::Flush => None,
        }
    }
}

mod endings;
#[cfg(test)]
mod tests;
