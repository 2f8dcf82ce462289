//! # relink-bench — measuring loops and benchmark reports
//!
//! The loops that benchmarks of relink share, written once against the
//! [`Provider`](relink_fabric::Provider) trait and a testkit [`Rig`], so that
//! the same loop measures the soft fabric in-process, the soft fabric over
//! TCP and real verbs; and the same workloads through relink sessions, so
//! that a benchmark puts relink next to the raw provider in the same run.
//!
//! - [`loops`]: [`SendLoop`] (message rate of SENDs with a window of
//!   outstanding requests) and [`WriteLoop`] (bandwidth of WRITEs), each on
//!   one connected pair, each checking every completion and every payload it
//!   counts. [`send_rate`] and [`write_rate`] run one measurement on a fresh
//!   pair.
//! - [`session`]: [`RelinkSendLoop`] and [`RelinkWriteLoop`], the same
//!   workloads through a relink session ([`Node::send`](relink::Node::send),
//!   [`Node::write`](relink::Node::write)), on two nodes of the in-process
//!   fabric ([`SimPair`]) or on any two providers, the target's node on a
//!   thread of its own ([`ThreadPair`]; [`TcpPair`] over TCP loopback,
//!   the `rxe` benchmark over real devices).
//! - [`latency`]: round trips of one message and its reply
//!   ([`PingPongLoop`] on the raw provider, [`RelinkPingPong`] through a
//!   relink session), each timed, as median and p99, and the ratio
//!   relink / raw ([`latency::ping_pong`]).
//! - [`overhead`]: one workload on the raw provider and through relink,
//!   interleaved, and the ratio relink / raw ([`overhead::send_overhead`],
//!   [`overhead::write_overhead`]; [`overhead::send_from_overhead`]: one
//!   message per SEND through `Node::send` and through the zero-copy
//!   `Node::send_from`, and the copies relink made of each payload) — for
//!   the soft fabric and real devices.
//! - [`recovery`]: recovery latency of one session over repeated device
//!   faults, and the time a thousand sessions take to resume after one
//!   reset, on virtual and wall-clock time.
//! - [`peer_outage`]: the stall past the return of a peer's device removed
//!   and added back, and the requests sent to the absent peer, across two
//!   processes over TCP.
//! - [`drain`]: the stall an application sees when its session leaves a
//!   device, a planned drain next to an unplanned failover.
//! - [`scale`]: ten thousand sessions through one device reset on the
//!   in-process fabric, a thousand across two processes over TCP: the time
//!   until all resumed and carried a message, and the heap of an idle
//!   session.
//! - [`memory`]: heap bytes per operation held in the journal while the
//!   peer is away, given any live-bytes counter (the bench binary's counting
//!   allocator).
//! - [`series`]: warm-up, calibration and timed repetitions of anything that
//!   implements [`Runner`] ([`measure`], or [`measure_interleaved`] for
//!   several side by side), summarised as median, min and max.
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

pub mod drain;
pub mod latency;
pub mod loops;
pub mod memory;
pub mod overhead;
pub mod peer_outage;
pub mod recovery;
pub mod report;
pub mod scale;
pub mod series;
pub mod session;

pub use loops::{
    process_minor_faults, send_rate, write_rate, LoopSpec, Measurement, PingPongLoop, SendLoop,
    Verify, WriteLoop,
};
pub use report::{target_dir, Machine, Report, Row};
pub use series::{
    measure, measure_interleaved, paired_ratios, quantile, Metric, Plan, Runner, Series, Summary,
};
pub use session::{
    Drive, RelinkPingPong, RelinkSendLoop, RelinkWriteLoop, SimPair, TcpPair, ThreadPair, Workload,
};

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

/// Name of the environment variable that restricts a benchmark to some of
/// its series (`RELINK_BENCH_ONLY=inproc-send,tcp`): a comma-separated list
/// of substrings, any of which a series' name must contain. For profiling
/// one series; unset or empty runs everything.
pub const ONLY_ENV: &str = "RELINK_BENCH_ONLY";

/// Whether the series `name` (e.g. `inproc-send`) is selected by
/// [`ONLY_ENV`].
pub fn selected(name: &str) -> bool {
    match std::env::var(ONLY_ENV) {
        Ok(only) if !only.trim().is_empty() => only
            .split(',')
            .map(str::trim)
            .any(|pat| !pat.is_empty() && name.contains(pat)),
        _ => true,
    }
}
