//! The demo's report: what each fault did to sessions A and B (A's stall
//! among it), session C's holds and decisions, the planned drain, the
//! end-to-end checks, counters and the throughput timeline; rendered as a
//! text table or serialized as JSON.

use std::collections::BTreeMap;
use std::io::{self, Write};

use relink::Counters;
use serde::Serialize;

use super::drain_report::DrainLog;
use super::faults::{Expect, FaultKind};
use super::manual_report::ManualReport;
use relink_sim::workload::{Check, Class, Problem, Tally};

/// Everything the demo found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The seed (the same seed replays the same run).
    pub seed: u64,
    /// Virtual seconds of workload.
    pub duration_s: f64,
    /// Whether every check passed.
    pub passed: bool,
    /// Names of the checks that failed.
    pub failed_checks: Vec<String>,
    /// Per fault: what it did to each session.
    pub faults: Vec<FaultRow>,
    /// End-to-end checks.
    pub checks: Vec<Check>,
    /// Session C's manual recovery: each hold and the application's
    /// decision.
    pub manual: ManualReport,
    /// The planned drain, if the schedule has one.
    pub drain: Option<DrainLog>,
    /// Per session: final state, outcomes and counters.
    pub sessions: Vec<SessionSummary>,
    /// Problems seen while running (each also fails a check).
    pub problems: Vec<Problem>,
    /// Successful completions per bucket of virtual time.
    pub throughput: Throughput,
    /// Virtual seconds the whole run took (setup and drain included).
    pub virtual_time_s: f64,
    /// Wall-clock seconds the whole run took (differs between equal runs).
    pub wall_time_s: f64,
    /// Digest of everything the fabric dispatched: equal for equal runs.
    pub digest: String,
    /// Where the SVG timeline was written.
    pub svg: Option<String>,
}

/// One fault's row of the report.
#[derive(Debug, Serialize)]
pub struct FaultRow {
    /// The fault played.
    pub fault: FaultKind,
    /// Virtual seconds from the start of the workload.
    pub at_s: f64,
    /// The device it hit (`initiator soft0`), or what it did.
    pub hit: String,
    /// What the fault does, in one sentence (as printed when it started).
    pub description: String,
    /// Its effect on A and B.
    pub sessions: Vec<Impact>,
    /// Every session came through as expected.
    pub ok: bool,
}

/// What a fault did to one session (from its `SessionEvent`s and counters
/// within the fault's window: from its start to the next fault).
#[derive(Debug, Clone, Serialize)]
pub struct Impact {
    /// "A" or "B".
    pub session: &'static str,
    /// What the fault did to the session, classified from its window.
    pub outcome: Expect,
    /// What was allowed.
    pub expected: Vec<Expect>,
    /// Whether `outcome` is one of `expected`.
    pub ok: bool,
    /// Transport losses (initiator side).
    pub losses: u64,
    /// `Resumed` events (initiator side).
    pub resumes: u64,
    /// Sum of the `Resumed` events' downtimes.
    pub downtime_ms: f64,
    /// Longest single downtime among those `Resumed` events.
    pub max_downtime_ms: f64,
    /// Operations replayed by the initiator.
    pub replayed: u64,
    /// A only, when the fault hit its device and it resumed: the longest
    /// gap between its successful completions from the fault's start to
    /// its first completion after its first resume, in milliseconds.
    pub stall_ms: Option<f64>,
    /// Duplicate messages the target dropped.
    pub deduplicated: u64,
    /// The initiator's device before the fault.
    pub device_before: Option<String>,
    /// The initiator's device after it.
    pub device_after: Option<String>,
    /// Anything worth saying (GUID change, operations failed, ...).
    pub note: String,
}

/// A session at the end.
#[derive(Debug, Serialize)]
pub struct SessionSummary {
    /// "A", "B" or "C".
    pub session: &'static str,
    /// The initiator's session state at the end (`gone` if the node no longer
    /// knows it).
    pub final_state: String,
    /// The target's session state at the end (`gone` if the node no longer
    /// knows it).
    pub target_state: String,
    /// Outcomes per operation kind.
    pub ops: BTreeMap<Class, Tally>,
    /// The initiator's counters.
    pub initiator: CountersOut,
    /// The target's counters.
    pub target: CountersOut,
}

