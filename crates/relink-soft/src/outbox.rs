//! What a [`HostState`](crate::host::HostState) call asks its transport to do.

use std::net::SocketAddr;

use relink_fabric::Timestamp;

use crate::packet::Packet;

/// A timer a host asks its transport to fire later. Stale timers (whose
/// generation no longer matches) are ignored by the host, so transports never
/// need to cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// Transport retransmission timer of a QP (ACK timeout).
    Retransmit {
        /// QP handle.
        qp: u64,
        /// The QP's timer generation when the timer was armed; the timer is
        /// stale once the QP's generation moved on.
        gen: u64,
    },
    /// Receiver-not-ready back-off of a QP.
    Rnr {
        /// QP handle.
        qp: u64,
        /// The QP's timer generation when the timer was armed; the timer is
        /// stale once the QP's generation moved on.
        gen: u64,
    },
    /// A CM id's request/response timeout.
    Cm {
        /// CM id handle.
        id: u64,
        /// The id's timer generation when the timer was armed; the timer is
        /// stale once the id's generation moved on.
        gen: u64,
    },
}

/// Transport-level requests that are not packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Start accepting connections for `addr` (IP may be the wildcard).
    Listen(SocketAddr),
    /// Stop accepting connections for `addr`.
    Unlisten(SocketAddr),
    /// The connection `conn_id` is over: close its stream once queued
    /// packets are written.
    Close(u64),
}

/// A packet and the connection it belongs to (0 for connectionless ones,
/// such as address resolution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Connection id (the CM's), 0 if none.
    pub conn: u64,
    /// The packet to send.
    pub packet: Packet,
}

/// Collects a host call's effects for the transport to carry out.
#[derive(Debug, Default)]
pub struct Outbox {
    /// The time of the call.
    pub now: Timestamp,
    /// Packets to send, in order.
    pub packets: Vec<Outgoing>,
    /// Timers to arm.
    pub timers: Vec<(Timestamp, Timer)>,
    /// Other transport requests.
    pub controls: Vec<Control>,
}

impl Outbox {
    /// An empty outbox at time `now`.
    pub fn new(now: Timestamp) -> Outbox {
        Outbox {
            now,
            ..Outbox::default()
        }
    }
}
