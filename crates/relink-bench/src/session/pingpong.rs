//! [`RelinkPingPong`]: round trips through a relink session, one message
//! out ([`Node::send`](relink::Node::send)) and the target application's
//! copy of it back, each round trip timed on its own.

use std::collections::VecDeque;
use std::time::Instant;

use relink::OpId;

use super::drive::Drive;
use super::receiver::{stamp_bytes, Receiver};
use super::stats::{check_completion, LoopStats};
use crate::latency::Rtts;
use crate::loops::{Clock, LoopSpec, Measurement, Stall};
use crate::series::Runner;

/// Ping-pong through a relink session on a pair set up with
/// [`Workload::PingPong`](super::Workload::PingPong): the initiator sends a
/// `size`-byte message, the target's application checks it and sends it
/// back, and the round trip ends when the initiator's application has the
/// reply in hand (drained with
/// [`Node::poll_delivery_into`](relink::Node::poll_delivery_into) and
/// checked). The next message goes at once: like an eager MPI send, a
/// message's completion (the peer confirmed delivery; it comes with the
/// reply, which carries the acknowledgement) does not hold the next one
/// back. Every completion is drained and checked, and a run ends when all of
/// its messages completed.
pub struct RelinkPingPong<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    payload: Vec<u8>,
    reply: Vec<u8>,
    replies: Receiver,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
    rtts: Rtts,
}

impl<D: Drive> RelinkPingPong<D> {
    /// A loop of `spec.size`-byte messages on `d`; `spec.window`,
    /// `spec.signal_every` and `spec.verify` are ignored (one message in
    /// flight; payloads are stamped).
    #[track_caller]
    pub fn new(d: D, spec: LoopSpec) -> RelinkPingPong<D> {
        spec.validate();
        RelinkPingPong {
            d,
            spec,
            next_seq: 0,
            payload: vec![0; spec.size],
            reply: Vec::with_capacity(spec.size),
            replies: Receiver::new(spec.size),
            outstanding: VecDeque::new(),
            stats: LoopStats::default(),
            rtts: Rtts::default(),
        }
    }

    /// Iterations and waits so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// The round-trip times of every run so far.
    pub fn rtts(&self) -> &Rtts {
        &self.rtts
    }

    /// The provider kind.
    pub fn kind(&self) -> &'static str {
        self.d.kind()
    }

    /// The drive.
    pub fn drive(&mut self) -> &mut D {
        &mut self.d
    }

    /// Do `count` round trips, one after the other, timing each; returns
    /// when every reply was checked and every message completed.
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong message either way,
    /// or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let s = self.d.session();
        let start = self.next_seq;
        let end = start + count;
        let mut completed = start;
        let mut samples = Vec::with_capacity(count as usize);
        let mut stall = Stall::new();
        let clock = Clock::start();
        for seq in start..end {
            stamp_bytes(&mut self.payload, seq);
            let t0 = Instant::now();
            let op = self
                .d
                .initiator()
                .send(s, &self.payload)
                .unwrap_or_else(|e| panic!("relink ping: {e}"));
            self.outstanding.push_back(op);
            loop {
                self.stats.iterations += 1;
                let mut progress = self.d.poll();
                let node = self.d.initiator();
                while let Some(c) = node.poll_completion(s) {
                    check_completion(&mut self.outstanding, c, "relink ping");
                    completed += 1;
                    progress = true;
                }
                if let Some(rseq) = node.poll_delivery_into(s, &mut self.reply) {
                    samples.push(t0.elapsed());
                    if let Err(e) = self.replies.check(rseq, &self.reply) {
                        panic!("relink pong: {e}");
                    }
                    stall.progress();
                    break;
                }
                if progress {
                    stall.progress();
                } else {
                    stall.check(|| format!("relink ping-pong: waiting for the reply to {seq}"));
                    self.stats.waits += 1;
                    self.d.wait(false);
                }
            }
        }
        // The last messages' confirmations (each comes with its reply).
        while completed < end {
            let mut progress = self.d.poll();
            while let Some(c) = self.d.initiator().poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink ping");
                completed += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                stall.check(|| format!("relink ping-pong: completed {completed} of {end}"));
                self.d.wait(false);
            }
        }
        self.stats.ops += count;
        let m = clock.stop(count, self.spec.size);
        self.rtts.push_run(samples);
        self.next_seq = end;
        m
    }

    /// Close the session.
    pub fn close(self) {
        self.d.close();
    }
}

impl<D: Drive> Runner for RelinkPingPong<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkPingPong::run(self, count)
    }
}
