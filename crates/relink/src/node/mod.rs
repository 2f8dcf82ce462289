//! The driver: a [`Node`] runs relink-core sessions on a provider.
//!
//! A session's core (`relink_core::session::Session`) decides what to do;
//! the node carries its actions out on the provider and hands it what the
//! provider reports (CM events, completions, device events, timeouts).
//! Everything is single-threaded and driven by [`Node::poll`].
//!
//! | file | its one concern |
//! |---|---|
//! | `mod.rs` | the node's tables ([`Node`], a session's `Slot`), how a session's slot is made and how an ended one is reaped |
//! | `options.rs` | what the application hands in and gets back: handles, session options and their builder, a session's snapshot, the footprint |
//! | `regions.rs` | region options (relink's memory or the application's, shared among sessions), their checks, a new session's memory |
//! | `error.rs` | the errors of the node's calls, one type per family of calls |
//! | `api.rs` | the application's calls: connect, listen, submit operations, take one session's completions, deliveries and events, close |
//! | `planned.rs` | planned outages: suspend a session, drain a device (sessions moved off it before it goes) |
//! | `closing.rs` | the two phases of a goodbye: a closed session's transport is disconnected once its goodbye has left (or at a bound) |
//! | `shutdown.rs` | how sessions and nodes end: the graceful close, `shutdown`, `abort`, and what dropping a node does |
//! | `output.rs` | node-wide outputs: `accept` (with listener, addresses, connect data) and `poll_output` (every session's, from a ready queue) |
//! | `poll.rs` | the poll loop (provider events, dirty CQs, due timers, queued work, reaping, in that order) and provider events |
//! | `wait.rs` | sleeping between poll rounds: `wait` (until something happens), `event_fd` (for the application's event loop), `run_until` |
//! | `cm.rs` | connection management: who owns a CM id, where a session's attempt is, listeners, connect requests |
//! | `actions.rs` | performing a core's actions against the provider, and indexing what the session waits for next |
//! | `probes.rs` | one probe per silent peer address: the session that probes it, the others' probes held until it is answered |
//! | `backlog.rs` | work requests a core asks for: queued per session, posted in batches, every 16th signaled |
//! | `completions.rs` | draining a session's CQ: send completions retired in RC order, receives copied out and reposted |
//! | `transport.rs` | one epoch's provider objects, built from the core's plan and torn down with destroy calls only |
//! | `standby.rs` | a session's standby transport: built next to the current one, its CM events, the peer's promotion seen in its CQ, the swap on the core's promotion |
//! | `wr.rs` | the `wr_id` encoding and `WrBatch`, the work requests reused from one post to the next |
//! | `shared_receive.rs` | shared receive queues: their options, the sessions' reservations (the credit rule), one SRQ per device context in use |
//! | `timeline.rs` | the phases of a session's last outage, as the node drives it |
//! | `windows.rs` | type 2 memory windows of regions: allocated with a transport, bound before the advertisement, invalidated at a close, freed at the teardown |

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::OsRng;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use relink_core::resources::SessionSpec;
use relink_core::session::{Path, Session};
use relink_core::{Incarnation, SessionId};
use relink_fabric::{CmId, CqId, Memory, Provider, RecvWr, SendWr, Timestamp, WorkCompletion};

mod actions;
mod api;
mod backlog;
mod closing;
mod cm;
mod completions;
mod decision;
mod error;
mod keys;
mod options;
mod output;
mod planned;
mod poll;
mod probes;
mod regions;
mod shared_receive;
mod shutdown;
mod standby;
mod timeline;
mod transport;
mod wait;
mod windows;
mod wr;

pub use error::{
    CloseError, ConnectError, ListenError, OptionsError, RegionError, ResumeError, SetPolicyError,
    SharedReceiveError, SubmitError, SuspendError,
};
pub use options::{
    Footprint, ListenerHandle, SessionHandle, SessionInfo, SessionOptions, SessionOptionsBuilder,
};
pub use output::{Accepted, Output};
pub use planned::DrainReport;
pub use regions::RegionOptions;
pub use shared_receive::{
    SharedReceiveHandle, SharedReceiveOptions, SharedReceiveOptionsBuilder, SharedReceiveUsage,
};
pub use shutdown::ShutdownSummary;
pub use timeline::RecoveryTimeline;

