//! What session C's application saw, as the report keeps it: each hold
//! (cause, candidates, votes, decision, resume), each planned move (a
//! drain: no hold), the faults that hit C's device; the checks made of it;
//! its table in the text report.
//!
//! The checks read only this log, so each can be shown to fail on a log
//! that breaks it (see the tests below).

use std::io::{self, Write};

use relink_sim::workload::Check;
use serde::Serialize;

use super::faults::FaultKind;
use super::report::{count, ms};

/// Session C in the report: its manual recovery, hold by hold.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ManualReport {
    /// "C".
    pub session: &'static str,
    /// Agreements of the application's replicas it needs before it
    /// resumes the session.
    pub quorum: u32,
    /// Replicas it asks.
    pub replicas: u32,
    /// Each time the session was held for the application's decision, in
    /// order.
    pub holds: Vec<Hold>,
    /// Each time a planned drain moved the session to another path (no
    /// hold, no decision), in order.
    pub moves: Vec<Move>,
    /// The faults that hit C's device (at either end) when they started.
    pub hits: Vec<Hit>,
    /// Virtual seconds of every `Resumed` event of C's initiator that came
    /// with no decision of the application before it (none expected).
    pub resumed_undecided_s: Vec<f64>,
    /// C's initiator state at the end.
    pub final_state: String,
    /// Whether C was still held at the end.
    pub held_at_end: bool,
}

/// One hold of session C, from its first `AwaitingDecision` to its resume.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Hold {
    /// Virtual seconds (from the start of the workload) of its first
    /// `AwaitingDecision` event.
    pub at_s: f64,
    /// The fault whose window it began in (`None`: outside every window).
    pub fault: Option<FaultKind>,
    /// What ended the transport, as the event said.
    pub cause: String,
    /// The candidates of the last `AwaitingDecision` before the decision,
    /// as printed (`path 1 on soft1 (generation 3)`).
    pub candidates: Vec<String>,
    /// `AwaitingDecision` events of this hold (one more each time the
    /// candidates changed).
    pub reports: u64,
    /// The initiator's attempt counter rose by this much from the hold to
    /// the decision (0 expected).
    pub attempts_while_held: u64,
    /// `Recovering` (attempt) events between the hold and the decision (0
    /// expected).
    pub attempt_events_while_held: u64,
    /// Polls between the hold and the decision at which the session did
    /// not report `awaiting_decision` (0 expected).
    pub unflagged_polls: u64,
    /// Replicas that had agreed when the application decided.
    pub votes: u32,
    /// Virtual seconds of the application's `resume_on`.
    pub decided_at_s: Option<f64>,
    /// The path it named.
    pub path: Option<usize>,
    /// The device of that candidate.
    pub device: Option<String>,
    /// Virtual seconds of the `Resumed` event that ended the hold.
    pub resumed_at_s: Option<f64>,
    /// The device it resumed on.
    pub resumed_on: Option<String>,
    /// The downtime the `Resumed` event reported (loss to resume).
    pub downtime_ms: f64,
}

/// A planned move of session C: a drain of its device moved it to another
/// path, with no hold.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Move {
    /// Virtual seconds of the `Resumed` event that ended it.
    pub at_s: f64,
    /// The fault whose window it happened in.
    pub fault: Option<FaultKind>,
    /// The device it resumed on.
    pub to: Option<String>,
    /// The downtime the `Resumed` event reported.
    pub downtime_ms: f64,
    /// Operations the resume replayed (0 expected: nothing was in flight).
    pub replayed: u64,
}

/// A fault that hit the device carrying C when it started.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// The fault.
    pub fault: FaultKind,
    /// Its window, as an index into the report's faults.
    pub window: usize,
    /// The device (`initiator soft0`).
    pub device: String,
    /// Whether C was held in that fault's window.
    pub held: bool,
    /// The fault is a planned drain: C moves without a hold (the drain's
    /// own checks verify it), so it is not one that must hold C.
    pub planned: bool,
}

/// `n` of `one` (or of `many`), in words: `1 hold`, `3 holds`.
fn n_of(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check {
        name: name.to_string(),
        ok,
        detail,
    }
}

impl ManualReport {
    /// The checks of C's manual recovery: held, no attempt while held,
    /// resumed on the application's decision only.
    pub fn checks(&self) -> Vec<Check> {
        vec![
            self.check_held(),
            self.check_no_attempt(),
            self.check_decided(),
        ]
    }

