//! The errors of a [`Node`](super::Node)'s calls, one type per family of
//! calls: what the call could not do, typed, with the provider's or the
//! session's error as its [`source`](std::error::Error::source).
//!
//! Every enum is `#[non_exhaustive]`: a match needs a wildcard arm. The
//! variants an application decides on (retry, fix its input, give up) are
//! distinct and say which it is.
//!
//! | calls | error |
//! |---|---|
//! | [`SessionOptionsBuilder::build`](super::SessionOptionsBuilder::build) | [`OptionsError`] |
//! | [`Node::connect`](super::Node::connect) | [`ConnectError`] |
//! | [`Node::listen`](super::Node::listen) | [`ListenError`] |
//! | [`Node::send`](super::Node::send), [`write`](super::Node::write), [`read`](super::Node::read), [`fetch_add`](super::Node::fetch_add), [`cmp_swap`](super::Node::cmp_swap), [`submit`](super::Node::submit) | [`SubmitError`] |
//! | [`Node::region`](super::Node::region) | [`RegionError`] |
//! | [`Node::close`](super::Node::close) | [`CloseError`] |
//! | [`Node::resume`](super::Node::resume), [`resume_on`](super::Node::resume_on) | [`ResumeError`] |
//! | [`Node::set_policy`](super::Node::set_policy) | [`SetPolicyError`] |
//! | [`Node::suspend`](super::Node::suspend) | [`SuspendError`] |
//! | [`SharedReceiveOptionsBuilder::build`](super::SharedReceiveOptionsBuilder::build), [`Node::create_shared_receive`](super::Node::create_shared_receive), [`Node::remove_shared_receive`](super::Node::remove_shared_receive) | [`SharedReceiveError`] (also inside [`ConnectError`] and [`ListenError`]) |
//!
//! What happens to a session after the call succeeded (a failed attempt,
//! a give-up, a lost peer) is not an error of a call: it comes out of
//! [`Node::poll_event`](super::Node::poll_event) as a
//! [`SessionEvent`](crate::SessionEvent), and an operation's end out of
//! [`Node::poll_completion`](super::Node::poll_completion) as its
//! [`Outcome`](crate::Outcome).

use std::net::SocketAddr;

use relink_core::policy::PolicyError;
use relink_core::session::SessionError;
use relink_core::state::State;
use relink_core::{LocalRange, RegionId};
use relink_fabric::{CmError, MemoryError};

use super::{SessionHandle, SharedReceiveHandle};

