//! Tests of the wire formats: round trips, truncations, bit flips and
//! arbitrary bytes (property tests), authentication, golden bytes and
//! typed errors.

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
        any::<u32>().prop_map(|e| MsgBody::AdvertDone { epoch: Epoch(e) }),
        Just(MsgBody::Ack),
        any::<u64>().prop_map(|nonce| MsgBody::Keepalive { nonce }),
        any::<u64>().prop_map(|nonce| MsgBody::KeepaliveReply { nonce }),
        Just(MsgBody::Close),
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

#[test]
fn resume_verify_accepts_right_secret_rejects_changes() {
    let s = secret(1);
    let r = Resume::sign(&s, SessionId(0x1234), Epoch(7), Seq(99));
    assert!(r.verify(&s));
    assert!(!r.verify(&secret(2)));
    assert!(!Resume {
        session: SessionId(0x1235),
        ..r
    }
    .verify(&s));
    assert!(!Resume {
        epoch: Epoch(8),
        ..r
    }
    .verify(&s));
    assert!(!Resume {
        epoch: Epoch(6),
        ..r
    }
    .verify(&s));
    assert!(!Resume {
        last_delivered: Seq(100),
        ..r
    }
    .verify(&s));
    let mut bad = r;
    bad.auth[15] ^= 0x80;
    assert!(!bad.verify(&s));
    // The authenticator is the documented one.
    assert_eq!(
        r.auth,
        auth::authenticator(
            &s,
            &[
                b"resume",
                &0x1234u64.to_be_bytes(),
                &7u32.to_be_bytes(),
                &99u64.to_be_bytes()
            ]
        )
    );
}

#[test]
fn resumed_verify_accepts_right_secret_rejects_changes() {
    let s = secret(3);
    let r = Resumed::sign(&s, SessionId(5), Epoch(2), Incarnation(77), Seq(40));
    assert!(r.verify(&s));
    assert!(!r.verify(&secret(4)));
    assert!(!Resumed {
        session: SessionId(6),
        ..r
    }
    .verify(&s));
    assert!(!Resumed {
        epoch: Epoch(3),
        ..r
    }
    .verify(&s));
    assert!(!Resumed {
        incarnation: Incarnation(78),
        ..r
    }
    .verify(&s));
    assert!(!Resumed {
        last_delivered: Seq(41),
        ..r
    }
    .verify(&s));
    assert_eq!(
        r.auth,
        auth::authenticator(
            &s,
            &[
                b"resumed",
                &5u64.to_be_bytes(),
                &2u32.to_be_bytes(),
                &40u64.to_be_bytes(),
                &77u64.to_be_bytes(),
            ]
        )
    );
}

#[test]
fn resume_and_resumed_tags_differ() {
    // Same secret and ids: the labels keep one from passing as the other.
    let s = secret(9);
    let a = Resume::sign(&s, SessionId(1), Epoch(1), Seq(1));
    let b = Resumed::sign(&s, SessionId(1), Epoch(1), Incarnation(0), Seq(1));
    assert_ne!(a.auth, b.auth);
}

// -- sizes and golden bytes ---------------------------------------------

#[test]
fn max_encodings_fit_the_cm_limits() {
    let s = secret(0xff);
    let hello = ConnectData::Hello(Hello {
        session: SessionId(u64::MAX),
        epoch: Epoch(u32::MAX),
        incarnation: Incarnation(u64::MAX),
        connect_data: ConnectBytes::new(&[0xff; MAX_CONNECT_DATA]).unwrap(),
    });
    let resume = ConnectData::Resume(Resume::sign(
        &s,
        SessionId(u64::MAX),
        Epoch(u32::MAX),
        Seq(u64::MAX),
    ));
    // The largest Hello fills the CM's connect private data exactly.
    assert_eq!(hello.to_vec().len(), HELLO_LEN + MAX_CONNECT_DATA);
    assert_eq!(hello.to_vec().len(), MAX_CONNECT_PRIVATE_DATA);
    assert_eq!(resume.to_vec().len(), 38);
    assert!(resume.to_vec().len() <= MAX_CONNECT_PRIVATE_DATA);

    let welcome = AcceptData::Welcome(Welcome {
        session: SessionId(u64::MAX),
        incarnation: Incarnation(u64::MAX),
        secret: s.clone(),
    });
    let resumed = AcceptData::Resumed(Resumed::sign(
        &s,
        SessionId(u64::MAX),
        Epoch(u32::MAX),
        Incarnation(u64::MAX),
        Seq(u64::MAX),
    ));
    assert_eq!(welcome.to_vec().len(), 50);
    assert_eq!(resumed.to_vec().len(), 46);
    assert!(welcome.to_vec().len() <= MAX_ACCEPT_PRIVATE_DATA);

    let refused = RejectData::Refused(Refused {
        reason: RefuseReason::ShuttingDown,
    });
    assert_eq!(refused.to_vec().len(), 3);
    assert!(refused.to_vec().len() <= MAX_REJECT_PRIVATE_DATA);
}

