//! Recovery latency and scale, on the in-process soft fabric (testkit
//! [`Sim`], virtual time), measured on both clocks: virtual time says how
//! long recovery takes in the simulated world (protocol round trips,
//! timers, backoff), wall-clock time how long the process took to compute
//! it (relink's and the simulator's CPU time).
//!
//! - [`RecoveryBench`]: one session; each [`cycle`](RecoveryBench::cycle)
//!   takes a device away ([`FaultPlan`]), submits a message and a write
//!   during the outage, and times from the device's return to the
//!   session's `Resumed` event and to the first and last completion of
//!   those operations.
//! - [`scale`]: many sessions from one initiator node to one target node,
//!   one device each side; the initiator's device is reset once and the
//!   time until every session resumed is measured.
//!
//! The world is driven event by event ([`step_until`]): after every
//! simulated event both nodes are polled until idle and the condition is
//! checked, so virtual times are exact to the event.

use std::time::{Duration, Instant};

use relink::{
    Access, BufferToken, LocalRange, OpId, Path, RegionId, RegionOptions, SessionEvent,
    SessionHandle, SessionOptions, State,
};
use relink_fabric::Timestamp;
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;
use serde::Serialize;

use crate::series::quantile;
use crate::session::{stamp_bytes, PORT};

/// The target's advertised region of the recovery sessions.
const REMOTE: RegionId = RegionId(1);
/// The initiator's source region.
const LOCAL: RegionId = RegionId(2);
/// Bytes of each of those regions.
const REGION_LEN: u64 = 4096;

/// Drives a [`Sim`]: settles both nodes (polls them until idle), checks a
/// condition, moves virtual time on, and so on.
///
/// With a `quantum` of zero it runs the world event by event: after every
/// simulated event (or every instant at which events are due) both nodes
/// are polled, so virtual times are exact to the event — and every event
/// costs a [`Node::poll`](relink::Node::poll) of each node, like an event
/// loop that wakes up for each one. With a quantum `q > 0` it runs every
/// event due within `q` after the next one before polling (at most `q` of
/// virtual lateness), like an event loop that finds many events ready when
/// it wakes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stepper {
    /// Virtual time run between polls, beyond the next event.
    pub quantum: Duration,
    /// Settles (rounds of polling both nodes until idle) so far.
    pub settles: u64,
    /// The target's node is not polled before this virtual time (a target
    /// process that is busy elsewhere, or slow to learn of its device).
    pub target_paused_until: Option<Timestamp>,
}

impl Stepper {
    /// A stepper with `quantum`.
    pub fn new(quantum: Duration) -> Stepper {
        Stepper {
            quantum,
            settles: 0,
            target_paused_until: None,
        }
    }

    /// Whether the target's node is paused at `now`.
    fn paused(&self, now: Timestamp) -> bool {
        self.target_paused_until.is_some_and(|t| now < t)
    }

