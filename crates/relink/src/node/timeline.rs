//! Where a session's recovery time goes: the moment each phase of its
//! last outage ended, recorded by the node as it drives the session.

use relink_fabric::Timestamp;

/// The phases of a session's last outage, each the provider-clock moment
/// it ended ([`SessionInfo::last_recovery`](crate::SessionInfo::last_recovery)):
/// from the loss of the connection to the first operation completed after
/// the session is established again. A phase not (yet) reached is `None`;
/// each attempt restarts the phases after `device_visible`, so the fields
/// describe the attempt that succeeded (or the one under way).
///
/// A session that switched to its hot standby ([`Policy::standby`](crate::Policy))
/// makes no attempt: its outage is `lost`, `promoted`, `resynced` and
/// `first_completion`; a reconnection's has no `promoted`. `released` is
/// off the path: the node destroys a lost connection's objects at the end
/// of the poll round after the loss's — one a promoted standby replaced,
/// once the switch is over (the first completion after the resync, or
/// 100 ms after the promotion at the latest) — so it may come after the
/// phases that follow it in the table.
///
/// | field | the phase that ends then |
/// |---|---|
/// | `lost` | the connection went down (a loss, or a planned take-down) |
/// | `released` | the lost connection's resources were destroyed (QP, CQ, registrations, PD, context) |
/// | `device_visible` | the process saw a device come (its add event), if one came during the outage |
/// | `attempt` | the attempt began: the initiator asked to resolve the peer's address; the target began to accept |
/// | `addr_resolved` | address resolution (initiator) |
/// | `route_resolved` | route resolution (initiator) |
/// | `resources` | the connection's resources were created on the device (PD, CQ, QP, registrations) |
/// | `connected` | the CM connection was established |
/// | `promoted` | the standby became the session's connection (this end's `Promote` and advertisements are next to go out) |
/// | `resynced` | the journals and region advertisements were exchanged: the session is established |
/// | `first_completion` | the first operation completed after that |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryTimeline {
    /// The connection went down.
    pub lost: Timestamp,
    /// The lost connection's resources were destroyed.
    pub released: Option<Timestamp>,
    /// A device was added during the outage (the last one seen).
    pub device_visible: Option<Timestamp>,
    /// The attempt that succeeded (or is under way) began.
    pub attempt: Option<Timestamp>,
    /// Its peer address was resolved (initiator).
    pub addr_resolved: Option<Timestamp>,
    /// Its route was resolved (initiator).
    pub route_resolved: Option<Timestamp>,
    /// Its resources were created on the device.
    pub resources: Option<Timestamp>,
    /// Its CM connection was established.
    pub connected: Option<Timestamp>,
    /// The standby was promoted in its place (no attempt was made).
    pub promoted: Option<Timestamp>,
    /// The session was established again (resync done).
    pub resynced: Option<Timestamp>,
    /// The first operation completed after that.
    pub first_completion: Option<Timestamp>,
    /// `Counters::completed` at `resynced`.
    completed_at_resync: u64,
}

impl RecoveryTimeline {
    pub(super) fn new(lost: Timestamp) -> RecoveryTimeline {
        RecoveryTimeline {
            lost,
            released: None,
            device_visible: None,
            attempt: None,
            addr_resolved: None,
            route_resolved: None,
            resources: None,
            connected: None,
            promoted: None,
            resynced: None,
            first_completion: None,
            completed_at_resync: 0,
        }
    }

    /// A new attempt begins: the phases after it start again.
    pub(super) fn attempt(&mut self, now: Timestamp) {
        *self = RecoveryTimeline {
            attempt: Some(now),
            released: self.released,
            device_visible: self.device_visible,
            ..RecoveryTimeline::new(self.lost)
        };
    }

    /// Whether the session is still out (not established again).
    pub(super) fn out(&self) -> bool {
        self.resynced.is_none()
    }

    /// The session is established again (`completed`: its count of
    /// completed operations now), or completed an operation since.
    pub(super) fn established(&mut self, now: Timestamp, completed: u64) {
        match self.resynced {
            None if self.connected.or(self.promoted).is_some() => {
                self.resynced = Some(now);
                self.completed_at_resync = completed;
            }
            Some(_) if self.first_completion.is_none() && completed > self.completed_at_resync => {
                self.first_completion = Some(now);
            }
            _ => {}
        }
    }

    /// Whether every phase after the resync is recorded.
    pub(super) fn complete(&self) -> bool {
        self.first_completion.is_some()
    }
}
