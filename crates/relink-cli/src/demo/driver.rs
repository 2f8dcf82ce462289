//! The driver: the demo's state while it runs (the simulation, the
//! workloads of A and B, session C's application, the fault windows, A's
//! stall watch, the planned drain, the timeline markers and the problems
//! found), its creation, the dated output lines and the intro.

use std::io::{self, Write};
use std::time::Duration;

use relink::{Counters, Memory, SessionHandle, State};
use relink_fabric::{DeviceId, Guid, Timestamp};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::workload::{self, secs, Problem, Workload};

use super::drain::{DrainState, StallWatch};
use super::faults::{Planned, Side, Timing};
use super::manual::{self, Manual};
use super::report::Marker;
use super::window::Window;
use super::{world, DemoArgs};

/// The names of the sessions in the fault windows; index 0 is A, index 1
/// is B everywhere. Session C, held apart, is [`Driver::c`].
pub(super) const NAMES: [&str; 2] = ["A", "B"];

/// The demo while it runs; [`run`](super::run) creates it, plays the
/// schedule on it and turns it into the report.
pub(super) struct Driver<'o> {
    pub(super) sim: Sim,
    /// The workloads of sessions A and B (see [`NAMES`]).
    pub(super) streams: [Workload; 2],
    /// Session C and its application (see [`manual`]).
    pub(super) c: Manual,
    pub(super) out: &'o mut dyn Write,
    /// No progress lines (`--json`).
    pub(super) quiet: bool,
    /// Print every state transition too (`--verbose`, not with `--json`).
    pub(super) verbose: bool,
    pub(super) seed: u64,
    pub(super) timing: Timing,
    /// When the workload started: time zero of every printed line.
    pub(super) t0: Timestamp,
    /// One per fault started so far, in schedule order.
    pub(super) windows: Vec<Window>,
    /// Device name each fault's steps use (resolved at its start).
    pub(super) fault_device: Vec<Option<(Side, String)>>,
    pub(super) markers: Vec<Marker>,
    /// Problems the driver itself saw (the workloads keep their own).
    pub(super) problems: Vec<Problem>,
    /// The target's duplicate counter last seen, per session.
    pub(super) dedup_seen: [u64; 2],
    /// Successful completions at the last progress line.
    pub(super) progress_seen: [usize; 2],
    /// Whether events still count towards the open fault window; false
    /// once the workload stopped and the last window closed.
    pub(super) attributing: bool,
    /// The target's data region of A, taken at the start: the node frees
    /// a session's memory when it reaps the ended session.
    pub(super) target_data: Option<Memory>,
    /// Each session's last state and counters, initiator side and target
    /// side (`[i][side]`), as seen when its outputs were last taken: an
    /// ended session is reaped at the next poll after that.
    pub(super) last_seen: [[Option<(State, Counters)>; 2]; 2],
    /// A's stall, watched in the open fault's window (see [`super::drain`]).
    pub(super) watch: Option<StallWatch>,
    /// The planned drain, once it started (see [`super::drain`]).
    pub(super) planned: Option<DrainState>,
}

