//! Paths and devices: the [`Path`]s a session may take to its peer, the
//! devices present (device events, rescans) and which paths they can carry
//! now. A device event that takes the current device away loses the
//! transport; which viable path an attempt takes (rotation, failback) is
//! decided in [`recovery`](super::recovery).

use std::net::{IpAddr, SocketAddr};

use relink_fabric::{DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, PortState, Timestamp};

use super::{Role, Session};
use crate::state::{DownCause, State};
use crate::timers::TimerKind;

/// A way to reach the peer: an optional local address (which picks the
/// local device) and the peer's address. A session may have several; a
/// second HCA takes over at once when the first is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    /// Local address to bind (picks the device); `None`: by route.
    pub local: Option<IpAddr>,
    /// The peer's CM address.
    pub peer: SocketAddr,
}

impl Session {
    /// Indices of the paths some present device can carry at present, in order.
    pub(super) fn viable_paths(&self) -> Vec<usize> {
        (0..self.cfg.paths.len())
            .filter(|&i| self.device_for_path(i).is_some())
            .collect()
    }

    /// The present device that would carry path `i`.
    pub(super) fn device_for_path(&self, i: usize) -> Option<&DeviceInfo> {
        let p = self.cfg.paths[i];
        self.devices.iter().find(|d| {
            d.port_state == PortState::Active
                && !self.draining.contains(&d.id)
                && self.cfg.policy.device_match.allows(d, self.first_guid)
                && match p.local {
                    Some(l) => d.owns(l),
                    None => d.reaches(p.peer.ip()) || d.owns(p.peer.ip()),
                }
        })
    }

    /// Path `i` as an attempt takes it. A path that names no local address
    /// is bound, while some device is drained, to the address of the
    /// device [`Session::device_for_path`] chose: the route alone could
    /// pick the drained device again when several reach the peer.
    pub(super) fn attempt_path(&self, i: usize) -> Path {
        let p = self.cfg.paths[i];
        if p.local.is_some() || self.draining.is_empty() {
            return p;
        }
        let peer = p.peer.ip();
        let local = self.device_for_path(i).and_then(|d| {
            d.addrs
                .iter()
                .find(|n| n.contains(peer))
                .or_else(|| d.addrs.iter().find(|n| n.addr.is_ipv4() == peer.is_ipv4()))
                .map(|n| n.addr)
        });
        Path { local, ..p }
    }

    /// Whether `id` is the device carrying the current transport.
    fn is_current_device(&self, id: &DeviceId) -> bool {
        self.current_device.as_ref().is_some_and(|d| d.id == *id)
    }

    /// A device event (from every source the driver watches).
    pub fn handle_device_event(&mut self, ev: &DeviceEvent, now: Timestamp) {
        let id = &ev.device.id;
        match ev.kind {
            DeviceEventKind::Added
            | DeviceEventKind::PortUp
            | DeviceEventKind::AddrChange
            | DeviceEventKind::NetdevAttach => {
                self.devices.retain(|d| d.id.name != id.name);
                self.devices.push(ev.device.clone());
                if self.held {
                    self.refresh_candidates();
                } else if self.state() == State::Recovering && self.cfg.role == Role::Initiator {
                    // A device-add cuts the backoff short.
                    self.timers.set(TimerKind::Backoff, now);
                }
                // It may carry a standby.
                self.maybe_build_standby(now);
            }
            DeviceEventKind::Removed
            | DeviceEventKind::Fatal
            | DeviceEventKind::PortDown
            | DeviceEventKind::NetdevDetach => {
                let cause = match ev.kind {
                    DeviceEventKind::Removed => DownCause::DeviceRemoved,
                    DeviceEventKind::Fatal => DownCause::DeviceFatal,
                    _ => DownCause::PortDown,
                };
                if ev.kind == DeviceEventKind::Removed {
                    self.devices.retain(|d| d.id != *id);
                    // A drained device that left is done with; what comes
                    // back under its name is a new device.
                    self.draining.retain(|d| d != id);
                } else if let Some(d) = self.devices.iter_mut().find(|d| d.id == *id) {
                    d.port_state = PortState::Down;
                }
                if self.is_current_device(id) {
                    self.lose_transport(cause, now);
                }
                self.standby_device_lost(id, cause, now);
                self.refresh_candidates();
            }
        }
    }

    /// The devices present now (at start, or after a rescan).
    pub fn set_devices(&mut self, devices: Vec<DeviceInfo>, now: Timestamp) {
        self.devices = devices;
        let present = &self.devices;
        self.draining.retain(|d| present.iter().any(|p| p.id == *d));
        if let Some(cur) = self.current_device.clone() {
            if !self.devices.iter().any(|d| d.id == cur.id) {
                self.lose_transport(DownCause::DeviceRemoved, now);
            }
        }
        if let Some(sb) = self.standby_device().cloned() {
            if !self.devices.iter().any(|d| d.id == sb.id) {
                self.standby_device_lost(&sb.id, DownCause::DeviceRemoved, now);
            }
        }
        self.refresh_candidates();
    }
}
