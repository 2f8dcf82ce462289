//! What the application hands a [`Node`](super::Node) and gets back:
//! session and listener handles, session and region options, errors.

use relink_core::policy::Policy;
use relink_core::resources::{RegionSpec, SessionSpec};
use relink_core::session::SessionError;
use relink_core::wire;
use relink_core::RegionId;
use relink_fabric::Access;

/// Identifies a session of a [`Node`](super::Node); never reused by that
/// node, also after the session is gone (reaped once it ended and was
/// drained: [`Node::sessions`](super::Node::sessions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionHandle(pub u64);

/// Identifies a listener of a [`Node`](super::Node); never reused by that
/// node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerHandle(pub u64);

/// A memory region a session registers on every device it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionOptions {
    /// Stable id, the same on both sides of the application's protocol.
    pub id: RegionId,
    /// Length in bytes; the host memory is allocated once, when the session
    /// is created, and keeps its address on every device.
    pub len: u64,
    /// Rights (exactly these, on every device).
    pub access: Access,
    /// Advertise it to the peer for one-sided access (its key is sent again
    /// after every reconnection).
    pub advertise: bool,
}

/// How a session is built.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Recovery policy: backoffs, timeouts, which devices may take over,
    /// when to give up.
    pub policy: Policy,
    /// Receive slots (the peer's send credits).
    pub recv_slots: u32,
    /// Largest message payload in bytes; a receive slot holds this plus
    /// relink's message header.
    pub max_message: u32,
    /// The most one-sided operations in flight at once.
    pub max_one_sided: u32,
    /// Application regions, registered with the session on every device.
    pub regions: Vec<RegionOptions>,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            policy: Policy::default(),
            recv_slots: 64,
            max_message: 4096,
            max_one_sided: 64,
            regions: Vec::new(),
        }
    }
}

impl SessionOptions {
    /// The resources a session of these options needs on each device.
    pub(super) fn spec(&self) -> SessionSpec {
        SessionSpec {
            recv_slots: self.recv_slots,
            slot_size: self.max_message + wire::HEADER_LEN as u32,
            send_slots: self.recv_slots + 16,
            max_one_sided: self.max_one_sided,
            regions: self
                .regions
                .iter()
                .map(|r| RegionSpec {
                    id: r.id,
                    len: r.len,
                    access: r.access,
                    advertise: r.advertise,
                })
                .collect(),
        }
    }
}

/// Errors of [`Node`](super::Node) calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The node has no session of this handle: it never made one, or the
    /// session ended (closed or failed) and was reaped
    /// ([`Node::sessions`](super::Node::sessions)).
    #[error("no session {0:?}")]
    NoSession(SessionHandle),
    /// No such region in the session.
    #[error("no region {0}")]
    NoRegion(RegionId),
    /// The session refused the command.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The options are invalid (the key is named).
    #[error(transparent)]
    Policy(#[from] relink_core::policy::PolicyError),
    /// The provider refused a listener or memory.
    #[error("provider: {0}")]
    Provider(String),
}

/// How many entries the tables of a [`Node`](super::Node) hold
/// ([`Node::footprint`](super::Node::footprint)): what a leak check counts.
/// Every session's memory (its send and receive slots, its regions) goes
/// with its entry in `sessions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Sessions, live and ended but not yet reaped.
    pub sessions: usize,
    /// Session ids known (for connect requests).
    pub session_ids: usize,
    /// Listeners.
    pub listeners: usize,
    /// CM ids the node owns (listeners, attempts, connections, requests,
    /// closing transports).
    pub cm_ids: usize,
    /// Connect requests waiting for their session's answer.
    pub requests: usize,
    /// Accepted sessions not yet taken with [`Node::accept`](super::Node::accept).
    pub accepted: usize,
    /// CQs indexed to their session (or closing transport).
    pub cqs: usize,
    /// Sessions (and closing transports) with a timer indexed.
    pub deadlines: usize,
    /// Ended (closed or failed) sessions not yet reaped.
    pub ended: usize,
    /// Closed sessions' transports waiting for their goodbye to leave
    /// ([`Node::set_goodbye_timeout`](super::Node::set_goodbye_timeout)).
    pub closing: usize,
}
