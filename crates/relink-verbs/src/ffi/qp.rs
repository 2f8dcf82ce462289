//! Shared receive queues and QPs: create, modify, query, destroy, and the
//! type 1 window bind (`ibv_bind_mw`). Posting is in `wr.rs`.

use std::os::raw::c_int;
use std::sync::Arc;

use relink_verbs_sys as sys;

use super::cq::{Cq, CqNode};
use super::pd::{Mr, Mw, Pd, PdNode};
use super::{last_errno, Raw};
use crate::errno::codes;

/// The SRQ itself, held by its [`Srq`] and every QP using it (rule 2).
pub(super) struct SrqNode {
    raw: Raw<sys::ibv_srq>,
    _pd: Arc<PdNode>,
}

/// A shared receive queue.
pub(crate) struct Srq {
    /// The node's pointer, kept here too for the data path.
    pub(super) ptr: Raw<sys::ibv_srq>,
    node: Arc<SrqNode>,
}

impl Pd {
    /// Create an SRQ of `max_wr` requests of `max_sge` SGEs; the errno on
    /// failure.
    pub(crate) fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq, i32> {
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD (rule 1) and an initialised attribute struct;
        // the SRQ is destroyed once, by `Srq::destroy` (or leaked).
        let raw = Raw::new(unsafe { sys::ibv_create_srq(self.node.raw.get(), &mut attr) })
            .ok_or_else(last_errno)?;
        Ok(Srq {
            ptr: Raw(raw.0),
            node: Arc::new(SrqNode {
                raw,
                _pd: self.node.clone(),
            }),
        })
    }

    /// Create an RC QP on `send_cq` and `recv_cq` (and `srq`), with `cap`
    /// and `sq_sig_all`; the errno on failure. The QP starts in Reset.
    pub(crate) fn create_qp(
        &self,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&Srq>,
        cap: sys::ibv_qp_cap,
        sq_sig_all: bool,
    ) -> Result<Qp, i32> {
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.raw(),
            recv_cq: recv_cq.raw(),
            srq: srq.map_or(std::ptr::null_mut(), |s| s.ptr.get()),
            cap,
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: c_int::from(sq_sig_all),
        };
        // SAFETY: a live PD, CQs and SRQ (rule 1; the QP holds them, rule
        // 2); the attribute struct is initialised. The QP is destroyed
        // once, by `Qp::destroy` (or leaked).
        let raw = Raw::new(unsafe { sys::ibv_create_qp(self.node.raw.get(), &mut attr) })
            .ok_or_else(last_errno)?;
        Ok(Qp {
            raw,
            _pd: self.node.clone(),
            _cqs: [send_cq.node.clone(), recv_cq.node.clone()],
            _srq: srq.map(|s| s.node.clone()),
        })
    }
}

impl Srq {
    /// The address (the key of the provider's table of SRQs by pointer).
    pub(crate) fn key(&self) -> usize {
        self.ptr.key()
    }

    /// Destroy the SRQ: once no QP holds it (rule 2; otherwise `EBUSY`,
    /// nothing called); on failure the handle comes back with the errno.
    pub(crate) fn destroy(self) -> Result<(), (Srq, i32)> {
        let Srq { ptr, node } = self;
        let node = match Arc::try_unwrap(node) {
            Ok(node) => node,
            Err(node) => return Err((Srq { ptr, node }, codes::EBUSY)),
        };
        // SAFETY: a live SRQ with no QP of ours on it, destroyed once: on
        // success the node is dropped below (rule 1).
        let rc = unsafe { sys::ibv_destroy_srq(node.raw.get()) };
        if rc != 0 {
            return Err((
                Srq {
                    ptr,
                    node: Arc::new(node),
                },
                rc,
            ));
        }
        Ok(())
    }
}

/// A queue pair (RC).
pub(crate) struct Qp {
    pub(super) raw: Raw<sys::ibv_qp>,
    _pd: Arc<PdNode>,
    _cqs: [Arc<CqNode>; 2],
    _srq: Option<Arc<SrqNode>>,
}

impl Qp {
    /// The address (the key of the provider's table of QPs by pointer).
    pub(crate) fn key(&self) -> usize {
        self.raw.key()
    }

    /// The QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: a live QP (rule 1); the number is a plain field, set at
        // creation.
        unsafe { (*self.raw.get()).qp_num }
    }

    /// `ibv_modify_qp` with `attr` and `mask`; returns its code (0 or an
    /// errno). `ibv_qp_attr` holds no pointer: any value is a request the
    /// kernel checks.
    pub(crate) fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: c_int) -> c_int {
        // SAFETY: a live QP and an initialised attribute struct, only read
        // during the call.
        unsafe { sys::ibv_modify_qp(self.raw.get(), attr, mask) }
    }

    /// The QP's state as the device reports it (`IBV_QPS_*`); the code of
    /// `ibv_query_qp` on failure.
    pub(crate) fn query_state(&self) -> Result<u32, c_int> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: a live QP and structs to fill (the pointers written into
        // `init` are dropped unread).
        let rc = unsafe {
            sys::ibv_query_qp(
                self.raw.get(),
                &mut attr,
                sys::IBV_QP_STATE as c_int,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(rc);
        }
        Ok(attr.qp_state)
    }

    /// Bind type 1 window `mw` to `length` bytes at `addr` of `mr` with the
    /// verbs access flags `access`, signaled with `wr_id`; returns
    /// `ibv_bind_mw`'s code (0 or an errno). On success the window's new
    /// rkey is [`Mw::rkey`] (hence `&mut`: rdma-core writes it).
    pub(crate) fn bind_mw(
        &self,
        mw: &mut Mw,
        mr: &Mr,
        wr_id: u64,
        addr: u64,
        length: u64,
        access: u32,
    ) -> c_int {
        let mut b = sys::ibv_mw_bind {
            wr_id,
            send_flags: sys::IBV_SEND_SIGNALED,
            bind_info: sys::ibv_mw_bind_info {
                mr: mr.raw.get(),
                addr,
                length,
                mw_access_flags: access,
            },
        };
        // SAFETY: a live QP, window and MR (rule 1; borrowed for the call);
        // the bind struct is initialised and only read during the call.
        unsafe { sys::ibv_bind_mw(self.raw.get(), mw.raw.get(), &mut b) }
    }

    /// Destroy the QP; on failure the handle comes back with the errno.
    /// (A type 2 window bound through it holds it in the kernel: the
    /// destroy waits for the window's deallocation on rxe.)
    pub(crate) fn destroy(self) -> Result<(), (Qp, i32)> {
        // SAFETY: a live QP, destroyed once: on success `self` (and its
        // hold on its PD, CQs and SRQ) is dropped (rule 1).
        let rc = unsafe { sys::ibv_destroy_qp(self.raw.get()) };
        if rc != 0 {
            return Err((self, rc));
        }
        Ok(())
    }
}
