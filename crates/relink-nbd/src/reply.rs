//! Server messages: simple and structured replies in transmission,
//! option replies in the handshake.

use crate::consts::*;
use crate::error::ProtocolError;

/// Length of a simple reply header (a read's data follows it).
pub const SIMPLE_REPLY_LEN: usize = 16;

/// A simple reply's header: the cookie of its request and an NBD error
/// number (0 for success).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    /// NBD error number; 0 is success.
    pub error: u32,
    /// The request's cookie.
    pub cookie: u64,
}

impl SimpleReply {
    /// The header's wire form.
    #[must_use]
    pub fn encode(&self) -> [u8; SIMPLE_REPLY_LEN] {
        let mut b = [0u8; SIMPLE_REPLY_LEN];
        b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.error.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b
    }

    /// Parses the first [`SIMPLE_REPLY_LEN`] bytes of `buf` (a client's view;
    /// used by tests and tools).
    ///
    /// # Errors
    /// [`ProtocolError::Truncated`] if `buf` is shorter;
    /// [`ProtocolError::BadMagic`] for another magic.
    pub fn parse(buf: &[u8]) -> Result<Self, ProtocolError> {
        if buf.len() < SIMPLE_REPLY_LEN {
            return Err(ProtocolError::Truncated {
                what: "simple reply",
                need: SIMPLE_REPLY_LEN,
                have: buf.len(),
            });
        }
        let magic = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes"));
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(ProtocolError::BadMagic {
                what: "simple reply",
                found: u64::from(magic),
            });
        }
        Ok(SimpleReply {
            error: u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")),
            cookie: u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes")),
        })
    }
}

/// Length of a structured reply chunk's header.
pub const STRUCTURED_REPLY_LEN: usize = 20;

/// The longest error message a structured error carries (the protocol's
/// bound for strings); a longer one is cut at a character boundary.
pub const MAX_ERROR_MESSAGE: usize = 4096;

/// A reply's header bytes in the form the connection negotiated: a simple
/// reply, or the one chunk of a structured reply (`NBD_REPLY_FLAG_DONE`).
/// A read's data follows it (`data_len` bytes; after the chunk's 8-byte
/// offset, which this includes). A read of no bytes gets a `NONE` chunk:
/// an `OFFSET_DATA` chunk describes at least one byte (clients such as
/// qemu's drop a connection that sends an empty one). An error's message
/// goes in a structured error chunk; a simple reply has only the number.
#[must_use]
pub fn reply_header(
    structured: bool,
    cookie: u64,
    result: Result<Option<(u64, usize)>, (u32, &str)>,
) -> Vec<u8> {
    if !structured {
        let error = match result {
            Ok(_) => 0,
            Err((e, _)) => e,
        };
        return SimpleReply { error, cookie }.encode().to_vec();
    }
    let mut b = Vec::with_capacity(STRUCTURED_REPLY_LEN + 8);
    let chunk = |kind: u16, len: usize, b: &mut Vec<u8>| {
        b.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        b.extend_from_slice(&NBD_REPLY_FLAG_DONE.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&u32::try_from(len).expect("chunk fits u32").to_be_bytes());
    };
    match result {
        Ok(None | Some((_, 0))) => chunk(NBD_REPLY_TYPE_NONE, 0, &mut b),
        Ok(Some((offset, data_len))) => {
            chunk(NBD_REPLY_TYPE_OFFSET_DATA, 8 + data_len, &mut b);
            b.extend_from_slice(&offset.to_be_bytes());
        }
        Err((error, message)) => {
            let mut end = message.len().min(MAX_ERROR_MESSAGE);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            let message = &message.as_bytes()[..end];
            chunk(NBD_REPLY_TYPE_ERROR, 6 + message.len(), &mut b);
            b.extend_from_slice(&error.to_be_bytes());
            b.extend_from_slice(&(message.len() as u16).to_be_bytes());
            b.extend_from_slice(message);
        }
    }
    b
}

