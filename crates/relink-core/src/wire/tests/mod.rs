//! Tests of the wire formats: property tests of every codec (round
//! trips, truncations, bit flips, arbitrary bytes) and the strategies they
//! share; the handshake's and the messages' fixed cases are in
//! `handshake.rs` and `message.rs`.

use proptest::prelude::*;

use relink_fabric::{MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

use super::*;
use crate::auth::{self, SessionSecret, AUTH_LEN, SECRET_LEN};
use crate::ids::{Epoch, Incarnation, RegionId, Seq, SessionId};

fn secret(b: u8) -> SessionSecret {
    SessionSecret::from_bytes([b; SECRET_LEN])
}

// -- strategies ---------------------------------------------------------

fn arb_secret() -> impl Strategy<Value = SessionSecret> {
    any::<[u8; SECRET_LEN]>().prop_map(SessionSecret::from_bytes)
}

/// Connect data of every length a Hello takes, empty and full included.
fn arb_connect_bytes() -> impl Strategy<Value = ConnectBytes> {
    prop_oneof![
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), MAX_CONNECT_DATA..=MAX_CONNECT_DATA),
        proptest::collection::vec(any::<u8>(), 0..=MAX_CONNECT_DATA),
    ]
    .prop_map(|d| ConnectBytes::new(&d).expect("within the limit"))
}

fn arb_connect() -> impl Strategy<Value = ConnectData> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            arb_connect_bytes()
        )
            .prop_map(|(s, e, i, connect_data)| ConnectData::Hello(Hello {
                session: SessionId(s),
                epoch: Epoch(e),
                incarnation: Incarnation(i),
                connect_data,
            })),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<[u8; AUTH_LEN]>()
        )
            .prop_map(|(s, e, l, auth)| ConnectData::Resume(Resume {
                session: SessionId(s),
                epoch: Epoch(e),
                last_delivered: Seq(l),
                auth,
            })),
    ]
}

fn arb_accept() -> impl Strategy<Value = AcceptData> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), arb_secret()).prop_map(|(s, i, secret)| {
            AcceptData::Welcome(Welcome {
                session: SessionId(s),
                incarnation: Incarnation(i),
                secret,
            })
        }),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<[u8; AUTH_LEN]>()
        )
            .prop_map(|(s, e, i, l, auth)| AcceptData::Resumed(Resumed {
                session: SessionId(s),
                epoch: Epoch(e),
                incarnation: Incarnation(i),
                last_delivered: Seq(l),
                auth,
            })),
    ]
}

fn arb_reject() -> impl Strategy<Value = RejectData> {
    proptest::sample::select(RefuseReason::ALL.to_vec())
        .prop_map(|reason| RejectData::Refused(Refused { reason }))
}

fn arb_advert() -> impl Strategy<Value = Advert> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(e, r, addr, len, rkey, access)| Advert {
            epoch: Epoch(e),
            region: RegionId(r),
            addr,
            len,
            rkey,
            access,
        })
}

/// (seq, ack, body) with a sequence number valid for the body's kind.
fn arb_message() -> impl Strategy<Value = (Seq, Seq, MsgBody<'static>)> {
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|d| MsgBody::Data(Vec::leak(d))),
        proptest::collection::vec(arb_advert(), 0..5).prop_map(MsgBody::Adverts),
        (any::<u32>(), any::<u32>()).prop_map(|(e, frame_max)| MsgBody::AdvertDone {
            epoch: Epoch(e),
            frame_max
        }),
        any::<u32>().prop_map(|min| MsgBody::Rendezvous { min }),
        Just(MsgBody::Ack),
        any::<u64>().prop_map(|nonce| MsgBody::Keepalive { nonce }),
        any::<u64>().prop_map(|nonce| MsgBody::KeepaliveReply { nonce }),
        Just(MsgBody::Close),
        prop_oneof![Just(QuiescePurpose::Move), Just(QuiescePurpose::Suspend)]
            .prop_map(|purpose| MsgBody::Quiesce { purpose }),
        Just(MsgBody::Quiesced),
        Just(MsgBody::MoveRequest),
        (any::<u32>(), any::<u64>()).prop_map(|(e, l)| MsgBody::Promote {
            epoch: Epoch(e),
            last_delivered: Seq(l),
        }),
        Just(MsgBody::Skip),
        (any::<u32>(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(
            |(imm, region, offset, len)| MsgBody::Written(crate::wire::Written {
                imm,
                region: RegionId(region),
                offset,
                len,
            })
        ),
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(region, offset, len)| {
            MsgBody::Fetch(crate::wire::FetchSource {
                region: RegionId(region),
                offset,
                len,
            })
        }),
    ];
    (1..=u64::MAX, any::<u64>(), body).prop_map(|(seq, ack, body)| {
        let seq = if body.kind().is_sequenced() { seq } else { 0 };
        (Seq(seq), Seq(ack), body)
    })
}

