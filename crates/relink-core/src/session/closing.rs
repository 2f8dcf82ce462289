//! How a session ends on purpose: the admin close ([`Session::close`]: at
//! once, with a goodbye), the graceful close
//! ([`Session::close_gracefully`]: once every pending operation finished,
//! or at a deadline), and the peer's goodbye.
//!
//! A session closing gracefully has no state of its own: it stays in its
//! live state — it may still lose its transport, recover and replay, and
//! it still delivers what the peer sends — and refuses new operations
//! ([`SessionError::Closing`](super::SessionError::Closing)). The moment
//! its journal is empty it closes with the goodbye, like
//! [`Session::close`] with nothing pending; at the deadline it closes like
//! [`Session::close`], with whatever is still pending. Its transitions are
//! those of the table ([`crate::state::TRANSITIONS`]): the live state it
//! is in, then `Closed`.

use relink_fabric::Timestamp;

use super::{Action, Session, SessionEvent};
use crate::op::OpError;
use crate::state::{Cause, State};
use crate::timers::TimerKind;
use crate::wire;

/// How the session ends on purpose: the part of [`Session`] this file
/// owns.
#[derive(Debug, Default)]
pub(super) struct Closing {
    /// The deadline of a graceful close under way
    /// ([`Session::close_gracefully`]): new operations are refused, and
    /// the session closes when its journal is empty or at the deadline.
    deadline: Option<Timestamp>,
    /// How many operations the session's end completed because they were
    /// still pending ([`Session::ended_pending`]).
    ended_pending: usize,
}

impl Closing {
    /// Whether a graceful close is under way.
    pub(super) fn is_closing(&self) -> bool {
        self.deadline.is_some()
    }

    /// The session ended (failed) with `pending` operations completed by
    /// its end: no graceful close goes on.
    pub(super) fn ended(&mut self, pending: usize) {
        self.deadline = None;
        self.ended_pending = pending;
    }
}

impl Session {
    /// Close the session now: recovery stops and every pending operation
    /// completes — `Failed(Disconnected)`, or `Indeterminate` where it may
    /// have taken effect (a posted message or atomic). An established (or
    /// resyncing) session says goodbye first: a `Close` message, then
    /// [`Action::Disconnect`], so the peer closes its half instead of
    /// recovering. Closing a closed session does nothing; a failed one
    /// moves to `Closed`.
    pub fn close(&mut self, now: Timestamp) {
        self.close_inner(now, true);
    }

    /// Close the session once every pending operation has finished, or at
    /// `deadline`, whichever comes first.
    ///
    /// From now on [`submit`](Session::submit) refuses new operations
    /// ([`SessionError::Closing`](super::SessionError::Closing)). The
    /// operations already submitted go on as before — queued ones are
    /// posted, ones waiting for replay during a recovery are replayed once
    /// the session is back — and complete as usual. The moment the journal
    /// is empty the session closes with the goodbye (as [`close`] with
    /// nothing pending). At `deadline` it closes as [`close`] does: what is
    /// still pending completes `Failed(Disconnected)`, or `Indeterminate`
    /// where it may have taken effect. A session with nothing pending
    /// closes at once; an idle, failed or closed one is closed as by
    /// [`close`]. Called again, the earlier deadline holds.
    ///
    /// [`close`]: Session::close
    pub fn close_gracefully(&mut self, deadline: Timestamp, now: Timestamp) {
        match self.state() {
            State::Closed => return,
            State::Idle | State::Failed => {
                self.close_inner(now, true);
                return;
            }
            _ => {}
        }
        let deadline = self.closing.deadline.map_or(deadline, |d| d.min(deadline));
        tracing::debug!(session = %self.cfg.id, pending = self.data.journal.len(), %deadline, "closing gracefully");
        self.closing.deadline = Some(deadline);
        self.timers.set(TimerKind::CloseDeadline, deadline);
        if deadline <= now {
            self.close_deadline_passed(now);
        } else {
            self.settle_closing(now);
        }
    }

    /// The deadline of a graceful close under way
    /// ([`close_gracefully`](Session::close_gracefully)); `None` when the
    /// session is not closing gracefully (live, or ended).
    pub fn closing_deadline(&self) -> Option<Timestamp> {
        self.closing.deadline
    }

    /// How many operations the session's end completed itself because
    /// they were still pending — `Failed` or `Indeterminate`, by a close,
    /// the peer's close, the give-up deadline or a stranger peer. 0 while
    /// the session is live, and for one that ended with nothing pending
    /// (a graceful close that finished its work).
    pub fn ended_pending(&self) -> usize {
        self.closing.ended_pending
    }

    /// A session closing gracefully whose journal is empty closes now,
    /// with the goodbye. Called at the end of every input that may
    /// complete operations.
    pub(super) fn settle_closing(&mut self, now: Timestamp) {
        if self.closing.is_closing() && self.data.journal.is_empty() && !self.state().is_terminal()
        {
            tracing::debug!(session = %self.cfg.id, "every pending operation finished; closing");
            self.close_inner(now, true);
        }
    }

    /// The deadline of a graceful close passed: close with what is still
    /// pending.
    pub(super) fn close_deadline_passed(&mut self, now: Timestamp) {
        if !self.closing.is_closing() || self.state().is_terminal() {
            return;
        }
        tracing::info!(session = %self.cfg.id, pending = self.data.journal.len(), "graceful close deadline passed");
        self.close_inner(now, true);
    }

    /// Close; `tell_peer`: say goodbye first so the peer closes its half
    /// instead of waiting for a reconnection until its give-up deadline
    /// (`false` when the peer said goodbye itself).
    pub(super) fn close_inner(&mut self, now: Timestamp, tell_peer: bool) {
        if self.state() == State::Closed {
            return;
        }
        if self.devices.current().is_some() {
            if tell_peer && matches!(self.state(), State::Established | State::Resyncing) {
                self.send_control(|ack, out| {
                    wire::encode_close(ack, out);
                    Ok(())
                });
            }
            self.out.act(Action::Disconnect { epoch: self.epoch });
        }
        if self.state() != State::Failed && self.state() != State::Idle {
            self.out.act(Action::TearDown { epoch: self.epoch });
        }
        self.devices.release();
        self.timers.clear();
        self.closing.deadline = None;
        self.planned.cancel();
        if self.state() != State::Failed {
            // A failed session's operations were completed when it failed.
            let cs = self.data.journal.fail_all(OpError::Disconnected);
            self.closing.ended_pending = cs.len();
            self.out.complete(cs);
        }
        self.go(State::Closed, Cause::Disconnect, now);
        self.out.emit(SessionEvent::Disconnected);
    }
}
