//! The commands a request carries and the types of their arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The commands, as their `"command"` values.
pub const COMMANDS: &[&str] = &[
    "status",
    "devices",
    "connect",
    "disconnect",
    "policy_get",
    "policy_set",
    "hold",
    "resume",
    "drain",
    "undrain",
    "events",
    "metrics",
    "reload",
];

/// A time limit of a policy: seconds, or `"none"` (no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Limit {
    /// This many seconds (at least 1).
    Secs(u64),
    /// No limit.
    Off(Never),
}

/// The word `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Never {
    /// `"none"`.
    #[serde(rename = "none")]
    None,
}

impl Limit {
    /// The limit as a duration; `None` for no limit.
    #[must_use]
    pub fn duration(self) -> Option<std::time::Duration> {
        match self {
            Limit::Secs(s) => Some(std::time::Duration::from_secs(s)),
            Limit::Off(_) => None,
        }
    }
}

/// Who decides when a session recovers after a loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// relink recovers on its own.
    Automatic,
    /// The session is held on a loss until `resume`.
    Manual,
}

/// A request's command and its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// Exports and connections with their sessions' state and counters:
    /// [`StatusResult`](crate::StatusResult).
    Status {},
    /// The backend's devices: [`DevicesResult`](crate::DevicesResult).
    Devices {},
    /// Add a connection at runtime: [`AckResult`](crate::AckResult) once
    /// its session is made (its NBD socket is served once its IDENTIFY
    /// completes).
    Connect {
        /// Its name (the NBD export name).
        name: String,
        /// The target's addresses (several paths).
        targets: Vec<SocketAddr>,
        /// The NBD Unix socket to serve on.
        nbd_socket: PathBuf,
        /// An NBD TCP address to serve on as well.
        #[serde(default)]
        nbd_tcp: Option<SocketAddr>,
        /// The give-up deadline after a loss, in seconds.
        #[serde(default)]
        give_up_secs: Option<u64>,
        /// When I/O waiting on an outage fails, in seconds after the loss
        /// (at most the give-up deadline); none by default.
        #[serde(default)]
        fast_fail_secs: Option<u64>,
        /// Commands outstanding at once (1 to 1024; default 32).
        #[serde(default)]
        queue_depth: Option<u64>,
        /// The longest command, bytes (a multiple of 4096 up to 16 MiB;
        /// default 128 KiB).
        #[serde(default)]
        max_io: Option<u64>,
    },
    /// Remove a connection: recovery stops, its NBD requests fail at
    /// once, its NBD socket goes: [`AckResult`](crate::AckResult).
    Disconnect {
        /// The connection.
        name: String,
    },
    /// A connection's live policy: [`PolicyResult`](crate::PolicyResult).
    PolicyGet {
        /// The connection.
        name: String,
    },
    /// Change a connection's live policy (absent fields stay):
    /// [`PolicyResult`](crate::PolicyResult).
    PolicySet {
        /// The connection.
        name: String,
        /// The give-up deadline after a loss.
        #[serde(default)]
        give_up_secs: Option<Limit>,
        /// When queued I/O fails during an outage.
        #[serde(default)]
        fast_fail_secs: Option<Limit>,
        /// Automatic or manual recovery.
        #[serde(default)]
        mode: Option<Mode>,
    },
    /// Manual recovery: the session holds on its next loss (at once if it
    /// is recovering): [`AckResult`](crate::AckResult).
    Hold {
        /// The connection.
        name: String,
    },
    /// Let a held session recover, on `path` (an index in its targets)
    /// if given: [`AckResult`](crate::AckResult).
    Resume {
        /// The connection.
        name: String,
        /// The path to take.
        #[serde(default)]
        path: Option<usize>,
    },
    /// Move every session off a device: [`DrainResult`](crate::DrainResult).
    Drain {
        /// The device's name.
        device: String,
    },
    /// Let sessions take a drained device again: [`AckResult`](crate::AckResult).
    Undrain {
        /// The device's name.
        device: String,
    },
    /// Session and engine events: with `follow`, an
    /// [`AckResult`](crate::AckResult), then one
    /// [`EventRecord`](crate::EventRecord) response per event until the
    /// client closes or sends anything; without, an
    /// [`AckResult`](crate::AckResult) alone (there is no event history).
    Events {
        /// Stream the events.
        #[serde(default)]
        follow: bool,
    },
    /// Prometheus text exposition: [`MetricsResult`](crate::MetricsResult).
    Metrics {},
    /// Read the configuration file and its `conf_dir` again and apply the
    /// difference (as SIGHUP does): [`ReloadResult`](crate::ReloadResult).
    Reload {},
}

impl Command {
    /// The command's `"command"` value.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Command::Status {} => "status",
            Command::Devices {} => "devices",
            Command::Connect { .. } => "connect",
            Command::Disconnect { .. } => "disconnect",
            Command::PolicyGet { .. } => "policy_get",
            Command::PolicySet { .. } => "policy_set",
            Command::Hold { .. } => "hold",
            Command::Resume { .. } => "resume",
            Command::Drain { .. } => "drain",
            Command::Undrain { .. } => "undrain",
            Command::Events { .. } => "events",
            Command::Metrics {} => "metrics",
            Command::Reload {} => "reload",
        }
    }
}
