//! Tests of the codec: golden bytes, every structural error, the private
//! data and payload bounds, the frame reader, and round-trip properties over
//! arbitrary packets and chunkings.

use std::io;
use std::net::IpAddr;

use proptest::prelude::*;
use relink_fabric::{
    ConnParams, RejectReason, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA,
    MAX_REJECT_PRIVATE_DATA,
};

use super::*;
use crate::packet::{Body, CmMsg, NakCode, Packet, ReqOp, RespKind};
use crate::payload::{BufferPool, Payload};

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sample() -> Packet {
    Packet {
        src: v4("10.0.0.1"),
        dst: v4("10.0.0.2"),
        body: Body::Request {
            dst_qpn: 7,
            src_qpn: 9,
            psn: 0x0102_0304,
            op: ReqOp::Send {
                data: b"hi".to_vec().into(),
                imm: Some(0xaabb_ccdd),
                invalidate: None,
                solicited: true,
            },
        },
    }
}

#[test]
fn golden_bytes() {
    // Pins the format: a change here breaks mixed-version hosts.
    let bytes = encode_to_vec(&sample());
    let want: Vec<u8> = vec![
        0, 0, 0, 38, // body length
        1,  // version
        4, 10, 0, 0, 1, // src
        4, 10, 0, 0, 2, // dst
        4, // Request
        0, 0, 0, 7, 0, 0, 0, 9, 1, 2, 3, 4, // dst_qpn, src_qpn, psn
        1, // Send
        0, 0, 0, 2, b'h', b'i', // data
        1, 0xaa, 0xbb, 0xcc, 0xdd, // imm
        0,    // invalidate
        1,    // solicited
    ];
    assert_eq!(bytes, want);
    assert_eq!(decode(&bytes), Ok(sample()));
}

#[test]
fn encode_appends() {
    let mut out = vec![0xee];
    encode(&sample(), &mut out);
    encode(&sample(), &mut out);
    let one = encode_to_vec(&sample());
    assert_eq!(out.len(), 1 + 2 * one.len());
    assert_eq!(&out[1..1 + one.len()], &one[..]);
    assert_eq!(&out[1 + one.len()..], &one[..]);
}

#[test]
fn structural_errors() {
    let good = encode_to_vec(&sample());
    // Trailing bytes inside the frame.
    let mut t = good.clone();
    t.push(0);
    t[3] += 1;
    assert_eq!(decode(&t), Err(WireError::TrailingBytes { count: 1 }));
    // Header disagreeing with the slice.
    let mut t = good.clone();
    t.push(0);
    assert_eq!(
        decode(&t),
        Err(WireError::LengthMismatch {
            declared: 38,
            actual: 39
        })
    );
    // Unknown version and tags.
    let mut t = good.clone();
    t[4] = 2;
    assert_eq!(decode(&t), Err(WireError::Version(2)));
    let mut t = good.clone();
    t[5] = 5;
    assert_eq!(
        decode(&t),
        Err(WireError::UnknownTag {
            what: "source address",
            tag: 5
        })
    );
    let mut t = good.clone();
    t[15] = 9;
    assert!(matches!(
        decode(&t),
        Err(WireError::UnknownTag {
            what: "packet kind",
            ..
        })
    ));
    let mut t = good.clone();
    t[28] = 0;
    assert!(matches!(
        decode(&t),
        Err(WireError::UnknownTag {
            what: "request operation",
            ..
        })
    ));
    // A boolean that is not 0/1.
    let mut t = good.clone();
    *t.last_mut().unwrap() = 2;
    assert_eq!(
        decode(&t),
        Err(WireError::BadBool {
            what: "solicited",
            value: 2
        })
    );
    // A frame header over the maximum.
    let big = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes();
    assert!(matches!(decode(&big), Err(WireError::FrameTooLarge { .. })));
    assert!(matches!(
        decode(&[0, 0]),
        Err(WireError::Truncated {
            what: "frame header",
            ..
        })
    ));
    assert!(decode(&[]).is_err());
    assert!(matches!(
        decode(&[0, 0, 0, 0]),
        Err(WireError::Truncated {
            what: "version",
            ..
        })
    ));
}

fn cm_packet(m: CmMsg) -> Packet {
    Packet {
        src: v4("1.2.3.4"),
        dst: "fe80::1".parse().unwrap(),
        body: Body::Cm(m),
    }
}

