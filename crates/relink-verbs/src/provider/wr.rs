//! Posting work requests: `post_send`, `post_recv`, `post_srq_recv` and
//! type-1 `bind_mw`, each request recorded in its QP's bookkeeping once
//! the device accepted it (receives posted to an SRQ are not); and the
//! rdma-core request lists they are posted as ([`WrBatch`]), kept in
//! [`Scratch`] under the provider's lock and reused call after call.

use std::os::raw::c_int;

use relink_fabric::{
    MwBind, MwId, MwType, PostError, QpId, QpState, RecvWr, SendOp, SendWr, Sge, SrqId, WcOpcode,
};
use relink_verbs_sys as sys;

use super::{Inner, VerbsProvider};
use crate::convert;
use crate::errno;
use crate::track::SqEntry;

impl VerbsProvider {
    pub(super) fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let mut inner = self.lock();
        let s = inner
            .srqs
            .get(&srq.0)
            .ok_or(PostError::InvalidHandle("SRQ"))?;
        let raw = s.raw.ok_or(PostError::DeviceLost { posted: 0 })?;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(s.init.max_sge, i)?;
        }
        let ctx = s.ctx;
        let batch = &mut inner.scratch.recv;
        batch.fill(wrs);
        let posted = batch.post(|first, bad| {
            // SAFETY: a live SRQ and a well-formed, linked list of receive
            // requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_srq_recv(raw.get(), first, bad) }
        });
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
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let w = inner.mws.get(&mw.0).ok_or(PostError::InvalidHandle("MW"))?;
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
        let alive = inner.ctx_alive(q.ctx);
        let (Some(raw_qp), Some(raw_mw), Some(raw_mr)) = (q.raw, w.raw, m.raw) else {
            return Err(PostError::DeviceLost { posted: 0 });
        };
        let mut b = sys::ibv_mw_bind {
            wr_id,
            send_flags: sys::IBV_SEND_SIGNALED,
            bind_info: sys::ibv_mw_bind_info {
                mr: raw_mr.get(),
                addr: bind.addr,
                length: bind.length,
                mw_access_flags: convert::access_to_raw(bind.access),
            },
        };
        // SAFETY: live QP, MW and MR of this provider; the bind struct is
        // initialised and only read during the call.
        let rc = unsafe { sys::ibv_bind_mw(raw_qp.get(), raw_mw.get(), &mut b) };
        if rc != 0 {
            return Err(errno::post_error(rc, 0, alive));
        }
        // SAFETY: a live MW; the provider stored the new rkey in it.
        let rkey = unsafe { (*raw_mw.get()).rkey };
        inner.qps.get_mut(&qp.0).expect("present").sq.push(SqEntry {
            wr_id,
            opcode: WcOpcode::BindMw,
            signaled: true,
        });
        Ok(rkey)
    }

    pub(super) fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let raw = q.raw.ok_or(PostError::DeviceLost { posted: 0 })?;
        let alive = inner.ctx_alive(q.ctx);
        if matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError::BadState {
                state: q.state,
                posted: 0,
            });
        }
        let caps = q.init.caps;
        let sig_all = q.init.sq_sig_all;
        // The batch leaves `inner` for the call (moving it allocates
        // nothing), as building a request reads the tables.
        let mut batch = std::mem::take(&mut inner.scratch.send);
        batch.clear();
        let mut built = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            built = wr.check(caps.max_send_sge, i).and_then(|()| {
                build_send_wr(&inner, wr)
                    .map(|raw_wr| batch.push(raw_wr, &wr.sgl))
                    .map_err(|reason| PostError::InvalidArgument { reason, posted: i })
            });
            if built.is_err() {
                break;
            }
        }
        let result = built.map(|()| {
            batch.post(|first, bad| {
                // SAFETY: a live QP and a well-formed, linked list of send
                // requests whose SGE arrays outlive the call.
                unsafe { sys::ibv_post_send(raw.get(), first, bad) }
            })
        });
        inner.scratch.send = batch;
        let result = result?;
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
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let raw = q.raw.ok_or(PostError::DeviceLost { posted: 0 })?;
        let alive = inner.ctx_alive(q.ctx);
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
        let result = batch.post(|first, bad| {
            // SAFETY: a live QP and a well-formed, linked list of receive
            // requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_recv(raw.get(), first, bad) }
        });
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

