//! QPs: creation, destruction, posting sends and receives, and the send-queue
//! side of the RC engine: gathering payloads, turning posted requests into
//! packets ([`HostState::pump`]), arming the retransmission timer, retiring
//! finished requests in order and flushing a QP that goes to error.

use std::collections::VecDeque;

use relink_fabric::ConnParams;
use relink_fabric::{
    Access, AsyncEvent, CreateError, DestroyError, Destroyed, Event, Memory, PollError, PostError,
    QpInit, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use relink_fabric::{ContextId, PdId, QpId};

use super::{HostState, Qp, SqEntry};
use crate::outbox::{Outbox, Outgoing, Timer};
use crate::packet::{Body, Packet, ReqOp};
use crate::payload::Payload;

impl HostState {
    /// Create an RC QP.
    pub fn create_qp(&mut self, pd: PdId, init: QpInit) -> Result<QpId, CreateError> {
        let dev = self.pd_dev(pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            let c = self
                .cqs
                .get(&cq.0)
                .ok_or(CreateError::InvalidHandle("CQ"))?;
            if c.dev != dev {
                return Err(CreateError::Mismatch("CQ on another device"));
            }
        }
        if let Some(srq) = init.srq {
            let s = self
                .srqs
                .get(&srq.0)
                .ok_or(CreateError::InvalidHandle("SRQ"))?;
            if s.pd != pd.0 {
                return Err(CreateError::Mismatch("SRQ of another PD"));
            }
        }
        let c = init.caps;
        if c.max_send_wr == 0 || c.max_send_sge == 0 || c.max_send_wr > 1 << 16 {
            return Err(CreateError::InvalidArgument(
                "max_send_wr must be 1..=65536 and max_send_sge > 0".into(),
            ));
        }
        if init.srq.is_none() && (c.max_recv_wr == 0 || c.max_recv_sge == 0) {
            return Err(CreateError::InvalidArgument(
                "max_recv_wr and max_recv_sge must be > 0 without an SRQ".into(),
            ));
        }
        let h = self.handle();
        let qpn = self.next_qpn;
        self.next_qpn += 1;
        self.qpn_index.insert(qpn, h);
        for user_of in [
            Some(pd.0),
            Some(init.send_cq.0),
            Some(init.recv_cq.0),
            init.srq.map(|s| s.0),
        ]
        .into_iter()
        .flatten()
        {
            self.index.use_object(user_of);
        }
        self.qps.insert(
            h,
            Qp {
                pd: pd.0,
                dev,
                init,
                qpn,
                state: QpState::Init,
                params: ConnParams::default(),
                remote: None,
                local_ip: None,
                conn: 0,
                sq: VecDeque::new(),
                next_psn: 0,
                retries_left: 7,
                rnr_left: 7,
                timer_gen: 0,
                rto: None,
                rto_queued: false,
                rnr_wait: false,
                rq: VecDeque::new(),
                expected_psn: 0,
                atomic_cache: VecDeque::new(),
                last_wqe_reported: false,
            },
        );
        Ok(QpId(h))
    }

    /// Destroy a QP (flushing nothing further: its completions are dropped).
    pub fn destroy_qp(&mut self, qp: QpId) -> Result<Destroyed, DestroyError> {
        let q = self
            .qps
            .remove(&qp.0)
            .ok_or(DestroyError::InvalidHandle("QP"))?;
        self.qpn_index.remove(&q.qpn);
        for user_of in [
            Some(q.pd),
            Some(q.init.send_cq.0),
            Some(q.init.recv_cq.0),
            q.init.srq.map(|s| s.0),
        ]
        .into_iter()
        .flatten()
        {
            self.index.release_object(user_of);
        }
        for w in self.mws.values_mut() {
            if w.bound.is_some_and(|b| b.qp == Some(qp.0)) {
                w.bound = None;
            }
        }
        if let Some(id) = self.index.take_qp_cm(qp.0) {
            if let Some(cm) = self.cm_ids.get_mut(&id).filter(|cm| cm.qp == Some(qp.0)) {
                cm.qp = None;
            }
        }
        Ok(self.destroyed(&q.dev))
    }

    /// A QP's state.
    pub fn qp_state(&self, qp: QpId) -> Result<QpState, PollError> {
        self.qps
            .get(&qp.0)
            .map(|q| q.state)
            .ok_or(PollError::InvalidHandle)
    }

    /// Move a QP to error.
    pub fn qp_to_error(&mut self, qp: QpId) -> Result<(), PostError> {
        if !self.qps.contains_key(&qp.0) {
            return Err(PostError::InvalidHandle("QP"));
        }
        self.qp_error(qp.0, None);
        Ok(())
    }

    pub(super) fn check_local(&self, pd: u64, sge: &Sge, write: bool) -> bool {
        self.mr_by_key(sge.lkey).is_some_and(|m| {
            m.pd == pd
                && sge.addr >= m.info.addr
                && sge
                    .addr
                    .checked_add(u64::from(sge.length))
                    .is_some_and(|e| e <= m.info.addr + m.info.length)
                && (!write || m.info.access.contains(Access::LOCAL_WRITE))
        })
    }

    fn local_memory(&self, lkey: u32) -> Option<&Memory> {
        self.mr_by_key(lkey).map(|m| &m.memory)
    }

    /// The bytes `sgl` names, in one payload: a recycled buffer from the
    /// pool, filled by one copy (never zero-filled first).
    fn gather(&mut self, sgl: &[Sge]) -> Payload {
        let total: usize = sgl.iter().map(|s| s.length as usize).sum();
        let mut payload = self.pool.take(total);
        let data = payload
            .get_mut()
            .expect("a buffer fresh from the pool is not shared");
        let mut start = 0;
        for s in sgl {
            let seg = &mut data[start..start + s.length as usize];
            start += seg.len();
            // Checked by check_local before; a segment that cannot be read
            // anyway reads as zeros, never as a recycled buffer's old bytes.
            let read = self
                .local_memory(s.lkey)
                .and_then(|m| m.read((s.addr - m.addr()) as usize, seg).ok());
            if read.is_none() {
                seg.fill(0);
            }
        }
        payload
    }

    /// Give a retired request's payload back to the pool (kept only if no
    /// packet in flight still shares it).
    pub(super) fn recycle_req(&mut self, req: ReqOp) {
        if let ReqOp::Send { data, .. } | ReqOp::Write { data, .. } = req {
            self.pool.recycle(data);
        }
    }

    /// Scatter `data` over `sgl`; false if it does not fit.
    pub(super) fn scatter(&self, sgl: &[Sge], data: &[u8]) -> bool {
        let cap: usize = sgl.iter().map(|s| s.length as usize).sum();
        if data.len() > cap {
            return false;
        }
        let mut rest = data;
        for s in sgl {
            if rest.is_empty() {
                break;
            }
            let n = rest.len().min(s.length as usize);
            if let Some(m) = self.local_memory(s.lkey) {
                let _ = m.write((s.addr - m.addr()) as usize, &rest[..n]);
            }
            rest = &rest[n..];
        }
        true
    }

    /// Post send requests.
    pub fn post_send(
        &mut self,
        qp: QpId,
        wrs: &[SendWr],
        out: &mut Outbox,
    ) -> Result<(), PostError> {
        let q = self.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if !self.usable(&q.dev) {
            return Err(PostError::DeviceLost { posted: 0 });
        }
        let state = q.state;
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError::BadState { state, posted: 0 });
        }
        let caps = q.init.caps;
        for (i, wr) in wrs.iter().enumerate() {
            let q = self.qps.get(&qp.0).expect("present");
            wr.check(caps.max_send_sge, i)?;
            if q.sq.len() >= caps.max_send_wr as usize {
                return Err(PostError::QueueFull { posted: i });
            }
            let signaled = wr.signaled || q.init.sq_sig_all;
            let q = self.qps.get_mut(&qp.0).expect("present");
            q.sq.push_back(SqEntry {
                wr_id: wr.wr_id,
                op: wr.op,
                sgl: wr.sgl.clone(),
                signaled,
                solicited: wr.solicited,
                psn: None,
                req: None,
                sent: false,
                done: if state == QpState::Rts {
                    None
                } else {
                    Some((WcStatus::WrFlushErr, 0))
                },
            });
        }
        self.pump(qp.0, out);
        Ok(())
    }

    /// Post receives.
    pub fn post_recv(&mut self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let q = self.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if !self.usable(&q.dev) {
            return Err(PostError::DeviceLost { posted: 0 });
        }
        if q.init.srq.is_some() {
            return Err(PostError::InvalidArgument {
                reason: "QP uses an SRQ".into(),
                posted: 0,
            });
        }
        let caps = q.init.caps;
        let err = q.state == QpState::Err;
        let recv_cq = q.init.recv_cq;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(caps.max_recv_sge, i)?;
            if err {
                self.complete(
                    recv_cq,
                    WorkCompletion {
                        wr_id: wr.wr_id,
                        status: WcStatus::WrFlushErr,
                        opcode: WcOpcode::Recv,
                        qp,
                        byte_len: 0,
                        imm: None,
                        invalidated_rkey: None,
                    },
                    false,
                );
                continue;
            }
            let q = self.qps.get_mut(&qp.0).expect("present");
            if q.rq.len() >= caps.max_recv_wr as usize {
                return Err(PostError::QueueFull { posted: i });
            }
            q.rq.push_back(wr.clone());
        }
        Ok(())
    }

    /// Transmit what can be transmitted, execute local operations that
    /// reached the head, and report finished requests in order.
    pub(super) fn pump(&mut self, qp: u64, out: &mut Outbox) {
        loop {
            // Report completed requests at the head, in order.
            self.drain_sq(qp);
            let Some(q) = self.qps.get(&qp) else { return };
            if q.state != QpState::Rts || q.rnr_wait {
                return;
            }
            let Some(idx) = q.sq.iter().position(|e| !e.sent) else {
                return;
            };
            let pd = q.pd;
            let entry = &q.sq[idx];
            let op = entry.op;
            let solicited = entry.solicited;
            let sgl = entry.sgl.clone();
            let writes_local = matches!(
                op,
                SendOp::Read { .. } | SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. }
            );
            if !sgl.iter().all(|s| self.check_local(pd, s, writes_local)) {
                self.qp_error(qp, Some((idx, WcStatus::LocProtErr)));
                continue;
            }
            match op {
                SendOp::BindMw { mw, rkey, bind } => {
                    if idx != 0 {
                        return; // waits for everything before it
                    }
                    let status = match self.exec_bind(qp, mw, rkey, bind) {
                        Ok(()) => WcStatus::Success,
                        Err(s) => s,
                    };
                    self.finish_local(qp, status);
                }
                SendOp::LocalInv { rkey } => {
                    if idx != 0 {
                        return;
                    }
                    let status = if self.invalidate(pd, rkey) {
                        WcStatus::Success
                    } else {
                        WcStatus::MwBindErr
                    };
                    self.finish_local(qp, status);
                }
                _ => {
                    let req = match op {
                        SendOp::Send => ReqOp::Send {
                            data: self.gather(&sgl),
                            imm: None,
                            invalidate: None,
                            solicited,
                        },
                        SendOp::SendWithImm { imm } => ReqOp::Send {
                            data: self.gather(&sgl),
                            imm: Some(imm),
                            invalidate: None,
                            solicited,
                        },
                        SendOp::SendWithInv { rkey } => ReqOp::Send {
                            data: self.gather(&sgl),
                            imm: None,
                            invalidate: Some(rkey),
                            solicited,
                        },
                        SendOp::Write { remote } => ReqOp::Write {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            data: self.gather(&sgl),
                            imm: None,
                            solicited: false,
                        },
                        SendOp::WriteWithImm { remote, imm } => ReqOp::Write {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            data: self.gather(&sgl),
                            imm: Some(imm),
                            solicited,
                        },
                        SendOp::Read { remote } => ReqOp::Read {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            len: sgl.iter().map(|s| s.length).sum(),
                        },
                        SendOp::FetchAdd { remote, add } => ReqOp::FetchAdd {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            add,
                        },
                        SendOp::CmpSwap {
                            remote,
                            compare,
                            swap,
                        } => ReqOp::CmpSwap {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            compare,
                            swap,
                        },
                        SendOp::BindMw { .. } | SendOp::LocalInv { .. } => unreachable!(),
                    };
                    let q = self.qps.get_mut(&qp).expect("present");
                    let psn = q.next_psn;
                    q.next_psn = q.next_psn.wrapping_add(1);
                    let e = &mut q.sq[idx];
                    e.psn = Some(psn);
                    e.sent = true;
                    // Kept for a retransmission: the clone shares the
                    // payload with the packet, no bytes are copied.
                    e.req = Some(req.clone());
                    self.transmit(qp, psn, req, out);
                    self.arm_retransmit(qp, out);
                }
            }
        }
    }

    fn finish_local(&mut self, qp: u64, status: WcStatus) {
        let q = self.qps.get_mut(&qp).expect("present");
        let e = &mut q.sq[0];
        e.sent = true;
        e.done = Some((status, 0));
        if !status.is_ok() {
            self.qp_error(qp, None);
        }
    }

    pub(super) fn transmit(&mut self, qp: u64, psn: u32, op: ReqOp, out: &mut Outbox) {
        let q = &self.qps[&qp];
        let (Some((rip, rqpn)), Some(lip)) = (q.remote, q.local_ip) else {
            return;
        };
        out.packets.push(Outgoing {
            conn: q.conn,
            packet: Packet {
                src: lip,
                dst: rip,
                body: Body::Request {
                    dst_qpn: rqpn,
                    src_qpn: q.qpn,
                    psn,
                    op,
                },
            },
        });
    }

    /// Start the retransmission clock if it is not running (a new request
    /// does not restart it: the oldest unacknowledged one counts).
    fn arm_retransmit(&mut self, qp: u64, out: &mut Outbox) {
        let q = self.qps.get_mut(&qp).expect("present");
        if q.rto.is_none() {
            self.restart_retransmit(qp, out);
        }
    }

    /// (Re)start the retransmission clock from now. One timer per QP is
    /// queued at a time; when it fires early (the deadline moved on), it is
    /// queued again for the new deadline — no pile of stale timers.
    pub(super) fn restart_retransmit(&mut self, qp: u64, out: &mut Outbox) {
        if self.cfg.reliable_wire {
            return;
        }
        let q = self.qps.get_mut(&qp).expect("present");
        let at = out.now + q.params.ack_timeout_duration();
        q.rto = Some(at);
        if !q.rto_queued {
            q.rto_queued = true;
            out.timers.push((
                at,
                Timer::Retransmit {
                    qp,
                    gen: q.timer_gen,
                },
            ));
        }
    }

    pub(super) fn drain_sq(&mut self, qp: u64) {
        loop {
            let Some(q) = self.qps.get_mut(&qp) else {
                return;
            };
            let Some(front) = q.sq.front() else { return };
            let Some((status, byte_len)) = front.done else {
                return;
            };
            let e = q.sq.pop_front().expect("front");
            let cq = q.init.send_cq;
            if e.signaled || !status.is_ok() {
                self.complete(
                    cq,
                    WorkCompletion {
                        wr_id: e.wr_id,
                        status,
                        opcode: e.op.wc_opcode(),
                        qp: QpId(qp),
                        byte_len,
                        imm: None,
                        invalidated_rkey: None,
                    },
                    false,
                );
            }
            if let Some(req) = e.req {
                self.recycle_req(req);
            }
        }
    }

    /// Put a QP in the error state: `first` (index into the send queue)
    /// completes with the given status, everything else not finished flushes.
    pub(super) fn qp_error(&mut self, qp: u64, first: Option<(usize, WcStatus)>) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        q.state = QpState::Err;
        q.timer_gen += 1;
        q.rto = None;
        q.rto_queued = false;
        q.rnr_wait = false;
        for (i, e) in q.sq.iter_mut().enumerate() {
            if e.done.is_none() {
                let status = match first {
                    Some((fi, s)) if fi == i => s,
                    _ => WcStatus::WrFlushErr,
                };
                e.done = Some((status, 0));
                e.sent = true;
            }
        }
        let rq: Vec<RecvWr> = q.rq.drain(..).collect();
        let recv_cq = q.init.recv_cq;
        let srq = q.init.srq;
        let report_last = srq.is_some() && !q.last_wqe_reported;
        q.last_wqe_reported = true;
        // An affiliated event: it goes to the context that owns the QP.
        let ctx = self.pds.get(&q.pd).map(|p| p.ctx);
        self.drain_sq(qp);
        for wr in rq {
            self.complete(
                recv_cq,
                WorkCompletion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp: QpId(qp),
                    byte_len: 0,
                    imm: None,
                    invalidated_rkey: None,
                },
                false,
            );
        }
        if let (true, Some(ctx)) = (report_last, ctx) {
            self.push_event(Event::Async {
                ctx: ContextId(ctx),
                event: AsyncEvent::QpLastWqeReached(QpId(qp)),
            });
        }
    }
}
