//! [`WriteLoop`]: the bandwidth of RDMA WRITEs on one connected pair, every
//! target slot checked before it is written again; and [`write_rate`], one
//! run on a fresh pair.

use relink_fabric::{SendOp, SendWr, WcOpcode};
use relink_testkit::{Rig, Side};

use super::check::{check_stamp, check_wc, stamp};
use super::conn::{pair_opts, Conn};
use super::measurement::{Clock, Measurement};
use super::spec::LoopSpec;
use super::stall::Stall;
use crate::series::Runner;

/// WRITEs from the initiator's memory into the target's: `window` slots of
/// `size` bytes on each side, up to `window` WRITEs outstanding, slot
/// `seq % window`. Once a WRITE is known complete its target slot is checked
/// before the slot is written again.
pub struct WriteLoop<'r> {
    conn: Conn<'r>,
    spec: LoopSpec,
    next_seq: u64,
}

impl<'r> WriteLoop<'r> {
    /// Connect a pair on `rig`.
    ///
    /// # Panics
    /// If `spec` is invalid or the pair cannot be set up.
    #[track_caller]
    pub fn connect(rig: &'r dyn Rig, spec: LoopSpec) -> WriteLoop<'r> {
        spec.validate();
        let opts = pair_opts(spec.window * spec.size, spec.window, 1);
        WriteLoop {
            conn: Conn::connect(rig, &opts),
            spec,
            next_seq: 0,
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

    /// Write `count` payloads and wait until every one completed (and its
    /// target slot was checked).
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
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end {
            let mut progress = false;

            let n = self.conn.poll(Side::Initiator, false, spec.window);
            if n > 0 {
                let (ini, tgt) = (&self.conn.pair.initiator, &self.conn.pair.target);
                for wc in &self.conn.wcs {
                    check_wc(wc, WcOpcode::RdmaWrite, ini.qp, "write");
                    assert!(
                        (completed..posted).contains(&wc.wr_id) && spec.signaled(wc.wr_id, end),
                        "write completion out of order or unsignaled: completed up to \
                         {completed}, posted up to {posted}, got {wc:?}"
                    );
                    for seq in completed..=wc.wr_id {
                        let slot = (seq % window) as usize;
                        check_stamp(&tgt.mem, slot * size, size, seq, spec.verify, "write");
                    }
                    completed = wc.wr_id + 1;
                }
                progress = true;
            }

            let (ini, tgt) = (&self.conn.pair.initiator, &self.conn.pair.target);
            while posted < end && posted - completed < window {
                let slot = (posted % window) as usize;
                stamp(&ini.mem, slot * size, size, posted, spec.verify);
                wrs.push(SendWr {
                    signaled: spec.signaled(posted, end),
                    ..SendWr::new(
                        posted,
                        SendOp::Write {
                            remote: tgt.remote(slot * size),
                        },
                        ini.sge(slot * size, size as u32),
                    )
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
                stall.check(|| {
                    format!("WRITE loop: posted {posted}, completed {completed} of {start}..{end}")
                });
                self.conn.wait(Side::Initiator);
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

impl Runner for WriteLoop<'_> {
    fn run(&mut self, count: u64) -> Measurement {
        WriteLoop::run(self, count)
    }
}

/// Bandwidth of `size`-byte WRITEs with `window` outstanding, on a fresh
/// pair of `rig`: `count` writes, one run, no warm-up.
pub fn write_rate(rig: &dyn Rig, size: usize, window: usize, count: u64) -> Measurement {
    let mut l = WriteLoop::connect(rig, LoopSpec::write(size, window));
    let m = l.run(count);
    l.close();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::{send_rate, Verify};
    use relink_testkit::soft_rigs::InProcRig;

    #[test]
    fn write_loop_lands_every_payload() {
        let rig = InProcRig::new(12);
        let spec = LoopSpec::write(4096 + 24, 6)
            .signal_every(3)
            .verify(Verify::Full);
        let mut l = WriteLoop::connect(&rig, spec);
        for count in [2, 100] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 4120));
        }
        l.close();
    }

    #[test]
    fn stamped_loops_and_helpers() {
        let rig = InProcRig::new(13);
        let m = send_rate(&rig, 64, 16, 300);
        assert_eq!((m.ops, m.bytes), (300, 300 * 64));
        let m = write_rate(&rig, 64 * 1024, 4, 40);
        assert_eq!((m.ops, m.bytes), (40, 40 * 64 * 1024));
        assert!(m.gbytes_per_sec() > 0.0);
    }
}
