//! The control protocol: newline-delimited JSON over a Unix stream
//! socket, one request per line, one response per line (a stream of
//! them for `events` with `follow`).
//!
//! ```text
//! -> {"version":1,"command":"status"}
//! <- {"version":1,"ok":true,"result":{"exports":[...],"connections":[...]}}
//! -> {"version":1,"command":"disconnect","name":"nope"}
//! <- {"version":1,"ok":false,"error":{"kind":"not_found","message":"no connection \"nope\""}}
//! ```
//!
//! [`parse_request`] checks a line; the typed results are the `*Result`
//! structs of this module (what each [`Command`] answers).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The longest request line accepted, in bytes (its newline excluded).
pub const MAX_LINE: usize = 64 * 1024;

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
#[non_exhaustive]
pub enum Command {
    /// Exports and connections with their sessions' state and counters:
    /// [`StatusResult`].
    Status {},
    /// The backend's devices: [`DevicesResult`].
    Devices {},
    /// Add a connection at runtime: [`AckResult`] once its session is
    /// made (its NBD socket is served once its IDENTIFY completes).
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
        /// Commands outstanding at once (1 to 1024; default 32).
        #[serde(default)]
        queue_depth: Option<u64>,
        /// The longest command, bytes (a multiple of 4096 up to 16 MiB;
        /// default 128 KiB).
        #[serde(default)]
        max_io: Option<u64>,
    },
    /// Remove a connection: recovery stops, its NBD requests fail at
    /// once, its NBD socket goes: [`AckResult`].
    Disconnect {
        /// The connection.
        name: String,
    },
    /// A connection's live policy: [`PolicyResult`].
    PolicyGet {
        /// The connection.
        name: String,
    },
    /// Change a connection's live policy (absent fields stay):
    /// [`PolicyResult`].
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
    /// is recovering): [`AckResult`].
    Hold {
        /// The connection.
        name: String,
    },
    /// Let a held session recover, on `path` (an index in its targets)
    /// if given: [`AckResult`].
    Resume {
        /// The connection.
        name: String,
        /// The path to take.
        #[serde(default)]
        path: Option<usize>,
    },
    /// Move every session off a device: [`DrainResult`].
    Drain {
        /// The device's name.
        device: String,
    },
    /// Let sessions take a drained device again: [`AckResult`].
    Undrain {
        /// The device's name.
        device: String,
    },
    /// Session and engine events: with `follow`, one [`EventRecord`]
    /// response per event until the client closes; without, an empty
    /// [`AckResult`].
    Events {
        /// Stream the events.
        #[serde(default)]
        follow: bool,
    },
    /// Prometheus text exposition: [`MetricsResult`].
    Metrics {},
    /// Read the configuration file and its `conf_dir` again and apply the
    /// difference (as SIGHUP does): [`ReloadResult`].
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

/// A request: the protocol version and the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Always [`VERSION`].
    pub version: u32,
    /// The command with its arguments.
    #[serde(flatten)]
    pub command: Command,
}

impl Request {
    /// A request of this version.
    #[must_use]
    pub fn new(command: Command) -> Request {
        Request {
            version: VERSION,
            command,
        }
    }

    /// The request as one line, newline included.
    #[must_use]
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Why a request line is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The line is longer than [`MAX_LINE`].
    #[error("request line of {len} bytes, at most {MAX_LINE}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// Not a JSON object, or a field of the wrong type or unknown.
    #[error("bad request: {0}")]
    Malformed(String),
    /// A version other than [`VERSION`], or none.
    #[error("unsupported protocol version {found}: this relinkd speaks version {VERSION}")]
    Version {
        /// The version asked for, as given.
        found: String,
    },
    /// A command this daemon does not know.
    #[error("unknown command {0:?} (known: {list})", list = COMMANDS.join(", "))]
    UnknownCommand(String),
}

