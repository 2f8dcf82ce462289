//! rdma_cm events: read from the provider's event channel, acknowledged at
//! once, and translated into `Event::Cm`; a connection request gets a new
//! id of the provider, and a connect response moves the active side's QP
//! to RTR and RTS before `rdma_establish`.

#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::raw::c_int;

use relink_fabric::{CmEvent, CmEventKind, CmId, ConnParams, Event, QpState};
use relink_verbs_sys as sys;

use super::cm::{cm_modify, IB_RTR_MASK_OFF, LINK_LAYER_INFINIBAND};
use super::objects::modify_to_error;
use super::scan::id_reg_key;
use super::{CmRec, Inner};
use crate::convert;
use crate::errno::{self, codes};
use crate::ffi::{self, CmEventRef, EventChannel};

impl Inner {
    /// Read, handle and acknowledge every CM event waiting on the
    /// provider's channel.
    pub(super) fn drain_cm_events(&mut self) {
        // Out of the tables while its events are handled (under the lock:
        // no caller's call runs meanwhile), back in afterwards.
        let Some(channel) = self.channel.take() else {
            return;
        };
        while let Some(mut ev) = channel.get_event() {
            let orphan = self.on_cm(&channel, &mut ev);
            // Acked once, after its last use.
            ev.ack();
            if let Some(id) = orphan {
                // A request's new id nobody knows (or a parked one whose
                // device goes), destroyed once, after its event was acked
                // (destroy waits for that).
                let _ = id.destroy();
            }
        }
        self.channel = Some(channel);
    }

