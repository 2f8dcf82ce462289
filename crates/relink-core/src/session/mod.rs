//! The session: one connection that survives device loss, as a sans-IO
//! state machine. It ties the other modules together: the [`state`]
//! machine, the [`policy`] and its [`timers`], the [`journal`] and
//! [`inbox`], the peer's [`keys`] and the [`wire`] formats.
//!
//! [`state`]: crate::state
//! [`policy`]: crate::policy
//! [`timers`]: crate::timers
//! [`journal`]: crate::journal
//! [`inbox`]: crate::inbox
//! [`keys`]: crate::keys
//! [`wire`]: crate::wire
//!
//! ## How a driver runs it
//!
//! ```text
//! loop {
//!     // inputs, as they happen:
//!     session.handle_device_event(..) / handle_connected(..) / handle_rejected(..)
//!         / handle_attempt_failed(..) / handle_transport_down(..)
//!         / handle_send_completion(..) / handle_received(..) / handle_resume_request(..)
//!     // commands from the application:
//!     session.connect(..) / submit(..) / close(..) / close_gracefully(..)
//!     // time:
//!     if now >= session.poll_timeout() { session.handle_timeout(now) }
//!     // outputs, until None:
//!     while let Some(a) = session.poll_action() { perform a, report results back }
//!     while let Some(c) = session.poll_completion() { hand to the application }
//!     while let Some(m) = session.poll_delivery() { hand to the application }
//!     while let Some(e) = session.poll_event() { hand to observers }
//! }
//! ```
//!
//! Every input carries the [`Epoch`] it belongs to; an input of an older
//! epoch (a late completion of a torn-down QP, say) is ignored. After a loss
//! the core asks only for [`Action::TearDown`] of the old epoch: destroy
//! calls, nothing else, on the old device.
//!
//! ## Files
//!
//! | file | holds |
//! |---|---|
//! | `session/mod.rs` | [`Session`] and its fields, [`SessionConfig`], [`Role`], [`SessionError`]; construction and getters |
//! | `session/output.rs` | what a session hands out: [`Action`], [`SessionEvent`], [`Counters`], and the `poll_*` calls |
//! | `session/paths.rs` | [`Path`]; the devices present and which of them can carry which path |
//! | `session/recovery.rs` | the first connect, losing the transport, attempts and their backoff, the timers, give-up |
//! | `session/probe.rs` | probes of a silent peer: which attempts are probes, the connection time they are scaled by, and the driver's gate (one probe per peer address) |
//! | `session/decision.rs` | manual recovery (held for the application's decision, [`Session::resume`], [`Candidate`]) and [`Session::set_policy`] |
//! | `session/planned.rs` | planned outages: a drain ([`Session::drain_device`]) and a suspend ([`Session::suspend`]), the quiesce handshake that takes the connection down with nothing in flight |
//! | `session/closing.rs` | the admin close, the graceful close (pending operations finish first, up to a deadline), the peer's goodbye |
//! | `session/resync.rs` | the resume handshake of both roles and the advertisement exchange that ends in `Established` |
//! | `session/datapath.rs` | [`Session::submit`], posting within the peer's credits, send and receive completions, acks and control messages |
//! | `session/standby.rs` | the hot standby ([`Policy::standby`](crate::policy::Policy::standby)): building it, its loss, its promotion when the current transport is lost |

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use relink_fabric::{DeviceId, DeviceInfo, Guid, Timestamp};

use crate::auth::SessionSecret;
use crate::buffers::SpareBuffers;
use crate::ids::{Epoch, Incarnation, OpId, Seq, SessionId};
use crate::inbox::Inbox;
use crate::journal::Journal;
use crate::keys::{KeyError, PeerKeys};
use crate::op::{Completion, LocalRange};
use crate::policy::Policy;
use crate::resources::SessionSpec;
use crate::state::{Cause, DownCause, IllegalTransition, Machine, State};
use crate::timers::TimerTable;
use crate::wire;

mod closing;
mod datapath;
mod decision;
mod output;
mod paths;
mod planned;
mod probe;
mod recovery;
mod resync;
mod standby;

