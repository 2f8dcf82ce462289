//! The transports off their session, and the moves that take them there.
//!
//! A session's current transport and its standby live in its entry
//! (`SessionEntry::transport`, `SessionEntry::standby`; a promotion swaps
//! them, `standby.rs`). A transport that leaves its session goes one of
//! three ways, each detaching it from the node's indexes at once (its CM
//! id and CQ reach nobody any more):
//!
//! - **destroyed now** ([`destroy`]): a transport replaced by a new
//!   attempt, a torn-down standby, a reaped session's;
//! - **retiring** ([`Transports::give_up`]): one given up (lost, or
//!   replaced by a promoted standby) is destroyed at the end of the next
//!   poll round; one a promoted standby replaced is held
//!   ([`Transports::hold`]) until its session completed an operation on
//!   the standby, or [`RETIRE_HOLD`] later. Destroying a QP, its CQ and
//!   registrations takes milliseconds on a live device; what a loss's
//!   round posts and what the peer answers in the round after are handled
//!   first, and a switch to the standby — the two `Promote`s, the resync,
//!   the replay — before any of it;
//! - **closing** (`closing.rs`): a closed session's transport waits for
//!   its goodbye to leave, then is disconnected and destroyed.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use relink_core::SessionId;
use relink_fabric::{Provider, Timestamp};

use super::destroy::log_destroy;
use super::index::{Index, TimerEntry};
use super::transport::{SessionMemory, Transport};
use super::wr::Pending;

/// How long a transport a promoted standby replaced may wait for its
/// session's first completion on the standby before it is destroyed
/// anyway ([`Transports::hold`]): a switch takes well under it
/// (16 ms on rxe under TCG), and a device being deleted waits no longer
/// than that for the objects on it.
pub(crate) const RETIRE_HOLD: Duration = Duration::from_millis(100);

/// Detach transport `t` from the indexes and destroy its objects now
/// (destroy calls only: after a device loss they report "already
/// released").
pub(super) fn destroy(p: &dyn Provider, mut t: Transport, index: &mut Index) {
    index.detached(&t);
    t.tear_down(p);
}

/// A transport given up and detached, waiting to be destroyed.
pub(super) struct Retiring {
    /// Its session.
    pub handle: u64,
    /// The poll round it was given up in.
    round: u64,
    /// For a transport a promoted standby replaced: destroyed once its
    /// session's recovery timeline is complete, or at this time.
    hold: Option<Timestamp>,
    /// The loss it was given up for (its session's `RecoveryTimeline::lost`),
    /// if it was connected: destroying it records `released` there.
    pub lost: Option<Timestamp>,
    pub transport: Transport,
}

/// A closed session's transport whose goodbye has not left yet
/// (`closing.rs`).
pub(super) struct Closing {
    /// The session it carried (for logs).
    pub session: SessionId,
    pub transport: Transport,
    /// Requests queued before the disconnect and not posted yet (the
    /// goodbye among them, when the send slots were all taken).
    pub backlog: VecDeque<Pending>,
    /// The session's memory: the transport's registrations cover it.
    pub memory: SessionMemory,
    /// Bytes per send slot.
    pub slot_size: u32,
    /// Its place in the timer index: when the goodbye is given up on.
    pub timer: TimerEntry,
}

/// The transports off their session (see the module docs).
pub(super) struct Transports {
    /// Transports given up and detached, in the order of the poll rounds
    /// they were given up in.
    retiring: Vec<Retiring>,
    /// Closed sessions' transports whose goodbye has not left yet
    /// (`closing.rs`), by a handle of the sessions' series (their CQ and
    /// timer are indexed under it).
    pub(super) closing: BTreeMap<u64, Closing>,
    /// How long a closing transport waits for its goodbye.
    pub(super) goodbye_timeout: Duration,
    /// The sessions whose closing transport was destroyed since the node
    /// last took them ([`take_quiesced`](Self::take_quiesced)).
    pub(super) quiesced: Vec<relink_core::SessionId>,
}

impl Transports {
    /// None yet; a closing transport waits `goodbye_timeout`.
    pub fn new(goodbye_timeout: Duration) -> Transports {
        Transports {
            retiring: Vec::new(),
            closing: BTreeMap::new(),
            goodbye_timeout,
            quiesced: Vec::new(),
        }
    }

