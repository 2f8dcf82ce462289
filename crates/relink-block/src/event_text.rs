//! The engines' events in words: a stable snake_case name per kind and a
//! plain-words `Display`, for logs and event streams (never the `Debug`
//! text).

use std::fmt;

use crate::error::SessionEnd;
use crate::initiator::InitiatorEvent;
use crate::target::TargetEvent;

impl fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionEnd::GaveUp => "the give-up deadline passed",
            SessionEnd::PeerLost => "the peer lost the session (restarted, or refused it)",
            SessionEnd::Closed => "closed",
        })
    }
}

impl InitiatorEvent {
    /// The event's kind as a stable snake_case name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            InitiatorEvent::BadReply(_) => "bad_reply",
            InitiatorEvent::UnknownTag(_) => "unknown_tag",
            InitiatorEvent::Ended(_) => "ended",
            InitiatorEvent::FastFailed { .. } => "fast_failed",
        }
    }
}

impl fmt::Display for InitiatorEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitiatorEvent::BadReply(e) => write!(f, "a message of the target is not a reply: {e}"),
            InitiatorEvent::UnknownTag(t) => write!(f, "a reply for tag {} not outstanding", t.0),
            InitiatorEvent::Ended(end) => write!(f, "the session ended: {end}"),
            InitiatorEvent::FastFailed { commands } => write!(
                f,
                "{commands} command(s) fast-failed in this outage (fast_io_fail_tmo passed)"
            ),
        }
    }
}

impl TargetEvent {
    /// The event's kind as a stable snake_case name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            TargetEvent::Connected(_) => "connected",
            TargetEvent::Ended { .. } => "ended",
            TargetEvent::BadCommand { .. } => "bad_command",
        }
    }
}

impl fmt::Display for TargetEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetEvent::Connected(s) => write!(f, "session {} served", s.0),
            TargetEvent::Ended { session, end } => write!(f, "session {} ended: {end}", session.0),
            TargetEvent::BadCommand { session, error } => write!(
                f,
                "session {}: a message is not a command: {error}",
                session.0
            ),
        }
    }
}
