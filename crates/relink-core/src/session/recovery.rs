//! The recovery flow: the first connect, losing the transport, attempts
//! with backoff (and the path each takes), the timers that drive them, and
//! the give-up ([`Session::fail`]). An attempt that reaches the peer
//! continues in [`resync`](super::resync); a close is in
//! [`closing`](super::closing).
//!
//! Its part of the session is [`Recovery`]: the outage under way and its
//! attempts (their number, path and refusals; the outage's start, its
//! give-up and fast-fail deadlines). Whether an attempt is a probe is
//! [`probe`](super::probe)'s, which path the application named
//! [`decision`](super::decision)'s.

use std::time::Duration;

use relink_fabric::{Timestamp, WcStatus};

use super::{Action, Role, Session, SessionError, SessionEvent, StandbyLoss};
use crate::ids::Epoch;
use crate::op::OpError;
use crate::policy::Policy;
use crate::reason::{AttemptFailure, DownCause};
use crate::state::{Cause, State};
use crate::timers::{TimerKind, TimerTable};

/// Small deterministic PRNG (SplitMix64) for backoff jitter: the core
/// reads no OS randomness; the seed comes from the driver.
#[derive(Debug, Clone)]
pub(super) struct Jitter(u64);

impl Jitter {
    /// A generator seeded with `seed`.
    pub(super) fn new(seed: u64) -> Jitter {
        Jitter(seed)
    }

    /// The next pseudo-random value.
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The outage and its attempts: the part of [`Session`] this file owns.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// Number of the current attempt in this outage, from 1; 0 when the
    /// transport is lost and once it is established again.
    attempt: u32,
    /// Index in the session's paths of the path of the current or last
    /// attempt.
    path_index: usize,
    /// Attempts in a row the peer refused for want of a listener (their
    /// retry delay is `refused_backoff`, doubling); 0 after any other
    /// failure, a loss, or an establishment.
    refusals: u32,
    /// When the current outage began (the loss, or the first connect's
    /// first failure); `None` while connected. The downtime of the
    /// [`SessionEvent::Resumed`] is measured from it, and the give-up and
    /// fast-fail deadlines are armed once per outage, when it is set.
    outage_start: Option<Timestamp>,
    /// `fast_io_fail_tmo` passed in this outage: every operation submitted
    /// fails at once until the session is established again.
    fast_failing: bool,
    /// The session has been `Established` at least once: the initiator
    /// holds the secret and reconnects with a Resume, never a Hello, and
    /// an outage's give-up deadline is `ctrl_loss_tmo`.
    was_established: bool,
    /// When the give-up deadline of a session never established started
    /// (its `connect`, or its accepted Hello): `set_policy` re-arms it
    /// from there.
    first_connect_at: Option<Timestamp>,
}

impl Recovery {
    /// The index of the path of the current or last attempt.
    pub(super) fn path_index(&self) -> usize {
        self.path_index
    }

    /// The next attempt (or the one a resume names) takes path `i`.
    pub(super) fn set_path(&mut self, i: usize) {
        self.path_index = i;
    }

    /// The next path after the current one, for the next attempt.
    fn rotate_path(&mut self, paths: usize) {
        if paths > 0 {
            self.path_index = (self.path_index + 1) % paths;
        }
    }

    /// An attempt on path `i` starts; returns its number in the outage.
    fn next_attempt(&mut self, i: usize) -> u32 {
        self.path_index = i;
        self.attempt += 1;
        self.attempt
    }

    /// The transport is gone (lost, promoted past, or taken down as
    /// planned): the attempts of the next outage count from 1, and the
    /// streak of refusals ends.
    pub(super) fn reset_attempts(&mut self) {
        self.attempt = 0;
        self.refusals = 0;
    }

    /// The peer's CM refused an attempt for want of a listener: one more
    /// refusal in a row.
    pub(super) fn refused(&mut self) {
        self.refusals = self.refusals.saturating_add(1);
    }

