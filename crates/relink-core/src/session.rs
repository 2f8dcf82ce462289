//! The session: one connection that survives device loss, as a sans-IO
//! state machine.
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
//!     session.connect(..) / submit(..) / close(..)
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

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use relink_fabric::{
    Access, DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Guid, PortState, RemoteAddr,
    Timestamp, WcStatus,
};

use crate::auth::SessionSecret;
use crate::buffers::SpareBuffers;
use crate::ids::{Epoch, Incarnation, OpId, RegionId, Seq, SessionId};
use crate::journal::{
    Accept as InboxAccept, Completion, Inbox, Journal, LocalRange, OpError, OpKind,
};
use crate::keys::{KeyError, PeerKeys, RemoteRegion};
use crate::policy::Policy;
use crate::resources::SessionSpec;
use crate::state::{Cause, DownCause, IllegalTransition, Machine, State, Transition};
use crate::timers::{TimerKind, TimerTable};
use crate::wire;
use crate::wire::{MsgBody, WireError};

/// Which end of the connection a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Resolves and connects (and reconnects).
    Initiator,
    /// Listens and accepts (and accepts resumes).
    Target,
}

/// A way to reach the peer: an optional local address (which picks the
/// local device) and the peer's address. A session may have several; a
/// second HCA takes over at once when the first is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    /// Local address to bind (picks the device); `None`: by route.
    pub local: Option<IpAddr>,
    /// The peer's CM address.
    pub peer: SocketAddr,
}

/// A pending connection request at the target, named by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestToken(pub u64);

/// One-sided operation kinds as posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneSided {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_ADD.
    FetchAdd {
        /// Addend.
        add: u64,
    },
    /// CMP_SWAP.
    CmpSwap {
        /// Expected.
        compare: u64,
        /// Replacement.
        swap: u64,
    },
}

/// What the core asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Destroy every provider object of `epoch` (destroy calls only; an
    /// object already released with its device is fine).
    TearDown {
        /// The epoch to tear down.
        epoch: Epoch,
    },
    /// Initiator: resolve `path`, build the session's resources
    /// ([`crate::resources::build_plan`] of [`Session::spec`]) on the
    /// resolved device, and connect with `private_data`. Report the result
    /// with [`Session::handle_connected`], [`Session::handle_rejected`] or
    /// [`Session::handle_attempt_failed`].
    Connect {
        /// The epoch the new transport belongs to.
        epoch: Epoch,
        /// The path to use.
        path: Path,
        /// CM private data (≤ 56 bytes).
        private_data: Vec<u8>,
    },
    /// Target: build the resources on the request's device and accept it.
    Accept {
        /// The epoch the new transport belongs to.
        epoch: Epoch,
        /// The request.
        request: RequestToken,
        /// CM private data (≤ 196 bytes).
        private_data: Vec<u8>,
    },
    /// Target: refuse a request.
    Reject {
        /// The request.
        request: RequestToken,
        /// CM private data (≤ 148 bytes).
        private_data: Vec<u8>,
    },
    /// Post a SEND of `bytes` (an encoded message). `op` is the
    /// application operation it carries, if any; its completion is
    /// reported with [`Session::handle_send_completion`].
    Send {
        /// Transport epoch.
        epoch: Epoch,
        /// The operation carried (data messages).
        op: Option<OpId>,
        /// Header and payload.
        bytes: Vec<u8>,
    },
    /// Post a one-sided operation.
    OneSided {
        /// Transport epoch.
        epoch: Epoch,
        /// The operation.
        op: OpId,
        /// Which.
        kind: OneSided,
        /// Local memory.
        local: LocalRange,
        /// Remote memory, translated for this epoch.
        remote: RemoteAddr,
    },
    /// Disconnect the transport of `epoch` (admin close).
    Disconnect {
        /// The epoch.
        epoch: Epoch,
    },
}

/// What observers see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// A state change.
    Transition(Transition),
    /// The transport was lost.
    DeviceLost {
        /// Why.
        cause: DownCause,
    },
    /// A reconnection attempt started.
    Recovering {
        /// Attempt number (from 1).
        attempt: u32,
    },
    /// Traffic flows again.
    Resumed {
        /// From the loss to the resume.
        downtime: Duration,
        /// Operations replayed.
        replayed: u64,
        /// Duplicate messages the receiver dropped so far.
        deduplicated: u64,
        /// The device now carrying the session.
        device: Option<DeviceId>,
    },
    /// The give-up deadline passed; operations failed.
    GaveUp,
    /// The peer lost its state (new incarnation) or refused us for good.
    PeerLost {
        /// Why.
        reason: String,
    },
    /// Closed by the application or an administrator.
    Disconnected,
}

/// Counters, for observability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Transport losses.
    pub losses: u64,
    /// Reconnection attempts.
    pub attempts: u64,
    /// Successful resumes.
    pub resumes: u64,
    /// Operations replayed.
    pub replayed: u64,
    /// Duplicate messages dropped.
    pub deduplicated: u64,
    /// Advertisements sent.
    pub adverts_sent: u64,
    /// Total time without a transport, in nanoseconds.
    pub downtime_ns: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
}

/// Errors of session commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session is closed or failed.
    #[error("session is {0}")]
    Terminal(State),
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
        /// Given.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// An internal transition was illegal (a bug; reported, not hidden).
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
}

/// Local keys of one region on the current device, as the driver
/// registered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalKeys {
    /// The region.
    pub region: RegionId,
    /// Its (fixed) address.
    pub addr: u64,
    /// rkey on the current device.
    pub rkey: u32,
}

/// Small deterministic PRNG (SplitMix64) for backoff jitter: the core
/// reads no OS randomness; the seed comes from the driver.
#[derive(Debug, Clone)]
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
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
    /// Resources.
    pub spec: SessionSpec,
    /// Seed of the backoff jitter.
    pub seed: u64,
}

