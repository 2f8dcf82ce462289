//! What an export is and the backend contract: the block requests the
//! server sends down a channel and the replies it expects.

use tokio::sync::{mpsc, oneshot};

use crate::consts::*;
use crate::error::BlockError;

/// What an export allows. Build with [`ExportFlags::read_write`] or
/// [`ExportFlags::read_only`] and the `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportFlags {
    /// Writes, trims and zeroing are refused with `EPERM`.
    pub read_only: bool,
    /// `NBD_CMD_FLUSH` is offered ([`BlockOp::Flush`] is sent).
    pub flush: bool,
    /// `NBD_CMD_FLAG_FUA` is offered (the `fua` fields can be true).
    pub fua: bool,
    /// `NBD_CMD_TRIM` is offered ([`BlockOp::Trim`] is sent).
    pub trim: bool,
    /// `NBD_CMD_WRITE_ZEROES` is offered ([`BlockOp::WriteZeroes`] is sent).
    pub write_zeroes: bool,
    /// `NBD_FLAG_CAN_MULTI_CONN` is advertised. Set it only when a flush on
    /// one connection makes every write completed on any connection durable
    /// (true of one backend serving all connections of the export, as the
    /// file backend does).
    pub multi_conn: bool,
    /// The `base:allocation` metadata context is offered: a client that
    /// selects it may ask `NBD_CMD_BLOCK_STATUS` ([`BlockOp::BlockStatus`]
    /// is sent), to skip holes.
    pub block_status: bool,
}

impl ExportFlags {
    /// A writable export offering flush, FUA, trim and write-zeroes.
    #[must_use]
    pub fn read_write() -> Self {
        ExportFlags {
            read_only: false,
            flush: true,
            fua: true,
            trim: true,
            write_zeroes: true,
            multi_conn: false,
            block_status: false,
        }
    }

    /// A read-only export (flush is still offered; it has nothing to do).
    #[must_use]
    pub fn read_only() -> Self {
        ExportFlags {
            read_only: true,
            flush: true,
            fua: false,
            trim: false,
            write_zeroes: false,
            multi_conn: false,
            block_status: false,
        }
    }

    /// Sets [`ExportFlags::block_status`].
    #[must_use]
    pub fn with_block_status(mut self, on: bool) -> Self {
        self.block_status = on;
        self
    }

    /// Sets [`ExportFlags::flush`].
    #[must_use]
    pub fn with_flush(mut self, on: bool) -> Self {
        self.flush = on;
        self
    }
    /// Sets [`ExportFlags::fua`].
    #[must_use]
    pub fn with_fua(mut self, on: bool) -> Self {
        self.fua = on;
        self
    }
    /// Sets [`ExportFlags::trim`].
    #[must_use]
    pub fn with_trim(mut self, on: bool) -> Self {
        self.trim = on;
        self
    }
    /// Sets [`ExportFlags::write_zeroes`].
    #[must_use]
    pub fn with_write_zeroes(mut self, on: bool) -> Self {
        self.write_zeroes = on;
        self
    }
    /// Sets [`ExportFlags::multi_conn`].
    #[must_use]
    pub fn with_multi_conn(mut self, on: bool) -> Self {
        self.multi_conn = on;
        self
    }

    /// The 16-bit NBD transmission flags these stand for. A read-only export
    /// never advertises trim, write-zeroes or FUA.
    #[must_use]
    pub fn transmission_flags(&self) -> u16 {
        let mut f = NBD_FLAG_HAS_FLAGS;
        let set = |f: &mut u16, on: bool, bit: u16| {
            if on {
                *f |= bit;
            }
        };
        set(&mut f, self.read_only, NBD_FLAG_READ_ONLY);
        set(&mut f, self.flush, NBD_FLAG_SEND_FLUSH);
        set(&mut f, self.fua && !self.read_only, NBD_FLAG_SEND_FUA);
        set(&mut f, self.trim && !self.read_only, NBD_FLAG_SEND_TRIM);
        set(
            &mut f,
            self.write_zeroes && !self.read_only,
            NBD_FLAG_SEND_WRITE_ZEROES,
        );
        set(&mut f, self.multi_conn, NBD_FLAG_CAN_MULTI_CONN);
        f
    }
}

/// An export's block size constraints (`NBD_INFO_BLOCK_SIZE`): offsets and
/// lengths are multiples of `minimum`, `preferred` is the size that avoids
/// read-modify-write, and reads and writes are at most `maximum` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    /// Offsets and lengths of every request are multiples of it (a power of
    /// two, 1 to 64 KiB); unaligned requests get `EINVAL`.
    pub minimum: u32,
    /// The size clients should use (a power of two, at least `minimum`).
    pub preferred: u32,
    /// The longest read or write (a multiple of `minimum`, at least
    /// `preferred`); the server's `max_payload` caps it.
    pub maximum: u32,
}

impl Default for BlockSizes {
    /// No constraint: `1 / 4096 / u32::MAX` (the server's `max_payload`
    /// is the maximum then).
    fn default() -> Self {
        BlockSizes {
            minimum: 1,
            preferred: 4096,
            maximum: u32::MAX,
        }
    }
}

impl BlockSizes {
    /// Constraints of `minimum / preferred / maximum` bytes (checked by
    /// [`crate::Server::new`]).
    #[must_use]
    pub fn new(minimum: u32, preferred: u32, maximum: u32) -> Self {
        BlockSizes {
            minimum,
            preferred,
            maximum,
        }
    }

