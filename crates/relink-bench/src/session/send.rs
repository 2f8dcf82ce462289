//! [`RelinkSendLoop`]: the message-rate loop through a relink session
//! ([`Node::send`](relink::Node::send)), every message counted once the
//! peer confirmed its delivery and the receiving application checked it.

use std::collections::VecDeque;

use relink::OpId;

use super::drive::Drive;
use super::receiver::stamp_bytes;
use super::stats::{check_completion, LoopStats};
use crate::loops::{Clock, LoopSpec, Measurement, Stall};
use crate::series::Runner;

/// Messages through a relink session: up to `window` outstanding, each
/// counted when it completes (the peer confirmed delivery) and was
/// received and checked by the target's application.
pub struct RelinkSendLoop<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    payload: Vec<u8>,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
}

impl<D: Drive> RelinkSendLoop<D> {
    /// A loop on `d` (set up with [`Workload::Send`](super::Workload::Send)); `spec.signal_every`
    /// and `spec.verify` are ignored (relink signals every operation;
    /// payloads are stamped).
    #[track_caller]
    pub fn new(d: D, spec: LoopSpec) -> RelinkSendLoop<D> {
        spec.validate();
        RelinkSendLoop {
            d,
            spec,
            next_seq: 0,
            payload: vec![0; spec.size],
            outstanding: VecDeque::with_capacity(spec.window),
            stats: LoopStats::default(),
        }
    }

    /// Iterations and waits so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// The provider kind.
    pub fn kind(&self) -> &'static str {
        self.d.kind()
    }

    /// The drive (for counters and the like).
    pub fn drive(&mut self) -> &mut D {
        &mut self.d
    }

    /// Send `count` messages; returns when every one completed and was
    /// received.
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong delivery, or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let (size, window) = (self.spec.size, self.spec.window as u64);
        let s = self.d.session();
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end || self.d.received() < end {
            self.stats.iterations += 1;
            let mut progress = self.d.poll();
            let node = self.d.initiator();
            while let Some(c) = node.poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink send");
                completed += 1;
                progress = true;
            }
            while posted < end && posted - completed < window {
                stamp_bytes(&mut self.payload, posted);
                let op = node
                    .send(s, &self.payload)
                    .unwrap_or_else(|e| panic!("relink send: {e}"));
                self.outstanding.push_back(op);
                posted += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                let received = self.d.received();
                stall.check(|| {
                    format!(
                        "relink SEND loop: posted {posted}, completed {completed}, received \
                         {received} of {start}..{end}"
                    )
                });
                self.stats.waits += 1;
                self.d.wait(completed >= end);
            }
        }
        self.stats.ops += count;
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Close the session.
    pub fn close(self) {
        self.d.close();
    }
}

impl<D: Drive> Runner for RelinkSendLoop<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkSendLoop::run(self, count)
    }
}
