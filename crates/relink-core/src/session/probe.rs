//! Probes of a silent peer. An initiator cannot see the peer's device
//! return: a request that meets no device gets no answer, only its
//! timeout. While the peer is silent (the last attempt got no answer, or
//! the transport was lost on the peer's side), an established session's
//! next attempt is a *probe*: it comes within `probe_interval` and gets a
//! short timeout (`probe_timeout`, at least four times the session's
//! slowest connection). A driver with many sessions to one peer lets one
//! of them probe at a time ([`Session::probe_peer`],
//! [`Session::hold_probes`]) and sends the others at once when the peer
//! answers ([`Session::peer_answered`]).

use std::net::SocketAddr;
use std::time::Duration;

use relink_fabric::Timestamp;

use super::{Role, Session};
use crate::policy::Policy;
use crate::state::State;
use crate::timers::TimerKind;

/// Probes of a silent peer: the part of [`Session`] this file owns.
#[derive(Debug, Default)]
pub(super) struct Probes {
    /// The peer may be away: the last attempt of this outage got no answer
    /// at all (it timed out before the connection was up, or the peer was
    /// unreachable), or the transport was lost on the peer's side. The
    /// next attempt is a probe (`probe_interval`, `probe_timeout`). False
    /// after any other failure, a local loss, or an establishment.
    silent: bool,
    /// When the current attempt started (the request's connection time is
    /// measured from it).
    attempt_started: Option<Timestamp>,
    /// The longest connection time of the session's attempts (from an
    /// attempt's start until the CM establishes it): what a probe's
    /// timeout is scaled by. `None` until the first connection.
    slowest_connect: Option<Duration>,
    /// Set while another session of the node probes the same peer
    /// address: the session makes no probe ([`Session::hold_probes`]).
    held: bool,
}

impl Probes {
    /// Whether the next attempt is a probe: the peer is silent, probes are
    /// on, and the session has connected before (so its connection time is
    /// known).
    pub(super) fn probing(&self, policy: &Policy) -> bool {
        self.silent && policy.probe_interval.is_some() && self.slowest_connect.is_some()
    }

    /// Whether an attempt now would be a probe the driver holds.
    pub(super) fn waits(&self, policy: &Policy) -> bool {
        self.held && self.probing(policy)
    }

    /// The timeout of attempt `n` if it is a probe
    /// ([`Policy::probe_attempt_timeout`]); `None` if it is not.
    pub(super) fn attempt_timeout(&self, policy: &Policy, n: u32) -> Option<Duration> {
        match self.slowest_connect {
            Some(slowest) if self.probing(policy) => Some(policy.probe_attempt_timeout(n, slowest)),
            _ => None,
        }
    }

    /// Whether the peer may be away: set after a loss or a failed attempt,
    /// by what it was.
    pub(super) fn set_silent(&mut self, silent: bool) {
        self.silent = silent;
    }

    /// An attempt starts now: its connection time is measured from now.
    pub(super) fn attempt_started(&mut self, now: Timestamp) {
        self.attempt_started = Some(now);
    }
}

impl Session {
    /// The CM established the current attempt's connection: its time
    /// counts toward the slowest connection (what probes are scaled by),
    /// and the peer is not silent.
    pub(super) fn note_connected(&mut self, now: Timestamp) {
        let p = &mut self.probes;
        if let Some(start) = p.attempt_started.take() {
            let took = now - start;
            p.slowest_connect = Some(p.slowest_connect.map_or(took, |s| s.max(took)));
        }
        p.silent = false;
    }

    /// The peer address this initiator probes: `Some` while it recovers
    /// on its own and its attempts are probes (the peer is silent), with
    /// the address of the path of its current or next attempt; `None`
    /// otherwise (a session held for the application's decision makes no
    /// attempt, so it probes nothing).
    pub fn probe_peer(&self) -> Option<SocketAddr> {
        let recovering = matches!(self.state(), State::Recovering | State::Reconnecting);
        if self.cfg.role != Role::Initiator
            || !recovering
            || self.decision.is_held()
            || !self.probes.probing(&self.cfg.policy)
        {
            return None;
        }
        self.cfg
            .paths
            .get(self.recovery.path_index())
            .map(|p| p.peer)
    }

    /// Holds (`true`) or releases (`false`) the session's probes: the
    /// driver holds them while another session probes the same peer
    /// address. A held session starts no probe (one under way runs to its
    /// end); a released one makes its next attempt at once.
    pub fn hold_probes(&mut self, hold: bool, now: Timestamp) {
        let held_before = self.probes.held;
        self.probes.held = hold;
        if held_before && !hold {
            self.attempt_now(now);
        }
    }

    /// Another session's probe of the same peer was answered (it connected,
    /// or the peer refused it): the peer is not silent. The probes are let
    /// go and the next attempt, with the full attempt timeout, comes at
    /// once.
    pub fn peer_answered(&mut self, now: Timestamp) {
        self.probes.silent = false;
        self.probes.held = false;
        self.attempt_now(now);
    }

    /// A session waiting for its next attempt makes it now.
    fn attempt_now(&mut self, now: Timestamp) {
        if self.state() == State::Recovering
            && self.cfg.role == Role::Initiator
            && !self.decision.is_held()
        {
            self.timers.stop(TimerKind::Backoff);
            self.try_attempt(now);
        }
    }
}
