//! Decoding: a bounds-checked cursor over one frame that reads the grammar of
//! the [module docs](super) back into a [`Packet`], with payloads in fresh
//! buffers or buffers from a [`BufferPool`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use relink_fabric::{
    ConnParams, RejectReason, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA,
    MAX_REJECT_PRIVATE_DATA,
};

use super::link::{Hello, Incoming, Link, RemoteData, LINK};
use super::{check_len, WireError, MAX_FRAME, MAX_PAYLOAD, VERSION};
use crate::packet::{Body, CmMsg, NakCode, Packet, ReqOp, RespKind};
use crate::payload::{BufferPool, Payload};

/// A length-checked reader over a byte slice.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Where payload buffers come from (a new exact buffer each if none).
    pool: Option<&'a mut BufferPool>,
    /// A payload left in the sending process, read in place of one.
    remote: Option<RemoteData>,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], pool: Option<&'a mut BufferPool>) -> Cursor<'a> {
        Cursor {
            buf,
            pos: 0,
            pool,
            remote: None,
        }
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

    /// A payload left in the sending process: recorded, and an empty
    /// payload stands in for it.
    fn rdata(&mut self) -> Result<Payload, WireError> {
        let addr = self.u64("remote payload address")?;
        let len = self.u32("remote payload length")?;
        check_len(
            "remote payload",
            usize::try_from(len).unwrap_or(usize::MAX),
            MAX_PAYLOAD,
        )?;
        let lent = self.u64("loan id")?;
        self.remote = Some(RemoteData { addr, len, lent });
        Ok(Payload::empty())
    }

    fn link(&mut self) -> Result<Link, WireError> {
        let what = "link frame";
        match self.u8(what)? {
            1 => Ok(Link::Hello(Hello {
                pid: self.u32("pid")?,
                alive_addr: self.u64("alive address")?,
                alive_gen: self.u64("alive generation")?,
            })),
            2 => Ok(Link::DirectOk),
            3 => Ok(Link::Release {
                upto: self.u64("released loan")?,
            }),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
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
            6 => Ok(ReqOp::Write {
                addr: self.u64("remote address")?,
                rkey: self.u32("rkey")?,
                data: self.rdata()?,
                imm: self.opt_u32("immediate data")?,
                solicited: self.bool("solicited")?,
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
            5 => Ok(RespKind::ReadData(self.rdata()?)),
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
/// [`FrameReader::next_frame`] yields it) holding a packet with its
/// payload; a link frame, or a payload left in the sender, is an error here.
#[cfg(any(test, feature = "fuzzing"))]
pub fn decode(frame: &[u8]) -> Result<Packet, WireError> {
    match decode_with(frame, None)? {
        Incoming::Packet(p) => Ok(p),
        Incoming::Remote(..) | Incoming::Link(_) => Err(WireError::NotAPacket),
    }
}

/// Decodes one whole frame of any kind.
#[cfg(any(test, feature = "fuzzing"))]
pub fn decode_frame(frame: &[u8]) -> Result<Incoming, WireError> {
    decode_with(frame, None)
}

/// [`decode_frame`], with the payload (if any) in a buffer from `pool`:
/// give it back with [`BufferPool::recycle`] once the packet is handled,
/// and the next frame reuses it.
pub fn decode_in(frame: &[u8], pool: &mut BufferPool) -> Result<Incoming, WireError> {
    decode_with(frame, Some(pool))
}

fn decode_with(frame: &[u8], pool: Option<&mut BufferPool>) -> Result<Incoming, WireError> {
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
    let incoming = match c.u8("version")? {
        VERSION => {
            let packet = Packet {
                src: c.ip("source address")?,
                dst: c.ip("destination address")?,
                body: c.body()?,
            };
            match c.remote {
                Some(r) => Incoming::Remote(packet, r),
                None => Incoming::Packet(packet),
            }
        }
        LINK => Incoming::Link(c.link()?),
        version => return Err(WireError::Version(version)),
    };
    match c.remaining() {
        0 => Ok(incoming),
        count => Err(WireError::TrailingBytes { count }),
    }
}
