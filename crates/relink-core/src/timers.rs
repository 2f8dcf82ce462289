//! Every timer of a session in one table, indexed by [`TimerKind`]
//! (quinn's `TimerTable`): the next wake-up is the minimum.

use relink_fabric::Timestamp;

/// The timers a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerKind {
    /// The next reconnection attempt.
    Backoff,
    /// The give-up deadline (`ctrl_loss_tmo`) of the current outage.
    GiveUp,
    /// Fail queued operations (`fast_io_fail_tmo`).
    FastFail,
    /// The current connection attempt takes too long.
    ConnectTimeout,
    /// Time to send a keepalive probe.
    KeepaliveSend,
    /// Nothing heard from the peer for too long.
    KeepaliveDeadline,
    /// Acknowledge delivered messages that no outgoing message carried.
    AckDelay,
    /// A graceful close ([`Session::close_gracefully`](crate::session::Session::close_gracefully))
    /// stops waiting for the pending operations.
    CloseDeadline,
    /// A drain or suspend stops waiting for the peer's `Quiesced` and
    /// takes the connection down anyway.
    QuiesceDeadline,
    /// The standby connection being made takes too long, (with none) the
    /// next try to make one, or (with one up) its next keepalive.
    Standby,
    /// Nothing heard on the standby for too long.
    StandbySilence,
}

impl TimerKind {
    /// Every kind, in table order.
    pub const ALL: [TimerKind; 11] = [
        TimerKind::Backoff,
        TimerKind::GiveUp,
        TimerKind::FastFail,
        TimerKind::ConnectTimeout,
        TimerKind::KeepaliveSend,
        TimerKind::KeepaliveDeadline,
        TimerKind::AckDelay,
        TimerKind::CloseDeadline,
        TimerKind::QuiesceDeadline,
        TimerKind::Standby,
        TimerKind::StandbySilence,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// One optional deadline per [`TimerKind`]; a timer fires once, when
/// [`TimerTable::take_expired`] returns it, and is then disarmed.
///
/// A disarmed timer is held as the latest time there is, so the earliest
/// deadline ([`TimerTable::next`], asked after every input of a session)
/// is the minimum of a plain array. A timer armed for that time (a
/// deadline that saturated: some 584 years after the provider's epoch)
/// is armed one nanosecond earlier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerTable {
    /// The deadline of each kind in nanoseconds, indexed by [`TimerKind`]
    /// order; [`DISARMED`]: none.
    at: [u64; TimerKind::ALL.len()],
}

/// The deadline of a disarmed timer.
const DISARMED: u64 = u64::MAX;

impl Default for TimerTable {
    fn default() -> TimerTable {
        TimerTable {
            at: [DISARMED; TimerKind::ALL.len()],
        }
    }
}

impl TimerTable {
    /// Arm (or re-arm) a timer.
    pub fn set(&mut self, kind: TimerKind, at: Timestamp) {
        self.at[kind.index()] = at.0.min(DISARMED - 1);
    }

    /// Disarm a timer.
    pub fn stop(&mut self, kind: TimerKind) {
        self.at[kind.index()] = DISARMED;
    }

    /// When a timer fires, if armed.
    pub fn get(&self, kind: TimerKind) -> Option<Timestamp> {
        armed(self.at[kind.index()])
    }

    /// The earliest armed deadline.
    #[inline]
    pub fn next(&self) -> Option<Timestamp> {
        armed(self.at.iter().copied().fold(DISARMED, u64::min))
    }

    /// How many timers are armed (at most [`TimerKind::ALL`]'s length).
    pub fn armed(&self) -> usize {
        self.at.iter().filter(|t| **t != DISARMED).count()
    }

    /// Disarm and return the timers due at `now`, in table order.
    pub fn take_expired(&mut self, now: Timestamp) -> Vec<TimerKind> {
        let mut due = Vec::new();
        for k in TimerKind::ALL {
            let at = &mut self.at[k.index()];
            if *at != DISARMED && *at <= now.0 {
                *at = DISARMED;
                due.push(k);
            }
        }
        due
    }

    /// Disarm everything.
    pub fn clear(&mut self) {
        self.at = [DISARMED; TimerKind::ALL.len()];
    }
}

/// A deadline, unless it is [`DISARMED`].
fn armed(at: u64) -> Option<Timestamp> {
    (at != DISARMED).then_some(Timestamp(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_the_minimum_and_expiry_disarms() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(TimerKind::GiveUp, Timestamp(600));
        t.set(TimerKind::Backoff, Timestamp(10));
        t.set(TimerKind::KeepaliveSend, Timestamp(5));
        assert_eq!(t.next(), Some(Timestamp(5)));
        assert_eq!(t.armed(), 3);
        assert_eq!(
            t.take_expired(Timestamp(10)),
            vec![TimerKind::Backoff, TimerKind::KeepaliveSend]
        );
        assert_eq!(t.next(), Some(Timestamp(600)));
        t.stop(TimerKind::GiveUp);
        assert_eq!(t.next(), None);
        assert_eq!(t.get(TimerKind::GiveUp), None);
        // A deadline that saturated stays armed.
        t.set(TimerKind::GiveUp, Timestamp(5) + std::time::Duration::MAX);
        assert_eq!(t.get(TimerKind::GiveUp), Some(Timestamp(u64::MAX - 1)));
        assert_eq!((t.next(), t.armed()), (Some(Timestamp(u64::MAX - 1)), 1));
    }
}
