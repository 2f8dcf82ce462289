//! The RC engine's responder: a request packet is checked (PSN, rkey, rights,
//! bounds), executed in order, answered with an ack, READ data, an atomic's
//! original value or a NAK; a duplicate is answered again without executing
//! twice.

use std::net::IpAddr;

use relink_fabric::QpId;
use relink_fabric::{Access, Memory, QpState, RecvWr, WcOpcode, WcStatus, WorkCompletion};

use super::{psn_le, HostState};
use crate::outbox::{Outbox, Outgoing};
use crate::packet::{Body, NakCode, Packet, ReqOp, RespKind};
use crate::payload::Payload;

/// How many executed atomics a QP remembers the original value of, so a
/// retransmitted atomic is answered again without executing twice.
const ATOMIC_CACHE: usize = 16;
impl HostState {
    fn resolve_remote(
        &self,
        qp: u64,
        rkey: u32,
        addr: u64,
        len: u64,
        right: Access,
    ) -> Result<(Memory, usize), NakCode> {
        let q = &self.qps[&qp];
        let in_range = |base: u64, blen: u64| {
            addr >= base && addr.checked_add(len).is_some_and(|e| e <= base + blen)
        };
        if let Some(m) = self.mr_by_key(rkey) {
            if m.dev == q.dev
                && m.pd == q.pd
                && m.info.access.contains(right)
                && in_range(m.info.addr, m.info.length)
            {
                return Ok((m.memory.clone(), (addr - m.memory.addr()) as usize));
            }
            return Err(NakCode::RemoteAccess);
        }
        if let Some(w) = self.mw_keys.get(&rkey).and_then(|h| self.mws.get(h)) {
            if let Some(b) = w.bound {
                let qp_ok = b.qp.is_none_or(|bq| bq == qp);
                if w.dev == q.dev
                    && w.pd == q.pd
                    && qp_ok
                    && b.access.contains(right)
                    && in_range(b.addr, b.length)
                {
                    if let Some(m) = self.mrs.get(&b.mr) {
                        return Ok((m.memory.clone(), (addr - m.memory.addr()) as usize));
                    }
                }
            }
        }
        Err(NakCode::RemoteAccess)
    }

    fn take_recv(&mut self, qp: u64) -> Option<RecvWr> {
        let q = self.qps.get_mut(&qp)?;
        match q.init.srq {
            Some(srq) => self.srqs.get_mut(&srq.0)?.queue.pop_front(),
            None => q.rq.pop_front(),
        }
    }

