//! Small-message latency, relink next to the raw provider: round trips of
//! one message and its reply ([`PingPongLoop`] on the raw provider,
//! [`RelinkPingPong`] through relink sessions, copied and zero-copy), their
//! timed repetitions interleaved, each round trip timed on its own
//! ([`Rtts`]), summarised as median and p99 ([`Percentiles`]) with the
//! ratio relink / raw, the CPU time per round trip next to raw's
//! ([`CpuRatio`]) and the copies relink made ([`Latency`], [`RelinkRtt`]).
//! Used by the `latency` benchmark (and `rxe`'s ping-pong).

use std::time::{Duration, Instant};

use relink_testkit::Rig;
use serde::Serialize;

use crate::loops::PingPongLoop;
use crate::report::text_table;
use crate::session::{Drive, LoopStats, MessageSource, RelinkPingPong, RoundTripCopies, Workload};
use crate::{
    measure_interleaved, quantile, LoopSpec, Metric, Plan, Report, Row, Runner, Series, Summary,
};

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

/// CPU time per round trip of one relink loop next to the raw loop's:
/// the CPU time (user + system) of the whole process, all threads, over
/// each timed repetition ([`Measurement::cpu`](crate::Measurement::cpu),
/// 10 ms ticks of `/proc/self/stat`), over its round trips. In-process
/// (one thread, busy throughout) it matches the wall clock per round trip;
/// over TCP it adds both sides' loop threads and the fabric's I/O threads.
#[derive(Debug, Clone, Serialize)]
pub struct CpuRatio {
    /// Median over the repetitions, µs of CPU per round trip.
    pub us: f64,
    /// relink / raw of each pair of repetitions taken side by side.
    pub per_rep: Vec<f64>,
    /// Median of `per_rep`.
    pub ratio: f64,
    /// Smallest of `per_rep`.
    pub min: f64,
    /// Largest of `per_rep`.
    pub max: f64,
}

impl CpuRatio {
    /// `relink`'s CPU per round trip next to `raw`'s (repetitions paired
    /// in order); `None` without CPU times, or if none of `raw`'s
    /// repetitions took a tick.
    pub fn of(relink: &Series, raw: &Series) -> Option<CpuRatio> {
        let rl = cpu_us_per_op(relink)?;
        let rw = cpu_us_per_op(raw)?;
        let per_rep: Vec<f64> = rl
            .iter()
            .zip(&rw)
            .filter(|(_, b)| **b > 0.0)
            .map(|(a, b)| a / b)
            .collect();
        if per_rep.is_empty() {
            return None;
        }
        let s = Summary::of(&per_rep);
        Some(CpuRatio {
            us: Summary::of(&rl).median,
            per_rep,
            ratio: s.median,
            min: s.min,
            max: s.max,
        })
    }
}

/// Each repetition's process CPU time per operation, µs; `None` if a
/// repetition has no CPU time.
pub fn cpu_us_per_op(series: &Series) -> Option<Vec<f64>> {
    series
        .reps
        .iter()
        .map(|m| m.cpu.map(|c| c.as_secs_f64() * 1e6 / m.ops.max(1) as f64))
        .collect()
}

/// One relink loop of a ping-pong series, next to the raw loop of the
/// same run.
#[derive(Debug, Clone, Serialize)]
pub struct RelinkRtt {
    /// `send` (copied both ways) or `send-from` (zero-copy both ways).
    pub op: String,
    /// Its round trips, all timed repetitions pooled.
    pub rtt: Percentiles,
    /// p50 / raw p50.
    pub ratio_p50: f64,
    /// p99 / raw p99.
    pub ratio_p99: f64,
    /// p50 / raw p50 of each pair of repetitions taken side by side.
    pub per_rep_p50: Vec<f64>,
    /// CPU per round trip, and its ratio to raw's.
    pub cpu: Option<CpuRatio>,
    /// Iterations and waits of the loop per round trip (all runs).
    pub relink_loop: LoopStats,
    /// The copies of the payload relink made.
    pub copies: RoundTripCopies,
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
    /// The raw loop's CPU per round trip (median of the repetitions), µs.
    pub raw_cpu_us: Option<f64>,
    /// relink's round trips, copied both ways (`Node::send`), all timed
    /// repetitions pooled.
    pub relink: Percentiles,
    /// relink p50 / raw p50.
    pub ratio_p50: f64,
    /// relink p99 / raw p99.
    pub ratio_p99: f64,
    /// relink p50 / raw p50 of each pair of repetitions taken side by side.
    pub per_rep_p50: Vec<f64>,
    /// Iterations and waits of the relink loop per round trip (all runs).
    pub relink_loop: LoopStats,
    /// The copying relink loop in full (the fields above, its CPU and
    /// copies), then the zero-copy one if measured.
    pub loops: Vec<RelinkRtt>,
}