    /// The sizes advertised under a server maximum payload of
    /// `max_payload`: `maximum` capped to it.
    #[must_use]
    pub fn effective(&self, max_payload: u32) -> BlockSizes {
        BlockSizes {
            maximum: self.maximum.min(max_payload),
            ..*self
        }
    }

    /// What is wrong with these sizes under `max_payload`, if anything.
    #[must_use]
    pub fn problem(&self, max_payload: u32) -> Option<&'static str> {
        let e = self.effective(max_payload);
        if !e.minimum.is_power_of_two() || e.minimum > 64 * 1024 {
            return Some("minimum must be a power of two from 1 to 65536");
        }
        if !e.preferred.is_power_of_two() || e.preferred < e.minimum {
            return Some("preferred must be a power of two, at least minimum");
        }
        if e.maximum < e.preferred || e.maximum % e.minimum != 0 {
            return Some(
                "maximum (capped to max_payload) must be a multiple of minimum, at least preferred",
            );
        }
        None
    }
}

/// What the handshake needs to know of an export: no channel, so the
/// sans-IO handshake can use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// The name clients ask for (at most 4096 bytes, no NUL).
    pub name: String,
    /// A free-text description shown by `NBD_OPT_LIST` (may be empty).
    pub description: String,
    /// The size in bytes.
    pub size: u64,
    /// What it allows.
    pub flags: ExportFlags,
    /// Its block size constraints.
    pub block_sizes: BlockSizes,
}

/// One export: its description and the channel of its backend.
#[derive(Debug, Clone)]
pub struct Export {
    /// Name, size and flags.
    pub info: ExportInfo,
    /// Where the server sends this export's block requests. Several
    /// connections (and exports) may share one backend.
    pub requests: mpsc::Sender<BlockRequest>,
}

impl Export {
    /// An export named `name` of `size` bytes served by the backend behind
    /// `requests`.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        size: u64,
        flags: ExportFlags,
        requests: mpsc::Sender<BlockRequest>,
    ) -> Self {
        Export {
            info: ExportInfo {
                name: name.into(),
                description: String::new(),
                size,
                flags,
                block_sizes: BlockSizes::default(),
            },
            requests,
        }
    }

    /// Sets the block size constraints (default [`BlockSizes::default`]).
    #[must_use]
    pub fn with_block_sizes(mut self, block_sizes: BlockSizes) -> Self {
        self.info.block_sizes = block_sizes;
        self
    }

    /// Sets the description `NBD_OPT_LIST` shows.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.info.description = description.into();
        self
    }
}

/// One block operation. The server has checked it before sending it: the
/// range lies within the export, `len` is at most the server's maximum
/// payload for reads and writes, the export allows the operation (and FUA),
/// and `len` is not zero.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockOp {
    /// Read `len` bytes at `offset`; reply [`BlockReply::Data`] of exactly `len` bytes.
    Read {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
    },
    /// Write `data` at `offset`; reply [`BlockReply::Done`] once a read
    /// would see it, and, when `fua`, once it is durable.
    Write {
        /// Byte offset.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
        /// Force unit access: durable before the reply.
        fua: bool,
    },
    /// Make durable every write the backend has replied to; reply
    /// [`BlockReply::Done`] once it is.
    Flush,
    /// The client no longer needs `[offset, offset+len)`; afterwards reads
    /// of it may return anything. Doing nothing is a correct trim.
    Trim {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Reads of `[offset, offset+len)` return zeroes afterwards. `len` may
    /// exceed the maximum payload (nothing travels with it).
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
        /// Force unit access.
        fua: bool,
        /// The client allows a hole to be punched (no `NBD_CMD_FLAG_NO_HOLE`).
        may_trim: bool,
    },
    /// Which parts of `[offset, offset+len)` are allocated; reply
    /// [`BlockReply::Extents`]. Sent only for an export with
    /// [`ExportFlags::block_status`] to a client that selected
    /// `base:allocation`.
    BlockStatus {
        /// Byte offset.
        offset: u64,
        /// Byte count (not bounded by the maximum payload).
        len: u32,
    },
}

/// One extent of a [`BlockReply::Extents`]: `len` bytes, a hole or not,
/// reading as zeroes or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Its length in bytes (more than 0).
    pub len: u64,
    /// Not allocated (`NBD_STATE_HOLE`).
    pub hole: bool,
    /// Reads as zeroes (`NBD_STATE_ZERO`).
    pub zero: bool,
}

/// A successful block operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockReply {
    /// The bytes of a [`BlockOp::Read`] (exactly its `len`; any other length
    /// makes the server reply `EIO`).
    Data(Vec<u8>),
    /// Any other operation is done.
    Done,
    /// The extents of a [`BlockOp::BlockStatus`], in order from its
    /// offset: at least one; the server sends those within the range
    /// (cutting the last at its end), and only the first when the client
    /// asked for one (`NBD_CMD_FLAG_REQ_ONE`).
    Extents(Vec<Extent>),
}

/// A block request as the backend receives it: the operation and where to
/// send its result. Replies may be sent in any order; dropping `reply`
/// unanswered makes the client see `EIO`.
#[derive(Debug)]
pub struct BlockRequest {
    /// What to do.
    pub op: BlockOp,
    /// Where the result goes.
    pub reply: oneshot::Sender<Result<BlockReply, BlockError>>,
}