#[test]
fn private_data_bounds() {
    let req = |n| {
        cm_packet(CmMsg::Req {
            conn_id: 1,
            src_port: 2,
            dst_port: 3,
            qpn: 4,
            params: ConnParams::default(),
            private_data: vec![7; n],
        })
    };
    let rep = |n| {
        cm_packet(CmMsg::Rep {
            conn_id: 1,
            qpn: 4,
            private_data: vec![7; n],
        })
    };
    let rej = |n| {
        cm_packet(CmMsg::Rej {
            conn_id: 1,
            reason: RejectReason::NoListener,
            private_data: vec![7; n],
        })
    };
    for (mk, max) in [
        (&req as &dyn Fn(usize) -> Packet, MAX_CONNECT_PRIVATE_DATA),
        (&rep, MAX_ACCEPT_PRIVATE_DATA),
        (&rej, MAX_REJECT_PRIVATE_DATA),
    ] {
        let ok = mk(max);
        assert_eq!(validate(&ok), Ok(()));
        assert_eq!(decode(&encode_to_vec(&ok)), Ok(ok));
        let too_long = mk(max + 1);
        let err = validate(&too_long).unwrap_err();
        assert!(
            matches!(err, WireError::TooLong { len, max: m, .. } if len == max + 1 && m == max)
        );
        assert_eq!(decode(&encode_to_vec(&too_long)), Err(err));
    }
}

#[test]
fn payload_bound_checked_before_allocating() {
    // A Send claiming a 4 GiB payload in a tiny frame.
    let mut t = encode_to_vec(&sample());
    t[29..33].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode(&t),
        Err(WireError::TooLong {
            what: "payload",
            ..
        })
    ));
    // Just within the bound but absent: truncated.
    t[29..33].copy_from_slice(&u32::try_from(MAX_PAYLOAD).unwrap().to_be_bytes());
    assert!(matches!(
        decode(&t),
        Err(WireError::Truncated {
            what: "payload",
            ..
        })
    ));
    let big = Packet {
        src: v4("10.0.0.1"),
        dst: v4("10.0.0.2"),
        body: Body::Response {
            dst_qpn: 1,
            src_qpn: 2,
            psn: 3,
            kind: RespKind::ReadData(vec![1; MAX_PAYLOAD].into()),
        },
    };
    let bytes = encode_to_vec(&big);
    assert!(bytes.len() - HEADER_LEN <= MAX_FRAME);
    assert_eq!(decode(&bytes), Ok(big));
}

#[test]
fn frame_reader_basics() {
    let a = sample();
    let b = cm_packet(CmMsg::Rtu { conn_id: 42 });
    let mut stream = encode_to_vec(&a);
    encode(&b, &mut stream);
    let mut r = FrameReader::new();
    assert_eq!(r.next_frame(), Ok(None));
    r.push(&stream[..3]);
    assert_eq!(r.next_packet(), Ok(None));
    r.push(&stream[3..20]);
    assert_eq!(r.next_packet(), Ok(None));
    r.push(&stream[20..]);
    assert_eq!(r.next_packet(), Ok(Some(a)));
    assert_eq!(r.next_packet(), Ok(Some(b)));
    assert_eq!(r.next_packet(), Ok(None));
    assert_eq!(r.buffered(), 0);

    // A delimited frame that does not decode fails alone.
    let mut bad = encode_to_vec(&sample());
    bad[4] = 99;
    r.push(&bad);
    r.push(&encode_to_vec(&sample()));
    assert_eq!(r.next_packet(), Err(WireError::Version(99)));
    assert_eq!(r.next_packet(), Ok(Some(sample())));
    assert!(!r.is_failed());
}

#[test]
fn frame_reader_rejects_oversized_header_early() {
    let mut r = FrameReader::with_max_frame(100);
    r.push(&101u32.to_be_bytes());
    let err = r.next_frame().unwrap_err();
    assert_eq!(err, WireError::FrameTooLarge { len: 101, max: 100 });
    assert!(r.is_failed());
    r.push(&[0; 1000]);
    assert_eq!(r.buffered(), 0, "a failed reader buffers nothing");
    assert_eq!(r.next_frame(), Err(err));
    let mut r = FrameReader::new();
    r.push(&u32::MAX.to_be_bytes());
    assert!(matches!(
        r.next_frame(),
        Err(WireError::FrameTooLarge { .. })
    ));
}

#[test]
fn frame_reader_reads_from_io() {
    let mut stream = Vec::new();
    for i in 0..1000u64 {
        encode(&cm_packet(CmMsg::Rtu { conn_id: i }), &mut stream);
    }
    let mut src = io::Cursor::new(stream);
    let mut r = FrameReader::new();
    let mut got = Vec::new();
    loop {
        let n = r.read_from(&mut src).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            got.push(p.body);
        }
        if n == 0 {
            break;
        }
    }
    assert_eq!(got.len(), 1000);
    assert_eq!(got[999], Body::Cm(CmMsg::Rtu { conn_id: 999 }));
    assert_eq!(r.buffered(), 0);
}