use actions::retire_transport;
use backlog::Pending;
use closing::Closing;
use cm::CmOwner;
use keys::KeySet;
use output::ReadyQueue;
use shared_receive::{Reservation, SlotError};
use transport::{SessionMemory, Transport};
use wr::WrBatch;

/// A session's state in the node: its core and what the node keeps for it.
struct Slot {
    core: Session,
    opts: SessionOptions,
    spec: SessionSpec,
    /// Allocated once (or the application's), registered on every
    /// transport.
    memory: SessionMemory,
    /// The current epoch's provider objects; `None` between a teardown and
    /// the next attempt.
    transport: Option<Transport>,
    /// Work requests waiting to be posted, in order (sends also wait for
    /// a free slot).
    backlog: VecDeque<Pending>,
    /// Pending connect private data of the current attempt.
    connect_data: Vec<u8>,
    /// The path of the current attempt (initiator only).
    path: Option<Path>,
    /// The session's entry in the node's `deadlines`.
    deadline: Option<Timestamp>,
    /// Its share of its shared receive queue, if it is on one (its
    /// transports hold it too).
    shared: Option<Arc<Reservation>>,
    /// The phases of its last outage.
    timeline: Option<RecoveryTimeline>,
    /// The standby transport (`Policy::standby`), being made or idle;
    /// promoted to `transport` by the core's `Action::Promote`.
    /// Boxed: a session without a standby pays a pointer, not a transport.
    standby: Option<Box<Transport>>,
    /// Connect private data and path of the standby being made.
    standby_connect: (Vec<u8>, Option<Path>),
    /// The standby's CQ signalled: look at it in the next poll round (a
    /// completion there means the peer promoted it).
    standby_ready: bool,
}

impl Slot {
    /// Bytes of the session's memory relink allocated: its send and
    /// receive slots and the regions that are not the application's.
    fn own_memory_bytes(&self) -> usize {
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
}

/// A listener: its address and the options of the sessions it accepts.
struct ListenerSlot {
    addr: SocketAddr,
    /// `None` while no device owns `addr` (it listens again when one does).
    cm: Option<CmId>,
    opts: SessionOptions,
}

impl ListenerSlot {
    /// Whether `device` can carry this listener: it owns the address, or
    /// the address is the wildcard (any device).
    fn served_by(&self, device: &relink_fabric::DeviceInfo) -> bool {
        self.addr.ip().is_unspecified() || device.owns(self.addr.ip())
    }
}

/// A connect request waiting for its session's core to accept or reject.
struct PendingRequest {
    cm: CmId,
}

/// Where a node's random numbers come from: session ids, session secrets,
/// its incarnation and the seeds of the sessions' backoff jitter.
enum Randomness {
    /// The operating system's generator ([`Node::new`]).
    Os,
    /// A generator seeded by the caller ([`Node::seeded_for_simulation`]):
    /// reproducible, for simulation and tests.
    Seeded(Box<ChaCha8Rng>),
}

impl Randomness {
    fn next_u64(&mut self) -> u64 {
        match self {
            Randomness::Os => OsRng.next_u64(),
            Randomness::Seeded(r) => r.next_u64(),
        }
    }

