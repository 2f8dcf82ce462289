//! `relink perf`: a bandwidth test over the soft TCP fabric, in the manner
//! of perftest's `ib_send_bw` / `ib_write_bw`.
//!
//! - `relink perf server --bind ADDR:PORT` listens, and for every connection
//!   registers a buffer (sent to the client in the accept's private data)
//!   and keeps receives posted. It survives connections ending and devices
//!   going away: it cleans up what belonged to them, and when its own
//!   listener loses its device it listens again once a device owning the
//!   address comes back. It prints one line per event.
//! - `relink perf client --connect ADDR:PORT --op send|write` keeps `--depth`
//!   requests outstanding for `--iters` requests or `--duration` seconds and
//!   prints messages/s and GB/s.
//!
//! Both sides use nothing but the [`Provider`] trait, on a
//! [`TcpHost`] attached to the soft devices of the runtime directory.
//!
//! The client prints the line `running` (in either output mode) once its
//! first request completed, so that a script can wait for traffic to flow;
//! then one result: a text report, or with `--json` one JSON object on the
//! last line. The server prints one line (or JSON object) per event.
//!
//! Private data, all integers big-endian, each led by the magic `RLPF` and
//! version 1 (decoders check the length and ignore trailing bytes, which a
//! transport may add as padding):
//!
//! - connect (client to server, 14 bytes): magic, version, op (0 send,
//!   1 write), message size u32, depth u32;
//! - accept (server to client, 21 bytes): magic, version, buffer address
//!   u64, rkey u32, length u32.
//!
//! Client exit status: 0 when every request succeeded; 3 when a completion
//! had an error status or the connection ended (the report names the first
//! error status and accounts for every outstanding request); 4 when no
//! completion arrived for [`STALL_TIMEOUT`] while requests were outstanding;
//! 1 for any other failure (connection setup, bad arguments found late).
//!
//! | file | its one concern |
//! |---|---|
//! | `mod.rs` | the limits, timeouts and exit statuses the files share, and [`run`] |
//! | `args.rs` | the command line: roles, options, operation, size and duration parsers |
//! | `private_data.rs` | the connect and accept private data (hello, buffer info) |
//! | `output.rs` | printing: lines flushed as they happen, warnings, the verbs names of statuses and CM events |
//! | `resources.rs` | the verbs objects of one end of a connection, created together and destroyed in order |
//! | `server.rs` | the server: listening (again), accepting, counting received messages |
//! | `client.rs` | the client: connecting, then running the traffic and leaving in order |
//! | `traffic.rs` | the measurement loop: keep `--depth` requests posted, reap completions, watch for the end |
//! | `tally.rs` | what a client run counted, and where a failure is placed |
//! | `report.rs` | the client's one result: success, failure or stall |

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use relink_soft::{Registry, TcpHost};

mod args;
mod client;
mod output;
mod private_data;
mod report;
mod resources;
mod server;
mod tally;
mod traffic;

pub use args::PerfArgs;

use args::Role;
use output::Lines;
use server::Server;

/// How long the client waits for a completion while requests are
/// outstanding before it gives up (exit status 4).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connection setup (resolve, route, connect) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Address and route resolution timeout handed to the provider.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest message (and server buffer): the soft fabric's largest payload.
pub const MAX_SIZE: u64 = relink_soft::MAX_PAYLOAD as u64;
/// Largest `--depth`.
pub const MAX_DEPTH: u32 = 16384;
/// Most receives the server keeps posted per connection.
const MAX_SERVER_RECVS: u32 = 2 * MAX_DEPTH;
/// Completions polled per call.
const POLL_BATCH: usize = 256;
/// Longest sleep of an event loop between checks.
const TICK: Duration = Duration::from_millis(100);
/// How often the server retries listening after its listener lost its device.
const RELISTEN_INTERVAL: Duration = Duration::from_millis(200);

/// Exit status of a run whose traffic failed (error completion, connection end).
pub const EXIT_TRAFFIC_ERROR: i32 = 3;
/// Exit status of a run that stalled (no completion for [`STALL_TIMEOUT`]).
pub const EXIT_STALLED: i32 = 4;

/// Attaches to the soft devices of `dir` (the default registry directory
/// when `None`).
fn open_host(dir: Option<PathBuf>) -> anyhow::Result<TcpHost> {
    let dir = dir.unwrap_or_else(Registry::default_dir);
    TcpHost::open(&dir)
        .with_context(|| format!("cannot attach to the soft devices in {}", dir.display()))
}

/// Runs `relink perf ...`, printing to `out`. A client run that fails with
/// exit status 3 or 4 ends the process with that status after printing its
/// report.
pub fn run(args: PerfArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match args.role {
        Role::Server(a) => {
            let host = open_host(a.dir.clone())?;
            let mut lines = Lines { out, json: a.json };
            Server::new(&host, &a).run(&mut lines)
        }
        Role::Client(a) => {
            let host = open_host(a.dir.clone())?;
            let mut lines = Lines { out, json: a.json };
            let code = client::run(&host, &a, &mut lines)?;
            drop(host);
            if code != 0 {
                out.flush()?;
                std::process::exit(code);
            }
            Ok(())
        }
    }
}
