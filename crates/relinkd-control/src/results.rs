//! The commands' results: what the `"result"` of a successful response
//! holds for each command.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::Mode;

/// Counters of one session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionStatus {
    /// The session's state (`Established`, `Recovering`, `Held`, ...).
    pub state: String,
    /// The epoch of its transport; it grows with every attempt.
    pub epoch: u64,
    /// Connection attempts (the first connect's included).
    pub attempts: u64,
    /// Outages that ended with the session established again.
    pub recoveries: u64,
    /// Transport losses.
    pub losses: u64,
    /// Time without a transport so far, the outage under way included.
    pub downtime_secs: f64,
    /// Operations posted again after losses.
    pub replayed: u64,
    /// Planned outages taken (drains, suspends): not losses.
    #[serde(default)]
    pub planned: u64,
    /// Losses that switched to a hot standby (no connection attempt).
    #[serde(default)]
    pub failovers: u64,
    /// Messages delivered to this end.
    #[serde(default)]
    pub delivered: u64,
    /// Of those, messages that came behind another in one SEND (requests
    /// or replies queued together share a SEND while the receive slot has
    /// room).
    #[serde(default)]
    pub packed: u64,
    /// The device carrying it, if any.
    pub device: Option<String>,
    /// Where the last outage's time went; `None` before the first.
    #[serde(default)]
    pub last_recovery: Option<RecoveryPhases>,
}

/// The phases of a session's last outage, in milliseconds, each from the
/// end of the phase before (relink's `RecoveryTimeline`), but `released`,
/// which is from the loss; `None` for a phase not reached (or, for
/// `device` and the resolutions, not taken: no device came, or the
/// session is the target's; for `connect`, a switch to the standby; for
/// `promoted`, a reconnection).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryPhases {
    /// From the loss until the lost connection's resources were destroyed
    /// (off the path: after the loss's poll round, while the session
    /// recovers).
    #[serde(default)]
    pub released_ms: Option<f64>,
    /// From the loss until a device came.
    pub device_ms: Option<f64>,
    /// Until the attempt that succeeded began.
    pub attempt_ms: Option<f64>,
    /// Address resolution (initiator).
    pub addr_ms: Option<f64>,
    /// Route resolution (initiator).
    pub route_ms: Option<f64>,
    /// Creating the connection's resources.
    pub resources_ms: Option<f64>,
    /// The CM connection.
    pub connect_ms: Option<f64>,
    /// Switching to the hot standby (no attempt made).
    #[serde(default)]
    pub promoted_ms: Option<f64>,
    /// The resync (journals, region advertisements).
    pub resync_ms: Option<f64>,
    /// Until the first operation completed.
    pub first_completion_ms: Option<f64>,
    /// From the loss to the last phase reached.
    pub total_ms: f64,
}

/// One export (the target role).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportStatus {
    /// Its name.
    pub name: String,
    /// Its listening address.
    pub listen: SocketAddr,
    /// Whether it listens now; `false` while no device owns its address
    /// (it listens once one does).
    #[serde(default = "listening_default")]
    pub listening: bool,
    /// Its initiators' sessions.
    pub sessions: Vec<SessionStatus>,
}

fn listening_default() -> bool {
    true
}

/// One connection (the initiator role).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionStatus {
    /// Its name.
    pub name: String,
    /// The target's addresses.
    pub targets: Vec<SocketAddr>,
    /// `connecting` (IDENTIFY pending), `ready`, `reconnecting` (a new
    /// session after the last one ended).
    pub state: String,
    /// Its session.
    pub session: SessionStatus,
    /// The last outages' lengths, oldest first (at most 8).
    pub last_outages_secs: Vec<f64>,
    /// Bytes read by NBD clients.
    pub bytes_read: u64,
    /// Bytes written by NBD clients.
    pub bytes_written: u64,
    /// NBD requests not answered yet.
    pub in_flight: u64,
    /// The NBD Unix socket.
    pub nbd_socket: PathBuf,
}

/// `status`'s result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusResult {
    /// The exports.
    pub exports: Vec<ExportStatus>,
    /// The connections.
    pub connections: Vec<ConnectionStatus>,
}

/// One device of the backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// Its name.
    pub name: String,
    /// Its registration (`name#index@generation`).
    pub id: String,
    /// Its node GUID.
    pub guid: String,
    /// Its addresses with their prefix lengths.
    pub addresses: Vec<String>,
    /// `active` or `down`.
    pub port: String,
    /// Whether it is being drained.
    pub draining: bool,
}

/// `devices`' result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicesResult {
    /// The devices.
    pub devices: Vec<DeviceStatus>,
}

/// `policy_get`'s and `policy_set`'s result: the live policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// The connection.
    pub name: String,
    /// The give-up deadline after a loss (`None`: never).
    pub give_up_secs: Option<u64>,
    /// When queued I/O fails in an outage (`None`: never).
    pub fast_fail_secs: Option<u64>,
    /// Automatic or manual recovery.
    pub mode: Mode,
}

/// `drain`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainResult {
    /// The device.
    pub device: String,
    /// Sessions moving to another path (connection names, `export NAME`
    /// for a target's).
    pub moving: Vec<String>,
    /// Sessions with no other path: they stay on the device.
    pub blocked: Vec<String>,
}

/// The result of a command that has nothing to report but its success.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckResult {
    /// What was done.
    pub message: String,
}

/// `reload`'s result: the entries added and removed (`"export NAME"`,
/// `"connect NAME"`; a changed entry is removed and added), the
/// connections whose policy alone changed (applied live, the session
/// kept), and those that could not be applied, with why (a reload tries
/// them again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadResult {
    /// Entries removed.
    pub removed: Vec<String>,
    /// Entries added.
    pub added: Vec<String>,
    /// Connections whose `give_up_secs` / `fast_fail_secs` alone changed:
    /// set on the live session, which stays.
    #[serde(default)]
    pub changed: Vec<String>,
    /// Entries that could not be added, each with its error.
    pub failed: Vec<String>,
}

/// `metrics`' result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsResult {
    /// Prometheus text exposition.
    pub text: String,
}

/// One event of `events` with `follow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// When relinkd saw it: wall-clock time, RFC 3339 in UTC with
    /// milliseconds (`2026-12-06T13:04:05.123Z`).
    #[serde(default)]
    pub at: String,
    /// `connect NAME`, `export NAME` or `node`.
    pub source: String,
    /// `session` (a relink session event) or `engine` (a block engine's).
    pub kind: String,
    /// The relink session it is about, if any (the handle `status` shows
    /// for an export's sessions).
    #[serde(default)]
    pub session: Option<u64>,
    /// The event's kind, a stable snake_case name (`device_lost`,
    /// `resumed`, `attempt_failed`, `fast_failed`, ...).
    #[serde(default)]
    pub name: String,
    /// The event in plain words.
    pub event: String,
}