    fn fill_bytes(&mut self, buf: &mut [u8]) {
        match self {
            Randomness::Os => OsRng.fill_bytes(buf),
            Randomness::Seeded(r) => r.fill_bytes(buf),
        }
    }
}

/// A process's relink endpoint on one provider: it owns sessions and
/// listeners and drives them. Single-threaded: sessions make progress only
/// in [`Node::poll`] and the calls that poll ([`Node::wait`],
/// [`Node::run_until`]).
///
/// # Its calls, by what they are for
///
/// | group | calls |
/// |---|---|
/// | make sessions | [`connect`](Node::connect), [`listen`](Node::listen) (then [`accept`](Node::accept)), [`close_listener`](Node::close_listener) |
/// | shared receive queues | [`create_shared_receive`](Node::create_shared_receive) (before the sessions that use it), [`remove_shared_receive`](Node::remove_shared_receive), [`shared_receive_usage`](Node::shared_receive_usage) |
/// | commands | [`send`](Node::send), [`write`](Node::write), [`read`](Node::read), [`fetch_add`](Node::fetch_add), [`cmp_swap`](Node::cmp_swap), [`submit`](Node::submit), [`close`](Node::close) |
/// | the application decides | [`resume`](Node::resume), [`resume_on`](Node::resume_on) (a session held by [`RecoveryMode::Manual`](crate::RecoveryMode::Manual)), [`set_policy`](Node::set_policy) (effective in an outage under way) |
/// | progress | [`poll`](Node::poll), [`wait`](Node::wait), [`wait_for`](Node::wait_for), [`run_until`](Node::run_until), [`run_for`](Node::run_for); for an event loop of the application's: [`event_fd`](Node::event_fd), [`next_deadline`](Node::next_deadline) |
/// | outputs (take each until `None` after progress) | [`accept`](Node::accept), [`poll_event`](Node::poll_event), [`poll_completion`](Node::poll_completion), [`poll_delivery`](Node::poll_delivery), [`poll_delivery_into`](Node::poll_delivery_into) |
/// | getters | [`state`](Node::state), [`counters`](Node::counters), [`session_info`](Node::session_info), [`options`](Node::options), [`device`](Node::device), [`region`](Node::region), [`sessions`](Node::sessions), [`listener_active`](Node::listener_active), [`footprint`](Node::footprint), [`now`](Node::now), [`provider`](Node::provider) |
///
/// Commands may be given at any time, also while a session recovers (its
/// operations are posted once it is up); outputs wait in the session until
/// taken. [`next_deadline`](Node::next_deadline) may change after every
/// command and every progress call.
///
/// # The real-time loop
///
/// A node's loop waits until something happens — [`Node::wait`] blocks
/// until something arrives, a session's timer is due or the caller's
/// deadline passes, and polls — then takes what the sessions produced,
/// and again. (An application with an event loop of its own sleeps on
/// [`Node::event_fd`] and a timer for [`Node::next_deadline`] instead.)
/// What the sessions produced is taken node-wide with
/// [`Node::poll_output`] (each output names its session), or session by
/// session with [`Node::accept`], [`Node::poll_completion`],
/// [`Node::poll_delivery`] and [`Node::poll_event`]; both take from the
/// same queues. Below, the server takes node-wide, the client from its one
/// session.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use relink::{Node, Output, Path, SessionOptions};
/// use relink_soft::SoftFabric;
///
/// // Two hosts of the in-process soft fabric, one node each.
/// let fabric = SoftFabric::new(7);
/// let (a, b) = (fabric.add_host("a"), fabric.add_host("b"));
/// fabric.add_device(&a, "soft0", "10.0.0.1/24");
/// fabric.add_device(&b, "soft0", "10.0.0.2/24");
/// let mut server = Node::new(Arc::new(b));
/// let mut client = Node::new(Arc::new(a));
/// let addr = "10.0.0.2:7471".parse()?;
/// server.listen(addr, SessionOptions::default())?;
/// let opts = SessionOptions::builder().connect_data(b"hello, I am a".to_vec()).build()?;
/// let s = client.connect(vec![Path { local: None, peer: addr }], opts)?;
/// for i in 0..3u8 {
///     client.send(s, &[i; 16])?; // sent once the session is up
/// }
///
/// // Each node's loop. A process with one node waits as long as it likes
/// // (`wait(None)`: until something happens); these two share a thread
/// // and the fabric's virtual clock, so they take turns of at most 1 ms.
/// let (mut got, mut done) = (Vec::new(), 0);
/// let give_up = server.now() + Duration::from_secs(10);
/// while got.len() < 3 || done < 3 {
///     assert!(server.now() < give_up, "not delivered");
///     if server.wait_for(Duration::from_millis(1)) {
///         // Something happened: take everything the sessions produced.
///         while let Some(out) = server.poll_output() {
///             match out {
///                 Output::Accepted(a) => assert_eq!(a.connect_data, b"hello, I am a"),
///                 Output::Delivery { payload, .. } => got.push(payload),
///                 _ => {} // events; completions of what the server sent
///             }
///         }
///     }
///     if client.wait_for(Duration::from_millis(1)) {
///         while let Some(c) = client.poll_completion(s) {
///             assert!(c.outcome.is_success()); // the server's node has it
///             done += 1;
///         }
///     }
/// }
/// assert_eq!(got, [[0u8; 16], [1; 16], [2; 16]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # What piles up, and what the application must take
///
/// A node drops nothing its sessions produce: each output waits until the
/// application takes it, and the application must take them all —
/// [`Node::poll_output`] until `None` after every poll round, or the
/// per-session calls for every session and [`Node::accept`]. Until then
/// they grow:
///
/// - accepted sessions ([`Node::accept`]): one per session a listener
///   accepts, as many as peers connect;
/// - each session's completions: one per operation submitted, so no more
///   than the application submitted and did not take;
/// - each session's deliveries: every message the peer sends. A message is
///   acknowledged to the peer (and its credit returned) once it waits
///   here, not once the application takes it, so nothing slows the peer
///   down: these grow without bound while the peer sends and the
///   application takes none;
/// - each session's events: a few per state change, more with every loss
///   and recovery.
///
/// A session that ended goes with all of it when it is reaped: once the
/// application took everything, or [linger](Node::set_linger) (60 s by
/// default) after it ended ([`Node::sessions`]). The node's own indexes
/// stay bounded by its sessions ([`Node::footprint`]): the queue of
/// sessions with output holds each at most once.
pub struct Node {
    provider: Arc<dyn Provider>,
    incarnation: Incarnation,
    rng: Randomness,
    /// The next key of a session, listener or connect request (one series
    /// for all three).
    next_key: u64,
    sessions: BTreeMap<u64, Slot>,
    by_id: BTreeMap<SessionId, u64>,
    listeners: BTreeMap<u64, ListenerSlot>,
    cm: BTreeMap<CmId, CmOwner>,
    /// Connect requests by their `RequestToken`.
    pending: BTreeMap<u64, PendingRequest>,
    /// Accepted sessions not yet taken ([`Node::accept`]).
    accepted: VecDeque<Accepted>,
    /// Sessions that have output, for [`Node::poll_output`].
    ready: ReadyQueue,
    wcs: Vec<WorkCompletion>,
    /// Which session a CQ belongs to (for `CqReady`).
    cq_owner: BTreeMap<CqId, u64>,
    /// Transports given up (lost, or replaced by a promoted standby) and
    /// detached, in the order of the poll rounds they were given up in:
    /// destroyed at the end of the next round ([`Node::release_retiring`]);
    /// one a promoted standby replaced, once the session completed an
    /// operation on the standby (or [`RETIRE_HOLD`] later). Destroying a
    /// QP, its CQ and registrations takes milliseconds on a live device;
    /// what a loss's round posts and what the peer answers in the round
    /// after are handled first, and a switch to the standby — the two
    /// `Promote`s, the resync, the replay — before any of it.
    /// [`Node::next_deadline`] is due while one waits for the next round,
    /// or at its hold.
    retiring: Vec<Retiring>,
    /// Poll rounds begun.
    rounds: u64,
    /// Sessions whose CQ may hold completions.
    dirty: KeySet,
    /// Every session's next timer, ordered: `poll` visits only the due ones.
    deadlines: BTreeSet<(Timestamp, u64)>,
    /// The one session probing each silent peer address (`probes.rs`).
    probers: BTreeMap<SocketAddr, u64>,
    /// Sessions with work requests waiting to be posted.
    pending_drain: KeySet,
    /// The set `poll` works through while `dirty` or `pending_drain`
    /// collect for the next round (swapped, so neither is reallocated).
    round: KeySet,
    /// Sessions whose timer is due, collected by `poll`.
    due: Vec<u64>,
    /// The send requests of the batch being posted.
    send_batch: WrBatch<SendWr>,
    /// The receives being reposted.
    recv_batch: WrBatch<RecvWr>,
    /// A received message, copied out of its slot.
    recv_buf: Vec<u8>,
    /// Sessions that ended (closed or failed) and when: each is reaped once
    /// drained, or `linger` after it ended.
    ended: BTreeMap<u64, Timestamp>,
    /// Ended sessions whose outputs the application took since the last
    /// poll: `poll` reaps those now drained.
    reap_check: BTreeSet<u64>,
    /// How long an ended session that is not drained is kept.
    linger: Duration,
    /// Closed sessions' transports whose goodbye has not left yet
    /// (`closing.rs`), by a key of the sessions' series (their CQ and
    /// deadline are indexed under it).
    closing: BTreeMap<u64, Closing>,
    /// How long a closing transport waits for its goodbye.
    goodbye_timeout: Duration,
    /// [`Node::shutdown`] is under way: a Hello is refused `ShuttingDown`.
    shutting_down: bool,
    /// Dropping the node says no goodbye ([`Node::abort`]).
    skip_goodbyes: bool,
    /// Devices being drained ([`Node::drain`]): every session, new ones
    /// too, avoids them.
    draining: Vec<relink_fabric::DeviceId>,
    /// Shared receive queues, by their handle's key.
    shared: BTreeMap<u64, Arc<shared_receive::SharedPool>>,
}

impl Node {
    /// A node on `provider`. Its session ids, session secrets, incarnation
    /// and jitter seeds come from the operating system's random number
    /// generator: a process restarted on the same machine is a new
    /// incarnation with new session ids, never mistaken for the old one.
    ///
    /// # Panics
    /// If the operating system has no random number generator to read.
    pub fn new(provider: Arc<dyn Provider>) -> Node {
        Node::with_randomness(provider, Randomness::Os)
    }