// ------------------------------------------------------------ properties

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=max)
}

fn params() -> impl Strategy<Value = ConnParams> {
    any::<(u8, u8, u8)>().prop_map(|(r, n, t)| ConnParams {
        retry_count: r,
        rnr_retry_count: n,
        ack_timeout: t,
    })
}

fn reason() -> impl Strategy<Value = RejectReason> {
    prop_oneof![
        Just(RejectReason::Consumer),
        Just(RejectReason::NoListener),
        Just(RejectReason::NoResources),
    ]
}

fn cm() -> impl Strategy<Value = CmMsg> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            params(),
            bytes(MAX_CONNECT_PRIVATE_DATA)
        )
            .prop_map(|(conn_id, src_port, dst_port, qpn, params, private_data)| {
                CmMsg::Req {
                    conn_id,
                    src_port,
                    dst_port,
                    qpn,
                    params,
                    private_data,
                }
            }),
        (any::<u64>(), any::<u32>(), bytes(MAX_ACCEPT_PRIVATE_DATA)).prop_map(
            |(conn_id, qpn, private_data)| CmMsg::Rep {
                conn_id,
                qpn,
                private_data
            }
        ),
        any::<u64>().prop_map(|conn_id| CmMsg::Rtu { conn_id }),
        (any::<u64>(), reason(), bytes(MAX_REJECT_PRIVATE_DATA)).prop_map(
            |(conn_id, reason, private_data)| CmMsg::Rej {
                conn_id,
                reason,
                private_data
            }
        ),
        (any::<u64>(), any::<bool>()).prop_map(|(conn_id, from_initiator)| CmMsg::Dreq {
            conn_id,
            from_initiator
        }),
    ]
}

fn req() -> impl Strategy<Value = ReqOp> {
    prop_oneof![
        (
            bytes(300),
            any::<Option<u32>>(),
            any::<Option<u32>>(),
            any::<bool>()
        )
            .prop_map(|(data, imm, invalidate, solicited)| ReqOp::Send {
                data: data.into(),
                imm,
                invalidate,
                solicited
            }),
        (
            any::<u64>(),
            any::<u32>(),
            bytes(300),
            any::<Option<u32>>(),
            any::<bool>()
        )
            .prop_map(|(addr, rkey, data, imm, solicited)| ReqOp::Write {
                addr,
                rkey,
                data: data.into(),
                imm,
                solicited
            }),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, rkey, len)| ReqOp::Read {
            addr,
            rkey,
            len
        }),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(addr, rkey, add)| ReqOp::FetchAdd {
            addr,
            rkey,
            add
        }),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(addr, rkey, compare, swap)| ReqOp::CmpSwap {
                addr,
                rkey,
                compare,
                swap
            }
        ),
    ]
}

fn resp() -> impl Strategy<Value = RespKind> {
    prop_oneof![
        Just(RespKind::Ack),
        bytes(300).prop_map(|b| RespKind::ReadData(b.into())),
        any::<u64>().prop_map(RespKind::AtomicOrig),
        prop_oneof![
            Just(NakCode::Rnr),
            Just(NakCode::RemoteAccess),
            Just(NakCode::InvalidRequest),
            Just(NakCode::RemoteOperation),
        ]
        .prop_map(RespKind::Nak),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        any::<u64>().prop_map(|cookie| Body::ArpRequest { cookie }),
        any::<u64>().prop_map(|cookie| Body::ArpReply { cookie }),
        cm().prop_map(Body::Cm),
        (any::<u32>(), any::<u32>(), any::<u32>(), req()).prop_map(
            |(dst_qpn, src_qpn, psn, op)| Body::Request {
                dst_qpn,
                src_qpn,
                psn,
                op
            }
        ),
        (any::<u32>(), any::<u32>(), any::<u32>(), resp()).prop_map(
            |(dst_qpn, src_qpn, psn, kind)| Body::Response {
                dst_qpn,
                src_qpn,
                psn,
                kind
            }
        ),
    ]
}

fn link() -> impl Strategy<Value = Link> {
    prop_oneof![
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(pid, alive_addr, alive_gen)| {
            Link::Hello(Hello {
                pid,
                alive_addr,
                alive_gen,
            })
        }),
        Just(Link::DirectOk),
        any::<u64>().prop_map(|upto| Link::Release { upto }),
    ]
}

