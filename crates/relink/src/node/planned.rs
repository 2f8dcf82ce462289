//! Planned outages, the application's and the operator's: [`Node::suspend`]
//! parks a session until [`Node::resume`], and [`Node::drain`] moves every
//! session off a device before it goes (planned maintenance: a firmware
//! update, a card swap). Both take a connection down only once both ends
//! are quiet, so nothing is replayed and no operation ends
//! `Indeterminate`; the quiesce handshake is described in
//! `relink_core::session` (`session/planned.rs`).

use relink_core::session::SessionError;
use relink_core::state::State;
use relink_fabric::DeviceId;

use super::{Node, SessionHandle, SuspendError};

/// What [`Node::drain`] did with the sessions the device carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Sessions moving to another path (an initiator's own move, or a
    /// target's request to its initiator). Each reports
    /// [`SessionEvent::Quiescing`](crate::SessionEvent::Quiescing), then
    /// [`SessionEvent::Resumed`](crate::SessionEvent::Resumed) on the new
    /// path.
    pub moving: Vec<SessionHandle>,
    /// Sessions the device carries that have no other present path
    /// ([`SessionEvent::DrainBlocked`](crate::SessionEvent::DrainBlocked)):
    /// they stay, and are lost with the device (then recover as usual).
    pub blocked: Vec<SessionHandle>,
}

impl Node {
    /// Suspend a session: it stops posting, waits until both ends are
    /// quiet (nothing in flight either way), takes its connection down and
    /// waits in [`State::Suspended`] — no attempt, no give-up deadline —
    /// until [`Node::resume`] (or [`Node::resume_on`], naming the path).
    /// Operations submitted meanwhile wait and are posted once it is back.
    /// The peer's half is suspended too (a
    /// [`SessionEvent::Suspended`](crate::SessionEvent::Suspended) on each
    /// side), not lost. A recovering session is suspended at once, one
    /// reconnecting once it is established; a suspended one stays so.
    ///
    /// # Errors
    /// [`SuspendError::NoSession`]; [`SuspendError::NotInitiator`] on the
    /// accepting side (the initiator, which reconnects, suspends and
    /// resumes); [`SuspendError::NotEstablished`] before the session was
    /// first established; [`SuspendError::Closing`] while it closes
    /// gracefully; [`SuspendError::Ended`] once it ended.
    pub fn suspend(&mut self, s: SessionHandle) -> Result<(), SuspendError> {
        let now = self.now();
        let core = &mut self
            .sessions
            .get_mut(&s.0)
            .ok_or(SuspendError::NoSession(s))?
            .core;
        let state = core.state();
        let role = core.role();
        core.suspend(now).map_err(|e| match e {
            SessionError::Terminal(state) => SuspendError::Ended(state),
            SessionError::Closing => SuspendError::Closing,
            _ if role == relink_core::session::Role::Target => SuspendError::NotInitiator,
            _ => SuspendError::NotEstablished(state),
        })?;
        self.run_actions(s.0);
        Ok(())
    }

    /// Move every session off `device` before it goes, make-before-break:
    /// each session the device carries finishes what is in flight on it,
    /// then reconnects at once on another present path (an initiator picks
    /// a path on another of its devices; a target asks its initiator to
    /// move off the target's address), with nothing to replay. Operations
    /// submitted meanwhile wait; none fails and none ends `Indeterminate`.
    /// From now on no session of the node (new ones included) takes a path
    /// the device carries, until [`Node::undrain`] or until the device is
    /// removed (what comes back is a new device). Progress: each session's
    /// events, [`Node::sessions_on`] (empty once the device carries
    /// nothing), [`Counters::planned`](crate::Counters::planned).
    #[must_use = "the report lists the sessions that could not move"]
    pub fn drain(&mut self, device: &DeviceId) -> DrainReport {
        let now = self.now();
        if !self.draining.contains(device) {
            self.draining.push(device.clone());
        }
        let mut report = DrainReport::default();
        let handles: Vec<u64> = self.sessions.keys().copied().collect();
        for handle in handles {
            let Some(entry) = self.sessions.get_mut(&handle) else {
                continue;
            };
            let on = entry.core.device().is_some_and(|d| d.id == *device);
            let moving = entry.core.drain_device(device, now);
            if moving {
                report.moving.push(SessionHandle(handle));
            } else if on && entry.core.state() == State::Established {
                report.blocked.push(SessionHandle(handle));
            }
            self.run_actions(handle);
        }
        tracing::info!(%device, moving = report.moving.len(), blocked = report.blocked.len(), "drain");
        report
    }

    /// Stop draining `device`: its paths may be taken again. Sessions that
    /// moved stay where they are.
    pub fn undrain(&mut self, device: &DeviceId) {
        let now = self.now();
        self.draining.retain(|d| d != device);
        let handles: Vec<u64> = self.sessions.keys().copied().collect();
        for handle in handles {
            if let Some(entry) = self.sessions.get_mut(&handle) {
                entry.core.undrain_device(device, now);
            }
            self.run_actions(handle);
        }
    }

    /// The devices being drained ([`Node::drain`]).
    pub fn draining(&self) -> &[DeviceId] {
        &self.draining
    }

    /// The sessions whose connection `device` carries (or whose attempt
    /// it carries): empty once a drain finished.
    pub fn sessions_on(&self, device: &DeviceId) -> Vec<SessionHandle> {
        self.sessions
            .iter()
            .filter(|(_, entry)| {
                entry.core.device().is_some_and(|d| d.id == *device)
                    || entry
                        .transport
                        .as_ref()
                        .and_then(|t| t.device.as_ref())
                        .is_some_and(|d| d.id == *device)
            })
            .map(|(h, _)| SessionHandle(*h))
            .collect()
    }
}
