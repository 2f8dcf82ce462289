//! Sleeping between [`Node::poll`] rounds: [`Node::wait`] (block on the
//! provider until something happens), [`Node::event_fd`] (sleep in the
//! application's own event loop instead), and [`Node::run_until`] (drive
//! the node for a stretch of time, whatever happens).
//!
//! None of them changes what a poll round does or in what order: they only
//! decide when the next round runs.

use std::time::Duration;

use relink_fabric::Timestamp;

use super::Node;

/// How a [`Node`] learns of completions: by the CQ's event, or by looking.
///
/// A poll round reads the CQs that have something (or may have). What
/// tells the node a CQ has something is the mode's choice:
///
/// - [`Events`](PollMode::Events) (the default): a CQ a round found
///   empty is *armed* (`ibv_req_notify_cq`), so its next completion
///   raises an event that marks it for a round and wakes
///   [`Node::event_fd`] and [`Node::wait`]. When [`Node::poll`] returns
///   `false`, every CQ is armed: the application may sleep at once.
/// - [`Busy`](PollMode::Busy): a CQ is looked at in every round and
///   armed only before the node sleeps — in [`Node::wait`] and
///   [`Node::run_until`], which arm for themselves, or by
///   [`Node::prepare_to_sleep`], which an application sleeping on
///   [`Node::event_fd`] calls first. A CQ armed for a sleep stays armed
///   (is not looked at) until its event comes. This saves the arming and
///   its event for every completion of a loop that polls without
///   sleeping — a progress engine, a ping-pong — at the cost of a CQ
///   poll per session and round (an empty poll of a busy node's idle
///   sessions).
///
/// The mode changes when CQs are armed, nothing else: the same round
/// takes the same completions in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// CQs armed in every round that finds them empty.
    #[default]
    Events,
    /// CQs looked at in every round, armed only before a sleep.
    Busy,
}

impl Node {
    /// Choose how the node learns of completions ([`PollMode`]); takes
    /// effect from the next round. A node starts in
    /// [`PollMode::Events`].
    pub fn set_poll_mode(&mut self, mode: PollMode) {
        self.poll_mode = mode;
    }

    /// The node's [`PollMode`].
    #[must_use]
    pub fn poll_mode(&self) -> PollMode {
        self.poll_mode
    }

    /// Make ready to sleep on [`Node::event_fd`], after [`Node::poll`]
    /// returned `false`: `true` when the node may sleep now — every CQ is
    /// armed and nothing came meanwhile; `false` when something came
    /// (one poll round did something): poll and take the outputs before
    /// sleeping. The `fi_trywait` of libfabric.
    ///
    /// In [`PollMode::Events`] `poll` returning `false` leaves every CQ
    /// armed already, and this returns `true` at once. In
    /// [`PollMode::Busy`] it arms the CQs not armed and runs one round,
    /// for a completion that came before the arming. [`Node::wait`] and
    /// [`Node::run_until`] call it themselves.
    #[must_use = "`false`: something came, poll before sleeping"]
    pub fn prepare_to_sleep(&mut self) -> bool {
        if self.poll_mode == PollMode::Events {
            return true;
        }
        let p = &*self.provider;
        let mut armed = false;
        for (&handle, entry) in &mut self.sessions {
            let Some(t) = entry.transport.as_mut() else {
                continue;
            };
            let Some(cq) = t.cq.filter(|_| t.connected && !t.cq_armed) else {
                continue;
            };
            let _ = p.req_notify_cq(cq, false);
            t.cq_armed = true;
            // Looked at once more in the round below: a completion that
            // came before the arming raises no event.
            self.index.cq_signalled(handle);
            armed = true;
        }
        !armed || !self.poll()
    }

