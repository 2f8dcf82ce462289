//! A request: its line and its checks.

use serde::Serialize;

use crate::{Command, ProtocolError, COMMANDS, MAX_LINE, VERSION};

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
