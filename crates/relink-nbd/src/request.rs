//! Transmission requests: the 28-byte header, and its check against an
//! export into a [`Command`] or a [`Rejection`] carrying the NBD error.

use crate::consts::*;
use crate::error::ProtocolError;
use crate::export::ExportInfo;

/// Length of a request header on the wire.
pub const REQUEST_HEADER_LEN: usize = 28;

/// A request header as sent by the client (a write's payload follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`NBD_CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`NBD_CMD_*`).
    pub kind: u16,
    /// The client's cookie (handle), echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte count.
    pub len: u32,
}

impl RequestHeader {
    /// Parses the first [`REQUEST_HEADER_LEN`] bytes of `buf`.
    ///
    /// # Errors
    /// [`ProtocolError::Truncated`] if `buf` is shorter, and
    /// [`ProtocolError::BadMagic`] if the magic is not `NBD_REQUEST_MAGIC`
    /// (the connection cannot continue: the stream is out of step).
    pub fn parse(buf: &[u8]) -> Result<Self, ProtocolError> {
        if buf.len() < REQUEST_HEADER_LEN {
            return Err(ProtocolError::Truncated {
                what: "request header",
                need: REQUEST_HEADER_LEN,
                have: buf.len(),
            });
        }
        let magic = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes"));
        if magic != REQUEST_MAGIC {
            return Err(ProtocolError::BadMagic {
                what: "request",
                found: u64::from(magic),
            });
        }
        Ok(RequestHeader {
            flags: u16::from_be_bytes(buf[4..6].try_into().expect("2 bytes")),
            kind: u16::from_be_bytes(buf[6..8].try_into().expect("2 bytes")),
            cookie: u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(buf[16..24].try_into().expect("8 bytes")),
            len: u32::from_be_bytes(buf[24..28].try_into().expect("4 bytes")),
        })
    }

    /// The header's wire form.
    #[must_use]
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut b = [0u8; REQUEST_HEADER_LEN];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// How many payload bytes follow this header on the wire: `len` for
    /// `NBD_CMD_WRITE`, else 0. They must be consumed (or the stream loses
    /// step) even when the request is rejected.
    #[must_use]
    pub fn payload_len(&self) -> u32 {
        if self.kind == NBD_CMD_WRITE {
            self.len
        } else {
            0
        }
    }
}

/// A request that passed [`check`]: safe to hand to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// Read `len` bytes (at most the maximum payload) at `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
    },
    /// Write the `len` payload bytes that follow the header.
    Write {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Flush.
    Flush,
    /// Trim.
    Trim {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Write zeroes.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
        /// Force unit access.
        fua: bool,
        /// A hole may be punched (no `NBD_CMD_FLAG_NO_HOLE`).
        may_trim: bool,
    },
    /// Which parts of a range are allocated (`base:allocation`).
    BlockStatus {
        /// Byte offset.
        offset: u64,
        /// Byte count (not bounded by the maximum payload).
        len: u32,
        /// One extent only (`NBD_CMD_FLAG_REQ_ONE`).
        one: bool,
    },
    /// Disconnect once the requests in flight are answered.
    Disconnect,
}

/// Why a well-formed request is refused; the connection continues and the
/// client gets `errno` in a simple reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// A command type this server does not implement (`EINVAL`).
    #[error("unsupported command {0}")]
    UnknownCommand(u16),
    /// Command flags not allowed on this command or export (`EINVAL`).
    #[error("command flags {0:#x} not allowed here")]
    BadFlags(u16),
    /// A command the export does not offer (`EINVAL`).
    #[error("command not offered by the export")]
    NotOffered,
    /// `NBD_CMD_BLOCK_STATUS` without a metadata context selected
    /// (`EINVAL`).
    #[error("block status without a metadata context selected (NBD_OPT_SET_META_CONTEXT base:allocation)")]
    NoMetaContext,
    /// `NBD_CMD_BLOCK_STATUS` of no bytes (`EINVAL`).
    #[error("block status of no bytes")]
    EmptyStatus,
    /// A modifying command on a read-only export (`EPERM`).
    #[error("export is read-only")]
    ReadOnly,
    /// A read or write longer than the maximum payload (`EINVAL`).
    #[error("length {len} exceeds the maximum payload {max}")]
    TooLong {
        /// The requested length.
        len: u32,
        /// The maximum payload.
        max: u32,
    },
    /// A read or block status whose range leaves the export, or overflows
    /// (`EINVAL`).
    #[error("range {offset}+{len} outside the export")]
    OutOfRange {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
    },
    /// An offset or length that is not a multiple of the export's minimum
    /// block size (`EINVAL`).
    #[error("range {offset}+{len} not aligned to the minimum block size {minimum}")]
    Unaligned {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
        /// The export's minimum block size.
        minimum: u32,
    },
    /// A write, trim or zeroing past the end (`ENOSPC`).
    #[error("write {offset}+{len} past the end of the export")]
    PastEnd {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
    },
}

