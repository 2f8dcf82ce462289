//! Messages: golden bytes of the header and control messages, sequence
//! rules, typed errors.

use super::*;

#[test]
fn msg_header_golden_bytes() {
    let header = MsgHeader {
        kind: MsgKind::Data,
        seq: Seq(0x0102_0304_0506_0708),
        ack: Seq(0x1112_1314_1516_1718),
        len: 3,
    };
    let expected: [u8; HEADER_LEN] = [
        0x05, // version
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
        [5, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]
    );
    out.clear();
    encode_keepalive(Seq(0), 0xaabb, &mut out);
    assert_eq!(&out[..2], &[5, 5]);
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
    assert!(encode_advert_done(Seq(1), Seq(0), Epoch(1), 4096, &mut out).is_err());
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
        decode_message(&[5, 16]),
        Err(WireError::UnknownTag {
            what: "message kind",
            tag: 16
        })
    );
    // A quiesce with a purpose no version defines.
    let mut bad = Vec::new();
    encode_body(
        Seq(0),
        Seq(0),
        &MsgBody::Quiesce {
            purpose: QuiescePurpose::Move,
        },
        &mut bad,
    )
    .unwrap();
    *bad.last_mut().unwrap() = 7;
    assert_eq!(
        decode_typed(&bad),
        Err(WireError::UnknownTag {
            what: "quiesce purpose",
            tag: 7
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
        MsgBody::parse(MsgKind::AdvertDone, &[0; 9]),
        Err(WireError::TrailingBytes { .. })
    ));
    assert!(matches!(
        MsgBody::parse(MsgKind::Fetch, &[0; 15]),
        Err(WireError::Truncated { .. })
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