impl Latency {
    /// The relink loop `op` (`send` or `send-from`), if measured.
    pub fn variant(&self, op: &str) -> Option<&RelinkRtt> {
        self.loops.iter().find(|l| l.op == op)
    }
}

/// Ping-pong of `size`-byte messages on a raw pair of `rig` (the target
/// on a thread of its own if `raw_threaded`: as in the relink pair, so
/// that both sides of the comparison wait and wake alike) and through
/// relink sessions `pair` makes: copied both ways ([`Workload::PingPong`])
/// and, if `zero_copy`, from registered slots into posted receives both
/// ways ([`Workload::PingPongFrom`]); measured interleaved with `plan`
/// (raw, copied, zero-copy, raw, ...). Records the rows in `report`
/// (`pingpong`, `relink-pingpong`, `relink-pingpong-from`, in mean µs per
/// round trip) and returns the percentiles, CPU per round trip, ratios
/// and copies.
pub fn ping_pong<D: Drive>(
    rig: &dyn Rig,
    raw_threaded: bool,
    pair: impl Fn(&LoopSpec, Workload) -> D,
    size: usize,
    zero_copy: bool,
    plan: &Plan,
    report: &mut Report,
) -> Latency {
    let t0 = Instant::now();
    let spec = LoopSpec::send(size, 1);
    let mut raw = PingPongLoop::connect(rig, spec).threaded(raw_threaded);
    let fabric = raw.kind();
    let mut rls = vec![RelinkPingPong::new(pair(&spec, Workload::PingPong), spec)];
    if zero_copy {
        rls.push(RelinkPingPong::with_source(
            pair(&spec, Workload::PingPongFrom),
            spec,
            MessageSource::Registered,
        ));
        rls.push(RelinkPingPong::with_source(
            pair(&spec, Workload::PingPongRead),
            spec,
            MessageSource::Read,
        ));
    }
    let series = {
        let mut runners: Vec<&mut dyn Runner> = vec![&mut raw];
        runners.extend(rls.iter_mut().map(|r| r as &mut dyn Runner));
        measure_interleaved(&mut runners, plan)
    };
    let metric = Metric::MicrosPerOp;
    report.push(Row::new(fabric, "pingpong", &spec, metric, &series[0]));
    let reps = plan.reps;
    // Run i of the timed repetitions: counted back from the end.
    let rep_p50 = |r: &Rtts, i: usize| {
        let run = &r.runs()[r.runs().len() - (reps - i)];
        let us: Vec<f64> = run.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        quantile(&us, 0.5)
    };
    let raw_p = Percentiles::of(&raw.rtts().last_runs(reps));
    let raw_cpu_us = cpu_us_per_op(&series[0]).map(|v| Summary::of(&v).median);
    let mut loops = Vec::new();
    for (rl, s) in rls.into_iter().zip(&series[1..]) {
        let op = rl.source().name();
        let row = if op == "send" {
            "relink-pingpong".to_string()
        } else {
            format!("relink-pingpong-{}", op.trim_start_matches("send-"))
        };
        report.push(Row::new(fabric, &row, &spec, metric, s));
        let p = Percentiles::of(&rl.rtts().last_runs(reps));
        let per_rep_p50 = (0..reps)
            .map(|i| rep_p50(rl.rtts(), i) / rep_p50(raw.rtts(), i).max(f64::MIN_POSITIVE))
            .collect();
        let relink_loop = rl.stats();
        loops.push(RelinkRtt {
            op: op.into(),
            rtt: p,
            ratio_p50: p.p50_us / raw_p.p50_us.max(f64::MIN_POSITIVE),
            ratio_p99: p.p99_us / raw_p.p99_us.max(f64::MIN_POSITIVE),
            per_rep_p50,
            cpu: CpuRatio::of(s, &series[0]),
            relink_loop,
            copies: rl.close_counted(),
        });
    }
    raw.close();
    let copied = &loops[0];
    let out = Latency {
        fabric: fabric.into(),
        size,
        raw_target_thread: raw_threaded,
        raw: raw_p,
        raw_cpu_us,
        relink: copied.rtt,
        ratio_p50: copied.ratio_p50,
        ratio_p99: copied.ratio_p99,
        per_rep_p50: copied.per_rep_p50.clone(),
        relink_loop: copied.relink_loop,
        loops,
    };
    eprintln!(
        "  {fabric}: ping-pong {size} B measured in {:.1?}",
        t0.elapsed()
    );
    out
}

