//! The journal (sender side) and the inbox (receiver side): exactly-once,
//! in-order delivery of messages and exactly one completion per operation,
//! across any number of transport losses.
//!
//! # Contract
//!
//! Every [`OpId`] handed out by [`Journal::submit`] completes **exactly
//! once, ever**. Completions are *returned* by the journal's methods (never
//! performed); the journal forgets the operation at that moment (a message
//! is dropped as soon as the peer confirms it). What an [`Outcome`] means:
//!
//! | outcome | message | write / read | fetch-add / cmp-swap |
//! |---|---|---|---|
//! | `Success` | delivered to the peer *application*, exactly once, in order (the peer confirmed its sequence number; an RC ack alone is not enough) | executed and RC-acknowledged (a read's data landed); a write may instead be proven executed by a later confirmed message | executed once, RC-acknowledged, result landed |
//! | `Indeterminate{executed}` | posted, never confirmed, and relink stopped (see `fail_*`) | never | posted, result lost: `Some(true)` proven executed, `None` unknown |
//! | `Failed(err)` | never left the sender | not confirmed: if it had been posted, the target range is undefined (as after a verbs error) | never posted: no effect |
//!
//! `Success { replayed }` says the operation was posted on more than one
//! transport. `Failed(OpError::Remote(status))` means the operation itself
//! was refused (bad key, rights, bounds, length): it is never replayed.
//!
//! # How the journal reasons (ARCHITECTURE.md section 2)
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
//!    replay after a resume is sent).
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
//! use relink_core::journal::{Accept, Inbox, Journal, OpKind, Outcome};
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
use crate::ids::{BufferToken, OpId, RegionId, Seq};

/// A range of local registered memory, named by region so that it stays
/// valid across device epochs (the driver translates it to an lkey at post
/// time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocalRange {
    /// The local region.
    pub region: RegionId,
    /// Offset into the region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// What an operation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// A sequenced two-sided message (SEND); delivered exactly once, in order.
    Message {
        /// The bytes to deliver; the journal owns them until confirmation.
        payload: Vec<u8>,
    },
    /// RDMA WRITE of `local` to `remote`; idempotent, so replayed.
    Write {
        /// Source bytes (owned by the library until the completion).
        local: LocalRange,
        /// Destination at the peer.
        remote: BufferToken,
    },
    /// RDMA READ of `remote` into `local`; idempotent, so replayed.
    Read {
        /// Where the data lands.
        local: LocalRange,
        /// Source at the peer.
        remote: BufferToken,
    },
    /// Atomic fetch-and-add; not idempotent.
    FetchAdd {
        /// Where the original value lands (8 bytes).
        local: LocalRange,
        /// The 8-byte remote word.
        remote: BufferToken,
        /// The addend.
        add: u64,
    },
    /// Atomic compare-and-swap; not idempotent.
    CmpSwap {
        /// Where the original value lands (8 bytes).
        local: LocalRange,
        /// The 8-byte remote word.
        remote: BufferToken,
        /// The value expected.
        compare: u64,
        /// The value stored if the comparison succeeds.
        swap: u64,
    },
}

impl OpKind {
    /// Whether this is a sequenced message.
    pub fn is_message(&self) -> bool {
        matches!(self, OpKind::Message { .. })
    }

    /// Whether this is an atomic (fetch-add or compare-and-swap).
    pub fn is_atomic(&self) -> bool {
        matches!(self, OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. })
    }

    /// Whether executing it twice has the same effect as once (write, read).
    pub fn is_idempotent(&self) -> bool {
        matches!(self, OpKind::Write { .. } | OpKind::Read { .. })
    }

    /// Short lower-case name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Message { .. } => "message",
            OpKind::Write { .. } => "write",
            OpKind::Read { .. } => "read",
            OpKind::FetchAdd { .. } => "fetch-add",
            OpKind::CmpSwap { .. } => "cmp-swap",
        }
    }

    fn payload_len(&self) -> usize {
        match self {
            OpKind::Message { payload } => payload.len(),
            _ => 0,
        }
    }
}

/// Why an operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    /// The give-up deadline (`ctrl_loss_tmo`) passed without a resume.
    #[error("gave up: the connection was not recovered before the deadline")]
    GaveUp,
    /// `fast_io_fail_tmo` passed while reconnecting; reconnection continues.
    #[error("failed fast: the connection is still recovering")]
    FastFail,
    /// The peer came back as a new incarnation (it lost its state): nothing
    /// is replayed into a stranger.
    #[error("the peer lost its state")]
    PeerLost,
    /// The session was disconnected by the application or an administrator.
    #[error("disconnected")]
    Disconnected,
    /// The operation itself was refused (e.g. `REM_ACCESS_ERR`): not retried.
    #[error("refused: {}", .0.name())]
    Remote(WcStatus),
}

