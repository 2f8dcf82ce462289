//! relink's overhead: the same workloads through a relink session and on
//! the raw soft provider, side by side in one run and one process — 64-byte
//! messages (message rate) and 64 KiB RDMA WRITEs (bandwidth), on the
//! in-process fabric and over TCP loopback — and the ratio relink / raw.
//!
//! ```text
//! cargo bench -p relink-bench --bench relink_session            # measure (~1 min)
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench relink_session   # smoke run
//! ```
//!
//! Prints a table of rates and one of ratios, and writes
//! `target/relink-bench/relink_session.json`. Run without `--bench` (as
//! `cargo test --benches` does) it makes a quick run.

use relink_bench::overhead::{ratio_table, send_overhead, write_overhead, Ratio, FRAME_SLOT, SEND};
use relink_bench::session::Workload;
use relink_bench::{
    quick_from_env, selected, Drive, LoopSpec, Metric, Plan, Report, Rig, SimPair, TcpPair,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};

/// Both workloads on one fabric (`name`: `inproc` or `tcp`, for
/// [`selected`]): raw pairs on a rig from `new_rig`, relink pairs from
/// `pair`.
fn bench_fabric<D: Drive>(
    name: &str,
    new_rig: &dyn Fn() -> Box<dyn Rig>,
    pair: &dyn Fn(&LoopSpec, Workload) -> D,
    plan: &Plan,
    report: &mut Report,
    ratios: &mut Vec<Ratio>,
) {
    if selected(&format!("{name}-send")) {
        ratios.push(send_overhead(&*new_rig(), pair, SEND.0, plan, report));
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
    );
    bench_fabric(
        "tcp",
        &|| Box::new(TcpRig::new()),
        &|spec, w| TcpPair::connect(3, spec, w),
        &plan,
        &mut report,
        &mut ratios,
    );

    print!("{}", report.table());
    print!("{}", ratio_table(&ratios));
    report.set_extra("ratios", &ratios);
    match report.write_json() {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("relink_session: cannot write the JSON report: {e}");
            std::process::exit(1);
        }
    }
}