/// Invalid [`SessionOptions`](super::SessionOptions): the input must
/// change, retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// A policy key is out of range (the key is named).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A session option is out of range.
    #[error("session option `{key}`: {reason}")]
    Invalid {
        /// The option, as its builder setter names it (`recv_slots`, ...).
        key: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// Two regions have the same id.
    #[error("region {} is listed twice", .0.0)]
    DuplicateRegion(RegionId),
    /// A region is empty.
    #[error("region {} has length 0", .0.0)]
    EmptyRegion(RegionId),
    /// A region no device can register: longer than the application's
    /// memory it names, or rights no device grants.
    #[error("region {}: {reason}", id.0)]
    BadRegion {
        /// The region.
        id: RegionId,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// [`SessionOptions::connect_data`](super::SessionOptions::connect_data)
    /// is longer than the Hello carries.
    #[error("connect data of {len} bytes exceeds the maximum {max}")]
    ConnectDataTooLong {
        /// Its length.
        len: usize,
        /// [`MAX_CONNECT_DATA`](crate::MAX_CONNECT_DATA).
        max: usize,
    },
}

/// Why [`Node::connect`](super::Node::connect) made no session. Once it
/// returns a handle, failures to reach the peer are events of the session
/// ([`SessionEvent::AttemptFailed`](crate::SessionEvent::AttemptFailed)),
/// never errors of the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No path was given: the input must change.
    #[error("no path to the peer")]
    NoPath,
    /// The options are invalid: the input must change.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The session's memory (send and receive slots, regions) could not be
    /// allocated: smaller options, or later, when memory is free.
    #[error("cannot allocate the session's memory")]
    Memory(#[source] MemoryError),
    /// The session's shared receive queue cannot take it: an unknown
    /// handle, messages too large (fix the input), or a queue whose depth
    /// the other sessions' reservations fill (`Full`: later, or a deeper
    /// queue).
    #[error(transparent)]
    SharedReceive(#[from] SharedReceiveError),
}

/// Why a session could not be given its entry: its memory, or its share of
/// a shared receive queue.
#[derive(Debug, thiserror::Error)]
pub(super) enum EntryError {
    /// The session's memory could not be allocated.
    #[error("cannot allocate the session's memory: {0}")]
    Memory(#[source] MemoryError),
    /// The shared receive queue refused the session.
    #[error(transparent)]
    SharedReceive(#[from] SharedReceiveError),
}

impl From<EntryError> for ConnectError {
    fn from(e: EntryError) -> ConnectError {
        match e {
            EntryError::Memory(e) => ConnectError::Memory(e),
            EntryError::SharedReceive(e) => ConnectError::SharedReceive(e),
        }
    }
}

/// What is wrong with a shared receive queue or a session's use of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SharedReceiveError {
    /// An option of [`SharedReceiveOptions`](super::SharedReceiveOptions)
    /// is out of range: the input must change.
    #[error("shared receive option `{key}`: {reason}")]
    Invalid {
        /// The option, as its builder setter names it (`depth`, ...).
        key: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// The node has no shared receive queue of this handle (never made,
    /// or removed): the input must change.
    #[error("no shared receive queue {} on this node", .0.0)]
    Unknown(SharedReceiveHandle),
    /// The session's `max_message` is larger than the queue's slots: the
    /// input must change.
    #[error("max_message {max_message} exceeds the shared receive queue's {limit}")]
    MessageTooLarge {
        /// The session's `max_message`.
        max_message: u32,
        /// The queue's `max_message`.
        limit: u32,
    },
    /// The session's `recv_slots` do not fit in what the other sessions'
    /// reservations leave of the queue's depth (with `reserved` 0: not even
    /// in an empty queue). Retry once sessions on it are gone, or use a
    /// deeper queue or fewer `recv_slots`.
    #[error("shared receive queue full: {reserved} of {depth} receives reserved, {wanted} wanted")]
    Full {
        /// The queue's depth.
        depth: u32,
        /// Receives reserved by its sessions now.
        reserved: u32,
        /// The session's `recv_slots`.
        wanted: u32,
    },
    /// [`Node::remove_shared_receive`](super::Node::remove_shared_receive):
    /// a session or listener still uses the queue, or buffers are posted
    /// to its pool ([`Node::take_shared_receives`](super::Node::take_shared_receives)).
    #[error("the shared receive queue is in use")]
    InUse,
    /// [`Node::post_shared_receive`](super::Node::post_shared_receive) of a
    /// range that is not inside one registration of the node (the pool
    /// serves every session on the queue, and only registrations are in
    /// all of them): the input must change.
    #[error(
        "range {:#x}+{} is not inside registration {} of the node",
        .0.offset,
        .0.len,
        .0.region.0
    )]
    NotRegistered(relink_core::LocalRange),
}

/// Why [`Node::listen`](super::Node::listen) made no listener. An address
/// that no local device owns yet is not an error: the listener waits for
/// a device that owns it
/// ([`Node::listener_active`](super::Node::listener_active)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// The options of the sessions it would accept are invalid: the input
    /// must change.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// Port 0: a listener needs a fixed port, since sessions resume to the
    /// address they connected to. The input must change.
    #[error("cannot listen on {0}: port 0 is not a fixed port")]
    NoPort(SocketAddr),
    /// Another listener (of this process or another) is bound to the
    /// address: retry once it is closed, or listen on another.
    #[error("address {0} is in use")]
    AddrInUse(SocketAddr),
    /// The provider refused the listener for another reason.
    #[error("the provider refused a listener on {addr}")]
    Provider {
        /// The address listened on.
        addr: SocketAddr,
        /// What the provider said.
        #[source]
        error: CmError,
    },
    /// The sessions' shared receive queue cannot take them: an unknown
    /// handle, messages too large, or `recv_slots` deeper than the queue
    /// (`Full` with nothing reserved). The input must change.
    #[error(transparent)]
    SharedReceive(#[from] SharedReceiveError),
}

/// Why an operation was not submitted ([`Node::send`](super::Node::send),
/// [`write`](super::Node::write), [`read`](super::Node::read),
/// [`fetch_add`](super::Node::fetch_add),
/// [`cmp_swap`](super::Node::cmp_swap), [`submit`](super::Node::submit)).
/// A submitted operation gets exactly one completion instead; these
/// errors mean it has none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The node has no session of this handle: it never made one, or the
    /// session ended and was reaped ([`Node::sessions`](super::Node::sessions)).
    #[error("no session {}", .0.0)]
    NoSession(SessionHandle),
    /// The session ended (state `Closed` or `Failed`): it takes no more
    /// operations; a new session must be made.
    #[error("the session is {0}")]
    Ended(State),
    /// The session is closing gracefully
    /// ([`Node::close_gracefully`](super::Node::close_gracefully),
    /// [`Node::shutdown`](super::Node::shutdown)): it finishes what was
    /// submitted and takes nothing new.
    #[error("the session is closing")]
    Closing,
    /// The message is larger than the session's largest
    /// ([`SessionOptions::max_message`](super::SessionOptions::max_message)).
    #[error("a message of {len} bytes exceeds the session's largest, {max}")]
    TooLarge {
        /// The message's length in bytes.
        len: usize,
        /// The largest payload the session takes.
        max: usize,
    },
    /// The local range is outside its region, or names no region of the
    /// session, or is an atomic's and not 8 bytes long.
    #[error(
        "local range {:#x}+{} is not inside region {} of the session: no such region, \
         outside it, or (for an atomic) not 8 bytes",
        .0.offset,
        .0.len,
        .0.region.0
    )]
    BadLocal(LocalRange),
    /// An atomic ([`fetch_add`](super::Node::fetch_add),
    /// [`cmp_swap`](super::Node::cmp_swap)) whose 8 bytes are not 8-byte
    /// aligned: its local range's offset or its token's offset is not a
    /// multiple of 8 (regions start page aligned). Refused here: posted, a
    /// device would refuse it and the session would lose its transport.
    #[error(
        "an atomic needs 8-byte alignment: its {what} offset {offset:#x} is not a multiple of 8"
    )]
    Misaligned {
        /// Which offset: `"local"` (the local range's) or `"remote"` (the
        /// token's).
        what: &'static str,
        /// The offset.
        offset: u64,
    },
    /// The session has [`SessionOptions::max_outstanding`](super::SessionOptions::max_outstanding)
    /// operations outstanding (submitted, completion not taken): take
    /// completions, then submit again ([`SessionEvent::Writable`](crate::SessionEvent::Writable)
    /// says when room returned). Nothing was submitted.
    #[error("the session has {outstanding} operations outstanding, its most ({max}): take completions first")]
    WouldBlock {
        /// Operations submitted whose completion was not taken.
        outstanding: u64,
        /// The session's `max_outstanding`.
        max: u32,
    },
    /// The session refused the operation for another reason.
    #[error("the session refused the operation")]
    Session(#[source] SessionError),
}

