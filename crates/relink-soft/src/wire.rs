//! The binary codec of [`Packet`]s for the TCP fabric.
//!
//! A frame is a `u32` big-endian body length followed by the body:
//!
//! ```text
//! frame   = len:u32 body                       (len = body length <= MAX_FRAME)
//! body    = version:u8(=1) src:ip dst:ip kind
//! ip      = 4:u8 [u8; 4] | 6:u8 [u8; 16]
//! kind    = 1:u8 cookie:u64                     ArpRequest
//!         | 2:u8 cookie:u64                     ArpReply
//!         | 3:u8 cm                             Cm
//!         | 4:u8 dst_qpn:u32 src_qpn:u32 psn:u32 req   Request
//!         | 5:u8 dst_qpn:u32 src_qpn:u32 psn:u32 resp  Response
//! cm      = 1:u8 conn_id:u64 src_port:u16 dst_port:u16 qpn:u32 params pdata   Req
//!         | 2:u8 conn_id:u64 qpn:u32 pdata                                    Rep
//!         | 3:u8 conn_id:u64                                                  Rtu
//!         | 4:u8 conn_id:u64 reason:u8 pdata                                  Rej
//!         | 5:u8 conn_id:u64 from_initiator:bool                              Dreq
//! params  = retry_count:u8 rnr_retry_count:u8 ack_timeout:u8
//! reason  = 0 Consumer | 1 NoListener | 2 NoResources
//! req     = 1:u8 data imm:opt32 invalidate:opt32 solicited:bool             Send
//!         | 2:u8 addr:u64 rkey:u32 data imm:opt32                           Write
//!         | 3:u8 addr:u64 rkey:u32 len:u32                                  Read
//!         | 4:u8 addr:u64 rkey:u32 add:u64                                  FetchAdd
//!         | 5:u8 addr:u64 rkey:u32 compare:u64 swap:u64                     CmpSwap
//! resp    = 1:u8 | 2:u8 data | 3:u8 orig:u64 | 4:u8 nak:u8                   Ack, ReadData, AtomicOrig, Nak
//! nak     = 0 Rnr | 1 RemoteAccess | 2 InvalidRequest | 3 RemoteOperation
//! pdata   = len:u32 bytes      (len <= 56 / 196 / 148 for Req / Rep / Rej)
//! data    = len:u32 bytes      (len <= MAX_PAYLOAD)
//! opt32   = 0:u8 | 1:u8 u32
//! bool    = 0:u8 | 1:u8
//! ```
//!
//! All integers are big-endian. Decoding checks every length before reading
//! and rejects unknown tags, out-of-range booleans, oversized fields and
//! trailing bytes; it never panics on any input.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use relink_fabric::{
    ConnParams, RejectReason, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA,
    MAX_REJECT_PRIVATE_DATA,
};
use thiserror::Error;

use crate::packet::{Body, CmMsg, NakCode, Packet, ReqOp, RespKind};
use crate::payload::{BufferPool, Payload};

/// Version byte that starts every body.
pub const VERSION: u8 = 1;
/// Length of the frame header (the body length).
pub const HEADER_LEN: usize = 4;
/// Largest SEND/WRITE payload or READ response carried in one packet.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// Largest body accepted: a maximal payload plus room for the headers.
pub const MAX_FRAME: usize = MAX_PAYLOAD + 1024;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The input ends inside a field.
    #[error("truncated {what}: {needed} bytes needed at offset {offset}, {available} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Offset of the field in the frame.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// A tag byte has no meaning.
    #[error("unknown {what} tag {tag}")]
    UnknownTag {
        /// What the tag selects.
        what: &'static str,
        /// The byte.
        tag: u8,
    },
    /// A boolean byte is neither 0 nor 1.
    #[error("invalid boolean {value} for {what}")]
    BadBool {
        /// The field.
        what: &'static str,
        /// The byte.
        value: u8,
    },
    /// Bytes follow the packet inside its frame.
    #[error("{count} trailing bytes after the packet")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// A length-prefixed field is longer than allowed.
    #[error("{what} is {len} bytes, at most {max} allowed")]
    TooLong {
        /// The field.
        what: &'static str,
        /// Its declared length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The frame header disagrees with the bytes given.
    #[error("frame header says {declared} body bytes but {actual} follow")]
    LengthMismatch {
        /// Body length in the header.
        declared: usize,
        /// Body bytes present.
        actual: usize,
    },
    /// A frame header announces a body larger than allowed.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Body length in the header.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The body starts with a version this build does not speak.
    #[error("unsupported wire version {0} (this build speaks {VERSION})")]
    Version(u8),
}

// ---------------------------------------------------------------- encoding

fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_bool(out: &mut Vec<u8>, v: bool) {
    out.push(u8::from(v));
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Longer than u32::MAX cannot be framed; the saturated length makes the
    // receiver reject the frame instead of misreading it.
    put_u32(out, u32::try_from(b.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(b);
}

fn put_opt_u32(out: &mut Vec<u8>, v: Option<u32>) {
    match v {
        None => put_u8(out, 0),
        Some(v) => {
            put_u8(out, 1);
            put_u32(out, v);
        }
    }
}

fn put_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            put_u8(out, 4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            put_u8(out, 6);
            out.extend_from_slice(&a.octets());
        }
    }
}

