//! [`PingPongLoop`]: round trips of SENDs on one connected pair, the
//! target sending each message straight back, each round trip timed on its
//! own.

use std::time::Instant;

use relink_fabric::{RecvWr, SendOp, SendWr, WcOpcode};
use relink_testkit::{Rig, Side};

use super::check::{check_stamp, check_wc, stamp};
use super::conn::{pair_opts, Conn};
use super::measurement::{Clock, Measurement};
use super::spec::LoopSpec;
use super::stall::Stall;
use crate::latency::Rtts;
use crate::series::Runner;

/// Receives each side keeps posted (one message is in flight at a time).
const RECV_DEPTH: usize = 16;
/// Send requests each side may have outstanding (every one is signaled).
const SEND_DEPTH: usize = 16;

/// Ping-pong of `size`-byte SENDs on the raw provider: the initiator
/// stamps and sends a message; the target polls it, checks it, reposts the
/// receive and sends a message with the same stamp back from its own send
/// buffer; the round trip ends when the initiator polled the reply's
/// receive and checked it. Every SEND is signaled (as relink signals the
/// last request of each posted batch, here a batch of one); send
/// completions are drained and checked in order and do not hold the next
/// message back. One thread drives both sides and, when idle, waits on the
/// host the message in flight goes to.
pub struct PingPongLoop<'r> {
    conn: Conn<'r>,
    spec: LoopSpec,
    next_seq: u64,
    rtts: Rtts,
}

/// A side's view of the loop's buffers: receive slot `i` at `i × size`,
/// the send buffer after them.
fn send_off(size: usize) -> usize {
    RECV_DEPTH * size
}

impl<'r> PingPongLoop<'r> {
    /// Connect a pair on `rig` and post the receives on both sides;
    /// `spec.window` and `spec.signal_every` are ignored (one message in
    /// flight, every SEND signaled).
    ///
    /// # Panics
    /// If `spec` is invalid or the pair cannot be set up.
    #[track_caller]
    pub fn connect(rig: &'r dyn Rig, spec: LoopSpec) -> PingPongLoop<'r> {
        spec.validate();
        let opts = pair_opts((RECV_DEPTH + 1) * spec.size, SEND_DEPTH, RECV_DEPTH);
        let conn = Conn::connect(rig, &opts);
        for side in Side::ALL {
            let end = conn.pair.end(side);
            let recvs: Vec<RecvWr> = (0..RECV_DEPTH)
                .map(|slot| RecvWr {
                    wr_id: slot as u64,
                    sgl: vec![end.sge(slot * spec.size, spec.size as u32)],
                })
                .collect();
            end.post_recv(&conn.h, &recvs);
        }
        PingPongLoop {
            conn,
            spec,
            next_seq: 0,
            rtts: Rtts::default(),
        }
    }

    /// The provider kind of the initiator (`soft-inproc`, `soft-tcp`, ...).
    pub fn kind(&self) -> &'static str {
        self.conn.h.host(Side::Initiator).kind()
    }

    /// The round-trip times of every run so far.
    pub fn rtts(&self) -> &Rtts {
        &self.rtts
    }

    /// Check the receive completions of `side` (at most one: one message is
    /// in flight), repost their receives; the sequence number received, if
    /// any.
    #[track_caller]
    fn take_message(&mut self, side: Side, seq: u64) -> bool {
        let size = self.spec.size;
        if self.conn.poll(side, true, RECV_DEPTH) == 0 {
            return false;
        }
        assert_eq!(
            self.conn.wcs.len(),
            1,
            "{side}: more than one message in flight: {:?}",
            self.conn.wcs
        );
        let wc = self.conn.wcs[0];
        let end = self.conn.pair.end(side);
        check_wc(&wc, WcOpcode::Recv, end.qp, "ping-pong receive");
        assert_eq!(wc.byte_len as usize, size, "{side}: byte_len in {wc:?}");
        let slot = usize::try_from(wc.wr_id)
            .ok()
            .filter(|s| *s < RECV_DEPTH)
            .unwrap_or_else(|| panic!("receive completion of an unknown wr_id: {wc:?}"));
        check_stamp(
            &end.mem,
            slot * size,
            size,
            seq,
            self.spec.verify,
            "ping-pong",
        );
        let repost = [RecvWr {
            wr_id: wc.wr_id,
            sgl: vec![end.sge(slot * size, size as u32)],
        }];
        if let Err(e) = self.conn.h.host(side).post_recv(end.qp, &repost) {
            panic!("post_recv on the {side} host: {e}");
        }
        true
    }

