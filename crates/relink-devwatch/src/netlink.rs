//! The RDMA netlink monitor (`NETLINK_RDMA`, kernel >= 6.12): constants, a
//! parser for its messages, and [`NetlinkMonitor`], a socket that yields them.
//!
//! # Wire format
//!
//! Every message is a `struct nlmsghdr` (16 bytes, host byte order:
//! `nlmsg_len` u32, `nlmsg_type` u16, `nlmsg_flags` u16, `nlmsg_seq` u32,
//! `nlmsg_pid` u32) followed directly by netlink attributes; the RDMA
//! interface has no family header (iproute2's `rdma/monitor.c` parses with
//! `mnl_attr_parse(nlh, 0, ...)`). Each attribute is a `struct nlattr`
//! (`nla_len` u16 including its 4-byte header, `nla_type` u16) and its
//! payload, padded to 4 bytes. The message type packs a client and an
//! operation: `RDMA_NL_GET_TYPE(client, op) = (client << 10) + op`
//! (`include/uapi/rdma/rdma_netlink.h`); the device interface is client
//! `RDMA_NL_NLDEV` = 5, so a monitor event has type `(5 << 10) + 28` = 5148.
//!
//! `rdma_nl_notify_event` (`drivers/infiniband/core/nldev.c`) multicasts to
//! group `RDMA_NL_GROUP_NOTIFY` = 4, one message per event:
//!
//! | event | attributes, in the order the kernel puts them |
//! |---|---|
//! | REGISTER, UNREGISTER, RENAME | `DEV_INDEX` u32, `DEV_NAME` string (`fill_nldev_handle`), `EVENT_TYPE` u8 |
//! | NETDEV_ATTACH, NETDEV_DETACH | `DEV_INDEX`, `DEV_NAME`, `PORT_INDEX` u32, `NDEV_INDEX` u32, `NDEV_NAME` string (`fill_mon_netdev_association`; the netdev pair only when there is one), `EVENT_TYPE` |
//! | NETDEV_RENAME | `NDEV_INDEX`, `NDEV_NAME` (`fill_mon_netdev_rename`), `EVENT_TYPE` |
//!
//! When the netdev lives in another network namespace the kernel sends
//! `EVENT_TYPE` alone, so every other attribute is optional here.
//!
//! Debian 12's headers predate these constants; they are defined below with
//! the header lines they come from.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use netlink_sys::Socket;
use relink_fabric::Guid;

/// `NETLINK_RDMA` (`include/uapi/linux/netlink.h`: `#define NETLINK_RDMA 20`).
pub const NETLINK_RDMA: isize = 20;

/// `RDMA_NL_NLDEV`, the RDMA device interface client
/// (`rdma_netlink.h`: `RDMA_NL_IWCM = 2, RDMA_NL_RSVD, RDMA_NL_LS, RDMA_NL_NLDEV`).
pub const RDMA_NL_NLDEV: u16 = 5;

/// `RDMA_NL_GROUP_NOTIFY`, the monitor's multicast group
/// (`rdma_netlink.h`: `RDMA_NL_GROUP_IWPM = 2, RDMA_NL_GROUP_LS, RDMA_NL_GROUP_NOTIFY`).
pub const RDMA_NL_GROUP_NOTIFY: u32 = 4;

/// `RDMA_NLDEV_CMD_GET` (`enum rdma_nldev_command`: `UNSPEC, GET, ...`).
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_SYS_GET` (`..., NEWLINK, DELLINK, PORT_GET, SYS_GET, ...` = 6).
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
/// `RDMA_NLDEV_CMD_MONITOR` (after `NEWDEV` = 26 and `DELDEV` = 27).
pub const RDMA_NLDEV_CMD_MONITOR: u16 = 28;

/// `RDMA_NLDEV_ATTR_PAD` (= `RDMA_NLDEV_ATTR_UNSPEC` = 0): alignment filler.
pub const RDMA_NLDEV_ATTR_PAD: u16 = 0;
/// `RDMA_NLDEV_ATTR_DEV_INDEX`, u32 (`enum rdma_nldev_attr`, 1).
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME`, string (2).
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_ATTR_PORT_INDEX`, u32 (3).
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
/// `RDMA_NLDEV_ATTR_NODE_GUID`, u64 in host byte order (6).
pub const RDMA_NLDEV_ATTR_NODE_GUID: u16 = 6;
/// `RDMA_NLDEV_ATTR_NDEV_INDEX`, u32 (50: after `RES_UNSAFE_GLOBAL_RKEY` = 49).
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
/// `RDMA_NLDEV_ATTR_NDEV_NAME`, string (51).
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
/// `RDMA_NLDEV_ATTR_EVENT_TYPE`, u8 (102: after `NAME_ASSIGN_TYPE` = 101).
pub const RDMA_NLDEV_ATTR_EVENT_TYPE: u16 = 102;
/// `RDMA_NLDEV_SYS_ATTR_MONITOR_MODE`, u8 (103): present (= 1) in the
/// `SYS_GET` reply of kernels that have the monitor; iproute2's
/// `mon_is_supported` checks it.
pub const RDMA_NLDEV_SYS_ATTR_MONITOR_MODE: u16 = 103;

/// `NLMSG_NOOP` (`include/uapi/linux/netlink.h`).
pub const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR`: an error or, with error 0, an acknowledgement.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`.
pub const NLMSG_OVERRUN: u16 = 4;

/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_MULTI`.
pub const NLM_F_MULTI: u16 = 0x2;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;

