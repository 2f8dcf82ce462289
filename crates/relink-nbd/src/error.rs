//! Typed errors: the protocol's (what ends a connection) and the backend's
//! (what becomes an NBD error number in a reply).

use crate::consts::*;

/// A violation of the NBD protocol by the peer, or a failure of the
/// connection. Each one ends the connection it happened on (the protocol has
/// no reply that could carry it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Fewer bytes than the message needs.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// The message being parsed.
        what: &'static str,
        /// The bytes it needs.
        need: usize,
        /// The bytes available.
        have: usize,
    },
    /// A magic number other than the protocol's.
    #[error("bad {what} magic {found:#x}")]
    BadMagic {
        /// The message whose magic is wrong.
        what: &'static str,
        /// The value received.
        found: u64,
    },
    /// Client flags with bits this server does not know (the spec says close).
    #[error("unknown client flags {0:#x}")]
    UnknownClientFlags(u32),
    /// An option longer than the server accepts.
    #[error("option {option} carries {len} bytes, more than the limit {max}")]
    OptionTooLong {
        /// The option number.
        option: u32,
        /// Its announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// `NBD_OPT_EXPORT_NAME` for a name that is not exported (the spec says close).
    #[error("no export named {0:?}")]
    UnknownExport(String),
    /// The client sent `NBD_OPT_ABORT` or closed during the handshake.
    #[error("the client ended the handshake")]
    HandshakeAborted,
    /// A socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// A failed block operation, as the backend reports it. Each variant maps to
/// one NBD error number ([`BlockError::nbd_errno`]), which the client sees as
/// that `errno`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// `EPERM`: the export refuses the operation (e.g. it is read-only).
    #[error("operation not permitted")]
    PermissionDenied,
    /// `EIO`: the storage failed; the message says how.
    #[error("i/o error: {0}")]
    Io(String),
    /// `ENOMEM`: no memory for the request.
    #[error("out of memory")]
    OutOfMemory,
    /// `EINVAL`: an argument the backend cannot accept.
    #[error("invalid argument")]
    InvalidArgument,
    /// `ENOSPC`: no space left (or a write past the end).
    #[error("no space left on device")]
    NoSpace,
    /// `ENOTSUP`: the backend does not implement the operation.
    #[error("operation not supported")]
    NotSupported,
    /// `ESHUTDOWN`: the backend is shutting down (or is gone).
    #[error("backend shutting down")]
    ShuttingDown,
}

impl BlockError {
    /// The NBD error number sent in the reply.
    #[must_use]
    pub fn nbd_errno(&self) -> u32 {
        match self {
            BlockError::PermissionDenied => NBD_EPERM,
            BlockError::Io(_) => NBD_EIO,
            BlockError::OutOfMemory => NBD_ENOMEM,
            BlockError::InvalidArgument => NBD_EINVAL,
            BlockError::NoSpace => NBD_ENOSPC,
            BlockError::NotSupported => NBD_ENOTSUP,
            BlockError::ShuttingDown => NBD_ESHUTDOWN,
        }
    }
}

impl From<std::io::Error> for BlockError {
    /// Maps an OS error by its `errno` (`EPERM`/`EROFS`, `ENOSPC`/`EFBIG`/
    /// `EDQUOT`, `ENOMEM`, `EINVAL`, `EOPNOTSUPP`); anything else is `EIO`.
    fn from(e: std::io::Error) -> Self {
        use rustix::io::Errno;
        match e.raw_os_error().map(Errno::from_raw_os_error) {
            Some(Errno::PERM | Errno::ROFS) => BlockError::PermissionDenied,
            Some(Errno::NOSPC | Errno::FBIG | Errno::DQUOT) => BlockError::NoSpace,
            Some(Errno::NOMEM) => BlockError::OutOfMemory,
            Some(Errno::INVAL) => BlockError::InvalidArgument,
            Some(Errno::OPNOTSUPP) => BlockError::NotSupported,
            _ => BlockError::Io(e.to_string()),
        }
    }
}

/// A server configuration that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Two exports share a name.
    #[error("two exports are named {0:?}")]
    DuplicateExport(String),
    /// A name longer than the protocol's 4096 bytes, or containing NUL.
    #[error("export name {0:?} is not a valid NBD string (at most 4096 bytes, no NUL)")]
    BadName(String),
    /// No exports at all.
    #[error("no exports")]
    NoExports,
    /// A limit of zero (queue depth, payload).
    #[error("{0} must be at least 1")]
    ZeroLimit(&'static str),
    /// An export's block sizes that cannot be advertised.
    #[error("export {name:?}: block sizes {sizes}: {reason}")]
    BadBlockSizes {
        /// The export.
        name: String,
        /// The sizes, `minimum/preferred/maximum`.
        sizes: String,
        /// What is wrong.
        reason: &'static str,
    },
}