impl<'o> Driver<'o> {
    pub(super) fn new(
        w: world::World,
        args: &DemoArgs,
        timing: Timing,
        out: &'o mut dyn Write,
    ) -> Driver<'o> {
        let mut sim = w.sim;
        let node = sim.node(INITIATOR);
        let a = Workload::new("A", args.seed, workload::WINDOW_A, node, w.a.0, Some(w.a.1));
        let b = Workload::new("B", args.seed, workload::WINDOW_B, node, w.b.0, Some(w.b.1));
        let c = Manual::new(args.seed, node, w.c.0, w.c.1);
        let t0 = sim.now();
        let target_data = sim.node(TARGET).region(w.a.1, workload::TARGET_DATA).ok();
        Driver {
            sim,
            streams: [a, b],
            c,
            out,
            quiet: args.json,
            verbose: args.verbose && !args.json,
            seed: args.seed,
            timing,
            t0,
            windows: Vec::new(),
            fault_device: Vec::new(),
            markers: Vec::new(),
            problems: Vec::new(),
            dedup_seen: [0; 2],
            progress_seen: [0; 2],
            attributing: true,
            target_data,
            last_seen: [[None; 2]; 2],
            watch: None,
            planned: None,
        }
    }

    /// The node and handle of session `i` on `side`.
    fn handle(&self, i: usize, side: Side) -> (usize, SessionHandle) {
        match side {
            Side::Initiator => (INITIATOR, self.streams[i].session),
            Side::Target => (TARGET, self.streams[i].target_session()),
        }
    }

    /// Record every session's state and counters while the node still
    /// has them (called after their outputs were taken).
    pub(super) fn remember(&mut self) {
        for i in 0..2 {
            for (k, side) in [Side::Initiator, Side::Target].into_iter().enumerate() {
                let (n, h) = self.handle(i, side);
                let node = self.sim.node(n);
                if let (Some(st), Some(c)) = (node.state(h), node.counters(h)) {
                    self.last_seen[i][k] = Some((st, c));
                }
            }
        }
    }

    /// The state of session `i` on `side`: its node's, or the last one
    /// seen once the node reaped it (`None`: never seen).
    pub(super) fn state_of(&mut self, i: usize, side: Side) -> Option<State> {
        let (n, h) = self.handle(i, side);
        let k = usize::from(side == Side::Target);
        self.sim
            .node(n)
            .state(h)
            .or(self.last_seen[i][k].map(|(s, _)| s))
    }

    /// The counters of session `i` on `side`, as [`state_of`](Self::state_of).
    pub(super) fn counters_of(&mut self, i: usize, side: Side) -> Counters {
        let (n, h) = self.handle(i, side);
        let k = usize::from(side == Side::Target);
        self.sim
            .node(n)
            .counters(h)
            .or(self.last_seen[i][k].map(|(_, c)| c))
            .unwrap_or_default()
    }

    /// Virtual seconds since the workload started.
    pub(super) fn rel(&self, t: Timestamp) -> f64 {
        secs(t).max(secs(self.t0)) - secs(self.t0)
    }

    pub(super) fn say(&mut self, line: impl AsRef<str>) -> io::Result<()> {
        let now = self.sim.now();
        self.say_at(now, line)
    }

    pub(super) fn say_at(&mut self, at: Timestamp, line: impl AsRef<str>) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let t = self.rel(at);
        writeln!(self.out, "[{t:>7.3} s] {}", line.as_ref())
    }

    pub(super) fn device_of(&mut self, side: Side, s: SessionHandle) -> Option<(DeviceId, Guid)> {
        let node = self.sim.node(match side {
            Side::Initiator => INITIATOR,
            Side::Target => TARGET,
        });
        let info = node.session_info(s)?.device?;
        Some((info.id, info.node_guid))
    }

    pub(super) fn intro(&mut self, plan: &[Planned], duration: Duration) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let o = &mut *self.out;
        writeln!(
            o,
            "relink demo: seed {}, {:.1} s of workload on the in-process soft fabric (virtual time)",
            self.seed,
            duration.as_secs_f64()
        )?;
        writeln!(o)?;
        writeln!(o, "  initiator host                 target host")?;
        for (i, dev) in world::DEVICES.iter().enumerate() {
            writeln!(
                o,
                "  {dev} {:<14} <------>  {dev} {}",
                world::ADDRS[i].0,
                world::ADDRS[i].1
            )?;
        }
        writeln!(o)?;
        writeln!(
            o,
            "  session A: two paths (via soft0 to :{0}, via soft1 to :{0}); messages with checksummed,",
            world::PORT_A
        )?;
        writeln!(
            o,
            "             numbered payloads, 1 KiB WRITEs of patterned blocks into the target's region,"
        )?;
        writeln!(
            o,
            "             READs that check them, FETCH_ADDs on a counter. Gives up after {} s.",
            world::policy_a()
                .ctrl_loss_tmo
                .map_or("never".into(), |d| d.as_secs().to_string())
        )?;
        writeln!(
            o,
            "  session B: one path (via soft0 to :{}); messages. Gives up {} s after a loss.",
            world::PORT_B,
            self.timing.b_give_up.as_secs_f64()
        )?;
        writeln!(
            o,
            "  session C: two paths (via soft0 to :{0}, via soft1 to :{0}); messages. Manual recovery:",
            world::PORT_C
        )?;
        writeln!(
            o,
            "             after a loss it is held until its application decides; the application"
        )?;
        writeln!(
            o,
            "             resumes it once {} of its {} replicas agree (polled every {} ms).",
            manual::QUORUM,
            manual::REPLICAS,
            manual::ROUND.as_millis()
        )?;
        writeln!(o)?;
        writeln!(o, "  fault schedule:")?;
        for p in plan {
            writeln!(o, "    {:>6.2} s  {}", p.at.as_secs_f64(), p.kind)?;
        }
        writeln!(o)?;
        let (a, b, c) = (
            self.device_of(Side::Initiator, self.streams[0].session),
            self.device_of(Side::Initiator, self.streams[1].session),
            self.device_of(Side::Initiator, self.c.stream.session),
        );
        let name = |d: Option<(DeviceId, Guid)>| d.map_or("?".to_string(), |d| d.0.name);
        self.say(format!(
            "the three sessions established: A on {}, B on {}, C on {}; workload starts",
            name(a),
            name(b),
            name(c)
        ))
    }
}
