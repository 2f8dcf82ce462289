//! Fault application: a fault's first step opens its window (the device
//! it hits is resolved then, and A's stall is watched if it carries A),
//! every step is injected into the soft fabric or, for the admin close,
//! played on session A, or for the planned drain on the initiator's node
//! (see [`super::drain`]).

use std::collections::BTreeSet;
use std::io;

use relink::OpId;
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::workload::Problem;
use relink_soft::Fault;

use super::driver::Driver;
use super::faults::{self, DeviceSel, Planned, Side, Step};
use super::report::{Marker, MarkerKind};
use super::window::{Acc, Window};

/// Messages submitted at once right before the admin close (more than
/// the peer's receive credits, so some are still queued).
const CLOSE_BURST: usize = 100;

impl Driver<'_> {
    fn resolve(&mut self, sel: DeviceSel) -> Option<(Side, String)> {
        match sel {
            DeviceSel::None => None,
            DeviceSel::Named(side, name) => Some((side, name.to_string())),
            DeviceSel::CarryingA(side) => {
                let h = match side {
                    Side::Initiator => self.streams[0].session,
                    Side::Target => self.streams[0].target_session(),
                };
                let name = self
                    .device_of(side, h)
                    .map_or(faults::PRIMARY.to_string(), |d| d.0.name);
                Some((side, name))
            }
        }
    }

    pub(super) fn apply(&mut self, plan: &[Planned], i: usize, step: Step) -> io::Result<()> {
        let kind = plan[i].kind;
        if self.windows.len() <= i {
            // The fault's first step: a new window.
            self.drain()?;
            self.close_window();
            let dev = self.resolve(kind.target());
            self.fault_device[i] = dev.clone();
            let hit = dev
                .as_ref()
                .map_or("session A".to_string(), |(s, d)| format!("{s} {d}"));
            let description = kind.describe(&hit, &self.timing);
            let mut acc: [Acc; 2] = Default::default();
            for (j, a) in acc.iter_mut().enumerate() {
                let h = self.streams[j].session;
                let d = self.device_of(Side::Initiator, h);
                a.device_before = d.as_ref().map(|d| d.0.clone());
                a.guid_before = d.map(|d| d.1);
                a.ended_before = self
                    .sim
                    .node(INITIATOR)
                    .state(h)
                    .is_none_or(|s| s.is_terminal());
            }
            self.windows.push(Window {
                kind,
                at: self.sim.now(),
                hit: hit.clone(),
                description: description.clone(),
                acc,
                closed: false,
            });
            self.c_fault_started(dev.as_ref());
            self.watch_stall(i, dev.as_ref());
            self.markers.push(Marker {
                at_s: self.rel(self.sim.now()),
                label: kind.to_string(),
                detail: description.clone(),
                kind: MarkerKind::Fault,
            });
            if !self.quiet {
                writeln!(self.out)?;
            }
            self.say(format!("FAULT {kind}: {description}"))?;
        } else {
            let hit = self.fault_device[i]
                .as_ref()
                .map_or(String::new(), |(s, d)| format!("{s} {d}"));
            self.markers.push(Marker {
                at_s: self.rel(self.sim.now()),
                label: format!("{kind}: {} {hit}", step.verb()),
                detail: String::new(),
                kind: MarkerKind::Step,
            });
            self.say(format!("  {} {hit}", step.verb()))?;
        }
        let dev = self.fault_device[i].clone();
        let host = |sim: &Sim, side: Side| {
            sim.host(match side {
                Side::Initiator => INITIATOR,
                Side::Target => TARGET,
            })
            .index()
        };
        let fabric = self.sim.fabric().clone();
        match (step, dev) {
            (Step::Reset, Some((side, d))) => fabric.inject(Fault::Reset(host(&self.sim, side), d)),
            (Step::Remove, Some((side, d))) => {
                fabric.inject(Fault::Remove(host(&self.sim, side), d));
            }
            (Step::Readd, Some((side, d))) => fabric.inject(Fault::Readd(host(&self.sim, side), d)),
            (Step::Replace, Some((side, d))) => {
                fabric.inject(Fault::Replace(host(&self.sim, side), d, None));
            }
            (Step::CloseA, _) => self.close_a()?,
            (Step::Drain, Some((side, d))) => self.start_drain(i, side, &d)?,
            (Step::Return, Some(_)) => self.end_maintenance()?,
            (step, None) => {
                self.problems.push(Problem {
                    at: self.rel(self.sim.now()),
                    what: format!("demo bug: step {step:?} of {kind} has no device"),
                });
            }
        }
        Ok(())
    }

    /// The admin close of A: a burst of messages, then `close`, with the
    /// pending operations recorded first.
    fn close_a(&mut self) -> io::Result<()> {
        let node = self.sim.node(INITIATOR);
        let a = &mut self.streams[0];
        a.drain_completions(node);
        a.burst(node, CLOSE_BURST);
        let pending: BTreeSet<OpId> = a.pending_ids();
        let n = pending.len();
        a.pending_at_close = Some(pending);
        a.stopped = true;
        if let Err(e) = node.close(a.session) {
            self.problems.push(Problem {
                at: self.rel(self.sim.now()),
                what: format!("A: close refused: {e}"),
            });
        }
        self.say(format!(
            "  close A with {n} operations pending ({CLOSE_BURST} messages just submitted)"
        ))?;
        self.drain()
    }
}
