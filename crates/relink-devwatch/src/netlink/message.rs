//! RDMA netlink messages decoded: monitor events, devices of a
//! `RDMA_NLDEV_CMD_GET` dump, `SYS_GET` replies, errors and acknowledgements.

use std::fmt;

use relink_fabric::Guid;

use super::consts::*;
use super::parse::{attr_str, attr_u32, attr_u64, attr_u8, attributes, messages};
use super::parse::{NlMsgHeader, ParseError};

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
    /// What happened (`RDMA_NLDEV_ATTR_EVENT_TYPE`, the one attribute
    /// every event has).
    pub event: NotifyEventType,
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`: the kernel `ib_device` index; `None` in
    /// `NETDEV_RENAME` events and when the netdev is in another namespace.
    pub dev_index: Option<u32>,
    /// `RDMA_NLDEV_ATTR_DEV_NAME`; `None` when `dev_index` is.
    pub dev_name: Option<String>,
    /// `RDMA_NLDEV_ATTR_PORT_INDEX` (netdev events).
    pub port: Option<u32>,
    /// `RDMA_NLDEV_ATTR_NDEV_INDEX`: the netdev's ifindex.
    pub netdev_index: Option<u32>,
    /// `RDMA_NLDEV_ATTR_NDEV_NAME`: the netdev's name; `None` when there
    /// is no netdev or it is in another namespace.
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
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`: the kernel `ib_device` index (new on
    /// every registration).
    pub index: u32,
    /// `RDMA_NLDEV_ATTR_DEV_NAME`, e.g. `rxe0`.
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
        /// `None` when the kernel did not send it: it has no monitor.
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
