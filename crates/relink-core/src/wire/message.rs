//! In-band messages, one per SEND once a connection is up: the
//! [`MsgHeader`] every message starts with, the typed [`MsgBody`] (data,
//! advertisements, acks, keepalives, close) and their encoders and
//! decoders. The byte layout is in the [module docs](super).

use super::cursor::{put_u32, put_u64, Cursor};
use super::{WireError, ADVERT_LEN, HEADER_LEN, MAX_ADVERTS_PER_MESSAGE, MAX_PAYLOAD_LEN, VERSION};
use crate::ids::{Epoch, RegionId, Seq};

/// The kind of an in-band message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// An application message (sequenced).
    Data,
    /// Buffer advertisements for an epoch (sequenced).
    Advert,
    /// The sender advertised every buffer for an epoch (sequenced).
    AdvertDone,
    /// A bare acknowledgement: only the header's `ack` (not sequenced).
    Ack,
    /// A liveness probe (not sequenced).
    Keepalive,
    /// The answer to a probe, echoing its nonce (not sequenced).
    KeepaliveReply,
    /// The sender closed the session on purpose: the receiver closes its
    /// half instead of waiting for a reconnection (not sequenced).
    Close,
    /// The sender is about to take the connection down on purpose (a
    /// drain or a suspend): the receiver stops posting and answers
    /// [`MsgKind::Quiesced`] once nothing it posted is in flight (not
    /// sequenced).
    Quiesce,
    /// The answer to [`MsgKind::Quiesce`]: the sender posts nothing more
    /// on this connection (not sequenced).
    Quiesced,
    /// The target asks the initiator to move the session off the target's
    /// device of the current path (a drain at the target; not sequenced).
    MoveRequest,
    /// The sender promoted the standby connection this message arrives
    /// on to the session's current one, and says what it delivered (not
    /// sequenced).
    Promote,
    /// A sequence number with nothing to deliver (sequenced): it stands
    /// for a message the sender completed `Indeterminate` while the peer
    /// may not have had it. The receiver takes its number (no gap) and
    /// delivers nothing; had it delivered the message already, this is a
    /// duplicate like any other.
    Skip,
    /// The sender's RDMA WRITE with immediate data landed in the
    /// receiver's memory (the WRITE went just before it on the same
    /// connection): the immediate data and where it wrote (sequenced,
    /// delivered like a message).
    Written,
    /// An application message the receiver reads itself (a rendezvous):
    /// where in the sender's registered memory its bytes are. The
    /// receiver RDMA-READs them straight into a posted receive and only
    /// then counts the message delivered (sequenced).
    Fetch,
    /// The sender reads the peer's messages from registered memory of at
    /// least `min` bytes itself ([`MsgKind::Fetch`]); sent before its
    /// `AdvertDone`, on every transport, by a side that does (not
    /// sequenced).
    Rendezvous,
}

impl MsgKind {
    /// Every kind, in code order.
    pub const ALL: [MsgKind; 15] = [
        MsgKind::Data,
        MsgKind::Advert,
        MsgKind::AdvertDone,
        MsgKind::Ack,
        MsgKind::Keepalive,
        MsgKind::KeepaliveReply,
        MsgKind::Close,
        MsgKind::Quiesce,
        MsgKind::Quiesced,
        MsgKind::MoveRequest,
        MsgKind::Promote,
        MsgKind::Skip,
        MsgKind::Written,
        MsgKind::Fetch,
        MsgKind::Rendezvous,
    ];

    /// The kind's byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            MsgKind::Data => 1,
            MsgKind::Advert => 2,
            MsgKind::AdvertDone => 3,
            MsgKind::Ack => 4,
            MsgKind::Keepalive => 5,
            MsgKind::KeepaliveReply => 6,
            MsgKind::Close => 7,
            MsgKind::Quiesce => 8,
            MsgKind::Quiesced => 9,
            MsgKind::MoveRequest => 10,
            MsgKind::Promote => 11,
            MsgKind::Skip => 12,
            MsgKind::Written => 13,
            MsgKind::Fetch => 14,
            MsgKind::Rendezvous => 15,
        }
    }

    /// The kind with wire byte `code`, if any.
    pub fn from_code(code: u8) -> Option<MsgKind> {
        MsgKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Whether messages of this kind carry a sequence number (>= 1) and are
    /// delivered exactly once, in order, across transports; the others carry
    /// seq 0. Only application data (and the skip of a message) is
    /// sequenced: advertisements belong to
    /// one epoch (they are re-sent, never replayed, after a loss), and RC
    /// ordering within the epoch is all they need.
    pub fn is_sequenced(self) -> bool {
        matches!(
            self,
            MsgKind::Data | MsgKind::Skip | MsgKind::Written | MsgKind::Fetch
        )
    }
}