    /// Stamp `seq` into `side`'s send buffer and post it, signaled.
    #[track_caller]
    fn post(&mut self, side: Side, seq: u64) {
        let size = self.spec.size;
        let end = self.conn.pair.end(side);
        stamp(&end.mem, send_off(size), size, seq, self.spec.verify);
        let wr = [SendWr::new(
            seq,
            SendOp::Send,
            vec![end.sge(send_off(size), size as u32)],
        )];
        if let Err(e) = self.conn.h.host(side).post_send(end.qp, &wr) {
            panic!("post_send on the {side} host: {e}");
        }
    }

    /// Drain `side`'s send completions (in order from `*done`); whether any
    /// came.
    #[track_caller]
    fn drain_sends(&mut self, side: Side, done: &mut u64) -> bool {
        if self.conn.poll(side, false, SEND_DEPTH) == 0 {
            return false;
        }
        let qp = self.conn.pair.end(side).qp;
        for wc in &self.conn.wcs {
            check_wc(wc, WcOpcode::Send, qp, "ping-pong send");
            assert_eq!(wc.wr_id, *done, "{side}: send completions out of order");
            *done += 1;
        }
        true
    }

    /// Do `count` round trips, one after the other, timing each; returns
    /// when every reply was checked and every SEND completed on both sides.
    ///
    /// # Panics
    /// On any failed or unexpected completion, a wrong payload, an event, or
    /// a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let start = self.next_seq;
        let end = start + count;
        // SENDs completed on each side (the target replies with the same
        // numbers).
        let (mut ini_done, mut tgt_done) = (start, start);
        let mut samples = Vec::with_capacity(count as usize);
        let mut stall = Stall::new();
        let clock = Clock::start();
        for seq in start..end {
            // Room in the send queue (completions come long before).
            while seq - ini_done >= SEND_DEPTH as u64 {
                if !self.drain_sends(Side::Initiator, &mut ini_done) {
                    stall.check(|| format!("ping-pong: send queue full at {seq}"));
                    self.conn.wait(Side::Initiator);
                }
            }
            let t0 = Instant::now();
            self.post(Side::Initiator, seq);
            let mut pinged = false;
            loop {
                let mut progress = false;
                if !pinged && self.take_message(Side::Target, seq) {
                    pinged = true;
                    while seq - tgt_done >= SEND_DEPTH as u64 {
                        if !self.drain_sends(Side::Target, &mut tgt_done) {
                            stall.check(|| format!("ping-pong: target's send queue full at {seq}"));
                            self.conn.wait(Side::Target);
                        }
                    }
                    self.post(Side::Target, seq);
                    progress = true;
                }
                if pinged && self.take_message(Side::Initiator, seq) {
                    samples.push(t0.elapsed());
                    stall.progress();
                    break;
                }
                progress |= self.drain_sends(Side::Target, &mut tgt_done);
                progress |= self.drain_sends(Side::Initiator, &mut ini_done);
                if progress {
                    stall.progress();
                } else {
                    stall.check(|| format!("ping-pong: waiting for round trip {seq}"));
                    let side = if pinged {
                        Side::Initiator
                    } else {
                        Side::Target
                    };
                    self.conn.wait(side);
                }
            }
        }
        while ini_done < end || tgt_done < end {
            let a = self.drain_sends(Side::Initiator, &mut ini_done);
            let b = self.drain_sends(Side::Target, &mut tgt_done);
            if a | b {
                stall.progress();
            } else {
                stall.check(|| {
                    format!("ping-pong: sends completed {ini_done}, {tgt_done} of {end}")
                });
                let side = if ini_done < end {
                    Side::Initiator
                } else {
                    Side::Target
                };
                self.conn.wait(side);
            }
        }
        let m = clock.stop(count, self.spec.size);
        self.rtts.push_run(samples);
        self.next_seq = end;
        m
    }

    /// Tear the pair down, checking that nothing leaked.
    pub fn close(self) {
        self.conn.close();
    }
}

impl Runner for PingPongLoop<'_> {
    fn run(&mut self, count: u64) -> Measurement {
        PingPongLoop::run(self, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::Verify;
    use relink_testkit::soft_rigs::InProcRig;

    #[test]
    fn ping_pong_times_every_round_trip() {
        let rig = InProcRig::new(12);
        let spec = LoopSpec::send(100, 1).verify(Verify::Full);
        let mut l = PingPongLoop::connect(&rig, spec);
        for count in [1, 40, 100] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 100));
        }
        assert_eq!(l.next_seq, 141);
        assert_eq!(l.rtts().runs().len(), 3);
        assert_eq!(
            l.rtts().last_runs(2).len(),
            140,
            "one sample per round trip"
        );
        l.close();
    }
}
