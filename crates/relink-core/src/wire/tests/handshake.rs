//! The handshake in CM private data: authenticators, golden bytes, the
//! CM's size limits, connect data, typed errors.

use super::*;

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
        0x05, // version
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
fn private_data_errors_are_typed() {
    assert_eq!(ConnectData::decode(&[]), Err(WireError::NoData));
    assert_eq!(AcceptData::decode(&[0; 196]), Err(WireError::NoData));
    assert_eq!(RejectData::decode(&[0; 148]), Err(WireError::NoData));
    assert_eq!(
        ConnectData::decode(&[1, 1]),
        Err(WireError::UnsupportedVersion { found: 1 })
    );
    assert_eq!(
        ConnectData::decode(&[VERSION, 0x11]),
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
        RejectData::decode(&[VERSION, 0x21, 7]),
        Err(WireError::UnknownTag {
            what: "refuse reason",
            tag: 7
        })
    );
    assert_eq!(
        RejectData::decode(&[VERSION, 0x21, 0]),
        Err(WireError::UnknownTag {
            what: "refuse reason",
            tag: 0
        })
    );
    assert_eq!(
        RejectData::decode(&[VERSION, 0x21]),
        Err(WireError::Truncated {
            what: "refuse reason",
            offset: 2,
            needed: 1,
            available: 0
        })
    );
    assert_eq!(
        RejectData::decode(&[VERSION, 0x21, 1, 0, 0, 9, 0]),
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
    assert_eq!(kinds, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    for p in [QuiescePurpose::Move, QuiescePurpose::Suspend] {
        assert_eq!(QuiescePurpose::from_code(p.code()), Some(p));
    }
    assert_eq!(QuiescePurpose::from_code(0), None);
    for k in MsgKind::ALL {
        assert_eq!(MsgKind::from_code(k.code()), Some(k));
    }
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

#[test]
fn a_standby_request_is_no_resume_and_round_trips() {
    let s = secret(3);
    let sb = Resume::sign_standby(&s, SessionId(0x1234), Epoch(9), Seq(5));
    let resume = Resume::sign(&s, SessionId(0x1234), Epoch(9), Seq(5));
    // Each authenticator holds only for its own kind of request.
    assert!(sb.verify_standby(&s) && !sb.verify(&s));
    assert!(resume.verify(&s) && !resume.verify_standby(&s));
    assert!(!sb.verify_standby(&secret(4)));
    let bytes = ConnectData::Standby(sb).to_vec();
    assert_eq!(bytes.len(), 38);
    assert_eq!(bytes[1], 0x03);
    assert_eq!(ConnectData::decode(&bytes), Ok(ConnectData::Standby(sb)));
    assert_eq!(
        ConnectData::decode(&ConnectData::Resume(resume).to_vec()),
        Ok(ConnectData::Resume(resume))
    );
}
