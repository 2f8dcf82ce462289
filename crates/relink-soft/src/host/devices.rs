//! The host's devices: registration, fatal errors, removal (orderly or
//! silent) and port state. A device leaving takes everything on it along:
//! its CM ids see `DeviceRemoval` (connected peers are sent a disconnect
//! request on an orderly departure) and its QPs flush every outstanding
//! request.

use std::net::IpAddr;

use relink_fabric::ContextId;
use relink_fabric::{
    AsyncEvent, CmEventKind, DeviceEvent, DeviceEventKind, DeviceInfo, Event, PortState, QpState,
    WcStatus,
};

use super::{CmState, Departure, Dev, HostState};
use crate::outbox::{Control, Outbox, Outgoing};
use crate::packet::{Body, CmMsg, Packet};

impl HostState {
    /// The devices present, by name.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.values().map(|d| d.info.clone()).collect()
    }

    /// The port state of the device that owns `ip`, if one does (no
    /// allocation: the in-process fabric asks this for every packet).
    pub fn addr_port(&self, ip: IpAddr) -> Option<PortState> {
        self.devices
            .values()
            .find(|d| d.info.owns(ip))
            .map(|d| d.info.port_state)
    }

    /// A device registered (new, back after a reset, or a replacement).
    pub fn add_device(&mut self, info: DeviceInfo, out: &mut Outbox) {
        if let Some(old) = self.devices.get(&info.id.name) {
            if old.info.id == info.id {
                return;
            }
            let name = info.id.name.clone();
            self.remove_device(&name, Departure::Orderly, out);
        }
        tracing::debug!(host = %self.cfg.name, device = %info.id, "device added");
        self.devices.insert(
            info.id.name.clone(),
            Dev {
                info: info.clone(),
                fatal: false,
            },
        );
        self.push_event(Event::Device(DeviceEvent {
            kind: DeviceEventKind::Added,
            device: info,
        }));
    }

    /// The device is about to be reset: its contexts see `DeviceFatal`
    /// (once per registration). From now on it takes no new work until it
    /// is removed (see `HostState::usable`): opening it, creating objects
    /// or posting on it fail with `DeviceLost`, address and route
    /// resolution through it fail, it cannot listen, connect or accept, and
    /// a connection request for its addresses is rejected. What was on it
    /// stays until the removal flushes it.
    pub fn device_fatal(&mut self, name: &str) {
        let Some(dev) = self.devices.get_mut(name).filter(|d| !d.fatal) else {
            return;
        };
        dev.fatal = true;
        let info = dev.info.clone();
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.dev == info.id)
            .map(|(h, _)| *h)
            .collect();
        for c in ctxs {
            self.push_event(Event::Async {
                ctx: ContextId(c),
                event: AsyncEvent::DeviceFatal,
            });
        }
        self.push_event(Event::Device(DeviceEvent {
            kind: DeviceEventKind::Fatal,
            device: info,
        }));
    }

    /// The device unregistered: everything on it is lost.
    pub fn remove_device(&mut self, name: &str, how: Departure, out: &mut Outbox) {
        let Some(dev) = self.devices.remove(name) else {
            return;
        };
        let id = dev.info.id.clone();
        tracing::debug!(host = %self.cfg.name, device = %id, ?how, "device removed");
        // Connections: tell peers (orderly), then every id on the device
        // sees DEVICE_REMOVAL.
        let ids: Vec<u64> = self.cm_ids.keys().copied().collect();
        for h in ids {
            let cm = &self.cm_ids[&h];
            let on_dev = cm.device.as_ref() == Some(&id);
            let listener_on_dev =
                cm.state == CmState::Listening && cm.local.is_some_and(|a| dev.info.owns(a.ip()));
            if !(on_dev || listener_on_dev) {
                continue;
            }
            if matches!(cm.state, CmState::Removed | CmState::Failed) && on_dev {
                continue;
            }
            let was_connected = matches!(
                cm.state,
                CmState::Connected | CmState::Accepting | CmState::Connecting
            );
            let conn = cm.conn;
            let initiator = cm.initiator;
            let peer = cm.peer;
            let local = cm.local;
            let state = cm.state;
            if was_connected && how == Departure::Orderly {
                if let (Some(peer), Some(local)) = (peer, local) {
                    out.packets.push(Outgoing {
                        conn,
                        packet: Packet {
                            src: local.ip(),
                            dst: peer.ip(),
                            body: Body::Cm(CmMsg::Dreq {
                                conn_id: conn,
                                from_initiator: initiator,
                            }),
                        },
                    });
                }
            }
            if conn != 0 {
                out.controls.push(Control::Close(conn));
            }
            if state == CmState::Listening {
                if let Some(a) = local {
                    out.controls.push(Control::Unlisten(a));
                }
            }
            let cm = self.cm_ids.get_mut(&h).expect("present");
            cm.state = CmState::Removed;
            cm.timer_gen += 1;
            self.cm_event(h, CmEventKind::DeviceRemoval);
        }
        // Every QP flushes everything outstanding: the responder may or may
        // not have executed it.
        let qps: Vec<u64> = self
            .qps
            .iter()
            .filter(|(_, q)| q.dev == id)
            .map(|(h, _)| *h)
            .collect();
        for q in qps {
            self.qp_error(q, None);
            if let Some(qp) = self.qps.get_mut(&q) {
                qp.timer_gen += 1;
                qp.rto = None;
                qp.rto_queued = false;
            }
        }
        self.push_event(Event::Device(DeviceEvent {
            kind: DeviceEventKind::Removed,
            device: dev.info,
        }));
    }

    /// The port of a device went down or came up.
    pub fn set_port(&mut self, name: &str, state: PortState) {
        let Some(dev) = self.devices.get_mut(name) else {
            return;
        };
        if dev.info.port_state == state {
            return;
        }
        dev.info.port_state = state;
        let info = dev.info.clone();
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.dev == info.id)
            .map(|(h, _)| *h)
            .collect();
        let (async_ev, kind) = match state {
            PortState::Active => (AsyncEvent::PortActive, DeviceEventKind::PortUp),
            PortState::Down => (AsyncEvent::PortErr, DeviceEventKind::PortDown),
        };
        for c in ctxs {
            self.push_event(Event::Async {
                ctx: ContextId(c),
                event: async_ev,
            });
        }
        if state == PortState::Down {
            // rxe: the QP's outstanding request fails with LOC_QP_OP_ERR,
            // the rest flush; the QP stays in error after the port returns.
            let qps: Vec<u64> = self
                .qps
                .iter()
                .filter(|(_, q)| q.dev == info.id && q.state == QpState::Rts)
                .map(|(h, _)| *h)
                .collect();
            for q in qps {
                let first = self.qps[&q]
                    .sq
                    .iter()
                    .position(|e| e.done.is_none())
                    .map(|i| (i, WcStatus::LocQpOpErr));
                self.qp_error(q, first);
            }
        }
        self.push_event(Event::Device(DeviceEvent { kind, device: info }));
    }
}
