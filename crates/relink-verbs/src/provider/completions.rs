//! Completions: polling a CQ into its `pending` queue, each work
//! completion matched to the request it completes (with rxe's deviations
//! handled), CQ notifications from the completion channel, and the
//! caller's `req_notify_cq` and `poll_cq`.

#![forbid(unsafe_code)]

use relink_fabric::{
    AsyncEvent, ContextId, CqId, Event, PollError, QpId, QpState, WcOpcode, WorkCompletion,
};
use relink_verbs_sys as sys;

use super::{log_rc, Inner, VerbsProvider};
use crate::convert;
use crate::ffi::Wc;
use crate::track::OnEvent;

/// The kernel's `IB_WC_WITH_INVALIDATE`, as rxe leaks it to user space.
const RXE_WC_WITH_INVALIDATE: u32 = 1 << 2;

/// Work completions polled per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;

impl Inner {
    /// Move up to `max` completions from the hardware CQ into `pending`.
    pub(super) fn poll_hw(&mut self, cq: u64, max: usize) -> usize {
        let mut got = 0;
        let mut wcs: [Wc; POLL_BATCH] = Default::default();
        while got < max {
            // Looked up at each round (once for up to `POLL_BATCH`
            // completions): converting them below needs the tables mutably.
            let Some(c) = self.cqs.get(&cq) else { break };
            let Some(raw) = c.raw.as_ref() else { break };
            let ctx = c.ctx;
            let want = (max - got).min(POLL_BATCH);
            let n = raw.poll(&mut wcs[..want]);
            if n <= 0 {
                if n < 0 {
                    tracing::warn!(target: "relink_verbs", cq, rc = n, "ibv_poll_cq failed");
                }
                break;
            }
            for wc in &wcs[..n as usize] {
                if let Some(w) = self.convert_wc(ctx, cq, wc) {
                    let c = self.cqs.get_mut(&cq).expect("present");
                    c.pending.push_back(w);
                    if !w.status.is_ok() && c.notify.error_completion() {
                        self.push(Event::CqReady(CqId(cq)));
                    }
                }
            }
            got += n as usize;
            if (n as usize) < want {
                break;
            }
        }
        got
    }

    /// One hardware completion as the caller's, matched against its QP's
    /// bookkeeping; `None` if its QP was destroyed.
    fn convert_wc(&mut self, ctx: u64, cq: u64, wc: &Wc) -> Option<WorkCompletion> {
        let Some(&qp) = self.qp_by_num.get(&(ctx, wc.qp_num())) else {
            tracing::debug!(target: "relink_verbs", qpn = wc.qp_num(), "completion of a destroyed QP dropped");
            return None;
        };
        let q = self.qps.get_mut(&qp)?;
        let status = convert::status_from_raw(wc.status());
        let ok = status.is_ok();
        let raw_op = convert::opcode_from_raw(wc.opcode());
        // Which queue: by CQ if the QP's two CQs differ, else by what the
        // bookkeeping expects (an error completion's opcode is undefined).
        let is_recv = if q.init.send_cq != q.init.recv_cq {
            q.init.recv_cq.0 == cq
        } else if ok {
            convert::is_recv_opcode(wc.opcode())
        } else if q.sq.front_is(wc.wr_id()) {
            false
        } else {
            q.rq.contains(wc.wr_id()) || convert::is_recv_opcode(wc.opcode())
        };
        let opcode = if is_recv {
            if q.init.srq.is_none() {
                q.rq.complete(wc.wr_id());
            }
            match raw_op {
                Some(op) if ok && convert::is_recv(op) => op,
                _ => WcOpcode::Recv,
            }
        } else {
            let tracked = q.sq.complete(wc.wr_id(), ok);
            match (ok, raw_op, tracked) {
                (true, Some(op), _) => op,
                (_, _, Some(op)) => op,
                (_, Some(op), None) => op,
                (_, None, None) => WcOpcode::Send,
            }
        };
        let flags = wc.wc_flags();
        let imm_or_inv = wc.imm_or_inv();
        let imm = (flags & sys::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(imm_or_inv));
        let rxe = self.ctxs.get(&ctx).is_some_and(|c| c.rxe);
        let inv_flag = if rxe && is_recv {
            sys::IBV_WC_WITH_INV | RXE_WC_WITH_INVALIDATE
        } else {
            sys::IBV_WC_WITH_INV
        };
        let invalidated_rkey = (ok && flags & inv_flag != 0).then_some(imm_or_inv);
        if !ok {
            self.qp_entered_error(qp);
        }
        Some(WorkCompletion {
            wr_id: wc.wr_id(),
            status,
            opcode,
            qp: QpId(qp),
            byte_len: wc.byte_len(),
            imm,
            invalidated_rkey,
        })
    }

