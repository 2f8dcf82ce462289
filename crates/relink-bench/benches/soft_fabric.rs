//! Baseline of the soft fabric itself: 64-byte SEND message rate and
//! 64 KiB WRITE bandwidth (every WRITE signaled, and unsignaled batches
//! with every 16th signaled) on the in-process fabric and on the TCP fabric
//! over loopback, in one run, on the wall clock. Over TCP the WRITEs are
//! measured once more with and without same-host transfers, their
//! repetitions alternated (series `tcp-same-host-*` and `tcp-stream-*`),
//! and the ratio printed as `RESULT soft_fabric same_host_over_stream`.
//!
//! ```text
//! cargo bench -p relink-bench --bench soft_fabric            # measure (~1 min)
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench soft_fabric   # smoke run
//! RELINK_BENCH_ONLY=inproc-write cargo bench -p relink-bench --bench soft_fabric   # some series
//! ```
//!
//! Prints a table and writes `target/relink-bench/soft_fabric.json`; the
//! minor page faults per operation of every series' timed repetitions are
//! printed after the table and kept in the JSON (`extra.minflt_per_op`).
//! `RELINK_BENCH_ONLY` takes comma-separated substrings of series names
//! (`inproc-send`, `inproc-write`, `inproc-write-unsig`, `tcp-send`, ...).
//! Run without `--bench` (as `cargo test --benches` does) it makes a quick
//! run.

use std::collections::BTreeMap;

use relink_bench::{
    measure, measure_interleaved, paired_ratios, process_minor_faults, quantile, quick_from_env,
    selected, LoopSpec, Measurement, Metric, Plan, Report, Rig, Row, Runner, SendLoop, WriteLoop,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};
use relink_testkit::Side;

/// 64-byte SENDs, 64 outstanding, every 16th signaled.
const SEND: (usize, usize, usize) = (64, 64, 16);
/// 64 KiB WRITEs, 16 outstanding: every one signaled (`write`), and every
/// 16th signaled (`write-unsig`: the window completes in batches of 16 and
/// is refilled sixteen at a time).
const WRITES: [(&str, usize, usize, usize); 2] = [
    ("write", 64 * 1024, 16, 1),
    ("write-unsig", 64 * 1024, 16, 16),
];

/// A [`Runner`] that counts the minor page faults of every run.
struct Faults<R> {
    inner: R,
    /// Per run: operations and minor faults (if readable).
    runs: Vec<(u64, Option<u64>)>,
}

impl<R: Runner> Faults<R> {
    fn new(inner: R) -> Faults<R> {
        Faults {
            inner,
            runs: Vec::new(),
        }
    }

    /// Minor faults per operation over the last `n` runs (the timed
    /// repetitions of a series).
    fn per_op(&self, n: usize) -> Option<f64> {
        let last = &self.runs[self.runs.len().saturating_sub(n)..];
        let ops: u64 = last.iter().map(|r| r.0).sum();
        let faults: Option<u64> = last.iter().map(|r| r.1).sum();
        Some(faults? as f64 / ops.max(1) as f64)
    }
}

