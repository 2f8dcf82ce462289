//! A device that is gone: everything the provider holds on it is released
//! at once (QPs to error, CQs drained, every outstanding request flushed
//! exactly once, the objects taken out of the tables) and its CM ids are
//! told; the rdma-core objects are then destroyed in dependency order and
//! the context closed by a reaper thread, without the lock (see
//! [`Released`]); and the CM ids parked while their port was down,
//! destroyed when the port is back or the device goes.

#![forbid(unsafe_code)]

use std::os::fd::AsFd;

use relink_fabric::{
    CmEvent, CmEventKind, CmId, CqId, DeviceId, Event, QpId, QpState, WcOpcode, WcStatus,
    WorkCompletion,
};

use super::objects::modify_to_error;
use super::{log_rc, Inner, ParkedId};
use crate::ffi::{self, resync_librdmacm};
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

    /// Everything on a device that is gone: release the contexts (their
    /// objects go to a reaper thread), tell the CM ids, have librdmacm
    /// re-synced (by the reaper once it is done, or by the event thread
    /// once the lock is released).
    pub(super) fn device_gone(&mut self, id: &DeviceId) {
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.device == *id && c.raw.is_some())
            .map(|(h, _)| *h)
            .collect();
        let released: Vec<Released> = ctxs
            .into_iter()
            .filter_map(|c| self.release_ctx(c))
            .collect();
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
        if released.is_empty() || !self.reap(released) {
            self.resync_librdmacm_soon();
        }
    }

    /// Destroy `released` and re-sync librdmacm on a thread of their own,
    /// so that neither the caller's calls (the lock) nor the event thread
    /// (the completion channels `wait` is woken by) wait for it: on a
    /// device being deleted each destroy waits in the kernel, 1–15 ms for
    /// a session's objects on rxe under emulation, while the caller has a
    /// loss to handle and perhaps a standby to switch to. The provider
    /// joins its reapers when it is dropped. Returns false if no thread
    /// could be started: the objects were destroyed here then (dropping
    /// the thread's closure drops them), librdmacm is not re-synced yet.
    fn reap(&mut self, released: Vec<Released>) -> bool {
        self.reapers.retain(|h| !h.is_finished());
        let spawned = std::thread::Builder::new()
            .name("relink-verbs-reaper".into())
            .spawn(move || {
                drop(released);
                resync_librdmacm();
            });
        match spawned {
            Ok(h) => {
                self.reapers.push(h);
                true
            }
            Err(e) => {
                tracing::warn!(target: "relink_verbs", "no reaper thread ({e}): a lost device's objects were destroyed under the lock");
                false
            }
        }
    }

    /// Have the event thread re-sync librdmacm once the lock is released:
    /// the event loop takes `resync_now` at the end of its round, and the
    /// kick brings a round when another thread found the device gone.
    pub(super) fn resync_librdmacm_soon(&mut self) {
        self.resync_now = true;
        ffi::write_eventfd(self.wake.as_fd());
    }

    /// Release everything on a context at once (its device is gone): QPs to
    /// error, CQs drained, every outstanding request flushed exactly once,
    /// and every rdma-core object on it taken out of the tables, returned
    /// as a [`Released`] that destroys them when dropped. The caller's handles stay, pointing at
    /// nothing. `None` if the context was released already.
    fn release_ctx(&mut self, ctx: u64) -> Option<Released> {
        let c = self.ctxs.get(&ctx)?;
        c.raw.as_ref()?;
        let device = c.device.clone();
        tracing::info!(target: "relink_verbs", %device, "device lost: releasing its context");
        let qps: Vec<u64> = self
            .qps
            .iter()
            .filter(|(_, q)| q.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for q in &qps {
            if let Some(raw) = self.qps[q].raw.as_ref() {
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
        let mut r = Released {
            device,
            mws: Vec::new(),
            qps: Vec::new(),
            srqs: Vec::new(),
            mrs: Vec::new(),
            cqs: Vec::new(),
            pds: Vec::new(),
            chan: None,
            ctx: None,
        };
        r.mws.extend(
            self.mws
                .values_mut()
                .filter(|w| w.ctx == ctx)
                .filter_map(|w| w.raw.take()),
        );
        for q in qps {
            let qr = self.qps.get_mut(&q).expect("present");
            if let Some(raw) = qr.raw.take() {
                self.qp_by_ptr.remove(&raw.key());
                r.qps.push(raw);
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
                r.srqs.push(raw);
            }
        }
        r.mrs.extend(
            self.mrs
                .values_mut()
                .filter(|m| m.ctx == ctx)
                .filter_map(|m| m.raw.take()),
        );
        for cq in cqs {
            if let Some(raw) = self.cqs.get_mut(&cq).and_then(|c| c.raw.take()) {
                self.cq_by_ptr.remove(&raw.key());
                r.cqs.push(raw);
            }
        }
        r.pds.extend(
            self.pds
                .values_mut()
                .filter(|p| p.ctx == ctx)
                .filter_map(|p| p.raw.take()),
        );
        self.qp_by_num.retain(|(c, _), _| *c != ctx);
        let c = self.ctxs.get_mut(&ctx).expect("present");
        r.ctx = c.raw.take();
        r.chan = c.chan.take();
        self.fds_changed = true;
        Some(r)
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
            drop(self.release_ctx(c));
        }
        let ids: Vec<u64> = self.cms.keys().copied().collect();
        for h in ids {
            if let Some(c) = self.cms.remove(&h) {
                // No event for it is unacknowledged.
                if let Err(e) = c.raw.destroy() {
                    log_rc("rdma_destroy_id", e);
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
            // The caller gave it up; its events were all acked.
            if let Err(e) = p.raw.destroy() {
                log_rc("rdma_destroy_id", e);
            }
        }
    }
}

/// The rdma-core objects of a released context, out of the provider's
/// tables: nothing else refers to them, so they are destroyed without the
/// lock, on whichever thread drops this.
pub(super) struct Released {
    device: DeviceId,
    mws: Vec<ffi::Mw>,
    qps: Vec<ffi::Qp>,
    srqs: Vec<ffi::Srq>,
    mrs: Vec<ffi::Mr>,
    cqs: Vec<ffi::Cq>,
    pds: Vec<ffi::Pd>,
    chan: Option<ffi::CompChannel>,
    /// Always `Some` until dropped.
    ctx: Option<ffi::Context>,
}

/// Destroy each of `objs` with `destroy` (named `what` in the log); errors
/// are logged (EIO: already released with the device), and an object that
/// failed to go is left behind (its handle dropped: it lets go of its
/// parents, which are destroyed next all the same).
fn destroy_each<T>(what: &str, objs: &mut Vec<T>, destroy: impl Fn(T) -> Result<(), (T, i32)>) {
    for o in objs.drain(..) {
        // Live, out of the provider's tables and destroyed once, here,
        // after its dependents (`Released::drop`'s order).
        if let Err((_left, rc)) = destroy(o) {
            log_rc(what, rc);
        }
    }
}

impl Drop for Released {
    /// Destroy everything in dependency order and close the context.
    fn drop(&mut self) {
        let t0 = std::time::Instant::now();
        // Windows first: on rxe a bound type 2 window holds a reference on
        // its QP, and `ibv_destroy_qp` waits in the kernel for it (on 6.12
        // about 50 s, then fails with ETIMEDOUT; `rdma link delete` blocks
        // meanwhile). Freeing a window invalidates it and lets go of its QP.
        // Then QPs; SRQs with no QP left; MRs with no MW left; CQs with no
        // QP left and every event acked (the event thread acks under the
        // lock, and the CQ left the tables under it); PDs with no child.
        destroy_each("ibv_dealloc_mw", &mut self.mws, ffi::Mw::dealloc);
        destroy_each("ibv_destroy_qp", &mut self.qps, ffi::Qp::destroy);
        destroy_each("ibv_destroy_srq", &mut self.srqs, ffi::Srq::destroy);
        destroy_each("ibv_dereg_mr", &mut self.mrs, ffi::Mr::dereg);
        destroy_each("ibv_destroy_cq", &mut self.cqs, ffi::Cq::destroy);
        destroy_each("ibv_dealloc_pd", &mut self.pds, ffi::Pd::dealloc);
        if let Some(ch) = self.chan.take() {
            // Every CQ on the channel was destroyed above; the event thread
            // polls its fd no more once it rebuilt its set (a poll already
            // under way holds its own reference).
            log_rc("ibv_destroy_comp_channel", ch.destroy().err().unwrap_or(0));
        }
        // Every object on the context was destroyed above; the context is
        // closed once (a `Released` is dropped once).
        if let Some(ctx) = self.ctx.take() {
            log_rc("ibv_close_device", ctx.close().err().unwrap_or(0));
        }
        tracing::debug!(target: "relink_verbs", device = %self.device, elapsed = ?t0.elapsed(), "lost device's context destroyed");
    }
}
