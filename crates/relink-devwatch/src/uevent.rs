//! Kernel uevents (`NETLINK_KOBJECT_UEVENT`, group 1) of the RDMA device
//! classes, and [`UeventMonitor`], a socket that yields them.
//!
//! # Wire format
//!
//! `kobject_uevent_env` (`lib/kobject_uevent.c`) sends one datagram per
//! event: a header `ACTION@DEVPATH`, a NUL, then `KEY=VALUE` strings, each
//! NUL-terminated: `ACTION`, `DEVPATH`, `SUBSYSTEM`, the class's own
//! variables, and `SEQNUM` last. For RDMA:
//!
//! ```text
//! add@/devices/virtual/infiniband/rxe0\0ACTION=add\0DEVPATH=/devices/virtual/infiniband/rxe0\0
//! SUBSYSTEM=infiniband\0NAME=rxe0\0SEQNUM=2345\0
//! ```
//!
//! * class `infiniband`: `ib_device_uevent` adds `NAME=<ibdev>`. `add` is
//!   sent when registration is complete, `remove` when unregistration is —
//!   which, for drivers without `disassociate_ucontext` (rxe), is only after
//!   every process has closed the device. A rename (`device_rename`) sends
//!   `move` with `DEVPATH_OLD`.
//! * class `infiniband_verbs`: the `uverbsN` character device, with
//!   `DEVNAME=infiniband/uverbsN`, `MAJOR`, `MINOR`. `ib_uverbs_remove_one`
//!   deletes it *first* (`cdev_device_del`) and only then waits for the
//!   users: its `remove` is the prompt sign of a device going away. Its
//!   `ibdev` attribute names the device while it exists.
//!
//! Messages from udevd (group 2) begin with `libudev\0` and are rejected;
//! only datagrams from the kernel (port 0) are read.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use netlink_sys::{Socket, SocketAddr};

use crate::netlink::{recv_datagram, RecvError, RECV_BUF};

/// `NETLINK_KOBJECT_UEVENT` (`include/uapi/linux/netlink.h`).
pub const NETLINK_KOBJECT_UEVENT: isize = 15;
/// The kernel's uevent multicast group (udevd re-broadcasts on group 2).
pub const UEVENT_GROUP_KERNEL: u32 = 1;
/// Subsystem of RDMA devices (`ib_class.name`).
pub const SUBSYSTEM_INFINIBAND: &str = "infiniband";
/// Subsystem of the uverbs character devices (`uverbs_class.name`).
pub const SUBSYSTEM_INFINIBAND_VERBS: &str = "infiniband_verbs";

/// Why bytes are not a well-formed kernel uevent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UeventError {
    /// No bytes.
    #[error("empty uevent")]
    Empty,
    /// A udevd message (`libudev` magic), not the kernel's.
    #[error("udev message, not a kernel uevent")]
    Libudev,
    /// The first string is not `ACTION@DEVPATH`.
    #[error("bad uevent header")]
    BadHeader,
    /// A string is not UTF-8.
    #[error("uevent string at byte {offset} is not UTF-8")]
    NotUtf8 {
        /// Offset of the string in the datagram.
        offset: usize,
    },
    /// A variable is not `KEY=VALUE` with a non-empty key.
    #[error("uevent variable at byte {offset} is not KEY=VALUE")]
    BadVariable {
        /// Offset of the string in the datagram.
        offset: usize,
    },
    /// `ACTION` or `DEVPATH` disagrees with the header.
    #[error("uevent {field} disagrees with its header")]
    Mismatch {
        /// The variable that disagrees: `ACTION` or `DEVPATH`.
        field: &'static str,
    },
    /// An RDMA uevent whose device name cannot be made out.
    #[error("RDMA uevent with a bad device name {name:?}")]
    BadDeviceName {
        /// The name found.
        name: String,
    },
}

/// A kernel uevent, borrowed from its datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent<'a> {
    /// The action (`add`, `remove`, `move`, `change`, ...).
    pub action: &'a str,
    /// The device path under `/sys`.
    pub devpath: &'a str,
    /// The `KEY=VALUE` variables, in order.
    pub vars: Vec<(&'a str, &'a str)>,
}

