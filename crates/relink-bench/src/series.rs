//! Warm-up, calibration and timed repetitions of a loop, and their summary.
//!
//! [`measure`] runs anything that implements [`Runner`]: first warm-up runs
//! of doubling counts until [`Plan::warmup`] has passed (the last one
//! calibrates), then [`Plan::reps`] timed runs of one fixed count chosen so
//! that a run takes about [`Plan::rep_time`]. Every run is kept, so a report
//! can show the median next to the spread.

use std::time::{Duration, Instant};

use crate::loops::Measurement;

/// Something that can do `count` operations and time them: a measuring
/// loop on an open connection. Implemented by
/// [`SendLoop`](crate::SendLoop) and [`WriteLoop`](crate::WriteLoop), and
/// for relink sessions by [`RelinkSendLoop`](crate::RelinkSendLoop) and
/// [`RelinkWriteLoop`](crate::RelinkWriteLoop); round trips by
/// [`PingPongLoop`](crate::PingPongLoop) and
/// [`RelinkPingPong`](crate::RelinkPingPong).
pub trait Runner {
    /// Do `count` operations and report how long they took.
    fn run(&mut self, count: u64) -> Measurement;
}

/// How long to warm up and how many timed repetitions of what length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Wall-clock time spent in warm-up runs (not reported).
    pub warmup: Duration,
    /// Target length of one timed repetition.
    pub rep_time: Duration,
    /// Number of timed repetitions.
    pub reps: usize,
    /// Operations in the first warm-up run, and the least in any run.
    pub min_count: u64,
}

impl Plan {
    /// The measuring plan: 1 s of warm-up, then 5 repetitions of about 1 s.
    pub fn full() -> Plan {
        Plan {
            warmup: Duration::from_secs(1),
            rep_time: Duration::from_secs(1),
            reps: 5,
            min_count: 64,
        }
    }

    /// A short plan that only proves the loops run: 20 ms of warm-up, then
    /// 3 repetitions of about 20 ms.
    pub fn quick() -> Plan {
        Plan {
            warmup: Duration::from_millis(20),
            rep_time: Duration::from_millis(20),
            reps: 3,
            min_count: 16,
        }
    }

    /// [`quick`](Plan::quick) if `quick`, else [`full`](Plan::full).
    pub fn pick(quick: bool) -> Plan {
        if quick {
            Plan::quick()
        } else {
            Plan::full()
        }
    }
}

/// What a series reports per repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Operations (messages) per second.
    MessagesPerSec,
    /// Payload gigabytes (10^9 bytes) per second.
    GigabytesPerSec,
    /// Payload megabytes (10^6 bytes) per second (for slow fabrics, e.g.
    /// Soft-RoCE in a VM).
    MegabytesPerSec,
    /// Mean wall-clock microseconds per operation (for a ping-pong loop,
    /// whose operation is one round trip: the mean round-trip time).
    MicrosPerOp,
}

impl Metric {
    /// The metric of one run.
    pub fn of(self, m: &Measurement) -> f64 {
        match self {
            Metric::MessagesPerSec => m.ops_per_sec(),
            Metric::GigabytesPerSec => m.gbytes_per_sec(),
            Metric::MegabytesPerSec => m.bytes_per_sec() / 1e6,
            Metric::MicrosPerOp => m.secs() * 1e6 / m.ops.max(1) as f64,
        }
    }

    /// Its unit, e.g. `msg/s`.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::MessagesPerSec => "msg/s",
            Metric::GigabytesPerSec => "GB/s",
            Metric::MegabytesPerSec => "MB/s",
            Metric::MicrosPerOp => "us/op",
        }
    }
}

/// Median, minimum and maximum of some values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Summary {
    /// The summary of `values`.
    ///
    /// # Panics
    /// If `values` is empty or holds a NaN.
    pub fn of(values: &[f64]) -> Summary {
        assert!(!values.is_empty(), "no values to summarise");
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// The outcome of [`measure`]: the calibrated count and every timed run.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Wall-clock time spent warming up.
    pub warmup: Duration,
    /// Warm-up runs done.
    pub warmup_runs: usize,
    /// Operations per timed repetition.
    pub count: u64,
    /// The timed repetitions, in order.
    pub reps: Vec<Measurement>,
}

impl Series {
    /// `metric` of each repetition, in order.
    pub fn values(&self, metric: Metric) -> Vec<f64> {
        self.reps.iter().map(|m| metric.of(m)).collect()
    }

    /// Median, min and max of `metric` over the repetitions.
    pub fn summary(&self, metric: Metric) -> Summary {
        Summary::of(&self.values(metric))
    }
}

/// Warm `runner` up, calibrate a count from the last warm-up run, and time
/// [`Plan::reps`] runs of that count.
pub fn measure(runner: &mut dyn Runner, plan: &Plan) -> Series {
    assert!(plan.reps >= 1, "a plan needs at least one repetition");
    let mut s = calibrate(runner, plan);
    s.reps = (0..plan.reps).map(|_| runner.run(s.count)).collect();
    s
}

