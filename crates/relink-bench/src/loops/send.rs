//! [`SendLoop`]: the message rate of SENDs on one connected pair, every
//! receive checked and reposted; and [`send_rate`], one run on a fresh pair.

use relink_fabric::{RecvWr, SendOp, SendWr, WcOpcode};
use relink_testkit::{Rig, Side};

use super::check::{check_stamp, check_wc, stamp};
use super::conn::{pair_opts, Conn};
use super::measurement::{Clock, Measurement};
use super::spec::LoopSpec;
use super::stall::Stall;
use crate::series::Runner;

/// SENDs from the initiator to the target: the target keeps
/// `2 × window` receives posted (enough that a SEND never meets an empty
/// receive queue, however the loop's polls interleave) and reposts each as
/// soon as it completes; the initiator keeps up to `window` SENDs
/// outstanding.
pub struct SendLoop<'r> {
    conn: Conn<'r>,
    spec: LoopSpec,
    recv_depth: usize,
    next_seq: u64,
    received: u64,
}

impl<'r> SendLoop<'r> {
    /// Connect a pair on `rig` and post the receives.
    ///
    /// # Panics
    /// If `spec` is invalid or the pair cannot be set up.
    #[track_caller]
    pub fn connect(rig: &'r dyn Rig, spec: LoopSpec) -> SendLoop<'r> {
        spec.validate();
        let recv_depth = 2 * spec.window;
        let opts = pair_opts(
            spec.window.max(recv_depth) * spec.size,
            spec.window,
            recv_depth,
        );
        let conn = Conn::connect(rig, &opts);
        conn.pair
            .target
            .post_slot_recvs(&conn.h, recv_depth, spec.size);
        SendLoop {
            conn,
            spec,
            recv_depth,
            next_seq: 0,
            received: 0,
        }
    }

    /// The loop's shape.
    pub fn spec(&self) -> LoopSpec {
        self.spec
    }

    /// The provider kind of the initiator (`soft-inproc`, `soft-tcp`, ...).
    pub fn kind(&self) -> &'static str {
        self.conn.h.host(Side::Initiator).kind()
    }

    /// Send `count` messages and wait until every one completed at the
    /// initiator and was received (and checked) at the target.
    ///
    /// # Panics
    /// On any failed or unexpected completion, a wrong payload, an event, or
    /// a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let spec = self.spec;
        let (size, window) = (spec.size, spec.window as u64);
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut wrs: Vec<SendWr> = Vec::with_capacity(spec.window);
        let mut recvs: Vec<RecvWr> = Vec::with_capacity(self.recv_depth);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end || self.received < end {
            let mut progress = false;

            // The target: check and repost every completed receive.
            let n = self.conn.poll(Side::Target, true, self.recv_depth);
            if n > 0 {
                let tgt = &self.conn.pair.target;
                let host = self.conn.h.host(Side::Target);
                for wc in &self.conn.wcs {
                    let seq = self.received;
                    check_wc(wc, WcOpcode::Recv, tgt.qp, "receive");
                    assert!(
                        seq < posted,
                        "receive of message {seq} completed, but only {posted} were posted"
                    );
                    assert_eq!(
                        wc.byte_len as usize, size,
                        "receive of message {seq}: byte_len in {wc:?}"
                    );
                    let slot = usize::try_from(wc.wr_id)
                        .ok()
                        .filter(|s| *s < self.recv_depth)
                        .unwrap_or_else(|| {
                            panic!("receive completion of an unknown wr_id: {wc:?}")
                        });
                    check_stamp(&tgt.mem, slot * size, size, seq, spec.verify, "receive");
                    self.received += 1;
                    recvs.push(RecvWr {
                        wr_id: wc.wr_id,
                        sgl: tgt.sge(slot * size, size as u32).into(),
                    });
                }
                if let Err(e) = host.post_recv(tgt.qp, &recvs) {
                    panic!("post_recv on the target host: {e}");
                }
                recvs.clear();
                progress = true;
            }

            // The initiator: signaled completions, in order.
            let n = self.conn.poll(Side::Initiator, false, spec.window);
            if n > 0 {
                let ini = &self.conn.pair.initiator;
                for wc in &self.conn.wcs {
                    check_wc(wc, WcOpcode::Send, ini.qp, "send");
                    assert!(
                        (completed..posted).contains(&wc.wr_id) && spec.signaled(wc.wr_id, end),
                        "send completion out of order or unsignaled: completed up to {completed}, \
                         posted up to {posted}, got {wc:?}"
                    );
                    completed = wc.wr_id + 1;
                }
                progress = true;
            }

            // Refill the window.
            let ini = &self.conn.pair.initiator;
            while posted < end && posted - completed < window {
                let slot = (posted % window) as usize;
                stamp(&ini.mem, slot * size, size, posted, spec.verify);
                wrs.push(SendWr {
                    signaled: spec.signaled(posted, end),
                    ..SendWr::new(posted, SendOp::Send, ini.sge(slot * size, size as u32))
                });
                posted += 1;
            }
            if !wrs.is_empty() {
                if let Err(e) = self.conn.h.host(Side::Initiator).post_send(ini.qp, &wrs) {
                    panic!("post_send on the initiator host: {e}");
                }
                wrs.clear();
                progress = true;
            }

            if progress {
                stall.progress();
            } else {
                let received = self.received;
                stall.check(|| {
                    format!(
                        "SEND loop: posted {posted}, completed {completed}, received {received} \
                         of {start}..{end}"
                    )
                });
                let side = if completed < end {
                    Side::Initiator
                } else {
                    Side::Target
                };
                self.conn.wait(side);
            }
        }
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Tear the pair down, checking that nothing leaked.
    pub fn close(self) {
        self.conn.close();
    }
}

impl Runner for SendLoop<'_> {
    fn run(&mut self, count: u64) -> Measurement {
        SendLoop::run(self, count)
    }
}

/// Message rate of `size`-byte SENDs with `window` outstanding, on a fresh
/// pair of `rig`: `count` messages, one run, no warm-up (see
/// [`measure`](crate::measure) for a warmed-up series).
pub fn send_rate(rig: &dyn Rig, size: usize, window: usize, count: u64) -> Measurement {
    let mut l = SendLoop::connect(rig, LoopSpec::send(size, window));
    let m = l.run(count);
    l.close();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::Verify;
    use relink_testkit::soft_rigs::InProcRig;
    use std::time::Duration;

    #[test]
    fn send_loop_delivers_every_message_intact() {
        let rig = InProcRig::new(11);
        // Odd size, periodic signaling, a window that is not a multiple of
        // the signaling period, runs that end off the period.
        let spec = LoopSpec::send(100, 10).signal_every(4).verify(Verify::Full);
        let mut l = SendLoop::connect(&rig, spec);
        for count in [1, 37, 500] {
            let before = l.received;
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 100));
            assert_eq!(l.received - before, count, "every message received once");
            assert!(m.elapsed > Duration::ZERO);
        }
        assert_eq!(l.next_seq, 538);
        l.close();
    }
}