fn put_params(out: &mut Vec<u8>, p: &ConnParams) {
    put_u8(out, p.retry_count);
    put_u8(out, p.rnr_retry_count);
    put_u8(out, p.ack_timeout);
}

fn reject_reason_tag(r: RejectReason) -> u8 {
    match r {
        RejectReason::Consumer => 0,
        RejectReason::NoListener => 1,
        RejectReason::NoResources => 2,
    }
}

fn nak_tag(n: NakCode) -> u8 {
    match n {
        NakCode::Rnr => 0,
        NakCode::RemoteAccess => 1,
        NakCode::InvalidRequest => 2,
        NakCode::RemoteOperation => 3,
    }
}

fn put_cm(out: &mut Vec<u8>, m: &CmMsg) {
    match m {
        CmMsg::Req {
            conn_id,
            src_port,
            dst_port,
            qpn,
            params,
            private_data,
        } => {
            put_u8(out, 1);
            put_u64(out, *conn_id);
            put_u16(out, *src_port);
            put_u16(out, *dst_port);
            put_u32(out, *qpn);
            put_params(out, params);
            put_bytes(out, private_data);
        }
        CmMsg::Rep {
            conn_id,
            qpn,
            private_data,
        } => {
            put_u8(out, 2);
            put_u64(out, *conn_id);
            put_u32(out, *qpn);
            put_bytes(out, private_data);
        }
        CmMsg::Rtu { conn_id } => {
            put_u8(out, 3);
            put_u64(out, *conn_id);
        }
        CmMsg::Rej {
            conn_id,
            reason,
            private_data,
        } => {
            put_u8(out, 4);
            put_u64(out, *conn_id);
            put_u8(out, reject_reason_tag(*reason));
            put_bytes(out, private_data);
        }
        CmMsg::Dreq {
            conn_id,
            from_initiator,
        } => {
            put_u8(out, 5);
            put_u64(out, *conn_id);
            put_bool(out, *from_initiator);
        }
    }
}

fn put_req(out: &mut Vec<u8>, op: &ReqOp) {
    match op {
        ReqOp::Send {
            data,
            imm,
            invalidate,
            solicited,
        } => {
            put_u8(out, 1);
            put_bytes(out, data);
            put_opt_u32(out, *imm);
            put_opt_u32(out, *invalidate);
            put_bool(out, *solicited);
        }
        ReqOp::Write {
            addr,
            rkey,
            data,
            imm,
            solicited,
        } => {
            put_u8(out, 2);
            put_u64(out, *addr);
            put_u32(out, *rkey);
            put_bytes(out, data);
            put_opt_u32(out, *imm);
            put_bool(out, *solicited);
        }
        ReqOp::Read { addr, rkey, len } => {
            put_u8(out, 3);
            put_u64(out, *addr);
            put_u32(out, *rkey);
            put_u32(out, *len);
        }
        ReqOp::FetchAdd { addr, rkey, add } => {
            put_u8(out, 4);
            put_u64(out, *addr);
            put_u32(out, *rkey);
            put_u64(out, *add);
        }
        ReqOp::CmpSwap {
            addr,
            rkey,
            compare,
            swap,
        } => {
            put_u8(out, 5);
            put_u64(out, *addr);
            put_u32(out, *rkey);
            put_u64(out, *compare);
            put_u64(out, *swap);
        }
    }
}

fn put_resp(out: &mut Vec<u8>, kind: &RespKind) {
    match kind {
        RespKind::Ack => put_u8(out, 1),
        RespKind::ReadData(data) => {
            put_u8(out, 2);
            put_bytes(out, data);
        }
        RespKind::AtomicOrig(v) => {
            put_u8(out, 3);
            put_u64(out, *v);
        }
        RespKind::Nak(code) => {
            put_u8(out, 4);
            put_u8(out, nak_tag(*code));
        }
    }
}

/// Appends `p` to `out` as one frame (header and body).
///
/// Encoding cannot fail; a packet that breaks the bounds (see [`validate`])
/// is encoded as it is and rejected by the receiver's [`decode`], so check
/// packets from untrusted sources with [`validate`] first.
pub fn encode(p: &Packet, out: &mut Vec<u8>) {
    let start = out.len();
    // One allocation for the whole frame: the payload plus a bound on the
    // fixed fields (addresses, ids, keys).
    let payload = match &p.body {
        Body::Request {
            op: ReqOp::Send { data, .. } | ReqOp::Write { data, .. },
            ..
        }
        | Body::Response {
            kind: RespKind::ReadData(data),
            ..
        } => data.len(),
        _ => 0,
    };
    out.reserve(HEADER_LEN + payload + 128 + MAX_REJECT_PRIVATE_DATA.max(MAX_ACCEPT_PRIVATE_DATA));
    out.extend_from_slice(&[0; HEADER_LEN]);
    put_u8(out, VERSION);
    put_ip(out, p.src);
    put_ip(out, p.dst);
    match &p.body {
        Body::ArpRequest { cookie } => {
            put_u8(out, 1);
            put_u64(out, *cookie);
        }
        Body::ArpReply { cookie } => {
            put_u8(out, 2);
            put_u64(out, *cookie);
        }
        Body::Cm(m) => {
            put_u8(out, 3);
            put_cm(out, m);
        }
        Body::Request {
            dst_qpn,
            src_qpn,
            psn,
            op,
        } => {
            put_u8(out, 4);
            put_u32(out, *dst_qpn);
            put_u32(out, *src_qpn);
            put_u32(out, *psn);
            put_req(out, op);
        }
        Body::Response {
            dst_qpn,
            src_qpn,
            psn,
            kind,
        } => {
            put_u8(out, 5);
            put_u32(out, *dst_qpn);
            put_u32(out, *src_qpn);
            put_u32(out, *psn);
            put_resp(out, kind);
        }
    }
    let body_len = out.len() - start - HEADER_LEN;
    let header = u32::try_from(body_len).unwrap_or(u32::MAX).to_be_bytes();
    if let Some(h) = out.get_mut(start..start + HEADER_LEN) {
        h.copy_from_slice(&header);
    }
}