#[test]
fn hello_golden_bytes() {
    let hello = ConnectData::Hello(Hello {
        session: SessionId(0x0102_0304_0506_0708),
        epoch: Epoch(0x2122_2324),
        incarnation: Incarnation(0x1112_1314_1516_1718),
        connect_data: ConnectBytes::new(b"ab").unwrap(),
    });
    let expected = [
        0x01, // version
        0x01, // Hello
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // session
        0x21, 0x22, 0x23, 0x24, // epoch
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // incarnation
        0x02, // connect data length
        b'a', b'b', // connect data
    ];
    assert_eq!(hello.to_vec(), expected);
    assert_eq!(ConnectData::decode(&expected), Ok(hello));
    // No connect data: the length byte alone.
    let ConnectData::Hello(mut bare) = hello else {
        unreachable!()
    };
    bare.connect_data = ConnectBytes::EMPTY;
    let bare = ConnectData::Hello(bare);
    assert_eq!(bare.to_vec(), [&expected[..22], &[0x00]].concat());
    assert_eq!(bare.to_vec().len(), HELLO_LEN);
}

#[test]
fn connect_data_is_length_checked() {
    // Over the limit: refused when made, and when a length byte claims it.
    assert_eq!(
        ConnectBytes::new(&[7; MAX_CONNECT_DATA + 1]),
        Err(WireError::TooLong {
            what: "connect data",
            len: MAX_CONNECT_DATA + 1,
            max: MAX_CONNECT_DATA
        })
    );
    assert_eq!(ConnectBytes::new(&[7; MAX_CONNECT_DATA]).unwrap().len(), 33);
    let hello = ConnectData::Hello(Hello {
        session: SessionId(1),
        epoch: Epoch(1),
        incarnation: Incarnation(2),
        connect_data: ConnectBytes::new(b"xyz").unwrap(),
    })
    .to_vec();
    let mut over = hello[..HELLO_LEN].to_vec();
    over[HELLO_LEN - 1] = MAX_CONNECT_DATA as u8 + 1;
    over.resize(MAX_CONNECT_PRIVATE_DATA, 1);
    assert_eq!(
        ConnectData::decode(&over),
        Err(WireError::TooLong {
            what: "connect data",
            len: MAX_CONNECT_DATA + 1,
            max: MAX_CONNECT_DATA
        })
    );
    // A length past the end of the data is a truncation, not a read past it.
    let mut short = hello.clone();
    short[HELLO_LEN - 1] = 5;
    assert_eq!(
        ConnectData::decode(&short),
        Err(WireError::Truncated {
            what: "connect data",
            offset: HELLO_LEN,
            needed: 5,
            available: 3
        })
    );
    // The length byte itself is required.
    assert_eq!(
        ConnectData::decode(&hello[..HELLO_LEN - 1]),
        Err(WireError::Truncated {
            what: "connect data length",
            offset: HELLO_LEN - 1,
            needed: 1,
            available: 0
        })
    );
    // Zero padding after the connect data is the transport's, not data.
    let mut padded = hello.clone();
    padded.resize(MAX_CONNECT_PRIVATE_DATA, 0);
    let Ok(ConnectData::Hello(h)) = ConnectData::decode(&padded) else {
        panic!("padded hello")
    };
    assert_eq!(&*h.connect_data, b"xyz");
}

