//! Wire formats of the session: the handshake carried in the CM private data
//! (connect, accept, reject) and the in-band messages carried in SEND
//! payloads once a connection is up.
//!
//! # Byte layout
//!
//! ```text
//! All integers are big-endian; every format starts with version:u8 (= VERSION = 4).
//!
//! session = u64        epoch = u32        seq = u64        incarnation = u64
//! auth    = [u8; 16]   (auth::authenticator, HMAC-SHA256 truncated)
//! secret  = [u8; 32]
//!
//! CONNECT private data (<= MAX_CONNECT_PRIVATE_DATA = 56 bytes)
//! connect = version 0x01:u8 session epoch incarnation len:u8 data:[u8; len]  Hello    23 + len bytes
//!         | version 0x02:u8 session epoch last_delivered:seq auth             Resume   38 bytes
//!         | version 0x03:u8 session epoch last_delivered:seq auth             Standby  38 bytes
//! data    = the initiator application's connect data, len <= MAX_CONNECT_DATA = 33
//!           (56 less the 23 bytes of the rest of the Hello); a Resume carries none
//!
//! ACCEPT private data (<= MAX_ACCEPT_PRIVATE_DATA = 196 bytes)
//! accept  = version 0x11:u8 session incarnation secret                     Welcome  50 bytes
//!         | version 0x12:u8 session epoch incarnation last_delivered:seq auth   Resumed 46 bytes
//!
//! REJECT private data (<= MAX_REJECT_PRIVATE_DATA = 148 bytes)
//! reject  = version 0x21:u8 reason:u8                                       Refused   3 bytes
//! reason  = 1 UnknownSession | 2 BadAuthenticator | 3 StaleEpoch
//!         | 4 UnsupportedVersion | 5 Busy | 6 ShuttingDown
//!
//! In-band frame (the bytes of one SEND): message+, back to back, at most the
//! receiver's frame_max bytes (its AdvertDone; one message until it is known).
//! Messages queued back to back share a frame, control messages as well as Data
//! (a Promote and the advertisements behind it arrive in one SEND); a Close ends
//! its frame.
//! message = version kind:u8 seq ack:seq len:u32 payload:[u8; len]   (len <= MAX_PAYLOAD_LEN;
//!           HEADER_LEN = 22 bytes of header)
//! kind    = 1 Data | 2 Advert | 3 AdvertDone | 4 Ack | 5 Keepalive | 6 KeepaliveReply | 7 Close
//!         | 8 Quiesce | 9 Quiesced | 10 MoveRequest | 11 Promote | 12 Skip
//!         | 13 Written | 14 Fetch | 15 Rendezvous
//! payload of Data           = application bytes                     seq >= 1
//!            Advert         = count:u16 advert[count]               seq = 0
//!            AdvertDone     = epoch frame_max:u32                   seq = 0
//!            Ack            = (empty)                               seq = 0
//!            Keepalive      = nonce:u64                             seq = 0
//!            KeepaliveReply = nonce:u64                             seq = 0
//!            Close          = (empty): the session ends, do not recover  seq = 0
//!            Quiesce        = purpose:u8 (1 Move | 2 Suspend)       seq = 0
//!            Quiesced       = (empty): nothing more is posted here  seq = 0
//!            MoveRequest    = (empty): move off my device, please   seq = 0
//!            Promote        = epoch last_delivered:seq: the standby this
//!                             arrives on is the current connection    seq = 0
//!            Skip           = (empty): take the number, deliver nothing  seq >= 1
//!            Written        = imm:u32 region:u32 offset:u64 len:u32: the WRITE
//!                             before it landed (WRITTEN_LEN = 20)   seq >= 1
//!            Fetch          = region:u32 offset:u64 len:u32: a message the
//!                             receiver RDMA-READs from the sender's
//!                             registered memory (FETCH_LEN = 16)    seq >= 1
//!            Rendezvous     = min:u32: I read your messages of one range
//!                             of min bytes or more (before AdvertDone) seq = 0
//! advert  = epoch region:u32 addr:u64 len:u64 rkey:u32 access:u32      ADVERT_LEN = 32 bytes
//! ```
//!
//! The connect, accept and reject tags live in disjoint ranges, so private
//! data handed to the wrong decoder fails with an unknown tag.
//!
//! `Resume.auth` is `authenticator(secret, [b"resume", session, epoch,
//! last_delivered])`, a Standby's the same under the label `b"standby"`,
//! and `Resumed.auth` is `authenticator(secret,
//! [b"resumed", session, epoch, last_delivered, incarnation])`, every id in
//! its wire encoding; [`Resume::sign`] / [`Resume::verify`] and
//! [`Resumed::sign`] / [`Resumed::verify`] compute and check them.
//!
//! `ack` in every message header is the highest sequence number the sender
//! has delivered from the peer (piggybacked acknowledgement).
//!
//! # Parsing rules
//!
//! Decoding checks every length before reading, never panics, and fails with
//! a [`WireError`] on an unsupported version, an unknown tag or reason, a
//! short input, an oversized length, a sequence number that breaks the rule
//! above, or trailing bytes. One exception: CM private data may be followed
//! by **zero bytes**, because transports pad it (rdma_cm: "the actual amount
//! of data transferred to the remote side is transport dependent and may be
//! larger than that requested"; IB CM delivers the full 56/196/148 bytes).
//! Any non-zero byte after the structure is still [`WireError::TrailingBytes`],
//! and private data that is empty or all zeros is [`WireError::NoData`]
//! (e.g. a reject generated by the CM itself). In-band messages have exact
//! lengths: a message is its header and the `len` bytes that follow, and
//! a frame is whole messages ([`frame_messages`] splits it).
//!
//! Every accepted encoding is canonical: re-encoding what was decoded gives
//! the same bytes (less the CM padding).
//!
//! # Files
//!
//! | file | holds |
//! |---|---|
//! | `wire/mod.rs` | this layout, the shared limits, [`WireError`] |
//! | `wire/cursor.rs` | the length-checked reader and the big-endian writers |
//! | `wire/handshake.rs` | CM private data: [`ConnectData`], [`AcceptData`], [`RejectData`] |
//! | `wire/message.rs` | in-band messages: [`MsgHeader`], [`MsgBody`], `encode_*` / `decode_*` |

