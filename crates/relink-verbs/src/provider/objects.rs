//! The verbs objects: create and destroy of PDs, CQs, SRQs, MRs, MWs and
//! QPs (a QP is created in Init, so it takes receives before any CM id
//! names it), QP state, the provider's memory, and object counts.

use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};

use relink_fabric::{
    Access, ContextId, CqId, CreateError, DestroyError, Destroyed, Memory, MemoryError, MrId,
    MrInfo, MwId, MwInfo, MwType, ObjectCounts, PdId, PollError, PostError, QpId, QpInit, QpState,
    SrqId, SrqInit,
};
use relink_verbs_sys as sys;

use super::ffi::{last_errno, Ptr};
use super::{Cq, Mr, Mw, Pd, Qp, Srq, VerbsProvider};
use crate::convert;
use crate::errno;
use crate::memory::MappedMemory;
use crate::track::{Notify, RecvQueue, SendQueue};

/// Move `qp` to the error state; returns `ibv_modify_qp`'s code.
pub(super) fn modify_to_error(qp: Ptr<sys::ibv_qp>) -> c_int {
    let mut attr = sys::ibv_qp_attr {
        qp_state: convert::qp_state::ERR,
        ..Default::default()
    };
    // SAFETY: a live QP; the attribute struct is initialised.
    unsafe { sys::ibv_modify_qp(qp.get(), &mut attr, sys::IBV_QP_STATE as c_int) }
}

/// The access flags every QP gets at Init: local write, remote write, read
/// and atomic (what a peer may do is then up to the MR or MW its rkey
/// names).
pub(super) const QP_ACCESS: u32 = convert::access::LOCAL_WRITE
    | convert::access::REMOTE_WRITE
    | convert::access::REMOTE_READ
    | convert::access::REMOTE_ATOMIC;
impl VerbsProvider {
    pub(super) fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError> {
        let allocs = self.lock().allocs.clone();
        Ok(allocs.adopt(MappedMemory::new(len)?))
    }

    pub(super) fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError> {
        let mut inner = self.lock();
        let c = inner
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        let raw_ctx = c.raw.ok_or(CreateError::DeviceLost)?;
        // SAFETY: a live context.
        let raw = Ptr::new(unsafe { sys::ibv_alloc_pd(raw_ctx.get()) })
            .ok_or_else(|| errno::create_error(last_errno(), "PD", true))?;
        let h = inner.handle();
        inner.pds.insert(
            h,
            Pd {
                ctx: ctx.0,
                raw: Some(raw),
            },
        );
        Ok(PdId(h))
    }

    pub(super) fn dealloc_pd(&self, pd: PdId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(DestroyError::InvalidHandle("PD"))?;
        if inner.mrs.values().any(|m| m.pd == pd.0)
            || inner.mws.values().any(|m| m.pd == pd.0)
            || inner.qps.values().any(|q| q.pd == pd.0)
            || inner.srqs.values().any(|s| s.pd == pd.0)
        {
            return Err(DestroyError::Busy("PD"));
        }
        let alive = inner.ctx_alive(p.ctx);
        // SAFETY: a live PD with no children; destroyed once (the
        // record goes below unless the call failed).
        let r = unsafe { destroy_raw(p.raw, sys::ibv_dealloc_pd, "PD", alive) };
        if r.is_ok() {
            inner.pds.remove(&pd.0);
        }
        r
    }

