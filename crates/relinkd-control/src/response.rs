//! A response line: a command's result or its error.

use serde::{Deserialize, Serialize};

use crate::{ControlError, ErrorKind, VERSION};

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
