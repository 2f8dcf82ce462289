//! Sessions at scale through one device reset:
//!
//! - in-process (one thread, the in-process soft fabric): 10,000 sessions
//!   between two nodes, one reset of the initiator's device; the wall-clock
//!   time until every session sent `Resumed`, then until one message on
//!   each was delivered and confirmed; driven event by event and with a
//!   1 µs quantum ([`Stepper`](relink_bench::recovery::Stepper));
//! - the heap of an idle session, from the same run (the bench binary's
//!   global allocator is `stats_alloc`'s counting wrapper), with the
//!   registered send and receive slots apart;
//! - over TCP: 1,000 sessions from this process to a target node in a
//!   second process (this binary again, `--scale-serve`), one reset of this
//!   side's soft device through its registry; the same two times.
//!
//! ```text
//! cargo bench -p relink-bench --bench scale                          # 10,000 in-process, 1,000 over TCP
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench scale     # 1,000 and 100 (scripts/test.sh)
//! RELINK_BENCH_ONLY=tcp cargo bench -p relink-bench --bench scale    # series: inproc-event, inproc-q1us, tcp
//! ```
//!
//! Prints a table and `RESULT scale ...` lines; writes
//! `target/relink-bench/scale.json`. Run without `--bench` (as `cargo test
//! --benches` does) it makes a quick run.

use std::alloc::System;
use std::path::PathBuf;
use std::time::Duration;

use relink_bench::memory::HeapCounter;
use relink_bench::report::{text_table, write_report_or_exit, Machine};
use relink_bench::scale::{fabric_heap, in_process, tcp, ScaleRun};
use relink_bench::{quick_from_env, selected};
use serde::Serialize;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The process's heap, as `stats_alloc` counts it.
struct Counting;

impl HeapCounter for Counting {
    fn live_bytes(&self) -> i64 {
        // A reallocation's growth counts in `bytes_allocated` and its
        // shrinking in `bytes_deallocated`: the live heap is the difference.
        let s = GLOBAL.stats();
        s.bytes_allocated as i64 - s.bytes_deallocated as i64
    }
    fn allocations(&self) -> u64 {
        GLOBAL.stats().allocations as u64
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct ScaleReport {
    bench: &'static str,
    quick: bool,
    machine: Machine,
    runs: Vec<ScaleRun>,
}

fn table(runs: &[ScaleRun]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.fabric.clone(),
                r.sessions.to_string(),
                r.driver.clone(),
                format!("{:.2}", r.setup_s),
                format!("{:.3}", r.half_resumed_s),
                format!("{:.3}", r.resumed_s),
                r.resumed_cpu_s.map_or("-".into(), |c| format!("{c:.2}")),
                r.resumed_virt_ms.map_or("-".into(), |v| format!("{v:.3}")),
                format!("{:.3}", r.messages_s),
                format!("{:.0}", r.sessions_per_s),
                r.attempts.to_string(),
            ]
        })
        .collect();
    let mut out = text_table(
        &[
            "fabric",
            "sessions",
            "driver",
            "setup s",
            "half resumed s",
            "all resumed s",
            "cpu s",
            "virt ms",
            "+1 msg each s",
            "sessions/s",
            "attempts",
        ],
        &rows,
        &[0, 2],
    );
    out.push_str(
        "one reset of the initiator's device; wall-clock seconds from the reset until half and \
         all sessions sent Resumed, and until one message on each was delivered and confirmed; \
         cpu: this process's CPU seconds until all resumed (10 ms ticks); virt: virtual time \
         in-process\n",
    );
    for r in runs {
        if let Some(h) = r.heap {
            out.push_str(&format!(
                "idle heap, {} sessions ({}), both ends, soft-fabric objects included: {:.0} B per \
                 session, of which {:.0} B registered slots; {:.0} B per session besides\n",
                r.sessions, r.fabric, h.per_session, h.registered_per_session,
                h.per_session_excluding_registered
            ));
            if let (Some(f), Some(rl)) = (h.fabric_per_session, h.relink_per_session) {
                out.push_str(&format!(
                    "  of those {:.0} B: the fabric's objects of a raw connection {f:.0} B, \
                     relink's own {rl:.0} B (both ends)\n",
                    h.per_session_excluding_registered
                ));
            }
        }
    }
    out
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
    let (inproc_n, tcp_n) = if quick { (1_000, 100) } else { (10_000, 1_000) };
    eprintln!("scale: measuring{}", if quick { " (quick)" } else { "" });

    let mut runs = Vec::new();
    // The first in-process run also measures the heap of idle sessions.
    let mut heap: Option<&dyn HeapCounter> = Some(&Counting);
    for (name, quantum) in [
        ("inproc-event", Duration::ZERO),
        ("inproc-q1us", Duration::from_micros(1)),
    ] {
        if !selected(name) {
            continue;
        }
        let counting = heap.take();
        let mut r = in_process(inproc_n, 300, quantum, counting);
        if let (Some(counter), Some(h)) = (counting, r.heap) {
            // The fabric's own share, from raw connections with the same
            // queues (a thousand are enough for a per-connection figure).
            r.heap = Some(h.with_fabric(fabric_heap(inproc_n.min(1_000), 301, counter)));
        }
        eprintln!(
            "  {name}: {inproc_n} sessions resumed in {:.3} s",
            r.resumed_s
        );
        runs.push(r);
    }
    if selected("tcp") {
        let r = tcp::run(&tcp::this_exe(), tcp_n);
        eprintln!("  tcp: {tcp_n} sessions resumed in {:.3} s", r.resumed_s);
        runs.push(r);
    }

    println!(
        "scale{}: sessions through one device reset",
        if quick {
            " (QUICK: proves it runs, measures nothing)"
        } else {
            ""
        }
    );
    print!("{}", table(&runs));
    for r in &runs {
        println!(
            "RESULT scale fabric={} sessions={} driver={:?} resumed_s={:.3} messages_s={:.3} sessions_per_s={:.0}{}",
            r.fabric,
            r.sessions,
            r.driver,
            r.resumed_s,
            r.messages_s,
            r.sessions_per_s,
            r.heap.map_or(String::new(), |h| format!(
                " heap_per_session={:.0} registered_per_session={:.0} besides_registered={:.0} fabric_per_session={:.0} relink_per_session={:.0}",
                h.per_session,
                h.registered_per_session,
                h.per_session_excluding_registered,
                h.fabric_per_session.unwrap_or(f64::NAN),
                h.relink_per_session.unwrap_or(f64::NAN)
            ))
        );
    }
    let report = ScaleReport {
        bench: "scale",
        quick,
        machine: Machine::current(),
        runs,
    };
    write_report_or_exit(report.bench, &report);
}
