//! The node-wide indexes of its sessions, kept in step in one place.
//!
//! A poll round must visit only the sessions that have something to do,
//! and a CM event or a CQ's signal must find its owner without a scan. So
//! the node keeps, beside its table of sessions, who owns each CM id and
//! each CQ, which CQs may hold completions, which sessions have work
//! requests queued, every session's next timer (an ordered set), which
//! sessions have output for the application, and which ended and wait to
//! be reaped. [`Index`] owns all of them. Its callers say what happened —
//! "session K's next timer is T", "this transport belongs to K", "the
//! transport is detached", "K ended", "K is reaped" — and it moves every
//! entry concerned, so no caller keeps two maps in step by hand.
//!
//! The handles are the node's one series: sessions, and closed sessions'
//! transports waiting for their goodbye (`closing.rs`), which have a CQ,
//! a CM id and a timer of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use relink_core::Epoch;
use relink_fabric::{CmId, CqId, Timestamp};

use super::handles::{HandleSet, ReadyQueue};
use super::transport::Transport;

/// Where a session's CM id is in its connection: an initiator resolves the
/// address, then the route, then connects; a target accepts; both end up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Initiator: waiting for `AddrResolved`.
    Resolving,
    /// Initiator: waiting for `RouteResolved`; then it builds the
    /// transport and connects.
    Routing,
    /// Initiator: connected, waiting for `Established`.
    Connecting,
    /// Target: accepted, waiting for `Established`.
    Accepting,
    /// Established: a loss is reported as the transport going down.
    Up,
}

/// What a CM id of the node belongs to.
#[derive(Debug, Clone, Copy)]
pub(super) enum CmOwner {
    /// A session's attempt of epoch `epoch`.
    Session {
        /// The session's handle.
        handle: u64,
        /// The attempt's epoch.
        epoch: Epoch,
        /// Where the attempt is.
        phase: Phase,
    },
    /// A listener (its handle).
    Listener(u64),
    /// A connect request not yet accepted or rejected.
    Pending,
    /// A closed session's transport waiting for its goodbye to leave (its
    /// handle in the closing transports, `closing.rs`).
    Closing(u64),
}

/// A handle's place in the ordered set of timers, kept by the handle's owner (a
/// session's entry, a closing transport) so that moving it needs no
/// lookup. Only [`Index`] changes it.
#[derive(Debug, Default)]
pub(super) struct TimerEntry(Option<Timestamp>);

/// The node-wide indexes (see the module docs).
pub(super) struct Index {
    /// Which session (or closing transport) a CM id belongs to.
    cm: BTreeMap<CmId, CmOwner>,
    /// Which session (or closing transport) a CQ belongs to (for
    /// `CqReady`).
    cq_owner: BTreeMap<CqId, u64>,
    /// Handles whose CQ may hold completions.
    dirty: HandleSet,
    /// Sessions with work requests waiting to be posted.
    queued: HandleSet,
    /// The set a poll round works through while `dirty` or `queued`
    /// collect for the next round (swapped, so neither is reallocated).
    round: HandleSet,
    /// Every handle's next timer, ordered: a round visits only the due ones.
    deadlines: BTreeSet<(Timestamp, u64)>,
    /// Handles whose timer is due, collected by a round.
    due: Vec<u64>,
    /// Sessions that have output, for `Node::poll_output`.
    ready: ReadyQueue,
    /// Sessions that ended (closed or failed) and when: each is reaped once
    /// drained, or `linger` after it ended.
    ended: BTreeMap<u64, Timestamp>,
    /// Ended sessions whose outputs the application took since the last
    /// round: the round reaps those now drained.
    reap_check: BTreeSet<u64>,
    /// How long an ended session that is not drained is kept.
    linger: Duration,
}

/// How many entries the indexes hold (`Node::footprint`).
pub(super) struct IndexCounts {
    pub cm_ids: usize,
    pub cqs: usize,
    pub deadlines: usize,
    pub ended: usize,
    pub ready: usize,
}

