//! The driver: a [`Node`] runs relink-core sessions on a provider.
//!
//! A session's core (`relink_core::session::Session`) decides what to do;
//! the node carries its actions out on the provider and hands it what the
//! provider reports (CM events, completions, device events, timeouts).
//! Everything is single-threaded and driven by [`Node::poll`].
//!
//! | file | its one concern |
//! |---|---|
//! | `mod.rs` | the node ([`Node`]): its parts, how a session's entry is made and how an ended one is reaped |
//! | `entry.rs` | a session's entry in the node's table (`SessionEntry`): its core, memory, transports, backlog |
//! | `index.rs` | the node-wide indexes (CM ids, CQs, CQs to poll, queued work, timers, ready sessions, ended sessions), kept in step in one place |
//! | `transports.rs` | the transports off their session: retiring ones (given up, destroyed a round later or after a promotion's hold) and closing ones |
//! | `options.rs` | what the application hands in and gets back: handles, session options and their builder, a session's snapshot, the footprint |
//! | `regions.rs` | region options (relink's memory or the application's, shared among sessions), their checks, a new session's memory |
//! | `error.rs` | the errors of the node's calls, one type per family of calls |
//! | `api.rs` | the application's calls: connect, listen, submit operations, take one session's completions, deliveries and events, close |
//! | `planned.rs` | planned outages: suspend a session, drain a device (sessions moved off it before it goes) |
//! | `closing.rs` | the two phases of a goodbye: a closed session's transport is disconnected once its goodbye has left (or at a bound) |
//! | `shutdown.rs` | how sessions and nodes end: the graceful close, `shutdown`, `abort`, and what dropping a node does |
//! | `output.rs` | node-wide outputs: `accept` (with listener, addresses, connect data) and `poll_output` (every session's, from a ready queue) |
//! | `poll.rs` | the poll loop (provider events, dirty CQs, due timers, queued work, reaping, in that order) and provider events |
//! | `wait.rs` | sleeping between poll rounds: `wait` (until something happens), `event_fd` and `prepare_to_sleep` (for the application's event loop), `run_until`; the `PollMode` that decides when CQs are armed |
//! | `cm.rs` | connection management: who owns a CM id, where a session's attempt is, listeners, connect requests |
//! | `actions.rs` | performing a core's actions against the provider, and indexing what the session waits for next |
//! | `probes.rs` | one probe per silent peer address: the session that probes it, the others' probes held until it is answered |
//! | `backlog.rs` | work requests a core asks for: queued per session, posted in batches, every 16th signaled |
//! | `destroy.rs` | what a destroy call's answer is worth: a warning only for an error |
//! | `posted_receives.rs` | buffers the application posts for a session's messages: filled in order from the receive slots (one copy), ended `Received`, flushed at the session's end |
//! | `rendezvous.rs` | messages the node reads itself (`SessionOptions::rendezvous`): the READ of the peer's registered memory into the next posted buffer, given back and read again after a loss |
//! | `completions.rs` | draining a session's CQ: send completions retired in RC order, receives copied out and reposted |
//! | `transport.rs` | one epoch's provider objects, built from the core's plan and torn down with destroy calls only |
//! | `standby.rs` | a session's standby transport: built next to the current one, its CM events, the peer's promotion seen in its CQ, the swap on the core's promotion |
//! | `wr.rs` | the `wr_id` encoding, `Pending` (a work request not posted yet) and `WrBatch`, the work requests reused from one post to the next |
//! | `shared_receive.rs` | shared receive queues: their options, the sessions' reservations (the credit rule), one SRQ per device context in use |
//! | `timeline.rs` | the phases of a session's last outage, as the node drives it |
//! | `windows.rs` | type 2 memory windows of regions: allocated with a transport, bound before the advertisement, invalidated at a close, freed at the teardown |

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::OsRng;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use relink_core::session::{Role, Session};
use relink_core::{Incarnation, SessionId};
use relink_fabric::{CmId, Provider, RecvWr, SendWr, Timestamp, WorkCompletion};