    fn check_held(&self) -> Check {
        let name = "C held";
        let hits: Vec<&Hit> = self.hits.iter().filter(|h| !h.planned).collect();
        let planned = self.hits.len() - hits.len();
        let missed: Vec<String> = hits
            .iter()
            .filter(|h| !h.held)
            .map(|h| format!("{} ({})", h.fault, h.device))
            .collect();
        if !missed.is_empty() {
            return check(
                name,
                false,
                format!(
                    "not held after a fault on its device: {}",
                    missed.join(", ")
                ),
            );
        }
        if self.holds.is_empty() {
            let ok = hits.is_empty();
            let detail = if ok && planned > 0 {
                "never held: only a planned drain hit the device carrying C (it moves without a hold)"
                    .to_string()
            } else if ok {
                "never held: no fault hit the device carrying C".to_string()
            } else {
                "never held".to_string()
            };
            return check(name, ok, detail);
        }
        let mut causes: Vec<(String, u64)> = Vec::new();
        for h in &self.holds {
            match causes.iter_mut().find(|(c, _)| *c == h.cause) {
                Some((_, n)) => *n += 1,
                None => causes.push((h.cause.clone(), 1)),
            }
        }
        let causes: Vec<String> = causes.iter().map(|(c, n)| format!("{c} {n}x")).collect();
        let times = match self.holds.len() {
            1 => "once".to_string(),
            n => format!("{n} times"),
        };
        let faults = match hits.len() {
            0 => "though no fault hit the device carrying it".to_string(),
            1 => "in the 1 fault that hit its device".to_string(),
            n => format!("in each of the {n} faults that hit its device"),
        };
        let planned = match planned {
            0 => String::new(),
            n => format!(
                " ({} left out: a drain moves C without a hold)",
                n_of(n, "planned drain", "planned drains")
            ),
        };
        check(
            name,
            true,
            format!(
                "held {times} for the application's decision ({}), {faults}{planned}",
                causes.join(", ")
            ),
        )
    }

    fn check_no_attempt(&self) -> Check {
        let name = "C no attempt while held";
        let attempts: u64 = self.holds.iter().map(|h| h.attempts_while_held).sum();
        let events: u64 = self.holds.iter().map(|h| h.attempt_events_while_held).sum();
        let unflagged: u64 = self.holds.iter().map(|h| h.unflagged_polls).sum();
        if attempts + events + unflagged > 0 {
            return check(
                name,
                false,
                format!(
                    "while held: the attempt counter rose by {attempts}, {events} attempt events, {unflagged} polls without awaiting_decision"
                ),
            );
        }
        if self.holds.is_empty() {
            return check(name, true, "never held".into());
        }
        check(
            name,
            true,
            format!(
                "{}: no attempt from each hold to its decision (attempt counter and Recovering events), awaiting_decision reported throughout",
                n_of(self.holds.len(), "hold", "holds")
            ),
        )
    }

    fn check_decided(&self) -> Check {
        let name = "C resumed on decision";
        let mut bad = Vec::new();
        if let Some(t) = self.resumed_undecided_s.first() {
            bad.push(format!(
                "{} resume(s) with no decision before, first at {t:.3} s",
                self.resumed_undecided_s.len()
            ));
        }
        for h in &self.holds {
            match (h.decided_at_s, h.resumed_at_s) {
                (None, _) => bad.push(format!("the hold at {:.3} s was never decided", h.at_s)),
                (Some(d), _) if h.votes < self.quorum || d < h.at_s => bad.push(format!(
                    "the hold at {:.3} s was decided with {} of {} votes",
                    h.at_s, h.votes, self.quorum
                )),
                (Some(_), None) => {
                    bad.push(format!("the hold at {:.3} s never resumed", h.at_s));
                }
                (Some(d), Some(r)) if r < d => bad.push(format!(
                    "the hold at {:.3} s resumed at {r:.3} s, before the decision at {d:.3} s",
                    h.at_s
                )),
                _ => {}
            }
        }
        if self.final_state != "established" || self.held_at_end {
            bad.push(format!(
                "C ends {}{}",
                self.final_state,
                if self.held_at_end { ", held" } else { "" }
            ));
        }
        if let Some(first) = bad.first() {
            return check(
                name,
                false,
                format!("{first} ({} problems in all)", bad.len()),
            );
        }
        if self.holds.is_empty() {
            return check(name, true, "never held; C ends established".into());
        }
        let longest = self
            .holds
            .iter()
            .filter_map(|h| Some(h.decided_at_s? - h.at_s))
            .fold(0.0, f64::max);
        check(
            name,
            true,
            format!(
                "{}, each decided after a quorum of {} of {} replicas (longest wait {}) and resumed after its decision; C ends established",
                n_of(self.holds.len(), "hold", "holds"),
                self.quorum,
                self.replicas,
                ms(longest * 1e3)
            ),
        )
    }

