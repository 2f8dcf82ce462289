//! The soak's report: what ran, the faults and recoveries, the
//! operations, the exactly-once violations, the process's figures (RSS,
//! live heap, fds, threads) with
//! their slopes against the printed bounds, each session's journal,
//! timers and outputs, the log lines per hour, and the checks that make
//! the exit status. Rendered as text; `--json FILE` writes it whole, the
//! samples included.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use super::driver::{Driver, NodeFigures, OpFigures, Sample};
use super::faults::FaultFigures;
use super::logcount::{self, LogCounts};
use super::process::ProcessFigures;
use super::SoakArgs;

/// The share of the run left out of the slopes (allocator and caches
/// warming up).
pub(super) const WARMUP_SHARE: f64 = 0.2;

/// The least-squares slope of `y` over `x`; `None` with fewer than three
/// points or no spread in `x`.
pub(super) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// One figure of the process over the run, and its slope.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Trend {
    pub(super) unit: &'static str,
    /// At the first sample (before the first epoch).
    pub(super) start: u64,
    /// At the last sample.
    pub(super) end: u64,
    pub(super) min: u64,
    pub(super) max: u64,
    /// Per hour, fitted to the steady samples after the warm-up.
    pub(super) slope_per_hour: Option<f64>,
    /// Samples the slope was fitted to.
    pub(super) fitted: usize,
    /// The bound the slope is compared with (its absolute value).
    pub(super) bound_per_hour: f64,
    /// "flat" (within the bound), "growing", "shrinking", or "unknown"
    /// (too few samples).
    pub(super) verdict: &'static str,
}

impl Trend {
    fn of(
        samples: &[Sample],
        warmup_s: f64,
        unit: &'static str,
        bound: f64,
        f: impl Fn(&ProcessFigures) -> u64,
    ) -> Trend {
        let all: Vec<u64> = samples.iter().map(|s| f(&s.process)).collect();
        let points: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.steady && s.t_s >= warmup_s)
            .map(|s| (s.t_s / 3600.0, f(&s.process) as f64))
            .collect();
        let slope_per_hour = slope(&points);
        let verdict = match slope_per_hour {
            None => "unknown",
            Some(s) if s.abs() <= bound => "flat",
            Some(s) if s > 0.0 => "growing",
            Some(_) => "shrinking",
        };
        Trend {
            unit,
            start: all.first().copied().unwrap_or(0),
            end: all.last().copied().unwrap_or(0),
            min: all.iter().copied().min().unwrap_or(0),
            max: all.iter().copied().max().unwrap_or(0),
            slope_per_hour,
            fitted: points.len(),
            bound_per_hour: bound,
            verdict,
        }
    }

    fn line(&self, name: &str) -> String {
        let slope = match self.slope_per_hour {
            Some(s) => format!("{s:+.1} {}/h", self.unit),
            None => "n/a".to_string(),
        };
        format!(
            "{name:<8} start {} end {} (min {}, max {}) {}; slope {slope} over {} samples, bound ±{} {}/h: {}",
            self.start,
            self.end,
            self.min,
            self.max,
            self.unit,
            self.fitted,
            self.bound_per_hour,
            self.unit,
            self.verdict
        )
    }
}

/// One session's half over the run: its largest figures and its end.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SessionSummary {
    pub(super) session: &'static str,
    pub(super) host: &'static str,
    pub(super) state: String,
    pub(super) journal_ops_max: usize,
    pub(super) journal_bytes_max: usize,
    pub(super) journal_ops_end: usize,
    pub(super) journal_bytes_end: usize,
    pub(super) timers_max: usize,
    pub(super) outputs_waiting_max: usize,
    pub(super) losses: u64,
    pub(super) resumes: u64,
}

/// Recoveries over the run.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Recoveries {
    /// `DeviceLost` events, every session's halves.
    pub(super) device_lost_events: u64,
    /// `Resumed` events, every session's halves.
    pub(super) resumed_events: u64,
    /// The sessions' counters summed: losses and resumes.
    pub(super) losses: u64,
    pub(super) resumes: u64,
    /// Downtime of a resume (from the loss), ms.
    pub(super) downtime_ms_p50: Option<f64>,
    pub(super) downtime_ms_p99: Option<f64>,
    pub(super) downtime_ms_max: Option<f64>,
    pub(super) gave_up: u64,
}