#[test]
fn msg_header_golden_bytes() {
    let header = MsgHeader {
        kind: MsgKind::Data,
        seq: Seq(0x0102_0304_0506_0708),
        ack: Seq(0x1112_1314_1516_1718),
        len: 3,
    };
    let expected: [u8; HEADER_LEN] = [
        0x01, // version
        0x01, // Data
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // seq
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // ack
        0x00, 0x00, 0x00, 0x03, // len
    ];
    assert_eq!(header.to_bytes(), Ok(expected));
    let mut msg = Vec::new();
    encode_message(header.kind, header.seq, header.ack, b"abc", &mut msg).unwrap();
    assert_eq!(&msg[..HEADER_LEN], &expected);
    assert_eq!(&msg[HEADER_LEN..], b"abc");
    assert_eq!(decode_message(&msg), Ok((header, &b"abc"[..])));
}

#[test]
fn control_message_golden_bytes() {
    let mut out = Vec::new();
    encode_ack(Seq(5), &mut out);
    assert_eq!(
        out,
        [1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]
    );
    out.clear();
    encode_keepalive(Seq(0), 0xaabb, &mut out);
    assert_eq!(&out[..2], &[1, 5]);
    assert_eq!(&out[18..], &[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0xaa, 0xbb]);
    let advert = Advert {
        epoch: Epoch(1),
        region: RegionId(2),
        addr: 3,
        len: 4,
        rkey: 5,
        access: 6,
    };
    out.clear();
    encode_adverts(Seq(0), Seq(0), &[advert], &mut out).unwrap();
    assert_eq!(&out[18..22], &[0, 0, 0, 34]);
    assert_eq!(
        &out[HEADER_LEN..],
        &[
            0, 1, // count
            0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 5, 0,
            0, 0, 6,
        ]
    );
}

// -- typed errors -------------------------------------------------------

#[test]
fn private_data_errors_are_typed() {
    assert_eq!(ConnectData::decode(&[]), Err(WireError::NoData));
    assert_eq!(AcceptData::decode(&[0; 196]), Err(WireError::NoData));
    assert_eq!(RejectData::decode(&[0; 148]), Err(WireError::NoData));
    assert_eq!(
        ConnectData::decode(&[2, 1]),
        Err(WireError::UnsupportedVersion { found: 2 })
    );
    assert_eq!(
        ConnectData::decode(&[1, 0x11]),
        Err(WireError::UnknownTag {
            what: "connect tag",
            tag: 0x11
        })
    );
    assert!(matches!(
        ConnectData::decode(&[1; 57]),
        Err(WireError::TooLong {
            len: 57,
            max: 56,
            ..
        })
    ));
    assert_eq!(
        RejectData::decode(&[1, 0x21, 7]),
        Err(WireError::UnknownTag {
            what: "refuse reason",
            tag: 7
        })
    );
    assert_eq!(
        RejectData::decode(&[1, 0x21, 0]),
        Err(WireError::UnknownTag {
            what: "refuse reason",
            tag: 0
        })
    );
    assert_eq!(
        RejectData::decode(&[1, 0x21]),
        Err(WireError::Truncated {
            what: "refuse reason",
            offset: 2,
            needed: 1,
            available: 0
        })
    );
    assert_eq!(
        RejectData::decode(&[1, 0x21, 1, 0, 0, 9, 0]),
        Err(WireError::TrailingBytes {
            what: "reject private data",
            offset: 5,
            count: 2
        })
    );
    // Private data handed to the wrong decoder fails on its tag.
    let hello = ConnectData::Hello(Hello {
        session: SessionId(1),
        epoch: Epoch(1),
        incarnation: Incarnation(2),
        connect_data: ConnectBytes::EMPTY,
    })
    .to_vec();
    assert!(matches!(
        AcceptData::decode(&hello),
        Err(WireError::UnknownTag { .. })
    ));
    assert!(matches!(
        RejectData::decode(&hello),
        Err(WireError::UnknownTag { .. })
    ));
}

#[test]
fn refuse_reason_codes_are_pinned() {
    let codes: Vec<u8> = RefuseReason::ALL.iter().map(|r| r.code()).collect();
    assert_eq!(codes, [1, 2, 3, 4, 5, 6]);
    for r in RefuseReason::ALL {
        assert_eq!(RefuseReason::from_code(r.code()), Some(r));
    }
    let kinds: Vec<u8> = MsgKind::ALL.iter().map(|k| k.code()).collect();
    assert_eq!(kinds, [1, 2, 3, 4, 5, 6, 7]);
    for k in MsgKind::ALL {
        assert_eq!(MsgKind::from_code(k.code()), Some(k));
    }
}

