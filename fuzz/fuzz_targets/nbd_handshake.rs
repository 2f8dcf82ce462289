//! Feeds an arbitrary byte stream to relink-nbd's handshake as a client
//! would send it: client flags, then options (header and data) one after
//! another through the `Negotiator`, until one enters transmission or
//! closes, or the bytes run out.
//!
//! Beyond "never panics", checks that every reply but the one to
//! `NBD_OPT_EXPORT_NAME` is a whole number of well-formed option replies
//! for the option asked, that transmission only starts on an export that
//! exists, and that a `NBD_OPT_GO` entering transmission on an export with
//! a minimum block size asked for `NBD_INFO_BLOCK_SIZE`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use relink_nbd::consts::*;
use relink_nbd::handshake::{
    parse_client_flags, parse_option, Negotiator, Next, OptionHeader, OptionRequest,
    CLIENT_FLAGS_LEN, MAX_OPTION_LEN, OPTION_HEADER_LEN,
};
use relink_nbd::reply::OptionReply;
use relink_nbd::{BlockSizes, ExportFlags, ExportInfo};

const MAX: u32 = 32 << 20;

fn exports() -> Vec<ExportInfo> {
    vec![
        ExportInfo {
            name: "disk".into(),
            description: "plain".into(),
            size: 1 << 30,
            flags: ExportFlags::read_write(),
            block_sizes: BlockSizes::default(),
        },
        ExportInfo {
            name: "sect".into(),
            description: String::new(),
            size: 1 << 20,
            flags: ExportFlags::read_only(),
            block_sizes: BlockSizes::new(512, 4096, 128 * 1024),
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(client) = parse_client_flags(data) else {
        return;
    };
    let exports = exports();
    let n = Negotiator::new(exports.clone(), MAX, client);
    let mut rest = &data[CLIENT_FLAGS_LEN..];
    while rest.len() >= OPTION_HEADER_LEN {
        let Ok(h) = OptionHeader::parse(rest) else {
            return;
        };
        rest = &rest[OPTION_HEADER_LEN..];
        if h.len > MAX_OPTION_LEN || h.len as usize > rest.len() {
            return;
        }
        let (body, after) = rest.split_at(h.len as usize);
        rest = after;
        let out = n.handle(h, body);
        if h.option != NBD_OPT_EXPORT_NAME {
            let mut r = &out.reply[..];
            while !r.is_empty() {
                let (reply, used) = OptionReply::parse(r).expect("well-formed reply");
                assert_eq!(reply.option, h.option);
                r = &r[used..];
            }
        }
        match out.next {
            Next::Continue => {}
            Next::Transmit(i) => {
                assert!(i < exports.len());
                if h.option == NBD_OPT_GO && exports[i].block_sizes.minimum > 1 {
                    match parse_option(h.option, body) {
                        Ok(OptionRequest::Info { requests, .. }) => {
                            assert!(requests.contains(&NBD_INFO_BLOCK_SIZE));
                        }
                        other => panic!("GO entered transmission from {other:?}"),
                    }
                }
                return;
            }
            _ => return,
        }
    }
});