    /// Run until `cond` holds (checked after every settle) or `limit` of
    /// virtual time passed; returns whether it held.
    pub fn until(
        &mut self,
        sim: &mut Sim,
        limit: Duration,
        mut cond: impl FnMut(&mut Sim) -> bool,
    ) -> bool {
        let until = sim.now() + limit;
        loop {
            if self.paused(sim.now()) {
                while sim.node(INITIATOR).poll() {}
            } else {
                sim.settle();
            }
            self.settles += 1;
            if cond(sim) {
                return true;
            }
            let now = sim.now();
            if now >= until {
                return false;
            }
            let (target, resume) = if self.paused(now) {
                (None, self.target_paused_until)
            } else {
                (sim.node(TARGET).next_deadline(), None)
            };
            let next = [
                sim.node(INITIATOR).next_deadline(),
                target,
                resume,
                sim.fabric().next_due(),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(until)
            .min(until);
            if next > now || !self.quantum.is_zero() {
                let to = (next.max(now) + self.quantum).min(until);
                sim.fabric().advance(to.saturating_since(now));
            } else if !sim.fabric().step() {
                // A node timer due now that polling did not clear: move on.
                sim.fabric().advance(Duration::from_nanos(1));
            }
        }
    }
}

/// Run the simulation event by event ([`Stepper`] with no quantum) until
/// `cond` holds or `limit` of virtual time passed; returns whether it held.
pub fn step_until(sim: &mut Sim, limit: Duration, cond: impl FnMut(&mut Sim) -> bool) -> bool {
    Stepper::new(Duration::ZERO).until(sim, limit, cond)
}

/// Run the simulation for `d` of virtual time, event by event.
pub fn step_for(sim: &mut Sim, d: Duration) {
    step_until(sim, d, |_| false);
}

/// The fault of a recovery cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FaultPlan {
    /// Unplug the initiator's device (`Fault::Remove`), let `outage` of
    /// virtual time pass, plug it back (`Fault::Readd`). The clock starts
    /// at the re-plug.
    InitiatorUnplug {
        /// Virtual time without the device.
        outage: Duration,
    },
    /// Reset the target's device (`Fault::Reset`: fatal, removed and back
    /// at once); the initiator learns through its CM (`DISCONNECTED`). The
    /// clock starts at the reset, which is also the device's return.
    TargetReset,
    /// [`FaultPlan::TargetReset`], but the target's node is not polled for
    /// `pause` of virtual time after the reset (its process is busy, or
    /// learns of the device late), so its listener is not back when the
    /// initiator's first attempt arrives.
    TargetResetPaused {
        /// Virtual time the target's node is not polled.
        pause: Duration,
    },
}

impl FaultPlan {
    /// A short name (`initiator-unplug-1ms`, `target-reset`).
    pub fn name(&self) -> String {
        match self {
            FaultPlan::InitiatorUnplug { outage } => {
                format!("initiator-unplug-{}us", outage.as_micros())
            }
            FaultPlan::TargetReset => "target-reset".into(),
            FaultPlan::TargetResetPaused { pause } => {
                format!("target-reset-paused-{}us", pause.as_micros())
            }
        }
    }
}

/// One recovery cycle, timed from the device's return. Virtual and
/// wall-clock microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cycle {
    /// Virtual time until the session's `Resumed` event.
    pub resumed_virt_us: f64,
    /// Virtual time until the first completion of an operation submitted
    /// during the outage.
    pub first_virt_us: f64,
    /// Virtual time until every operation submitted during the outage
    /// completed.
    pub all_virt_us: f64,
    /// Wall-clock time until the `Resumed` event.
    pub resumed_wall_us: f64,
    /// Wall-clock time until the first completion.
    pub first_wall_us: f64,
    /// Wall-clock time until every completion.
    pub all_wall_us: f64,
    /// The downtime the `Resumed` event reports (from the loss, as relink
    /// saw it, to the resume), virtual microseconds.
    pub downtime_us: f64,
    /// Reconnection attempts in this cycle.
    pub attempts: u64,
}

/// Percentiles of one quantity over cycles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dist {
    /// Median (nearest rank), in the unit of the quantity.
    pub p50: f64,
    /// 99th percentile (nearest rank); with fewer than 100 cycles, the
    /// largest value.
    pub p99: f64,
    /// Smallest value over the cycles.
    pub min: f64,
    /// Largest value over the cycles.
    pub max: f64,
}

impl Dist {
    /// The distribution of `values`.
    ///
    /// # Panics
    /// If `values` is empty.
    pub fn of(values: &[f64]) -> Dist {
        Dist {
            p50: quantile(values, 0.5),
            p99: quantile(values, 0.99),
            min: quantile(values, 0.0),
            max: quantile(values, 1.0),
        }
    }
}