    fn respond(&mut self, qp: u64, psn: u32, kind: RespKind, out: &mut Outbox) {
        let q = &self.qps[&qp];
        let (Some((rip, rqpn)), Some(lip)) = (q.remote, q.local_ip) else {
            return;
        };
        out.packets.push(Outgoing {
            conn: q.conn,
            packet: Packet {
                src: lip,
                dst: rip,
                body: Body::Response {
                    dst_qpn: rqpn,
                    src_qpn: q.qpn,
                    psn,
                    kind,
                },
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn recv_completion(
        &mut self,
        qp: u64,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        invalidated_rkey: Option<u32>,
        solicited: bool,
    ) {
        let cq = self.qps[&qp].init.recv_cq;
        self.complete(
            cq,
            WorkCompletion {
                wr_id,
                status,
                opcode,
                qp: QpId(qp),
                byte_len,
                imm,
                invalidated_rkey,
            },
            solicited,
        );
    }

    /// Responder error of class C: NAK, then the responder QP goes to error.
    fn responder_fail(&mut self, qp: u64, psn: u32, code: NakCode, out: &mut Outbox) {
        self.respond(qp, psn, RespKind::Nak(code), out);
        self.qp_error(qp, None);
    }

    pub(super) fn on_request(
        &mut self,
        src: IpAddr,
        src_qpn: u32,
        dst_qpn: u32,
        psn: u32,
        op: &ReqOp,
        out: &mut Outbox,
    ) {
        let Some(&qp) = self.qpn_index.get(&dst_qpn) else {
            return;
        };
        let q = &self.qps[&qp];
        if q.remote != Some((src, src_qpn))
            || !matches!(q.state, QpState::Rtr | QpState::Rts)
            || !self.port_active(&q.dev)
        {
            return;
        }
        let expected = q.expected_psn;
        if psn != expected {
            if psn_le(psn, expected.wrapping_sub(1)) {
                self.on_duplicate(qp, psn, op, out);
            }
            // Out of order (a lost packet before it): drop, the requester
            // retransmits on timeout.
            return;
        }
        match *op {
            ReqOp::Send {
                ref data,
                imm,
                invalidate,
                solicited,
            } => {
                let Some(wr) = self.take_recv(qp) else {
                    self.respond(qp, psn, RespKind::Nak(NakCode::Rnr), out);
                    return;
                };
                let pd = self.qps[&qp].pd;
                if !wr.sgl.iter().all(|s| self.check_local(pd, s, true)) {
                    self.recv_completion(
                        qp,
                        wr.wr_id,
                        WcStatus::LocProtErr,
                        WcOpcode::Recv,
                        0,
                        None,
                        None,
                        false,
                    );
                    self.responder_fail(qp, psn, NakCode::RemoteOperation, out);
                    return;
                }
                if !self.scatter(&wr.sgl, data) {
                    self.recv_completion(
                        qp,
                        wr.wr_id,
                        WcStatus::LocLenErr,
                        WcOpcode::Recv,
                        0,
                        None,
                        None,
                        false,
                    );
                    self.responder_fail(qp, psn, NakCode::InvalidRequest, out);
                    return;
                }
                if let Some(rkey) = invalidate {
                    if !self.invalidate(pd, rkey) {
                        self.recv_completion(
                            qp,
                            wr.wr_id,
                            WcStatus::RemInvReqErr,
                            WcOpcode::Recv,
                            0,
                            None,
                            None,
                            false,
                        );
                        self.responder_fail(qp, psn, NakCode::InvalidRequest, out);
                        return;
                    }
                }
                self.qps.get_mut(&qp).expect("present").expected_psn = psn.wrapping_add(1);
                self.recv_completion(
                    qp,
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    data.len() as u32,
                    imm,
                    invalidate,
                    solicited,
                );
                self.respond(qp, psn, RespKind::Ack, out);
            }
            ReqOp::Write {
                addr,
                rkey,
                ref data,
                imm,
                solicited,
            } => {
                let target = if data.is_empty() {
                    None
                } else {
                    match self.resolve_remote(
                        qp,
                        rkey,
                        addr,
                        data.len() as u64,
                        Access::REMOTE_WRITE,
                    ) {
                        Ok(t) => Some(t),
                        Err(code) => {
                            self.responder_fail(qp, psn, code, out);
                            return;
                        }
                    }
                };
                let wr = if imm.is_some() {
                    match self.take_recv(qp) {
                        Some(wr) => Some(wr),
                        None => {
                            self.respond(qp, psn, RespKind::Nak(NakCode::Rnr), out);
                            return;
                        }
                    }
                } else {
                    None
                };
                if let Some((mem, off)) = target {
                    let _ = mem.write(off, data);
                }
                self.qps.get_mut(&qp).expect("present").expected_psn = psn.wrapping_add(1);
                if let Some(wr) = wr {
                    self.recv_completion(
                        qp,
                        wr.wr_id,
                        WcStatus::Success,
                        WcOpcode::RecvRdmaWithImm,
                        data.len() as u32,
                        imm,
                        None,
                        solicited,
                    );
                }
                self.respond(qp, psn, RespKind::Ack, out);
            }
            ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. } => {
                match self.execute_read_atomic(qp, psn, op) {
                    Ok(kind) => {
                        self.qps.get_mut(&qp).expect("present").expected_psn = psn.wrapping_add(1);
                        self.respond(qp, psn, kind, out);
                    }
                    Err(code) => self.responder_fail(qp, psn, code, out),
                }
            }
        }
    }

    fn execute_read_atomic(&mut self, qp: u64, psn: u32, op: &ReqOp) -> Result<RespKind, NakCode> {
        match *op {
            ReqOp::Read { addr, rkey, len } => {
                if len == 0 {
                    return Ok(RespKind::ReadData(Payload::empty()));
                }
                let (mem, off) =
                    self.resolve_remote(qp, rkey, addr, u64::from(len), Access::REMOTE_READ)?;
                let mut data = self.pool.take(len as usize);
                let buf = data
                    .get_mut()
                    .expect("a buffer fresh from the pool is not shared");
                if mem.read(off, buf).is_err() {
                    self.pool.recycle(data);
                    return Err(NakCode::RemoteAccess);
                }
                Ok(RespKind::ReadData(data))
            }
            ReqOp::FetchAdd { addr, rkey, .. } | ReqOp::CmpSwap { addr, rkey, .. } => {
                if addr % 8 != 0 {
                    return Err(NakCode::InvalidRequest);
                }
                let (mem, off) = self.resolve_remote(qp, rkey, addr, 8, Access::REMOTE_ATOMIC)?;
                let orig = match *op {
                    ReqOp::FetchAdd { add, .. } => mem.fetch_add(off, add),
                    ReqOp::CmpSwap { compare, swap, .. } => mem.compare_swap(off, compare, swap),
                    _ => unreachable!(),
                }
                .map_err(|_| NakCode::InvalidRequest)?;
                let q = self.qps.get_mut(&qp).expect("present");
                q.atomic_cache.push_back((psn, orig));
                if q.atomic_cache.len() > ATOMIC_CACHE {
                    q.atomic_cache.pop_front();
                }
                Ok(RespKind::AtomicOrig(orig))
            }
            _ => Err(NakCode::InvalidRequest),
        }
    }

    /// A retransmitted request that already executed: answer it again
    /// without executing it twice (reads re-read, atomics replay the saved
    /// result).
    fn on_duplicate(&mut self, qp: u64, psn: u32, op: &ReqOp, out: &mut Outbox) {
        let kind = match op {
            ReqOp::Read { .. } => match self.execute_read_atomic(qp, psn, op) {
                Ok(k) => k,
                Err(_) => return,
            },
            ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. } => {
                match self.qps[&qp].atomic_cache.iter().find(|(p, _)| *p == psn) {
                    Some((_, v)) => RespKind::AtomicOrig(*v),
                    None => return,
                }
            }
            _ => RespKind::Ack,
        };
        self.respond(qp, psn, kind, out);
    }
}