pub use decision::Candidate;
pub use output::{Action, Counters, OneSided, SessionEvent};
pub use paths::Path;
pub use planned::Plan;
pub use resync::{HelloVerdict, LocalKeys, RequestToken};
pub use standby::StandbyLoss;

use recovery::Jitter;

/// Which end of the connection a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Resolves and connects (and reconnects).
    Initiator,
    /// Listens and accepts (and accepts resumes).
    Target,
}

/// Parameters to create a session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Initiator or target.
    pub role: Role,
    /// The session id (the initiator picks it at random; the target takes
    /// the one in the Hello).
    pub id: SessionId,
    /// This endpoint's incarnation (random per process start).
    pub incarnation: Incarnation,
    /// Paths to the peer (initiator); empty for a target.
    pub paths: Vec<Path>,
    /// Recovery policy.
    pub policy: Policy,
    /// What the driver builds on every device that carries the session
    /// (slots, queue sizes, regions).
    pub spec: SessionSpec,
    /// Seed of the backoff jitter.
    pub seed: u64,
    /// The application's bytes of the session's first connect: an
    /// initiator sends them in its Hello; a target has the initiator's
    /// ([`Session::accept_hello`] takes them from the Hello). A Resume
    /// never carries them.
    pub connect_data: wire::ConnectBytes,
}

/// Errors of session commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session is closed or failed.
    #[error("session is {0}")]
    Terminal(State),
    /// The session is closing gracefully
    /// ([`Session::close_gracefully`]): it finishes the operations it
    /// has and takes no new one.
    #[error("session is closing: it finishes its pending operations and takes no new one")]
    Closing,
    /// The command does not fit the session's state or role.
    #[error("not allowed now: {0}")]
    BadState(&'static str),
    /// A token names memory the peer never advertised, or outside it.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A local range is outside its region or the region is unknown.
    #[error("local range {0:?} is not inside a registered region")]
    BadLocal(LocalRange),
    /// The message is larger than a receive slot.
    #[error("message of {len} bytes exceeds the slot payload of {max}")]
    TooLarge {
        /// The message's length in bytes.
        len: usize,
        /// The largest payload a receive slot takes (the session's
        /// `max_message`).
        max: usize,
    },
    /// [`Session::resume`] of a session that is not held for the
    /// application's decision (its state is given).
    #[error("session is not awaiting a decision (it is {0})")]
    NotAwaitingDecision(State),
    /// [`Session::resume`] named a path the session does not have.
    #[error("no path {index}: the session has {paths}")]
    NoSuchPath {
        /// The index given.
        index: usize,
        /// How many paths the session has.
        paths: usize,
    },
    /// An internal transition was illegal (a bug; reported, not hidden).
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
}

/// A resilient session (see the module docs).
///
/// Every field is private; `session/*.rs` each hold the methods of one part
/// of its work (see the module docs).
#[derive(Debug)]
pub struct Session {
    // -- what it is -------------------------------------------------------
    /// The parameters it was made with; never changed.
    cfg: SessionConfig,
    /// The current state and the table of legal transitions.
    machine: Machine,
    /// Every armed deadline; [`Session::poll_timeout`] is the earliest.
    timers: TimerTable,
    /// Backoff jitter, seeded with `cfg.seed`: the only randomness.
    jitter: Jitter,

