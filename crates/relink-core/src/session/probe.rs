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

use relink_fabric::Timestamp;

use super::{Role, Session};
use crate::state::State;
use crate::timers::TimerKind;

impl Session {
    /// Whether the next attempt is a probe: the peer is silent, probes are
    /// on, and the session has connected before (so its connection time is
    /// known).
    pub(super) fn probing(&self) -> bool {
        self.silent && self.cfg.policy.probe_interval.is_some() && self.slowest_connect.is_some()
    }

    /// Whether an attempt now would be a probe the driver holds.
    pub(super) fn probe_waits(&self) -> bool {
        self.probe_held && self.probing()
    }

    /// The CM established the current attempt's connection: its time
    /// counts toward the slowest connection (what probes are scaled by),
    /// and the peer is not silent.
    pub(super) fn note_connected(&mut self, now: Timestamp) {
        if let Some(start) = self.attempt_started.take() {
            let took = now - start;
            self.slowest_connect = Some(self.slowest_connect.map_or(took, |s| s.max(took)));
        }
        self.silent = false;
    }

    /// The peer address this initiator probes: `Some` while it recovers
    /// on its own and its attempts are probes (the peer is silent), with
    /// the address of the path of its current or next attempt; `None`
    /// otherwise (a session held for the application's decision makes no
    /// attempt, so it probes nothing).
    pub fn probe_peer(&self) -> Option<SocketAddr> {
        let recovering = matches!(self.state(), State::Recovering | State::Reconnecting);
        if self.cfg.role != Role::Initiator || !recovering || self.held || !self.probing() {
            return None;
        }
        self.cfg.paths.get(self.path_index).map(|p| p.peer)
    }

    /// Holds (`true`) or releases (`false`) the session's probes: the
    /// driver holds them while another session probes the same peer
    /// address. A held session starts no probe (one under way runs to its
    /// end); a released one makes its next attempt at once.
    pub fn hold_probes(&mut self, hold: bool, now: Timestamp) {
        let held_before = self.probe_held;
        self.probe_held = hold;
        if held_before && !hold {
            self.attempt_now(now);
        }
    }

    /// Another session's probe of the same peer was answered (it connected,
    /// or the peer refused it): the peer is not silent. The probes are let
    /// go and the next attempt, with the full attempt timeout, comes at
    /// once.
    pub fn peer_answered(&mut self, now: Timestamp) {
        self.silent = false;
        self.probe_held = false;
        self.attempt_now(now);
    }

    /// A session waiting for its next attempt makes it now.
    fn attempt_now(&mut self, now: Timestamp) {
        if self.state() == State::Recovering && self.cfg.role == Role::Initiator && !self.held {
            self.timers.stop(TimerKind::Backoff);
            self.try_attempt(now);
        }
    }
}