impl<'a> Uevent<'a> {
    /// The value of variable `key` (the last one, if repeated).
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.vars.iter().rev().find(|(k, _)| *k == key).map(|v| v.1)
    }

    /// `SUBSYSTEM`.
    pub fn subsystem(&self) -> Option<&'a str> {
        self.get("SUBSYSTEM")
    }
}

/// Parses a kernel uevent datagram. Empty strings (repeated NULs) are
/// skipped.
pub fn parse_uevent(buf: &[u8]) -> Result<Uevent<'_>, UeventError> {
    if buf.is_empty() {
        return Err(UeventError::Empty);
    }
    if buf.starts_with(b"libudev\0") {
        return Err(UeventError::Libudev);
    }
    let mut offset = 0;
    let mut strings = buf.split(|&b| b == 0).filter_map(|s| {
        let at = offset;
        offset += s.len() + 1;
        (!s.is_empty()).then_some((at, s))
    });
    let (at, header) = strings.next().ok_or(UeventError::BadHeader)?;
    let header = std::str::from_utf8(header).map_err(|_| UeventError::NotUtf8 { offset: at })?;
    let (action, devpath) = header.split_once('@').ok_or(UeventError::BadHeader)?;
    if action.is_empty() || !devpath.starts_with('/') {
        return Err(UeventError::BadHeader);
    }
    let mut vars = Vec::new();
    for (at, s) in strings {
        let s = std::str::from_utf8(s).map_err(|_| UeventError::NotUtf8 { offset: at })?;
        match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => vars.push((k, v)),
            _ => return Err(UeventError::BadVariable { offset: at }),
        }
    }
    let ev = Uevent {
        action,
        devpath,
        vars,
    };
    if ev.get("ACTION").is_some_and(|a| a != action) {
        return Err(UeventError::Mismatch { field: "ACTION" });
    }
    if ev.get("DEVPATH").is_some_and(|d| d != devpath) {
        return Err(UeventError::Mismatch { field: "DEVPATH" });
    }
    Ok(ev)
}

/// What a uevent says happened.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UeventAction {
    /// `add`.
    Add,
    /// `remove`.
    Remove,
    /// `move` (a rename), with the old name from `DEVPATH_OLD`.
    Move {
        /// The previous name.
        old_name: Option<String>,
    },
    /// Any other action (`change`, `bind`, ...).
    Other(String),
}

/// Which RDMA object a uevent is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UeventTarget {
    /// An RDMA device (subsystem `infiniband`).
    Device {
        /// The device name (`NAME`, else the last `DEVPATH` component).
        name: String,
    },
    /// A uverbs character device (subsystem `infiniband_verbs`): `uverbsN`.
    Uverbs {
        /// `N`.
        index: u32,
    },
}

/// A uevent about an RDMA device or its uverbs character device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RdmaUevent {
    /// What happened.
    pub action: UeventAction,
    /// To what.
    pub target: UeventTarget,
    /// `SEQNUM`, if present and numeric.
    pub seqnum: Option<u64>,
}

impl fmt::Display for RdmaUevent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            UeventAction::Add => f.write_str("add")?,
            UeventAction::Remove => f.write_str("remove")?,
            UeventAction::Move { old_name } => {
                write!(f, "move(from {})", old_name.as_deref().unwrap_or("?"))?
            }
            UeventAction::Other(a) => write!(f, "{a}")?,
        }
        match &self.target {
            UeventTarget::Device { name } => write!(f, " infiniband {name}")?,
            UeventTarget::Uverbs { index } => write!(f, " infiniband_verbs uverbs{index}")?,
        }
        if let Some(s) = self.seqnum {
            write!(f, " seq {s}")?;
        }
        Ok(())
    }
}

