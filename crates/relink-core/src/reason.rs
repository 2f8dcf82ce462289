//! The reasons of a session's setbacks: why the transport went down
//! ([`DownCause`]), why a connection attempt failed ([`AttemptFailure`])
//! and why a session lost its peer for good ([`PeerLostReason`]): the
//! typed reasons of
//! [`SessionEvent::DeviceLost`](crate::session::SessionEvent::DeviceLost),
//! [`SessionEvent::AttemptFailed`](crate::session::SessionEvent::AttemptFailed),
//! [`SessionEvent::PeerLost`](crate::session::SessionEvent::PeerLost) and
//! the [`Cause`](crate::state::Cause) of their transitions. The state
//! machine ([`state`](crate::state)) names these; this module names
//! nothing of it.
//!
//! A failed attempt is retried under the policy until the session's
//! give-up deadline (`first_connect_tmo` before the session was ever
//! established, `ctrl_loss_tmo` after a loss); a lost peer ends the
//! session at once.

use std::fmt;

use relink_fabric::{CmError, CreateError, PostError, WcStatus};

use crate::ids::RegionId;
use crate::wire::{RefuseReason, WireError};

/// Why the transport went down: every detection source folds into this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DownCause {
    /// The device left the device list (netlink UNREGISTER, uevent, rescan,
    /// soft registry).
    DeviceRemoved,
    /// `IBV_EVENT_DEVICE_FATAL` (a reset).
    DeviceFatal,
    /// The port went down.
    PortDown,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    CmDeviceRemoval,
    /// `RDMA_CM_EVENT_DISCONNECTED` (the peer left or lost its device).
    CmDisconnected,
    /// `RDMA_CM_EVENT_ADDR_CHANGE`.
    AddrChange,
    /// A work completion with an error status (flush, retry exceeded, ...).
    Completion(WcStatus),
    /// Nothing heard from the peer for two keepalive periods.
    KeepaliveTimeout,
    /// The connection was established but the in-band handshake (buffer
    /// advertisements) did not finish within the connect timeout.
    ResyncTimeout,
    /// Taken down on purpose once both ends were quiet: a drain moving the
    /// session to another path, or a suspend. Not a loss.
    Planned,
    /// The peer promoted the standby connection (its message arrived
    /// there): it lost the current one, or is about to notice.
    PeerFailover,
}

impl fmt::Display for DownCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownCause::DeviceRemoved => f.write_str("device removed"),
            DownCause::DeviceFatal => f.write_str("device fatal error"),
            DownCause::PortDown => f.write_str("port down"),
            DownCause::CmDeviceRemoval => f.write_str("CM device removal"),
            DownCause::CmDisconnected => f.write_str("disconnected"),
            DownCause::AddrChange => f.write_str("address change"),
            DownCause::Completion(s) => write!(f, "completion error: {}", s.name()),
            DownCause::KeepaliveTimeout => f.write_str("keepalive timeout"),
            DownCause::ResyncTimeout => f.write_str("resync timed out"),
            DownCause::Planned => f.write_str("planned (drain or suspend)"),
            DownCause::PeerFailover => f.write_str("the peer moved to the standby connection"),
        }
    }
}

