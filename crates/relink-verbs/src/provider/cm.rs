//! The caller's rdma_cm calls: ids, bind, listen, address and route
//! resolution, connect, accept, reject, disconnect, destroy (parking an id
//! whose port is down). The QP is the provider's, not the id's, so it is
//! moved through INIT, RTR and RTS with the attributes rdma_cm computes
//! (`rdma_init_qp_attr` + `ibv_modify_qp`).

#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::os::raw::c_int;
use std::time::Duration;

use relink_fabric::{
    check_private_data, CmError, CmId, ConnParams, DestroyError, Destroyed, DeviceId, QpId,
    QpState, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use relink_verbs_sys as sys;

use super::objects::{modify_to_error, QP_ACCESS};
use super::scan::{id_reg_key, port_down_listed};
use super::{CmRec, Inner, ParkedId, VerbsProvider};
use crate::convert;
use crate::errno::{self, CmOp};
use crate::ffi::{self, ConnParam, EventChannel};

/// `IBV_LINK_LAYER_INFINIBAND` (a `#define`, not in the bindings).
pub(super) const LINK_LAYER_INFINIBAND: u8 = 1;

/// rdma_cm's workaround mask for IB ports (librdmacm `ucma_modify_qp_rtr`).
pub(super) const IB_RTR_MASK_OFF: c_int = 0xe0_0000;

/// Move `qp` to `state` with the attributes rdma_cm computes for `id`
/// (on channel `chan`), adjusted by `tweak`. Returns the errno on failure.
pub(super) fn cm_modify(
    chan: &EventChannel,
    id: &ffi::CmId,
    qp: &ffi::Qp,
    state: u32,
    tweak: impl FnOnce(&mut sys::ibv_qp_attr, &mut c_int),
) -> Result<(), i32> {
    let mut attr = sys::ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let mut mask: c_int = 0;
    id.init_qp_attr(chan, &mut attr, &mut mask)?;
    tweak(&mut attr, &mut mask);
    // A QP on the id's device with the attributes the kernel gave for
    // this id.
    let rc = qp.modify(&mut attr, mask);
    if rc != 0 {
        return Err(rc);
    }
    Ok(())
}

/// Where a caller's CM call finds its id: the tables and the event channel
/// (see [`EventChannel`]: every call on an id borrows it).
struct CmCall<'a> {
    chan: &'a EventChannel,
    id: &'a ffi::CmId,
}

impl Inner {
    /// The rdma_cm id behind `id`, with the provider's event channel.
    fn cm(&self, id: CmId) -> Result<CmCall<'_>, CmError> {
        let raw = self
            .cms
            .get(&id.0)
            .map(|c| &c.raw)
            .ok_or(CmError::InvalidHandle("CM id"))?;
        // The channel is out of the tables only while the event thread
        // reads its events (under the lock, so never during a call) and
        // once the provider is dropped.
        let chan = self.channel.as_ref().ok_or(CmError::DeviceLost)?;
        Ok(CmCall { chan, id: raw })
    }
}