fn rdata() -> impl Strategy<Value = RemoteData> {
    (any::<u64>(), 0..=MAX_PAYLOAD as u32, any::<u64>()).prop_map(|(addr, len, lent)| RemoteData {
        addr,
        len,
        lent,
    })
}

/// Frames of every kind: a packet, a WRITE or READ response whose payload
/// stays in the sender, a link frame.
fn incoming() -> impl Strategy<Value = Incoming> {
    prop_oneof![
        packet().prop_map(Incoming::Packet),
        (packet(), rdata()).prop_map(|(mut p, r)| {
            let keeps_payload = matches!(
                p.body,
                Body::Request {
                    op: ReqOp::Write { .. },
                    ..
                } | Body::Response {
                    kind: RespKind::ReadData(_),
                    ..
                }
            );
            if keeps_payload {
                p.set_payload(Payload::empty());
                Incoming::Remote(p, r)
            } else {
                Incoming::Packet(p)
            }
        }),
        link().prop_map(Incoming::Link),
    ]
}

fn packet() -> impl Strategy<Value = Packet> {
    (ip(), ip(), body()).prop_map(|(src, dst, body)| Packet { src, dst, body })
}

proptest! {
    #[test]
    fn round_trip(p in packet()) {
        prop_assert_eq!(validate(&p), Ok(()));
        let bytes = encode_to_vec(&p);
        prop_assert_eq!(decode(&bytes), Ok(p));
    }

    #[test]
    fn round_trip_through_a_pool(ps in proptest::collection::vec(packet(), 1..8)) {
        // Recycled buffers full of stale bytes: none may show through.
        let mut pool = BufferPool::new();
        for len in [64, 128, 256, 512] {
            let mut p = pool.take(len);
            p.get_mut().unwrap().fill(0xAB);
            pool.recycle(p);
        }
        for p in ps {
            let Incoming::Packet(q) = decode_in(&encode_to_vec(&p), &mut pool).unwrap() else {
                panic!("not a packet");
            };
            prop_assert_eq!(&q, &p);
            if let Some(data) = q.payload().cloned() {
                drop(q);
                pool.recycle(data);
            }
        }
        let s = pool.stats();
        prop_assert_eq!(s.shared + s.dropped, 0);
    }

    #[test]
    fn frames_of_every_kind_round_trip(f in incoming()) {
        let bytes = encode_incoming_to_vec(&f);
        prop_assert_eq!(decode_frame(&bytes), Ok(f.clone()));
        // Only a packet with its payload is a packet.
        prop_assert_eq!(
            decode(&bytes).is_ok(),
            matches!(f, Incoming::Packet(_))
        );
        for cut in 0..bytes.len() {
            prop_assert!(decode_frame(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn every_truncation_is_an_error(p in packet()) {
        let bytes = encode_to_vec(&p);
        for cut in 0..bytes.len() {
            prop_assert!(decode(&bytes[..cut]).is_err(), "prefix of {} bytes decoded", cut);
            // Also with a header fixed up to match the shorter body.
            if cut >= HEADER_LEN {
                let mut t = bytes[..cut].to_vec();
                let len = u32::try_from(cut - HEADER_LEN).unwrap();
                t[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
                prop_assert!(decode(&t).is_err(), "fixed-up prefix of {} bytes decoded", cut);
            }
        }
    }

    #[test]
    fn mutations_never_panic(p in packet(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = encode_to_vec(&p);
        let i = at % bytes.len();
        bytes[i] = byte;
        if let Ok(q) = decode(&bytes) {
            // Whatever decodes re-encodes to the same bytes.
            prop_assert_eq!(encode_to_vec(&q), bytes);
        }
    }

    #[test]
    fn garbage_never_panics(bytes in bytes(200)) {
        let _ = decode(&bytes);
        let mut framed = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        let _ = decode(&framed);
        let mut r = FrameReader::new();
        r.push(&framed);
        r.push(&bytes);
        while let Ok(Some(_)) = r.next_frame() {}
    }

    #[test]
    fn reader_reassembles_any_split(ps in proptest::collection::vec(packet(), 1..6), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut stream = Vec::new();
        for p in &ps {
            encode(p, &mut stream);
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            r.push(&stream[w[0]..w[1]]);
            while let Some(p) = r.next_packet().unwrap() {
                got.push(p);
            }
        }
        prop_assert_eq!(got, ps);
        prop_assert_eq!(r.buffered(), 0);
    }
}