/// What is wrong with the copies of `lat`'s relink loops, if anything: a
/// zero-copy round trip (`send-from`) must copy nothing on the way out,
/// a copying one must (else the counter counts nothing and the 0 proves
/// nothing), and every message both ways must have been delivered.
pub fn copy_faults(lat: &[Latency]) -> Vec<String> {
    let mut out = Vec::new();
    for l in lat {
        for r in &l.loops {
            let c = &r.copies;
            let what = format!("{} {} ping-pong ({} B)", l.fabric, r.op, l.size);
            if c.round_trips == 0 || c.delivered != 2 * c.round_trips {
                out.push(format!(
                    "{what}: {} round trips, {} messages delivered",
                    c.round_trips, c.delivered
                ));
            }
            match r.op.as_str() {
                "send-read" if c.send_copied_bytes + c.receive_copied_bytes != 0 => {
                    out.push(format!(
                        "{what}: relink copied {} bytes to send and {} to receive; a message \
                         read by its receiver must be copied on neither side",
                        c.send_copied_bytes, c.receive_copied_bytes
                    ));
                }
                "send-from" if c.send_copied_bytes != 0 => out.push(format!(
                    "{what}: relink copied {} bytes of payload to send from registered \
                     memory ({:.3} copies per round trip); Node::send_from must copy none",
                    c.send_copied_bytes,
                    c.send_per_round_trip()
                )),
                "send" if c.send_copied_bytes == 0 => out.push(format!(
                    "{what}: Counters::send_copied_bytes stayed 0 over {} round trips of \
                     Node::send; the counter counts nothing",
                    c.round_trips
                )),
                _ => {}
            }
        }
    }
    out
}

/// The latencies as a table for people: one row per loop (raw, relink
/// `send`, relink `send-from`) of each series.
pub fn latency_table(lat: &[Latency]) -> String {
    let opt = |v: Option<f64>, prec: usize| v.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"));
    let mut rows: Vec<Vec<String>> = Vec::new();
    for l in lat {
        rows.push(vec![
            l.fabric.clone(),
            crate::loops::human_size(l.size),
            "raw".into(),
            format!("{:.2}", l.raw.p50_us),
            format!("{:.2}", l.raw.p99_us),
            "-".into(),
            "-".into(),
            "-".into(),
            opt(l.raw_cpu_us, 2),
            "-".into(),
            "-".into(),
            "0".into(),
            "-".into(),
            "-".into(),
        ]);
        for r in &l.loops {
            let rep = Summary::of(&r.per_rep_p50);
            rows.push(vec![
                l.fabric.clone(),
                crate::loops::human_size(l.size),
                format!("relink {}", r.op),
                format!("{:.2}", r.rtt.p50_us),
                format!("{:.2}", r.rtt.p99_us),
                format!("{:.3}", r.ratio_p50),
                format!("{:.3}-{:.3}", rep.min, rep.max),
                format!("{:.3}", r.ratio_p99),
                opt(r.cpu.as_ref().map(|c| c.us), 2),
                opt(r.cpu.as_ref().map(|c| c.ratio), 3),
                r.cpu
                    .as_ref()
                    .map_or_else(|| "-".into(), |c| format!("{:.3}-{:.3}", c.min, c.max)),
                format!(
                    "{:.2}+{:.2}",
                    r.copies.send_per_round_trip(),
                    r.copies.receive_per_round_trip()
                ),
                format!("{:.2}", r.relink_loop.iterations_per_op()),
                format!("{:.2}", r.relink_loop.waits_per_op()),
            ]);
        }
    }
    let mut out = text_table(
        &[
            "fabric",
            "size",
            "loop",
            "p50",
            "p99",
            "p50 ratio",
            "per-rep p50 ratio",
            "p99 ratio",
            "cpu/rt",
            "cpu ratio",
            "per-rep cpu ratio",
            "copies/rt",
            "iter/rt",
            "wait/rt",
        ],
        &rows,
        &[0, 1, 2],
    );
    out.push_str(
        "round-trip times in µs (wall clock), every round trip of the timed repetitions \
         pooled; ratios relink / raw; per-rep: min-max over the repetitions taken side by \
         side; cpu/rt: µs of the process's CPU time (all threads) per round trip, median of \
         the repetitions (10 ms ticks); relink send: Node::send and poll_delivery_into both \
         ways; relink send-from: Node::send_from of registered slots and posted receives \
         (post_receive / poll_received) both ways; relink send-read: the same, each \
         receiver reading the messages itself (SessionOptions::rendezvous, a READ per \
         message); copies/rt: copies of the payload relink \
         made per round trip, on the way out + on the way in, both messages (the sessions' \
         counters); iter/rt, wait/rt: iterations of the relink loop and iterations that \
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