    /// Whether every operation submitted fails at once
    /// (`fast_io_fail_tmo` passed in this outage).
    pub(super) fn fast_failing(&self) -> bool {
        self.fast_failing
    }

    /// Whether the session has been `Established` at least once.
    pub(super) fn was_established(&self) -> bool {
        self.was_established
    }

    /// The session is established (again): the outage is over. Returns
    /// how long it lasted (zero if there was none).
    pub(super) fn established(&mut self, now: Timestamp) -> Duration {
        self.fast_failing = false;
        self.was_established = true;
        self.reset_attempts();
        self.outage_start
            .take()
            .map(|s| now - s)
            .unwrap_or_default()
    }

    /// The session is suspended: no outage, no attempt, nothing fails fast.
    pub(super) fn suspended(&mut self) {
        self.fast_failing = false;
        self.outage_start = None;
        self.attempt = 0;
    }

    /// An outage begins, unless one is under way (see
    /// [`Session::start_outage`]).
    fn start_outage(&mut self, policy: &Policy, timers: &mut TimerTable, now: Timestamp) {
        if self.outage_start.is_some() {
            return;
        }
        self.outage_start = Some(now);
        if self.was_established {
            if let Some(t) = policy.ctrl_loss_tmo {
                timers.set(TimerKind::GiveUp, now + t);
            }
        }
        if let Some(t) = policy.fast_io_fail_tmo {
            timers.set(TimerKind::FastFail, now + t);
        }
    }

    /// Arm the give-up deadline of a session never established
    /// (`first_connect_tmo`, from `now`, its start).
    fn arm_first_connect_deadline(
        &mut self,
        policy: &Policy,
        timers: &mut TimerTable,
        now: Timestamp,
    ) {
        self.first_connect_at = Some(now);
        if let Some(t) = policy.first_connect_tmo {
            timers.set(TimerKind::GiveUp, now + t);
        }
    }

    /// A new `policy` takes effect in the outage under way: the give-up
    /// deadline is re-armed from the loss (the start, for a session never
    /// established) or cancelled, as is the fast-fail deadline unless it
    /// passed.
    pub(super) fn rearm_deadlines(&self, policy: &Policy, timers: &mut TimerTable) {
        let giveup = if self.was_established {
            self.outage_start
                .map(|start| policy.ctrl_loss_tmo.map(|t| start + t))
        } else {
            self.first_connect_at
                .map(|start| policy.first_connect_tmo.map(|t| start + t))
        };
        match giveup {
            Some(Some(at)) => timers.set(TimerKind::GiveUp, at),
            Some(None) => timers.stop(TimerKind::GiveUp),
            None => {}
        }
        if let (Some(start), false) = (self.outage_start, self.fast_failing) {
            match policy.fast_io_fail_tmo {
                Some(t) => timers.set(TimerKind::FastFail, start + t),
                None => timers.stop(TimerKind::FastFail),
            }
        }
    }
}