/// Size of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// Size of `struct nlattr`.
pub const NLA_HDRLEN: usize = 4;
/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER`, masked off attribute types.
const NLA_FLAGS: u16 = 0x8000 | 0x4000;

/// `RDMA_NL_GET_TYPE(client, op)`: `((client << 10) + op)`.
pub const fn rdma_nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// `RDMA_NL_GET_CLIENT(type)`: `((type & (((1 << 6) - 1) << 10)) >> 10)`.
pub const fn rdma_nl_get_client(kind: u16) -> u16 {
    (kind & (((1 << 6) - 1) << 10)) >> 10
}

/// `RDMA_NL_GET_OP(type)`: `(type & ((1 << 10) - 1))`.
pub const fn rdma_nl_get_op(kind: u16) -> u16 {
    kind & ((1 << 10) - 1)
}

/// The message type of a monitor event: 5148.
pub const MONITOR_MSG_TYPE: u16 = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_MONITOR);

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
    /// `nlmsg_type`.
    pub kind: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
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

const fn align4(n: usize) -> usize {
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

fn attr_u8(attr: u16, p: &[u8]) -> Result<u8, ParseError> {
    match p {
        [b] => Ok(*b),
        _ => Err(ParseError::BadAttrSize {
            attr,
            len: p.len(),
            expected: "1 (u8)",
        }),
    }
}

fn attr_u32(attr: u16, p: &[u8]) -> Result<u32, ParseError> {
    match <[u8; 4]>::try_from(p) {
        Ok(b) => Ok(u32::from_ne_bytes(b)),
        Err(_) => Err(ParseError::BadAttrSize {
            attr,
            len: p.len(),
            expected: "4 (u32)",
        }),
    }
}

fn attr_u64(attr: u16, p: &[u8]) -> Result<u64, ParseError> {
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
fn attr_str(attr: u16, p: &[u8]) -> Result<String, ParseError> {
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

/// `enum rdma_nl_notify_event_type` (`rdma_netlink.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyEventType {
    /// `RDMA_REGISTER_EVENT` = 0.
    Register,
    /// `RDMA_UNREGISTER_EVENT` = 1.
    Unregister,
    /// `RDMA_NETDEV_ATTACH_EVENT` = 2.
    NetdevAttach,
    /// `RDMA_NETDEV_DETACH_EVENT` = 3.
    NetdevDetach,
    /// `RDMA_RENAME_EVENT` = 4.
    Rename,
    /// `RDMA_NETDEV_RENAME_EVENT` = 5.
    NetdevRename,
    /// A value this crate does not know (a newer kernel).
    Unknown(u8),
}

impl NotifyEventType {
    /// From the `RDMA_NLDEV_ATTR_EVENT_TYPE` value.
    pub fn from_u8(v: u8) -> NotifyEventType {
        match v {
            0 => NotifyEventType::Register,
            1 => NotifyEventType::Unregister,
            2 => NotifyEventType::NetdevAttach,
            3 => NotifyEventType::NetdevDetach,
            4 => NotifyEventType::Rename,
            5 => NotifyEventType::NetdevRename,
            v => NotifyEventType::Unknown(v),
        }
    }

    /// The `RDMA_NLDEV_ATTR_EVENT_TYPE` value.
    pub fn to_u8(self) -> u8 {
        match self {
            NotifyEventType::Register => 0,
            NotifyEventType::Unregister => 1,
            NotifyEventType::NetdevAttach => 2,
            NotifyEventType::NetdevDetach => 3,
            NotifyEventType::Rename => 4,
            NotifyEventType::NetdevRename => 5,
            NotifyEventType::Unknown(v) => v,
        }
    }
}

