//! Device event watchers for real RDMA devices.
//!
//! A process that uses plain verbs on Soft-RoCE gets no async event and no
//! work-completion error when its device is deleted (`rdma link delete`):
//! traffic keeps flowing until it closes, and the device leaving the device
//! list or the kernel's notification is the only prompt signal. This crate turns the kernel's three ways of telling into one stream
//! of [`WatchEvent`]s keyed by device name plus kernel index:
//!
//! | backend | module | kernel | what it reads |
//! |---|---|---|---|
//! | [`Backend::Netlink`] | [`netlink`] | >= 6.12 | the RDMA netlink monitor (`NETLINK_RDMA`, group `RDMA_NL_GROUP_NOTIFY`) |
//! | [`Backend::Uevent`] | [`uevent`] | any | kernel uevents of subsystems `infiniband` and `infiniband_verbs` |
//! | [`Backend::Rescan`] | [`rescan`] | any | successive listings of `/sys/class/infiniband` |
//!
//! [`DeviceWatcher::start`](watch::DeviceWatcher::start) picks the first that
//! works, in that order, and says which one it uses.
//!
//! # Removal is announced twice
//!
//! The kernel unregisters a device in two steps (`drivers/infiniband/core`):
//! `ib_uverbs_remove_one` first deletes the `uverbsN` character device, and
//! then, for drivers that cannot disassociate user contexts (rxe among them),
//! **waits until every process has closed the device**; only after that does
//! `__ib_unregister_device` send the netlink `UNREGISTER` event and delete the
//! `infiniband` device (its uevent `remove`). A process that waits for
//! `UNREGISTER` before closing its context therefore waits forever. So the
//! watcher reports [`WatchEventKind::Removing`] as soon as the `uverbsN`
//! device disappears (a uevent of subsystem `infiniband_verbs`, or a re-scan
//! that no longer finds it), and [`WatchEventKind::Removed`] when the
//! unregistration completes. Both map to [`DeviceEventKind::Removed`]; close
//! everything on the first.
//!
//! # Example
//!
//! ```no_run
//! use relink_devwatch::watch::DeviceWatcher;
//!
//! let (watcher, events) = DeviceWatcher::start()?;
//! println!("watching RDMA devices with {}", watcher.backend());
//! for ev in events {
//!     println!("{ev}");
//! }
//! # Ok::<(), relink_devwatch::watch::WatchError>(())
//! ```
//!
//! The parsers ([`netlink::parse_datagram`], [`uevent::parse_uevent`]) are
//! pure functions over bytes: length-checked, never panicking, with typed
//! errors; they are fuzzed (`fuzz/fuzz_targets/netlink_parse.rs`,
//! `uevent_parse.rs`).

#![forbid(unsafe_code)]

pub mod netlink;
pub mod rescan;
mod table;
pub mod uevent;
pub mod watch;

use std::fmt;

pub use relink_fabric::{DeviceEventKind, Guid};

/// Which kernel interface a watcher reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The RDMA netlink monitor (kernel >= 6.12).
    Netlink,
    /// Raw kernel uevents (`NETLINK_KOBJECT_UEVENT`).
    Uevent,
    /// Periodic listings of `/sys/class/infiniband`.
    Rescan,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Netlink => "rdma-netlink",
            Backend::Uevent => "uevent",
            Backend::Rescan => "rescan",
        })
    }
}

/// The key of an RDMA device: its name and, where known, its kernel index.
///
/// The kernel index is the `ib_device` index (`RDMA_NLDEV_ATTR_DEV_INDEX`,
/// what rdma-core's `ibv_get_device_index` returns). It is allocated afresh
/// on every registration, so a reset (same name) shows as a new index. Only
/// the netlink interface carries it; uevents and sysfs do not, and the
/// watchers fill it in from an `RDMA_NLDEV_CMD_GET` dump when one is
/// possible (see [`netlink::list_devices`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceKey {
    /// Device name, e.g. `rxe0` or `mlx5_0`.
    pub name: String,
    /// Kernel `ib_device` index, when known.
    pub index: Option<u32>,
}

impl DeviceKey {
    /// A key from a name and an optional index.
    pub fn new(name: impl Into<String>, index: Option<u32>) -> DeviceKey {
        DeviceKey {
            name: name.into(),
            index,
        }
    }
}

