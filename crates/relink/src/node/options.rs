//! What the application hands a [`Node`](super::Node) and gets back:
//! session and listener handles, session and region options, errors.

use relink_core::policy::Policy;
use relink_core::resources::{RegionSpec, SessionSpec};
use relink_core::session::SessionError;
use relink_core::wire::{self, ConnectBytes, MAX_CONNECT_DATA};
use relink_core::RegionId;

use super::RegionOptions;

/// Identifies a session of a [`Node`](super::Node); never reused by that
/// node, also after the session is gone (reaped once it ended and was
/// drained: [`Node::sessions`](super::Node::sessions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionHandle(pub u64);

/// Identifies a listener of a [`Node`](super::Node); never reused by that
/// node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerHandle(pub u64);

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
    /// Bytes for the peer's application, sent with the session's first
    /// connect (at most [`MAX_CONNECT_DATA`]); the accepting node hands
    /// them out with the session ([`Accepted`](super::Accepted),
    /// [`Node::connect_data`](super::Node::connect_data)). Resumes do not
    /// carry them. For [`Node::connect`](super::Node::connect) only: a
    /// listener's are not used. Empty by default.
    pub connect_data: Vec<u8>,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            policy: Policy::default(),
            recv_slots: 64,
            max_message: 4096,
            max_one_sided: 64,
            regions: Vec::new(),
            connect_data: Vec::new(),
        }
    }
}

impl SessionOptions {
    /// The connect data as the Hello carries it.
    pub(super) fn connect_bytes(&self) -> Result<ConnectBytes, Error> {
        ConnectBytes::new(&self.connect_data).map_err(|_| Error::ConnectDataTooLong {
            len: self.connect_data.len(),
            max: MAX_CONNECT_DATA,
        })
    }

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
    /// A region of the options cannot be registered: no bytes, longer
    /// than its memory, rights no device grants, or a second region of
    /// its id.
    #[error("region {id}: {reason}")]
    BadRegion {
        /// The region.
        id: RegionId,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// [`SessionOptions::connect_data`] is longer than the Hello carries.
    #[error("connect data of {len} bytes exceeds the maximum {max}")]
    ConnectDataTooLong {
        /// Its length.
        len: usize,
        /// [`MAX_CONNECT_DATA`].
        max: usize,
    },
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
/// Every session's memory (its send and receive slots, the regions relink
/// allocated for it) goes with its entry in `sessions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Sessions, live and ended but not yet reaped.
    pub sessions: usize,
    /// Session ids known (for connect requests).
    pub session_ids: usize,
    /// Listeners.
    pub listeners: usize,
    /// CM ids the node owns (listeners, attempts, connections, requests).
    pub cm_ids: usize,
    /// Connect requests waiting for their session's answer.
    pub requests: usize,
    /// Accepted sessions not yet taken with [`Node::accept`](super::Node::accept).
    pub accepted: usize,
    /// CQs indexed to their session.
    pub cqs: usize,
    /// Sessions with a timer indexed.
    pub deadlines: usize,
    /// Ended (closed or failed) sessions not yet reaped.
    pub ended: usize,
    /// Sessions in the queue of those with output for
    /// [`Node::poll_output`](super::Node::poll_output) (each at most once).
    pub ready: usize,
}