    /// Handle one CM event; returns an id to destroy after the ack (a
    /// request on a listener this provider no longer knows, or a parked id
    /// whose device goes).
    fn on_cm(&mut self, chan: &EventChannel, ev: &mut CmEventRef<'_>) -> Option<ffi::CmId> {
        // Private data is copied out before the ack.
        let (kind, status) = (ev.kind(), ev.status());
        let (private_data, resp_res, init_depth) = ev.conn();
        if ev.id_key() == 0 {
            return None;
        }
        tracing::debug!(target: "relink_verbs", event = kind, status, "CM event");
        if kind == sys::RDMA_CM_EVENT_CONNECT_REQUEST {
            // The new id is ours from now on.
            let id_raw = ev.take_request_id()?;
            let Some(&listener) = self.cm_by_ptr.get(&ev.listen_key()) else {
                return Some(id_raw);
            };
            let h = self.handle();
            let key = id_reg_key(chan, &id_raw);
            let device = self.device_of_key(key);
            let (local, peer) = (id_raw.local_addr(chan), id_raw.peer_addr(chan));
            let id_key = id_raw.key();
            self.cms.insert(
                h,
                CmRec {
                    raw: id_raw,
                    device,
                    qp: None,
                    params: ConnParams::default(),
                    req_responder_resources: resp_res,
                    req_initiator_depth: init_depth,
                    removal_reported: false,
                    disconnect_reported: false,
                    lost: false,
                    wire: true,
                },
            );
            self.cm_by_ptr.insert(id_key, h);
            let unspecified = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
            self.push(Event::Cm(CmEvent {
                id: CmId(h),
                kind: CmEventKind::ConnectRequest {
                    listener: CmId(listener),
                    private_data,
                    peer: peer.unwrap_or(unspecified),
                    local: local.unwrap_or(unspecified),
                },
            }));
            return None;
        }
        let id_key = ev.id_key();
        if let Some(i) = self.parked.iter().position(|p| p.raw.key() == id_key) {
            // A parked id: its device going is the only event that matters
            // (destroy it once the event is acked, so that the device can go).
            if kind == sys::RDMA_CM_EVENT_DEVICE_REMOVAL {
                return Some(self.parked.swap_remove(i).raw);
            }
            return None;
        }
        let &h = self.cm_by_ptr.get(&id_key)?;
        let kind = match kind {
            sys::RDMA_CM_EVENT_ADDR_RESOLVED => {
                let key = id_reg_key(chan, &self.cms[&h].raw);
                let d = self.device_of_key(key);
                self.cms.get_mut(&h).expect("present").device = d;
                CmEventKind::AddrResolved
            }
            sys::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            sys::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            sys::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            sys::RDMA_CM_EVENT_CONNECT_RESPONSE => match self.complete_connect(chan, h) {
                Ok(()) => CmEventKind::Established { private_data },
                Err(e) => {
                    tracing::warn!(target: "relink_verbs", id = h, error = %errno::describe(e), "completing the connection failed");
                    self.cm_qp_to_error(h);
                    CmEventKind::ConnectError
                }
            },
            sys::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established {
                private_data: Vec::new(),
            },
            sys::RDMA_CM_EVENT_REJECTED => {
                self.cm_qp_to_error(h);
                CmEventKind::Rejected {
                    reason: convert::reject_reason(status),
                    private_data,
                }
            }
            sys::RDMA_CM_EVENT_UNREACHABLE => {
                self.cm_qp_to_error(h);
                CmEventKind::Unreachable
            }
            sys::RDMA_CM_EVENT_CONNECT_ERROR => {
                self.cm_qp_to_error(h);
                CmEventKind::ConnectError
            }
            sys::RDMA_CM_EVENT_DISCONNECTED => {
                self.cm_qp_to_error(h);
                let c = self.cms.get_mut(&h).expect("present");
                if std::mem::replace(&mut c.disconnect_reported, true) {
                    return None;
                }
                CmEventKind::Disconnected
            }
            sys::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                let c = self.cms.get_mut(&h).expect("present");
                let first = !std::mem::replace(&mut c.removal_reported, true);
                c.lost = true;
                let dev = c.device.clone();
                if first {
                    self.push(Event::Cm(CmEvent {
                        id: CmId(h),
                        kind: CmEventKind::DeviceRemoval,
                    }));
                }
                if let Some(dev) = dev {
                    self.lose_device(&dev);
                }
                return None;
            }
            sys::RDMA_CM_EVENT_ADDR_CHANGE => CmEventKind::AddrChange,
            _ => return None,
        };
        self.push(Event::Cm(CmEvent { id: CmId(h), kind }));
        None
    }

    /// Active side, `CONNECT_RESPONSE`: RTR, RTS, then `rdma_establish`.
    fn complete_connect(&mut self, chan: &EventChannel, h: u64) -> Result<(), i32> {
        let c = &self.cms[&h];
        let (raw_id, params) = (&c.raw, c.params);
        let qp = c.qp.ok_or(codes::EINVAL)?;
        let q = self.qps.get(&qp).ok_or(codes::EINVAL)?;
        let raw_qp = q.raw.as_ref().ok_or(codes::EIO)?;
        let link_layer = self.ctxs[&q.ctx].link_layer;
        cm_modify(chan, raw_id, raw_qp, convert::qp_state::RTR, |_, mask| {
            if link_layer == LINK_LAYER_INFINIBAND {
                *mask &= !IB_RTR_MASK_OFF;
            }
        })?;
        cm_modify(
            chan,
            raw_id,
            raw_qp,
            convert::qp_state::RTS,
            |attr, mask| {
                attr.timeout = params.ack_timeout.min(31);
                attr.retry_cnt = params.retry_count.min(7);
                attr.rnr_retry = params.rnr_retry_count.min(7);
                *mask |=
                    (sys::IBV_QP_TIMEOUT | sys::IBV_QP_RETRY_CNT | sys::IBV_QP_RNR_RETRY) as c_int;
            },
        )?;
        self.qps.get_mut(&qp).expect("present").state = QpState::Rts;
        // An id whose connect response arrived.
        self.cms[&h].raw.establish(chan)
    }

    /// The QP bound to a CM id goes to error (the connection ended).
    pub(super) fn cm_qp_to_error(&mut self, h: u64) {
        let Some(qp) = self.cms.get(&h).and_then(|c| c.qp) else {
            return;
        };
        if let Some(raw) = self.qps.get(&qp).and_then(|q| q.raw.as_ref()) {
            modify_to_error(raw);
        }
        self.qp_entered_error(qp);
    }
}
