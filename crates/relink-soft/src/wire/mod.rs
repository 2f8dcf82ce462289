//! The binary codec of [`Packet`](crate::packet::Packet)s for the TCP fabric.
//!
//! A frame is a `u32` big-endian body length followed by the body:
//!
//! ```text
//! frame   = len:u32 body                       (len = body length <= MAX_FRAME)
//! body    = version:u8(=1) src:ip dst:ip kind
//! ip      = 4:u8 [u8; 4] | 6:u8 [u8; 16]
//! kind    = 1:u8 cookie:u64                     ArpRequest
//!         | 2:u8 cookie:u64                     ArpReply
//!         | 3:u8 cm                             Cm
//!         | 4:u8 dst_qpn:u32 src_qpn:u32 psn:u32 req   Request
//!         | 5:u8 dst_qpn:u32 src_qpn:u32 psn:u32 resp  Response
//! cm      = 1:u8 conn_id:u64 src_port:u16 dst_port:u16 qpn:u32 params pdata   Req
//!         | 2:u8 conn_id:u64 qpn:u32 pdata                                    Rep
//!         | 3:u8 conn_id:u64                                                  Rtu
//!         | 4:u8 conn_id:u64 reason:u8 pdata                                  Rej
//!         | 5:u8 conn_id:u64 from_initiator:bool                              Dreq
//! params  = retry_count:u8 rnr_retry_count:u8 ack_timeout:u8
//! reason  = 0 Consumer | 1 NoListener | 2 NoResources
//! req     = 1:u8 data imm:opt32 invalidate:opt32 solicited:bool             Send
//!         | 2:u8 addr:u64 rkey:u32 data imm:opt32                           Write
//!         | 3:u8 addr:u64 rkey:u32 len:u32                                  Read
//!         | 4:u8 addr:u64 rkey:u32 add:u64                                  FetchAdd
//!         | 5:u8 addr:u64 rkey:u32 compare:u64 swap:u64                     CmpSwap
//! resp    = 1:u8 | 2:u8 data | 3:u8 orig:u64 | 4:u8 nak:u8                   Ack, ReadData, AtomicOrig, Nak
//! nak     = 0 Rnr | 1 RemoteAccess | 2 InvalidRequest | 3 RemoteOperation
//! pdata   = len:u32 bytes      (len <= 56 / 196 / 148 for Req / Rep / Rej)
//! data    = len:u32 bytes      (len <= MAX_PAYLOAD)
//! opt32   = 0:u8 | 1:u8 u32
//! bool    = 0:u8 | 1:u8
//! ```
//!
//! All integers are big-endian. Decoding checks every length before reading
//! and rejects unknown tags, out-of-range booleans, oversized fields and
//! trailing bytes; it never panics on any input.
//!
//! This file holds the constants and [`WireError`]; `encode.rs` writes
//! frames (and [`validate`]s packets), `decode.rs` reads one frame back,
//! `frame.rs` holds the [`FrameReader`] that cuts a stream into frames,
//! `link.rs` the frames of the transport itself and payloads left in the
//! sending process (two processes of one host, `crate::direct`).

use thiserror::Error;

mod decode;
mod encode;
mod frame;
mod link;
#[cfg(test)]
mod tests;
#[cfg(any(test, feature = "fuzzing"))]
mod validate;

pub use decode::decode_in;
pub use encode::{encode, encode_link, encode_remote};
pub use frame::FrameReader;
pub use link::{Hello, Incoming, Link, RemoteData};

// The transport decodes only into its pools and never validates: these serve
// the tests and the fuzz targets.
#[cfg(any(test, feature = "fuzzing"))]
pub use {
    decode::{decode, decode_frame},
    encode::{encode_incoming_to_vec, encode_to_vec},
    validate::validate,
};

/// Version byte that starts every body.
pub const VERSION: u8 = 1;
/// Length of the frame header (the body length).
pub const HEADER_LEN: usize = 4;
/// Largest SEND or WRITE payload, or READ response, in bytes, that the TCP
/// fabric carries in one packet; a frame with a larger one does not decode, and
/// the receiving process drops the connection.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// Largest body accepted: a maximal payload plus room for the headers.
pub const MAX_FRAME: usize = MAX_PAYLOAD + 1024;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The input ends inside a field.
    #[error("truncated {what}: {needed} bytes needed at offset {offset}, {available} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Offset of the field in the frame.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// A tag byte has no meaning.
    #[error("unknown {what} tag {tag}")]
    UnknownTag {
        /// What the tag selects.
        what: &'static str,
        /// The tag byte read.
        tag: u8,
    },
    /// A boolean byte is neither 0 nor 1.
    #[error("invalid boolean {value} for {what}")]
    BadBool {
        /// The name of the field that holds the byte.
        what: &'static str,
        /// The byte read (neither 0 nor 1).
        value: u8,
    },
    /// Bytes follow the packet inside its frame.
    #[error("{count} trailing bytes after the packet")]
    TrailingBytes {
        /// Bytes left in the frame after the packet.
        count: usize,
    },
    /// A length-prefixed field is longer than allowed.
    #[error("{what} is {len} bytes, at most {max} allowed")]
    TooLong {
        /// The name of the length-prefixed field.
        what: &'static str,
        /// Its declared length, in bytes.
        len: usize,
        /// The largest length allowed, in bytes.
        max: usize,
    },
    /// The frame header disagrees with the bytes given.
    #[error("frame header says {declared} body bytes but {actual} follow")]
    LengthMismatch {
        /// Body length in the header.
        declared: usize,
        /// Body bytes present.
        actual: usize,
    },
    /// A frame header announces a body larger than allowed.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Body length in the header.
        len: usize,
        /// The largest body accepted ([`MAX_FRAME`] unless the reader was
        /// given another).
        max: usize,
    },
    /// The body starts with a version this build does not speak.
    #[error("unsupported wire version {0} (this build speaks {VERSION})")]
    Version(u8),
    /// A link frame, or a packet whose payload is left in the sender, where
    /// only a packet with its payload is taken.
    #[error("a transport frame where a packet with its payload was expected")]
    #[cfg(any(test, feature = "fuzzing"))]
    NotAPacket,
}

/// `Ok` if a length-prefixed field of `len` bytes is within `max`, else
/// [`WireError::TooLong`] naming the field.
fn check_len(what: &'static str, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        Err(WireError::TooLong { what, len, max })
    } else {
        Ok(())
    }
}