impl fmt::Display for NotifyEventType {
    /// As iproute2's `rdma monitor` prints it (`mon_print_event_type`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotifyEventType::Register => f.write_str("[REGISTER]"),
            NotifyEventType::Unregister => f.write_str("[UNREGISTER]"),
            NotifyEventType::NetdevAttach => f.write_str("[NETDEV_ATTACH]"),
            NotifyEventType::NetdevDetach => f.write_str("[NETDEV_DETACH]"),
            NotifyEventType::Rename => f.write_str("[RENAME]"),
            NotifyEventType::NetdevRename => f.write_str("[NETDEV_RENAME]"),
            NotifyEventType::Unknown(v) => write!(f, "[UNKNOWN 0x{v:02x}]"),
        }
    }
}

/// One RDMA monitor event (`RDMA_NLDEV_CMD_MONITOR`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MonitorEvent {
    /// `RDMA_NLDEV_ATTR_EVENT_TYPE`.
    pub event: NotifyEventType,
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`: the kernel `ib_device` index.
    pub dev_index: Option<u32>,
    /// `RDMA_NLDEV_ATTR_DEV_NAME`.
    pub dev_name: Option<String>,
    /// `RDMA_NLDEV_ATTR_PORT_INDEX` (netdev events).
    pub port: Option<u32>,
    /// `RDMA_NLDEV_ATTR_NDEV_INDEX`: the netdev's ifindex.
    pub netdev_index: Option<u32>,
    /// `RDMA_NLDEV_ATTR_NDEV_NAME`.
    pub netdev_name: Option<String>,
}

impl MonitorEvent {
    /// An event with only its type set.
    pub fn new(event: NotifyEventType) -> MonitorEvent {
        MonitorEvent {
            event,
            dev_index: None,
            dev_name: None,
            port: None,
            netdev_index: None,
            netdev_name: None,
        }
    }

    /// Parses the payload (attributes) of a monitor message.
    pub fn from_attributes(payload: &[u8]) -> Result<MonitorEvent, ParseError> {
        let mut ev = MonitorEvent::new(NotifyEventType::Register);
        let mut event = None;
        for a in attributes(payload) {
            let (attr, p) = a?;
            match attr {
                RDMA_NLDEV_ATTR_EVENT_TYPE => {
                    event = Some(NotifyEventType::from_u8(attr_u8(attr, p)?))
                }
                RDMA_NLDEV_ATTR_DEV_INDEX => ev.dev_index = Some(attr_u32(attr, p)?),
                RDMA_NLDEV_ATTR_DEV_NAME => ev.dev_name = Some(attr_str(attr, p)?),
                RDMA_NLDEV_ATTR_PORT_INDEX => ev.port = Some(attr_u32(attr, p)?),
                RDMA_NLDEV_ATTR_NDEV_INDEX => ev.netdev_index = Some(attr_u32(attr, p)?),
                RDMA_NLDEV_ATTR_NDEV_NAME => ev.netdev_name = Some(attr_str(attr, p)?),
                _ => {}
            }
        }
        // iproute2's mon_show_cb: no EVENT_TYPE is an error.
        ev.event = event.ok_or(ParseError::MissingAttr {
            attr: RDMA_NLDEV_ATTR_EVENT_TYPE,
            name: "RDMA_NLDEV_ATTR_EVENT_TYPE",
        })?;
        Ok(ev)
    }

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

impl fmt::Display for MonitorEvent {
    /// One line as iproute2's `rdma monitor` prints it (`mon_show_cb`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\t", self.event)?;
        if let Some(i) = self.dev_index {
            write!(f, "dev {i}")?;
        }
        if let Some(n) = &self.dev_name {
            write!(f, " {n}")?;
        }
        if let Some(p) = self.port {
            write!(f, " port {p}")?;
        }
        if let Some(i) = self.netdev_index {
            write!(f, " netdev {i}")?;
        }
        if let Some(n) = &self.netdev_name {
            write!(f, " {n}")?;
        }
        Ok(())
    }
}

/// A device from an `RDMA_NLDEV_CMD_GET` reply (`fill_dev_info`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NldevDevice {
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`.
    pub index: u32,
    /// `RDMA_NLDEV_ATTR_DEV_NAME`.
    pub name: String,
    /// `RDMA_NLDEV_ATTR_NODE_GUID` (host byte order on the wire).
    pub node_guid: Option<Guid>,
}

impl NldevDevice {
    /// Parses the payload of a `RDMA_NLDEV_CMD_GET` reply.
    pub fn from_attributes(payload: &[u8]) -> Result<NldevDevice, ParseError> {
        let (mut index, mut name, mut node_guid) = (None, None, None);
        for a in attributes(payload) {
            let (attr, p) = a?;
            match attr {
                RDMA_NLDEV_ATTR_DEV_INDEX => index = Some(attr_u32(attr, p)?),
                RDMA_NLDEV_ATTR_DEV_NAME => name = Some(attr_str(attr, p)?),
                RDMA_NLDEV_ATTR_NODE_GUID => node_guid = Some(Guid(attr_u64(attr, p)?)),
                _ => {}
            }
        }
        Ok(NldevDevice {
            index: index.ok_or(ParseError::MissingAttr {
                attr: RDMA_NLDEV_ATTR_DEV_INDEX,
                name: "RDMA_NLDEV_ATTR_DEV_INDEX",
            })?,
            name: name.ok_or(ParseError::MissingAttr {
                attr: RDMA_NLDEV_ATTR_DEV_NAME,
                name: "RDMA_NLDEV_ATTR_DEV_NAME",
            })?,
            node_guid,
        })
    }
}