impl fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}#{}", self.name, i),
            None => write!(f, "{}#?", self.name),
        }
    }
}

/// A network device as the RDMA netlink monitor names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Netdev {
    /// Interface index (`RDMA_NLDEV_ATTR_NDEV_INDEX`), when sent.
    pub ifindex: Option<u32>,
    /// Interface name (`RDMA_NLDEV_ATTR_NDEV_NAME`), when sent.
    pub name: Option<String>,
}

/// What happened to a device.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchEventKind {
    /// The device registered (new, back after a reset, or a replacement).
    Added,
    /// The device's `uverbsN` character device is gone: the device is being
    /// unregistered and the kernel waits for every user context to close.
    /// Close everything on it now.
    Removing,
    /// The device finished unregistering.
    Removed,
    /// The device was renamed; [`WatchEvent::device`] has the new name.
    Renamed {
        /// The previous name, when known.
        old_name: Option<String>,
    },
    /// A port of the device was attached to a netdev.
    NetdevAttached {
        /// Port number (from 1).
        port: u32,
        /// The netdev, absent when it lives in another network namespace.
        netdev: Option<Netdev>,
    },
    /// A port of the device lost its netdev.
    NetdevDetached {
        /// Port number (from 1).
        port: u32,
    },
    /// The netdev of a port was renamed.
    NetdevRenamed {
        /// Port number, when known.
        port: Option<u32>,
        /// The netdev under its new name.
        netdev: Netdev,
    },
}

impl WatchEventKind {
    /// The provider-interface event this maps to, if any.
    ///
    /// `Removing` and `Removed` both map to `Removed`: treat the second as a
    /// no-op. Renames map to nothing: the device object and its contexts
    /// stay valid across a rename.
    pub fn fabric_kind(&self) -> Option<DeviceEventKind> {
        match self {
            WatchEventKind::Added => Some(DeviceEventKind::Added),
            WatchEventKind::Removing | WatchEventKind::Removed => Some(DeviceEventKind::Removed),
            WatchEventKind::NetdevAttached { .. } => Some(DeviceEventKind::NetdevAttach),
            WatchEventKind::NetdevDetached { .. } => Some(DeviceEventKind::NetdevDetach),
            WatchEventKind::Renamed { .. } | WatchEventKind::NetdevRenamed { .. } => None,
        }
    }
}

/// One entry of a watcher's event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchEventKind,
    /// The device, as it is after the event (as it was, for removals).
    pub device: DeviceKey,
    /// The node GUID, when it could be read (sysfs or netlink).
    pub node_guid: Option<Guid>,
    /// Which interface reported the event.
    pub source: Backend,
}

impl fmt::Display for WatchEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let netdev = |f: &mut fmt::Formatter<'_>, n: &Netdev| -> fmt::Result {
            if let Some(i) = n.ifindex {
                write!(f, " netdev {i}")?;
            }
            if let Some(name) = &n.name {
                write!(f, " {name}")?;
            }
            Ok(())
        };
        match &self.kind {
            WatchEventKind::Added => write!(f, "added {}", self.device)?,
            WatchEventKind::Removing => write!(f, "removing {}", self.device)?,
            WatchEventKind::Removed => write!(f, "removed {}", self.device)?,
            WatchEventKind::Renamed { old_name } => write!(
                f,
                "renamed {} (was {})",
                self.device,
                old_name.as_deref().unwrap_or("?")
            )?,
            WatchEventKind::NetdevAttached { port, netdev: n } => {
                write!(f, "netdev-attached {} port {port}", self.device)?;
                if let Some(n) = n {
                    netdev(f, n)?;
                }
            }
            WatchEventKind::NetdevDetached { port } => {
                write!(f, "netdev-detached {} port {port}", self.device)?
            }
            WatchEventKind::NetdevRenamed { port, netdev: n } => {
                write!(f, "netdev-renamed {}", self.device)?;
                if let Some(p) = port {
                    write!(f, " port {p}")?;
                }
                netdev(f, n)?;
            }
        }
        if let Some(g) = self.node_guid {
            write!(f, " guid {g}")?;
        }
        write!(f, " [{}]", self.source)
    }
}