fn last_component(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Parses `uverbsN` into `N`.
pub fn parse_uverbs_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("uverbs")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The RDMA meaning of a uevent: `Ok(None)` for other subsystems.
pub fn classify(ev: &Uevent<'_>) -> Result<Option<RdmaUevent>, UeventError> {
    let action = match ev.action {
        "add" => UeventAction::Add,
        "remove" => UeventAction::Remove,
        "move" => UeventAction::Move {
            old_name: ev
                .get("DEVPATH_OLD")
                .map(last_component)
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        },
        other => UeventAction::Other(other.to_owned()),
    };
    let seqnum = ev.get("SEQNUM").and_then(|s| s.parse().ok());
    let target = match ev.subsystem() {
        Some(SUBSYSTEM_INFINIBAND) => {
            let name = ev.get("NAME").unwrap_or_else(|| last_component(ev.devpath));
            if name.is_empty() || name.contains('/') {
                return Err(UeventError::BadDeviceName { name: name.into() });
            }
            UeventTarget::Device { name: name.into() }
        }
        Some(SUBSYSTEM_INFINIBAND_VERBS) => {
            let name = last_component(ev.devpath);
            let index = parse_uverbs_name(name)
                .ok_or_else(|| UeventError::BadDeviceName { name: name.into() })?;
            UeventTarget::Uverbs { index }
        }
        _ => return Ok(None),
    };
    Ok(Some(RdmaUevent {
        action,
        target,
        seqnum,
    }))
}

/// [`parse_uevent`] then [`classify`].
pub fn parse_rdma_uevent(buf: &[u8]) -> Result<Option<RdmaUevent>, UeventError> {
    classify(&parse_uevent(buf)?)
}

/// A `NETLINK_KOBJECT_UEVENT` socket bound to the kernel's group.
///
/// Uevents are only sent to the initial network namespace: in a container
/// with its own namespace this socket opens but stays silent.
#[derive(Debug)]
pub struct UeventMonitor {
    sock: Socket,
    buf: Vec<u8>,
}

impl UeventMonitor {
    /// Opens the socket and joins group 1. Any user may.
    pub fn open() -> io::Result<UeventMonitor> {
        let mut sock = Socket::new(NETLINK_KOBJECT_UEVENT)?;
        sock.bind(&SocketAddr::new(0, UEVENT_GROUP_KERNEL))?;
        // Device storms (a driver reload) come in bursts.
        let _ = sock.set_rx_buf_sz(1i32 << 20);
        Ok(UeventMonitor {
            sock,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Makes [`recv`](UeventMonitor::recv) return
    /// [`RecvError::WouldBlock`] instead of waiting.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.sock.set_non_blocking(nonblocking)
    }

    /// Reads one datagram: `Ok(None)` for uevents of other subsystems and
    /// for datagrams not sent by the kernel.
    pub fn recv(&mut self) -> Result<Option<Result<RdmaUevent, UeventError>>, RecvError> {
        let from = recv_datagram(&self.sock, &mut self.buf)?;
        if from != 0 {
            return Ok(None);
        }
        Ok(parse_rdma_uevent(&self.buf).transpose())
    }
}

impl AsFd for UeventMonitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(strings: &[&str]) -> Vec<u8> {
        let mut v = Vec::new();
        for s in strings {
            v.extend_from_slice(s.as_bytes());
            v.push(0);
        }
        v
    }

    #[test]
    fn rxe_add() {
        // kobject_uevent_env(): "%s@%s" header, then ACTION, DEVPATH,
        // SUBSYSTEM, the class's vars (ib_device_uevent: NAME=%s), SEQNUM.
        let b = ev(&[
            "add@/devices/virtual/infiniband/rxe0",
            "ACTION=add",
            "DEVPATH=/devices/virtual/infiniband/rxe0",
            "SUBSYSTEM=infiniband",
            "NAME=rxe0",
            "SEQNUM=2345",
        ]);
        let e = parse_rdma_uevent(&b).unwrap().unwrap();
        assert_eq!(
            e,
            RdmaUevent {
                action: UeventAction::Add,
                target: UeventTarget::Device {
                    name: "rxe0".into()
                },
                seqnum: Some(2345),
            }
        );
        assert_eq!(e.to_string(), "add infiniband rxe0 seq 2345");
    }

    #[test]
    fn uverbs_remove() {
        // uverbs_devnode(): DEVNAME=infiniband/uverbsN; MAJOR/MINOR from the cdev.
        let b = ev(&[
            "remove@/devices/pci0000:00/0000:00:03.0/infiniband_verbs/uverbs1",
            "ACTION=remove",
            "DEVPATH=/devices/pci0000:00/0000:00:03.0/infiniband_verbs/uverbs1",
            "SUBSYSTEM=infiniband_verbs",
            "MAJOR=231",
            "MINOR=193",
            "DEVNAME=infiniband/uverbs1",
            "SEQNUM=7",
        ]);
        let e = parse_rdma_uevent(&b).unwrap().unwrap();
        assert_eq!(e.action, UeventAction::Remove);
        assert_eq!(e.target, UeventTarget::Uverbs { index: 1 });
    }

    #[test]
    fn rename_is_move_with_old_path() {
        let b = ev(&[
            "move@/devices/virtual/infiniband/roce0",
            "ACTION=move",
            "DEVPATH=/devices/virtual/infiniband/roce0",
            "SUBSYSTEM=infiniband",
            "DEVPATH_OLD=/devices/virtual/infiniband/rxe0",
            "NAME=roce0",
            "SEQNUM=9",
        ]);
        let e = parse_rdma_uevent(&b).unwrap().unwrap();
        assert_eq!(
            e.action,
            UeventAction::Move {
                old_name: Some("rxe0".into())
            }
        );
        assert_eq!(e.to_string(), "move(from rxe0) infiniband roce0 seq 9");
    }

    #[test]
    fn other_subsystems_are_none() {
        let b = ev(&[
            "add@/devices/virtual/net/rxe_veth",
            "ACTION=add",
            "DEVPATH=/devices/virtual/net/rxe_veth",
            "SUBSYSTEM=net",
            "INTERFACE=rxe_veth",
            "IFINDEX=12",
            "SEQNUM=1",
        ]);
        assert_eq!(parse_rdma_uevent(&b), Ok(None));
        // No SUBSYSTEM at all.
        assert_eq!(parse_rdma_uevent(b"add@/x\0"), Ok(None));
    }

    #[test]
    fn name_falls_back_to_devpath() {
        let b = ev(&[
            "remove@/devices/virtual/infiniband/siw0",
            "SUBSYSTEM=infiniband",
        ]);
        assert_eq!(
            parse_rdma_uevent(&b).unwrap().unwrap().target,
            UeventTarget::Device {
                name: "siw0".into()
            }
        );
    }

    #[test]
    fn typed_errors() {
        assert_eq!(parse_uevent(b""), Err(UeventError::Empty));
        assert_eq!(
            parse_uevent(b"libudev\0\xfe\xed\xca\xfe"),
            Err(UeventError::Libudev)
        );
        assert_eq!(parse_uevent(b"\0\0"), Err(UeventError::BadHeader));
        assert_eq!(parse_uevent(b"add/x\0"), Err(UeventError::BadHeader));
        assert_eq!(parse_uevent(b"@/x\0"), Err(UeventError::BadHeader));
        assert_eq!(
            parse_uevent(b"add@/x\0\xff\0"),
            Err(UeventError::NotUtf8 { offset: 7 })
        );
        assert_eq!(
            parse_uevent(b"add@/x\0NOEQUALS\0"),
            Err(UeventError::BadVariable { offset: 7 })
        );
        assert_eq!(
            parse_uevent(b"add@/x\0=v\0"),
            Err(UeventError::BadVariable { offset: 7 })
        );
        assert_eq!(
            parse_uevent(b"add@/x\0ACTION=remove\0"),
            Err(UeventError::Mismatch { field: "ACTION" })
        );
        assert_eq!(
            parse_uevent(b"add@/x\0DEVPATH=/y\0"),
            Err(UeventError::Mismatch { field: "DEVPATH" })
        );
        assert_eq!(
            parse_rdma_uevent(b"add@/a/infiniband_verbs/uverbsX\0SUBSYSTEM=infiniband_verbs\0"),
            Err(UeventError::BadDeviceName {
                name: "uverbsX".into()
            })
        );
        assert_eq!(
            parse_rdma_uevent(b"add@/a/\0SUBSYSTEM=infiniband\0"),
            Err(UeventError::BadDeviceName { name: "".into() })
        );
    }

    #[test]
    fn uverbs_names() {
        assert_eq!(parse_uverbs_name("uverbs0"), Some(0));
        assert_eq!(parse_uverbs_name("uverbs31"), Some(31));
        assert_eq!(parse_uverbs_name("uverbs"), None);
        assert_eq!(parse_uverbs_name("uverbs+1"), None);
        assert_eq!(parse_uverbs_name("uverbs99999999999"), None);
        assert_eq!(parse_uverbs_name("umad0"), None);
    }
}
