//! relink next to the raw provider on the same fabric: one workload measured
//! both ways, their timed repetitions interleaved so that both see the same
//! machine state, and the ratio relink / raw (the median of the ratios of
//! neighbouring repetitions). Shared by the `relink_session` benchmark (the
//! soft fabric, in-process and over TCP) and relink-verbs's `rxe` benchmark
//! (real devices).
//!
//! The workloads: [`SEND`] (64-byte messages: the raw loop signals every
//! 16th SEND; relink counts a message when the peer confirmed its delivery),
//! through sessions whose receive slots hold one message (the raw loop's
//! receives) or [`FRAME_SLOT`] bytes (relink packs queued messages into
//! frames), and [`WRITE`] (64 KiB RDMA WRITEs, every one signaled).

use std::time::Instant;

use relink_testkit::Rig;
use serde::Serialize;

use crate::report::{fmt_si, text_table};
use crate::session::{Drive, LoopStats, RelinkSendLoop, RelinkWriteLoop, Workload};
use crate::{
    measure_interleaved, paired_ratios, LoopSpec, Metric, Plan, Report, Row, Runner, SendLoop,
    Summary, WriteLoop,
};

/// Size, window and signaling interval (raw loop) of the SEND workload.
pub const SEND: (usize, usize, usize) = (64, 64, 16);
/// The `max_message` of the sessions of the SEND workload's second series:
/// relink's default, room for frames of up to 47 messages of 64 B.
pub const FRAME_SLOT: usize = 4096;
/// Size, window and signaling interval of the WRITE workload.
pub const WRITE: (usize, usize, usize) = (64 * 1024, 16, 1);

/// relink / raw for one workload on one fabric.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// The fabric (the provider's kind, e.g. `soft-inproc`, `verbs`).
    pub fabric: String,
    /// `send` or `write`.
    pub op: String,
    /// The unit of the medians.
    pub unit: String,
    /// Median of the raw loop's repetitions.
    pub raw_median: f64,
    /// Median of the relink loop's repetitions.
    pub relink_median: f64,
    /// relink / raw of each pair of repetitions taken side by side.
    pub per_rep: Vec<f64>,
    /// Median of `per_rep`.
    pub median: f64,
    /// Smallest of `per_rep`.
    pub min: f64,
    /// Largest of `per_rep`.
    pub max: f64,
    /// Iterations and waits of the relink loop per operation (all runs).
    pub relink_loop: LoopStats,
}

/// Measure `raw` and `relink` side by side, record both rows in `report`
/// (`op` and `relink-op`), and return their ratio (without the loop's
/// statistics).
pub fn compare(
    fabric: &str,
    op: &str,
    metric: Metric,
    raw: (&mut dyn Runner, LoopSpec),
    relink: (&mut dyn Runner, LoopSpec),
    plan: &Plan,
    report: &mut Report,
) -> Ratio {
    let t0 = Instant::now();
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
    eprintln!("  {fabric}: {op} measured in {:.1?}", t0.elapsed());
    Ratio {
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
    }
}

/// The [`SEND`] workload on a raw pair of `rig` and through the relink
/// session `pair` makes, whose receive slots hold `max_message` bytes of
/// messages: [`SEND`]'s 64 (series `send`: one message per SEND, as the
/// raw loop's) or more (series `send-slot<max_message>`: room for frames).
pub fn send_overhead<D: Drive>(
    rig: &dyn Rig,
    pair: impl FnOnce(&LoopSpec, Workload) -> D,
    max_message: usize,
    plan: &Plan,
    report: &mut Report,
) -> Ratio {
    let raw_spec = LoopSpec::send(SEND.0, SEND.1).signal_every(SEND.2);
    let rl_spec = LoopSpec::send(SEND.0, SEND.1).max_message(max_message);
    let mut raw = SendLoop::connect(rig, raw_spec);
    let fabric = raw.kind();
    let mut rl = RelinkSendLoop::new(pair(&rl_spec, Workload::Send), rl_spec);
    let op = if rl_spec.max_message == SEND.0 {
        "send".to_string()
    } else {
        format!("send-slot{}", rl_spec.max_message)
    };
    let mut r = compare(
        fabric,
        &op,
        Metric::MessagesPerSec,
        (&mut raw, raw_spec),
        (&mut rl, rl_spec),
        plan,
        report,
    );
    r.relink_loop = rl.stats();
    raw.close();
    rl.close();
    r
}

/// The [`WRITE`] workload on a raw pair of `rig` and through the relink
/// session `pair` makes, in `metric` (GB/s or MB/s).
pub fn write_overhead<D: Drive>(
    rig: &dyn Rig,
    pair: impl FnOnce(&LoopSpec, Workload) -> D,
    metric: Metric,
    plan: &Plan,
    report: &mut Report,
) -> Ratio {
    let spec = LoopSpec::write(WRITE.0, WRITE.1).signal_every(WRITE.2);
    let mut raw = WriteLoop::connect(rig, spec);
    let fabric = raw.kind();
    let mut rl = RelinkWriteLoop::new(pair(&spec, Workload::Write), spec);
    let mut r = compare(
        fabric,
        "write",
        metric,
        (&mut raw, spec),
        (&mut rl, spec),
        plan,
        report,
    );
    r.relink_loop = rl.stats();
    raw.close();
    rl.close();
    r
}

/// The ratios as a table for people.
pub fn ratio_table(ratios: &[Ratio]) -> String {
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
         its node once) and iterations that waited on the provider, per operation\n",
    );
    out
}
