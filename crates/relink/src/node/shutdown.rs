//! How sessions and nodes end: [`Node::close_gracefully`] (a session
//! finishes its pending operations, then says goodbye),
//! [`Node::shutdown`] (every session of the node that way, then every
//! provider object freed), [`Node::abort`] (no goodbye, as a crash), and
//! what dropping a node does (every live session closed with a goodbye,
//! given a short moment to leave).

use std::time::Duration;

use super::{CloseError, Node, SessionHandle};

/// What [`Node::shutdown`] did with the sessions that were live when it
/// was called.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownSummary {
    /// Sessions that ended with nothing pending: every operation they had
    /// finished (with its own outcome) before the goodbye.
    pub clean: usize,
    /// Sessions that ended with operations still pending — at the
    /// timeout, by the peer's close or its give-up deadline: those
    /// completed `Failed` (`Disconnected`, ...) or `Indeterminate`.
    pub with_pending_failed: usize,
    /// The operations completed that way, over those sessions.
    pub operations_failed: usize,
    /// Goodbyes whose send had not completed when the time was up: their
    /// transports were disconnected all the same (the peer may take the
    /// disconnect for a loss).
    pub goodbyes_cut: usize,
    /// Whether the timeout passed before every session and goodbye was
    /// done.
    pub timed_out: bool,
}

/// The longest a dropped node waits for its goodbyes (on a provider with
/// a real clock).
const DROP_GOODBYE_WAIT: Duration = Duration::from_millis(250);

impl Node {
    /// Close a session once its pending operations have finished, or after
    /// `timeout`, whichever comes first.
    ///
    /// From now on the session refuses new operations
    /// ([`SubmitError::Closing`](crate::SubmitError::Closing)). The ones already
    /// submitted go on and complete as usual: queued ones are posted,
    /// ones waiting for replay while the session recovers are replayed
    /// once it is back. The moment none is pending the session closes with
    /// the goodbye ([`Node::close`]): the peer's node closes its half
    /// (`SessionEvent::Disconnected`). At `timeout` it closes as
    /// [`Node::close`] does: what is still pending completes
    /// `Failed(Disconnected)`, or `Indeterminate` where it may have taken
    /// effect. The session keeps its state (`Established`, `Recovering`,
    /// ...) until it is `Closed`; messages the peer sends meanwhile are
    /// delivered. A session with nothing pending closes at once.
    ///
    /// # Errors
    /// [`CloseError::NoSession`] if there is no such session (never made, or
    /// reaped: [`Node::sessions`]). A closed session is left as it is; a
    /// failed one moves to `Closed`.
    pub fn close_gracefully(
        &mut self,
        s: SessionHandle,
        timeout: Duration,
    ) -> Result<(), CloseError> {
        let now = self.now();
        let entry = self
            .sessions
            .get_mut(&s.0)
            .ok_or(CloseError::NoSession(s))?;
        entry.core.close_gracefully(now + timeout, now);
        self.run_actions(s.0);
        Ok(())
    }

