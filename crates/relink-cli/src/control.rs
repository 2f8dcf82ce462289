//! The commands that talk to a running relinkd over its control socket,
//! with the protocol and the client of the `relinkd-control` crate:
//! `status`, `devices`, `connect`, `disconnect`, `policy get|set`, `hold`,
//! `resume`, `drain`, `undrain`, `events --follow`, `metrics`, `reload`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use relinkd_control::{
    AckResult, Client, Command, DevicesResult, DrainResult, EventRecord, Limit, MetricsResult,
    Mode, Never, PolicyResult, RecoveryPhases, ReloadResult, StatusResult,
};

/// Where the daemon is and how to print: options of the control
/// commands, given anywhere on the command line (`relink --socket S
/// status` and `relink status --socket S` alike).
#[derive(Debug, Default, Args)]
pub struct Opts {
    /// The control socket of relinkd, for the control commands [default:
    /// $RELINK_CONTROL, else /run/relinkd/control.sock].
    #[arg(long, value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// Print a control command's result as JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The control commands (each with --socket and --json).
#[derive(Debug, Subcommand)]
pub enum ControlCommand {
    /// Show the exports and connections of a running relinkd: state,
    /// attempts, recoveries, losses, downtime, bytes, requests in flight.
    Status {},
    /// List the devices relinkd's backend sees.
    Devices {},
    /// Add a connection to a running relinkd: a session to the target
    /// and, once the volume is known, an NBD socket.
    Connect {
        /// Its name (the NBD export name).
        name: String,
        /// A target address IP:PORT (repeat for several paths).
        #[arg(long = "target", value_name = "IP:PORT", required = true)]
        targets: Vec<SocketAddr>,
        /// The NBD Unix socket to serve on.
        #[arg(long, value_name = "PATH")]
        nbd_socket: PathBuf,
        /// An NBD TCP address to serve on as well.
        #[arg(long, value_name = "IP:PORT")]
        nbd_tcp: Option<SocketAddr>,
        /// Give up this long after a loss.
        #[arg(long, value_name = "SECS")]
        give_up_secs: Option<u64>,
        /// Fail I/O waiting on an outage this long after the loss (at
        /// most the give-up deadline); the session keeps recovering.
        #[arg(long, value_name = "SECS")]
        fast_fail_secs: Option<u64>,
        /// Commands outstanding at once (1 to 1024; default 32).
        #[arg(long, value_name = "N")]
        queue_depth: Option<u64>,
        /// The longest command on the relink session, bytes (a multiple
        /// of 4096 up to 16 MiB; default 131072). NBD requests may be
        /// longer (up to 32 MiB): they are split into commands.
        #[arg(long, value_name = "BYTES")]
        max_io: Option<u64>,
        /// Return only once the connection serves NBD (exit 0), or fail
        /// (exit 1) if it does not within --timeout or is removed.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait, seconds.
        #[arg(long, value_name = "SECS", default_value_t = 60, requires = "wait")]
        timeout: u64,
    },
    /// Remove a connection: recovery stops, its NBD requests fail at
    /// once, its NBD socket is removed.
    Disconnect {
        /// The connection.
        name: String,
    },
    /// Show or change a connection's live recovery policy.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Manual recovery: the connection's session holds on its next loss
    /// (at once if it is recovering) until `relink resume`.
    Hold {
        /// The connection.
        name: String,
    },
    /// Let a held session recover.
    Resume {
        /// The connection.
        name: String,
        /// The path to take: an index in the connection's targets.
        #[arg(long, value_name = "I")]
        path: Option<usize>,
    },
    /// Move every session off a device (planned maintenance); exits 1 if
    /// a session has no other path and stays on it.
    Drain {
        /// The device's name.
        device: String,
    },
    /// Let sessions take a drained device again.
    Undrain {
        /// The device's name.
        device: String,
    },
    /// Print session and engine events as they happen.
    Events {
        /// Keep printing until interrupted (required: there is no event
        /// history).
        #[arg(long, required = true)]
        follow: bool,
    },
    /// Print the Prometheus metrics.
    Metrics {},
    /// Read the configuration file and its conf_dir again and apply the
    /// difference (as SIGHUP does): new entries start, removed ones are
    /// disconnected, changed ones are made again (a connection whose
    /// give_up_secs / fast_fail_secs alone changed keeps its session).
    Reload {},
}

/// `relink policy get|set`.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Show a connection's policy.
    Get {
        /// The connection.
        name: String,
    },
    /// Change a connection's policy on its live session, e.g.
    /// `give_up_secs=none mode=manual`.
    Set {
        /// The connection.
        name: String,
        /// give_up_secs=N|none, fast_fail_secs=N|none,
        /// mode=manual|automatic.
        #[arg(value_name = "KEY=VALUE", required = true)]
        settings: Vec<String>,
    },
}