    pub(super) fn create_cq(&self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError> {
        let mut inner = self.lock();
        let c = inner
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        let (raw_ctx, chan) = match (c.raw, c.chan) {
            (Some(r), Some(ch)) => (r, ch),
            _ => return Err(CreateError::DeviceLost),
        };
        if depth == 0 || depth > i32::MAX as u32 {
            return Err(CreateError::InvalidArgument(format!("CQ depth {depth}")));
        }
        // SAFETY: a live context and its completion channel.
        let raw = Ptr::new(unsafe {
            sys::ibv_create_cq(
                raw_ctx.get(),
                depth as c_int,
                std::ptr::null_mut(),
                chan.get(),
                0,
            )
        })
        .ok_or_else(|| errno::create_error(last_errno(), "CQ", true))?;
        let h = inner.handle();
        inner.cq_by_ptr.insert(raw.key(), h);
        inner.cqs.insert(
            h,
            Cq {
                ctx: ctx.0,
                raw: Some(raw),
                depth,
                pending: VecDeque::new(),
                notify: Notify::default(),
            },
        );
        Ok(CqId(h))
    }

    pub(super) fn destroy_cq(&self, cq: CqId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let c = inner
            .cqs
            .get(&cq.0)
            .ok_or(DestroyError::InvalidHandle("CQ"))?;
        if inner
            .qps
            .values()
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(DestroyError::Busy("CQ"));
        }
        let alive = inner.ctx_alive(c.ctx);
        // SAFETY: a live CQ with no QP; every event on it was acked.
        let r = unsafe { destroy_raw(c.raw, sys::ibv_destroy_cq, "CQ", alive) };
        if r.is_ok() {
            if let Some(c) = inner.cqs.remove(&cq.0) {
                if let Some(raw) = c.raw {
                    inner.cq_by_ptr.remove(&raw.key());
                }
            }
        }
        r
    }

