//! Feeds arbitrary bytes to relink-nbd's sans-IO parsers: the client flags,
//! an option (header, then its data through `parse_option` and the
//! `Negotiator`), and a transmission request header through `check`.
//!
//! Beyond "never panics", checks that a parsed header re-encodes to the same
//! bytes, that every option except `NBD_OPT_EXPORT_NAME` gets a whole number
//! of well-formed replies, and that a checked command lies inside the export.

use relink_nbd::consts::*;
use relink_nbd::handshake::{
    parse_client_flags, parse_option, ClientFlags, Negotiator, OptionHeader, OPTION_HEADER_LEN,
};
use relink_nbd::reply::OptionReply;
use relink_nbd::request::{check, Command, RequestHeader, REQUEST_HEADER_LEN};
use relink_nbd::{BlockSizes, ExportFlags, ExportInfo};

const SIZE: u64 = 1 << 30;
const MAX: u32 = 32 << 20;

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    let Some((&selector, data)) = data.split_first() else {
        return;
    };
    let _ = parse_client_flags(data);
    let exports = vec![ExportInfo {
        name: "disk".into(),
        description: "fuzz".into(),
        size: SIZE,
        flags: if selector & 1 == 0 {
            ExportFlags::read_write()
        } else {
            ExportFlags::read_only()
        }
        .with_block_status(selector & 4 == 0),
        block_sizes: if selector & 2 == 0 {
            BlockSizes::default()
        } else {
            BlockSizes::new(512, 4096, 128 * 1024)
        },
    }];

    if let Ok(h) = OptionHeader::parse(data) {
        assert_eq!(&h.encode()[..], &data[..OPTION_HEADER_LEN]);
        let body = &data[OPTION_HEADER_LEN..];
        let _ = parse_option(h.option, body);
        let n = Negotiator::new(exports.clone(), MAX, ClientFlags::default());
        let out = n.handle(h, body, selector & 8 != 0);
        if h.option != NBD_OPT_EXPORT_NAME {
            let mut rest = &out.reply[..];
            while !rest.is_empty() {
                let (r, used) = OptionReply::parse(rest).expect("well-formed reply");
                assert_eq!(r.option, h.option);
                rest = &rest[used..];
            }
        }
    }
    // the same bytes as option data of each option kind
    let _ = parse_option(u32::from(selector >> 1), data);

    if let Ok(h) = RequestHeader::parse(data) {
        assert_eq!(&h.encode()[..], &data[..REQUEST_HEADER_LEN]);
        match check(&h, &exports[0], MAX, selector & 16 != 0) {
            Ok(Command::Read { offset, len }) | Ok(Command::Write { offset, len, .. }) => {
                let b = exports[0].block_sizes.effective(MAX);
                assert!(len <= b.maximum && offset + u64::from(len) <= SIZE);
                assert!(offset % u64::from(b.minimum) == 0 && len % b.minimum == 0);
            }
            Ok(Command::BlockStatus { offset, len, .. }) => {
                assert!(selector & 16 != 0 && selector & 4 == 0 && len > 0);
                assert!(offset + u64::from(len) <= SIZE);
            }
            Ok(Command::Trim { offset, len, .. })
            | Ok(Command::WriteZeroes { offset, len, .. }) => {
                let min = exports[0].block_sizes.minimum;
                assert!(offset + u64::from(len) <= SIZE);
                assert!(offset % u64::from(min) == 0 && len % min == 0);
            }
            _ => {}
        }
    }
}
