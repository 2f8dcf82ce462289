//! The end: the `--sabotage` self-test, the end-to-end verification (the
//! workload's checks, session C's manual recovery, the planned drain,
//! fault outcomes, final states, problems) and the assembly of the
//! [`Report`].

use std::time::Duration;

use relink::{OpError, State};
use relink_sim::workload::{self, secs, Check};

use super::driver::{Driver, NAMES};
use super::faults::{FaultKind, Side};
use super::report::{FaultRow, Report, SessionSummary, Throughput};

/// Width of a throughput bucket.
const BUCKET: Duration = Duration::from_millis(20);

impl Driver<'_> {
    /// Flip a byte in the middle of the target's region (`--sabotage`).
    pub(super) fn sabotage(&mut self) -> anyhow::Result<()> {
        let mem = self
            .target_data
            .clone()
            .ok_or_else(|| anyhow::anyhow!("the target's region is gone"))?;
        let off = (workload::BLOCK * workload::BLOCKS / 2 + 17) as usize;
        let b = mem.read_vec(off, 1)?;
        mem.write(off, &[b[0] ^ 0x5a])?;
        self.say("--sabotage: flipped one byte of the target's region")?;
        Ok(())
    }

    pub(super) fn finish(mut self, duration: Duration) -> anyhow::Result<Report> {
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
        let target_region = self.target_data.clone();
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
        // Session C: held, no attempt while held, resumed on the
        // application's decision, messages, completions.
        let (manual, c_checks, c_summary) = self.c_finish();
        checks.extend(c_checks);
        // The planned drain: moves, no replay, no Indeterminate, no loss,
        // C not held.
        let drain = self.planned.as_ref().map(|d| d.log.clone());
        if let Some(d) = &drain {
            checks.extend(d.checks());
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
        let fa = self.state_of(0, Side::Initiator);
        let fb = self.state_of(1, Side::Initiator);
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
        for s in self.streams.iter().chain([&self.c.stream]) {
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
        for (i, name) in NAMES.into_iter().enumerate() {
            let final_state = self
                .state_of(i, Side::Initiator)
                .map_or("gone".into(), |x| x.to_string());
            let ci = self.counters_of(i, Side::Initiator);
            let target_state = self
                .state_of(i, Side::Target)
                .map_or("gone".into(), |x| x.to_string());
            let ct = self.counters_of(i, Side::Target);
            sessions.push(SessionSummary {
                session: name,
                final_state,
                target_state,
                ops: self.streams[i].tally.clone(),
                initiator: ci.into(),
                target: ct.into(),
            });
        }
        sessions.push(c_summary);

        // Throughput.
        let end = self.sim.now();
        let n = (end.saturating_since(self.t0).as_nanos() / BUCKET.as_nanos()) as usize + 1;
        let mut series = [vec![0u64; n], vec![0u64; n], vec![0u64; n]];
        for (i, s) in self.streams.iter().chain([&self.c.stream]).enumerate() {
            for t in &s.completions_at {
                let k = (t.saturating_since(self.t0).as_nanos() / BUCKET.as_nanos()) as usize;
                series[i][k.min(n - 1)] += 1;
            }
        }
        let [sa, sb, sc] = series;
        Ok(Report {
            seed: self.seed,
            duration_s: duration.as_secs_f64(),
            passed: failed_checks.is_empty(),
            failed_checks,
            faults: rows,
            checks,
            manual,
            drain,
            sessions,
            problems,
            throughput: Throughput {
                bucket_s: BUCKET.as_secs_f64(),
                a: sa,
                b: sb,
                c: sc,
                markers: self.markers.clone(),
            },
            virtual_time_s: secs(end),
            wall_time_s: 0.0,
            digest: format!("{:016x}", self.sim.fabric().digest()),
            svg: None,
        })
    }
}
