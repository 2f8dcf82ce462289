//! Planned outages: a drain ([`Session::drain_device`]) moves a session
//! off a device before it goes, and a suspend ([`Session::suspend`]) parks
//! it until the initiator resumes it. Neither is a loss: nothing is
//! replayed and no operation ends `Indeterminate`, because the connection
//! is taken down only once both ends are quiet.
//!
//! ## The quiesce handshake
//!
//! 1. The end that plans (the initiator; a target's drain asks the
//!    initiator with a `MoveRequest`) stops posting new operations —
//!    they queue in the journal — and sends `Quiesce { purpose }`.
//! 2. The peer stops posting too and, once nothing it posted is in flight
//!    (no one-sided operation waits for its completion, no message it
//!    reads itself waits for its data), answers
//!    `Quiesced`. Every message either end sent before these two was
//!    delivered (RC order), and both carry the acknowledgement of them, so
//!    the journals hold nothing posted.
//! 3. The initiator, once it is quiet itself and has the `Quiesced`,
//!    disconnects ([`Action::Disconnect`]: what it posted leaves first).
//!    - A drain goes to `Recovering` (cause [`DownCause::Planned`]) and
//!      makes its attempt at once on the path the drain picked: a resume
//!      with nothing to replay, then what queued meanwhile is posted.
//!    - A suspend goes to `Suspended`: no attempt, no give-up deadline,
//!      until [`Session::resume`].
//!
//! The target's half sees the disconnect after its `Quiesced` as planned:
//! `Recovering` (a drain; its give-up deadline runs as after a loss) or
//! `Suspended` (a suspend: it waits for the initiator's resume, however
//! long). A peer that never answers (an older relink, a broken data path)
//! is waited for until the `connect_timeout`; then the connection is taken
//! down anyway, and what was in flight is replayed as after a loss.
//!
//! A real loss during the handshake is a loss: recovery runs as usual (a
//! suspend asked for parks the session at once instead; a drain's path is
//! tried first).

use relink_fabric::{DeviceId, Timestamp};

use super::{Action, Role, Session, SessionError, SessionEvent, StandbyLoss};
use crate::ids::Seq;
use crate::reason::DownCause;
use crate::state::{Cause, State};
use crate::timers::TimerKind;
use crate::wire::{self, MsgBody, QuiescePurpose};

/// What a planned outage is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plan {
    /// Move the session to another path (a drain).
    Drain,
    /// Park the session until the initiator resumes it.
    Suspend,
}

impl Plan {
    fn purpose(self) -> QuiescePurpose {
        match self {
            Plan::Drain => QuiescePurpose::Move,
            Plan::Suspend => QuiescePurpose::Suspend,
        }
    }

    fn from_purpose(p: QuiescePurpose) -> Plan {
        match p {
            QuiescePurpose::Move => Plan::Drain,
            QuiescePurpose::Suspend => Plan::Suspend,
        }
    }
}

/// A planned outage under way on this end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Planned {
    /// What it is for.
    plan: Plan,
    /// Initiator: the path a drain takes (an index in the paths).
    path: Option<usize>,
    /// Initiator: the `Quiesce` went out (it waits for an established
    /// transport). Target: the `Quiesced` went out.
    sent: bool,
    /// Initiator: the peer answered `Quiesced`.
    peer_quiet: bool,
}

/// Planned outages: the part of [`Session`] this file owns. (Which
/// devices are drained is the devices' part, in
/// [`paths`](super::paths): it decides which paths are viable.)
#[derive(Debug, Default)]
pub(super) struct PlannedOutage {
    /// A planned outage (drain or suspend) under way: the pump posts
    /// nothing new while both ends quiesce.
    under_way: Option<Planned>,
    /// A suspend was asked for and the transport was lost meanwhile: the
    /// session parks instead of recovering.
    suspend_after_loss: bool,
    /// [`Session::resume`] came while a suspend was still under way: the
    /// session resumes (on this path, if named) as soon as it is
    /// suspended.
    resume_when_suspended: Option<Option<usize>>,
}