mod actions;
mod api;
mod backlog;
mod closing;
mod cm;
mod completions;
mod decision;
mod destroy;
mod entry;
mod error;
mod handles;
mod index;
mod options;
mod output;
mod planned;
mod poll;
mod posted_receives;
mod probes;
mod regions;
mod registrations;
mod rendezvous;
mod shared_receive;
mod shutdown;
mod standby;
mod timeline;
mod transport;
mod transports;
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
pub use posted_receives::{ReceiveOutcome, Received};
pub use regions::RegionOptions;
pub use registrations::{RegisterError, REGISTERED_BASE};
pub use shared_receive::{
    SharedReceiveHandle, SharedReceiveOptions, SharedReceiveOptionsBuilder, SharedReceiveUsage,
};
pub use shutdown::ShutdownSummary;
pub use timeline::RecoveryTimeline;
pub use wait::PollMode;

use entry::SessionEntry;
use error::EntryError;
use index::Index;
use transports::Transports;
use wr::WrBatch;

/// A listener: its address and the options of the sessions it accepts.
struct ListenerEntry {
    addr: SocketAddr,
    /// `None` while no device owns `addr` (it listens again when one does).
    cm: Option<CmId>,
    opts: SessionOptions,
}

impl ListenerEntry {
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
    /// The next handle of a session, listener, connect request, shared
    /// receive queue or closing transport (one series for all of them).
    next_handle: u64,
    sessions: BTreeMap<u64, SessionEntry>,
    /// Sessions by id and role: a node may hold both halves of one
    /// session (connected to its own listener), which share the id.
    by_id: BTreeMap<(SessionId, Role), u64>,
    listeners: BTreeMap<u64, ListenerEntry>,
    /// Connect requests by their `RequestToken`.
    pending: BTreeMap<u64, PendingRequest>,
    /// Accepted sessions not yet taken ([`Node::accept`]).
    accepted: VecDeque<Accepted>,
    /// The node-wide indexes: who owns each CM id and CQ, which CQs to
    /// poll, queued work, timers, sessions with output, ended sessions.
    index: Index,
    /// The transports off their session: retiring (given up, waiting to
    /// be destroyed) and closing (waiting for their goodbye to leave).
    transports: Transports,
    /// Poll rounds begun.
    rounds: u64,
    /// When CQs are armed ([`PollMode`]).
    poll_mode: PollMode,
    /// The one session probing each silent peer address (`probes.rs`).
    probers: BTreeMap<SocketAddr, u64>,
    /// Completions taken from a CQ.
    wcs: Vec<WorkCompletion>,
    /// The `wr_id`s of the messages' READs a CQ batch completed
    /// (`rendezvous.rs`), reused.
    fetched: Vec<u64>,
    /// The send requests of the batch being posted.
    send_batch: WrBatch<SendWr>,
    /// The receives being reposted.
    recv_batch: WrBatch<RecvWr>,
    /// A received message, copied out of its slot.
    recv_buf: Vec<u8>,
    /// [`Node::shutdown`] is under way: a Hello is refused `ShuttingDown`.
    shutting_down: bool,
    /// Dropping the node says no goodbye ([`Node::abort`]).
    skip_goodbyes: bool,
    /// Devices being drained ([`Node::drain`]): every session, new ones
    /// too, avoids them.
    draining: Vec<relink_fabric::DeviceId>,
    /// Shared receive queues, by their handle's number.
    shared: BTreeMap<u64, Arc<shared_receive::SharedPool>>,
    /// Node-wide registrations ([`Node::register`]), by id.
    registrations: BTreeMap<relink_core::RegionId, registrations::Registration>,
    /// Buffers posted to each shared receive queue's pool
    /// (`posted_receives.rs`), by the queue's handle.
    shared_posted: BTreeMap<u64, posted_receives::SharedBuffers>,
    /// The number of the next registration (its id is
    /// [`REGISTERED_BASE`] plus it; never reused).
    next_registration: u32,
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
            next_handle: 1,
            sessions: BTreeMap::new(),
            by_id: BTreeMap::new(),
            listeners: BTreeMap::new(),
            pending: BTreeMap::new(),
            accepted: VecDeque::new(),
            index: Index::new(Node::DEFAULT_LINGER),
            transports: Transports::new(Node::DEFAULT_GOODBYE_TIMEOUT),
            rounds: 0,
            poll_mode: PollMode::Events,
            probers: BTreeMap::new(),
            wcs: Vec::with_capacity(64),
            fetched: Vec::new(),
            send_batch: WrBatch::default(),
            recv_batch: WrBatch::default(),
            recv_buf: Vec::new(),
            shutting_down: false,
            skip_goodbyes: false,
            draining: Vec::new(),
            shared: BTreeMap::new(),
            registrations: BTreeMap::new(),
            shared_posted: BTreeMap::new(),
            next_registration: 0,
        }
    }

    /// How long a closed or failed session whose outputs the application
    /// has not all taken is kept by default: 60 s
    /// ([`set_linger`](Self::set_linger)).
    pub const DEFAULT_LINGER: Duration = Duration::from_secs(60);

    /// How long a closed or failed session is kept when the application
    /// does not take everything it produced (its completions, deliveries
    /// and events); after that it is reaped with them. A session whose
    /// outputs were all taken is reaped at the next [`poll`](Self::poll) whatever the
    /// linger. See [`Node::sessions`].
    pub fn set_linger(&mut self, linger: Duration) {
        self.index.set_linger(linger);
    }

    /// How many entries the node's tables hold (for leak checks: with
    /// sessions reaped, a node that opens and closes sessions stays the
    /// same size).
    pub fn footprint(&self) -> Footprint {
        let (shared_receive_queues, shared_receive_srqs, shared_receive_memory_bytes) =
            self.shared_receive_footprint();
        let ix = self.index.counts();
        Footprint {
            sessions: self.sessions.len(),
            session_ids: self.by_id.len(),
            listeners: self.listeners.len(),
            cm_ids: ix.cm_ids,
            requests: self.pending.len(),
            accepted: self.accepted.len(),
            cqs: ix.cqs,
            deadlines: ix.deadlines,
            ended: ix.ended,
            ready: ix.ready,
            closing: self.transports.closing_count(),
            session_memory_bytes: self
                .sessions
                .values()
                .map(SessionEntry::own_memory_bytes)
                .sum(),
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

    fn new_handle(&mut self) -> u64 {
        let h = self.next_handle;
        self.next_handle += 1;
        h
    }

    /// Note that the application took outputs of session `handle`: an ended
    /// one may now have none left, and be reaped at the next poll; one with no
    /// output left leaves the ready queue of [`Node::poll_output`].
    fn taken(&mut self, handle: u64) {
        let more = self
            .sessions
            .get(&handle)
            .is_some_and(SessionEntry::has_output);
        self.index.output_taken(handle, more);
    }

    /// Whether ended session `handle` left nothing behind: every output taken,
    /// its transport gone, and the application told of it (not waiting in
    /// [`Node::accept`]).
    fn reapable(&self, handle: u64) -> bool {
        self.sessions
            .get(&handle)
            .is_some_and(SessionEntry::all_taken)
            && !self.accepted.iter().any(|a| a.session.0 == handle)
    }

    /// Reap the ended sessions whose outputs the application took since
    /// the last poll.
    fn reap_ended(&mut self) {
        while let Some(handle) = self.index.next_to_check() {
            if self.reapable(handle) {
                self.reap(handle);
            }
        }
    }

    /// Forget session `handle`: its entry, its memory and every index entry.
    /// Its handle is answered with a `NoSession` error (or `None`) from
    /// now on.
    fn reap(&mut self, handle: u64) {
        let Some(mut entry) = self.sessions.remove(&handle) else {
            return;
        };
        tracing::debug!(session = %entry.core.id(), state = %entry.core.state(), "reaped");
        let key = (entry.core.id(), entry.core.role());
        if self.by_id.get(&key) == Some(&handle) {
            self.by_id.remove(&key);
        }
        self.index.session_reaped(handle, &mut entry.timer);
        entry.destroy_transports(&*self.provider, &mut self.index);
        self.release_probes_of(handle);
        self.accepted.retain(|a| a.session.0 != handle);
    }

    /// Give a new core its entry (and memory); returns its handle.
    fn insert_session(&mut self, core: Session, opts: SessionOptions) -> Result<u64, EntryError> {
        let spec = core.spec().clone();
        let shared = self.reserve_shared_receive(&opts)?;
        let memory = self
            .session_memory(&opts, &spec)
            .map_err(EntryError::Memory)?;
        let handle = self.new_handle();
        let mut core = core;
        let now = self.now();
        for d in &self.draining {
            let _ = core.drain_device(d, now);
        }
        self.by_id.insert((core.id(), core.role()), handle);
        let mut entry = SessionEntry::new(core, opts, spec, memory, shared);
        self.join_registrations(&mut entry);
        self.sessions.insert(handle, entry);
        Ok(handle)
    }
}
