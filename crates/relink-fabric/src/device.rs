//! Devices, their identity, and the device event stream.
//!
//! A device is told apart by [`DeviceId`] — name, kernel index and a
//! generation that changes on every (re-)registration — never by node GUID
//! alone: a reset keeps the GUID, a replacement changes it, and both must be
//! seen as a new device instance.

use std::fmt;
use std::net::IpAddr;

/// A 64-bit node GUID (for RoCE derived from the netdev's MAC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0.to_be_bytes();
        write!(
            f,
            "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
        )
    }
}

/// The identity of one registration of a device: it changes across a reset
/// (same name, same index, new generation) and across a replacement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId {
    /// Device name, e.g. `rxe0` or `soft0`.
    pub name: String,
    /// Kernel index (uverbs index); reused when the same device comes back.
    pub index: u32,
    /// Creation stamp of this registration; strictly increases on the host.
    pub generation: u64,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}@{}", self.name, self.index, self.generation)
    }
}

/// An IP address with its prefix length, as configured on the device's netdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    /// The address itself (host bits included, not the network's).
    pub addr: IpAddr,
    /// Prefix length: how many leading bits every address of the subnet
    /// shares with `addr` (at most 32 for IPv4, 128 for IPv6).
    pub prefix: u8,
}

impl IpNet {
    /// An address with a prefix length.
    pub fn new(addr: IpAddr, prefix: u8) -> IpNet {
        IpNet { addr, prefix }
    }

    /// Whether `other` lies in this subnet.
    pub fn contains(&self, other: IpAddr) -> bool {
        match (self.addr, other) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let p = u32::from(self.prefix.min(32));
                let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let p = u32::from(self.prefix.min(128));
                let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<IpNet, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|e| format!("bad address {addr:?}: {e}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("bad prefix length {p:?} (0..={max})"))?,
            None => max,
        };
        Ok(IpNet { addr, prefix })
    }
}

/// Logical state of a device port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// The port carries traffic.
    Active,
    /// The link is down (netdev down, cable out).
    Down,
}

/// What a process can see of a device without opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Identity of this registration.
    pub id: DeviceId,
    /// Node GUID: kept across a reset or re-add, new on a replacement.
    pub node_guid: Guid,
    /// Addresses of the netdev the device is attached to (RoCE/iWARP);
    /// empty without a netdev.
    pub addrs: Vec<IpNet>,
    /// The netdev the device is attached to, if any.
    pub netdev: Option<String>,
    /// State of port 1.
    pub port_state: PortState,
}

impl DeviceInfo {
    /// Whether the device owns `addr`.
    pub fn owns(&self, addr: IpAddr) -> bool {
        self.addrs.iter().any(|n| n.addr == addr)
    }

    /// Whether `addr` is on one of the device's subnets.
    pub fn reaches(&self, addr: IpAddr) -> bool {
        self.addrs.iter().any(|n| n.contains(addr))
    }
}

/// A change to a device, as seen by every process on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceEventKind {
    /// A device registered (new, re-added after a reset, or a replacement).
    Added,
    /// The device unregistered; every object on it is gone.
    Removed,
    /// The device hit a fatal error (`IBV_EVENT_DEVICE_FATAL`); a reset follows.
    Fatal,
    /// The port went down.
    PortDown,
    /// The port came back up (connections still need re-establishing).
    PortUp,
    /// The device was attached to a netdev.
    NetdevAttach,
    /// The device lost its netdev.
    NetdevDetach,
    /// The device's addresses changed.
    AddrChange,
}

/// One entry of the device event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEvent {
    /// What happened.
    pub kind: DeviceEventKind,
    /// The device as it is after the event (as it was, for `Removed`).
    pub device: DeviceInfo,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_membership() {
        let n: IpNet = "10.0.0.1/24".parse().unwrap();
        assert!(n.contains("10.0.0.200".parse().unwrap()));
        assert!(!n.contains("10.0.1.1".parse().unwrap()));
        let any: IpNet = "10.0.0.1/0".parse().unwrap();
        assert!(any.contains("192.168.1.1".parse().unwrap()));
        assert!("10.0.0.1/33".parse::<IpNet>().is_err());
        assert!("nonsense".parse::<IpNet>().is_err());
    }

    #[test]
    fn guid_display() {
        assert_eq!(
            Guid(0x0011_2233_4455_6677).to_string(),
            "0011:2233:4455:6677"
        );
    }
}
