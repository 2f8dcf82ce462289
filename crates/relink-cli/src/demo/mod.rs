//! `relink demo`: relink's sessions surviving their hardware, shown and
//! proven on the in-process soft fabric.
//!
//! Two hosts, two devices each (see [`world`]). Session A (two paths)
//! carries a checked workload of messages, WRITEs, READs and FETCH_ADDs
//! (see [`workload`]); session B (one path, a 2 s give-up deadline)
//! carries messages. A schedule of faults (see [`faults`]) hits the
//! devices while the workload runs; the demo prints what happens as it
//! happens, then a table of what each fault did to each session and the
//! end-to-end verification, and draws the throughput timeline as an SVG.
//!
//! Everything runs on the simulation's virtual clock, single-threaded:
//! the same `--seed` gives the same run, event for event (the report's
//! digest shows it). The exit status is 1 when a check fails.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use relink::{OpError, OpId, SessionEvent, SessionHandle, State};
use relink_fabric::{DeviceId, Guid, Timestamp};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

mod faults;
mod report;
mod svg;

mod world;

use faults::{DeviceSel, Expect, FaultKind, Planned, Side, Step, Timing};
use relink_sim::workload::{self, secs, Check, Problem, Workload};
use report::{FaultRow, Impact, Marker, MarkerKind, Report, SessionSummary, Throughput};

/// `relink demo [--seed N] [--faults LIST] [--duration SECS] [--svg PATH] [--json]`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seed of the run: the same seed replays the same run exactly.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Faults to inject, as a comma list; they always run in this order:
    /// reset-initiator, reset-target, unplug-replug, replace, failover,
    /// flap, outage, close.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = FaultKind::ALL
    )]
    faults: Vec<FaultKind>,
    /// Virtual seconds of workload (the faults are spread over it; an
    /// admin close comes at its end).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    duration: f64,
    /// Where to write the SVG timeline of throughput and faults.
    #[arg(long, value_name = "PATH", default_value = "target/relink-demo.svg")]
    svg: PathBuf,
    /// Print the report as one JSON object (and no progress lines).
    #[arg(long)]
    json: bool,
    /// Also print every state transition and reconnection attempt.
    #[arg(long, short)]
    verbose: bool,
    /// Self-test of the verification: flip one byte of the target's
    /// region before checking it (the run must then fail).
    #[arg(long, hide = true)]
    sabotage: bool,
}

/// The workload is topped up this often (virtual time).
const TICK: Duration = Duration::from_millis(1);
/// Width of a throughput bucket.
const BUCKET: Duration = Duration::from_millis(20);
/// A progress line this often.
const PROGRESS: Duration = Duration::from_secs(1);
/// Traffic after the end of the workload (B keeps going; the target may
/// still deliver what A posted before its close).
const TAIL: Duration = Duration::from_millis(200);
/// How long the end waits for pending operations to complete.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Messages submitted at once right before the admin close (more than
/// the peer's receive credits, so some are still queued).
const CLOSE_BURST: usize = 100;

/// Run the demo.
pub fn run(args: DemoArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let wall = Instant::now();
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration must be a number of seconds in (0, 3600]");
    }
    let duration = Duration::from_secs_f64(args.duration);
    let timing = Timing::default();
    let plan = faults::plan(&args.faults, duration, &timing, args.seed).map_err(|need| {
        anyhow!(
            "--duration {} s is too short for the selected faults: they need at least {:.1} s",
            args.duration,
            need.as_secs_f64()
        )
    })?;
    let world = world::build(args.seed, timing.b_give_up).context("setting up the demo")?;
    let mut d = Driver::new(world, &args, timing, out);
    d.intro(&plan, duration)?;
    d.run(&plan, duration)?;
    if args.sabotage {
        d.sabotage()?;
    }
    let mut report = d.finish(duration)?;

    let svg_text = svg::render(
        &report.throughput,
        &format!(
            "relink demo, seed {}: completed operations per second of virtual time",
            args.seed
        ),
    );
    if let Some(dir) = args.svg.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&args.svg, svg_text)
        .with_context(|| format!("writing {}", args.svg.display()))?;
    report.svg = Some(args.svg.display().to_string());
    report.wall_time_s = wall.elapsed().as_secs_f64();

    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        report.render(out)?;
    }
    if !report.passed {
        bail!(
            "{} check(s) failed: {}",
            report.failed_checks.len(),
            report.failed_checks.join("; ")
        );
    }
    Ok(())
}