    // -- the transport and the outage -------------------------------------
    /// The epoch of the current transport, or of the one being made. It
    /// grows with every attempt (initiator) and every accepted resume
    /// (target); a target starts at the epoch of the Hello it accepts. An
    /// input of another epoch is stale and ignored. `Epoch(0)` before the
    /// first connect.
    epoch: Epoch,
    /// Number of the current attempt in this outage, from 1; 0 when the
    /// transport is lost and once it is established again.
    attempt: u32,
    /// When the current outage began (the loss, or the first connect's
    /// first failure); `None` while connected. The downtime of the
    /// [`SessionEvent::Resumed`] is measured from it, and the give-up and
    /// fast-fail deadlines are armed once per outage, when it is set.
    outage_start: Option<Timestamp>,
    /// Index in `cfg.paths` of the path of the current or last attempt.
    path_index: usize,
    /// The devices present, as the driver reports them (a device whose port
    /// went down stays, with its port state `Down`).
    devices: Vec<DeviceInfo>,
    /// The device carrying the transport of `epoch`, from its establishment
    /// until it is lost or closed; `None` otherwise.
    current_device: Option<DeviceInfo>,
    /// Node GUID of the first device that carried the session, for
    /// [`DeviceMatch::SameGuid`](crate::policy::DeviceMatch::SameGuid).
    first_guid: Option<Guid>,
    /// Attempts in a row the peer refused for want of a listener (their
    /// retry delay is `refused_backoff`, doubling); 0 after any other
    /// failure, a loss, or an establishment.
    refusals: u32,
    /// The peer may be away: the last attempt of this outage got no answer
    /// at all (it timed out before the connection was up, or the peer was
    /// unreachable), or the transport was lost on the peer's side. The
    /// next attempt is a probe (`probe_interval`, `probe_timeout`). False
    /// after any other failure, a local loss, or an establishment.
    silent: bool,
    /// When the current attempt started (the request's connection time is
    /// measured from it).
    attempt_started: Option<Timestamp>,
    /// The longest connection time of the session's attempts (from an
    /// attempt's start until the CM establishes it): what a probe's
    /// timeout is scaled by. `None` until the first connection.
    slowest_connect: Option<Duration>,
    /// Set while another session of the node probes the same peer
    /// address: the session makes no probe ([`Session::hold_probes`]).
    probe_held: bool,
    /// `fast_io_fail_tmo` passed in this outage: every operation submitted
    /// fails at once until the session is established again.
    fast_failing: bool,
    /// The session has been `Established` at least once: the initiator
    /// holds the secret and reconnects with a Resume, never a Hello.
    was_established: bool,
    /// The deadline of a graceful close under way
    /// ([`Session::close_gracefully`]): new operations are refused, and
    /// the session closes when its journal is empty or at the deadline.
    closing: Option<Timestamp>,
    /// Held for the application's decision
    /// ([`RecoveryMode::Manual`](crate::policy::RecoveryMode::Manual)): in
    /// `Recovering`, no attempt scheduled. Cleared by leaving `Recovering`.
    held: bool,
    /// The application resumed the session in this outage: a manual
    /// session recovers as an automatic one until it is established again.
    decided: bool,
    /// The cause of the last loss of the transport (what a held session
    /// reports).
    loss_cause: Option<DownCause>,
    /// The candidates a held session last reported.
    candidates: Vec<Candidate>,
    /// The path the application named for the next attempt
    /// ([`Session::resume`]), taken by the attempt.
    prefer_path: Option<usize>,
    /// When the give-up deadline of a session never established started
    /// (its `connect`, or its accepted Hello): `set_policy` re-arms it
    /// from there.
    first_connect_at: Option<Timestamp>,
    /// How many operations the session's end completed because they were
    /// still pending ([`Session::ended_pending`]).
    ended_pending: usize,
    /// A planned outage (drain or suspend) under way: the pump posts
    /// nothing new while both ends quiesce (`session/planned.rs`).
    planned: Option<planned::Planned>,
    /// Devices being drained ([`Session::drain_device`]): no path they
    /// carry is viable.
    draining: Vec<DeviceId>,
    /// A suspend was asked for and the transport was lost meanwhile: the
    /// session parks instead of recovering.
    suspend_after_loss: bool,
    /// [`Session::resume`] came while a suspend was still under way: the
    /// session resumes (on this path, if named) as soon as it is
    /// suspended.
    resume_when_suspended: Option<Option<usize>>,
    /// The standby transport (`session/standby.rs`), being made or up;
    /// boxed, so a session without one pays a pointer.
    standby: Option<Box<standby::Standby>>,
    /// The highest epoch a standby took: every later transport's epoch is
    /// above it.
    standby_high: Epoch,
    /// Standby connections that failed in a row (their retry backs off).
    standby_failures: u32,
    /// A promoted standby waits for the peer's `Promote` (what it
    /// delivered) before the journal is replayed.
    promoting: bool,

