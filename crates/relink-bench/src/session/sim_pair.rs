//! [`SimPair`]: a relink session between the two hosts of a [`Sim`] (the
//! in-process soft fabric on virtual time), one thread driving both nodes
//! and the simulated world.

use std::time::Duration;

use relink::{Memory, Node, PollMode, RegionId, SessionHandle, State};
use relink_fabric::Provider;
use relink_sim::sim::{Sim, INITIATOR, TARGET};

use super::drive::{Drive, EndCounters};
use super::options::{session_options, Workload, PORT};
use super::target_app::TargetApp;
use crate::loops::{LoopSpec, TICK};

/// A relink session between the two hosts of a testkit [`Sim`] (the
/// in-process soft fabric, virtual time). One thread drives both nodes:
/// [`Drive::poll`] polls both, [`Drive::wait`] runs the simulated world
/// until the initiator's host has something for its node, a node's timer
/// is due, or a tick passes — like the raw loops' `Provider::wait`. Both
/// nodes busy-poll ([`PollMode::Busy`]: no CQ is armed), as the raw loops
/// poll their CQs without arming them. Set
/// up for [`Workload::PingPong`] or [`Workload::PingPongFrom`], the
/// receiving application sends each message it checked straight back
/// (copied, or from the posted buffer it landed in) and drains the
/// completions of those replies.
pub struct SimPair {
    sim: Sim,
    ini: SessionHandle,
    tgt: SessionHandle,
    /// The receiving application.
    app: TargetApp,
}

impl SimPair {
    /// A fresh world seeded with `seed`, and one session of the options
    /// [`session_options`] gives for `spec` and `workload`.
    ///
    /// # Panics
    /// If the session is not established within 1 s of virtual time.
    pub fn connect(seed: u64, spec: &LoopSpec, workload: Workload) -> SimPair {
        let mut sim = Sim::new(seed);
        // Busy-polling, as the raw loops do: the world's `wait` below is
        // virtual time passing (the fabric working), not a sleep of the
        // application, and it ends at the first completion of the
        // initiator's host whether or not a CQ is armed.
        sim.set_poll_mode(PollMode::Busy);
        let ini = sim
            .open_session(
                PORT,
                session_options(spec, workload, false),
                session_options(spec, workload, true),
            )
            .expect("open a session");
        let mut tgt = None;
        let up = sim.run_until_cond(Duration::from_secs(1), |sim| {
            tgt = tgt.or_else(|| sim.node(TARGET).accept().map(|a| a.session));
            tgt.is_some() && sim.node(INITIATOR).state(ini) == Some(State::Established)
        });
        assert!(up, "relink session not established in the simulation");
        let tgt = tgt.expect("accepted");
        // Let the target finish its side of the handshake.
        sim.run_for(Duration::from_millis(1));
        assert_eq!(sim.node(TARGET).state(tgt), Some(State::Established));
        let app = TargetApp::new(sim.node(TARGET), tgt, spec, workload);
        SimPair { sim, ini, tgt, app }
    }

    /// The simulated world, to inject faults into or run.
    pub fn sim(&mut self) -> &mut Sim {
        &mut self.sim
    }

    /// The session's handle on the target's node.
    pub fn target_session(&self) -> SessionHandle {
        self.tgt
    }
}

impl Drive for SimPair {
    fn kind(&self) -> &'static str {
        self.sim.host(INITIATOR).kind()
    }

    fn initiator(&mut self) -> &mut Node {
        self.sim.node(INITIATOR)
    }

    fn session(&self) -> SessionHandle {
        self.ini
    }

    fn poll(&mut self) -> bool {
        let a = self.sim.node(INITIATOR).poll();
        let b = self.sim.node(TARGET).poll();
        let app = self
            .app
            .poll(self.sim.node(TARGET), self.tgt)
            .unwrap_or_else(|e| panic!("receiver: {e}"));
        a | b | app
    }

    fn received(&self) -> u64 {
        self.app.received()
    }

    fn wait(&mut self, _receiver_only: bool) {
        // The host's clock, as the raw loops read it (`Provider::now`, no
        // lock of the world).
        let now = self.sim.host(INITIATOR).now();
        let a = self.sim.node(INITIATOR).next_deadline();
        let b = self.sim.node(TARGET).next_deadline();
        let d = [a, b]
            .into_iter()
            .flatten()
            .fold(now + TICK, std::cmp::min)
            .max(now);
        self.sim.host(INITIATOR).wait(Some(d));
    }

    fn target_region(&mut self, region: RegionId) -> Memory {
        let tgt = self.tgt;
        self.sim
            .node(TARGET)
            .region(tgt, region)
            .unwrap_or_else(|e| panic!("target region {region}: {e}"))
    }

    fn close_counted(mut self) -> EndCounters {
        let (ini, tgt) = (self.ini, self.tgt);
        let counters = EndCounters {
            initiator: self.sim.node(INITIATOR).counters(ini).expect("session"),
            target: self.sim.node(TARGET).counters(tgt).expect("session"),
        };
        self.sim.node(INITIATOR).close(ini).expect("close");
        self.sim.node(TARGET).close(tgt).expect("close");
        self.sim.run_for(Duration::from_millis(1));
        counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{RelinkSendLoop, RelinkWriteLoop};

    #[test]
    fn relink_loops_in_process() {
        let spec = LoopSpec::send(64, 16);
        let mut l = RelinkSendLoop::new(SimPair::connect(41, &spec, Workload::Send), spec);
        for count in [1, 37, 300] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 64));
        }
        assert_eq!(l.drive().received(), 338);
        l.close();

        let spec = LoopSpec::write(4096, 4);
        let mut l = RelinkWriteLoop::new(SimPair::connect(42, &spec, Workload::Write), spec);
        for count in [3, 50] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 4096));
        }
        l.close();
    }
}