/// [`measure`] several runners side by side: each is warmed up and
/// calibrated in turn, then the timed repetitions alternate (repetition 1
/// of every runner, then repetition 2 of every runner, ...), so that on a
/// shared machine a slow spell hits all of them alike and the ratio of
/// repetitions taken side by side is fair. Returns one series per runner,
/// in order.
pub fn measure_interleaved(runners: &mut [&mut dyn Runner], plan: &Plan) -> Vec<Series> {
    assert!(plan.reps >= 1, "a plan needs at least one repetition");
    let mut series: Vec<Series> = runners.iter_mut().map(|r| calibrate(*r, plan)).collect();
    for _ in 0..plan.reps {
        for (r, s) in runners.iter_mut().zip(&mut series) {
            let m = r.run(s.count);
            s.reps.push(m);
        }
    }
    series
}

/// The warm-up of [`measure`]: a [`Series`] with its calibrated count and
/// no repetitions yet.
fn calibrate(runner: &mut dyn Runner, plan: &Plan) -> Series {
    let min = plan.min_count.max(1);
    let t0 = Instant::now();
    let mut count = min;
    let mut runs = 0;
    let last = loop {
        let m = runner.run(count);
        runs += 1;
        if t0.elapsed() >= plan.warmup {
            break m;
        }
        // Grow until a run is long enough to calibrate from.
        if m.elapsed < plan.warmup / 4 {
            count = count.saturating_mul(2);
        }
    };
    let warmup = t0.elapsed();
    let count = ((last.ops_per_sec() * plan.rep_time.as_secs_f64()) as u64).max(min);
    Series {
        warmup,
        warmup_runs: runs,
        count,
        reps: Vec::with_capacity(plan.reps),
    }
}

/// Ratios of two series' repetitions taken side by side (`a[i] / b[i]` in
/// `metric`), as [`measure_interleaved`] pairs them.
pub fn paired_ratios(a: &Series, b: &Series, metric: Metric) -> Vec<f64> {
    a.values(metric)
        .iter()
        .zip(b.values(metric))
        .map(|(x, y)| x / y.max(f64::MIN_POSITIVE))
        .collect()
}

/// The `q`-quantile (0.0..=1.0) of `values` by the nearest-rank method:
/// the smallest value with at least `q × n` values at or below it.
///
/// # Panics
/// If `values` is empty, holds a NaN, or `q` is outside 0..=1.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    assert!(!values.is_empty(), "no values");
    assert!((0.0..=1.0).contains(&q), "quantile {q} outside 0..=1");
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runner that takes 1 µs of (pretend) time per operation.
    struct Fake {
        counts: Vec<u64>,
    }

    impl Runner for Fake {
        fn run(&mut self, count: u64) -> Measurement {
            self.counts.push(count);
            let elapsed = Duration::from_micros(count);
            std::thread::sleep(elapsed);
            Measurement {
                ops: count,
                bytes: count * 8,
                elapsed,
                cpu: None,
            }
        }
    }

    #[test]
    fn summary_of_odd_and_even_counts() {
        let s = Summary::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
    }

    #[test]
    fn measure_warms_up_then_repeats_one_calibrated_count() {
        let mut fake = Fake { counts: Vec::new() };
        let plan = Plan {
            warmup: Duration::from_millis(20),
            rep_time: Duration::from_millis(10),
            reps: 3,
            min_count: 16,
        };
        let s = measure(&mut fake, &plan);
        assert_eq!(s.reps.len(), 3);
        assert_eq!(fake.counts.len(), s.warmup_runs + 3);
        assert_eq!(fake.counts[0], 16);
        assert!(fake.counts[fake.counts.len() - 3..]
            .iter()
            .all(|c| *c == s.count));
        // 1 µs per op, 10 ms per rep: 10k operations (give or take rounding).
        assert!((9_990..=10_010).contains(&s.count), "count {}", s.count);
        let v = s.summary(Metric::MessagesPerSec);
        assert!(v.min <= v.median && v.median <= v.max);
        assert_eq!(Metric::GigabytesPerSec.unit(), "GB/s");
        assert_eq!(Metric::MegabytesPerSec.unit(), "MB/s");
        let m = Measurement {
            ops: 1,
            bytes: 3_000_000,
            elapsed: Duration::from_secs(2),
            cpu: None,
        };
        assert_eq!(Metric::MegabytesPerSec.of(&m), 1.5);
        assert_eq!(Metric::MicrosPerOp.of(&m), 2e6);
        assert_eq!(Metric::MicrosPerOp.unit(), "us/op");
    }

    #[test]
    fn interleaved_series_alternate_and_pair() {
        let (mut a, mut b) = (Fake { counts: Vec::new() }, Fake { counts: Vec::new() });
        let plan = Plan {
            warmup: Duration::from_millis(5),
            rep_time: Duration::from_millis(2),
            reps: 3,
            min_count: 16,
        };
        let s = measure_interleaved(&mut [&mut a, &mut b], &plan);
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|x| x.reps.len() == 3));
        assert_eq!(a.counts.len(), s[0].warmup_runs + 3);
        let r = paired_ratios(&s[0], &s[1], Metric::MessagesPerSec);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|x| *x > 0.0));
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
    }
}