/// How an operation ended. See the module docs for what each means per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done: delivered (message) or executed and acknowledged (the rest).
    Success {
        /// The operation was posted on more than one transport.
        replayed: bool,
    },
    /// Not done: relink stopped, or the operation was refused.
    Failed(OpError),
    /// A non-idempotent operation (atomic or message) whose effect cannot be
    /// known.
    Indeterminate {
        /// `Some(true)`: it was executed (its result was lost); `None`:
        /// unknown.
        executed: Option<bool>,
    },
}

impl Outcome {
    /// Whether this is a success.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success { .. })
    }
}

/// The one completion of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The operation.
    pub op: OpId,
    /// How it ended.
    pub outcome: Outcome,
}

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

#[derive(Debug, Clone)]
struct Entry {
    id: OpId,
    /// The message's sequence number; `Seq(0)` for the other kinds.
    seq: Seq,
    kind: OpKind,
    /// On how many transports it was posted (saturating).
    posts: u16,
    stage: Stage,
    /// Already completed (by [`Journal::fail_queued`]) but kept so that its
    /// sequence number still reaches the peer: a message that may have been
    /// delivered cannot be un-sent, and the peer accepts no gap.
    orphan: bool,
}

impl Entry {
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
    posted: usize,
    next_op: u64,
    next_seq: Seq,
    highest_sent: Seq,
    confirmed: Seq,
    /// Every entry with a smaller id was executed by the peer (RC ordering
    /// before a confirmed message).
    proven_below: OpId,
    payload_bytes: usize,
    broken: Option<Seq>,
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
            orphan: false,
        });
        (id, seq)
    }

    /// An empty buffer for a payload of `len` bytes of a message to
    /// submit: the allocation of a message the peer confirmed, if a spare
    /// one fits (never more than about twice `len`).
    pub fn message_buffer(&mut self, len: usize) -> Vec<u8> {
        self.spare.take(len)
    }

    /// The first operation not yet posted on the current transport, in
    /// submission order: a new one or a replay. Post it, then call
    /// [`Journal::mark_posted`].
    pub fn next_unposted(&self) -> Option<(OpId, &OpKind, Option<Seq>)> {
        let e = self.entries.get(self.posted)?;
        debug_assert_eq!(e.stage, Stage::Queued);
        Some((e.id, &e.kind, e.message_seq()))
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
                Some(self.complete(e.id, outcome))
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
        Some(self.complete(e.id, Outcome::Failed(OpError::Remote(status))))
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
            let lost: Vec<OpId> = self
                .entries
                .iter()
                .filter(|e| unknown(e))
                .map(|e| e.id)
                .collect();
            self.entries.retain(|e| !unknown(e));
            for op in lost {
                let outcome = Outcome::Indeterminate { executed: None };
                out.push(self.complete(op, outcome));
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

    /// Ends every operation not yet completed, in submission order, and
    /// empties the journal: give-up, admin disconnect, stranger peer. Call
    /// it with the transport down (it implies [`Journal::transport_down`]).
    ///
    /// The outcome is `Failed(err)`, except where more is known: a write or
    /// atomic proven executed reports that (`Success` /
    /// `Indeterminate { executed: Some(true) }`), and a message or atomic
    /// that was posted and may have taken effect is
    /// `Indeterminate { executed: None }` — `Failed` never hides a possible
    /// effect of a non-idempotent operation.
    pub fn fail_all(&mut self, err: OpError) -> Vec<Completion> {
        self.transport_down();
        self.messages.clear();
        self.payload_bytes = 0;
        let mut out = Vec::new();
        for e in std::mem::take(&mut self.entries) {
            if !e.orphan {
                let outcome = self.final_outcome(&e, err);
                out.push(self.complete(e.id, outcome));
            }
        }
        out
    }

    /// `fast_io_fail_tmo`: ends every operation not yet completed, like
    /// [`Journal::fail_all`], while reconnection continues. Call it with the
    /// transport down.
    ///
    /// Sequence numbers stay gap-free for the peer: messages that never left
    /// give their numbers back (so a later [`Journal::submit`] may hand out
    /// the same `Seq` again), and messages that were posted — completed
    /// `Indeterminate { executed: None }` because the peer may have them —
    /// stay as orphans that are still replayed on resume (delivered at most
    /// once, no completion). [`Journal::len`] counts them until confirmed.
    pub fn fail_queued(&mut self, err: OpError) -> Vec<Completion> {
        self.transport_down();
        let mut out = Vec::new();
        let mut give_back: Option<Seq> = None;
        for mut e in std::mem::take(&mut self.entries) {
            if !e.orphan {
                let outcome = self.final_outcome(&e, err);
                out.push(self.complete(e.id, outcome));
                if !e.kind.is_message() {
                    continue;
                }
                if e.posts == 0 {
                    give_back.get_or_insert(e.seq);
                    self.payload_bytes -= e.kind.payload_len();
                    continue;
                }
                e.orphan = true;
            }
            self.entries.push_back(e);
        }
        if let Some(seq) = give_back {
            debug_assert!(seq > self.highest_sent);
            self.next_seq = seq;
        }
        self.messages = self
            .entries
            .iter()
            .filter_map(|e| Some((e.message_seq()?, e.id)))
            .collect();
        out
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

    fn complete(&mut self, op: OpId, outcome: Outcome) -> Completion {
        self.stats.completed += 1;
        if matches!(outcome, Outcome::Indeterminate { .. }) {
            self.stats.indeterminate += 1;
        }
        Completion { op, outcome }
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
                done(self.complete(e.id, outcome));
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
            OpKind::Message { .. } => {
                (e.seq <= self.confirmed).then_some(Outcome::Success { replayed })
            }
            // Still on the live transport: its own completion settles it.
            _ if e.stage != Stage::Queued || e.posts == 0 => None,
            OpKind::Write { .. } => Some(Outcome::Success { replayed }),
            OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => Some(Outcome::Indeterminate {
                executed: Some(true),
            }),
            OpKind::Read { .. } => None,
        }
    }

    /// The outcome of an unfinished entry when relink stops trying.
    fn final_outcome(&self, e: &Entry, err: OpError) -> Outcome {
        if e.posts == 0 {
            return Outcome::Failed(err);
        }
        let proven = e.id < self.proven_below;
        match e.kind {
            OpKind::Message { .. } if e.seq <= self.confirmed => Outcome::Success {
                replayed: e.replayed(),
            },
            OpKind::Message { .. } => Outcome::Indeterminate { executed: None },
            OpKind::Write { .. } if proven => Outcome::Success {
                replayed: e.replayed(),
            },
            OpKind::Write { .. } | OpKind::Read { .. } => Outcome::Failed(err),
            OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => Outcome::Indeterminate {
                executed: proven.then_some(true),
            },
        }
    }
}

/// What the receiver does with an incoming message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// The next in order: deliver it to the application.
    Deliver,
    /// Already delivered (a replay): drop it.
    Duplicate,
    /// A sequence number beyond the next: a protocol violation to report;
    /// the message is not delivered.
    Gap {
        /// The sequence number that should have come.
        expected: Seq,
    },
}

