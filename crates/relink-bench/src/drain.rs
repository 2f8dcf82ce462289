//! The stall an application sees when its session leaves a device: a
//! planned drain ([`Node::drain`](relink::Node::drain)) next to an
//! unplanned failover (the device removed under the session), on the
//! in-process soft fabric, on virtual and wall-clock time.
//!
//! One session with two paths (a device pair per path) carries a steady
//! window of operations — 64 B messages and, after every fourth, an 8-byte
//! FETCH_ADD on the peer's counter — refilled as each completes. Each cycle
//! moves the session off the device it is on:
//!
//! - [`Leave::Drain`]: `drain` of the initiator's current device; once
//!   nothing is on it, the device is removed and added back (maintenance)
//!   and undrained;
//! - [`Leave::Failover`]: the initiator's current device is removed under
//!   traffic (the session fails over to the other pair), then added back;
//! - [`Leave::StandbyFailover`]: the same with
//!   [`Policy::standby`](relink::Policy::standby) on: the session switches
//!   to its standby connection on the other pair, and builds a new standby
//!   when the device is back.
//!
//! The stall of a cycle is the longest gap between two consecutive
//! completions from the event (the drain call, the removal) until the
//! session is established on the other device and has completed
//! operations there. The cycle also counts what an application must deal
//! with: operations replayed and `Indeterminate` outcomes. The stalls are
//! also given in round trips of the fabric ([`rtt`]).

use std::time::{Duration, Instant};

use relink::{
    Access, BufferToken, LocalRange, Outcome, Policy, RegionId, RegionOptions, SessionHandle,
    SessionOptions, State,
};
use relink_fabric::Timestamp;
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::{Fault, LinkConfig};
use serde::Serialize;

use crate::recovery::{step_until, Dist};
use crate::session::PORT;

/// The initiator's region (where FETCH_ADD results land).
const LOCAL: RegionId = RegionId(1);
/// The target's advertised counter.
const COUNTER: RegionId = RegionId(2);
/// Operations in flight.
const WINDOW: usize = 16;

/// How a cycle moves the session off its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Leave {
    /// A planned drain, then the device is removed with nothing on it.
    Drain,
    /// The device is removed under the session (unplanned).
    Failover,
    /// As [`Leave::Failover`], the session keeping a standby connection
    /// ([`Policy::standby`](relink::Policy::standby)).
    StandbyFailover,
}

impl Leave {
    /// The series' name.
    pub fn name(self) -> &'static str {
        match self {
            Leave::Drain => "planned-drain",
            Leave::Failover => "unplanned-failover",
            Leave::StandbyFailover => "standby-failover",
        }
    }
}

/// A raw round trip on the in-process fabric: twice its one-way latency
/// ([`LinkConfig`]'s, which the simulation uses), what a SEND and its
/// answer take with nothing else in the way. Virtual µs.
pub fn rtt() -> f64 {
    micros(LinkConfig::default().latency * 2)
}

/// One cycle's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeaveCycle {
    /// Longest gap between consecutive completions, virtual µs.
    pub stall_virt_us: f64,
    /// The same on this process's clock, µs.
    pub stall_wall_us: f64,
    /// From the event to `Established` on the other device, virtual µs.
    pub established_virt_us: f64,
    /// Operations replayed (posted on two transports).
    pub replayed: u64,
    /// `Indeterminate` outcomes.
    pub indeterminate: u64,
    /// Failed outcomes.
    pub failed: u64,
    /// Connection attempts the initiator made.
    pub attempts: u64,
    /// Losses that switched to the standby.
    pub failovers: u64,
}

/// A series of cycles, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaveSummary {
    /// [`Leave::name`].
    pub series: &'static str,
    /// Cycles run.
    pub cycles: usize,
    /// Stall, virtual µs.
    pub stall_virt_us: Dist,
    /// Stall, wall-clock µs.
    pub stall_wall_us: Dist,
    /// Event to established elsewhere, virtual µs.
    pub established_virt_us: Dist,
    /// Replayed operations over all cycles.
    pub replayed: u64,
    /// `Indeterminate` outcomes over all cycles.
    pub indeterminate: u64,
    /// Failed outcomes over all cycles.
    pub failed: u64,
    /// Connection attempts over all cycles.
    pub attempts: u64,
    /// Losses that switched to the standby over all cycles.
    pub failovers: u64,
    /// A raw round trip on the fabric ([`rtt`]), virtual µs.
    pub rtt_virt_us: f64,
    /// The median stall in round trips.
    pub stall_p50_rtts: f64,
    /// Mean gap between completions under steady traffic (no event),
    /// virtual µs.
    pub steady_gap_virt_us: f64,
    /// Longest gap between completions under steady traffic, virtual µs:
    /// the floor the stalls compare with.
    pub steady_longest_virt_us: f64,
}

