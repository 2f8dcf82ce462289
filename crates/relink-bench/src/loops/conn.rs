//! The connected pair a raw loop runs on ([`Conn`]): setup on a testkit
//! [`Rig`], polling a CQ, waiting a tick on a host, teardown; and the QP and
//! CQ sizes a loop asks for.

use std::time::Duration;

use relink_fabric::{QpCaps, WorkCompletion};
use relink_testkit::{connect_pair, Harness, Pair, PairOpts, Rig, Side};

/// How far ahead (on the provider's clock) a loop waits when nothing is
/// ready: one [`Provider::wait`](relink_fabric::Provider::wait) call blocks
/// at most this long.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// The connection a loop runs on and the bookkeeping every loop needs.
pub(super) struct Conn<'r> {
    pub(super) h: Harness<'r>,
    pub(super) pair: Pair,
    pub(super) wcs: Vec<WorkCompletion>,
}

impl<'r> Conn<'r> {
    /// Connect a pair on `rig` with `opts`, dropping the device and CM
    /// events of the setup.
    pub(super) fn connect(rig: &'r dyn Rig, opts: &PairOpts) -> Conn<'r> {
        let mut h = Harness::new(rig);
        let pair = connect_pair(&mut h, opts);
        // Device and CM events of the setup are not the loop's business;
        // anything that arrives from now on is.
        for side in Side::ALL {
            h.take_events(side, |_| true);
        }
        Conn {
            h,
            pair,
            wcs: Vec::new(),
        }
    }

    /// Wait up to a tick for something to happen on `side`'s host, after
    /// checking that no event arrived (an unconsumed event would also make
    /// every later `wait` return at once).
    #[track_caller]
    pub(super) fn wait(&mut self, side: Side) {
        self.check_events();
        let host = self.h.host(side);
        host.wait(Some(host.now() + TICK));
    }

    /// Panics if an event arrived on either host.
    #[track_caller]
    pub(super) fn check_events(&mut self) {
        self.h.pump();
        for s in Side::ALL {
            let evs = self.h.buffered(s);
            assert!(
                evs.is_empty(),
                "unexpected events on the {s} host during a measuring loop: {evs:?}"
            );
        }
    }

    /// Poll up to `max` completions of `side`'s CQ into `self.wcs`.
    pub(super) fn poll(&mut self, side: Side, recv: bool, max: usize) -> usize {
        self.wcs.clear();
        let end = self.pair.end(side);
        let cq = if recv { end.recv_cq } else { end.send_cq };
        let n = self
            .h
            .host(side)
            .poll_cq(cq, max, &mut self.wcs)
            .unwrap_or_else(|e| panic!("poll_cq({cq}) on the {side} host: {e}"));
        assert_eq!(
            n,
            self.wcs.len(),
            "poll_cq returned {n} but produced {} completions",
            self.wcs.len()
        );
        n
    }

    /// Tear the pair down, checking that nothing leaked.
    pub(super) fn close(self) {
        self.pair.teardown(&self.h);
    }
}

/// Pair options for a loop: `buf_len` bytes of registered memory on each
/// side (rounded up to a multiple of 8), `send_wr` and `recv_wr` as the
/// queue depths, one SGE per request, and CQs of twice the deeper queue (at
/// least 512 entries).
pub(super) fn pair_opts(buf_len: usize, send_wr: usize, recv_wr: usize) -> PairOpts {
    let cq_depth = (2 * send_wr.max(recv_wr)).max(512);
    PairOpts {
        buf_len: buf_len.next_multiple_of(8),
        caps: QpCaps {
            max_send_wr: u32::try_from(send_wr).expect("window fits u32"),
            max_recv_wr: u32::try_from(recv_wr).expect("receive depth fits u32"),
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        cq_depth: u32::try_from(cq_depth).expect("CQ depth fits u32"),
        ..PairOpts::default()
    }
}