/// The receiver side of a session (one per direction): delivers each
/// sequence number once, in order, and drops replayed duplicates.
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    last: Seq,
    duplicates: u64,
}

impl Inbox {
    /// Nothing delivered yet: the next message expected is `Seq(1)`.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// The highest sequence number delivered (`Seq(0)`: none); sent to the
    /// peer in the resume handshake and as delivery confirmation.
    pub fn last_delivered(&self) -> Seq {
        self.last
    }

    /// Decides on the message `seq`: deliver only `last_delivered + 1`;
    /// anything at or below `last_delivered` is a duplicate (counted); above
    /// is a gap.
    pub fn accept(&mut self, seq: Seq) -> Accept {
        let expected = self.last.next();
        if seq == expected {
            self.last = seq;
            Accept::Deliver
        } else if seq < expected {
            self.duplicates += 1;
            Accept::Duplicate
        } else {
            Accept::Gap { expected }
        }
    }

    /// Duplicates dropped so far.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap, VecDeque};

    use proptest::prelude::*;

    use super::*;

    fn range() -> LocalRange {
        LocalRange {
            region: RegionId(1),
            offset: 0,
            len: 8,
        }
    }

    fn token() -> BufferToken {
        BufferToken {
            region: RegionId(2),
            offset: 64,
        }
    }

    fn msg(bytes: &[u8]) -> OpKind {
        OpKind::Message {
            payload: bytes.to_vec(),
        }
    }

    fn write() -> OpKind {
        OpKind::Write {
            local: range(),
            remote: token(),
        }
    }

    fn read() -> OpKind {
        OpKind::Read {
            local: range(),
            remote: token(),
        }
    }

    fn fetch_add() -> OpKind {
        OpKind::FetchAdd {
            local: range(),
            remote: token(),
            add: 1,
        }
    }

    fn cmp_swap() -> OpKind {
        OpKind::CmpSwap {
            local: range(),
            remote: token(),
            compare: 0,
            swap: 1,
        }
    }

    /// Posts everything [`Journal::next_unposted`] offers; returns the ids.
    fn post_all(j: &mut Journal) -> Vec<OpId> {
        let mut posted = Vec::new();
        while let Some((op, _, _)) = j.next_unposted() {
            j.mark_posted(op);
            posted.push(op);
        }
        posted
    }

