//! Benchmark reports: a table for people, JSON for tools.
//!
//! A [`Report`] collects one [`Row`] per (fabric, workload) series, prints
//! as an aligned table ([`Report::table`]) and writes itself as JSON to
//! `target/relink-bench/<bench>.json` ([`Report::write_json`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::loops::LoopSpec;
use crate::series::{Metric, Plan, Series, Summary};

/// The machine a report was measured on (as far as the process can tell).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// CPUs available to the process.
    pub cpus: usize,
    /// CPU model from `/proc/cpuinfo`, if readable.
    pub cpu_model: Option<String>,
    /// Operating system (`linux`, ...).
    pub os: String,
    /// Architecture (`x86_64`, ...).
    pub arch: String,
    /// `release` or `debug` (whether debug assertions were on in this crate).
    pub profile: String,
}

impl Machine {
    /// The machine this process runs on.
    pub fn current() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
        }
    }
}

/// The plan of a report, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PlanInfo {
    /// Warm-up per series, seconds.
    pub warmup_s: f64,
    /// Target length of a repetition, seconds.
    pub rep_time_s: f64,
    /// Repetitions per series.
    pub reps: usize,
}

/// One timed repetition of a row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rep {
    /// Operations completed.
    pub ops: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// CPU seconds of the whole process meanwhile, if known.
    pub cpu_s: Option<f64>,
    /// The row's metric for this repetition.
    pub value: f64,
}

/// One series: a workload on a fabric, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Provider kind, e.g. `soft-inproc`.
    pub fabric: String,
    /// Operation, e.g. `send` or `write`.
    pub op: String,
    /// Bytes per operation.
    pub size: usize,
    /// Operations outstanding at most.
    pub window: usize,
    /// Every n-th operation signaled (1: every one).
    pub signal_every: usize,
    /// Unit of `median`, `min`, `max`, e.g. `msg/s`.
    pub unit: String,
    /// Median of the repetitions' values, in `unit`.
    pub median: f64,
    /// Smallest value of one repetition, in `unit`.
    pub min: f64,
    /// Largest value of one repetition, in `unit`.
    pub max: f64,
    /// Operations per repetition.
    pub count: u64,
    /// Median over the repetitions of CPU time / wall-clock time of the
    /// process (1.0 = one CPU busy throughout), if known.
    pub cpu_per_wall: Option<f64>,
    /// The 1-minute load average when the row was added (it counts the
    /// benchmark itself), if known.
    pub load_avg_1m: Option<f64>,
    /// Wall-clock seconds of warm-up.
    pub warmup_s: f64,
    /// Every timed repetition, in the order run (warm-up runs not included).
    pub reps: Vec<Rep>,
}

impl Row {
    /// A row for `series` of `op` shaped `spec` on `fabric`, in `metric`.
    pub fn new(fabric: &str, op: &str, spec: &LoopSpec, metric: Metric, series: &Series) -> Row {
        let s = series.summary(metric);
        let loads: Option<Vec<f64>> = series.reps.iter().map(|m| m.cpu_load()).collect();
        Row {
            fabric: fabric.into(),
            op: op.into(),
            size: spec.size,
            window: spec.window,
            signal_every: spec.signal_every,
            unit: metric.unit().into(),
            median: s.median,
            min: s.min,
            max: s.max,
            count: series.count,
            cpu_per_wall: loads.map(|l| Summary::of(&l).median),
            load_avg_1m: load_avg_1m(),
            warmup_s: series.warmup.as_secs_f64(),
            reps: series
                .reps
                .iter()
                .map(|m| Rep {
                    ops: m.ops,
                    bytes: m.bytes,
                    secs: m.elapsed.as_secs_f64(),
                    cpu_s: m.cpu.map(|c| c.as_secs_f64()),
                    value: metric.of(m),
                })
                .collect(),
        }
    }