    pub(super) fn create_srq(&self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        if init.max_wr == 0 || init.max_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "SRQ max_wr and max_sge must be > 0".into(),
            ));
        }
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr: init.max_wr,
                max_sge: init.max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and an initialised attribute struct.
        let raw = Ptr::new(unsafe { sys::ibv_create_srq(raw_pd.get(), &mut attr) })
            .ok_or_else(|| errno::create_error(last_errno(), "SRQ", true))?;
        let h = inner.handle();
        inner.srq_by_ptr.insert(raw.key(), h);
        inner.srqs.insert(
            h,
            Srq {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                init,
            },
        );
        Ok(SrqId(h))
    }

    pub(super) fn destroy_srq(&self, srq: SrqId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let s = inner
            .srqs
            .get(&srq.0)
            .ok_or(DestroyError::InvalidHandle("SRQ"))?;
        if inner.qps.values().any(|q| q.init.srq == Some(srq)) {
            return Err(DestroyError::Busy("SRQ"));
        }
        let alive = inner.ctx_alive(s.ctx);
        // SAFETY: a live SRQ with no QP; destroyed once.
        let r = unsafe { destroy_raw(s.raw, sys::ibv_destroy_srq, "SRQ", alive) };
        if r.is_ok() {
            if let Some(raw) = inner.srqs.remove(&srq.0).and_then(|s| s.raw) {
                inner.srq_by_ptr.remove(&raw.key());
            }
        }
        r
    }

    pub(super) fn reg_mr(
        &self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError> {
        // Recognised by identity, not by address (module `owned`), and
        // before taking the lock: a forged `memory` runs code of its own.
        let allocs = self.lock().allocs.clone();
        let memory = allocs.recognise(memory).ok_or_else(|| {
            CreateError::InvalidArgument(
                "memory not allocated by this provider (use alloc_memory)".into(),
            )
        })?;
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        // `memory` is this provider's own handle now: its address and
        // length are the mapping's.
        relink_fabric::check_reg_mr(&memory, addr, length, access)?;
        // SAFETY: a live PD; the range lies inside a live mapping of this
        // provider (checked above) that the MR record keeps alive
        // (`_memory`).
        let raw = Ptr::new(unsafe {
            sys::ibv_reg_mr(
                raw_pd.get(),
                addr as *mut c_void,
                length as usize,
                convert::access_to_raw(access) as c_int,
            )
        })
        .ok_or_else(|| errno::create_error(last_errno(), "MR", true))?;
        // SAFETY: a live MR; keys are plain fields.
        let (lkey, rkey) = unsafe { ((*raw.get()).lkey, (*raw.get()).rkey) };
        let h = inner.handle();
        inner.mrs.insert(
            h,
            Mr {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                _memory: memory,
            },
        );
        Ok(MrInfo {
            id: MrId(h),
            addr,
            length,
            lkey,
            rkey,
            access,
        })
    }

    pub(super) fn dereg_mr(&self, mr: MrId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let m = inner
            .mrs
            .get(&mr.0)
            .ok_or(DestroyError::InvalidHandle("MR"))?;
        let alive = inner.ctx_alive(m.ctx);
        // SAFETY: a live MR, deregistered once.
        let r = unsafe { destroy_raw(m.raw, sys::ibv_dereg_mr, "MR", alive) };
        if r.is_ok() {
            inner.mrs.remove(&mr.0);
        }
        r
    }

    pub(super) fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        let ty = match kind {
            MwType::Type1 => sys::IBV_MW_TYPE_1,
            MwType::Type2 => sys::IBV_MW_TYPE_2,
        };
        // SAFETY: a live PD.
        let raw = Ptr::new(unsafe { sys::ibv_alloc_mw(raw_pd.get(), ty) })
            .ok_or_else(|| errno::create_error(last_errno(), "MW", true))?;
        // SAFETY: a live MW.
        let rkey = unsafe { (*raw.get()).rkey };
        let h = inner.handle();
        inner.mws.insert(
            h,
            Mw {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                kind,
            },
        );
        Ok(MwInfo {
            id: MwId(h),
            rkey,
            kind,
        })
    }

    pub(super) fn dealloc_mw(&self, mw: MwId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let w = inner
            .mws
            .get(&mw.0)
            .ok_or(DestroyError::InvalidHandle("MW"))?;
        let alive = inner.ctx_alive(w.ctx);
        // SAFETY: a live MW, deallocated once.
        let r = unsafe { destroy_raw(w.raw, sys::ibv_dealloc_mw, "MW", alive) };
        if r.is_ok() {
            inner.mws.remove(&mw.0);
        }
        r
    }

    pub(super) fn create_qp(&self, pd: PdId, init: QpInit) -> Result<QpId, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let ctx = p.ctx;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let mut cq_raw = [std::ptr::null_mut(); 2];
        for (i, cq) in [init.send_cq, init.recv_cq].into_iter().enumerate() {
            let c = inner
                .cqs
                .get(&cq.0)
                .ok_or(CreateError::InvalidHandle("CQ"))?;
            if c.ctx != ctx {
                return Err(CreateError::Mismatch("CQ on another device"));
            }
            cq_raw[i] = c.raw.ok_or(CreateError::DeviceLost)?.get();
        }
        let srq_raw = match init.srq {
            Some(s) => {
                let s = inner
                    .srqs
                    .get(&s.0)
                    .ok_or(CreateError::InvalidHandle("SRQ"))?;
                if s.pd != pd.0 {
                    return Err(CreateError::Mismatch("SRQ of another PD"));
                }
                s.raw.ok_or(CreateError::DeviceLost)?.get()
            }
            None => std::ptr::null_mut(),
        };
        let c = init.caps;
        if c.max_send_wr == 0 || c.max_send_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "max_send_wr and max_send_sge must be > 0".into(),
            ));
        }
        if init.srq.is_none() && (c.max_recv_wr == 0 || c.max_recv_sge == 0) {
            return Err(CreateError::InvalidArgument(
                "max_recv_wr and max_recv_sge must be > 0 without an SRQ".into(),
            ));
        }
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq_raw[0],
            recv_cq: cq_raw[1],
            srq: srq_raw,
            cap: sys::ibv_qp_cap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: if init.srq.is_some() { 0 } else { c.max_recv_wr },
                max_send_sge: c.max_send_sge,
                max_recv_sge: if init.srq.is_some() {
                    0
                } else {
                    c.max_recv_sge
                },
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        // SAFETY: a live PD, CQs and SRQ of one context; the attribute
        // struct is initialised.
        let raw = Ptr::new(unsafe { sys::ibv_create_qp(raw_pd.get(), &mut attr) })
            .ok_or_else(|| errno::create_error(last_errno(), "QP", true))?;
        // Init at once (port 1, pkey 0, our access), so receives can be
        // posted before a connection; cm_connect/cm_accept redo Init with
        // the id's port.
        let port = inner.ctxs[&ctx].port;
        let mut a = sys::ibv_qp_attr {
            qp_state: convert::qp_state::INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: QP_ACCESS,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        // SAFETY: the QP just created; the attribute struct is initialised.
        let rc = unsafe { sys::ibv_modify_qp(raw.get(), &mut a, mask as c_int) };
        if rc != 0 {
            // SAFETY: the QP just created, destroyed once.
            unsafe { sys::ibv_destroy_qp(raw.get()) };
            return Err(errno::create_error(rc, "QP", true));
        }
        // SAFETY: a live QP.
        let qpn = unsafe { (*raw.get()).qp_num };
        let h = inner.handle();
        inner.qp_by_ptr.insert(raw.key(), h);
        inner.qp_by_num.insert((ctx, qpn), h);
        inner.qps.insert(
            h,
            Qp {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                qpn,
                init,
                state: QpState::Init,
                sq: SendQueue::default(),
                rq: RecvQueue::default(),
                cm: None,
                last_wqe_reported: false,
            },
        );
        Ok(QpId(h))
    }

    pub(super) fn destroy_qp(&self, qp: QpId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let q = inner
            .qps
            .get(&qp.0)
            .ok_or(DestroyError::InvalidHandle("QP"))?;
        let alive = inner.ctx_alive(q.ctx);
        // SAFETY: a live QP (no MW bound through it is used after);
        // every async event on it was acked.
        let r = unsafe { destroy_raw(q.raw, sys::ibv_destroy_qp, "QP", alive) };
        if r.is_ok() {
            let q = inner.qps.remove(&qp.0).expect("present");
            if let Some(raw) = q.raw {
                inner.qp_by_ptr.remove(&raw.key());
            }
            if inner.qp_by_num.get(&(q.ctx, q.qpn)) == Some(&qp.0) {
                inner.qp_by_num.remove(&(q.ctx, q.qpn));
            }
            if let Some(c) = q.cm.and_then(|c| inner.cms.get_mut(&c)) {
                c.qp = None;
            }
        }
        r
    }

    pub(super) fn qp_state(&self, qp: QpId) -> Result<QpState, PollError> {
        let mut inner = self.lock();
        let q = inner.qps.get_mut(&qp.0).ok_or(PollError::InvalidHandle)?;
        let Some(raw) = q.raw else {
            return Ok(QpState::Err);
        };
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: a live QP and structs to fill.
        let rc = unsafe {
            sys::ibv_query_qp(raw.get(), &mut attr, sys::IBV_QP_STATE as c_int, &mut init)
        };
        if rc == 0 {
            q.state = convert::qp_state_from_raw(attr.qp_state);
        }
        Ok(q.state)
    }

    pub(super) fn qp_to_error(&self, qp: QpId) -> Result<(), PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if let Some(raw) = q.raw {
            let rc = modify_to_error(raw);
            if rc != 0 && !errno::is_device_gone(rc) {
                return Err(errno::post_error(rc, 0, true));
            }
        }
        inner.qp_entered_error(qp.0);
        Ok(())
    }

    pub(super) fn object_counts(&self) -> ObjectCounts {
        let inner = self.lock();
        ObjectCounts {
            contexts: inner.ctxs.len(),
            pds: inner.pds.len(),
            cqs: inner.cqs.len(),
            srqs: inner.srqs.len(),
            mrs: inner.mrs.len(),
            mws: inner.mws.len(),
            qps: inner.qps.len(),
            cm_ids: inner.cms.len(),
        }
    }
}

/// Destroy a verbs object with `destroy` unless its device released it
/// already (`raw` is `None`): the shared tail of every destroy call.
///
/// # Safety
/// `raw`, if any, is a live object of the kind `destroy` frees, with no
/// dependants left, destroyed only here.
unsafe fn destroy_raw<T>(
    raw: Option<Ptr<T>>,
    destroy: unsafe extern "C" fn(*mut T) -> c_int,
    what: &'static str,
    ctx_alive: bool,
) -> Result<Destroyed, DestroyError> {
    match raw {
        None => Ok(Destroyed::AlreadyReleased),
        Some(raw) => {
            // SAFETY: the caller's contract.
            let rc = unsafe { destroy(raw.get()) };
            errno::destroy_result(rc, what, ctx_alive)
        }
    }
}