/// One `ibv_send_wr` for `wr` (without SGEs and links).
fn build_send_wr(inner: &Inner, wr: &SendWr) -> Result<sys::ibv_send_wr, String> {
    let mut w = sys::ibv_send_wr {
        wr_id: wr.wr_id,
        ..Default::default()
    };
    let mut flags = 0;
    if wr.signaled {
        flags |= sys::IBV_SEND_SIGNALED;
    }
    if wr.solicited {
        flags |= sys::IBV_SEND_SOLICITED;
    }
    if wr.fence {
        flags |= sys::IBV_SEND_FENCE;
    }
    w.send_flags = flags;
    let rdma = |w: &mut sys::ibv_send_wr, addr: u64, rkey: u32| {
        w.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: addr,
            rkey,
        };
    };
    match wr.op {
        SendOp::Send => w.opcode = sys::IBV_WR_SEND,
        SendOp::SendWithImm { imm } => {
            w.opcode = sys::IBV_WR_SEND_WITH_IMM;
            w.__bindgen_anon_1.imm_data = imm.to_be();
        }
        SendOp::SendWithInv { rkey } => {
            w.opcode = sys::IBV_WR_SEND_WITH_INV;
            w.__bindgen_anon_1.invalidate_rkey = rkey;
        }
        SendOp::Write { remote } => {
            w.opcode = sys::IBV_WR_RDMA_WRITE;
            rdma(&mut w, remote.addr, remote.rkey);
        }
        SendOp::WriteWithImm { remote, imm } => {
            w.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
            w.__bindgen_anon_1.imm_data = imm.to_be();
            rdma(&mut w, remote.addr, remote.rkey);
        }
        SendOp::Read { remote } => {
            w.opcode = sys::IBV_WR_RDMA_READ;
            rdma(&mut w, remote.addr, remote.rkey);
        }
        SendOp::FetchAdd { remote, add } => {
            w.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
            w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                remote_addr: remote.addr,
                compare_add: add,
                swap: 0,
                rkey: remote.rkey,
            };
        }
        SendOp::CmpSwap {
            remote,
            compare,
            swap,
        } => {
            w.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
            w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                remote_addr: remote.addr,
                compare_add: compare,
                swap,
                rkey: remote.rkey,
            };
        }
        SendOp::BindMw { mw, rkey, bind } => {
            let m = inner
                .mws
                .get(&mw.0)
                .and_then(|m| m.raw)
                .ok_or_else(|| format!("unknown or lost {mw}"))?;
            let r = inner
                .mrs
                .get(&bind.mr.0)
                .and_then(|m| m.raw)
                .ok_or_else(|| format!("unknown or lost {}", bind.mr))?;
            w.opcode = sys::IBV_WR_BIND_MW;
            w.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
                mw: m.get(),
                rkey,
                bind_info: sys::ibv_mw_bind_info {
                    mr: r.get(),
                    addr: bind.addr,
                    length: bind.length,
                    mw_access_flags: convert::access_to_raw(bind.access),
                },
            };
        }
        SendOp::LocalInv { rkey } => {
            w.opcode = sys::IBV_WR_LOCAL_INV;
            w.__bindgen_anon_1.invalidate_rkey = rkey;
        }
    }
    Ok(w)
}

/// An rdma-core work request (send or receive): the fields linking a batch
/// sets.
trait RawWr {
    /// Point the request at its SGE list and at the next request (null for
    /// the last).
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self);
}

