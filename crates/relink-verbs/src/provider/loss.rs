//! A device that is gone: everything the provider holds on it is released
//! at once (QPs to error, CQs drained, every outstanding request flushed
//! exactly once, objects destroyed in dependency order, the context
//! closed) and its CM ids are told; and the CM ids parked while their
//! port was down, destroyed when the port is back or the device goes.

use relink_fabric::{
    CmEvent, CmEventKind, CmId, CqId, DeviceId, Event, QpId, QpState, WcOpcode, WcStatus,
    WorkCompletion,
};
use relink_verbs_sys as sys;

use super::ffi::{last_errno, log_rc};
use super::objects::modify_to_error;
use super::{Inner, ParkedId};
use crate::track::Notify;

impl Inner {
    /// Declare `id` lost now (a fatal event, a CM removal): it leaves the
    /// list and everything the provider holds on it is released.
    pub(super) fn lose_device(&mut self, id: &DeviceId) {
        if let Some(ev) = self.book.mark_lost(id) {
            self.push(Event::Device(ev));
        }
        self.device_gone(id);
    }

    /// Everything on a device that is gone: release the contexts, tell the
    /// CM ids, have librdmacm re-synced once the lock is released (the
    /// event thread does it).
    pub(super) fn device_gone(&mut self, id: &DeviceId) {
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.device == *id && c.raw.is_some())
            .map(|(h, _)| *h)
            .collect();
        for c in ctxs {
            self.release_ctx(c);
        }
        let ids: Vec<u64> = self
            .cms
            .iter()
            .filter(|(_, c)| c.device.as_ref() == Some(id))
            .map(|(h, _)| *h)
            .collect();
        self.destroy_parked(|p| p.device == *id);
        for h in ids {
            let c = self.cms.get_mut(&h).expect("present");
            c.lost = true;
            if !c.removal_reported {
                c.removal_reported = true;
                self.push(Event::Cm(CmEvent {
                    id: CmId(h),
                    kind: CmEventKind::DeviceRemoval,
                }));
            }
        }
        self.resync_pending = true;
        self.resync_librdmacm_soon();
    }

    /// Have the event thread re-sync librdmacm once the lock is released:
    /// the event loop takes `resync_now` at the end of its round, and the
    /// kick brings a round when another thread found the device gone.
    pub(super) fn resync_librdmacm_soon(&mut self) {
        self.resync_now = true;
        super::kick_eventfd(self.wake_fd);
    }

    /// Release everything on a context at once (its device is gone): QPs to
    /// error, CQs drained, every outstanding request flushed exactly once,
    /// then destroy in dependency order and close the context. The caller's
    /// handles stay, pointing at nothing.
    fn release_ctx(&mut self, ctx: u64) {
        let Some(c) = self.ctxs.get(&ctx) else { return };
        let Some(raw_ctx) = c.raw else { return };
        let dev = c.device.clone();
        tracing::info!(target: "relink_verbs", device = %dev, "device lost: releasing its context");
        let qps: Vec<u64> = self
            .qps
            .iter()
            .filter(|(_, q)| q.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for q in &qps {
            if let Some(raw) = self.qps[q].raw {
                modify_to_error(raw);
            }
        }
        let cqs: Vec<u64> = self
            .cqs
            .iter()
            .filter(|(_, q)| q.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for cq in &cqs {
            self.poll_hw(*cq, usize::MAX);
        }
        for q in &qps {
            self.flush_tracked(*q);
        }
        for cq in &cqs {
            let cqr = self.cqs.get_mut(cq).expect("present");
            if !cqr.pending.is_empty() && cqr.notify.user_armed() {
                // Flushes are errors: they notify any arming.
                cqr.notify = Notify::default();
                self.push(Event::CqReady(CqId(*cq)));
            }
        }
        self.note_activity();
        // Destroy in dependency order; errors are logged (EIO = released).
        // Windows first: on rxe a bound type 2 window holds a reference on
        // its QP, and `ibv_destroy_qp` waits in the kernel for it (on 6.12
        // about 50 s, then fails with ETIMEDOUT; `rdma link delete` blocks
        // meanwhile). Freeing a window invalidates it and lets go of its QP.
        for w in self.mws.values_mut().filter(|w| w.ctx == ctx) {
            if let Some(raw) = w.raw.take() {
                // SAFETY: a live MW, deallocated once (a bound type 2 window
                // is invalidated with it).
                let rc = unsafe { sys::ibv_dealloc_mw(raw.get()) };
                log_rc("ibv_dealloc_mw", rc);
            }
        }
        for q in qps {
            let qr = self.qps.get_mut(&q).expect("present");
            if let Some(raw) = qr.raw.take() {
                self.qp_by_ptr.remove(&raw.key());
                // SAFETY: a live QP of this provider, destroyed once; its
                // pointer is dropped with `take()` above.
                let rc = unsafe { sys::ibv_destroy_qp(raw.get()) };
                log_rc("ibv_destroy_qp", rc);
            }
            qr.state = QpState::Err;
        }
        let srqs: Vec<u64> = self
            .srqs
            .iter()
            .filter(|(_, s)| s.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for s in srqs {
            if let Some(raw) = self.srqs.get_mut(&s).and_then(|s| s.raw.take()) {
                self.srq_by_ptr.remove(&raw.key());
                // SAFETY: a live SRQ with no QP left, destroyed once.
                let rc = unsafe { sys::ibv_destroy_srq(raw.get()) };
                log_rc("ibv_destroy_srq", rc);
            }
        }
        for m in self.mrs.values_mut().filter(|m| m.ctx == ctx) {
            if let Some(raw) = m.raw.take() {
                // SAFETY: a live MR with no MW left, deregistered once.
                let rc = unsafe { sys::ibv_dereg_mr(raw.get()) };
                log_rc("ibv_dereg_mr", rc);
            }
        }
        for cq in cqs {
            if let Some(raw) = self.cqs.get_mut(&cq).and_then(|c| c.raw.take()) {
                self.cq_by_ptr.remove(&raw.key());
                // SAFETY: a live CQ with no QP left and every event acked,
                // destroyed once.
                let rc = unsafe { sys::ibv_destroy_cq(raw.get()) };
                log_rc("ibv_destroy_cq", rc);
            }
        }
        for p in self.pds.values_mut().filter(|p| p.ctx == ctx) {
            if let Some(raw) = p.raw.take() {
                // SAFETY: a live PD with no child left, deallocated once.
                let rc = unsafe { sys::ibv_dealloc_pd(raw.get()) };
                log_rc("ibv_dealloc_pd", rc);
            }
        }
        self.qp_by_num.retain(|(c, _), _| *c != ctx);
        let c = self.ctxs.get_mut(&ctx).expect("present");
        c.raw = None;
        if let Some(ch) = c.chan.take() {
            // SAFETY: every CQ on the channel was destroyed above.
            let rc = unsafe { sys::ibv_destroy_comp_channel(ch.get()) };
            log_rc("ibv_destroy_comp_channel", rc);
        }
        // SAFETY: every object on the context was destroyed above; the
        // context is closed once.
        let rc = unsafe { sys::ibv_close_device(raw_ctx.get()) };
        log_rc("ibv_close_device", rc);
        self.fds_changed = true;
    }

    /// Every request of `qp` not completed yet gets one `WrFlushErr`.
    fn flush_tracked(&mut self, qp: u64) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        let sq = q.sq.drain();
        let rq = q.rq.drain();
        let (send_cq, recv_cq) = (q.init.send_cq, q.init.recv_cq);
        let flush = |wr_id, opcode| WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            qp: QpId(qp),
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
        };
        if let Some(c) = self.cqs.get_mut(&send_cq.0) {
            c.pending
                .extend(sq.iter().map(|e| flush(e.wr_id, e.opcode)));
        }
        if let Some(c) = self.cqs.get_mut(&recv_cq.0) {
            c.pending
                .extend(rq.iter().map(|w| flush(*w, WcOpcode::Recv)));
        }
    }

    /// Destroy everything (the provider is dropped): objects the caller
    /// leaked, then CM ids.
    pub(super) fn release_everything(&mut self) {
        let ctxs: Vec<u64> = self.ctxs.keys().copied().collect();
        for c in ctxs {
            self.release_ctx(c);
        }
        let ids: Vec<u64> = self.cms.keys().copied().collect();
        for h in ids {
            if let Some(c) = self.cms.remove(&h) {
                // SAFETY: a live id of this provider, destroyed once; no
                // event for it is unacknowledged.
                let rc = unsafe { sys::rdma_destroy_id(c.raw.get()) };
                if rc != 0 {
                    log_rc("rdma_destroy_id", last_errno());
                }
            }
        }
        self.cm_by_ptr.clear();
        self.destroy_parked(|_| true);
    }

    /// Destroy the parked CM ids `which` selects (their port is back, or
    /// their device is going). None of them has an unacknowledged event:
    /// every event is acked under this lock right after it is read.
    pub(super) fn destroy_parked(&mut self, which: impl Fn(&ParkedId) -> bool) {
        let mut i = 0;
        while i < self.parked.len() {
            if !which(&self.parked[i]) {
                i += 1;
                continue;
            }
            let p = self.parked.swap_remove(i);
            tracing::debug!(target: "relink_verbs", device = %p.device.name, "destroying a CM id parked while its port was down");
            // SAFETY: a live id of this provider the caller gave up, kept
            // only here, destroyed once; its events were all acked.
            if unsafe { sys::rdma_destroy_id(p.raw.get()) } != 0 {
                log_rc("rdma_destroy_id", last_errno());
            }
        }
    }
}
