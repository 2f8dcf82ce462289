//! # relinkd-control — relinkd's control protocol
//!
//! The requests and responses of relinkd's control socket, their JSON
//! wire form, and a blocking [`Client`] over the Unix socket. relinkd
//! answers with these types (it re-exports this crate as
//! `relinkd::control::protocol`); the `relink` CLI asks with them. A
//! program that drives a running daemon depends on this crate alone: it
//! pulls in no async runtime and none of the daemon's block or NBD code.
//!
//! # The wire form
//!
//! Newline-delimited JSON over a Unix stream socket: one request per
//! line, one response per line, in order (for `events` with `follow`, an
//! acknowledgement and then one response per event until the client
//! closes or sends anything).
//!
//! ```text
//! -> {"version":1,"command":"status"}
//! <- {"version":1,"ok":true,"result":{"exports":[...],"connections":[...]}}
//! -> {"version":1,"command":"disconnect","name":"nope"}
//! <- {"version":1,"ok":false,"error":{"kind":"not_found","message":"no connection \"nope\""}}
//! ```
//!
//! - Every line carries `"version"`: [`VERSION`]. A request of another
//!   version, or none, is answered with an error of kind
//!   [`ErrorKind::UnsupportedVersion`] that names the version the daemon
//!   speaks.
//! - A request is an object with `"command"` (one of [`COMMANDS`]) and
//!   that command's arguments as further fields ([`Command`]); an unknown
//!   field is refused, an absent optional one takes its default.
//! - A request line holds at most [`MAX_LINE`] bytes (its newline
//!   excluded). The daemon answers a longer one with a
//!   [`ErrorKind::BadRequest`] error and closes the connection, as the
//!   rest of the line cannot be told from the next request.
//! - A response has `"ok"` and either `"result"` (the command's result
//!   type, below) or `"error"` ([`ControlError`]: an [`ErrorKind`] and a
//!   message for a person). A refused request leaves the connection open
//!   for the next one.
//!
//! # What each command answers
//!
//! | command | result |
//! |---|---|
//! | `status` | [`StatusResult`] |
//! | `devices` | [`DevicesResult`] |
//! | `policy_get`, `policy_set` | [`PolicyResult`] |
//! | `drain` | [`DrainResult`] |
//! | `events` with `follow` | [`AckResult`], then an [`EventRecord`] per event |
//! | `metrics` | [`MetricsResult`] |
//! | `reload` | [`ReloadResult`] |
//! | `connect`, `disconnect`, `hold`, `resume`, `undrain`, `events` | [`AckResult`] |
//!
//! # Who may connect
//!
//! The daemon's socket is [`DEFAULT_SOCKET`] unless its configuration
//! names another (`[control] socket`), with mode 0600. A client of
//! another uid than the daemon's or root's is kept out by that mode
//! ([`Client::connect`] fails with permission denied) or, if the mode was
//! opened, answered one [`ErrorKind::PermissionDenied`] error before the
//! daemon closes the connection.
//!
//! # Example
//!
//! The wire form of a request and a response, as the daemon's side sees
//! them:
//!
//! ```
//! use relinkd_control::{parse_request, AckResult, Command, Request, Response};
//!
//! let line = Request::new(Command::Hold { name: "disk".into() }).to_line();
//! assert_eq!(line, "{\"version\":1,\"command\":\"hold\",\"name\":\"disk\"}\n");
//! let request = parse_request(line.as_bytes()).unwrap();
//! assert_eq!(request.command, Command::Hold { name: "disk".into() });
//!
//! let answer = Response::ok(&AckResult { message: "disk: held".into() }).to_line();
//! let back: Response = serde_json::from_str(answer.trim_end()).unwrap();
//! assert_eq!(back.into_result::<AckResult>().unwrap().message, "disk: held");
//! ```
//!
//! And a client's, asking a running daemon:
//!
//! ```no_run
//! use relinkd_control::{Client, Command, StatusResult, DEFAULT_SOCKET};
//!
//! let mut daemon = Client::connect(DEFAULT_SOCKET)?;
//! let status: StatusResult = daemon.call(Command::Status {})?;
//! for c in &status.connections {
//!     println!("{}: {} (epoch {})", c.name, c.session.state, c.session.epoch);
//! }
//! # Ok::<(), relinkd_control::ClientError>(())
//! ```

mod client;
mod commands;
mod errors;
mod request;
mod response;
mod results;

pub use client::{Client, ClientError};
pub use commands::{Command, Limit, Mode, Never, COMMANDS};
pub use errors::{ControlError, ErrorKind, ProtocolError};
pub use request::{parse_request, Request};
pub use response::Response;
pub use results::{
    AckResult, ConnectionStatus, DeviceStatus, DevicesResult, DrainResult, EventRecord,
    ExportStatus, MetricsResult, PolicyResult, RecoveryPhases, ReloadResult, SessionStatus,
    StatusResult,
};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The longest request line accepted, in bytes (its newline excluded).
pub const MAX_LINE: usize = 64 * 1024;

/// The control socket's path when relinkd's configuration names none
/// (`[control] socket`).
pub const DEFAULT_SOCKET: &str = "/run/relinkd/control.sock";
