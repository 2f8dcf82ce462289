//! The errors a block command can end with: a target's status
//! ([`TargetError`], on the wire) or the session's end ([`SessionEnd`]),
//! together [`BlockError`]; each maps to an errno for a front end.

/// Why a target refused or failed a command: the status of its response
/// (a code on the wire, [`TargetError::code`]). More may come: a match
/// needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The volume's file failed the read, write or sync (`EIO`).
    #[error("I/O error on the target's volume")]
    Io,
    /// The range is past the volume's end (`EINVAL`).
    #[error("range past the end of the volume")]
    OutOfRange,
    /// A write, write-zeroes or trim on a read-only volume (`EPERM`).
    #[error("the volume is read-only")]
    ReadOnly,
    /// The volume's file system is full (`ENOSPC`).
    #[error("no space left on the target's volume")]
    NoSpace,
    /// A length of 0, above the target's `max_io` (READ, WRITE), or not
    /// a multiple of the block size, or a misaligned offset (`EINVAL`).
    #[error("invalid length or alignment")]
    Invalid,
    /// The target does not serve this opcode (`EOPNOTSUPP`).
    #[error("operation not supported by the target")]
    Unsupported,
    /// The RDMA transfer to or from the initiator's buffer failed: the
    /// buffer token is outside what the initiator advertised (`EIO`).
    #[error("RDMA transfer to or from the initiator's buffer failed")]
    Transfer,
    /// The target could not decode the command (`EPROTO`).
    #[error("the target could not decode the command")]
    BadCommand,
}

impl TargetError {
    /// Every error, in code order.
    pub const ALL: [TargetError; 8] = [
        TargetError::Io,
        TargetError::OutOfRange,
        TargetError::ReadOnly,
        TargetError::NoSpace,
        TargetError::Invalid,
        TargetError::Unsupported,
        TargetError::Transfer,
        TargetError::BadCommand,
    ];

    /// The status code on the wire (never 0, which is success).
    pub fn code(self) -> u16 {
        match self {
            TargetError::Io => 1,
            TargetError::OutOfRange => 2,
            TargetError::ReadOnly => 3,
            TargetError::NoSpace => 4,
            TargetError::Invalid => 5,
            TargetError::Unsupported => 6,
            TargetError::Transfer => 7,
            TargetError::BadCommand => 8,
        }
    }

    /// The error of a non-zero status code; `None` for 0 or a code this
    /// version does not know.
    pub fn from_code(code: u16) -> Option<TargetError> {
        TargetError::ALL.into_iter().find(|e| e.code() == code)
    }

    /// The errno a block front end reports for it.
    pub fn errno(self) -> i32 {
        match self {
            TargetError::Io | TargetError::Transfer => libc::EIO,
            TargetError::OutOfRange | TargetError::Invalid => libc::EINVAL,
            TargetError::ReadOnly => libc::EPERM,
            TargetError::NoSpace => libc::ENOSPC,
            TargetError::Unsupported => libc::EOPNOTSUPP,
            TargetError::BadCommand => libc::EPROTO,
        }
    }

    /// The error of an I/O error of the volume's file: `NoSpace` for
    /// `ENOSPC` (and `EDQUOT`), `Io` for the rest.
    pub fn from_io(e: &std::io::Error) -> TargetError {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => TargetError::NoSpace,
            _ => TargetError::Io,
        }
    }
}

/// How the session a command was outstanding on ended before its
/// response came: the command may or may not have taken effect on the
/// target (a write may be on the volume, unflushed). Reconnect a new
/// session and resubmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionEnd {
    /// The session's give-up deadline passed (`ctrl_loss_tmo`, or
    /// `first_connect_tmo` for a session never established).
    GaveUp,
    /// The peer lost its state (the target restarted as a new
    /// incarnation) or refused the session for good.
    PeerLost,
    /// The session was closed, by this side or by the target's goodbye.
    Closed,
}

/// Why a command did not succeed ([`InitiatorEngine::poll_completion`](crate::InitiatorEngine::poll_completion)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// The target answered with an error status.
    #[error("target: {0}")]
    Target(#[from] TargetError),
    /// The session ended before the response came.
    #[error("the session ended ({0:?}) before the response came")]
    SessionEnded(SessionEnd),
    /// The session's `fast_io_fail_tmo` passed in an outage: the command
    /// fails while the session keeps recovering (for a caller that
    /// retries elsewhere). It may still reach the target and take effect
    /// once the session is back (its slot stays reserved until then).
    #[error("fast_io_fail_tmo passed while the session recovers")]
    FastFail,
}

impl BlockError {
    /// The errno a block front end reports for it: the target error's
    /// ([`TargetError::errno`]), `ENOTCONN` for an ended session,
    /// `ENOLINK` for a fast failure.
    pub fn errno(self) -> i32 {
        match self {
            BlockError::Target(e) => e.errno(),
            BlockError::SessionEnded(_) => libc::ENOTCONN,
            BlockError::FastFail => libc::ENOLINK,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_map_to_errno() {
        for e in TargetError::ALL {
            assert_ne!(e.code(), 0);
            assert_eq!(TargetError::from_code(e.code()), Some(e));
        }
        assert_eq!(TargetError::from_code(0), None);
        assert_eq!(TargetError::from_code(999), None);
        assert_eq!(TargetError::OutOfRange.errno(), libc::EINVAL);
        assert_eq!(TargetError::ReadOnly.errno(), libc::EPERM);
        assert_eq!(
            TargetError::from_io(&std::io::Error::from_raw_os_error(libc::ENOSPC)),
            TargetError::NoSpace
        );
        assert_eq!(
            BlockError::SessionEnded(SessionEnd::GaveUp).errno(),
            libc::ENOTCONN
        );
    }
}