/// The two sessions.
const NAMES: [&str; 2] = ["A", "B"];

/// What one session went through in one fault's window.
#[derive(Debug, Clone, Default)]
struct Acc {
    losses: u64,
    resumes: u64,
    downtime: Duration,
    max_downtime: Duration,
    replayed: u64,
    deduplicated: u64,
    gave_up: bool,
    closed: bool,
    ended_before: bool,
    device_before: Option<DeviceId>,
    guid_before: Option<Guid>,
    device_after: Option<DeviceId>,
    guid_after: Option<Guid>,
    state_after: Option<State>,
}

/// A fault being played or played.
struct Window {
    kind: FaultKind,
    at: Timestamp,
    hit: String,
    description: String,
    acc: [Acc; 2],
    closed: bool,
}

struct Driver<'o> {
    sim: Sim,
    streams: [Workload; 2],
    out: &'o mut dyn Write,
    quiet: bool,
    verbose: bool,
    seed: u64,
    timing: Timing,
    t0: Timestamp,
    windows: Vec<Window>,
    /// Device name each fault's steps use (resolved at its start).
    fault_device: Vec<Option<(Side, String)>>,
    markers: Vec<Marker>,
    problems: Vec<Problem>,
    /// The target's duplicate counter last seen, per session.
    dedup_seen: [u64; 2],
    /// Successful completions at the last progress line.
    progress_seen: [usize; 2],
    attributing: bool,
}

impl<'o> Driver<'o> {
    fn new(w: world::World, args: &DemoArgs, timing: Timing, out: &'o mut dyn Write) -> Driver<'o> {
        let mut sim = w.sim;
        let node = sim.node(INITIATOR);
        let a = Workload::new("A", args.seed, workload::WINDOW_A, node, w.a.0, Some(w.a.1));
        let b = Workload::new("B", args.seed, workload::WINDOW_B, node, w.b.0, Some(w.b.1));
        let t0 = sim.now();
        Driver {
            sim,
            streams: [a, b],
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
        }
    }

    /// Virtual seconds since the workload started.
    fn rel(&self, t: Timestamp) -> f64 {
        secs(t).max(secs(self.t0)) - secs(self.t0)
    }

    fn say(&mut self, line: impl AsRef<str>) -> io::Result<()> {
        let now = self.sim.now();
        self.say_at(now, line)
    }

    fn say_at(&mut self, at: Timestamp, line: impl AsRef<str>) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let t = self.rel(at);
        writeln!(self.out, "[{t:>7.3} s] {}", line.as_ref())
    }

    fn device_of(&mut self, side: Side, s: SessionHandle) -> Option<(DeviceId, Guid)> {
        let node = self.sim.node(match side {
            Side::Initiator => INITIATOR,
            Side::Target => TARGET,
        });
        let info = node.session(s)?.device()?;
        Some((info.id.clone(), info.node_guid))
    }

    fn intro(&mut self, plan: &[Planned], duration: Duration) -> io::Result<()> {
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
        writeln!(o)?;
        writeln!(o, "  fault schedule:")?;
        for p in plan {
            writeln!(o, "    {:>6.2} s  {}", p.at.as_secs_f64(), p.kind)?;
        }
        writeln!(o)?;
        let (a, b) = (
            self.device_of(Side::Initiator, self.streams[0].session),
            self.device_of(Side::Initiator, self.streams[1].session),
        );
        let name = |d: Option<(DeviceId, Guid)>| d.map_or("?".to_string(), |d| d.0.name);
        self.say(format!(
            "both sessions established: A on {}, B on {}; workload starts",
            name(a),
            name(b)
        ))
    }

