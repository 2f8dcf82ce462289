//! `relink demo`: relink's sessions surviving their hardware, shown and
//! proven on the in-process soft fabric.
//!
//! Two hosts, two devices each (see [`world`]). Session A (two paths)
//! carries a checked workload of messages, WRITEs, READs and FETCH_ADDs
//! (see [`relink_sim::workload`]); session B (one path, a 2 s give-up
//! deadline) carries messages; session C (two paths, manual recovery)
//! carries messages, and its application decides when it recovers: after
//! a loss C is held until a quorum of the application's replicas agrees
//! (see [`manual`]). A schedule of faults (see [`faults`]) hits the
//! devices while the workload runs, led by a planned one: maintenance of
//! the initiator's soft0, announced with `Node::drain` (see [`drain`]): A
//! and C move to soft1 with nothing in flight — no replay, no
//! `Indeterminate` outcome, no loss, C not held — while B, which has no
//! other path, is blocked, lost with the device and recovers as after an
//! unplanned fault. The demo prints what happens as it happens (A's stall
//! after every fault on its device, the drain's next to the unplanned
//! failover's), then a table of what each fault did to A and B, C's holds
//! and decisions, the drain's record, and the end-to-end verification (22
//! checks with every fault), and draws the throughput timeline as an SVG.
//!
//! Everything runs on the simulation's virtual clock, single-threaded:
//! the same `--seed` gives the same run, event for event (the report's
//! digest shows it). The exit status is 1 when a check fails.
//!
//! ## Map
//!
//! [`run`] (here) checks the arguments, plans the faults, builds the
//! world, drives it and writes the SVG and the report. The rest, in the
//! order a run goes through it:
//!
//! - [`world`]: the two hosts, their devices and the three sessions.
//! - [`faults`]: the fault catalogue (the planned drain among it), each
//!   fault's steps, what it may do to each session, and the schedule.
//! - [`driver`]: the driver's state, its dated output lines, the intro.
//! - [`run_loop`]: the loop over virtual time (steps, ticks, progress
//!   lines), the tail and the final drain.
//! - [`inject`]: a fault's steps applied to the fabric; the admin close.
//! - [`drain`]: the planned drain on the initiator's node (the call, the
//!   unplug once only the blocked sessions are left, the return, its
//!   record) and A's stall around the faults on its device.
//! - [`events`]: session events taken, dated, printed and accounted.
//! - [`manual`]: session C's application: its holds printed, the quorum
//!   vote, the decision (`resume_on`), what it saw recorded.
//! - [`window`]: what each fault's window saw, classified into an outcome.
//! - [`verify`]: `--sabotage`, the end-to-end checks, the report assembly.
//! - [`manual_report`]: session C's record in the report, its checks and
//!   its table.
//! - [`drain_report`]: the drain's record in the report, its checks and
//!   its table.
//! - [`report`]: the report's types, its text table and JSON.
//! - [`svg`]: the throughput timeline drawn as an SVG.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;

mod drain;
mod drain_report;
mod driver;
mod events;
mod faults;
mod inject;
mod manual;
mod manual_report;
mod report;
mod run_loop;
mod svg;
mod verify;
mod window;
mod world;

use driver::Driver;
use faults::{FaultKind, Timing};

/// `relink demo [--seed N] [--faults LIST] [--duration SECS] [--svg PATH] [--json]`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seed of the run: the same seed replays the same run exactly.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Faults to inject, as a comma list; they always run in this order:
    /// drain (planned maintenance), reset-initiator, reset-target,
    /// unplug-replug, replace, failover, flap, outage, close.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = FaultKind::ALL
    )]
    faults: Vec<FaultKind>,
    /// Virtual seconds of workload (the faults are spread over it; an
    /// admin close comes at its end).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    duration: f64,
    /// Where to write the SVG timeline of throughput and faults.
    #[arg(long, value_name = "PATH", default_value = "target/relink-demo.svg")]
    svg: PathBuf,
    /// Print the report as one JSON object (and no progress lines).
    #[arg(long)]
    json: bool,
    /// Also print every state transition and reconnection attempt.
    #[arg(long, short)]
    verbose: bool,
    /// Self-test of the verification: flip one byte of the target's
    /// region before checking it (the run must then fail).
    #[arg(long, hide = true)]
    sabotage: bool,
}

/// Run the demo.
pub fn run(args: DemoArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let wall = Instant::now();
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration must be a number of seconds in (0, 3600]");
    }
    let duration = Duration::from_secs_f64(args.duration);
    let timing = Timing::default();
    let plan = faults::plan(&args.faults, duration, &timing, args.seed).map_err(|need| {
        anyhow!(
            "--duration {} s is too short for the selected faults: they need at least {:.1} s",
            args.duration,
            need.as_secs_f64()
        )
    })?;
    let world = world::build(args.seed, timing.b_give_up).context("setting up the demo")?;
    let mut d = Driver::new(world, &args, timing, out);
    d.intro(&plan, duration)?;
    d.run(&plan, duration)?;
    if args.sabotage {
        d.sabotage()?;
    }
    let mut report = d.finish(duration)?;

    let svg_text = svg::render(
        &report.throughput,
        &format!(
            "relink demo, seed {}: completed operations per second of virtual time",
            args.seed
        ),
    );
    if let Some(dir) = args.svg.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&args.svg, svg_text)
        .with_context(|| format!("writing {}", args.svg.display()))?;
    report.svg = Some(args.svg.display().to_string());
    report.wall_time_s = wall.elapsed().as_secs_f64();

    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        report.render(out)?;
    }
    if !report.passed {
        bail!(
            "{} check(s) failed: {}",
            report.failed_checks.len(),
            report.failed_checks.join("; ")
        );
    }
    Ok(())
}
