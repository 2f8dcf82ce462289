//! [`PingPongLoop`]: round trips of SENDs on one connected pair, the
//! target sending each message straight back, each round trip timed on its
//! own; the target driven by the loop's thread or by a thread of its own.

use std::time::{Duration, Instant};

use relink_fabric::{Provider, RecvWr, SendOp, SendWr, WcOpcode, WorkCompletion};
use relink_testkit::{End, Rig, Side};

use super::check::{check_stamp, check_wc, stamp};
use super::conn::{pair_opts, Conn, TICK};
use super::measurement::{Clock, Measurement};
use super::spec::LoopSpec;
use super::stall::Stall;
use crate::latency::Rtts;
use crate::series::Runner;

/// Receives each side keeps posted (one message is in flight at a time).
const RECV_DEPTH: usize = 16;
/// Send requests each side may have outstanding (every one is signaled).
const SEND_DEPTH: u64 = 16;

/// Ping-pong of `size`-byte SENDs on the raw provider: the initiator
/// stamps and sends a message; the target polls it, checks it, reposts the
/// receive and sends a message with the same stamp back from its own send
/// buffer; the round trip ends when the initiator polled the reply's
/// receive and checked it. Every SEND is signaled (as relink signals the
/// last request of each posted batch, here a batch of one); send
/// completions are drained and checked in order and do not hold the next
/// message back.
///
/// One thread drives both sides and, when idle, waits on the host the
/// message in flight goes to; or, [`threaded`](PingPongLoop::threaded), the
/// target is driven by a thread of its own that waits on its host, as the
/// target's node is in a [`ThreadPair`](crate::ThreadPair).
pub struct PingPongLoop<'r> {
    conn: Conn<'r>,
    spec: LoopSpec,
    threaded: bool,
    next_seq: u64,
    rtts: Rtts,
}

/// One side of the pair as a loop drives it: receive slot `i` at
/// `i × size` of its buffer, the send buffer after them.
struct Peer<'a> {
    side: Side,
    host: &'a dyn Provider,
    end: &'a End,
    spec: LoopSpec,
    wcs: Vec<WorkCompletion>,
    /// SENDs of this side completed (a sequence number: the target
    /// replies with the initiator's numbers).
    done: u64,
}

