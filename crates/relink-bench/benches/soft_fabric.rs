//! Baseline of the soft fabric itself: 64-byte SEND message rate and
//! 64 KiB WRITE bandwidth on the in-process fabric and on the TCP fabric
//! over loopback, in one run, on the wall clock.
//!
//! ```text
//! cargo bench -p relink-bench --bench soft_fabric            # measure (~1 min)
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench soft_fabric   # smoke run
//! ```
//!
//! Prints a table and writes `target/relink-bench/soft_fabric.json`. Run
//! without `--bench` (as `cargo test --benches` does) it makes a quick run.

use relink_bench::{
    measure, quick_from_env, LoopSpec, Metric, Plan, Report, Rig, Row, SendLoop, WriteLoop,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};

/// 64-byte SENDs, 64 outstanding, every 16th signaled.
const SEND: (usize, usize, usize) = (64, 64, 16);
/// 64 KiB WRITEs, 16 outstanding, every one signaled.
const WRITE: (usize, usize, usize) = (64 * 1024, 16, 1);

/// Both workloads, each on a fresh rig from `new_rig` (so that one series
/// does not inherit another's leftovers, e.g. the in-process world's queue of
/// pending timers).
fn bench_fabric(new_rig: &dyn Fn() -> Box<dyn Rig>, plan: &Plan, report: &mut Report) {
    let rig = new_rig();
    let spec = LoopSpec::send(SEND.0, SEND.1).signal_every(SEND.2);
    let mut l = SendLoop::connect(&*rig, spec);
    let fabric = l.kind();
    let series = measure(&mut l, plan);
    l.close();
    drop(rig);
    report.push(Row::new(
        fabric,
        "send",
        &spec,
        Metric::MessagesPerSec,
        &series,
    ));
    eprintln!("  {fabric}: send done");

    let rig = new_rig();
    let spec = LoopSpec::write(WRITE.0, WRITE.1).signal_every(WRITE.2);
    let mut l = WriteLoop::connect(&*rig, spec);
    let series = measure(&mut l, plan);
    l.close();
    drop(rig);
    report.push(Row::new(
        fabric,
        "write",
        &spec,
        Metric::GigabytesPerSec,
        &series,
    ));
    eprintln!("  {fabric}: write done");
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches`)
    // only checks that the benchmark runs.
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let plan = Plan::pick(quick);
    let mut report = Report::new("soft_fabric", quick, &plan);

    eprintln!(
        "soft_fabric: measuring{}",
        if quick { " (quick)" } else { "" }
    );
    bench_fabric(&|| Box::new(InProcRig::new(1)), &plan, &mut report);
    bench_fabric(&|| Box::new(TcpRig::new()), &plan, &mut report);

    print!("{}", report.table());
    match report.write_json() {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("soft_fabric: cannot write the JSON report: {e}");
            std::process::exit(1);
        }
    }
}
