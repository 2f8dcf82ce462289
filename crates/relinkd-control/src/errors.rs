//! What goes wrong: a request line refused ([`ProtocolError`]) and the
//! error a response carries ([`ControlError`], of an [`ErrorKind`]).

use serde::{Deserialize, Serialize};

use crate::{COMMANDS, MAX_LINE, VERSION};

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
