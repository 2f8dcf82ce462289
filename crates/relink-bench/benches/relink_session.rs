//! relink's overhead: the same workloads through a relink session and on
//! the raw soft provider, side by side in one run and one process — 64-byte
//! messages (message rate) and 64 KiB RDMA WRITEs (bandwidth), on the
//! in-process fabric and over TCP loopback — and the ratio relink / raw.
//!
//! Messages one per SEND (series `send`, 64 B, and `send4k`, 4 KiB) go
//! three ways side by side: the raw loop, relink's `Node::send` and
//! relink's `Node::send_from` of a ring of slots in registered memory (no
//! copy); messages of 64 B through sessions with room for frames
//! (`slot`) and WRITEs (`write`) two ways.
//!
//! ```text
//! cargo bench -p relink-bench --bench relink_session            # measure (~2 min)
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench relink_session   # smoke run
//! RELINK_BENCH_ONLY=inproc-send cargo bench -p relink-bench --bench relink_session   # some series
//! ```
//!
//! Series: `inproc-send`, `inproc-send4k`, `inproc-slot`, `inproc-write`
//! and the same with `tcp-`. Prints a table of rates, one of ratios and
//! one of the copies relink made of each message's payload (from the
//! sessions' counters), and writes `target/relink-bench/relink_session.json`
//! (`extra.ratios`, `extra.copies`). A message sent with `send_from` that
//! relink copied fails the run (exit 1): that is a property, not a timing.
//! Run without `--bench` (as `cargo test --benches` does) it makes a quick
//! run.

use relink_bench::overhead::{
    copy_faults, copy_table, ratio_table, send_from_overhead, send_overhead, write_overhead,
    CopyCount, Ratio, FRAME_SLOT, FROM_SIZES, SEND,
};
use relink_bench::session::Workload;
use relink_bench::{
    quick_from_env, selected, Drive, LoopSpec, Metric, Plan, Report, Rig, SimPair, TcpPair,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};

/// Every workload on one fabric (`name`: `inproc` or `tcp`, for
/// [`selected`]): raw pairs on a rig from `new_rig`, relink pairs from
/// `pair`.
fn bench_fabric<D: Drive>(
    name: &str,
    new_rig: &dyn Fn() -> Box<dyn Rig>,
    pair: &dyn Fn(&LoopSpec, Workload) -> D,
    plan: &Plan,
    report: &mut Report,
    ratios: &mut Vec<Ratio>,
    copies: &mut Vec<CopyCount>,
) {
    for size in FROM_SIZES {
        let series = if size == SEND.0 {
            format!("{name}-send")
        } else {
            format!("{name}-send{}k", size / 1024)
        };
        if selected(&series) {
            let r = send_from_overhead(&*new_rig(), pair, size, plan, report);
            ratios.extend(r.ratios);
            copies.extend(r.copies);
        }
    }
    if selected(&format!("{name}-slot")) {
        ratios.push(send_overhead(&*new_rig(), pair, FRAME_SLOT, plan, report));
    }
    if selected(&format!("{name}-write")) {
        ratios.push(write_overhead(
            &*new_rig(),
            pair,
            Metric::GigabytesPerSec,
            plan,
            report,
        ));
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches`)
    // only checks that the benchmark runs.
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let plan = Plan::pick(quick);
    let mut report = Report::new("relink_session", quick, &plan);
    let mut ratios = Vec::new();
    let mut copies = Vec::new();

    eprintln!(
        "relink_session: measuring{}",
        if quick { " (quick)" } else { "" }
    );
    bench_fabric(
        "inproc",
        &|| Box::new(InProcRig::new(1)),
        &|spec, w| SimPair::connect(2, spec, w),
        &plan,
        &mut report,
        &mut ratios,
        &mut copies,
    );
    bench_fabric(
        "tcp",
        &|| Box::new(TcpRig::new()),
        &|spec, w| TcpPair::connect(3, spec, w),
        &plan,
        &mut report,
        &mut ratios,
        &mut copies,
    );

    print!("{}", report.table());
    print!("{}", ratio_table(&ratios));
    print!("{}", copy_table(&copies));
    report.set_extra("ratios", &ratios);
    report.set_extra("copies", &copies);
    match report.write_json() {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("relink_session: cannot write the JSON report: {e}");
            std::process::exit(1);
        }
    }
    let faults = copy_faults(&copies);
    if !faults.is_empty() {
        for f in &faults {
            eprintln!("relink_session: FAILED: {f}");
        }
        std::process::exit(1);
    }
}