impl From<SessionError> for SubmitError {
    fn from(e: SessionError) -> SubmitError {
        match e {
            SessionError::Terminal(state) => SubmitError::Ended(state),
            SessionError::Closing => SubmitError::Closing,
            SessionError::TooLarge { len, max } => SubmitError::TooLarge { len, max },
            SessionError::BadLocal(range) => SubmitError::BadLocal(range),
            SessionError::Misaligned { what, offset } => SubmitError::Misaligned { what, offset },
            SessionError::Full { outstanding, max } => SubmitError::WouldBlock { outstanding, max },
            other => SubmitError::Session(other),
        }
    }
}

/// Why [`Node::region`](super::Node::region) found no memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegionError {
    /// The node has no session of this handle (never made, or reaped).
    #[error("no session {}", .0.0)]
    NoSession(SessionHandle),
    /// The session has no region of this id.
    #[error("no region {}", .0.0)]
    NoRegion(RegionId),
}

/// Why [`Node::close`](super::Node::close) did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// The node has no session of this handle (never made, or reaped).
    #[error("no session {}", .0.0)]
    NoSession(SessionHandle),
}

/// Why [`Node::resume`](super::Node::resume) or
/// [`Node::resume_on`](super::Node::resume_on) did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The node has no session of this handle (never made, or reaped).
    #[error("no session {}", .0.0)]
    NoSession(SessionHandle),
    /// The session is neither held for a decision nor suspended
    /// (automatic, connected, already resumed, or ended): nothing to
    /// resume. Its state is given.
    #[error("the session is not awaiting a decision nor suspended (it is {0})")]
    NotAwaitingDecision(State),
    /// The path index is not one of the session's paths.
    #[error("no path {index}: the session has {paths}")]
    NoSuchPath {
        /// The index given.
        index: usize,
        /// How many paths the session has.
        paths: usize,
    },
}

/// Why [`Node::suspend`](super::Node::suspend) did not suspend the
/// session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SuspendError {
    /// The node has no session of this handle (never made, or reaped).
    #[error("no session {}", .0.0)]
    NoSession(SessionHandle),
    /// The session was accepted here: its initiator, which reconnects,
    /// suspends and resumes it.
    #[error("only the initiator suspends a session")]
    NotInitiator,
    /// The session was never established (its state is given): there is
    /// nothing to keep yet.
    #[error("the session was never established (it is {0})")]
    NotEstablished(State),
    /// The session is closing gracefully.
    #[error("the session is closing")]
    Closing,
    /// The session ended (its state is given).
    #[error("the session ended (it is {0})")]
    Ended(State),
}

/// Why [`Node::set_policy`](super::Node::set_policy) left the session's
/// policy unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetPolicyError {
    /// The node has no session of this handle (never made, or reaped).
    #[error("no session {}", .0.0)]
    NoSession(SessionHandle),
    /// A policy key is out of range (the key is named).
    #[error("invalid policy")]
    Policy(#[source] PolicyError),
}
