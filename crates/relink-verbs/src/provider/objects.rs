//! The verbs objects: create and destroy of PDs, CQs, SRQs, MRs, MWs and
//! QPs (a QP is created in Init, so it takes receives before any CM id
//! names it), QP state, the provider's memory, and object counts.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::os::raw::c_int;

use relink_fabric::{
    Access, ContextId, CqId, CreateError, DestroyError, Destroyed, Memory, MemoryError, MrId,
    MrInfo, MwId, MwInfo, MwType, ObjectCounts, PdId, PollError, PostError, QpId, QpInit, QpState,
    SrqId, SrqInit,
};
use relink_verbs_sys as sys;

use super::{Cq, Mr, Mw, Pd, Qp, Srq, VerbsProvider};
use crate::convert;
use crate::errno;
use crate::ffi;
use crate::memory::MappedMemory;
use crate::track::{Notify, RecvQueue, SendQueue};

/// Move `qp` to the error state; returns `ibv_modify_qp`'s code.
pub(super) fn modify_to_error(qp: &ffi::Qp) -> c_int {
    let mut attr = sys::ibv_qp_attr {
        qp_state: convert::qp_state::ERR,
        ..Default::default()
    };
    qp.modify(&mut attr, sys::IBV_QP_STATE as c_int)
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
        Ok(self.adopt_mapping(MappedMemory::new(len)?))
    }

    /// Wrap `memory` (a fresh mapping of the provider's, or the
    /// application's memory the FFI module adopts:
    /// [`VerbsProvider::adopt_foreign`]) in a [`Memory`] that `reg_mr`
    /// recognises.
    pub(crate) fn adopt_mapping(&self, memory: MappedMemory) -> Memory {
        let allocs = self.lock().allocs.clone();
        allocs.adopt(memory)
    }

    /// Deregister every MR of this provider over `memory` — a handle from
    /// [`alloc_memory`](relink_fabric::Provider::alloc_memory) or
    /// [`adopt_foreign`](VerbsProvider::adopt_foreign), or a clone — now,
    /// whoever holds the MR's handle, and then, for adopted memory, stop
    /// every access through any handle to it (reads give zeros, writes
    /// and atomics do nothing, from any thread; an access under way is
    /// waited for). Once it returned `Ok`, neither a device nor this
    /// provider touches adopted memory again, and the application may
    /// free it. Returns how many MRs it deregistered.
    ///
    /// The MRs' handles stay valid: their
    /// [`dereg_mr`](relink_fabric::Provider::dereg_mr) then reports
    /// [`Destroyed::AlreadyReleased`](relink_fabric::Destroyed). MRs on a
    /// device that was lost were released with it (its QPs went to the
    /// error state at once: it accesses nothing any more).
    ///
    /// # Errors
    /// [`DestroyError::InvalidHandle`] if `memory` is not this provider's
    /// (nothing done); [`DestroyError::Busy`] if rdma-core refused to
    /// deregister an MR (a memory window bound to it, or a failure the
    /// kernel reported): the device may still access the memory, which
    /// stays as it was (not released) — call again, or keep the memory
    /// until the provider is dropped.
    pub fn release_memory(&self, memory: &Memory) -> Result<usize, DestroyError> {
        // Recognised before the lock, as in `reg_mr`.
        let allocs = self.lock().allocs.clone();
        let (memory, mapping) = allocs
            .recognise_own(memory)
            .ok_or(DestroyError::InvalidHandle("memory (not this provider's)"))?;
        let mut inner = self.lock();
        let mrs: Vec<(u64, u64)> = inner
            .mrs
            .iter()
            .filter(|(_, m)| m.raw.is_some() && m.memory.same(&memory))
            .map(|(h, m)| (*h, m.ctx))
            .collect();
        let mut released = 0;
        let mut refused = None;
        for (h, ctx) in mrs {
            let alive = inner.ctx_alive(ctx);
            // The record stays, without its object: the caller's
            // `dereg_mr` finds it released.
            let slot = &mut inner.mrs.get_mut(&h).expect("present").raw;
            match destroy_raw(slot, ffi::Mr::dereg, "MR", alive) {
                Ok(_) => released += 1,
                Err(e) => refused = Some(e),
            }
        }
        drop(inner);
        if let Some(e) = refused {
            return Err(e);
        }
        mapping.release();
        Ok(released)
    }

    pub(super) fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError> {
        let mut inner = self.lock();
        let c = inner
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        let raw_ctx = c.raw.as_ref().ok_or(CreateError::DeviceLost)?;
        let raw = raw_ctx
            .alloc_pd()
            .map_err(|e| errno::create_error(e, "PD", true))?;
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
        // No children; the record goes below unless the call failed.
        let slot = &mut inner.pds.get_mut(&pd.0).expect("present").raw;
        let r = destroy_raw(slot, ffi::Pd::dealloc, "PD", alive);
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
        let chan = match (&c.raw, &c.chan) {
            (Some(_), Some(ch)) => ch,
            _ => return Err(CreateError::DeviceLost),
        };
        if depth == 0 || depth > i32::MAX as u32 {
            return Err(CreateError::InvalidArgument(format!("CQ depth {depth}")));
        }
        // On the context of the channel.
        let raw = chan
            .create_cq(depth as c_int)
            .map_err(|e| errno::create_error(e, "CQ", true))?;
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
        let key = c.raw.as_ref().map(|r| r.key());
        // No QP; every event on it was acked.
        let slot = &mut inner.cqs.get_mut(&cq.0).expect("present").raw;
        let r = destroy_raw(slot, ffi::Cq::destroy, "CQ", alive);
        if r.is_ok() {
            inner.cqs.remove(&cq.0);
            if let Some(key) = key {
                inner.cq_by_ptr.remove(&key);
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
        let raw_pd = p.raw.as_ref().ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        if init.max_wr == 0 || init.max_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "SRQ max_wr and max_sge must be > 0".into(),
            ));
        }
        let raw = raw_pd
            .create_srq(init.max_wr, init.max_sge)
            .map_err(|e| errno::create_error(e, "SRQ", true))?;
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
        let key = s.raw.as_ref().map(|r| r.key());
        // No QP; destroyed once.
        let slot = &mut inner.srqs.get_mut(&srq.0).expect("present").raw;
        let r = destroy_raw(slot, ffi::Srq::destroy, "SRQ", alive);
        if r.is_ok() {
            inner.srqs.remove(&srq.0);
            if let Some(key) = key {
                inner.srq_by_ptr.remove(&key);
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
        let (memory, mapping) = allocs.recognise_own(memory).ok_or_else(|| {
            CreateError::InvalidArgument(
                "memory not allocated by this provider (use alloc_memory, or adopt_foreign)".into(),
            )
        })?;
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.as_ref().ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        // `memory` is this provider's own handle now: its address and
        // length are the mapping's.
        relink_fabric::check_reg_mr(&memory, addr, length, access)?;
        // The MR record keeps the mapping alive too (`memory`).
        let raw = raw_pd
            .reg_mr(&mapping, addr, length, convert::access_to_raw(access))
            .map_err(|e| errno::create_error(e, "MR", true))?;
        let (lkey, rkey) = raw.keys();
        let h = inner.handle();
        inner.mrs.insert(
            h,
            Mr {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                memory,
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
        let slot = &mut inner.mrs.get_mut(&mr.0).expect("present").raw;
        let r = destroy_raw(slot, ffi::Mr::dereg, "MR", alive);
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
        let raw_pd = p.raw.as_ref().ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        let ty = match kind {
            MwType::Type1 => sys::IBV_MW_TYPE_1,
            MwType::Type2 => sys::IBV_MW_TYPE_2,
        };
        let raw = raw_pd
            .alloc_mw(ty)
            .map_err(|e| errno::create_error(e, "MW", true))?;
        let rkey = raw.rkey();
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
        let slot = &mut inner.mws.get_mut(&mw.0).expect("present").raw;
        let r = destroy_raw(slot, ffi::Mw::dealloc, "MW", alive);
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
        let raw_pd = p.raw.as_ref().ok_or(CreateError::DeviceLost)?;
        let mut cq_raw = [None; 2];
        for (i, cq) in [init.send_cq, init.recv_cq].into_iter().enumerate() {
            let c = inner
                .cqs
                .get(&cq.0)
                .ok_or(CreateError::InvalidHandle("CQ"))?;
            if c.ctx != ctx {
                return Err(CreateError::Mismatch("CQ on another device"));
            }
            cq_raw[i] = Some(c.raw.as_ref().ok_or(CreateError::DeviceLost)?);
        }
        let [Some(send_cq), Some(recv_cq)] = cq_raw else {
            unreachable!("both CQs were looked up")
        };
        let srq_raw = match init.srq {
            Some(s) => {
                let s = inner
                    .srqs
                    .get(&s.0)
                    .ok_or(CreateError::InvalidHandle("SRQ"))?;
                if s.pd != pd.0 {
                    return Err(CreateError::Mismatch("SRQ of another PD"));
                }
                Some(s.raw.as_ref().ok_or(CreateError::DeviceLost)?)
            }
            None => None,
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
        let cap = sys::ibv_qp_cap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: if init.srq.is_some() { 0 } else { c.max_recv_wr },
            max_send_sge: c.max_send_sge,
            max_recv_sge: if init.srq.is_some() {
                0
            } else {
                c.max_recv_sge
            },
            max_inline_data: 0,
        };
        // The PD, CQs and SRQ of one context.
        let raw = raw_pd
            .create_qp(send_cq, recv_cq, srq_raw, cap, init.sq_sig_all)
            .map_err(|e| errno::create_error(e, "QP", true))?;
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
        let rc = raw.modify(&mut a, mask as c_int);
        if rc != 0 {
            // The QP just created, destroyed once.
            let _ = raw.destroy();
            return Err(errno::create_error(rc, "QP", true));
        }
        let qpn = raw.qp_num();
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
        let key = q.raw.as_ref().map(|r| r.key());
        // No MW bound through it is used after; every async event on it
        // was acked.
        let slot = &mut inner.qps.get_mut(&qp.0).expect("present").raw;
        let r = destroy_raw(slot, ffi::Qp::destroy, "QP", alive);
        if r.is_ok() {
            let q = inner.qps.remove(&qp.0).expect("present");
            if let Some(key) = key {
                inner.qp_by_ptr.remove(&key);
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
        let Some(raw) = q.raw.as_ref() else {
            return Ok(QpState::Err);
        };
        if let Ok(state) = raw.query_state() {
            q.state = convert::qp_state_from_raw(state);
        }
        Ok(q.state)
    }

    pub(super) fn qp_to_error(&self, qp: QpId) -> Result<(), PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if let Some(raw) = q.raw.as_ref() {
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

/// Destroy the verbs object in `slot` with `destroy` unless its device
/// released it already (`None`): the shared tail of every destroy call. On
/// a failure that leaves the object in place, its handle goes back into
/// `slot` (the record stays, and the caller may try again).
fn destroy_raw<H>(
    slot: &mut Option<H>,
    destroy: impl FnOnce(H) -> Result<(), (H, i32)>,
    what: &'static str,
    ctx_alive: bool,
) -> Result<Destroyed, DestroyError> {
    let Some(raw) = slot.take() else {
        return Ok(Destroyed::AlreadyReleased);
    };
    let rc = match destroy(raw) {
        Ok(()) => 0,
        Err((raw, rc)) => {
            *slot = Some(raw);
            rc
        }
    };
    errno::destroy_result(rc, what, ctx_alive)
}
