//! The stall an application sees when its session leaves a device, on the
//! in-process soft fabric: a planned drain (`Node::drain`, then the device
//! removed with nothing on it) next to an unplanned failover (the device
//! removed under the session), without and with a standby connection
//! (`Policy::standby`), in the same run, on virtual and wall-clock time,
//! with the replays and `Indeterminate` outcomes each leaves the
//! application, and the stall in raw round trips of the fabric (see
//! `relink_bench::drain`).
//!
//! ```text
//! cargo bench -p relink-bench --bench relink_drain            # measure
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench relink_drain   # smoke run
//! ```
//!
//! Prints a table and writes `target/relink-bench/relink_drain.json`.

use relink_bench::drain::{DrainBench, Leave, LeaveSummary};
use relink_bench::report::{text_table, write_report_or_exit, Machine};
use relink_bench::{quick_from_env, selected};
use serde::Serialize;

/// The JSON report.
#[derive(Debug, Serialize)]
struct DrainReport {
    bench: &'static str,
    quick: bool,
    machine: Machine,
    series: Vec<LeaveSummary>,
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let cycles = if quick { 5 } else { 100 };
    eprintln!(
        "relink_drain: measuring{}",
        if quick { " (quick)" } else { "" }
    );
    let mut series = Vec::new();
    let all = [Leave::Drain, Leave::Failover, Leave::StandbyFailover];
    for (i, how) in all.into_iter().enumerate() {
        if !selected(how.name()) {
            continue;
        }
        let mut b = DrainBench::new(300 + i as u64, how);
        series.push(b.cycles(how, cycles));
    }
    let rows: Vec<Vec<String>> = series
        .iter()
        .map(|s| {
            vec![
                s.series.to_string(),
                s.cycles.to_string(),
                format!(
                    "{:.2} / {:.1}",
                    s.steady_gap_virt_us, s.steady_longest_virt_us
                ),
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    s.stall_virt_us.p50, s.stall_virt_us.p99, s.stall_virt_us.max
                ),
                format!("{:.1}", s.stall_p50_rtts),
                format!("{:.1}", s.established_virt_us.p50),
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    s.stall_wall_us.p50, s.stall_wall_us.p99, s.stall_wall_us.max
                ),
                s.replayed.to_string(),
                s.indeterminate.to_string(),
                s.failed.to_string(),
                s.attempts.to_string(),
                s.failovers.to_string(),
            ]
        })
        .collect();
    println!(
        "relink_drain{}: in-process soft fabric, 16 operations in flight (64 B messages, FETCH_ADDs)",
        if quick { " (QUICK: proves it runs, measures nothing)" } else { "" }
    );
    print!(
        "{}",
        text_table(
            &[
                "series",
                "cycles",
                "steady gap virt us mean/max",
                "stall virt us p50/p99/max",
                "stall p50 / RTT",
                "to established virt us p50",
                "stall wall us p50/p99/max",
                "replayed",
                "indeterminate",
                "failed",
                "attempts",
                "standby failovers",
            ],
            &rows,
            &[0],
        )
    );
    println!(
        "stall: the longest gap between consecutive completions from the event (the drain call, \
         the removal) until 200 completions on the other device, counting successes only; steady \
         gap: the mean and longest gap with no event; RTT: a raw round trip, the fabric's one-way \
         latency x 2 = {:.1} us virtual",
        relink_bench::drain::rtt()
    );
    let report = DrainReport {
        bench: "relink_drain",
        quick,
        machine: Machine::current(),
        series,
    };
    write_report_or_exit(report.bench, &report);
}