/// The operations over the run.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Ops {
    pub(super) completed: u64,
    pub(super) per_second: f64,
    pub(super) by_kind: BTreeMap<String, OpFigures>,
    pub(super) messages_delivered: u64,
    pub(super) reads_verified: u64,
    /// Completed `Indeterminate` (FETCH_ADDs may be; any other is a
    /// violation too).
    pub(super) indeterminate: u64,
}

/// Log lines over the run.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Logs {
    pub(super) counts: LogCounts,
    /// Lines at `INFO` and above (relinkd's default level) per hour.
    pub(super) info_per_hour: f64,
    /// `DEBUG` lines per hour.
    pub(super) debug_per_hour: f64,
}

/// One check of the exit status.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Check {
    pub(super) name: String,
    pub(super) ok: bool,
    pub(super) detail: String,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Report {
    pub(super) seed: u64,
    pub(super) duration_s: f64,
    pub(super) ran_s: f64,
    pub(super) fault_every_s: f64,
    /// The kinds drawn from (none: `--no-faults`).
    pub(super) fault_kinds: Vec<&'static str>,
    pub(super) epoch_s: f64,
    pub(super) warmup_s: f64,
    pub(super) epochs: u64,
    pub(super) faults: FaultFigures,
    pub(super) recoveries: Recoveries,
    pub(super) ops: Ops,
    pub(super) violations: u64,
    pub(super) violation_list: Vec<String>,
    pub(super) rss_kib: Trend,
    pub(super) peak_rss_kib: u64,
    pub(super) heap_kib: Trend,
    pub(super) fds: Trend,
    pub(super) threads: Trend,
    pub(super) sessions: Vec<SessionSummary>,
    pub(super) nodes_start: Vec<NodeFigures>,
    pub(super) nodes_end: Vec<NodeFigures>,
    pub(super) log: Logs,
    pub(super) checks: Vec<Check>,
    pub(super) passed: bool,
    pub(super) samples: Vec<Sample>,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    Some(sorted[i])
}