/// `p` encoded as one frame in a new vector.
pub fn encode_to_vec(p: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    encode(p, &mut out);
    out
}

fn check_len(what: &'static str, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        Err(WireError::TooLong { what, len, max })
    } else {
        Ok(())
    }
}

/// Checks that `p` fits the wire's bounds: private data within the CM limits
/// (56 / 196 / 148 bytes) and payloads within [`MAX_PAYLOAD`]. A packet that
/// passes decodes back to itself.
pub fn validate(p: &Packet) -> Result<(), WireError> {
    match &p.body {
        Body::ArpRequest { .. } | Body::ArpReply { .. } => Ok(()),
        Body::Cm(CmMsg::Req { private_data, .. }) => check_len(
            "connect private data",
            private_data.len(),
            MAX_CONNECT_PRIVATE_DATA,
        ),
        Body::Cm(CmMsg::Rep { private_data, .. }) => check_len(
            "accept private data",
            private_data.len(),
            MAX_ACCEPT_PRIVATE_DATA,
        ),
        Body::Cm(CmMsg::Rej { private_data, .. }) => check_len(
            "reject private data",
            private_data.len(),
            MAX_REJECT_PRIVATE_DATA,
        ),
        Body::Cm(CmMsg::Rtu { .. } | CmMsg::Dreq { .. }) => Ok(()),
        Body::Request { op, .. } => match op {
            ReqOp::Send { data, .. } | ReqOp::Write { data, .. } => {
                check_len("payload", data.len(), MAX_PAYLOAD)
            }
            ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. } => Ok(()),
        },
        Body::Response { kind, .. } => match kind {
            RespKind::ReadData(data) => check_len("payload", data.len(), MAX_PAYLOAD),
            RespKind::Ack | RespKind::AtomicOrig(_) | RespKind::Nak(_) => Ok(()),
        },
    }
}

// ---------------------------------------------------------------- decoding