/// A resilient session (see the module docs).
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    machine: Machine,
    timers: TimerTable,
    jitter: Jitter,
    epoch: Epoch,
    attempt: u32,
    outage_start: Option<Timestamp>,
    path_index: usize,
    devices: Vec<DeviceInfo>,
    current_device: Option<DeviceInfo>,
    first_guid: Option<Guid>,
    secret: Option<SessionSecret>,
    peer_incarnation: Option<Incarnation>,
    journal: Journal,
    inbox: Inbox,
    peer_keys: PeerKeys,
    local_keys: Vec<LocalKeys>,
    peer_delivered: Seq,
    last_ack_sent: Seq,
    fast_failing: bool,
    replayed_this_outage: u64,
    counters: Counters,
    actions: VecDeque<Action>,
    events: VecDeque<SessionEvent>,
    completions: VecDeque<Completion>,
    deliveries: VecDeque<(Seq, Vec<u8>)>,
    keepalive_nonce: u64,
    pending_peer_delivered: Seq,
    /// Operations the current resume replays.
    replaying: u64,
    /// One-sided operations posted and not yet completed.
    one_sided_inflight: std::collections::BTreeSet<OpId>,
    /// Attempts in a row the peer refused for want of a listener.
    refusals: u32,
    /// Buffers of sent messages the driver handed back, for the next ones.
    spare: SpareBuffers,
    /// Buffers the application handed back with
    /// [`Session::poll_delivery_into`], for the next deliveries.
    delivery_spare: SpareBuffers,
}

/// Receive slots kept free of data for control messages (acks, keepalives,
/// advertisements).
const CONTROL_RESERVE: u64 = 8;

impl Session {
    /// A new session in `Idle`.
    ///
    /// # Errors
    /// If the policy is invalid (the error names the key).
    pub fn new(cfg: SessionConfig, now: Timestamp) -> Result<Session, crate::policy::PolicyError> {
        cfg.policy.validate()?;
        Ok(Session {
            jitter: Jitter(cfg.seed),
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
            fast_failing: false,
            replayed_this_outage: 0,
            counters: Counters::default(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            completions: VecDeque::new(),
            deliveries: VecDeque::new(),
            keepalive_nonce: 0,
            pending_peer_delivered: Seq(0),
            replaying: 0,
            one_sided_inflight: std::collections::BTreeSet::new(),
            refusals: 0,
            spare: SpareBuffers::default(),
            delivery_spare: SpareBuffers::default(),
        })
    }

    // ---------------------------------------------------------------
    // getters
    // ---------------------------------------------------------------

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

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.cfg.policy
    }

    /// Counters.
    pub fn counters(&self) -> Counters {
        Counters {
            deduplicated: self.inbox.duplicates(),
            ..self.counters
        }
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

    /// Largest message payload.
    pub fn max_message(&self) -> usize {
        (self.cfg.spec.slot_size as usize).saturating_sub(wire::HEADER_LEN)
    }

    // ---------------------------------------------------------------
    // outputs
    // ---------------------------------------------------------------

    /// Next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// An empty buffer for a payload of `len` bytes of a message to
    /// [`submit`]: the allocation of a message the peer already confirmed,
    /// if a spare one fits (a new one otherwise).
    ///
    /// [`submit`]: Session::submit
    pub fn message_buffer(&mut self, len: usize) -> Vec<u8> {
        self.journal.message_buffer(len)
    }

    /// Hand back the bytes of a performed [`Action::Send`] (once they are
    /// in the send slot): a later message is encoded into the same
    /// allocation. Optional; a driver that drops them only allocates more.
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        self.spare.put(bytes);
    }

    /// Next operation completion for the application.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Next delivered message for the application.
    pub fn poll_delivery(&mut self) -> Option<(Seq, Vec<u8>)> {
        self.deliveries.pop_front()
    }

    /// Next delivered message, swapped into `buf` (whose old contents are
    /// gone): the allocation `buf` held takes a later message, so an
    /// application that receives into one buffer makes no allocation per
    /// message.
    pub fn poll_delivery_into(&mut self, buf: &mut Vec<u8>) -> Option<Seq> {
        let (seq, mut bytes) = self.deliveries.pop_front()?;
        std::mem::swap(buf, &mut bytes);
        self.delivery_spare.put(bytes);
        Some(seq)
    }