use thiserror::Error;

use crate::ids::Seq;

mod cursor;
mod handshake;
mod message;
#[cfg(test)]
mod tests;

pub use handshake::{
    AcceptData, ConnectBytes, ConnectData, Hello, RefuseReason, Refused, RejectData, Resume,
    Resumed, Welcome,
};
pub use message::{
    decode_message, decode_typed, encode_ack, encode_advert_done, encode_adverts, encode_body,
    encode_close, encode_keepalive, encode_keepalive_reply, encode_message, fetch_header,
    fetch_payload, frame_messages, Advert, FetchSource, FrameMessages, MsgBody, MsgHeader, MsgKind,
    QuiescePurpose, Written, FETCH_LEN, WRITTEN_LEN,
};

/// Version byte that starts every format.
pub const VERSION: u8 = 5;

/// Length of a [`Hello`] with no connect data: version, tag, session,
/// epoch, incarnation and the connect data's length byte.
pub const HELLO_LEN: usize = 1 + 1 + 8 + 4 + 8 + 1;

/// The most bytes of connect data a session's first connect carries to
/// the peer's application: 33, what the CM's connect private data (56
/// bytes) leaves after the rest of relink's Hello.
pub const MAX_CONNECT_DATA: usize = relink_fabric::MAX_CONNECT_PRIVATE_DATA - HELLO_LEN;

const _: () = assert!(MAX_CONNECT_DATA == 33 && MAX_CONNECT_DATA <= u8::MAX as usize);

/// Length of an in-band message header ([`MsgHeader`]).
pub const HEADER_LEN: usize = 1 + 1 + 8 + 8 + 4;

/// Largest payload of one in-band message, so that a whole message
/// (header + payload) fits in 16 MiB.
pub const MAX_PAYLOAD_LEN: usize = (16 << 20) - HEADER_LEN;

/// Length of one encoded [`Advert`].
pub const ADVERT_LEN: usize = 4 + 4 + 8 + 8 + 4 + 4;

/// Most adverts one `Advert` message carries (its count is a `u16`).
pub const MAX_ADVERTS_PER_MESSAGE: usize = u16::MAX as usize;

const _: () = assert!(2 + MAX_ADVERTS_PER_MESSAGE * ADVERT_LEN <= MAX_PAYLOAD_LEN);

/// Why bytes are not a valid encoding (or a value cannot be encoded).
///
/// Every variant is final for the bytes at hand: decoding them again gives
/// the same error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The private data is empty or only zero padding: the peer sent no
    /// relink data (a non-relink peer, or a reject made by the CM itself).
    #[error("no relink data in the private data")]
    NoData,
    /// The input ends inside a field.
    #[error("truncated {what}: {needed} bytes needed at offset {offset}, {available} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Offset of the field in the input.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// The version byte is not [`VERSION`].
    #[error("unsupported wire version {found} (this side speaks {VERSION})")]
    UnsupportedVersion {
        /// The version byte received.
        found: u8,
    },
    /// A tag or code byte has no meaning.
    #[error("unknown {what} {tag:#04x}")]
    UnknownTag {
        /// What the byte selects.
        what: &'static str,
        /// The byte read, which no value of `what` has.
        tag: u8,
    },
    /// Bytes follow a complete structure (non-zero bytes, for private data).
    #[error("{count} trailing bytes after {what} at offset {offset}")]
    TrailingBytes {
        /// The structure that ended.
        what: &'static str,
        /// Offset of the first trailing byte.
        offset: usize,
        /// Number of trailing bytes.
        count: usize,
    },
    /// A length or count exceeds its maximum.
    #[error("{what} of {len} exceeds the maximum {max}")]
    TooLong {
        /// What is too long.
        what: &'static str,
        /// Its length (or count).
        len: usize,
        /// The largest length (or count) the format allows.
        max: usize,
    },
    /// A sequenced kind (Data, Advert, AdvertDone) with sequence number 0,
    /// or an unsequenced kind (Ack, Keepalive, KeepaliveReply) with another.
    #[error("sequence number {seq} is not valid for a {kind:?} message")]
    BadSeq {
        /// The message kind.
        kind: MsgKind,
        /// The sequence number it carried.
        seq: Seq,
    },
}