/// A session with two paths and steady traffic.
pub struct DrainBench {
    sim: Sim,
    ini: SessionHandle,
    tgt: SessionHandle,
    in_flight: usize,
    next: u32,
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl DrainBench {
    /// Two device pairs (10.0.0.0/24 on `soft0`, 10.0.1.0/24 on `soft1`)
    /// and one established session on the first, with the policy `how`
    /// needs (a standby for [`Leave::StandbyFailover`]).
    ///
    /// # Panics
    /// If the session does not come up (with its standby, if it has one).
    pub fn new(seed: u64, how: Leave) -> DrainBench {
        let standby = how == Leave::StandbyFailover;
        let mut sim = Sim::new(seed);
        let paths = sim.two_paths(PORT);
        let target_opts = SessionOptions::builder()
            .region(
                RegionOptions::new(COUNTER, 64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
                    .advertise(true),
            )
            .build()
            .expect("options");
        let init_opts = SessionOptions::builder()
            .policy(Policy::builder().standby(standby).build().expect("policy"))
            .region(RegionOptions::new(LOCAL, 4096, Access::LOCAL_WRITE))
            .build()
            .expect("options");
        sim.node(TARGET)
            .listen(
                std::net::SocketAddr::from(([0, 0, 0, 0], PORT)),
                target_opts,
            )
            .expect("listen");
        let ini = sim
            .node(INITIATOR)
            .connect(paths, init_opts)
            .expect("connect");
        let mut tgt = None;
        let up = step_until(&mut sim, Duration::from_secs(1), |sim| {
            tgt = tgt.or_else(|| sim.node(TARGET).accept().map(|a| a.session));
            tgt.is_some()
                && sim.node(INITIATOR).state(ini) == Some(State::Established)
                && (!standby || sim.node(INITIATOR).counters(ini).unwrap().standbys > 0)
        });
        assert!(up, "session not established");
        DrainBench {
            sim,
            ini,
            tgt: tgt.expect("accepted"),
            in_flight: 0,
            next: 0,
        }
    }

    /// Keep the window full.
    fn refill(&mut self) {
        while self.in_flight < WINDOW {
            let i = self.next;
            self.next += 1;
            let node = self.sim.node(INITIATOR);
            let r = if i % 4 == 3 {
                node.fetch_add(
                    self.ini,
                    LocalRange {
                        region: LOCAL,
                        offset: u64::from(i % 512) * 8,
                        len: 8,
                    },
                    BufferToken {
                        region: COUNTER,
                        offset: 0,
                    },
                    1,
                )
            } else {
                node.send(self.ini, &[i as u8; 64])
            };
            r.expect("submit");
            self.in_flight += 1;
        }
    }

    /// Drop what the application would take and not look at: deliveries
    /// and events.
    fn discard(&mut self) {
        while self.sim.node(TARGET).poll_delivery(self.tgt).is_some() {}
        while self.sim.node(TARGET).poll_event(self.tgt).is_some() {}
        while self.sim.node(INITIATOR).poll_event(self.ini).is_some() {}
    }

    /// Run traffic until `done` holds (checked after every completion) or
    /// `limit` passes; returns each completion's virtual and wall-clock
    /// time and outcome.
    fn traffic_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut Sim, usize) -> bool,
    ) -> Vec<(Timestamp, Instant, Outcome)> {
        let mut seen: Vec<(Timestamp, Instant, Outcome)> = Vec::new();
        let end = self.sim.now() + limit;
        let ini = self.ini;
        loop {
            self.refill();
            let before = seen.len();
            let left = end.saturating_since(self.sim.now());
            step_until(&mut self.sim, left, |sim| {
                while let Some(c) = sim.node(INITIATOR).poll_completion(ini) {
                    seen.push((sim.now(), Instant::now(), c.outcome));
                }
                seen.len() > before
            });
            self.in_flight -= seen.len() - before;
            self.discard();
            if done(&mut self.sim, seen.len()) || self.sim.now() >= end {
                return seen;
            }
        }
    }

    /// The device the initiator's session is on.
    fn current(&mut self) -> relink::DeviceId {
        self.sim
            .node(INITIATOR)
            .device(self.ini)
            .expect("connected")
    }

