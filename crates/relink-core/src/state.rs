//! The session state machine, declared in one place.
//!
//! ```text
//!   Idle ──connect──► Connecting ──accepted──► Established ◄────────────┐
//!                        │                        │ transport down       │
//!                        │ failed                 ▼                      │
//!                        └──────────────────► Recovering ◄───────┐       │
//!                                    (waiting for a device,      │       │
//!                                     backoff)   │ attempt       │fail   │
//!                                                ▼               │       │
//!                                          Reconnecting{n} ──────┘       │
//!                                                │ resume accepted       │
//!                                                ▼                       │
//!                                           Resyncing ───────────────────┘
//!                               (re-advertise, re-post, replay)
//!
//!   any live state ──give-up deadline / stranger peer──► Failed
//!   any state ──disconnect──► Closed
//!
//!   Established ──suspend (both ends quiet)──► Suspended ──resume──► Recovering
//!   Recovering ──suspend──► Suspended ──close──► Closed
//! ```
//!
//! A planned outage takes the connection down once both ends are quiet
//! (`session/planned.rs`): a drain moves an established session through
//! Recovering (cause [`DownCause::Planned`]) straight into an attempt on
//! another path; a suspend parks it in Suspended — no attempt, no give-up
//! deadline — until the initiator resumes it (the target's half waits in
//! Suspended for that resume).
//!
//! A target-side session takes the same path without driving attempts: a
//! valid resume request moves it from Recovering to Reconnecting (from any
//! live state, through Recovering: the old transport is lost first), as
//! does the initiator's retried Hello to a session never established that
//! had given its first attempt up (`Session::handle_hello`), and
//! the accepted connection, once up, to Resyncing. No session goes from
//! Recovering straight to Resyncing. A graceful close
//! (`Session::close_gracefully`) has no state of its own: the session stays
//! in its live state while its pending operations finish, then goes to
//! Closed. Nor does a session held for the application's decision
//! ([`RecoveryMode::Manual`](crate::policy::RecoveryMode::Manual)): it is
//! Recovering with no attempt scheduled, and leaves by Recovering's rows
//! (to Reconnecting once resumed, Failed, Closed). Every transition is checked against [`TRANSITIONS`]; an illegal
//! one is an error, never a silent change.

use std::fmt;

use relink_fabric::Timestamp;

use crate::reason::{AttemptFailure, PeerLostReason};

/// Why the transport went down; defined with the other reasons in
/// [`reason`](crate::reason), named here too, where the transitions it causes are.
pub use crate::reason::DownCause;

/// Where a session is. More states may come: a match needs a wildcard
/// arm ([`State::is_terminal`] tells the two that end a session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum State {
    /// Created, not yet connecting.
    Idle,
    /// First connection under way.
    Connecting,
    /// Connected; operations flow.
    Established,
    /// The transport is down; waiting for a device and the backoff, or,
    /// held by manual recovery, for the application's decision.
    Recovering,
    /// A reconnection attempt is under way.
    Reconnecting,
    /// Reconnected; re-advertising buffers and replaying.
    Resyncing,
    /// Taken down on purpose (a suspend): no attempt and no give-up
    /// deadline until the initiator resumes it. Operations submitted
    /// meanwhile wait.
    Suspended,
    /// Gave up (deadline, stranger peer, refused); operations failed.
    Failed,
    /// Closed by the application or an administrator.
    Closed,
}

impl State {
    /// Whether the session can never carry traffic again.
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Failed | State::Closed)
    }

    /// Lower-case name, as shown by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Connecting => "connecting",
            State::Established => "established",
            State::Recovering => "recovering",
            State::Reconnecting => "reconnecting",
            State::Resyncing => "resyncing",
            State::Suspended => "suspended",
            State::Failed => "failed",
            State::Closed => "closed",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a transition happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The application asked to connect.
    Connect,
    /// The target accepted / a resume was accepted.
    Accepted,
    /// The transport went down.
    TransportDown(DownCause),
    /// A reconnection attempt started (attempt number, from 1).
    Attempt(u32),
    /// An attempt failed (why).
    AttemptFailed(AttemptFailure),
    /// Buffers re-advertised and replay posted.
    Resynced,
    /// The give-up deadline passed.
    GaveUp,
    /// The peer is a new incarnation or refused us for good.
    PeerLost(PeerLostReason),
    /// An explicit disconnect (API or admin).
    Disconnect,
    /// Suspended on purpose (by the application at either end).
    Suspend,
    /// A suspended session was resumed (by the application, or at the
    /// target by the initiator's resume).
    Resume,
    /// The standby connection took over after a loss
    /// ([`Policy::standby`](crate::policy::Policy::standby)): no attempt.
    Promote,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Connect => f.write_str("connect"),
            Cause::Accepted => f.write_str("accepted"),
            Cause::TransportDown(d) => write!(f, "transport down: {d}"),
            Cause::Attempt(n) => write!(f, "attempt {n}"),
            Cause::AttemptFailed(w) => write!(f, "attempt failed: {w}"),
            Cause::Resynced => f.write_str("resynced"),
            Cause::GaveUp => f.write_str("gave up"),
            Cause::PeerLost(w) => write!(f, "peer lost: {w}"),
            Cause::Disconnect => f.write_str("disconnect"),
            Cause::Suspend => f.write_str("suspend"),
            Cause::Resume => f.write_str("resume"),
            Cause::Promote => f.write_str("standby promoted"),
        }
    }
}