    /// End the node's work in an orderly way, within `timeout`, and free
    /// every provider object it holds.
    ///
    /// 1. No new session: a peer's Hello is refused
    ///    [`ShuttingDown`](crate::RefuseReason::ShuttingDown) (final: its
    ///    session fails at once); a resume of a session of this node still
    ///    reaches it.
    /// 2. Every live session closes gracefully
    ///    ([`close_gracefully`](Node::close_gracefully)): its pending
    ///    operations may finish until `timeout` less a reserve for the
    ///    goodbyes (a quarter of `timeout`, at most the
    ///    [goodbye bound](Node::set_goodbye_timeout)), then it closes with
    ///    the goodbye and what is still pending fails.
    /// 3. It drives the node ([`Node::wait`]) until every one of those
    ///    sessions has ended and every goodbye has left, or `timeout`
    ///    has passed.
    /// 4. It destroys every provider object the node holds: the transports
    ///    of goodbyes still on their way, listeners, connect requests not
    ///    yet answered.
    ///
    /// Blocks for at most `timeout` (on the provider's clock). Only this
    /// node runs meanwhile: a peer node in the same thread is not polled
    /// (over the in-process soft fabric, whose clock moves only in `wait`,
    /// it would not answer). Every operation of every session has its
    /// completion when it returns; the sessions' completions, deliveries
    /// and events stay readable until the sessions are reaped
    /// ([`Node::sessions`]). The node can be used again afterwards. An
    /// application with an event loop of its own does the same without
    /// blocking: `close_gracefully` each session, `close_listener` each
    /// listener, and poll until the sessions have ended.
    pub fn shutdown(&mut self, timeout: Duration) -> ShutdownSummary {
        let start = self.now();
        let deadline = start + timeout;
        let reserve = self.transports.goodbye_timeout.min(timeout / 4);
        let close_by = start + timeout.saturating_sub(reserve);
        self.shutting_down = true;
        let live: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.core.state().is_terminal())
            .map(|(h, _)| *h)
            .collect();
        tracing::info!(sessions = live.len(), ?timeout, "shutting down");
        for &h in &live {
            if let Some(entry) = self.sessions.get_mut(&h) {
                entry.core.close_gracefully(close_by, start);
            }
            self.run_actions(h);
        }
        let mut summary = ShutdownSummary::default();
        loop {
            let ended = live.iter().all(|h| {
                self.sessions
                    .get(h)
                    .is_none_or(|s| s.core.state().is_terminal())
            });
            if ended && self.transports.closing_count() == 0 {
                break;
            }
            if self.now() >= deadline {
                summary.timed_out = true;
                break;
            }
            let _ = self.wait(Some(deadline));
        }
        let now = self.now();
        for &h in &live {
            let Some(entry) = self.sessions.get_mut(&h) else {
                summary.clean += 1;
                continue;
            };
            if !entry.core.state().is_terminal() {
                entry.close(now);
                self.run_actions(h);
            }
            let pending = self.sessions.get(&h).map_or(0, |s| s.core.ended_pending());
            if pending == 0 {
                summary.clean += 1;
            } else {
                summary.with_pending_failed += 1;
                summary.operations_failed += pending;
            }
        }
        summary.goodbyes_cut = self.free_provider_objects();
        self.shutting_down = false;
        tracing::info!(?summary, "shut down");
        summary
    }

    /// End the node at once, as the end of its process would: no goodbye,
    /// every provider object destroyed. Its peers see their connections
    /// disconnected and take it for a loss: they recover until their
    /// give-up deadline, and a peer that comes back to a new node is told
    /// the session is unknown. (Dropping a node says goodbye first.)
    pub fn abort(mut self) {
        self.skip_goodbyes = true;
    }

    /// Close every live session now, with its goodbye, and give the
    /// goodbyes up to [`DROP_GOODBYE_WAIT`] (at most the goodbye bound) to
    /// leave — only on a provider with a real clock: on a virtual one they
    /// are posted and the node does not wait.
    fn say_goodbyes(&mut self) {
        let now = self.now();
        let live: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.core.state().is_terminal())
            .map(|(h, _)| *h)
            .collect();
        for h in live {
            if let Some(entry) = self.sessions.get_mut(&h) {
                entry.close(now);
            }
            self.run_actions(h);
        }
        if self.transports.closing_count() == 0 || self.provider.has_virtual_clock() {
            return;
        }
        let until = self.now() + DROP_GOODBYE_WAIT.min(self.transports.goodbye_timeout);
        while self.transports.closing_count() != 0 && self.now() < until {
            let _ = self.wait(Some(until));
        }
    }

    /// Destroy every provider object the node holds: closing transports
    /// (how many had not seen their goodbye leave is returned), sessions'
    /// transports, listeners, connect requests not yet answered.
    fn free_provider_objects(&mut self) -> usize {
        let cut = self
            .transports
            .cut_closing(&*self.provider, &mut self.index);
        self.release_quiesced();
        let now = self.now();
        self.release_retiring(true, now);
        let p = &*self.provider;
        for entry in self.sessions.values_mut() {
            entry.destroy_transports(p, &mut self.index);
        }
        for (_, l) in std::mem::take(&mut self.listeners) {
            if let Some(id) = l.cm {
                self.index.cm_gone(id);
                let _ = p.cm_destroy_id(id);
            }
        }
        for (_, req) in std::mem::take(&mut self.pending) {
            self.index.cm_gone(req.cm);
            let _ = p.cm_reject(req.cm, &[]);
            let _ = p.cm_destroy_id(req.cm);
        }
        cut
    }
}

/// Dropping a node ends it in order, briefly: every live session is closed
/// with its goodbye ([`Node::close`]: its pending operations fail), the
/// goodbyes get a short, bounded moment to leave — at most 250 ms (and
/// the [goodbye bound](Node::set_goodbye_timeout)), on a provider with a
/// real clock; on the in-process soft fabric, whose clock is virtual, they
/// are posted and the node does not wait — and then every provider object
/// the node holds is destroyed (connections, listeners, connect requests
/// not yet answered). Its peers close their halves
/// (`SessionEvent::Disconnected`) when the goodbye reached them.
/// [`Node::shutdown`] first lets pending operations finish;
/// [`Node::abort`] says no goodbye at all.
impl Drop for Node {
    fn drop(&mut self) {
        if !self.skip_goodbyes {
            self.say_goodbyes();
        }
        self.free_provider_objects();
    }
}