    /// A node whose session ids, session secrets, incarnation and jitter
    /// come from `seed`: the same seed gives the same run on the simulated
    /// fabric (`relink_sim::Sim`, tests, benches). Not for production: a
    /// process restarted with the same seed has the same incarnation and
    /// reuses its session ids (a peer then takes a new session of an old
    /// id for the one that ended), and its secrets are as guessable as the
    /// seed.
    pub fn seeded_for_simulation(provider: Arc<dyn Provider>, seed: u64) -> Node {
        let rng = ChaCha8Rng::seed_from_u64(seed);
        Node::with_randomness(provider, Randomness::Seeded(Box::new(rng)))
    }

    fn with_randomness(provider: Arc<dyn Provider>, mut rng: Randomness) -> Node {
        Node {
            provider,
            incarnation: Incarnation(rng.next_u64()),
            rng,
            next_key: 1,
            sessions: BTreeMap::new(),
            by_id: BTreeMap::new(),
            listeners: BTreeMap::new(),
            cm: BTreeMap::new(),
            pending: BTreeMap::new(),
            accepted: VecDeque::new(),
            ready: ReadyQueue::default(),
            wcs: Vec::with_capacity(64),
            cq_owner: BTreeMap::new(),
            retiring: Vec::new(),
            rounds: 0,
            dirty: KeySet::default(),
            deadlines: BTreeSet::new(),
            probers: BTreeMap::new(),
            pending_drain: KeySet::default(),
            round: KeySet::default(),
            due: Vec::new(),
            send_batch: WrBatch::default(),
            recv_batch: WrBatch::default(),
            recv_buf: Vec::new(),
            ended: BTreeMap::new(),
            reap_check: BTreeSet::new(),
            linger: Node::DEFAULT_LINGER,
            closing: BTreeMap::new(),
            goodbye_timeout: Node::DEFAULT_GOODBYE_TIMEOUT,
            shutting_down: false,
            skip_goodbyes: false,
            draining: Vec::new(),
            shared: BTreeMap::new(),
        }
    }