/// The fixed header that starts every in-band message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgHeader {
    /// What the payload is.
    pub kind: MsgKind,
    /// The message's sequence number (>= 1 if sequenced, else 0).
    pub seq: Seq,
    /// Piggybacked acknowledgement: the highest sequence number the sender
    /// delivered from the peer.
    pub ack: Seq,
    /// Payload length in bytes (<= [`MAX_PAYLOAD_LEN`]).
    pub len: u32,
}

impl MsgHeader {
    /// Checks the sequence rule of the kind and the payload length bound.
    pub fn validate(&self) -> Result<(), WireError> {
        check_seq(self.kind, self.seq)?;
        check_payload_len(self.len as usize)
    }

    /// The header's encoding, for a driver that sends the header and the
    /// payload from separate buffers (scatter/gather).
    pub fn to_bytes(&self) -> Result<[u8; HEADER_LEN], WireError> {
        self.validate()?;
        Ok(header_bytes(self.kind, self.seq, self.ack, self.len))
    }
}

/// The encoding of a header (not checked).
fn header_bytes(kind: MsgKind, seq: Seq, ack: Seq, len: u32) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0] = VERSION;
    out[1] = kind.code();
    out[2..10].copy_from_slice(&seq.0.to_be_bytes());
    out[10..18].copy_from_slice(&ack.0.to_be_bytes());
    out[18..22].copy_from_slice(&len.to_be_bytes());
    out
}

fn check_seq(kind: MsgKind, seq: Seq) -> Result<(), WireError> {
    if kind.is_sequenced() == (seq.0 != 0) {
        Ok(())
    } else {
        Err(WireError::BadSeq { kind, seq })
    }
}

fn check_payload_len(len: usize) -> Result<(), WireError> {
    if len > MAX_PAYLOAD_LEN {
        return Err(WireError::TooLong {
            what: "message payload",
            len,
            max: MAX_PAYLOAD_LEN,
        });
    }
    Ok(())
}

/// Appends a valid header; the caller has checked `len`.
fn put_header(kind: MsgKind, seq: Seq, ack: Seq, len: usize, out: &mut Vec<u8>) {
    debug_assert!(len <= MAX_PAYLOAD_LEN);
    // MAX_PAYLOAD_LEN < u32::MAX, so this never saturates.
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&header_bytes(kind, seq, ack, len));
}

/// Appends a message of `kind` with `payload` to `out`.
///
/// Fails, leaving `out` untouched, if `seq` breaks the kind's rule
/// ([`MsgKind::is_sequenced`]) or the payload exceeds [`MAX_PAYLOAD_LEN`].
/// The payload is not checked against the kind: see [`encode_body`] for
/// typed control payloads.
pub fn encode_message(
    kind: MsgKind,
    seq: Seq,
    ack: Seq,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    check_seq(kind, seq)?;
    check_payload_len(payload.len())?;
    out.reserve(HEADER_LEN + payload.len());
    put_header(kind, seq, ack, payload.len(), out);
    out.extend_from_slice(payload);
    Ok(())
}

/// Decodes a message's header and returns it with its payload (exactly
/// `len` bytes). Checks version, kind, sequence rule and lengths, not the
/// payload's contents: parse those with [`MsgBody::parse`] (or use
/// [`decode_typed`]).
pub fn decode_message(msg: &[u8]) -> Result<(MsgHeader, &[u8]), WireError> {
    let mut c = Cursor::new(msg);
    c.version()?;
    let code = c.u8("message kind")?;
    let kind = MsgKind::from_code(code).ok_or(WireError::UnknownTag {
        what: "message kind",
        tag: code,
    })?;
    let seq = c.seq("seq")?;
    check_seq(kind, seq)?;
    let ack = c.seq("ack")?;
    let len = c.u32("payload length")?;
    check_payload_len(len as usize)?;
    let payload = c.take(len as usize, "payload")?;
    c.finish("message")?;
    Ok((
        MsgHeader {
            kind,
            seq,
            ack,
            len,
        },
        payload,
    ))
}