/// A length-checked reader over a byte slice.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Where payload buffers come from (a new exact buffer each if none).
    pool: Option<&'a mut BufferPool>,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], pool: Option<&'a mut BufferPool>) -> Cursor<'a> {
        Cursor { buf, pos: 0, pool }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let truncated = WireError::Truncated {
            what,
            offset: self.pos,
            needed: n,
            available: self.remaining(),
        };
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let s = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let offset = self.pos;
        let s = self.take(N, what)?;
        <[u8; N]>::try_from(s).map_err(|_| WireError::Truncated {
            what,
            offset,
            needed: N,
            available: s.len(),
        })
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(WireError::BadBool { what, value }),
        }
    }

    fn opt_u32(&mut self, what: &'static str) -> Result<Option<u32>, WireError> {
        if self.bool(what)? {
            Ok(Some(self.u32(what)?))
        } else {
            Ok(None)
        }
    }

    /// A `u32`-length-prefixed byte string of at most `max` bytes. The bound
    /// is checked before anything is allocated.
    fn bytes(&mut self, what: &'static str, max: usize) -> Result<Vec<u8>, WireError> {
        let len = usize::try_from(self.u32(what)?).unwrap_or(usize::MAX);
        check_len(what, len, max)?;
        Ok(self.take(len, what)?.to_vec())
    }

    /// A payload: like [`Cursor::bytes`], of at most [`MAX_PAYLOAD`]
    /// bytes, in a buffer from the pool if there is one.
    fn payload(&mut self) -> Result<Payload, WireError> {
        let what = "payload";
        let len = usize::try_from(self.u32(what)?).unwrap_or(usize::MAX);
        check_len(what, len, MAX_PAYLOAD)?;
        let bytes = self.take(len, what)?;
        Ok(match self.pool.as_deref_mut() {
            Some(pool) => {
                let mut p = pool.take(len);
                p.get_mut()
                    .expect("a buffer fresh from the pool is not shared")
                    .copy_from_slice(bytes);
                p
            }
            None => Payload::from(bytes),
        })
    }

    fn ip(&mut self, what: &'static str) -> Result<IpAddr, WireError> {
        match self.u8(what)? {
            4 => Ok(IpAddr::V4(Ipv4Addr::from(self.array::<4>(what)?))),
            6 => Ok(IpAddr::V6(Ipv6Addr::from(self.array::<16>(what)?))),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    fn params(&mut self) -> Result<ConnParams, WireError> {
        Ok(ConnParams {
            retry_count: self.u8("retry count")?,
            rnr_retry_count: self.u8("RNR retry count")?,
            ack_timeout: self.u8("ACK timeout")?,
        })
    }

    fn reject_reason(&mut self) -> Result<RejectReason, WireError> {
        let what = "reject reason";
        match self.u8(what)? {
            0 => Ok(RejectReason::Consumer),
            1 => Ok(RejectReason::NoListener),
            2 => Ok(RejectReason::NoResources),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    fn cm(&mut self) -> Result<CmMsg, WireError> {
        let what = "CM message";
        match self.u8(what)? {
            1 => Ok(CmMsg::Req {
                conn_id: self.u64("connection id")?,
                src_port: self.u16("source port")?,
                dst_port: self.u16("destination port")?,
                qpn: self.u32("QP number")?,
                params: self.params()?,
                private_data: self.bytes("connect private data", MAX_CONNECT_PRIVATE_DATA)?,
            }),
            2 => Ok(CmMsg::Rep {
                conn_id: self.u64("connection id")?,
                qpn: self.u32("QP number")?,
                private_data: self.bytes("accept private data", MAX_ACCEPT_PRIVATE_DATA)?,
            }),
            3 => Ok(CmMsg::Rtu {
                conn_id: self.u64("connection id")?,
            }),
            4 => Ok(CmMsg::Rej {
                conn_id: self.u64("connection id")?,
                reason: self.reject_reason()?,
                private_data: self.bytes("reject private data", MAX_REJECT_PRIVATE_DATA)?,
            }),
            5 => Ok(CmMsg::Dreq {
                conn_id: self.u64("connection id")?,
                from_initiator: self.bool("from_initiator")?,
            }),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    fn req(&mut self) -> Result<ReqOp, WireError> {
        let what = "request operation";
        match self.u8(what)? {
            1 => Ok(ReqOp::Send {
                data: self.payload()?,
                imm: self.opt_u32("immediate data")?,
                invalidate: self.opt_u32("invalidate rkey")?,
                solicited: self.bool("solicited")?,
            }),
            2 => Ok(ReqOp::Write {
                addr: self.u64("remote address")?,
                rkey: self.u32("rkey")?,
                data: self.payload()?,
                imm: self.opt_u32("immediate data")?,
                solicited: self.bool("solicited")?,
            }),
            3 => Ok(ReqOp::Read {
                addr: self.u64("remote address")?,
                rkey: self.u32("rkey")?,
                len: self.u32("read length")?,
            }),
            4 => Ok(ReqOp::FetchAdd {
                addr: self.u64("remote address")?,
                rkey: self.u32("rkey")?,
                add: self.u64("addend")?,
            }),
            5 => Ok(ReqOp::CmpSwap {
                addr: self.u64("remote address")?,
                rkey: self.u32("rkey")?,
                compare: self.u64("compare value")?,
                swap: self.u64("swap value")?,
            }),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    fn resp(&mut self) -> Result<RespKind, WireError> {
        let what = "response kind";
        match self.u8(what)? {
            1 => Ok(RespKind::Ack),
            2 => Ok(RespKind::ReadData(self.payload()?)),
            3 => Ok(RespKind::AtomicOrig(self.u64("atomic original value")?)),
            4 => {
                let what = "NAK code";
                Ok(RespKind::Nak(match self.u8(what)? {
                    0 => NakCode::Rnr,
                    1 => NakCode::RemoteAccess,
                    2 => NakCode::InvalidRequest,
                    3 => NakCode::RemoteOperation,
                    tag => return Err(WireError::UnknownTag { what, tag }),
                }))
            }
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    fn body(&mut self) -> Result<Body, WireError> {
        let what = "packet kind";
        match self.u8(what)? {
            1 => Ok(Body::ArpRequest {
                cookie: self.u64("cookie")?,
            }),
            2 => Ok(Body::ArpReply {
                cookie: self.u64("cookie")?,
            }),
            3 => Ok(Body::Cm(self.cm()?)),
            4 => Ok(Body::Request {
                dst_qpn: self.u32("destination QP number")?,
                src_qpn: self.u32("source QP number")?,
                psn: self.u32("PSN")?,
                op: self.req()?,
            }),
            5 => Ok(Body::Response {
                dst_qpn: self.u32("destination QP number")?,
                src_qpn: self.u32("source QP number")?,
                psn: self.u32("PSN")?,
                kind: self.resp()?,
            }),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }
}

/// Decodes one whole frame (header and body, as [`encode`] writes it and
/// [`FrameReader::next_frame`] yields it).
pub fn decode(frame: &[u8]) -> Result<Packet, WireError> {
    decode_with(frame, None)
}

/// [`decode`], with the payload (if any) in a buffer from `pool`: give it
/// back with [`BufferPool::recycle`] once the packet is handled, and the
/// next frame reuses it.
pub fn decode_in(frame: &[u8], pool: &mut BufferPool) -> Result<Packet, WireError> {
    decode_with(frame, Some(pool))
}

fn decode_with(frame: &[u8], pool: Option<&mut BufferPool>) -> Result<Packet, WireError> {
    let mut c = Cursor::new(frame, pool);
    let declared = usize::try_from(c.u32("frame header")?).unwrap_or(usize::MAX);
    if declared > MAX_FRAME {
        return Err(WireError::FrameTooLarge {
            len: declared,
            max: MAX_FRAME,
        });
    }
    if declared != c.remaining() {
        return Err(WireError::LengthMismatch {
            declared,
            actual: c.remaining(),
        });
    }
    let version = c.u8("version")?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let packet = Packet {
        src: c.ip("source address")?,
        dst: c.ip("destination address")?,
        body: c.body()?,
    };
    match c.remaining() {
        0 => Ok(packet),
        count => Err(WireError::TrailingBytes { count }),
    }
}

/// Cuts a byte stream into frames.
///
/// Feed it what the socket gives ([`FrameReader::push`] or
/// [`FrameReader::read_from`]) and take complete frames out with
/// [`FrameReader::next_frame`] or [`FrameReader::next_packet`]. A header
/// announcing a body larger than the maximum is an error as soon as the
/// header is in, before the body is buffered; the stream cannot be
/// resynchronised after it, so the reader stays failed (drop the
/// connection). A frame that is well delimited but does not decode fails
/// only that frame.
#[derive(Debug, Clone)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    max_frame: usize,
    failed: Option<WireError>,
}

impl Default for FrameReader {
    fn default() -> FrameReader {
        FrameReader::new()
    }
}

impl FrameReader {
    /// How much [`FrameReader::read_from`] reads at most per call.
    pub const READ_CHUNK: usize = 64 * 1024;

    /// A reader accepting bodies up to [`MAX_FRAME`] bytes.
    pub fn new() -> FrameReader {
        FrameReader::with_max_frame(MAX_FRAME)
    }

    /// A reader accepting bodies up to `max_frame` bytes (at most
    /// [`MAX_FRAME`] is useful: [`decode`] rejects larger ones).
    pub fn with_max_frame(max_frame: usize) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            max_frame,
            failed: None,
        }
    }

    /// Bytes received and not yet taken out as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the reader has failed on an oversized frame.
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Drops consumed bytes from the front of the buffer once they are
    /// half of it (keeps `push` + `next_frame` linear).
    fn compact(&mut self) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Appends received bytes (ignored once the reader has failed).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// Reads once from `r` (at most [`FrameReader::READ_CHUNK`] bytes) into
    /// the buffer; returns what `read` returned (0 = end of stream).
    pub fn read_from<R: io::Read + ?Sized>(&mut self, r: &mut R) -> io::Result<usize> {
        self.compact();
        let old = self.buf.len();
        self.buf.resize(old + Self::READ_CHUNK, 0);
        let result = match self.buf.get_mut(old..) {
            Some(space) => r.read(space),
            None => Ok(0),
        };
        let n = *result.as_ref().unwrap_or(&0);
        self.buf.truncate(old + n.min(Self::READ_CHUNK));
        if self.failed.is_some() {
            self.buf.truncate(old);
        }
        result
    }

    /// The next complete frame (header included, ready for [`decode`]), or
    /// `None` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let pending = self.buf.get(self.start..).unwrap_or_default();
        let Some(header) = pending.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(header);
        let len = usize::try_from(u32::from_be_bytes(h)).unwrap_or(usize::MAX);
        if len > self.max_frame {
            let e = WireError::FrameTooLarge {
                len,
                max: self.max_frame,
            };
            self.failed = Some(e.clone());
            self.buf = Vec::new();
            self.start = 0;
            return Err(e);
        }
        let total = HEADER_LEN + len;
        let Some(frame) = pending.get(..total) else {
            return Ok(None);
        };
        let frame = frame.to_vec();
        self.start += total;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(frame))
    }

    /// The next complete frame, decoded; `None` if more bytes are needed. A
    /// frame that does not decode is consumed and its error returned; the
    /// next call goes on with the following frame.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, WireError> {
        match self.next_frame()? {
            None => Ok(None),
            Some(frame) => decode(&frame).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn sample() -> Packet {
        Packet {
            src: v4("10.0.0.1"),
            dst: v4("10.0.0.2"),
            body: Body::Request {
                dst_qpn: 7,
                src_qpn: 9,
                psn: 0x0102_0304,
                op: ReqOp::Send {
                    data: b"hi".to_vec().into(),
                    imm: Some(0xaabb_ccdd),
                    invalidate: None,
                    solicited: true,
                },
            },
        }
    }

    #[test]
    fn golden_bytes() {
        // Pins the format: a change here breaks mixed-version hosts.
        let bytes = encode_to_vec(&sample());
        let want: Vec<u8> = vec![
            0, 0, 0, 38, // body length
            1,  // version
            4, 10, 0, 0, 1, // src
            4, 10, 0, 0, 2, // dst
            4, // Request
            0, 0, 0, 7, 0, 0, 0, 9, 1, 2, 3, 4, // dst_qpn, src_qpn, psn
            1, // Send
            0, 0, 0, 2, b'h', b'i', // data
            1, 0xaa, 0xbb, 0xcc, 0xdd, // imm
            0,    // invalidate
            1,    // solicited
        ];
        assert_eq!(bytes, want);
        assert_eq!(decode(&bytes), Ok(sample()));
    }

    #[test]
    fn encode_appends() {
        let mut out = vec![0xee];
        encode(&sample(), &mut out);
        encode(&sample(), &mut out);
        let one = encode_to_vec(&sample());
        assert_eq!(out.len(), 1 + 2 * one.len());
        assert_eq!(&out[1..1 + one.len()], &one[..]);
        assert_eq!(&out[1 + one.len()..], &one[..]);
    }

    #[test]
    fn structural_errors() {
        let good = encode_to_vec(&sample());
        // Trailing bytes inside the frame.
        let mut t = good.clone();
        t.push(0);
        t[3] += 1;
        assert_eq!(decode(&t), Err(WireError::TrailingBytes { count: 1 }));
        // Header disagreeing with the slice.
        let mut t = good.clone();
        t.push(0);
        assert_eq!(
            decode(&t),
            Err(WireError::LengthMismatch {
                declared: 38,
                actual: 39
            })
        );
        // Unknown version and tags.
        let mut t = good.clone();
        t[4] = 2;
        assert_eq!(decode(&t), Err(WireError::Version(2)));
        let mut t = good.clone();
        t[5] = 5;
        assert_eq!(
            decode(&t),
            Err(WireError::UnknownTag {
                what: "source address",
                tag: 5
            })
        );
        let mut t = good.clone();
        t[15] = 9;
        assert!(matches!(
            decode(&t),
            Err(WireError::UnknownTag {
                what: "packet kind",
                ..
            })
        ));
        let mut t = good.clone();
        t[28] = 0;
        assert!(matches!(
            decode(&t),
            Err(WireError::UnknownTag {
                what: "request operation",
                ..
            })
        ));
        // A boolean that is not 0/1.
        let mut t = good.clone();
        *t.last_mut().unwrap() = 2;
        assert_eq!(
            decode(&t),
            Err(WireError::BadBool {
                what: "solicited",
                value: 2
            })
        );
        // A frame header over the maximum.
        let big = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes();
        assert!(matches!(decode(&big), Err(WireError::FrameTooLarge { .. })));
        assert!(matches!(
            decode(&[0, 0]),
            Err(WireError::Truncated {
                what: "frame header",
                ..
            })
        ));
        assert!(decode(&[]).is_err());
        assert!(matches!(
            decode(&[0, 0, 0, 0]),
            Err(WireError::Truncated {
                what: "version",
                ..
            })
        ));
    }

    fn cm_packet(m: CmMsg) -> Packet {
        Packet {
            src: v4("1.2.3.4"),
            dst: "fe80::1".parse().unwrap(),
            body: Body::Cm(m),
        }
    }

    #[test]
    fn private_data_bounds() {
        let req = |n| {
            cm_packet(CmMsg::Req {
                conn_id: 1,
                src_port: 2,
                dst_port: 3,
                qpn: 4,
                params: ConnParams::default(),
                private_data: vec![7; n],
            })
        };
        let rep = |n| {
            cm_packet(CmMsg::Rep {
                conn_id: 1,
                qpn: 4,
                private_data: vec![7; n],
            })
        };
        let rej = |n| {
            cm_packet(CmMsg::Rej {
                conn_id: 1,
                reason: RejectReason::NoListener,
                private_data: vec![7; n],
            })
        };
        for (mk, max) in [
            (&req as &dyn Fn(usize) -> Packet, MAX_CONNECT_PRIVATE_DATA),
            (&rep, MAX_ACCEPT_PRIVATE_DATA),
            (&rej, MAX_REJECT_PRIVATE_DATA),
        ] {
            let ok = mk(max);
            assert_eq!(validate(&ok), Ok(()));
            assert_eq!(decode(&encode_to_vec(&ok)), Ok(ok));
            let too_long = mk(max + 1);
            let err = validate(&too_long).unwrap_err();
            assert!(
                matches!(err, WireError::TooLong { len, max: m, .. } if len == max + 1 && m == max)
            );
            assert_eq!(decode(&encode_to_vec(&too_long)), Err(err));
        }
    }

    #[test]
    fn payload_bound_checked_before_allocating() {
        // A Send claiming a 4 GiB payload in a tiny frame.
        let mut t = encode_to_vec(&sample());
        t[29..33].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&t),
            Err(WireError::TooLong {
                what: "payload",
                ..
            })
        ));
        // Just within the bound but absent: truncated.
        t[29..33].copy_from_slice(&u32::try_from(MAX_PAYLOAD).unwrap().to_be_bytes());
        assert!(matches!(
            decode(&t),
            Err(WireError::Truncated {
                what: "payload",
                ..
            })
        ));
        let big = Packet {
            src: v4("10.0.0.1"),
            dst: v4("10.0.0.2"),
            body: Body::Response {
                dst_qpn: 1,
                src_qpn: 2,
                psn: 3,
                kind: RespKind::ReadData(vec![1; MAX_PAYLOAD].into()),
            },
        };
        let bytes = encode_to_vec(&big);
        assert!(bytes.len() - HEADER_LEN <= MAX_FRAME);
        assert_eq!(decode(&bytes), Ok(big));
    }

    #[test]
    fn frame_reader_basics() {
        let a = sample();
        let b = cm_packet(CmMsg::Rtu { conn_id: 42 });
        let mut stream = encode_to_vec(&a);
        encode(&b, &mut stream);
        let mut r = FrameReader::new();
        assert_eq!(r.next_frame(), Ok(None));
        r.push(&stream[..3]);
        assert_eq!(r.next_packet(), Ok(None));
        r.push(&stream[3..20]);
        assert_eq!(r.next_packet(), Ok(None));
        r.push(&stream[20..]);
        assert_eq!(r.next_packet(), Ok(Some(a)));
        assert_eq!(r.next_packet(), Ok(Some(b)));
        assert_eq!(r.next_packet(), Ok(None));
        assert_eq!(r.buffered(), 0);

        // A delimited frame that does not decode fails alone.
        let mut bad = encode_to_vec(&sample());
        bad[4] = 99;
        r.push(&bad);
        r.push(&encode_to_vec(&sample()));
        assert_eq!(r.next_packet(), Err(WireError::Version(99)));
        assert_eq!(r.next_packet(), Ok(Some(sample())));
        assert!(!r.is_failed());
    }

    #[test]
    fn frame_reader_rejects_oversized_header_early() {
        let mut r = FrameReader::with_max_frame(100);
        r.push(&101u32.to_be_bytes());
        let err = r.next_frame().unwrap_err();
        assert_eq!(err, WireError::FrameTooLarge { len: 101, max: 100 });
        assert!(r.is_failed());
        r.push(&[0; 1000]);
        assert_eq!(r.buffered(), 0, "a failed reader buffers nothing");
        assert_eq!(r.next_frame(), Err(err));
        let mut r = FrameReader::new();
        r.push(&u32::MAX.to_be_bytes());
        assert!(matches!(
            r.next_frame(),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn frame_reader_reads_from_io() {
        let mut stream = Vec::new();
        for i in 0..1000u64 {
            encode(&cm_packet(CmMsg::Rtu { conn_id: i }), &mut stream);
        }
        let mut src = io::Cursor::new(stream);
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        loop {
            let n = r.read_from(&mut src).unwrap();
            while let Some(p) = r.next_packet().unwrap() {
                got.push(p.body);
            }
            if n == 0 {
                break;
            }
        }
        assert_eq!(got.len(), 1000);
        assert_eq!(got[999], Body::Cm(CmMsg::Rtu { conn_id: 999 }));
        assert_eq!(r.buffered(), 0);
    }

    // ------------------------------------------------------------ properties

    fn ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from),
        ]
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..=max)
    }

    fn params() -> impl Strategy<Value = ConnParams> {
        any::<(u8, u8, u8)>().prop_map(|(r, n, t)| ConnParams {
            retry_count: r,
            rnr_retry_count: n,
            ack_timeout: t,
        })
    }

    fn reason() -> impl Strategy<Value = RejectReason> {
        prop_oneof![
            Just(RejectReason::Consumer),
            Just(RejectReason::NoListener),
            Just(RejectReason::NoResources),
        ]
    }

    fn cm() -> impl Strategy<Value = CmMsg> {
        prop_oneof![
            (
                any::<u64>(),
                any::<u16>(),
                any::<u16>(),
                any::<u32>(),
                params(),
                bytes(MAX_CONNECT_PRIVATE_DATA)
            )
                .prop_map(
                    |(conn_id, src_port, dst_port, qpn, params, private_data)| {
                        CmMsg::Req {
                            conn_id,
                            src_port,
                            dst_port,
                            qpn,
                            params,
                            private_data,
                        }
                    }
                ),
            (any::<u64>(), any::<u32>(), bytes(MAX_ACCEPT_PRIVATE_DATA)).prop_map(
                |(conn_id, qpn, private_data)| CmMsg::Rep {
                    conn_id,
                    qpn,
                    private_data
                }
            ),
            any::<u64>().prop_map(|conn_id| CmMsg::Rtu { conn_id }),
            (any::<u64>(), reason(), bytes(MAX_REJECT_PRIVATE_DATA)).prop_map(
                |(conn_id, reason, private_data)| CmMsg::Rej {
                    conn_id,
                    reason,
                    private_data
                }
            ),
            (any::<u64>(), any::<bool>()).prop_map(|(conn_id, from_initiator)| CmMsg::Dreq {
                conn_id,
                from_initiator
            }),
        ]
    }

    fn req() -> impl Strategy<Value = ReqOp> {
        prop_oneof![
            (
                bytes(300),
                any::<Option<u32>>(),
                any::<Option<u32>>(),
                any::<bool>()
            )
                .prop_map(|(data, imm, invalidate, solicited)| ReqOp::Send {
                    data: data.into(),
                    imm,
                    invalidate,
                    solicited
                }),
            (
                any::<u64>(),
                any::<u32>(),
                bytes(300),
                any::<Option<u32>>(),
                any::<bool>()
            )
                .prop_map(|(addr, rkey, data, imm, solicited)| ReqOp::Write {
                    addr,
                    rkey,
                    data: data.into(),
                    imm,
                    solicited
                }),
            (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, rkey, len)| ReqOp::Read {
                addr,
                rkey,
                len
            }),
            (any::<u64>(), any::<u32>(), any::<u64>())
                .prop_map(|(addr, rkey, add)| ReqOp::FetchAdd { addr, rkey, add }),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
                |(addr, rkey, compare, swap)| ReqOp::CmpSwap {
                    addr,
                    rkey,
                    compare,
                    swap
                }
            ),
        ]
    }

    fn resp() -> impl Strategy<Value = RespKind> {
        prop_oneof![
            Just(RespKind::Ack),
            bytes(300).prop_map(|b| RespKind::ReadData(b.into())),
            any::<u64>().prop_map(RespKind::AtomicOrig),
            prop_oneof![
                Just(NakCode::Rnr),
                Just(NakCode::RemoteAccess),
                Just(NakCode::InvalidRequest),
                Just(NakCode::RemoteOperation),
            ]
            .prop_map(RespKind::Nak),
        ]
    }

    fn body() -> impl Strategy<Value = Body> {
        prop_oneof![
            any::<u64>().prop_map(|cookie| Body::ArpRequest { cookie }),
            any::<u64>().prop_map(|cookie| Body::ArpReply { cookie }),
            cm().prop_map(Body::Cm),
            (any::<u32>(), any::<u32>(), any::<u32>(), req()).prop_map(
                |(dst_qpn, src_qpn, psn, op)| Body::Request {
                    dst_qpn,
                    src_qpn,
                    psn,
                    op
                }
            ),
            (any::<u32>(), any::<u32>(), any::<u32>(), resp()).prop_map(
                |(dst_qpn, src_qpn, psn, kind)| Body::Response {
                    dst_qpn,
                    src_qpn,
                    psn,
                    kind
                }
            ),
        ]
    }

    fn packet() -> impl Strategy<Value = Packet> {
        (ip(), ip(), body()).prop_map(|(src, dst, body)| Packet { src, dst, body })
    }

    proptest! {
        #[test]
        fn round_trip(p in packet()) {
            prop_assert_eq!(validate(&p), Ok(()));
            let bytes = encode_to_vec(&p);
            prop_assert_eq!(decode(&bytes), Ok(p));
        }

        #[test]
        fn round_trip_through_a_pool(ps in proptest::collection::vec(packet(), 1..8)) {
            // Recycled buffers full of stale bytes: none may show through.
            let mut pool = BufferPool::new();
            for len in [64, 128, 256, 512] {
                let mut p = pool.take(len);
                p.get_mut().unwrap().fill(0xAB);
                pool.recycle(p);
            }
            for p in ps {
                let q = decode_in(&encode_to_vec(&p), &mut pool).unwrap();
                prop_assert_eq!(&q, &p);
                if let Some(data) = q.payload().cloned() {
                    drop(q);
                    pool.recycle(data);
                }
            }
            let s = pool.stats();
            prop_assert_eq!(s.shared + s.dropped, 0);
        }

        #[test]
        fn every_truncation_is_an_error(p in packet()) {
            let bytes = encode_to_vec(&p);
            for cut in 0..bytes.len() {
                prop_assert!(decode(&bytes[..cut]).is_err(), "prefix of {} bytes decoded", cut);
                // Also with a header fixed up to match the shorter body.
                if cut >= HEADER_LEN {
                    let mut t = bytes[..cut].to_vec();
                    let len = u32::try_from(cut - HEADER_LEN).unwrap();
                    t[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
                    prop_assert!(decode(&t).is_err(), "fixed-up prefix of {} bytes decoded", cut);
                }
            }
        }

        #[test]
        fn mutations_never_panic(p in packet(), at in any::<usize>(), byte in any::<u8>()) {
            let mut bytes = encode_to_vec(&p);
            let i = at % bytes.len();
            bytes[i] = byte;
            if let Ok(q) = decode(&bytes) {
                // Whatever decodes re-encodes to the same bytes.
                prop_assert_eq!(encode_to_vec(&q), bytes);
            }
        }

        #[test]
        fn garbage_never_panics(bytes in bytes(200)) {
            let _ = decode(&bytes);
            let mut framed = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
            let mut r = FrameReader::new();
            r.push(&framed);
            r.push(&bytes);
            while let Ok(Some(_)) = r.next_frame() {}
        }

        #[test]
        fn reader_reassembles_any_split(ps in proptest::collection::vec(packet(), 1..6), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let mut stream = Vec::new();
            for p in &ps {
                encode(p, &mut stream);
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.push(0);
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut r = FrameReader::new();
            let mut got = Vec::new();
            for w in cuts.windows(2) {
                r.push(&stream[w[0]..w[1]]);
                while let Some(p) = r.next_packet().unwrap() {
                    got.push(p);
                }
            }
            prop_assert_eq!(got, ps);
            prop_assert_eq!(r.buffered(), 0);
        }
    }
}
