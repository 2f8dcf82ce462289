//! A session's entry in the node's table ([`SessionEntry`]): its core and
//! what the node keeps for it — memory, transports, queued work, the
//! current attempt, its place in the timer index. A session's own work
//! (queue its core's work requests, build or promote its standby, index
//! what it waits for next) is done by methods of its entry, handed the
//! node's parts they need, so it never looks itself up again by handle.

use std::collections::VecDeque;
use std::sync::Arc;

use relink_core::resources::SessionSpec;
use relink_core::session::{Path, Session};
use relink_core::state::State;
use relink_fabric::{Memory, Provider, Timestamp};

use super::index::{Index, TimerEntry};
use super::options::SessionOptions;
use super::posted_receives::PostedReceives;
use super::rendezvous::Fetching;
use super::shared_receive::Reservation;
use super::timeline::RecoveryTimeline;
use super::transport::{SessionMemory, Transport};
use super::wr::Pending;

/// A session's state in the node: its core and what the node keeps for it.
pub(super) struct SessionEntry {
    pub core: Session,
    pub opts: SessionOptions,
    pub spec: SessionSpec,
    /// Allocated once (or the application's), registered on every
    /// transport.
    pub memory: SessionMemory,
    /// The current epoch's provider objects; `None` between a teardown and
    /// the next attempt.
    pub transport: Option<Transport>,
    /// Work requests waiting to be posted, in order (sends also wait for
    /// a free send slot).
    pub backlog: VecDeque<Pending>,
    /// Pending connect private data of the current attempt.
    pub connect_data: Vec<u8>,
    /// The path of the current attempt (initiator only).
    pub path: Option<Path>,
    /// The session's place in the node's timer index.
    pub timer: TimerEntry,
    /// Its share of its shared receive queue, if it is on one (its
    /// transports hold it too).
    pub shared: Option<Arc<Reservation>>,
    /// The phases of its last outage.
    pub timeline: Option<RecoveryTimeline>,
    /// The standby transport (`Policy::standby`), being made or idle;
    /// promoted to `transport` by the core's `Action::Promote`.
    /// Boxed: a session without a standby pays a pointer, not a transport.
    pub standby: Option<Box<Transport>>,
    /// Connect private data and path of the standby being made.
    pub standby_connect: (Vec<u8>, Option<Path>),
    /// The standby's CQ signalled: look at it in the next poll round (a
    /// completion there means the peer promoted it).
    pub standby_ready: bool,
    /// Buffers the application posted for its messages, and the receives
    /// that ended (`posted_receives.rs`).
    pub posted: PostedReceives,
    /// The session closed with requests still in flight on its transport,
    /// now a closing one (`closing.rs`): until that transport is
    /// destroyed its device may still read or write the application's
    /// memory of operations the close completed (a message from
    /// registered memory, a WRITE's source, a READ's destination). So
    /// those completions — and the events after them — wait until then;
    /// the memory is the application's again only once they come.
    pub quiescing: bool,
    /// The READ of a message the peer left to read, under way
    /// (`rendezvous.rs`).
    pub fetching: Option<Fetching>,
}

impl SessionEntry {
    /// The entry of a new session: no transport yet, nothing queued.
    pub fn new(
        core: Session,
        opts: SessionOptions,
        spec: SessionSpec,
        memory: SessionMemory,
        shared: Option<Arc<Reservation>>,
    ) -> SessionEntry {
        SessionEntry {
            core,
            opts,
            spec,
            memory,
            transport: None,
            backlog: VecDeque::new(),
            connect_data: Vec::new(),
            path: None,
            timer: TimerEntry::default(),
            shared,
            timeline: None,
            standby: None,
            standby_connect: (Vec::new(), None),
            standby_ready: false,
            posted: PostedReceives::default(),
            quiescing: false,
            fetching: None,
        }
    }

    /// Bytes of the session's memory relink allocated: its send and
    /// receive slots and the regions that are not the application's.
    pub fn own_memory_bytes(&self) -> usize {
        let regions: usize = self
            .opts
            .regions
            .iter()
            .filter(|r| r.memory.is_none())
            .filter_map(|r| self.memory.regions.get(&r.id))
            .map(Memory::len)
            .sum();
        let alt = self.memory.recv_alt.as_ref().map_or(0, Memory::len);
        self.memory.send.len() + self.memory.recv.len() + alt + regions
    }

    /// Whether the session left nothing behind in itself: every output
    /// taken, no transport, nothing queued.
    pub fn all_taken(&self) -> bool {
        self.core.all_taken()
            && self.posted.is_empty()
            && self.transport.is_none()
            && self.standby.is_none()
            && self.backlog.is_empty()
    }

    /// Whether the application has output of the session to take: its
    /// core's (only deliveries while it is `quiescing`), or an ended
    /// posted receive.
    pub fn has_output(&self) -> bool {
        let core = if self.quiescing {
            self.core.has_deliveries()
        } else {
            self.core.has_output()
        };
        core || self.posted.has_output()
    }

    /// Destroy the session's transports (current and standby) now, and
    /// forget what is queued for them.
    pub fn destroy_transports(&mut self, p: &dyn Provider, index: &mut Index) {
        for t in [self.transport.take(), self.standby.take().map(|t| *t)]
            .into_iter()
            .flatten()
        {
            index.detached(&t);
            let mut t = t;
            t.tear_down(p);
        }
        self.standby_ready = false;
        self.backlog.clear();
    }

    /// The session gives up transport `t` at `now`: a connected one
    /// begins its new outage in its recovery timeline. Returns the loss's
    /// time, if it was connected (for `Transports::give_up`).
    pub fn outage_begins(&mut self, t: &Transport, now: Timestamp) -> Option<Timestamp> {
        let lost = t.connected.then_some(now);
        if let Some(at) = lost {
            self.timeline = Some(RecoveryTimeline::new(at));
        }
        lost
    }

    /// After the core of session `handle` ran: index what it now
    /// waits for — a CQ built since (polled at once; a standby's is armed
    /// once it is connected), queued work, output for the application, its
    /// end, its next timer — and note an outage's end in its timeline.
    #[inline]
    pub fn index_what_it_waits_for(&mut self, handle: u64, index: &mut Index, p: &dyn Provider) {
        if let Some(tl) = self.timeline.as_mut().filter(|tl| !tl.complete()) {
            if self.core.state() == State::Established {
                tl.established(p.now(), self.core.counters().completed);
            }
        }
        if let Some(t) = self.transport.as_mut() {
            index.cq_built(handle, t, true);
        }
        if let Some(t) = self.standby.as_mut() {
            index.cq_built(handle, t, false);
        }
        if self.fetch_pending() {
            self.pump_fetch(p.now());
        }
        if !self.backlog.is_empty() {
            index.work_queued(handle);
        }
        if self.core.state().is_terminal() {
            // Its buffers are the application's again.
            self.posted.flush();
        }
        if self.has_output() {
            index.has_output(handle);
        }
        // An ended session is reaped once its outputs are taken (`poll`), or when its
        // linger runs out: that is its last deadline.
        // (The clock is read only then: this runs after every input.)
        if self.core.state().is_terminal() && !index.has_ended(handle) {
            index.session_ended(handle, p.now());
        }
        index.session_timer(handle, &mut self.timer, self.core.poll_timeout());
    }
}
