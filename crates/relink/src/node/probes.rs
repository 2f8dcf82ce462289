//! One probe per silent peer address per node. While a peer is silent
//! (its device may be away), each session's core probes it
//! ([`Session::probe_peer`](relink_core::session::Session::probe_peer)):
//! with many sessions to that peer, that many requests per probe period.
//! The node lets one session probe each address and holds the others'
//! probes ([`Session::hold_probes`](relink_core::session::Session::hold_probes));
//! when the probing session stops probing because the peer answered (it
//! connected, or the peer refused it), the others go at once, with the
//! full attempt timeout
//! ([`Session::peer_answered`](relink_core::session::Session::peer_answered));
//! when it ends or turns to another address, one of the others takes its
//! place.

use std::net::SocketAddr;

use super::Node;

impl Node {
    /// After session `handle`'s core ran: keep the table of probing sessions
    /// in step with it (called at the end of `run_actions`).
    pub(super) fn coordinate_probes(&mut self, handle: u64) {
        let Some(entry) = self.sessions.get(&handle) else {
            self.release_probes_of(handle);
            return;
        };
        let probe = entry.core.probe_peer();
        if probe.is_none() && self.probers.is_empty() {
            return;
        }
        // It probed another address, or no longer probes.
        let left: Vec<SocketAddr> = self
            .probers
            .iter()
            .filter(|&(addr, &h)| h == handle && probe != Some(*addr))
            .map(|(addr, _)| *addr)
            .collect();
        if !left.is_empty() {
            // Alive and probing no more: its peer answered (it connected,
            // or was refused). Probing another address (its next path)
            // says nothing of this one.
            let answered = probe.is_none() && !entry.core.state().is_terminal();
            for addr in left {
                self.probers.remove(&addr);
                self.release(addr, answered);
            }
        }
        let Some(addr) = probe else {
            return;
        };
        let now = self.provider.now();
        let prober = self.probers.get(&addr).copied();
        match prober {
            Some(h) if h == handle => {}
            Some(h) if self.probes(h, addr) => {
                if let Some(entry) = self.sessions.get_mut(&handle) {
                    entry.core.hold_probes(true, now);
                }
            }
            // None, or a prober that no longer probes this address.
            _ => {
                self.probers.insert(addr, handle);
                if let Some(entry) = self.sessions.get_mut(&handle) {
                    entry.core.hold_probes(false, now);
                }
                self.run_actions(handle);
            }
        }
    }

    /// Session `handle` is gone: the addresses it probed are probed by one of
    /// the sessions it held.
    pub(super) fn release_probes_of(&mut self, handle: u64) {
        let left: Vec<SocketAddr> = self
            .probers
            .iter()
            .filter(|&(_, &h)| h == handle)
            .map(|(addr, _)| *addr)
            .collect();
        for addr in left {
            self.probers.remove(&addr);
            self.release(addr, false);
        }
    }

    /// Whether session `handle` probes `addr`.
    fn probes(&self, handle: u64, addr: SocketAddr) -> bool {
        self.sessions
            .get(&handle)
            .is_some_and(|s| s.core.probe_peer() == Some(addr))
    }

    /// Let the sessions probing `addr` go: after an answer (`answered`),
    /// each attempts at once with the full attempt timeout; otherwise the
    /// first probes at once, and from then on for the others.
    fn release(&mut self, addr: SocketAddr, answered: bool) {
        let now = self.provider.now();
        let waiting: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.core.probe_peer() == Some(addr))
            .map(|(&h, _)| h)
            .take(if answered { usize::MAX } else { 1 })
            .collect();
        for h in waiting {
            if let Some(entry) = self.sessions.get_mut(&h) {
                if answered {
                    entry.core.peer_answered(now);
                } else {
                    entry.core.hold_probes(false, now);
                }
            }
            self.run_actions(h);
        }
    }
}
