//! Feeds arbitrary bytes to the block service's decoders
//! (`relink_block::wire`): `Command::decode`, `Reply::decode`, `peek_tag`.
//!
//! Beyond "never panics", checks that decoding is canonical (whatever
//! decodes re-encodes to the same bytes) and that a decoded message's tag
//! is the one `peek_tag` reads.

use relink_block::wire::{peek_tag, Command, Reply, COMMAND_LEN};

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    if let Ok(c) = Command::decode(data) {
        assert_eq!(data.len(), COMMAND_LEN);
        assert_eq!(&c.encode()[..], data, "Command::decode is not canonical");
        assert_eq!(peek_tag(data), Some(c.tag));
    }
    if let Ok(r) = Reply::decode(data) {
        assert_eq!(r.encode(), data, "Reply::decode is not canonical");
        assert_eq!(peek_tag(data), Some(r.tag));
    }
    let _ = peek_tag(data);
}
