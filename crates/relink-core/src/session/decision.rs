//! The application's say in a recovery: manual recovery
//! ([`RecoveryMode::Manual`]) holds a lost session until the application
//! resumes it ([`Session::resume`]), and a policy given to a live session
//! ([`Session::set_policy`]) takes effect in the outage under way.
//!
//! A held session is in [`State::Recovering`] with no attempt scheduled
//! (no backoff timer): every way out of it is a row `Recovering` already
//! has — `Reconnecting` once resumed, `Failed` at the give-up deadline,
//! `Closed` on a close — so holding needs no state of its own
//! (`docs/DESIGN.md`, "Session state machine").

use relink_fabric::{DeviceId, Timestamp};

use super::{Path, Role, Session, SessionError, SessionEvent, StandbyLoss};
use crate::policy::{Policy, PolicyError, RecoveryMode};
use crate::reason::DownCause;
use crate::state::State;
use crate::timers::TimerKind;

/// A path that could carry a held session at present, with the device that would
/// carry it ([`SessionEvent::AwaitingDecision`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// Its index in the session's paths (what
    /// [`Session::resume`] takes to name it).
    pub path_index: usize,
    /// The path.
    pub path: Path,
    /// The present device that would carry it.
    pub device: DeviceId,
}

/// The application's say in a recovery: the part of [`Session`] this
/// file owns.
#[derive(Debug, Default)]
pub(super) struct Decision {
    /// Held for the application's decision
    /// ([`RecoveryMode::Manual`]): in `Recovering`, no attempt scheduled.
    /// Cleared by leaving `Recovering`.
    held: bool,
    /// The application resumed the session in this outage: a manual
    /// session recovers as an automatic one until it is established again.
    decided: bool,
    /// The cause of the last loss of the transport (what a held session
    /// reports).
    loss_cause: Option<DownCause>,
    /// The candidates a held session last reported.
    candidates: Vec<Candidate>,
    /// The path the next attempt takes first: the one the application
    /// named ([`Session::resume`]) or a drain picked; taken by the attempt.
    prefer_path: Option<usize>,
}

impl Decision {
    /// Whether the session is held for the application's decision.
    pub(super) fn is_held(&self) -> bool {
        self.held
    }

    /// The session left `Recovering`: it is held no more.
    pub(super) fn release(&mut self) {
        self.held = false;
    }

    /// The transport was lost for `cause` (what a held session reports).
    pub(super) fn note_loss(&mut self, cause: DownCause) {
        self.loss_cause = Some(cause);
    }

    /// The session recovers in this outage as an automatic one would
    /// (resumed, or moved by a drain), its next attempt on `path` if
    /// named.
    pub(super) fn decide(&mut self, path: Option<usize>) {
        self.prefer_path = path;
        self.decided = true;
    }

    /// The next attempt takes `path` first, if named (a drain's path after
    /// a real loss), without a decision.
    pub(super) fn prefer_path(&mut self, path: Option<usize>) {
        self.prefer_path = path;
    }

    /// The path the next attempt takes first, if one was named.
    pub(super) fn preferred_path(&self) -> Option<usize> {
        self.prefer_path
    }

    /// Take the path the next attempt takes first, if one was named.
    pub(super) fn take_preferred_path(&mut self) -> Option<usize> {
        self.prefer_path.take()
    }

    /// The session is established again: a manual one holds at its next
    /// loss.
    pub(super) fn established(&mut self) {
        self.decided = false;
    }

    /// The event that reports the hold, with the candidates last found.
    fn awaiting(&self) -> SessionEvent {
        SessionEvent::AwaitingDecision {
            cause: self.loss_cause.unwrap_or(DownCause::CmDisconnected),
            candidates: self.candidates.clone(),
        }
    }
}

impl Session {
    /// Whether a loss holds the session for the application's
    /// decision: a manual initiator that has been established and has not been
    /// resumed in this outage.
    fn holds(&self) -> bool {
        self.cfg.policy.recovery == RecoveryMode::Manual
            && self.cfg.role == Role::Initiator
            && self.recovery.was_established()
            && !self.decision.decided
    }

    /// Hold instead of scheduling an attempt, if the policy says so
    /// (called where an attempt would be scheduled). Returns whether it
    /// held.
    pub(super) fn hold_if_manual(&mut self) -> bool {
        if !self.holds() || self.state() != State::Recovering {
            return false;
        }
        self.timers.stop(TimerKind::Backoff);
        self.decision.held = true;
        self.decision.candidates = self.current_candidates();
        tracing::info!(session = %self.cfg.id, "held for the application's decision");
        self.out.emit(self.decision.awaiting());
        true
    }

    /// The devices changed (or the device match did): a held session
    /// reports its candidates again if they are not the ones it reported.
    pub(super) fn refresh_candidates(&mut self) {
        if !self.decision.held {
            return;
        }
        let now = self.current_candidates();
        if now != self.decision.candidates {
            self.decision.candidates = now;
            self.out.emit(self.decision.awaiting());
        }
    }