    /// The text report's section on C: one row per hold.
    pub fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out)?;
        writeln!(
            out,
            "Session C (manual recovery: held after each loss until a quorum of {} of its application's {} replicas agrees)",
            self.quorum, self.replicas
        )?;
        for m in &self.moves {
            writeln!(
                out,
                "  {:.3} s  moved by a planned {} to {} with no hold: downtime {}, {} replayed",
                m.at_s,
                m.fault.map_or("drain".into(), |f| f.to_string()),
                m.to.as_deref().unwrap_or("?"),
                ms(m.downtime_ms),
                count(m.replayed)
            )?;
        }
        if self.holds.is_empty() {
            writeln!(out, "  never held")?;
            return Ok(());
        }
        let mut rows = Vec::new();
        for h in &self.holds {
            let decided = match h.decided_at_s {
                Some(d) => format!(
                    "+{} ({} votes): path {}",
                    ms((d - h.at_s) * 1e3),
                    h.votes,
                    h.path.map_or("?".into(), |p| p.to_string())
                ),
                None => "never".into(),
            };
            rows.push(vec![
                format!("{:.3} s", h.at_s),
                h.fault.map_or("-".into(), |f| f.to_string()),
                h.cause.clone(),
                h.candidates.join("; "),
                decided,
                h.resumed_on.clone().unwrap_or_else(|| "-".into()),
                if h.resumed_at_s.is_some() {
                    ms(h.downtime_ms)
                } else {
                    "-".into()
                },
                count(h.attempts_while_held + h.attempt_events_while_held),
            ]);
        }
        super::report::table(
            out,
            &[
                "held at",
                "fault",
                "cause",
                "candidates",
                "decided",
                "resumed on",
                "downtime",
                "attempts held",
            ],
            &rows,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ManualReport {
        ManualReport {
            session: "C",
            quorum: 3,
            replicas: 4,
            holds: vec![Hold {
                at_s: 1.0,
                fault: Some(FaultKind::ResetInitiator),
                cause: "device fatal error".into(),
                candidates: vec!["path 0 on soft0 (generation 2)".into()],
                reports: 1,
                votes: 3,
                decided_at_s: Some(1.04),
                path: Some(0),
                device: Some("soft0".into()),
                resumed_at_s: Some(1.05),
                resumed_on: Some("soft0".into()),
                downtime_ms: 50.0,
                ..Hold::default()
            }],
            moves: Vec::new(),
            hits: vec![Hit {
                fault: FaultKind::ResetInitiator,
                window: 0,
                device: "initiator soft0".into(),
                held: true,
                planned: false,
            }],
            resumed_undecided_s: Vec::new(),
            final_state: "established".into(),
            held_at_end: false,
        }
    }

    fn failed(r: &ManualReport) -> Vec<String> {
        r.checks()
            .into_iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn a_clean_log_passes_every_check() {
        assert!(failed(&good()).is_empty(), "{:?}", good().checks());
    }

    #[test]
    fn a_fault_on_cs_device_without_a_hold_fails_c_held() {
        let mut r = good();
        r.hits[0].held = false;
        assert_eq!(failed(&r), ["C held"]);
        let mut r = good();
        r.holds.clear();
        assert!(failed(&r).contains(&"C held".to_string()));
    }

    #[test]
    fn a_planned_drain_of_cs_device_need_not_hold_c() {
        let drain = Hit {
            fault: FaultKind::Drain,
            window: 1,
            device: "initiator soft0".into(),
            held: false,
            planned: true,
        };
        let mut r = good();
        r.hits.push(drain.clone());
        assert!(failed(&r).is_empty(), "{:?}", r.checks());
        // The drain alone: never held, and rightly so.
        let mut r = good();
        r.holds.clear();
        r.hits = vec![drain.clone()];
        assert!(failed(&r).is_empty(), "{:?}", r.checks());
        // The same fault unplanned must hold C.
        let mut r = good();
        r.hits.push(Hit {
            planned: false,
            ..drain
        });
        assert_eq!(failed(&r), ["C held"]);
    }

    #[test]
    fn an_attempt_while_held_fails_its_check() {
        for f in [
            |h: &mut Hold| h.attempts_while_held = 1,
            |h: &mut Hold| h.attempt_events_while_held = 1,
            |h: &mut Hold| h.unflagged_polls = 1,
        ] {
            let mut r = good();
            f(&mut r.holds[0]);
            assert_eq!(failed(&r), ["C no attempt while held"]);
        }
    }

    #[test]
    fn a_resume_without_a_quorum_decision_fails_its_check() {
        let breaks: [fn(&mut ManualReport); 5] = [
            |r| r.resumed_undecided_s.push(2.0),
            |r| r.holds[0].votes = 2,
            |r| r.holds[0].decided_at_s = None,
            |r| r.holds[0].resumed_at_s = Some(1.01),
            |r| r.held_at_end = true,
        ];
        for f in breaks {
            let mut r = good();
            f(&mut r);
            assert_eq!(failed(&r), ["C resumed on decision"]);
        }
    }
}