impl ProtocolError {
    /// The error's kind in a response.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProtocolError::TooLong { .. } | ProtocolError::Malformed(_) => ErrorKind::BadRequest,
            ProtocolError::Version { .. } => ErrorKind::UnsupportedVersion,
            ProtocolError::UnknownCommand(_) => ErrorKind::UnknownCommand,
        }
    }
}

/// Check one request line (its trailing newline optional).
///
/// # Errors
/// [`ProtocolError`]: too long, not a JSON object with a supported
/// `version` and a known `command`, or arguments that do not fit it.
pub fn parse_request(line: &[u8]) -> Result<Request, ProtocolError> {
    if line.len() > MAX_LINE + 1 {
        return Err(ProtocolError::TooLong { len: line.len() });
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err(ProtocolError::TooLong { len: line.len() });
    }
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| ProtocolError::Malformed(e.to_string()))?;
    let serde_json::Value::Object(mut map) = value else {
        return Err(ProtocolError::Malformed("not a JSON object".into()));
    };
    match map.remove("version") {
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(VERSION)) => {}
        Some(other) => {
            return Err(ProtocolError::Version {
                found: other.to_string(),
            })
        }
        None => {
            return Err(ProtocolError::Version {
                found: "(none)".into(),
            })
        }
    }
    match map.get("command") {
        Some(serde_json::Value::String(c)) if COMMANDS.contains(&c.as_str()) => {}
        Some(serde_json::Value::String(c)) => {
            return Err(ProtocolError::UnknownCommand(c.clone()));
        }
        Some(_) => {
            return Err(ProtocolError::Malformed(
                "\"command\" is not a string".into(),
            ))
        }
        None => return Err(ProtocolError::Malformed("no \"command\"".into())),
    }
    let command: Command = serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|e| ProtocolError::Malformed(e.to_string()))?;
    Ok(Request {
        version: VERSION,
        command,
    })
}

/// What kind of error a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The line is not a valid request.
    BadRequest,
    /// The version is not [`VERSION`].
    UnsupportedVersion,
    /// The command is unknown.
    UnknownCommand,
    /// The client's uid is neither the daemon's nor root's.
    PermissionDenied,
    /// No connection or device of that name.
    NotFound,
    /// A connection of that name, or with that NBD socket, exists.
    Exists,
    /// The arguments do not fit (a policy out of range, a path index).
    Invalid,
    /// The node refused or the daemon stops.
    Failed,
}

/// A response's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(deny_unknown_fields)]
#[error("{message}")]
pub struct ControlError {
    /// Its kind.
    pub kind: ErrorKind,
    /// What went wrong, for a person.
    pub message: String,
}

impl ControlError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ControlError {
        ControlError {
            kind,
            message: message.into(),
        }
    }
}

impl From<ProtocolError> for ControlError {
    fn from(e: ProtocolError) -> ControlError {
        ControlError::new(e.kind(), e.to_string())
    }
}

/// One response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// Always [`VERSION`].
    pub version: u32,
    /// Whether the command succeeded.
    pub ok: bool,
    /// The command's result, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ControlError>,
}

impl Response {
    /// A success with `result`.
    pub fn ok(result: &impl Serialize) -> Response {
        match serde_json::to_value(result) {
            Ok(v) => Response {
                version: VERSION,
                ok: true,
                result: Some(v),
                error: None,
            },
            Err(e) => Response::err(ControlError::new(ErrorKind::Failed, e.to_string())),
        }
    }

    /// A failure.
    #[must_use]
    pub fn err(error: ControlError) -> Response {
        Response {
            version: VERSION,
            ok: false,
            result: None,
            error: Some(error),
        }
    }

