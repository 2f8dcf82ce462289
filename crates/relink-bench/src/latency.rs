//! Small-message latency, relink next to the raw provider: round trips of
//! one message and its reply ([`PingPongLoop`] on the raw provider,
//! [`RelinkPingPong`] through a relink session), their timed repetitions
//! interleaved, each round trip timed on its own ([`Rtts`]), summarised as
//! median and p99 ([`Percentiles`]) with the ratio relink / raw
//! ([`Latency`]). Used by the `latency` benchmark.

use std::time::{Duration, Instant};

use relink_testkit::Rig;
use serde::Serialize;

use crate::loops::PingPongLoop;
use crate::report::text_table;
use crate::session::{Drive, LoopStats, RelinkPingPong, Workload};
use crate::{measure_interleaved, quantile, LoopSpec, Metric, Plan, Report, Row, Summary};

/// Round-trip times of a ping-pong loop, one list per run in the order run
/// (warm-up runs first: [`measure`](crate::measure) and
/// [`measure_interleaved`] time their [`Plan::reps`] repetitions last).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rtts {
    runs: Vec<Vec<Duration>>,
}

impl Rtts {
    /// Record the round trips of one run.
    pub fn push_run(&mut self, samples: Vec<Duration>) {
        self.runs.push(samples);
    }

    /// Every run's round trips.
    pub fn runs(&self) -> &[Vec<Duration>] {
        &self.runs
    }

    /// The round trips of the last `n` runs, in microseconds.
    pub fn last_runs(&self, n: usize) -> Vec<f64> {
        let from = self.runs.len().saturating_sub(n);
        self.runs[from..]
            .iter()
            .flatten()
            .map(|d| d.as_secs_f64() * 1e6)
            .collect()
    }
}

/// Round-trip times of one series, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Round trips summarised.
    pub samples: usize,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// Fastest.
    pub min_us: f64,
    /// Slowest.
    pub max_us: f64,
}

impl Percentiles {
    /// The summary of `us` (microseconds).
    ///
    /// # Panics
    /// If `us` is empty or holds a NaN.
    pub fn of(us: &[f64]) -> Percentiles {
        let s = Summary::of(us);
        Percentiles {
            samples: us.len(),
            p50_us: quantile(us, 0.5),
            p99_us: quantile(us, 0.99),
            min_us: s.min,
            max_us: s.max,
        }
    }
}

/// Ping-pong latency of one message size on one fabric, raw and through
/// relink.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// The fabric (the provider's kind, e.g. `soft-tcp`).
    pub fabric: String,
    /// Message size, bytes.
    pub size: usize,
    /// Whether the raw loop's target ran on a thread of its own.
    pub raw_target_thread: bool,
    /// The raw provider's round trips, all timed repetitions pooled.
    pub raw: Percentiles,
    /// relink's round trips, all timed repetitions pooled.
    pub relink: Percentiles,
    /// relink p50 / raw p50.
    pub ratio_p50: f64,
    /// relink p99 / raw p99.
    pub ratio_p99: f64,
    /// relink p50 / raw p50 of each pair of repetitions taken side by side.
    pub per_rep_p50: Vec<f64>,
    /// Iterations and waits of the relink loop per round trip (all runs).
    pub relink_loop: LoopStats,
}

