//! Messages built: the requests this crate sends the kernel, and monitor
//! events laid out as the kernel sends them (for tests and simulated
//! sources).

use super::consts::*;
use super::message::MonitorEvent;
use super::parse::{align4, NlMsgHeader};

impl MonitorEvent {
    /// Encodes the event as the kernel sends it (header, then attributes in
    /// `rdma_nl_notify_event`'s order). For tests and simulated sources.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        let mut attrs = Vec::new();
        if let Some(i) = self.dev_index {
            put_attr(&mut attrs, RDMA_NLDEV_ATTR_DEV_INDEX, &i.to_ne_bytes());
        }
        if let Some(n) = &self.dev_name {
            put_str(&mut attrs, RDMA_NLDEV_ATTR_DEV_NAME, n);
        }
        if let Some(p) = self.port {
            put_attr(&mut attrs, RDMA_NLDEV_ATTR_PORT_INDEX, &p.to_ne_bytes());
        }
        if let Some(i) = self.netdev_index {
            put_attr(&mut attrs, RDMA_NLDEV_ATTR_NDEV_INDEX, &i.to_ne_bytes());
        }
        if let Some(n) = &self.netdev_name {
            put_str(&mut attrs, RDMA_NLDEV_ATTR_NDEV_NAME, n);
        }
        put_attr(
            &mut attrs,
            RDMA_NLDEV_ATTR_EVENT_TYPE,
            &[self.event.to_u8()],
        );
        encode_message(MONITOR_MSG_TYPE, 0, seq, &attrs)
    }
}

fn put_attr(out: &mut Vec<u8>, attr: u16, payload: &[u8]) {
    // The builders only ever put small attributes.
    let len = u16::try_from(NLA_HDRLEN + payload.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&attr.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(align4(out.len()), 0);
}

fn put_str(out: &mut Vec<u8>, attr: u16, s: &str) {
    let mut p = Vec::with_capacity(s.len() + 1);
    p.extend_from_slice(s.as_bytes());
    p.push(0);
    put_attr(out, attr, &p);
}

/// A whole message: header (its length filled in) and attribute bytes.
pub fn encode_message(kind: u16, flags: u16, seq: u32, attrs: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(NLMSG_HDRLEN + attrs.len());
    NlMsgHeader {
        len: u32::try_from(NLMSG_HDRLEN + attrs.len()).unwrap_or(u32::MAX),
        kind,
        flags,
        seq,
        pid: 0,
    }
    .encode(&mut out);
    out.extend_from_slice(attrs);
    out
}

/// The `RDMA_NLDEV_CMD_SYS_GET` request iproute2's `mon_is_supported` sends.
pub fn sys_get_request(seq: u32) -> Vec<u8> {
    encode_message(
        rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        &[],
    )
}

/// A `RDMA_NLDEV_CMD_GET` dump request: every device in this namespace.
pub fn device_dump_request(seq: u32) -> Vec<u8> {
    encode_message(
        rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        &[],
    )
}
