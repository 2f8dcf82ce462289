//! Session C and its application: a manual-recovery session
//! ([`RecoveryMode::Manual`](relink::RecoveryMode::Manual)) carrying
//! checked messages, whose application lets it recover only once a quorum
//! of its replicas agrees.
//!
//! When C loses its transport the library holds it and reports
//! [`SessionEvent::AwaitingDecision`] with the cause and the candidate
//! paths: its messages stay pending (the application keeps submitting,
//! they wait in the journal) and it makes no attempt. The application
//! prints the hold, then asks its [`REPLICAS`] simulated replicas whether
//! it may rejoin: each agrees after a number of [`ROUND`]s drawn from the
//! seed. Once [`QUORUM`] agreed it calls [`Node::resume_on`] naming a
//! candidate's path: the one whose device has the name of the device C
//! lost (that device back, or its replacement), else the first (and if
//! there is none yet, it waits for one). The session then recovers as an
//! automatic one does, replays what was not confirmed and resumes.
//!
//! A planned drain of C's device is no loss: C quiesces and moves to its
//! other path at once, with no hold and nothing for the application to
//! decide (the drain itself is the decision); the application records the
//! move apart from its holds.
//!
//! Everything the application sees goes into a [`ManualReport`]: the
//! holds, the attempt counter and attempt events while held, the
//! decisions and the resumes, the planned moves; its checks and the
//! workload's message and completion checks verify C at the end. The driver calls in where it
//! takes events ([`Driver::c_take_events`], then [`Driver::c_events`] for
//! each in the dated batch), after every drain ([`Driver::c_decide`]),
//! when a fault starts ([`Driver::c_fault_started`]), for the progress
//! line ([`Driver::c_progress`]) and at the end ([`Driver::c_finish`]);
//! C has no row in the fault windows of A and B.
//!
//! [`Node::resume_on`]: relink::Node::resume_on

use std::io;
use std::time::Duration;

use relink::{Candidate, Plan, SessionEvent, SessionHandle};
use relink_fabric::Timestamp;
use relink_sim::sim::{INITIATOR, TARGET};
use relink_sim::workload::{self, mix, Check, Problem, Window, Workload};

use super::driver::Driver;
use super::events::plan_name;
use super::faults::{FaultKind, Side};
use super::manual_report::{Hit, Hold, ManualReport, Move};
use super::report::{self, SessionSummary};

/// C's name in the output.
pub(super) const NAME: &str = "C";
/// How often the application polls its replicas while C is held.
pub(super) const ROUND: Duration = Duration::from_millis(10);
/// Replicas the application asks.
pub(super) const REPLICAS: u32 = 4;
/// Agreements it needs before it resumes.
pub(super) const QUORUM: u32 = 3;
/// A replica agrees within this many rounds.
const MOST_ROUNDS: u64 = 6;

/// C's window: messages only, a few per top-up; while C is held they
/// queue, up to the window.
const WINDOW_C: Window = Window {
    pace: 2,
    messages: 32,
    writes: 0,
    reads: 0,
    atomics: 0,
};

/// The vote under way while C is held and not yet decided.
struct Vote {
    /// When it started (the hold's first report).
    started: Timestamp,
    /// Round (from 1) in which each replica agrees.
    agrees_in: [u64; REPLICAS as usize],
    /// Replicas that agreed so far.
    agreed: u32,
    /// The next round to count.
    next_round: u64,
    /// The quorum was reached with no candidate, said once.
    said_no_candidate: bool,
    /// The candidates of the last `AwaitingDecision`.
    candidates: Vec<Candidate>,
    /// The initiator's attempt counter at the hold.
    attempts_at_hold: u64,
}

/// Session C: its workload, its application's vote and what it saw.
pub(super) struct Manual {
    pub(super) stream: Workload,
    vote: Option<Vote>,
    /// The report's record, completed by [`Driver::c_finish`].
    report: ManualReport,
    /// Holds started so far (keys the replicas' votes).
    holds: u64,
    /// The name of the device C was last established on: the application
    /// prefers a candidate of that name (the device back, or its
    /// replacement).
    home: Option<String>,
    /// Successful completions at the last progress line.
    progress_seen: usize,
    /// A planned drain is moving C (its `Quiescing` came, its `Resumed`
    /// not yet): that resume is no decision's.
    moving: bool,
}