/// One message of the RDMA netlink interface, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RdmaMessage {
    /// A monitor event.
    Monitor(MonitorEvent),
    /// A device from a `RDMA_NLDEV_CMD_GET` reply.
    Device(NldevDevice),
    /// A `RDMA_NLDEV_CMD_SYS_GET` reply; `monitor_mode` is
    /// `RDMA_NLDEV_SYS_ATTR_MONITOR_MODE`, absent before kernel 6.12.
    Sys {
        /// The monitor mode attribute, if sent.
        monitor_mode: Option<u8>,
    },
    /// `NLMSG_ERROR`: `errno` is the positive error number, 0 for an ack.
    Error {
        /// The error number (0: acknowledgement).
        errno: i32,
    },
    /// `NLMSG_DONE`: the end of a dump.
    Done,
    /// Any other message (its type), left undecoded.
    Other {
        /// `nlmsg_type`.
        kind: u16,
    },
}

/// Decodes one message from its header and payload.
pub fn parse_message(hdr: &NlMsgHeader, payload: &[u8]) -> Result<RdmaMessage, ParseError> {
    const GET: u16 = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
    const SYS_GET: u16 = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET);
    match hdr.kind {
        MONITOR_MSG_TYPE => MonitorEvent::from_attributes(payload).map(RdmaMessage::Monitor),
        GET => NldevDevice::from_attributes(payload).map(RdmaMessage::Device),
        SYS_GET => {
            let mut monitor_mode = None;
            for a in attributes(payload) {
                let (attr, p) = a?;
                if attr == RDMA_NLDEV_SYS_ATTR_MONITOR_MODE {
                    monitor_mode = Some(attr_u8(attr, p)?);
                }
            }
            Ok(RdmaMessage::Sys { monitor_mode })
        }
        NLMSG_ERROR => {
            let b = payload
                .get(..4)
                .ok_or(ParseError::TruncatedError { len: payload.len() })?;
            let e = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            Ok(RdmaMessage::Error {
                errno: e.checked_neg().unwrap_or(i32::MAX),
            })
        }
        NLMSG_DONE => Ok(RdmaMessage::Done),
        kind => Ok(RdmaMessage::Other { kind }),
    }
}

/// Decodes every message of a datagram.
pub fn parse_datagram(
    buf: &[u8],
) -> impl Iterator<Item = Result<(NlMsgHeader, RdmaMessage), ParseError>> + '_ {
    messages(buf).map(|m| {
        let (hdr, payload) = m?;
        parse_message(&hdr, payload).map(|msg| (hdr, msg))
    })
}

/// Parses one whole monitor message (header and attributes), checking its
/// type; bytes past `nlmsg_len` are ignored.
pub fn parse_monitor_event(msg: &[u8]) -> Result<MonitorEvent, ParseError> {
    let (hdr, payload) = messages(msg)
        .next()
        .unwrap_or(Err(ParseError::TruncatedHeader { have: 0 }))?;
    if hdr.kind != MONITOR_MSG_TYPE {
        return Err(ParseError::WrongType {
            kind: hdr.kind,
            expected: MONITOR_MSG_TYPE,
        });
    }
    MonitorEvent::from_attributes(payload)
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

// ---------------------------------------------------------------------------
// Sockets.

/// Receive buffer size: more than a netlink dump datagram (at most 32 KiB).
pub(crate) const RECV_BUF: usize = 64 * 1024;

/// Why a monitor could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// This kernel cannot provide it; fall back to another backend.
    #[error("unsupported: {reason}")]
    Unsupported {
        /// What was missing.
        reason: String,
    },
    /// A system call failed for another reason.
    #[error("{context}: {source}")]
    Io {
        /// The step that failed.
        context: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Why a receive failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The socket buffer overflowed (`ENOBUFS`): events were lost, the
    /// caller must resynchronise (list the devices again).
    #[error("netlink receive buffer overrun: events lost")]
    Overrun,
    /// Nothing to read on a non-blocking socket.
    #[error("no datagram ready")]
    WouldBlock,
    /// Another socket error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One datagram: bytes in `buf`, the sender's port. Truncation (a datagram
/// larger than the buffer) is an error.
pub(crate) fn recv_datagram(sock: &Socket, buf: &mut Vec<u8>) -> Result<u32, RecvError> {
    buf.clear();
    buf.reserve(RECV_BUF);
    match sock.recv_from(buf, libc::MSG_TRUNC) {
        Ok((n, addr)) => {
            if n > buf.len() {
                return Err(RecvError::Io(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink datagram of {n} bytes truncated to {}", buf.len()),
                )));
            }
            Ok(addr.port_number())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Err(RecvError::Overrun),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(RecvError::WouldBlock),
        Err(e) => Err(RecvError::Io(e)),
    }
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPROTONOSUPPORT | libc::EINVAL | libc::ENOENT | libc::EPERM | libc::EOPNOTSUPP)
    )
}