    fn run(&mut self, plan: &[Planned], duration: Duration) -> io::Result<()> {
        let t0 = self.t0;
        let mut steps: Vec<(Timestamp, usize, Step)> = plan
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.kind
                    .steps(&self.timing)
                    .into_iter()
                    .map(move |(off, st)| (t0 + p.at + off, i, st))
            })
            .collect();
        steps.sort_by_key(|s| (s.0, s.1));
        self.fault_device = vec![None; plan.len()];
        let end = t0 + duration;
        let mut next = 0;
        let mut next_progress = t0 + PROGRESS;
        loop {
            let now = self.sim.now();
            while let Some(&(at, i, step)) = steps.get(next) {
                if at > now {
                    break;
                }
                self.apply(plan, i, step)?;
                next += 1;
            }
            if now >= end && next == steps.len() {
                break;
            }
            self.top_up();
            // Ticks fall on whole milliseconds of the workload's time.
            let ticks = now.saturating_since(t0).as_nanos() / TICK.as_nanos() + 1;
            let mut until = (t0 + TICK * u32::try_from(ticks).unwrap_or(u32::MAX)).min(end);
            if let Some(s) = steps.get(next) {
                until = until.min(s.0);
            }
            self.sim.run_until(until.max(now));
            self.drain()?;
            if self.sim.now() >= next_progress {
                self.progress()?;
                next_progress += PROGRESS;
            }
        }
        // The tail: B (if alive) keeps going, the target may still deliver
        // what A posted before its close.
        let tail_end = self.sim.now() + TAIL;
        while self.sim.now() < tail_end {
            self.top_up();
            let until = (self.sim.now() + TICK).min(tail_end);
            self.sim.run_until(until);
            self.drain()?;
        }
        // Stop submitting; wait until every live session's operations
        // completed.
        for s in &mut self.streams {
            s.stopped = true;
        }
        let limit = self.sim.now() + DRAIN_LIMIT;
        while self.sim.now() < limit && self.streams.iter().any(|s| s.pending() > 0) {
            let until = self.sim.now() + Duration::from_millis(1);
            self.sim.run_until(until);
            self.drain()?;
        }
        self.close_window();
        self.attributing = false;
        // Let the last acknowledgements and deliveries through.
        let until = self.sim.now() + Duration::from_millis(10);
        self.sim.run_until(until);
        self.drain()?;
        self.say("workload stopped; verifying")
    }

    fn top_up(&mut self) {
        let [a, b] = &mut self.streams;
        let node = self.sim.node(INITIATOR);
        a.top_up(node);
        b.top_up(node);
    }

    fn progress(&mut self) -> io::Result<()> {
        let mut parts = Vec::new();
        for (i, name) in NAMES.iter().enumerate() {
            let done = self.streams[i].completions_at.len();
            let rate = (done - self.progress_seen[i]) as f64 / PROGRESS.as_secs_f64();
            self.progress_seen[i] = done;
            let h = self.streams[i].session;
            let state = self
                .sim
                .node(INITIATOR)
                .state(h)
                .map_or("gone".to_string(), |s| s.to_string());
            let dev = self
                .device_of(Side::Initiator, h)
                .map_or(String::new(), |d| format!(" on {}", d.0.name));
            let what = if i == 0 { "ops/s" } else { "msgs/s" };
            parts.push(format!(
                "{}: {:>9} {what:<6} {state}{dev}",
                name,
                report::count(rate as u64)
            ));
        }
        self.say(format!("throughput  {}", parts.join("   ")))
    }

    /// Close the current fault's window: record where the sessions ended.
    fn close_window(&mut self) {
        let Some(w) = self.windows.last() else {
            return;
        };
        if w.closed {
            return;
        }
        let mut after = Vec::new();
        for i in 0..2 {
            let h = self.streams[i].session;
            let dev = self.device_of(Side::Initiator, h);
            let state = self.sim.node(INITIATOR).state(h);
            after.push((dev, state));
        }
        let w = self.windows.last_mut().expect("checked");
        for (i, (dev, state)) in after.into_iter().enumerate() {
            w.acc[i].device_after = dev.as_ref().map(|d| d.0.clone());
            w.acc[i].guid_after = dev.map(|d| d.1);
            w.acc[i].state_after = state;
        }
        w.closed = true;
    }

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

    fn apply(&mut self, plan: &[Planned], i: usize, step: Step) -> io::Result<()> {
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

    /// Take every event, completion and delivery; print and account.
    ///
    /// Events are printed in the order they happened: each is dated by
    /// the state transition it belongs to (a loss and a give-up come just
    /// before theirs, a resume, an attempt and a close just after).
    fn drain(&mut self) -> io::Result<()> {
        let now = self.sim.now();
        let mut batch = Vec::new();
        for i in 0..2 {
            for side in [Side::Initiator, Side::Target] {
                let (n, h) = match side {
                    Side::Initiator => (INITIATOR, self.streams[i].session),
                    Side::Target => (TARGET, self.streams[i].target_session()),
                };
                let mut evs = Vec::new();
                while let Some(ev) = self.sim.node(n).poll_event(h) {
                    evs.push(ev);
                }
                let at_of = |k: usize| match &evs[k] {
                    SessionEvent::Transition(t) => Some(t.at),
                    _ => None,
                };
                for k in 0..evs.len() {
                    let before = (0..k).rev().find_map(at_of);
                    let after = (k..evs.len()).find_map(at_of);
                    let at = match evs[k] {
                        SessionEvent::DeviceLost { .. }
                        | SessionEvent::GaveUp
                        | SessionEvent::PeerLost { .. } => after.or(before),
                        _ => at_of(k).or(before).or(after),
                    };
                    batch.push((at.unwrap_or(now), i, side, evs[k].clone()));
                }
            }
        }
        batch.sort_by_key(|(at, ..)| *at);
        for (at, i, side, ev) in batch {
            self.on_event(at, i, side, ev)?;
        }
        let [a, b] = &mut self.streams;
        for s in [a, b] {
            s.drain_completions(self.sim.node(INITIATOR));
            s.drain_deliveries(self.sim.node(TARGET));
        }
        Ok(())
    }

    fn acc(&mut self, i: usize) -> Option<&mut Acc> {
        if !self.attributing {
            return None;
        }
        self.windows
            .last_mut()
            .filter(|w| !w.closed)
            .map(|w| &mut w.acc[i])
    }

    fn on_event(
        &mut self,
        at: Timestamp,
        i: usize,
        side: Side,
        ev: SessionEvent,
    ) -> io::Result<()> {
        let who = format!("{}/{side}", NAMES[i]);
        let initiator = side == Side::Initiator;
        match ev {
            SessionEvent::Transition(t) => {
                if self.verbose {
                    self.say_at(at, format!("  {who}: {} -> {} ({})", t.from, t.to, t.cause))?;
                }
            }
            SessionEvent::DeviceLost { cause } => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.losses += 1;
                    } else if self.attributing {
                        self.problems.push(Problem {
                            at: self.rel(at),
                            what: format!("{who}: transport lost before any fault ({cause})"),
                        });
                    }
                }
                self.say_at(at, format!("  {who}: transport lost ({cause})"))?;
            }
            SessionEvent::Recovering { attempt } => {
                // Verbose mode shows the transition, which names the attempt.
                if !self.verbose && attempt > 1 {
                    self.say_at(at, format!("  {who}: reconnecting, attempt {attempt}"))?;
                }
            }
            SessionEvent::Resumed {
                downtime,
                replayed,
                deduplicated,
                device,
            } => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.resumes += 1;
                        a.downtime += downtime;
                        a.max_downtime = a.max_downtime.max(downtime);
                        a.replayed += replayed;
                    }
                } else {
                    let delta = deduplicated.saturating_sub(self.dedup_seen[i]);
                    self.dedup_seen[i] = self.dedup_seen[i].max(deduplicated);
                    if let Some(a) = self.acc(i) {
                        a.deduplicated += delta;
                    }
                }
                let on = device.map_or(String::new(), |d| {
                    format!(" on {} (generation {})", d.name, d.generation)
                });
                let extra = if initiator {
                    format!(", {replayed} operations replayed")
                } else {
                    format!(", {deduplicated} duplicates dropped so far")
                };
                self.say_at(
                    at,
                    format!(
                        "  {who}: resumed{on} after {}{extra}",
                        report::ms(downtime.as_secs_f64() * 1e3)
                    ),
                )?;
            }
            SessionEvent::GaveUp => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.gave_up = true;
                    }
                    let s = &mut self.streams[i];
                    s.pending_at_give_up = Some(s.pending_ids());
                    s.stopped = true;
                    self.markers.push(Marker {
                        at_s: self.rel(at),
                        label: format!("{} gave up", NAMES[i]),
                        detail: format!(
                            "session {} gave up: its give-up deadline passed",
                            NAMES[i]
                        ),
                        kind: MarkerKind::Event,
                    });
                }
                self.say_at(
                    at,
                    format!(
                        "  {who}: GAVE UP (give-up deadline passed); its pending operations fail"
                    ),
                )?;
            }
            SessionEvent::PeerLost { reason } => {
                self.problems.push(Problem {
                    at: self.rel(at),
                    what: format!("{who}: peer lost: {reason}"),
                });
                self.say_at(at, format!("  {who}: PEER LOST: {reason}"))?;
            }
            SessionEvent::Disconnected => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.closed = true;
                    }
                }
                self.say_at(at, format!("  {who}: closed"))?;
            }
        }
        Ok(())
    }

    fn impact(&self, w: &Window, i: usize, allowed: &[Expect]) -> Impact {
        let a = &w.acc[i];
        let name = |d: &Option<DeviceId>| d.as_ref().map(|d| d.name.clone());
        let outcome = if a.ended_before {
            Expect::Ended
        } else if a.closed {
            Expect::Closed
        } else if a.gave_up {
            Expect::GaveUp
        } else if a.losses == 0 && a.resumes == 0 {
            Expect::Unaffected
        } else if a.state_after != Some(State::Established) || a.resumes == 0 {
            Expect::StillDown
        } else if name(&a.device_before) != name(&a.device_after) {
            Expect::FailedOver
        } else if a.guid_before != a.guid_after {
            Expect::ResumedNewGuid
        } else {
            Expect::Resumed
        };
        let ok = allowed.iter().any(|e| e.accepts(outcome));
        let mut note = String::new();
        if outcome == Expect::ResumedNewGuid {
            if let (Some(b), Some(c)) = (a.guid_before, a.guid_after) {
                note = format!("GUID {b} -> {c}");
            }
        }
        if outcome == Expect::GaveUp {
            if let Some(p) = &self.streams[i].pending_at_give_up {
                note = format!("{} pending operations ended", p.len());
            }
        }
        if outcome == Expect::Closed {
            if let Some(p) = &self.streams[i].pending_at_close {
                note = format!("{} pending operations ended", p.len());
            }
        }
        if a.losses > 1 {
            let sep = if note.is_empty() { "" } else { "; " };
            note = format!("{note}{sep}{} losses", a.losses);
        }
        Impact {
            session: NAMES[i],
            outcome,
            expected: allowed.to_vec(),
            ok,
            losses: a.losses,
            resumes: a.resumes,
            downtime_ms: a.downtime.as_secs_f64() * 1e3,
            max_downtime_ms: a.max_downtime.as_secs_f64() * 1e3,
            replayed: a.replayed,
            deduplicated: a.deduplicated,
            device_before: name(&a.device_before),
            device_after: if matches!(outcome, Expect::Closed | Expect::GaveUp | Expect::Ended) {
                None
            } else {
                name(&a.device_after)
            },
            note,
        }
    }

    /// Flip a byte in the middle of the target's region (`--sabotage`).
    fn sabotage(&mut self) -> anyhow::Result<()> {
        let h = self.streams[0].target_session();
        let mem = self.sim.node(TARGET).region(h, workload::TARGET_DATA)?;
        let off = (workload::BLOCK * workload::BLOCKS / 2 + 17) as usize;
        let b = mem.read_vec(off, 1)?;
        mem.write(off, &[b[0] ^ 0x5a])?;
        self.say("--sabotage: flipped one byte of the target's region")?;
        Ok(())
    }

    fn finish(mut self, duration: Duration) -> anyhow::Result<Report> {
        let closed_a = self.windows.iter().any(|w| w.kind == FaultKind::Close);
        let outage = self.windows.iter().any(|w| w.kind == FaultKind::Outage);

        // Per fault.
        let mut rows = Vec::new();
        for w in &self.windows {
            let (ea, eb) = w.kind.expected();
            let sessions = vec![self.impact(w, 0, ea), self.impact(w, 1, eb)];
            rows.push(FaultRow {
                fault: w.kind,
                at_s: self.rel(w.at),
                hit: w.hit.clone(),
                description: w.description.clone(),
                ok: sessions.iter().all(|s| s.ok),
                sessions,
            });
        }

        // End-to-end checks.
        let target_region = self
            .sim
            .node(TARGET)
            .region(self.streams[0].target_session(), workload::TARGET_DATA)
            .ok();
        let [a, b] = &self.streams;
        let mut checks = vec![
            workload::check_messages(a, !closed_a),
            workload::check_messages(b, !outage),
            workload::check_region(a, target_region.as_ref()),
            workload::check_reads(a),
            workload::check_atomics(a, target_region.as_ref()),
            workload::check_completions(a),
            workload::check_completions(b),
        ];
        if let Some(p) = &a.pending_at_close {
            checks.push(workload::check_ended(
                a,
                p,
                OpError::Disconnected,
                "pending at close",
            ));
        }
        if outage {
            match &b.pending_at_give_up {
                Some(p) => checks.push(workload::check_ended(
                    b,
                    p,
                    OpError::GaveUp,
                    "pending at give-up",
                )),
                None => checks.push(Check {
                    name: "B pending at give-up".into(),
                    ok: false,
                    detail: "B never gave up".into(),
                }),
            }
        }
        let bad_faults: Vec<String> = rows
            .iter()
            .filter(|r| !r.ok)
            .map(|r| r.fault.to_string())
            .collect();
        checks.push(Check {
            name: "fault outcomes".into(),
            ok: bad_faults.is_empty(),
            detail: if bad_faults.is_empty() {
                format!(
                    "all {} faults had the expected outcome for A and B",
                    rows.len()
                )
            } else {
                format!("unexpected outcome in: {}", bad_faults.join(", "))
            },
        });
        // Final states.
        let state = |sim: &mut Sim, n, h| sim.node(n).state(h);
        let fa = state(&mut self.sim, INITIATOR, self.streams[0].session);
        let fb = state(&mut self.sim, INITIATOR, self.streams[1].session);
        let want_a = if closed_a {
            State::Closed
        } else {
            State::Established
        };
        let want_b = if outage {
            State::Failed
        } else {
            State::Established
        };
        checks.push(Check {
            name: "final states".into(),
            ok: fa == Some(want_a) && fb == Some(want_b),
            detail: format!(
                "A {} (expected {want_a}), B {} (expected {want_b})",
                fa.map_or("gone".into(), |s| s.to_string()),
                fb.map_or("gone".into(), |s| s.to_string())
            ),
        });
        let mut problems = self.problems.clone();
        for s in &self.streams {
            problems.extend(s.problems.iter().cloned());
        }
        problems.sort_by(|x, y| x.at.total_cmp(&y.at));
        checks.push(Check {
            name: "no other problems".into(),
            ok: problems.is_empty(),
            detail: if problems.is_empty() {
                "no refused submission, lost peer, bad delivery or stray completion".into()
            } else {
                format!("{} problem(s), first: {}", problems.len(), problems[0].what)
            },
        });
        let failed_checks: Vec<String> = checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.name.clone())
            .collect();

        // Sessions.
        let mut sessions = Vec::new();
        for (i, s) in self.streams.iter().enumerate() {
            let init = self.sim.node(INITIATOR);
            let final_state = init
                .state(s.session)
                .map_or("gone".into(), |x| x.to_string());
            let ci = init.counters(s.session).unwrap_or_default();
            let target = self.sim.node(TARGET);
            let target_state = target
                .state(s.target_session())
                .map_or("gone".into(), |x| x.to_string());
            let ct = target.counters(s.target_session()).unwrap_or_default();
            sessions.push(SessionSummary {
                session: NAMES[i],
                final_state,
                target_state,
                ops: s.tally.clone(),
                initiator: ci.into(),
                target: ct.into(),
            });
        }

        // Throughput.
        let end = self.sim.now();
        let n = (end.saturating_since(self.t0).as_nanos() / BUCKET.as_nanos()) as usize + 1;
        let mut series = [vec![0u64; n], vec![0u64; n]];
        for (i, s) in self.streams.iter().enumerate() {
            for t in &s.completions_at {
                let k = (t.saturating_since(self.t0).as_nanos() / BUCKET.as_nanos()) as usize;
                series[i][k.min(n - 1)] += 1;
            }
        }
        let [sa, sb] = series;
        Ok(Report {
            seed: self.seed,
            duration_s: duration.as_secs_f64(),
            passed: failed_checks.is_empty(),
            failed_checks,
            faults: rows,
            checks,
            sessions,
            problems,
            throughput: Throughput {
                bucket_s: BUCKET.as_secs_f64(),
                a: sa,
                b: sb,
                markers: self.markers.clone(),
            },
            virtual_time_s: secs(end),
            wall_time_s: 0.0,
            digest: format!("{:016x}", self.sim.fabric().digest()),
            svg: None,
        })
    }
}