    fn done(op: OpId, outcome: Outcome) -> Completion {
        Completion { op, outcome }
    }

    const OK: Outcome = Outcome::Success { replayed: false };
    const REPLAYED: Outcome = Outcome::Success { replayed: true };
    const EXECUTED: Outcome = Outcome::Indeterminate {
        executed: Some(true),
    };
    const UNKNOWN: Outcome = Outcome::Indeterminate { executed: None };

    #[test]
    fn submit_numbers_operations_and_messages() {
        let mut j = Journal::new();
        assert_eq!(j.submit(write()), (OpId(1), None));
        assert_eq!(j.submit(msg(b"ab")), (OpId(2), Some(Seq(1))));
        assert_eq!(j.submit(fetch_add()), (OpId(3), None));
        assert_eq!(j.submit(msg(b"cde")), (OpId(4), Some(Seq(2))));
        assert_eq!(j.len(), 4);
        assert_eq!(j.payload_bytes(), 5);
        assert_eq!(j.last_seq(), Seq(2));
        assert_eq!(j.in_flight_messages(Seq(0)), 2);
        assert_eq!(j.in_flight_messages(Seq(1)), 1);
        assert_eq!(j.highest_sent(), Seq(0));
    }

    #[test]
    fn posts_in_submission_order() {
        let mut j = Journal::new();
        let (w, _) = j.submit(write());
        let (m, _) = j.submit(msg(b"x"));
        let (next, kind, seq) = j.next_unposted().unwrap();
        assert_eq!((next, kind, seq), (w, &write(), None));
        j.mark_posted(w);
        assert_eq!(j.next_unposted().unwrap().2, Some(Seq(1)));
        j.mark_posted(m);
        assert!(j.next_unposted().is_none());
        assert_eq!(j.highest_sent(), Seq(1));
    }

    #[test]
    #[should_panic(expected = "not the operation next_unposted returns")]
    fn posting_out_of_order_is_a_bug() {
        let mut j = Journal::new();
        j.submit(write());
        let (second, _) = j.submit(write());
        j.mark_posted(second);
    }

    #[test]
    fn rdma_operations_complete_on_their_success() {
        let mut j = Journal::new();
        let ops = [write(), read(), fetch_add(), cmp_swap()].map(|k| j.submit(k).0);
        post_all(&mut j);
        for op in ops {
            assert_eq!(j.on_success(op), Some(done(op, OK)));
            assert_eq!(j.on_success(op), None, "completes once");
        }
        assert!(j.is_empty());
        assert_eq!(j.stats().completed, 4);
    }

    #[test]
    fn a_message_completes_when_the_peer_delivers_it() {
        let mut j = Journal::new();
        let (m1, _) = j.submit(msg(b"one"));
        let (m2, _) = j.submit(msg(b"two"));
        post_all(&mut j);
        assert_eq!(j.on_success(m1), None, "an RC ack is not a delivery");
        assert!(j.contains(m1));
        assert_eq!(j.on_peer_delivered(Seq(1)), vec![done(m1, OK)]);
        assert_eq!(j.payload_bytes(), 3, "dropped at confirmation");
        // Confirmed before its own completion was polled.
        assert_eq!(j.on_peer_delivered(Seq(2)), vec![done(m2, OK)]);
        assert_eq!(j.on_success(m2), None);
        assert!(j.is_empty());
        assert_eq!(j.payload_bytes(), 0);
        assert_eq!(j.peer_delivered(), Seq(2));
    }