impl Manual {
    /// C's application on the initiator's session `s`, delivering at the
    /// target's `t`.
    pub(super) fn new(seed: u64, node: &relink::Node, s: SessionHandle, t: SessionHandle) -> Self {
        Manual {
            stream: Workload::new(NAME, seed, WINDOW_C, node, s, Some(t)),
            vote: None,
            report: ManualReport {
                session: NAME,
                quorum: QUORUM,
                replicas: REPLICAS,
                ..ManualReport::default()
            },
            holds: 0,
            home: node
                .session_info(s)
                .and_then(|i| i.device)
                .map(|d| d.id.name),
            progress_seen: 0,
            moving: false,
        }
    }

    /// Holds so far.
    pub(super) fn holds(&self) -> usize {
        self.report.holds.len()
    }

    /// The open hold (held and not yet resumed), if any.
    fn open_hold(&mut self) -> Option<&mut Hold> {
        self.report
            .holds
            .last_mut()
            .filter(|h| h.resumed_at_s.is_none())
    }
}

fn describe(c: &[Candidate]) -> Vec<String> {
    c.iter()
        .map(|c| {
            format!(
                "path {} on {} (generation {})",
                c.path_index, c.device.name, c.device.generation
            )
        })
        .collect()
}

impl Driver<'_> {
    fn c_handle(&self, side: Side) -> (usize, SessionHandle) {
        match side {
            Side::Initiator => (INITIATOR, self.c.stream.session),
            Side::Target => (TARGET, self.c.stream.target_session()),
        }
    }

    /// C's events on `side`, taken from its node.
    pub(super) fn c_take_events(&mut self, side: Side) -> Vec<SessionEvent> {
        let (n, h) = self.c_handle(side);
        let mut evs = Vec::new();
        while let Some(ev) = self.sim.node(n).poll_event(h) {
            evs.push(ev);
        }
        evs
    }

    fn c_problem(&mut self, at: Timestamp, what: String) {
        self.problems.push(Problem {
            at: self.rel(at),
            what: format!("{NAME}: {what}"),
        });
    }

    /// One event of C, dated `at`: printed, and what the application
    /// learns from it recorded.
    pub(super) fn c_events(
        &mut self,
        at: Timestamp,
        side: Side,
        ev: SessionEvent,
    ) -> io::Result<()> {
        let who = format!("{NAME}/{side}");
        let initiator = side == Side::Initiator;
        let t = self.rel(at);
        match ev {
            SessionEvent::Transition(tr) => {
                if self.verbose {
                    self.say_at(
                        at,
                        format!("  {who}: {} -> {} ({})", tr.from, tr.to, tr.cause),
                    )?;
                }
            }
            SessionEvent::DeviceLost { cause } => {
                self.say_at(at, format!("  {who}: transport lost ({cause})"))?;
            }
            SessionEvent::Quiescing { plan } if initiator => {
                self.c.moving = plan == Plan::Drain;
                self.say_at(
                    at,
                    format!(
                        "  {who}: quiescing for a planned {}: a planned move, nothing for the application to decide",
                        plan_name(plan)
                    ),
                )?;
            }
            SessionEvent::AwaitingDecision { cause, candidates } if initiator => {
                // A loss, during a planned move too: the move is off.
                self.c.moving = false;
                let shown = describe(&candidates);
                let list = if shown.is_empty() {
                    "none yet".to_string()
                } else {
                    shown.join(", ")
                };
                self.say_at(
                    at,
                    format!("  {who}: awaiting decision: cause {cause}, candidates {list}"),
                )?;
                let attempts = self.counters_c().attempts;
                let undecided = self.c.open_hold().is_some_and(|h| h.decided_at_s.is_none());
                if undecided {
                    // The candidates changed while held.
                    if let Some(h) = self.c.open_hold() {
                        h.reports += 1;
                        h.candidates = shown;
                    }
                    if let Some(v) = &mut self.c.vote {
                        v.candidates = candidates;
                        v.said_no_candidate = false;
                    }
                } else {
                    let fault = self
                        .windows
                        .last()
                        .filter(|w| !w.closed && self.attributing)
                        .map(|w| w.kind);
                    let window = self.windows.len().checked_sub(1);
                    if let (Some(_), Some(k)) = (fault, window) {
                        for hit in &mut self.c.report.hits {
                            if hit.window == k {
                                hit.held = true;
                            }
                        }
                    }
                    self.c.report.holds.push(Hold {
                        at_s: t,
                        fault,
                        cause: cause.to_string(),
                        candidates: shown,
                        reports: 1,
                        ..Hold::default()
                    });
                    self.c.holds += 1;
                    let key = self.seed ^ mix(self.c.holds << 8);
                    let agrees_in: [u64; REPLICAS as usize] =
                        std::array::from_fn(|r| 1 + mix(key ^ r as u64) % MOST_ROUNDS);
                    self.c.vote = Some(Vote {
                        started: at,
                        agrees_in,
                        agreed: 0,
                        next_round: 1,
                        said_no_candidate: false,
                        candidates,
                        attempts_at_hold: attempts,
                    });
                }
            }
            SessionEvent::Recovering { attempt } => {
                if initiator && self.c.vote.is_some() {
                    if let Some(h) = self.c.open_hold() {
                        h.attempt_events_while_held += 1;
                    }
                }
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
                let on = device.as_ref().map(|d| d.name.clone());
                if initiator {
                    self.c.home.clone_from(&on);
                    let moving = std::mem::take(&mut self.c.moving);
                    match self.c.open_hold() {
                        Some(h) if h.decided_at_s.is_some() => {
                            h.resumed_at_s = Some(t);
                            h.resumed_on = on.clone();
                            h.downtime_ms = downtime.as_secs_f64() * 1e3;
                        }
                        None if moving => {
                            let fault = self
                                .windows
                                .last()
                                .filter(|w| !w.closed && self.attributing)
                                .map(|w| w.kind);
                            self.c.report.moves.push(Move {
                                at_s: t,
                                fault,
                                to: on.clone(),
                                downtime_ms: downtime.as_secs_f64() * 1e3,
                                replayed,
                            });
                        }
                        _ => self.c.report.resumed_undecided_s.push(t),
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
            SessionEvent::AttemptFailed { attempt, reason } => {
                if self.verbose {
                    self.say_at(at, format!("  {who}: attempt {attempt} failed: {reason}"))?;
                }
            }
            SessionEvent::Refused {
                reason,
                retrying: true,
            } => {
                self.say_at(
                    at,
                    format!("  {who}: refused by the peer ({reason:?}), retrying"),
                )?;
            }
            // C is never closed and never gives up: anything that ends it
            // is a problem.
            SessionEvent::GaveUp
            | SessionEvent::PeerLost { .. }
            | SessionEvent::Refused { .. }
            | SessionEvent::Disconnected => {
                self.c_problem(at, format!("{side}: {ev:?}"));
                self.say_at(at, format!("  {who}: ENDED: {ev:?}"))?;
            }
            other => {
                if self.verbose {
                    self.say_at(at, format!("  {who}: {other:?}"))?;
                }
            }
        }
        Ok(())
    }

    fn counters_c(&mut self) -> relink::Counters {
        let s = self.c.stream.session;
        self.sim.node(INITIATOR).counters(s).unwrap_or_default()
    }

    /// C's application after every drain: its completions and deliveries
    /// taken; while C is held, the watch on attempts and a round of the
    /// vote, and the decision once the quorum agreed.
    pub(super) fn c_decide(&mut self) -> io::Result<()> {
        let s = self.c.stream.session;
        self.c.stream.drain_completions(self.sim.node(INITIATOR));
        self.c.stream.drain_deliveries(self.sim.node(TARGET));
        let Some(vote) = &self.c.vote else {
            return Ok(());
        };
        let attempts_at_hold = vote.attempts_at_hold;
        let info = self.sim.node(INITIATOR).session_info(s);
        let (flagged, attempts) = info.map_or((false, 0), |i| {
            (
                i.awaiting_decision || i.state.is_terminal(),
                i.counters.attempts,
            )
        });
        if let Some(h) = self.c.open_hold() {
            h.attempts_while_held = attempts.saturating_sub(attempts_at_hold);
            if !flagged {
                h.unflagged_polls += 1;
            }
        }
        let now = self.sim.now();
        let who = format!("{NAME}/application");
        let Some(v) = self.c.vote.as_mut() else {
            return Ok(());
        };
        let mut said = Vec::new();
        while v.agreed < QUORUM && now >= v.started + ROUND * v.next_round as u32 {
            let round = v.next_round;
            let agree = v.agrees_in.iter().filter(|&&r| r == round).count() as u32;
            v.agreed += agree;
            v.next_round += 1;
            if agree > 0 && v.agreed < QUORUM {
                said.push(format!(
                    "  {who}: {} of {QUORUM} replicas agree, not resuming yet",
                    v.agreed
                ));
            }
        }
        let ready = v.agreed >= QUORUM;
        let waited = now.saturating_since(v.started);
        let votes = v.agreed;
        let home = self.c.home.as_deref();
        let choice = v
            .candidates
            .iter()
            .find(|c| Some(c.device.name.as_str()) == home)
            .or(v.candidates.first())
            .cloned();
        if ready && choice.is_none() && !v.said_no_candidate {
            v.said_no_candidate = true;
            said.push(format!(
                "  {who}: quorum reached, no candidate path yet: waiting for one"
            ));
        }
        for line in said {
            self.say(line)?;
        }
        let (true, Some(c)) = (ready, choice) else {
            return Ok(());
        };
        let t = self.rel(now);
        match self.sim.node(INITIATOR).resume_on(s, c.path_index) {
            Ok(()) => {
                self.c.vote = None;
                if let Some(h) = self.c.open_hold() {
                    h.votes = votes;
                    h.decided_at_s = Some(t);
                    h.path = Some(c.path_index);
                    h.device = Some(c.device.name.clone());
                }
                self.say(format!(
                    "  {who} decided: resume on path {} after quorum ({votes} of {REPLICAS} replicas agreed in {}; {} generation {})",
                    c.path_index,
                    report::ms(waited.as_secs_f64() * 1e3),
                    c.device.name,
                    c.device.generation
                ))?;
            }
            Err(e) => {
                self.c.vote = None;
                self.c_problem(now, format!("resume_on({}) refused: {e}", c.path_index));
            }
        }
        Ok(())
    }

    /// A fault started with `dev` as its device: note whether it is the
    /// one carrying C (its window index is the last one).
    pub(super) fn c_fault_started(&mut self, dev: Option<&(Side, String)>) {
        let Some((side, name)) = dev else {
            return;
        };
        let (_, h) = self.c_handle(*side);
        let carrying = self.device_of(*side, h).map(|d| d.0.name);
        if carrying.as_deref() != Some(name.as_str()) {
            return;
        }
        if let (Some(w), Some(window)) = (self.windows.last(), self.windows.len().checked_sub(1)) {
            self.c.report.hits.push(Hit {
                fault: w.kind,
                window,
                device: format!("{side} {name}"),
                held: false,
                planned: w.kind == FaultKind::Drain,
            });
        }
    }

    /// C's part of the progress line.
    pub(super) fn c_progress(&mut self, per: Duration) -> String {
        let done = self.c.stream.completions_at.len();
        let rate = (done - self.c.progress_seen) as f64 / per.as_secs_f64();
        self.c.progress_seen = done;
        let s = self.c.stream.session;
        let info = self.sim.node(INITIATOR).session_info(s);
        let state = match &info {
            Some(i) if i.awaiting_decision => "held".to_string(),
            Some(i) => i.state.to_string(),
            None => "gone".into(),
        };
        let dev = info
            .and_then(|i| i.device)
            .map_or(String::new(), |d| format!(" on {}", d.id.name));
        format!(
            "{NAME}: {:>7} msgs/s {state}{dev}",
            report::count(rate as u64)
        )
    }

    /// C at the end: its report (holds, hits, final state), its checks
    /// (held, no attempt while held, resumed on decision, messages,
    /// completions) and its summary row.
    pub(super) fn c_finish(&mut self) -> (ManualReport, Vec<Check>, SessionSummary) {
        let s = self.c.stream.session;
        let t = self.c.stream.target_session();
        let ini = self.sim.node(INITIATOR).session_info(s);
        let state_t = self.sim.node(TARGET).state(t);
        let counters_t = self.sim.node(TARGET).counters(t).unwrap_or_default();
        let mut r = self.c.report.clone();
        r.final_state = ini.as_ref().map_or("gone".into(), |i| i.state.to_string());
        r.held_at_end = ini.as_ref().is_some_and(|i| i.awaiting_decision);
        let mut checks = r.checks();
        checks.push(workload::check_messages(&self.c.stream, true));
        checks.push(workload::check_completions(&self.c.stream));
        let summary = SessionSummary {
            session: NAME,
            final_state: r.final_state.clone(),
            target_state: state_t.map_or("gone".into(), |x| x.to_string()),
            ops: self.c.stream.tally.clone(),
            initiator: ini.map(|i| i.counters).unwrap_or_default().into(),
            target: counters_t.into(),
        };
        (r, checks, summary)
    }
}
