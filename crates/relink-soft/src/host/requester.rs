//! The RC engine's requester: responses retire requests in PSN order, NAKs
//! fail them or start an RNR wait, and the transport's timers
//! ([`HostState::fire`]) retransmit what is still unacknowledged.

use std::net::IpAddr;
use std::time::Duration;

use relink_fabric::{QpState, WcStatus};

use super::{psn_le, HostState};
use crate::outbox::{Outbox, Timer};
use crate::packet::{NakCode, ReqOp, RespKind};

impl HostState {
    pub(super) fn on_response(
        &mut self,
        src: IpAddr,
        src_qpn: u32,
        dst_qpn: u32,
        psn: u32,
        kind: RespKind,
        out: &mut Outbox,
    ) {
        let Some(&qp) = self.qpn_index.get(&dst_qpn) else {
            return;
        };
        let q = &self.qps[&qp];
        if q.remote != Some((src, src_qpn)) || q.state != QpState::Rts || !self.port_active(&q.dev)
        {
            return;
        }
        // Entries up to (excluding) `psn` are acknowledged by any response
        // for `psn`; an ACK also covers `psn` itself.
        let mut progress = false;
        let mut target: Option<usize> = None;
        {
            let q = self.qps.get_mut(&qp).expect("present");
            for (i, e) in q.sq.iter_mut().enumerate() {
                let Some(ep) = e.psn else { continue };
                if e.done.is_some() {
                    continue;
                }
                if ep == psn {
                    target = Some(i);
                    break;
                }
                if !psn_le(ep, psn) {
                    break;
                }
                // An earlier request: a SEND/WRITE is implicitly acknowledged;
                // a READ/atomic still needs its own response.
                if matches!(
                    e.req,
                    Some(ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. })
                ) {
                    break;
                }
                e.done = Some((WcStatus::Success, e.sgl.iter().map(|s| s.length).sum()));
                progress = true;
            }
        }
        if let Some(i) = target {
            let q = &self.qps[&qp];
            let e = &q.sq[i];
            let sgl = e.sgl.clone();
            let is_read_atomic = matches!(
                e.req,
                Some(ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. })
            );
            let outcome = match kind {
                RespKind::Ack if !is_read_atomic => {
                    Some((WcStatus::Success, sgl.iter().map(|s| s.length).sum()))
                }
                RespKind::Ack => None,
                RespKind::ReadData(data) => {
                    let len = data.len() as u32;
                    let fits = self.scatter(&sgl, &data);
                    self.pool.recycle(data);
                    if fits {
                        Some((WcStatus::Success, len))
                    } else {
                        Some((WcStatus::LocLenErr, 0))
                    }
                }
                RespKind::AtomicOrig(v) => {
                    self.scatter(&sgl, &v.to_ne_bytes());
                    Some((WcStatus::Success, 8))
                }
                RespKind::Nak(NakCode::Rnr) => {
                    // The responder is alive: the transport retry budget
                    // starts again.
                    let q = self.qps.get_mut(&qp).expect("present");
                    q.retries_left = q.params.retry_count;
                    self.start_rnr_wait(qp, i, out);
                    None
                }
                RespKind::Nak(code) => {
                    let status = match code {
                        NakCode::RemoteAccess => WcStatus::RemAccessErr,
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteOperation | NakCode::Rnr => WcStatus::RemOpErr,
                    };
                    self.qp_error(qp, Some((i, status)));
                    self.drain_sq(qp);
                    return;
                }
            };
            if let Some(done) = outcome {
                if let Some(q) = self.qps.get_mut(&qp) {
                    q.sq[i].done = Some(done);
                    progress = true;
                    if !done.0.is_ok() {
                        self.qp_error(qp, None);
                        return;
                    }
                }
            }
        }
        if progress {
            let q = self.qps.get_mut(&qp).expect("present");
            q.retries_left = q.params.retry_count;
            q.rnr_left = q.params.rnr_retry_count;
            if !q.rnr_wait {
                let outstanding = q.sq.iter().any(|e| e.sent && e.done.is_none());
                if outstanding {
                    self.restart_retransmit(qp, out);
                } else {
                    q.rto = None;
                }
            }
        }
        self.pump(qp, out);
    }

    fn start_rnr_wait(&mut self, qp: u64, idx: usize, out: &mut Outbox) {
        let q = self.qps.get_mut(&qp).expect("present");
        if q.params.rnr_retry_count != 7 {
            if q.rnr_left == 0 {
                self.qp_error(qp, Some((idx, WcStatus::RnrRetryExcErr)));
                return;
            }
            q.rnr_left -= 1;
        }
        q.rnr_wait = true;
        q.timer_gen += 1;
        q.rto = None;
        q.rto_queued = false;
        out.timers.push((
            out.now + Duration::from_micros(640),
            Timer::Rnr {
                qp,
                gen: q.timer_gen,
            },
        ));
    }

    fn retransmit_unacked(&mut self, qp: u64, out: &mut Outbox) {
        let q = &self.qps[&qp];
        let resend: Vec<(u32, ReqOp)> =
            q.sq.iter()
                .filter(|e| e.sent && e.done.is_none())
                .filter_map(|e| Some((e.psn?, e.req.clone()?)))
                .collect();
        for (psn, req) in resend {
            self.transmit(qp, psn, req, out);
        }
    }

    /// A timer the host asked for fired.
    pub fn fire(&mut self, timer: Timer, out: &mut Outbox) {
        match timer {
            Timer::Retransmit { qp, gen } => {
                let Some(q) = self.qps.get_mut(&qp) else {
                    return;
                };
                if q.timer_gen != gen {
                    return; // stale
                }
                q.rto_queued = false;
                if q.state != QpState::Rts {
                    return;
                }
                match q.rto {
                    None => return,
                    Some(at) if at > out.now => {
                        // The clock restarted since this timer was queued.
                        q.rto_queued = true;
                        out.timers.push((at, Timer::Retransmit { qp, gen }));
                        return;
                    }
                    Some(_) => q.rto = None,
                }
                let Some(first) = q.sq.iter().position(|e| e.sent && e.done.is_none()) else {
                    return;
                };
                if q.retries_left == 0 {
                    self.qp_error(qp, Some((first, WcStatus::RetryExcErr)));
                    return;
                }
                q.retries_left -= 1;
                self.retransmit_unacked(qp, out);
                self.restart_retransmit(qp, out);
            }
            Timer::Rnr { qp, gen } => {
                let Some(q) = self.qps.get_mut(&qp) else {
                    return;
                };
                if q.timer_gen != gen || q.state != QpState::Rts {
                    return;
                }
                q.rnr_wait = false;
                self.retransmit_unacked(qp, out);
                self.restart_retransmit(qp, out);
                self.pump(qp, out);
            }
            Timer::Cm { id, gen } => self.cm_timeout(id, gen, out),
        }
    }
}