impl VerbsProvider {
    /// INIT -> INIT with the id's port and pkey (and our access flags).
    fn init_for_id<'a>(
        inner: &'a Inner,
        call: &CmCall<'_>,
        qp: u64,
        what: &'static str,
    ) -> Result<&'a ffi::Qp, CmError> {
        let q = inner.qps.get(&qp).ok_or(CmError::InvalidHandle("QP"))?;
        let raw_qp = q.raw.as_ref().ok_or(CmError::DeviceLost)?;
        if q.state != QpState::Init {
            return Err(CmError::BadState("the QP must be in Init to connect"));
        }
        cm_modify(
            call.chan,
            call.id,
            raw_qp,
            convert::qp_state::INIT,
            |attr, _| {
                attr.qp_access_flags = QP_ACCESS;
            },
        )
        .map_err(|e| errno::cm_error(e, CmOp::Connect(what), true))?;
        Ok(raw_qp)
    }

    /// `qp` may be connected through `id`: both exist, neither's device
    /// is lost, they are on the same device, and its port is up (connect
    /// and accept send a CM message, which would wedge rxe's GSI QP while
    /// the port is down — see `Inner::parked`; the caller retries).
    fn check_qp_for_id(inner: &Inner, id: CmId, qp: QpId) -> Result<(), CmError> {
        let c = inner
            .cms
            .get(&id.0)
            .ok_or(CmError::InvalidHandle("CM id"))?;
        let q = inner.qps.get(&qp.0).ok_or(CmError::InvalidHandle("QP"))?;
        if c.lost || !inner.ctx_alive(q.ctx) {
            return Err(CmError::DeviceLost);
        }
        let dev = &inner.ctxs[&q.ctx].device;
        match &c.device {
            Some(d) if d == dev && port_down_listed(&d.name) => {
                Err(CmError::PortDown(d.name.clone()))
            }
            Some(d) if d == dev => Ok(()),
            Some(_) => Err(CmError::BadState("the QP is on another device than the id")),
            None => Err(CmError::BadState("the id is not bound to a device")),
        }
    }
    pub(super) fn cm_create_id(&self) -> Result<CmId, CmError> {
        let mut inner = self.lock();
        // Destroyed by cm_destroy_id or when the provider drops.
        let raw = inner
            .channel
            .as_ref()
            .ok_or(CmError::DeviceLost)?
            .create_id()
            .map_err(|e| errno::cm_error(e, CmOp::Create, true))?;
        let h = inner.handle();
        inner.cm_by_ptr.insert(raw.key(), h);
        inner.cms.insert(
            h,
            CmRec {
                raw,
                device: None,
                qp: None,
                params: ConnParams::default(),
                req_responder_resources: 0,
                req_initiator_depth: 0,
                removal_reported: false,
                disconnect_reported: false,
                lost: false,
                wire: false,
            },
        );
        Ok(CmId(h))
    }

    pub(super) fn cm_bind(&self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        let mut inner = self.lock();
        let call = inner.cm(id)?;
        call.id
            .bind_addr(call.chan, addr)
            .map_err(|e| errno::cm_error(e, CmOp::Bind(addr), true))?;
        let key = id_reg_key(call.chan, call.id);
        let d = inner.device_of_key(key);
        inner.cms.get_mut(&id.0).expect("present").device = d;
        let call = inner.cm(id)?;
        // A bound id.
        let local = call.id.local_addr(call.chan);
        Ok(local.unwrap_or(addr))
    }

    pub(super) fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError> {
        let inner = self.lock();
        let call = inner.cm(id)?;
        let local = call
            .id
            .local_addr(call.chan)
            .unwrap_or(SocketAddr::new(errno::unspecified(false), 0));
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        call.id
            .listen(call.chan, backlog)
            .map_err(|e| errno::cm_error(e, CmOp::Listen(local), true))
    }

    pub(super) fn cm_resolve_addr(
        &self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), CmError> {
        let inner = self.lock();
        let call = inner.cm(id)?;
        let s = src
            .or(self.shared.default_source)
            .map(|ip| SocketAddr::new(ip, 0));
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        call.id
            .resolve_addr(call.chan, s, dst, ms)
            .map_err(|e| errno::cm_error(e, CmOp::ResolveAddr(dst), true))
    }

    pub(super) fn cm_resolve_route(&self, id: CmId, timeout: Duration) -> Result<(), CmError> {
        let inner = self.lock();
        let call = inner.cm(id)?;
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        if let Err(e) = call.id.resolve_route(call.chan, ms) {
            let lost = inner.cms[&id.0].lost;
            return Err(errno::cm_error(e, CmOp::ResolveRoute, !lost));
        }
        Ok(())
    }

    pub(super) fn cm_device(&self, id: CmId) -> Option<DeviceId> {
        let mut inner = self.lock();
        let c = inner.cms.get(&id.0)?;
        if c.device.is_some() || c.lost {
            return c.device.clone();
        }
        let call = inner.cm(id).ok()?;
        let key = id_reg_key(call.chan, call.id);
        let d = inner.device_of_key(key);
        inner.cms.get_mut(&id.0).expect("present").device = d.clone();
        d
    }

    pub(super) fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let inner = self.lock();
        let Ok(call) = inner.cm(id) else {
            return (None, None);
        };
        let (l, p) = (call.id.local_addr(call.chan), call.id.peer_addr(call.chan));
        let known = |a: Option<SocketAddr>| a.filter(|a| !a.ip().is_unspecified() || a.port() != 0);
        (known(l), known(p))
    }

    pub(super) fn cm_connect(
        &self,
        id: CmId,
        qp: QpId,
        params: ConnParams,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_CONNECT_PRIVATE_DATA)?;
        let mut inner = self.lock();
        Self::check_qp_for_id(&inner, id, qp)?;
        let call = inner.cm(id)?;
        let raw_qp = Self::init_for_id(&inner, &call, qp.0, "connect")?;
        let q = &inner.qps[&qp.0];
        let c = &inner.ctxs[&q.ctx];
        let p = ConnParam {
            responder_resources: c.max_qp_rd_atom,
            initiator_depth: c.max_qp_init_rd_atom,
            flow_control: 1,
            retry_count: params.retry_count.min(7),
            rnr_retry_count: params.rnr_retry_count.min(7),
            srq: u8::from(q.init.srq.is_some()),
            qp_num: raw_qp.qp_num(),
        };
        // A route-resolved id.
        call.id
            .connect(call.chan, p, private_data)
            .map_err(|e| errno::cm_error(e, CmOp::Connect("connect"), true))?;
        let crec = inner.cms.get_mut(&id.0).expect("present");
        crec.qp = Some(qp.0);
        crec.params = params;
        crec.wire = true;
        inner.qps.get_mut(&qp.0).expect("present").cm = Some(id.0);
        Ok(())
    }

    pub(super) fn cm_accept(&self, id: CmId, qp: QpId, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(private_data, MAX_ACCEPT_PRIVATE_DATA)?;
        let mut inner = self.lock();
        Self::check_qp_for_id(&inner, id, qp)?;
        let call = inner.cm(id)?;
        let raw_qp = Self::init_for_id(&inner, &call, qp.0, "accept")?;
        let crec = &inner.cms[&id.0];
        let q = &inner.qps[&qp.0];
        let c = &inner.ctxs[&q.ctx];
        let resp_res = crec.req_responder_resources.min(c.max_qp_rd_atom);
        let init_depth = crec.req_initiator_depth.min(c.max_qp_init_rd_atom);
        let link_layer = c.link_layer;
        let srq = u8::from(q.init.srq.is_some());
        let fail = |e: i32| errno::cm_error(e, CmOp::Connect("accept"), true);
        cm_modify(
            call.chan,
            call.id,
            raw_qp,
            convert::qp_state::RTR,
            |attr, mask| {
                if link_layer == LINK_LAYER_INFINIBAND {
                    *mask &= !IB_RTR_MASK_OFF;
                }
                attr.max_dest_rd_atomic = resp_res;
            },
        )
        .map_err(fail)?;
        cm_modify(
            call.chan,
            call.id,
            raw_qp,
            convert::qp_state::RTS,
            |attr, _| {
                attr.max_rd_atomic = init_depth;
            },
        )
        .map_err(fail)?;
        let p = ConnParam {
            responder_resources: resp_res,
            initiator_depth: init_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq,
            qp_num: raw_qp.qp_num(),
        };
        // An id with a pending request.
        if let Err(e) = call.id.accept(call.chan, p, private_data) {
            modify_to_error(raw_qp);
            return Err(fail(e));
        }
        inner.cms.get_mut(&id.0).expect("present").qp = Some(qp.0);
        let q = inner.qps.get_mut(&qp.0).expect("present");
        q.cm = Some(id.0);
        q.state = QpState::Rts;
        Ok(())
    }

    pub(super) fn cm_reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(private_data, MAX_REJECT_PRIVATE_DATA)?;
        let inner = self.lock();
        let call = inner.cm(id)?;
        call.id
            .reject(call.chan, private_data)
            .map_err(|e| errno::cm_error(e, CmOp::Connect("reject"), true))
    }

    pub(super) fn cm_disconnect(&self, id: CmId) -> Result<(), CmError> {
        let mut inner = self.lock();
        inner.cm(id)?;
        inner.cm_qp_to_error(id.0);
        if inner.cms[&id.0].must_defer_mads() {
            // The DREQ would wedge the port's GSI QP (see `Inner::parked`);
            // the peer learns of the end from its own QP's retries, or from
            // the DREQ sent when the id is destroyed after the port's return.
            tracing::debug!(target: "relink_verbs", id = id.0, "port down: no DREQ now");
            return Ok(());
        }
        let call = inner.cm(id)?;
        if let Err(e) = call.id.disconnect(call.chan) {
            if inner.cms[&id.0].lost {
                return Ok(());
            }
            return Err(errno::cm_error(e, CmOp::Connect("not connected"), true));
        }
        Ok(())
    }

    pub(super) fn cm_destroy_id(&self, id: CmId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let c = inner
            .cms
            .get(&id.0)
            .ok_or(DestroyError::InvalidHandle("CM id"))?;
        let (lost, qp) = (c.lost, c.qp);
        let park = c.must_defer_mads().then(|| c.device.clone()).flatten();
        if qp.is_some() && !lost {
            inner.cm_qp_to_error(id.0);
        }
        if let Some(device) = park {
            tracing::debug!(target: "relink_verbs", id = id.0, device = %device.name, "port down: CM id parked until the port is back");
            let raw = inner.cms.remove(&id.0).expect("present").raw;
            inner.cm_by_ptr.remove(&raw.key());
            if let Some(q) = qp.and_then(|q| inner.qps.get_mut(&q)) {
                q.cm = None;
            }
            inner.parked.push(ParkedId { raw, device });
            return Ok(Destroyed::Released);
        }
        let raw = inner.cms.remove(&id.0).expect("present").raw;
        let key = raw.key();
        // Its events were all acked under this lock.
        if let Err(e) = raw.destroy() {
            tracing::warn!(target: "relink_verbs", id = id.0, error = %errno::describe(e), "rdma_destroy_id failed");
        }
        inner.cm_by_ptr.remove(&key);
        if let Some(q) = qp.and_then(|q| inner.qps.get_mut(&q)) {
            q.cm = None;
        }
        if lost {
            // librdmacm closes its context of a dead device with the last id.
            inner.resync_pending = true;
            drop(inner);
            self.shared.kick();
            return Ok(Destroyed::AlreadyReleased);
        }
        Ok(Destroyed::Released)
    }
}