/// [`Counters`], serializable.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CountersOut {
    /// Transport losses.
    pub losses: u64,
    /// Reconnection attempts.
    pub attempts: u64,
    /// Successful resumes.
    pub resumes: u64,
    /// Operations replayed.
    pub replayed: u64,
    /// Duplicate messages dropped.
    pub deduplicated: u64,
    /// Buffer advertisements sent.
    pub adverts_sent: u64,
    /// Time without a transport, in milliseconds of virtual time.
    pub downtime_ms: f64,
    /// Messages delivered to the application.
    pub delivered: u64,
}

impl From<Counters> for CountersOut {
    fn from(c: Counters) -> CountersOut {
        CountersOut {
            losses: c.losses,
            attempts: c.attempts,
            resumes: c.resumes,
            replayed: c.replayed,
            deduplicated: c.deduplicated,
            adverts_sent: c.adverts_sent,
            downtime_ms: c.downtime_ns as f64 / 1e6,
            delivered: c.delivered,
        }
    }
}

/// Successful completions per bucket.
#[derive(Debug, Serialize)]
pub struct Throughput {
    /// Bucket width, virtual seconds.
    pub bucket_s: f64,
    /// Session A's successful completions per bucket, from the start of
    /// the workload to the end of the run.
    pub a: Vec<u64>,
    /// Session B's, the same buckets.
    pub b: Vec<u64>,
    /// Session C's, the same buckets.
    pub c: Vec<u64>,
    /// Fault steps, to mark on the timeline.
    pub markers: Vec<Marker>,
}

/// A vertical line on the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Marker {
    /// Virtual seconds from the start of the workload.
    pub at_s: f64,
    /// The text on the line: the fault's name at its start, `fault: step
    /// device` at a later step, `A gave up` for an event.
    pub label: String,
    /// A longer description (a tooltip in the SVG).
    pub detail: String,
    /// What it marks.
    pub kind: MarkerKind,
}

/// What a [`Marker`] marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkerKind {
    /// A fault's start (labelled).
    Fault,
    /// A later step of a fault (re-plug, ...).
    Step,
    /// A session gave up or closed.
    Event,
}

/// Milliseconds, readably.
pub fn ms(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 1000.0 {
        format!("{v:.1} ms")
    } else {
        format!("{:.2} s", v / 1e3)
    }
}

/// A stall (given in milliseconds): microseconds under a millisecond.
pub fn stall(v: f64) -> String {
    if v > 0.0 && v < 1.0 {
        format!("{:.0} µs", v * 1e3)
    } else {
        ms(v)
    }
}

/// Thousands separated by spaces.
pub fn count(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

pub(super) fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        s.trim_end().to_string()
    };
    let h: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    writeln!(out, "{}", line(&h))?;
    let rule: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
    writeln!(out, "{}", line(&rule))?;
    for r in rows {
        writeln!(out, "{}", line(r))?;
    }
    Ok(())
}

