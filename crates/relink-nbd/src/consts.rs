//! The NBD protocol's wire constants (numbers as the spec names them).

/// `NBDMAGIC`: the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the second 8 bytes of the greeting, and the start of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// The magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// The magic of every simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// A structured reply chunk's magic (after `NBD_OPT_STRUCTURED_REPLY`).
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Structured reply flag: the last chunk of its request's reply.
pub const NBD_REPLY_FLAG_DONE: u16 = 1 << 0;
/// Structured reply type: nothing (a success with no data).
pub const NBD_REPLY_TYPE_NONE: u16 = 0;
/// Structured reply type: data at an offset (a read's).
pub const NBD_REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Structured reply type: an error with a message for people.
pub const NBD_REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
/// Structured reply type: the extents of a `NBD_CMD_BLOCK_STATUS`, for one
/// metadata context.
pub const NBD_REPLY_TYPE_BLOCK_STATUS: u16 = 5;

/// Handshake flag: the server speaks fixed newstyle.
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can leave out the 124 zero bytes.
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: leave out the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Option: select an export and enter transmission (no error reply possible).
pub const NBD_OPT_EXPORT_NAME: u32 = 1;
/// Option: end the handshake.
pub const NBD_OPT_ABORT: u32 = 2;
/// Option: list the exports.
pub const NBD_OPT_LIST: u32 = 3;
/// Option: TLS (unsupported here).
pub const NBD_OPT_STARTTLS: u32 = 5;
/// Option: describe an export and stay in the handshake.
pub const NBD_OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const NBD_OPT_GO: u32 = 7;
/// Option: structured replies.
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts.
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts.
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;

/// The one metadata context served: which ranges are allocated.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id `base:allocation` is given when selected.
pub const BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` state bit: the range is a hole (not allocated).
pub const NBD_STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` state bit: the range reads as zeroes.
pub const NBD_STATE_ZERO: u32 = 1 << 1;

/// Option reply: done.
pub const NBD_REP_ACK: u32 = 1;
/// Option reply: one export of a list.
pub const NBD_REP_SERVER: u32 = 2;
/// Option reply: one piece of export information.
pub const NBD_REP_INFO: u32 = 3;
/// Option reply: one metadata context (its id and name).
pub const NBD_REP_META_CONTEXT: u32 = 4;
/// Option reply error bit.
pub const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
/// Option reply: the option is not supported.
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
/// Option reply: refused by policy.
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
/// Option reply: the option's data is malformed.
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
/// Option reply: no export of that name.
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
/// Option reply: the export has block size constraints and the client did
/// not request `NBD_INFO_BLOCK_SIZE`.
pub const NBD_REP_ERR_BLOCK_SIZE_REQD: u32 = NBD_REP_FLAG_ERROR | 8;

/// Information type: size and transmission flags.
pub const NBD_INFO_EXPORT: u16 = 0;
/// Information type: the export's name.
pub const NBD_INFO_NAME: u16 = 1;
/// Information type: the export's description.
pub const NBD_INFO_DESCRIPTION: u16 = 2;
/// Information type: minimum, preferred and maximum block sizes.
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flag: the other flags are meaningful.
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: the export is read-only.
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `NBD_CMD_FLUSH` is accepted.
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `NBD_CMD_FLAG_FUA` is accepted.
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: `NBD_CMD_TRIM` is accepted.
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `NBD_CMD_WRITE_ZEROES` is accepted.
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: a flush on one connection covers writes on all of them.
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// Command: read.
pub const NBD_CMD_READ: u16 = 0;
/// Command: write (a payload follows the header).
pub const NBD_CMD_WRITE: u16 = 1;
/// Command: disconnect after the requests in flight.
pub const NBD_CMD_DISC: u16 = 2;
/// Command: flush.
pub const NBD_CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const NBD_CMD_TRIM: u16 = 4;
/// Command: write zeroes.
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
/// Command: the state of a range in the selected metadata contexts.
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access.
pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag: write zeroes without punching a hole.
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag: block status of one extent only.
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;

/// Error: operation not permitted.
pub const NBD_EPERM: u32 = 1;
/// Error: input/output error.
pub const NBD_EIO: u32 = 5;
/// Error: out of memory.
pub const NBD_ENOMEM: u32 = 12;
/// Error: invalid argument.
pub const NBD_EINVAL: u32 = 22;
/// Error: no space left (a write past the end).
pub const NBD_ENOSPC: u32 = 28;
/// Error: value too large.
pub const NBD_EOVERFLOW: u32 = 75;
/// Error: operation not supported.
pub const NBD_ENOTSUP: u32 = 95;
/// Error: the server is shutting down.
pub const NBD_ESHUTDOWN: u32 = 108;
