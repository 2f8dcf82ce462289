//! The sans-IO parsers: round trips, every truncation an error, and the
//! request check's guarantees (what reaches a backend is in range).

use proptest::prelude::*;
use relink_nbd::consts::*;
use relink_nbd::handshake::{
    parse_client_flags, parse_option, ClientFlags, Negotiator, Next, OptionHeader, OptionRequest,
    OPTION_HEADER_LEN,
};
use relink_nbd::reply::{push_option_reply, OptionReply, SimpleReply, SIMPLE_REPLY_LEN};
use relink_nbd::request::{check, Command, RequestHeader, REQUEST_HEADER_LEN};
use relink_nbd::{ExportFlags, ExportInfo, ProtocolError};

fn go_data(name: &[u8], infos: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

fn export(size: u64, flags: ExportFlags) -> ExportInfo {
    ExportInfo {
        name: "disk".into(),
        description: String::new(),
        size,
        flags,
        block_sizes: Default::default(),
    }
}

proptest! {
    #[test]
    fn request_header_round_trips_and_every_truncation_fails(
        flags: u16, kind: u16, cookie: u64, offset: u64, len: u32,
    ) {
        let h = RequestHeader { flags, kind, cookie, offset, len };
        let wire = h.encode();
        prop_assert_eq!(RequestHeader::parse(&wire).unwrap(), h);
        for cut in 0..REQUEST_HEADER_LEN {
            let truncated = matches!(
                RequestHeader::parse(&wire[..cut]),
                Err(ProtocolError::Truncated { .. })
            );
            prop_assert!(truncated);
        }
    }

    #[test]
    fn request_with_any_other_magic_is_refused(magic: u32, rest in proptest::collection::vec(any::<u8>(), 24)) {
        prop_assume!(magic != REQUEST_MAGIC);
        let mut wire = magic.to_be_bytes().to_vec();
        wire.extend_from_slice(&rest);
        let bad = matches!(RequestHeader::parse(&wire), Err(ProtocolError::BadMagic { .. }));
        prop_assert!(bad);
    }

    #[test]
    fn simple_reply_and_option_header_round_trip(error: u32, cookie: u64, option: u32, len: u32) {
        let r = SimpleReply { error, cookie };
        let wire = r.encode();
        prop_assert_eq!(SimpleReply::parse(&wire).unwrap(), r);
        for cut in 0..SIMPLE_REPLY_LEN {
            prop_assert!(SimpleReply::parse(&wire[..cut]).is_err());
        }
        let o = OptionHeader { option, len };
        let wire = o.encode();
        prop_assert_eq!(OptionHeader::parse(&wire).unwrap(), o);
        for cut in 0..OPTION_HEADER_LEN {
            prop_assert!(OptionHeader::parse(&wire[..cut]).is_err());
        }
    }

    #[test]
    fn option_reply_round_trips_and_truncations_fail(option: u32, ty: u32, data in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut wire = Vec::new();
        push_option_reply(&mut wire, option, ty, &data);
        let (r, used) = OptionReply::parse(&wire).unwrap();
        prop_assert_eq!(used, wire.len());
        prop_assert_eq!(r, OptionReply { option, reply_type: ty, data: data.clone() });
        for cut in 0..wire.len() {
            prop_assert!(OptionReply::parse(&wire[..cut]).is_err());
        }
    }

    #[test]
    fn go_and_info_round_trip_and_every_truncation_or_excess_is_invalid(
        name in "[a-z0-9/._-]{0,40}",
        infos in proptest::collection::vec(any::<u16>(), 0..8),
        go: bool,
    ) {
        let opt = if go { NBD_OPT_GO } else { NBD_OPT_INFO };
        let data = go_data(name.as_bytes(), &infos);
        prop_assert_eq!(
            parse_option(opt, &data).unwrap(),
            OptionRequest::Info { go, name: name.clone(), requests: infos.clone() }
        );
        for cut in 0..data.len() {
            prop_assert!(parse_option(opt, &data[..cut]).is_err(), "cut {}", cut);
        }
        let mut longer = data.clone();
        longer.push(0);
        prop_assert!(parse_option(opt, &longer).is_err());
    }

    #[test]
    fn negotiator_never_panics_and_answers_every_option_but_export_name(
        option in 0u32..16, data in proptest::collection::vec(any::<u8>(), 0..80),
        structured: bool, block_status: bool,
    ) {
        let n = Negotiator::new(
            vec![export(1 << 20, ExportFlags::read_write().with_block_status(block_status))],
            32 << 20,
            ClientFlags { fixed_newstyle: true, no_zeroes: true },
        );
        let out = n.handle(OptionHeader { option, len: data.len() as u32 }, &data, structured);
        if option == NBD_OPT_EXPORT_NAME {
            let ok = matches!(out.next, Next::Transmit(_) | Next::Close(_));
            prop_assert!(ok);
        } else {
            // a whole number of well-formed option replies, the last final
            let mut rest = &out.reply[..];
            let mut last = None;
            while !rest.is_empty() {
                let (r, used) = OptionReply::parse(rest).unwrap();
                prop_assert_eq!(r.option, option);
                last = Some(r.reply_type);
                rest = &rest[used..];
            }
            let last = last.expect("at least one reply");
            prop_assert!(last == NBD_REP_ACK || last & NBD_REP_FLAG_ERROR != 0);
        }
    }

    #[test]
    fn checked_commands_stay_inside_the_export(
        flags in 0u16..64, kind in 0u16..10, offset: u64, len: u32,
        size in 0u64..(1 << 40), ro: bool, max in 1u32..(64 << 20), allocation: bool,
    ) {
        let f = if ro { ExportFlags::read_only() } else { ExportFlags::read_write() };
        let e = export(size, f.with_block_status(true));
        let h = RequestHeader { flags, kind, cookie: 1, offset, len };
        match check(&h, &e, max, allocation) {
            Ok(Command::Read { offset, len }) | Ok(Command::Write { offset, len, .. }) => {
                prop_assert!(len <= max);
                prop_assert!(offset + u64::from(len) <= size);
                prop_assert!(!(ro && kind == NBD_CMD_WRITE));
            }
            Ok(Command::Trim { offset, len, .. }) | Ok(Command::WriteZeroes { offset, len, .. }) => {
                prop_assert!(!ro);
                prop_assert!(offset + u64::from(len) <= size);
            }
            Ok(Command::BlockStatus { offset, len, .. }) => {
                prop_assert!(allocation && len > 0);
                prop_assert!(offset + u64::from(len) <= size);
            }
            Ok(Command::Flush) => prop_assert_eq!(kind, NBD_CMD_FLUSH),
            Ok(Command::Disconnect) => prop_assert_eq!(kind, NBD_CMD_DISC),
            Ok(_) => {}
            Err(rej) => {
                let errno = rej.nbd_errno();
                prop_assert!([NBD_EINVAL, NBD_ENOSPC, NBD_EPERM].contains(&errno));
                if errno == NBD_EPERM {
                    prop_assert!(ro);
                }
            }
        }
    }
}

#[test]
fn client_flags_accept_the_known_bits_only() {
    assert_eq!(
        parse_client_flags(&3u32.to_be_bytes()).unwrap(),
        ClientFlags {
            fixed_newstyle: true,
            no_zeroes: true
        }
    );
    assert!(matches!(
        parse_client_flags(&4u32.to_be_bytes()),
        Err(ProtocolError::UnknownClientFlags(4))
    ));
    for cut in 0..4 {
        assert!(parse_client_flags(&[0u8; 4][..cut]).is_err());
    }
}

#[test]
fn names_must_be_nbd_strings() {
    assert!(parse_option(NBD_OPT_GO, &go_data(b"a\0b", &[])).is_err());
    assert!(parse_option(NBD_OPT_GO, &go_data(&[0xff, 0xfe], &[])).is_err());
    assert!(parse_option(NBD_OPT_GO, &go_data(&[b'a'; 4097], &[])).is_err());
    assert!(parse_option(NBD_OPT_EXPORT_NAME, &[b'a'; 4097]).is_err());
    assert_eq!(
        parse_option(NBD_OPT_EXPORT_NAME, b"disk").unwrap(),
        OptionRequest::ExportName("disk".into())
    );
}

#[test]
fn export_flags_map_to_transmission_flags() {
    let rw = ExportFlags::read_write().transmission_flags();
    assert_eq!(
        rw,
        NBD_FLAG_HAS_FLAGS
            | NBD_FLAG_SEND_FLUSH
            | NBD_FLAG_SEND_FUA
            | NBD_FLAG_SEND_TRIM
            | NBD_FLAG_SEND_WRITE_ZEROES
    );
    let ro = ExportFlags::read_only()
        .with_trim(true)
        .with_fua(true)
        .transmission_flags();
    assert_eq!(
        ro,
        NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH
    );
    assert_ne!(
        ExportFlags::read_write()
            .with_multi_conn(true)
            .transmission_flags()
            & NBD_FLAG_CAN_MULTI_CONN,
        0
    );
}

#[test]
fn empty_name_selects_the_first_export_and_export_name_honours_no_zeroes() {
    let exports = vec![
        export(4096, ExportFlags::read_write()),
        ExportInfo {
            name: "second".into(),
            ..export(8192, ExportFlags::read_only())
        },
    ];
    let n = Negotiator::new(exports.clone(), 1 << 20, ClientFlags::default());
    assert_eq!(n.lookup(""), Some(0));
    assert_eq!(n.lookup("second"), Some(1));
    assert_eq!(n.lookup("third"), None);
    let out = n.handle(
        OptionHeader {
            option: NBD_OPT_EXPORT_NAME,
            len: 6,
        },
        b"second",
        false,
    );
    assert_eq!(out.next, Next::Transmit(1));
    assert_eq!(out.reply.len(), 8 + 2 + 124);
    let n = Negotiator::new(
        exports,
        1 << 20,
        ClientFlags {
            fixed_newstyle: true,
            no_zeroes: true,
        },
    );
    let out = n.handle(
        OptionHeader {
            option: NBD_OPT_EXPORT_NAME,
            len: 0,
        },
        b"",
        false,
    );
    assert_eq!(out.next, Next::Transmit(0));
    assert_eq!(out.reply.len(), 10);
}

proptest! {
    #[test]
    fn meta_context_options_round_trip_and_every_truncation_or_excess_is_invalid(
        export in "[a-z0-9]{0,20}",
        queries in proptest::collection::vec("[a-z:]{0,20}", 0..4),
        set: bool,
    ) {
        let opt = if set { NBD_OPT_SET_META_CONTEXT } else { NBD_OPT_LIST_META_CONTEXT };
        let mut data = (export.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in &queries {
            data.extend_from_slice(&(q.len() as u32).to_be_bytes());
            data.extend_from_slice(q.as_bytes());
        }
        prop_assert_eq!(
            parse_option(opt, &data).unwrap(),
            OptionRequest::MetaContext { set, export: export.clone(), queries: queries.clone() }
        );
        for cut in 0..data.len() {
            prop_assert!(parse_option(opt, &data[..cut]).is_err(), "cut {}", cut);
        }
        let mut longer = data.clone();
        longer.push(0);
        prop_assert!(parse_option(opt, &longer).is_err());
    }
}

/// Block status descriptors come in whole blocks of the export's minimum
/// size: a block the extents split gets the state its pieces share, a last
/// block they do not reach is data, neighbours of one state merge.
#[test]
fn block_status_descriptors_are_whole_blocks() {
    use relink_nbd::reply::{block_status_reply, STRUCTURED_REPLY_LEN};
    use relink_nbd::Extent;
    let e = |len, hole| Extent {
        len,
        hole,
        zero: hole,
    };
    let extents = [e(300, false), e(300, true), e(1000, true)];
    let reply = block_status_reply(7, BASE_ALLOCATION_ID, 2048, 512, false, &extents)
        .expect("extents start the range");
    let descriptors: Vec<(u32, u32)> = reply[STRUCTURED_REPLY_LEN + 4..]
        .chunks_exact(8)
        .map(|c| {
            (
                u32::from_be_bytes(c[..4].try_into().unwrap()),
                u32::from_be_bytes(c[4..].try_into().unwrap()),
            )
        })
        .collect();
    let hole = NBD_STATE_HOLE | NBD_STATE_ZERO;
    assert_eq!(descriptors, [(512, 0), (1024, hole), (512, 0)]);
    // One block only for NBD_CMD_FLAG_REQ_ONE; no bytes cut.
    let one = block_status_reply(7, BASE_ALLOCATION_ID, 2048, 512, true, &extents).unwrap();
    assert_eq!(one.len(), STRUCTURED_REPLY_LEN + 4 + 8);
    assert_eq!(&one[STRUCTURED_REPLY_LEN + 4..], [0, 0, 2, 0, 0, 0, 0, 0]);
    // Without a minimum, the extents as they are.
    let bytes = block_status_reply(7, BASE_ALLOCATION_ID, 2048, 1, false, &extents).unwrap();
    assert_eq!(bytes.len(), STRUCTURED_REPLY_LEN + 4 + 2 * 8);
    assert!(block_status_reply(7, BASE_ALLOCATION_ID, 2048, 512, false, &[e(0, true)]).is_none());
}
