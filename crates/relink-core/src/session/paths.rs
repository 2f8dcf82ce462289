//! Paths and devices: the [`Path`]s a session may take to its peer, the
//! devices present (device events, rescans) and which paths they can carry
//! now. A device event that takes the current device away loses the
//! transport; which viable path an attempt takes (rotation, failback) is
//! decided in [`recovery`](super::recovery).

use std::net::{IpAddr, SocketAddr};

use relink_fabric::{
    DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Guid, PortState, Timestamp,
};

use super::{Role, Session};
use crate::policy::Policy;
use crate::reason::DownCause;
use crate::state::State;
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

/// The devices: the part of [`Session`] this file owns. Which paths a
/// device can carry is decided here; which of them an attempt takes, in
/// [`recovery`](super::recovery).
#[derive(Debug, Default)]
pub(super) struct Devices {
    /// The devices present, as the driver reports them (a device whose port
    /// went down stays, with its port state `Down`).
    present: Vec<DeviceInfo>,
    /// The device carrying the transport of the session's epoch, from its
    /// establishment until it is lost or closed; `None` otherwise.
    current: Option<DeviceInfo>,
    /// Node GUID of the first device that carried the session, for
    /// [`DeviceMatch::SameGuid`](crate::policy::DeviceMatch::SameGuid).
    first_guid: Option<Guid>,
    /// Devices being drained ([`Session::drain_device`]): no path they
    /// carry is viable.
    draining: Vec<DeviceId>,
}

impl Devices {
    /// The device carrying the current transport, if any.
    pub(super) fn current(&self) -> Option<&DeviceInfo> {
        self.current.as_ref()
    }

    /// The transport is up (or promoted) on `device`; the first device to
    /// carry the session names the GUID
    /// [`DeviceMatch::SameGuid`](crate::policy::DeviceMatch::SameGuid)
    /// asks for.
    pub(super) fn carry(&mut self, device: DeviceInfo) {
        if self.first_guid.is_none() {
            self.first_guid = Some(device.node_guid);
        }
        self.current = Some(device);
    }

    /// The current transport is gone (lost, closed, or never up).
    pub(super) fn release(&mut self) {
        self.current = None;
    }

    /// Forget the current device until it is added again (rdma_cm says it
    /// is going away, while the device list may still show it).
    pub(super) fn forget_current(&mut self) {
        if let Some(gone) = self.current.as_ref().map(|d| d.id.clone()) {
            self.present.retain(|d| d.id != gone);
        }
    }

    /// The present device that would carry `path` under `policy`.
    pub(super) fn for_path(&self, path: Path, policy: &Policy) -> Option<&DeviceInfo> {
        self.present.iter().find(|d| {
            d.port_state == PortState::Active
                && !self.draining.contains(&d.id)
                && policy.device_match.allows(d, self.first_guid)
                && match path.local {
                    Some(l) => d.owns(l),
                    None => d.reaches(path.peer.ip()) || d.owns(path.peer.ip()),
                }
        })
    }

    /// Devices being drained.
    pub(super) fn draining(&self) -> &[DeviceId] {
        &self.draining
    }

    /// Whether `id` is being drained.
    pub(super) fn is_draining(&self, id: &DeviceId) -> bool {
        self.draining.contains(id)
    }

    /// Drain `id`: no path it carries is viable until it is undrained.
    pub(super) fn drain(&mut self, id: &DeviceId) {
        if !self.draining.contains(id) {
            self.draining.push(id.clone());
        }
    }

    /// `id` is no longer drained; returns whether it was.
    pub(super) fn undrain(&mut self, id: &DeviceId) -> bool {
        let before = self.draining.len();
        self.draining.retain(|d| d != id);
        self.draining.len() != before
    }
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
        self.devices.for_path(self.cfg.paths[i], &self.cfg.policy)
    }

    /// Path `i` as an attempt takes it. A path that names no local address
    /// is bound, while some device is drained, to the address of the
    /// device [`Session::device_for_path`] chose: the route alone could
    /// pick the drained device again when several reach the peer.
    pub(super) fn attempt_path(&self, i: usize) -> Path {
        let p = self.cfg.paths[i];
        if p.local.is_some() || self.devices.draining.is_empty() {
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

    /// The device carrying the session, if connected.
    pub fn device(&self) -> Option<&DeviceInfo> {
        self.devices.current()
    }

    /// Whether `id` is the device carrying the current transport.
    fn is_current_device(&self, id: &DeviceId) -> bool {
        self.devices.current.as_ref().is_some_and(|d| d.id == *id)
    }

    /// A device event (from every source the driver watches).
    pub fn handle_device_event(&mut self, ev: &DeviceEvent, now: Timestamp) {
        let id = &ev.device.id;
        match ev.kind {
            DeviceEventKind::Added
            | DeviceEventKind::PortUp
            | DeviceEventKind::AddrChange
            | DeviceEventKind::NetdevAttach => {
                let devices = &mut self.devices.present;
                devices.retain(|d| d.id.name != id.name);
                devices.push(ev.device.clone());
                if self.decision.is_held() {
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
                let devices = &mut self.devices;
                if ev.kind == DeviceEventKind::Removed {
                    devices.present.retain(|d| d.id != *id);
                    // A drained device that left is done with; what comes
                    // back under its name is a new device.
                    devices.draining.retain(|d| d != id);
                } else if let Some(d) = devices.present.iter_mut().find(|d| d.id == *id) {
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
        let Devices {
            present, draining, ..
        } = &mut self.devices;
        *present = devices;
        draining.retain(|d| present.iter().any(|p| p.id == *d));
        if let Some(cur) = self.devices.current.clone() {
            if !self.devices.present.iter().any(|d| d.id == cur.id) {
                self.lose_transport(DownCause::DeviceRemoved, now);
            }
        }
        if let Some(sb) = self.standby_device().cloned() {
            if !self.devices.present.iter().any(|d| d.id == sb.id) {
                self.standby_device_lost(&sb.id, DownCause::DeviceRemoved, now);
            }
        }
        self.refresh_candidates();
    }
}