fn message_bytes(seq: Seq, ack: Seq, body: &MsgBody<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_body(seq, ack, body, &mut out).unwrap();
    out
}

/// Runs every decoder on `bytes`; only checks that none panics and that
/// whatever decodes is canonical.
fn decode_all(bytes: &[u8]) {
    if let Ok(c) = ConnectData::decode(bytes) {
        let enc = c.to_vec();
        assert_eq!(&bytes[..enc.len()], &enc[..]);
    }
    if let Ok(a) = AcceptData::decode(bytes) {
        let enc = a.to_vec();
        assert_eq!(&bytes[..enc.len()], &enc[..]);
    }
    if let Ok(r) = RejectData::decode(bytes) {
        let enc = r.to_vec();
        assert_eq!(&bytes[..enc.len()], &enc[..]);
    }
    if let Ok((h, body)) = decode_typed(bytes) {
        assert_eq!(message_bytes(h.seq, h.ack, &body), bytes);
    }
    let _ = decode_message(bytes);
}

// -- round trips --------------------------------------------------------

proptest! {
    #[test]
    fn connect_round_trips(c in arb_connect(), pad in 0usize..=MAX_CONNECT_PRIVATE_DATA) {
        let mut enc = c.to_vec();
        prop_assert!(enc.len() <= MAX_CONNECT_PRIVATE_DATA);
        prop_assert_eq!(ConnectData::decode(&enc), Ok(c));
        // Transport padding with zeros is accepted.
        enc.resize(enc.len().max(pad), 0);
        prop_assert_eq!(ConnectData::decode(&enc), Ok(c));
    }

    #[test]
    fn accept_round_trips(a in arb_accept(), pad in 0usize..=MAX_ACCEPT_PRIVATE_DATA) {
        let mut enc = a.to_vec();
        prop_assert!(enc.len() <= MAX_ACCEPT_PRIVATE_DATA);
        prop_assert_eq!(AcceptData::decode(&enc), Ok(a.clone()));
        enc.resize(enc.len().max(pad), 0);
        prop_assert_eq!(AcceptData::decode(&enc), Ok(a));
    }

    #[test]
    fn reject_round_trips(r in arb_reject(), pad in 0usize..=MAX_REJECT_PRIVATE_DATA) {
        let mut enc = r.to_vec();
        prop_assert_eq!(RejectData::decode(&enc), Ok(r));
        enc.resize(enc.len().max(pad), 0);
        prop_assert_eq!(RejectData::decode(&enc), Ok(r));
    }

    #[test]
    fn message_round_trips((seq, ack, body) in arb_message()) {
        let enc = message_bytes(seq, ack, &body);
        let (h, payload) = decode_message(&enc).unwrap();
        prop_assert_eq!(h.kind, body.kind());
        prop_assert_eq!(h.seq, seq);
        prop_assert_eq!(h.ack, ack);
        prop_assert_eq!(h.len as usize, enc.len() - HEADER_LEN);
        prop_assert_eq!(payload, &enc[HEADER_LEN..]);
        prop_assert_eq!(&h.to_bytes().unwrap()[..], &enc[..HEADER_LEN]);
        prop_assert_eq!(MsgBody::parse(h.kind, payload), Ok(body.clone()));
        // The raw encoder gives the same bytes.
        let mut raw = Vec::new();
        encode_message(h.kind, seq, ack, payload, &mut raw).unwrap();
        prop_assert_eq!(raw, enc);
    }

    #[test]
    fn a_frame_gives_back_its_messages(
        msgs in proptest::collection::vec(arb_message(), 1..6), cut in any::<prop::sample::Index>()
    ) {
        let encoded: Vec<Vec<u8>> = msgs.iter().map(|(s, a, b)| message_bytes(*s, *a, b)).collect();
        let frame = encoded.concat();
        let split: Vec<&[u8]> = frame_messages(&frame).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(split.len(), msgs.len());
        for (m, (seq, ack, body)) in split.iter().zip(&msgs) {
            let (h, got) = decode_typed(m).unwrap();
            prop_assert_eq!((h.seq, h.ack, &got), (*seq, *ack, body));
        }
        // A frame cut inside a message: the whole messages before the cut,
        // then an error, then nothing.
        let n = cut.index(frame.len());
        let whole = encoded.iter().scan(0, |end, m| { *end += m.len(); Some(*end) })
            .take_while(|end| *end <= n).count();
        let mut it = frame_messages(&frame[..n]);
        for _ in 0..whole {
            prop_assert!(it.next().unwrap().is_ok());
        }
        if encoded.iter().scan(0, |end, m| { *end += m.len(); Some(*end) }).any(|end| end == n) || n == 0 {
            prop_assert!(it.next().is_none());
        } else {
            let truncated = matches!(it.next(), Some(Err(WireError::Truncated { .. })));
            prop_assert!(truncated);
            prop_assert!(it.next().is_none());
        }
    }

    #[test]
    fn every_truncation_is_an_error(
        c in arb_connect(), a in arb_accept(), r in arb_reject(), (seq, ack, body) in arb_message()
    ) {
        let enc = c.to_vec();
        for n in 0..enc.len() {
            prop_assert!(ConnectData::decode(&enc[..n]).is_err(), "connect prefix {}", n);
        }
        let enc = a.to_vec();
        for n in 0..enc.len() {
            prop_assert!(AcceptData::decode(&enc[..n]).is_err(), "accept prefix {}", n);
        }
        let enc = r.to_vec();
        for n in 0..enc.len() {
            prop_assert!(RejectData::decode(&enc[..n]).is_err(), "reject prefix {}", n);
        }
        let enc = message_bytes(seq, ack, &body);
        for n in 0..enc.len() {
            prop_assert!(decode_message(&enc[..n]).is_err(), "message prefix {}", n);
            prop_assert!(decode_typed(&enc[..n]).is_err(), "message prefix {}", n);
        }
    }

    #[test]
    fn flipping_bits_never_panics(
        c in arb_connect(), a in arb_accept(), r in arb_reject(), (seq, ack, body) in arb_message(),
        bit in any::<prop::sample::Index>(),
    ) {
        for enc in [c.to_vec(), a.to_vec(), r.to_vec(), message_bytes(seq, ack, &body)] {
            let mut flipped = enc.clone();
            let i = bit.index(enc.len() * 8);
            flipped[i / 8] ^= 1 << (i % 8);
            decode_all(&flipped);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        decode_all(&bytes);
    }

    #[test]
    fn trailing_bytes_are_errors(
        c in arb_connect(), a in arb_accept(), r in arb_reject(), (seq, ack, body) in arb_message(),
        extra in 1u8..=255,
    ) {
        let mut enc = c.to_vec();
        enc.push(extra);
        // A Hello with the most connect data fills the CM limit: a byte
        // more is over it.
        let is_trailing = match ConnectData::decode(&enc) {
            Err(WireError::TrailingBytes { .. }) => true,
            Err(WireError::TooLong { len, max, .. }) => len == max + 1 && max == MAX_CONNECT_PRIVATE_DATA,
            _ => false,
        };
        prop_assert!(is_trailing);
        let mut enc = a.to_vec();
        enc.push(extra);
        let is_trailing = matches!(AcceptData::decode(&enc), Err(WireError::TrailingBytes { .. }));
        prop_assert!(is_trailing);
        let mut enc = r.to_vec();
        enc.extend([0, extra]);
        let is_trailing = matches!(RejectData::decode(&enc), Err(WireError::TrailingBytes { .. }));
        prop_assert!(is_trailing);
        // Messages have exact lengths: even a zero byte is trailing.
        let mut enc = message_bytes(seq, ack, &body);
        enc.push(0);
        let is_trailing = matches!(decode_message(&enc), Err(WireError::TrailingBytes { .. }));
        prop_assert!(is_trailing);
    }

    #[test]
    fn resume_authenticates_its_fields(
        s in arb_secret(), other in arb_secret(), session in any::<u64>(), epoch in any::<u32>(),
        seq in any::<u64>(),
    ) {
        let r = Resume::sign(&s, SessionId(session), Epoch(epoch), Seq(seq));
        prop_assert!(r.verify(&s));
        let decoded = ConnectData::decode(&ConnectData::Resume(r).to_vec());
        prop_assert_eq!(decoded, Ok(ConnectData::Resume(r)));
        if other != s {
            prop_assert!(!r.verify(&other));
        }
        let other_session = Resume { session: SessionId(session ^ 1), ..r }.verify(&s);
        prop_assert!(!other_session);
        let other_epoch = Resume { epoch: Epoch(epoch ^ 1), ..r }.verify(&s);
        prop_assert!(!other_epoch);
        let other_seq = Resume { last_delivered: Seq(seq ^ 1), ..r }.verify(&s);
        prop_assert!(!other_seq);
    }
}

// -- authentication -----------------------------------------------------

mod handshake;
mod message;
