//! Connection management, shaped like `rdma_cm`.
//!
//! Initiator: `cm_create_id` → `cm_resolve_addr` (event `AddrResolved`) →
//! `cm_resolve_route` (`RouteResolved`) → create PD/CQ/QP on
//! [`cm_device`](crate::Provider::cm_device) → `cm_connect` (`Established`,
//! `Rejected` or `Unreachable`).
//!
//! Target: `cm_create_id` → `cm_bind` (a device's address or the wildcard) →
//! `cm_listen` → `ConnectRequest` carries a new id → `cm_accept` or
//! `cm_reject`.
//!
//! Either side: `cm_disconnect` (peer sees `Disconnected`); a device loss
//! gives `DeviceRemoval` on every id bound to the device, including a
//! listener bound to one of its addresses (a wildcard listener survives and
//! covers devices added later).

use std::net::SocketAddr;

use crate::error::CmError;
use crate::handles::CmId;

/// Maximum private data in a connect request (IB CM REQ through rdma_cm).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Maximum private data in an accept (IB CM REP through rdma_cm).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Maximum private data in a reject (IB CM REJ).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

/// Why a connection attempt was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The peer's application called reject (consumer-defined, IB reason 28).
    Consumer,
    /// Nobody listens on the destination port (invalid service ID).
    NoListener,
    /// The peer ran out of resources.
    NoResources,
}

/// What happened on a CM id (`rdma_cm_event_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEventKind {
    /// Address resolution finished; the id is bound to a local device.
    AddrResolved,
    /// Address resolution failed (no local device reaches the destination,
    /// or nobody answered for it).
    AddrError,
    /// Route resolution finished.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A connection request arrived on a listener; `CmEvent::id` is the new id.
    ConnectRequest {
        /// The listening id it arrived on.
        listener: CmId,
        /// The initiator's private data (at most 56 bytes).
        private_data: Vec<u8>,
        /// The initiator's address.
        peer: SocketAddr,
        /// The local address it was sent to.
        local: SocketAddr,
    },
    /// The connection is up; carries the peer's private data (the accept's,
    /// on the initiator side).
    Established {
        /// Private data of the accept (initiator side) or empty (target side).
        private_data: Vec<u8>,
    },
    /// The peer rejected the request.
    Rejected {
        /// Who refused: the peer's application (`Consumer`, with its private
        /// data) or the peer's transport.
        reason: RejectReason,
        /// Private data of the reject.
        private_data: Vec<u8>,
    },
    /// The peer could not be reached (no reply to the request).
    Unreachable,
    /// The connection could not be completed after the reply.
    ConnectError,
    /// The connection ended (the peer disconnected, or its device went away).
    Disconnected,
    /// The local device the id is bound to went away; the id must be destroyed.
    DeviceRemoval,
    /// The local address the id is bound to changed.
    AddrChange,
}

/// A CM event, as [`Event::Cm`](crate::Event::Cm) carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    /// The id it happened on (the new id, for `ConnectRequest`).
    pub id: CmId,
    /// What happened.
    pub kind: CmEventKind,
}

/// Check private data against a transport limit (one of the `MAX_*`
/// constants), the same way for every provider.
pub fn check_private_data(data: &[u8], max: usize) -> Result<(), CmError> {
    if data.len() > max {
        return Err(CmError::PrivateDataTooLong {
            len: data.len(),
            max,
        });
    }
    Ok(())
}
