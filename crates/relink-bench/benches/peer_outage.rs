//! A peer-side outage across two processes on the TCP soft fabric: the
//! target's device removed and added back after D (0.1 s, 0.5 s, 2 s), N
//! cycles each, steady traffic on one session
//! ([`relink_bench::peer_outage`]); for each policy, the stall past the
//! device's return (the longest gap between completions minus D) and the
//! connection requests sent to the absent peer per second of outage, with
//! one session and with eight (the node lets one of them probe).
//!
//! ```text
//! cargo bench -p relink-bench --bench peer_outage                       # 0.1, 0.5, 2 s; 5 cycles each
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench peer_outage  # 0.5 s; 2 cycles
//! RELINK_BENCH_ONLY=no-probe cargo bench -p relink-bench --bench peer_outage
//! ```
//!
//! Series: `no-probe` (the default policy without probes: the backoff from
//! 20 ms and attempt timeouts from 500 ms, both doubling; the schedule
//! before probes) and `default`, each with 1 and 8 sessions
//! (`no-probe-x8`, `default-x8`). Prints a table and `RESULT peer_outage ...` lines;
//! writes `target/relink-bench/peer_outage.json`. Run without `--bench`
//! (as `cargo test --benches` does) it makes a quick run.

use std::path::PathBuf;
use std::time::Duration;

use relink_bench::peer_outage::{run, OutageSeries};
use relink_bench::report::{text_table, write_report_or_exit, Machine};
use relink_bench::scale::tcp;
use relink_bench::{quick_from_env, selected};
use relink_core::policy::Policy;
use serde::Serialize;

/// The JSON report.
#[derive(Debug, Serialize)]
struct OutageReport {
    bench: &'static str,
    quick: bool,
    machine: Machine,
    series: Vec<OutageSeries>,
}

/// The policies compared, by name.
fn policies() -> Vec<(&'static str, Policy, usize)> {
    let no_probe = Policy::builder()
        .probe_interval(None)
        .build()
        .expect("valid policy");
    vec![
        ("no-probe", no_probe.clone(), 1),
        ("default", Policy::default(), 1),
        ("no-probe-x8", no_probe, 8),
        ("default-x8", Policy::default(), 8),
    ]
}

fn ms(s: f64) -> String {
    format!("{:.0}", s * 1e3)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == tcp::SERVE_ARG) {
        let dir = PathBuf::from(args.get(i + 1).expect("--scale-serve DIR"));
        tcp::serve(&dir, std::io::stdin());
        return;
    }
    let benching = args.iter().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let (outages, cycles): (Vec<Duration>, usize) = if quick {
        (vec![Duration::from_millis(500)], 2)
    } else {
        (
            vec![
                Duration::from_millis(100),
                Duration::from_millis(500),
                Duration::from_secs(2),
            ],
            5,
        )
    };
    eprintln!(
        "peer_outage: measuring{}",
        if quick { " (quick)" } else { "" }
    );
    let mut series = Vec::new();
    for (name, policy, n) in policies() {
        if !selected(name) {
            continue;
        }
        let s = run(&tcp::this_exe(), name, policy, n, &outages, cycles);
        for x in &s {
            eprintln!(
                "  {name} D={:.1}s: past return median {} ms",
                x.outage_s,
                ms(x.median(|c| c.past_return_s))
            );
        }
        series.extend(s);
    }
    let rows: Vec<Vec<String>> = series
        .iter()
        .map(|s| {
            vec![
                s.policy.clone(),
                s.sessions.to_string(),
                format!("{:.1}", s.outage_s),
                s.cycles.len().to_string(),
                ms(s.median(|c| c.stall_s)),
                ms(s.median(|c| c.past_return_s)),
                ms(s.max(|c| c.past_return_s)),
                format!("{:.1}", s.requests_per_s()),
            ]
        })
        .collect();
    println!(
        "peer_outage{}: the target's device removed and added back after D, one session, \
         two processes over TCP",
        if quick {
            " (QUICK: proves it runs, measures little)"
        } else {
            ""
        }
    );
    print!(
        "{}",
        text_table(
            &[
                "series",
                "sessions",
                "D s",
                "cycles",
                "stall ms",
                "past return ms",
                "max past ms",
                "requests/s away",
            ],
            &rows,
            &[0],
        )
    );
    println!(
        "stall: longest gap between completions (median); past return: stall minus the time \
         the device was away (median, max), of the session with traffic; requests/s away: \
         connection requests all sessions sent while the device was away, per second of outage"
    );
    for s in &series {
        println!(
            "RESULT peer_outage series={} sessions={} outage_s={:.1} cycles={} stall_ms={} past_return_ms={} max_past_return_ms={} requests_per_s={:.1}",
            s.policy,
            s.sessions,
            s.outage_s,
            s.cycles.len(),
            ms(s.median(|c| c.stall_s)),
            ms(s.median(|c| c.past_return_s)),
            ms(s.max(|c| c.past_return_s)),
            s.requests_per_s()
        );
    }
    let report = OutageReport {
        bench: "peer_outage",
        quick,
        machine: Machine::current(),
        series,
    };
    write_report_or_exit(report.bench, &report);
}