impl Index {
    /// Empty indexes; an ended session lingers `linger`.
    pub fn new(linger: Duration) -> Index {
        Index {
            cm: BTreeMap::new(),
            cq_owner: BTreeMap::new(),
            dirty: HandleSet::default(),
            queued: HandleSet::default(),
            round: HandleSet::default(),
            deadlines: BTreeSet::new(),
            due: Vec::new(),
            ready: ReadyQueue::default(),
            ended: BTreeMap::new(),
            reap_check: BTreeSet::new(),
            linger,
        }
    }

    // --- CM ids ---

    /// What CM id `id` belongs to.
    #[inline]
    pub fn cm_owner(&self, id: CmId) -> Option<CmOwner> {
        self.cm.get(&id).copied()
    }

    /// CM id `id` belongs to `owner` (from now on, or now in a new phase).
    pub fn cm_belongs(&mut self, id: CmId, owner: CmOwner) {
        self.cm.insert(id, owner);
    }

    /// Session `handle`'s attempt of `epoch` on CM id `id` moved on to
    /// `phase`.
    #[inline]
    pub fn cm_phase(&mut self, id: CmId, handle: u64, epoch: Epoch, phase: Phase) {
        self.cm.insert(
            id,
            CmOwner::Session {
                handle,
                epoch,
                phase,
            },
        );
    }

    /// CM id `id` is destroyed (or handed to nobody).
    pub fn cm_gone(&mut self, id: CmId) {
        self.cm.remove(&id);
    }

    // --- CQs and transports ---

    /// Which handle (a session or closing transport) CQ `cq` belongs to.
    #[inline]
    pub fn cq_owner(&self, cq: CqId) -> Option<u64> {
        self.cq_owner.get(&cq).copied()
    }

    /// Session `handle`'s transport `t` may have a CQ built since it was last
    /// looked at: file it under `handle` (once per transport), and if `poll`,
    /// look at it in the next round (which arms it). Nothing if it has no
    /// CQ yet or is filed already.
    #[inline]
    pub fn cq_built(&mut self, handle: u64, t: &mut Transport, poll: bool) {
        if t.cq_indexed {
            return;
        }
        if let Some(cq) = t.cq {
            t.cq_indexed = true;
            self.cq_owner.insert(cq, handle);
            if poll {
                self.dirty.insert(handle);
            }
        }
    }

    /// Transport `t` moved to closing transport `handle`: its CM id and CQ are
    /// filed under `handle`, and its CQ is looked at in the next round.
    pub fn closing_began(&mut self, handle: u64, t: &Transport) {
        if let Some(cm) = t.cm {
            self.cm.insert(cm, CmOwner::Closing(handle));
        }
        if let Some(cq) = t.cq {
            self.cq_owner.insert(cq, handle);
        }
        self.dirty.insert(handle);
    }

    /// Transport `t` is detached from whatever owned it: nothing that comes
    /// from its CM id or CQ reaches anyone any more.
    pub fn detached(&mut self, t: &Transport) {
        if let Some(id) = t.cm {
            self.cm.remove(&id);
        }
        if let Some(cq) = t.cq {
            self.cq_owner.remove(&cq);
        }
    }

    /// The CQ of `handle` may hold completions: the next round looks at it.
    #[inline]
    pub fn cq_signalled(&mut self, handle: u64) {
        self.dirty.insert(handle);
    }

    // --- queued work ---

    /// Session `handle` has work requests queued: the next round posts them.
    #[inline]
    pub fn work_queued(&mut self, handle: u64) {
        self.queued.insert(handle);
    }

    /// Session `handle`'s queue was emptied outside a round.
    #[inline]
    pub fn work_posted(&mut self, handle: u64) {
        self.queued.remove(&handle);
    }