impl<R: Runner> Runner for Faults<R> {
    fn run(&mut self, count: u64) -> Measurement {
        let before = process_minor_faults();
        let m = self.inner.run(count);
        let faults = match (before, process_minor_faults()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        self.runs.push((m.ops, faults));
        m
    }
}

/// Both workloads, each on a fresh rig from `new_rig` (so that one series
/// does not inherit another's leftovers, e.g. the in-process world's queue of
/// pending timers).
fn bench_fabric(
    tag: &str,
    new_rig: &dyn Fn() -> Box<dyn Rig>,
    plan: &Plan,
    report: &mut Report,
    faults: &mut BTreeMap<String, Option<f64>>,
) {
    let name = format!("{tag}-send");
    if selected(&name) {
        let rig = new_rig();
        let spec = LoopSpec::send(SEND.0, SEND.1).signal_every(SEND.2);
        let l = SendLoop::connect(&*rig, spec);
        let fabric = l.kind();
        let row = (fabric, "send", spec, Metric::MessagesPerSec);
        series(&name, row, l, plan, report, faults).close();
    }
    for (op, size, window, signal_every) in WRITES {
        let name = format!("{tag}-{op}");
        if selected(&name) {
            let rig = new_rig();
            let spec = LoopSpec::write(size, window).signal_every(signal_every);
            let l = WriteLoop::connect(&*rig, spec);
            let fabric = l.kind();
            let row = (fabric, "write", spec, Metric::GigabytesPerSec);
            series(&name, row, l, plan, report, faults).close();
        }
    }
}

/// Measure the loop `l` of series `name`, counting its page faults, and
/// record its row (fabric, workload, spec, metric); the loop is handed back
/// to be closed.
fn series<L: Runner>(
    name: &str,
    (fabric, op, spec, metric): (&str, &str, LoopSpec, Metric),
    l: L,
    plan: &Plan,
    report: &mut Report,
    faults: &mut BTreeMap<String, Option<f64>>,
) -> L {
    let mut l = Faults::new(l);
    let series = measure(&mut l, plan);
    faults.insert(name.to_string(), l.per_op(plan.reps));
    report.push(Row::new(fabric, op, &spec, metric, &series));
    eprintln!("  {name} done");
    l.inner
}

/// 64 KiB WRITEs over TCP with same-host transfers on and off (the bytes
/// read from the sending process, or through the stream), measured side
/// by side; prints the median of the paired ratios on / off.
fn same_host_ab(plan: &Plan, report: &mut Report) {
    if let Err(why) = relink_soft::TcpHost::same_host_available() {
        let skip = relink_skip::Skip::new(format!("same-host transfers cannot work here: {why}"));
        relink_skip::skip_part("soft_fabric: same-host WRITEs next to the stream", &skip);
        return;
    }
    let mut ratios = Vec::new();
    for (op, size, window, signal_every) in WRITES {
        let (on_name, off_name) = (format!("tcp-same-host-{op}"), format!("tcp-stream-{op}"));
        if !selected(&on_name) && !selected(&off_name) {
            continue;
        }
        let on = TcpRig::new();
        let off = TcpRig::new();
        for side in [Side::Initiator, Side::Target] {
            off.tcp_host(side).set_same_host_transfers(false);
        }
        let spec = LoopSpec::write(size, window).signal_every(signal_every);
        let mut a = WriteLoop::connect(&on, spec);
        let mut b = WriteLoop::connect(&off, spec);
        let series = measure_interleaved(&mut [&mut a, &mut b], plan);
        let metric = Metric::GigabytesPerSec;
        report.push(Row::new(
            "soft-tcp same-host",
            "write",
            &spec,
            metric,
            &series[0],
        ));
        report.push(Row::new(
            "soft-tcp stream",
            "write",
            &spec,
            metric,
            &series[1],
        ));
        let r = paired_ratios(&series[0], &series[1], metric);
        ratios.push(format!("{}={:.3}", op.replace('-', "_"), quantile(&r, 0.5)));
        let moved = on.tcp_host(Side::Target).same_host_bytes();
        assert!(
            moved > 0 && off.tcp_host(Side::Target).same_host_bytes() == 0,
            "same-host transfers: {moved} bytes read with them on, and some with them off"
        );
        a.close();
        b.close();
        eprintln!("  {on_name} / {off_name} done");
    }
    if !ratios.is_empty() {
        println!(
            "RESULT soft_fabric same_host_over_stream {}",
            ratios.join(" ")
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches`)
    // only checks that the benchmark runs.
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let plan = Plan::pick(quick);
    let mut report = Report::new("soft_fabric", quick, &plan);
    let mut faults = BTreeMap::new();

    eprintln!(
        "soft_fabric: measuring{}",
        if quick { " (quick)" } else { "" }
    );
    bench_fabric(
        "inproc",
        &|| Box::new(InProcRig::new(1)),
        &plan,
        &mut report,
        &mut faults,
    );
    bench_fabric(
        "tcp",
        &|| Box::new(TcpRig::new()),
        &plan,
        &mut report,
        &mut faults,
    );
    same_host_ab(&plan, &mut report);

    print!("{}", report.table());
    println!("minor page faults per operation (timed repetitions):");
    for (name, f) in &faults {
        match f {
            Some(f) => println!("  {name:<20} {f:>10.2}"),
            None => println!("  {name:<20} {:>10}", "-"),
        }
    }
    report.set_extra("minflt_per_op", &faults);
    match report.write_json() {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("soft_fabric: cannot write the JSON report: {e}");
            std::process::exit(1);
        }
    }
}