/// The socket to use.
fn socket(opts: &Opts) -> PathBuf {
    opts.socket
        .clone()
        .or_else(|| std::env::var_os("RELINK_CONTROL").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(relinkd_control::DEFAULT_SOCKET))
}

/// A connection to the daemon at the socket `opts` name.
fn open(opts: &Opts) -> anyhow::Result<Client> {
    Ok(Client::connect(socket(opts))?)
}

fn limit(key: &str, v: &str) -> anyhow::Result<Limit> {
    if v == "none" {
        return Ok(Limit::Off(Never::None));
    }
    match v.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Limit::Secs(n)),
        _ => bail!("{key}={v}: give a number of seconds (at least 1) or none"),
    }
}

fn policy_set(name: String, settings: &[String]) -> anyhow::Result<Command> {
    let (mut give_up_secs, mut fast_fail_secs, mut mode) = (None, None, None);
    for s in settings {
        let Some((k, v)) = s.split_once('=') else {
            bail!("{s:?}: expected KEY=VALUE");
        };
        match k {
            "give_up_secs" => give_up_secs = Some(limit(k, v)?),
            "fast_fail_secs" => fast_fail_secs = Some(limit(k, v)?),
            "mode" => {
                mode = Some(match v {
                    "manual" => Mode::Manual,
                    "automatic" => Mode::Automatic,
                    _ => bail!("mode={v}: give manual or automatic"),
                })
            }
            _ => bail!("unknown setting {k:?} (give_up_secs, fast_fail_secs, mode)"),
        }
    }
    Ok(Command::PolicySet {
        name,
        give_up_secs,
        fast_fail_secs,
        mode,
    })
}

fn print_json(out: &mut dyn Write, v: &impl serde::Serialize) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v)?;
    writeln!(out)?;
    Ok(())
}

fn secs(s: Option<u64>) -> String {
    s.map_or_else(|| "none".into(), |s| format!("{s}s"))
}