/// The reply to a `NBD_CMD_BLOCK_STATUS` of `[offset, offset + len)` on an
/// export of `minimum`-byte blocks (the offset and `len` are multiples of
/// it): one structured chunk (`NBD_REPLY_TYPE_BLOCK_STATUS`,
/// `NBD_REPLY_FLAG_DONE`) for context `context` with descriptors (length,
/// state flags) of `extents` within the range, in whole blocks as the
/// protocol requires: a block the extents split is described with the
/// state all its pieces share (a hole, or zeros, only if every piece is),
/// a last block they do not reach as data; neighbours of one state make
/// one descriptor of at most 4 GiB - 1 (rounded down to whole blocks);
/// only the first descriptor when `one` (`NBD_CMD_FLAG_REQ_ONE`). The
/// client asks again for what they leave out. `None` when no extent of
/// `extents` starts the range (none, or one of 0 bytes): the backend broke
/// its contract.
#[must_use]
pub fn block_status_reply(
    cookie: u64,
    context: u32,
    len: u32,
    minimum: u32,
    one: bool,
    extents: &[crate::export::Extent],
) -> Option<Vec<u8>> {
    let block = u64::from(minimum.max(1));
    let len = u64::from(len);
    // The extents as (end, state) from the range's start, cut at its end.
    let mut runs: Vec<(u64, u32)> = Vec::new();
    let mut covered = 0u64;
    for e in extents {
        if covered >= len || e.len == 0 {
            break;
        }
        covered = covered.saturating_add(e.len).min(len);
        let state = (u32::from(e.hole) * NBD_STATE_HOLE) | (u32::from(e.zero) * NBD_STATE_ZERO);
        runs.push((covered, state));
    }
    if runs.is_empty() {
        return None;
    }
    let cap = u64::from(u32::MAX) / block * block;
    let mut descriptors: Vec<(u32, u32)> = Vec::new();
    // `at`: the start of the next block to describe; `i`: the run holding it.
    let (mut at, mut i) = (0u64, 0usize);
    while at < covered && !(one && descriptors.len() > 1) {
        while runs[i].0 <= at {
            i += 1;
        }
        let (run_end, state) = runs[i];
        let whole = run_end / block * block;
        let (next, state) = if whole > at {
            (whole, state)
        } else {
            // A block split between runs (or left unreached): what they share.
            let next = (at + block).min(len);
            let mut shared = state;
            let mut j = i;
            while runs[j].0 < next {
                j += 1;
                match runs.get(j) {
                    Some(&(_, s)) => shared &= s,
                    None => {
                        shared = 0;
                        break;
                    }
                }
            }
            (next, shared)
        };
        match descriptors.last_mut() {
            Some((n, s)) if *s == state && u64::from(*n) + (next - at) <= cap => {
                *n += (next - at) as u32;
                at = next;
            }
            _ => {
                let n = (next - at).min(cap);
                descriptors.push((n as u32, state));
                at += n;
            }
        }
    }
    descriptors.truncate(if one { 1 } else { descriptors.len() });
    let payload = 4 + 8 * descriptors.len();
    let mut b = Vec::with_capacity(STRUCTURED_REPLY_LEN + payload);
    b.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&NBD_REPLY_FLAG_DONE.to_be_bytes());
    b.extend_from_slice(&NBD_REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&u32::try_from(payload).ok()?.to_be_bytes());
    b.extend_from_slice(&context.to_be_bytes());
    for (n, flags) in descriptors {
        b.extend_from_slice(&n.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
    }
    Some(b)
}

/// Appends one option reply (`magic, option, type, length, data`) to `out`.
pub fn push_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    let len = u32::try_from(data.len()).expect("option reply data fits u32");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
}

/// An option reply as a client parses it (tests and tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    /// The option it answers.
    pub option: u32,
    /// `NBD_REP_*`.
    pub reply_type: u32,
    /// Its data.
    pub data: Vec<u8>,
}

impl OptionReply {
    /// Parses one option reply at the start of `buf`; returns it and the
    /// bytes it took.
    ///
    /// # Errors
    /// [`ProtocolError::Truncated`] if `buf` holds less than the whole reply;
    /// [`ProtocolError::BadMagic`] for another magic.
    pub fn parse(buf: &[u8]) -> Result<(Self, usize), ProtocolError> {
        let trunc = |need| ProtocolError::Truncated {
            what: "option reply",
            need,
            have: buf.len(),
        };
        if buf.len() < 20 {
            return Err(trunc(20));
        }
        let magic = u64::from_be_bytes(buf[0..8].try_into().expect("8 bytes"));
        if magic != OPTION_REPLY_MAGIC {
            return Err(ProtocolError::BadMagic {
                what: "option reply",
                found: magic,
            });
        }
        let option = u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes"));
        let reply_type = u32::from_be_bytes(buf[12..16].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(buf[16..20].try_into().expect("4 bytes")) as usize;
        let end = 20usize.checked_add(len).ok_or_else(|| trunc(usize::MAX))?;
        if buf.len() < end {
            return Err(trunc(end));
        }
        Ok((
            OptionReply {
                option,
                reply_type,
                data: buf[20..end].to_vec(),
            },
            end,
        ))
    }
}