    /// The paths a present device can carry at present, each with that device.
    fn current_candidates(&self) -> Vec<Candidate> {
        self.viable_paths()
            .into_iter()
            .filter_map(|i| {
                Some(Candidate {
                    path_index: i,
                    path: self.cfg.paths[i],
                    device: self.device_for_path(i)?.id.clone(),
                })
            })
            .collect()
    }

    /// Whether the session is held for the application's decision
    /// ([`RecoveryMode::Manual`]): in `Recovering`, making no attempt.
    pub fn awaiting_decision(&self) -> bool {
        self.decision.held
    }

    /// The paths that could carry a held session at present (empty when it is not
    /// held): the candidates of its last
    /// [`SessionEvent::AwaitingDecision`].
    pub fn candidates(&self) -> &[Candidate] {
        if self.decision.held {
            &self.decision.candidates
        } else {
            &[]
        }
    }

    /// The application decided: a held session recovers from then on as an
    /// automatic one does (an attempt at once, the backoff after a failure,
    /// replay and re-advertisement once back) until it is established
    /// again. `path` names the path of the first attempt (an index in the
    /// session's paths); `None` takes the one an automatic session would.
    /// A named path no device carries yet is waited for, as any attempt
    /// waits for a device.
    ///
    /// # Errors
    /// [`SessionError::NotAwaitingDecision`] if the session is not held;
    /// [`SessionError::NoSuchPath`] if `path` is not an index of its paths.
    pub fn resume(&mut self, path: Option<usize>, now: Timestamp) -> Result<(), SessionError> {
        let suspended = self.state() == State::Suspended && self.cfg.role == Role::Initiator;
        let held = self.decision.held;
        if !held && !suspended && self.suspend_asked() {
            // The suspend under way completes, then the session resumes.
            self.planned.resume_once_suspended(path);
            return Ok(());
        }
        if !held && !suspended {
            return Err(SessionError::NotAwaitingDecision(self.state()));
        }
        if let Some(index) = path {
            if index >= self.cfg.paths.len() {
                return Err(SessionError::NoSuchPath {
                    index,
                    paths: self.cfg.paths.len(),
                });
            }
            self.recovery.set_path(index);
        }
        if suspended {
            self.resume_suspended(path, now);
            return Ok(());
        }
        tracing::info!(session = %self.cfg.id, ?path, "resumed by the application");
        self.decision.decide(path);
        self.decision.held = false;
        self.decision.candidates.clear();
        self.try_attempt(now);
        Ok(())
    }

    /// Replace the session's policy; it takes effect at once, in the
    /// outage under way too: the give-up deadline is re-armed from the
    /// loss (the start, for a session never established) or cancelled
    /// (`None`), as is the fast-fail deadline unless it passed; a
    /// keepalive running (the standby's too) restarts with the new period; the device match
    /// and failback apply to the next attempt (a session waiting for a
    /// device tries again at once, a held one reports its candidates again
    /// if they change); switching a held session to
    /// [`RecoveryMode::Automatic`] starts recovering at once, switching a
    /// recovering one to [`RecoveryMode::Manual`] holds it. A session that
    /// ended keeps the policy and nothing else happens.
    ///
    /// # Errors
    /// The [`PolicyError`] of [`Policy::validate`]; the session keeps its
    /// policy then.
    pub fn set_policy(&mut self, policy: Policy, now: Timestamp) -> Result<(), PolicyError> {
        policy.validate()?;
        let old = std::mem::replace(&mut self.cfg.policy, policy);
        if self.state().is_terminal() {
            return Ok(());
        }
        if old.recovery != self.cfg.policy.recovery {
            // A new mode is a new decision: a resume given under the old
            // one does not carry over.
            self.decision.decided = false;
        }
        // The give-up and fast-fail deadlines, from the loss or from the
        // first connect.
        self.recovery
            .rearm_deadlines(&self.cfg.policy, &mut self.timers);
        if old.keepalive != self.cfg.policy.keepalive {
            self.restart_keepalive(now);
            self.arm_standby_keepalive(now);
        }
        if self.state() == State::Recovering && self.cfg.role == Role::Initiator {
            if self.decision.held && !self.holds() {
                // Manual -> Automatic: recover now.
                self.decision.held = false;
                self.decision.candidates.clear();
                self.try_attempt(now);
            } else if self.decision.held {
                self.refresh_candidates();
            } else if !self.hold_if_manual()
                && (old.device_match != self.cfg.policy.device_match
                    || old.failback != self.cfg.policy.failback)
                && self.timers.get(TimerKind::Backoff).is_none()
            {
                // Waiting for a device the new match may allow.
                self.timers.set(TimerKind::Backoff, now);
            }
        }
        if old.standby && !self.cfg.policy.standby && self.cfg.role == Role::Initiator {
            self.drop_standby(false, StandbyLoss::Released, now);
        } else if !old.standby {
            self.maybe_build_standby(now);
        }
        Ok(())
    }
}