    /// Under steady traffic (no event): the mean virtual µs between
    /// completions, and the longest gap.
    pub fn steady_gap(&mut self) -> (f64, f64) {
        let t0 = self.sim.now();
        let seen = self.traffic_until(Duration::from_millis(5), |_, n| n >= 2000);
        let mut prev = t0;
        let mut longest = 0f64;
        for (v, _, _) in &seen {
            longest = longest.max(micros(v.saturating_since(prev)));
            prev = *v;
        }
        (
            micros(prev.saturating_since(t0)) / seen.len() as f64,
            longest,
        )
    }

    /// One cycle of `how`.
    ///
    /// # Panics
    /// If the session does not come back on the other device.
    pub fn cycle(&mut self, how: Leave) -> LeaveCycle {
        let ih = self.sim.host(INITIATOR).index();
        // Steady first.
        let _ = self.traffic_until(Duration::from_millis(1), |_, n| n >= 200);
        let old = self.current();
        let c0 = self.sim.node(INITIATOR).counters(self.ini).unwrap();
        let (t0v, t0w) = (self.sim.now(), Instant::now());
        match how {
            Leave::Drain => {
                let r = self.sim.node(INITIATOR).drain(&old);
                assert_eq!(r.moving, vec![self.ini], "the session moves");
            }
            Leave::Failover | Leave::StandbyFailover => self
                .sim
                .fabric()
                .inject(Fault::Remove(ih, old.name.clone())),
        }
        let ini = self.ini;
        let mut established = None;
        let seen = self.traffic_until(Duration::from_secs(2), |sim, n| {
            let node = sim.node(INITIATOR);
            if established.is_none()
                && node.state(ini) == Some(State::Established)
                && node.device(ini).is_some_and(|d| d != old)
            {
                established = Some(sim.now());
            }
            established.is_some() && n >= 200
        });
        let established = established.expect("established on the other device");
        let mut prev = (t0v, t0w);
        let (mut stall_v, mut stall_w) = (0f64, 0f64);
        let (mut indeterminate, mut failed) = (0, 0);
        for (v, w, o) in &seen {
            match o {
                // Only work done is progress: an outcome the application
                // must sort out is not.
                Outcome::Success { .. } => {
                    stall_v = stall_v.max(micros(v.saturating_since(prev.0)));
                    stall_w = stall_w.max(micros(w.duration_since(prev.1)));
                    prev = (*v, *w);
                }
                Outcome::Indeterminate { .. } => indeterminate += 1,
                _ => failed += 1,
            }
        }
        // Maintenance done: the old device goes (if still there) and comes
        // back, usable again.
        if how == Leave::Drain {
            assert!(self.sim.node(INITIATOR).sessions_on(&old).is_empty());
            self.sim
                .fabric()
                .inject(Fault::Remove(ih, old.name.clone()));
        }
        self.sim.node(INITIATOR).undrain(&old);
        let _ = self.traffic_until(Duration::from_micros(100), |_, _| false);
        self.sim.fabric().inject(Fault::Readd(ih, old.name.clone()));
        let _ = self.traffic_until(Duration::from_millis(1), |_, n| n >= 100);
        let c = self.sim.node(INITIATOR).counters(self.ini).unwrap();
        LeaveCycle {
            stall_virt_us: stall_v,
            stall_wall_us: stall_w,
            established_virt_us: micros(established.saturating_since(t0v)),
            replayed: c.replayed - c0.replayed,
            indeterminate,
            failed,
            attempts: c.attempts - c0.attempts,
            failovers: c.failovers - c0.failovers,
        }
    }

    /// `n` cycles of `how`, summarised.
    pub fn cycles(&mut self, how: Leave, n: usize) -> LeaveSummary {
        let (steady, longest) = self.steady_gap();
        let each: Vec<LeaveCycle> = (0..n).map(|_| self.cycle(how)).collect();
        let col = |f: fn(&LeaveCycle) -> f64| Dist::of(&each.iter().map(f).collect::<Vec<_>>());
        let stall = col(|c| c.stall_virt_us);
        LeaveSummary {
            series: how.name(),
            cycles: n,
            rtt_virt_us: rtt(),
            stall_p50_rtts: stall.p50 / rtt(),
            stall_virt_us: stall,
            stall_wall_us: col(|c| c.stall_wall_us),
            established_virt_us: col(|c| c.established_virt_us),
            replayed: each.iter().map(|c| c.replayed).sum(),
            indeterminate: each.iter().map(|c| c.indeterminate).sum(),
            failed: each.iter().map(|c| c.failed).sum(),
            attempts: each.iter().map(|c| c.attempts).sum(),
            failovers: each.iter().map(|c| c.failovers).sum(),
            steady_gap_virt_us: steady,
            steady_longest_virt_us: longest,
        }
    }
}