    /// How long a closed or failed session whose outputs the application
    /// has not all taken is kept by default: 60 s
    /// ([`set_linger`](Self::set_linger)).
    pub const DEFAULT_LINGER: Duration = Duration::from_secs(60);

    /// How long a closed or failed session is kept when the application
    /// does not take everything it produced (its completions, deliveries
    /// and events); after that it is reaped with them. A session drained
    /// of them is reaped at the next [`poll`](Self::poll) whatever the
    /// linger. See [`Node::sessions`].
    pub fn set_linger(&mut self, linger: Duration) {
        self.linger = linger;
    }

    /// How many entries the node's tables hold (for leak checks: with
    /// sessions reaped, a node that opens and closes sessions stays the
    /// same size).
    pub fn footprint(&self) -> Footprint {
        let (shared_receive_queues, shared_receive_srqs, shared_receive_memory_bytes) =
            self.shared_receive_footprint();
        Footprint {
            sessions: self.sessions.len(),
            session_ids: self.by_id.len(),
            listeners: self.listeners.len(),
            cm_ids: self.cm.len(),
            requests: self.pending.len(),
            accepted: self.accepted.len(),
            cqs: self.cq_owner.len(),
            deadlines: self.deadlines.len(),
            ended: self.ended.len(),
            ready: self.ready.len(),
            closing: self.closing.len(),
            session_memory_bytes: self.sessions.values().map(Slot::own_memory_bytes).sum(),
            shared_receive_queues,
            shared_receive_srqs,
            shared_receive_memory_bytes,
        }
    }