/// The summary of a series of cycles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CycleSummary {
    /// The fault of every cycle, by [`FaultPlan::name`].
    pub fault: String,
    /// Cycles summarised (the length of `each`).
    pub cycles: usize,
    /// Virtual µs to `Resumed`.
    pub resumed_virt_us: Dist,
    /// Virtual µs to the first completion.
    pub first_virt_us: Dist,
    /// Virtual µs to the last completion.
    pub all_virt_us: Dist,
    /// Wall µs to `Resumed`.
    pub resumed_wall_us: Dist,
    /// Wall µs to the first completion.
    pub first_wall_us: Dist,
    /// Wall µs to the last completion.
    pub all_wall_us: Dist,
    /// Reported downtime, virtual µs.
    pub downtime_us: Dist,
    /// Reconnection attempts per cycle.
    pub attempts: Dist,
    /// Every cycle, in the order run.
    pub each: Vec<Cycle>,
}

impl CycleSummary {
    /// Summarise `cycles` of `fault`.
    ///
    /// # Panics
    /// If `cycles` is empty.
    pub fn of(fault: &FaultPlan, cycles: Vec<Cycle>) -> CycleSummary {
        let d = |f: fn(&Cycle) -> f64| Dist::of(&cycles.iter().map(f).collect::<Vec<_>>());
        CycleSummary {
            fault: fault.name(),
            cycles: cycles.len(),
            resumed_virt_us: d(|c| c.resumed_virt_us),
            first_virt_us: d(|c| c.first_virt_us),
            all_virt_us: d(|c| c.all_virt_us),
            resumed_wall_us: d(|c| c.resumed_wall_us),
            first_wall_us: d(|c| c.first_wall_us),
            all_wall_us: d(|c| c.all_wall_us),
            downtime_us: d(|c| c.downtime_us),
            attempts: d(|c| c.attempts as f64),
            each: cycles,
        }
    }
}