    /// Next event for observers.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next()
    }

    // ---------------------------------------------------------------
    // internal helpers
    // ---------------------------------------------------------------

    fn go(&mut self, to: State, cause: Cause, now: Timestamp) {
        match self.machine.go(to, cause, now) {
            Ok(t) => {
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

    fn complete(&mut self, cs: Vec<Completion>) {
        self.completions.extend(cs);
    }

    fn viable_paths(&self) -> Vec<usize> {
        (0..self.cfg.paths.len())
            .filter(|&i| self.device_for_path(i).is_some())
            .collect()
    }

    /// The present device that would carry path `i`.
    fn device_for_path(&self, i: usize) -> Option<&DeviceInfo> {
        let p = self.cfg.paths[i];
        self.devices.iter().find(|d| {
            d.port_state == PortState::Active
                && self.cfg.policy.device_match.allows(d, self.first_guid)
                && match p.local {
                    Some(l) => d.owns(l),
                    None => d.reaches(p.peer.ip()) || d.owns(p.peer.ip()),
                }
        })
    }

    fn is_current_device(&self, id: &DeviceId) -> bool {
        self.current_device.as_ref().is_some_and(|d| d.id == *id)
    }

    /// The transport is gone: tear down, keep the session, start recovery.
    fn lose_transport(&mut self, cause: DownCause, now: Timestamp) {
        let state = self.state();
        if !matches!(
            state,
            State::Established | State::Resyncing | State::Reconnecting | State::Connecting
        ) {
            return;
        }
        tracing::info!(session = %self.cfg.id, %cause, epoch = %self.epoch, "transport lost");
        self.counters.losses += 1;
        self.events.push_back(SessionEvent::DeviceLost { cause });
        self.actions
            .push_back(Action::TearDown { epoch: self.epoch });
        self.journal.transport_down();
        self.one_sided_inflight.clear();
        if cause == DownCause::CmDeviceRemoval {
            // rdma_cm says the device is going away; the device list may
            // still show it for a while (its removal waits for its users).
            // Forget it now, so the next attempt takes a path it does not
            // carry; its return is a device-add of a new registration.
            if let Some(gone) = self.current_device.as_ref().map(|d| d.id.clone()) {
                self.devices.retain(|d| d.id != gone);
            }
        }
        self.current_device = None;
        self.timers.stop(TimerKind::KeepaliveSend);
        self.timers.stop(TimerKind::KeepaliveDeadline);
        self.timers.stop(TimerKind::ConnectTimeout);
        if self.outage_start.is_none() {
            self.outage_start = Some(now);
            self.replayed_this_outage = 0;
            if let Some(t) = self.cfg.policy.ctrl_loss_tmo {
                self.timers.set(TimerKind::GiveUp, now + t);
            }
            if let Some(t) = self.cfg.policy.fast_io_fail_tmo {
                self.timers.set(TimerKind::FastFail, now + t);
            }
        }
        self.go(State::Recovering, Cause::TransportDown(cause), now);
        self.attempt = 0;
        self.refusals = 0;
        // A loss on the peer's side (or somewhere between): the next attempt
        // tries the next path first, so a second HCA or route takes over at
        // once instead of waiting for the dead address to time out. A loss
        // of the local device keeps the path: while the device is gone the
        // path is not viable anyway, and when it returns (a reset, a
        // replacement) it is the natural one to resume on.
        let local = matches!(
            cause,
            DownCause::DeviceRemoved
                | DownCause::DeviceFatal
                | DownCause::PortDown
                | DownCause::CmDeviceRemoval
        );
        if !local && !self.cfg.paths.is_empty() {
            self.path_index = (self.path_index + 1) % self.cfg.paths.len();
        }
        self.schedule_attempt(now);
    }

    /// Arm the backoff for the next attempt (initiator only).
    fn schedule_attempt(&mut self, now: Timestamp) {
        if self.cfg.role != Role::Initiator {
            return;
        }
        let r = self.jitter.next();
        let mut delay = self.cfg.policy.backoff(self.attempt, r);
        if self.refusals > 0 {
            delay = delay.min(self.cfg.policy.refused_delay(self.refusals, r));
        }
        self.timers.set(TimerKind::Backoff, now + delay);
    }

    /// Start an attempt if a device can carry one; otherwise keep waiting
    /// (a device-add event will call again).
    fn try_attempt(&mut self, now: Timestamp) {
        if self.state() != State::Recovering || self.cfg.role != Role::Initiator {
            return;
        }
        let viable = self.viable_paths();
        if viable.is_empty() {
            tracing::debug!(session = %self.cfg.id, "no device reaches the peer yet");
            return;
        }
        // Prefer the first path when failing back, else keep rotating
        // from the current one.
        let pick = if self.cfg.policy.failback {
            viable[0]
        } else {
            *viable
                .iter()
                .find(|&&i| i >= self.path_index)
                .unwrap_or(&viable[0])
        };
        self.path_index = pick;
        self.attempt += 1;
        self.counters.attempts += 1;
        self.epoch = self.epoch.next();
        self.go(State::Reconnecting, Cause::Attempt(self.attempt), now);
        self.events.push_back(SessionEvent::Recovering {
            attempt: self.attempt,
        });
        let pd = self.resume_private_data();
        self.actions.push_back(Action::Connect {
            epoch: self.epoch,
            path: self.cfg.paths[pick],
            private_data: pd,
        });
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
    }

    /// When the connection being made now must be up (CM and in-band
    /// handshake): an initiator's attempt gets [`Policy::attempt_timeout`]
    /// of its number in the outage, a target the whole `connect_timeout`.
    fn connect_deadline(&self, now: Timestamp) -> Timestamp {
        let p = &self.cfg.policy;
        now + match self.cfg.role {
            Role::Initiator => p.attempt_timeout(self.attempt.max(1)),
            Role::Target => p.connect_timeout,
        }
    }

    fn resume_private_data(&self) -> Vec<u8> {
        match &self.secret {
            Some(secret) => wire::ConnectData::Resume(wire::Resume::sign(
                secret,
                self.cfg.id,
                self.epoch,
                self.inbox.last_delivered(),
            ))
            .to_vec(),
            None => wire::ConnectData::Hello(wire::Hello {
                session: self.cfg.id,
                incarnation: self.cfg.incarnation,
            })
            .to_vec(),
        }
    }

    fn attempt_failed(&mut self, why: String, now: Timestamp) {
        self.refusals = 0;
        self.attempt_failed_with(why, now);
    }

    /// The attempt failed; the next one comes after the backoff (or sooner,
    /// after `refused_backoff`, while `refusals` counts refusals in a row).
    fn attempt_failed_with(&mut self, why: String, now: Timestamp) {
        if self.state() != State::Reconnecting && self.state() != State::Connecting {
            return;
        }
        tracing::debug!(session = %self.cfg.id, attempt = self.attempt, %why, "attempt failed");
        self.actions
            .push_back(Action::TearDown { epoch: self.epoch });
        self.timers.stop(TimerKind::ConnectTimeout);
        if self.outage_start.is_none() {
            // The very first connection failed: the outage starts now.
            self.outage_start = Some(now);
            if let Some(t) = self.cfg.policy.ctrl_loss_tmo {
                self.timers.set(TimerKind::GiveUp, now + t);
            }
            if let Some(t) = self.cfg.policy.fast_io_fail_tmo {
                self.timers.set(TimerKind::FastFail, now + t);
            }
        }
        self.go(State::Recovering, Cause::AttemptFailed(why), now);
        // Rotate to the next path for the next attempt.
        if !self.cfg.paths.is_empty() {
            self.path_index = (self.path_index + 1) % self.cfg.paths.len();
        }
        self.schedule_attempt(now);
    }

    fn fail(&mut self, cause: Cause, err: OpError, now: Timestamp) {
        if self.state().is_terminal() {
            return;
        }
        if self.current_device.is_some() || self.state() == State::Reconnecting {
            self.actions
                .push_back(Action::TearDown { epoch: self.epoch });
        }
        self.current_device = None;
        self.timers.clear();
        let cs = self.journal.fail_all(err);
        self.complete(cs);
        self.go(State::Failed, cause, now);
    }

    /// The transport of the current epoch is up (CM established) and the
    /// handshake checked out: exchange advertisements.
    fn start_resync(
        &mut self,
        device: DeviceInfo,
        local: Vec<LocalKeys>,
        peer_delivered: Seq,
        now: Timestamp,
    ) {
        // The connect timeout keeps running through the in-band handshake:
        // a connection that CM established but that carries nothing (a
        // broken data path) is abandoned after it, not after the keepalive.
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
        self.timers.stop(TimerKind::Backoff);
        if self.first_guid.is_none() {
            self.first_guid = Some(device.node_guid);
        }
        self.current_device = Some(device);
        self.local_keys = local;
        self.peer_keys.begin(self.epoch);
        let first = self.state() == State::Connecting;
        if !first {
            let cs = self
                .journal
                .resume(peer_delivered, self.cfg.policy.replay_atomics);
            self.complete(cs);
            self.replaying = self.journal.pending_replays() as u64;
        } else {
            let completions = &mut self.completions;
            self.journal
                .on_peer_delivered_with(peer_delivered, |c| completions.push_back(c));
        }
        self.peer_delivered = self.peer_delivered.max(peer_delivered);
        if !first {
            self.go(State::Resyncing, Cause::Accepted, now);
        }
        // Advertise every advertised region for this epoch, then say done.
        let adverts: Vec<wire::Advert> = self
            .cfg
            .spec
            .regions
            .iter()
            .filter(|r| r.advertise)
            .filter_map(|r| {
                let k = self.local_keys.iter().find(|k| k.region == r.id)?;
                Some(wire::Advert {
                    epoch: self.epoch,
                    region: r.id,
                    addr: k.addr,
                    len: r.len,
                    rkey: k.rkey,
                    access: r.access.bits(),
                })
            })
            .collect();
        let per_message = self.max_message() / wire::ADVERT_LEN;
        for chunk in adverts.chunks(per_message.clamp(1, wire::MAX_ADVERTS_PER_MESSAGE)) {
            self.counters.adverts_sent += chunk.len() as u64;
            self.send_control(|ack, out| wire::encode_adverts(Seq(0), ack, chunk, out));
        }
        let epoch = self.epoch;
        self.send_control(|ack, out| wire::encode_advert_done(Seq(0), ack, epoch, out));
        self.arm_keepalive(now);
    }

    /// Queue an unsequenced control message; `build` encodes it with the
    /// piggybacked acknowledgement.
    fn send_control(&mut self, build: impl FnOnce(Seq, &mut Vec<u8>) -> Result<(), WireError>) {
        let mut bytes = self.spare.take(wire::HEADER_LEN + 16);
        let ack = self.inbox.last_delivered();
        if let Err(e) = build(ack, &mut bytes) {
            // Sizes are checked when the session is created: a bug.
            debug_assert!(false, "control message: {e}");
            tracing::error!(session = %self.cfg.id, "control message not encodable: {e}");
            return;
        }
        self.last_ack_sent = ack;
        self.timers.stop(TimerKind::AckDelay);
        self.actions.push_back(Action::Send {
            epoch: self.epoch,
            op: None,
            bytes,
        });
    }

    fn arm_keepalive(&mut self, now: Timestamp) {
        if let Some(k) = self.cfg.policy.keepalive {
            self.timers.set(TimerKind::KeepaliveSend, now + k);
        }
        if let Some(d) = self.cfg.policy.keepalive_deadline() {
            self.timers.set(TimerKind::KeepaliveDeadline, now + d);
        }
    }

    /// Both sides advertised: traffic flows.
    fn finish_resync(&mut self, now: Timestamp) {
        let first = self.state() == State::Connecting;
        let downtime = self
            .outage_start
            .take()
            .map(|s| now - s)
            .unwrap_or_default();
        self.timers.stop(TimerKind::GiveUp);
        self.timers.stop(TimerKind::FastFail);
        self.timers.stop(TimerKind::ConnectTimeout);
        self.fast_failing = false;
        self.attempt = 0;
        self.refusals = 0;
        self.go(
            State::Established,
            if first {
                Cause::Accepted
            } else {
                Cause::Resynced
            },
            now,
        );
        if !first || downtime > Duration::ZERO {
            self.counters.resumes += 1;
            self.counters.downtime_ns += u64::try_from(downtime.as_nanos()).unwrap_or(u64::MAX);
            let replayed = std::mem::take(&mut self.replaying);
            self.counters.replayed += replayed;
            self.events.push_back(SessionEvent::Resumed {
                downtime,
                replayed,
                deduplicated: self.inbox.duplicates(),
                device: self.current_device.as_ref().map(|d| d.id.clone()),
            });
        }
        self.pump(now);
    }

    /// Post what may be posted: queued and replayed operations in order,
    /// within the peer's receive credits.
    fn pump(&mut self, _now: Timestamp) {
        if self.state() != State::Established {
            return;
        }
        let credits = u64::from(self.cfg.spec.recv_slots)
            .saturating_sub(CONTROL_RESERVE)
            .max(1);
        while let Some((op, kind, seq)) = self.journal.next_unposted() {
            if !kind.is_message()
                && self.one_sided_inflight.len() >= self.cfg.spec.max_one_sided as usize
            {
                break; // the send queue holds no more; order is kept
            }
            let action = match kind {
                OpKind::Message { payload } => {
                    let seq = seq.expect("messages are sequenced");
                    if seq.0.saturating_sub(self.peer_delivered.0) > credits {
                        break; // wait for the peer to deliver
                    }
                    let mut bytes = self.spare.take(wire::HEADER_LEN + payload.len());
                    let ack = self.inbox.last_delivered();
                    // Payload sizes are checked at submit.
                    let _ =
                        wire::encode_message(wire::MsgKind::Data, seq, ack, payload, &mut bytes);
                    self.last_ack_sent = ack;
                    self.timers.stop(TimerKind::AckDelay);
                    Action::Send {
                        epoch: self.epoch,
                        op: Some(op),
                        bytes,
                    }
                }
                OpKind::Write { local, remote } | OpKind::Read { local, remote } => {
                    let (kind, right) = if matches!(kind, OpKind::Write { .. }) {
                        (OneSided::Write, Access::REMOTE_WRITE)
                    } else {
                        (OneSided::Read, Access::REMOTE_READ)
                    };
                    let local = *local;
                    match self
                        .peer_keys
                        .translate(*remote, u64::from(local.len), right)
                    {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind,
                            local,
                            remote: addr,
                        },
                        Err(e) => {
                            self.key_error(op, e);
                            continue;
                        }
                    }
                }
                OpKind::FetchAdd { local, remote, add } => {
                    let local = *local;
                    let add = *add;
                    match self.peer_keys.translate(*remote, 8, Access::REMOTE_ATOMIC) {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind: OneSided::FetchAdd { add },
                            local,
                            remote: addr,
                        },
                        Err(e) => {
                            self.key_error(op, e);
                            continue;
                        }
                    }
                }
                OpKind::CmpSwap {
                    local,
                    remote,
                    compare,
                    swap,
                } => {
                    let (local, compare, swap) = (*local, *compare, *swap);
                    match self.peer_keys.translate(*remote, 8, Access::REMOTE_ATOMIC) {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind: OneSided::CmpSwap { compare, swap },
                            local,
                            remote: addr,
                        },
                        Err(e) => {
                            self.key_error(op, e);
                            continue;
                        }
                    }
                }
            };
            self.journal.mark_posted(op);
            if matches!(action, Action::OneSided { .. }) {
                self.one_sided_inflight.insert(op);
            }
            self.actions.push_back(action);
        }
    }

    fn key_error(&mut self, op: OpId, e: KeyError) {
        tracing::warn!(session = %self.cfg.id, %op, "token no longer valid: {e}");
        if let Some(c) = self.journal.on_remote_error(op, WcStatus::RemAccessErr) {
            self.completions.push_back(c);
        }
    }

    /// Acknowledge at once after a quarter of the receive slots, else
    /// within `ack_delay` (unless an outgoing message carries it first).
    fn maybe_ack(&mut self, now: Timestamp) {
        let delivered = self.inbox.last_delivered();
        let every = (u64::from(self.cfg.spec.recv_slots) / 4).max(1);
        if delivered.0.saturating_sub(self.last_ack_sent.0) >= every {
            self.send_ack();
        } else if delivered > self.last_ack_sent && self.timers.get(TimerKind::AckDelay).is_none() {
            self.timers
                .set(TimerKind::AckDelay, now + self.cfg.policy.ack_delay);
        }
    }

    fn send_ack(&mut self) {
        self.timers.stop(TimerKind::AckDelay);
        self.send_control(|ack, out| {
            wire::encode_ack(ack, out);
            Ok(())
        });
    }

    // ---------------------------------------------------------------
    // commands
    // ---------------------------------------------------------------

    /// Initiator: connect for the first time (the first attempt is
    /// immediate; failures follow the policy like any outage).
    pub fn connect(&mut self, now: Timestamp) -> Result<(), SessionError> {
        if self.cfg.role != Role::Initiator {
            return Err(SessionError::BadState("only an initiator connects"));
        }
        if self.state() != State::Idle {
            return Err(SessionError::BadState("connect is for a new session"));
        }
        if self.cfg.paths.is_empty() {
            return Err(SessionError::BadState("no path to the peer"));
        }
        self.go(State::Connecting, Cause::Connect, now);
        let Some(&pick) = self.viable_paths().first() else {
            // No device yet: wait for one, under the give-up deadline.
            self.attempt_failed("no device reaches the peer".into(), now);
            return Ok(());
        };
        self.path_index = pick;
        self.epoch = self.epoch.next();
        self.attempt = 1;
        self.counters.attempts += 1;
        let pd = self.resume_private_data();
        self.actions.push_back(Action::Connect {
            epoch: self.epoch,
            path: self.cfg.paths[pick],
            private_data: pd,
        });
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
        Ok(())
    }

    /// Submit an operation. It completes exactly once (see
    /// [`crate::journal`]); while the session recovers it waits.
    pub fn submit(&mut self, kind: OpKind, now: Timestamp) -> Result<OpId, SessionError> {
        if self.state().is_terminal() {
            return Err(SessionError::Terminal(self.state()));
        }
        if let OpKind::Message { payload } = &kind {
            if payload.len() > self.max_message() {
                return Err(SessionError::TooLarge {
                    len: payload.len(),
                    max: self.max_message(),
                });
            }
        }
        let local = match &kind {
            OpKind::Message { .. } => None,
            OpKind::Write { local, .. }
            | OpKind::Read { local, .. }
            | OpKind::FetchAdd { local, .. }
            | OpKind::CmpSwap { local, .. } => Some(*local),
        };
        if let Some(l) = local {
            let ok = self.cfg.spec.regions.iter().any(|r| {
                r.id == l.region
                    && l.offset
                        .checked_add(u64::from(l.len))
                        .is_some_and(|e| e <= r.len)
            });
            let atomic = matches!(kind, OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. });
            if !ok || (atomic && l.len != 8) {
                return Err(SessionError::BadLocal(l));
            }
        }
        let (op, _) = self.journal.submit(kind);
        if self.fast_failing {
            let cs = self.journal.fail_queued(OpError::FastFail);
            self.complete(cs);
        } else {
            self.pump(now);
        }
        Ok(op)
    }

    /// Close the session: cancels recovery at once; every pending
    /// operation fails with `Disconnected`.
    pub fn close(&mut self, now: Timestamp) {
        self.close_inner(now, true);
    }

    /// Close; `tell_peer`: say goodbye first so the peer closes its half
    /// instead of waiting for a reconnection until its give-up deadline.
    fn close_inner(&mut self, now: Timestamp, tell_peer: bool) {
        if self.state() == State::Closed {
            return;
        }
        if self.current_device.is_some() {
            if tell_peer && matches!(self.state(), State::Established | State::Resyncing) {
                self.send_control(|ack, out| {
                    wire::encode_close(ack, out);
                    Ok(())
                });
            }
            self.actions
                .push_back(Action::Disconnect { epoch: self.epoch });
        }
        if self.state() != State::Failed && self.state() != State::Idle {
            self.actions
                .push_back(Action::TearDown { epoch: self.epoch });
        }
        self.current_device = None;
        self.timers.clear();
        let cs = self.journal.fail_all(OpError::Disconnected);
        self.complete(cs);
        self.go(State::Closed, Cause::Disconnect, now);
        self.events.push_back(SessionEvent::Disconnected);
    }

    // ---------------------------------------------------------------
    // inputs
    // ---------------------------------------------------------------

    /// A device event (from every source the driver watches).
    pub fn handle_device_event(&mut self, ev: &DeviceEvent, now: Timestamp) {
        let id = &ev.device.id;
        match ev.kind {
            DeviceEventKind::Added
            | DeviceEventKind::PortUp
            | DeviceEventKind::AddrChange
            | DeviceEventKind::NetdevAttach => {
                self.devices.retain(|d| d.id.name != id.name);
                self.devices.push(ev.device.clone());
                if self.state() == State::Recovering && self.cfg.role == Role::Initiator {
                    // A device-add cuts the backoff short.
                    self.timers.set(TimerKind::Backoff, now);
                }
            }
            DeviceEventKind::Removed
            | DeviceEventKind::Fatal
            | DeviceEventKind::PortDown
            | DeviceEventKind::NetdevDetach => {
                let cause = match ev.kind {
                    DeviceEventKind::Removed => DownCause::DeviceRemoved,
                    DeviceEventKind::Fatal => DownCause::DeviceFatal,
                    _ => DownCause::PortDown,
                };
                if ev.kind == DeviceEventKind::Removed {
                    self.devices.retain(|d| d.id != *id);
                } else if let Some(d) = self.devices.iter_mut().find(|d| d.id == *id) {
                    d.port_state = PortState::Down;
                }
                if self.is_current_device(id) {
                    self.lose_transport(cause, now);
                }
            }
        }
    }

    /// The devices present now (at start, or after a rescan).
    pub fn set_devices(&mut self, devices: Vec<DeviceInfo>, now: Timestamp) {
        self.devices = devices;
        if let Some(cur) = self.current_device.clone() {
            if !self.devices.iter().any(|d| d.id == cur.id) {
                self.lose_transport(DownCause::DeviceRemoved, now);
            }
        }
    }

    /// Initiator: the connection of `epoch` is established on `device`;
    /// `private_data` is the target's accept data; `local` are the rkeys of
    /// the regions the driver registered.
    pub fn handle_connected(
        &mut self,
        epoch: Epoch,
        device: DeviceInfo,
        private_data: &[u8],
        local: Vec<LocalKeys>,
        now: Timestamp,
    ) {
        if epoch != self.epoch || !matches!(self.state(), State::Connecting | State::Reconnecting) {
            return;
        }
        let reply = match wire::AcceptData::decode(private_data) {
            Ok(r) => r,
            Err(e) => {
                self.attempt_failed(format!("bad accept data: {e}"), now);
                return;
            }
        };
        match reply {
            wire::AcceptData::Welcome(wire::Welcome {
                session,
                incarnation,
                secret,
            }) => {
                if session != self.cfg.id || self.secret.is_some() {
                    self.attempt_failed("unexpected welcome".into(), now);
                    return;
                }
                self.secret = Some(secret);
                self.peer_incarnation = Some(incarnation);
                self.start_resync(device, local, Seq(0), now);
            }
            wire::AcceptData::Resumed(r) => {
                let Some(secret) = &self.secret else {
                    self.attempt_failed("resume reply to a hello".into(), now);
                    return;
                };
                if r.session != self.cfg.id || r.epoch != self.epoch || !r.verify(secret) {
                    self.attempt_failed("resume reply failed authentication".into(), now);
                    return;
                }
                if self.peer_incarnation != Some(r.incarnation) {
                    let why = "the peer restarted (new incarnation)".to_string();
                    self.events.push_back(SessionEvent::PeerLost {
                        reason: why.clone(),
                    });
                    self.fail(Cause::PeerLost(why), OpError::PeerLost, now);
                    return;
                }
                self.start_resync(device, local, r.last_delivered, now);
            }
        }
    }

    /// Initiator: the target refused the connection of `epoch`.
    pub fn handle_rejected(&mut self, epoch: Epoch, private_data: &[u8], now: Timestamp) {
        if epoch != self.epoch {
            return;
        }
        match wire::RejectData::decode(private_data).map(|wire::RejectData::Refused(r)| r.reason) {
            Ok(wire::RefuseReason::UnknownSession) if self.secret.is_some() => {
                let why = "the peer does not know this session (it restarted)".to_string();
                self.events.push_back(SessionEvent::PeerLost {
                    reason: why.clone(),
                });
                self.fail(Cause::PeerLost(why), OpError::PeerLost, now);
            }
            Ok(wire::RefuseReason::BadAuthenticator) => {
                let why = "the peer refused our authenticator".to_string();
                self.events.push_back(SessionEvent::PeerLost {
                    reason: why.clone(),
                });
                self.fail(Cause::PeerLost(why), OpError::PeerLost, now);
            }
            Ok(reason) => self.attempt_failed(format!("refused: {reason:?}"), now),
            Err(_) => {
                // The peer's CM answered for it: host and device are there,
                // the application is not listening (yet).
                self.refusals = self.refusals.saturating_add(1);
                self.attempt_failed_with("rejected (no listener?)".into(), now);
            }
        }
    }

    /// Initiator: the attempt of `epoch` failed before a reply (address
    /// error, unreachable, resource creation failed).
    pub fn handle_attempt_failed(&mut self, epoch: Epoch, why: &str, now: Timestamp) {
        if epoch == self.epoch {
            self.attempt_failed(why.to_string(), now);
        }
    }

    /// The transport of `epoch` went down (CM event, async event,
    /// completion error).
    pub fn handle_transport_down(&mut self, epoch: Epoch, cause: DownCause, now: Timestamp) {
        if epoch != self.epoch {
            return;
        }
        if self.state() == State::Reconnecting {
            self.attempt_failed(format!("transport down during attempt: {cause}"), now);
        } else {
            self.lose_transport(cause, now);
        }
    }

    /// A send-queue completion of `epoch`; `op` is what the driver was
    /// given in the action (None for control messages).
    pub fn handle_send_completion(
        &mut self,
        epoch: Epoch,
        op: Option<OpId>,
        status: WcStatus,
        now: Timestamp,
    ) {
        if epoch != self.epoch {
            return;
        }
        let freed = op.is_some_and(|op| self.one_sided_inflight.remove(&op));
        match status {
            WcStatus::Success => {
                if let Some(op) = op {
                    if let Some(c) = self.journal.on_success(op) {
                        self.completions.push_back(c);
                    }
                }
            }
            WcStatus::RemAccessErr
            | WcStatus::RemInvReqErr
            | WcStatus::LocProtErr
            | WcStatus::LocLenErr
            | WcStatus::RemOpErr => {
                // The operation itself is bad: it fails alone, and the QP
                // is dead, so the transport is rebuilt.
                if let Some(op) = op {
                    if let Some(c) = self.journal.on_remote_error(op, status) {
                        self.completions.push_back(c);
                    }
                }
                self.lose_transport(DownCause::Completion(status), now);
            }
            _ => self.lose_transport(DownCause::Completion(status), now),
        }
        // Only a finished one-sided operation makes room for queued work
        // (a message's send completion frees no credit; after a loss the
        // session is not established).
        if freed {
            self.pump(now);
        }
    }

    /// A receive completion of `epoch` with the bytes received.
    pub fn handle_received(&mut self, epoch: Epoch, bytes: &[u8], now: Timestamp) {
        if epoch != self.epoch {
            return;
        }
        if let Some(d) = self.cfg.policy.keepalive_deadline() {
            if self.timers.get(TimerKind::KeepaliveDeadline).is_some() {
                self.timers.set(TimerKind::KeepaliveDeadline, now + d);
            }
        }
        let (h, body) = match wire::decode_typed(bytes) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(session = %self.cfg.id, "malformed message dropped: {e}");
                return;
            }
        };
        let credited = h.ack > self.peer_delivered;
        if credited {
            self.peer_delivered = h.ack;
            let completions = &mut self.completions;
            self.journal
                .on_peer_delivered_with(h.ack, |c| completions.push_back(c));
        }
        match body {
            MsgBody::Data(payload) => match self.inbox.accept(h.seq) {
                InboxAccept::Deliver => {
                    self.counters.delivered += 1;
                    let mut bytes = self.delivery_spare.take(payload.len());
                    bytes.extend_from_slice(payload);
                    self.deliveries.push_back((h.seq, bytes));
                    self.maybe_ack(now);
                }
                InboxAccept::Duplicate => {}
                InboxAccept::Gap { expected } => {
                    tracing::error!(session = %self.cfg.id, got = %h.seq, %expected, "sequence gap: protocol violation");
                }
            },
            MsgBody::Adverts(adverts) => {
                for a in adverts {
                    self.peer_keys.insert(
                        a.epoch,
                        a.region,
                        RemoteRegion {
                            addr: a.addr,
                            len: a.len,
                            rkey: a.rkey,
                            access: Access::from_bits_truncate(a.access),
                        },
                    );
                }
            }
            MsgBody::AdvertDone { epoch } => {
                if self.peer_keys.finish(epoch)
                    && matches!(self.state(), State::Resyncing | State::Connecting)
                {
                    self.finish_resync(now);
                }
            }
            MsgBody::Ack | MsgBody::KeepaliveReply { .. } => {}
            MsgBody::Close => {
                // The peer closed on purpose: no recovery, our half ends too.
                tracing::info!(session = %self.cfg.id, "peer closed the session");
                self.close_inner(now, false);
                return;
            }
            MsgBody::Keepalive { nonce } => {
                self.send_control(|ack, out| {
                    wire::encode_keepalive_reply(ack, nonce, out);
                    Ok(())
                });
            }
        }
        // Confirmed deliveries give credits back: queued messages may go.
        // (The end of a resync pumps by itself.)
        if credited {
            self.pump(now);
        }
    }

    /// Time passed: fire what is due.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        for t in self.timers.take_expired(now) {
            match t {
                TimerKind::Backoff => self.try_attempt(now),
                // Connected but the in-band handshake did not finish.
                TimerKind::ConnectTimeout if self.current_device.is_some() => {
                    self.lose_transport(DownCause::ResyncTimeout, now);
                }
                TimerKind::ConnectTimeout => self.attempt_failed("connect timed out".into(), now),
                TimerKind::GiveUp => {
                    tracing::warn!(session = %self.cfg.id, "give-up deadline passed");
                    self.events.push_back(SessionEvent::GaveUp);
                    self.fail(Cause::GaveUp, OpError::GaveUp, now);
                }
                TimerKind::FastFail => {
                    self.fast_failing = true;
                    let cs = self.journal.fail_queued(OpError::FastFail);
                    self.complete(cs);
                }
                TimerKind::KeepaliveSend => {
                    if self.state() == State::Established {
                        self.keepalive_nonce += 1;
                        let n = self.keepalive_nonce;
                        self.send_control(|ack, out| {
                            wire::encode_keepalive(ack, n, out);
                            Ok(())
                        });
                        if let Some(k) = self.cfg.policy.keepalive {
                            self.timers.set(TimerKind::KeepaliveSend, now + k);
                        }
                    }
                }
                TimerKind::AckDelay => {
                    if matches!(self.state(), State::Established | State::Resyncing)
                        && self.inbox.last_delivered() > self.last_ack_sent
                    {
                        self.send_ack();
                    }
                }
                TimerKind::KeepaliveDeadline => {
                    if matches!(self.state(), State::Established | State::Resyncing) {
                        self.lose_transport(DownCause::KeepaliveTimeout, now);
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------
    // target side
    // ---------------------------------------------------------------

    /// Target: a new session from a Hello. `secret` must be 32 fresh random
    /// bytes. Returns the session with an [`Action::Accept`] queued.
    pub fn accept_hello(
        cfg: SessionConfig,
        request: RequestToken,
        peer_incarnation: Incarnation,
        secret: [u8; 32],
        now: Timestamp,
    ) -> Result<Session, crate::policy::PolicyError> {
        let mut s = Session::new(cfg, now)?;
        let secret = SessionSecret::from_bytes(secret);
        s.peer_incarnation = Some(peer_incarnation);
        s.epoch = Epoch(1);
        s.go(State::Connecting, Cause::Connect, now);
        let pd = wire::AcceptData::Welcome(wire::Welcome {
            session: s.cfg.id,
            incarnation: s.cfg.incarnation,
            secret: secret.clone(),
        })
        .to_vec();
        s.secret = Some(secret);
        s.actions.push_back(Action::Accept {
            epoch: s.epoch,
            request,
            private_data: pd,
        });
        s.timers.set(
            TimerKind::ConnectTimeout,
            now + s.cfg.policy.connect_timeout,
        );
        Ok(s)
    }

    /// Target: a resume request for this session. Verifies it and queues
    /// an [`Action::Accept`] (or [`Action::Reject`]).
    pub fn handle_resume_request(
        &mut self,
        request: RequestToken,
        resume: &wire::Resume,
        now: Timestamp,
    ) {
        let refuse = |s: &mut Session, reason| {
            s.actions.push_back(Action::Reject {
                request,
                private_data: wire::RejectData::Refused(wire::Refused { reason }).to_vec(),
            });
        };
        if self.state().is_terminal() {
            refuse(self, wire::RefuseReason::UnknownSession);
            return;
        }
        let Some(secret) = self.secret.clone() else {
            refuse(self, wire::RefuseReason::UnknownSession);
            return;
        };
        if !resume.verify(&secret) {
            refuse(self, wire::RefuseReason::BadAuthenticator);
            return;
        }
        if resume.epoch <= self.epoch {
            refuse(self, wire::RefuseReason::StaleEpoch);
            return;
        }
        // The initiator reconnected: whatever we thought of the old
        // transport, it is gone.
        if self.state() != State::Recovering {
            self.lose_transport(DownCause::CmDisconnected, now);
        }
        self.epoch = resume.epoch;
        let reply = wire::Resumed::sign(
            &secret,
            self.cfg.id,
            self.epoch,
            self.cfg.incarnation,
            self.inbox.last_delivered(),
        );
        self.actions.push_back(Action::Accept {
            epoch: self.epoch,
            request,
            private_data: wire::AcceptData::Resumed(reply).to_vec(),
        });
        self.pending_peer_delivered = resume.last_delivered;
        self.go(State::Reconnecting, Cause::Attempt(1), now);
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
    }

    /// Target: the accepted connection of `epoch` is established.
    pub fn handle_accepted(
        &mut self,
        epoch: Epoch,
        device: DeviceInfo,
        local: Vec<LocalKeys>,
        now: Timestamp,
    ) {
        if epoch != self.epoch || !matches!(self.state(), State::Connecting | State::Reconnecting) {
            return;
        }
        let delivered = self.pending_peer_delivered;
        self.start_resync(device, local, delivered, now);
    }
}
