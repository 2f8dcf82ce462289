//! The kernel's constants this module needs, each with the header line it
//! comes from (Debian 12's headers predate the monitor's), and the
//! `RDMA_NL_GET_*` macros that pack and unpack a message type.

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