impl Report {
    pub(super) fn build(d: &Driver<'_>, args: &SoakArgs) -> Report {
        let ran_s = d.secs();
        let warmup_s = ran_s * WARMUP_SHARE;
        let t = &d.totals;
        let samples = &d.samples;
        let last = samples.last();
        let hours = ran_s / 3600.0;

        let mut sessions: Vec<SessionSummary> = Vec::new();
        for s in samples {
            for f in &s.sessions {
                let i = match sessions
                    .iter()
                    .position(|x| x.session == f.session && x.host == f.host)
                {
                    Some(i) => i,
                    None => {
                        sessions.push(SessionSummary {
                            session: f.session,
                            host: f.host,
                            state: String::new(),
                            journal_ops_max: 0,
                            journal_bytes_max: 0,
                            journal_ops_end: 0,
                            journal_bytes_end: 0,
                            timers_max: 0,
                            outputs_waiting_max: 0,
                            losses: 0,
                            resumes: 0,
                        });
                        sessions.len() - 1
                    }
                };
                let x = &mut sessions[i];
                x.state = f
                    .state
                    .map_or_else(|| "gone".to_string(), |st| st.to_string());
                x.journal_ops_max = x.journal_ops_max.max(f.journal_ops);
                x.journal_bytes_max = x.journal_bytes_max.max(f.journal_bytes);
                x.journal_ops_end = f.journal_ops;
                x.journal_bytes_end = f.journal_bytes;
                x.timers_max = x.timers_max.max(f.timers);
                x.outputs_waiting_max = x.outputs_waiting_max.max(f.outputs_waiting);
                x.losses = f.losses;
                x.resumes = f.resumes;
            }
        }

        let mut downtimes = t.downtimes_ms.clone();
        downtimes.sort_by(f64::total_cmp);
        let recoveries = Recoveries {
            device_lost_events: t.device_lost_events,
            resumed_events: t.resumed_events,
            losses: sessions.iter().map(|s| s.losses).sum(),
            resumes: sessions.iter().map(|s| s.resumes).sum(),
            downtime_ms_p50: percentile(&downtimes, 0.5),
            downtime_ms_p99: percentile(&downtimes, 0.99),
            downtime_ms_max: downtimes.last().copied(),
            gave_up: t.gave_up,
        };
        let completed = t.completed();
        let ops = Ops {
            completed,
            per_second: completed as f64 / ran_s.max(1e-9),
            by_kind: t.ops.clone(),
            messages_delivered: t.messages_delivered,
            reads_verified: t.reads_verified,
            indeterminate: t.ops.values().map(|o| o.indeterminate).sum(),
        };
        let log_counts = logcount::counts();
        let log = Logs {
            counts: log_counts,
            info_per_hour: log_counts.info_and_above() as f64 / hours.max(1e-9),
            debug_per_hour: log_counts.debug as f64 / hours.max(1e-9),
        };

        let faults = d.faults.figures.clone();
        let mut checks = vec![Check {
            name: "exactly once".into(),
            ok: t.violations == 0,
            detail: format!(
                "{} violations over {} epochs ({} operations, {} messages delivered, {} READs verified)",
                t.violations, t.epochs, completed, t.messages_delivered, t.reads_verified
            ),
        }];
        if !args.faults.is_empty() {
            checks.push(Check {
                name: "faults injected".into(),
                ok: faults.injected > 0 && faults.errors.is_empty(),
                detail: format!(
                    "{} faults, {} refused by the registry{}",
                    faults.injected,
                    faults.errors.len(),
                    faults
                        .errors
                        .first()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ),
            });
        }
        let unrecovered: Vec<String> = sessions
            .iter()
            .filter(|s| s.state != relink::State::Established.to_string() || s.losses != s.resumes)
            .map(|s| {
                format!(
                    "{} on the {}: {} after {} losses, {} resumes",
                    s.session, s.host, s.state, s.losses, s.resumes
                )
            })
            .collect();
        let recovered_ok = unrecovered.is_empty()
            && t.stuck.is_none()
            && t.gave_up == 0
            && (faults.injected == 0 || recoveries.resumed_events > 0);
        checks.push(Check {
            name: "every loss recovered".into(),
            ok: recovered_ok,
            detail: if recovered_ok {
                format!(
                    "{} losses, {} resumes; every session established at the end",
                    recoveries.losses, recoveries.resumes
                )
            } else {
                let mut why = unrecovered;
                why.extend(t.stuck.clone());
                if t.gave_up > 0 {
                    why.push(format!("{} gave up", t.gave_up));
                }
                if why.is_empty() {
                    why.push("faults injected but no session resumed".into());
                }
                why.join("; ")
            },
        });
        checks.push(Check {
            name: "operations".into(),
            ok: completed > 0 && t.epochs > 0,
            detail: format!(
                "{completed} operations completed in {} checked epochs",
                t.epochs
            ),
        });
        let passed = checks.iter().all(|c| c.ok);

        Report {
            seed: args.seed,
            duration_s: args.duration.as_secs_f64(),
            ran_s,
            fault_every_s: args.fault_every.as_secs_f64(),
            fault_kinds: args.faults.iter().map(|k| k.name()).collect(),
            epoch_s: args.epoch.as_secs_f64(),
            warmup_s,
            epochs: t.epochs,
            faults,
            recoveries,
            ops,
            violations: t.violations,
            violation_list: t.violation_list.clone(),
            rss_kib: Trend::of(samples, warmup_s, "KiB", args.rss_bound, |p| p.rss_kib),
            peak_rss_kib: last.map_or(0, |s| s.process.peak_rss_kib),
            heap_kib: Trend::of(samples, warmup_s, "KiB", args.rss_bound, |p| p.heap_kib),
            fds: Trend::of(samples, warmup_s, "fds", args.fd_bound, |p| p.fds),
            threads: Trend::of(samples, warmup_s, "threads", args.fd_bound, |p| p.threads),
            sessions,
            nodes_start: samples
                .first()
                .map(|s| s.nodes.to_vec())
                .unwrap_or_default(),
            nodes_end: last.map(|s| s.nodes.to_vec()).unwrap_or_default(),
            log,
            checks,
            passed,
            samples: samples.clone(),
        }
    }