    fn workload(&self) -> String {
        let spec = LoopSpec {
            size: self.size,
            window: self.window,
            signal_every: self.signal_every,
            verify: crate::Verify::Stamp,
            max_message: self.size,
        };
        format!("{} {}", self.op, spec.describe())
    }
}

/// A benchmark's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The benchmark's name (and its JSON file's).
    pub bench: String,
    /// Whether this was a quick run (proves it runs, measures nothing).
    pub quick: bool,
    /// Seconds since the Unix epoch when the report was started.
    pub started_unix_s: u64,
    /// Where it ran.
    pub machine: Machine,
    /// How each series was measured.
    pub plan: PlanInfo,
    /// One row per series, in the order measured.
    pub rows: Vec<Row>,
    /// Whatever else the benchmark records (ratios, latencies, ...), by
    /// name; left out of the JSON when empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Report {
    /// An empty report for `bench`, measured with `plan`.
    pub fn new(bench: &str, quick: bool, plan: &Plan) -> Report {
        Report {
            bench: bench.into(),
            quick,
            started_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_secs(),
            machine: Machine::current(),
            plan: PlanInfo {
                warmup_s: plan.warmup.as_secs_f64(),
                rep_time_s: plan.rep_time.as_secs_f64(),
                reps: plan.reps,
            },
            rows: Vec::new(),
            extra: BTreeMap::new(),
        }
    }

    /// Record `value` under `key` in [`Report::extra`].
    pub fn set_extra(&mut self, key: &str, value: impl Serialize) {
        let v = serde_json::to_value(value).expect("bench values serialise");
        self.extra.insert(key.into(), v);
    }

    /// Add a row after those already there.
    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// The report as an aligned text table with a heading.
    pub fn table(&self) -> String {
        let m = &self.machine;
        let mut out = format!(
            "{}{}: {} CPUs{}, {} build; {:.2} s warm-up, then {} repetitions of ~{:.2} s\n",
            self.bench,
            if self.quick {
                " (QUICK: proves it runs, measures nothing)"
            } else {
                ""
            },
            m.cpus,
            m.cpu_model
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            m.profile,
            self.plan.warmup_s,
            self.plan.reps,
            self.plan.rep_time_s,
        );
        let header = [
            "fabric", "workload", "median", "min", "max", "unit", "ops/rep", "cpu/wall", "load1",
        ];
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.fabric.clone(),
                    r.workload(),
                    fmt_value(r.median),
                    fmt_value(r.min),
                    fmt_value(r.max),
                    r.unit.clone(),
                    r.count.to_string(),
                    r.cpu_per_wall
                        .map_or_else(|| "-".into(), |c| format!("{c:.2}")),
                    r.load_avg_1m
                        .map_or_else(|| "-".into(), |l| format!("{l:.2}")),
                ]
            })
            .collect();
        // Text left, numbers right.
        out.push_str(&text_table(&header, &rows, &[0, 1, 5]));
        out.push_str(
            "median, min, max over the repetitions (k = 10^3, M = 10^6; GB = 10^9 bytes, \
             MB = 10^6 bytes); cpu/wall: process CPU time over wall-clock time, median; \
             load1: 1-minute load average after the series\n",
        );
        out
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises")
    }

    /// Write [`to_json`](Report::to_json) to `<target>/relink-bench/<bench>.json`
    /// (creating the directory) and return the path.
    pub fn write_json(&self) -> std::io::Result<PathBuf> {
        self.write_json_in(&target_dir().join("relink-bench"))
    }

    /// Write [`to_json`](Report::to_json) to `<dir>/<bench>.json`, creating
    /// `dir`, and return the path.
    pub fn write_json_in(&self, dir: &Path) -> std::io::Result<PathBuf> {
        write_json_in(dir, &self.bench, self)
    }
}

/// Writes `value` as `<target>/relink-bench/<name>.json` and prints
/// where; a bench that cannot write its report says why and exits 1.
pub fn write_report_or_exit(name: &str, value: &impl Serialize) {
    match write_json_in(&target_dir().join("relink-bench"), name, value) {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("{name}: cannot write the JSON report: {e}");
            std::process::exit(1);
        }
    }
}