/// Run one control command (`opts`: where the daemon is, how to print).
pub fn run(command: ControlCommand, opts: &Opts, out: &mut dyn Write) -> anyhow::Result<()> {
    use ControlCommand as C;
    match command {
        C::Status {} => {
            let r: StatusResult = open(opts)?.call(Command::Status {})?;
            if opts.json {
                return print_json(out, &r);
            }
            print_status(out, &r)
        }
        C::Devices {} => {
            let r: DevicesResult = open(opts)?.call(Command::Devices {})?;
            if opts.json {
                return print_json(out, &r);
            }
            writeln!(
                out,
                "{:<12} {:<20} {:<7} {:<9} ADDRESSES",
                "NAME", "GUID", "PORT", "DRAINING"
            )?;
            for d in r.devices {
                writeln!(
                    out,
                    "{:<12} {:<20} {:<7} {:<9} {}",
                    d.name,
                    d.guid,
                    d.port,
                    if d.draining { "yes" } else { "no" },
                    d.addresses.join(",")
                )?;
            }
            Ok(())
        }
        C::Connect {
            name,
            targets,
            nbd_socket,
            nbd_tcp,
            give_up_secs,
            fast_fail_secs,
            queue_depth,
            max_io,
            wait,
            timeout,
        } => {
            ack(
                out,
                opts,
                Command::Connect {
                    name: name.clone(),
                    targets,
                    nbd_socket,
                    nbd_tcp,
                    give_up_secs,
                    fast_fail_secs,
                    queue_depth,
                    max_io,
                },
            )?;
            if wait {
                wait_ready(out, opts, &name, Duration::from_secs(timeout))?;
            }
            Ok(())
        }
        C::Disconnect { name } => ack(out, opts, Command::Disconnect { name }),
        C::Policy { action } => {
            let command = match action {
                PolicyAction::Get { name } => Command::PolicyGet { name },
                PolicyAction::Set { name, settings } => policy_set(name, &settings)?,
            };
            let r: PolicyResult = open(opts)?.call(command)?;
            if opts.json {
                return print_json(out, &r);
            }
            writeln!(
                out,
                "{}: give_up_secs={} fast_fail_secs={} mode={}",
                r.name,
                secs(r.give_up_secs),
                secs(r.fast_fail_secs),
                match r.mode {
                    Mode::Manual => "manual",
                    Mode::Automatic => "automatic",
                }
            )?;
            Ok(())
        }
        C::Hold { name } => ack(out, opts, Command::Hold { name }),
        C::Resume { name, path } => ack(out, opts, Command::Resume { name, path }),
        C::Drain { device } => {
            let r: DrainResult = open(opts)?.call(Command::Drain { device })?;
            if opts.json {
                print_json(out, &r)?;
            } else {
                writeln!(
                    out,
                    "device {}: moving: {}; blocked (no other path): {}",
                    r.device,
                    list(&r.moving),
                    list(&r.blocked)
                )?;
            }
            // Maintenance must not start while a session would lose its
            // device: say so in the exit status too.
            if !r.blocked.is_empty() {
                bail!(
                    "device {}: {} session(s) have no other path and stay on it: {}",
                    r.device,
                    r.blocked.len(),
                    r.blocked.join(", ")
                );
            }
            Ok(())
        }
        C::Undrain { device } => ack(out, opts, Command::Undrain { device }),
        C::Events { follow } => {
            let mut c = open(opts)?;
            let _: AckResult = c.call(Command::Events { follow })?;
            out.flush()?;
            while let Some(r) = c.next_response()? {
                let ev: EventRecord = r.into_result().map_err(|e| anyhow!("{}", e.message))?;
                if opts.json {
                    serde_json::to_writer(&mut *out, &ev)?;
                    writeln!(out)?;
                } else {
                    writeln!(out, "{} {} {}: {}", ev.at, ev.source, ev.name, ev.event)?;
                }
                out.flush()?;
            }
            Ok(())
        }
        C::Metrics {} => {
            let r: MetricsResult = open(opts)?.call(Command::Metrics {})?;
            if opts.json {
                return print_json(out, &r);
            }
            write!(out, "{}", r.text)?;
            Ok(())
        }
        C::Reload {} => {
            let r: ReloadResult = open(opts)?.call(Command::Reload {})?;
            if opts.json {
                return print_json(out, &r);
            }
            writeln!(out, "removed: {}", list(&r.removed))?;
            writeln!(out, "added: {}", list(&r.added))?;
            if !r.changed.is_empty() {
                writeln!(out, "policy changed (session kept): {}", list(&r.changed))?;
            }
            if !r.failed.is_empty() {
                writeln!(out, "failed: {}", r.failed.join("; "))?;
                anyhow::bail!("{} entries could not be applied", r.failed.len());
            }
            Ok(())
        }
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Poll `status` until connection `name` is `ready` (then say so), or
/// fail: it went, or `timeout` passed (with its state and its session's).
fn wait_ready(
    out: &mut dyn Write,
    opts: &Opts,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut client = open(opts)?;
    loop {
        let r: StatusResult = client.call(Command::Status {})?;
        let Some(c) = r.connections.iter().find(|c| c.name == name) else {
            bail!("connect {name}: the connection is gone");
        };
        if c.state == "ready" {
            if !opts.json {
                writeln!(out, "connect {name}: ready")?;
            }
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "connect {name}: not ready after {} s (state {}, session {}, {} attempts)",
                timeout.as_secs(),
                c.state,
                c.session.state,
                c.session.attempts
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ack(out: &mut dyn Write, opts: &Opts, command: Command) -> anyhow::Result<()> {
    let r: AckResult = open(opts)?.call(command)?;
    if opts.json {
        return print_json(out, &r);
    }
    writeln!(out, "{}", r.message)?;
    Ok(())
}

fn print_status(out: &mut dyn Write, r: &StatusResult) -> anyhow::Result<()> {
    if !r.exports.is_empty() {
        writeln!(
            out,
            "{:<12} {:<22} {:<14} {:>10} {:>6} {:>10}",
            "EXPORT", "LISTEN", "SESSION", "RECOVERIES", "LOSSES", "DOWNTIME"
        )?;
        for e in &r.exports {
            if e.sessions.is_empty() {
                let what = if e.listening {
                    "listening"
                } else {
                    "waiting for a device that owns the address"
                };
                writeln!(out, "{:<12} {:<22} {what}", e.name, e.listen)?;
            }
            for s in &e.sessions {
                writeln!(
                    out,
                    "{:<12} {:<22} {:<14} {:>10} {:>6} {:>9.3}s",
                    e.name, e.listen, s.state, s.recoveries, s.losses, s.downtime_secs
                )?;
            }
        }
    }
    if !r.connections.is_empty() {
        if !r.exports.is_empty() {
            writeln!(out)?;
        }
        writeln!(
            out,
            "{:<12} {:<12} {:<14} {:>8} {:>10} {:>6} {:>10} {:>8} {:>6} {:>12} {:>12} TARGETS",
            "CONNECTION",
            "STATE",
            "SESSION",
            "ATTEMPTS",
            "RECOVERIES",
            "LOSSES",
            "DOWNTIME",
            "REPLAYED",
            "INFLT",
            "READ",
            "WRITTEN"
        )?;
        for c in &r.connections {
            let s = &c.session;
            let targets: Vec<String> = c.targets.iter().map(ToString::to_string).collect();
            writeln!(
                out,
                "{:<12} {:<12} {:<14} {:>8} {:>10} {:>6} {:>9.3}s {:>8} {:>6} {:>12} {:>12} {}",
                c.name,
                c.state,
                s.state,
                s.attempts,
                s.recoveries,
                s.losses,
                s.downtime_secs,
                s.replayed,
                c.in_flight,
                c.bytes_read,
                c.bytes_written,
                targets.join(",")
            )?;
            writeln!(
                out,
                "{:<12} messages: {} received ({} behind another in one SEND); planned outages {}, failovers {}",
                "", s.delivered, s.packed, s.planned, s.failovers
            )?;
            if !c.last_outages_secs.is_empty() {
                let o: Vec<String> = c
                    .last_outages_secs
                    .iter()
                    .map(|s| format!("{s:.3}s"))
                    .collect();
                writeln!(out, "{:<12} last outages: {}", "", o.join(" "))?;
            }
            if let Some(p) = &s.last_recovery {
                writeln!(out, "{:<12} last recovery: {}", "", phases(p))?;
            }
        }
    }
    if r.exports.is_empty() && r.connections.is_empty() {
        writeln!(out, "no exports, no connections")?;
    }
    Ok(())
}

/// `total 12.3 ms: device 5.0, attempt 0.1, ...` (the phases reached).
fn phases(p: &RecoveryPhases) -> String {
    let named = [
        ("device", p.device_ms),
        ("attempt", p.attempt_ms),
        ("addr", p.addr_ms),
        ("route", p.route_ms),
        ("resources", p.resources_ms),
        ("connect", p.connect_ms),
        ("promoted", p.promoted_ms),
        ("resync", p.resync_ms),
        ("first completion", p.first_completion_ms),
    ];
    let parts: Vec<String> = named
        .iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n} {v:.2}")))
        .collect();
    let released = p
        .released_ms
        .map(|r| format!("; old connection released {r:.2} ms after the loss"))
        .unwrap_or_default();
    format!("total {:.2} ms: {}{released}", p.total_ms, parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_settings_parse_and_bad_ones_are_named() {
        let c = policy_set(
            "d".into(),
            &["give_up_secs=none".into(), "mode=manual".into()],
        )
        .unwrap();
        assert_eq!(
            c,
            Command::PolicySet {
                name: "d".into(),
                give_up_secs: Some(Limit::Off(Never::None)),
                fast_fail_secs: None,
                mode: Some(Mode::Manual),
            }
        );
        let e = policy_set("d".into(), &["speed=3".into()]).unwrap_err();
        assert!(e.to_string().contains("speed"), "{e}");
        let e = policy_set("d".into(), &["give_up_secs=0".into()]).unwrap_err();
        assert!(e.to_string().contains("give_up_secs"), "{e}");
    }

    #[test]
    fn a_daemon_not_running_is_named() {
        let opts = Opts {
            socket: Some("/nonexistent/relinkd.sock".into()),
            json: false,
        };
        let e = run(ControlCommand::Status {}, &opts, &mut Vec::new()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot reach relinkd at /nonexistent/relinkd.sock: "),
            "{e}"
        );
    }
}
