//! Encoding: a [`Packet`] appended to a buffer as one frame, field by field
//! in the order of the grammar in the [module docs](super), and
//! [`validate`], the bounds a packet must keep to decode back to itself.

use std::net::IpAddr;

use relink_fabric::{ConnParams, RejectReason, MAX_ACCEPT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

use super::link::{Link, RemoteData, LINK};
use super::{HEADER_LEN, VERSION};
use crate::packet::{Body, CmMsg, NakCode, Packet, ReqOp, RespKind};

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

fn put_rdata(out: &mut Vec<u8>, r: RemoteData) {
    put_u64(out, r.addr);
    put_u32(out, r.len);
    put_u64(out, r.lent);
}

/// `remote`: a WRITE's payload is left in this process (only a WRITE's).
fn put_req(out: &mut Vec<u8>, op: &ReqOp, remote: Option<RemoteData>) {
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
            match remote {
                Some(r) => {
                    put_u8(out, 6);
                    put_u64(out, *addr);
                    put_u32(out, *rkey);
                    put_rdata(out, r);
                }
                None => {
                    put_u8(out, 2);
                    put_u64(out, *addr);
                    put_u32(out, *rkey);
                    put_bytes(out, data);
                }
            }
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

/// `remote`: a READ response's payload is left in this process.
fn put_resp(out: &mut Vec<u8>, kind: &RespKind, remote: Option<RemoteData>) {
    match kind {
        RespKind::Ack => put_u8(out, 1),
        RespKind::ReadData(_) if remote.is_some() => {
            put_u8(out, 5);
            put_rdata(out, remote.expect("checked"));
        }
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
    encode_with(p, None, out);
}

/// [`encode`], with the payload of a WRITE or READ response left in this
/// process and described by `remote` instead of copied into the frame (a
/// packet of another kind is encoded as by [`encode`]).
pub fn encode_remote(p: &Packet, remote: RemoteData, out: &mut Vec<u8>) {
    encode_with(p, Some(remote), out);
}

/// Appends a link frame to `out`.
pub fn encode_link(l: &Link, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    put_u8(out, LINK);
    match l {
        Link::Hello(h) => {
            put_u8(out, 1);
            put_u32(out, h.pid);
            put_u64(out, h.alive_addr);
            put_u64(out, h.alive_gen);
        }
        Link::DirectOk => put_u8(out, 2),
        Link::Release { upto } => {
            put_u8(out, 3);
            put_u64(out, *upto);
        }
    }
    finish(out, start);
}

/// Writes the frame header of the frame that starts at `start`.
fn finish(out: &mut [u8], start: usize) {
    let body_len = out.len() - start - HEADER_LEN;
    let header = u32::try_from(body_len).unwrap_or(u32::MAX).to_be_bytes();
    if let Some(h) = out.get_mut(start..start + HEADER_LEN) {
        h.copy_from_slice(&header);
    }
}

fn encode_with(p: &Packet, remote: Option<RemoteData>, out: &mut Vec<u8>) {
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
            put_req(out, op, remote);
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
            put_resp(out, kind, remote);
        }
    }
    finish(out, start);
}

/// `p` encoded as one frame in a new vector.
#[cfg(any(test, feature = "fuzzing"))]
pub fn encode_to_vec(p: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    encode(p, &mut out);
    out
}

/// A decoded frame encoded again, in a new vector.
#[cfg(any(test, feature = "fuzzing"))]
pub fn encode_incoming_to_vec(f: &super::Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    match f {
        super::Incoming::Packet(p) => encode(p, &mut out),
        super::Incoming::Remote(p, r) => encode_remote(p, *r, &mut out),
        super::Incoming::Link(l) => encode_link(l, &mut out),
    }
    out
}
