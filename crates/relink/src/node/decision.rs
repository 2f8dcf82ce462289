//! The application's say in a recovery: [`Node::resume`] and
//! [`Node::resume_on`] let a session held by manual recovery
//! ([`RecoveryMode::Manual`](crate::RecoveryMode::Manual)) recover, and
//! [`Node::set_policy`] changes a live session's policy.

use relink_core::policy::Policy;
use relink_core::session::SessionError;

use super::{Node, ResumeError, SessionHandle, SetPolicyError};

impl Node {
    /// Let a session held for the application's decision recover: it
    /// reported [`SessionEvent::AwaitingDecision`](crate::SessionEvent::AwaitingDecision)
    /// (manual recovery) and makes its first attempt at once, on the path an
    /// automatic session would take; from then on it recovers as an
    /// automatic session does — the backoff after a failed attempt, the
    /// replay of every unconfirmed operation and the re-advertisement of
    /// its regions once back, each message delivered once — until it is
    /// established again. A later loss holds it again.
    ///
    /// It also resumes a session [`Node::suspend`](super::Node::suspend)
    /// parked ([`State::Suspended`](crate::State::Suspended)): an attempt
    /// at once, then recovery under the policy, its give-up deadline from
    /// now; called while the suspend is still quiescing, the suspend
    /// completes and the session then resumes.
    ///
    /// # Errors
    /// [`ResumeError::NoSession`]; [`ResumeError::NotAwaitingDecision`]
    /// if the session is neither held nor suspended (it is connected,
    /// automatic, already resumed, or ended).
    pub fn resume(&mut self, s: SessionHandle) -> Result<(), ResumeError> {
        self.resume_with(s, None)
    }

    /// [`Node::resume`] on a path the application names: `path` is an
    /// index in the session's paths (as given to
    /// [`Node::connect`](super::Node::connect), and in each
    /// [`Candidate`](crate::Candidate) of the event). Its first attempt
    /// takes that path; while no device carries it the session waits for
    /// one (an [`AttemptFailed`](crate::SessionEvent::AttemptFailed)
    /// `NoDevice`), under the give-up deadline.
    ///
    /// # Errors
    /// Those of [`Node::resume`], and [`ResumeError::NoSuchPath`].
    pub fn resume_on(&mut self, s: SessionHandle, path: usize) -> Result<(), ResumeError> {
        self.resume_with(s, Some(path))
    }

    fn resume_with(&mut self, s: SessionHandle, path: Option<usize>) -> Result<(), ResumeError> {
        let now = self.now();
        let core = &mut self
            .sessions
            .get_mut(&s.0)
            .ok_or(ResumeError::NoSession(s))?
            .core;
        let state = core.state();
        core.resume(path, now).map_err(|e| match e {
            SessionError::NoSuchPath { index, paths } => ResumeError::NoSuchPath { index, paths },
            // The session refuses only these two.
            _ => ResumeError::NotAwaitingDecision(state),
        })?;
        self.run_actions(s.0);
        Ok(())
    }

    /// Give a session another policy, effective at once — in an outage
    /// under way too: the give-up deadline (`ctrl_loss_tmo`, or
    /// `first_connect_tmo` for a session never established) is re-armed
    /// from the loss (from the connect) or cancelled with `None` (a
    /// deadline already past gives the session up at the next poll); so is
    /// the fast-fail deadline; a running keepalive restarts with its new
    /// period; the device match and failback apply to the next attempt; a
    /// held session switched to [`RecoveryMode::Automatic`](crate::RecoveryMode::Automatic)
    /// starts recovering at once, a recovering initiator switched to
    /// [`RecoveryMode::Manual`](crate::RecoveryMode::Manual) holds.
    /// [`Node::options`](super::Node::options) shows the new policy.
    ///
    /// # Errors
    /// [`SetPolicyError::NoSession`]; [`SetPolicyError::Policy`] if the
    /// policy is invalid (the session keeps its own).
    pub fn set_policy(&mut self, s: SessionHandle, policy: Policy) -> Result<(), SetPolicyError> {
        let now = self.now();
        let entry = self
            .sessions
            .get_mut(&s.0)
            .ok_or(SetPolicyError::NoSession(s))?;
        entry
            .core
            .set_policy(policy.clone(), now)
            .map_err(SetPolicyError::Policy)?;
        entry.opts.policy = policy;
        self.run_actions(s.0);
        Ok(())
    }
}