/// One buffer advertisement: the peer may access `len` bytes at `addr` with
/// `rkey` during `epoch`; operations name it by `region`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Advert {
    /// The epoch the key belongs to.
    pub epoch: Epoch,
    /// The stable region id (same on every device).
    pub region: RegionId,
    /// Remote address of the region's first byte in this epoch.
    pub addr: u64,
    /// Length of the region in bytes.
    pub len: u64,
    /// Remote key in this epoch.
    pub rkey: u32,
    /// Access flags granted to the peer (the fabric's bits).
    pub access: u32,
}

impl Advert {
    fn put(&self, out: &mut Vec<u8>) {
        put_u32(out, self.epoch.0);
        put_u32(out, self.region.0);
        put_u64(out, self.addr);
        put_u64(out, self.len);
        put_u32(out, self.rkey);
        put_u32(out, self.access);
    }

    fn read(c: &mut Cursor<'_>) -> Result<Advert, WireError> {
        Ok(Advert {
            epoch: c.epoch()?,
            region: RegionId(c.u32("region")?),
            addr: c.u64("addr")?,
            len: c.u64("len")?,
            rkey: c.u32("rkey")?,
            access: c.u32("access")?,
        })
    }
}

/// The typed payload of an in-band message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MsgBody<'a> {
    /// An application message.
    Data(&'a [u8]),
    /// Buffer advertisements (at most [`MAX_ADVERTS_PER_MESSAGE`]).
    Adverts(Vec<Advert>),
    /// The sender advertised everything for `epoch`.
    AdvertDone {
        /// The epoch whose advertisement is complete.
        epoch: Epoch,
        /// The longest frame, in bytes, the sender's receive slots hold:
        /// the peer packs messages into one SEND up to it.
        frame_max: u32,
    },
    /// A bare acknowledgement.
    Ack,
    /// A liveness probe.
    Keepalive {
        /// Echoed by the reply.
        nonce: u64,
    },
    /// The answer to a [`MsgBody::Keepalive`].
    KeepaliveReply {
        /// The probe's nonce.
        nonce: u64,
    },
    /// The peer closed the session on purpose.
    Close,
    /// The peer takes the connection down on purpose once both ends are
    /// quiet.
    Quiesce {
        /// Why.
        purpose: QuiescePurpose,
    },
    /// The answer to [`MsgBody::Quiesce`].
    Quiesced,
    /// The target asks the initiator to move off the target's device.
    MoveRequest,
    /// The sender made the standby connection of `epoch` (the one this
    /// message arrives on) the session's current one; `last_delivered` is
    /// the highest sequence number it delivered from the receiver, what a
    /// Resume or Resumed carries: the receiver replays its journal from
    /// there.
    Promote {
        /// The promoted connection's epoch.
        epoch: Epoch,
        /// The sender's last delivered sequence number.
        last_delivered: Seq,
    },
    /// A sequence number with nothing to deliver ([`MsgKind::Skip`]).
    Skip,
    /// A WRITE with immediate data landed ([`MsgKind::Written`]).
    Written(Written),
    /// A message for the receiver to read ([`MsgKind::Fetch`]).
    Fetch(FetchSource),
    /// The sender reads messages of at least `min` bytes itself
    /// ([`MsgKind::Rendezvous`]).
    Rendezvous {
        /// The shortest message it reads (>= 1).
        min: u32,
    },
}

/// Where a [`MsgKind::Fetch`]'s message is: `len` bytes at `offset` of
/// the sender's registered memory `region` (a registration or region the
/// sender advertised with remote read access, named by its stable id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FetchSource {
    /// The sender's region or registration.
    pub region: RegionId,
    /// Where in it.
    pub offset: u64,
    /// The message's length.
    pub len: u32,
}

