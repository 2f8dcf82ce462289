//! What a node hands the application node-wide: the sessions its
//! listeners accepted ([`Node::accept`], [`Accepted`]: which listener,
//! from where, the initiator's connect data) and every session's
//! completions, deliveries and events, each with its session
//! ([`Node::poll_output`], [`Output`]).
//!
//! `poll_output` serves the sessions that have output from a ready queue
//! (`ReadyQueue`, `handles.rs`, in the node's `Index`): a session joins it when the node hands its core an
//! input and it has output after (`Node::run_actions`), at most once,
//! goes to the back after each output it gives, and leaves when its last
//! output is taken, so a busy session cannot starve the others and no call
//! scans every session.

use std::net::SocketAddr;

use relink_core::journal::Completion;
use relink_core::session::SessionEvent;
use relink_core::Seq;

use super::{ListenerHandle, Node, SessionHandle};

/// A session a listener accepted ([`Node::accept`],
/// [`Output::Accepted`]): what a server needs to decide what to do with
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Accepted {
    /// The new session.
    pub session: SessionHandle,
    /// The listener it connected to (its options are the session's).
    pub listener: ListenerHandle,
    /// The initiator's address, as its first connection request came from.
    /// A session outlives its connections: after a recovery the peer may
    /// reach this node from another address (another device).
    pub peer: SocketAddr,
    /// The local address the first connection request was sent to.
    pub local: SocketAddr,
    /// The initiator application's bytes from its
    /// [`SessionOptions::connect_data`](super::SessionOptions::connect_data)
    /// (empty if it set none), also readable later with
    /// [`Node::connect_data`].
    pub connect_data: Vec<u8>,
}

/// One thing a node produced for the application
/// ([`Node::poll_output`]), with the session it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output {
    /// A listener accepted a new session (as [`Node::accept`] returns it).
    Accepted(Accepted),
    /// A session's event (as [`Node::poll_event`] returns it).
    Event {
        /// The session.
        session: SessionHandle,
        /// What happened.
        event: SessionEvent,
    },
    /// An operation's one completion (as [`Node::poll_completion`] returns
    /// it).
    Completion {
        /// The session the operation was submitted on.
        session: SessionHandle,
        /// The operation and its outcome.
        completion: Completion,
    },
    /// A message the peer sent, delivered once, in order (as
    /// [`Node::poll_delivery`] returns it).
    Delivery {
        /// The session it came on.
        session: SessionHandle,
        /// Its sequence number (from 1, in order, per session).
        seq: Seq,
        /// The message.
        payload: Vec<u8>,
    },
    /// The notice of the peer's WRITE with immediate data (as
    /// [`Node::poll_written`] returns it).
    Written {
        /// The session it came on.
        session: SessionHandle,
        /// Its sequence number (shared with the messages).
        seq: Seq,
        /// The immediate data and where the WRITE landed.
        written: relink_core::wire::Written,
    },
    /// A receive the application posted ended (as [`Node::poll_received`]
    /// returns it).
    Received {
        /// The session it was posted on.
        session: SessionHandle,
        /// The buffer and what it holds.
        received: super::Received,
    },
}

impl Output {
    /// The session the output belongs to (for `Accepted`, the new one).
    pub fn session(&self) -> SessionHandle {
        match self {
            Output::Accepted(a) => a.session,
            Output::Event { session, .. }
            | Output::Completion { session, .. }
            | Output::Delivery { session, .. }
            | Output::Received { session, .. }
            | Output::Written { session, .. } => *session,
        }
    }
}

impl Node {
    /// The oldest session a listener accepted that was not taken yet, with
    /// its listener, the addresses of its first connection and the
    /// initiator's connect data; `None` when there is none (nothing yet:
    /// more may come at a later [`poll`](Node::poll)).
    ///
    /// It takes from the same queue as [`Node::poll_output`]'s
    /// [`Output::Accepted`]: each accepted session is handed out once, by
    /// whichever the application calls. A session that ended before it was
    /// taken waits here until its [linger](Node::set_linger) runs out, then
    /// it is reaped and leaves the queue.
    pub fn accept(&mut self) -> Option<Accepted> {
        let a = self.accepted.pop_front()?;
        self.taken(a.session.0);
        Some(a)
    }

    /// The next thing any session of the node produced, with its session:
    /// an accepted session, an event, a completion or a delivered message.
    /// `None` when nothing waits (nothing yet: more may come at a later
    /// [`poll`](Node::poll) or call that submits or closes).
    ///
    /// One loop serves every session: after each [`poll`](Node::poll)
    /// round (or [`wait`](Node::wait)), call `poll_output` until it
    /// returns `None`.
    ///
    /// - It takes from the same queues as [`Node::accept`],
    ///   [`Node::poll_event`], [`Node::poll_completion`] and
    ///   [`Node::poll_delivery`]: each output is handed out exactly once,
    ///   by whichever call the application makes, and the two ways may be
    ///   mixed.
    /// - Accepted sessions come first, so a session's `Accepted` precedes
    ///   all its other outputs.
    /// - Sessions take turns: each call serves the session at the front of
    ///   the node's ready queue (the sessions that have output, each once)
    ///   and sends it to the back if it has more, so between two outputs
    ///   of one session every other session with output waiting gives one.
    ///   A call visits one session, whatever the number of sessions.
    /// - Of one session's waiting outputs, completions come first, then
    ///   deliveries, then events; each kind in its order. So the event
    ///   that ends a session (`Disconnected`, `GaveUp`, `PeerLost`, the
    ///   transition to `Closed` or `Failed`) comes after every completion
    ///   and delivery the session produced.
    /// - A session that ended is reaped once it is drained this way, as
    ///   with the per-session calls ([`Node::sessions`]).
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some(a) = self.accept() {
            return Some(Output::Accepted(a));
        }
        while let Some(handle) = self.index.next_ready() {
            let Some(entry) = self.sessions.get_mut(&handle) else {
                continue;
            };
            let session = SessionHandle(handle);
            let out = if let Some(completion) = (!entry.quiescing)
                .then(|| entry.core.poll_completion())
                .flatten()
            {
                Output::Completion {
                    session,
                    completion,
                }
            } else if let Some((seq, payload)) = entry.core.poll_delivery() {
                Output::Delivery {
                    session,
                    seq,
                    payload,
                }
            } else if let Some((seq, written)) = entry.core.poll_written() {
                Output::Written {
                    session,
                    seq,
                    written,
                }
            } else if let Some(received) = entry.posted.poll() {
                Output::Received { session, received }
            } else if let Some(event) = (!entry.quiescing)
                .then(|| entry.core.poll_event())
                .flatten()
            {
                Output::Event { session, event }
            } else {
                // A quiescing session's completions and events wait for its
                // closing transport's end, which queues it again.
                debug_assert!(entry.quiescing, "a session in the ready queue has output");
                continue;
            };
            if entry.has_output() {
                self.index.has_output(handle);
            }
            self.taken(handle);
            return Some(out);
        }
        None
    }

    /// The application's bytes of a session's first connect: for a session
    /// a listener accepted, the initiator's
    /// ([`SessionOptions::connect_data`](super::SessionOptions::connect_data),
    /// as in [`Accepted::connect_data`]); for one this node connected, its
    /// own. The same for the session's whole life: resumes carry none.
    /// `None` when there is no such session (never made, or reaped:
    /// [`Node::sessions`]).
    pub fn connect_data(&self, s: SessionHandle) -> Option<&[u8]> {
        self.sessions.get(&s.0).map(|x| x.core.connect_data())
    }
}
