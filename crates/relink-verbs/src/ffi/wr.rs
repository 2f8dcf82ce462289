//! The rdma-core request lists of the post calls (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv`): built here from the interface's
//! requests, linked and posted (rule 3). Each batch is emptied and refilled
//! for each post; its vectors keep their capacity, so posting allocates
//! nothing once warm.

use std::marker::PhantomData;
use std::os::raw::c_int;

use relink_fabric::{MrId, MwId, RecvWr, SendOp, SendWr, Sge};
use relink_verbs_sys as sys;

use super::pd::{Mr, Mw};
use super::qp::{Qp, Srq};
use crate::convert;

/// An rdma-core work request (send or receive): the fields linking a batch
/// sets.
trait RawWr {
    /// Point the request at its SGE list and at the next request (null for
    /// the last).
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self);
}

impl RawWr for sys::ibv_send_wr {
    #[inline]
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self) {
        self.sg_list = sg_list;
        self.num_sge = num_sge;
        self.next = next;
    }
}

impl RawWr for sys::ibv_recv_wr {
    #[inline]
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self) {
        self.sg_list = sg_list;
        self.num_sge = num_sge;
        self.next = next;
    }
}

/// A batch of work requests linked for one post.
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

impl<W: RawWr> WrBatch<W> {
    #[inline]
    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.counts.clear();
    }

    #[inline]
    fn push(&mut self, wr: W, sgl: &[Sge]) {
        self.wrs.push(wr);
        self.sges.extend(sgl.iter().map(|s| sys::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }));
        self.counts.push(sgl.len());
    }

    /// Link and post with `f` (the post call on a live queue); on failure,
    /// the errno and how many were accepted.
    #[inline]
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

/// The send requests of `post_send`, kept by the provider and reused.
#[derive(Default)]
pub(crate) struct SendBatch(WrBatch<sys::ibv_send_wr>);

// SAFETY: the raw pointers a batch holds point into its own vectors, or at
// windows and MRs borrowed by the `SendList` that wrote them, and are read
// only by the post call of that list (rule 3); `begin` clears them before
// any reuse. Moving the vectors to another thread moves nothing they point
// to that another thread could use.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// Empty the batch for a new list of requests, whose windows and MRs
    /// are borrowed for `'a`.
    #[inline]
    pub(crate) fn begin<'a>(&mut self) -> SendList<'_, 'a> {
        self.0.clear();
        SendList {
            batch: &mut self.0,
            _handles: PhantomData,
        }
    }
}

/// A list of send requests being built, to be posted on one QP; the
/// windows and MRs its binds name are borrowed for `'a`, so they live
/// until the post.
pub(crate) struct SendList<'b, 'a> {
    batch: &'b mut WrBatch<sys::ibv_send_wr>,
    _handles: PhantomData<&'a ()>,
}

impl<'a> SendList<'_, 'a> {
    /// Add `wr` (its opcode, flags and SGEs). A `BindMw` asks `resolve`
    /// for its window and MR; its error is returned as is. No request is
    /// inline (rule 3).
    #[inline]
    pub(crate) fn push(
        &mut self,
        wr: &SendWr,
        resolve: impl FnOnce(MwId, MrId) -> Result<(&'a Mw, &'a Mr), String>,
    ) -> Result<(), String> {
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
                let (m, r) = resolve(mw, bind.mr)?;
                w.opcode = sys::IBV_WR_BIND_MW;
                w.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
                    mw: m.raw.get(),
                    rkey,
                    bind_info: sys::ibv_mw_bind_info {
                        mr: r.raw.get(),
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
        self.batch.push(w, &wr.sgl);
        Ok(())
    }

    /// Post the list on `qp`; on failure, the errno and how many requests
    /// were accepted.
    #[inline]
    pub(crate) fn post(self, qp: &'a Qp) -> Result<(), (i32, usize)> {
        self.batch.post(|first, bad| {
            // SAFETY: a live QP (borrowed) and a well-formed, linked list of
            // send requests whose SGE arrays, windows and MRs outlive the
            // call (rule 3).
            unsafe { sys::ibv_post_send(qp.raw.get(), first, bad) }
        })
    }
}

/// The receive requests of `post_recv` and `post_srq_recv`, kept by the
/// provider and reused.
#[derive(Default)]
pub(crate) struct RecvBatch(WrBatch<sys::ibv_recv_wr>);

// SAFETY: the raw pointers a batch holds point into its own vectors and are
// read only by the post call that set them (rule 3).
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Empty the batch and fill it with `wrs`.
    #[inline]
    pub(crate) fn fill(&mut self, wrs: &[RecvWr]) {
        self.0.clear();
        for w in wrs {
            self.0.push(
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

    /// Post the batch on `qp`'s receive queue; on failure, the errno and
    /// how many requests were accepted.
    #[inline]
    pub(crate) fn post(&mut self, qp: &Qp) -> Result<(), (i32, usize)> {
        self.0.post(|first, bad| {
            // SAFETY: a live QP (borrowed) and a well-formed, linked list of
            // receive requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_recv(qp.raw.get(), first, bad) }
        })
    }

    /// Post the batch on `srq`; on failure, the errno and how many requests
    /// were accepted.
    #[inline]
    pub(crate) fn post_srq(&mut self, srq: &Srq) -> Result<(), (i32, usize)> {
        self.0.post(|first, bad| {
            // SAFETY: a live SRQ (borrowed) and a well-formed, linked list
            // of receive requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_srq_recv(srq.ptr.get(), first, bad) }
        })
    }
}