/// Session options of the recovery sessions: a 4 KiB region each side
/// (the target's advertised), 64-byte messages, the default policy.
fn recovery_options(target: bool) -> SessionOptions {
    let region = if target {
        RegionOptions::new(
            REMOTE,
            REGION_LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .advertise(true)
    } else {
        RegionOptions::new(LOCAL, REGION_LEN, Access::LOCAL_WRITE)
    };
    SessionOptions::builder()
        .recv_slots(64)
        .max_message(64)
        .max_one_sided(16)
        .regions(vec![region])
        .build()
        .expect("valid session options")
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One session between the two hosts of a [`Sim`], for repeated recovery
/// cycles.
pub struct RecoveryBench {
    sim: Sim,
    ini: SessionHandle,
    tgt: SessionHandle,
    next_msg: u64,
    delivered: u64,
}

impl RecoveryBench {
    /// A fresh world seeded with `seed` and one established session.
    ///
    /// # Panics
    /// If the session does not come up within 1 s of virtual time.
    pub fn new(seed: u64) -> RecoveryBench {
        let mut sim = Sim::new(seed);
        let ini = sim
            .open_session(PORT, recovery_options(false), recovery_options(true))
            .expect("open a session");
        let mut tgt = None;
        let up = step_until(&mut sim, Duration::from_secs(1), |sim| {
            tgt = tgt.or_else(|| sim.node(TARGET).accept().map(|a| a.session));
            tgt.is_some() && sim.node(INITIATOR).state(ini) == Some(State::Established)
        });
        assert!(up, "session not established");
        let mut b = RecoveryBench {
            sim,
            ini,
            tgt: tgt.expect("accepted"),
            next_msg: 0,
            delivered: 0,
        };
        b.quiesce();
        b
    }

    /// The simulated world the cycles run in, to look into or run further.
    pub fn sim(&mut self) -> &mut Sim {
        &mut self.sim
    }

    /// Let acknowledgements and stray events settle (2 ms of virtual
    /// time), drain what the application would, and check the session is
    /// established again.
    fn quiesce(&mut self) {
        step_for(&mut self.sim, Duration::from_millis(2));
        self.drain();
        assert_eq!(
            self.sim.node(INITIATOR).state(self.ini),
            Some(State::Established),
            "session not established between cycles"
        );
        while self.sim.node(INITIATOR).poll_event(self.ini).is_some() {}
        while self.sim.node(TARGET).poll_event(self.tgt).is_some() {}
    }

    /// Drain deliveries at the target, checking order and content.
    fn drain(&mut self) {
        while let Some((_, m)) = self.sim.node(TARGET).poll_delivery(self.tgt) {
            let mut want = [0u8; 64];
            stamp_bytes(&mut want, self.delivered);
            assert_eq!(
                m, want,
                "delivery {} out of order or damaged",
                self.delivered
            );
            self.delivered += 1;
        }
    }

    /// Submit a 64-byte message and a 64-byte write (in that order).
    fn submit_pair(&mut self) -> [OpId; 2] {
        let mut payload = [0u8; 64];
        stamp_bytes(&mut payload, self.next_msg);
        self.next_msg += 1;
        let node = self.sim.node(INITIATOR);
        let m = node.send(self.ini, &payload).expect("send");
        let w = node
            .write(
                self.ini,
                LocalRange {
                    region: LOCAL,
                    offset: 0,
                    len: 64,
                },
                BufferToken {
                    region: REMOTE,
                    offset: 0,
                },
            )
            .expect("write");
        [m, w]
    }

    /// One cycle of `fault`.
    ///
    /// # Panics
    /// If the session does not resume, an operation fails, or a message is
    /// lost, duplicated or reordered.
    pub fn cycle(&mut self, fault: FaultPlan) -> Cycle {
        let (ini_h, tgt_h) = (
            self.sim.host(INITIATOR).index(),
            self.sim.host(TARGET).index(),
        );
        let dev = || "soft0".to_string();
        let attempts0 = self
            .sim
            .node(INITIATOR)
            .counters(self.ini)
            .expect("session")
            .attempts;
        let (ops, t0v, t0w) = match fault {
            FaultPlan::InitiatorUnplug { outage } => {
                let removed = self.sim.now();
                self.sim.fabric().inject(Fault::Remove(ini_h, dev()));
                let s = self.ini;
                let lost = step_until(&mut self.sim, outage, |sim| {
                    sim.node(INITIATOR).state(s) != Some(State::Established)
                });
                assert!(lost, "the initiator did not notice its device's removal");
                let ops = self.submit_pair();
                let left = (removed + outage).saturating_since(self.sim.now());
                step_for(&mut self.sim, left);
                self.sim.fabric().inject(Fault::Readd(ini_h, dev()));
                (ops, self.sim.now(), Instant::now())
            }
            FaultPlan::TargetReset | FaultPlan::TargetResetPaused { .. } => {
                let (t0v, t0w) = (self.sim.now(), Instant::now());
                self.sim.fabric().inject(Fault::Reset(tgt_h, dev()));
                (self.submit_pair(), t0v, t0w)
            }
        };
        let mut stepper = Stepper::new(Duration::ZERO);
        if let FaultPlan::TargetResetPaused { pause } = fault {
            stepper.target_paused_until = Some(t0v + pause);
        }
        let s = self.ini;
        let mut resumed: Option<(Timestamp, Instant, Duration)> = None;
        let mut done: Vec<(Timestamp, Instant)> = Vec::new();
        let ok = stepper.until(&mut self.sim, Duration::from_secs(30), |sim| {
            let node = sim.node(INITIATOR);
            while let Some(e) = node.poll_event(s) {
                if let SessionEvent::Resumed { downtime, .. } = e {
                    resumed.get_or_insert((node.now(), Instant::now(), downtime));
                }
            }
            while let Some(c) = node.poll_completion(s) {
                assert!(
                    ops.contains(&c.op) && c.outcome.is_success(),
                    "unexpected completion {c:?}"
                );
                done.push((node.now(), Instant::now()));
            }
            resumed.is_some() && done.len() == ops.len()
        });
        assert!(
            ok,
            "{fault:?}: no resume and completion within 30 s (virtual)"
        );
        let (rv, rw, downtime) = resumed.expect("resumed");
        let virt = |t: Timestamp| micros(t.saturating_since(t0v));
        let wall = |t: Instant| micros(t.duration_since(t0w));
        let attempts = self
            .sim
            .node(INITIATOR)
            .counters(self.ini)
            .expect("session")
            .attempts
            - attempts0;
        let c = Cycle {
            resumed_virt_us: virt(rv),
            first_virt_us: virt(done[0].0),
            all_virt_us: virt(done[done.len() - 1].0),
            resumed_wall_us: wall(rw),
            first_wall_us: wall(done[0].1),
            all_wall_us: wall(done[done.len() - 1].1),
            downtime_us: micros(downtime),
            attempts,
        };
        self.quiesce();
        c
    }

    /// `n` cycles of `fault`.
    pub fn cycles(&mut self, fault: FaultPlan, n: usize) -> CycleSummary {
        let each = (0..n).map(|_| self.cycle(fault)).collect();
        CycleSummary::of(&fault, each)
    }

    /// Messages delivered (and checked) at the target so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
}

/// The result of [`scale`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleResult {
    /// Sessions from the initiator node to the target node.
    pub sessions: usize,
    /// The driver's quantum ([`Stepper`]), virtual microseconds (0: event
    /// by event).
    pub quantum_us: f64,
    /// Wall-clock microseconds of one [`Node::poll`](relink::Node::poll) of
    /// the initiator's node with every session established and nothing to
    /// do.
    pub idle_poll_us: f64,
    /// Settles (rounds of polling both nodes until idle) the driver made
    /// from the reset until all resumed.
    pub settles: u64,
    /// Wall-clock seconds to set them all up.
    pub setup_wall_s: f64,
    /// Virtual milliseconds from the reset until every session resumed.
    pub all_resumed_virt_ms: f64,
    /// Wall-clock milliseconds from the reset until every session resumed.
    pub all_resumed_wall_ms: f64,
    /// Virtual ms until the first session resumed.
    pub first_resumed_virt_ms: f64,
    /// Virtual ms until half the sessions resumed.
    pub median_resumed_virt_ms: f64,
    /// Wall ms until half the sessions resumed.
    pub median_resumed_wall_ms: f64,
    /// Reconnection attempts of all sessions (one each if none failed).
    pub attempts: u64,
}

/// Session options of the scale sessions: 16 receive slots of 256 bytes,
/// no regions, the default policy (so that a thousand sessions take little
/// memory).
fn scale_options() -> SessionOptions {
    SessionOptions::builder()
        .recv_slots(16)
        .max_message(256)
        .max_one_sided(8)
        .build()
        .expect("valid session options")
}

/// `n` sessions from one initiator node to one target node (connected in
/// batches of 64), then one reset of the initiator's device: the time until
/// every session sent its `Resumed` event, the world driven by a
/// [`Stepper`] of `quantum`.
///
/// # Panics
/// If the sessions cannot be set up, or do not all resume within 60 s of
/// virtual time.
pub fn scale(n: usize, seed: u64, quantum: Duration) -> ScaleResult {
    let mut sim = Sim::new(seed);
    let addr = sim.target_addr(PORT);
    sim.node(TARGET)
        .listen(addr, scale_options())
        .expect("listen");
    let t_setup = Instant::now();
    let mut sessions = Vec::with_capacity(n);
    let mut accepted = 0;
    while sessions.len() < n {
        let batch: Vec<SessionHandle> = (0..64.min(n - sessions.len()))
            .map(|_| {
                sim.node(INITIATOR)
                    .connect(
                        vec![Path {
                            local: None,
                            peer: addr,
                        }],
                        scale_options(),
                    )
                    .expect("connect")
            })
            .collect();
        let up = step_until(&mut sim, Duration::from_secs(10), |sim| {
            while sim.node(TARGET).accept().is_some() {
                accepted += 1;
            }
            let node = sim.node(INITIATOR);
            batch
                .iter()
                .all(|s| node.state(*s) == Some(State::Established))
        });
        assert!(up, "a batch of sessions did not come up");
        sessions.extend(batch);
    }
    step_for(&mut sim, Duration::from_millis(2));
    while sim.node(TARGET).accept().is_some() {
        accepted += 1;
    }
    assert_eq!(accepted, n, "every session accepted once");
    let setup_wall_s = t_setup.elapsed().as_secs_f64();
    for s in &sessions {
        while sim.node(INITIATOR).poll_event(*s).is_some() {}
    }
    const IDLE_POLLS: u32 = 100;
    let t = Instant::now();
    for _ in 0..IDLE_POLLS {
        assert!(!sim.node(INITIATOR).poll(), "the node is not idle");
    }
    let idle_poll_us = micros(t.elapsed()) / f64::from(IDLE_POLLS);
    let attempts0: u64 = sessions
        .iter()
        .map(|s| sim.node(INITIATOR).counters(*s).expect("session").attempts)
        .sum();

    let (t0v, t0w) = (sim.now(), Instant::now());
    let h = sim.host(INITIATOR).index();
    sim.fabric().inject(Fault::Reset(h, "soft0".into()));
    let mut pending = sessions.clone();
    let mut times: Vec<(Timestamp, Instant)> = Vec::with_capacity(n);
    let mut stepper = Stepper::new(quantum);
    let mut checked = None;
    let ok = stepper.until(&mut sim, Duration::from_secs(60), |sim| {
        // Look at the sessions once per virtual instant (the events of one
        // instant come in many settles; checking every session after each
        // would cost this driver O(n) per event).
        let now = sim.now();
        if checked == Some(now) && sim.fabric().next_due() == Some(now) {
            return false;
        }
        checked = Some(now);
        let node = sim.node(INITIATOR);
        pending.retain(|s| {
            let mut resumed = false;
            while let Some(e) = node.poll_event(*s) {
                resumed |= matches!(e, SessionEvent::Resumed { .. });
            }
            if resumed {
                times.push((node.now(), Instant::now()));
            }
            !resumed
        });
        pending.is_empty()
    });
    assert!(ok, "{} of {n} sessions did not resume", pending.len());
    let wall_all = t0w.elapsed();
    let virt_ms = |t: Timestamp| t.saturating_since(t0v).as_secs_f64() * 1e3;
    let wall_ms = |t: Instant| t.duration_since(t0w).as_secs_f64() * 1e3;
    let attempts: u64 = sessions
        .iter()
        .map(|s| sim.node(INITIATOR).counters(*s).expect("session").attempts)
        .sum::<u64>()
        - attempts0;
    ScaleResult {
        sessions: n,
        quantum_us: micros(quantum),
        idle_poll_us,
        settles: stepper.settles,
        setup_wall_s,
        all_resumed_virt_ms: virt_ms(times[n - 1].0),
        all_resumed_wall_ms: wall_all.as_secs_f64() * 1e3,
        first_resumed_virt_ms: virt_ms(times[0].0),
        median_resumed_virt_ms: virt_ms(times[(n - 1) / 2].0),
        median_resumed_wall_ms: wall_ms(times[(n - 1) / 2].1),
        attempts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_resume_and_complete() {
        let mut b = RecoveryBench::new(21);
        for fault in [
            FaultPlan::InitiatorUnplug {
                outage: Duration::from_millis(1),
            },
            FaultPlan::TargetReset,
            FaultPlan::TargetResetPaused {
                pause: Duration::from_micros(100),
            },
        ] {
            let s = b.cycles(fault, 2);
            assert_eq!(s.cycles, 2);
            for c in &s.each {
                assert!(c.first_virt_us <= c.all_virt_us, "{c:?}");
                assert!(c.attempts >= 1, "{c:?}");
            }
        }
        assert_eq!(b.delivered(), 6, "one message per cycle, each once");
    }

    #[test]
    fn a_few_sessions_resume_after_a_reset() {
        let r = scale(5, 22, Duration::ZERO);
        assert_eq!(r.sessions, 5);
        let q = scale(5, 22, Duration::from_micros(1));
        assert!(q.settles <= r.settles, "{q:?} {r:?}");
        assert!(r.first_resumed_virt_ms <= r.all_resumed_virt_ms);
        assert!(r.attempts >= 5, "{r:?}");
    }
}
