//! Session events: taken from both hosts, dated and printed in the order
//! they happened, and accounted to the open fault window (losses,
//! resumes, downtime, replays, duplicates, give-up, close, planned moves,
//! drains blocked); session C's go to its application ([`super::manual`]).
//! The initiators' events also feed A's stall watch and the planned
//! drain's record ([`super::drain`]), which look at the session after
//! every drain of events.

use std::io;

use relink::{Plan, SessionEvent};
use relink_fabric::Timestamp;
use relink_sim::sim::{INITIATOR, TARGET};
use relink_sim::workload::Problem;

use super::driver::{Driver, NAMES};
use super::faults::Side;
use super::report::{self, Marker, MarkerKind};

/// Session C's index in the batch of events (after A and B).
const C: usize = 2;

/// A planned outage, in words.
pub(super) fn plan_name(p: Plan) -> &'static str {
    match p {
        Plan::Drain => "drain",
        Plan::Suspend => "suspend",
    }
}

impl Driver<'_> {
    /// Take every event, completion and delivery; print and account.
    ///
    /// Events are printed in the order they happened: each is dated by
    /// the state transition it belongs to (a loss and a give-up come just
    /// before theirs, a resume, an attempt and a close just after).
    pub(super) fn drain(&mut self) -> io::Result<()> {
        let now = self.sim.now();
        let mut batch = Vec::new();
        // Sessions A (0), B (1) and C (2, see `manual`).
        for i in 0..3 {
            for side in [Side::Initiator, Side::Target] {
                let evs = if i == C {
                    self.c_take_events(side)
                } else {
                    let (n, h) = match side {
                        Side::Initiator => (INITIATOR, self.streams[i].session),
                        Side::Target => (TARGET, self.streams[i].target_session()),
                    };
                    let mut evs = Vec::new();
                    while let Some(ev) = self.sim.node(n).poll_event(h) {
                        evs.push(ev);
                    }
                    evs
                };
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
            if side == Side::Initiator {
                self.note_planned(i, at, &ev);
            }
            if i == C {
                self.c_events(at, side, ev)?;
            } else {
                self.on_event(at, i, side, ev)?;
            }
        }
        let [a, b] = &mut self.streams;
        for s in [a, b] {
            s.drain_completions(self.sim.node(INITIATOR));
            s.drain_deliveries(self.sim.node(TARGET));
        }
        self.remember();
        self.c_decide()?;
        self.planned_tick()
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
            SessionEvent::Refused { reason, retrying } => {
                if !retrying {
                    self.problems.push(Problem {
                        at: self.rel(at),
                        what: format!("{who}: refused for good: {reason:?}"),
                    });
                }
                let then = if retrying { "retrying" } else { "giving up" };
                self.say_at(
                    at,
                    format!("  {who}: refused by the peer ({reason:?}), {then}"),
                )?;
            }
            SessionEvent::PeerLost { reason } => {
                self.problems.push(Problem {
                    at: self.rel(at),
                    what: format!("{who}: peer lost: {reason}"),
                });
                self.say_at(at, format!("  {who}: PEER LOST: {reason}"))?;
            }
            SessionEvent::AttemptFailed { attempt, reason } => {
                // Verbose mode only, next to the transition it causes.
                if self.verbose {
                    self.say_at(at, format!("  {who}: attempt {attempt} failed: {reason}"))?;
                }
            }
            SessionEvent::Disconnected => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.closed = true;
                    }
                }
                self.say_at(at, format!("  {who}: closed"))?;
            }
            SessionEvent::Quiescing { plan } => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.planned += u64::from(plan == Plan::Drain);
                    }
                    self.say_at(
                        at,
                        format!("  {who}: quiescing for a planned {}: posts nothing new until nothing is in flight", plan_name(plan)),
                    )?;
                } else if self.verbose {
                    self.say_at(at, format!("  {who}: quiescing ({})", plan_name(plan)))?;
                }
            }
            SessionEvent::DrainBlocked => {
                if initiator {
                    if let Some(a) = self.acc(i) {
                        a.blocked = true;
                    }
                }
                self.say_at(
                    at,
                    format!("  {who}: drain blocked: no other present path, it stays on the drained device"),
                )?;
            }
            other => {
                if self.verbose {
                    self.say_at(at, format!("  {who}: {other:?}"))?;
                }
            }
        }
        Ok(())
    }
}
