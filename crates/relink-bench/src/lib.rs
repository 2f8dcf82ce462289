//! # relink-bench — measuring loops and benchmark reports
//!
//! The loops that benchmarks of relink share, written once against the
//! [`Provider`](relink_fabric::Provider) trait and a testkit [`Rig`], so that
//! the same loop measures the soft fabric in-process, the soft fabric over
//! TCP, real verbs — and, later, relink sessions next to the raw provider in
//! the same run.
//!
//! - [`loops`]: [`SendLoop`] (message rate of SENDs with a window of
//!   outstanding requests) and [`WriteLoop`] (bandwidth of WRITEs), each on
//!   one connected pair, each checking every completion and every payload it
//!   counts. [`send_rate`] and [`write_rate`] run one measurement on a fresh
//!   pair.
//! - [`series`]: warm-up, calibration and timed repetitions of anything that
//!   implements [`Runner`] ([`measure`]), summarised as median, min and max.
//! - [`report`]: a table for people and JSON for tools
//!   (`target/relink-bench/<name>.json`).
//!
//! Time is wall-clock time ([`std::time::Instant`]) throughout: on the
//! in-process fabric, whose clock is virtual, that measures how fast the
//! simulator itself runs.
//!
//! ```
//! use relink_bench::{send_rate, LoopSpec};
//! use relink_testkit::soft_rigs::InProcRig;
//!
//! let rig = InProcRig::new(1);
//! let m = send_rate(&rig, 64, 8, 200);
//! assert_eq!((m.ops, m.bytes), (200, 200 * 64));
//! assert!(m.ops_per_sec() > 0.0);
//! # let _ = LoopSpec::send(64, 8);
//! ```

pub mod loops;
pub mod report;
pub mod series;

pub use loops::{send_rate, write_rate, LoopSpec, Measurement, SendLoop, Verify, WriteLoop};
pub use report::{target_dir, Machine, Report, Row};
pub use series::{measure, Metric, Plan, Runner, Series, Summary};

#[doc(no_inline)]
pub use relink_testkit::Rig;

/// Name of the environment variable that asks for a short run
/// (`RELINK_BENCH_QUICK=1`): enough to prove a benchmark still runs, not
/// enough to measure anything.
pub const QUICK_ENV: &str = "RELINK_BENCH_QUICK";

/// Whether [`QUICK_ENV`] asks for a short run (set to anything but empty or
/// `0`).
pub fn quick_from_env() -> bool {
    std::env::var(QUICK_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}
