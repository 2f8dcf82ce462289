//! A blocking client of the control socket.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::{Command, ControlError, Request, Response};

/// A connection to a running relinkd's control socket, blocking.
///
/// [`Client::connect`], then either [`Client::call`] for each command (one
/// request, its one response), or, for a stream (`events` with
/// `follow`), [`Client::call`] for its acknowledgement and
/// [`Client::next_response`] for each line after it. The methods block:
/// a write until the socket takes the request, a read until the daemon
/// answers or closes. There is no timeout.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// Why the [`Client`] got no result.
///
/// Each message names what failed and includes its cause; the cause is
/// not also a [`source`](std::error::Error::source), so a chain of
/// messages prints it once. An error from the socket is never taken for
/// one of the program's own output: a caller that checks its error chain
/// for a broken pipe (a reader of its output that left) finds none here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The socket could not be connected to: no daemon there (not found,
    /// connection refused), or its mode keeps this user out (permission
    /// denied).
    #[error("cannot reach relinkd at {}: {error}", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// Writing the request or reading a response failed.
    #[error("relinkd at {}: {error}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The daemon closed the connection before it answered.
    #[error("relinkd at {} closed the connection", path.display())]
    Closed {
        /// The socket.
        path: PathBuf,
    },
    /// The daemon answered a line that is not a [`Response`].
    #[error("relinkd answered a line that is not a response: {0}")]
    NotAResponse(serde_json::Error),
    /// The daemon answered with an error (a refused client's
    /// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied)
    /// among them), or with a result that is not of the type asked for
    /// (kind [`ErrorKind::BadRequest`](crate::ErrorKind::BadRequest)). The
    /// message is the [`ControlError`]'s alone.
    #[error("{0}")]
    Control(ControlError),
}

impl Client {
    /// Connect to the control socket at `path` (relinkd's default is
    /// [`DEFAULT_SOCKET`](crate::DEFAULT_SOCKET)).
    ///
    /// # Errors
    /// [`ClientError::Connect`]: nothing listens at `path`, or this user
    /// may not open it. A daemon that refuses this user's uid accepts the
    /// connection: its refusal is the answer to the first request.
    pub fn connect(path: impl Into<PathBuf>) -> Result<Client, ClientError> {
        let path = path.into();
        let connected =
            UnixStream::connect(&path).and_then(|writer| Ok((writer.try_clone()?, writer)));
        match connected {
            Ok((reader, writer)) => Ok(Client {
                path,
                reader: BufReader::new(reader),
                writer,
            }),
            Err(error) => Err(ClientError::Connect { path, error }),
        }
    }

    /// The socket this client is connected to.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Send `command` and take its typed result: the response's `result`
    /// as a `T` (the type the [crate docs](crate) list for the command).
    ///
    /// # Errors
    /// - [`ClientError::Control`]: the daemon refused the command (or this
    ///   client), or its result is not a `T`;
    /// - [`ClientError::Closed`]: the daemon closed the connection without
    ///   an answer (it stopped);
    /// - [`ClientError::Io`], [`ClientError::NotAResponse`]: as for
    ///   [`Client::send`] and [`Client::next_response`].
    pub fn call<T: DeserializeOwned>(&mut self, command: Command) -> Result<T, ClientError> {
        self.send(command)?;
        let response = self.next_response()?.ok_or_else(|| ClientError::Closed {
            path: self.path.clone(),
        })?;
        response.into_result::<T>().map_err(ClientError::Control)
    }

    /// Send `command` without waiting for its response (read it with
    /// [`Client::next_response`]).
    ///
    /// # Errors
    /// - [`ClientError::Control`]: the request could not be written
    ///   because the daemon answered an error and closed first, as it does
    ///   for a client of another user: that error;
    /// - [`ClientError::Io`]: the request could not be written otherwise.
    pub fn send(&mut self, command: Command) -> Result<(), ClientError> {
        let line = Request::new(command).to_line();
        let Err(error) = self.writer.write_all(line.as_bytes()) else {
            return Ok(());
        };
        if let Ok(Some(response)) = self.next_response() {
            if let Err(refused) = response.into_result::<serde_json::Value>() {
                return Err(ClientError::Control(refused));
            }
        }
        Err(ClientError::Io {
            path: self.path.clone(),
            error,
        })
    }

    /// The next response line, as it came (its `ok` not checked: see
    /// [`Response::into_result`]).
    ///
    /// Returns `Ok(None)` once the daemon closed the connection: after a
    /// stream ends, or when the daemon stops. It blocks until a line or
    /// the end comes.
    ///
    /// # Errors
    /// - [`ClientError::Io`]: reading failed;
    /// - [`ClientError::NotAResponse`]: the line is not a response.
    pub fn next_response(&mut self) -> Result<Option<Response>, ClientError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|error| ClientError::Io {
                path: self.path.clone(),
                error,
            })?;
        if n == 0 {
            return Ok(None);
        }
        serde_json::from_str(line.trim_end())
            .map(Some)
            .map_err(ClientError::NotAResponse)
    }
}