impl Session {
    /// Initiator: connect for the first time. The first attempt is
    /// immediate; a failed one is reported
    /// ([`SessionEvent::AttemptFailed`]) and retried under the policy like
    /// any outage, until `first_connect_tmo` after this call
    /// ([`SessionEvent::GaveUp`], state `Failed`).
    ///
    /// # Errors
    /// [`SessionError::BadState`] if the session is a target, is not new,
    /// or has no path.
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
        self.arm_first_connect_deadline(now);
        let Some(&pick) = self.viable_paths().first() else {
            // No device yet: wait for one, under the give-up deadline.
            self.attempt_failed(AttemptFailure::NoDevice, now);
            return Ok(());
        };
        // A message read on the old transport is read again on the new.
        self.rewind_fetches();
        self.epoch = self.next_epoch();
        self.recovery.next_attempt(pick);
        self.probes.attempt_started(now);
        self.counters.attempts += 1;
        let pd = self.resume_private_data();
        self.out.act(Action::Connect {
            epoch: self.epoch,
            path: self.attempt_path(pick),
            private_data: pd,
        });
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
        Ok(())
    }

    /// What every loss of the current transport does, whether a recovery
    /// or a standby follows: count it, tell the application, tear the
    /// transport's epoch down and forget its device's keys.
    pub(super) fn count_loss(&mut self, cause: DownCause) {
        self.counters.losses += 1;
        self.decision.note_loss(cause);
        self.out.emit(SessionEvent::DeviceLost { cause });
        self.out.act(Action::TearDown { epoch: self.epoch });
        if cause == DownCause::CmDeviceRemoval {
            // rdma_cm says the device is going away; the device list may
            // still show it for a while (its removal waits for its users).
            // Forget it now, so the next attempt takes a path it does not
            // carry; its return is a device-add of a new registration.
            self.devices.forget_current();
        }
        self.forget_transport();
    }

    /// The transport is gone: tear down, keep the session, start recovery.
    pub(super) fn lose_transport(&mut self, cause: DownCause, now: Timestamp) {
        let state = self.state();
        if !matches!(
            state,
            State::Established | State::Resyncing | State::Reconnecting | State::Connecting
        ) {
            return;
        }
        if self.planned_loss(now) {
            return;
        }
        // A standby up on another device takes over, with no attempt.
        if self.promote_standby(cause, now) {
            return;
        }
        tracing::info!(session = %self.cfg.id, %cause, epoch = %self.epoch, "transport lost");
        self.count_loss(cause);
        self.start_outage(now);
        self.go(State::Recovering, Cause::TransportDown(cause), now);
        self.recovery.reset_attempts();
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
        if !local {
            self.recovery.rotate_path(self.cfg.paths.len());
        }
        // The peer gone silent (its CM's disconnect, no acknowledgement,
        // no keepalive) may be its device going away: the first attempt is
        // a probe. Any other loss gets the full attempt timeout.
        self.probes.set_silent(matches!(
            cause,
            DownCause::CmDisconnected
                | DownCause::KeepaliveTimeout
                | DownCause::Completion(WcStatus::RetryExcErr)
        ));
        self.schedule_attempt(now);
    }

    /// The transport is gone, by loss or by plan: what was posted on it
    /// waits for replay, and its device and its timers go with it.
    pub(super) fn forget_transport(&mut self) {
        self.data.transport_down();
        self.rewind_fetches();
        self.devices.release();
        self.timers.stop(TimerKind::KeepaliveSend);
        self.timers.stop(TimerKind::KeepaliveDeadline);
        self.timers.stop(TimerKind::ConnectTimeout);
    }

    /// Arm the backoff for the next attempt (initiator only), or hold the
    /// session for the application's decision (manual recovery).
    fn schedule_attempt(&mut self, now: Timestamp) {
        if self.cfg.role != Role::Initiator
            || self.suspend_instead_of_attempt(now)
            || self.hold_if_manual()
        {
            return;
        }
        let r = self.jitter.next();
        let (attempt, refusals) = (self.recovery.attempt, self.recovery.refusals);
        let mut delay = self.cfg.policy.backoff(attempt, r);
        if refusals > 0 {
            delay = delay.min(self.cfg.policy.refused_delay(refusals, r));
        }
        if self.probes.probing(&self.cfg.policy) {
            if let Some(probe) = self.cfg.policy.probe_delay(r) {
                delay = delay.min(probe);
            }
        }
        self.timers.set(TimerKind::Backoff, now + delay);
    }

    /// Start an attempt if a device can carry one; otherwise keep waiting
    /// (a device-add event will call again).
    pub(super) fn try_attempt(&mut self, now: Timestamp) {
        if self.state() != State::Recovering
            || self.cfg.role != Role::Initiator
            || self.decision.is_held()
            || self.probes.waits(&self.cfg.policy)
        {
            return;
        }
        let viable = self.viable_paths();
        let named_waits = self
            .decision
            .preferred_path()
            .is_some_and(|i| !viable.contains(&i));
        if viable.is_empty() || named_waits {
            // Reported, not tried: a device event tries again at once.
            tracing::debug!(session = %self.cfg.id, "no device reaches the peer yet");
            self.out.emit(SessionEvent::AttemptFailed {
                attempt: self.recovery.attempt + 1,
                reason: AttemptFailure::NoDevice,
            });
            return;
        }
        // A path the application named comes first; else the first path
        // when failing back, else keep rotating from the current one.
        let pick = if let Some(i) = self.decision.take_preferred_path() {
            i
        } else if self.cfg.policy.failback {
            viable[0]
        } else {
            let current = self.recovery.path_index;
            *viable.iter().find(|&&i| i >= current).unwrap_or(&viable[0])
        };
        let attempt = self.recovery.next_attempt(pick);
        self.probes.attempt_started(now);
        self.counters.attempts += 1;
        // A message read on the old transport is read again on the new.
        self.rewind_fetches();
        self.epoch = self.next_epoch();
        self.go(State::Reconnecting, Cause::Attempt(attempt), now);
        self.out.emit(SessionEvent::Recovering { attempt });
        let pd = self.resume_private_data();
        self.out.act(Action::Connect {
            epoch: self.epoch,
            path: self.attempt_path(pick),
            private_data: pd,
        });
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
    }

    /// When the connection being made now must be up (CM and in-band
    /// handshake): an initiator's attempt gets
    /// [`Policy::attempt_timeout`](crate::policy::Policy::attempt_timeout)
    /// of its number in the outage, or, as a probe,
    /// [`Policy::probe_attempt_timeout`](crate::policy::Policy::probe_attempt_timeout);
    /// a target the whole `connect_timeout`.
    pub(super) fn connect_deadline(&self, now: Timestamp) -> Timestamp {
        let p = &self.cfg.policy;
        let n = self.recovery.attempt.max(1);
        now + match self.cfg.role {
            Role::Initiator => self
                .probes
                .attempt_timeout(p, n)
                .unwrap_or_else(|| p.attempt_timeout(n)),
            Role::Target => p.connect_timeout,
        }
    }

    /// Arm the give-up deadline of a session never established
    /// (`first_connect_tmo`, from its start).
    pub(super) fn arm_first_connect_deadline(&mut self, now: Timestamp) {
        self.recovery
            .arm_first_connect_deadline(&self.cfg.policy, &mut self.timers, now);
    }

    /// An outage begins (a loss, or the first connect's first failure),
    /// unless one is under way: the downtime is measured from now, the
    /// fast-fail deadline is armed, and so is the give-up deadline of a
    /// session that was established (`ctrl_loss_tmo`; one never
    /// established keeps `first_connect_tmo` from its start).
    pub(super) fn start_outage(&mut self, now: Timestamp) {
        self.recovery
            .start_outage(&self.cfg.policy, &mut self.timers, now);
    }

    /// The attempt failed for a reason other than a refusal: the streak of
    /// refusals ends, the next attempt follows the plain backoff.
    pub(super) fn attempt_failed(&mut self, why: AttemptFailure, now: Timestamp) {
        self.recovery.refusals = 0;
        self.attempt_failed_with(why, now);
    }

    /// The attempt failed (reported as [`SessionEvent::AttemptFailed`]);
    /// the next one comes after the backoff (or sooner, after
    /// `refused_backoff`, while `refusals` counts refusals in a row).
    pub(super) fn attempt_failed_with(&mut self, why: AttemptFailure, now: Timestamp) {
        if self.state() != State::Reconnecting && self.state() != State::Connecting {
            return;
        }
        let attempt = self.recovery.attempt;
        tracing::debug!(session = %self.cfg.id, attempt, %why, "attempt failed");
        // No answer at all: the peer (or its device) is away, and the next
        // attempt is a probe.
        self.probes.set_silent(matches!(
            why,
            AttemptFailure::Timeout | AttemptFailure::Unreachable
        ));
        self.out.act(Action::TearDown { epoch: self.epoch });
        self.timers.stop(TimerKind::ConnectTimeout);
        self.start_outage(now);
        self.out.emit(SessionEvent::AttemptFailed {
            attempt: attempt.max(1),
            reason: why.clone(),
        });
        self.go(State::Recovering, Cause::AttemptFailed(why), now);
        // Rotate to the next path for the next attempt.
        self.recovery.rotate_path(self.cfg.paths.len());
        self.schedule_attempt(now);
    }

    /// The attempt of `epoch` failed before the connection was up: an
    /// initiator's before a reply (address or route error, unreachable,
    /// a provider call or the transport's creation failed), a target's
    /// accept (the transport's creation or the accept call failed). An
    /// input of another epoch is ignored.
    pub fn handle_attempt_failed(&mut self, epoch: Epoch, why: AttemptFailure, now: Timestamp) {
        if self.is_standby_epoch(epoch) {
            tracing::debug!(session = %self.cfg.id, %epoch, %why, "standby attempt failed");
            self.drop_standby(true, StandbyLoss::Released, now);
        } else if epoch == self.epoch {
            self.attempt_failed(why, now);
        }
    }

    /// The transport of `epoch` went down (CM event, async event,
    /// completion error).
    pub fn handle_transport_down(&mut self, epoch: Epoch, cause: DownCause, now: Timestamp) {
        if self.is_standby_epoch(epoch) {
            tracing::info!(session = %self.cfg.id, %epoch, %cause, "standby lost");
            self.drop_standby(true, StandbyLoss::Down(cause), now);
            return;
        }
        if epoch != self.epoch {
            return;
        }
        if self.state() == State::Reconnecting {
            self.attempt_failed(AttemptFailure::TransportDown(cause), now);
        } else {
            self.lose_transport(cause, now);
        }
    }

    /// Time passed: fire what is due.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        for t in self.timers.take_expired(now) {
            match t {
                TimerKind::Backoff => self.try_attempt(now),
                // Connected but the in-band handshake did not finish.
                TimerKind::ConnectTimeout if self.devices.current().is_some() => {
                    self.lose_transport(DownCause::ResyncTimeout, now);
                }
                TimerKind::ConnectTimeout => self.attempt_failed(AttemptFailure::Timeout, now),
                TimerKind::GiveUp => {
                    tracing::warn!(session = %self.cfg.id, "give-up deadline passed");
                    self.out.emit(SessionEvent::GaveUp);
                    self.fail(Cause::GaveUp, OpError::GaveUp, now);
                }
                TimerKind::FastFail => {
                    self.recovery.fast_failing = true;
                    let cs = self.data.journal.fail_queued(OpError::FastFail);
                    self.out.complete(cs);
                }
                TimerKind::KeepaliveSend => self.keepalive_due(now),
                TimerKind::AckDelay => self.ack_delay_passed(),
                TimerKind::KeepaliveDeadline => self.keepalive_silent(now),
                TimerKind::CloseDeadline => self.close_deadline_passed(now),
                TimerKind::QuiesceDeadline => self.quiesce_deadline_passed(now),
                TimerKind::Standby => self.standby_timer(now),
                TimerKind::StandbySilence => self.standby_silent(now),
            }
        }
        // Fast-failed operations may have emptied the journal of a
        // session closing gracefully.
        self.settle_closing(now);
    }

    /// The session ends for good (give-up, stranger peer): tear down,
    /// disarm every timer, complete every pending operation (`err`, or what
    /// more is known: [`Journal::fail_all`](crate::journal::Journal::fail_all))
    /// and go to `Failed`.
    pub(super) fn fail(&mut self, cause: Cause, err: OpError, now: Timestamp) {
        if self.state().is_terminal() {
            return;
        }
        // A transport exists while connected or while an attempt (the
        // first one included) is under way.
        if self.devices.current().is_some()
            || matches!(self.state(), State::Reconnecting | State::Connecting)
        {
            self.out.act(Action::TearDown { epoch: self.epoch });
        }
        self.devices.release();
        self.timers.clear();
        self.planned.cancel();
        let cs = self.data.journal.fail_all(err);
        self.closing.ended(cs.len());
        self.out.complete(cs);
        self.go(State::Failed, cause, now);
    }
}
