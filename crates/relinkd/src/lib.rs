//! # relinkd — the relink block daemon
//!
//! One process holds either role or both:
//!
//! - **target** (`[[export]]`): serves a file as a block volume to the
//!   initiators' relink sessions ([`relink_block::TargetEngine`]);
//! - **initiator** (`[[connect]]`): connects one session to a target over
//!   one or more paths ([`relink_block::InitiatorEngine`]) and offers the
//!   volume to unmodified clients (`qemu-img`, `nbd-client`, ...) on an
//!   NBD Unix socket and optionally TCP ([`relink_nbd`]).
//!
//! relink keeps the sessions through device resets, replacements and
//! failovers: NBD clients see the outage as latency, not as errors, up
//! to the connection's `give_up_secs` — or its `fast_fail_secs`, if set:
//! then the requests waiting on the outage fail (`EIO`, one warning per
//! outage with how many) while the session keeps recovering, and their
//! queue slots come back once relink has settled them (at once for a
//! command that never left, at its late reply for one that may have).
//! When a session ends (the target
//! restarted, closed it or stopped), the initiator connects a new session
//! and holds the I/O meanwhile: the commands under way and the requests
//! that come wait, and go to the new session once the target's IDENTIFY
//! shows the same volume (size and read-only flag) — every block command
//! is idempotent, so a command done twice changes nothing; a FLUSH fails
//! once if the target's host (not only the daemon) restarted with writes
//! no flush covered ([`Bridge`]). The hold lasts at most
//! `give_up_secs` from the outage's start; a session that gave up holds
//! nothing (its requests fail `ESHUTDOWN`). New sessions are paced: the first
//! 100 ms after the end, then twice the pause after each one that does
//! not serve (refused, closed, another volume), up to 5 s; a session that
//! served 10 s starts the pauses over. The log says what happened once
//! per change (the end at WARN; the target refusing or closing new
//! sessions at WARN with its reason; another volume at ERROR with both
//! sizes; serving again at INFO), not once per session.
//!
//! NBD clients may send reads and writes up to 32 MiB
//! ([`NBD_MAX_REQUEST`], the maximum block size advertised), whatever the
//! `max_io` of the relink session: the [`Bridge`] splits them.
//!
//! # Structure
//!
//! | part | where |
//! |---|---|
//! | the configuration file | [`Config`] (TOML; errors name the file and the key) |
//! | the node thread: the node, the engines, the wake-ups | [`Daemon`], [`DaemonHandle`]; an export's listening and its initiators (`export.rs`), a connection's sessions, held I/O and outages (`connection.rs`) |
//! | NBD requests as block commands (split at `max_io`, errno mapping) | [`Bridge`], [`nbd_error`] |
//! | the process: NBD servers on tokio, signals | [`run`] |
//! | the control socket: its protocol, its server, the metrics | [`control`], [`DaemonHandle::command`] |
//!
//! # Control
//!
//! A running daemon is driven over its control socket (`[control]
//! socket`, default `/run/relinkd/control.sock`, mode 0600; only the
//! daemon's uid and root are served): newline-delimited JSON requests
//! ([`control::protocol`], the `relinkd-control` crate) for `status`,
//! `devices`, `connect`, `disconnect`, `policy_get` / `policy_set`,
//! `hold`, `resume`, `drain`, `undrain`, `events` (a stream), `metrics`
//! (Prometheus text, also over HTTP with `[control] metrics_listen`) and
//! `reload`. The `relink` CLI speaks it through that crate's client,
//! without depending on the daemon. Connections are added and removed by
//! name while the daemon runs, exports too ([`DaemonHandle::add_export`],
//! [`DaemonHandle::remove_export`]).
//!
//! Under a service manager (`$NOTIFY_SOCKET`, systemd's `Type=notify`)
//! the daemon sends `READY=1` once every export listens and every NBD
//! socket is bound, and `STOPPING=1` when it shuts down.
//!
//! Logs are `tracing` events on stderr (the relink library's among them):
//! `RELINKD_LOG` filters them (`info` by default, `relink=debug` for the
//! library's detail) and `RELINKD_LOG_FORMAT=json` writes one JSON object
//! per line. Stdout carries the daemon's progress lines (`export ...
//! listening`, `connect ... serving nbd`, `reload: ...`).
//!
//! On SIGTERM or SIGINT the daemon lets NBD requests under way finish,
//! refuses new ones (`ESHUTDOWN`), closes every session with a goodbye,
//! syncs the exports' files and exits 0.
//!
//! # Backends
//!
//! | `[backend] kind` | fabric | keys |
//! |---|---|---|
//! | `"soft"` (the default) | the soft fabric over TCP ([`relink_soft::TcpHost`]) | `soft_dir`: the registry `relink soft-device` manages |
//! | `"rdma-core"` | the host's RDMA devices through libibverbs and librdmacm ([`relink_verbs::VerbsProvider`]) | `source`: the initiator's source address (picks the local device; default: by route) |
//!
//! `"rdma-core"` needs a binary built with the `rdma` cargo feature (it
//! links rdma-core, so it is off by default and the default binary runs
//! on hosts without it); a binary without it refuses the key at load. An
//! rdma-core daemon should start with `RDMAV_ALLOW_DISASSOC_DESTROY=1` in
//! its environment (the `relinkd` binary sets it before any thread starts
//! when it is unset; see [`relink_verbs::init_environment`]).

mod backend;
mod bridge;
mod commands;
mod conf_dir;
mod config;
mod connection;
pub mod control;
mod export;
mod node_loop;
mod notify;
mod reload;
mod serve;

pub use bridge::{nbd_error, Bridge};
pub use config::{Backend, Config, ConfigError, ConnectConfig, ControlConfig, ExportConfig};
pub use node_loop::{Daemon, DaemonHandle, Ready, StartError, Summary};
pub use reload::{ConfigChange, ReloadError};
pub use serve::{run, RunError, NBD_MAX_REQUEST};