impl PlannedOutage {
    /// Whether a planned outage is under way.
    pub(super) fn is_under_way(&self) -> bool {
        self.under_way.is_some()
    }

    /// The session ends: no plan goes on, no resume follows.
    pub(super) fn cancel(&mut self) {
        self.under_way = None;
        self.resume_when_suspended = None;
    }

    /// Resume (on `path`, if named) as soon as the suspend under way
    /// completes.
    pub(super) fn resume_once_suspended(&mut self, path: Option<usize>) {
        self.resume_when_suspended = Some(path);
    }
}

impl Session {
    /// Whether a planned outage stops the pump: nothing new is posted
    /// while both ends quiesce.
    pub(super) fn quiescing(&self) -> bool {
        self.planned.under_way.is_some()
    }

    /// The planned outage under way, if any: what it is for.
    pub fn planned(&self) -> Option<Plan> {
        self.planned.under_way.as_ref().map(|p| p.plan)
    }

    /// Whether the session is suspended ([`State::Suspended`]).
    pub fn is_suspended(&self) -> bool {
        self.state() == State::Suspended
    }

    /// Devices being drained: no attempt takes a path they carry.
    pub fn draining_devices(&self) -> &[DeviceId] {
        self.devices.draining()
    }

    /// Move the session off `device` before it goes: no attempt of this
    /// session takes the device while it is drained, and an established
    /// session it carries moves to another path — an initiator picks a
    /// present path on another device; a target asks its initiator to
    /// move (`MoveRequest`) off the target's address. Returns whether a
    /// move started (or was asked for); `false` when the device does not
    /// carry the session, or no other path is present
    /// ([`SessionEvent::DrainBlocked`] tells the second): the session stays
    /// where it is. A session recovering, resyncing or reconnecting on the
    /// device moves once it is established.
    pub fn drain_device(&mut self, device: &DeviceId, now: Timestamp) -> bool {
        self.devices.drain(device);
        self.refresh_candidates();
        self.start_pending_drain(now)
    }

    /// The device is no longer drained (the operator's maintenance is
    /// over): paths it carries may be taken again, and a session waiting
    /// for a device tries at once, as on a device-add.
    pub fn undrain_device(&mut self, device: &DeviceId, now: Timestamp) {
        if !self.devices.undrain(device) {
            return;
        }
        if self.decision.is_held() {
            self.refresh_candidates();
        } else if self.state() == State::Recovering && self.cfg.role == Role::Initiator {
            self.timers.set(TimerKind::Backoff, now);
        }
        // It may carry a standby again.
        self.maybe_build_standby(now);
    }

    /// Start a drain of the current device if it is being drained and the
    /// session is established (called again when it is established).
    pub(super) fn start_pending_drain(&mut self, now: Timestamp) -> bool {
        if self.state() != State::Established
            || self.planned.is_under_way()
            || self.closing.is_closing()
        {
            return false;
        }
        let Some(cur) = self.devices.current().map(|d| d.id.clone()) else {
            return false;
        };
        if !self.devices.is_draining(&cur) {
            return false;
        }
        match self.cfg.role {
            Role::Target => {
                tracing::info!(session = %self.cfg.id, device = %cur, "asking the initiator to move off a drained device");
                self.send_control(|ack, out| {
                    wire::encode_body(Seq(0), ack, &MsgBody::MoveRequest, out)
                });
                true
            }
            // Paths a drained device carries are not viable: any viable
            // one moves the session off it.
            Role::Initiator => self.begin_move(|_, _| true, now),
        }
    }

