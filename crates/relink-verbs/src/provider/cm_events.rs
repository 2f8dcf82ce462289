//! rdma_cm events: read from the provider's event channel, acknowledged at
//! once, and translated into `Event::Cm`; a connection request gets a new
//! id of the provider, and a connect response moves the active side's QP
//! to RTR and RTS before `rdma_establish`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::raw::c_int;

use relink_fabric::{CmEvent, CmEventKind, CmId, ConnParams, DeviceId, Event, QpState};
use relink_verbs_sys as sys;

use super::cm::{cm_modify, IB_RTR_MASK_OFF, LINK_LAYER_INFINIBAND};
use super::ffi::{last_errno, sockaddr_to_std, Ptr};
use super::objects::modify_to_error;
use super::scan::reg_key;
use super::{CmRec, Inner};
use crate::convert;
use crate::errno::{self, codes};

impl Inner {
    /// Read, handle and acknowledge every CM event waiting on `channel`.
    pub(super) fn drain_cm_events(&mut self, channel: Ptr<sys::rdma_event_channel>) {
        loop {
            let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: our channel, nonblocking.
            if unsafe { sys::rdma_get_cm_event(channel.get(), &mut ev) } != 0 {
                break;
            }
            let Some(ev) = Ptr::new(ev) else { break };
            let orphan = self.on_cm(ev);
            // SAFETY: the event came from rdma_get_cm_event and is acked
            // once, after its last use.
            unsafe { sys::rdma_ack_cm_event(ev.get()) };
            if let Some(id) = orphan {
                // SAFETY: a request's new id nobody knows, destroyed once,
                // after its event was acked (destroy waits for that).
                unsafe { sys::rdma_destroy_id(id.get()) };
            }
        }
    }

    /// The device an id is bound to now (from its verbs context).
    pub(super) fn id_device(&mut self, raw: Ptr<sys::rdma_cm_id>) -> Option<DeviceId> {
        // SAFETY: a live id; `verbs` is null or librdmacm's live context.
        let verbs = unsafe { (*raw.get()).verbs };
        if verbs.is_null() {
            return None;
        }
        // SAFETY: a live context names its live device.
        let (key, _) = unsafe { reg_key((*verbs).device) };
        if self.book.by_key(&key).is_none() {
            // A registration newer than the last scan.
            self.rescan();
        }
        self.book.by_key(&key).map(|i| i.id.clone())
    }

    /// Handle one CM event; returns a new id to destroy after the ack (a
    /// request on a listener this provider no longer knows).
    fn on_cm(&mut self, ev: Ptr<sys::rdma_cm_event>) -> Option<Ptr<sys::rdma_cm_id>> {
        // SAFETY: a live event; the union member `conn` is the one used for
        // RC ids (RDMA_PS_TCP); private data is copied out before the ack.
        let (id_ptr, listen_ptr, kind, status, private_data, resp_res, init_depth) = unsafe {
            let e = &*ev.get();
            let conn = &e.param.conn;
            let pd = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            (
                e.id,
                e.listen_id,
                e.event,
                e.status,
                pd,
                conn.responder_resources,
                conn.initiator_depth,
            )
        };
        let id_raw = Ptr::new(id_ptr)?;
        tracing::debug!(target: "relink_verbs", event = kind, status, "CM event");
        if kind == sys::RDMA_CM_EVENT_CONNECT_REQUEST {
            let Some(&listener) = self.cm_by_ptr.get(&(listen_ptr as usize)) else {
                return Some(id_raw);
            };
            let h = self.handle();
            let device = self.id_device(id_raw);
            // SAFETY: the new id is live; its addresses are plain data.
            let (local, peer) = unsafe {
                (
                    sockaddr_to_std(sys::rdma_get_local_addr(id_ptr).cast()),
                    sockaddr_to_std(sys::rdma_get_peer_addr(id_ptr).cast()),
                )
            };
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
            self.cm_by_ptr.insert(id_raw.key(), h);
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
        if let Some(i) = self.parked.iter().position(|p| p.raw.key() == id_raw.key()) {
            // A parked id: its device going is the only event that matters
            // (destroy it once the event is acked, so that the device can go).
            if kind == sys::RDMA_CM_EVENT_DEVICE_REMOVAL {
                return Some(self.parked.swap_remove(i).raw);
            }
            return None;
        }
        let &h = self.cm_by_ptr.get(&id_raw.key())?;
        let kind = match kind {
            sys::RDMA_CM_EVENT_ADDR_RESOLVED => {
                let d = self.id_device(id_raw);
                self.cms.get_mut(&h).expect("present").device = d;
                CmEventKind::AddrResolved
            }
            sys::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            sys::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            sys::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            sys::RDMA_CM_EVENT_CONNECT_RESPONSE => match self.complete_connect(h) {
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
    fn complete_connect(&mut self, h: u64) -> Result<(), i32> {
        let c = &self.cms[&h];
        let (raw_id, params) = (c.raw, c.params);
        let qp = c.qp.ok_or(codes::EINVAL)?;
        let q = self.qps.get(&qp).ok_or(codes::EINVAL)?;
        let raw_qp = q.raw.ok_or(codes::EIO)?;
        let link_layer = self.ctxs[&q.ctx].link_layer;
        cm_modify(raw_id, raw_qp, convert::qp_state::RTR, |_, mask| {
            if link_layer == LINK_LAYER_INFINIBAND {
                *mask &= !IB_RTR_MASK_OFF;
            }
        })?;
        cm_modify(raw_id, raw_qp, convert::qp_state::RTS, |attr, mask| {
            attr.timeout = params.ack_timeout.min(31);
            attr.retry_cnt = params.retry_count.min(7);
            attr.rnr_retry = params.rnr_retry_count.min(7);
            *mask |= (sys::IBV_QP_TIMEOUT | sys::IBV_QP_RETRY_CNT | sys::IBV_QP_RNR_RETRY) as c_int;
        })?;
        self.qps.get_mut(&qp).expect("present").state = QpState::Rts;
        // SAFETY: a live id whose connect response arrived.
        if unsafe { sys::rdma_establish(raw_id.get()) } != 0 {
            return Err(last_errno());
        }
        Ok(())
    }

    /// The QP bound to a CM id goes to error (the connection ended).
    pub(super) fn cm_qp_to_error(&mut self, h: u64) {
        let Some(qp) = self.cms.get(&h).and_then(|c| c.qp) else {
            return;
        };
        if let Some(raw) = self.qps.get(&qp).and_then(|q| q.raw) {
            modify_to_error(raw);
        }
        self.qp_entered_error(qp);
    }
}