    /// The report as text.
    pub(super) fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out)?;
        writeln!(
            out,
            "==================== relink soak report ===================="
        )?;
        let faults = if self.fault_kinds.is_empty() {
            "no faults".to_string()
        } else {
            format!(
                "a fault every {:.1} s on average ({})",
                self.fault_every_s,
                self.fault_kinds.join(", ")
            )
        };
        writeln!(
            out,
            "ran {:.0} s of {:.0} s, seed {}, {faults}, {} epochs of {:.0} s; slopes after a warm-up of {:.0} s",
            self.ran_s, self.duration_s, self.seed, self.epochs, self.epoch_s, self.warmup_s
        )?;
        let f = &self.faults;
        let by = |m: &BTreeMap<&str, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if f.injected == 0 {
            writeln!(out, "faults     0")?;
        } else {
            writeln!(
                out,
                "faults     {} ({}; {})",
                f.injected,
                by(&f.by_kind),
                by(&f.by_host)
            )?;
        }
        let r = &self.recoveries;
        let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0} ms"));
        writeln!(
            out,
            "recoveries {} resumes after {} losses (every session's halves); downtime p50 {}, p99 {}, max {}",
            r.resumes,
            r.losses,
            ms(r.downtime_ms_p50),
            ms(r.downtime_ms_p99),
            ms(r.downtime_ms_max)
        )?;
        let o = &self.ops;
        writeln!(
            out,
            "operations {} completed ({:.0}/s): {}; {} messages delivered, {} READs verified, {} indeterminate",
            o.completed,
            o.per_second,
            o.by_kind
                .iter()
                .map(|(k, v)| format!("{k} {}", v.success + v.indeterminate + v.failed))
                .collect::<Vec<_>>()
                .join(", "),
            o.messages_delivered,
            o.reads_verified,
            o.indeterminate
        )?;
        writeln!(out, "violations {}", self.violations)?;
        for v in &self.violation_list {
            writeln!(out, "  {v}")?;
        }
        writeln!(out, "{}", self.rss_kib.line("RSS"))?;
        writeln!(out, "         peak {} KiB", self.peak_rss_kib)?;
        writeln!(out, "{}", self.heap_kib.line("heap"))?;
        writeln!(out, "{}", self.fds.line("fds"))?;
        writeln!(out, "{}", self.threads.line("threads"))?;
        writeln!(
            out,
            "log        {} lines at info and above ({:.0}/h: {} error, {} warn, {} info), {} debug ({:.0}/h)",
            self.log.counts.info_and_above(),
            self.log.info_per_hour,
            self.log.counts.error,
            self.log.counts.warn,
            self.log.counts.info,
            self.log.counts.debug,
            self.log.debug_per_hour
        )?;
        writeln!(
            out,
            "sessions   (journal ops and bytes: max over the samples / at the end; timers armed max; outputs waiting max)"
        )?;
        for s in &self.sessions {
            writeln!(
                out,
                "  {} {:<9} {:<11} journal {}/{} ops, {}/{} B; timers {}; outputs {}; losses {}, resumes {}",
                s.session,
                s.host,
                s.state,
                s.journal_ops_max,
                s.journal_ops_end,
                s.journal_bytes_max,
                s.journal_bytes_end,
                s.timers_max,
                s.outputs_waiting_max,
                s.losses,
                s.resumes
            )?;
        }
        for (start, end) in self.nodes_start.iter().zip(&self.nodes_end) {
            writeln!(
                out,
                "  node {:<9} sessions {} -> {}, CM ids {} -> {}, closing {} -> {}, session memory {} -> {} B, provider objects {} -> {}",
                start.host,
                start.sessions,
                end.sessions,
                start.cm_ids,
                end.cm_ids,
                start.closing,
                end.closing,
                start.session_memory_bytes,
                end.session_memory_bytes,
                start.provider_objects,
                end.provider_objects
            )?;
        }
        writeln!(out, "checks")?;
        for c in &self.checks {
            writeln!(
                out,
                "  [{}] {}: {}",
                if c.ok { "ok" } else { "FAILED" },
                c.name,
                c.detail
            )?;
        }
        writeln!(
            out,
            "{}",
            if self.passed {
                "soak passed"
            } else {
                "soak FAILED"
            }
        )
    }
}

/// The progress line: the last sample's figures.
pub(super) fn progress(d: &Driver<'_>) -> String {
    let Some(s) = d.samples.last() else {
        return String::new();
    };
    let journal: Vec<String> = s
        .sessions
        .iter()
        .map(|f| {
            format!(
                "{}/{} {}op {}B t{}",
                f.session,
                &f.host[..1],
                f.journal_ops,
                f.journal_bytes,
                f.timers
            )
        })
        .collect();
    format!(
        "rss {} KiB, heap {} KiB, fds {}, threads {} | faults {}, resumes {} | ops {} | violations {} | log {} (info+) | {}",
        s.process.rss_kib,
        s.process.heap_kib,
        s.process.fds,
        s.process.threads,
        s.faults,
        s.resumed_events,
        s.ops,
        s.violations,
        s.log.info_and_above(),
        journal.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_too_few_points() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 1.0)).collect();
        assert!((slope(&pts).unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(slope(&pts[..2]), None);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
    }
}
