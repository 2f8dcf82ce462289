//! [`RelinkWriteLoop`]: the bandwidth loop through a relink session
//! ([`Node::write`](relink::Node::write)), each target slot checked where
//! the write landed before it is written again.

use std::collections::VecDeque;

use relink::{BufferToken, LocalRange, Memory, OpId};

use super::drive::Drive;
use super::options::{LOCAL, REMOTE};
use super::stats::{check_completion, LoopStats};
use crate::loops::{check_stamp, stamp, Clock, LoopSpec, Measurement, Stall, Verify};
use crate::series::Runner;

/// RDMA WRITEs through a relink session: `window` slots of `size` bytes in
/// the initiator's region, written to the same slots of the target's
/// advertised region, up to `window` outstanding; once a write completed
/// its target slot is checked before the slot is written again.
pub struct RelinkWriteLoop<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    local: Memory,
    remote: Memory,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
}

impl<D: Drive> RelinkWriteLoop<D> {
    /// A loop on `d` (set up with [`Workload::Write`](super::Workload::Write)); `spec.signal_every`
    /// is ignored (relink signals every operation).
    #[track_caller]
    pub fn new(mut d: D, spec: LoopSpec) -> RelinkWriteLoop<D> {
        spec.validate();
        let s = d.session();
        let local = d.initiator().region(s, LOCAL).expect("local region");
        let remote = d.target_region(REMOTE);
        RelinkWriteLoop {
            d,
            spec,
            next_seq: 0,
            local,
            remote,
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

    /// Write `count` payloads; returns when every one completed and its
    /// target slot was checked.
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong payload, or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let (size, window) = (self.spec.size, self.spec.window as u64);
        let verify = Verify::Stamp;
        let s = self.d.session();
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end {
            self.stats.iterations += 1;
            let mut progress = self.d.poll();
            let node = self.d.initiator();
            while let Some(c) = node.poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink write");
                let slot = (completed % window) as usize;
                check_stamp(
                    &self.remote,
                    slot * size,
                    size,
                    completed,
                    verify,
                    "relink write",
                );
                completed += 1;
                progress = true;
            }
            while posted < end && posted - completed < window {
                let off = (posted % window) as usize * size;
                stamp(&self.local, off, size, posted, verify);
                let op = node
                    .write(
                        s,
                        LocalRange {
                            region: LOCAL,
                            offset: off as u64,
                            len: size as u32,
                        },
                        BufferToken {
                            region: REMOTE,
                            offset: off as u64,
                        },
                    )
                    .unwrap_or_else(|e| panic!("relink write: {e}"));
                self.outstanding.push_back(op);
                posted += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                stall.check(|| {
                    format!(
                        "relink WRITE loop: posted {posted}, completed {completed} of \
                         {start}..{end}"
                    )
                });
                self.stats.waits += 1;
                self.d.wait(false);
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

impl<D: Drive> Runner for RelinkWriteLoop<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkWriteLoop::run(self, count)
    }
}