/// Ping-pong of `size`-byte messages on a raw pair of `rig` (the target
/// on a thread of its own if `raw_threaded`: as in the relink pair, so
/// that both sides of the comparison wait and wake alike) and through the
/// relink session `pair` makes ([`Workload::PingPong`]), measured
/// interleaved with `plan`; records both rows in `report` (`pingpong` and
/// `relink-pingpong`, in mean µs per round trip) and returns the
/// percentiles and ratios.
pub fn ping_pong<D: Drive>(
    rig: &dyn Rig,
    raw_threaded: bool,
    pair: impl FnOnce(&LoopSpec, Workload) -> D,
    size: usize,
    plan: &Plan,
    report: &mut Report,
) -> Latency {
    let t0 = Instant::now();
    let spec = LoopSpec::send(size, 1);
    let mut raw = PingPongLoop::connect(rig, spec).threaded(raw_threaded);
    let fabric = raw.kind();
    let mut rl = RelinkPingPong::new(pair(&spec, Workload::PingPong), spec);
    let series = measure_interleaved(&mut [&mut raw, &mut rl], plan);
    let metric = Metric::MicrosPerOp;
    report.push(Row::new(fabric, "pingpong", &spec, metric, &series[0]));
    report.push(Row::new(
        fabric,
        "relink-pingpong",
        &spec,
        metric,
        &series[1],
    ));
    let reps = plan.reps;
    let per_rep_p50 = (0..reps)
        .map(|i| {
            // Run i of the timed repetitions: counted back from the end.
            let back = reps - i;
            let pick = |r: &Rtts| {
                let run = &r.runs()[r.runs().len() - back];
                let us: Vec<f64> = run.iter().map(|d| d.as_secs_f64() * 1e6).collect();
                quantile(&us, 0.5)
            };
            pick(rl.rtts()) / pick(raw.rtts()).max(f64::MIN_POSITIVE)
        })
        .collect();
    let raw_p = Percentiles::of(&raw.rtts().last_runs(reps));
    let rl_p = Percentiles::of(&rl.rtts().last_runs(reps));
    let out = Latency {
        fabric: fabric.into(),
        size,
        raw_target_thread: raw_threaded,
        raw: raw_p,
        relink: rl_p,
        ratio_p50: rl_p.p50_us / raw_p.p50_us.max(f64::MIN_POSITIVE),
        ratio_p99: rl_p.p99_us / raw_p.p99_us.max(f64::MIN_POSITIVE),
        per_rep_p50,
        relink_loop: rl.stats(),
    };
    raw.close();
    rl.close();
    eprintln!(
        "  {fabric}: ping-pong {size} B measured in {:.1?}",
        t0.elapsed()
    );
    out
}

/// The latencies as a table for people.
pub fn latency_table(lat: &[Latency]) -> String {
    let rows: Vec<Vec<String>> = lat
        .iter()
        .map(|l| {
            let rep = Summary::of(&l.per_rep_p50);
            vec![
                l.fabric.clone(),
                crate::loops::human_size(l.size),
                format!("{:.2}", l.raw.p50_us),
                format!("{:.2}", l.raw.p99_us),
                format!("{:.2}", l.relink.p50_us),
                format!("{:.2}", l.relink.p99_us),
                format!("{:.3}", l.ratio_p50),
                format!("{:.3}", l.ratio_p99),
                format!("{:.3}-{:.3}", rep.min, rep.max),
                format!("{:.2}", l.relink_loop.iterations_per_op()),
                format!("{:.2}", l.relink_loop.waits_per_op()),
            ]
        })
        .collect();
    let mut out = text_table(
        &[
            "fabric",
            "size",
            "raw p50",
            "raw p99",
            "relink p50",
            "relink p99",
            "p50 ratio",
            "p99 ratio",
            "per-rep p50 ratio",
            "iter/rt",
            "wait/rt",
        ],
        &rows,
        &[0, 1],
    );
    out.push_str(
        "round-trip times in µs (wall clock), every round trip of the timed repetitions \
         pooled; ratios relink / raw; per-rep p50 ratio: min-max over the repetitions taken \
         side by side; iter/rt, wait/rt: iterations of the relink loop and iterations that \
         waited on the provider, per round trip\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtts_pool_the_last_runs() {
        let mut r = Rtts::default();
        r.push_run(vec![Duration::from_micros(100)]);
        r.push_run(vec![Duration::from_micros(1), Duration::from_micros(3)]);
        r.push_run(vec![Duration::from_micros(2)]);
        assert_eq!(r.last_runs(2), vec![1.0, 3.0, 2.0]);
        assert_eq!(r.last_runs(9).len(), 4);
        let p = Percentiles::of(&r.last_runs(2));
        assert_eq!((p.samples, p.p50_us, p.p99_us), (3, 2.0, 3.0));
        assert_eq!((p.min_us, p.max_us), (1.0, 3.0));
    }
}
