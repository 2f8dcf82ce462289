//! The keepalive of the current transport
//! ([`Policy::keepalive`](crate::policy::Policy::keepalive)): a probe every
//! period while established, each answered by the peer, and the silence
//! deadline of two periods that anything heard from the peer re-arms; its
//! expiry is a loss ([`DownCause::KeepaliveTimeout`]). The standby's
//! keepalives are [`standby`](super::standby)'s; they take their nonces
//! from the same counter.

use relink_fabric::Timestamp;

use super::Session;
use crate::reason::DownCause;
use crate::state::State;
use crate::timers::TimerKind;
use crate::wire;

/// The keepalive: the part of [`Session`] this file owns (its deadlines
/// are in the session's timer table).
#[derive(Debug, Default)]
pub(super) struct Keepalive {
    /// Nonce of the last keepalive probe sent (each probe takes the next,
    /// the current transport's and the standby's alike).
    nonce: u64,
}

impl Keepalive {
    /// The nonce of the next probe.
    pub(super) fn next_nonce(&mut self) -> u64 {
        self.nonce += 1;
        self.nonce
    }
}

impl Session {
    /// Arm the keepalive probe and the silence deadline, as the policy
    /// asks.
    pub(super) fn arm_keepalive(&mut self, now: Timestamp) {
        if let Some(k) = self.cfg.policy.keepalive {
            self.timers.set(TimerKind::KeepaliveSend, now + k);
        }
        if let Some(d) = self.cfg.policy.keepalive_deadline() {
            self.timers.set(TimerKind::KeepaliveDeadline, now + d);
        }
    }

    /// The policy's keepalive period changed: a keepalive running restarts
    /// with the new period (or stops, with none).
    pub(super) fn restart_keepalive(&mut self, now: Timestamp) {
        if self.timers.get(TimerKind::KeepaliveSend).is_some()
            || self.timers.get(TimerKind::KeepaliveDeadline).is_some()
        {
            self.timers.stop(TimerKind::KeepaliveSend);
            self.timers.stop(TimerKind::KeepaliveDeadline);
            self.arm_keepalive(now);
        }
    }

    /// The probe timer fired: an established session sends its next probe.
    pub(super) fn keepalive_due(&mut self, now: Timestamp) {
        if self.state() == State::Established {
            let n = self.keepalive.next_nonce();
            self.send_control(|ack, out| {
                wire::encode_keepalive(ack, n, out);
                Ok(())
            });
            if let Some(k) = self.cfg.policy.keepalive {
                self.timers.set(TimerKind::KeepaliveSend, now + k);
            }
        }
    }

    /// Something arrived from the peer on the current transport: the
    /// silence deadline, if armed, starts again.
    pub(super) fn keepalive_heard(&mut self, now: Timestamp) {
        if let Some(d) = self.cfg.policy.keepalive_deadline() {
            if self.timers.get(TimerKind::KeepaliveDeadline).is_some() {
                self.timers.set(TimerKind::KeepaliveDeadline, now + d);
            }
        }
    }

    /// The peer's probe: answer it.
    pub(super) fn answer_keepalive(&mut self, nonce: u64) {
        self.send_control(|ack, out| {
            wire::encode_keepalive_reply(ack, nonce, out);
            Ok(())
        });
    }

    /// Nothing heard from the peer for two periods: the transport is lost.
    pub(super) fn keepalive_silent(&mut self, now: Timestamp) {
        if matches!(self.state(), State::Established | State::Resyncing) {
            self.lose_transport(DownCause::KeepaliveTimeout, now);
        }
    }
}
