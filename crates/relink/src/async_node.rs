//! [`AsyncNode`]: a [`Node`] in a tokio runtime (feature `tokio`).
//!
//! The node's event fd ([`Node::event_fd`]) sits in tokio's reactor and its
//! next deadline ([`Node::next_deadline`]) is a tokio timer; between the
//! two, [`AsyncNode::progress`] sleeps without a thread of its own and
//! without CPU, and returns once the node did something. Everything else —
//! connecting, submitting, taking completions, deliveries and events — is
//! the node's own API, reached with [`AsyncNode::node`].

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::Node;

/// A [`Node`] driven from async code: `progress().await` where a thread
/// would call [`Node::wait`].
///
/// A loop takes turns of `progress` and the application's work; a node
/// makes progress only in `progress` (and the node's own `poll`), so a task
/// that stops calling it stops its sessions (no keepalive answered,
/// nothing sent). One task owns an `AsyncNode`; it is `Send`, so that task
/// may run on any runtime flavour.
///
/// ```no_run
/// # async fn serve(provider: std::sync::Arc<dyn relink::Provider>) -> std::io::Result<()> {
/// use relink::{AsyncNode, Node, SessionOptions};
///
/// let mut node = Node::new(provider);
/// node.listen("10.0.0.2:7471".parse().unwrap(), SessionOptions::default()).unwrap();
/// let mut node = AsyncNode::new(node)?;
/// loop {
///     node.progress().await?;
///     while let Some(s) = node.node().accept() {
///         println!("accepted {s:?}");
///     }
/// }
/// # }
/// ```
///
/// The in-process soft fabric has an event fd, but its clock is virtual and
/// moves only in [`Node::wait`]: nothing would ever arrive while a task
/// sleeps. Use the TCP soft fabric or real devices with `AsyncNode`.
pub struct AsyncNode {
    node: Node,
    /// A duplicate of the provider's event fd: the same open file, so the
    /// same readiness, owned here for tokio's reactor.
    fd: AsyncFd<OwnedFd>,
}

impl AsyncNode {
    /// Put `node` in the current tokio runtime's reactor.
    ///
    /// # Errors
    /// `ErrorKind::Unsupported` if the node's provider has no event fd
    /// ([`Node::event_fd`] is `None`); the error of duplicating the fd or
    /// of registering it with tokio (no runtime, out of file descriptors).
    pub fn new(node: Node) -> io::Result<AsyncNode> {
        let fd = node
            .event_fd()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the node's provider has no event fd; drive it with Node::wait",
                )
            })?
            .try_clone_to_owned()?;
        // `AsyncFd::new` is deprecated in favour of the `unsafe`
        // `AsyncFd::register`, whose contract is that the value owns a valid
        // fd that is neither replaced nor closed while registered. An
        // `OwnedFd` is exactly that (a fresh duplicate, closed only when
        // the `AsyncFd` drops it), so the safe constructor is sound here and
        // the crate stays free of `unsafe`.
        #[allow(deprecated)]
        let fd = AsyncFd::new(fd)?;
        Ok(AsyncNode { fd, node })
    }

    /// The node: its whole API (connect, listen, submit, the `poll_*` and
    /// `accept` calls).
    pub fn node(&mut self) -> &mut Node {
        &mut self.node
    }

    /// The node, taken back out of the reactor.
    pub fn into_inner(self) -> Node {
        self.node
    }

    /// Wait until the node has done something, then return: something
    /// arrived (a message, a completion, a connect request, a device
    /// event), a session's timer fired, or work the application queued
    /// since the last call was posted. There may be output to take
    /// (`accept`, `poll_delivery`, `poll_completion`, `poll_event`), or
    /// nothing the application sees (a keepalive).
    ///
    /// It polls first and returns at once if that did something (so work
    /// queued by the application's calls goes out without a wait); it
    /// then sleeps until the event fd is readable or the node's next
    /// deadline, and polls again. Cancel-safe: dropping the future loses
    /// nothing (what arrived stays in the provider for the next poll).
    ///
    /// # Errors
    /// Only tokio's reactor fails it (the runtime is shutting down).
    pub async fn progress(&mut self) -> io::Result<()> {
        loop {
            if self.poll_all() {
                return Ok(());
            }
            let timeout = self
                .node
                .next_deadline()
                .map(|at| at.saturating_since(self.node.now()));
            let mut guard = match timeout {
                Some(d) => match tokio::time::timeout(d, self.fd.readable()).await {
                    Ok(guard) => guard?,
                    // A session's timer is due: the next round runs it.
                    Err(_elapsed) => continue,
                },
                None => self.fd.readable().await?,
            };
            // `poll` drains the provider's events; an arrival after that
            // makes the fd readable again, which tokio's readiness tick
            // keeps through `clear_ready`.
            let did = poll_until_idle(&mut self.node);
            guard.clear_ready();
            if did {
                return Ok(());
            }
        }
    }

    /// [`progress`](Self::progress), or `Ok(false)` once `timeout` passed
    /// with nothing done.
    ///
    /// # Errors
    /// As [`progress`](Self::progress).
    pub async fn progress_for(&mut self, timeout: Duration) -> io::Result<bool> {
        match tokio::time::timeout(timeout, self.progress()).await {
            Ok(r) => r.map(|()| true),
            Err(_elapsed) => Ok(false),
        }
    }

    fn poll_all(&mut self) -> bool {
        poll_until_idle(&mut self.node)
    }
}

/// Poll until a round does nothing and the node is ready to sleep
/// ([`Node::prepare_to_sleep`]); whether any round did something.
fn poll_until_idle(node: &mut Node) -> bool {
    let mut did = false;
    loop {
        while node.poll() {
            did = true;
        }
        if node.prepare_to_sleep() {
            return did;
        }
        did = true;
    }
}