    #[test]
    fn a_refused_operation_fails_and_is_never_replayed() {
        let mut j = Journal::new();
        let (w, _) = j.submit(write());
        post_all(&mut j);
        let refused = Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr));
        assert_eq!(
            j.on_remote_error(w, WcStatus::RemAccessErr),
            Some(done(w, refused))
        );
        j.transport_down();
        assert!(j.resume(Seq(0), true).is_empty());
        assert!(j.next_unposted().is_none());
        assert!(j.is_empty());
    }

    #[test]
    fn a_refused_message_breaks_the_sequence() {
        let mut j = Journal::new();
        let (m, _) = j.submit(msg(b"too long"));
        post_all(&mut j);
        let c = j.on_remote_error(m, WcStatus::RemInvReqErr).unwrap();
        assert_eq!(
            c.outcome,
            Outcome::Failed(OpError::Remote(WcStatus::RemInvReqErr))
        );
        assert_eq!(j.sequence_broken(), Some(Seq(1)));
        assert_eq!(j.payload_bytes(), 0);
    }

    #[test]
    fn a_delivered_message_proves_what_was_posted_before_it() {
        let mut j = Journal::new();
        let (w, _) = j.submit(write());
        let (r, _) = j.submit(read());
        let (fa, _) = j.submit(fetch_add());
        let (cs, _) = j.submit(cmp_swap());
        let (m, _) = j.submit(msg(b"m"));
        let (after, _) = j.submit(write());
        post_all(&mut j);
        j.transport_down();
        let resumed = j.resume(Seq(1), false);
        assert_eq!(
            resumed,
            vec![
                done(w, OK),
                done(fa, EXECUTED),
                done(cs, EXECUTED),
                done(m, OK),
            ]
        );
        // The read's data may not have landed; the write after the message is unknown.
        assert_eq!(post_all(&mut j), vec![r, after]);
        assert_eq!(j.on_success(r), Some(done(r, REPLAYED)));
        assert_eq!(j.on_success(after), Some(done(after, REPLAYED)));
        assert_eq!(j.stats().replayed, 2);
        assert_eq!(j.stats().indeterminate, 2);
    }

    #[test]
    fn a_proof_waits_for_the_live_transport_completion() {
        let mut j = Journal::new();
        let (w, _) = j.submit(write());
        let (fa, _) = j.submit(fetch_add());
        let (m, _) = j.submit(msg(b"m"));
        post_all(&mut j);
        // The write's buffer may still be read by an RC retransmission, the
        // atomic's result may still arrive: only the message completes.
        assert_eq!(j.on_peer_delivered(Seq(1)), vec![done(m, OK)]);
        assert_eq!(j.on_success(fa), Some(done(fa, OK)));
        // Lost before its own completion: the proof settles it, no replay.
        j.transport_down();
        assert_eq!(j.resume(Seq(1), false), vec![done(w, OK)]);
        assert!(j.is_empty());
    }

    #[test]
    fn unknown_atomics_are_indeterminate_on_resume() {
        let mut j = Journal::new();
        let (fa, _) = j.submit(fetch_add());
        let (m, _) = j.submit(msg(b"m"));
        let (cs, _) = j.submit(cmp_swap());
        j.mark_posted(fa);
        j.mark_posted(m);
        j.transport_down();
        // cs was never posted: it is sent as new, not as a replay.
        assert_eq!(j.resume(Seq(0), false), vec![done(fa, UNKNOWN)]);
        assert_eq!(post_all(&mut j), vec![m, cs]);
        assert_eq!(j.on_success(cs), Some(done(cs, OK)));
        assert_eq!(j.stats().indeterminate, 1);
    }

    #[test]
    fn atomics_are_replayed_when_the_application_opts_in() {
        let mut j = Journal::new();
        let (fa, _) = j.submit(fetch_add());
        post_all(&mut j);
        j.transport_down();
        assert!(j.resume(Seq(0), true).is_empty());
        assert_eq!(post_all(&mut j), vec![fa]);
        assert_eq!(j.on_success(fa), Some(done(fa, REPLAYED)));
    }

    #[test]
    fn replay_keeps_the_original_order_across_losses() {
        let mut j = Journal::new();
        let (m1, _) = j.submit(msg(b"1"));
        let (w, _) = j.submit(write());
        let (m2, _) = j.submit(msg(b"2"));
        let (m3, _) = j.submit(msg(b"3"));
        post_all(&mut j);
        j.transport_down();
        assert_eq!(j.resume(Seq(1), false), vec![done(m1, OK)]);
        j.mark_posted(w);
        j.mark_posted(m2);
        j.transport_down();
        // The peer got m2 on the second transport: w is proven, m3 is next.
        assert_eq!(
            j.resume(Seq(2), false),
            vec![done(w, REPLAYED), done(m2, REPLAYED)]
        );
        assert_eq!(
            j.next_unposted().map(|n| (n.0, n.2)),
            Some((m3, Some(Seq(3))))
        );
    }

    #[test]
    fn a_late_success_from_a_lost_transport_counts() {
        let mut j = Journal::new();
        let (w, _) = j.submit(write());
        post_all(&mut j);
        j.transport_down();
        assert_eq!(j.on_success(w), Some(done(w, OK)));
        assert!(j.resume(Seq(0), false).is_empty());
        assert!(j.next_unposted().is_none());
    }

    #[test]
    fn peer_reports_are_monotone_and_clamped() {
        let mut j = Journal::new();
        let (m1, _) = j.submit(msg(b"1"));
        let (m2, _) = j.submit(msg(b"2"));
        j.mark_posted(m1);
        // Seq(2) was never sent: the report cannot cover it.
        assert_eq!(j.on_peer_delivered(Seq(5)), vec![done(m1, OK)]);
        assert_eq!(j.peer_delivered(), Seq(1));
        assert!(j.on_peer_delivered(Seq(0)).is_empty());
        assert_eq!(j.peer_delivered(), Seq(1));
        assert!(j.contains(m2));
    }

    #[test]
    fn fail_all_ends_everything_in_order_without_hiding_effects() {
        let mut j = Journal::new();
        let (w1, _) = j.submit(write());
        let (m1, _) = j.submit(msg(b"1"));
        let (fa, _) = j.submit(fetch_add());
        let (m2, _) = j.submit(msg(b"2"));
        let (r, _) = j.submit(read());
        let (w2, _) = j.submit(write());
        post_all(&mut j);
        let (m3, _) = j.submit(msg(b"3"));
        let (w3, _) = j.submit(write());
        assert_eq!(j.on_peer_delivered(Seq(1)), vec![done(m1, OK)]);
        j.transport_down();
        let gave_up = Outcome::Failed(OpError::GaveUp);
        assert_eq!(
            j.fail_all(OpError::GaveUp),
            vec![
                done(w1, OK),      // proven by m1
                done(fa, UNKNOWN), // posted, may have executed
                done(m2, UNKNOWN), // posted, may have been delivered
                done(r, gave_up),  // idempotent: Failed
                done(w2, gave_up), // idempotent: Failed
                done(m3, gave_up), // never left
                done(w3, gave_up), // never left
            ]
        );
        assert!(j.is_empty());
        assert_eq!(j.payload_bytes(), 0);
        assert_eq!(j.stats().completed, 8);
    }

    #[test]
    fn fail_queued_keeps_the_sequence_gap_free() {
        let mut j = Journal::new();
        let (m1, _) = j.submit(msg(b"1"));
        let (m2, _) = j.submit(msg(b"2"));
        post_all(&mut j);
        let (m3, _) = j.submit(msg(b"3"));
        let (w, _) = j.submit(write());
        j.transport_down();
        let fast = Outcome::Failed(OpError::FastFail);
        assert_eq!(
            j.fail_queued(OpError::FastFail),
            vec![
                done(m1, UNKNOWN),
                done(m2, UNKNOWN),
                done(m3, fast),
                done(w, fast)
            ]
        );
        // m1 and m2 may be at the peer: kept as orphans; Seq(3) given back.
        assert_eq!(j.len(), 2);
        assert_eq!(j.payload_bytes(), 2);
        assert_eq!(j.last_seq(), Seq(2));
        let (m4, seq) = j.submit(msg(b"4"));
        assert_eq!(seq, Some(Seq(3)));
        // The peer had m1: the orphan is dropped silently, m2 is replayed.
        assert!(j.resume(Seq(1), false).is_empty());
        assert_eq!(j.next_unposted().map(|n| n.2), Some(Some(Seq(2))));
        assert_eq!(post_all(&mut j), vec![m2, m4]);
        assert_eq!(j.on_success(m2), None);
        assert_eq!(j.on_peer_delivered(Seq(3)), vec![done(m4, OK)]);
        assert!(j.is_empty());
        assert_eq!(j.stats().completed, 5);
    }

    #[test]
    fn inbox_delivers_in_order_and_drops_duplicates() {
        let mut inbox = Inbox::new();
        assert_eq!(inbox.last_delivered(), Seq(0));
        assert_eq!(inbox.accept(Seq(1)), Accept::Deliver);
        assert_eq!(inbox.accept(Seq(1)), Accept::Duplicate);
        assert_eq!(inbox.accept(Seq(3)), Accept::Gap { expected: Seq(2) });
        assert_eq!(inbox.accept(Seq(2)), Accept::Deliver);
        assert_eq!(inbox.accept(Seq(0)), Accept::Duplicate);
        assert_eq!(inbox.last_delivered(), Seq(2));
        assert_eq!(inbox.duplicates(), 2);
    }

    #[test]
    fn refusals_are_told_from_losses() {
        assert!(is_refusal(WcStatus::RemAccessErr));
        assert!(is_refusal(WcStatus::LocProtErr));
        assert!(!is_refusal(WcStatus::WrFlushErr));
        assert!(!is_refusal(WcStatus::RetryExcErr));
        assert!(!is_refusal(WcStatus::Success));
    }

    // ---- Model-based test -------------------------------------------------

    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// Submit an operation of kind 0..5 (message, write, read, fetch-add, cmp-swap).
        Submit(u8),
        /// Post the next unposted operation.
        Post,
        /// The peer executes the oldest operation on the wire.
        Execute,
        /// The oldest acknowledgement arrives back.
        Ack,
        /// The peer reports what it delivered.
        Report,
        /// The peer refuses the oldest operation on the wire (not a
        /// message); the QP breaks.
        Refuse,
        /// The transport is lost: the wire's tail and the acks in flight vanish.
        Down,
        /// Reconnected: resume with the peer's delivered sequence number.
        Resume,
        /// `fast_io_fail_tmo` fires during an outage.
        FailQueued,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (0u8..5).prop_map(Step::Submit),
            6 => Just(Step::Post),
            5 => Just(Step::Execute),
            4 => Just(Step::Ack),
            2 => Just(Step::Report),
            1 => Just(Step::Refuse),
            2 => Just(Step::Down),
            2 => Just(Step::Resume),
            1 => Just(Step::FailQueued),
        ]
    }

    /// One request on the current transport, as the peer sees it.
    #[derive(Debug, Clone, Copy)]
    struct Wire {
        op: OpId,
        seq: Option<Seq>,
        /// Which submitted message the payload is.
        tag: Option<OpId>,
    }

    /// A journal, a peer with an inbox, and an RC transport between them.
    struct Model {
        journal: Journal,
        inbox: Inbox,
        replay_atomics: bool,
        up: bool,
        /// Posted on the current transport, not yet executed (RC: in order).
        wire: VecDeque<Wire>,
        /// Executed by the peer, acknowledgement on its way back.
        acks: VecDeque<OpId>,
        kinds: BTreeMap<OpId, OpKind>,
        posts: HashMap<OpId, u32>,
        executions: HashMap<OpId, u32>,
        outcomes: BTreeMap<OpId, Outcome>,
        /// The messages the peer application received, in order.
        delivered: Vec<OpId>,
    }

    impl Model {
        fn new(replay_atomics: bool) -> Model {
            Model {
                journal: Journal::new(),
                inbox: Inbox::new(),
                replay_atomics,
                up: true,
                wire: VecDeque::new(),
                acks: VecDeque::new(),
                kinds: BTreeMap::new(),
                posts: HashMap::new(),
                executions: HashMap::new(),
                outcomes: BTreeMap::new(),
                delivered: Vec::new(),
            }
        }

        fn count(map: &HashMap<OpId, u32>, op: OpId) -> u32 {
            map.get(&op).copied().unwrap_or(0)
        }

        fn apply(&mut self, step: Step) {
            match step {
                Step::Submit(k) => {
                    let next = OpId(self.kinds.len() as u64 + 1);
                    let kind = match k {
                        // The payload names the op, so the peer can tell which it got.
                        0 => msg(&next.0.to_le_bytes()),
                        1 => write(),
                        2 => read(),
                        3 => fetch_add(),
                        _ => cmp_swap(),
                    };
                    let (op, seq) = self.journal.submit(kind.clone());
                    assert_eq!(op, next);
                    assert_eq!(seq.is_some(), kind.is_message());
                    self.kinds.insert(op, kind);
                }
                Step::Post if self.up => {
                    if let Some((op, kind, seq)) = self.journal.next_unposted() {
                        let tag = match kind {
                            OpKind::Message { payload } => {
                                Some(OpId(u64::from_le_bytes(payload[..8].try_into().unwrap())))
                            }
                            _ => None,
                        };
                        self.wire.push_back(Wire { op, seq, tag });
                        self.journal.mark_posted(op);
                        *self.posts.entry(op).or_default() += 1;
                    }
                }
                Step::Execute => {
                    if let Some(w) = self.wire.pop_front() {
                        self.execute(w);
                    }
                }
                Step::Ack => {
                    if let Some(op) = self.acks.pop_front() {
                        if let Some(c) = self.journal.on_success(op) {
                            self.record(c);
                        }
                    }
                }
                Step::Report if self.up => {
                    for c in self.journal.on_peer_delivered(self.inbox.last_delivered()) {
                        self.record(c);
                    }
                }
                Step::Refuse => {
                    if self.wire.front().is_some_and(|w| w.seq.is_none()) {
                        let w = self.wire.pop_front().unwrap();
                        let c = self.journal.on_remote_error(w.op, WcStatus::RemAccessErr);
                        self.record(c.expect("an op on the wire is unfinished"));
                        self.down();
                    }
                }
                Step::Down => self.down(),
                Step::Resume if !self.up => self.resume(),
                Step::FailQueued if !self.up => {
                    for c in self.journal.fail_queued(OpError::FastFail) {
                        self.record(c);
                    }
                }
                Step::Post | Step::Report | Step::Resume | Step::FailQueued => {}
            }
        }

        fn execute(&mut self, w: Wire) {
            if let Some(seq) = w.seq {
                match self.inbox.accept(seq) {
                    Accept::Deliver => {
                        let op = w.tag.unwrap();
                        assert!(
                            !matches!(self.outcomes.get(&op), Some(Outcome::Failed(_))),
                            "{op} delivered after it was reported Failed"
                        );
                        assert!(
                            self.delivered.last() < Some(&op),
                            "{op} delivered out of order"
                        );
                        self.delivered.push(op);
                    }
                    Accept::Duplicate => {}
                    Accept::Gap { expected } => panic!("gap: got {seq}, expected {expected}"),
                }
            } else {
                let n = self.executions.entry(w.op).or_default();
                *n += 1;
                if self.kinds[&w.op].is_atomic() && !self.replay_atomics {
                    assert_eq!(*n, 1, "{} executed twice", w.op);
                }
            }
            self.acks.push_back(w.op);
        }

        fn down(&mut self) {
            if self.up {
                self.wire.clear();
                self.acks.clear();
                self.journal.transport_down();
                self.up = false;
            }
        }

        fn resume(&mut self) {
            let delivered = self.inbox.last_delivered();
            for c in self.journal.resume(delivered, self.replay_atomics) {
                self.record(c);
            }
            self.up = true;
        }

        fn record(&mut self, c: Completion) {
            let op = c.op;
            assert!(
                self.outcomes.insert(op, c.outcome).is_none(),
                "{op} completed twice"
            );
            let kind = &self.kinds[&op];
            let posts = Self::count(&self.posts, op);
            let executions = Self::count(&self.executions, op);
            match c.outcome {
                Outcome::Success { replayed } => {
                    assert_eq!(replayed, posts >= 2, "{op}: replayed flag");
                    if kind.is_message() {
                        assert!(self.delivered.contains(&op), "{op} success before delivery");
                    } else {
                        assert!(executions >= 1, "{op} success without execution");
                    }
                }
                Outcome::Indeterminate { executed } => {
                    assert!(kind.is_message() || kind.is_atomic(), "{op}: {kind:?}");
                    assert!(posts >= 1, "{op} indeterminate but never posted");
                    if executed == Some(true) {
                        assert!(kind.is_atomic() && executions >= 1);
                    }
                }
                Outcome::Failed(OpError::Remote(_)) => assert!(!kind.is_message()),
                Outcome::Failed(_) => {
                    if !kind.is_idempotent() {
                        assert_eq!(posts, 0, "{op} failed after it may have taken effect");
                        assert!(!self.delivered.contains(&op));
                    }
                }
            }
        }

        /// Runs the transport until the journal has nothing left.
        fn drain(&mut self) {
            if !self.up {
                self.resume();
            }
            for _ in 0..3 {
                while self.journal.next_unposted().is_some() {
                    self.apply(Step::Post);
                }
                while !self.wire.is_empty() {
                    self.apply(Step::Execute);
                }
                while !self.acks.is_empty() {
                    self.apply(Step::Ack);
                }
                self.apply(Step::Report);
            }
        }

        fn check_end(&self) {
            assert!(self.journal.is_empty(), "{:?}", self.journal);
            assert_eq!(self.journal.len(), 0);
            assert_eq!(self.journal.payload_bytes(), 0);
            let unfinished: Vec<_> = self
                .kinds
                .keys()
                .filter(|op| !self.outcomes.contains_key(op))
                .collect();
            assert!(unfinished.is_empty(), "never completed: {unfinished:?}");
            let stats = self.journal.stats();
            assert_eq!(stats.completed, self.outcomes.len() as u64);
            let indeterminate = self
                .outcomes
                .values()
                .filter(|o| matches!(o, Outcome::Indeterminate { .. }))
                .count();
            assert_eq!(stats.indeterminate, indeterminate as u64);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Random schedules of traffic and losses, then either a final
        /// resume and drain or a give-up: exactly-once, in-order delivery
        /// and one completion per operation.
        #[test]
        fn journal_and_inbox_model(
            steps in proptest::collection::vec(step(), 0..160),
            replay_atomics in any::<bool>(),
            give_up_at in proptest::option::weighted(0.2, 0usize..160),
        ) {
            let mut m = Model::new(replay_atomics);
            let mut gave_up = false;
            for (i, &s) in steps.iter().enumerate() {
                if give_up_at == Some(i) {
                    // Give-up (or admin disconnect) with the transport
                    // possibly up: fail_all implies transport_down.
                    m.wire.clear();
                    m.acks.clear();
                    m.up = false;
                    for c in m.journal.fail_all(OpError::GaveUp) {
                        m.record(c);
                    }
                    gave_up = true;
                    break;
                }
                m.apply(s);
            }
            if !gave_up {
                m.drain();
                // Every message not reported Failed reached the peer once, in order.
                let expected: Vec<OpId> = m
                    .kinds
                    .iter()
                    .filter(|(op, kind)| {
                        kind.is_message() && !matches!(m.outcomes[op], Outcome::Failed(_))
                    })
                    .map(|(op, _)| *op)
                    .collect();
                prop_assert_eq!(&m.delivered, &expected);
            }
            m.check_end();
        }
    }
}