/// Bytes of a [`MsgKind::Fetch`]'s payload.
pub const FETCH_LEN: usize = 16;

/// What a [`MsgKind::Written`] says: the sender's RDMA WRITE with
/// immediate data, which went just before it, landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Written {
    /// The sender's immediate data.
    pub imm: u32,
    /// The receiver's region the WRITE landed in.
    pub region: RegionId,
    /// Where in it.
    pub offset: u64,
    /// How many bytes.
    pub len: u32,
}

/// Bytes of a [`MsgKind::Written`]'s payload.
pub const WRITTEN_LEN: usize = 20;

/// Why a session is taken down on purpose ([`MsgBody::Quiesce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuiescePurpose {
    /// A drain: the initiator reconnects at once on another path.
    Move,
    /// A suspend: the session waits, without a give-up deadline, until the
    /// initiator resumes it.
    Suspend,
}

impl QuiescePurpose {
    /// The purpose's byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            QuiescePurpose::Move => 1,
            QuiescePurpose::Suspend => 2,
        }
    }

    /// The purpose with wire byte `code`, if any.
    pub fn from_code(code: u8) -> Option<QuiescePurpose> {
        match code {
            1 => Some(QuiescePurpose::Move),
            2 => Some(QuiescePurpose::Suspend),
            _ => None,
        }
    }
}

impl<'a> MsgBody<'a> {
    /// The kind of message that carries this body.
    pub fn kind(&self) -> MsgKind {
        match self {
            MsgBody::Data(_) => MsgKind::Data,
            MsgBody::Adverts(_) => MsgKind::Advert,
            MsgBody::AdvertDone { .. } => MsgKind::AdvertDone,
            MsgBody::Ack => MsgKind::Ack,
            MsgBody::Keepalive { .. } => MsgKind::Keepalive,
            MsgBody::KeepaliveReply { .. } => MsgKind::KeepaliveReply,
            MsgBody::Close => MsgKind::Close,
            MsgBody::Quiesce { .. } => MsgKind::Quiesce,
            MsgBody::Quiesced => MsgKind::Quiesced,
            MsgBody::MoveRequest => MsgKind::MoveRequest,
            MsgBody::Promote { .. } => MsgKind::Promote,
            MsgBody::Skip => MsgKind::Skip,
            MsgBody::Written(_) => MsgKind::Written,
            MsgBody::Fetch(_) => MsgKind::Fetch,
            MsgBody::Rendezvous { .. } => MsgKind::Rendezvous,
        }
    }