impl<'a> Peer<'a> {
    fn new(conn: &'a Conn<'_>, side: Side, spec: LoopSpec, done: u64) -> Peer<'a> {
        Peer {
            side,
            host: conn.h.host(side),
            end: conn.pair.end(side),
            spec,
            wcs: Vec::with_capacity(RECV_DEPTH),
            done,
        }
    }

    fn send_off(&self) -> usize {
        RECV_DEPTH * self.spec.size
    }

    #[track_caller]
    fn poll(&mut self, recv: bool) -> usize {
        self.wcs.clear();
        let cq = if recv {
            self.end.recv_cq
        } else {
            self.end.send_cq
        };
        let side = self.side;
        self.host
            .poll_cq(cq, RECV_DEPTH, &mut self.wcs)
            .unwrap_or_else(|e| panic!("poll_cq({cq}) on the {side} host: {e}"))
    }

    /// Whether message `seq` arrived: checks it and reposts its receive.
    #[track_caller]
    fn take_message(&mut self, seq: u64) -> bool {
        let (side, size) = (self.side, self.spec.size);
        if self.poll(true) == 0 {
            return false;
        }
        assert_eq!(
            self.wcs.len(),
            1,
            "{side}: more than one message in flight: {:?}",
            self.wcs
        );
        let wc = self.wcs[0];
        check_wc(&wc, WcOpcode::Recv, self.end.qp, "ping-pong receive");
        assert_eq!(wc.byte_len as usize, size, "{side}: byte_len in {wc:?}");
        let slot = usize::try_from(wc.wr_id)
            .ok()
            .filter(|s| *s < RECV_DEPTH)
            .unwrap_or_else(|| panic!("receive completion of an unknown wr_id: {wc:?}"));
        check_stamp(
            &self.end.mem,
            slot * size,
            size,
            seq,
            self.spec.verify,
            "ping-pong",
        );
        let repost = [RecvWr {
            wr_id: wc.wr_id,
            sgl: self.end.sge(slot * size, size as u32).into(),
        }];
        if let Err(e) = self.host.post_recv(self.end.qp, &repost) {
            panic!("post_recv on the {side} host: {e}");
        }
        true
    }

    /// Stamp `seq` into the send buffer and post it, signaled, once the
    /// send queue has room.
    #[track_caller]
    fn post(&mut self, seq: u64, stall: &mut Stall) {
        while seq - self.done >= SEND_DEPTH {
            if !self.drain_sends() {
                stall.check(|| format!("ping-pong: {} send queue full at {seq}", self.side));
                self.wait();
            }
        }
        let (size, off) = (self.spec.size, self.send_off());
        stamp(&self.end.mem, off, size, seq, self.spec.verify);
        let wr = [SendWr::new(
            seq,
            SendOp::Send,
            self.end.sge(off, size as u32),
        )];
        if let Err(e) = self.host.post_send(self.end.qp, &wr) {
            panic!("post_send on the {} host: {e}", self.side);
        }
    }

    /// Drain the send completions (in order); whether any came.
    #[track_caller]
    fn drain_sends(&mut self) -> bool {
        if self.poll(false) == 0 {
            return false;
        }
        for wc in &self.wcs {
            check_wc(wc, WcOpcode::Send, self.end.qp, "ping-pong send");
            assert_eq!(
                wc.wr_id, self.done,
                "{}: send completions out of order",
                self.side
            );
            self.done += 1;
        }
        true
    }

    /// Wait up to a tick for something to happen on this side's host.
    fn wait(&self) {
        self.host.wait(Some(self.host.now() + TICK));
    }

    /// Wait until every SEND up to `end` completed.
    #[track_caller]
    fn finish(&mut self, end: u64, stall: &mut Stall) {
        while self.done < end {
            if self.drain_sends() {
                stall.progress();
            } else {
                stall.check(|| format!("ping-pong: {} sends done {}", self.side, self.done));
                self.wait();
            }
        }
    }
}

impl<'r> PingPongLoop<'r> {
    /// Connect a pair on `rig` and post the receives on both sides; one
    /// thread drives both. `spec.window` and `spec.signal_every` are
    /// ignored (one message in flight, every SEND signaled).
    ///
    /// # Panics
    /// If `spec` is invalid or the pair cannot be set up.
    #[track_caller]
    pub fn connect(rig: &'r dyn Rig, spec: LoopSpec) -> PingPongLoop<'r> {
        spec.validate();
        let opts = pair_opts(
            (RECV_DEPTH + 1) * spec.size,
            SEND_DEPTH as usize,
            RECV_DEPTH,
        );
        let conn = Conn::connect(rig, &opts);
        for side in Side::ALL {
            conn.pair
                .end(side)
                .post_slot_recvs(&conn.h, RECV_DEPTH, spec.size);
        }
        PingPongLoop {
            conn,
            spec,
            threaded: false,
            next_seq: 0,
            rtts: Rtts::default(),
        }
    }

    /// The same loop with the target driven by a thread of its own (during
    /// each run) if `threaded`.
    pub fn threaded(self, threaded: bool) -> PingPongLoop<'r> {
        PingPongLoop { threaded, ..self }
    }