/// One state change, as reported to observers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// What made the session move.
    pub cause: Cause,
    /// The session's time of the move (the `now` of the input that caused
    /// it).
    pub at: Timestamp,
}

/// A transition the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal session transition {from} -> {to} ({cause})")]
#[non_exhaustive]
pub struct IllegalTransition {
    /// The state the session is in.
    pub from: State,
    /// The state the core tried to move to.
    pub to: State,
    /// The cause given.
    pub cause: Cause,
}

use State::*;

/// Every legal transition. The snapshot test below pins it.
pub const TRANSITIONS: &[(State, State)] = &[
    (Idle, Connecting),
    (Idle, Closed),
    (Connecting, Established),
    (Connecting, Recovering),
    (Connecting, Failed),
    (Connecting, Closed),
    (Established, Recovering),
    (Established, Failed),
    (Established, Closed),
    (Established, Suspended),
    (Recovering, Reconnecting),
    (Recovering, Failed),
    (Recovering, Closed),
    (Recovering, Suspended),
    (Reconnecting, Resyncing),
    (Reconnecting, Recovering),
    (Reconnecting, Failed),
    (Reconnecting, Closed),
    (Resyncing, Established),
    (Resyncing, Recovering),
    (Resyncing, Failed),
    (Resyncing, Closed),
    (Suspended, Recovering),
    (Suspended, Closed),
    (Failed, Closed),
];

/// Whether `from -> to` is legal.
pub fn allowed(from: State, to: State) -> bool {
    TRANSITIONS.contains(&(from, to))
}

/// A state with its transition history check.
#[derive(Debug, Clone)]
pub struct Machine {
    state: State,
    since: Timestamp,
}

impl Machine {
    /// A machine in `Idle` since `now`.
    pub fn new(now: Timestamp) -> Machine {
        Machine {
            state: Idle,
            since: now,
        }
    }

    /// The current state.
    #[inline]
    pub fn state(&self) -> State {
        self.state
    }

    /// When the current state was entered.
    pub fn since(&self) -> Timestamp {
        self.since
    }

    /// Move to `to`, or explain why not.
    pub fn go(
        &mut self,
        to: State,
        cause: Cause,
        now: Timestamp,
    ) -> Result<Transition, IllegalTransition> {
        let from = self.state;
        if !allowed(from, to) {
            return Err(IllegalTransition { from, to, cause });
        }
        self.state = to;
        self.since = now;
        Ok(Transition {
            from,
            to,
            cause,
            at: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [State; 9] = [
        Idle,
        Connecting,
        Established,
        Recovering,
        Reconnecting,
        Resyncing,
        Suspended,
        Failed,
        Closed,
    ];

    /// The transition table as a matrix; changing the state machine means
    /// changing this snapshot on purpose.
    #[test]
    fn transition_table_snapshot() {
        let mut s = String::from("from\\to      ");
        for to in ALL {
            s += &format!("{:>4}", &to.name()[..3]);
        }
        s.push('\n');
        for from in ALL {
            s += &format!("{:<13}", from.name());
            for to in ALL {
                s += if allowed(from, to) { "   x" } else { "   ." };
            }
            s.push('\n');
        }
        let expected = "\
from\\to       idl con est rec rec res sus fai clo
idle            .   x   .   .   .   .   .   .   x
connecting      .   .   x   x   .   .   .   x   x
established     .   .   .   x   .   .   x   x   x
recovering      .   .   .   .   x   .   x   x   x
reconnecting    .   .   .   x   .   x   .   x   x
resyncing       .   .   x   x   .   .   .   x   x
suspended       .   .   .   x   .   .   .   .   x
failed          .   .   .   .   .   .   .   .   x
closed          .   .   .   .   .   .   .   .   .
";
        assert_eq!(s, expected, "\n{s}");
    }

    #[test]
    fn terminal_states_only_close() {
        for to in ALL {
            assert!(!allowed(Closed, to));
            assert_eq!(allowed(Failed, to), to == Closed);
        }
    }

    #[test]
    fn illegal_transition_is_an_error() {
        let mut m = Machine::new(Timestamp(0));
        let e = m
            .go(Established, Cause::Accepted, Timestamp(1))
            .unwrap_err();
        assert_eq!((e.from, e.to), (Idle, Established));
        assert_eq!(m.state(), Idle);
        let t = m.go(Connecting, Cause::Connect, Timestamp(2)).unwrap();
        assert_eq!((t.from, t.to, t.at), (Idle, Connecting, Timestamp(2)));
    }
}