    /// Parses the payload of a message of `kind` (exact length, no
    /// trailing bytes).
    pub fn parse(kind: MsgKind, payload: &'a [u8]) -> Result<MsgBody<'a>, WireError> {
        let mut c = Cursor::new(payload);
        let body = match kind {
            // The application's bytes, uninterpreted.
            MsgKind::Data => return Ok(MsgBody::Data(payload)),
            MsgKind::Advert => {
                let count = usize::from(c.u16("advert count")?);
                // Check the whole length first: no allocation for a lie.
                if count * ADVERT_LEN > c.remaining() {
                    return Err(WireError::Truncated {
                        what: "adverts",
                        offset: c.pos,
                        needed: count * ADVERT_LEN,
                        available: c.remaining(),
                    });
                }
                let mut adverts = Vec::with_capacity(count);
                for _ in 0..count {
                    adverts.push(Advert::read(&mut c)?);
                }
                MsgBody::Adverts(adverts)
            }
            MsgKind::AdvertDone => MsgBody::AdvertDone {
                epoch: c.epoch()?,
                frame_max: c.u32("frame_max")?,
            },
            MsgKind::Ack => MsgBody::Ack,
            MsgKind::Keepalive => MsgBody::Keepalive {
                nonce: c.u64("nonce")?,
            },
            MsgKind::KeepaliveReply => MsgBody::KeepaliveReply {
                nonce: c.u64("nonce")?,
            },
            MsgKind::Close => MsgBody::Close,
            MsgKind::Quiesce => {
                let code = c.u8("quiesce purpose")?;
                let purpose = QuiescePurpose::from_code(code).ok_or(WireError::UnknownTag {
                    what: "quiesce purpose",
                    tag: code,
                })?;
                MsgBody::Quiesce { purpose }
            }
            MsgKind::Quiesced => MsgBody::Quiesced,
            MsgKind::MoveRequest => MsgBody::MoveRequest,
            MsgKind::Promote => MsgBody::Promote {
                epoch: c.epoch()?,
                last_delivered: c.seq("last_delivered")?,
            },
            MsgKind::Skip => MsgBody::Skip,
            MsgKind::Written => MsgBody::Written(Written {
                imm: c.u32("imm")?,
                region: RegionId(c.u32("region")?),
                offset: c.u64("offset")?,
                len: c.u32("len")?,
            }),
            MsgKind::Fetch => MsgBody::Fetch(FetchSource {
                region: RegionId(c.u32("region")?),
                offset: c.u64("offset")?,
                len: c.u32("len")?,
            }),
            MsgKind::Rendezvous => MsgBody::Rendezvous {
                min: c.u32("rendezvous min")?,
            },
        };
        c.finish("message payload")?;
        Ok(body)
    }

    /// Length of the encoded payload.
    fn payload_len(&self) -> usize {
        match self {
            MsgBody::Data(d) => d.len(),
            MsgBody::Adverts(a) => 2 + a.len() * ADVERT_LEN,
            MsgBody::AdvertDone { .. } => 8,
            MsgBody::Ack
            | MsgBody::Close
            | MsgBody::Quiesced
            | MsgBody::MoveRequest
            | MsgBody::Skip => 0,
            MsgBody::Written(_) => WRITTEN_LEN,
            MsgBody::Fetch(_) => FETCH_LEN,
            MsgBody::Rendezvous { .. } => 4,
            MsgBody::Quiesce { .. } => 1,
            MsgBody::Promote { .. } => 12,
            MsgBody::Keepalive { .. } | MsgBody::KeepaliveReply { .. } => 8,
        }
    }
}

/// The messages of a frame, the bytes one SEND carries: one or more
/// messages back to back, each as long as its header's `len` says. Each
/// item is one message's bytes, to decode with [`decode_typed`]; a frame
/// that ends inside a message, or names a payload over
/// [`MAX_PAYLOAD_LEN`], yields that error last. An empty frame yields
/// nothing.
pub fn frame_messages(frame: &[u8]) -> FrameMessages<'_> {
    FrameMessages {
        rest: frame,
        offset: 0,
    }
}

/// The iterator of [`frame_messages`].
#[derive(Debug, Clone)]
pub struct FrameMessages<'a> {
    rest: &'a [u8],
    offset: usize,
}

impl<'a> Iterator for FrameMessages<'a> {
    type Item = Result<&'a [u8], WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.rest);
        let truncated = |what, needed| WireError::Truncated {
            what,
            offset: self.offset,
            needed,
            available: rest.len(),
        };
        let Some(len) = rest.get(18..HEADER_LEN) else {
            return Some(Err(truncated("message header", HEADER_LEN)));
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if let Err(e) = check_payload_len(len) {
            return Some(Err(e));
        }
        if rest.len() < HEADER_LEN + len {
            return Some(Err(truncated("message", HEADER_LEN + len)));
        }
        let (msg, tail) = rest.split_at(HEADER_LEN + len);
        self.rest = tail;
        self.offset += msg.len();
        Some(Ok(msg))
    }
}

/// Decodes a whole message: header and typed body.
pub fn decode_typed(msg: &[u8]) -> Result<(MsgHeader, MsgBody<'_>), WireError> {
    let (header, payload) = decode_message(msg)?;
    Ok((header, MsgBody::parse(header.kind, payload)?))
}

