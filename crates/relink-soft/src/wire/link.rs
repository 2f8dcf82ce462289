//! Frames of the TCP transport itself, and payloads left where they are:
//! what two processes on one host say to move a transfer's bytes by one
//! cross-process copy instead of through the stream (`crate::direct`).
//!
//! ```text
//! body    = 0x4c:u8 link                         (a link frame: not a packet)
//! link    = 1:u8 pid:u32 alive_addr:u64 alive_gen:u64    Hello
//!         | 2:u8                                                                      DirectOk
//!         | 3:u8 upto:u64                                                             Release
//! rdata   = addr:u64 len:u32 lent:u64            (len <= MAX_PAYLOAD)
//! req     = ... | 6:u8 addr:u64 rkey:u32 rdata imm:opt32 solicited:bool              Write, bytes left in the sender
//! resp    = ... | 5:u8 rdata                                                          ReadData, bytes left in the sender
//! ```

use crate::packet::Packet;

/// The first byte of a link frame's body (a packet's is the wire version).
pub const LINK: u8 = 0x4c;

/// A payload the sending process kept: `len` bytes at `addr` in its
/// address space, lent under the id `lent` until the receiver releases it
/// ([`Link::Release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteData {
    /// Address of the first byte, in the sending process.
    pub addr: u64,
    /// Length in bytes (at most [`MAX_PAYLOAD`](super::MAX_PAYLOAD)).
    pub len: u32,
    /// The sender's id of the loan, counted from 1 per stream.
    pub lent: u64,
}

/// A process introducing itself at the start of a stream, so that a peer
/// on the same host can check that `pid` holds the other end of the
/// stream and read its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The sender's process id (in its pid namespace).
    pub pid: u32,
    /// A word of the sender that holds `alive_gen` while the sender's end
    /// of the stream lives, so lent payloads are still there.
    pub alive_addr: u64,
    /// The value of the alive word for this stream (never 0).
    pub alive_gen: u64,
}

/// A link frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// The sender's introduction (its first frame, if it lends payloads).
    Hello(Hello),
    /// The sender checked the peer's `Hello`: the peer may send payloads as
    /// [`RemoteData`] from now on.
    DirectOk,
    /// The sender is done with every loan up to and including `upto`.
    Release {
        /// The last loan released.
        upto: u64,
    },
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A packet with its payload.
    Packet(Packet),
    /// A packet whose payload (a WRITE's or READ response's) is left in
    /// the sending process: the packet carries an empty payload in its
    /// place until the receiver fetched it.
    Remote(Packet, RemoteData),
    /// A frame of the transport.
    Link(Link),
}