    /// Block until the node has done something, then return `true`; or
    /// until `deadline` (on the provider's clock, [`Node::now`]) with
    /// nothing done, then return `false`. `None`: no deadline of the
    /// caller's.
    ///
    /// It polls first ([`Node::poll`], one round): if that does anything,
    /// it returns `true` at once. Otherwise it sleeps on the provider
    /// ([`Provider::wait`](relink_fabric::Provider::wait)) until the first
    /// of: a provider event or completion arrives, the node's next session
    /// timer ([`Node::next_deadline`]), `deadline`; then polls again. The
    /// return cases:
    ///
    /// - `true`: a poll round did something — something arrived (a
    ///   message, a completion, a connect request, a device event), a
    ///   session's timer fired (a keepalive, a retry, a timeout), or work
    ///   the application queued since the last round (a `send`, a `close`)
    ///   was posted. There may be output to take (`accept`,
    ///   `poll_delivery`, `poll_completion`, `poll_event`), or nothing the
    ///   application sees (a keepalive). More may be ready: calling `wait`
    ///   again polls first and returns at once if so.
    /// - `false`: nothing was done and `deadline` has passed
    ///   (`now() >= deadline`; returned without sleeping if it had passed
    ///   already).
    /// - `false`, only when there was no deadline at all (`deadline` is
    ///   `None` and no session has a timer): the provider returned with
    ///   nothing to do — a spurious wake-up, or, on the in-process soft
    ///   fabric, whose clock moves only in `wait`, nothing in flight
    ///   (nothing would ever arrive). With a deadline, spurious wake-ups
    ///   are slept through.
    ///
    /// Sessions make progress only in these calls and in `poll`: a node
    /// that is not waiting or polling answers no keepalive and sends
    /// nothing. On the in-process soft fabric `wait` advances virtual time
    /// (up to the first of its deadlines, faster than real time); over TCP
    /// and on real devices it sleeps in real time, costing no CPU while
    /// idle. A thread of its own per node (a `Node` is `Send`) is the
    /// simplest loop; an application with its own event loop sleeps on
    /// [`Node::event_fd`] instead.
    ///
    /// See the example on [`Node`].
    #[must_use = "`false`: the deadline passed with nothing done"]
    pub fn wait(&mut self, deadline: Option<Timestamp>) -> bool {
        if self.poll() {
            return true;
        }
        loop {
            if !self.prepare_to_sleep() {
                return true;
            }
            let now = self.now();
            if deadline.is_some_and(|d| d <= now) {
                return false;
            }
            let wake = match (self.next_deadline(), deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.provider.wait(wake.map(|w| w.max(now)));
            if self.poll() {
                return true;
            }
            if wake.is_none() {
                // No deadline to sleep towards: hand control back rather
                // than spin (a virtual clock with nothing in flight).
                return false;
            }
        }
    }

    /// [`wait`](Self::wait) with the deadline `now() + timeout`: `true`
    /// when the node did something, `false` when `timeout` passed with
    /// nothing done.
    #[must_use = "`false`: the timeout passed with nothing done"]
    pub fn wait_for(&mut self, timeout: Duration) -> bool {
        let deadline = self.now() + timeout;
        self.wait(Some(deadline))
    }

    /// The provider's readiness fd, for an application's own event loop
    /// (epoll, poll, mio, tokio's `AsyncFd`) in place of [`Node::wait`]:
    /// it polls readable when something arrived for the node — a provider
    /// event, a completion — since the node last polled
    /// ([`Provider::event_fd`](relink_fabric::Provider::event_fd)).
    ///
    /// The loop:
    ///
    /// 1. Register the fd for readability (level- or edge-triggered).
    /// 2. When it is readable, when the timer of step 3 fires, and after
    ///    the application's own calls (`connect`, `send`, `close`…: their
    ///    work is posted by `poll` — a message on an idle send queue leaves
    ///    at once — and the fd does not signal it), call
    ///    [`poll`](Node::poll) until it returns `false`, and take the
    ///    outputs (`accept`, `poll_delivery`, `poll_completion`,
    ///    `poll_event`). Before sleeping, [`prepare_to_sleep`](Node::prepare_to_sleep):
    ///    `false` means something came, back to `poll` (needed in
    ///    [`PollMode::Busy`], at once `true` in the default mode).
    /// 3. Re-arm a timer for [`next_deadline`](Node::next_deadline) (a
    ///    timeout of `next_deadline - now()`, none if it is `None`): the
    ///    sessions' keepalives, retries and timeouts run only in `poll`.
    ///
    /// The first call makes the fd, readable until the next `poll`: ask
    /// for it when the node is made, or take one wake-up with nothing to
    /// do. Never read or close the fd: `poll` clears it (by draining the
    /// provider's event stream), and it is the provider's, valid as long as
    /// the provider lives (keep [`Node::provider`]'s `Arc` next to a raw fd
    /// handed to a reactor). A wake-up with nothing to do is allowed;
    /// something that came after `poll` drained the events makes the fd
    /// readable again, so a loop that follows the steps never misses an
    /// arrival.
    ///
    /// `None`: the provider has no such fd (or could not make one): sleep
    /// in [`Node::wait`], on a thread of its own if need be. The
    /// in-process soft fabric has one, but its virtual clock moves only in
    /// `wait`, so nothing arrives while a loop sleeps on the fd: drive it
    /// with `wait`.
    #[cfg(unix)]
    #[must_use]
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.provider.event_fd()
    }

    /// Drive the node until the provider's clock reaches `until`, whatever
    /// happens meanwhile: poll until idle, sleep on the provider until the
    /// next event, session timer or `until`, and again, and return only
    /// once `now() >= until` (at once if it is already). It never returns
    /// early when something arrives: what the sessions produce meanwhile
    /// waits in them for the `poll_*` calls. For simulation and tests (on
    /// the in-process soft fabric it moves virtual time to `until`);
    /// [`Node::wait`] returns at the first thing that happens.
    pub fn run_until(&mut self, until: Timestamp) {
        loop {
            while self.poll() {}
            if !self.prepare_to_sleep() {
                continue;
            }
            let now = self.now();
            if now >= until {
                return;
            }
            let d = self.next_deadline().map_or(until, |d| d.min(until));
            self.provider.wait(Some(d.max(now)));
        }
    }

    /// [`run_until`](Self::run_until) `now() + d`: drive the node for `d`,
    /// whatever happens meanwhile.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now() + d;
        self.run_until(until);
    }
}