    // -- the peer -----------------------------------------------------------
    /// The secret that authenticates resumes: issued by the target in its
    /// Welcome. `None` until the first connection; an initiator that has
    /// one sends a Resume, else a Hello.
    secret: Option<SessionSecret>,
    /// The peer's incarnation, learned in the first handshake. A Resumed
    /// with another one means the peer restarted and lost the session.
    peer_incarnation: Option<Incarnation>,
    /// The peer's advertised regions, for the current epoch only.
    peer_keys: PeerKeys,
    /// The keys of our regions on the current device, as the driver
    /// registered them: what the advertisements carry.
    local_keys: Vec<LocalKeys>,

    // -- operations and messages -------------------------------------------
    /// The sender side: every operation until its one completion.
    journal: Journal,
    /// The receiver side: delivers each of the peer's messages once, in
    /// order.
    inbox: Inbox,
    /// The highest of our sequence numbers the peer confirmed delivering
    /// (from the `ack` of its messages and from its handshake), already
    /// applied to the journal. Never decreases. Credit flow control counts
    /// messages above it.
    peer_delivered: Seq,
    /// Target only: the peer's `last_delivered` from the Resume being
    /// accepted, held from [`Session::handle_resume_request`] until the
    /// connection is up ([`Session::handle_accepted`]), when it is applied
    /// to the journal and raises `peer_delivered`.
    pending_peer_delivered: Seq,
    /// The acknowledgement (our inbox's last delivered) the last message we
    /// sent carried. A bare ack is due while the inbox is ahead of it.
    last_ack_sent: Seq,
    /// The longest frame the peer's receive slots hold (its AdvertDone);
    /// 0 until it says.
    peer_frame_max: u32,
    /// One-sided operations posted on the current transport and not yet
    /// completed; at most `spec.max_one_sided`. Emptied on a loss.
    one_sided_inflight: BTreeSet<OpId>,
    /// Operations the current resume replays: counted when the resync
    /// starts, reported in [`SessionEvent::Resumed`] when it ends.
    replaying: u64,
    /// Nonce of the last keepalive probe sent (each probe takes the next).
    keepalive_nonce: u64,
    /// Buffers of sent messages the driver handed back
    /// ([`Session::recycle`]), for the next ones.
    spare: SpareBuffers,
    /// Buffers the application handed back with
    /// [`Session::poll_delivery_into`], for the next deliveries.
    delivery_spare: SpareBuffers,

    // -- outputs, drained by the poll_* calls --------------------------------
    /// What it counted; `deduplicated` is read from the inbox instead.
    counters: Counters,
    /// For [`Session::poll_action`].
    actions: VecDeque<Action>,
    /// For [`Session::poll_event`].
    events: VecDeque<SessionEvent>,
    /// For [`Session::poll_completion`].
    completions: VecDeque<Completion>,
    /// Completions the application took ([`Session::poll_completion`]).
    completions_taken: u64,
    /// For [`Session::poll_delivery`]: sequence number and payload.
    deliveries: VecDeque<(Seq, Vec<u8>)>,
}

