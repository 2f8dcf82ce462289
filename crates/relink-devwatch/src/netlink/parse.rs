//! The netlink layer under the RDMA messages: a message header, the
//! messages of a datagram, the attributes of a message, and typed readers
//! of attribute payloads. Length-checked throughout; errors are
//! [`ParseError`]s, never panics.

use super::consts::{NLA_HDRLEN, NLMSG_HDRLEN};

/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER`, masked off attribute types.
const NLA_FLAGS: u16 = 0x8000 | 0x4000;

/// Why bytes are not a well-formed RDMA netlink message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Fewer bytes than a `struct nlmsghdr`.
    #[error("truncated netlink header: {have} of {NLMSG_HDRLEN} bytes")]
    TruncatedHeader {
        /// Bytes available.
        have: usize,
    },
    /// `nlmsg_len` is below the header size or past the end of the buffer.
    #[error("netlink message length {len} out of range ({available} bytes available)")]
    BadMessageLength {
        /// The `nlmsg_len` field.
        len: u32,
        /// Bytes available from the message's start.
        available: usize,
    },
    /// `nla_len` is below the attribute header size or past the message end.
    #[error("attribute {attr} length {len} out of range ({available} bytes available)")]
    BadAttrLength {
        /// The attribute type (flags masked off).
        attr: u16,
        /// The `nla_len` field.
        len: u16,
        /// Bytes available from the attribute's start.
        available: usize,
    },
    /// A known attribute has a payload of the wrong size.
    #[error("attribute {attr} has {len} payload bytes, expected {expected}")]
    BadAttrSize {
        /// The attribute type.
        attr: u16,
        /// Payload bytes found.
        len: usize,
        /// What the kernel sends.
        expected: &'static str,
    },
    /// A string attribute is empty, not NUL-terminated, or not UTF-8.
    #[error("attribute {attr} is not a NUL-terminated, non-empty UTF-8 string")]
    BadString {
        /// The attribute type.
        attr: u16,
    },
    /// An attribute the message cannot do without is absent.
    #[error("attribute {attr} ({name}) missing")]
    MissingAttr {
        /// The attribute type.
        attr: u16,
        /// Its name in `rdma_netlink.h`.
        name: &'static str,
    },
    /// The message is not of the expected type.
    #[error("unexpected netlink message type {kind} (expected {expected})")]
    WrongType {
        /// The `nlmsg_type` found.
        kind: u16,
        /// The type expected.
        expected: u16,
    },
    /// An `NLMSG_ERROR` message shorter than its error code.
    #[error("truncated NLMSG_ERROR payload ({len} bytes)")]
    TruncatedError {
        /// Payload bytes found.
        len: usize,
    },
}

/// A `struct nlmsghdr`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NlMsgHeader {
    /// `nlmsg_len`: header plus payload.
    pub len: u32,
    /// `nlmsg_type`: a netlink control message below 16 (`NLMSG_ERROR`,
    /// `NLMSG_DONE`, ...), else an RDMA client and operation
    /// ([`rdma_nl_get_type`](super::rdma_nl_get_type)).
    pub kind: u16,
    /// `nlmsg_flags`: `NLM_F_*` bits.
    pub flags: u16,
    /// `nlmsg_seq`: set by a request's sender, echoed in its replies.
    pub seq: u32,
    /// `nlmsg_pid`: 0 for messages from the kernel.
    pub pid: u32,
}

impl NlMsgHeader {
    /// Decodes the first 16 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<NlMsgHeader, ParseError> {
        let h = buf
            .get(..NLMSG_HDRLEN)
            .ok_or(ParseError::TruncatedHeader { have: buf.len() })?;
        Ok(NlMsgHeader {
            len: u32::from_ne_bytes([h[0], h[1], h[2], h[3]]),
            kind: u16::from_ne_bytes([h[4], h[5]]),
            flags: u16::from_ne_bytes([h[6], h[7]]),
            seq: u32::from_ne_bytes([h[8], h[9], h[10], h[11]]),
            pid: u32::from_ne_bytes([h[12], h[13], h[14], h[15]]),
        })
    }

    /// Appends the encoded header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.len.to_ne_bytes());
        out.extend_from_slice(&self.kind.to_ne_bytes());
        out.extend_from_slice(&self.flags.to_ne_bytes());
        out.extend_from_slice(&self.seq.to_ne_bytes());
        out.extend_from_slice(&self.pid.to_ne_bytes());
    }
}

pub(super) const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The netlink messages of one datagram: `(header, payload)` pairs.
///
/// Stops after the first error. Messages follow each other at
/// `NLMSG_ALIGN(nlmsg_len)`; a last message without trailing padding is
/// accepted.
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { rest: buf }
}

/// Iterator returned by [`messages`].
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<(NlMsgHeader, &'a [u8]), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let buf = std::mem::take(&mut self.rest);
        let hdr = match NlMsgHeader::parse(buf) {
            Ok(h) => h,
            Err(e) => return Some(Err(e)),
        };
        let len = hdr.len as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Some(Err(ParseError::BadMessageLength {
                len: hdr.len,
                available: buf.len(),
            }));
        }
        let payload = &buf[NLMSG_HDRLEN..len];
        self.rest = buf.get(align4(len)..).unwrap_or(&[]);
        Some(Ok((hdr, payload)))
    }
}

/// The attributes of a message payload: `(type, payload)` pairs, with the
/// `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` flags masked off the type.
///
/// Stops after the first error. Fewer than 4 bytes left after the last
/// attribute are taken as padding, as the kernel's `nla_for_each_attr` does.
pub fn attributes(payload: &[u8]) -> Attributes<'_> {
    Attributes { rest: payload }
}

/// Iterator returned by [`attributes`].
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Attributes<'a> {
    type Item = Result<(u16, &'a [u8]), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < NLA_HDRLEN {
            self.rest = &[];
            return None;
        }
        let buf = std::mem::take(&mut self.rest);
        let len = u16::from_ne_bytes([buf[0], buf[1]]);
        let attr = u16::from_ne_bytes([buf[2], buf[3]]) & !NLA_FLAGS;
        let l = usize::from(len);
        if l < NLA_HDRLEN || l > buf.len() {
            return Some(Err(ParseError::BadAttrLength {
                attr,
                len,
                available: buf.len(),
            }));
        }
        self.rest = buf.get(align4(l)..).unwrap_or(&[]);
        Some(Ok((attr, &buf[NLA_HDRLEN..l])))
    }
}

pub(super) fn attr_u8(attr: u16, p: &[u8]) -> Result<u8, ParseError> {
    match p {
        [b] => Ok(*b),
        _ => Err(ParseError::BadAttrSize {
            attr,
            len: p.len(),
            expected: "1 (u8)",
        }),
    }
}

pub(super) fn attr_u32(attr: u16, p: &[u8]) -> Result<u32, ParseError> {
    match <[u8; 4]>::try_from(p) {
        Ok(b) => Ok(u32::from_ne_bytes(b)),
        Err(_) => Err(ParseError::BadAttrSize {
            attr,
            len: p.len(),
            expected: "4 (u32)",
        }),
    }
}

pub(super) fn attr_u64(attr: u16, p: &[u8]) -> Result<u64, ParseError> {
    match <[u8; 8]>::try_from(p) {
        Ok(b) => Ok(u64::from_ne_bytes(b)),
        Err(_) => Err(ParseError::BadAttrSize {
            attr,
            len: p.len(),
            expected: "8 (u64)",
        }),
    }
}

/// A string as `nla_put_string` writes it: bytes, then a NUL. Bytes after
/// the first NUL are ignored (as `mnl_attr_get_str` does).
pub(super) fn attr_str(attr: u16, p: &[u8]) -> Result<String, ParseError> {
    let nul = p
        .iter()
        .position(|&b| b == 0)
        .ok_or(ParseError::BadString { attr })?;
    let s = std::str::from_utf8(&p[..nul]).map_err(|_| ParseError::BadString { attr })?;
    if s.is_empty() {
        return Err(ParseError::BadString { attr });
    }
    Ok(s.to_owned())
}
