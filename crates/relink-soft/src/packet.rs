//! What travels between soft devices: CM messages and RC transport packets.
//!
//! Both soft modes carry the same packets; the in-process fabric moves them
//! through its virtual-time queue, the TCP fabric encodes them with
//! [`crate::wire`].

use std::net::IpAddr;

use relink_fabric::{ConnParams, RejectReason};

use crate::payload::Payload;

/// A packet between two device addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Sending device's address.
    pub src: IpAddr,
    /// Destination address (the device that owns it receives the packet).
    pub dst: IpAddr,
    /// What the packet carries.
    pub body: Body,
}

/// Packet contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Address resolution: who owns `dst`?
    ArpRequest {
        /// Requesting CM id's cookie, echoed back.
        cookie: u64,
    },
    /// Answer to an [`Body::ArpRequest`].
    ArpReply {
        /// The request's cookie.
        cookie: u64,
    },
    /// Connection management.
    Cm(CmMsg),
    /// RC request from a requester QP.
    Request {
        /// Destination QP number.
        dst_qpn: u32,
        /// Source QP number.
        src_qpn: u32,
        /// Packet sequence number: the requester numbers its requests from 0
        /// in posting order (wrapping), and the responder executes them in
        /// that order.
        psn: u32,
        /// The operation, with the payload of a SEND or WRITE.
        op: ReqOp,
    },
    /// RC response from a responder QP.
    Response {
        /// Destination (requester) QP number.
        dst_qpn: u32,
        /// Source (responder) QP number.
        src_qpn: u32,
        /// PSN of the request answered (cumulative for acks).
        psn: u32,
        /// What the responder answers.
        kind: RespKind,
    },
}

impl Packet {
    /// The payload the packet carries: a SEND's or WRITE's data, or a READ
    /// response's.
    pub fn payload(&self) -> Option<&Payload> {
        match &self.body {
            Body::Request {
                op: ReqOp::Send { data, .. } | ReqOp::Write { data, .. },
                ..
            }
            | Body::Response {
                kind: RespKind::ReadData(data),
                ..
            } => Some(data),
            _ => None,
        }
    }

    /// Put `data` in place of the payload of a SEND, WRITE or READ
    /// response (a packet of another kind is left as it is).
    pub fn set_payload(&mut self, data: Payload) {
        match &mut self.body {
            Body::Request {
                op: ReqOp::Send { data: d, .. } | ReqOp::Write { data: d, .. },
                ..
            }
            | Body::Response {
                kind: RespKind::ReadData(d),
                ..
            } => *d = data,
            _ => {}
        }
    }
}

/// Connection-management messages, after IB CM's REQ, REP, RTU, REJ and
/// DREQ (no DREP: a disconnect request is not answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMsg {
    /// Connection request.
    Req {
        /// Connection id, unique across hosts (initiator-chosen).
        conn_id: u64,
        /// Initiator's port.
        src_port: u16,
        /// Target port (the service).
        dst_port: u16,
        /// Initiator's QP number.
        qpn: u32,
        /// Connection parameters.
        params: ConnParams,
        /// Up to 56 bytes.
        private_data: Vec<u8>,
    },
    /// Reply (accept).
    Rep {
        /// Connection id of the request accepted.
        conn_id: u64,
        /// Target's QP number.
        qpn: u32,
        /// Up to 196 bytes.
        private_data: Vec<u8>,
    },
    /// Ready to use: the initiator saw the reply.
    Rtu {
        /// Connection id of the request accepted.
        conn_id: u64,
    },
    /// The target refuses the connection request; the initiator's id sees
    /// `Rejected` with the reason and private data.
    Rej {
        /// Connection id of the request refused.
        conn_id: u64,
        /// Why: the consumer rejected it, no listener matched, or the target
        /// lacked resources.
        reason: RejectReason,
        /// Up to 148 bytes.
        private_data: Vec<u8>,
    },
    /// Disconnect request.
    Dreq {
        /// Connection id of the connection ended.
        conn_id: u64,
        /// Whether the sender is the connection's initiator.
        from_initiator: bool,
    },
}

/// An RC request operation with its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReqOp {
    /// SEND, with optional immediate data or an rkey to invalidate.
    Send {
        /// Payload (shared with the requester's copy for retransmission).
        data: Payload,
        /// Immediate data, delivered in the receive's completion.
        imm: Option<u32>,
        /// rkey to invalidate at the responder.
        invalidate: Option<u32>,
        /// Solicited event requested.
        solicited: bool,
    },
    /// WRITE, with optional immediate data.
    Write {
        /// Remote virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Payload (shared with the requester's copy for retransmission).
        data: Payload,
        /// Immediate data (consumes a receive).
        imm: Option<u32>,
        /// Solicited event requested (with immediate data).
        solicited: bool,
    },
    /// READ: `len` bytes at `addr` come back in a
    /// [`RespKind::ReadData`].
    Read {
        /// Remote virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes to read.
        len: u32,
    },
    /// FETCH_ADD on the 8-byte-aligned `u64` at `addr`; the original value
    /// comes back in a [`RespKind::AtomicOrig`].
    FetchAdd {
        /// Remote virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Added (wrapping) to the value at `addr`.
        add: u64,
    },
    /// CMP_SWAP on the 8-byte-aligned `u64` at `addr`; the original value
    /// comes back in a [`RespKind::AtomicOrig`].
    CmpSwap {
        /// Remote virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// The swap happens only if the value at `addr` equals this.
        compare: u64,
        /// Written at `addr` if the value there equals `compare`.
        swap: u64,
    },
}

/// Negative acknowledgement codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// Receiver not ready: no receive posted.
    Rnr,
    /// Bad rkey, rights or bounds.
    RemoteAccess,
    /// Malformed or not allowed (bad invalidate, too long for the receive).
    InvalidRequest,
    /// The responder failed executing it.
    RemoteOperation,
}

/// An RC response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespKind {
    /// Everything up to and including `psn` executed.
    Ack,
    /// READ data for `psn` (acks earlier requests too).
    ReadData(Payload),
    /// Original value of the atomic at `psn`.
    AtomicOrig(u64),
    /// `psn` failed (earlier requests are acknowledged).
    Nak(NakCode),
}