/// Why one connection attempt (of the first connect or of a recovery)
/// failed. The session retries after the backoff unless its give-up
/// deadline passed; the reason says what the application or an operator
/// may do meanwhile (start the peer, bring a device up, fix an address).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptFailure {
    /// No present device can carry any path to the peer: none owns the
    /// path's local address or reaches the peer's subnet, every such port
    /// is down, or the policy's `device_match` allows none. No request was
    /// sent; the session waits for a device event (a device added, a port
    /// up, an address change) and tries at once when one comes.
    #[error("no device reaches the peer")]
    NoDevice,
    /// The peer's address could not be resolved to a local device
    /// (`RDMA_CM_EVENT_ADDR_ERROR`).
    #[error("address resolution failed")]
    AddrUnresolved,
    /// No route to the peer (`RDMA_CM_EVENT_ROUTE_ERROR`).
    #[error("route resolution failed")]
    RouteUnresolved,
    /// The peer did not answer the connection request
    /// (`RDMA_CM_EVENT_UNREACHABLE`): no host or no device at its address.
    #[error("the peer is unreachable")]
    Unreachable,
    /// The connection failed after the peer answered
    /// (`RDMA_CM_EVENT_CONNECT_ERROR`).
    #[error("connection error")]
    ConnectError,
    /// The peer's host answered but nothing listens on the address (a
    /// reject by its CM, without relink's reply): its application is not
    /// listening yet, or is listening again after a device loss. Retried
    /// after `refused_backoff`.
    #[error("nothing listens at the peer's address")]
    NoListener,
    /// The peer's relink refused the attempt for a reason that may change
    /// (`Busy`, `StaleEpoch`); a final refusal ends the session instead
    /// ([`PeerLostReason::Refused`]).
    #[error("refused by the peer: {0}")]
    Refused(RefuseReason),
    /// The attempt did not finish (connection and in-band handshake)
    /// within its timeout (`initial_connect_timeout`, doubling per attempt
    /// up to `connect_timeout`; a probe of a silent peer: `probe_timeout`).
    #[error("timed out")]
    Timeout,
    /// The device the attempt resolved to went away during it
    /// (`RDMA_CM_EVENT_DEVICE_REMOVAL`, or gone from the device list).
    #[error("the attempt's device went away")]
    DeviceLost,
    /// The connection being made was disconnected before it was up.
    #[error("disconnected during the attempt")]
    Disconnected,
    /// The transport of the attempt went down before the session was up
    /// again.
    #[error("transport down during the attempt: {0}")]
    TransportDown(DownCause),
    /// The peer's reply does not fit the handshake (malformed, a reply to
    /// another kind of request, or not authentic).
    #[error("bad handshake reply: {0}")]
    BadReply(#[source] ReplyFault),
    /// A provider call of the attempt failed (creating or resolving the CM
    /// id, building the transport, connecting or accepting).
    #[error(transparent)]
    Provider(#[from] ProviderFailure),
}

/// What is wrong with a peer's handshake reply
/// ([`AttemptFailure::BadReply`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyFault {
    /// The accept data does not decode.
    #[error("malformed accept data: {0}")]
    Malformed(#[source] WireError),
    /// A Welcome (the answer to a Hello) to a Resume, or for another
    /// session.
    #[error("a welcome that answers none of the hellos sent")]
    UnexpectedWelcome,
    /// A Resumed (the answer to a Resume) to a Hello.
    #[error("a resume reply to a hello")]
    UnexpectedResumed,
    /// A Resumed whose session, epoch or authenticator does not match.
    #[error("a resume reply that fails authentication")]
    NotAuthentic,
}

/// A provider call that failed during a connection attempt, with the
/// provider's error ([`AttemptFailure::Provider`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderFailure {
    /// A connection-management call.
    #[error("{call}: {error}")]
    Cm {
        /// Which call.
        call: CmCall,
        /// What the provider said.
        #[source]
        error: CmError,
    },
    /// The device could not be opened (it went away, or the provider's
    /// backing system failed).
    #[error("open device: {0:?}")]
    OpenDevice(std::io::ErrorKind),
    /// A verbs object of the transport could not be created.
    #[error("{object}: {error}")]
    Create {
        /// Which object.
        object: TransportObject,
        /// What the provider said.
        #[source]
        error: CreateError,
    },
    /// The receive slots could not be posted.
    #[error("post receives: {0}")]
    PostRecv(#[source] PostError),
    /// The binds of the regions' memory windows could not be posted.
    #[error("post window binds: {0}")]
    PostBind(#[source] PostError),
}

/// The connection-management call of a [`ProviderFailure::Cm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CmCall {
    /// `rdma_create_id`.
    CreateId,
    /// `rdma_resolve_addr`.
    ResolveAddr,
    /// `rdma_resolve_route`.
    ResolveRoute,
    /// `rdma_connect`.
    Connect,
    /// `rdma_accept`.
    Accept,
}

impl fmt::Display for CmCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CmCall::CreateId => "create CM id",
            CmCall::ResolveAddr => "resolve address",
            CmCall::ResolveRoute => "resolve route",
            CmCall::Connect => "connect",
            CmCall::Accept => "accept",
        })
    }
}

/// The transport object of a [`ProviderFailure::Create`], in the order a
/// transport is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportObject {
    /// The protection domain.
    Pd,
    /// The completion queue.
    Cq,
    /// The registration of the send slots.
    SendSlots,
    /// The registration of the receive slots.
    RecvSlots,
    /// The registration of an application region.
    Region(RegionId),
    /// The queue pair.
    Qp,
    /// The shared receive queue of a device context.
    Srq,
    /// The type 2 memory window of an application region.
    Window(RegionId),
}

impl fmt::Display for TransportObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportObject::Pd => f.write_str("alloc PD"),
            TransportObject::Cq => f.write_str("create CQ"),
            TransportObject::SendSlots => f.write_str("register send slots"),
            TransportObject::RecvSlots => f.write_str("register receive slots"),
            TransportObject::Region(r) => write!(f, "register region {r}"),
            TransportObject::Qp => f.write_str("create QP"),
            TransportObject::Srq => f.write_str("create SRQ"),
            TransportObject::Window(r) => write!(f, "allocate the window of region {r}"),
        }
    }
}

/// Why a session lost its peer for good: the session fails at once
/// (state `Failed`, its pending operations `Failed(PeerLost)` or
/// `Indeterminate`), nothing is replayed into a stranger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PeerLostReason {
    /// The peer answered a resume as a new process (another incarnation):
    /// it lost the session's state.
    #[error("the peer is a new process (new incarnation)")]
    NewIncarnation,
    /// The peer's relink refused the session with a final reason
    /// ([`RefuseReason::is_final`]): `UnknownSession` (it has no session
    /// of this id: it ended there, or the peer is a new process),
    /// `BadAuthenticator`, `UnsupportedVersion`, `ShuttingDown`.
    #[error("the peer refused the session for good: {0}")]
    Refused(RefuseReason),
}