/// Appends a message carrying `body` (its kind is `body.kind()`).
///
/// Fails, leaving `out` untouched, on a sequence number that breaks the
/// kind's rule, a payload over [`MAX_PAYLOAD_LEN`] or more than
/// [`MAX_ADVERTS_PER_MESSAGE`] adverts.
pub fn encode_body(
    seq: Seq,
    ack: Seq,
    body: &MsgBody<'_>,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    match body {
        MsgBody::Data(d) => encode_message(MsgKind::Data, seq, ack, d, out),
        MsgBody::Adverts(a) => encode_adverts(seq, ack, a, out),
        _ => {
            let kind = body.kind();
            check_seq(kind, seq)?;
            put_header(kind, seq, ack, body.payload_len(), out);
            match body {
                MsgBody::AdvertDone { epoch, frame_max } => {
                    put_u32(out, epoch.0);
                    put_u32(out, *frame_max);
                }
                MsgBody::Rendezvous { min } => put_u32(out, *min),
                MsgBody::Keepalive { nonce } | MsgBody::KeepaliveReply { nonce } => {
                    put_u64(out, *nonce)
                }
                MsgBody::Quiesce { purpose } => out.push(purpose.code()),
                MsgBody::Promote {
                    epoch,
                    last_delivered,
                } => {
                    put_u32(out, epoch.0);
                    put_u64(out, last_delivered.0);
                }
                MsgBody::Written(w) => {
                    put_u32(out, w.imm);
                    put_u32(out, w.region.0);
                    put_u64(out, w.offset);
                    put_u32(out, w.len);
                }
                MsgBody::Fetch(f) => out.extend_from_slice(&fetch_payload(f)),
                _ => {}
            }
            Ok(())
        }
    }
}

/// Appends an `Advert` message carrying `adverts` (see [`encode_body`]).
pub fn encode_adverts(
    seq: Seq,
    ack: Seq,
    adverts: &[Advert],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    check_seq(MsgKind::Advert, seq)?;
    if adverts.len() > MAX_ADVERTS_PER_MESSAGE {
        return Err(WireError::TooLong {
            what: "advert count",
            len: adverts.len(),
            max: MAX_ADVERTS_PER_MESSAGE,
        });
    }
    let len = 2 + adverts.len() * ADVERT_LEN;
    out.reserve(HEADER_LEN + len);
    put_header(MsgKind::Advert, seq, ack, len, out);
    // Checked above: the count fits in a u16.
    out.extend_from_slice(
        &u16::try_from(adverts.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    for a in adverts {
        a.put(out);
    }
    Ok(())
}

/// Appends an `AdvertDone { epoch, frame_max }` message (`seq` must be 0).
pub fn encode_advert_done(
    seq: Seq,
    ack: Seq,
    epoch: Epoch,
    frame_max: u32,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    encode_body(seq, ack, &MsgBody::AdvertDone { epoch, frame_max }, out)
}

/// The header of the [`MsgKind::Fetch`] of message `seq`, acknowledging
/// `ack` (its payload, [`fetch_payload`], follows it).
pub fn fetch_header(seq: Seq, ack: Seq) -> [u8; HEADER_LEN] {
    header_bytes(MsgKind::Fetch, seq, ack, FETCH_LEN as u32)
}

/// The payload of a [`MsgKind::Fetch`].
pub fn fetch_payload(src: &FetchSource) -> [u8; FETCH_LEN] {
    let mut out = [0u8; FETCH_LEN];
    out[0..4].copy_from_slice(&src.region.0.to_be_bytes());
    out[4..12].copy_from_slice(&src.offset.to_be_bytes());
    out[12..16].copy_from_slice(&src.len.to_be_bytes());
    out
}

/// Appends an `Ack` message (seq 0, no payload).
pub fn encode_ack(ack: Seq, out: &mut Vec<u8>) {
    put_header(MsgKind::Ack, Seq(0), ack, 0, out);
}

/// Appends a `Close` message (seq 0, no payload).
pub fn encode_close(ack: Seq, out: &mut Vec<u8>) {
    put_header(MsgKind::Close, Seq(0), ack, 0, out);
}

/// Appends a `Keepalive { nonce }` message (seq 0).
pub fn encode_keepalive(ack: Seq, nonce: u64, out: &mut Vec<u8>) {
    put_header(MsgKind::Keepalive, Seq(0), ack, 8, out);
    put_u64(out, nonce);
}

/// Appends a `KeepaliveReply { nonce }` message (seq 0).
pub fn encode_keepalive_reply(ack: Seq, nonce: u64, out: &mut Vec<u8>) {
    put_header(MsgKind::KeepaliveReply, Seq(0), ack, 8, out);
    put_u64(out, nonce);
}
