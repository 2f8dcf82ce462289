//! [`SessionEvent`] in words: a stable snake_case name per kind
//! ([`SessionEvent::name`]) and a one-line description in plain words
//! (`Display`), for logs and event streams that people and programs
//! read (never the `Debug` text).

use std::fmt;

use super::output::SessionEvent;
use super::paths::Path;
use super::planned::Plan;

impl SessionEvent {
    /// The event's kind as a stable snake_case name (`"device_lost"`,
    /// `"resumed"`, ...): a field for structured logs and event streams.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            SessionEvent::Transition(_) => "transition",
            SessionEvent::DeviceLost { .. } => "device_lost",
            SessionEvent::AwaitingDecision { .. } => "awaiting_decision",
            SessionEvent::Recovering { .. } => "recovering",
            SessionEvent::AttemptFailed { .. } => "attempt_failed",
            SessionEvent::Resumed { .. } => "resumed",
            SessionEvent::GaveUp => "gave_up",
            SessionEvent::Refused { .. } => "refused",
            SessionEvent::PeerLost { .. } => "peer_lost",
            SessionEvent::Quiescing { .. } => "quiescing",
            SessionEvent::Suspended => "suspended",
            SessionEvent::DrainBlocked => "drain_blocked",
            SessionEvent::Disconnected => "disconnected",
            SessionEvent::StandbyUp { .. } => "standby_up",
            SessionEvent::StandbyLost { .. } => "standby_lost",
            SessionEvent::Writable => "writable",
        }
    }
}

/// A path as `local -> peer` (`by route -> peer` without a local address).
struct PathText<'a>(&'a Path);

impl fmt::Display for PathText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.local {
            Some(ip) => write!(f, "{ip} -> {}", self.0.peer),
            None => write!(f, "by route -> {}", self.0.peer),
        }
    }
}

impl fmt::Display for SessionEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionEvent::Transition(t) => {
                write!(f, "{} -> {} ({})", t.from, t.to, t.cause)
            }
            SessionEvent::DeviceLost { cause } => write!(f, "transport lost: {cause}"),
            SessionEvent::AwaitingDecision { cause, candidates } => {
                write!(f, "held for the application's decision (lost: {cause}); ")?;
                if candidates.is_empty() {
                    return write!(f, "no path has a device yet");
                }
                write!(f, "paths a device can carry: ")?;
                for (i, c) in candidates.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(
                        f,
                        "{sep}#{} {} on {}",
                        c.path_index,
                        PathText(&c.path),
                        c.device
                    )?;
                }
                Ok(())
            }
            SessionEvent::Recovering { attempt } => write!(f, "attempt {attempt} begins"),
            SessionEvent::AttemptFailed { attempt, reason } => {
                write!(f, "attempt {attempt} failed: {reason}")
            }
            SessionEvent::Resumed {
                downtime,
                replayed,
                deduplicated,
                device,
            } => {
                write!(
                    f,
                    "resumed after {:.3} s down, {replayed} operation(s) replayed, \
                     {deduplicated} duplicate(s) dropped",
                    downtime.as_secs_f64()
                )?;
                match device {
                    Some(d) => write!(f, ", on {d}"),
                    None => Ok(()),
                }
            }
            SessionEvent::GaveUp => write!(f, "gave up: the give-up deadline passed"),
            SessionEvent::Refused { reason, retrying } => write!(
                f,
                "the peer refused the connection: {reason}{}",
                if *retrying { " (trying again)" } else { "" }
            ),
            SessionEvent::PeerLost { reason } => write!(f, "peer lost: {reason}"),
            SessionEvent::Quiescing { plan } => write!(
                f,
                "planned outage begins ({})",
                match plan {
                    Plan::Drain => "drain: moving to another path",
                    Plan::Suspend => "suspend",
                }
            ),
            SessionEvent::Suspended => write!(f, "suspended"),
            SessionEvent::DrainBlocked => {
                write!(
                    f,
                    "drain blocked: no other path; the session stays on the device"
                )
            }
            SessionEvent::Disconnected => write!(f, "closed"),
            SessionEvent::StandbyUp { device } => write!(f, "standby up on {device}"),
            SessionEvent::StandbyLost {
                device,
                path,
                cause,
            } => {
                write!(f, "standby on {device} lost ({cause})")?;
                match path {
                    Some(p) => write!(f, ", path {}", PathText(p)),
                    None => Ok(()),
                }
            }
            SessionEvent::Writable => write!(f, "takes operations again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::reason::{AttemptFailure, DownCause};

    #[test]
    fn events_read_as_words_with_a_stable_name() {
        let lost = SessionEvent::DeviceLost {
            cause: DownCause::CmDisconnected,
        };
        assert_eq!(lost.name(), "device_lost");
        assert!(!lost.to_string().contains("CmDisconnected"), "{lost}");
        let failed = SessionEvent::AttemptFailed {
            attempt: 3,
            reason: AttemptFailure::Unreachable,
        };
        assert_eq!(
            failed.to_string(),
            "attempt 3 failed: the peer is unreachable"
        );
        let resumed = SessionEvent::Resumed {
            downtime: Duration::from_millis(1500),
            replayed: 2,
            deduplicated: 0,
            device: None,
        };
        assert_eq!(
            resumed.to_string(),
            "resumed after 1.500 s down, 2 operation(s) replayed, 0 duplicate(s) dropped"
        );
        assert_eq!(SessionEvent::GaveUp.name(), "gave_up");
    }
}