    /// Initiator: start a move to the first present path `ok` accepts;
    /// `false` (and [`SessionEvent::DrainBlocked`]) if there is none.
    fn begin_move(&mut self, ok: impl Fn(&Session, usize) -> bool, now: Timestamp) -> bool {
        let viable = self.viable_paths();
        let Some(path) = viable.into_iter().find(|&i| ok(self, i)) else {
            tracing::warn!(session = %self.cfg.id, "drain: no other path is present; the session stays");
            self.out.emit(SessionEvent::DrainBlocked);
            return false;
        };
        tracing::info!(session = %self.cfg.id, path, "drain: moving to another path");
        self.begin_plan(Plan::Drain, Some(path), now);
        true
    }

    /// Suspend the session: it stops posting, waits until both ends are
    /// quiet, takes the connection down and waits in
    /// [`State::Suspended`] — no attempt, no give-up deadline — until
    /// [`Session::resume`]. Operations submitted meanwhile wait; the peer
    /// sees a suspended session, not a loss. A resume that comes before the
    /// session is suspended lets the suspend complete, then resumes. A recovering session is
    /// suspended at once; one reconnecting or resyncing once it is
    /// established; suspending a suspended one does nothing.
    ///
    /// # Errors
    /// [`SessionError::BadState`] for a target (the initiator, which
    /// reconnects, suspends and resumes) or a session not yet established;
    /// [`SessionError::Closing`] while it closes gracefully;
    /// [`SessionError::Terminal`] once it ended.
    pub fn suspend(&mut self, now: Timestamp) -> Result<(), SessionError> {
        let state = self.state();
        if state.is_terminal() {
            return Err(SessionError::Terminal(state));
        }
        if self.closing.is_closing() {
            return Err(SessionError::Closing);
        }
        if self.cfg.role != Role::Initiator {
            return Err(SessionError::BadState(
                "only the initiator suspends and resumes a session",
            ));
        }
        if !self.recovery.was_established() {
            return Err(SessionError::BadState(
                "a session is suspended once it has been established",
            ));
        }
        // A suspend after a resume still pending: the later word holds.
        self.planned.resume_when_suspended = None;
        match state {
            State::Suspended => {}
            State::Recovering => self.enter_suspended(now),
            _ => self.begin_plan(Plan::Suspend, None, now),
        }
        Ok(())
    }

    /// This end plans an outage (initiator): stop posting, tell the peer
    /// when established.
    fn begin_plan(&mut self, plan: Plan, path: Option<usize>, now: Timestamp) {
        if let Some(p) = &mut self.planned.under_way {
            // A suspend overrides a drain under way (and keeps its
            // handshake); a drain does not override a suspend.
            if plan == Plan::Suspend {
                p.plan = plan;
                p.path = None;
            }
            return;
        }
        // The standby goes: the plan moves or parks the session on its
        // own terms; a new one follows the resync.
        self.drop_standby(false, StandbyLoss::Released, now);
        self.planned.under_way = Some(Planned {
            plan,
            path,
            sent: false,
            peer_quiet: false,
        });
        self.out.emit(SessionEvent::Quiescing { plan });
        self.send_quiesce(now);
    }

    /// Initiator: send the `Quiesce` of the plan once established, and
    /// bound the wait for the answer.
    pub(super) fn send_quiesce(&mut self, now: Timestamp) {
        if self.state() != State::Established || self.cfg.role != Role::Initiator {
            return;
        }
        let Some(p) = &mut self.planned.under_way else {
            return;
        };
        if p.sent {
            return;
        }
        p.sent = true;
        let purpose = p.plan.purpose();
        self.send_control(|ack, out| {
            wire::encode_body(Seq(0), ack, &MsgBody::Quiesce { purpose }, out)
        });
        self.timers.set(
            TimerKind::QuiesceDeadline,
            now + self.cfg.policy.connect_timeout,
        );
    }