    /// The provider kind of the initiator (`soft-inproc`, `soft-tcp`, ...).
    pub fn kind(&self) -> &'static str {
        self.conn.h.host(Side::Initiator).kind()
    }

    /// The round-trip times of every run so far.
    pub fn rtts(&self) -> &Rtts {
        &self.rtts
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
        let clock = Clock::start();
        let samples = if self.threaded {
            self.run_threaded(start, end)
        } else {
            self.run_one_thread(start, end)
        };
        let m = clock.stop(count, self.spec.size);
        self.conn.check_events();
        self.rtts.push_run(samples);
        self.next_seq = end;
        m
    }

    /// Both sides on this thread.
    #[track_caller]
    fn run_one_thread(&mut self, start: u64, end: u64) -> Vec<Duration> {
        let mut ini = Peer::new(&self.conn, Side::Initiator, self.spec, start);
        let mut tgt = Peer::new(&self.conn, Side::Target, self.spec, start);
        let mut samples = Vec::with_capacity((end - start) as usize);
        let mut stall = Stall::new();
        for seq in start..end {
            let t0 = Instant::now();
            ini.post(seq, &mut stall);
            let mut pinged = false;
            loop {
                let mut progress = false;
                if !pinged && tgt.take_message(seq) {
                    pinged = true;
                    tgt.post(seq, &mut stall);
                    progress = true;
                }
                if pinged && ini.take_message(seq) {
                    samples.push(t0.elapsed());
                    stall.progress();
                    break;
                }
                progress |= tgt.drain_sends();
                progress |= ini.drain_sends();
                if progress {
                    stall.progress();
                } else {
                    stall.check(|| format!("ping-pong: waiting for round trip {seq}"));
                    if pinged {
                        ini.wait();
                    } else {
                        tgt.wait();
                    }
                }
            }
        }
        ini.finish(end, &mut stall);
        tgt.finish(end, &mut stall);
        samples
    }

    /// The target on a thread of its own.
    #[track_caller]
    fn run_threaded(&mut self, start: u64, end: u64) -> Vec<Duration> {
        let mut ini = Peer::new(&self.conn, Side::Initiator, self.spec, start);
        let mut tgt = Peer::new(&self.conn, Side::Target, self.spec, start);
        std::thread::scope(|scope| {
            let echo = std::thread::Builder::new()
                .name("relink-bench-target".into())
                .spawn_scoped(scope, move || {
                    let mut stall = Stall::new();
                    for seq in start..end {
                        while !tgt.take_message(seq) {
                            if tgt.drain_sends() {
                                stall.progress();
                            } else {
                                stall.check(|| format!("ping-pong: target waits for {seq}"));
                                tgt.wait();
                            }
                        }
                        stall.progress();
                        tgt.post(seq, &mut stall);
                        tgt.drain_sends();
                    }
                    tgt.finish(end, &mut stall);
                })
                .expect("spawn the target's thread");
            let mut samples = Vec::with_capacity((end - start) as usize);
            let mut stall = Stall::new();
            for seq in start..end {
                let t0 = Instant::now();
                ini.post(seq, &mut stall);
                loop {
                    if ini.take_message(seq) {
                        samples.push(t0.elapsed());
                        stall.progress();
                        break;
                    }
                    if ini.drain_sends() {
                        stall.progress();
                    } else {
                        assert!(!echo.is_finished(), "the target's thread ended early");
                        stall.check(|| format!("ping-pong: waiting for round trip {seq}"));
                        ini.wait();
                    }
                }
            }
            ini.finish(end, &mut stall);
            if let Err(p) = echo.join() {
                std::panic::resume_unwind(p);
            }
            samples
        })
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
    use relink_testkit::soft_rigs::{InProcRig, TcpRig};

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

    #[test]
    fn ping_pong_with_the_target_on_its_own_thread() {
        let rig = TcpRig::new();
        let spec = LoopSpec::send(4096, 1);
        let mut l = PingPongLoop::connect(&rig, spec).threaded(true);
        assert_eq!(l.kind(), "soft-tcp");
        for count in [1, 60] {
            assert_eq!(l.run(count).ops, count);
        }
        assert_eq!(l.rtts().last_runs(1).len(), 60);
        l.close();
    }
}
