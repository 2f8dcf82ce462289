//! Feeds an arbitrary script of options to relink-nbd's handshake as a client
//! would send them: client flags, then options (header and data) one after
//! another through the `Negotiator`, until one enters transmission or
//! closes, or the bytes run out.
//!
//! Beyond "never panics", checks that every reply but the one to
//! `NBD_OPT_EXPORT_NAME` is a whole number of well-formed option replies
//! for the option asked, that transmission only starts on an export that
//! exists, and that a `NBD_OPT_GO` entering transmission on an export with
//! a minimum block size asked for `NBD_INFO_BLOCK_SIZE`.

use relink_nbd::consts::*;
use relink_nbd::handshake::{
    parse_client_flags, parse_option, Negotiator, Next, OptionHeader, OptionRequest,
    CLIENT_FLAGS_LEN, MAX_OPTION_LEN,
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
            flags: ExportFlags::read_write().with_block_status(true),
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

/// The options the negotiator knows, and two it does not.
const OPTIONS: [u32; 10] = [
    NBD_OPT_EXPORT_NAME,
    NBD_OPT_ABORT,
    NBD_OPT_LIST,
    NBD_OPT_INFO,
    NBD_OPT_GO,
    NBD_OPT_STARTTLS,
    NBD_OPT_STRUCTURED_REPLY,
    NBD_OPT_LIST_META_CONTEXT,
    NBD_OPT_SET_META_CONTEXT,
    0x4242,
];

// The input is not wire bytes but a script of options, so that the fuzzer
// spends its time in option data rather than in finding `IHAVEOPT`: a
// byte for the client flags (its top bit: take the next 4 bytes as raw
// flags instead), then per option a selector byte (an index into
// `OPTIONS`), a 16-bit data length (clipped to what is left) and the data.
/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let flags = if first & 0x80 != 0 {
        let Some(raw) = rest.get(..CLIENT_FLAGS_LEN) else {
            return;
        };
        rest = &rest[CLIENT_FLAGS_LEN..];
        raw.to_vec()
    } else {
        u32::from(first & 3).to_be_bytes().to_vec()
    };
    let Ok(client) = parse_client_flags(&flags) else {
        return;
    };
    let exports = exports();
    let n = Negotiator::new(exports.clone(), MAX, client);
    let mut structured = false;
    while rest.len() >= 3 {
        let option = OPTIONS[usize::from(rest[0]) % OPTIONS.len()];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let (body, after) = rest[3..].split_at(len);
        rest = after;
        let h = OptionHeader {
            option,
            len: len as u32,
        };
        assert!(h.len <= MAX_OPTION_LEN);
        assert_eq!(OptionHeader::parse(&h.encode()).expect("round trip"), h);
        let out = n.handle(h, body, structured);
        structured |= out.structured;
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
}
