//! The readiness fd of an event loop ([`Provider::event_fd`]): readable
//! when something came for the caller, unreadable once the caller drained
//! the events and then the CQs.
//!
//! Readiness is awaited by `poll(2)` on the fd itself, a tick at a time,
//! while only the *other* host is driven (its `wait`, which moves a virtual
//! clock): the host under test is never asked to `wait`, so the fd alone
//! must show what came. Non-readiness is asserted only right after a drain,
//! with a zero timeout.
//!
//! [`Provider::event_fd`]: relink_fabric::Provider::event_fd

use crate::rig::{report_skip, Rig, Skip};

/// The case's name, for skips.
const CASE: &str = "event_fd_readiness";

/// `Provider::event_fd`, if the provider has one (a provider without one
/// conforms; the case reports a skip):
/// - right after the caller drained everything (events until `None`, then
///   every CQ until empty) the fd is not readable, on both hosts;
/// - a SEND makes the target's fd readable (its receive completion) and
///   the initiator's (its send completion), without either host's `wait`;
/// - after draining again, neither fd is readable;
/// - the initiator's `cm_disconnect` makes the target's fd readable (a CM
///   event, `Disconnected`), and draining clears it again.
pub fn event_fd_readiness(rig: &dyn Rig) {
    #[cfg(unix)]
    unix::run(rig);
    #[cfg(not(unix))]
    report_skip(rig, CASE, &Skip::new("event fds exist on Unix only"));
}

#[cfg(unix)]
mod unix {
    use std::os::fd::BorrowedFd;
    use std::time::{Duration, Instant};

    use relink_fabric::{CmEventKind, RecvWr, SendOp, SendWr, WcOpcode};
    use rustix::event::{poll, PollFd, PollFlags, Timespec};

    use super::{report_skip, Rig, Skip, CASE};
    use crate::check::{assert_wc_ok, pattern};
    use crate::harness::Harness;
    use crate::pair::{connect_pair, Pair, PairOpts};
    use crate::rig::Side;

    pub(super) fn run(rig: &dyn Rig) {
        let mut h = Harness::new(rig);
        // Asked for before anything else: a new fd may start readable; the
        // first drain below clears it.
        let (Some(ini_fd), Some(tgt_fd)) = (
            h.host(Side::Initiator).event_fd(),
            h.host(Side::Target).event_fd(),
        ) else {
            report_skip(rig, CASE, &Skip::new("the provider has no event fd"));
            return;
        };
        let fds = [ini_fd, tgt_fd];
        let pair = connect_pair(&mut h, &PairOpts::default());
        let (ini, tgt) = (&pair.initiator, &pair.target);
        tgt.post_recv(
            &h,
            &[RecvWr {
                wr_id: 1,
                sgl: tgt.sge(0, 256).into(),
            }],
        );

        drain(&mut h, &pair);
        for side in Side::ALL {
            assert_not_readable(fds[side.index()], side, "with nothing pending");
        }

        // A completion on each side.
        let data = pattern(0xfd, 128);
        ini.mem.write(0, &data).expect("in bounds");
        ini.post_send(&h, &[SendWr::new(2, SendOp::Send, vec![ini.sge(0, 128)])]);
        wait_readable(&mut h, Side::Target, tgt_fd, "after a receive completion");
        wait_readable(&mut h, Side::Initiator, ini_fd, "after a send completion");
        // Drained in the documented order: events first, then the CQs.
        h.pump();
        let deadline = h.deadline(Side::Target);
        let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
        assert_wc_ok(&rwc[0], 1, WcOpcode::Recv);
        assert_eq!(tgt.mem.read_vec(0, 128).expect("in bounds"), data);
        let deadline = h.deadline(Side::Initiator);
        let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
        assert_wc_ok(&swc[0], 2, WcOpcode::Send);
        drain(&mut h, &pair);
        for side in Side::ALL {
            assert_not_readable(
                fds[side.index()],
                side,
                "after its events and completions were drained",
            );
        }

        // A CM event.
        h.host(Side::Initiator)
            .cm_disconnect(ini.id)
            .unwrap_or_else(|e| panic!("cm_disconnect: {e}"));
        wait_readable(&mut h, Side::Target, tgt_fd, "after the peer disconnected");
        let deadline = h.deadline(Side::Target);
        h.wait_cm(Side::Target, tgt.id, deadline, |k| {
            *k == CmEventKind::Disconnected
        });
        drain(&mut h, &pair);
        assert_not_readable(tgt_fd, Side::Target, "after Disconnected was drained");

        pair.teardown(&h);
    }

    /// Drain both hosts as the contract says: events until `poll_event`
    /// returns `None` (which clears the fd), then every CQ until empty (the
    /// case consumed every completion it caused: none may be left), then
    /// the events once more (whatever the polling raised).
    #[track_caller]
    fn drain(h: &mut Harness<'_>, pair: &Pair) {
        h.pump();
        for end in [&pair.initiator, &pair.target] {
            for cq in [end.send_cq, end.recv_cq] {
                let left = h.poll_cq(end.side, cq, usize::MAX);
                assert!(
                    left.is_empty(),
                    "unexpected completions on {cq} of the {} host: {left:?}",
                    end.side
                );
            }
        }
        h.pump();
    }

    /// Whether `fd` polls readable within `timeout`.
    fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
        let ts = Timespec::try_from(timeout).expect("a short timeout");
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(_) => fds[0].revents().contains(PollFlags::IN),
            Err(rustix::io::Errno::INTR) => false,
            Err(e) => panic!("poll on the event fd: {e}"),
        }
    }

    #[track_caller]
    fn assert_not_readable(fd: BorrowedFd<'_>, side: Side, when: &str) {
        assert!(
            !readable(fd, Duration::ZERO),
            "the {side} host's event fd is readable {when}"
        );
    }

    /// Wait for `side`'s fd to poll readable: poll it a tick at a time and
    /// between drive only the other host (its `wait` moves a virtual clock
    /// and the world with it; its events are buffered so that its `wait`
    /// does not return at once). Panics at `side`'s deadline, or when the
    /// wall clock runs out (a clock that stopped).
    #[track_caller]
    fn wait_readable(h: &mut Harness<'_>, side: Side, fd: BorrowedFd<'_>, when: &str) {
        let tick = h.rig().tick();
        let deadline = h.deadline(side);
        let wall = Instant::now() + h.rig().settle_time() * 2 + Duration::from_secs(60);
        loop {
            if readable(fd, tick) {
                return;
            }
            let now = h.now(side);
            assert!(
                now < deadline && Instant::now() < wall,
                "the {side} host's event fd is not readable {when} (at {now}, deadline \
                 {deadline})"
            );
            let other = side.peer();
            h.pump_host(other);
            let host = h.host(other);
            host.wait(Some(host.now() + tick));
        }
    }
}