impl RawWr for sys::ibv_send_wr {
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self) {
        self.sg_list = sg_list;
        self.num_sge = num_sge;
        self.next = next;
    }
}

impl RawWr for sys::ibv_recv_wr {
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self) {
        self.sg_list = sg_list;
        self.num_sge = num_sge;
        self.next = next;
    }
}

/// The request lists of the post calls, one of each kind, kept in the
/// provider's [`Inner`] and used under its lock.
#[derive(Default)]
pub(super) struct Scratch {
    send: SendBatch,
    recv: RecvBatch,
}

// SAFETY: the raw pointers a batch holds are only set by `WrBatch::post`,
// point into the batch's own vectors or at rdma-core objects the provider
// owns (windows and MRs of a bind), and are only read by rdma-core during
// that call; the batch lives in the provider's `Inner`, so only one thread
// at a time touches it, under the provider's lock.
unsafe impl Send for Scratch {}

/// A batch of work requests linked for one post (`ibv_post_send`,
/// `ibv_post_recv`, `ibv_post_srq_recv`); emptied and refilled for each
/// post, its vectors keep their capacity.
struct WrBatch<W> {
    /// The requests, linked in order by `post`.
    wrs: Vec<W>,
    /// Every request's SGEs, one after the other.
    sges: Vec<sys::ibv_sge>,
    /// How many of `sges` each request has, in order.
    counts: Vec<usize>,
}

impl<W> Default for WrBatch<W> {
    fn default() -> Self {
        WrBatch {
            wrs: Vec::new(),
            sges: Vec::new(),
            counts: Vec::new(),
        }
    }
}

type SendBatch = WrBatch<sys::ibv_send_wr>;
type RecvBatch = WrBatch<sys::ibv_recv_wr>;

impl<W: RawWr> WrBatch<W> {
    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.counts.clear();
    }

    fn push(&mut self, wr: W, sgl: &[Sge]) {
        self.wrs.push(wr);
        self.sges.extend(sgl.iter().map(|s| sys::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }));
        self.counts.push(sgl.len());
    }

    /// Link and post; on failure, the errno and how many were accepted.
    fn post(&mut self, f: impl FnOnce(*mut W, *mut *mut W) -> c_int) -> Result<(), (i32, usize)> {
        if self.wrs.is_empty() {
            return Ok(());
        }
        let n = self.wrs.len();
        let base = self.wrs.as_mut_ptr();
        let sges = self.sges.as_mut_ptr();
        let mut first = 0;
        for (i, &count) in self.counts.iter().enumerate() {
            let list = if count == 0 {
                std::ptr::null_mut()
            } else {
                sges.wrapping_add(first)
            };
            first += count;
            let next = if i + 1 < n {
                base.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: `i < n` (one count per request): the element is inside
            // the vector, which is not touched otherwise until the post
            // returns; `list` points at this request's `count` SGEs inside
            // `sges` (the counts add up to its length) or is null; `next` is
            // the following element or null.
            unsafe { (*base.add(i)).link(list, count as c_int, next) };
        }
        let mut bad: *mut W = std::ptr::null_mut();
        let rc = f(base, &mut bad);
        if rc == 0 {
            return Ok(());
        }
        let posted = if bad.is_null() {
            0
        } else {
            (bad as usize - base as usize) / std::mem::size_of::<W>()
        };
        Err((rc.abs(), posted.min(n)))
    }
}

impl RecvBatch {
    /// Empty the batch and fill it with `wrs`.
    fn fill(&mut self, wrs: &[RecvWr]) {
        self.clear();
        for w in wrs {
            self.push(
                sys::ibv_recv_wr {
                    wr_id: w.wr_id,
                    next: std::ptr::null_mut(),
                    sg_list: std::ptr::null_mut(),
                    num_sge: 0,
                },
                &w.sgl,
            );
        }
    }
}
