//! The end: the `--sabotage` self-test, the end-to-end verification (the
//! workload's checks, fault outcomes, final states, problems) and the
//! assembly of the [`Report`].

use std::time::Duration;

use relink::{OpError, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::workload::{self, secs, Check};

use super::driver::{Driver, NAMES};
use super::faults::FaultKind;
use super::report::{FaultRow, Report, SessionSummary, Throughput};

/// Width of a throughput bucket.
const BUCKET: Duration = Duration::from_millis(20);

impl Driver<'_> {
    /// Flip a byte in the middle of the target's region (`--sabotage`).
    pub(super) fn sabotage(&mut self) -> anyhow::Result<()> {
        let h = self.streams[0].target_session();
        let mem = self.sim.node(TARGET).region(h, workload::TARGET_DATA)?;
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
