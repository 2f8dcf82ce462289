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
//! ## Files and parts
//!
//! Besides what it is and what every part shares (`cfg`, the state
//! `machine`, the `timers`, the backoff `jitter`, the `epoch`, the
//! `counters`), a [`Session`] is made of parts: each a struct defined in
//! the file whose logic it holds, its fields private to that file (a
//! `pub(super)` field only where a part is a type of its own with its own
//! invariants: the journal, the inbox, the peer's keys). A method that
//! needs one part is a method of that part; one that coordinates several
//! is a method of `Session`, in the file of the part it is about.
//!
//! | file | holds | part it owns (`Session` field) |
//! |---|---|---|
//! | `session/mod.rs` | [`Session`] and its fields, [`SessionConfig`], [`Role`], [`SessionError`]; construction, the transitions, the getters of what it is | — (`cfg`, `machine`, `timers`, `jitter`, `epoch`, `counters`) |
//! | `session/output.rs` | what a session hands out: [`Action`], [`SessionEvent`], [`Counters`], and the `poll_*` calls | `Outputs` (`out`): the queues of actions, events, completions and deliveries |
//! | `session/event_text.rs` | [`SessionEvent`] in words: its stable name ([`SessionEvent::name`]) and a plain-words `Display` for logs and event streams | — |
//! | `session/paths.rs` | [`Path`]; the devices present and which of them can carry which path | `Devices` (`devices`): present, current, first GUID, drained |
//! | `session/recovery.rs` | the first connect, losing the transport, attempts and their backoff, the timers, give-up | `Recovery` (`recovery`): attempt number, path index, refusals, outage start, fast-fail, ever established, first connect |
//! | `session/probe.rs` | probes of a silent peer: which attempts are probes, the connection time they are scaled by, and the driver's gate (one probe per peer address) | `Probes` (`probes`): silent, attempt start, slowest connect, held by the driver |
//! | `session/decision.rs` | manual recovery (held for the application's decision, [`Session::resume`], [`Candidate`]) and [`Session::set_policy`] | `Decision` (`decision`): held, decided, loss cause, candidates, preferred path |
//! | `session/planned.rs` | planned outages: a drain ([`Session::drain_device`]) and a suspend ([`Session::suspend`]), the quiesce handshake that takes the connection down with nothing in flight | `PlannedOutage` (`planned`): the plan under way, suspend after a loss, resume once suspended |
//! | `session/closing.rs` | the admin close, the graceful close (pending operations finish first, up to a deadline), the peer's goodbye | `Closing` (`closing`): the graceful close's deadline, operations ended pending |
//! | `session/resync.rs` | the resume handshake of both roles and the advertisement exchange that ends in `Established` | `Handshake` (`handshake`): secret, peer incarnation, local keys, the resume's delivered count, replays |
//! | `session/keepalive.rs` | the current transport's keepalive: probes, answers, the silence deadline | `Keepalive` (`keepalive`): the probes' nonce |
//! | `session/datapath.rs` | [`Session::submit`], posting within the peer's credits, send and receive completions, acks and control messages | `DataPath` (`data`): journal, inbox, peer's keys, peer's delivered count, last ack sent, peer's frame size and rendezvous size, one-sided in flight, send buffers |
//! | `session/fetch.rs` | messages read by the receiver (a rendezvous): which of ours the peer reads, [`Session::next_fetch`], [`Session::fetch_landed`], the rewind on a loss | (the inbox's reads in `data`, the deliveries waiting behind them in `out`) |
//! | `session/standby.rs` | the hot standby ([`Policy::standby`](crate::policy::Policy::standby)): building it, its loss, its promotion when the current transport is lost | `Standby` (`standby`): the standby transport, its highest epoch, failures in a row, a promotion waiting |

use relink_fabric::Timestamp;

use crate::ids::{Epoch, Incarnation, RegionId, SessionId};
use crate::keys::KeyError;
use crate::op::LocalRange;
use crate::policy::Policy;
use crate::resources::SessionSpec;
use crate::state::{Cause, IllegalTransition, Machine, State};
use crate::timers::TimerTable;
use crate::wire;

mod closing;
mod datapath;
mod decision;
mod event_text;
mod fetch;
mod keepalive;
mod output;
mod paths;
mod planned;
mod probe;
mod recovery;
mod resync;
mod standby;

pub use decision::Candidate;
pub use output::{Action, Counters, Delivered, OneSided, SessionEvent};
pub use paths::Path;
pub use planned::Plan;
pub use resync::{HelloVerdict, LocalKeys, RequestToken};
pub use standby::StandbyLoss;

use recovery::Jitter;

