//! `relink` — the command-line tool of relink.
//!
//! Subcommands:
//!
//! - `demo`: the guided tour: three sessions on the in-process soft fabric
//!   survive a schedule of device faults while a checked workload runs,
//!   one of them (manual recovery) only when its application decides;
//!   prints a report, verifies every byte and completion, draws an SVG
//!   timeline.
//! - `soak`: the checked workload through continuous seeded device faults
//!   on the soft TCP fabric for `--duration` (an hour, say), with RSS,
//!   live heap, fds, threads, journal and timer sizes, log lines and
//!   their slopes reported; exit status 1 on any exactly-once violation.
//! - `soft-device`: add, remove, reset, replace and list the host's soft
//!   RDMA devices (what `rdma link add/delete` is for Soft-RoCE), and set
//!   their port up or down.
//! - `perf`: a bandwidth test (`ib_send_bw` / `ib_write_bw` style) between a
//!   server and a client process on the soft TCP fabric.
//! - `status`, `devices`, `connect`, `disconnect`, `policy get|set`,
//!   `hold`, `resume`, `drain`, `undrain`, `events --follow`, `metrics`,
//!   `reload`: the control of a running relinkd over its control socket
//!   (`--socket`, `$RELINK_CONTROL`; `--json` for the result as JSON),
//!   with the protocol and client of the `relinkd-control` crate.
//!
//! Errors are printed as `relink: error: ...` with their causes, and the
//! exit status is 1 (2 for usage errors, from clap).

use std::alloc::System;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

/// The system allocator, counted (a few atomic adds per allocation): `relink
/// soak` reports the live heap next to the RSS, which also holds what the
/// allocator keeps after it was freed.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

mod control;
mod demo;
mod perf;
mod soak;
mod soft_device;

/// Keeps RDMA connections alive across device reset, unplug and replug.
#[derive(Debug, Parser)]
#[command(name = "relink", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    control: control::Opts,
}

/// What `relink` does: one subcommand per job.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo: sessions that survive device reset, unplug,
    /// replacement and failover on the in-process soft fabric (one of them
    /// recovering only when its application decides), with a checked
    /// workload and a report.
    Demo(demo::DemoArgs),
    /// Run the checked workload through continuous seeded device faults
    /// on the soft TCP fabric for a long time, and report RSS, live
    /// heap, fds, threads, journals, timers and log lines with their
    /// slopes, and every exactly-once violation (exit status 1 on any).
    Soak(soak::SoakArgs),
    /// Manage the host's soft RDMA devices (add, remove, reset, replace,
    /// port up/down, list).
    SoftDevice(soft_device::SoftDeviceArgs),
    /// Measure send/write bandwidth between a server and a client on the
    /// soft TCP fabric (like perftest's ib_send_bw / ib_write_bw).
    Perf(perf::PerfArgs),
    #[command(flatten)]
    Control(control::ControlCommand),
}

fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(args, out),
        Command::Soak(args) => soak::run(args, out),
        Command::SoftDevice(args) => soft_device::run(args, out),
        Command::Perf(args) => perf::run(args, out),
        Command::Control(c) => control::run(c, &cli.control, out),
    }
}

/// Whether writing the output failed because its reader went away.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let kind = if let Some(io) = cause.downcast_ref::<io::Error>() {
            Some(io.kind())
        } else if let Some(json) = cause.downcast_ref::<serde_json::Error>() {
            json.io_error_kind()
        } else {
            None
        };
        kind == Some(io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = run(cli, &mut out).and_then(|()| Ok(out.flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `relink ... | head`: the reader left, nothing to report.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relink: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn control_options_go_before_or_after_the_subcommand() {
        for args in [
            ["relink", "--socket", "/s", "--json", "status"],
            ["relink", "status", "--socket", "/s", "--json"],
            ["relink", "--json", "status", "--socket", "/s"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.control.socket, Some("/s".into()), "{args:?}");
            assert!(cli.control.json, "{args:?}");
            assert!(matches!(cli.command, Command::Control(_)), "{args:?}");
        }
    }
}
