//! The objects a PD holds besides QPs: shared receive queues, memory
//! regions and memory windows, with the key lookups (`mr_by_key`) and the
//! window bind/invalidate steps the RC engine runs.

use std::collections::VecDeque;

use relink_fabric::{
    Access, CreateError, DestroyError, Destroyed, Memory, MrInfo, MwBind, MwInfo, MwType,
    PostError, RecvWr, SendOp, SendWr, SrqInit, WcStatus,
};
use relink_fabric::{MrId, MwId, PdId, QpId, SrqId};

use super::{HostState, Mr, Mw, MwBinding, Srq};
use crate::outbox::Outbox;

impl HostState {
    /// Create an SRQ.
    pub fn create_srq(&mut self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError> {
        let dev = self.pd_dev(pd)?;
        if init.max_wr == 0 || init.max_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "SRQ max_wr and max_sge must be > 0".into(),
            ));
        }
        let h = self.handle();
        self.srqs.insert(
            h,
            Srq {
                pd: pd.0,
                dev,
                init,
                queue: VecDeque::new(),
            },
        );
        self.index.use_object(pd.0);
        Ok(SrqId(h))
    }

    /// Destroy an SRQ.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<Destroyed, DestroyError> {
        if !self.srqs.contains_key(&srq.0) {
            return Err(DestroyError::InvalidHandle("SRQ"));
        }
        if self.index.in_use(srq.0) {
            return Err(DestroyError::Busy("SRQ"));
        }
        let s = self.srqs.remove(&srq.0).expect("present");
        self.index.release_object(s.pd);
        let dev = s.dev;
        Ok(self.destroyed(&dev))
    }

    /// Post receives to an SRQ.
    pub fn post_srq_recv(&mut self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let s = self
            .srqs
            .get(&srq.0)
            .ok_or(PostError::InvalidHandle("SRQ"))?;
        if !self.usable(&s.dev) {
            return Err(PostError::DeviceLost { posted: 0 });
        }
        let s = self.srqs.get_mut(&srq.0).expect("present");
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(s.init.max_sge, i)?;
            if s.queue.len() >= s.init.max_wr as usize {
                return Err(PostError::QueueFull { posted: i });
            }
            s.queue.push_back(wr.clone());
        }
        Ok(())
    }

    /// Register memory.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError> {
        let dev = self.pd_dev(pd)?;
        relink_fabric::check_reg_mr(memory, addr, length, access)?;
        let h = self.handle();
        let key = self.key();
        let info = MrInfo {
            id: MrId(h),
            addr,
            length,
            lkey: key,
            rkey: key,
            access,
        };
        self.mr_keys.insert(key, h);
        self.mrs.insert(
            h,
            Mr {
                pd: pd.0,
                dev,
                memory: memory.clone(),
                info,
            },
        );
        self.index.use_object(pd.0);
        Ok(info)
    }

    /// Deregister memory.
    pub fn dereg_mr(&mut self, mr: MrId) -> Result<Destroyed, DestroyError> {
        if !self.mrs.contains_key(&mr.0) {
            return Err(DestroyError::InvalidHandle("MR"));
        }
        if self
            .mws
            .values()
            .any(|w| w.bound.is_some_and(|b| b.mr == mr.0))
        {
            return Err(DestroyError::Busy("MR (bound memory windows)"));
        }
        let m = self.mrs.remove(&mr.0).expect("present");
        self.mr_keys.remove(&m.info.lkey);
        self.index.release_object(m.pd);
        let dev = m.dev;
        Ok(self.destroyed(&dev))
    }

    /// Allocate a memory window.
    pub fn alloc_mw(&mut self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError> {
        let dev = self.pd_dev(pd)?;
        let h = self.handle();
        let rkey = self.key();
        self.mw_keys.insert(rkey, h);
        self.mws.insert(
            h,
            Mw {
                pd: pd.0,
                dev,
                kind,
                rkey,
                bound: None,
            },
        );
        self.index.use_object(pd.0);
        Ok(MwInfo {
            id: MwId(h),
            rkey,
            kind,
        })
    }

    /// Free a memory window.
    pub fn dealloc_mw(&mut self, mw: MwId) -> Result<Destroyed, DestroyError> {
        let w = self
            .mws
            .remove(&mw.0)
            .ok_or(DestroyError::InvalidHandle("MW"))?;
        self.mw_keys.remove(&w.rkey);
        self.index.release_object(w.pd);
        let dev = w.dev;
        Ok(self.destroyed(&dev))
    }

    /// Bind a type 1 window (`ibv_bind_mw`).
    pub fn bind_mw(
        &mut self,
        qp: QpId,
        mw: MwId,
        wr_id: u64,
        bind: MwBind,
        out: &mut Outbox,
    ) -> Result<u32, PostError> {
        let w = self.mws.get(&mw.0).ok_or(PostError::InvalidHandle("MW"))?;
        if w.kind != MwType::Type1 {
            return Err(PostError::InvalidArgument {
                reason: "bind_mw is for type 1 windows; use SendOp::BindMw".into(),
                posted: 0,
            });
        }
        let old = w.rkey;
        let rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        let wr = SendWr::new(wr_id, SendOp::BindMw { mw, rkey, bind }, Vec::new());
        self.post_send(qp, std::slice::from_ref(&wr), out)?;
        Ok(rkey)
    }

    /// Execute a bind; returns the error status if it fails.
    pub(super) fn exec_bind(
        &mut self,
        qp: u64,
        mw: MwId,
        rkey: u32,
        bind: MwBind,
    ) -> Result<(), WcStatus> {
        let qpd = self.qps.get(&qp).map(|q| q.pd).ok_or(WcStatus::MwBindErr)?;
        let mr = self.mrs.get(&bind.mr.0).ok_or(WcStatus::MwBindErr)?;
        let w = self.mws.get(&mw.0).ok_or(WcStatus::MwBindErr)?;
        if w.pd != qpd || mr.pd != qpd {
            return Err(WcStatus::MwBindErr);
        }
        if !mr.info.access.contains(Access::MW_BIND) {
            return Err(WcStatus::MwBindErr);
        }
        if w.kind == MwType::Type2 && w.bound.is_some() {
            return Err(WcStatus::MwBindErr);
        }
        if w.kind == MwType::Type2 && (rkey & !0xff) != (w.rkey & !0xff) {
            return Err(WcStatus::MwBindErr);
        }
        let unbind = bind.length == 0;
        if !unbind {
            let end = bind.addr.checked_add(bind.length);
            let inside = bind.addr >= mr.info.addr
                && end.is_some_and(|e| e <= mr.info.addr + mr.info.length);
            // Remote write/atomic through a window need local write on the MR.
            let rights_ok = (!bind
                .access
                .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                || mr.info.access.contains(Access::LOCAL_WRITE))
                && !bind.access.contains(Access::MW_BIND);
            if !inside || !rights_ok {
                return Err(WcStatus::MwBindErr);
            }
        }
        let kind = w.kind;
        let w = self.mws.get_mut(&mw.0).expect("present");
        let old = std::mem::replace(&mut w.rkey, rkey);
        self.mw_keys.remove(&old);
        self.mw_keys.insert(rkey, mw.0);
        let w = self.mws.get_mut(&mw.0).expect("present");
        w.bound = if unbind {
            None
        } else {
            Some(MwBinding {
                mr: bind.mr.0,
                addr: bind.addr,
                length: bind.length,
                access: bind.access,
                qp: (kind == MwType::Type2).then_some(qp),
            })
        };
        Ok(())
    }

    /// Invalidate a type 2 window by rkey (LOCAL_INV or SEND_WITH_INV).
    pub(super) fn invalidate(&mut self, pd: u64, rkey: u32) -> bool {
        let Some(w) = self.mw_keys.get(&rkey).and_then(|h| self.mws.get_mut(h)) else {
            return false;
        };
        if w.pd == pd && w.kind == MwType::Type2 && w.bound.is_some() {
            w.bound = None;
            return true;
        }
        false
    }

    pub(super) fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        self.mr_keys.get(&key).and_then(|h| self.mrs.get(h))
    }
}