    /// The response as one line, newline included.
    #[must_use]
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The typed result, or the error.
    ///
    /// # Errors
    /// The response's error, or one of kind [`ErrorKind::BadRequest`] if
    /// the result does not fit `T`.
    pub fn into_result<T: serde::de::DeserializeOwned>(self) -> Result<T, ControlError> {
        if !self.ok {
            return Err(self.error.unwrap_or_else(|| {
                ControlError::new(ErrorKind::Failed, "failed (no reason given)")
            }));
        }
        serde_json::from_value(self.result.unwrap_or(serde_json::Value::Null)).map_err(|e| {
            ControlError::new(ErrorKind::BadRequest, format!("unexpected result: {e}"))
        })
    }
}

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
    /// Its initiators' sessions.
    pub sessions: Vec<SessionStatus>,
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
/// `"connect NAME"`; a changed entry is removed and added), and those
/// that could not be applied, with why (a reload tries them again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadResult {
    /// Entries removed.
    pub removed: Vec<String>,
    /// Entries added.
    pub added: Vec<String>,
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
    /// `connect NAME`, `export NAME` or `node`.
    pub source: String,
    /// `session` (a relink session event) or `engine` (a block engine's).
    pub kind: String,
    /// The event.
    pub event: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_request_parses() {
        let r = parse_request(b"{\"version\":1,\"command\":\"status\"}\n").unwrap();
        assert_eq!(r.command, Command::Status {});
    }

    #[test]
    fn requests_round_trip() {
        let cmds = [
            Command::Connect {
                name: "d".into(),
                targets: vec!["127.0.0.1:1".parse().unwrap()],
                nbd_socket: "/x".into(),
                nbd_tcp: None,
                give_up_secs: Some(3),
                queue_depth: Some(8),
                max_io: None,
            },
            Command::PolicySet {
                name: "d".into(),
                give_up_secs: Some(Limit::Off(Never::None)),
                fast_fail_secs: Some(Limit::Secs(4)),
                mode: Some(Mode::Manual),
            },
            Command::Resume {
                name: "d".into(),
                path: Some(1),
            },
            Command::Events { follow: true },
            Command::Metrics {},
            Command::Reload {},
        ];
        for c in cmds {
            let line = Request::new(c.clone()).to_line();
            assert_eq!(parse_request(line.as_bytes()).unwrap().command, c, "{line}");
        }
    }

    #[test]
    fn an_unknown_version_names_the_supported_one() {
        let e = parse_request(b"{\"version\":2,\"command\":\"status\"}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
        assert!(e.to_string().contains("version 1"), "{e}");
        let e = parse_request(b"{\"command\":\"status\"}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
    }

    #[test]
    fn an_unknown_command_is_named() {
        let e = parse_request(b"{\"version\":1,\"command\":\"reboot\"}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownCommand);
        assert!(e.to_string().contains("\"reboot\""), "{e}");
    }

    #[test]
    fn unknown_fields_and_bad_lines_are_refused() {
        for line in [
            &b"{\"version\":1,\"command\":\"status\",\"x\":1}"[..],
            b"{\"version\":1,\"command\":\"disconnect\"}",
            b"{\"version\":1,\"command\":\"hold\",\"name\":3}",
            b"[1]",
            b"not json",
            b"",
        ] {
            let e = parse_request(line).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadRequest, "{e}");
        }
        let long = vec![b' '; MAX_LINE + 2];
        assert!(matches!(
            parse_request(&long),
            Err(ProtocolError::TooLong { .. })
        ));
    }

    #[test]
    fn responses_carry_results_or_errors() {
        let ok = Response::ok(&AckResult {
            message: "done".into(),
        });
        let back: Response = serde_json::from_str(ok.to_line().trim()).unwrap();
        assert_eq!(back.into_result::<AckResult>().unwrap().message, "done");
        let err = Response::err(ControlError::new(ErrorKind::NotFound, "no connection"));
        let line = err.to_line();
        assert!(line.contains("\"kind\":\"not_found\""), "{line}");
        let back: Response = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(
            back.into_result::<AckResult>().unwrap_err().kind,
            ErrorKind::NotFound
        );
    }
}