    /// A QP went to the error state (a failed completion, a transition the
    /// provider made). On rxe, an SRQ-attached QP gets the
    /// `QpLastWqeReached` the device does not raise.
    pub(super) fn qp_entered_error(&mut self, qp: u64) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        q.state = QpState::Err;
        let rxe = self.ctxs.get(&q.ctx).is_some_and(|c| c.rxe);
        if rxe && q.init.srq.is_some() && q.raw.is_some() && !q.last_wqe_reported {
            q.last_wqe_reported = true;
            let ctx = q.ctx;
            self.push(Event::Async {
                ctx: ContextId(ctx),
                event: AsyncEvent::QpLastWqeReached(QpId(qp)),
            });
        }
    }

    /// Look for error completions on CQs armed for solicited completions
    /// only (see [`Notify::error_completion`]); true if one was armed.
    ///
    /// [`Notify::error_completion`]: crate::track::Notify::error_completion
    pub(super) fn scan_solicited_cqs(&mut self) -> bool {
        let armed: Vec<(u64, u32)> = self
            .cqs
            .iter()
            .filter(|(_, c)| c.raw.is_some() && c.notify.armed_solicited_only())
            .map(|(h, c)| (*h, c.depth))
            .collect();
        for (h, depth) in &armed {
            let room = (*depth as usize).saturating_sub(self.cqs[h].pending.len());
            if room > 0 {
                self.poll_hw(*h, room);
            }
        }
        !armed.is_empty()
    }

    /// Read and acknowledge every completion-channel event of context
    /// `ctx`, reporting `CqReady` where the caller's arming asks for it
    /// (see `crate::track::Notify`).
    pub(super) fn drain_cq_events(&mut self, ctx: u64) {
        // Each event is read and acked at once.
        while let Some(cq) = self
            .ctxs
            .get(&ctx)
            .and_then(|c| c.chan.as_ref())
            .and_then(|ch| ch.get_cq_event())
        {
            let Some(&h) = self.cq_by_ptr.get(&cq) else {
                continue;
            };
            self.note_activity();
            let action = self.cqs.get_mut(&h).expect("present").notify.on_event();
            match action {
                OnEvent::Activity => {}
                OnEvent::Ready => self.push(Event::CqReady(CqId(h))),
                OnEvent::Resolve => {
                    // Re-arm for solicited completions, then look at what
                    // came (see track::Notify). The CQ is the event's: a CQ
                    // in `cq_by_ptr` is live.
                    if let Some(raw) = self.cqs[&h].raw.as_ref() {
                        log_rc("ibv_req_notify_cq", raw.req_notify(true));
                    }
                    let before = self.cqs[&h].pending.len();
                    self.poll_hw(h, usize::MAX);
                    let found: Vec<(bool, bool)> = self.cqs[&h]
                        .pending
                        .iter()
                        .skip(before)
                        .map(|w| (convert::is_recv(w.opcode), w.status.is_ok()))
                        .collect();
                    if self.cqs.get_mut(&h).expect("present").notify.resolve(found) {
                        self.push(Event::CqReady(CqId(h)));
                    }
                }
            }
        }
    }

    /// Arm every CQ the caller does not arm itself, for `wait`; true if a
    /// completion is already there.
    pub(super) fn arm_for_wait(&mut self) -> bool {
        let mut found = false;
        let cqs: Vec<u64> = self.cqs.keys().copied().collect();
        for h in cqs {
            let c = self.cqs.get_mut(&h).expect("present");
            let Some(raw) = c.raw.as_ref() else { continue };
            if !c.notify.arm_for_activity() {
                continue;
            }
            log_rc("ibv_req_notify_cq", raw.req_notify(false));
            if c.pending.len() < c.depth as usize && self.poll_hw(h, 1) > 0 {
                found = true;
            }
        }
        found
    }
}

impl VerbsProvider {
    pub(super) fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), PollError> {
        let mut inner = self.lock();
        let c = inner.cqs.get_mut(&cq.0).ok_or(PollError::InvalidHandle)?;
        c.notify.user_arm(solicited_only);
        if let Some(raw) = c.raw.as_ref() {
            log_rc("ibv_req_notify_cq", raw.req_notify(solicited_only));
        }
        Ok(())
    }

    pub(super) fn poll_cq(
        &self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError> {
        let mut inner = self.lock();
        let have = inner
            .cqs
            .get(&cq.0)
            .ok_or(PollError::InvalidHandle)?
            .pending
            .len();
        if have < max {
            inner.poll_hw(cq.0, max - have);
        }
        let c = inner.cqs.get_mut(&cq.0).expect("present");
        let n = max.min(c.pending.len());
        out.extend(c.pending.drain(..n));
        Ok(n)
    }
}
