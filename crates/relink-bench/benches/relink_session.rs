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

use relink_bench::report::{fmt_si, text_table};
use relink_bench::session::{LoopStats, Workload};
use relink_bench::{
    measure_interleaved, paired_ratios, quick_from_env, selected, Drive, LoopSpec, Metric, Plan,
    RelinkSendLoop, RelinkWriteLoop, Report, Rig, Row, Runner, SendLoop, SimPair, Summary, TcpPair,
    WriteLoop,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};
use serde::Serialize;

/// Raw: 64-byte SENDs, 64 outstanding, every 16th signaled (as in
/// `soft_fabric`). relink signals every operation and counts a message when
/// the peer confirmed its delivery.
const SEND: (usize, usize, usize) = (64, 64, 16);
/// 64 KiB WRITEs, 16 outstanding, every one signaled.
const WRITE: (usize, usize, usize) = (64 * 1024, 16, 1);

/// relink / raw for one workload on one fabric.
#[derive(Debug, Clone, Serialize)]
struct Ratio {
    fabric: String,
    op: String,
    unit: String,
    raw_median: f64,
    relink_median: f64,
    /// relink / raw of each pair of repetitions taken side by side.
    per_rep: Vec<f64>,
    /// Median of `per_rep`.
    median: f64,
    min: f64,
    max: f64,
    /// Iterations and waits of the relink loop per operation (all runs).
    relink_loop: LoopStats,
}

/// Measure `raw` and `relink` side by side and record both rows and their
/// ratio.
#[allow(clippy::too_many_arguments)]
fn compare(
    fabric: &str,
    op: &str,
    metric: Metric,
    raw: (&mut dyn Runner, LoopSpec),
    relink: (&mut dyn Runner, LoopSpec),
    plan: &Plan,
    report: &mut Report,
    ratios: &mut Vec<Ratio>,
) {
    let series = measure_interleaved(&mut [raw.0, relink.0], plan);
    report.push(Row::new(fabric, op, &raw.1, metric, &series[0]));
    report.push(Row::new(
        fabric,
        &format!("relink-{op}"),
        &relink.1,
        metric,
        &series[1],
    ));
    let per_rep = paired_ratios(&series[1], &series[0], metric);
    let s = Summary::of(&per_rep);
    ratios.push(Ratio {
        fabric: fabric.into(),
        op: op.into(),
        unit: metric.unit().into(),
        raw_median: series[0].summary(metric).median,
        relink_median: series[1].summary(metric).median,
        per_rep,
        median: s.median,
        min: s.min,
        max: s.max,
        relink_loop: LoopStats::default(),
    });
    eprintln!("  {fabric}: {op} done");
}

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
        bench_send(new_rig, pair, plan, report, ratios);
    }
    if selected(&format!("{name}-write")) {
        bench_write(new_rig, pair, plan, report, ratios);
    }
}

fn bench_send<D: Drive>(
    new_rig: &dyn Fn() -> Box<dyn Rig>,
    pair: &dyn Fn(&LoopSpec, Workload) -> D,
    plan: &Plan,
    report: &mut Report,
    ratios: &mut Vec<Ratio>,
) {
    let rig = new_rig();
    let raw_spec = LoopSpec::send(SEND.0, SEND.1).signal_every(SEND.2);
    let rl_spec = LoopSpec::send(SEND.0, SEND.1);
    let mut raw = SendLoop::connect(&*rig, raw_spec);
    let fabric = raw.kind();
    let mut rl = RelinkSendLoop::new(pair(&rl_spec, Workload::Send), rl_spec);
    compare(
        fabric,
        "send",
        Metric::MessagesPerSec,
        (&mut raw, raw_spec),
        (&mut rl, rl_spec),
        plan,
        report,
        ratios,
    );
    if let Some(r) = ratios.last_mut() {
        r.relink_loop = rl.stats();
    }
    raw.close();
    rl.close();
}

fn bench_write<D: Drive>(
    new_rig: &dyn Fn() -> Box<dyn Rig>,
    pair: &dyn Fn(&LoopSpec, Workload) -> D,
    plan: &Plan,
    report: &mut Report,
    ratios: &mut Vec<Ratio>,
) {
    let rig = new_rig();
    let spec = LoopSpec::write(WRITE.0, WRITE.1).signal_every(WRITE.2);
    let fabric = rig.host(relink_testkit::Side::Initiator).kind();
    let mut raw = WriteLoop::connect(&*rig, spec);
    let mut rl = RelinkWriteLoop::new(pair(&spec, Workload::Write), spec);
    compare(
        fabric,
        "write",
        Metric::GigabytesPerSec,
        (&mut raw, spec),
        (&mut rl, spec),
        plan,
        report,
        ratios,
    );
    if let Some(r) = ratios.last_mut() {
        r.relink_loop = rl.stats();
    }
    raw.close();
    rl.close();
}

fn ratio_table(ratios: &[Ratio]) -> String {
    let rows: Vec<Vec<String>> = ratios
        .iter()
        .map(|r| {
            vec![
                r.fabric.clone(),
                r.op.clone(),
                format!("{} {}", fmt_si(r.raw_median), r.unit),
                format!("{} {}", fmt_si(r.relink_median), r.unit),
                format!("{:.3}", r.median),
                format!("{:.3}", r.min),
                format!("{:.3}", r.max),
                format!("{:.2}", r.relink_loop.iterations_per_op()),
                format!("{:.2}", r.relink_loop.waits_per_op()),
            ]
        })
        .collect();
    let mut out = text_table(
        &[
            "fabric",
            "workload",
            "raw",
            "relink",
            "relink/raw",
            "min",
            "max",
            "iter/op",
            "wait/op",
        ],
        &rows,
        &[0, 1],
    );
    out.push_str(
        "relink/raw: median (min, max) of the ratios of repetitions taken side by side; \
         raw, relink: medians; iter/op, wait/op: iterations of the relink loop (each polls \
         the nodes once) and iterations that waited on the provider, per operation\n",
    );
    out
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
