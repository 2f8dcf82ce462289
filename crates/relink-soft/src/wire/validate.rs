//! [`validate`]: the bounds a packet must keep for its frame to decode back
//! to it. The transport encodes only packets its own host built; the tests
//! and fuzz targets check what they decode against these bounds.

use relink_fabric::{MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

use super::{check_len, WireError, MAX_PAYLOAD};
use crate::packet::{Body, CmMsg, Packet, ReqOp, RespKind};

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