impl Session {
    /// A new session in `Idle`.
    ///
    /// # Errors
    /// If the policy is invalid (the error names the key).
    pub fn new(cfg: SessionConfig, now: Timestamp) -> Result<Session, crate::policy::PolicyError> {
        cfg.policy.validate()?;
        Ok(Session {
            jitter: Jitter::new(cfg.seed),
            cfg,
            machine: Machine::new(now),
            timers: TimerTable::default(),
            epoch: Epoch(0),
            attempt: 0,
            outage_start: None,
            path_index: 0,
            devices: Vec::new(),
            current_device: None,
            first_guid: None,
            secret: None,
            peer_incarnation: None,
            journal: Journal::new(),
            inbox: Inbox::new(),
            peer_keys: PeerKeys::default(),
            local_keys: Vec::new(),
            peer_delivered: Seq(0),
            last_ack_sent: Seq(0),
            peer_frame_max: 0,
            fast_failing: false,
            was_established: false,
            closing: None,
            ended_pending: 0,
            planned: None,
            draining: Vec::new(),
            suspend_after_loss: false,
            resume_when_suspended: None,
            standby: None,
            standby_high: Epoch(0),
            standby_failures: 0,
            promoting: false,
            held: false,
            decided: false,
            loss_cause: None,
            candidates: Vec::new(),
            prefer_path: None,
            first_connect_at: None,
            counters: Counters::default(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            completions: VecDeque::new(),
            completions_taken: 0,
            deliveries: VecDeque::new(),
            keepalive_nonce: 0,
            pending_peer_delivered: Seq(0),
            replaying: 0,
            one_sided_inflight: BTreeSet::new(),
            refusals: 0,
            silent: false,
            attempt_started: None,
            slowest_connect: None,
            probe_held: false,
            spare: SpareBuffers::default(),
            delivery_spare: SpareBuffers::default(),
        })
    }

    /// The session id.
    pub fn id(&self) -> SessionId {
        self.cfg.id
    }

    /// Initiator or target.
    pub fn role(&self) -> Role {
        self.cfg.role
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.machine.state()
    }

    /// The current transport epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The resource spec the driver builds on every device.
    pub fn spec(&self) -> &SessionSpec {
        &self.cfg.spec
    }

    /// The recovery policy it was made with.
    pub fn policy(&self) -> &Policy {
        &self.cfg.policy
    }

    /// The application's bytes of the first connect
    /// ([`SessionConfig::connect_data`]): an initiator's own, the
    /// initiator's at a target.
    pub fn connect_data(&self) -> &[u8] {
        &self.cfg.connect_data
    }

    /// Counters since creation.
    pub fn counters(&self) -> Counters {
        Counters {
            deduplicated: self.inbox.duplicates(),
            completed: self.completions_taken + self.completions.len() as u64,
            ..self.counters
        }
    }

    /// The peer's incarnation (a random id of its process), once the first
    /// handshake told it; `None` before.
    pub fn peer_incarnation(&self) -> Option<Incarnation> {
        self.peer_incarnation
    }

    /// The device carrying the session, if connected.
    pub fn device(&self) -> Option<&DeviceInfo> {
        self.current_device.as_ref()
    }

    /// Operations not yet completed.
    pub fn pending_ops(&self) -> usize {
        self.journal.len()
    }

    /// Bytes of message payload the journal holds (for replay).
    pub fn journal_bytes(&self) -> usize {
        self.journal.payload_bytes()
    }

    /// The highest message sequence delivered to the application.
    pub fn last_delivered(&self) -> Seq {
        self.inbox.last_delivered()
    }

    /// The peer's advertised regions for the current epoch.
    pub fn peer_keys(&self) -> &PeerKeys {
        &self.peer_keys
    }

    /// Largest message payload: a receive slot less the message header.
    pub fn max_message(&self) -> usize {
        (self.cfg.spec.slot_size as usize).saturating_sub(wire::HEADER_LEN)
    }

    /// The longest frame ([`wire::frame_messages`]) the peer's receive
    /// slots hold, from its `AdvertDone`; 0 until it has said: then one
    /// message per SEND. The driver also keeps a frame within its own send
    /// slot.
    pub fn peer_frame_max(&self) -> usize {
        self.peer_frame_max as usize
    }

    /// Move to `to` and report the transition. An illegal one is a bug in
    /// the core: asserted in debug builds, logged in release builds.
    fn go(&mut self, to: State, cause: Cause, now: Timestamp) {
        let from = self.state();
        match self.machine.go(to, cause, now) {
            Ok(t) => {
                if matches!(from, State::Connecting | State::Reconnecting)
                    && matches!(to, State::Resyncing | State::Established)
                {
                    self.note_connected(now);
                }
                if to != State::Recovering {
                    self.held = false;
                }
                if to != State::Resyncing {
                    self.promoting = false;
                }
                if to.is_terminal() {
                    self.drop_standby(false, StandbyLoss::Released, now);
                }
                tracing::debug!(session = %self.cfg.id, from = %t.from, to = %t.to, cause = %t.cause, "transition");
                self.events.push_back(SessionEvent::Transition(t));
            }
            Err(e) => {
                // A bug in the core; make it loud in tests, keep going in
                // production.
                debug_assert!(false, "{e}");
                tracing::error!(session = %self.cfg.id, "{e}");
            }
        }
    }

    /// Queue completions for [`Session::poll_completion`].
    fn complete(&mut self, cs: Vec<Completion>) {
        self.completions.extend(cs);
    }
}