    /// The sessions whose closing transport was destroyed since the last
    /// call: nothing of theirs reaches the application's memory any more.
    pub fn take_quiesced(&mut self) -> Vec<relink_core::SessionId> {
        std::mem::take(&mut self.quiesced)
    }

    /// Whether a session's closing transport was destroyed since the node
    /// last took them ([`take_quiesced`](Self::take_quiesced)).
    #[inline]
    pub fn has_quiesced(&self) -> bool {
        !self.quiesced.is_empty()
    }

    /// Whether any transport given up waits for destruction
    /// ([`take_due`](Self::take_due)).
    #[inline]
    pub fn has_retiring(&self) -> bool {
        !self.retiring.is_empty()
    }

    /// Session `handle` gives up transport `t` in poll round `round` (for the
    /// loss at `lost`, if it was connected): detached now, destroyed at
    /// the end of the next round ([`take_due`](Self::take_due)).
    pub fn give_up(
        &mut self,
        handle: u64,
        t: Transport,
        round: u64,
        lost: Option<Timestamp>,
        index: &mut Index,
    ) {
        index.detached(&t);
        self.retiring.push(Retiring {
            handle,
            round,
            hold: None,
            lost,
            transport: t,
        });
    }

    /// Registration `id` is gone from the node (`Node::deregister`): the
    /// transports off their session deregister it too, and a closing one
    /// drops what it still had to post from it (those operations
    /// completed when their session closed), so nothing reaches the
    /// memory through them any more.
    pub fn deregister(&mut self, p: &dyn Provider, id: relink_core::RegionId) {
        for r in &mut self.retiring {
            if let Some(mr) = r.transport.region_mrs.remove(&id) {
                log_destroy("MR", p.dereg_mr(mr.id));
            }
        }
        for c in self.closing.values_mut() {
            if let Some(mr) = c.transport.region_mrs.remove(&id) {
                c.backlog
                    .retain(|w| !matches!(w, Pending::OneSided { sgl, .. } if sgl.iter().any(|s| s.lkey == mr.lkey)));
                log_destroy("MR", p.dereg_mr(mr.id));
            }
            c.memory.regions.remove(&id);
        }
    }

    /// Hold session `handle`'s transports given up so far — the one a
    /// promotion replaces — until the switch is over, or `by` at the
    /// latest.
    pub fn hold(&mut self, handle: u64, by: Timestamp) {
        for r in self.retiring.iter_mut().filter(|r| r.handle == handle) {
            r.hold.get_or_insert(by);
        }
    }

    /// When a round is next needed to destroy a retiring transport: at
    /// once (`Timestamp(0)`) for one that waits for the next round, at
    /// its hold for one held; `None` if none retires.
    #[inline]
    pub fn next_release(&self) -> Option<Timestamp> {
        self.retiring
            .iter()
            .map(|r| r.hold.unwrap_or(Timestamp(0)))
            .min()
    }

    /// Take out the retiring transports due for destruction (`all`: every
    /// one) in round `round` at `now`: given up before this round and
    /// not held, or held past their hold or until `switched(handle)` says
    /// their session's switch is over. `None` if none is due.
    pub fn take_due(
        &mut self,
        all: bool,
        round: u64,
        now: Timestamp,
        switched: impl Fn(u64) -> bool,
    ) -> Option<Vec<Retiring>> {
        if self.retiring.is_empty() {
            return None;
        }
        let due = |r: &Retiring| {
            all || (r.round < round && r.hold.is_none_or(|by| by <= now || switched(r.handle)))
        };
        if !self.retiring.iter().any(due) {
            return None;
        }
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retiring)
            .into_iter()
            .partition(due);
        self.retiring = kept;
        Some(gone)
    }

    /// How many closing transports there are.
    pub fn closing_count(&self) -> usize {
        self.closing.len()
    }

    /// Whether `handle` names a closing transport.
    #[inline]
    pub fn is_closing(&self, handle: u64) -> bool {
        self.closing.contains_key(&handle)
    }
}