    // --- a poll round's sets ---

    /// Begin working through the handles whose CQ may hold completions
    /// ([`round_handle`](Self::round_handle)); the ones signalled from now on
    /// are for the next round.
    #[inline]
    pub fn begin_cq_round(&mut self) {
        std::mem::swap(&mut self.dirty, &mut self.round);
        self.round.sort();
    }

    /// Begin working through the sessions with queued work. `false` when
    /// there are none (nothing to begin or end).
    #[inline]
    pub fn begin_post_round(&mut self) -> bool {
        if self.queued.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.queued, &mut self.round);
        self.round.sort();
        true
    }

    /// The `i`th handle of the set being worked through, in ascending order.
    #[inline]
    pub fn round_handle(&self, i: usize) -> Option<u64> {
        self.round.get(i)
    }

    /// Done with the set being worked through.
    #[inline]
    pub fn end_round(&mut self) {
        self.round.clear();
    }

    /// Collect the handles whose timer is due at `now`
    /// ([`due_handle`](Self::due_handle)), in timer order.
    #[inline]
    pub fn collect_due(&mut self, now: Timestamp) {
        self.due.clear();
        if self.deadlines.first().is_none_or(|(t, _)| *t > now) {
            return;
        }
        self.due.extend(
            self.deadlines
                .iter()
                .take_while(|(t, _)| *t <= now)
                .map(|(_, h)| *h),
        );
    }

    /// The `i`th handle [`collect_due`](Self::collect_due) found.
    #[inline]
    pub fn due_handle(&self, i: usize) -> Option<u64> {
        self.due.get(i).copied()
    }

    // --- timers ---

    /// The earliest timer of any handle.
    #[inline]
    pub fn next_timer(&self) -> Option<Timestamp> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// The next timer of `handle` is `at` (none: `None`); `entry` is its
    /// place, kept by its owner.
    #[inline]
    pub fn set_timer(&mut self, handle: u64, entry: &mut TimerEntry, at: Option<Timestamp>) {
        if entry.0 == at {
            return;
        }
        if let Some(old) = entry.0.take() {
            self.deadlines.remove(&(old, handle));
        }
        if let Some(t) = at {
            entry.0 = Some(t);
            self.deadlines.insert((t, handle));
        }
    }

    /// Session `handle`'s core wants its next timeout at `core` (none:
    /// `None`): that is its timer, or the end of its linger if it ended
    /// and that comes first.
    #[inline]
    pub fn session_timer(&mut self, handle: u64, entry: &mut TimerEntry, core: Option<Timestamp>) {
        let mut next = core;
        if let Some(at) = self.ended.get(&handle) {
            let reap = *at + self.linger;
            next = Some(next.map_or(reap, |n| n.min(reap)));
        }
        self.set_timer(handle, entry, next);
    }

    // --- output and the end of sessions ---

    /// Session `handle` has output for the application.
    #[inline]
    pub fn has_output(&mut self, handle: u64) {
        self.ready.push(handle);
    }

    /// The session whose output `Node::poll_output` serves next; it
    /// leaves the queue ([`has_output`](Self::has_output) again if it has
    /// more).
    #[inline]
    pub fn next_ready(&mut self) -> Option<u64> {
        self.ready.pop()
    }

    /// Session `handle` ended at `now` (closed or failed), if it had not
    /// already: it is reaped once drained, or at the end of its linger.
    #[inline]
    pub fn session_ended(&mut self, handle: u64, now: Timestamp) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.ended.entry(handle) {
            e.insert(now);
            self.reap_check.insert(handle);
        }
    }

    /// Whether session `handle` ended.
    #[inline]
    pub fn has_ended(&self, handle: u64) -> bool {
        self.ended.contains_key(&handle)
    }

    /// Whether session `handle` ended and its linger ran out at `now`.
    #[inline]
    pub fn linger_over(&self, handle: u64, now: Timestamp) -> bool {
        self.ended
            .get(&handle)
            .is_some_and(|at| *at + self.linger <= now)
    }

    /// How long an ended session that is not drained is kept, from now on.
    pub fn set_linger(&mut self, linger: Duration) {
        self.linger = linger;
    }

    /// The application took outputs of session `handle`, which has output
    /// left (`more`) or not: an ended one may now be drained (looked at
    /// in the next round), one with none left leaves the ready queue.
    #[inline]
    pub fn output_taken(&mut self, handle: u64, more: bool) {
        if self.ended.contains_key(&handle) {
            self.reap_check.insert(handle);
        }
        if !more {
            self.ready.remove(handle);
        }
    }

    /// The next ended session to check for being drained, taken out of the
    /// set of those.
    #[inline]
    pub fn next_to_check(&mut self) -> Option<u64> {
        if self.reap_check.is_empty() {
            // The common case, every round: no tree walk.
            return None;
        }
        self.reap_check.pop_first()
    }

    /// Session `handle` is reaped: every entry of it goes (its transports are
    /// detached by whoever destroys them).
    pub fn session_reaped(&mut self, handle: u64, timer: &mut TimerEntry) {
        self.ended.remove(&handle);
        self.reap_check.remove(&handle);
        self.set_timer(handle, timer, None);
        self.dirty.remove(&handle);
        self.queued.remove(&handle);
        self.ready.remove(handle);
    }

    /// Closing transport `handle` ended: its timer and CQ mark go (its
    /// transport is detached by whoever destroys it).
    pub fn closing_ended(&mut self, handle: u64, timer: &mut TimerEntry) {
        self.set_timer(handle, timer, None);
        self.dirty.remove(&handle);
    }

    /// How many entries the indexes hold.
    pub fn counts(&self) -> IndexCounts {
        IndexCounts {
            cm_ids: self.cm.len(),
            cqs: self.cq_owner.len(),
            deadlines: self.deadlines.len(),
            ended: self.ended.len(),
            ready: self.ready.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_moves_and_goes_with_its_session() {
        let mut ix = Index::new(Duration::from_secs(60));
        let (mut a, mut b) = (TimerEntry::default(), TimerEntry::default());
        ix.set_timer(1, &mut a, Some(Timestamp(30)));
        ix.set_timer(2, &mut b, Some(Timestamp(20)));
        assert_eq!(ix.next_timer(), Some(Timestamp(20)));
        ix.set_timer(2, &mut b, Some(Timestamp(40)));
        assert_eq!(ix.next_timer(), Some(Timestamp(30)));
        ix.collect_due(Timestamp(35));
        assert_eq!((ix.due_handle(0), ix.due_handle(1)), (Some(1), None));
        ix.session_reaped(1, &mut a);
        ix.closing_ended(2, &mut b);
        assert_eq!(ix.next_timer(), None);
        assert_eq!(ix.counts().deadlines, 0);
    }

    #[test]
    fn an_ended_session_is_due_at_the_end_of_its_linger() {
        let mut ix = Index::new(Duration::from_nanos(100));
        let mut t = TimerEntry::default();
        ix.session_timer(1, &mut t, Some(Timestamp(500)));
        assert_eq!(ix.next_timer(), Some(Timestamp(500)));
        ix.session_ended(1, Timestamp(10));
        ix.session_ended(1, Timestamp(20)); // the first end counts
        ix.session_timer(1, &mut t, Some(Timestamp(500)));
        assert_eq!(ix.next_timer(), Some(Timestamp(110)));
        assert!(ix.linger_over(1, Timestamp(110)));
        assert_eq!(ix.next_to_check(), Some(1));
        ix.output_taken(1, false);
        assert_eq!(ix.next_to_check(), Some(1), "taken output: checked again");
        ix.session_reaped(1, &mut t);
        assert_eq!(ix.counts().ended, 0);
    }
}