    /// A `Quiesce` from the initiator (target): stop posting; answer once
    /// quiet.
    pub(super) fn on_quiesce(&mut self, purpose: QuiescePurpose, now: Timestamp) {
        if self.cfg.role != Role::Target || self.state() != State::Established {
            return;
        }
        let plan = Plan::from_purpose(purpose);
        if self.planned.under_way.is_none() {
            self.out.emit(SessionEvent::Quiescing { plan });
        }
        self.drop_standby(false, StandbyLoss::Released, now);
        self.planned.under_way = Some(Planned {
            plan,
            path: None,
            sent: false,
            peer_quiet: true,
        });
        self.settle_quiesce(now);
    }

    /// A `Quiesced` from the target (initiator).
    pub(super) fn on_quiesced(&mut self, now: Timestamp) {
        if let Some(p) = &mut self.planned.under_way {
            if self.cfg.role == Role::Initiator && p.sent {
                p.peer_quiet = true;
            }
        }
        self.settle_quiesce(now);
    }

    /// A `MoveRequest` from the target (initiator): move off the target's
    /// address of the current path.
    pub(super) fn on_move_request(&mut self, now: Timestamp) {
        if self.cfg.role != Role::Initiator
            || self.state() != State::Established
            || self.planned.is_under_way()
            || self.closing.is_closing()
        {
            return;
        }
        let cur_peer = self.cfg.paths[self.recovery.path_index()].peer;
        self.begin_move(|s, i| s.cfg.paths[i].peer != cur_peer, now);
    }

    /// Called after every input that may finish in-flight work: a quiet
    /// target answers `Quiesced`; a quiet initiator with the answer takes
    /// the connection down.
    pub(super) fn settle_quiesce(&mut self, now: Timestamp) {
        // Quiet: nothing of ours in flight, and no message of the peer's
        // half read (it lands, and is acknowledged, before the move).
        if self.state() != State::Established
            || !self.data.one_sided_idle()
            || self.data.inbox.is_fetching()
        {
            return;
        }
        let Some(p) = &mut self.planned.under_way else {
            return;
        };
        match self.cfg.role {
            Role::Target => {
                if !p.sent {
                    p.sent = true;
                    self.send_control(|ack, out| {
                        wire::encode_body(Seq(0), ack, &MsgBody::Quiesced, out)
                    });
                }
            }
            Role::Initiator => {
                if p.peer_quiet {
                    self.take_down_planned(now);
                }
            }
        }
    }

    /// The quiesce deadline passed without the peer's answer: take the
    /// connection down anyway (what is in flight is replayed).
    pub(super) fn quiesce_deadline_passed(&mut self, now: Timestamp) {
        if self.cfg.role == Role::Initiator && self.state() == State::Established {
            if let Some(p) = &self.planned.under_way {
                tracing::warn!(session = %self.cfg.id, plan = ?p.plan, "the peer did not answer the quiesce; taking the connection down anyway");
                self.take_down_planned(now);
            }
        }
    }

    /// Initiator, both ends quiet: disconnect, then move (a drain) or
    /// park (a suspend).
    fn take_down_planned(&mut self, now: Timestamp) {
        let Some(p) = self.planned.under_way.take() else {
            return;
        };
        self.timers.stop(TimerKind::QuiesceDeadline);
        self.out.act(Action::Disconnect { epoch: self.epoch });
        self.out.act(Action::TearDown { epoch: self.epoch });
        self.planned_down();
        self.counters.planned += 1;
        match p.plan {
            Plan::Suspend => self.enter_suspended(now),
            Plan::Drain => {
                self.start_outage(now);
                self.go(
                    State::Recovering,
                    Cause::TransportDown(DownCause::Planned),
                    now,
                );
                self.recovery.reset_attempts();
                self.decision.decide(p.path);
                self.try_attempt(now);
            }
        }
    }

    /// The transport goes on purpose: forget it without counting a loss.
    fn planned_down(&mut self) {
        self.forget_transport();
        self.timers.stop(TimerKind::AckDelay);
    }