impl Report {
    /// A's stall in the planned drain next to the unplanned failover's
    /// (each when the schedule has it).
    fn render_stalls(&self, out: &mut dyn Write) -> io::Result<()> {
        let a = |kind: FaultKind| {
            self.faults
                .iter()
                .filter(|f| f.fault == kind)
                .flat_map(|f| &f.sessions)
                .find(|s| s.session == "A")
        };
        let mut parts = Vec::new();
        for (kind, what) in [
            (FaultKind::Drain, "planned drain"),
            (FaultKind::Failover, "unplanned failover"),
        ] {
            if let Some((v, s)) = a(kind).and_then(|s| Some((s.stall_ms?, s))) {
                parts.push(format!(
                    "{what} {} ({} replayed)",
                    stall(v),
                    count(s.replayed)
                ));
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "  A's stall (the longest gap between its successful completions, from the fault to its first completion after its resume): {}",
            parts.join(", ")
        )
    }

    /// The human-readable report: fault table and A's stalls, session C's
    /// holds, the planned drain, checks, summary.
    pub fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out)?;
        writeln!(
            out,
            "Faults (virtual time from the start of the workload; downtime and replays from the Resumed events)"
        )?;
        let mut rows = Vec::new();
        for f in &self.faults {
            for (i, s) in f.sessions.iter().enumerate() {
                let first = i == 0;
                let device = match (&s.device_before, &s.device_after) {
                    (Some(a), Some(b)) if a != b => format!("{a} -> {b}"),
                    (_, Some(b)) => b.clone(),
                    (Some(a), None) => format!("{a} -> none"),
                    (None, None) => "-".into(),
                };
                let downtime = if s.resumes == 0 {
                    "-".to_string()
                } else if s.resumes == 1 {
                    ms(s.downtime_ms)
                } else {
                    format!(
                        "{} ({}x, max {})",
                        ms(s.downtime_ms),
                        s.resumes,
                        ms(s.max_downtime_ms)
                    )
                };
                let verdict = if s.ok {
                    "ok".to_string()
                } else {
                    format!(
                        "FAIL: expected {}",
                        s.expected
                            .iter()
                            .map(|e| e.text())
                            .collect::<Vec<_>>()
                            .join(" or ")
                    )
                };
                rows.push(vec![
                    if first {
                        format!("{:.2} s", f.at_s)
                    } else {
                        String::new()
                    },
                    if first {
                        f.fault.to_string()
                    } else {
                        String::new()
                    },
                    if first { f.hit.clone() } else { String::new() },
                    s.session.to_string(),
                    s.outcome.text().to_string(),
                    downtime,
                    s.stall_ms.map_or("-".into(), stall),
                    if s.resumes == 0 {
                        "-".into()
                    } else {
                        count(s.replayed)
                    },
                    if s.resumes == 0 {
                        "-".into()
                    } else {
                        count(s.deduplicated)
                    },
                    device,
                    verdict,
                    s.note.clone(),
                ]);
            }
        }
        table(
            out,
            &[
                "at",
                "fault",
                "hit",
                "sess",
                "outcome",
                "downtime",
                "stall",
                "replayed",
                "dedup",
                "initiator device",
                "check",
                "note",
            ],
            &rows,
        )?;
        self.render_stalls(out)?;

        self.manual.render(out)?;
        if let Some(d) = &self.drain {
            d.render(out)?;
        }

        writeln!(out)?;
        writeln!(out, "Sessions")?;
        let mut rows = Vec::new();
        for s in &self.sessions {
            let mut ops = Vec::new();
            for (class, t) in &s.ops {
                ops.push(format!("{} {}", count(t.submitted), class.plural()));
            }
            rows.push(vec![
                s.session.to_string(),
                format!("{} / {}", s.final_state, s.target_state),
                ops.join(", "),
                count(s.initiator.losses),
                count(s.initiator.resumes),
                count(s.initiator.replayed),
                count(s.target.deduplicated),
                ms(s.initiator.downtime_ms),
            ]);
        }
        table(
            out,
            &[
                "sess",
                "state (initiator / target)",
                "operations",
                "losses",
                "resumes",
                "replayed",
                "dedup",
                "total downtime",
            ],
            &rows,
        )?;

        writeln!(out)?;
        writeln!(out, "End-to-end verification")?;
        for c in &self.checks {
            writeln!(
                out,
                "  [{}] {:<24} {}",
                if c.ok { " ok " } else { "FAIL" },
                c.name,
                c.detail
            )?;
        }
        if !self.problems.is_empty() {
            writeln!(out)?;
            writeln!(out, "Problems ({}):", self.problems.len())?;
            for p in self.problems.iter().take(20) {
                writeln!(out, "  {:>8.4} s  {}", p.at, p.what)?;
            }
            if self.problems.len() > 20 {
                writeln!(
                    out,
                    "  ... and {} more (see --json)",
                    self.problems.len() - 20
                )?;
            }
        }
        writeln!(out)?;
        if let Some(svg) = &self.svg {
            writeln!(out, "Timeline: {svg}")?;
        }
        writeln!(
            out,
            "Run: seed {}, {:.1} s of virtual time in {:.2} s of wall time, digest {}",
            self.seed, self.virtual_time_s, self.wall_time_s, self.digest
        )?;
        if self.passed {
            writeln!(out, "Result: PASS, all {} checks held", self.checks.len())?;
        } else {
            writeln!(
                out,
                "Result: FAIL, {} of {} checks failed: {}",
                self.failed_checks.len(),
                self.checks.len(),
                self.failed_checks.join(", ")
            )?;
        }
        Ok(())
    }
}
