//! Small-message latency, relink next to the raw provider: ping-pong round
//! trips of 8 B and 4 KiB messages, on the raw soft provider (SEND/RECV,
//! `PingPongLoop`) and through two relink sessions (`RelinkPingPong`): one
//! copying (`Node::send` and `poll_delivery_into` both ways, the target's
//! application sending each message back) and one zero-copy
//! (`Node::send_from` of registered slots, replies received into posted
//! buffers with `post_receive` / `poll_received`, the target sending each
//! message back from the buffer it landed in), the three side by side in
//! one run, on the in-process fabric and over TCP loopback; median and p99
//! of the round trips, the process's CPU time per round trip, the ratios
//! relink / raw, and the copies of the payload relink made per round trip
//! (the sessions' counters: a zero-copy round trip that copies on the way
//! out fails the run, exit 1).
//!
//! ```text
//! cargo bench -p relink-bench --bench latency                       # measure (~1 min)
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench latency  # smoke run
//! RELINK_BENCH_ONLY=tcp cargo bench -p relink-bench --bench latency # the TCP series
//! ```
//!
//! Series names for `RELINK_BENCH_ONLY`: `inproc-8`, `inproc-4096`,
//! `tcp-8`, `tcp-4096`. Prints a table of mean round-trip times, one of
//! percentiles, CPU, ratios and copies per loop, and writes
//! `target/relink-bench/latency.json` (`extra.latency`).
//! Run without `--bench` (as `cargo test --benches` does) it makes a quick
//! run.

use relink_bench::latency::{copy_faults, latency_table, ping_pong, Latency};
use relink_bench::session::Workload;
use relink_bench::{
    quick_from_env, selected, Drive, LoopSpec, Plan, Report, Rig, SimPair, TcpPair,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};

/// Message sizes, bytes.
const SIZES: [usize; 2] = [8, 4096];

/// Every size on one fabric (`name`: `inproc` or `tcp`, for [`selected`]):
/// raw pairs on a rig from `new_rig` (the target on a thread of its own if
/// `threaded`, as in the relink pair), relink pairs from `pair`.
fn bench_fabric<D: Drive>(
    name: &str,
    new_rig: &dyn Fn() -> Box<dyn Rig>,
    threaded: bool,
    pair: &dyn Fn(&LoopSpec, Workload) -> D,
    plan: &Plan,
    report: &mut Report,
    out: &mut Vec<Latency>,
) {
    for size in SIZES {
        if selected(&format!("{name}-{size}")) {
            out.push(ping_pong(
                &*new_rig(),
                threaded,
                pair,
                size,
                true,
                plan,
                report,
            ));
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches`)
    // only checks that the benchmark runs.
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let plan = Plan::pick(quick);
    let mut report = Report::new("latency", quick, &plan);
    let mut lat = Vec::new();

    eprintln!("latency: measuring{}", if quick { " (quick)" } else { "" });
    bench_fabric(
        "inproc",
        &|| Box::new(InProcRig::new(1)),
        false,
        &|spec, w| SimPair::connect(2, spec, w),
        &plan,
        &mut report,
        &mut lat,
    );
    bench_fabric(
        "tcp",
        &|| Box::new(TcpRig::new()),
        true,
        &|spec, w| TcpPair::connect(3, spec, w),
        &plan,
        &mut report,
        &mut lat,
    );

    print!("{}", report.table());
    print!("{}", latency_table(&lat));
    println!(
        "soft-inproc: the simulated fabric's round trip is fixed in virtual time (2 x its \
         one-way latency); the figures above are wall-clock time per round trip of the loop \
         that runs the simulation step by step (both sides' processing plus the simulator's \
         events), i.e. the CPU cost of a round trip, not a network latency. soft-tcp: real \
         round trips over loopback, each side's host with its own I/O threads, each side's \
         loop (raw and relink) on a thread of its own; cpu/rt counts every thread"
    );
    report.set_extra("latency", &lat);
    match report.write_json() {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("latency: cannot write the JSON report: {e}");
            std::process::exit(1);
        }
    }
    let faults = copy_faults(&lat);
    if !faults.is_empty() {
        for f in &faults {
            eprintln!("latency: FAILED: {f}");
        }
        std::process::exit(1);
    }
}
