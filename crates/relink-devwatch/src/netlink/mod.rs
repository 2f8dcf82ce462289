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
//! Debian 12's headers predate these constants; this module defines them,
//! each with the header line it comes from.
//!
//! # Files
//!
//! | file | its one concern |
//! |---|---|
//! | `consts.rs` | the kernel's constants (`rdma_netlink.h`, `netlink.h`) and the message type macros |
//! | `parse.rs` | the netlink layer: headers, the messages of a datagram, the attributes of a message, typed attribute payloads, [`ParseError`] |
//! | `message.rs` | RDMA messages decoded: [`MonitorEvent`], [`NldevDevice`], [`RdmaMessage`], [`parse_datagram`] |
//! | `encode.rs` | messages built: the requests this crate sends, and events as the kernel sends them (for tests and simulated sources) |
//! | `socket.rs` | the `NETLINK_RDMA` socket: opening it, receiving one datagram, [`OpenError`] and [`RecvError`] |
//! | `query.rs` | request and reply: [`probe_monitor`] (is there a monitor?) and [`list_devices`] (the device dump) |
//! | `monitor.rs` | [`NetlinkMonitor`], the socket joined to the monitor's multicast group |

mod consts;
mod encode;
mod message;
mod monitor;
mod parse;
mod query;
mod socket;
#[cfg(test)]
mod tests;

pub use consts::*;
pub use encode::{device_dump_request, encode_message, sys_get_request};
pub use message::{
    parse_datagram, parse_message, parse_monitor_event, MonitorEvent, NldevDevice, NotifyEventType,
    RdmaMessage,
};
pub use monitor::NetlinkMonitor;
pub use parse::{attributes, messages, Attributes, Messages, NlMsgHeader, ParseError};
pub use query::{list_devices, probe_monitor};
pub(crate) use socket::{recv_datagram, RECV_BUF};
pub use socket::{OpenError, RecvError};