fn open_rdma_socket() -> Result<Socket, OpenError> {
    let mut sock = Socket::new(NETLINK_RDMA).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) {
            OpenError::Unsupported {
                reason: format!(
                    "NETLINK_RDMA is not available ({e}): ib_core is not loaded or the kernel has no RDMA"
                ),
            }
        } else {
            OpenError::Io {
                context: "socket(NETLINK_RDMA)",
                source: e,
            }
        }
    })?;
    sock.bind_auto().map_err(|e| OpenError::Io {
        context: "bind(NETLINK_RDMA)",
        source: e,
    })?;
    Ok(sock)
}

fn wait_readable(fd: BorrowedFd<'_>, deadline: Instant) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ts = Timespec::try_from(left).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends `request` on a fresh `NETLINK_RDMA` socket and collects the replies
/// up to `NLMSG_DONE` or the acknowledgement.
fn query(request: &[u8], timeout: Duration) -> Result<Vec<RdmaMessage>, OpenError> {
    let sock = open_rdma_socket()?;
    let seq = NlMsgHeader::parse(request).map(|h| h.seq).unwrap_or(0);
    let io = |context| move |source| OpenError::Io { context, source };
    sock.send(request, 0).map_err(|e| {
        if is_unsupported(&e) {
            OpenError::Unsupported {
                reason: format!("RDMA netlink request refused: {e}"),
            }
        } else {
            OpenError::Io {
                context: "send(NETLINK_RDMA)",
                source: e,
            }
        }
    })?;
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(RECV_BUF);
    let mut out = Vec::new();
    loop {
        if !wait_readable(sock.as_fd(), deadline).map_err(io("poll(NETLINK_RDMA)"))? {
            return Err(OpenError::Io {
                context: "waiting for the RDMA netlink reply",
                source: io::ErrorKind::TimedOut.into(),
            });
        }
        let from = match recv_datagram(&sock, &mut buf) {
            Ok(p) => p,
            Err(RecvError::Io(e)) => return Err(io("recv(NETLINK_RDMA)")(e)),
            Err(RecvError::WouldBlock) => continue,
            Err(RecvError::Overrun) => {
                return Err(io("recv(NETLINK_RDMA)")(io::Error::from_raw_os_error(
                    libc::ENOBUFS,
                )))
            }
        };
        if from != 0 {
            continue;
        }
        for m in parse_datagram(&buf) {
            let (hdr, msg) = m.map_err(|e| OpenError::Io {
                context: "parsing the RDMA netlink reply",
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
            if hdr.seq != seq {
                continue;
            }
            match msg {
                RdmaMessage::Done => return Ok(out),
                RdmaMessage::Error { errno: 0 } => return Ok(out),
                RdmaMessage::Error { errno } => {
                    let e = io::Error::from_raw_os_error(errno);
                    return Err(if is_unsupported(&e) {
                        OpenError::Unsupported {
                            reason: format!("RDMA netlink request refused: {e}"),
                        }
                    } else {
                        OpenError::Io {
                            context: "RDMA netlink request",
                            source: e,
                        }
                    });
                }
                m => out.push(m),
            }
        }
    }
}

/// How long a request waits for the kernel's reply.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether this kernel has the RDMA monitor: asks `RDMA_NLDEV_CMD_SYS_GET`
/// and looks for `RDMA_NLDEV_SYS_ATTR_MONITOR_MODE` = 1, as iproute2's
/// `mon_is_supported` does. `Err(Unsupported)` says why not.
pub fn probe_monitor() -> Result<(), OpenError> {
    let replies = query(&sys_get_request(1), QUERY_TIMEOUT)?;
    let mode = replies.iter().find_map(|m| match m {
        RdmaMessage::Sys { monitor_mode } => Some(*monitor_mode),
        _ => None,
    });
    match mode {
        Some(Some(m)) if m != 0 => Ok(()),
        Some(_) => Err(OpenError::Unsupported {
            reason: "the kernel has no RDMA monitor (RDMA_NLDEV_SYS_ATTR_MONITOR_MODE absent; needs >= 6.12)".into(),
        }),
        None => Err(OpenError::Unsupported {
            reason: "no RDMA_NLDEV_CMD_SYS_GET reply".into(),
        }),
    }
}

/// Every RDMA device of this network namespace, from a
/// `RDMA_NLDEV_CMD_GET` dump (any kernel with RDMA netlink, >= 4.16): the
/// only place user space can read the kernel index from.
pub fn list_devices() -> Result<Vec<NldevDevice>, OpenError> {
    Ok(query(&device_dump_request(1), QUERY_TIMEOUT)?
        .into_iter()
        .filter_map(|m| match m {
            RdmaMessage::Device(d) => Some(d),
            _ => None,
        })
        .collect())
}

/// A `NETLINK_RDMA` socket joined to `RDMA_NL_GROUP_NOTIFY`.
///
/// [`open`](NetlinkMonitor::open) joins the group first and then probes for
/// support, so no event between the two is lost.
#[derive(Debug)]
pub struct NetlinkMonitor {
    sock: Socket,
    buf: Vec<u8>,
}

impl NetlinkMonitor {
    /// Opens the socket, joins the group and checks that the kernel has the
    /// monitor. `Err(OpenError::Unsupported)` means: fall back.
    pub fn open() -> Result<NetlinkMonitor, OpenError> {
        let sock = open_rdma_socket()?;
        sock.add_membership(RDMA_NL_GROUP_NOTIFY).map_err(|e| {
            if is_unsupported(&e) {
                OpenError::Unsupported {
                    reason: format!("cannot join RDMA_NL_GROUP_NOTIFY: {e}"),
                }
            } else {
                OpenError::Io {
                    context: "join RDMA_NL_GROUP_NOTIFY",
                    source: e,
                }
            }
        })?;
        // Fewer overruns on bursts (a replug sends several events); the
        // kernel caps it at net.core.rmem_max.
        let _ = sock.set_rx_buf_sz(1i32 << 20);
        probe_monitor()?;
        Ok(NetlinkMonitor {
            sock,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Makes [`recv`](NetlinkMonitor::recv) return
    /// [`RecvError::WouldBlock`] instead of waiting.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.sock.set_non_blocking(nonblocking)
    }

    /// Reads one datagram and returns its monitor events (usually one).
    /// Messages not from the kernel and messages of other types are
    /// skipped; a malformed message is returned as its parse error.
    pub fn recv(&mut self) -> Result<Vec<Result<MonitorEvent, ParseError>>, RecvError> {
        let from = recv_datagram(&self.sock, &mut self.buf)?;
        if from != 0 {
            return Ok(Vec::new());
        }
        Ok(parse_datagram(&self.buf)
            .filter_map(|m| match m {
                Ok((_, RdmaMessage::Monitor(ev))) => Some(Ok(ev)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect())
    }
}

impl AsFd for NetlinkMonitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a message byte by byte, the way the kernel lays it out, without
    /// going through this module's encoder.
    struct Raw(Vec<u8>);

    impl Raw {
        fn msg(kind: u16) -> Raw {
            let mut v = vec![0u8; 16];
            v[4..6].copy_from_slice(&kind.to_ne_bytes());
            Raw(v)
        }
        fn attr(mut self, ty: u16, payload: &[u8]) -> Raw {
            let len = (4 + payload.len()) as u16;
            self.0.extend_from_slice(&len.to_ne_bytes());
            self.0.extend_from_slice(&ty.to_ne_bytes());
            self.0.extend_from_slice(payload);
            while self.0.len() % 4 != 0 {
                self.0.push(0);
            }
            self
        }
        fn done(mut self) -> Vec<u8> {
            let len = self.0.len() as u32;
            self.0[0..4].copy_from_slice(&len.to_ne_bytes());
            self.0
        }
    }

    #[test]
    fn constants_match_the_header() {
        // rdma_netlink.h: #define RDMA_NL_GET_TYPE(client, op) ((client << 10) + op)
        assert_eq!(MONITOR_MSG_TYPE, (5 << 10) + 28);
        assert_eq!(MONITOR_MSG_TYPE, 5148);
        assert_eq!(rdma_nl_get_client(MONITOR_MSG_TYPE), RDMA_NL_NLDEV);
        assert_eq!(rdma_nl_get_op(MONITOR_MSG_TYPE), RDMA_NLDEV_CMD_MONITOR);
        for v in 0..=255u8 {
            assert_eq!(NotifyEventType::from_u8(v).to_u8(), v);
        }
    }

    #[test]
    fn register_event_as_the_kernel_sends_it() {
        // nldev.c rdma_nl_notify_event, RDMA_REGISTER_EVENT:
        //   fill_nldev_handle(): nla_put_u32(DEV_INDEX), nla_put_string(DEV_NAME)
        //   nla_put_u8(msg, RDMA_NLDEV_ATTR_EVENT_TYPE, type)
        let msg = Raw::msg(5148)
            .attr(1, &2u32.to_ne_bytes()) // RDMA_NLDEV_ATTR_DEV_INDEX = 1
            .attr(2, b"rxe0\0") // RDMA_NLDEV_ATTR_DEV_NAME = 2
            .attr(102, &[0]) // RDMA_NLDEV_ATTR_EVENT_TYPE = 102, RDMA_REGISTER_EVENT = 0
            .done();
        // 16 header + 8 + 12 (4 + "rxe0\0" padded to 8) + 8 (4 + u8 padded)
        assert_eq!(msg.len(), 44);
        let ev = parse_monitor_event(&msg).unwrap();
        assert_eq!(
            ev,
            MonitorEvent {
                event: NotifyEventType::Register,
                dev_index: Some(2),
                dev_name: Some("rxe0".into()),
                port: None,
                netdev_index: None,
                netdev_name: None,
            }
        );
        assert_eq!(ev.encode(0), msg, "encoder matches the kernel layout");
        assert_eq!(ev.to_string(), "[REGISTER]\tdev 2 rxe0");
    }

    #[test]
    fn netdev_attach_event() {
        // fill_mon_netdev_association(): DEV_INDEX, DEV_NAME, PORT_INDEX (3),
        // then NDEV_INDEX (50) and NDEV_NAME (51) when the port has a netdev.
        let msg = Raw::msg(5148)
            .attr(1, &4u32.to_ne_bytes())
            .attr(2, b"mlx5_0\0")
            .attr(3, &30u32.to_ne_bytes())
            .attr(50, &4u32.to_ne_bytes())
            .attr(51, b"eth2\0")
            .attr(102, &[2]) // RDMA_NETDEV_ATTACH_EVENT = 2
            .done();
        let ev = parse_monitor_event(&msg).unwrap();
        assert_eq!(ev.event, NotifyEventType::NetdevAttach);
        assert_eq!(ev.port, Some(30));
        assert_eq!(ev.netdev_index, Some(4));
        assert_eq!(ev.netdev_name.as_deref(), Some("eth2"));
        // The line from the kernel commit message, in iproute2's current format.
        assert_eq!(
            ev.to_string(),
            "[NETDEV_ATTACH]\tdev 4 mlx5_0 port 30 netdev 4 eth2"
        );
        assert_eq!(ev.encode(0), msg);
    }

    #[test]
    fn event_type_alone_is_valid() {
        // fill_mon_netdev_association() puts nothing when the netdev is in
        // another namespace; fill_mon_netdev_rename() puts only the netdev.
        let msg = Raw::msg(5148).attr(102, &[3]).done();
        let ev = parse_monitor_event(&msg).unwrap();
        assert_eq!(ev, MonitorEvent::new(NotifyEventType::NetdevDetach));
        let msg = Raw::msg(5148)
            .attr(50, &7u32.to_ne_bytes())
            .attr(51, b"eth9\0")
            .attr(102, &[5])
            .done();
        let ev = parse_monitor_event(&msg).unwrap();
        assert_eq!(ev.event, NotifyEventType::NetdevRename);
        assert_eq!(ev.to_string(), "[NETDEV_RENAME]\t netdev 7 eth9");
    }

    #[test]
    fn flags_on_attribute_types_are_masked() {
        let msg = Raw::msg(5148).attr(102 | 0x4000, &[1]).done();
        assert_eq!(
            parse_monitor_event(&msg).unwrap().event,
            NotifyEventType::Unregister
        );
    }

    #[test]
    fn unknown_attributes_and_event_types_pass() {
        let msg = Raw::msg(5148)
            .attr(0, &[]) // RDMA_NLDEV_ATTR_PAD
            .attr(999, b"whatever")
            .attr(102, &[0x42])
            .done();
        let ev = parse_monitor_event(&msg).unwrap();
        assert_eq!(ev.event, NotifyEventType::Unknown(0x42));
        assert_eq!(ev.to_string(), "[UNKNOWN 0x42]\t");
    }

    #[test]
    fn typed_errors() {
        assert_eq!(
            parse_monitor_event(&[0; 10]),
            Err(ParseError::TruncatedHeader { have: 10 })
        );
        let mut m = Raw::msg(5148).attr(102, &[0]).done();
        m[0..4].copy_from_slice(&100u32.to_ne_bytes());
        assert_eq!(
            parse_monitor_event(&m),
            Err(ParseError::BadMessageLength {
                len: 100,
                available: 24
            })
        );
        m[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(
            parse_monitor_event(&m),
            Err(ParseError::BadMessageLength { len: 8, .. })
        ));
        let m = Raw::msg(5148).attr(2, b"rxe0\0").done();
        assert_eq!(
            parse_monitor_event(&m),
            Err(ParseError::MissingAttr {
                attr: 102,
                name: "RDMA_NLDEV_ATTR_EVENT_TYPE"
            })
        );
        let m = Raw::msg(5148).attr(1, &[1, 2]).attr(102, &[0]).done();
        assert!(matches!(
            parse_monitor_event(&m),
            Err(ParseError::BadAttrSize {
                attr: 1,
                len: 2,
                ..
            })
        ));
        let m = Raw::msg(5148).attr(2, b"rxe0").attr(102, &[0]).done();
        assert_eq!(
            parse_monitor_event(&m),
            Err(ParseError::BadString { attr: 2 })
        );
        let m = Raw::msg(5148).attr(2, b"\xff\0").attr(102, &[0]).done();
        assert_eq!(
            parse_monitor_event(&m),
            Err(ParseError::BadString { attr: 2 })
        );
        let mut m = Raw::msg(5148).attr(102, &[0]).done();
        m[16..18].copy_from_slice(&40u16.to_ne_bytes());
        assert!(matches!(
            parse_monitor_event(&m),
            Err(ParseError::BadAttrLength {
                attr: 102,
                len: 40,
                ..
            })
        ));
        let m = Raw::msg(5121).attr(102, &[0]).done();
        assert_eq!(
            parse_monitor_event(&m),
            Err(ParseError::WrongType {
                kind: 5121,
                expected: 5148
            })
        );
    }

    #[test]
    fn datagram_with_several_messages() {
        // A dump reply: two RDMA_NLDEV_CMD_GET messages and NLMSG_DONE.
        let get = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
        let mut buf = Raw::msg(get)
            .attr(1, &0u32.to_ne_bytes())
            .attr(2, b"rxe0\0")
            .attr(0, &[]) // the pad nla_put_u64_64bit adds
            .attr(6, &0x0011_2233_4455_6677u64.to_ne_bytes())
            .done();
        buf.extend(
            Raw::msg(get)
                .attr(1, &3u32.to_ne_bytes())
                .attr(2, b"rxe1\0")
                .done(),
        );
        buf.extend(Raw::msg(NLMSG_DONE).attr(0, &[0, 0, 0, 0]).done());
        let msgs: Vec<_> = parse_datagram(&buf).map(|m| m.unwrap().1).collect();
        assert_eq!(
            msgs,
            vec![
                RdmaMessage::Device(NldevDevice {
                    index: 0,
                    name: "rxe0".into(),
                    node_guid: Some(Guid(0x0011_2233_4455_6677)),
                }),
                RdmaMessage::Device(NldevDevice {
                    index: 3,
                    name: "rxe1".into(),
                    node_guid: None,
                }),
                RdmaMessage::Done,
            ]
        );
    }

    #[test]
    fn sys_get_reply_and_ack() {
        let sys = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET);
        let mut buf = Raw::msg(sys)
            .attr(66, &[1]) // RDMA_NLDEV_SYS_ATTR_NETNS_MODE
            .attr(103, &[1]) // RDMA_NLDEV_SYS_ATTR_MONITOR_MODE
            .done();
        // NLMSG_ERROR with error 0 and the request's header: the ack.
        let mut ack = Raw::msg(NLMSG_ERROR);
        ack.0.extend_from_slice(&0i32.to_ne_bytes());
        ack.0.extend_from_slice(&sys_get_request(1));
        buf.extend(ack.done());
        let msgs: Vec<_> = parse_datagram(&buf).map(|m| m.unwrap().1).collect();
        assert_eq!(
            msgs,
            vec![
                RdmaMessage::Sys {
                    monitor_mode: Some(1)
                },
                RdmaMessage::Error { errno: 0 }
            ]
        );
        let mut err = Raw::msg(NLMSG_ERROR);
        err.0.extend_from_slice(&(-95i32).to_ne_bytes());
        let m: Vec<_> = parse_datagram(&err.done()).collect();
        assert_eq!(m[0].as_ref().unwrap().1, RdmaMessage::Error { errno: 95 });
    }

    #[test]
    fn requests_have_the_expected_header() {
        let r = sys_get_request(7);
        let h = NlMsgHeader::parse(&r).unwrap();
        assert_eq!(
            h,
            NlMsgHeader {
                len: 16,
                kind: 5126,
                flags: 0x5,
                seq: 7,
                pid: 0
            }
        );
        let h = NlMsgHeader::parse(&device_dump_request(9)).unwrap();
        assert_eq!((h.kind, h.flags), (5121, 0x301));
    }
}