/// Write `value` as pretty-printed JSON to `<dir>/<name>.json`, creating
/// `dir`, and return the path.
pub fn write_json_in(dir: &Path, name: &str, value: &impl Serialize) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(&path, text + "\n")?;
    Ok(path)
}

/// Format `v` with four significant digits and an SI prefix (`812.3 k`).
pub fn fmt_si(v: f64) -> String {
    fmt_value(v)
}

/// Lay out `rows` under `header` as an aligned text table, columns whose
/// index is in `left` aligned left, the others right.
pub fn text_table(header: &[&str], rows: &[Vec<String>], left: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for r in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
            if left.contains(&i) {
                line.push_str(&format!("{c:<w$}  "));
            } else {
                line.push_str(&format!("{c:>w$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The 1-minute load average from `/proc/loadavg`, if readable.
fn load_avg_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Four significant digits with an SI prefix: `812.3 k`, `2.481`, `1.204 M`.
fn fmt_value(v: f64) -> String {
    let (scaled, prefix) = if v.abs() >= 1e9 {
        (v / 1e9, " G")
    } else if v.abs() >= 1e6 {
        (v / 1e6, " M")
    } else if v.abs() >= 1e3 {
        (v / 1e3, " k")
    } else {
        (v, "")
    };
    let decimals = if scaled.abs() >= 100.0 {
        1
    } else if scaled.abs() >= 10.0 {
        2
    } else {
        3
    };
    format!("{scaled:.decimals$}{prefix}")
}

/// Cargo's target directory for the running benchmark: the nearest
/// ancestor of the executable that holds cargo's `CACHEDIR.TAG`, else
/// `$CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe
            .ancestors()
            .skip(1)
            .find(|d| d.join("CACHEDIR.TAG").is_file())
        {
            return dir.to_path_buf();
        }
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::Measurement;

    fn series() -> Series {
        Series {
            warmup: Duration::from_millis(5),
            warmup_runs: 2,
            count: 1000,
            reps: [2u64, 1, 4]
                .iter()
                .map(|ms| Measurement {
                    ops: 1000,
                    bytes: 64_000,
                    elapsed: Duration::from_millis(*ms),
                    cpu: Some(Duration::from_millis(*ms)),
                })
                .collect(),
        }
    }

    #[test]
    fn table_and_json() {
        let mut r = Report::new("unit", true, &Plan::quick());
        let spec = LoopSpec::send(64, 64).signal_every(16);
        r.push(Row::new(
            "soft-x",
            "send",
            &spec,
            Metric::MessagesPerSec,
            &series(),
        ));
        let t = r.table();
        assert!(t.contains("send 64 B, window 64, signal 1/16"), "{t}");
        // 1000 ops in 2 ms (median), 4 ms (min), 1 ms (max).
        assert!(
            t.contains("500.0 k") && t.contains("250.0 k") && t.contains("1.000 M"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["rows"][0]["median"], 500_000.0);
        assert_eq!(v["rows"][0]["unit"], "msg/s");
        assert_eq!(v["rows"][0]["cpu_per_wall"], 1.0);
        assert_eq!(v["rows"][0]["reps"][0]["cpu_s"], 0.002);
        assert_eq!(v["rows"][0]["reps"].as_array().unwrap().len(), 3);
        assert_eq!(v["quick"], true);
        let dir = std::env::temp_dir().join(format!("relink-bench-test-{}", std::process::id()));
        let path = r.write_json_in(&dir).unwrap();
        assert!(path.ends_with("unit.json"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn values_format() {
        assert_eq!(fmt_value(2.4812), "2.481");
        assert_eq!(fmt_value(812_345.0), "812.3 k");
        assert_eq!(fmt_value(12_345_678.0), "12.35 M");
    }
}