impl Rejection {
    /// The NBD error number of the reply.
    #[must_use]
    pub fn nbd_errno(&self) -> u32 {
        match self {
            Rejection::ReadOnly => NBD_EPERM,
            Rejection::PastEnd { .. } => NBD_ENOSPC,
            _ => NBD_EINVAL,
        }
    }
}

/// Checks `header` against `export` and the server's `max_payload` (which
/// caps the export's maximum block size); `allocation`: the client selected
/// `base:allocation` (`NBD_CMD_BLOCK_STATUS` is refused otherwise).
///
/// Returns the [`Command`] to run, or the [`Rejection`] to answer with. Either
/// way the caller still consumes [`RequestHeader::payload_len`] bytes.
/// `NBD_CMD_DISC` is [`Command::Disconnect`] whatever its flags, offset and
/// length: the protocol gives it no reply, and its client sends nothing
/// after it.
///
/// # Errors
/// The [`Rejection`]: unknown command or flags, an operation the export does
/// not offer, a modification of a read-only export, an oversize read or
/// write, an offset or length not aligned to the minimum block size, a
/// range outside the export.
pub fn check(
    header: &RequestHeader,
    export: &ExportInfo,
    max_payload: u32,
    allocation: bool,
) -> Result<Command, Rejection> {
    if header.kind == NBD_CMD_DISC {
        return Ok(Command::Disconnect);
    }
    let f = export.flags;
    let fua = header.flags & NBD_CMD_FLAG_FUA != 0;
    let allowed_flags = match header.kind {
        NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE,
        NBD_CMD_BLOCK_STATUS => NBD_CMD_FLAG_REQ_ONE,
        NBD_CMD_READ | NBD_CMD_WRITE | NBD_CMD_FLUSH | NBD_CMD_TRIM => NBD_CMD_FLAG_FUA,
        other => return Err(Rejection::UnknownCommand(other)),
    };
    if header.flags & !allowed_flags != 0 {
        return Err(Rejection::BadFlags(header.flags));
    }
    let modifies = matches!(
        header.kind,
        NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES
    );
    if modifies && f.read_only {
        return Err(Rejection::ReadOnly);
    }
    if fua && modifies && !f.fua {
        return Err(Rejection::BadFlags(header.flags));
    }
    let sizes = export.block_sizes.effective(max_payload);
    let max_payload = sizes.maximum;
    let (offset, len) = (header.offset, header.len);
    let in_range = offset
        .checked_add(u64::from(len))
        .is_some_and(|end| end <= export.size);
    match header.kind {
        NBD_CMD_FLUSH if !f.flush => return Err(Rejection::NotOffered),
        NBD_CMD_FLUSH => return Ok(Command::Flush),
        NBD_CMD_TRIM if !f.trim => return Err(Rejection::NotOffered),
        NBD_CMD_WRITE_ZEROES if !f.write_zeroes => return Err(Rejection::NotOffered),
        NBD_CMD_BLOCK_STATUS if !(allocation && f.block_status) => {
            return Err(Rejection::NoMetaContext)
        }
        NBD_CMD_BLOCK_STATUS if len == 0 => return Err(Rejection::EmptyStatus),
        NBD_CMD_READ | NBD_CMD_WRITE if len > max_payload => {
            return Err(Rejection::TooLong {
                len,
                max: max_payload,
            })
        }
        _ => {}
    }
    let min = u64::from(sizes.minimum.max(1));
    if header.kind != NBD_CMD_FLUSH && (offset % min != 0 || u64::from(len) % min != 0) {
        return Err(Rejection::Unaligned {
            offset,
            len,
            minimum: sizes.minimum,
        });
    }
    if !in_range {
        return Err(
            if matches!(header.kind, NBD_CMD_READ | NBD_CMD_BLOCK_STATUS) {
                Rejection::OutOfRange { offset, len }
            } else {
                Rejection::PastEnd { offset, len }
            },
        );
    }
    Ok(match header.kind {
        NBD_CMD_READ => Command::Read { offset, len },
        NBD_CMD_WRITE => Command::Write { offset, len, fua },
        NBD_CMD_TRIM => Command::Trim { offset, len, fua },
        NBD_CMD_BLOCK_STATUS => Command::BlockStatus {
            offset,
            len,
            one: header.flags & NBD_CMD_FLAG_REQ_ONE != 0,
        },
        _ => Command::WriteZeroes {
            offset,
            len,
            fua,
            may_trim: header.flags & NBD_CMD_FLAG_NO_HOLE == 0,
        },
    })
}
