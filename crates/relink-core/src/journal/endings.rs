//! How operations end other than by their own work completion: when
//! relink stops trying ([`Journal::fail_all`], [`Journal::fail_queued`]),
//! when one cannot be posted to this peer ([`Journal::fail_unpostable`],
//! [`Journal::fail_message`]), and the orphans a message leaves behind to
//! keep the peer's sequence without a gap.

use super::{Completion, Entry, Journal, OpError, OpKind, Outcome};
use crate::ids::{OpId, Seq};

impl Journal {
    /// Message `op` (or WRITE with immediate data), the next operation not
    /// yet posted, cannot go to this peer (longer than its receive slots
    /// hold; a token its advertisement does not cover): it completes now —
    /// `Failed(err)` if it never left, as [`Journal::fail_all`] would end
    /// it otherwise — and stays as an orphan without its payload, posted as
    /// a skip of its sequence number (the peer accepts no gap). `None`,
    /// changing nothing, if `op` is not the next unposted message.
    pub fn fail_message(&mut self, op: OpId, err: OpError) -> Option<Completion> {
        let i = self.posted;
        let e = self.entries.get(i).filter(|e| e.id == op && !e.orphan)?;
        if !e.kind.is_message() {
            return None;
        }
        let outcome = self.final_outcome(e, err);
        let done = self.complete(&e.clone(), outcome);
        self.orphan_at(i);
        Some(done)
    }

    /// Entry `i`, a message that completed, becomes an orphan: its payload
    /// goes, its sequence number stays, to be posted as a skip.
    pub(super) fn orphan_at(&mut self, i: usize) {
        let e = &mut self.entries[i];
        self.payload_bytes -= e.kind.payload_len();
        e.make_void();
    }

    /// `op`, not posted on the current transport, cannot be posted on it at
    /// all: the peer's advertisement does not cover its remote token
    /// (unknown region, out of bounds, missing right). It leaves the
    /// journal and completes now, with the other entries untouched and in
    /// order, so [`Journal::next_unposted`] moves on to the next one.
    ///
    /// One never posted completes `Failed(err)`; one an earlier transport
    /// carried ends as [`Journal::fail_all`] would end it (an atomic that
    /// may have run is `Indeterminate`). Returns `None`, changing nothing,
    /// for an operation that is unknown, posted on the current transport
    /// (its own work completion settles it), or a message (a message has
    /// no token; failing one would leave a gap in the sequence).
    pub fn fail_unpostable(&mut self, op: OpId, err: OpError) -> Option<Completion> {
        let i = self.find(op)?;
        if i < self.posted {
            return None;
        }
        let e = &self.entries[i];
        if e.kind.is_message() {
            debug_assert!(false, "fail_unpostable({op}) of a message");
            return None;
        }
        let outcome = self.final_outcome(e, err);
        let e = self.remove_at(i);
        Some(self.complete(&e, outcome))
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
                out.push(self.complete(&e, outcome));
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
    /// once, no completion): a message of bytes with its payload (the
    /// journal owns it), so the peer may still get it after its completion;
    /// one whose bytes the application owns again at its completion (a
    /// message from registered memory, a WRITE with immediate data) as a
    /// skip of its sequence number ([`Journal::is_void`],
    /// `wire::MsgKind::Skip`), so the peer gets it only if it already had
    /// it, never after the completion. [`Journal::len`] counts them until
    /// confirmed.
    pub fn fail_queued(&mut self, err: OpError) -> Vec<Completion> {
        self.transport_down();
        let mut out = Vec::new();
        let mut give_back: Option<Seq> = None;
        for mut e in std::mem::take(&mut self.entries) {
            if !e.orphan {
                let outcome = self.final_outcome(&e, err);
                out.push(self.complete(&e, outcome));
                if !e.kind.is_message() {
                    continue;
                }
                if e.posts == 0 {
                    self.payload_bytes -= e.kind.payload_len();
                    give_back.get_or_insert(e.seq);
                    continue;
                }
                e.orphan = true;
                if !matches!(e.kind, OpKind::Message { .. }) {
                    // Its completion hands the memory back to the
                    // application, which may change it from now on: what
                    // stays is the sequence number, replayed as a skip.
                    e.make_void();
                }
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

    /// The outcome of an unfinished entry when relink stops trying.
    pub(super) fn final_outcome(&self, e: &Entry, err: OpError) -> Outcome {
        if e.posts == 0 {
            return Outcome::Failed(err);
        }
        let proven = e.id < self.proven_below;
        match e.kind {
            OpKind::Message { .. } | OpKind::MessageFrom { .. } | OpKind::WriteImm { .. }
                if e.seq <= self.confirmed =>
            {
                Outcome::Success {
                    replayed: e.replayed(),
                }
            }
            OpKind::Message { .. } | OpKind::MessageFrom { .. } | OpKind::WriteImm { .. } => {
                Outcome::Indeterminate { executed: None }
            }
            OpKind::Write { .. } if proven => Outcome::Success {
                replayed: e.replayed(),
            },
            OpKind::Write { .. } | OpKind::Read { .. } => Outcome::Failed(err),
            OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => Outcome::Indeterminate {
                executed: proven.then_some(true),
            },
            // Never posted: the early return above.
            OpKind::Flush => Outcome::Failed(err),
        }
    }
}