    /// The transport went down (target, or an initiator's real loss)
    /// while a plan was under way. Returns whether the plan absorbed it:
    /// a target that answered `Quiesced` takes the disconnect as planned.
    pub(super) fn planned_loss(&mut self, now: Timestamp) -> bool {
        let Some(p) = self.planned.under_way.take() else {
            return false;
        };
        self.timers.stop(TimerKind::QuiesceDeadline);
        match self.cfg.role {
            Role::Target if p.sent && self.state() == State::Established => {
                tracing::info!(session = %self.cfg.id, plan = ?p.plan, "the initiator took the connection down as planned");
                self.out.act(Action::TearDown { epoch: self.epoch });
                self.planned_down();
                self.counters.planned += 1;
                match p.plan {
                    Plan::Suspend => self.enter_suspended(now),
                    Plan::Drain => {
                        self.start_outage(now);
                        self.go(
                            State::Recovering,
                            Cause::TransportDown(DownCause::Planned),
                            now,
                        );
                    }
                }
                true
            }
            Role::Initiator => {
                // A real loss: recovery as usual, but a suspend asked for
                // parks the session, and a drain's path goes first.
                match p.plan {
                    Plan::Suspend => self.planned.suspend_after_loss = true,
                    Plan::Drain => self.decision.prefer_path(p.path),
                }
                false
            }
            Role::Target => false,
        }
    }

    /// Where an initiator would schedule its next attempt: a suspend
    /// asked for (before the connection was up, or lost during its
    /// handshake) parks the session instead. Returns whether it did.
    pub(super) fn suspend_instead_of_attempt(&mut self, now: Timestamp) -> bool {
        let asked = self.planned.suspend_after_loss
            || self
                .planned
                .under_way
                .as_ref()
                .is_some_and(|p| p.plan == Plan::Suspend);
        if !asked || self.state() != State::Recovering || self.cfg.role != Role::Initiator {
            return false;
        }
        self.planned.under_way = None;
        self.timers.stop(TimerKind::QuiesceDeadline);
        self.enter_suspended(now);
        true
    }

    /// Whether an initiator's suspend was asked for and the session is
    /// not suspended yet.
    pub(super) fn suspend_asked(&self) -> bool {
        self.cfg.role == Role::Initiator
            && self.state() != State::Suspended
            && (self.planned.suspend_after_loss
                || self
                    .planned
                    .under_way
                    .as_ref()
                    .is_some_and(|p| p.plan == Plan::Suspend))
    }

    /// Park the session in `Suspended`: no attempt, no give-up deadline.
    /// A resume asked for meanwhile starts at once.
    pub(super) fn enter_suspended(&mut self, now: Timestamp) {
        self.planned.suspend_after_loss = false;
        self.timers.stop(TimerKind::Backoff);
        self.timers.stop(TimerKind::GiveUp);
        self.timers.stop(TimerKind::FastFail);
        self.timers.stop(TimerKind::ConnectTimeout);
        self.recovery.suspended();
        self.go(State::Suspended, Cause::Suspend, now);
        self.out.emit(SessionEvent::Suspended);
        if let Some(path) = self.planned.resume_when_suspended.take() {
            if self.cfg.role == Role::Initiator {
                self.resume_suspended(path, now);
            }
        }
    }

    /// Resume a suspended session (initiator): an attempt at once on
    /// `path` (or the one an automatic session would take), then the
    /// usual recovery under the policy, its give-up deadline from now.
    pub(super) fn resume_suspended(&mut self, path: Option<usize>, now: Timestamp) {
        tracing::info!(session = %self.cfg.id, ?path, "suspended session resumed");
        self.go(State::Recovering, Cause::Resume, now);
        self.start_outage(now);
        self.decision.decide(path);
        self.try_attempt(now);
    }

    /// Target: the initiator's resume reaches a suspended session.
    pub(super) fn resumed_by_peer(&mut self, now: Timestamp) {
        if self.state() == State::Suspended {
            self.go(State::Recovering, Cause::Resume, now);
            self.start_outage(now);
        }
    }
}