    /// The provider the node drives (shared: the application may use it
    /// too, e.g. for its own memory).
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The provider's clock: the time every deadline of the node is in.
    pub fn now(&self) -> Timestamp {
        self.provider.now()
    }

    fn key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    /// Note that the application took outputs of session `key`: an ended
    /// one may now be drained, and reaped at the next poll; one with no
    /// output left leaves the ready queue of [`Node::poll_output`].
    fn taken(&mut self, key: u64) {
        if self.ended.contains_key(&key) {
            self.reap_check.insert(key);
        }
        if !self.sessions.get(&key).is_some_and(|s| s.core.has_output()) {
            self.ready.remove(key);
        }
    }

    /// Whether ended session `key` left nothing behind: every output taken,
    /// its transport gone, and the application told of it (not waiting in
    /// [`Node::accept`]).
    fn drained(&self, key: u64) -> bool {
        self.sessions.get(&key).is_some_and(|s| {
            s.core.is_drained()
                && s.transport.is_none()
                && s.standby.is_none()
                && s.backlog.is_empty()
        }) && !self.accepted.iter().any(|a| a.session.0 == key)
    }

    /// Reap the ended sessions the application drained since the last
    /// poll.
    fn reap_drained(&mut self) {
        while let Some(key) = self.reap_check.pop_first() {
            if self.drained(key) {
                self.reap(key);
            }
        }
    }

    /// Forget session `key`: its slot, its memory and every index entry.
    /// Its handle is answered with a `NoSession` error (or `None`) from
    /// now on.
    fn reap(&mut self, key: u64) {
        let Some(mut slot) = self.sessions.remove(&key) else {
            return;
        };
        tracing::debug!(session = %slot.core.id(), state = %slot.core.state(), "reaped");
        self.ended.remove(&key);
        self.reap_check.remove(&key);
        let id = slot.core.id();
        if self.by_id.get(&id) == Some(&key) {
            self.by_id.remove(&id);
        }
        if let Some(d) = slot.deadline.take() {
            self.deadlines.remove(&(d, key));
        }
        for t in [slot.transport.take(), slot.standby.take().map(|t| *t)]
            .into_iter()
            .flatten()
        {
            retire_transport(&*self.provider, t, &mut self.cm, &mut self.cq_owner);
        }
        self.dirty.remove(&key);
        self.pending_drain.remove(&key);
        self.release_probes_of(key);
        self.ready.remove(key);
        self.accepted.retain(|a| a.session.0 != key);
    }

    /// Give a new core its slot (and memory); returns its key.
    fn insert_slot(&mut self, core: Session, opts: SessionOptions) -> Result<u64, SlotError> {
        let spec = core.spec().clone();
        let shared = self.reserve_shared_receive(&opts)?;
        let memory = self
            .session_memory(&opts, &spec)
            .map_err(SlotError::Memory)?;
        let key = self.key();
        let mut core = core;
        let now = self.now();
        for d in &self.draining {
            let _ = core.drain_device(d, now);
        }
        self.by_id.insert(core.id(), key);
        self.sessions.insert(
            key,
            Slot {
                core,
                opts,
                spec,
                memory,
                transport: None,
                backlog: VecDeque::new(),
                connect_data: Vec::new(),
                path: None,
                deadline: None,
                shared,
                timeline: None,
                standby: None,
                standby_connect: (Vec::new(), None),
                standby_ready: false,
            },
        );
        Ok(key)
    }
}

/// How long a transport a promoted standby replaced may wait for its
/// session's first completion on the standby before it is destroyed
/// anyway (`Node::hold_retiring`): a switch takes well under it
/// (16 ms on rxe under TCG), and a device being deleted waits no longer
/// than that for the objects on it.
pub(crate) const RETIRE_HOLD: Duration = Duration::from_millis(100);

/// A transport given up and detached, waiting to be destroyed
/// (`Node::retiring`).
struct Retiring {
    /// Its session.
    key: u64,
    /// The poll round it was given up in.
    round: u64,
    /// For a transport a promoted standby replaced: destroyed once its
    /// session's recovery timeline is complete, or at this time.
    hold: Option<Timestamp>,
    /// The loss it was given up for (its session's `RecoveryTimeline::lost`),
    /// if it was connected: destroying it records `released` there.
    lost: Option<Timestamp>,
    transport: Transport,
}
