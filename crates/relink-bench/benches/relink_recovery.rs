//! Recovery latency and scale of relink sessions on the in-process soft
//! fabric, on virtual and wall-clock time:
//!
//! - 100 cycles of unplugging the initiator's device for 1 ms of virtual
//!   time and plugging it back, timed from the re-plug to the `Resumed`
//!   event and to the completions of a message and a write submitted during
//!   the outage;
//! - 100 cycles of resetting the target's device, timed from the reset;
//!   and 100 more in which the target's node is not polled for 100 µs after
//!   the reset, so that the initiator's first attempt finds no listener;
//! - 1,000 sessions from one node to another, one device each side, and one
//!   reset of the initiator's device: the time until all resumed.
//!
//! ```text
//! cargo bench -p relink-bench --bench relink_recovery            # measure
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench relink_recovery   # smoke run
//! ```
//!
//! Prints tables and writes `target/relink-bench/relink_recovery.json`.
//! Run without `--bench` (as `cargo test --benches` does) it makes a quick
//! run.

use std::time::{Duration, Instant};

use relink_bench::recovery::{scale, CycleSummary, Dist, FaultPlan, RecoveryBench, ScaleResult};
use relink_bench::report::{text_table, write_report_or_exit, Machine};
use relink_bench::{quick_from_env, selected};
use serde::Serialize;

/// The JSON report.
#[derive(Debug, Serialize)]
struct RecoveryReport {
    bench: &'static str,
    quick: bool,
    machine: Machine,
    cycles: Vec<CycleSummary>,
    scale: Vec<ScaleResult>,
}

fn dist_cells(d: &Dist, unit_ms: bool) -> [String; 3] {
    let f = |v: f64| {
        if unit_ms {
            format!("{:.3}", v / 1e3)
        } else {
            format!("{v:.1}")
        }
    };
    [f(d.p50), f(d.p99), f(d.max)]
}

fn cycle_table(cycles: &[CycleSummary]) -> String {
    let mut rows = Vec::new();
    for c in cycles {
        let lines: [(&str, &Dist, &Dist); 3] = [
            ("Resumed event", &c.resumed_virt_us, &c.resumed_wall_us),
            ("first completion", &c.first_virt_us, &c.first_wall_us),
            ("last completion", &c.all_virt_us, &c.all_wall_us),
        ];
        for (what, v, w) in lines {
            let mut row = vec![c.fault.clone(), c.cycles.to_string(), what.to_string()];
            row.extend(dist_cells(v, true));
            row.extend(dist_cells(w, true));
            rows.push(row);
        }
        rows.push(vec![
            c.fault.clone(),
            c.cycles.to_string(),
            format!(
                "attempts/cycle {:.0}-{:.0}, reported downtime p50 {:.3} ms",
                c.attempts.min,
                c.attempts.max,
                c.downtime_us.p50 / 1e3
            ),
        ]);
    }
    let mut out = text_table(
        &[
            "fault", "cycles", "until", "virt p50", "virt p99", "virt max", "wall p50", "wall p99",
            "wall max",
        ],
        &rows,
        &[0, 2],
    );
    out.push_str(
        "milliseconds from the device's return (re-plug, or the reset itself) on virtual time \
         (the simulated world) and wall-clock time (this process computing it)\n",
    );
    out
}

fn scale_table(results: &[ScaleResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.sessions.to_string(),
                if r.quantum_us == 0.0 {
                    "event".into()
                } else {
                    format!("{} us", r.quantum_us)
                },
                format!("{:.2}", r.setup_wall_s),
                format!("{:.1}", r.idle_poll_us),
                format!("{:.3}", r.first_resumed_virt_ms),
                format!("{:.3}", r.median_resumed_virt_ms),
                format!("{:.3}", r.all_resumed_virt_ms),
                format!("{:.1}", r.median_resumed_wall_ms),
                format!("{:.1}", r.all_resumed_wall_ms),
                r.attempts.to_string(),
                r.settles.to_string(),
            ]
        })
        .collect();
    let mut out = text_table(
        &[
            "sessions",
            "driver",
            "setup s",
            "idle poll us",
            "first virt ms",
            "half virt ms",
            "all virt ms",
            "half wall ms",
            "all wall ms",
            "attempts",
            "settles",
        ],
        &rows,
        &[1],
    );
    out.push_str(
        "one reset of the initiator's device; times from the reset until the first, half, and \
         all sessions sent Resumed; driver: polls both nodes after every event, or after every \
         microsecond of virtual time; setup: wall-clock seconds to connect them all; idle poll: \
         wall-clock microseconds of one Node::poll with nothing to do; settles: rounds of \
         polling both nodes until idle, from the reset to the last Resumed\n",
    );
    out
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let (cycles, sessions) = if quick { (10, 100) } else { (100, 1000) };
    eprintln!(
        "relink_recovery: measuring{}",
        if quick { " (quick)" } else { "" }
    );

    let mut summaries = Vec::new();
    let faults = [
        FaultPlan::InitiatorUnplug {
            outage: Duration::from_millis(1),
        },
        FaultPlan::TargetReset,
        FaultPlan::TargetResetPaused {
            pause: Duration::from_micros(100),
        },
    ];
    for (i, fault) in faults.into_iter().enumerate() {
        if !selected(&fault.name()) {
            continue;
        }
        let t = Instant::now();
        let mut b = RecoveryBench::new(100 + i as u64);
        summaries.push(b.cycles(fault, cycles));
        eprintln!(
            "  {}: {cycles} cycles in {:.1} s",
            fault.name(),
            t.elapsed().as_secs_f64()
        );
    }
    let mut results = Vec::new();
    for quantum in [Duration::ZERO, Duration::from_micros(1)] {
        let name = format!("scale-q{}us", quantum.as_micros());
        if !selected(&name) {
            continue;
        }
        let t = Instant::now();
        results.push(scale(sessions, 200, quantum));
        eprintln!(
            "  {name}: {sessions} sessions in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }

    println!(
        "relink_recovery{}: in-process soft fabric",
        if quick {
            " (QUICK: proves it runs, measures nothing)"
        } else {
            ""
        }
    );
    print!("{}", cycle_table(&summaries));
    print!("{}", scale_table(&results));
    let report = RecoveryReport {
        bench: "relink_recovery",
        quick,
        machine: Machine::current(),
        cycles: summaries,
        scale: results,
    };
    write_report_or_exit(report.bench, &report);
}