#[test]
fn sequence_rules_are_enforced() {
    let mut out = Vec::new();
    assert_eq!(
        encode_message(MsgKind::Data, Seq(0), Seq(0), b"x", &mut out),
        Err(WireError::BadSeq {
            kind: MsgKind::Data,
            seq: Seq(0)
        })
    );
    assert_eq!(
        encode_message(MsgKind::Ack, Seq(1), Seq(0), b"", &mut out),
        Err(WireError::BadSeq {
            kind: MsgKind::Ack,
            seq: Seq(1)
        })
    );
    // Advertisements belong to one epoch: unsequenced.
    assert!(encode_advert_done(Seq(1), Seq(0), Epoch(1), &mut out).is_err());
    assert!(encode_adverts(Seq(1), Seq(0), &[], &mut out).is_err());
    assert!(
        out.is_empty(),
        "a failed encode leaves the output untouched"
    );

    // Decoding: a Data header with seq 0, a Keepalive with seq 3.
    let mut data = Vec::new();
    encode_message(MsgKind::Data, Seq(1), Seq(0), b"", &mut data).unwrap();
    data[9] = 0;
    assert!(matches!(
        decode_message(&data),
        Err(WireError::BadSeq { .. })
    ));
    let mut ka = Vec::new();
    encode_keepalive(Seq(0), 1, &mut ka);
    ka[9] = 3;
    assert_eq!(
        decode_message(&ka),
        Err(WireError::BadSeq {
            kind: MsgKind::Keepalive,
            seq: Seq(3)
        })
    );
}

#[test]
fn message_errors_are_typed() {
    assert!(matches!(
        decode_message(&[]),
        Err(WireError::Truncated { .. })
    ));
    assert_eq!(
        decode_message(&[9]),
        Err(WireError::UnsupportedVersion { found: 9 })
    );
    assert_eq!(
        decode_message(&[1, 8]),
        Err(WireError::UnknownTag {
            what: "message kind",
            tag: 8
        })
    );
    // A length over the maximum is refused before anything is read.
    let mut big = Vec::new();
    encode_ack(Seq(0), &mut big);
    big[1] = MsgKind::Data.code();
    big[9] = 1;
    big[18..22].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_message(&big),
        Err(WireError::TooLong {
            what: "message payload",
            ..
        })
    ));
    // Payloads that do not fit their kind.
    assert!(matches!(
        MsgBody::parse(MsgKind::Ack, &[0]),
        Err(WireError::TrailingBytes { .. })
    ));
    assert!(matches!(
        MsgBody::parse(MsgKind::Keepalive, &[0; 7]),
        Err(WireError::Truncated { .. })
    ));
    assert!(matches!(
        MsgBody::parse(MsgKind::AdvertDone, &[0; 5]),
        Err(WireError::TrailingBytes { .. })
    ));
    // An advert count larger than the payload allocates nothing and fails.
    assert!(matches!(
        MsgBody::parse(MsgKind::Advert, &[0xff, 0xff, 0, 0]),
        Err(WireError::Truncated {
            what: "adverts",
            ..
        })
    ));
    assert!(matches!(
        MsgBody::parse(MsgKind::Advert, &[0, 0, 1]),
        Err(WireError::TrailingBytes { .. })
    ));
    assert!(matches!(
        encode_message(
            MsgKind::Data,
            Seq(1),
            Seq(0),
            &vec![0; MAX_PAYLOAD_LEN + 1],
            &mut Vec::new()
        ),
        Err(WireError::TooLong { .. })
    ));
    assert!(matches!(
        MsgHeader {
            kind: MsgKind::Data,
            seq: Seq(1),
            ack: Seq(0),
            len: u32::MAX
        }
        .to_bytes(),
        Err(WireError::TooLong { .. })
    ));
}

#[test]
fn welcome_debug_hides_the_secret() {
    let w = Welcome {
        session: SessionId(1),
        incarnation: Incarnation(2),
        secret: SessionSecret::from_bytes([0x5a; 32]),
    };
    let shown = format!("{w:?}");
    assert!(!shown.contains("90"), "{shown}");
    assert!(shown.contains("redacted"));
}
