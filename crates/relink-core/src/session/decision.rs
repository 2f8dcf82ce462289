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
use crate::state::{DownCause, State};
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

impl Session {
    /// Whether a loss holds the session for the application's
    /// decision: a manual initiator that has been established and has not been
    /// resumed in this outage.
    fn holds(&self) -> bool {
        self.cfg.policy.recovery == RecoveryMode::Manual
            && self.cfg.role == Role::Initiator
            && self.was_established
            && !self.decided
    }

    /// Hold instead of scheduling an attempt, if the policy says so
    /// (called where an attempt would be scheduled). Returns whether it
    /// held.
    pub(super) fn hold_if_manual(&mut self) -> bool {
        if !self.holds() || self.state() != State::Recovering {
            return false;
        }
        self.timers.stop(TimerKind::Backoff);
        self.held = true;
        self.candidates = self.current_candidates();
        tracing::info!(session = %self.cfg.id, "held for the application's decision");
        self.events.push_back(SessionEvent::AwaitingDecision {
            cause: self.loss_cause.unwrap_or(DownCause::CmDisconnected),
            candidates: self.candidates.clone(),
        });
        true
    }

    /// The devices changed (or the device match did): a held session
    /// reports its candidates again if they are not the ones it reported.
    pub(super) fn refresh_candidates(&mut self) {
        if !self.held {
            return;
        }
        let now = self.current_candidates();
        if now != self.candidates {
            self.candidates = now;
            self.events.push_back(SessionEvent::AwaitingDecision {
                cause: self.loss_cause.unwrap_or(DownCause::CmDisconnected),
                candidates: self.candidates.clone(),
            });
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
        self.held
    }

    /// The paths that could carry a held session at present (empty when it is not
    /// held): the candidates of its last
    /// [`SessionEvent::AwaitingDecision`].
    pub fn candidates(&self) -> &[Candidate] {
        if self.held {
            &self.candidates
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
        if !self.held && !suspended && self.suspend_asked() {
            // The suspend under way completes, then the session resumes.
            self.resume_when_suspended = Some(path);
            return Ok(());
        }
        if !self.held && !suspended {
            return Err(SessionError::NotAwaitingDecision(self.state()));
        }
        if let Some(index) = path {
            if index >= self.cfg.paths.len() {
                return Err(SessionError::NoSuchPath {
                    index,
                    paths: self.cfg.paths.len(),
                });
            }
            self.path_index = index;
        }
        if suspended {
            self.resume_suspended(path, now);
            return Ok(());
        }
        tracing::info!(session = %self.cfg.id, ?path, "resumed by the application");
        self.prefer_path = path;
        self.decided = true;
        self.held = false;
        self.candidates.clear();
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
            self.decided = false;
        }
        let p = &self.cfg.policy;
        // The give-up deadline, from the loss or from the first connect.
        let giveup = if self.was_established {
            self.outage_start
                .map(|start| p.ctrl_loss_tmo.map(|t| start + t))
        } else {
            self.first_connect_at
                .map(|start| p.first_connect_tmo.map(|t| start + t))
        };
        match giveup {
            Some(Some(at)) => self.timers.set(TimerKind::GiveUp, at),
            Some(None) => self.timers.stop(TimerKind::GiveUp),
            None => {}
        }
        if let (Some(start), false) = (self.outage_start, self.fast_failing) {
            match p.fast_io_fail_tmo {
                Some(t) => self.timers.set(TimerKind::FastFail, start + t),
                None => self.timers.stop(TimerKind::FastFail),
            }
        }
        if old.keepalive != p.keepalive
            && (self.timers.get(TimerKind::KeepaliveSend).is_some()
                || self.timers.get(TimerKind::KeepaliveDeadline).is_some())
        {
            self.timers.stop(TimerKind::KeepaliveSend);
            self.timers.stop(TimerKind::KeepaliveDeadline);
            self.arm_keepalive(now);
        }
        if old.keepalive != self.cfg.policy.keepalive {
            self.arm_standby_keepalive(now);
        }
        if self.state() == State::Recovering && self.cfg.role == Role::Initiator {
            if self.held && !self.holds() {
                // Manual -> Automatic: recover now.
                self.held = false;
                self.candidates.clear();
                self.try_attempt(now);
            } else if self.held {
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
