//! `relink soak`: the checked workload through continuous seeded device
//! faults on the soft TCP fabric for a long time, watching what a slow
//! leak would grow.
//!
//! Two soft hosts of this process (a device registry directory each, on
//! 127.0.0.1 and 127.0.0.2: real TCP connections, the soft fabric's
//! threads, wall-clock time) carry two sessions: A with every kind of
//! operation of [`relink_sim::workload`] (messages from bytes and from
//! registered memory, WRITEs and READs gathering and scattering,
//! FETCH_ADDs), B with messages. Faults come every `--fault-every` on
//! average on either host: resets, unplug and replug, replacement, port
//! down and up (see [`faults`]). The workloads run in epochs of
//! `--epoch` (see [`driver`]): each epoch's operations all complete, are
//! checked end to end (every message once, in order, with its bytes;
//! every written block, every READ, the counter against every FETCH_ADD;
//! every completion once) and the books dropped, and the process is
//! sampled: RSS, the live heap (the binary's allocator counts it), fds,
//! threads, each session's journal, timers and outputs waiting, each
//! node's tables and provider objects, log lines. A line every
//! `--interval`; at the end a report (see [`report`]) with the
//! least-squares slope of RSS, heap, fds and threads after the warm-up
//! (the first 20% of the run) against the bounds it prints, and its
//! checks.
//!
//! Exit status: 0 when every check held — no exactly-once violation, the
//! faults injected (none refused), every loss recovered (every session
//! established at the end, no epoch stuck, none gave up), operations
//! completed; 1 otherwise. The slopes are figures with a verdict in the
//! report, not part of the exit status: a short run's slope says little.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the command line and [`run`] |
//! | `world.rs` | the hosts, nodes and sessions |
//! | `faults.rs` | the seeded fault schedule and its steps on the registries |
//! | `driver.rs` | the loop, the epochs, their checks, the samples |
//! | `process.rs` | RSS, threads and fds from `/proc/self`; the live heap |
//! | `logcount.rs` | the `tracing` layer that counts log lines |
//! | `report.rs` | the report: figures, slopes, checks, text and JSON |

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;

mod driver;
mod faults;
mod logcount;
mod process;
mod report;
mod world;

use driver::Driver;
use faults::{FaultKind, Faults};

fn duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| e.to_string());
    }
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// `relink soak [--duration D] [--seed N] [--fault-every D] [--faults LIST]
/// [--interval D] [--epoch D] [--rate OPS] [--rss-bound KIB] [--fd-bound N] [--json-out FILE]`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// How long to run (`300`, `90s`, `5m`, `1h`).
    #[arg(long, value_parser = duration, default_value = "5m")]
    duration: Duration,
    /// Seed of the fault schedule and of the workloads' bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mean time between faults (each gap drawn between half and one and
    /// a half times this).
    #[arg(long, value_parser = duration, default_value = "4s", value_name = "D")]
    fault_every: Duration,
    /// Kinds of faults to draw from, as a comma list: reset, unplug
    /// (and replug), replace, port (down and up).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = FaultKind::ALL
    )]
    faults: Vec<FaultKind>,
    /// No faults at all: the workload alone (a baseline for the figures).
    #[arg(long, conflicts_with = "faults")]
    no_faults: bool,
    /// A progress line about this often: at the end of the first epoch
    /// after each interval.
    #[arg(long, value_parser = duration, default_value = "30s", value_name = "D")]
    interval: Duration,
    /// Length of an epoch: its workload's operations then complete, are
    /// checked and dropped, and the process is sampled.
    #[arg(long, value_parser = duration, default_value = "5s", value_name = "D")]
    epoch: Duration,
    /// Operations submitted per second at most (0: as fast as the
    /// sessions' windows allow). The pace bounds an epoch's books, whose
    /// memory the allocator keeps for the next epoch.
    #[arg(long, default_value_t = 10_000, value_name = "OPS")]
    rate: u64,
    /// The RSS and live heap slope bound of the verdicts, KiB per hour.
    #[arg(long, default_value_t = 1024.0, value_name = "KIB")]
    rss_bound: f64,
    /// The fd and thread slope bound of the verdict, per hour.
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    fd_bound: f64,
    /// Also write the final report as JSON to this file, every sample
    /// included (`--json` is the control commands' flag).
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
}

/// Run the soak.
pub fn run(mut args: SoakArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    for (name, d) in [
        ("--duration", args.duration),
        ("--interval", args.interval),
        ("--epoch", args.epoch),
        ("--fault-every", args.fault_every),
    ] {
        if d.is_zero() {
            bail!("{name} must be more than 0");
        }
    }
    if args.no_faults {
        args.faults.clear();
    }
    logcount::install();
    let world = world::World::build().context("setting up the soak's hosts and sessions")?;
    let faults = Faults::new(
        &args.faults,
        args.fault_every,
        args.seed,
        world.registries().context("the hosts' device registries")?,
        world.addrs(),
        Instant::now(),
    );
    writeln!(
        out,
        "relink soak: {} on the soft TCP fabric (hosts in {}), seed {}, {}, epochs of {}, at most {} operations/s",
        humantime::format_duration(args.duration),
        world.hosts.root().display(),
        args.seed,
        if args.faults.is_empty() {
            "no faults".to_string()
        } else {
            format!(
                "a fault every {} on average ({})",
                humantime::format_duration(args.fault_every),
                args.faults
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        humantime::format_duration(args.epoch),
        args.rate,
    )?;
    let epochs = args.duration.as_secs_f64() / args.epoch.as_secs_f64();
    let faults_at_most = if args.faults.is_empty() {
        0.0
    } else {
        // gaps are at least half the mean
        2.0 * args.duration.as_secs_f64() / args.fault_every.as_secs_f64()
    };
    let capacity = driver::Capacity {
        samples: epochs.ceil() as usize + 4,
        // each fault: a resume of every session's two halves
        recoveries: (faults_at_most * 4.0).ceil() as usize + 16,
    };
    let mut d = Driver::new(world, faults, args.seed, args.rate, capacity, out);
    let end = d.started + args.duration;
    let mut next_epoch = d.started + args.epoch;
    let mut next_line = d.started + args.interval;
    loop {
        d.round()?;
        let now = Instant::now();
        if now < next_epoch && now < end {
            continue;
        }
        if !d.end_epoch()? {
            d.say("an epoch did not complete: stopping")?;
            break;
        }
        let now = Instant::now();
        next_epoch = now + args.epoch;
        if now >= next_line || now >= end {
            let line = report::progress(&d);
            d.say(&line)?;
            while next_line <= now {
                next_line += args.interval;
            }
        }
        if now >= end {
            break;
        }
    }
    if let Some(line) = d.faults.finish() {
        d.say(&line)?;
    }
    let report = report::Report::build(&d, &args);
    report.render(&mut *d.out_mut())?;
    if let Some(path) = &args.json_out {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if !report.passed {
        let failed: Vec<&str> = report
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.name.as_str())
            .collect();
        bail!("{} check(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}
