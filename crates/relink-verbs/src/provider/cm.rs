//! The caller's rdma_cm calls: ids, bind, listen, address and route
//! resolution, connect, accept, reject, disconnect, destroy (parking an id
//! whose port is down). The QP is the provider's, not the id's, so it is
//! moved through INIT, RTR and RTS with the attributes rdma_cm computes
//! (`rdma_init_qp_attr` + `ibv_modify_qp`).

use std::net::{IpAddr, SocketAddr};
use std::os::raw::c_int;
use std::time::Duration;

use relink_fabric::{
    check_private_data, CmError, CmId, ConnParams, DestroyError, Destroyed, DeviceId, QpId,
    QpState, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use relink_verbs_sys as sys;

use super::ffi::{last_errno, sockaddr_to_std, CAddr, Ptr};
use super::objects::{modify_to_error, QP_ACCESS};
use super::{CmRec, Inner, ParkedId, VerbsProvider};
use crate::convert;
use crate::errno::{self, CmOp};

/// `IBV_LINK_LAYER_INFINIBAND` (a `#define`, not in the bindings).
pub(super) const LINK_LAYER_INFINIBAND: u8 = 1;

/// rdma_cm's workaround mask for IB ports (librdmacm `ucma_modify_qp_rtr`).
pub(super) const IB_RTR_MASK_OFF: c_int = 0xe0_0000;

/// Move `qp` to `state` with the attributes rdma_cm computes for `id`,
/// adjusted by `tweak`. Returns the errno on failure.
pub(super) fn cm_modify(
    id: Ptr<sys::rdma_cm_id>,
    qp: Ptr<sys::ibv_qp>,
    state: u32,
    tweak: impl FnOnce(&mut sys::ibv_qp_attr, &mut c_int),
) -> Result<(), i32> {
    let mut attr = sys::ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let mut mask: c_int = 0;
    // SAFETY: a live id and a valid attribute struct to fill.
    if unsafe { sys::rdma_init_qp_attr(id.get(), &mut attr, &mut mask) } != 0 {
        return Err(last_errno());
    }
    tweak(&mut attr, &mut mask);
    // SAFETY: a live QP on the id's device with the attributes the kernel
    // gave for this id.
    let rc = unsafe { sys::ibv_modify_qp(qp.get(), &mut attr, mask) };
    if rc != 0 {
        return Err(rc);
    }
    Ok(())
}

impl VerbsProvider {
    /// The rdma_cm id behind `id`.
    fn cm(&self, inner: &Inner, id: CmId) -> Result<Ptr<sys::rdma_cm_id>, CmError> {
        inner
            .cms
            .get(&id.0)
            .map(|c| c.raw)
            .ok_or(CmError::InvalidHandle("CM id"))
    }

    /// INIT -> INIT with the id's port and pkey (and our access flags).
    fn init_for_id(
        inner: &Inner,
        raw_id: Ptr<sys::rdma_cm_id>,
        qp: u64,
        what: &'static str,
    ) -> Result<Ptr<sys::ibv_qp>, CmError> {
        let q = inner.qps.get(&qp).ok_or(CmError::InvalidHandle("QP"))?;
        let raw_qp = q.raw.ok_or(CmError::DeviceLost)?;
        if q.state != QpState::Init {
            return Err(CmError::BadState("the QP must be in Init to connect"));
        }
        cm_modify(raw_id, raw_qp, convert::qp_state::INIT, |attr, _| {
            attr.qp_access_flags = QP_ACCESS;
        })
        .map_err(|e| errno::cm_error(e, CmOp::Connect(what), true))?;
        Ok(raw_qp)
    }

    /// `qp` may be connected through `id`: both exist, neither's device
    /// is lost, and they are on the same device.
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
            Some(d) if d == dev => Ok(()),
            Some(_) => Err(CmError::BadState("the QP is on another device than the id")),
            None => Err(CmError::BadState("the id is not bound to a device")),
        }
    }
    pub(super) fn cm_create_id(&self) -> Result<CmId, CmError> {
        let mut inner = self.lock();
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: our live channel; the id is destroyed by cm_destroy_id or
        // when the provider drops.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel(),
                &mut id,
                std::ptr::null_mut(),
                sys::RDMA_PS_TCP,
            )
        };
        let raw = if rc == 0 { Ptr::new(id) } else { None };
        let raw = raw.ok_or_else(|| errno::cm_error(last_errno(), CmOp::Create, true))?;
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
        let raw = self.cm(&inner, id)?;
        let mut c = CAddr::new(addr);
        // SAFETY: a live id and a valid socket address.
        if unsafe { sys::rdma_bind_addr(raw.get(), c.as_ptr()) } != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::Bind(addr), true));
        }
        let d = inner.id_device(raw);
        inner.cms.get_mut(&id.0).expect("present").device = d;
        // SAFETY: a live, bound id.
        let local = unsafe { sockaddr_to_std(sys::rdma_get_local_addr(raw.get()).cast()) };
        Ok(local.unwrap_or(addr))
    }

    pub(super) fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError> {
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        // SAFETY: a live id.
        let local = unsafe { sockaddr_to_std(sys::rdma_get_local_addr(raw.get()).cast()) }
            .unwrap_or(SocketAddr::new(errno::unspecified(false), 0));
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        // SAFETY: a live id.
        if unsafe { sys::rdma_listen(raw.get(), backlog) } != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::Listen(local), true));
        }
        Ok(())
    }

    pub(super) fn cm_resolve_addr(
        &self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), CmError> {
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        let mut d = CAddr::new(dst);
        let mut s = src
            .or(self.shared.default_source)
            .map(|ip| CAddr::new(SocketAddr::new(ip, 0)));
        let sp = s.as_mut().map_or(std::ptr::null_mut(), |s| s.as_ptr());
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        // SAFETY: a live id and valid socket addresses.
        if unsafe { sys::rdma_resolve_addr(raw.get(), sp, d.as_ptr(), ms) } != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::ResolveAddr(dst), true));
        }
        Ok(())
    }

    pub(super) fn cm_resolve_route(&self, id: CmId, timeout: Duration) -> Result<(), CmError> {
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        // SAFETY: a live id.
        if unsafe { sys::rdma_resolve_route(raw.get(), ms) } != 0 {
            let lost = inner.cms[&id.0].lost;
            return Err(errno::cm_error(last_errno(), CmOp::ResolveRoute, !lost));
        }
        Ok(())
    }

    pub(super) fn cm_device(&self, id: CmId) -> Option<DeviceId> {
        let mut inner = self.lock();
        let c = inner.cms.get(&id.0)?;
        if c.device.is_some() || c.lost {
            return c.device.clone();
        }
        let raw = c.raw;
        let d = inner.id_device(raw);
        inner.cms.get_mut(&id.0).expect("present").device = d.clone();
        d
    }

    pub(super) fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let inner = self.lock();
        let Some(c) = inner.cms.get(&id.0) else {
            return (None, None);
        };
        // SAFETY: a live id; its addresses are plain data inside it.
        let (l, p) = unsafe {
            (
                sockaddr_to_std(sys::rdma_get_local_addr(c.raw.get()).cast()),
                sockaddr_to_std(sys::rdma_get_peer_addr(c.raw.get()).cast()),
            )
        };
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
        let raw_id = self.cm(&inner, id)?;
        let raw_qp = Self::init_for_id(&inner, raw_id, qp.0, "connect")?;
        let q = &inner.qps[&qp.0];
        let c = &inner.ctxs[&q.ctx];
        let mut p = sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len() as u8,
            responder_resources: c.max_qp_rd_atom,
            initiator_depth: c.max_qp_init_rd_atom,
            flow_control: 1,
            retry_count: params.retry_count.min(7),
            rnr_retry_count: params.rnr_retry_count.min(7),
            srq: u8::from(q.init.srq.is_some()),
            // SAFETY: a live QP.
            qp_num: unsafe { (*raw_qp.get()).qp_num },
        };
        // SAFETY: a live, route-resolved id and an initialised parameter
        // struct whose private data outlives the call.
        if unsafe { sys::rdma_connect(raw_id.get(), &mut p) } != 0 {
            return Err(errno::cm_error(
                last_errno(),
                CmOp::Connect("connect"),
                true,
            ));
        }
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
        let raw_id = self.cm(&inner, id)?;
        let raw_qp = Self::init_for_id(&inner, raw_id, qp.0, "accept")?;
        let crec = &inner.cms[&id.0];
        let q = &inner.qps[&qp.0];
        let c = &inner.ctxs[&q.ctx];
        let resp_res = crec.req_responder_resources.min(c.max_qp_rd_atom);
        let init_depth = crec.req_initiator_depth.min(c.max_qp_init_rd_atom);
        let link_layer = c.link_layer;
        let srq = u8::from(q.init.srq.is_some());
        let fail = |e: i32| errno::cm_error(e, CmOp::Connect("accept"), true);
        cm_modify(raw_id, raw_qp, convert::qp_state::RTR, |attr, mask| {
            if link_layer == LINK_LAYER_INFINIBAND {
                *mask &= !IB_RTR_MASK_OFF;
            }
            attr.max_dest_rd_atomic = resp_res;
        })
        .map_err(fail)?;
        cm_modify(raw_id, raw_qp, convert::qp_state::RTS, |attr, _| {
            attr.max_rd_atomic = init_depth;
        })
        .map_err(fail)?;
        let mut p = sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len() as u8,
            responder_resources: resp_res,
            initiator_depth: init_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq,
            // SAFETY: a live QP.
            qp_num: unsafe { (*raw_qp.get()).qp_num },
        };
        // SAFETY: a live id with a pending request and an initialised
        // parameter struct whose private data outlives the call.
        if unsafe { sys::rdma_accept(raw_id.get(), &mut p) } != 0 {
            let e = last_errno();
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
        let raw = self.cm(&inner, id)?;
        // SAFETY: a live id; the private data outlives the call.
        let rc = unsafe {
            sys::rdma_reject(
                raw.get(),
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        if rc != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::Connect("reject"), true));
        }
        Ok(())
    }

    pub(super) fn cm_disconnect(&self, id: CmId) -> Result<(), CmError> {
        let mut inner = self.lock();
        let raw = self.cm(&inner, id)?;
        inner.cm_qp_to_error(id.0);
        if inner.cms[&id.0].must_defer_mads() {
            // The DREQ would wedge the port's GSI QP (see `Inner::parked`);
            // the peer learns of the end from its own QP's retries, or from
            // the DREQ sent when the id is destroyed after the port's return.
            tracing::debug!(target: "relink_verbs", id = id.0, "port down: no DREQ now");
            return Ok(());
        }
        // SAFETY: a live id.
        if unsafe { sys::rdma_disconnect(raw.get()) } != 0 {
            let e = last_errno();
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
        let (raw, lost, qp) = (c.raw, c.lost, c.qp);
        let park = c.must_defer_mads().then(|| c.device.clone()).flatten();
        if qp.is_some() && !lost {
            inner.cm_qp_to_error(id.0);
        }
        if let Some(device) = park {
            tracing::debug!(target: "relink_verbs", id = id.0, device = %device.name, "port down: CM id parked until the port is back");
            inner.cms.remove(&id.0);
            inner.cm_by_ptr.remove(&raw.key());
            if let Some(q) = qp.and_then(|q| inner.qps.get_mut(&q)) {
                q.cm = None;
            }
            inner.parked.push(ParkedId { raw, device });
            return Ok(Destroyed::Released);
        }
        // SAFETY: a live id of this provider, destroyed once; its events
        // were all acked under this lock.
        let rc = unsafe { sys::rdma_destroy_id(raw.get()) };
        if rc != 0 {
            let e = last_errno();
            tracing::warn!(target: "relink_verbs", id = id.0, error = %errno::describe(e), "rdma_destroy_id failed");
        }
        inner.cms.remove(&id.0);
        inner.cm_by_ptr.remove(&raw.key());
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
