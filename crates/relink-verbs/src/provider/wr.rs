//! Posting work requests: `post_send`, `post_recv`, `post_srq_recv` and
//! type-1 `bind_mw`, each request recorded in its QP's bookkeeping once
//! the device accepted it (receives posted to an SRQ are not). The
//! rdma-core request lists they are posted as are the FFI module's
//! (`ffi::SendBatch`, `ffi::RecvBatch`), kept in the provider's `Scratch`
//! under its lock and reused call after call.

#![forbid(unsafe_code)]

use std::collections::HashMap;

use relink_fabric::{
    MrId, MwBind, MwId, MwType, PostError, QpId, QpState, RecvWr, SendWr, SrqId, WcOpcode,
};

use super::{Mr, Mw, VerbsProvider};
use crate::convert;
use crate::errno;
use crate::ffi;
use crate::track::SqEntry;

impl VerbsProvider {
    pub(super) fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let s = inner
            .srqs
            .get(&srq.0)
            .ok_or(PostError::InvalidHandle("SRQ"))?;
        let raw = s.raw.as_ref().ok_or(PostError::DeviceLost { posted: 0 })?;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(s.init.max_sge, i)?;
        }
        let ctx = s.ctx;
        let batch = &mut inner.scratch.recv;
        batch.fill(wrs);
        let posted = batch.post_srq(raw);
        match posted {
            Ok(()) => Ok(()),
            Err((rc, n)) => Err(errno::post_error(rc, n, inner.ctx_alive(ctx))),
        }
    }
    pub(super) fn bind_mw(
        &self,
        qp: QpId,
        mw: MwId,
        wr_id: u64,
        bind: MwBind,
    ) -> Result<u32, PostError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let w = inner
            .mws
            .get_mut(&mw.0)
            .ok_or(PostError::InvalidHandle("MW"))?;
        if w.kind != MwType::Type1 {
            return Err(PostError::InvalidArgument {
                reason: "bind_mw is for type 1 windows; use SendOp::BindMw".into(),
                posted: 0,
            });
        }
        let m = inner
            .mrs
            .get(&bind.mr.0)
            .ok_or(PostError::InvalidHandle("MR"))?;
        let alive = inner.ctxs.get(&q.ctx).is_some_and(|c| c.raw.is_some());
        let (Some(raw_qp), Some(raw_mw), Some(raw_mr)) = (&q.raw, &mut w.raw, &m.raw) else {
            return Err(PostError::DeviceLost { posted: 0 });
        };
        let rc = raw_qp.bind_mw(
            raw_mw,
            raw_mr,
            wr_id,
            bind.addr,
            bind.length,
            convert::access_to_raw(bind.access),
        );
        if rc != 0 {
            return Err(errno::post_error(rc, 0, alive));
        }
        // rdma-core stored the new rkey in the window.
        let rkey = raw_mw.rkey();
        inner.qps.get_mut(&qp.0).expect("present").sq.push(SqEntry {
            wr_id,
            opcode: WcOpcode::BindMw,
            signaled: true,
        });
        Ok(rkey)
    }

    pub(super) fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError> {
        let mut guard = self.lock();
        // Borrowed field by field: the batch mutably, the tables a request
        // is built from (and posted on) immutably.
        let inner = &mut *guard;
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let raw = q.raw.as_ref().ok_or(PostError::DeviceLost { posted: 0 })?;
        let alive = inner.ctxs.get(&q.ctx).is_some_and(|c| c.raw.is_some());
        if matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError::BadState {
                state: q.state,
                posted: 0,
            });
        }
        let caps = q.init.caps;
        let sig_all = q.init.sq_sig_all;
        let (mws, mrs) = (&inner.mws, &inner.mrs);
        let mut list = inner.scratch.send.begin();
        let mut built = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            built = wr.check(caps.max_send_sge, i).and_then(|()| {
                list.push(wr, |mw, mr| bind_targets(mws, mrs, mw, mr))
                    .map_err(|reason| PostError::InvalidArgument { reason, posted: i })
            });
            if built.is_err() {
                break;
            }
        }
        built?;
        let result = list.post(raw);
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err((_, n)) => *n,
        };
        let q = inner.qps.get_mut(&qp.0).expect("present");
        for wr in &wrs[..posted] {
            q.sq.push(SqEntry {
                wr_id: wr.wr_id,
                opcode: wr.op.wc_opcode(),
                signaled: wr.signaled || sig_all,
            });
        }
        result.map_err(|(rc, n)| errno::post_error(rc, n, alive))
    }

    pub(super) fn post_recv(&self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let raw = q.raw.as_ref().ok_or(PostError::DeviceLost { posted: 0 })?;
        let alive = inner.ctxs.get(&q.ctx).is_some_and(|c| c.raw.is_some());
        if q.init.srq.is_some() {
            return Err(PostError::InvalidArgument {
                reason: "QP uses an SRQ".into(),
                posted: 0,
            });
        }
        let caps = q.init.caps;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(caps.max_recv_sge, i)?;
        }
        let batch = &mut inner.scratch.recv;
        batch.fill(wrs);
        let result = batch.post(raw);
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err((_, n)) => *n,
        };
        let q = inner.qps.get_mut(&qp.0).expect("present");
        for wr in &wrs[..posted] {
            q.rq.push(wr.wr_id);
        }
        result.map_err(|(rc, n)| errno::post_error(rc, n, alive))
    }
}

/// The window and MR of a `SendOp::BindMw` (from the provider's tables of
/// windows and MRs), or why not.
fn bind_targets<'a>(
    mws: &'a HashMap<u64, Mw>,
    mrs: &'a HashMap<u64, Mr>,
    mw: MwId,
    mr: MrId,
) -> Result<(&'a ffi::Mw, &'a ffi::Mr), String> {
    let m = mws
        .get(&mw.0)
        .and_then(|m| m.raw.as_ref())
        .ok_or_else(|| format!("unknown or lost {mw}"))?;
    let r = mrs
        .get(&mr.0)
        .and_then(|m| m.raw.as_ref())
        .ok_or_else(|| format!("unknown or lost {mr}"))?;
    Ok((m, r))
}