/// Which end of the connection a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// A local range is outside its region, the region is unknown, or an
    /// atomic's local range is not 8 bytes long.
    #[error(
        "local range {:#x}+{} is not inside region {}: no such region, \
         outside it, or (for an atomic) not 8 bytes",
        .0.offset,
        .0.len,
        .0.region.0
    )]
    BadLocal(LocalRange),
    /// An atomic (FETCH_ADD, CMP_SWAP) names 8 bytes that are not 8-byte
    /// aligned: its local range's offset or its token's offset is not a
    /// multiple of 8 (regions start page aligned). A device would refuse
    /// it and lose the transport; the session refuses it at submit.
    #[error(
        "an atomic needs 8-byte alignment: its {what} offset {offset:#x} is not a multiple of 8"
    )]
    Misaligned {
        /// Which offset: `"local"` (the local range's) or `"remote"` (the
        /// token's).
        what: &'static str,
        /// The offset.
        offset: u64,
    },
    /// The session has `max` operations outstanding (submitted, completion
    /// not taken): take completions first. [`SessionEvent::Writable`]
    /// says when room returned.
    #[error(
        "{outstanding} operations are outstanding, the session's most: take completions first"
    )]
    Full {
        /// Operations submitted whose completion was not taken.
        outstanding: u64,
        /// The session's `max_outstanding`.
        max: u32,
    },
    /// [`Session::add_region`] of an id the session has.
    #[error("the session has a region {} already", .0.0)]
    RegionExists(RegionId),
    /// [`Session::remove_region`] of a region an operation not yet
    /// completed uses.
    #[error("region {} is in use by an operation not yet completed", .0.0)]
    RegionInUse(RegionId),
    /// [`Session::remove_region`] of a region the session does not have.
    #[error("the session has no region {}", .0.0)]
    NoRegion(RegionId),
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
/// Every field is private. Besides what it is and what every part shares
/// (its configuration, state machine, timers, jitter, epoch and counters),
/// a session is made of parts, each a struct defined in the file that holds
/// its logic, whose private fields only that file touches (the module docs
/// list them): `session/*.rs` each borrow the part they own and ask the
/// others.
#[derive(Debug)]
pub struct Session {
    // -- what it is, and what every part shares ---------------------------
    /// The parameters it was made with; only the policy changes
    /// ([`Session::set_policy`]).
    cfg: SessionConfig,
    /// The current state and the table of legal transitions.
    machine: Machine,
    /// Every armed deadline; [`Session::poll_timeout`] is the earliest.
    timers: TimerTable,
    /// Backoff jitter, seeded with `cfg.seed`: the only randomness (of the
    /// attempts' backoff and the standby's).
    jitter: Jitter,
    /// The epoch of the current transport, or of the one being made. It
    /// grows with every attempt (initiator) and every accepted resume
    /// (target); a target starts at the epoch of the Hello it accepts. An
    /// input of another epoch is stale and ignored. `Epoch(0)` before the
    /// first connect.
    epoch: Epoch,
    /// What it counted; `deduplicated` and `completed` are read from the
    /// inbox and the outputs instead.
    counters: Counters,

    // -- its parts, each owned by the file of its logic --------------------
    /// The devices present, the one carrying the transport, the drained
    /// ones (`session/paths.rs`).
    devices: paths::Devices,
    /// The outage and its attempts: number, path, refusals, give-up and
    /// fast-fail (`session/recovery.rs`).
    recovery: recovery::Recovery,
    /// Whether the next attempt is a probe of a silent peer
    /// (`session/probe.rs`).
    probes: probe::Probes,
    /// The application's say in a manual recovery (`session/decision.rs`).
    decision: decision::Decision,
    /// A drain or suspend under way (`session/planned.rs`).
    planned: planned::PlannedOutage,
    /// The hot standby (`session/standby.rs`).
    standby: standby::Standby,
    /// The handshake's secrets and the resync under way
    /// (`session/resync.rs`).
    handshake: resync::Handshake,
    /// The current transport's keepalive (`session/keepalive.rs`).
    keepalive: keepalive::Keepalive,
    /// Operations, messages, credits and the peer's keys
    /// (`session/datapath.rs`).
    data: datapath::DataPath,
    /// A graceful close under way, and how the session ended
    /// (`session/closing.rs`).
    closing: closing::Closing,
    /// What waits for the driver and the application
    /// (`session/output.rs`).
    out: output::Outputs,
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
            counters: Counters::default(),
            devices: paths::Devices::default(),
            recovery: recovery::Recovery::default(),
            probes: probe::Probes::default(),
            decision: decision::Decision::default(),
            planned: planned::PlannedOutage::default(),
            standby: standby::Standby::default(),
            handshake: resync::Handshake::default(),
            keepalive: keepalive::Keepalive::default(),
            data: datapath::DataPath::default(),
            closing: closing::Closing::default(),
            out: output::Outputs::default(),
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
    #[inline]
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

    /// Largest message payload: a receive slot less the message header.
    pub fn max_message(&self) -> usize {
        (self.cfg.spec.slot_size as usize).saturating_sub(wire::HEADER_LEN)
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
                    self.decision.release();
                }
                if to != State::Resyncing {
                    self.standby.stop_promoting();
                }
                if to.is_terminal() {
                    self.drop_standby(false, StandbyLoss::Released, now);
                    // A message being read never lands now.
                    self.rewind_fetches();
                }
                tracing::debug!(session = %self.cfg.id, from = %t.from, to = %t.to, cause = %t.cause, "transition");
                self.out.emit(SessionEvent::Transition(t));
            }
            Err(e) => {
                // A bug in the core; make it loud in tests, keep going in
                // production.
                debug_assert!(false, "{e}");
                tracing::error!(session = %self.cfg.id, "{e}");
            }
        }
    }
}
